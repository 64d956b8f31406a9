// SPDX-License-Identifier: Apache-2.0
// Checks a JSON value (a YAML file after loading) against a protobuf message
// type the way a strict proto3 JSON parser followed by protoc-gen-validate
// would: every key must be a field of the message (by its proto name or its
// JSON name), values must have the field's type, at most one member of a
// oneof may be set, `google.protobuf.Any` values are checked against the
// message their "@type" names, and the validate rules written into the
// .proto files ((validate.rules) and (validate.required)) are enforced for
// the kinds listed in `checkRules` below. Fields marked deprecated are
// refused too: a new configuration should not start out on them.
//
// This is the path Envoy takes with a YAML bootstrap (YAML -> JSON -> proto
// with unknown fields refused, then validation, then each typed_config
// unpacked), so a file that passes here fails in Envoy only on semantics the
// .proto files do not state. The types come from a protobufjs Root loaded
// with `keepCase: true`.
'use strict';

const protobuf = require('protobufjs');

// The JSON name protoc derives from a field name.
function jsonName(name) {
  return name.replace(/_(.)/g, (_, c) => c.toUpperCase());
}

function typeName(type) {
  return type.fullName.replace(/^\./, '');
}

function describe(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a mapping';
  return `${typeof value} ${JSON.stringify(value)}`;
}

function isPlainObject(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

// Levenshtein distance, for "did you mean" hints on unknown fields.
function distance(a, b) {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let prev = row[0];
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const cur = row[j];
      row[j] = Math.min(row[j] + 1, row[j - 1] + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = cur;
    }
  }
  return row[b.length];
}

const INT_RANGES = {
  int32: [-(2 ** 31), 2 ** 31 - 1],
  sint32: [-(2 ** 31), 2 ** 31 - 1],
  sfixed32: [-(2 ** 31), 2 ** 31 - 1],
  uint32: [0, 2 ** 32 - 1],
  fixed32: [0, 2 ** 32 - 1],
};
const INT64 = new Set(['int64', 'sint64', 'sfixed64']);
const UINT64 = new Set(['uint64', 'fixed64']);

const WRAPPERS = {
  'google.protobuf.DoubleValue': 'double',
  'google.protobuf.FloatValue': 'float',
  'google.protobuf.Int64Value': 'int64',
  'google.protobuf.UInt64Value': 'uint64',
  'google.protobuf.Int32Value': 'int32',
  'google.protobuf.UInt32Value': 'uint32',
  'google.protobuf.BoolValue': 'bool',
  'google.protobuf.StringValue': 'string',
  'google.protobuf.BytesValue': 'bytes',
};

// "1.5s", "-0.000000001s": the proto3 JSON form of a Duration.
function parseJsonDuration(text) {
  const m = /^(-)?(\d+)(?:\.(\d{1,9}))?s$/.exec(text);
  if (!m) return null;
  const nanos = Number((m[3] || '').padEnd(9, '0'));
  const sign = m[1] ? -1 : 1;
  return { seconds: sign * Number(m[2]), nanos: sign * nanos };
}

// "250ms", "1m30s", "0": what absl::ParseDuration takes, as Sluice's
// policies file does (server/policy/policy_file.cc), less "inf".
function parseUnitDuration(text) {
  if (text === '0') return { seconds: 0, nanos: 0 };
  const m = /^([-+])?((?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|ms|s|m|h))+$/.exec(text);
  if (!m) return null;
  const scale = { ns: 1e-9, us: 1e-6, ms: 1e-3, s: 1, m: 60, h: 3600 };
  let total = 0;
  for (const part of text.replace(/^[-+]/, '').matchAll(/(\d+(?:\.\d*)?|\.\d+)(ns|us|ms|s|m|h)/g)) {
    total += Number(part[1]) * scale[part[2]];
  }
  if (m[1] === '-') total = -total;
  const seconds = Math.trunc(total);
  return { seconds, nanos: Math.round((total - seconds) * 1e9) };
}

function durationSeconds(d) {
  return d.seconds + d.nanos / 1e9;
}

// The rules of one field as one object: {string: {...}, repeated: {...}}.
function fieldRules(field) {
  const rules = {};
  for (const option of field.parsedOptions || []) {
    const r = option['(validate.rules)'];
    if (r) Object.assign(rules, r);
  }
  return rules;
}

