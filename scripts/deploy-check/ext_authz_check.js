// SPDX-License-Identifier: Apache-2.0
// The checks of envoy_check.js for a bootstrap that uses Sluice through
// Envoy's external authorization filter (ext_authz, gRPC) and its gRPC
// access-log service (envoy.access_loggers.http_grpc), with no Lua; the
// proto checks (every typed_config resolves, known fields only) are
// envoy_check.js's own and run on these bootstraps too.
//
//   1. Per HTTP connection manager (collect): each ext_authz filter speaks
//      gRPC, transport V3, to a cluster that exists and speaks HTTP/2, fails
//      open (failure_mode_allow: true) and waits at most MAX_CHECK_TIMEOUT_S
//      for Sluice; each gRPC access logger sends V3 to such a cluster, and
//      its metadata filter (if any) selects Sluice's permits; a manager with
//      ext_authz has such a logger, or the outcomes never reach Sluice;
//      per-route configs sit under the key of an HTTP filter of theirs;
//      health-check routes do not ask Sluice.
//   2. Against the policies (crossCheck): every route that asks Sluice names
//      a policy of the policies file in context_extensions
//      sluice_dependency (the virtual host's context_extensions merged with
//      the route's, as Envoy does);
//      a sluice_key needs a per_key policy; every policy is named by some
//      route; and a route to a policy that hands out permits (breaker or
//      in-flight cap) ends, and its access-log entry is flushed, within
//      2 x the policy's call_timeout, before the permit expires.
'use strict';

const { parseJsonDuration, parseUnitDuration, durationSeconds } = require('./proto_json');

const EXT_AUTHZ = 'envoy.extensions.filters.http.ext_authz.v3.ExtAuthz';
const EXT_AUTHZ_PER_ROUTE = 'envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute';
const HTTP_GRPC_LOG = 'envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig';
const EXT_AUTHZ_NAMESPACE = 'envoy.filters.http.ext_authz';
const PERMITS_KEY = 'sluice_permits';
// Sluice answers from memory; a check that takes longer than this holds
// every request back when Sluice is slow, before failing open.
const MAX_CHECK_TIMEOUT_S = 1;
// Envoy's defaults (ext_authz gRPC timeout; route timeout; ALS flush).
const DEFAULT_CHECK_TIMEOUT_S = 0.2;
const DEFAULT_ROUTE_TIMEOUT_S = 15;
const DEFAULT_FLUSH_S = 1;
const DEFAULT_CALL_TIMEOUT_S = 1;
// Paths a load balancer or orchestrator probes; they must not be limited.
const HEALTH_PATHS = /^\/(healthz?|readyz?|livez?|ready|live)\/?$/;

function list(v) {
  return Array.isArray(v) ? v : [];
}

function typeOf(any) {
  return any && typeof any['@type'] === 'string' ? any['@type'].slice(any['@type'].lastIndexOf('/') + 1) : '';
}

function seconds(text, parse, fallback) {
  if (text === undefined) return fallback;
  const d = typeof text === 'string' ? parse(text) : null;
  return d ? durationSeconds(d) : null;
}

function matchPath(match) {
  if (!match) return '';
  return match.path || match.prefix || match.path_separated_prefix || '';
}

function describeMatch(match) {
  for (const k of ['path', 'prefix', 'path_separated_prefix']) {
    if (match && typeof match[k] === 'string') return `${k} ${match[k]}`;
  }
  return JSON.stringify(match);
}

// The cluster of an envoy_grpc service, checked to exist and speak HTTP/2.
function grpcCluster(grpc, at, what, ctx) {
  if (!grpc || !grpc.envoy_grpc) {
    ctx.problems.push(`${at}: ${what} is not an envoy_grpc service; this check follows envoy_grpc clusters only`);
    return null;
  }
  const c = ctx.requireCluster(grpc.envoy_grpc.cluster_name, `${at}.envoy_grpc`, 'cluster_name');
  if (c && !ctx.speaksHttp2(c)) {
    ctx.problems.push(`${ctx.file}: cluster ${c.name}: ${what} is gRPC; the cluster needs HTTP/2 ` +
      '(typed_extension_protocol_options envoy.extensions.upstreams.http.v3.HttpProtocolOptions ' +
      'explicit_http_config.http2_protocol_options)');
  }
  return c ? c.name : null;
}

