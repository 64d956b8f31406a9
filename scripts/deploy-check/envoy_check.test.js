// SPDX-License-Identifier: Apache-2.0
// Tests of envoy_check.js: deploy/envoy and proto/envoy as committed pass,
// and each kind of mistake the check exists for fails, on a broken copy.
// The Lua filter's reports are also run under LuaJIT (Envoy's Lua) with a
// stand-in for Envoy's stream handle, when luajit is installed.
// Run: node --test scripts/deploy-check/ (scripts/lint-deploy does).
'use strict';

const assert = require('node:assert');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { test } = require('node:test');
const yaml = require('js-yaml');

const { run, crossCheck, loadSluice } = require('./envoy_check');
const { loadEnvoyApi } = require('./envoy_protos');
const { ProtoJsonChecker } = require('./proto_json');

const root = path.resolve(__dirname, '..', '..');
const files = {
  bootstrap: path.join(root, 'deploy', 'envoy', 'envoy.yaml'),
  policies: path.join(root, 'deploy', 'envoy', 'policies.yaml'),
  protos: path.join(root, 'proto'),
};
const api = loadEnvoyApi();

function tmpdir() {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'envoy-check-'));
}

// Runs the check with `which` (bootstrap or policies) replaced by a copy
// edited by `edit`: a function of the text, or of the parsed document when
// `parsed` is set.
function checkEdited(which, edit, parsed = false) {
  const dir = tmpdir();
  const before = fs.readFileSync(files[which], 'utf8');
  let after;
  if (parsed) {
    const doc = yaml.load(before);
    edit(doc);
    after = yaml.dump(doc, { lineWidth: -1 });
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

function filter(doc, name) {
  return hcm(doc).http_filters.find((f) => f.name === name);
}

function cluster(doc, name) {
  return doc.static_resources.clusters.find((c) => c.name === name);
}

function routeTo(doc, prefix) {
  return hcm(doc).route_config.virtual_hosts[0].routes.find((r) => r.match.prefix === prefix);
}

test('deploy/envoy and proto/envoy as committed pass', () => {
  const r = run(files, api);
  assert.deepStrictEqual(r.problems, []);
  const out = r.lines.join('\n');
  // Every route and both ways of the x-tenant header land on a policy.
  for (const want of [
    /\("destination_cluster", "inventory"\)\] \(route prefix \/api\/inventory\) -> inventory$/m,
    /when x-tenant header is "vip"\) -> search-vip$/m,
    /when x-tenant header is any other value\) -> search-per-tenant$/m,
    /\[\("api", "reports"\), \("tenant", <x-tenant header>\)\] .* -> reports-per-tenant$/m,
    /\[\("api", "reports"\)\] .* -> reports-anonymous$/m,
    /-> edge-default$/m,
  ]) {
    assert.match(out, want);
  }
  assert.match(out, /30 messages, 80 fields, 5 enums, 26 enum values, 3 service\(s\) compared, 0 difference\(s\)/);
});

test('the command line exits 0 on the committed files and 1 on a broken copy', () => {
  const cli = path.join(__dirname, 'envoy_check.js');
  const ok = spawnSync(process.execPath, [cli, '--quiet'], { encoding: 'utf8' });
  assert.strictEqual(ok.status, 0, ok.stdout + ok.stderr);
  assert.match(ok.stdout, /envoy-check: 0 problem\(s\)/);
  const dir = tmpdir();
  const copy = path.join(dir, 'envoy.yaml');
  fs.writeFileSync(copy, fs.readFileSync(files.bootstrap, 'utf8').replace('stat_prefix: edge', 'stat_prefx: edge'));
  const bad = spawnSync(process.execPath, [cli, '--quiet', '--bootstrap', copy], { encoding: 'utf8' });
  fs.rmSync(dir, { recursive: true, force: true });
  assert.strictEqual(bad.status, 1, bad.stdout + bad.stderr);
  assert.match(bad.stdout, /PROBLEM .*unknown field "stat_prefx" in envoy\.extensions\.filters\.network\.http_connection_manager\.v3\.HttpConnectionManager \(did you mean "stat_prefix"\?\)/);
});