function isDeprecated(options) {
  return Boolean(options && (options.deprecated === true ||
    options['(envoy.annotations.deprecated_at_minor_version)'] !== undefined ||
    options['(envoy.annotations.disallowed_by_default)'] === true));
}

// A field in a oneof (a real one, or the synthetic one of a proto3
// `optional`) has presence: left out, it is not set and not validated.
function hasPresence(field) {
  return Boolean(field.partOf) || Boolean(field.options && field.options.proto3_optional);
}

class ProtoJsonChecker {
  // root: a resolved protobufjs Root. options.durations: 'json' (the proto3
  // JSON form, "1.5s") or 'units' (Sluice's "1500ms"). options.onAny(path,
  // typeName, value) is called for every Any that resolves.
  constructor(root, options = {}) {
    this.root = root;
    this.durations = options.durations || 'json';
    this.onAny = options.onAny || (() => {});
    this.fieldIndex = new Map();
  }

  // Problems as "PATH: message" strings; [] when `value` is a valid
  // `fullName`.
  check(fullName, value, path = '') {
    const type = this.root.lookupType(fullName);
    this.problems = [];
    this.message(type, value, path);
    return this.problems;
  }

  problem(path, message) {
    this.problems.push(`${path || '(top)'}: ${message}`);
  }

  fields(type) {
    let index = this.fieldIndex.get(type);
    if (!index) {
      index = new Map();
      for (const f of type.fieldsArray) {
        index.set(f.name, f);
        index.set(jsonName(f.name), f);
      }
      this.fieldIndex.set(type, index);
    }
    return index;
  }

  message(type, value, path) {
    const name = typeName(type);
    if (this.wellKnown(name, type, value, path)) return;
    if (!isPlainObject(value)) {
      this.problem(path, `must be a mapping (${name}), got ${describe(value)}`);
      return;
    }
    const index = this.fields(type);
    const present = new Map();
    for (const key of Object.keys(value)) {
      const at = path ? `${path}.${key}` : key;
      const field = index.get(key);
      if (!field) {
        const names = type.fieldsArray.map((f) => f.name);
        const close = names.filter((n) => distance(n, key) <= 2);
        this.problem(at, `unknown field "${key}" in ${name}` +
          (close.length ? ` (did you mean ${close.map((n) => `"${n}"`).join(' or ')}?)` : ''));
        continue;
      }
      if (present.has(field)) {
        this.problem(at, `sets ${field.name} a second time (as "${present.get(field)}")`);
        continue;
      }
      present.set(field, key);
      if (isDeprecated(field.options)) {
        this.problem(at, `${name}.${field.name} is deprecated`);
      }
      this.fieldValue(field, value[key], at);
    }
    for (const oneof of type.oneofsArray) {
      const set = oneof.fieldsArray.filter((f) => present.has(f)).map((f) => f.name);
      if (set.length > 1) {
        this.problem(path, `sets ${set.join(' and ')}, which are one of ${name}.${oneof.name}`);
      } else if (set.length === 0 && oneof.options && oneof.options['(validate.required)']) {
        this.problem(path, `must set one of ${oneof.fieldsArray.map((f) => f.name).join(', ')} ` +
          `(${name}.${oneof.name} is required)`);
      }
    }
    for (const field of type.fieldsArray) {
      const key = present.get(field);
      const at = path ? `${path}.${key || field.name}` : key || field.name;
      this.checkRules(field, key === undefined ? undefined : value[key], at);
    }
  }

  fieldValue(field, value, path) {
    if (value === null) {
      this.problem(path, 'is null (empty); leave the field out instead');
      return;
    }
    if (field.map) {
      if (!isPlainObject(value)) {
        this.problem(path, `must be a mapping, got ${describe(value)}`);
        return;
      }
      for (const [k, v] of Object.entries(value)) {
        if (field.keyType !== 'string' && field.keyType !== 'bool' && !/^-?\d+$/.test(k)) {
          this.problem(`${path}.${k}`, `map key must be a ${field.keyType}`);
        }
        this.single(field, v, `${path}.${k}`);
      }
      return;
    }
    if (field.repeated) {
      if (!Array.isArray(value)) {
        this.problem(path, `must be a list, got ${describe(value)}`);
        return;
      }
      value.forEach((v, i) => this.single(field, v, `${path}[${i}]`));
      return;
    }
    this.single(field, value, path);
  }

