// SPDX-License-Identifier: Apache-2.0
// Tests of the ext_authz + access-log bootstrap checks (envoy_check.js with
// ext_authz_check.js): deploy/envoy/envoy-ext-authz.yaml and
// deploy/envoy/policies-ext-authz.yaml as committed pass, and each kind of
// mistake the checks exist for fails, on a broken copy.
// Run: node --test scripts/deploy-check/ (scripts/lint-deploy does).
'use strict';

const assert = require('node:assert');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { test } = require('node:test');
const yaml = require('js-yaml');

const { run } = require('./envoy_check');
const { loadEnvoyApi } = require('./envoy_protos');

const root = path.resolve(__dirname, '..', '..');
const files = {
  bootstrap: path.join(root, 'deploy', 'envoy', 'envoy-ext-authz.yaml'),
  policies: path.join(root, 'deploy', 'envoy', 'policies-ext-authz.yaml'),
  protos: path.join(root, 'proto'),
  // proto/envoy against Envoy's is envoy_check.test.js's subject.
  protosCompared: true,
};
const api = loadEnvoyApi();

// Runs the check with `which` (bootstrap or policies) replaced by a copy
// edited by `edit`: a function of the text, or of the parsed document when
// `parsed` is set.
function checkEdited(which, edit, parsed = false) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ext-authz-check-'));
  const before = fs.readFileSync(files[which], 'utf8');
  let after;
  if (parsed) {
    const doc = yaml.load(before);
    edit(doc);
    after = yaml.dump(doc, { lineWidth: -1 });
    assert.notStrictEqual(after, yaml.dump(yaml.load(before), { lineWidth: -1 }), `the edit of ${which} changed nothing`);
  } else {
    after = edit(before);
    assert.notStrictEqual(after, before, `the edit of ${which} changed nothing`);
  }
  const copy = path.join(dir, path.basename(files[which]));
  fs.writeFileSync(copy, after);
  try {
    return run({ ...files, [which]: copy }, api);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

function expectProblem(result, pattern) {
  assert.ok(result.problems.length > 0, 'expected a problem, got none');
  assert.ok(result.problems.some((p) => pattern.test(p)),
    `no problem matches ${pattern}:\n${result.problems.join('\n')}`);
}

function hcm(doc) {
  return doc.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
}

function extAuthzFilter(doc) {
  return hcm(doc).http_filters.find((f) => f.name === 'envoy.filters.http.ext_authz').typed_config;
}

function routeTo(doc, match) {
  return hcm(doc).route_config.virtual_hosts[0].routes
    .find((r) => r.match.prefix === match || r.match.path === match);
}

function perRoute(doc, match) {
  return routeTo(doc, match).typed_per_filter_config['envoy.filters.http.ext_authz'];
}

test('envoy-ext-authz.yaml and policies-ext-authz.yaml as committed pass', () => {
  const r = run(files, api);
  assert.deepStrictEqual(r.problems, []);
  const out = r.lines.join('\n');
  assert.match(out, /envoy-ext-authz\.yaml against envoy\.config\.bootstrap\.v3\.Bootstrap .*: 0 problem\(s\)/);
  for (const want of [
    /^ {2}route prefix \/api\/inventory -> inventory$/m,
    /^ {2}route prefix \/api\/search -> search$/m,
    /^ {2}route prefix \/api\/reports\/export -> reports key "export"$/m,
    /^ {2}route prefix \/ -> edge-default$/m,
  ]) {
    assert.match(out, want);
  }
  // The health route does not ask Sluice.
  assert.doesNotMatch(out, /healthz ->/);
});

test('the command line checks both bootstraps by default', () => {
  const cli = path.join(__dirname, 'envoy_check.js');
  const ok = spawnSync(process.execPath, [cli], { encoding: 'utf8' });
  assert.strictEqual(ok.status, 0, ok.stdout + ok.stderr);
  assert.match(ok.stdout, /envoy\.yaml against envoy\.config\.bootstrap\.v3\.Bootstrap/);
  assert.match(ok.stdout, /envoy-ext-authz\.yaml against envoy\.config\.bootstrap\.v3\.Bootstrap/);
  assert.match(ok.stdout, /policies-ext-authz\.yaml against sluice\.v1\.PolicySet/);
});

// --- against Envoy's protos, as the RLS bootstrap

test('a misspelled field in the ext_authz filter or its per-route config fails', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace('failure_mode_allow: true', 'failure_mode_allowed: true')),
    /unknown field "failure_mode_allowed" in envoy\.extensions\.filters\.http\.ext_authz\.v3\.ExtAuthz/);
  expectProblem(checkEdited('bootstrap', (doc) => {
    perRoute(doc, '/api/search').check_settings.context_extension = { sluice_key: 'x' };
  }, true), /unknown field "context_extension" in envoy\.extensions\.filters\.http\.ext_authz\.v3\.CheckSettings/);
});