// --- the bootstrap against Envoy's protos

test('a misspelled field inside a typed_config fails', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace('failure_mode_deny:', 'failure_mode_denied:')),
    /http_filters\[0\]\.typed_config\.failure_mode_denied: unknown field .* in envoy\.extensions\.filters\.http\.ratelimit\.v3\.RateLimit/);
});

test('a typed_config whose @type names no Envoy message fails', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace('lua.v3.Lua', 'lua.v3.LuaFilter')),
    /"type\.googleapis\.com\/envoy\.extensions\.filters\.http\.lua\.v3\.LuaFilter": no message/);
});

test('a field from the wrong message fails: rate_limits belongs to the route action', () => {
  expectProblem(checkEdited('bootstrap', (doc) => {
    const r = routeTo(doc, '/api/inventory');
    r.rate_limits = r.route.rate_limits;
    delete r.route.rate_limits;
  }, true), /routes\[0\]\.rate_limits: unknown field "rate_limits" in envoy\.config\.route\.v3\.Route/);
});

test('a value of the wrong type fails', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace('timeout: 0.05s', 'timeout: 50ms')),
    /typed_config\.timeout: must be a duration in seconds such as "0\.25s", got string "50ms"/);
  expectProblem(checkEdited('bootstrap', (t) => t.replace('port_value: 50051', 'port_value: 70000')),
    /port_value: must be <= 65535, got 70000/);
});

test('a header name with a line break fails (validate rule)', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace('header_name: x-tenant', 'header_name: "x-ten\\nant"')),
    /request_headers\.header_name: "x-ten\\nant" is not an HTTP header name/);
});

test('two clusters of one name fail', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace('- name: search\n', '- name: inventory\n')),
    /clusters\[1\]: cluster name "inventory" is used twice/);
});

test('an enum value Envoy does not define fails', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace('type: STATIC', 'type: STATICAL')),
    /clusters\[0\]\.type: "STATICAL" is not a value of envoy\.config\.cluster\.v3\.Cluster\.DiscoveryType/);
});

test('a field the protos mark required (validate rules) fails when left out', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace(/\n {10}healthy_threshold: 1/, '')),
    /clusters\[3\]\.health_checks\[0\]\.healthy_threshold: is required/);
  expectProblem(checkEdited('bootstrap', (doc) => {
    delete filter(doc, 'envoy.filters.http.ratelimit').typed_config.domain;
  }, true), /typed_config\.domain: must be at least 1 character\(s\) \(the field is left out/);
});

test('two members of a oneof fail', () => {
  expectProblem(checkEdited('bootstrap', (doc) => {
    routeTo(doc, '/api/inventory').route.rate_limits[0].actions[0].generic_key = { descriptor_value: 'x' };
  }, true), /sets destination_cluster and generic_key, which are one of envoy\.config\.route\.v3\.RateLimit\.Action\.action_specifier/);
});

test('a deprecated field fails', () => {
  expectProblem(checkEdited('bootstrap', (doc) => {
    routeTo(doc, '/api/search').route.include_vh_rate_limits = true;
  }, true), /envoy\.config\.route\.v3\.RouteAction\.include_vh_rate_limits is deprecated/);
});

// --- what Envoy checks at start-up

test('a rate-limit service cluster that does not exist fails', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace('cluster_name: sluice\n', 'cluster_name: sluiced\n')),
    /envoy_grpc: cluster_name "sluiced" is not a cluster of static_resources/);
});

test('a rate-limit service cluster without HTTP/2 fails', () => {
  expectProblem(checkEdited('bootstrap', (doc) => {
    delete cluster(doc, 'sluice').typed_extension_protocol_options;
  }, true), /cluster sluice: the rate-limit service is gRPC; the cluster needs HTTP\/2/);
});

test('a health check on another gRPC service name fails', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace(
    'service_name: envoy.service.ratelimit.v3.RateLimitService', 'service_name: sluice.v1.DecisionServic')),
  /grpc_health_check\.service_name "sluice\.v1\.DecisionServic" is not a service Sluice reports on/);
});

test('an RLS transport other than V3 fails', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace('transport_api_version: V3', 'transport_api_version: V2')),
    /transport_api_version must be V3/);
});

