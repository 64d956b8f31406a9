// SPDX-License-Identifier: Apache-2.0
// Envoy's own messages against a real sluiced: the external authorization
// and access-log services spoken with Envoy's .proto files (the snapshot
// @grpc/grpc-js-xds vendors), not with Sluice's copies of them, so a field
// our copies got wrong shows up here as a wrong answer.
//
// It starts `sluiced` (standalone, ports chosen by the kernel) with the
// Lua-free recipe's policies, deploy/envoy/policies-ext-authz.yaml, and
// plays what Envoy would send for that recipe:
//   1. Check for a route naming "inventory" (context_extensions): OK, with
//      the permit headers for the upstream and the sluice_permits dynamic
//      metadata;
//   2. Checks for "reports" with key "export" past its burst: denied 429
//      with retry-after and x-sluice-reason;
//   3. access-log entries for inventory's permits, each with that metadata
//      under envoy.filters.http.ext_authz (as Envoy copies it) and a 503:
//      after 4 of them the breaker (consecutive_failures 5) still lets calls
//      through, after the 5th the next Check is denied with the fallback's
//      status 200, its body and x-sluice-degraded;
//   4. sluice_access_log_entries_total{result="settled"} on /metrics counts
//      the entries.
//
// Usage: node envoy_wire_check.js --sluiced PATH [--policies FILE]
// Exit status: 0 all answers as expected, 1 a wrong answer, 2 bad usage.
'use strict';

const assert = require('node:assert');
const { spawn } = require('node:child_process');
const http = require('node:http');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const loader = require('@grpc/proto-loader');

const ROOT = path.resolve(__dirname, '..', '..');
const FILTER = 'envoy.filters.http.ext_authz';

function parseArgs(argv) {
  const opts = { policies: path.join(ROOT, 'deploy/envoy/policies-ext-authz.yaml') };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    if (flag === '--sluiced') opts.sluiced = value;
    else if (flag === '--policies') opts.policies = value;
    else throw new Error(`unknown flag ${flag}`);
  }
  if (!opts.sluiced) throw new Error('--sluiced PATH is required');
  return opts;
}

function envoyServices() {
  const pkg = path.dirname(require.resolve('@grpc/grpc-js-xds/package.json'));
  const dirs = ['envoy-api', 'xds', 'googleapis', 'protoc-gen-validate']
    .map((d) => path.join(pkg, 'deps', d));
  // protobufjs keeps its own camelCase names for the well-known types:
  // google.protobuf.Struct's fields read listValue, structValue, ...
  const def = loader.loadSync(
    ['envoy/service/auth/v3/external_auth.proto', 'envoy/service/accesslog/v3/als.proto'],
    { includeDirs: dirs, keepCase: true, longs: String, enums: String, defaults: false, oneofs: true });
  return grpc.loadPackageDefinition(def).envoy.service;
}

// Starts sluiced and resolves with its process and the ports it logged.
function startSluiced(opts) {
  return new Promise((resolve, reject) => {
    const child = spawn(opts.sluiced, [
      '--listen', '127.0.0.1:0', '--admin-listen', '127.0.0.1:0',
      '--metrics-listen', '127.0.0.1:0', '--policies', opts.policies,
    ], { stdio: ['ignore', 'pipe', 'pipe'] });
    let log = '';
    const ports = {};
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`sluiced did not start within 20 s:\n${log}`));
    }, 20000);
    const onData = (chunk) => {
      log += chunk;
      const data = /serving DecisionService on 127\.0\.0\.1:(\d+)/.exec(log);
      const metrics = /serving metrics on 127\.0\.0\.1:(\d+)\/metrics/.exec(log);
      if (data) ports.data = Number(data[1]);
      if (metrics) ports.metrics = Number(metrics[1]);
      if (ports.data && ports.metrics) {
        clearTimeout(timer);
        resolve({ child, ports, log: () => log });
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`sluiced exited with ${code} before serving:\n${log}`));
    });
  });
}

function call(client, method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, { deadline: Date.now() + 5000 }, (err, res) => (err ? reject(err) : resolve(res)));
  });
}

// A CheckRequest as Envoy's ext_authz filter builds it for a route whose
// per-route settings carry `extensions`.
function checkRequest(extensions, pathValue) {
  return {
    attributes: {
      context_extensions: extensions,
      request: {
        http: {
          id: '1', method: 'GET', path: pathValue, host: 'shop.example.com', scheme: 'http',
          protocol: 'HTTP/1.1', headers: { ':authority': 'shop.example.com', ':path': pathValue, ':method': 'GET' },
        },
      },
    },
  };
}

function headerMap(options) {
  const out = {};
  for (const o of options || []) out[o.header.key.toLowerCase()] = o.header.value;
  return out;
}

// Writes one StreamAccessLogsMessage per element of `batches` (each a list
// of [dynamic metadata, response code]) and ends the stream.
function streamAccessLogs(client, batches) {
  return new Promise((resolve, reject) => {
    const stream = client.StreamAccessLogs({ deadline: Date.now() + 5000 }, (err) => (err ? reject(err) : resolve()));
    batches.forEach((entries, i) => {
      stream.write({
        identifier: i === 0 ? { node: { id: 'envoy-wire-check' }, log_name: 'sluice' } : undefined,
        http_logs: {
          log_entry: entries.map(([metadata, code]) => ({
            common_properties: {
              metadata: { filter_metadata: { [FILTER]: metadata } },
              time_to_last_upstream_rx_byte: { seconds: '0', nanos: 12000000 },
              time_to_last_downstream_tx_byte: { seconds: '0', nanos: 13000000 },
            },
            response: { response_code: { value: code } },
          })),
        },
      });
    });
    stream.end();
  });
}

