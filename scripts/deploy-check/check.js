#!/usr/bin/env node
// SPDX-License-Identifier: Apache-2.0
// Checks the Kubernetes manifests under deploy/kubernetes. The schema checks
// are kubernetes-models' own (its compiled OpenAPI validators: required
// fields, types, enums, formats); this file adds only what that library does
// not do:
//   - unknown fields: kubernetes-models accepts them silently, so the same
//     validator is run over a proxy that records every key it reads, and a
//     key it never read is one the schema does not know (`tracking` below);
//   - which files to check: the resources and patches each kustomization
//     names, and a YAML file no kustomization names is an error;
//   - cross-object checks on kustomize's output (selectors, ports, mounts).
// Kustomization files themselves are kustomize's format, not an API object:
// `kubectl kustomize` (scripts/lint-deploy, step 4) rejects their unknown
// fields, so they are only read here for the files they name.
//
// Usage:
//   node check.js --tree DIR            every kustomization under DIR, and
//                                       every file each one names
//   node check.js [--partial] FILE...   the given files ("-" = stdin)
//   node check.js --rendered FILE...    kustomize output: also cross-checks
//
//   Every YAML document in each file is checked on its own against the
//   kubernetes-models class for its apiVersion/kind. With --partial
//   (kustomize patches, which are partial objects) required fields are not
//   asked for, but unknown fields still fail. --tree checks each
//   kustomization's `resources` in full and its `patches` /
//   `patchesStrategicMerge` with --partial (configMapGenerator files are data
//   and are not checked as manifests). --rendered adds: Service selectors
//   match exactly one workload, named targetPorts exist, mounted ConfigMaps
//   and volumes exist, gRPC probe ports and the SLUICE_LISTEN /
//   SLUICE_METRICS_LISTEN ports are container ports, off loopback.
//   Native sidecars (init containers with restartPolicy: Always) count as
//   containers for ports, probes and mounts. A `unix:PATH` SLUICE_LISTEN /
//   SLUICE_ADMIN_LISTEN must lie in a volume its container mounts writable
//   (no subPath), and another container of the pod must mount the
//   SLUICE_LISTEN one; such a container, if in initContainers, must be a
//   native sidecar, and must have no readinessProbe (its readiness is the
//   pod's, and the gateway fails open without it); an exec probe's
//   `unix:PATH` argument must be one of its container's sockets;
//   SLUICE_METRICS_LISTEN must be TCP.
// Exit status: 0 all valid, 1 a problem found, 2 bad usage.
'use strict';

const fs = require('fs');
const path = require('path');
const yaml = require('js-yaml');

function modelClass(apiVersion, kind) {
  if (typeof apiVersion !== 'string' || typeof kind !== 'string') return null;
  // "v1" -> kubernetes-models/v1, "apps/v1" -> kubernetes-models/apps/v1.
  let mod;
  try {
    mod = require(`kubernetes-models/${apiVersion}`);
  } catch (e) {
    return null;
  }
  const cls = mod[kind];
  return typeof cls === 'function' ? cls : null;
}

// Wraps `data` so that every property the schema validator reads (present or
// not) is recorded per object. The compiled validators read each property
// their schema declares and iterate maps, so a key that is present but never
// read is one the schema does not know.
function tracking(data, seen) {
  if (data === null || typeof data !== 'object') return data;
  const read = new Set();
  seen.set(data, read);
  return new Proxy(data, {
    get(target, prop, receiver) {
      if (typeof prop === 'string') read.add(prop);
      return tracking(Reflect.get(target, prop, receiver), seen);
    },
    has(target, prop) {
      if (typeof prop === 'string') read.add(prop);
      return Reflect.has(target, prop);
    },
  });
}

function unknownFields(data, seen, path, out) {
  if (data === null || typeof data !== 'object') return;
  const read = seen.get(data);
  if (Array.isArray(data)) {
    data.forEach((v, i) => unknownFields(v, seen, `${path}[${i}]`, out));
    return;
  }
  // An object the validator never looked into has no schema to judge by
  // (free-form); skip it rather than guess.
  if (read === undefined || read.size === 0) return;
  for (const key of Object.keys(data)) {
    const child = `${path}.${key}`;
    if (!read.has(key)) out.push(child);
    else unknownFields(data[key], seen, child, out);
  }
}