test('failing closed fails', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace('failure_mode_deny: false', 'failure_mode_deny: true')),
    /failure_mode_deny: true refuses every request while Sluice is unreachable/);
});

test('a router that is not the last HTTP filter fails', () => {
  expectProblem(checkEdited('bootstrap', (doc) => {
    const filters = hcm(doc).http_filters;
    filters.unshift(filters.pop());
  }, true), /the last HTTP filter must be the router \(got envoy\.filters\.http\.router, envoy\.filters\.http\.ratelimit, envoy\.filters\.http\.lua\)/);
});

test('a filter named for another extension than its @type fails', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace('- name: envoy.filters.http.lua', '- name: envoy.filters.http.wasm')),
    /a filter with a envoy\.extensions\.filters\.http\.lua\.v3\.Lua config is named "envoy\.filters\.http\.wasm"/);
});

test('protocol options under a key other than their type fail', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace(
    '        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:', '        envoy.upstreams.http.http_protocol_options:')),
  /key "envoy\.upstreams\.http\.http_protocol_options" holds a envoy\.extensions\.upstreams\.http\.v3\.HttpProtocolOptions/);
});

test('a route to a cluster that does not exist fails', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace('cluster: inventory\n', 'cluster: inventroy\n')),
    /routes\[0\]\.route: cluster "inventroy" is not a cluster of static_resources/);
});

// --- the Lua filter, statically

test('Lua that does not parse fails', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace('    return\n', '    retrun\n')),
    /default_source_code: Lua does not parse/);
});

test('a report to a cluster that does not exist fails', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace('local REPORT_CLUSTER = "sluice_http"', 'local REPORT_CLUSTER = "sluice-http"')),
    /httpCall\(\) names cluster "sluice-http" is not a cluster of static_resources/);
});

test('a synchronous report fails', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace('REPORT_TIMEOUT_MS, true)', 'REPORT_TIMEOUT_MS, false)')),
    /httpCall\(sluice_http, \.\.\.\) is not asynchronous/);
});

test('a Lua filter reading another metadata namespace fails', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace(':get("envoy.filters.http.ratelimit")', ':get("envoy.filters.http.rate_limit")')),
    /does not read the "envoy\.filters\.http\.ratelimit" dynamic metadata/);
});

// --- descriptors against policies

test('a route descriptor no policy claims fails, and so does the policy it left', () => {
  const r = checkEdited('bootstrap', (t) => t.replace('descriptor_key: api', 'descriptor_key: service'));
  expectProblem(r, /descriptor \[\("service", "reports"\)\] \(route prefix \/api\/reports\) in domain "edge" matches no policy/);
  expectProblem(r, /policy "reports-anonymous" envoy_descriptors\[0\] \[\("api", "reports"\)\] is produced by no route/);
});

test('a header value that only the any-value policy could take fails without it', () => {
  // Without search-per-tenant, only x-tenant: vip has a policy.
  const r = checkEdited('policies', (doc) => {
    doc.policies = doc.policies.filter((p) => p.name !== 'search-per-tenant');
  }, true);
  expectProblem(r, /\("tenant", <x-tenant header>\)\] \(route prefix \/api\/search, when x-tenant header is any other value\) in domain "edge" matches no policy/);
  assert.ok(!r.problems.some((p) => /is "vip"/.test(p)), r.problems.join('\n'));
});

test('skip_if_absent produces the shorter descriptor too', () => {
  const r = checkEdited('policies', (doc) => {
    doc.policies = doc.policies.filter((p) => p.name !== 'reports-anonymous');
  }, true);
  expectProblem(r, /descriptor \[\("api", "reports"\)\] \(route prefix \/api\/reports\) in domain "edge" matches no policy/);
});

test('a policy in a domain no filter uses fails', () => {
  const r = checkEdited('policies', (doc) => {
    doc.policies.find((p) => p.name === 'edge-default').envoy_descriptors[0].domain = 'edge-v2';
  }, true);
  expectProblem(r, /domain "edge-v2" is not the domain of any rate-limit filter/);
  expectProblem(r, /\[\("generic_key", "default"\)\] \(route prefix \/\) in domain "edge" matches no policy/);
});

