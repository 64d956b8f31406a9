#!/usr/bin/env node
// SPDX-License-Identifier: Apache-2.0
// Checks deploy/envoy/envoy.yaml (an Envoy v3 bootstrap), the Sluice policies
// file it goes with, and Sluice's copies of Envoy's rate-limit protos:
//
//   1. The bootstrap is a valid envoy.config.bootstrap.v3.Bootstrap against
//      Envoy's own .proto files (see envoy_protos.js): unknown fields, types,
//      enums, oneofs, every typed_config "@type" resolved and its body
//      checked against that message, the protoc-gen-validate rules the
//      protos carry, and no deprecated field (proto_json.js).
//   2. What the protos cannot say, as Envoy would judge it at start-up:
//      unique names, every cluster a route, the rate-limit service, a
//      health check or the Lua script names exists, a gRPC cluster speaks
//      HTTP/2, the router is the last HTTP filter, a filter's name fits its
//      @type, typed_extension_protocol_options keys name their @type. The
//      Lua source is parsed as Lua 5.1 (LuaJIT's dialect, luaparse).
//   3. The policies file is a valid sluice.v1.PolicySet (our policy.proto,
//      Sluice's duration spelling) that Sluice's validation would take: a
//      per_key policy for every any-value entry, 1..8 entries, no
//      descriptor claimed twice.
//   4. Cross-check: every descriptor the route actions can produce (header
//      and address values as placeholders, each skip_if_absent both ways)
//      lands on exactly one policy under the rate-limit filter's domain by
//      Sluice's matching rule (entry by entry, an exact key and value
//      before an any-value entry, no backtracking; rpc/rate_limit_service.cc
//      DescriptorIndex), every policy descriptor in that domain is produced
//      by some route, and a route to a policy that hands out permits
//      (breaker or in-flight cap) times out within 2 x the policy's
//      call_timeout, so its report arrives before the permit expires.
//   5. proto/envoy/**/*.proto matches Envoy's definitions: same messages,
//      field names, numbers, types and labels, enum values and methods.
//   6. A bootstrap with the external authorization filter and the gRPC
//      access log instead (no Lua): the checks of ext_authz_check.js, and
//      its routes' sluice_dependency names against the policies.
//
// Usage: node envoy_check.js [--bootstrap FILE] [--policies FILE]
//                            [--protos DIR] [--quiet]
// Without --bootstrap and --policies, both pairs of the repository are
// checked: deploy/envoy/envoy.yaml with deploy/envoy/policies.yaml (the
// rate-limit service and Lua) and deploy/envoy/envoy-ext-authz.yaml with
// deploy/envoy/policies-ext-authz.yaml (ext_authz and the access-log
// service, ext_authz_check.js); --protos defaults to proto/. Exit status: 0 all valid, 1 a
// problem found, 2 bad usage.
'use strict';

const fs = require('fs');
const path = require('path');
const protobuf = require('protobufjs');
const yaml = require('js-yaml');
const luaparse = require('luaparse');
const { ProtoJsonChecker, parseJsonDuration, parseUnitDuration, durationSeconds } =
  require('./proto_json');
const { loadEnvoyApi, loadOurs, compareProtos } = require('./envoy_protos');
const extAuthz = require('./ext_authz_check');

const RLS_SERVICE = 'envoy.service.ratelimit.v3.RateLimitService';
const RATELIMIT_NAMESPACE = 'envoy.filters.http.ratelimit';
// Canonical names of the extensions this bootstrap uses, by config type.
const EXTENSION_NAMES = {
  'envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager':
    'envoy.filters.network.http_connection_manager',
  'envoy.extensions.filters.http.ratelimit.v3.RateLimit': 'envoy.filters.http.ratelimit',
  'envoy.extensions.filters.http.lua.v3.Lua': 'envoy.filters.http.lua',
  'envoy.extensions.filters.http.router.v3.Router': 'envoy.filters.http.router',
  [extAuthz.EXT_AUTHZ]: 'envoy.filters.http.ext_authz',
  [extAuthz.HTTP_GRPC_LOG]: 'envoy.access_loggers.http_grpc',
};
const HCM = 'envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager';
const HTTP_OPTIONS = 'envoy.extensions.upstreams.http.v3.HttpProtocolOptions';
// Sluice's limits on envoy_descriptors (server/policy/policy_convert.cc).
const MAX_ENTRIES = 8;
// Defaults that matter to the permit check.
const DEFAULT_ROUTE_TIMEOUT_S = 15;
const DEFAULT_CALL_TIMEOUT_S = 1;