  single(field, value, path) {
    const t = field.resolvedType;
    if (value === null && !(t && typeName(t) === 'google.protobuf.Value')) {
      this.problem(path, 'is null (empty)');
      return;
    }
    if (t instanceof protobuf.Enum) {
      this.enumValue(t, value, path);
    } else if (t instanceof protobuf.Type) {
      this.message(t, value, path);
    } else {
      this.scalar(field.type, value, path);
    }
  }

  enumValue(e, value, path) {
    const name = typeName(e);
    if (typeof value === 'string') {
      if (!Object.prototype.hasOwnProperty.call(e.values, value)) {
        this.problem(path, `"${value}" is not a value of ${name} ` +
          `(${Object.keys(e.values).join(', ')})`);
      } else if (isDeprecated(e.valuesOptions && e.valuesOptions[value])) {
        this.problem(path, `${name}.${value} is deprecated`);
      }
    } else if (!Number.isInteger(value)) {
      this.problem(path, `must be a value of ${name}, got ${describe(value)}`);
    }
  }

  scalar(kind, value, path) {
    const bad = (what) => this.problem(path, `must be ${what}, got ${describe(value)}`);
    if (kind === 'string') {
      if (typeof value !== 'string') bad('a string');
    } else if (kind === 'bytes') {
      if (typeof value !== 'string' || !/^[A-Za-z0-9+/_-]*={0,2}$/.test(value)) bad('base64 text');
    } else if (kind === 'bool') {
      if (typeof value !== 'boolean') bad('true or false');
    } else if (kind === 'double' || kind === 'float') {
      const ok = typeof value === 'number' ||
        (typeof value === 'string' && (/^(NaN|-?Infinity)$/.test(value) || value.trim() !== '' && !isNaN(Number(value))));
      if (!ok) bad('a number');
    } else if (INT_RANGES[kind]) {
      const n = typeof value === 'string' && /^-?\d+$/.test(value) ? Number(value) : value;
      const [lo, hi] = INT_RANGES[kind];
      if (!Number.isInteger(n) || n < lo || n > hi) bad(`a whole number in [${lo}, ${hi}] (${kind})`);
    } else if (INT64.has(kind) || UINT64.has(kind)) {
      const text = typeof value === 'number' && Number.isSafeInteger(value) ? String(value) : value;
      const re = UINT64.has(kind) ? /^\d+$/ : /^-?\d+$/;
      if (typeof text !== 'string' || !re.test(text)) bad(`a whole number (${kind})`);
    } else {
      this.problem(path, `has scalar type ${kind}, which this check does not know`);
    }
  }

  // Handles the well-known types, whose JSON forms are not objects of their
  // fields. Returns false for an ordinary message.
  wellKnown(name, type, value, path) {
    if (WRAPPERS[name]) {
      this.scalar(WRAPPERS[name], value, path);
      return true;
    }
    switch (name) {
      case 'google.protobuf.Duration': {
        // Sluice's files also take a bare 0 (YAML reads it as a number).
        const d = (this.durations === 'units' && value === 0) || (typeof value === 'string' &&
          (this.durations === 'units' ? parseUnitDuration(value) : parseJsonDuration(value)));
        if (!d) {
          this.problem(path, this.durations === 'units'
            ? `must be a duration such as "250ms" or "15s", got ${describe(value)}`
            : `must be a duration in seconds such as "0.25s", got ${describe(value)}`);
        }
        return true;
      }
      case 'google.protobuf.Timestamp':
        if (typeof value !== 'string' ||
            !/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$/.test(value)) {
          this.problem(path, `must be an RFC 3339 time, got ${describe(value)}`);
        }
        return true;
      case 'google.protobuf.FieldMask':
        if (typeof value !== 'string') this.problem(path, `must be a string, got ${describe(value)}`);
        return true;
      case 'google.protobuf.Struct':
        if (!isPlainObject(value)) this.problem(path, `must be a mapping, got ${describe(value)}`);
        return true;
      case 'google.protobuf.ListValue':
        if (!Array.isArray(value)) this.problem(path, `must be a list, got ${describe(value)}`);
        return true;
      case 'google.protobuf.Value':
        return true;
      case 'google.protobuf.Empty':
        if (!isPlainObject(value) || Object.keys(value).length) {
          this.problem(path, `must be {}, got ${describe(value)}`);
        }
        return true;
      case 'google.protobuf.Any':
        this.any(value, path);
        return true;
      default:
        return false;
    }
  }