function scrape(port) {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: '/metrics' }, (res) => {
      let body = '';
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve(body));
    }).on('error', reject);
  });
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const services = envoyServices();
  const sluiced = await startSluiced(opts);
  const target = `127.0.0.1:${sluiced.ports.data}`;
  const authz = new services.auth.v3.Authorization(target, grpc.credentials.createInsecure());
  const als = new services.accesslog.v3.AccessLogService(target, grpc.credentials.createInsecure());
  const inventory = { sluice_dependency: 'inventory' };
  try {
    // 1. Allowed, with the permit for the upstream and the access log.
    const allowed = await call(authz, 'Check', checkRequest(inventory, '/api/inventory/42'));
    assert.strictEqual(allowed.status?.code ?? 0, 0, `inventory: ${JSON.stringify(allowed)}`);
    const upstream = headerMap(allowed.ok_response?.headers);
    assert.strictEqual(upstream['x-sluice-dependency'], 'inventory');
    assert.match(upstream['x-sluice-permit'] || '', /^[0-9a-f]{32}/);
    const permits = allowed.dynamic_metadata?.fields?.sluice_permits?.listValue?.values || [];
    assert.strictEqual(permits.length, 1, JSON.stringify(allowed.dynamic_metadata));
    assert.strictEqual(permits[0].structValue.fields.permit_id.stringValue, upstream['x-sluice-permit']);
    console.log(`envoy-wire-check: Check inventory -> OK, permit ${upstream['x-sluice-permit']} in headers and metadata`);

    // 2. Past the burst (20) of reports/export: 429 with retry-after.
    let denied = null;
    for (let i = 0; i < 25 && !denied; ++i) {
      const r = await call(authz, 'Check', checkRequest({ sluice_dependency: 'reports', sluice_key: 'export' }, '/api/reports/export'));
      if ((r.status?.code ?? 0) !== 0) denied = { r, after: i };
    }
    assert.ok(denied, 'reports/export: 25 checks against a burst of 20 were all allowed');
    assert.strictEqual(denied.after, 20, `reports/export: first refusal after ${denied.after} checks, burst is 20`);
    assert.strictEqual(denied.r.denied_response.status.code, 'TooManyRequests');
    const refusal = headerMap(denied.r.denied_response.headers);
    assert.ok(Number(refusal['retry-after']) >= 1, JSON.stringify(refusal));
    assert.strictEqual(refusal['x-sluice-reason'], 'RATE_LIMITED');
    console.log(`envoy-wire-check: Check reports/export #21 -> denied 429, retry-after ${refusal['retry-after']}`);

    // 3. Outcomes from access-log entries alone: 4 failures keep the breaker
    // closed, the 5th opens it and the fallback is served with a 200.
    const metadata = [allowed.dynamic_metadata];
    for (let i = 0; i < 4; ++i) {
      const r = await call(authz, 'Check', checkRequest(inventory, '/api/inventory/42'));
      assert.strictEqual(r.status?.code ?? 0, 0);
      metadata.push(r.dynamic_metadata);
    }
    await streamAccessLogs(als, [metadata.slice(0, 2).map((m) => [m, 503]), metadata.slice(2, 4).map((m) => [m, 503])]);
    const stillClosed = await call(authz, 'Check', checkRequest(inventory, '/api/inventory/42'));
    assert.strictEqual(stillClosed.status?.code ?? 0, 0, `after 4 failed entries: ${JSON.stringify(stillClosed)}`);
    await streamAccessLogs(als, [[[metadata[4], 503]]]);
    const degraded = await call(authz, 'Check', checkRequest(inventory, '/api/inventory/42'));
    assert.notStrictEqual(degraded.status?.code ?? 0, 0, `after 5 failed entries: ${JSON.stringify(degraded)}`);
    assert.strictEqual(degraded.denied_response.status.code, 'OK');
    assert.strictEqual(degraded.denied_response.body, '{"degraded":true,"in_stock":null}');
    const fallback = headerMap(degraded.denied_response.headers);
    assert.strictEqual(fallback['x-sluice-degraded'], 'CIRCUIT_OPEN');
    assert.strictEqual(fallback['content-type'], 'application/json');
    console.log('envoy-wire-check: 4 failed access-log entries -> still allowed; the 5th -> ' +
      'denied with status 200 and the fallback body (CIRCUIT_OPEN)');

    // 4. The entries were settled.
    const metrics = await scrape(sluiced.ports.metrics);
    const settled = /^sluice_access_log_entries_total\{result="settled"\} (\d+)/m.exec(metrics);
    assert.ok(settled, 'no sluice_access_log_entries_total{result="settled"} on /metrics');
    assert.strictEqual(Number(settled[1]), 5);
    console.log('envoy-wire-check: sluice_access_log_entries_total{result="settled"} 5; ok');
  } finally {
    authz.close();
    als.close();
    sluiced.child.kill('SIGTERM');
  }
}

main().catch((e) => {
  console.error(`envoy-wire-check: ${e.message}`);
  process.exit(e instanceof assert.AssertionError ? 1 : 2);
});