function typeOf(any) {
  return any && typeof any['@type'] === 'string' ? any['@type'].slice(any['@type'].lastIndexOf('/') + 1) : '';
}

function list(v) {
  return Array.isArray(v) ? v : [];
}

function loadYaml(file) {
  const text = fs.readFileSync(file, 'utf8');
  // js-yaml refuses duplicate keys and more than one document here.
  return yaml.load(text, { filename: file });
}

function describeEntries(entries) {
  return '[' + entries.map((e) => `(${JSON.stringify(e.key)}, ` +
    (e.value !== undefined ? JSON.stringify(e.value) : `<${e.placeholder}>`) + ')').join(', ') + ']';
}

// ---------------------------------------------------------------------------
// Lua

function walkLua(node, visit) {
  if (!node || typeof node !== 'object') return;
  if (Array.isArray(node)) {
    node.forEach((n) => walkLua(n, visit));
    return;
  }
  if (typeof node.type === 'string') visit(node);
  for (const [k, v] of Object.entries(node)) {
    if (k !== 'type' && v && typeof v === 'object') walkLua(v, visit);
  }
}

// Parses a Lua filter's source; returns {problems, clusters, strings}:
// the clusters its httpCall()s name (string literals, or locals bound to
// one) and every string literal it holds.
function checkLua(source, where) {
  const problems = [];
  let ast;
  try {
    ast = luaparse.parse(source, { luaVersion: '5.1', encodingMode: 'pseudo-latin1' });
  } catch (e) {
    return { problems: [`${where}: Lua does not parse: ${e.message}`], clusters: [], strings: null };
  }
  const constants = new Map();
  const strings = [];
  const globals = new Set();
  const calls = [];
  walkLua(ast, (n) => {
    if (n.type === 'StringLiteral') strings.push(n.value);
    if (n.type === 'LocalStatement') {
      n.variables.forEach((v, i) => {
        const init = n.init[i];
        if (init && init.type === 'StringLiteral') constants.set(v.name, init.value);
      });
    }
    if (n.type === 'FunctionDeclaration' && !n.isLocal && n.identifier &&
        n.identifier.type === 'Identifier') {
      globals.add(n.identifier.name);
    }
    if (n.type === 'CallExpression' && n.base.type === 'MemberExpression' &&
        n.base.indexer === ':' && n.base.identifier.name === 'httpCall') {
      calls.push(n);
    }
  });
  if (!globals.has('envoy_on_request') && !globals.has('envoy_on_response')) {
    problems.push(`${where}: defines neither envoy_on_request nor envoy_on_response`);
  }
  const clusters = [];
  for (const call of calls) {
    const arg = call.arguments[0];
    let cluster = null;
    if (arg && arg.type === 'StringLiteral') cluster = arg.value;
    if (arg && arg.type === 'Identifier' && constants.has(arg.name)) cluster = constants.get(arg.name);
    if (cluster === null) {
      problems.push(`${where}: line ${call.loc ? call.loc.start.line : '?'}: httpCall's cluster ` +
        'is not a string constant this check can follow');
    } else {
      clusters.push(cluster);
    }
    if (call.arguments.length !== 5 || call.arguments[4].type !== 'BooleanLiteral' ||
        call.arguments[4].value !== true) {
      problems.push(`${where}: httpCall(${cluster}, ...) is not asynchronous ` +
        '(5th argument true): the client would wait for the report');
    }
  }
  return { problems, clusters, strings };
}

// ---------------------------------------------------------------------------
// The bootstrap