  any(value, path) {
    if (!isPlainObject(value) || typeof value['@type'] !== 'string') {
      this.problem(path, `must be a mapping with an "@type" (google.protobuf.Any), got ${describe(value)}`);
      return;
    }
    const url = value['@type'];
    const slash = url.lastIndexOf('/');
    const name = url.slice(slash + 1);
    if (slash < 0 || !name) {
      this.problem(`${path}.@type`, `"${url}" is not a type URL (type.googleapis.com/NAME)`);
      return;
    }
    let type = null;
    try {
      type = this.root.lookupType(name);
    } catch (e) {
      type = null;
    }
    if (!type) {
      this.problem(`${path}.@type`, `"${url}": no message ${name} in the loaded protos`);
      return;
    }
    this.onAny(path, name, value);
    const body = Object.assign({}, value);
    delete body['@type'];
    if (this.wellKnown(name, type, body.value, `${path}.value`)) {
      if (Object.keys(body).some((k) => k !== 'value')) {
        this.problem(path, `an Any of ${name} holds only "@type" and "value"`);
      }
      return;
    }
    this.message(type, body, path);
  }

  // The protoc-gen-validate rules of one field, for the rule kinds Envoy's
  // configuration uses most. Rules this does not implement (pattern, email,
  // timestamp, bytes, ...) are passed over, not guessed at.
  checkRules(field, value, path) {
    const rules = fieldRules(field);
    if (!Object.keys(rules).length) return;
    const absent = value === undefined;
    if (absent && hasPresence(field)) return;
    const t = field.resolvedType;
    const name = t ? typeName(t) : field.type;
    if (rules.message && rules.message.required && absent) {
      this.problem(path, 'is required');
      return;
    }
    if (field.map) {
      const n = absent ? 0 : Object.keys(value || {}).length;
      const r = rules.map || {};
      if (r.min_pairs !== undefined && n < r.min_pairs) this.problem(path, `needs at least ${r.min_pairs} entries`);
      if (r.max_pairs !== undefined && n > r.max_pairs) this.problem(path, `takes at most ${r.max_pairs} entries`);
      return;
    }
    if (field.repeated) {
      const items = absent ? [] : (Array.isArray(value) ? value : []);
      const r = rules.repeated || {};
      if (r.min_items !== undefined && items.length < r.min_items) {
        this.problem(path, `needs at least ${r.min_items} item(s), has ${items.length}`);
      }
      if (r.max_items !== undefined && items.length > r.max_items) {
        this.problem(path, `takes at most ${r.max_items} item(s), has ${items.length}`);
      }
      if (r.unique && new Set(items.map((v) => JSON.stringify(v))).size !== items.length) {
        this.problem(path, 'items must be unique');
      }
      if (r.items) {
        items.forEach((v, i) => this.valueRules(r.items, name, v, `${path}[${i}]`, false));
      }
      return;
    }
    if (t instanceof protobuf.Type && !WRAPPERS[name] && name !== 'google.protobuf.Duration' &&
        name !== 'google.protobuf.Any') {
      return;
    }
    this.valueRules(rules, name, value, path, absent);
  }

