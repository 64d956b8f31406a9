// SPDX-License-Identifier: Apache-2.0
// Tests of istio_check.js: deploy/istio as committed passes, and each kind
// of mistake the check exists for fails, on a broken copy of the directory.
// Run: node --test scripts/deploy-check/ (scripts/lint-deploy does).
'use strict';

const assert = require('node:assert');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { test } = require('node:test');
const yaml = require('js-yaml');

const { check } = require('./istio_check');

const root = path.resolve(__dirname, '..', '..');
const dir = path.join(root, 'deploy', 'istio');
const protos = path.join(root, 'proto');

// Runs the check on a copy of deploy/istio with `file` edited by `edit`: a
// function of the text, or of the parsed document when `parsed` is set.
async function checkEdited(file, edit, parsed = false) {
  const copy = fs.mkdtempSync(path.join(os.tmpdir(), 'istio-check-'));
  try {
    fs.cpSync(dir, copy, { recursive: true });
    const target = path.join(copy, file);
    const before = fs.readFileSync(target, 'utf8');
    let after;
    if (parsed) {
      const doc = yaml.load(before);
      edit(doc);
      after = yaml.dump(doc, { lineWidth: -1 });
      assert.notStrictEqual(after, yaml.dump(yaml.load(before), { lineWidth: -1 }), `the edit of ${file} changed nothing`);
    } else {
      after = edit(before);
      assert.notStrictEqual(after, before, `the edit of ${file} changed nothing`);
    }
    fs.writeFileSync(target, after);
    return await check({ dir: copy, protos });
  } finally {
    fs.rmSync(copy, { recursive: true, force: true });
  }
}

function expectProblem(result, pattern) {
  assert.ok(result.problems.length > 0, 'expected a problem, got none');
  assert.ok(result.problems.some((p) => pattern.test(p)),
    `no problem matches ${pattern}:\n${result.problems.join('\n')}`);
}

test('deploy/istio as committed passes', async () => {
  const r = await check({ dir, protos });
  assert.deepStrictEqual(r.problems, []);
  const out = r.lines.join('\n');
  assert.match(out, /provider sluice-ext-authz \(envoyExtAuthzGrpc\) -> sluice-mesh\.sluice\.svc\.cluster\.local:50051/);
  assert.match(out, /provider sluice-outcomes \(envoyHttpAls\) -> sluice-mesh\.sluice\.svc\.cluster\.local:50051/);
  assert.match(out, /shop\/\[\["app","inventory-api"\]\] asks sluice-ext-authz, outcomes logged/);
});

test('the command line exits 0 on deploy/istio and 1 on a broken copy', () => {
  const cli = path.join(__dirname, 'istio_check.js');
  const ok = spawnSync(process.execPath, [cli, '--quiet'], { encoding: 'utf8' });
  assert.strictEqual(ok.status, 0, ok.stdout + ok.stderr);
  const copy = fs.mkdtempSync(path.join(os.tmpdir(), 'istio-check-'));
  fs.cpSync(dir, copy, { recursive: true });
  const file = path.join(copy, 'authorization-policy.yaml');
  fs.writeFileSync(file, fs.readFileSync(file, 'utf8').replace('action: CUSTOM', 'action: CUSTOMER'));
  const bad = spawnSync(process.execPath, [cli, '--quiet', '--dir', copy], { encoding: 'utf8' });
  fs.rmSync(copy, { recursive: true, force: true });
  assert.strictEqual(bad.status, 1, bad.stdout + bad.stderr);
  assert.match(bad.stdout, /PROBLEM .*AuthorizationPolicy\/sluice: .*action must be equal to one of the allowed values/);
});

// --- Istio's CRD schemas (@kubernetes-models/istio)

test('an AuthorizationPolicy or Telemetry field Istio does not define fails', async () => {
  expectProblem(await checkEdited('authorization-policy.yaml', (t) => t.replace('notPaths:', 'notPath:')),
    /AuthorizationPolicy\/sluice: unknown field "spec\.rules\[0\]\.to\[0\]\.operation\.notPath"/);
  expectProblem(await checkEdited('telemetry.yaml', (t) => t.replace('accessLogging:', 'accessLogs:')),
    /Telemetry\/sluice-outcomes: unknown field "spec\.accessLogs"/);
});

test('a value outside Istio\'s enums fails', async () => {
  expectProblem(await checkEdited('telemetry.yaml', (t) => t.replace('mode: SERVER', 'mode: INBOUND')),
    /Telemetry\/sluice-outcomes: .*mode must be equal to one of the allowed values/);
});