// Every descriptor one rate_limits entry can produce: a list of variants,
// each a list of entries {key, value} or {key, placeholder}. An action that
// may drop its entry (skip_if_absent) doubles the variants.
function descriptorVariants(rateLimit, route, node, where, problems) {
  let variants = [[]];
  const add = (entry, optional) => {
    const next = [];
    for (const v of variants) {
      next.push([...v, entry]);
      if (optional) next.push(v);
    }
    variants = next;
  };
  for (const [i, action] of list(rateLimit.actions).entries()) {
    const at = `${where}.actions[${i}]`;
    const kind = Object.keys(action)[0];
    const a = action[kind] || {};
    switch (kind) {
      case 'destination_cluster':
        if (typeof route.cluster !== 'string') {
          problems.push(`${at}: destination_cluster needs a route with a fixed \`cluster\` ` +
            'for this check to know the value');
          return [];
        }
        add({ key: 'destination_cluster', value: route.cluster }, false);
        break;
      case 'source_cluster':
        add({ key: 'source_cluster', value: (node && node.cluster) || '' }, false);
        break;
      case 'generic_key':
        add({ key: a.descriptor_key || 'generic_key', value: a.descriptor_value }, false);
        break;
      case 'request_headers':
        add({ key: a.descriptor_key, placeholder: `${a.header_name} header` }, Boolean(a.skip_if_absent));
        break;
      case 'remote_address':
        add({ key: 'remote_address', placeholder: 'client address' }, false);
        break;
      case 'masked_remote_address':
        add({ key: 'masked_remote_address', placeholder: 'masked client address' }, false);
        break;
      case 'header_value_match':
        add({ key: a.descriptor_key || 'header_match', value: a.descriptor_value }, false);
        break;
      case 'query_parameter_value_match':
        add({ key: a.descriptor_key || 'query_match', value: a.descriptor_value }, false);
        break;
      case 'metadata':
        add({ key: a.descriptor_key, placeholder: 'metadata value' }, Boolean(a.skip_if_absent));
        break;
      default:
        problems.push(`${at}: action ${kind} is not modelled by this check`);
        return [];
    }
  }
  // An empty descriptor is not sent.
  return variants.filter((v) => v.length > 0);
}

