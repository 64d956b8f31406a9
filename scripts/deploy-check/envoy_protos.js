// SPDX-License-Identifier: Apache-2.0
// Loads Envoy's own API definitions, and Sluice's copies of the few of them
// that the rate-limit service uses, with protobufjs; and compares the two.
//
// Envoy's .proto files come from the npm package @grpc/grpc-js-xds, which
// vendors envoyproxy/data-plane-api (with its xds, googleapis and
// protoc-gen-validate dependencies) under deps/ to generate its xDS client.
// That is a snapshot older than December 2024 (it has no per-descriptor
// hits_addend), so the few newer fields Sluice defines are listed in
// NEWER_THAN_SNAPSHOT with the Envoy change that added them.
'use strict';

const fs = require('fs');
const path = require('path');
const protobuf = require('protobufjs');

const DEPS = ['envoy-api', 'xds', 'googleapis', 'protoc-gen-validate'];

// protobufjs ships descriptor.proto and the well-known types it needs.
const PROTOBUFJS_DIR = path.dirname(require.resolve('protobufjs/package.json'));

// Fields and enum values that Sluice's copies define and the vendored
// snapshot lacks, each with the upstream change that added it and the shape
// it has there. The comparison holds our definition to this shape, so the
// list is not a blanket exception; once the snapshot has the field, the
// snapshot is compared instead and the entry is reported as redundant.
const NEWER_THAN_SNAPSHOT = {
  'envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.hits_addend': {
    shape: { id: 3, type: 'google.protobuf.UInt64Value', rule: 'optional' },
    source: 'envoyproxy/envoy#37567, merged Dec 2024: per-descriptor hits_addend',
  },
  'envoy.type.v3.RateLimitUnit.WEEK': {
    shape: { number: 7 },
    source: 'envoyproxy/envoy#37494, merged Dec 2024: rate limit unit WEEK',
  },
};

function envoyApiDirs() {
  let pkg;
  try {
    pkg = path.dirname(require.resolve('@grpc/grpc-js-xds/package.json'));
  } catch (e) {
    throw new Error('@grpc/grpc-js-xds is not installed (npm ci in scripts/deploy-check)');
  }
  const dirs = DEPS.map((d) => path.join(pkg, 'deps', d));
  for (const d of dirs) {
    if (!fs.existsSync(d)) throw new Error(`${d} is missing: @grpc/grpc-js-xds no longer vendors it`);
  }
  const version = JSON.parse(fs.readFileSync(path.join(pkg, 'package.json'), 'utf8')).version;
  return { dirs, label: `@grpc/grpc-js-xds ${version} deps/envoy-api` };
}

function finder(dirs) {
  const all = [...dirs, PROTOBUFJS_DIR];
  return (target) => {
    for (const d of all) {
      const p = path.join(d, target);
      if (fs.existsSync(p)) return p;
    }
    return null;
  };
}

// The well-known types protobufjs defines itself (protobuf.common).
const BUILT_IN = new Set(['any', 'duration', 'empty', 'field_mask', 'struct', 'timestamp', 'wrappers']
  .map((n) => `google/protobuf/${n}.proto`));

function protoFiles(dir) {
  const out = [];
  (function walk(d, rel) {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) walk(path.join(d, e.name), r);
      else if (e.name.endsWith('.proto')) out.push(r);
    }
  })(dir, '');
  return out.sort();
}

function newRoot(find) {
  const root = new protobuf.Root();
  root.resolvePath = (origin, target) => find(target) || target;
  return root;
}

