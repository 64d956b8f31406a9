// SPDX-License-Identifier: Apache-2.0
// Tests of check.js: deploy/kubernetes as it is passes, and each kind of
// mistake the check exists for fails, on a broken copy of the tree.
// Run: node --test scripts/deploy-check/ (scripts/lint-deploy does).
'use strict';

const assert = require('node:assert');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { test } = require('node:test');

const root = path.resolve(__dirname, '..', '..');
const tree = path.join(root, 'deploy', 'kubernetes');
const check = path.join(__dirname, 'check.js');

function run(args, input) {
  const r = spawnSync(process.execPath, [check, ...args], { input, encoding: 'utf8' });
  return { status: r.status, out: r.stdout + r.stderr };
}

// A copy of deploy/kubernetes with `file` edited by `edit(text)`.
function brokenTree(file, edit) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deploy-check-'));
  fs.cpSync(tree, dir, { recursive: true });
  const target = path.join(dir, file);
  const before = fs.existsSync(target) ? fs.readFileSync(target, 'utf8') : '';
  const after = edit(before);
  assert.notStrictEqual(after, before, `the edit of ${file} changed nothing`);
  fs.writeFileSync(target, after);
  return dir;
}

function expectRejected(dir, message) {
  const r = run(['--tree', dir]);
  fs.rmSync(dir, { recursive: true, force: true });
  assert.strictEqual(r.status, 1, r.out);
  assert.match(r.out, message);
}

test('deploy/kubernetes as committed passes', () => {
  const r = run(['--tree', tree]);
  assert.strictEqual(r.status, 0, r.out);
  assert.match(r.out, / 0 problem\(s\)/);
});

test('a misspelled field fails', () => {
  expectRejected(
    brokenTree('base/deployment.yaml',
      (t) => t.replace('readOnlyRootFilesystem', 'readOnlyRootFileSystem')),
    /unknown field "spec\.template\.spec\.containers\[0\]\.securityContext\.readOnlyRootFileSystem"/);
});

test('a value of the wrong type fails', () => {
  expectRejected(
    brokenTree('base/deployment.yaml', (t) => t.replace(/replicas: \d+/, 'replicas: three')),
    /spec\/replicas must be integer/);
});

test('a missing required field fails', () => {
  expectRejected(
    brokenTree('base/service.yaml', (t) => t.replace(/\n {6}port: 50051/, '')),
    /spec\/ports\/0 must have required property port/);
});

test('an unknown field in a patch fails', () => {
  expectRejected(
    brokenTree('overlays/cluster/sluice-redis-env.yaml',
      (t) => t.replace('          env:', '          envv:')),
    /unknown field "spec\.template\.spec\.containers\[0\]\.envv"/);
});