function checkObject(doc, where, partial) {
  const problems = [];
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) {
    return [`${where}: not a mapping`];
  }
  // kustomize's own format; `kubectl kustomize` checks it (see the top).
  if (doc.kind === 'Kustomization') return problems;
  const cls = modelClass(doc.apiVersion, doc.kind);
  if (!cls) {
    return [`${where}: no kubernetes-models class for ` +
            `apiVersion "${doc.apiVersion}" kind "${doc.kind}"`];
  }
  const name = `${doc.kind}/${(doc.metadata && doc.metadata.name) || '?'}`;
  if (!partial) {
    try {
      new cls(doc).validate();
    } catch (e) {
      problems.push(`${where}: ${name}: ${e.message}`);
    }
  }
  // Run the same compiled validator on a tracking proxy; its verdict is
  // ignored here (reported above), only what it read matters.
  const seen = new WeakMap();
  try {
    cls.prototype.validate.call(tracking(doc, seen));
  } catch (e) {
    // Expected for partial objects.
  }
  const unknown = [];
  unknownFields(doc, seen, '', unknown);
  for (const field of unknown) {
    problems.push(`${where}: ${name}: unknown field "${field.slice(1)}"`);
  }
  return problems;
}

function loadDocs(file) {
  const text = fs.readFileSync(file === '-' ? 0 : file, 'utf8');
  return yaml.loadAll(text).filter((d) => d !== null && d !== undefined);
}

// Walks DIR for kustomization.yaml files and returns
// {full: [...], partial: [...], data: [...], problems: [...]}.
function collectTree(dir) {
  const out = { full: [], partial: [], data: [], problems: [] };
  const yamlFiles = [];
  const kustomizations = [];
  (function walk(d) {
    for (const ent of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, ent.name);
      if (ent.isDirectory()) walk(p);
      else if (ent.name === 'kustomization.yaml' || ent.name === 'kustomization.yml') {
        kustomizations.push(p);
      } else if (/\.ya?ml$/.test(ent.name)) yamlFiles.push(path.resolve(p));
    }
  })(dir);
  const named = new Set();
  for (const k of kustomizations.sort()) {
    out.full.push(k);
    let doc;
    try {
      doc = yaml.load(fs.readFileSync(k, 'utf8')) || {};
    } catch (e) {
      out.problems.push(`${k}: ${e.message.split('\n')[0]}`);
      continue;
    }
    const base = path.dirname(k);
    const local = (rel) => {
      const abs = path.resolve(base, rel);
      return fs.existsSync(abs) && fs.statSync(abs).isFile() ? abs : null;
    };
    for (const r of doc.resources || []) {
      const abs = local(r);
      if (abs) { named.add(abs); out.full.push(abs); }
      else if (!fs.existsSync(path.resolve(base, r))) {
        out.problems.push(`${k}: resource "${r}" does not exist`);
      }
    }
    const patchPaths = [];
    for (const p of doc.patches || []) if (p && p.path) patchPaths.push(p.path);
    for (const p of doc.patchesStrategicMerge || []) patchPaths.push(p);
    for (const p of patchPaths) {
      const abs = local(p);
      if (abs) { named.add(abs); out.partial.push(abs); }
      else out.problems.push(`${k}: patch "${p}" does not exist`);
    }
    for (const g of doc.configMapGenerator || []) {
      for (const f of g.files || []) {
        const rel = String(f).includes('=') ? String(f).split('=').slice(1).join('=') : f;
        const abs = local(rel);
        if (abs) { named.add(abs); out.data.push(abs); }
        else out.problems.push(`${k}: configMapGenerator file "${rel}" does not exist`);
      }
    }
  }
  for (const f of yamlFiles) {
    if (!named.has(f)) {
      out.problems.push(`${path.relative(process.cwd(), f)}: no kustomization names this file`);
    }
  }
  out.full = [...new Set(out.full)].map((f) => path.relative(process.cwd(), f) || f);
  out.partial = [...new Set(out.partial)].map((f) => path.relative(process.cwd(), f));
  return out;
}