// Every v3 file of the vendored Envoy API whose imports are all there (a
// handful import OpenCensus or OpenTelemetry protos that are not vendored;
// they are listed in `skipped`).
function loadEnvoyApi() {
  const { dirs, label } = envoyApiDirs();
  const find = finder(dirs);
  const ok = new Map();
  const loadable = (file, stack) => {
    if (BUILT_IN.has(file)) return true;
    if (ok.has(file)) return ok.get(file);
    const p = find(file);
    if (!p) {
      ok.set(file, false);
      return false;
    }
    if (stack.has(file)) return true;
    stack.add(file);
    const text = fs.readFileSync(p, 'utf8');
    const imports = [...text.matchAll(/^import\s+(?:public\s+|weak\s+)?"([^"]+)";/gm)].map((m) => m[1]);
    const result = imports.every((i) => loadable(i, stack));
    ok.set(file, result);
    return result;
  };
  const files = protoFiles(dirs[0]).filter((f) => /^envoy\/.*\/v3\//.test(f));
  const good = files.filter((f) => loadable(f, new Set()));
  const root = newRoot(find);
  root.loadSync(good, { keepCase: true });
  root.resolveAll();
  return { root, label, skipped: files.filter((f) => !good.includes(f)), find };
}

// Sluice's own proto/envoy/**/*.proto, loaded from `protoDir` (proto/).
function loadOurs(protoDir) {
  const files = protoFiles(path.join(protoDir, 'envoy')).map((f) => `envoy/${f}`);
  const root = newRoot(finder([protoDir]));
  root.loadSync(files, { keepCase: true });
  root.resolveAll();
  return { root, files };
}

function fullName(obj) {
  return obj.fullName.replace(/^\./, '');
}

function fieldShape(f) {
  let type = f.resolvedType ? fullName(f.resolvedType) : f.type;
  if (f.map) type = `map<${f.keyType}, ${type}>`;
  const oneof = f.partOf && !f.partOf.name.startsWith('_') ? f.partOf.name : '';
  return { id: f.id, type, rule: f.repeated ? 'repeated' : 'optional', oneof };
}

function sameShape(a, b) {
  return a.id === b.id && a.type === b.type && a.rule === b.rule;
}

function show(s) {
  return `${s.rule === 'repeated' ? 'repeated ' : ''}${s.type} = ${s.id}` +
    (s.oneof ? ` (oneof ${s.oneof})` : '');
}

// Compares every message, enum and service that our files define with the
// reference definition of the same full name: each field's name, number,
// type (fully qualified) and label, its oneof, each enum value's number,
// and each method's request and response types and streaming. Fields the
// reference has and ours leave out are allowed (a proto3 parser skips them)
// and listed in `omitted`.
function compareProtos(ours, reference) {
  const problems = [];
  const omitted = [];
  const newer = [];
  const compared = { messages: 0, fields: 0, enums: 0, values: 0, services: 0 };
  const lookup = (name) => {
    try {
      return reference.lookup(name);
    } catch (e) {
      return null;
    }
  };
  const visit = (ns) => {
    for (const obj of ns.nestedArray) {
      const name = fullName(obj);
      if (name.startsWith('google.')) continue;
      if (obj instanceof protobuf.Type) {
        const ref = lookup(name);
        compared.messages++;
        if (!(ref instanceof protobuf.Type)) {
          problems.push(`message ${name}: not in the reference`);
        } else {
          for (const f of obj.fieldsArray) {
            const key = `${name}.${f.name}`;
            const mine = fieldShape(f);
            const theirs = ref.fields[f.name];
            compared.fields++;
            if (!theirs) {
              const known = NEWER_THAN_SNAPSHOT[key];
              if (!known) {
                problems.push(`${key}: not in the reference ${name} ` +
                  `(fields there: ${ref.fieldsArray.map((x) => x.name).join(', ')})`);
              } else if (!sameShape(mine, known.shape)) {
                problems.push(`${key}: ours is ${show(mine)}, upstream is ${show(known.shape)} (${known.source})`);
              } else {
                newer.push(`${key} (${known.source})`);
              }
              continue;
            }
            if (NEWER_THAN_SNAPSHOT[key]) newer.push(`${key}: now in the reference; drop it from NEWER_THAN_SNAPSHOT`);
            const ref_shape = fieldShape(theirs);
            if (!sameShape(mine, ref_shape) || mine.oneof !== ref_shape.oneof) {
              problems.push(`${key}: ours is ${show(mine)}, the reference is ${show(ref_shape)}`);
            }
          }
          for (const f of ref.fieldsArray) {
            if (!obj.fields[f.name]) omitted.push(`${name}.${f.name}`);
          }
        }
      } else if (obj instanceof protobuf.Enum) {
        const ref = lookup(name);
        compared.enums++;
        if (!(ref instanceof protobuf.Enum)) {
          problems.push(`enum ${name}: not in the reference`);
        } else {
          for (const [v, n] of Object.entries(obj.values)) {
            const key = `${name}.${v}`;
            compared.values++;
            if (ref.values[v] === undefined) {
              const known = NEWER_THAN_SNAPSHOT[key];
              if (!known) problems.push(`${key} = ${n}: not in the reference ${name}`);
              else if (known.shape.number !== n) problems.push(`${key} = ${n}: upstream is ${known.shape.number} (${known.source})`);
              else newer.push(`${key} (${known.source})`);
            } else if (ref.values[v] !== n) {
              problems.push(`${key}: ours is ${n}, the reference is ${ref.values[v]}`);
            }
          }
          for (const v of Object.keys(ref.values)) {
            if (obj.values[v] === undefined) omitted.push(`${name}.${v}`);
          }
        }
      } else if (obj instanceof protobuf.Service) {
        const ref = lookup(name);
        compared.services++;
        if (!(ref instanceof protobuf.Service)) {
          problems.push(`service ${name}: not in the reference`);
        } else {
          for (const m of obj.methodsArray) {
            const r = ref.methods[m.name];
            if (!r) {
              problems.push(`${name}.${m.name}: not in the reference`);
              continue;
            }
            const sig = (x) => `(${x.requestStream ? 'stream ' : ''}${fullName(x.resolvedRequestType)}) ` +
              `returns (${x.responseStream ? 'stream ' : ''}${fullName(x.resolvedResponseType)})`;
            if (sig(m) !== sig(r)) problems.push(`${name}.${m.name}: ours is ${sig(m)}, the reference is ${sig(r)}`);
          }
        }
      }
      if (obj.nestedArray) visit(obj);
    }
  };
  visit(ours);
  return { problems, omitted, newer, compared };
}

module.exports = { loadEnvoyApi, loadOurs, compareProtos, NEWER_THAN_SNAPSHOT };