test('an access logger with a misspelled or misplaced field fails', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace('buffer_flush_interval: 0.25s', 'flush_interval: 0.25s')),
    /unknown field "flush_interval" in envoy\.extensions\.access_loggers\.grpc\.v3\.CommonGrpcAccessLogConfig/);
  expectProblem(checkEdited('bootstrap', (doc) => {
    const log = hcm(doc).access_log[0].typed_config;
    log.log_name = log.common_config.log_name;
    delete log.common_config.log_name;
  }, true), /unknown field "log_name" in envoy\.extensions\.access_loggers\.grpc\.v3\.HttpGrpcAccessLogConfig/);
});

test('a per-route ext_authz config with both disabled and check_settings fails (oneof)', () => {
  expectProblem(checkEdited('bootstrap', (doc) => {
    perRoute(doc, '/api/search').disabled = true;
  }, true), /sets .*disabled.* and .*check_settings.*, which are one of envoy\.extensions\.filters\.http\.ext_authz\.v3\.ExtAuthzPerRoute\.override|check_settings.*disabled/);
});

test('an ext_authz config whose @type names no Envoy message fails', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace('ext_authz.v3.ExtAuthz\n', 'ext_authz.v3.ExtAuth\n')),
    /"type\.googleapis\.com\/envoy\.extensions\.filters\.http\.ext_authz\.v3\.ExtAuth": no message/);
});

// --- what the ext_authz and access-log checks add

test('failing closed fails', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace('failure_mode_allow: true', 'failure_mode_allow: false')),
    /failure_mode_allow is not true: every request would be refused while Sluice is unreachable/);
  expectProblem(checkEdited('bootstrap', (doc) => {
    delete extAuthzFilter(doc).failure_mode_allow;
  }, true), /failure_mode_allow is not true/);
});

test('a check timeout over a second fails', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace('timeout: 0.1s', 'timeout: 5s')),
    /grpc_service\.timeout: 5s holds every request back that long/);
});

test('ext_authz over HTTP, or a transport other than V3, fails', () => {
  expectProblem(checkEdited('bootstrap', (doc) => {
    const f = extAuthzFilter(doc);
    delete f.grpc_service;
    f.http_service = { server_uri: { uri: 'http://127.0.0.1:8081', cluster: 'sluice', timeout: '0.1s' } };
  }, true), /http_service: Sluice serves ext_authz over gRPC/);
  expectProblem(checkEdited('bootstrap', (doc) => {
    extAuthzFilter(doc).transport_api_version = 'AUTO';
  }, true), /transport_api_version must be V3 \(Sluice serves envoy\.service\.auth\.v3\)/);
});

test('an ext_authz or access-log cluster that does not exist fails', () => {
  expectProblem(checkEdited('bootstrap', (doc) => {
    extAuthzFilter(doc).grpc_service.envoy_grpc.cluster_name = 'sluiced';
  }, true), /grpc_service\.envoy_grpc: cluster_name "sluiced" is not a cluster of static_resources/);
  const r = checkEdited('bootstrap', (doc) => {
    hcm(doc).access_log[0].typed_config.common_config.grpc_service.envoy_grpc.cluster_name = 'sluice_als';
  }, true);
  expectProblem(r, /common_config\.grpc_service\.envoy_grpc: cluster_name "sluice_als" is not a cluster/);
  expectProblem(r, /no envoy\.access_loggers\.http_grpc access log to the ext_authz cluster \(sluice\)/);
});

test('a Sluice cluster without HTTP/2 fails for both services', () => {
  const r = checkEdited('bootstrap', (doc) => {
    delete doc.static_resources.clusters.find((c) => c.name === 'sluice').typed_extension_protocol_options;
  }, true);
  expectProblem(r, /cluster sluice: external authorization is gRPC; the cluster needs HTTP\/2/);
  expectProblem(r, /cluster sluice: the access-log service is gRPC; the cluster needs HTTP\/2/);
});

test('no access log to Sluice fails: outcomes would never arrive', () => {
  expectProblem(checkEdited('bootstrap', (doc) => {
    delete hcm(doc).access_log;
  }, true), /no envoy\.access_loggers\.http_grpc access log to the ext_authz cluster .*never learn how admitted calls ended/);
});