// Checks one HttpConnectionManager; `at` is its path in the bootstrap.
// Returns what crossCheck needs: {filters, logs, routes} (empty lists when
// the manager has no ext_authz filter).
function collect(hcm, at, ctx) {
  const { file, problems } = ctx;
  const filters = [];
  const filterNames = new Set();
  for (const [i, f] of list(hcm.http_filters).entries()) {
    if (f && typeof f.name === 'string') filterNames.add(f.name);
    if (typeOf(f && f.typed_config) !== EXT_AUTHZ) continue;
    const fat = `${file}: ${at}.http_filters[${i}].typed_config`;
    const cfg = f.typed_config;
    if (cfg.http_service) {
      problems.push(`${fat}: http_service: Sluice serves ext_authz over gRPC (grpc_service)`);
      continue;
    }
    if (cfg.transport_api_version !== 'V3') {
      problems.push(`${fat}: transport_api_version must be V3 (Sluice serves envoy.service.auth.v3)`);
    }
    if (cfg.failure_mode_allow !== true) {
      problems.push(`${fat}: failure_mode_allow is not true: every request would be refused while ` +
        'Sluice is unreachable; Sluice\'s rule is to fail open');
    }
    const cluster = grpcCluster(cfg.grpc_service, `${fat}.grpc_service`, 'external authorization', ctx);
    const timeout = seconds((cfg.grpc_service || {}).timeout, parseJsonDuration, DEFAULT_CHECK_TIMEOUT_S);
    if (timeout !== null && timeout > MAX_CHECK_TIMEOUT_S) {
      problems.push(`${fat}.grpc_service.timeout: ${timeout}s holds every request back that long ` +
        `while Sluice is slow; keep it at most ${MAX_CHECK_TIMEOUT_S}s`);
    }
    filters.push({ name: f.name, cluster });
  }
  if (!filters.length) return { filters, logs: [], routes: [] };

  const logs = [];
  for (const [i, log] of list(hcm.access_log).entries()) {
    if (typeOf(log && log.typed_config) !== HTTP_GRPC_LOG) continue;
    const lat = `${file}: ${at}.access_log[${i}]`;
    const common = log.typed_config.common_config || {};
    if (common.transport_api_version !== 'V3') {
      problems.push(`${lat}.typed_config.common_config.transport_api_version must be V3 ` +
        '(Sluice serves envoy.service.accesslog.v3)');
    }
    const cluster = grpcCluster(common.grpc_service, `${lat}.typed_config.common_config.grpc_service`,
      'the access-log service', ctx);
    const meta = log.filter && log.filter.metadata_filter;
    if (meta) {
      const m = meta.matcher || {};
      const keys = list(m.path).map((p) => p && p.key);
      if (m.filter !== EXT_AUTHZ_NAMESPACE || keys[0] !== PERMITS_KEY) {
        problems.push(`${lat}.filter.metadata_filter: selects ${m.filter} [${keys.join(', ')}], ` +
          `not the permits (${EXT_AUTHZ_NAMESPACE} [${PERMITS_KEY}]); entries with permits ` +
          'would not reach Sluice');
      }
    }
    logs.push({ cluster, flush: seconds(common.buffer_flush_interval, parseJsonDuration, DEFAULT_FLUSH_S) });
  }
  const toSluice = new Set(filters.map((f) => f.cluster));
  if (!logs.some((l) => toSluice.has(l.cluster))) {
    problems.push(`${file}: ${at}: no envoy.access_loggers.http_grpc access log to the ext_authz ` +
      `cluster (${[...toSluice].join(', ')}): Sluice would never learn how admitted calls ended`);
  }

  const routes = [];
  const authzNames = new Set(filters.map((f) => f.name));
  const perFilter = (holder, where) => {
    let found;
    for (const [key, any] of Object.entries((holder && holder.typed_per_filter_config) || {})) {
      if (!filterNames.has(key)) {
        problems.push(`${file}: ${where}.typed_per_filter_config: "${key}" is not the name of an ` +
          'HTTP filter of this connection manager; Envoy would not apply it');
      } else if (typeOf(any) === EXT_AUTHZ_PER_ROUTE && authzNames.has(key)) {
        found = any;
      }
    }
    return found;
  };
  const routeConfig = hcm.route_config || {};
  for (const [v, vhost] of list(routeConfig.virtual_hosts).entries()) {
    const vat = `${at}.route_config.virtual_hosts[${v}]`;
    const vhostConfig = perFilter(vhost, vat);
    for (const [r, route] of list(vhost && vhost.routes).entries()) {
      const rat = `${vat}.routes[${r}]`;
      // Envoy merges the two levels: the route's `disabled` wins, and its
      // context_extensions override the virtual host's key by key.
      const own = perFilter(route, rat);
      const config = own || vhostConfig;
      const disabled = Boolean(config && config.disabled);
      const path = matchPath(route && route.match);
      if (HEALTH_PATHS.test(path) && !disabled) {
        problems.push(`${file}: ${rat}: health-check route ${describeMatch(route.match)} asks Sluice; ` +
          'disable ext_authz there (ExtAuthzPerRoute disabled: true) so a limit never fails a probe');
      }
      if (disabled) continue;
      const extensionsOf = (c) => (c && c.check_settings && c.check_settings.context_extensions) || {};
      const extensions = { ...extensionsOf(vhostConfig), ...extensionsOf(own) };
      routes.push({
        at: `${file}: ${rat}`,
        match: describeMatch(route && route.match),
        dependency: extensions.sluice_dependency,
        key: extensions.sluice_key,
        forwards: Boolean(route && route.route),
        timeout: seconds(route && route.route && route.route.timeout, parseJsonDuration, DEFAULT_ROUTE_TIMEOUT_S),
      });
    }
  }
  return { filters, logs, routes };
}