function matches(selector, labels) {
  return Object.entries(selector || {}).every(([k, v]) => labels && labels[k] === v);
}

const LISTENERS = ['SLUICE_LISTEN', 'SLUICE_ADMIN_LISTEN', 'SLUICE_METRICS_LISTEN'];

// A native sidecar: an init container that runs for the pod's whole life.
function isSidecar(c) {
  return c.restartPolicy === 'Always';
}

// The mount of `c` whose mountPath holds `file`, the deepest if nested.
function mountOf(c, file) {
  let best = null;
  for (const m of c.volumeMounts || []) {
    const dir = String(m.mountPath).replace(/\/+$/, '');
    if (file.startsWith(`${dir}/`) && (!best || dir.length > best.mountPath.length)) {
      best = { ...m, mountPath: dir };
    }
  }
  return best;
}

// The path of a "unix:PATH" address; gRPC's "unix:///PATH" spelling too.
function socketPath(address) {
  const rest = address.slice('unix:'.length);
  return rest.startsWith('//') ? rest.slice(2) : rest;
}

// Problems with a Unix socket `socket` that container `c` listens on
// (`flag` is SLUICE_LISTEN or SLUICE_ADMIN_LISTEN); `all` = the pod's
// containers and init containers.
function checkSocket(pod, c, all, socket, flag) {
  if (!socket.startsWith('/')) return ['the socket path must be absolute'];
  const m = mountOf(c, socket);
  if (!m) {
    return [`${socket} is not inside a volume ${c.name} mounts ` +
            `(the socket would be in the container's own filesystem)`];
  }
  const out = [];
  if (m.readOnly) out.push(`volume "${m.name}" is mounted read-only; sluiced creates the socket there`);
  if (m.subPath || m.subPathExpr) out.push(`volume "${m.name}" is mounted with a subPath`);
  // The data-plane socket is for the other containers of the pod; the
  // admin socket is for `kubectl exec ... sluicectl` in this container only:
  // a container that can reach it can change every replica's policies.
  const others = all.filter((o) => o !== c &&
    (o.volumeMounts || []).some((x) => x.name === m.name));
  if (flag === 'SLUICE_LISTEN' && others.length === 0) {
    out.push(`no other container of the pod mounts volume "${m.name}", ` +
             `so nothing can connect to the socket`);
  }
  if (flag === 'SLUICE_ADMIN_LISTEN' && others.length > 0) {
    out.push(`volume "${m.name}" is also mounted by ` +
             `${others.map((o) => o.name).join(', ')}, which can then reach ` +
             `the admin API; give the admin socket a volume of its own`);
  }
  return out;
}

