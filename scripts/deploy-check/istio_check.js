#!/usr/bin/env node
// SPDX-License-Identifier: Apache-2.0
// Checks the Istio recipe under deploy/istio: Sluice as an external
// authorization provider and an access-log provider of an Istio mesh.
//
//   1. Each Istio resource (AuthorizationPolicy, Telemetry, IstioOperator)
//      against the schema of Istio's CRDs as @kubernetes-models/istio ships
//      them (compiled from Istio's crd-all.gen.yaml), plus the unknown-field
//      check check.js runs on Kubernetes objects; a Service against
//      kubernetes-models, as check.js does.
//   2. The IstioOperator CRD leaves `spec` open, so spec and the mesh config
//      under it are checked here against field lists taken from Istio's API
//      (MESH_FIELDS below, with their source): known fields only, the types
//      of the two provider kinds Sluice serves.
//   3. Across the files: each provider's service is a Service here whose
//      port is declared gRPC (Istio gives the provider's cluster HTTP/2
//      only then); the ext_authz provider fails open, with a short timeout;
//      the AuthorizationPolicy is CUSTOM, names the ext_authz provider,
//      selects a workload and has rules; a Telemetry on the same workload
//      sends its server-side access logs to the access-log provider.
//   4. policies.yaml is a Sluice policies file (envoy_check.js's policy
//      checks), and every policy has http_routes: Istio names no policy per
//      route, so a policy without them answers nothing.
//
// Usage: node istio_check.js [--dir DIR] [--protos DIR] [--quiet]
// Defaults: the repository's deploy/istio and proto/. Exit status: 0 all
// valid, 1 a problem found, 2 bad usage.
'use strict';

const fs = require('fs');
const path = require('path');
const yaml = require('js-yaml');
const { checkObject, tracking, unknownFields } = require('./check');
const { checkPolicies, loadSluice } = require('./envoy_check');
const { parseJsonDuration, durationSeconds } = require('./proto_json');

// Field lists from Istio's API, in their JSON (lowerCamelCase) names:
// MeshConfig, MeshConfig.ExtensionProvider and its
// EnvoyExternalAuthorizationGrpcProvider, EnvoyHttpGrpcV3LogProvider and
// EnvoyExternalAuthorizationRequestBody from istio/api
// mesh/v1alpha1/config.proto (1.31.0-alpha.0, commit b8f8791); the
// IstioOperator spec from istio/istio operator/pkg/apis/types.go
// (IstioOperatorSpec). A shape is a type name or an object of fields.
const MESH_CONFIG_FIELDS = [
  'proxyListenPort', 'proxyInboundListenPort', 'proxyHttpPort', 'connectTimeout', 'hboneIdleTimeout',
  'protocolDetectionTimeout', 'tcpKeepalive', 'ingressClass', 'ingressService', 'ingressControllerMode',
  'ingressSelector', 'enableTracing', 'accessLogFile', 'accessLogFormat', 'accessLogEncoding',
  'enableEnvoyAccessLogService', 'disableEnvoyListenerLog', 'defaultConfig', 'outboundTrafficPolicy',
  'inboundTrafficPolicy', 'configSources', 'enableAutoMtls', 'trustDomain', 'trustDomainAliases',
  'caCertificates', 'defaultServiceExportTo', 'defaultVirtualServiceExportTo',
  'defaultDestinationRuleExportTo', 'rootNamespace', 'localityLbSetting', 'zoneAwareLbSetting',
  'dnsRefreshRate', 'h2UpgradePolicy', 'inboundClusterStatName', 'outboundClusterStatName',
  'certificates', 'serviceSettings', 'serviceScopeConfigs', 'enablePrometheusMerge',
  'verifyCertificateAtClient', 'ca', 'extensionProviders', 'defaultProviders', 'discoverySelectors',
  'pathNormalization', 'defaultHttpRetryPolicy', 'meshMTLS', 'tlsDefaults', 'defaultTrafficPolicy',
  'serviceEntryVisibility',
];
const PROVIDER_KINDS = [
  'envoyExtAuthzHttp', 'envoyExtAuthzGrpc', 'zipkin', 'lightstep', 'datadog', 'stackdriver',
  'opencensus', 'skywalking', 'opentelemetry', 'prometheus', 'envoyFileAccessLog', 'envoyHttpAls',
  'envoyTcpAls', 'envoyOtelAls', 'sds',
];
const PROVIDER_SHAPES = {
  envoyExtAuthzGrpc: {
    service: 'string', port: 'port', timeout: 'duration', failOpen: 'bool', clearRouteCache: 'bool',
    statusOnError: 'string',
    includeRequestBodyInCheck: { maxRequestBytes: 'uint32', allowPartialMessage: 'bool', packAsBytes: 'bool' },
  },
  envoyHttpAls: {
    service: 'string', port: 'port', logName: 'string', filterStateObjectsToLog: 'strings',
    additionalRequestHeadersToLog: 'strings', additionalResponseHeadersToLog: 'strings',
    additionalResponseTrailersToLog: 'strings',
  },
};
const OPERATOR_SPEC_FIELDS = [
  'profile', 'installPackagePath', 'hub', 'tag', 'namespace', 'revision', 'compatibilityVersion',
  'meshConfig', 'components', 'values', 'unvalidatedValues',
];
const EXT_AUTHZ = 'envoyExtAuthzGrpc';
const ACCESS_LOG = 'envoyHttpAls';
// Istio's own access-log provider, always defined.
const BUILT_IN_LOG_PROVIDERS = new Set(['envoy']);
// Sluice answers from memory; a longer check holds requests back that long
// while Sluice is slow, before failing open.
const MAX_CHECK_TIMEOUT_S = 1;
// A Service port Istio treats as gRPC / HTTP/2 (its protocol selection:
// appProtocol, else the port name's prefix up to "-").
const H2_APP_PROTOCOLS = new Set(['grpc', 'grpc-web', 'http2', 'kubernetes.io/h2c']);
const H2_NAME = /^(grpc|grpc-web|http2)(-|$)/i;