function checkBootstrap(doc, api, file) {
  const problems = [];
  const anys = [];
  const checker = new ProtoJsonChecker(api.root, {
    onAny: (at, name, value) => anys.push({ at, name, value }),
  });
  for (const p of checker.check('envoy.config.bootstrap.v3.Bootstrap', doc)) {
    problems.push(`${file}: ${p}`);
  }
  const out = { problems, descriptors: [], rateLimitFilters: [], luaClusters: [], extAuthz: [] };
  if (!doc || typeof doc !== 'object') return out;

  const resources = doc.static_resources || {};
  const listeners = new Set();
  for (const [i, l] of list(resources.listeners).entries()) {
    if (!l || typeof l.name !== 'string') continue;
    if (listeners.has(l.name)) {
      problems.push(`${file}: static_resources.listeners[${i}]: listener name "${l.name}" is used twice`);
    }
    listeners.add(l.name);
  }
  const clusters = new Map();
  for (const [i, c] of list(resources.clusters).entries()) {
    const at = `${file}: static_resources.clusters[${i}]`;
    if (!c || typeof c.name !== 'string') continue;
    if (clusters.has(c.name)) problems.push(`${at}: cluster name "${c.name}" is used twice`);
    clusters.set(c.name, c);
    const options = c.typed_extension_protocol_options || {};
    for (const [key, any] of Object.entries(options)) {
      if (typeOf(any) && key !== typeOf(any)) {
        problems.push(`${at}.typed_extension_protocol_options: key "${key}" holds a ${typeOf(any)}; ` +
          'Envoy looks the options up by their type name');
      }
    }
    for (const [j, hc] of list(c.health_checks).entries()) {
      if (hc && hc.grpc_health_check && !speaksHttp2(c)) {
        problems.push(`${at}.health_checks[${j}]: a gRPC health check needs an HTTP/2 cluster`);
      }
    }
  }
  const requireCluster = (name, at, why) => {
    if (!clusters.has(name)) problems.push(`${at}: ${why} "${name}" is not a cluster of static_resources`);
    return clusters.get(name);
  };

  for (const { at, name, value } of anys) {
    const canonical = EXTENSION_NAMES[name];
    const holder = at.replace(/\.typed_config$/, '');
    if (canonical && at.endsWith('.typed_config')) {
      const filterName = holderValue(doc, holder).name;
      if (filterName !== canonical) {
        problems.push(`${file}: ${holder}: a filter with a ${name} config is named ` +
          `"${filterName}", not "${canonical}"`);
      }
    }
    if (name !== HCM) continue;
    const hcm = value;
    const filters = list(hcm.http_filters);
    const names = filters.map((f) => f && f.name);
    if (!filters.length || typeOf(filters[filters.length - 1].typed_config) !==
        'envoy.extensions.filters.http.router.v3.Router') {
      problems.push(`${file}: ${at}.http_filters: the last HTTP filter must be the router ` +
        `(got ${names.join(', ') || 'none'})`);
    }
    const rateLimits = [];
    for (const [i, f] of filters.entries()) {
      const fat = `${file}: ${at}.http_filters[${i}]`;
      const type = typeOf(f && f.typed_config);
      const cfg = (f && f.typed_config) || {};
      if (type === 'envoy.extensions.filters.http.ratelimit.v3.RateLimit') {
        rateLimits.push(cfg);
        if (cfg.failure_mode_deny) {
          problems.push(`${fat}: failure_mode_deny: true refuses every request while Sluice is ` +
            'unreachable; Sluice\'s rule is to fail open');
        }
        const service = cfg.rate_limit_service || {};
        if (service.transport_api_version !== 'V3') {
          problems.push(`${fat}: rate_limit_service.transport_api_version must be V3 (Sluice serves RLS v3)`);
        }
        const grpc = service.grpc_service || {};
        if (grpc.envoy_grpc) {
          const c = requireCluster(grpc.envoy_grpc.cluster_name,
            `${fat}.rate_limit_service.grpc_service.envoy_grpc`, 'cluster_name');
          if (c) checkRlsCluster(c, `${file}: cluster ${c.name}`, problems);
        }
      } else if (type === 'envoy.extensions.filters.http.lua.v3.Lua') {
        const sources = [];
        if (cfg.default_source_code) sources.push(['default_source_code', cfg.default_source_code]);
        for (const [k, v] of Object.entries(cfg.source_codes || {})) sources.push([`source_codes.${k}`, v]);
        for (const [label, src] of sources) {
          if (typeof src.inline_string !== 'string') {
            problems.push(`${fat}.${label}: only inline_string sources are checked here`);
            continue;
          }
          const lua = checkLua(src.inline_string, `${fat}.${label}`);
          problems.push(...lua.problems);
          for (const c of lua.clusters) {
            requireCluster(c, `${fat}.${label}`, 'httpCall() names cluster');
            out.luaClusters.push(c);
          }
          if (rateLimits.length && lua.strings && !lua.strings.includes(RATELIMIT_NAMESPACE)) {
            problems.push(`${fat}.${label}: does not read the "${RATELIMIT_NAMESPACE}" dynamic ` +
              'metadata, where the rate-limit filter puts Sluice\'s permits');
          }
        }
      }
    }
    out.rateLimitFilters.push(...rateLimits);
    out.extAuthz.push(extAuthz.collect(hcm, at, { file, problems, requireCluster, speaksHttp2 }));

    const routeConfig = hcm.route_config || {};
    for (const [v, vhost] of list(routeConfig.virtual_hosts).entries()) {
      const vat = `${at}.route_config.virtual_hosts[${v}]`;
      for (const [r, route] of list(vhost && vhost.routes).entries()) {
        const rat = `${vat}.routes[${r}]`;
        const action = (route && route.route) || null;
        if (!action) continue;
        if (typeof action.cluster === 'string') {
          requireCluster(action.cluster, `${file}: ${rat}.route`, 'cluster');
        }
        for (const rl of rateLimits) {
          const stage = rl.stage || 0;
          // Envoy's default (OVERRIDE): the virtual host's rate_limits apply
          // to a route that has none of its own.
          const own = list(action.rate_limits);
          const entries = own.length ? own.map((x, k) => [x, `${rat}.route.rate_limits[${k}]`])
            : list(vhost.rate_limits).map((x, k) => [x, `${vat}.rate_limits[${k}]`]);
          for (const [rateLimit, where] of entries) {
            if ((rateLimit.stage || 0) !== stage) continue;
            const variants = descriptorVariants(rateLimit, action, doc.node, `${file}: ${where}`, problems);
            for (const entriesOf of variants) {
              out.descriptors.push({
                domain: rl.domain,
                route: describeMatch(route.match),
                timeout: action.timeout,
                entries: entriesOf,
              });
            }
          }
        }
        if (route.typed_per_filter_config && route.typed_per_filter_config[RATELIMIT_NAMESPACE]) {
          problems.push(`${file}: ${rat}: per-route rate-limit config is not modelled by this check`);
        }
      }
    }
  }
  return out;
}