  valueRules(rules, kind, value, path, absent) {
    if (kind === 'google.protobuf.Duration') {
      const r = rules.duration || {};
      if (absent) {
        if (r.required) this.problem(path, 'is required');
        return;
      }
      const d = this.durations === 'units' && value === 0 ? { seconds: 0, nanos: 0 }
        : typeof value === 'string' &&
          (this.durations === 'units' ? parseUnitDuration(value) : parseJsonDuration(value));
      if (!d) return;  // reported as a type error
      const s = durationSeconds(d);
      const limit = (x) => durationSeconds({ seconds: Number(x.seconds || 0), nanos: Number(x.nanos || 0) });
      if (r.gt && !(s > limit(r.gt))) this.problem(path, `must be longer than ${limit(r.gt)}s`);
      if (r.gte && !(s >= limit(r.gte))) this.problem(path, `must be at least ${limit(r.gte)}s`);
      if (r.lt && !(s < limit(r.lt))) this.problem(path, `must be shorter than ${limit(r.lt)}s`);
      if (r.lte && !(s <= limit(r.lte))) this.problem(path, `must be at most ${limit(r.lte)}s`);
      return;
    }
    if (kind === 'google.protobuf.Any') {
      const r = rules.any || {};
      if (absent && r.required) this.problem(path, 'is required');
      return;
    }
    const scalarKind = WRAPPERS[kind] || kind;
    if (absent && WRAPPERS[kind]) return;  // an unset wrapper is not validated
    if (rules.enum) {
      const r = rules.enum;
      const v = absent ? 0 : value;
      if (r.in && !r.in.includes(v)) this.problem(path, `must be one of ${r.in.join(', ')}`);
      if (r.not_in && r.not_in.includes(v)) this.problem(path, `must not be ${v}`);
      return;
    }
    const r = rules[scalarKind];
    if (!r) return;
    if (scalarKind === 'string') {
      const s = absent ? '' : value;
      if (typeof s !== 'string') return;
      if (r.ignore_empty && s === '') return;
      const chars = [...s].length;
      const bytes = Buffer.byteLength(s, 'utf8');
      const fail = (m) => this.problem(path, m + (absent ? ' (the field is left out, so it is "")' : ''));
      if (r.min_len !== undefined && chars < Number(r.min_len)) fail(`must be at least ${r.min_len} character(s)`);
      if (r.max_len !== undefined && chars > Number(r.max_len)) fail(`must be at most ${r.max_len} character(s)`);
      if (r.min_bytes !== undefined && bytes < Number(r.min_bytes)) fail(`must be at least ${r.min_bytes} byte(s)`);
      if (r.max_bytes !== undefined && bytes > Number(r.max_bytes)) fail(`must be at most ${r.max_bytes} byte(s)`);
      if (r.prefix !== undefined && !s.startsWith(r.prefix)) fail(`must start with "${r.prefix}"`);
      if (r.in && r.in.length && !r.in.includes(s)) fail(`must be one of ${r.in.map((x) => `"${x}"`).join(', ')}`);
      if (r.not_in && r.not_in.includes(s)) fail(`must not be "${s}"`);
      // protoc-gen-validate's header rules; `strict: false` (Envoy's usual
      // choice) only keeps out NUL, CR and LF.
      if (r.well_known_regex === 'HTTP_HEADER_NAME' || r.well_known_regex === 'HTTP_HEADER_VALUE') {
        const name = r.well_known_regex === 'HTTP_HEADER_NAME';
        const re = r.strict === false ? /^[^\0\n\r]*$/
          : name ? /^:?[0-9A-Za-z!#$%&'*+\-.^_|~`]+$/ : /^[^\0-\x08\x0a-\x1f\x7f]*$/;
        if ((!name || s !== '') && !re.test(s)) {
          fail(`${JSON.stringify(s)} is not an HTTP header ${name ? 'name' : 'value'}`);
        }
      }
      return;
    }
    if (scalarKind === 'bool') {
      if (r.const !== undefined && (absent ? false : value) !== r.const) {
        this.problem(path, `must be ${r.const}`);
      }
      return;
    }
    const n = absent ? 0 : Number(value);
    if (Number.isNaN(n)) return;
    if (r.gt !== undefined && !(n > Number(r.gt))) this.problem(path, `must be > ${r.gt}, got ${n}`);
    if (r.gte !== undefined && !(n >= Number(r.gte))) this.problem(path, `must be >= ${r.gte}, got ${n}`);
    if (r.lt !== undefined && !(n < Number(r.lt))) this.problem(path, `must be < ${r.lt}, got ${n}`);
    if (r.lte !== undefined && !(n <= Number(r.lte))) this.problem(path, `must be <= ${r.lte}, got ${n}`);
    if (r.const !== undefined && n !== Number(r.const)) this.problem(path, `must be ${r.const}, got ${n}`);
    if (r.in && r.in.length && !r.in.map(Number).includes(n)) this.problem(path, `must be one of ${r.in.join(', ')}`);
  }
}

module.exports = { ProtoJsonChecker, parseJsonDuration, parseUnitDuration, durationSeconds, jsonName };