test('a route that outlives its permits fails', () => {
  expectProblem(checkEdited('bootstrap', (t) => t.replace('timeout: 2s', 'timeout: 10s')),
    /route prefix \/api\/inventory may wait 10s for a call whose permit for policy "inventory" expires after 2 x call_timeout = 4s/);
});

test('Sluice\'s matching rule: an exact value is taken with no way back', () => {
  // [a=1, b=2] follows the exact edge a=1, where only b=3 continues; the
  // any-value edge a=* would have matched, but Sluice does not backtrack.
  const policies = [
    { name: 'exact', envoy_descriptors: [{ domain: 'd', entries: [{ key: 'a', value: '1' }, { key: 'b', value: '3' }] }] },
    { name: 'any', per_key: true, envoy_descriptors: [{ domain: 'd', entries: [{ key: 'a' }, { key: 'b', value: '2' }] }] },
  ];
  const boot = {
    rateLimitFilters: [{ domain: 'd' }],
    descriptors: [
      { domain: 'd', route: 'r1', entries: [{ key: 'a', value: '1' }, { key: 'b', value: '2' }] },
      { domain: 'd', route: 'r2', entries: [{ key: 'a', value: '9' }, { key: 'b', value: '2' }] },
      { domain: 'd', route: 'r3', entries: [{ key: 'a', value: '1' }, { key: 'b', value: '3' }] },
    ],
  };
  const r = crossCheck(boot, policies, 'b.yaml', 'p.yaml');
  assert.deepStrictEqual(r.report, [
    '[("a", "9"), ("b", "2")] (route r2) -> any',
    '[("a", "1"), ("b", "3")] (route r3) -> exact',
  ]);
  assert.strictEqual(r.problems.length, 1, r.problems.join('\n'));
  assert.match(r.problems[0], /\[\("a", "1"\), \("b", "2"\)\] \(route r1\) in domain "d" matches no policy/);
});

// --- the policies file against policy.proto and Sluice's rules

test('an any-value entry on a policy without per_key fails', () => {
  expectProblem(checkEdited('policies', (doc) => {
    delete doc.policies.find((p) => p.name === 'reports-per-tenant').per_key;
  }, true), /"reports-per-tenant": envoy_descriptors\[0\]\.entries\[1\] matches any value of "tenant".*needs per_key: true/);
});

test('a descriptor claimed by two policies fails', () => {
  expectProblem(checkEdited('policies', (t) => t.replace('- { key: tenant, value: vip }', '- { key: tenant }')),
    /"search-vip": envoy_descriptors\[0\]: the same descriptor is claimed by policy "search-per-tenant"/);
});

test('an unknown policy field or a bad duration fails', () => {
  expectProblem(checkEdited('policies', (t) => t.replace('max_in_flight: 50', 'max_inflight: 50')),
    /policies\[0\]\.concurrency\.max_inflight: unknown field "max_inflight" in sluice\.v1\.Concurrency \(did you mean "max_in_flight"\?\)/);
  expectProblem(checkEdited('policies', (t) => t.replace('call_timeout: 800ms', 'call_timeout: 800')),
    /policies\[1\]\.call_timeout: must be a duration such as "250ms" or "15s", got number 800/);
});

// --- proto/envoy against Envoy's definitions