function list(v) {
  return Array.isArray(v) ? v : [];
}

function isObject(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

// Checks `value` against `shape` (see the field lists' comment).
function checkShape(value, shape, at, problems) {
  if (isObject(shape)) {
    if (!isObject(value)) {
      problems.push(`${at}: must be a mapping`);
      return;
    }
    for (const [k, v] of Object.entries(value)) {
      if (!(k in shape)) {
        problems.push(`${at}.${k}: unknown field (known: ${Object.keys(shape).join(', ')})`);
      } else {
        checkShape(v, shape[k], `${at}.${k}`, problems);
      }
    }
    return;
  }
  const ok = {
    string: () => typeof value === 'string',
    bool: () => typeof value === 'boolean',
    uint32: () => Number.isInteger(value) && value >= 0 && value <= 0xffffffff,
    port: () => (Number.isInteger(value) || /^\d+$/.test(String(value))) && Number(value) >= 1 && Number(value) <= 65535,
    duration: () => typeof value === 'string' && parseJsonDuration(value) !== null,
    strings: () => Array.isArray(value) && value.every((s) => typeof s === 'string'),
  }[shape];
  if (!ok()) {
    const want = {
      port: 'a port 1..65535', duration: 'a duration such as "0.1s"', strings: 'a list of strings',
    }[shape] || `a ${shape}`;
    problems.push(`${at}: must be ${want}, got ${JSON.stringify(value)}`);
  }
}

function checkMeshConfig(mesh, at, problems) {
  const providers = [];
  if (!isObject(mesh)) {
    problems.push(`${at}: must be a mapping`);
    return providers;
  }
  for (const k of Object.keys(mesh)) {
    if (!MESH_CONFIG_FIELDS.includes(k)) problems.push(`${at}.${k}: unknown field of MeshConfig`);
  }
  const names = new Set();
  for (const [i, p] of list(mesh.extensionProviders).entries()) {
    const pat = `${at}.extensionProviders[${i}]`;
    if (!isObject(p)) {
      problems.push(`${pat}: must be a mapping`);
      continue;
    }
    if (typeof p.name !== 'string' || !p.name) problems.push(`${pat}.name is required`);
    else if (names.has(p.name)) problems.push(`${pat}: provider name "${p.name}" is used twice`);
    names.add(p.name);
    const kinds = Object.keys(p).filter((k) => k !== 'name');
    for (const k of kinds) {
      if (!PROVIDER_KINDS.includes(k)) problems.push(`${pat}.${k}: unknown field of ExtensionProvider`);
    }
    const known = kinds.filter((k) => PROVIDER_KINDS.includes(k));
    if (known.length !== 1) {
      problems.push(`${pat}: must set exactly one provider kind, sets ${known.join(', ') || 'none'}`);
      continue;
    }
    const kind = known[0];
    if (PROVIDER_SHAPES[kind]) checkShape(p[kind], PROVIDER_SHAPES[kind], `${pat}.${kind}`, problems);
    providers.push({ name: p.name, kind, config: p[kind] || {}, at: pat });
  }
  return providers;
}

function loadFiles(dir) {
  const out = [];
  for (const name of fs.readdirSync(dir).filter((n) => /\.ya?ml$/.test(n)).sort()) {
    out.push({ name, file: path.join(dir, name), text: fs.readFileSync(path.join(dir, name), 'utf8') });
  }
  return out;
}

// The @kubernetes-models/istio class for an Istio apiVersion and kind (the
// package is ES modules only, hence import()).
async function istioClass(apiVersion, kind) {
  if (typeof apiVersion !== 'string' || !/^[a-z.]+\.istio\.io\/v[0-9a-z]+$/.test(apiVersion) ||
      typeof kind !== 'string' || !/^[A-Za-z]+$/.test(kind)) {
    return null;
  }
  try {
    const mod = await import(`@kubernetes-models/istio/${apiVersion}/${kind}`);
    return typeof mod[kind] === 'function' ? mod[kind] : null;
  } catch (e) {
    return null;
  }
}

async function checkIstioObject(doc, where) {
  const cls = await istioClass(doc.apiVersion, doc.kind);
  if (!cls) return [`${where}: no @kubernetes-models/istio class for apiVersion "${doc.apiVersion}" kind "${doc.kind}"`];
  const problems = [];
  const name = `${doc.kind}/${(doc.metadata && doc.metadata.name) || '?'}`;
  try {
    new cls(doc).validate();
  } catch (e) {
    problems.push(`${where}: ${name}: ${e.message}`);
  }
  // As check.js: what the validator never read is unknown to the schema.
  const seen = new WeakMap();
  try {
    cls.prototype.validate.call(tracking(doc, seen));
  } catch (e) {
    // Reported above.
  }
  const unknown = [];
  unknownFields(doc, seen, '', unknown);
  for (const field of unknown) {
    // The IstioOperator CRD leaves spec open; check() checks it.
    if (doc.kind === 'IstioOperator' && field === '.spec') continue;
    problems.push(`${where}: ${name}: unknown field "${field.slice(1)}"`);
  }
  return problems;
}

function selectorKey(ns, spec) {
  const labels = (spec && spec.selector && spec.selector.matchLabels) || {};
  return `${ns || ''}/${JSON.stringify(Object.entries(labels).sort())}`;
}

// `service` as Istio takes it: "name.namespace.svc.<domain>" or
// "namespace/name".
function serviceRef(service) {
  if (typeof service !== 'string') return null;
  let m = /^([a-z0-9-]+)\/([a-z0-9-]+)$/.exec(service);
  if (m) return { namespace: m[1], name: m[2] };
  m = /^([a-z0-9-]+)\.([a-z0-9-]+)\.svc(\.[a-z0-9.-]+)?$/.exec(service);
  if (m) return { name: m[1], namespace: m[2] };
  return null;
}

async function check(opts) {
  const rel = (p) => path.relative(process.cwd(), p) || p;
  const problems = [];
  const lines = [];
  const services = [];
  const providers = [];
  const authz = [];
  const telemetry = [];
  let objects = 0;
  for (const f of loadFiles(opts.dir)) {
    const label = rel(f.file);
    let docs;
    try {
      docs = yaml.loadAll(f.text, null, { filename: label }).filter((d) => d !== null && d !== undefined);
    } catch (e) {
      problems.push(`${label}: ${e.message.split('\n')[0]}`);
      continue;
    }
    if (f.name === 'policies.yaml') {
      const pol = checkPolicies(docs[0], loadSluice(opts.protos), label);
      problems.push(...pol.problems);
      for (const [i, p] of pol.policies.entries()) {
        if (p && !list(p.http_routes).length) {
          problems.push(`${label}: policies[${i}] "${p.name}": no http_routes; Istio names no policy ` +
            'per route, so this policy would answer no request');
        }
      }
      lines.push(`${label} against sluice.v1.PolicySet: ${pol.problems.length} problem(s)`);
      continue;
    }
    for (const [i, doc] of docs.entries()) {
      const where = `${label}#${i + 1}`;
      objects++;
      if (!isObject(doc)) {
        problems.push(`${where}: not a mapping`);
        continue;
      }
      const ns = doc.metadata && doc.metadata.namespace;
      const spec = doc.spec || {};
      if (/\.istio\.io\//.test(String(doc.apiVersion))) {
        problems.push(...await checkIstioObject(doc, where));
      } else {
        problems.push(...checkObject(doc, where, false));
      }
      if (!ns) problems.push(`${where}: ${doc.kind}: metadata.namespace is required here (the files name each other by it)`);
      switch (doc.kind) {
        case 'Service':
          services.push({ name: doc.metadata.name, namespace: ns, ports: list(spec.ports), where });
          break;
        case 'IstioOperator':
          for (const k of Object.keys(spec)) {
            if (!OPERATOR_SPEC_FIELDS.includes(k)) problems.push(`${where}: spec.${k}: unknown field of IstioOperatorSpec`);
          }
          providers.push(...checkMeshConfig(spec.meshConfig, `${where}: spec.meshConfig`, problems));
          break;
        case 'AuthorizationPolicy':
          authz.push({ doc, where, key: selectorKey(ns, spec) });
          break;
        case 'Telemetry':
          telemetry.push({ doc, where, key: selectorKey(ns, spec) });
          break;
        default:
          break;
      }
    }
  }

  // Providers against the Services.
  const byName = new Map(providers.map((p) => [p.name, p]));
  for (const p of providers.filter((x) => x.kind === EXT_AUTHZ || x.kind === ACCESS_LOG)) {
    const c = p.config;
    const ref = serviceRef(c.service);
    const svc = ref && services.find((s) => s.name === ref.name && s.namespace === ref.namespace);
    if (!svc) {
      problems.push(`${p.at}.${p.kind}.service "${c.service}" is not a Service of ${rel(opts.dir)} ` +
        '(NAME.NAMESPACE.svc.cluster.local or NAMESPACE/NAME)');
    } else {
      const port = svc.ports.find((x) => x && Number(x.port) === Number(c.port));
      if (!port) {
        problems.push(`${p.at}.${p.kind}.port ${c.port} is not a port of Service ${svc.namespace}/${svc.name}`);
      } else if (!H2_APP_PROTOCOLS.has(port.appProtocol) && !(port.appProtocol === undefined && H2_NAME.test(port.name || ''))) {
        problems.push(`${svc.where}: port ${port.port} ("${port.name}") is not declared gRPC ` +
          '(appProtocol: grpc): Istio would give provider ' +
          `"${p.name}" a cluster without HTTP/2, and every gRPC call to Sluice would fail`);
      }
    }
    if (p.kind === EXT_AUTHZ) {
      if (c.failOpen !== true) {
        problems.push(`${p.at}.${p.kind}.failOpen is not true: every request would be refused while ` +
          'Sluice is unreachable; Sluice\'s rule is to fail open');
      }
      const d = typeof c.timeout === 'string' ? parseJsonDuration(c.timeout) : null;
      if (d && durationSeconds(d) > MAX_CHECK_TIMEOUT_S) {
        problems.push(`${p.at}.${p.kind}.timeout ${c.timeout} holds every request back that long while ` +
          `Sluice is slow; keep it at most ${MAX_CHECK_TIMEOUT_S}s`);
      }
    }
    lines.push(`provider ${p.name} (${p.kind}) -> ${c.service}:${c.port}`);
  }

  // The workloads that ask Sluice, and their outcomes.
  const logged = new Set();
  for (const t of telemetry) {
    for (const [i, al] of list(t.doc.spec && t.doc.spec.accessLogging).entries()) {
      const mode = (al && al.match && al.match.mode) || 'CLIENT_AND_SERVER';
      for (const [j, ref] of list(al && al.providers).entries()) {
        const p = byName.get(ref && ref.name);
        const at = `${t.where}: spec.accessLogging[${i}].providers[${j}]`;
        if (!p && !BUILT_IN_LOG_PROVIDERS.has(ref && ref.name)) {
          problems.push(`${at}: "${ref && ref.name}" is not an extension provider of the mesh config`);
        } else if (p && p.kind === ACCESS_LOG) {
          if (mode === 'CLIENT') {
            problems.push(`${at}: match.mode CLIENT logs only outbound calls; the check runs on the ` +
              'inbound (SERVER) side, whose entries carry the permits');
          } else if (al.disabled !== true) {
            logged.add(t.key);
          }
        }
      }
    }
  }
  for (const a of authz) {
    const spec = a.doc.spec || {};
    if (spec.action !== 'CUSTOM') continue;
    const name = spec.provider && spec.provider.name;
    const p = byName.get(name);
    if (!p) {
      problems.push(`${a.where}: spec.provider.name "${name}" is not an extension provider of the mesh config`);
      continue;
    }
    if (p.kind !== EXT_AUTHZ) {
      problems.push(`${a.where}: spec.provider.name "${name}" is a ${p.kind} provider; Sluice serves ${EXT_AUTHZ}`);
      continue;
    }
    if (!Object.keys((spec.selector && spec.selector.matchLabels) || {}).length) {
      problems.push(`${a.where}: no spec.selector.matchLabels: the policy would ask Sluice for every ` +
        'workload of the namespace');
    }
    if (!list(spec.rules).length) {
      problems.push(`${a.where}: no spec.rules: a CUSTOM policy without rules matches no request, so ` +
        'Sluice is never asked');
    }
    if (!logged.has(a.key)) {
      problems.push(`${a.where}: no Telemetry in ${rel(opts.dir)} sends this workload's server-side ` +
        `access logs to an ${ACCESS_LOG} provider: Sluice would never learn how admitted calls ended`);
    }
    lines.push(`${a.where}: ${a.key} asks ${name}${logged.has(a.key) ? ', outcomes logged' : ''}`);
  }
  if (!authz.some((a) => a.doc.spec && a.doc.spec.action === 'CUSTOM')) {
    problems.push(`${rel(opts.dir)}: no AuthorizationPolicy with action CUSTOM: nothing asks Sluice`);
  }
  lines.unshift(`${rel(opts.dir)}: ${objects} object(s), ${problems.length} problem(s)`);
  return { problems, lines };
}

async function main(argv) {
  const repo = path.resolve(__dirname, '..', '..');
  const opts = { dir: path.join(repo, 'deploy/istio'), protos: path.join(repo, 'proto') };
  let quiet = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--quiet') quiet = true;
    else if (['--dir', '--protos'].includes(a) && i + 1 < argv.length) opts[a.slice(2)] = argv[++i];
    else {
      console.error('usage: istio_check.js [--dir DIR] [--protos DIR] [--quiet]');
      return 2;
    }
  }
  const { problems, lines } = await check(opts);
  if (!quiet) for (const line of lines) console.log(`istio-check: ${line}`);
  for (const p of problems) console.log(`PROBLEM ${p}`);
  console.log(`istio-check: ${problems.length} problem(s)`);
  return problems.length ? 1 : 0;
}

if (require.main === module) main(process.argv.slice(2)).then((code) => { process.exitCode = code; });

module.exports = { check, checkMeshConfig };