// `found` is the list of collect() results of a bootstrap.
function crossCheck(found, policies, policiesFile) {
  const problems = [];
  const report = [];
  const byName = new Map(policies.filter((p) => p && p.name).map((p) => [p.name, p]));
  const named = new Set();
  const routedByHttpRoutes = policies.some((p) => p && list(p.http_routes).length);
  for (const hcm of found) {
    if (!hcm.filters.length) continue;
    const flush = Math.max(0, ...hcm.logs.map((l) => l.flush || 0));
    for (const r of hcm.routes) {
      if (r.dependency === undefined || r.dependency === '') {
        if (!routedByHttpRoutes) {
          problems.push(`${r.at}: route ${r.match} sets no context_extensions sluice_dependency and ` +
            `no policy of ${policiesFile} has http_routes: Sluice would let it through unchecked`);
        }
        continue;
      }
      const policy = byName.get(r.dependency);
      if (!policy) {
        problems.push(`${r.at}: context_extensions sluice_dependency "${r.dependency}" is not a ` +
          `policy of ${policiesFile}`);
        continue;
      }
      named.add(policy.name);
      report.push(`route ${r.match} -> ${policy.name}${r.key !== undefined ? ` key ${JSON.stringify(r.key)}` : ''}`);
      if (r.key !== undefined && r.key !== '' && !policy.per_key) {
        problems.push(`${r.at}: context_extensions sluice_key "${r.key}" names a key of policy ` +
          `"${policy.name}", which has no per_key`);
      }
      if (r.forwards && (policy.breaker || policy.concurrency)) {
        const callTimeout = seconds(policy.call_timeout, parseUnitDuration, DEFAULT_CALL_TIMEOUT_S);
        if (r.timeout !== null && callTimeout !== null &&
            (r.timeout === 0 || r.timeout + flush > 2 * callTimeout)) {
          problems.push(`${r.at}: route ${r.match} may wait ` +
            `${r.timeout === 0 ? 'forever' : `${r.timeout}s (+ ${flush}s access-log flush)`} for a ` +
            `call whose permit for policy "${policy.name}" expires after 2 x call_timeout = ` +
            `${2 * callTimeout}s; its outcome would come too late for the breaker`);
        }
      }
    }
  }
  for (const p of policies) {
    if (p && p.name && !named.has(p.name) && !list(p.http_routes).length) {
      problems.push(`${policiesFile}: policy "${p.name}" is named by no route's sluice_dependency`);
    }
  }
  return { problems, report };
}

module.exports = { collect, crossCheck, EXT_AUTHZ, EXT_AUTHZ_PER_ROUTE, HTTP_GRPC_LOG };