function holderValue(doc, at) {
  let v = doc;
  for (const part of at.match(/[^.[\]]+/g) || []) {
    if (v === undefined || v === null) return {};
    v = v[/^\d+$/.test(part) ? Number(part) : part];
  }
  return v || {};
}

function describeMatch(match) {
  if (!match) return '?';
  for (const k of ['prefix', 'path', 'path_separated_prefix']) {
    if (typeof match[k] === 'string') return `${k} ${match[k]}`;
  }
  return JSON.stringify(match);
}

function speaksHttp2(cluster) {
  const options = (cluster.typed_extension_protocol_options || {})[HTTP_OPTIONS] || {};
  const explicit = options.explicit_http_config || {};
  return Boolean(explicit.http2_protocol_options || options.use_downstream_protocol_config);
}

function checkRlsCluster(c, at, problems) {
  if (!speaksHttp2(c)) {
    problems.push(`${at}: the rate-limit service is gRPC; the cluster needs HTTP/2 ` +
      `(typed_extension_protocol_options ${HTTP_OPTIONS} explicit_http_config.http2_protocol_options)`);
  }
  for (const [j, hc] of list(c.health_checks).entries()) {
    const g = hc && hc.grpc_health_check;
    if (g && g.service_name !== undefined && g.service_name !== '' && g.service_name !== RLS_SERVICE) {
      problems.push(`${at}: health_checks[${j}].grpc_health_check.service_name ` +
        `"${g.service_name}" is not a service Sluice reports on; use "${RLS_SERVICE}"`);
    }
  }
}

// ---------------------------------------------------------------------------
// The policies

function checkPolicies(doc, sluiceRoot, file) {
  const problems = [];
  const checker = new ProtoJsonChecker(sluiceRoot, { durations: 'units' });
  for (const p of checker.check('sluice.v1.PolicySet', doc)) problems.push(`${file}: ${p}`);
  const policies = doc && Array.isArray(doc.policies) ? doc.policies : [];
  const names = new Set();
  const claimed = new Map();
  const routes = new Map();
  for (const [i, p] of policies.entries()) {
    const at = `${file}: policies[${i}] "${p && p.name}"`;
    if (!p || typeof p !== 'object') continue;
    if (names.has(p.name)) problems.push(`${at}: the name is used twice`);
    names.add(p.name);
    for (const [j, r] of list(p.http_routes).entries()) {
      const rat = `${at}: http_routes[${j}]`;
      if (!r || typeof r !== 'object') continue;
      if (r.path_prefix !== undefined && r.path_prefix !== '' && !String(r.path_prefix).startsWith('/')) {
        problems.push(`${rat}.path_prefix "${r.path_prefix}" does not start with "/"`);
      }
      for (const name of Object.keys(r.headers || {})) {
        if (name !== name.toLowerCase()) problems.push(`${rat}.headers: "${name}" must be lowercase`);
      }
      if (r.key_header && !p.per_key) {
        problems.push(`${rat}.key_header "${r.key_header}" partitions the policy by key; that needs per_key: true`);
      }
      const id = JSON.stringify([r.host || '', r.path_prefix || '', [...list(r.methods)].sort(),
        Object.entries(r.headers || {}).sort()]);
      if (routes.has(id)) {
        problems.push(`${rat}: the same HTTP route is claimed by policy "${routes.get(id)}"; ` +
          'Sluice refuses a tie');
      } else {
        routes.set(id, p.name);
      }
    }
    const status = p.fallback && p.fallback.http_status;
    if (status !== undefined && status !== 0 && !(Number.isInteger(status) && status >= 200 && status <= 599)) {
      problems.push(`${at}: fallback.http_status ${JSON.stringify(status)} must be 0 (= 200) or 200..599`);
    }
    for (const [j, d] of list(p.envoy_descriptors).entries()) {
      const dat = `${at}: envoy_descriptors[${j}]`;
      if (!d || typeof d !== 'object') continue;
      if (!d.domain) problems.push(`${dat}.domain is required`);
      const entries = list(d.entries);
      if (entries.length < 1 || entries.length > MAX_ENTRIES) {
        problems.push(`${dat}.entries must have 1 to ${MAX_ENTRIES} entries, has ${entries.length}`);
      }
      for (const [k, e] of entries.entries()) {
        if (!e || !e.key) problems.push(`${dat}.entries[${k}].key is required`);
        if (e && !e.value && !p.per_key) {
          problems.push(`${dat}.entries[${k}] matches any value of "${e.key}", which becomes the ` +
            'per-key partition; that needs per_key: true');
        }
      }
      const id = JSON.stringify([d.domain, entries.map((e) => [e && e.key, (e && e.value) || ''])]);
      if (claimed.has(id)) {
        problems.push(`${dat}: the same descriptor is claimed by policy "${claimed.get(id)}"`);
      } else {
        claimed.set(id, p.name);
      }
    }
  }
  return { problems, policies };
}