// Cross-object checks on one rendered kustomization.
function crossCheck(docs, label) {
  const problems = [];
  const pods = [];  // {name, labels, containers, volumes}
  const configMaps = new Set();
  for (const d of docs) {
    if (d.kind === 'ConfigMap') configMaps.add(d.metadata && d.metadata.name);
    if (['Deployment', 'StatefulSet', 'DaemonSet'].includes(d.kind)) {
      const t = (d.spec && d.spec.template) || {};
      const podLabels = (t.metadata && t.metadata.labels) || {};
      const name = `${d.kind}/${d.metadata && d.metadata.name}`;
      const sel = d.spec && d.spec.selector && d.spec.selector.matchLabels;
      if (!matches(sel, podLabels)) {
        problems.push(`${label}: ${name}: selector does not match its pod labels`);
      }
      pods.push({ name, labels: podLabels, annotations: (t.metadata && t.metadata.annotations) || {}, spec: t.spec || {} });
    }
  }
  for (const p of pods) {
    const containers = p.spec.containers || [];
    const inits = p.spec.initContainers || [];
    // What serves for the pod's whole life: its containers and its native
    // sidecars (init containers with restartPolicy: Always). Every init
    // container is checked for mounts and probes.
    const serving = [...inits.filter(isSidecar), ...containers];
    const all = [...inits, ...containers];
    const scrapePort = p.annotations && p.annotations['prometheus.io/port'];
    if (scrapePort !== undefined &&
        !serving.some((c) => (c.ports || []).some((x) => String(x.containerPort) === scrapePort))) {
      problems.push(`${label}: ${p.name}: prometheus.io/port ${scrapePort} is not a container port`);
    }
    for (const v of p.spec.volumes || []) {
      if (v.configMap && !configMaps.has(v.configMap.name) && !v.configMap.optional) {
        problems.push(`${label}: ${p.name}: volume "${v.name}" mounts ConfigMap ` +
                      `"${v.configMap.name}", which is not in the output`);
      }
    }
    for (const c of all) {
      const portNumbers = new Set((c.ports || []).map((x) => x.containerPort));
      const sockets = new Set();
      for (const probe of ['startupProbe', 'readinessProbe', 'livenessProbe']) {
        const g = c[probe] && c[probe].grpc;
        if (g && !portNumbers.has(g.port)) {
          problems.push(`${label}: ${p.name}: ${c.name} ${probe} gRPC port ` +
                        `${g.port} is not a container port`);
        }
      }
      // sluiced's listeners. TCP ones must be reachable from outside the
      // pod; a unix: one (a sidecar) must be in a volume this container
      // mounts writable, and another container of the pod must mount that
      // volume too, or no one can connect to the socket.
      for (const e of c.env || []) {
        if (!LISTENERS.includes(e.name) || typeof e.value !== 'string') continue;
        const what = `${c.name} ${e.name}=${e.value}`;
        if (e.value.startsWith('unix:')) {
          if (e.name === 'SLUICE_METRICS_LISTEN') {
            problems.push(`${label}: ${p.name}: ${what}: metrics are served on TCP only`);
            continue;
          }
          const socket = socketPath(e.value);
          sockets.add(socket);
          problems.push(...checkSocket(p, c, all, socket, e.name).map(
            (m) => `${label}: ${p.name}: ${what}: ${m}`));
          continue;
        }
        if (e.name === 'SLUICE_ADMIN_LISTEN') continue;  // loopback is right
        const port = Number(e.value.slice(e.value.lastIndexOf(':') + 1));
        if (!portNumbers.has(port)) {
          problems.push(`${label}: ${p.name}: ${what} is not on a container port`);
        }
        if (/^(127\.|localhost|\[::1\])/.test(e.value)) {
          problems.push(`${label}: ${p.name}: ${what} listens on loopback only`);
        }
      }
      // An exec probe that dials a socket (sluice-call --target unix:PATH)
      // must dial one this container listens on.
      for (const probe of ['startupProbe', 'readinessProbe', 'livenessProbe']) {
        const cmd = (c[probe] && c[probe].exec && c[probe].exec.command) || [];
        for (const arg of cmd) {
          if (typeof arg !== 'string' || !arg.startsWith('unix:')) continue;
          if (!sockets.has(socketPath(arg))) {
            problems.push(`${label}: ${p.name}: ${c.name} ${probe} dials ${arg}, ` +
                          `which is not a socket ${c.name} listens on`);
          }
        }
      }
      if (sockets.size > 0) {
        // sluiced in initContainers must be a native sidecar: a plain init
        // container has to exit before the app containers start.
        if (inits.includes(c) && !isSidecar(c)) {
          problems.push(`${label}: ${p.name}: ${c.name} serves a Unix socket from ` +
                        `initContainers without restartPolicy: Always (a plain init ` +
                        `container must exit before the pod's containers start)`);
        }
        // A sidecar's readiness is part of the pod's, and the gateway fails
        // open without it: a readinessProbe would take the gateway out of its
        // Service whenever sluiced is slow.
        if (c.readinessProbe) {
          problems.push(`${label}: ${p.name}: ${c.name} serves a Unix socket to its pod, ` +
                        `whose gateway fails open without it; a readinessProbe would make ` +
                        `the whole pod unready with it (use startup and liveness probes)`);
        }
      }
      for (const m of c.volumeMounts || []) {
        if (!(p.spec.volumes || []).some((v) => v.name === m.name)) {
          problems.push(`${label}: ${p.name}: ${c.name} mounts unknown volume "${m.name}"`);
        }
      }
    }
  }
  for (const d of docs) {
    if (d.kind !== 'Service') continue;
    const name = `Service/${d.metadata && d.metadata.name}`;
    const sel = (d.spec && d.spec.selector) || {};
    const targets = pods.filter((p) => matches(sel, p.labels));
    if (targets.length !== 1) {
      problems.push(`${label}: ${name}: selector matches ${targets.length} workloads, want 1`);
      continue;
    }
    const portNames = new Set();
    const spec = targets[0].spec;
    for (const c of [...(spec.initContainers || []).filter(isSidecar), ...(spec.containers || [])]) {
      for (const x of c.ports || []) if (x.name) portNames.add(x.name);
    }
    for (const sp of (d.spec && d.spec.ports) || []) {
      if (typeof sp.targetPort === 'string' && !portNames.has(sp.targetPort)) {
        problems.push(`${label}: ${name}: targetPort "${sp.targetPort}" is not a ` +
                      `container port of ${targets[0].name}`);
      }
    }
  }
  return problems;
}