test('a YAML file no kustomization names fails', () => {
  expectRejected(
    brokenTree('base/stray.yaml', () => 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n'),
    /stray\.yaml: no kustomization names this file/);
});

// What `kubectl kustomize` would render, built by hand so the test needs no
// kubectl: the base objects plus the generated ConfigMap.
function rendered(editDeployment = (t) => t) {
  const read = (f) => fs.readFileSync(path.join(tree, 'base', f), 'utf8');
  const configMap =
    'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: sluice-policies}\n' +
    'data: {policies.yaml: "policies: []"}\n';
  return [editDeployment(read('deployment.yaml')), read('service.yaml'), configMap]
    .join('\n---\n');
}

test('rendered objects that agree pass', () => {
  const r = run(['--rendered', '-'], rendered());
  assert.strictEqual(r.status, 0, r.out);
});

test('a listener on loopback fails', () => {
  const r = run(['--rendered', '-'], rendered(
    (t) => t.replace('value: 0.0.0.0:50051', 'value: 127.0.0.1:50051')));
  assert.strictEqual(r.status, 1, r.out);
  assert.match(r.out, /SLUICE_LISTEN=127\.0\.0\.1:50051 listens on loopback only/);
});

test('a Service that selects no pods fails', () => {
  const r = run(['--rendered', '-'], rendered(
    (t) => t.replace(/app\.kubernetes\.io\/component: server/g, 'app.kubernetes.io/component: other')));
  assert.strictEqual(r.status, 1, r.out);
  assert.match(r.out, /Service\/sluice: selector matches 0 workloads, want 1/);
});

// The sidecar overlay rendered by hand the same way: the gateway Deployment
// (sluiced as a native sidecar), its Service, and both ConfigMaps.
function renderedSidecar(editDeployment = null) {
  const read = (f) => fs.readFileSync(path.join(tree, 'overlays', 'sidecar', f), 'utf8');
  const configMaps =
    'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: sluice-policies}\n' +
    'data: {policies.yaml: "policies: []"}\n---\n' +
    'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: sluice-gateway-config}\n' +
    'data: {gateway.yaml: "listen: 0.0.0.0:8080"}\n';
  let deployment = read('gateway.yaml');
  if (editDeployment) {
    const edited = editDeployment(deployment);
    assert.notStrictEqual(edited, deployment, 'the edit of gateway.yaml changed nothing');
    deployment = edited;
  }
  return [deployment, read('gateway-service.yaml'), configMaps].join('\n---\n');
}

function expectRenderedRejected(text, message) {
  const r = run(['--rendered', '-'], text);
  assert.strictEqual(r.status, 1, r.out);
  assert.match(r.out, message);
}

test('the sidecar overlay, rendered, passes', () => {
  const r = run(['--rendered', '-'], renderedSidecar());
  assert.strictEqual(r.status, 0, r.out);
});

test('a misspelled field of a native sidecar fails', () => {
  expectRejected(
    brokenTree('overlays/sidecar/gateway.yaml',
      (t) => t.replace(/\n {10}restartPolicy: Always/, '\n          restartpolicy: Always')),
    /unknown field "spec\.template\.spec\.initContainers\[0\]\.restartpolicy"/);
});

test('a socket volume the gateway does not mount fails', () => {
  expectRenderedRejected(renderedSidecar((t) => t.replace(
    /\n {12}- name: sluice-run\n {14}mountPath: \/run\/sluice\n {14}readOnly: true/, '')),
  /SLUICE_LISTEN=unix:\/run\/sluice\/sluice\.sock: no other container of the pod mounts volume "sluice-run"/);
});

test('a unix: SLUICE_LISTEN outside every mount fails', () => {
  expectRenderedRejected(renderedSidecar((t) => t.replace(
    'value: unix:/run/sluice/sluice.sock', 'value: unix:/var/run/sluice.sock')),
  /SLUICE_LISTEN=unix:\/var\/run\/sluice\.sock: \/var\/run\/sluice\.sock is not inside a volume sluiced mounts/);
});

test('a socket in a read-only mount fails', () => {
  expectRenderedRejected(renderedSidecar((t) => t.replace(
    '            - name: sluice-run\n              mountPath: /run/sluice\n            - name: sluice-admin',
    '            - name: sluice-run\n              mountPath: /run/sluice\n              readOnly: true\n' +
    '            - name: sluice-admin')),
  /volume "sluice-run" is mounted read-only; sluiced creates the socket there/);
});

test('an admin socket in the volume the gateway mounts fails', () => {
  expectRenderedRejected(renderedSidecar((t) => t.replace(
    'value: unix:/run/sluice-admin/admin.sock', 'value: unix:/run/sluice/admin.sock')),
  /SLUICE_ADMIN_LISTEN=unix:\/run\/sluice\/admin\.sock: volume "sluice-run" is also mounted by gateway, which can then reach the admin API/);
});

test('an exec probe on a socket sluiced does not serve fails', () => {
  expectRenderedRejected(renderedSidecar((t) => t.replace(
    '"--target", "unix:/run/sluice/sluice.sock"', '"--target", "unix:/run/sluice/other.sock"')),
  /sluiced startupProbe dials unix:\/run\/sluice\/other\.sock, which is not a socket sluiced listens on/);
});

test('sluiced in initContainers without restartPolicy: Always fails', () => {
  expectRenderedRejected(renderedSidecar((t) => t.replace(/\n {10}restartPolicy: Always/, '')),
    /sluiced serves a Unix socket from initContainers without restartPolicy: Always/);
});

test('a readinessProbe on the sluiced sidecar fails', () => {
  expectRenderedRejected(renderedSidecar((t) => t.replace(
    '          livenessProbe:\n            exec:',
    '          readinessProbe:\n            exec:\n              command: ["true"]\n' +
    '          livenessProbe:\n            exec:')),
  /sluiced serves a Unix socket to its pod, whose gateway fails open without it; a readinessProbe/);
});

test('the fallback shape, sluiced as a plain container, passes', () => {
  // For clusters without native sidecars (docs/deploy.md): the same
  // container moved from initContainers to containers.
  const yaml = require('js-yaml');
  const r = run(['--rendered', '-'], renderedSidecar((t) => {
    const d = yaml.load(t);
    const spec = d.spec.template.spec;
    const sluiced = spec.initContainers.shift();
    delete sluiced.restartPolicy;
    sluiced.lifecycle = { preStop: { exec: { command: ['sleep', '10'] } } };
    spec.containers.push(sluiced);
    delete spec.initContainers;
    return yaml.dump(d);
  }));
  assert.strictEqual(r.status, 0, r.out);
});