// ---------------------------------------------------------------------------
// Descriptors against policies

function newNode() {
  return { exact: new Map(), any: new Map(), policy: null, claim: null };
}

// Sluice's DescriptorIndex: a trie per domain; exact (key, value) edges and
// any-value edges by key.
function buildIndex(policies) {
  const domains = new Map();
  for (const p of policies) {
    for (const [j, d] of list(p && p.envoy_descriptors).entries()) {
      if (!d || typeof d.domain !== 'string') continue;
      if (!domains.has(d.domain)) domains.set(d.domain, newNode());
      let node = domains.get(d.domain);
      for (const e of list(d.entries)) {
        if (!e) continue;
        let next;
        if (e.value) {
          if (!node.exact.has(e.key)) node.exact.set(e.key, new Map());
          const byValue = node.exact.get(e.key);
          if (!byValue.has(e.value)) byValue.set(e.value, newNode());
          next = byValue.get(e.value);
        } else {
          if (!node.any.has(e.key)) node.any.set(e.key, newNode());
          next = node.any.get(e.key);
        }
        node = next;
      }
      if (!node.policy) {
        node.policy = p;
        node.claim = { policy: p.name, index: j, domain: d.domain, entries: list(d.entries) };
      }
    }
  }
  return domains;
}

// All the ways `entries` can walk the trie from `node`: a fixed value takes
// its exact edge if there is one, else the any-value edge (Sluice's rule);
// a placeholder can be any value, so it takes each exact edge of its key
// (the request carries that value) and the any-value edge (any other).
function walk(node, entries, i, assumed, out) {
  if (i === entries.length) {
    out.push({ node, assumed });
    return;
  }
  const e = entries[i];
  const exact = node.exact.get(e.key) || new Map();
  const any = node.any.get(e.key);
  if (e.value !== undefined) {
    const next = exact.get(e.value) || any;
    if (!next) out.push({ node: null, assumed, stop: e });
    else walk(next, entries, i + 1, assumed, out);
    return;
  }
  for (const [value, child] of exact) {
    walk(child, entries, i + 1, [...assumed, `${e.placeholder} is ${JSON.stringify(value)}`], out);
  }
  const other = exact.size ? `${e.placeholder} is any other value` : null;
  if (any) walk(any, entries, i + 1, other ? [...assumed, other] : assumed, out);
  else out.push({ node: null, assumed: other ? [...assumed, other] : assumed, stop: e });
}

function seconds(text, parse) {
  const d = typeof text === 'string' ? parse(text) : null;
  return d ? durationSeconds(d) : null;
}