test('an access log at V2, or filtered on other metadata, fails', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace('log_name: edge\n                        transport_api_version: V3',
    'log_name: edge\n                        transport_api_version: AUTO')),
  /common_config\.transport_api_version must be V3 \(Sluice serves envoy\.service\.accesslog\.v3\)/);
  expectProblem(checkEdited('bootstrap', (t) => t.replace('filter: envoy.filters.http.ext_authz', 'filter: envoy.filters.http.ratelimit')),
    /metadata_filter: selects envoy\.filters\.http\.ratelimit \[sluice_permits\], not the permits/);
});

test('a health route that asks Sluice fails', () => {
  expectProblem(checkEdited('bootstrap', (doc) => {
    delete routeTo(doc, '/healthz').typed_per_filter_config;
  }, true), /health-check route path \/healthz asks Sluice; disable ext_authz there/);
});

test('a per-route config under a key that is not an HTTP filter fails', () => {
  const r = checkEdited('bootstrap', (doc) => {
    const route = routeTo(doc, '/api/search');
    route.typed_per_filter_config = { 'envoy.filters.http.extauthz': route.typed_per_filter_config['envoy.filters.http.ext_authz'] };
  }, true);
  expectProblem(r, /"envoy\.filters\.http\.extauthz" is not the name of an HTTP filter of this connection manager/);
  // Without its config the route names no policy.
  expectProblem(r, /route prefix \/api\/search sets no context_extensions sluice_dependency/);
});

// --- against the policies

test('context_extensions of the virtual host and the route merge, the route\'s winning', () => {
  // The virtual host names "search" for every route; a route that only sets
  // sluice_key still names "search" (which has no per_key), and the others
  // keep their own names.
  const r = checkEdited('bootstrap', (doc) => {
    const vhost = hcm(doc).route_config.virtual_hosts[0];
    vhost.typed_per_filter_config = {
      'envoy.filters.http.ext_authz': {
        '@type': 'type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute',
        check_settings: { context_extensions: { sluice_dependency: 'search' } },
      },
    };
    delete perRoute(doc, '/api/inventory').check_settings.context_extensions.sluice_dependency;
    perRoute(doc, '/api/inventory').check_settings.context_extensions.sluice_key = 'k';
  }, true);
  expectProblem(r, /sluice_key "k" names a key of policy "search", which has no per_key/);
  expectProblem(r, /policy "inventory" is named by no route's sluice_dependency/);
  assert.match(r.lines.join('\n'), /route prefix \/api\/reports\/export -> reports key "export"/);
  assert.doesNotMatch(r.lines.join('\n'), /healthz ->/);
});

test('a sluice_dependency that names no policy fails, and so does the policy it left', () => {
  const r = checkEdited('bootstrap', (t) => t.replace('sluice_dependency: search', 'sluice_dependency: serach'));
  expectProblem(r, /context_extensions sluice_dependency "serach" is not a policy of .*policies-ext-authz\.yaml/);
  expectProblem(r, /policy "search" is named by no route's sluice_dependency/);
});

test('a sluice_key on a policy without per_key fails', () => {
  expectProblem(checkEdited('policies', (doc) => {
    delete doc.policies.find((p) => p.name === 'reports').per_key;
  }, true), /sluice_key "export" names a key of policy "reports", which has no per_key/);
});

test('a route that outlives its permits, access-log flush included, fails', () => {
  // 1s + 0.25s is within search's 2 x 800ms; 1.5s + 0.25s is not.
  expectProblem(checkEdited('bootstrap', (t) => t.replace('timeout: 1s', 'timeout: 1.5s')),
    /route prefix \/api\/search may wait 1\.5s \(\+ 0\.25s access-log flush\) for a call whose permit for policy "search" expires after 2 x call_timeout = 1\.6s/);
  expectProblem(checkEdited('bootstrap', (t) => t.replace('buffer_flush_interval: 0.25s', 'buffer_flush_interval: 1s')),
    /route prefix \/api\/search may wait 1s \(\+ 1s access-log flush\)/);
});

test('a fallback status outside 200..599 fails', () => {
  expectProblem(checkEdited('policies', (t) => t.replace('http_status: 200', 'http_status: 99')),
    /"inventory": fallback\.http_status 99 must be 0 \(= 200\) or 200\.\.599/);
  expectProblem(checkEdited('policies', (t) => t.replace('http_status: 200', 'http_status: "200"')),
    /fallback\.http_status/);
});

test('a bootstrap with neither ratelimit nor ext_authz fails', () => {
  expectProblem(checkEdited('bootstrap', (doc) => {
    const h = hcm(doc);
    h.http_filters = h.http_filters.filter((f) => f.name !== 'envoy.filters.http.ext_authz');
  }, true), /neither an envoy\.filters\.http\.ratelimit nor an envoy\.filters\.http\.ext_authz filter/);
});