function checkFiles(files, partial, rendered, problems) {
  let objects = 0;
  for (const file of files) {
    const label = file === '-' ? '<stdin>' : file;
    let docs;
    try {
      docs = loadDocs(file);
    } catch (e) {
      problems.push(`${label}: ${e.message.split('\n')[0]}`);
      continue;
    }
    docs.forEach((doc, i) => {
      objects++;
      problems.push(...checkObject(doc, `${label}#${i + 1}`, partial));
    });
    if (rendered) problems.push(...crossCheck(docs, label));
  }
  return objects;
}

function main(argv) {
  const usage = 'usage: node check.js --tree DIR | [--partial | --rendered] FILE... ("-" = stdin)\n';
  let partial = false;
  let rendered = false;
  let tree = null;
  const files = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--partial') partial = true;
    else if (arg === '--rendered') rendered = true;
    else if (arg === '--tree') tree = argv[++i];
    else if (arg === '-h' || arg === '--help') {
      process.stdout.write(usage);
      return 0;
    } else if (arg.startsWith('--')) {
      process.stderr.write(`deploy-check: unknown flag ${arg}\n${usage}`);
      return 2;
    } else files.push(arg);
  }
  const problems = [];
  let objects = 0;
  let what;
  if (tree !== null && tree !== undefined) {
    if (files.length || partial || rendered) {
      process.stderr.write(usage);
      return 2;
    }
    const t = collectTree(tree);
    problems.push(...t.problems);
    objects += checkFiles(t.full, false, false, problems);
    objects += checkFiles(t.partial, true, false, problems);
    what = `${t.full.length} manifest(s) and ${t.partial.length} patch(es) under ${tree}`;
  } else {
    if (files.length === 0 || (partial && rendered)) {
      process.stderr.write(usage);
      return 2;
    }
    objects += checkFiles(files, partial, rendered, problems);
    const mode = partial ? ', partial: unknown fields only' : rendered ? ', rendered' : '';
    what = `${files.map((f) => (f === '-' ? '<stdin>' : f)).join(' ')}${mode}`;
  }
  for (const p of problems) process.stderr.write(`deploy-check: ${p}\n`);
  process.stdout.write(`deploy-check: ${objects} objects (${what}): ` +
                       `${problems.length} problem(s)\n`);
  return problems.length === 0 ? 0 : 1;
}

if (require.main === module) process.exitCode = main(process.argv.slice(2));

// istio_check.js checks the Kubernetes objects of deploy/istio the same way.
module.exports = { checkObject, tracking, unknownFields };