function crossCheck(boot, policies, bootFile, policiesFile) {
  const problems = [];
  const report = [];
  const index = buildIndex(policies);
  const reached = new Set();
  const domains = new Set(boot.rateLimitFilters.map((f) => f.domain));
  for (const d of boot.descriptors) {
    const root = index.get(d.domain);
    const outcomes = [];
    if (root) walk(root, d.entries, 0, [], outcomes);
    else outcomes.push({ node: null, assumed: [] });
    for (const o of outcomes) {
      const what = `${describeEntries(d.entries)} (route ${d.route}` +
        (o.assumed.length ? `, when ${o.assumed.join(' and ')}` : '') + ')';
      const policy = o.node && o.node.policy;
      if (!policy) {
        problems.push(`${bootFile}: descriptor ${what} in domain "${d.domain}" matches no policy ` +
          `of ${policiesFile}; Sluice would answer it OK, unlimited`);
        continue;
      }
      reached.add(o.node);
      report.push(`${what} -> ${policy.name}`);
      if (policy.breaker || policy.concurrency) {
        const routeTimeout = d.timeout === undefined ? DEFAULT_ROUTE_TIMEOUT_S : seconds(d.timeout, parseJsonDuration);
        const callTimeout = policy.call_timeout === undefined ? DEFAULT_CALL_TIMEOUT_S
          : seconds(policy.call_timeout, parseUnitDuration);
        if (routeTimeout !== null && callTimeout !== null &&
            (routeTimeout === 0 || routeTimeout > 2 * callTimeout)) {
          problems.push(`${bootFile}: route ${d.route} may wait ${routeTimeout === 0 ? 'forever' : `${routeTimeout}s`} ` +
            `for a call whose permit for policy "${policy.name}" expires after 2 x call_timeout ` +
            `= ${2 * callTimeout}s; its report would come too late for the breaker`);
        }
      }
    }
  }
  for (const [domain, root] of index) {
    if (!domains.has(domain)) {
      problems.push(`${policiesFile}: domain "${domain}" is not the domain of any rate-limit filter ` +
        `in ${bootFile} (${[...domains].map((x) => `"${x}"`).join(', ') || 'none'})`);
      continue;
    }
    (function visit(node) {
      if (node.policy && !reached.has(node)) {
        problems.push(`${policiesFile}: policy "${node.claim.policy}" envoy_descriptors[${node.claim.index}] ` +
          `${describeEntries(node.claim.entries.map((e) => (e.value ? e : { key: e.key, placeholder: 'any' })))} ` +
          `is produced by no route of ${bootFile}`);
      }
      for (const byValue of node.exact.values()) byValue.forEach(visit);
      node.any.forEach(visit);
    })(root);
  }
  return { problems, report: [...new Set(report)] };
}

// ---------------------------------------------------------------------------

// sluice.v1.PolicySet and what it needs, from `protoDir` (proto/).
function loadSluice(protoDir) {
  const root = new protobuf.Root();
  const pbjs = path.dirname(require.resolve('protobufjs/package.json'));
  root.resolvePath = (origin, target) => {
    for (const d of [protoDir, pbjs]) {
      const p = path.join(d, target);
      if (fs.existsSync(p)) return p;
    }
    return target;
  };
  root.loadSync(['sluice/v1/policy.proto'], { keepCase: true });
  root.resolveAll();
  return root;
}

