#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Maps a rendered kustomization onto what `podman kube play` (podman 4.3,
Debian 12) can run, and says what it changed.

Usage: kube_to_podman.py RENDERED.yaml OUT_DIR --subnet 10.90.0 \
           [--image FROM=TO]... [--secret NAME=DIR]...

Reads the objects of RENDERED.yaml (the output of `kubectl kustomize`) and
writes into OUT_DIR:
  pods/NN-NAME.yaml   one Pod per Deployment replica, with the ConfigMaps it
                      mounts, in start order (Redis, central replicas, the
                      rest), ready for `podman kube play --ip ADDRESS`;
  secrets/NAME/KEY    each Secret's keys as files, mounted in place of the
                      Secret volume;
  plan.json           per pod: its address, its containers and their
                      probes (which scripts/kube-play runs itself);
  mapping.txt         every Kubernetes feature podman does not have, and
                      what stands in for it. Nothing is dropped without a
                      line here.

Kubernetes gives each pod an address and each Service a name. Here each pod
gets a fixed address on a podman bridge network (SUBNET.10 upwards), and
each Service's name is written into every pod's /etc/hosts (hostAliases)
with the addresses of the pods it selects. A feature this script does not
know makes it fail, naming the feature, so that a new manifest field is
mapped or listed, never lost.
"""

import argparse
import base64
import copy
import json
import os
import re
import sys

import yaml

FIRST_HOST = 10


def fail(message):
    sys.stderr.write("kube_to_podman: %s\n" % message)
    sys.exit(1)


class Mapper:
    def __init__(self, objects, subnet, images, secret_dirs=None):
        self.secret_dirs = secret_dirs or {}
        self.objects = objects
        self.subnet = subnet
        self.images = images
        self.notes = []
        self.ports = {}
        self.by_kind = {}
        for obj in objects:
            self.by_kind.setdefault(obj["kind"], {})[obj["metadata"]["name"]] = obj

    def note(self, text):
        if text not in self.notes:
            self.notes.append(text)

    def kind(self, kind):
        return self.by_kind.get(kind, {})

    # Known kinds that are not run: what stands in for each.
    def check_kinds(self):
        allowed = {"Deployment", "Service", "ConfigMap", "Secret",
                   "PodDisruptionBudget", "HorizontalPodAutoscaler"}
        for kind, objs in self.by_kind.items():
            if kind not in allowed:
                fail("kind %s (%s) has no podman mapping" % (kind, ", ".join(objs)))
        for name in self.kind("PodDisruptionBudget"):
            self.note("PodDisruptionBudget %s: not applied (no voluntary "
                      "evictions happen here)" % name)
        for name, hpa in self.kind("HorizontalPodAutoscaler").items():
            target = hpa["spec"]["scaleTargetRef"]["name"]
            self.note("HorizontalPodAutoscaler %s: Deployment %s runs its "
                      "minReplicas (%d) pods; nothing scales"
                      % (name, target, hpa["spec"].get("minReplicas", 1)))

    def replicas(self, name, dep):
        for hpa in self.kind("HorizontalPodAutoscaler").values():
            if hpa["spec"]["scaleTargetRef"]["name"] == name:
                return hpa["spec"].get("minReplicas", 1)
        return dep["spec"].get("replicas", 1)

    def plan_pods(self):
        """Names and addresses of every pod, in start order."""
        def order(item):
            name, dep = item
            component = dep["spec"]["template"]["metadata"]["labels"].get(
                "app.kubernetes.io/component", "")
            return ({"redis": 0, "server": 1}.get(component, 2), name)

        pods = []
        host = FIRST_HOST
        for name, dep in sorted(self.kind("Deployment").items(), key=order):
            for i in range(self.replicas(name, dep)):
                pods.append({"name": "%s-%d" % (name, i), "deployment": name,
                             "address": "%s.%d" % (self.subnet, host),
                             "labels": dep["spec"]["template"]["metadata"]["labels"]})
                host += 1
        if host > 250:
            fail("more pods than addresses in %s.0/24" % self.subnet)
        self.note("Deployments: each replica is a Pod named DEPLOYMENT-N with "
                  "a fixed address on the network %s.0/24 (Kubernetes would "
                  "name and address them itself)" % self.subnet)
        return pods

    def host_aliases(self, pods):
        aliases = {}
        for name, svc in sorted(self.kind("Service").items()):
            selector = svc["spec"].get("selector", {})
            selected = [p for p in pods
                        if all(p["labels"].get(k) == v for k, v in selector.items())]
            if not selected:
                fail("Service %s selects no pod" % name)
            for port in svc["spec"]["ports"]:
                target = port.get("targetPort", port["port"])
                number = self.container_port(selected[0]["deployment"], target)
                if number != port["port"]:
                    self.note("Service %s: port %d is not forwarded; its pods "
                              "are reached on targetPort %d" % (name, port["port"], number))
            for p in selected:
                aliases.setdefault(p["address"], []).append(name)
            headless = svc["spec"].get("clusterIP") == "None"
            self.note("Service %s (%s): its name is in every pod's /etc/hosts "
                      "with the address of each pod it selects (%d)%s"
                      % (name, "headless" if headless else svc["spec"].get("type", "ClusterIP"),
                         len(selected), "" if headless else "; no virtual IP, the client picks"))
        return [{"ip": ip, "hostnames": names} for ip, names in sorted(aliases.items())]

    def container_port(self, deployment, target):
        if isinstance(target, int):
            return target
        spec = self.kind("Deployment")[deployment]["spec"]["template"]["spec"]
        for c in spec.get("containers", []) + spec.get("initContainers", []):
            for port in c.get("ports", []):
                if port.get("name") == target:
                    return port["containerPort"]
        fail("Deployment %s has no port named %s" % (deployment, target))

    def map_probe(self, container, probe):
        probe = copy.deepcopy(probe)
        if "grpc" in probe:
            port = probe.pop("grpc")["port"]
            probe["exec"] = {"command": [
                "/usr/local/bin/sluice-call", "--target", "127.0.0.1:%d" % port,
                "--deadline", "%ds" % probe.get("timeoutSeconds", 1), "health"]}
            self.note("%s probes (gRPC): run as `sluice-call --target "
                      "127.0.0.1:PORT health` inside the container (podman "
                      "has no gRPC probe)" % container)
        return probe

    def map_container(self, pod_name, c):
        c = copy.deepcopy(c)
        image = c.get("image", "")
        if image in self.images:
            c["image"] = self.images[image]
        else:
            fail("container %s: image %s has no local image (--image %s=...)"
                 % (c["name"], image, image))
        c["imagePullPolicy"] = "Never"
        env = []
        values = {}
        for e in c.get("env", []):
            e = copy.deepcopy(e)
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref is not None:
                e = {"name": e["name"], "value": self.secret_value(ref["name"], ref["key"])}
                self.note("env from a Secret (secretKeyRef): written as its value "
                          "(podman 4.3 decodes a secretKeyRef but not a Secret "
                          "volume, so one stored Secret cannot serve both)")
            elif e.get("valueFrom", {}).get("fieldRef"):
                path = e["valueFrom"]["fieldRef"]["fieldPath"]
                if path != "metadata.name":
                    fail("env %s: fieldRef %s has no mapping" % (e["name"], path))
                values[e["name"]] = pod_name
            elif "valueFrom" in e:
                fail("env %s: valueFrom %s has no mapping" % (e["name"], e["valueFrom"]))
            if "value" in e:
                values[e["name"]] = e["value"]
            env.append(e)
        if env:
            c["env"] = env
        # $(VAR) in command and args, as the kubelet expands them.
        for field in ("command", "args"):
            if field in c:
                expanded = [re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                                   lambda m: values.get(m.group(1), m.group(0)), a)
                            for a in c[field]]
                if expanded != c[field]:
                    self.note("container %s: $(VAR) in %s expanded here (podman "
                              "4.3 passes it through)" % (c["name"], field))
                c[field] = expanded
        for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
            if kind in c:
                c[kind] = self.map_probe(c["name"], c[kind])
        if c.get("ports"):
            self.ports[(pod_name, c["name"])] = {
                p["name"]: p["containerPort"] for p in c["ports"] if "name" in p}
            c.pop("ports")
            self.note("containerPort: not published; each pod is reached on its "
                      "own address (podman 4.3 binds a containerPort on the "
                      "host, where two replicas collide)")
        if "lifecycle" in c:
            c.pop("lifecycle")
            self.note("container %s: lifecycle hooks (preStop) not run; podman "
                      "sends SIGTERM at once" % c["name"])
        return c

    def secret(self, name):
        """The Secret NAME: rendered, or made from --secret NAME=DIR (what
        `kubectl create secret generic NAME --from-file=DIR` would make)."""
        secret = self.kind("Secret").get(name)
        if secret is not None:
            return secret
        directory = self.secret_dirs.get(name)
        if directory is None:
            fail("Secret %s is not in the overlay: create its files in a "
                 "directory and pass --secret %s=DIR" % (name, name))
        keys = {}
        for key in sorted(os.listdir(directory)):
            path = os.path.join(directory, key)
            if os.path.isfile(path):
                with open(path) as f:
                    keys[key] = f.read()
        self.note("Secret %s: from the files of %s" % (name, directory))
        return {"stringData": keys}

    def secret_value(self, name, key):
        secret = self.secret(name)
        if key in secret.get("stringData", {}):
            return secret["stringData"][key]
        if key in secret.get("data", {}):
            return base64.b64decode(secret["data"][key]).decode()
        fail("Secret %s has no key %s" % (name, key))

    def write_secret(self, name, out_dir, mode, group):
        secret = self.secret(name)
        directory = os.path.join(out_dir, "secrets", name)
        os.makedirs(directory, exist_ok=True)
        keys = dict(secret.get("stringData", {}))
        for k, v in secret.get("data", {}).items():
            keys[k] = base64.b64decode(v).decode()
        for k, v in keys.items():
            path = os.path.join(directory, k)
            with open(path, "w") as f:
                f.write(v)
            os.chmod(path, mode)
            if group is not None and os.geteuid() == 0:
                os.chown(path, 0, group)
        os.chmod(directory, 0o755)
        return directory

    def pod_object(self, pod, aliases, out_dir):
        dep = self.kind("Deployment")[pod["deployment"]]
        template = copy.deepcopy(dep["spec"]["template"])
        spec = template["spec"]
        security = spec.get("securityContext", {})
        fs_group = security.get("fsGroup")

        containers = []
        for c in spec.pop("initContainers", []):
            if c.get("restartPolicy") == "Always":
                c.pop("restartPolicy")
                containers.append(c)
                self.note("native sidecar %s (an initContainer with "
                          "restartPolicy: Always): a regular container, started "
                          "first; the pod's containers start without waiting "
                          "for its startupProbe (podman 4.3 has no native "
                          "sidecars)" % c["name"])
            else:
                fail("init container %s: only native sidecars are mapped" % c["name"])
        containers.extend(spec["containers"])
        spec["containers"] = [self.map_container(pod["name"], c)
                              for c in containers]

        volumes = []
        for v in spec.get("volumes", []):
            if "secret" in v:
                mode = v["secret"].get("defaultMode", 0o644)
                path = self.write_secret(v["secret"]["secretName"], out_dir, mode, fs_group)
                volumes.append({"name": v["name"],
                                "hostPath": {"path": path, "type": "Directory"}})
                self.note("Secret volume %s: a host directory holding the Secret's "
                          "keys, mode %04o%s (podman 4.3 writes a Secret "
                          "volume's data still base64-encoded)"
                          % (v["secret"]["secretName"], mode,
                             ", group %d (fsGroup)" % fs_group if fs_group is not None else ""))
            elif "configMap" in v:
                # podman 4.3 dereferences `optional` without checking it.
                v = copy.deepcopy(v)
                v["configMap"].setdefault("optional", False)
                volumes.append(v)
            elif "emptyDir" in v:
                path = os.path.join(out_dir, "volumes", pod["name"], v["name"])
                os.makedirs(path)
                # As the kubelet makes an emptyDir: world-writable, or, with
                # an fsGroup, that group's and setgid.
                if fs_group is not None and os.geteuid() == 0:
                    os.chown(path, 0, fs_group)
                os.chmod(path, 0o2777 if fs_group is not None else 0o777)
                volumes.append({"name": v["name"],
                                "hostPath": {"path": path, "type": "Directory"}})
                self.note("emptyDir volumes: a host directory per pod, mode 0777 "
                          "(2777 and group fsGroup with an fsGroup), as the "
                          "kubelet makes them; sizeLimit and medium: Memory are "
                          "not applied (podman 4.3 makes an emptyDir a named "
                          "volume that every pod of the Deployment shares, "
                          "owned by whichever container mounts it first)")
            else:
                fail("volume %s: %s has no mapping" % (v["name"], list(v)))
        spec["volumes"] = volumes

        if spec.pop("topologySpreadConstraints", None) is not None:
            self.note("topologySpreadConstraints: dropped (one host)")
        if "terminationGracePeriodSeconds" in spec:
            self.note("terminationGracePeriodSeconds: `podman pod stop -t` "
                      "of scripts/kube-play uses the pod's value")
        if fs_group is not None:
            self.note("securityContext.fsGroup: applied by this script to the "
                      "Secret files and emptyDir directories it makes")
        spec["hostAliases"] = aliases
        spec["hostname"] = pod["name"]
        spec["restartPolicy"] = "Always"
        template["metadata"]["name"] = pod["name"]
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": template["metadata"], "spec": spec}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("rendered")
    parser.add_argument("out_dir")
    parser.add_argument("--subnet", required=True)
    parser.add_argument("--image", action="append", default=[])
    parser.add_argument("--secret", action="append", default=[],
                        help="NAME=DIR: a Secret the overlay expects to exist")
    args = parser.parse_args()
    secret_dirs = {}
    for item in args.secret:
        name, _, directory = item.partition("=")
        if not os.path.isdir(directory):
            fail("--secret %s: %s is not a directory" % (item, directory))
        secret_dirs[name] = os.path.abspath(directory)

    images = {}
    for item in args.image:
        src, _, dst = item.partition("=")
        images[src] = dst
    with open(args.rendered) as f:
        objects = [o for o in yaml.safe_load_all(f) if o]

    m = Mapper(objects, args.subnet, images, secret_dirs)
    m.check_kinds()
    pods = m.plan_pods()
    aliases = m.host_aliases(pods)

    os.makedirs(os.path.join(args.out_dir, "pods"), exist_ok=True)
    plan = []
    for n, pod in enumerate(pods):
        obj = m.pod_object(pod, aliases, args.out_dir)
        docs = []
        for v in obj["spec"]["volumes"]:
            if "configMap" in v:
                docs.append(m.kind("ConfigMap")[v["configMap"]["name"]])
        docs.append(obj)
        path = os.path.join(args.out_dir, "pods", "%02d-%s.yaml" % (n, pod["name"]))
        with open(path, "w") as f:
            yaml.safe_dump_all(docs, f, sort_keys=False)
        dep = m.kind("Deployment")[pod["deployment"]]
        plan.append({
            "name": pod["name"], "deployment": pod["deployment"],
            "address": pod["address"], "file": path,
            "grace": dep["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30),
            "containers": [{"name": c["name"],
                            "probes": {k: c[k] for k in ("startupProbe", "readinessProbe",
                                                         "livenessProbe") if k in c},
                            "ports": m.ports.get((pod["name"], c["name"]), {})}
                           for c in obj["spec"]["containers"]],
        })
    m.note("startupProbe and readinessProbe: run by scripts/kube-play, which "
           "waits for each pod to pass them (podman 4.3 runs neither)")
    m.note("livenessProbe: a podman healthcheck, which podman schedules with "
           "systemd timers (none here); scripts/kube-play runs it once at start")
    with open(os.path.join(args.out_dir, "plan.json"), "w") as f:
        json.dump(plan, f, indent=1)
    with open(os.path.join(args.out_dir, "mapping.txt"), "w") as f:
        for note in m.notes:
            f.write("- %s\n" % note)


if __name__ == "__main__":
    main()