test('a Service field Kubernetes does not define fails', async () => {
  expectProblem(await checkEdited('service.yaml', (t) => t.replace('appProtocol: grpc', 'applicationProtocol: grpc')),
    /Service\/sluice-mesh: unknown field "spec\.ports\[0\]\.applicationProtocol"/);
});

// --- the mesh config, against Istio's field lists

test('a mesh config or provider field Istio does not define fails', async () => {
  expectProblem(await checkEdited('mesh-config.yaml', (t) => t.replace('failOpen: true', 'failopen: true')),
    /extensionProviders\[0\]\.envoyExtAuthzGrpc\.failopen: unknown field \(known: service, port, timeout, failOpen/);
  expectProblem(await checkEdited('mesh-config.yaml', (t) => t.replace('extensionProviders:', 'extensionProvider:')),
    /spec\.meshConfig\.extensionProvider: unknown field of MeshConfig/);
  expectProblem(await checkEdited('mesh-config.yaml', (t) => t.replace('envoyHttpAls:', 'envoyHttpALS:')),
    /extensionProviders\[1\]\.envoyHttpALS: unknown field of ExtensionProvider/);
  expectProblem(await checkEdited('mesh-config.yaml', (t) => t.replace('  meshConfig:', '  meshconfig:')),
    /spec\.meshconfig: unknown field of IstioOperatorSpec/);
});

test('a provider value of the wrong type fails', async () => {
  expectProblem(await checkEdited('mesh-config.yaml', (t) => t.replace('timeout: 0.1s', 'timeout: 100ms')),
    /envoyExtAuthzGrpc\.timeout: must be a duration such as "0\.1s", got "100ms"/);
  expectProblem(await checkEdited('mesh-config.yaml', (t) => t.replace(/port: 50051/, 'port: 70000')),
    /envoyExtAuthzGrpc\.port: must be a port 1\.\.65535, got 70000/);
});

test('two providers of one name, or one with two kinds, fail', async () => {
  expectProblem(await checkEdited('mesh-config.yaml', (t) => t.replace('name: sluice-outcomes', 'name: sluice-ext-authz')),
    /provider name "sluice-ext-authz" is used twice/);
  expectProblem(await checkEdited('mesh-config.yaml', (doc) => {
    const [authz, als] = doc.spec.meshConfig.extensionProviders;
    authz.envoyHttpAls = als.envoyHttpAls;
  }, true), /extensionProviders\[0\]: must set exactly one provider kind, sets envoyExtAuthzGrpc, envoyHttpAls/);
});

// --- across the files

test('a provider whose Service or port does not exist fails', async () => {
  expectProblem(await checkEdited('mesh-config.yaml', (t) => t.replace('service: sluice-mesh.sluice.svc', 'service: sluice.sluice.svc')),
    /envoyExtAuthzGrpc\.service "sluice\.sluice\.svc\.cluster\.local" is not a Service of/);
  expectProblem(await checkEdited('mesh-config.yaml', (t) => t.replace(/port: 50051(\n\s+logName)/, 'port: 50052$1')),
    /envoyHttpAls\.port 50052 is not a port of Service sluice\/sluice-mesh/);
  expectProblem(await checkEdited('service.yaml', (t) => t.replace('namespace: sluice', 'namespace: sluice-system')),
    /is not a Service of/);
});

test('a Service port not declared gRPC fails: Istio would not speak HTTP/2 to it', async () => {
  const r = await checkEdited('service.yaml', (t) => t.replace('      appProtocol: grpc\n', '').replace('name: grpc-envoy', 'name: tcp-envoy'));
  expectProblem(r, /port 50051 \("tcp-envoy"\) is not declared gRPC .*provider "sluice-ext-authz" a cluster without HTTP\/2/);
  expectProblem(r, /provider "sluice-outcomes" a cluster without HTTP\/2/);
  // The port name alone is enough for Istio.
  const named = await checkEdited('service.yaml', (t) => t.replace('      appProtocol: grpc\n', ''));
  assert.deepStrictEqual(named.problems, []);
});

test('failing closed, or a long check timeout, fails', async () => {
  expectProblem(await checkEdited('mesh-config.yaml', (t) => t.replace('failOpen: true', 'failOpen: false')),
    /envoyExtAuthzGrpc\.failOpen is not true: every request would be refused while Sluice is unreachable/);
  expectProblem(await checkEdited('mesh-config.yaml', (t) => t.replace('timeout: 0.1s', 'timeout: 3s')),
    /envoyExtAuthzGrpc\.timeout 3s holds every request back that long/);
});

test('an AuthorizationPolicy naming another or no provider fails', async () => {
  expectProblem(await checkEdited('authorization-policy.yaml', (t) => t.replace('name: sluice-ext-authz', 'name: sluice-authz')),
    /spec\.provider\.name "sluice-authz" is not an extension provider of the mesh config/);
  expectProblem(await checkEdited('authorization-policy.yaml', (t) => t.replace('name: sluice-ext-authz', 'name: sluice-outcomes')),
    /spec\.provider\.name "sluice-outcomes" is a envoyHttpAls provider; Sluice serves envoyExtAuthzGrpc/);
  expectProblem(await checkEdited('authorization-policy.yaml', (doc) => {
    doc.spec.action = 'ALLOW';
    delete doc.spec.provider;
  }, true), /no AuthorizationPolicy with action CUSTOM: nothing asks Sluice/);
});

test('a CUSTOM policy without rules or without a workload selector fails', async () => {
  expectProblem(await checkEdited('authorization-policy.yaml', (doc) => {
    delete doc.spec.rules;
  }, true), /no spec\.rules: a CUSTOM policy without rules matches no request/);
  const r = await checkEdited('authorization-policy.yaml', (doc) => {
    delete doc.spec.selector;
  }, true);
  expectProblem(r, /no spec\.selector\.matchLabels: the policy would ask Sluice for every workload/);
  // ... and the Telemetry no longer covers the same workload.
  expectProblem(r, /no Telemetry in .* sends this workload's server-side access logs/);
});

test('outcomes for another workload, or client-side only, fail', async () => {
  expectProblem(await checkEdited('telemetry.yaml', (t) => t.replace('app: inventory-api', 'app: inventory')),
    /no Telemetry in .* sends this workload's server-side access logs to an envoyHttpAls provider/);
  expectProblem(await checkEdited('telemetry.yaml', (t) => t.replace('namespace: shop', 'namespace: store')),
    /no Telemetry in .* sends this workload's server-side access logs/);
  const client = await checkEdited('telemetry.yaml', (t) => t.replace('mode: SERVER', 'mode: CLIENT'));
  expectProblem(client, /match\.mode CLIENT logs only outbound calls/);
  expectProblem(await checkEdited('telemetry.yaml', (t) => t.replace('- name: sluice-outcomes', '- name: sluice-als')),
    /providers\[0\]: "sluice-als" is not an extension provider of the mesh config/);
});

test('an object without a namespace fails', async () => {
  expectProblem(await checkEdited('telemetry.yaml', (doc) => {
    delete doc.metadata.namespace;
  }, true), /Telemetry: metadata\.namespace is required here/);
});

// --- the policies

test('a policy without http_routes fails: Istio cannot name it', async () => {
  expectProblem(await checkEdited('policies.yaml', (doc) => {
    delete doc.policies[1].http_routes;
  }, true), /policies\[1\] "inventory-write": no http_routes; Istio names no policy per route/);
});

test('an http_routes mistake fails', async () => {
  expectProblem(await checkEdited('policies.yaml', (t) => t.replace('- path_prefix: /api/inventory/\n\n', '- path_prefx: /api/inventory/\n\n')),
    /http_routes\[0\]\.path_prefx: unknown field "path_prefx" in sluice\.v1\.HttpRoute/);
  expectProblem(await checkEdited('policies.yaml', (doc) => {
    delete doc.policies[1].per_key;
  }, true), /http_routes\[0\]\.key_header "x-tenant" partitions the policy by key; that needs per_key: true/);
  expectProblem(await checkEdited('policies.yaml', (doc) => {
    doc.policies[1].http_routes[0].path_prefix = 'api/inventory/';
  }, true), /path_prefix "api\/inventory\/" does not start with "\/"/);
  expectProblem(await checkEdited('policies.yaml', (doc) => {
    doc.policies[1].http_routes = [{ path_prefix: '/api/inventory/' }];
  }, true), /"inventory-write": http_routes\[0\]: the same HTTP route is claimed by policy "inventory"/);
  expectProblem(await checkEdited('policies.yaml', (doc) => {
    doc.policies[1].http_routes[0].headers = { 'X-Tenant': '' };
  }, true), /headers: "X-Tenant" must be lowercase/);
});