// Runs every check on the given files. `api` is loadEnvoyApi()'s result
// (loaded once by a caller that runs many checks). Returns {problems, lines}.
function run(opts, api = loadEnvoyApi()) {
  const rel = (p) => path.relative(process.cwd(), p) || p;
  const lines = [];
  const problems = [];
  const load = (file) => {
    try {
      return loadYaml(file);
    } catch (e) {
      problems.push(`${rel(file)}: ${e.message.split('\n')[0]}`);
      return null;
    }
  };
  const bootDoc = load(opts.bootstrap);
  const policiesDoc = load(opts.policies);
  const boot = bootDoc ? checkBootstrap(bootDoc, api, rel(opts.bootstrap)) : null;
  if (boot) {
    problems.push(...boot.problems);
    lines.push(`${rel(opts.bootstrap)} against envoy.config.bootstrap.v3.Bootstrap ` +
      `(${api.label}): ${boot.problems.length} problem(s)`);
  }
  const pol = policiesDoc ? checkPolicies(policiesDoc, loadSluice(opts.protos), rel(opts.policies)) : null;
  if (pol) {
    problems.push(...pol.problems);
    lines.push(`${rel(opts.policies)} against sluice.v1.PolicySet: ${pol.problems.length} problem(s)`);
  }
  const authz = boot ? boot.extAuthz.filter((h) => h.filters.length) : [];
  if (boot && !boot.rateLimitFilters.length && !authz.length) {
    problems.push(`${rel(opts.bootstrap)}: neither an envoy.filters.http.ratelimit nor an ` +
      'envoy.filters.http.ext_authz filter: nothing asks Sluice');
  }
  if (boot && pol && boot.rateLimitFilters.length) {
    const cross = crossCheck(boot, pol.policies, rel(opts.bootstrap), rel(opts.policies));
    problems.push(...cross.problems);
    lines.push(`${boot.descriptors.length} descriptor shape(s) from the routes, ` +
      `${cross.report.length} outcome(s):`);
    for (const line of cross.report) lines.push(`  ${line}`);
  }
  if (boot && pol && authz.length) {
    const cross = extAuthz.crossCheck(authz, pol.policies, rel(opts.policies));
    problems.push(...cross.problems);
    lines.push(`ext_authz: ${cross.report.length} route(s) that ask Sluice:`);
    for (const line of cross.report) lines.push(`  ${line}`);
  }
  if (opts.protosCompared) return { problems, lines };
  const ours = loadOurs(opts.protos);
  const cmp = compareProtos(ours.root, api.root);
  problems.push(...cmp.problems.map((p) => `${rel(opts.protos)}/envoy: ${p}`));
  const c = cmp.compared;
  lines.push(`${rel(opts.protos)}/envoy (${ours.files.length} files) against ${api.label}: ` +
    `${c.messages} messages, ${c.fields} fields, ${c.enums} enums, ${c.values} enum values, ` +
    `${c.services} service(s) compared, ${cmp.problems.length} difference(s)`);
  for (const n of cmp.newer) lines.push(`  newer than the snapshot: ${n}`);
  for (const o of cmp.omitted) lines.push(`  in the reference, not in ours: ${o}`);
  return { problems, lines };
}

function main(argv) {
  const repo = path.resolve(__dirname, '..', '..');
  const opts = { protos: path.join(repo, 'proto') };
  let quiet = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--quiet') quiet = true;
    else if (['--bootstrap', '--policies', '--protos'].includes(a) && i + 1 < argv.length) opts[a.slice(2)] = argv[++i];
    else {
      console.error('usage: envoy_check.js [--bootstrap FILE] [--policies FILE] [--protos DIR] [--quiet]');
      return 2;
    }
  }
  let pairs = [
    [path.join(repo, 'deploy/envoy/envoy.yaml'), path.join(repo, 'deploy/envoy/policies.yaml')],
    [path.join(repo, 'deploy/envoy/envoy-ext-authz.yaml'), path.join(repo, 'deploy/envoy/policies-ext-authz.yaml')],
  ];
  if (opts.bootstrap || opts.policies) {
    pairs = [[opts.bootstrap || pairs[0][0], opts.policies || pairs[0][1]]];
  }
  const api = loadEnvoyApi();
  const problems = [];
  const lines = [];
  for (const [i, [bootstrap, policies]] of pairs.entries()) {
    // proto/envoy is compared with Envoy's once, with the first pair.
    const r = run({ bootstrap, policies, protos: opts.protos, protosCompared: i > 0 }, api);
    problems.push(...r.problems);
    lines.push(...r.lines);
  }
  if (!quiet) for (const line of lines) console.log(`envoy-check: ${line}`);
  for (const p of problems) console.log(`PROBLEM ${p}`);
  console.log(`envoy-check: ${problems.length} problem(s)`);
  return problems.length ? 1 : 0;
}

if (require.main === module) process.exitCode = main(process.argv.slice(2));

module.exports = { run, checkLua, checkBootstrap, checkPolicies, crossCheck, loadSluice };