// Runs the check on a copy of proto/ with `file` edited.
function checkProtoEdit(file, from, to) {
  const dir = tmpdir();
  fs.cpSync(files.protos, dir, { recursive: true });
  const target = path.join(dir, file);
  const before = fs.readFileSync(target, 'utf8');
  const after = before.replace(from, to);
  assert.notStrictEqual(after, before, `the edit of ${file} changed nothing`);
  fs.writeFileSync(target, after);
  try {
    return run({ ...files, protos: dir }, api);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

test('a field number that differs from Envoy\'s fails', () => {
  expectProblem(checkProtoEdit('envoy/service/ratelimit/v3/rls.proto', 'bytes raw_body = 5;', 'bytes raw_body = 8;'),
    /envoy\.service\.ratelimit\.v3\.RateLimitResponse\.raw_body: ours is bytes = 8, the reference is bytes = 5/);
});

test('a field type that differs from Envoy\'s fails', () => {
  expectProblem(checkProtoEdit('envoy/service/ratelimit/v3/rls.proto', 'uint32 limit_remaining = 3;', 'uint64 limit_remaining = 3;'),
    /DescriptorStatus\.limit_remaining: ours is uint64 = 3, the reference is uint32 = 3/);
  expectProblem(checkProtoEdit('envoy/config/core/v3/base.proto', 'string value = 2;', 'repeated string value = 2;'),
    /HeaderValue\.value: ours is repeated string = 2, the reference is string = 2/);
});

test('a field Envoy does not define fails', () => {
  expectProblem(checkProtoEdit('envoy/service/ratelimit/v3/rls.proto', 'uint32 hits_addend = 3;', 'uint32 hits_addend = 3;\n  string tenant = 9;'),
    /RateLimitRequest\.tenant: not in the reference envoy\.service\.ratelimit\.v3\.RateLimitRequest/);
});

test('a newer-than-snapshot field must keep its upstream shape', () => {
  expectProblem(checkProtoEdit('envoy/extensions/common/ratelimit/v3/ratelimit.proto',
    'google.protobuf.UInt64Value hits_addend = 3;', 'google.protobuf.UInt32Value hits_addend = 3;'),
  /RateLimitDescriptor\.hits_addend: ours is google\.protobuf\.UInt32Value = 3, upstream is google\.protobuf\.UInt64Value = 3/);
  expectProblem(checkProtoEdit('envoy/type/v3/ratelimit_unit.proto', 'WEEK = 7;', 'WEEK = 8;'),
    /RateLimitUnit\.WEEK = 8: upstream is 7/);
});

test('an enum value or method that differs from Envoy\'s fails', () => {
  expectProblem(checkProtoEdit('envoy/service/ratelimit/v3/rls.proto', 'OVER_LIMIT = 2;', 'OVER_LIMIT = 3;'),
    /RateLimitResponse\.Code\.OVER_LIMIT: ours is 3, the reference is 2/);
  expectProblem(checkProtoEdit('envoy/service/ratelimit/v3/rls.proto',
    'rpc ShouldRateLimit(RateLimitRequest) returns (RateLimitResponse)',
    'rpc ShouldRateLimit(RateLimitRequest) returns (stream RateLimitResponse)'),
  /RateLimitService\.ShouldRateLimit: ours is .* returns \(stream /);
});

// --- the Lua filter, run under LuaJIT

// A Lua string literal for any bytes: every byte as a decimal escape.
function luaString(s) {
  return '"' + [...Buffer.from(s, 'utf8')].map((b) => `\\${b}`).join('') + '"';
}

function luaValue(v) {
  if (v === null || v === undefined) return 'nil';
  if (typeof v === 'string') return luaString(v);
  if (Array.isArray(v)) return `{${v.map(luaValue).join(', ')}}`;
  return `{${Object.entries(v).map(([k, x]) => `[${luaString(k)}] = ${luaValue(x)}`).join(', ')}}`;
}

// Runs the bootstrap's Lua filter on one response; returns the httpCall()s
// it made, each {cluster, headers, body, timeout, async}.
function runLua(luajit, { status, upstreamMs, metadata }) {
  const doc = yaml.load(fs.readFileSync(files.bootstrap, 'utf8'));
  const source = filter(doc, 'envoy.filters.http.lua').typed_config.default_source_code.inline_string;
  const dir = tmpdir();
  const script = path.join(dir, 'filter.lua');
  fs.writeFileSync(script, source);
  // The stand-in: the parts of Envoy's response handle the filter uses.
  const harness = `
    local headers = { [":status"] = ${luaValue(status)},
                      ["x-envoy-upstream-service-time"] = ${luaValue(upstreamMs)} }
    local metadata = ${luaValue(metadata)}
    local handle = {}
    function handle:headers() return { get = function(_, name) return headers[name] end } end
    function handle:streamInfo()
      return { dynamicMetadata = function()
        return { get = function(_, ns)
          if ns == "envoy.filters.http.ratelimit" then return metadata end
          return nil
        end }
      end }
    end
    function handle:httpCall(cluster, h, body, timeout, async)
      local names = {}
      for k in pairs(h) do names[#names + 1] = k end
      table.sort(names)
      io.write("CALL\\t", cluster, "\\t", tostring(timeout), "\\t", tostring(async), "\\n")
      for _, k in ipairs(names) do io.write("HEADER\\t", k, "\\t", h[k], "\\n") end
      io.write("BODY\\t", body, "\\n")
    end
    dofile(${luaString(script)})
    envoy_on_response(handle)
  `;
  const r = spawnSync(luajit, ['-'], { input: harness, encoding: 'utf8' });
  fs.rmSync(dir, { recursive: true, force: true });
  assert.strictEqual(r.status, 0, r.stderr);
  const calls = [];
  for (const line of r.stdout.split('\n').filter(Boolean)) {
    const [kind, a, b, c] = line.split('\t');
    if (kind === 'CALL') calls.push({ cluster: a, timeout: Number(b), async: c === 'true', headers: {} });
    else if (kind === 'HEADER') calls[calls.length - 1].headers[a] = b;
    else if (kind === 'BODY') calls[calls.length - 1].body = JSON.parse(line.slice(5));
  }
  return calls;
}

const luajit = ['/usr/bin/luajit', '/usr/local/bin/luajit'].find((p) => fs.existsSync(p));

test('the Lua filter reports each permit, escaped, without waiting', { skip: !luajit && 'luajit not installed' }, () => {
  const tricky = 'we"ird\\dep\n\t\u0001\u007f é €';
  const calls = runLua(luajit, {
    status: '200',
    upstreamMs: '12',
    metadata: {
      sluice_permits: [
        { dependency: 'inventory', key: '', permit_id: '8413457393' },
        { dependency: 'search-per-tenant', key: tricky, permit_id: '77@replica-2' },
      ],
    },
  });
  assert.strictEqual(calls.length, 2);
  for (const c of calls) {
    assert.strictEqual(c.cluster, 'sluice_http');
    assert.strictEqual(c.async, true);
    assert.ok(c.timeout > 0);
    assert.deepStrictEqual(c.headers, {
      ':authority': 'sluice', ':method': 'POST', ':path': '/v1/report', 'content-type': 'application/json',
    });
  }
  assert.deepStrictEqual(calls[0].body,
    { dependency: 'inventory', key: '', permitId: '8413457393', outcome: 'SUCCESS', latency: '0.012s' });
  assert.deepStrictEqual(calls[1].body,
    { dependency: 'search-per-tenant', key: tricky, permitId: '77@replica-2', outcome: 'SUCCESS', latency: '0.012s' });
  // The body is sluice.v1.ReportResultRequest in the proto3 JSON mapping,
  // which is what POST /v1/report parses.
  const report = new ProtoJsonChecker(loadSluice(files.protos));
  for (const c of calls) {
    assert.deepStrictEqual(report.check('sluice.v1.ReportResultRequest', c.body), []);
  }
});

test('the Lua filter reports a 5xx as FAILURE, and no latency without an upstream call', { skip: !luajit && 'luajit not installed' }, () => {
  const permit = { sluice_permits: [{ dependency: 'inventory', key: '', permit_id: '1' }] };
  assert.deepStrictEqual(runLua(luajit, { status: '503', upstreamMs: null, metadata: permit })[0].body,
    { dependency: 'inventory', key: '', permitId: '1', outcome: 'FAILURE' });
  assert.strictEqual(runLua(luajit, { status: '500', upstreamMs: '1500', metadata: permit })[0].body.latency, '1.500s');
  assert.strictEqual(runLua(luajit, { status: '404', upstreamMs: '3', metadata: permit })[0].body.outcome, 'SUCCESS');
});

test('the Lua filter reports nothing without Sluice\'s permits', { skip: !luajit && 'luajit not installed' }, () => {
  assert.deepStrictEqual(runLua(luajit, { status: '200', upstreamMs: '5', metadata: null }), []);
  assert.deepStrictEqual(runLua(luajit, { status: '200', upstreamMs: '5', metadata: { other: 'x' } }), []);
});
