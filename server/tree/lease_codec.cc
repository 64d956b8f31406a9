// SPDX-License-Identifier: Apache-2.0
#include "server/tree/lease_codec.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "wire/limits.h"
#include "wire/quote.h"
#include "wire/status.h"
#include "wire/time.h"

namespace sluice::tree {
namespace {

using google::protobuf::Duration;

// Where a value sits in the message, rendered only for an error:
// "policies[2].keys[7].key".
struct Path {
  const Path* parent = nullptr;
  absl::string_view name;
  int64_t index = -1;

  Path Field(absl::string_view field) const { return Path{this, field}; }
  Path Item(absl::string_view field, size_t i) const {
    return Path{this, field, static_cast<int64_t>(i)};
  }
  std::string Render() const {
    std::string out = parent != nullptr ? parent->Render() : std::string();
    if (name.empty()) return out;
    if (!out.empty()) out += ".";
    absl::StrAppend(&out, name);
    if (index >= 0) absl::StrAppend(&out, "[", index, "]");
    return out;
  }
};

absl::Status Invalid(const Path& path, absl::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat(path.Render(), " ", rule));
}

absl::Status CheckCount(const Path& path, size_t count, size_t max) {
  if (count <= max) return absl::OkStatus();
  return Invalid(
      path, absl::StrCat("must hold at most ", max, " entries, got ", count));
}

// Reads a repeated field of at most `max` entries into `out`, each through
// `get(entry, path of the entry)`, stopping at the first error.
template <typename Entry, typename Get, typename T>
absl::Status GetList(const google::protobuf::RepeatedPtrField<Entry>& list,
                     const Path& parent, absl::string_view field, size_t max,
                     Get get, std::vector<T>* out) {
  SLUICE_RETURN_IF_ERROR(CheckCount(parent.Field(field), list.size(), max));
  out->reserve(list.size());
  for (int i = 0; i < list.size(); ++i) {
    SLUICE_ASSIGN_OR_RETURN(T value, get(list[i], parent.Item(field, i)));
    out->push_back(std::move(value));
  }
  return absl::OkStatus();
}

absl::Status CheckBytes(const Path& path, absl::string_view value, size_t max) {
  if (value.size() <= max) return absl::OkStatus();
  return Invalid(path, absl::StrCat("must be at most ", max, " bytes, got ",
                                    value.size()));
}

absl::Status CheckName(const Path& path, absl::string_view value) {
  if (value.empty()) return Invalid(path, "must be set");
  return CheckBytes(path, value, wire::kMaxNameBytes);
}

absl::Status CheckNonNegative(const Path& path, int64_t value) {
  if (value >= 0) return absl::OkStatus();
  return Invalid(path, absl::StrCat("must not be negative, got ", value));
}

absl::Status CheckAmount(const Path& path, double value) {
  if (std::isfinite(value) && value >= 0) return absl::OkStatus();
  return Invalid(path,
                 absl::StrCat("must be a finite number >= 0, got ", value));
}

// --- Durations and store-clock times --------------------------------------

void PutDuration(absl::Duration d, Duration* out) {
  wire::DurationToProto(d, out);
}

// A duration that must not be negative.
absl::StatusOr<absl::Duration> GetDuration(const Duration& proto,
                                           const Path& path) {
  // The path is rendered only for an error (keys carry a duration each).
  absl::StatusOr<absl::Duration> d = wire::DurationFromProto(proto, "");
  if (!d.ok()) return wire::DurationFromProto(proto, path.Render()).status();
  if (*d < absl::ZeroDuration()) {
    return Invalid(path, absl::StrCat("must not be negative, got ",
                                      absl::FormatDuration(*d)));
  }
  return *d;
}

// Store-clock times as Unix milliseconds; 0 is "no time".
int64_t PutTime(absl::Time t) {
  if (t == absl::InfinitePast()) return 0;
  const int64_t ms = absl::ToUnixMillis(t);
  return ms > 0 ? ms : 0;
}

absl::StatusOr<absl::Time> GetTime(int64_t ms, const Path& path) {
  SLUICE_RETURN_IF_ERROR(CheckNonNegative(path, ms));
  return ms == 0 ? absl::InfinitePast() : absl::FromUnixMillis(ms);
}

// --- Enums ----------------------------------------------------------------

v1::BreakerState PutState(core::BreakerState s) {
  return static_cast<v1::BreakerState>(static_cast<int>(s));
}

absl::StatusOr<core::BreakerState> GetState(int value, const Path& path) {
  // UNSPECIFIED is the record's default, CLOSED.
  if (value == v1::BREAKER_STATE_UNSPECIFIED)
    return core::BreakerState::kClosed;
  if (value < v1::CLOSED || value > v1::FORCED_CLOSED) {
    return Invalid(path, absl::StrCat("must be a BreakerState, got ", value));
  }
  return static_cast<core::BreakerState>(value);
}

absl::StatusOr<core::Outcome> GetOutcome(int value, const Path& path) {
  if (value < v1::SUCCESS || value > v1::CANCELLED) {
    return Invalid(path, absl::StrCat("must be an Outcome, got ", value));
  }
  return static_cast<core::Outcome>(value);
}

absl::StatusOr<core::BreakerOverride> GetOverride(int value, const Path& path) {
  if (value < v1::AUTO || value > v1::FORCE_CLOSED) {
    return Invalid(path,
                   absl::StrCat("must be a BreakerOverride, got ", value));
  }
  return static_cast<core::BreakerOverride>(value);
}

// --- Small records --------------------------------------------------------

void PutUnits(const core::Units& u, v1::LeaseUnits* out) {
  out->set_rate(u[core::kRateUnits]);
  out->set_slots(u[core::kSlotUnits]);
}

absl::StatusOr<core::Units> GetUnits(const v1::LeaseUnits& proto,
                                     const Path& path) {
  SLUICE_RETURN_IF_ERROR(CheckNonNegative(path.Field("rate"), proto.rate()));
  SLUICE_RETURN_IF_ERROR(CheckNonNegative(path.Field("slots"), proto.slots()));
  core::Units u{};
  u[core::kRateUnits] = proto.rate();
  u[core::kSlotUnits] = proto.slots();
  return u;
}

void PutTotals(const core::OutcomeTotals& t, v1::LeaseOutcomeTotals* out) {
  out->set_calls(t.calls);
  out->set_failures(t.failures);
  out->set_slow(t.slow);
}

core::OutcomeTotals GetTotals(const v1::LeaseOutcomeTotals& proto) {
  core::OutcomeTotals t;
  t.calls = proto.calls();
  t.failures = proto.failures();
  t.slow = proto.slow();
  return t;
}

void PutBreaker(const core::BreakerRecord& r, v1::LeaseBreakerRecord* out) {
  out->set_generation(r.generation);
  out->set_base(r.base);
  out->set_state(PutState(r.state));
  out->set_open_until_ms(PutTime(r.open_until));
  PutDuration(r.open_duration, out->mutable_open_duration());
  out->set_cause(r.cause);
  out->set_replica(r.replica);
}

absl::StatusOr<core::BreakerRecord> GetBreaker(
    const v1::LeaseBreakerRecord& proto, const Path& path) {
  core::BreakerRecord r;
  r.generation = proto.generation();
  r.base = proto.base();
  SLUICE_ASSIGN_OR_RETURN(r.state,
                          GetState(proto.state(), path.Field("state")));
  SLUICE_ASSIGN_OR_RETURN(r.open_until, GetTime(proto.open_until_ms(),
                                                path.Field("open_until_ms")));
  SLUICE_ASSIGN_OR_RETURN(
      r.open_duration,
      GetDuration(proto.open_duration(), path.Field("open_duration")));
  SLUICE_RETURN_IF_ERROR(
      CheckBytes(path.Field("cause"), proto.cause(), kMaxLeaseTextBytes));
  SLUICE_RETURN_IF_ERROR(
      CheckBytes(path.Field("replica"), proto.replica(), wire::kMaxNameBytes));
  r.cause = proto.cause();
  r.replica = proto.replica();
  return r;
}

void PutAdaptive(const core::AdaptiveLimitState& a,
                 v1::LeaseAdaptiveState* out) {
  out->set_steady_limit(a.steady_limit);
  if (a.baseline > absl::ZeroDuration()) {
    PutDuration(a.baseline, out->mutable_baseline());
  }
}

absl::StatusOr<core::AdaptiveLimitState> GetAdaptive(
    const v1::LeaseAdaptiveState& proto, const Path& path) {
  core::AdaptiveLimitState a;
  a.steady_limit = proto.steady_limit();
  if (proto.has_baseline()) {
    SLUICE_ASSIGN_OR_RETURN(
        a.baseline, GetDuration(proto.baseline(), path.Field("baseline")));
  }
  return a;
}

void PutBaseline(const core::BaselineState& b, v1::LeaseBaselineState* out) {
  out->set_windows(b.windows);
  out->set_mean_us(b.mean_us);
  out->set_var_us2(b.var_us2);
  out->set_success(b.success);
}

absl::StatusOr<core::BaselineState> GetBaseline(
    const v1::LeaseBaselineState& proto, const Path& path) {
  SLUICE_RETURN_IF_ERROR(CheckAmount(path.Field("mean_us"), proto.mean_us()));
  SLUICE_RETURN_IF_ERROR(CheckAmount(path.Field("var_us2"), proto.var_us2()));
  if (!(proto.success() >= 0 && proto.success() <= 1)) {
    return Invalid(path.Field("success"),
                   absl::StrCat("must be in [0, 1], got ", proto.success()));
  }
  core::BaselineState b;
  b.windows = proto.windows();
  b.mean_us = proto.mean_us();
  b.var_us2 = proto.var_us2();
  b.success = proto.success();
  return b;
}

void PutForwarded(const core::ForwardedReport& f,
                  v1::LeaseForwardedReport* out) {
  out->set_issuer(f.issuer);
  out->set_dependency(f.dependency);
  out->set_key(f.key);
  out->set_permit_serial(f.permit_id.serial);
  out->set_permit_mac(f.permit_id.mac);
  out->set_outcome(static_cast<v1::Outcome>(static_cast<int>(f.outcome)));
  PutDuration(f.latency, out->mutable_latency());
}

absl::StatusOr<core::ForwardedReport> GetForwarded(
    const v1::LeaseForwardedReport& proto, const Path& path) {
  SLUICE_RETURN_IF_ERROR(CheckName(path.Field("issuer"), proto.issuer()));
  SLUICE_RETURN_IF_ERROR(
      CheckName(path.Field("dependency"), proto.dependency()));
  SLUICE_RETURN_IF_ERROR(
      CheckBytes(path.Field("key"), proto.key(), wire::kMaxKeyBytes));
  core::ForwardedReport f;
  SLUICE_ASSIGN_OR_RETURN(f.outcome,
                          GetOutcome(proto.outcome(), path.Field("outcome")));
  SLUICE_ASSIGN_OR_RETURN(f.latency,
                          GetDuration(proto.latency(), path.Field("latency")));
  f.issuer = proto.issuer();
  f.dependency = proto.dependency();
  f.key = proto.key();
  f.permit_id.serial = proto.permit_serial();
  f.permit_id.mac = proto.permit_mac();
  return f;
}

// --- Config ---------------------------------------------------------------

void PutPolicy(const cluster::StoredPolicy& p, v1::LeaseStoredPolicy* out) {
  out->set_name(p.name);
  out->set_blob(p.blob);
  out->set_version(p.version);
}

absl::StatusOr<cluster::StoredPolicy> GetPolicy(
    const v1::LeaseStoredPolicy& proto, const Path& path) {
  SLUICE_RETURN_IF_ERROR(CheckName(path.Field("name"), proto.name()));
  SLUICE_RETURN_IF_ERROR(
      CheckBytes(path.Field("blob"), proto.blob(), kMaxLeasePolicyBlobBytes));
  cluster::StoredPolicy p;
  p.name = proto.name();
  p.blob = proto.blob();
  p.version = proto.version();
  return p;
}

void PutConfig(const cluster::ConfigSnapshot& c, v1::LeaseConfigSnapshot* out) {
  out->set_version(c.version);
  for (const cluster::StoredPolicy& p : c.policies) {
    PutPolicy(p, out->add_policies());
  }
  for (const cluster::StoredOverride& o : c.overrides) {
    v1::LeaseStoredOverride* po = out->add_overrides();
    po->set_dependency(o.dependency);
    po->set_mode(static_cast<v1::BreakerOverride>(static_cast<int>(o.mode)));
    po->set_note(o.note);
  }
  for (const auto& [name, version] : c.deleted) {
    v1::LeaseDeletedPolicy* d = out->add_deleted();
    d->set_name(name);
    d->set_version(version);
  }
}

absl::StatusOr<cluster::ConfigSnapshot> GetConfig(
    const v1::LeaseConfigSnapshot& proto, const Path& path) {
  cluster::ConfigSnapshot c;
  c.version = proto.version();
  SLUICE_RETURN_IF_ERROR(GetList(proto.policies(), path, "policies",
                                 kMaxLeaseConfigEntries, GetPolicy,
                                 &c.policies));
  SLUICE_RETURN_IF_ERROR(CheckCount(
      path.Field("overrides"), proto.overrides_size(), kMaxLeaseConfigEntries));
  c.overrides.reserve(proto.overrides_size());
  for (int i = 0; i < proto.overrides_size(); ++i) {
    const v1::LeaseStoredOverride& po = proto.overrides(i);
    const Path item = path.Item("overrides", i);
    SLUICE_RETURN_IF_ERROR(
        CheckName(item.Field("dependency"), po.dependency()));
    SLUICE_RETURN_IF_ERROR(
        CheckBytes(item.Field("note"), po.note(), kMaxLeaseTextBytes));
    cluster::StoredOverride o;
    SLUICE_ASSIGN_OR_RETURN(o.mode, GetOverride(po.mode(), item.Field("mode")));
    o.dependency = po.dependency();
    o.note = po.note();
    c.overrides.push_back(std::move(o));
  }
  SLUICE_RETURN_IF_ERROR(CheckCount(path.Field("deleted"), proto.deleted_size(),
                                    kMaxLeaseConfigEntries));
  c.deleted.reserve(proto.deleted_size());
  for (int i = 0; i < proto.deleted_size(); ++i) {
    const v1::LeaseDeletedPolicy& d = proto.deleted(i);
    SLUICE_RETURN_IF_ERROR(
        CheckName(path.Item("deleted", i).Field("name"), d.name()));
    c.deleted.emplace_back(d.name(), d.version());
  }
  return c;
}

// --- Request --------------------------------------------------------------

void PutKey(const core::KeyTick& k, v1::LeaseKeyTick* out) {
  out->set_key(k.key);
  PutUnits(k.limit, out->mutable_limit());
  out->mutable_demand()->set_rate(k.demand[core::kRateUnits]);
  out->mutable_demand()->set_slots(k.demand[core::kSlotUnits]);
  PutUnits(k.usage, out->mutable_usage());
  PutUnits(k.applied, out->mutable_applied());
  PutDuration(k.applied_left, out->mutable_applied_left());
  out->set_admitted_total(k.admitted_total);
  if (k.usage_left[core::kRateUnits] != absl::ZeroDuration() ||
      k.usage_left[core::kSlotUnits] != absl::ZeroDuration()) {
    PutDuration(k.usage_left[core::kRateUnits],
                out->mutable_usage_left()->mutable_rate());
    PutDuration(k.usage_left[core::kSlotUnits],
                out->mutable_usage_left()->mutable_slots());
  }
}

absl::StatusOr<core::KeyTick> GetKey(const v1::LeaseKeyTick& proto,
                                     const Path& path) {
  SLUICE_RETURN_IF_ERROR(
      CheckBytes(path.Field("key"), proto.key(), wire::kMaxKeyBytes));
  core::KeyTick k;
  k.key = proto.key();
  SLUICE_ASSIGN_OR_RETURN(k.limit,
                          GetUnits(proto.limit(), path.Field("limit")));
  const Path demand = path.Field("demand");
  SLUICE_RETURN_IF_ERROR(
      CheckAmount(demand.Field("rate"), proto.demand().rate()));
  SLUICE_RETURN_IF_ERROR(
      CheckAmount(demand.Field("slots"), proto.demand().slots()));
  k.demand[core::kRateUnits] = proto.demand().rate();
  k.demand[core::kSlotUnits] = proto.demand().slots();
  SLUICE_ASSIGN_OR_RETURN(k.usage,
                          GetUnits(proto.usage(), path.Field("usage")));
  SLUICE_ASSIGN_OR_RETURN(k.applied,
                          GetUnits(proto.applied(), path.Field("applied")));
  SLUICE_ASSIGN_OR_RETURN(
      k.applied_left,
      GetDuration(proto.applied_left(), path.Field("applied_left")));
  k.admitted_total = proto.admitted_total();
  const Path usage_left = path.Field("usage_left");
  SLUICE_ASSIGN_OR_RETURN(
      k.usage_left[core::kRateUnits],
      GetDuration(proto.usage_left().rate(), usage_left.Field("rate")));
  SLUICE_ASSIGN_OR_RETURN(
      k.usage_left[core::kSlotUnits],
      GetDuration(proto.usage_left().slots(), usage_left.Field("slots")));
  return k;
}

void PutPush(const cluster::PolicyPush& p, v1::LeasePolicyPush* out) {
  out->set_policy(p.policy);
  out->set_per_key(p.per_key);
  out->set_epoch_seen(p.epoch_seen);
  out->mutable_keys()->Reserve(static_cast<int>(p.keys.size()));
  for (const core::KeyTick& k : p.keys) PutKey(k, out->add_keys());
  if (p.has_breaker) {
    PutTotals(p.outcomes, out->mutable_outcomes());
    PutBreaker(p.breaker, out->mutable_breaker());
  }
  out->set_publish(p.publish);
  out->set_leases_wanted(p.leases_wanted);
  out->set_lease_cap(p.lease_cap);
  PutDuration(p.lease_ttl, out->mutable_lease_ttl());
  out->set_has_warm(p.has_warm);
  if (p.has_warm) {
    out->set_digest(p.digest);
    PutAdaptive(p.adaptive, out->mutable_adaptive());
    PutBaseline(p.baseline, out->mutable_baseline());
  }
}

absl::StatusOr<cluster::PolicyPush> GetPush(const v1::LeasePolicyPush& proto,
                                            const Path& path,
                                            size_t* keys_left) {
  SLUICE_RETURN_IF_ERROR(CheckName(path.Field("policy"), proto.policy()));
  SLUICE_RETURN_IF_ERROR(CheckBytes(path.Field("epoch_seen"),
                                    proto.epoch_seen(), kMaxLeaseTextBytes));
  const size_t nkeys = static_cast<size_t>(proto.keys_size());
  SLUICE_RETURN_IF_ERROR(
      CheckCount(path.Field("keys"), nkeys, kMaxLeaseKeysPerPolicy));
  if (nkeys > *keys_left) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request pushes more than ", kMaxLeaseKeys,
                     " keys in all (at ", path.Field("keys").Render(), ")"));
  }
  *keys_left -= nkeys;
  cluster::PolicyPush p;
  p.policy = proto.policy();
  p.per_key = proto.per_key();
  p.epoch_seen = proto.epoch_seen();
  p.keys.reserve(nkeys);
  // A key pushed twice would be counted twice against the limit.
  absl::flat_hash_set<absl::string_view> seen;
  seen.reserve(nkeys);
  for (size_t i = 0; i < nkeys; ++i) {
    const Path item = path.Item("keys", i);
    SLUICE_ASSIGN_OR_RETURN(core::KeyTick k, GetKey(proto.keys(i), item));
    if (!seen.insert(proto.keys(i).key()).second) {
      return Invalid(item.Field("key"),
                     absl::StrCat(wire::QuoteUntrusted(proto.keys(i).key()),
                                  " is pushed twice"));
    }
    p.keys.push_back(std::move(k));
  }
  p.has_breaker = proto.has_breaker();
  if (p.has_breaker) {
    p.outcomes = GetTotals(proto.outcomes());
    SLUICE_ASSIGN_OR_RETURN(p.breaker,
                            GetBreaker(proto.breaker(), path.Field("breaker")));
  }
  p.publish = proto.publish();
  p.leases_wanted = proto.leases_wanted();
  p.lease_cap = proto.lease_cap();
  SLUICE_ASSIGN_OR_RETURN(
      p.lease_ttl, GetDuration(proto.lease_ttl(), path.Field("lease_ttl")));
  p.has_warm = proto.has_warm();
  if (p.has_warm) {
    p.digest = proto.digest();
    SLUICE_ASSIGN_OR_RETURN(
        p.adaptive, GetAdaptive(proto.adaptive(), path.Field("adaptive")));
    SLUICE_ASSIGN_OR_RETURN(
        p.baseline, GetBaseline(proto.baseline(), path.Field("baseline")));
  }
  return p;
}

// --- Reply ----------------------------------------------------------------

void PutPull(const cluster::PolicyPull& p, v1::LeasePolicyPull* out) {
  out->set_epoch(p.epoch);
  out->set_lost(p.lost);
  out->mutable_grants()->Reserve(static_cast<int>(p.grants.size()));
  for (const cluster::StoreGrant& g : p.grants) {
    v1::LeaseGrant* pg = out->add_grants();
    pg->set_static_share(!g.granted);
    PutUnits(g.units, pg->mutable_units());
    // Infinite (a store whose grants last the stale period) is "absent".
    if (g.valid_for != absl::InfiniteDuration()) {
      PutDuration(g.valid_for, pg->mutable_valid_for());
    }
  }
  for (const cluster::ReplicaOutcomes& o : p.outcomes) {
    v1::LeaseReplicaOutcomes* po = out->add_outcomes();
    po->set_replica(o.replica);
    PutTotals(o.totals, po->mutable_totals());
  }
  if (p.breaker) PutBreaker(*p.breaker, out->mutable_breaker());
  out->set_leases_granted(p.leases_granted);
  for (const cluster::ReplicaWarm& w : p.warm) {
    v1::LeaseReplicaWarm* pw = out->add_warm();
    pw->set_replica(w.replica);
    pw->set_digest(w.digest);
    PutAdaptive(w.adaptive, pw->mutable_adaptive());
    PutBaseline(w.baseline, pw->mutable_baseline());
    pw->set_updated_ms(PutTime(w.updated));
  }
}

absl::StatusOr<cluster::PolicyPull> GetPull(const v1::LeasePolicyPull& proto,
                                            const Path& path) {
  SLUICE_RETURN_IF_ERROR(
      CheckBytes(path.Field("epoch"), proto.epoch(), kMaxLeaseTextBytes));
  SLUICE_RETURN_IF_ERROR(CheckCount(path.Field("grants"), proto.grants_size(),
                                    kMaxLeaseKeysPerPolicy));
  SLUICE_RETURN_IF_ERROR(CheckCount(path.Field("outcomes"),
                                    proto.outcomes_size(), kMaxLeaseReplicas));
  SLUICE_RETURN_IF_ERROR(
      CheckCount(path.Field("warm"), proto.warm_size(), kMaxLeaseReplicas));
  cluster::PolicyPull p;
  p.epoch = proto.epoch();
  p.lost = proto.lost();
  p.grants.reserve(proto.grants_size());
  for (int i = 0; i < proto.grants_size(); ++i) {
    const v1::LeaseGrant& pg = proto.grants(i);
    const Path item = path.Item("grants", i);
    cluster::StoreGrant g;
    g.granted = !pg.static_share();
    SLUICE_ASSIGN_OR_RETURN(g.units, GetUnits(pg.units(), item.Field("units")));
    if (pg.has_valid_for()) {
      SLUICE_ASSIGN_OR_RETURN(
          g.valid_for, GetDuration(pg.valid_for(), item.Field("valid_for")));
    }
    p.grants.push_back(g);
  }
  p.outcomes.reserve(proto.outcomes_size());
  for (int i = 0; i < proto.outcomes_size(); ++i) {
    const v1::LeaseReplicaOutcomes& po = proto.outcomes(i);
    SLUICE_RETURN_IF_ERROR(
        CheckName(path.Item("outcomes", i).Field("replica"), po.replica()));
    p.outcomes.push_back({po.replica(), GetTotals(po.totals())});
  }
  if (proto.has_breaker()) {
    SLUICE_ASSIGN_OR_RETURN(p.breaker,
                            GetBreaker(proto.breaker(), path.Field("breaker")));
  }
  p.leases_granted = proto.leases_granted();
  p.warm.reserve(proto.warm_size());
  for (int i = 0; i < proto.warm_size(); ++i) {
    const v1::LeaseReplicaWarm& pw = proto.warm(i);
    const Path item = path.Item("warm", i);
    SLUICE_RETURN_IF_ERROR(CheckName(item.Field("replica"), pw.replica()));
    cluster::ReplicaWarm w;
    w.replica = pw.replica();
    w.digest = pw.digest();
    SLUICE_ASSIGN_OR_RETURN(w.adaptive,
                            GetAdaptive(pw.adaptive(), item.Field("adaptive")));
    SLUICE_ASSIGN_OR_RETURN(w.baseline,
                            GetBaseline(pw.baseline(), item.Field("baseline")));
    SLUICE_ASSIGN_OR_RETURN(w.updated,
                            GetTime(pw.updated_ms(), item.Field("updated_ms")));
    p.warm.push_back(std::move(w));
  }
  return p;
}

void PutPolicyBreaker(const cluster::PolicyBreaker& b,
                      v1::LeasePolicyBreaker* out) {
  out->set_policy(b.policy);
  PutBreaker(b.record, out->mutable_record());
}

// TickReply::breakers, the records of policies the request left out. Only a
// store that answers for those (breakers_epoch set) may send any, and one
// per policy: a leaf given two records for a policy would have to guess
// which one stands.
absl::Status GetPolicyBreakers(const v1::LeaseTickReply& proto,
                               const Path& root,
                               std::vector<cluster::PolicyBreaker>* out) {
  const Path path = root.Field("breakers");
  if (proto.breakers_epoch() == 0 && proto.breakers_size() > 0) {
    return Invalid(
        path, absl::StrCat("must be empty when breakers_epoch is 0 (a store "
                           "that does not answer for policies left out), got ",
                           proto.breakers_size(), " entries"));
  }
  SLUICE_RETURN_IF_ERROR(
      CheckCount(path, proto.breakers_size(), kMaxLeaseBreakers));
  out->reserve(proto.breakers_size());
  absl::flat_hash_set<absl::string_view> seen;
  seen.reserve(proto.breakers_size());
  for (int i = 0; i < proto.breakers_size(); ++i) {
    const v1::LeasePolicyBreaker& pb = proto.breakers(i);
    const Path item = root.Item("breakers", i);
    SLUICE_RETURN_IF_ERROR(CheckName(item.Field("policy"), pb.policy()));
    if (!seen.insert(pb.policy()).second) {
      return Invalid(
          item.Field("policy"),
          absl::StrCat(wire::QuoteUntrusted(pb.policy()), " has two records"));
    }
    if (!pb.has_record()) return Invalid(item.Field("record"), "must be set");
    SLUICE_ASSIGN_OR_RETURN(core::BreakerRecord record,
                            GetBreaker(pb.record(), item.Field("record")));
    out->push_back({pb.policy(), std::move(record)});
  }
  return absl::OkStatus();
}

}  // namespace

void EncodeTickRequest(const cluster::TickRequest& request,
                       v1::LeaseTickRequest* out) {
  out->set_replica_id(request.replica_id);
  out->set_incarnation(request.incarnation);
  out->set_sequence(request.sequence);
  out->set_weight(request.weight);
  PutDuration(request.stale_after, out->mutable_stale_after());
  PutDuration(request.key_ttl, out->mutable_key_ttl());
  out->set_live_replicas(request.live_replicas);
  out->set_leaving(request.leaving);
  out->mutable_policies()->Reserve(static_cast<int>(request.policies.size()));
  for (const cluster::PolicyPush& p : request.policies) {
    PutPush(p, out->add_policies());
  }
  out->set_config_seen(request.config_seen);
  out->set_config_epoch_seen(request.config_epoch_seen);
  for (const cluster::StoredPolicy& p : request.seed) {
    PutPolicy(p, out->add_seed());
  }
  if (request.restore) PutConfig(*request.restore, out->mutable_restore());
  out->mutable_forwarded()->Reserve(static_cast<int>(request.forwarded.size()));
  for (const core::ForwardedReport& f : request.forwarded) {
    PutForwarded(f, out->add_forwarded());
  }
  out->set_members_epoch_seen(request.members_epoch_seen);
  out->set_members_seen(request.members_seen);
  out->set_breakers_epoch_seen(request.breakers_epoch_seen);
  out->set_breakers_seen(request.breakers_seen);
}

absl::StatusOr<cluster::TickRequest> DecodeTickRequest(
    const v1::LeaseTickRequest& proto) {
  const Path root;
  SLUICE_RETURN_IF_ERROR(
      CheckName(root.Field("replica_id"), proto.replica_id()));
  if (proto.weight() < 1) {
    return Invalid(root.Field("weight"),
                   absl::StrCat("must be at least 1, got ", proto.weight()));
  }
  SLUICE_RETURN_IF_ERROR(CheckBytes(root.Field("config_epoch_seen"),
                                    proto.config_epoch_seen(),
                                    kMaxLeaseTextBytes));
  SLUICE_RETURN_IF_ERROR(CheckBytes(root.Field("members_epoch_seen"),
                                    proto.members_epoch_seen(),
                                    kMaxLeaseTextBytes));
  SLUICE_RETURN_IF_ERROR(CheckCount(root.Field("policies"),
                                    proto.policies_size(), kMaxLeasePolicies));
  cluster::TickRequest r;
  r.replica_id = proto.replica_id();
  r.incarnation = proto.incarnation();
  r.sequence = proto.sequence();
  r.weight = proto.weight();
  SLUICE_ASSIGN_OR_RETURN(
      r.stale_after,
      GetDuration(proto.stale_after(), root.Field("stale_after")));
  if (r.stale_after <= absl::ZeroDuration()) {
    return Invalid(root.Field("stale_after"), "must be positive");
  }
  SLUICE_ASSIGN_OR_RETURN(r.key_ttl,
                          GetDuration(proto.key_ttl(), root.Field("key_ttl")));
  r.live_replicas = proto.live_replicas();
  r.leaving = proto.leaving();
  r.policies.reserve(proto.policies_size());
  size_t keys_left = kMaxLeaseKeys;
  // A policy pushed twice would have two entries for one replica.
  absl::flat_hash_set<absl::string_view> seen;
  seen.reserve(proto.policies_size());
  for (int i = 0; i < proto.policies_size(); ++i) {
    const Path item = root.Item("policies", i);
    SLUICE_ASSIGN_OR_RETURN(cluster::PolicyPush p,
                            GetPush(proto.policies(i), item, &keys_left));
    if (!seen.insert(proto.policies(i).policy()).second) {
      return Invalid(
          item.Field("policy"),
          absl::StrCat(wire::QuoteUntrusted(p.policy), " is pushed twice"));
    }
    r.policies.push_back(std::move(p));
  }
  r.config_seen = proto.config_seen();
  r.config_epoch_seen = proto.config_epoch_seen();
  SLUICE_RETURN_IF_ERROR(GetList(proto.seed(), root, "seed",
                                 kMaxLeaseConfigEntries, GetPolicy, &r.seed));
  if (proto.has_restore()) {
    SLUICE_ASSIGN_OR_RETURN(r.restore,
                            GetConfig(proto.restore(), root.Field("restore")));
  }
  SLUICE_RETURN_IF_ERROR(GetList(proto.forwarded(), root, "forwarded",
                                 kMaxLeaseForwarded, GetForwarded,
                                 &r.forwarded));
  r.members_epoch_seen = proto.members_epoch_seen();
  r.members_seen = proto.members_seen();
  // Any pair is taken: one the central does not know (say a version
  // without its epoch) only gets the leaf every record.
  r.breakers_epoch_seen = proto.breakers_epoch_seen();
  r.breakers_seen = proto.breakers_seen();
  return r;
}

void EncodeTickReply(const cluster::TickReply& reply, v1::LeaseTickReply* out) {
  out->set_store_now_ms(PutTime(reply.store_now));
  out->set_config_epoch(reply.config_epoch);
  out->set_config_lost(reply.config_lost);
  for (const std::string& r : reply.replicas) out->add_replicas(r);
  out->set_live_weight(reply.live_weight);
  out->mutable_policies()->Reserve(static_cast<int>(reply.policies.size()));
  for (const cluster::PolicyPull& p : reply.policies) {
    PutPull(p, out->add_policies());
  }
  if (reply.config) PutConfig(*reply.config, out->mutable_config());
  out->mutable_forwarded_to_me()->Reserve(
      static_cast<int>(reply.forwarded_to_me.size()));
  for (const core::ForwardedReport& f : reply.forwarded_to_me) {
    PutForwarded(f, out->add_forwarded_to_me());
  }
  out->set_inbox_dropped(reply.inbox_dropped);
  if (reply.tick_again_in > absl::ZeroDuration()) {
    PutDuration(reply.tick_again_in, out->mutable_tick_again_in());
  }
  out->set_members_epoch(reply.members_epoch);
  out->set_members_version(reply.members_version);
  out->set_members_unchanged(reply.members_unchanged);
  out->set_breakers_epoch(reply.breakers_epoch);
  out->set_breakers_version(reply.breakers_version);
  out->mutable_breakers()->Reserve(static_cast<int>(reply.breakers.size()));
  for (const cluster::PolicyBreaker& b : reply.breakers) {
    PutPolicyBreaker(b, out->add_breakers());
  }
}

absl::StatusOr<cluster::TickReply> DecodeTickReply(
    const v1::LeaseTickReply& proto) {
  const Path root;
  cluster::TickReply r;
  SLUICE_ASSIGN_OR_RETURN(
      r.store_now, GetTime(proto.store_now_ms(), root.Field("store_now_ms")));
  SLUICE_RETURN_IF_ERROR(CheckBytes(root.Field("config_epoch"),
                                    proto.config_epoch(), kMaxLeaseTextBytes));
  r.config_epoch = proto.config_epoch();
  r.config_lost = proto.config_lost();
  SLUICE_RETURN_IF_ERROR(CheckCount(root.Field("replicas"),
                                    proto.replicas_size(), kMaxLeaseReplicas));
  r.replicas.reserve(proto.replicas_size());
  for (int i = 0; i < proto.replicas_size(); ++i) {
    SLUICE_RETURN_IF_ERROR(
        CheckName(root.Item("replicas", i), proto.replicas(i)));
    r.replicas.push_back(proto.replicas(i));
  }
  r.live_weight = proto.live_weight();
  SLUICE_RETURN_IF_ERROR(CheckBytes(root.Field("members_epoch"),
                                    proto.members_epoch(), kMaxLeaseTextBytes));
  r.members_epoch = proto.members_epoch();
  r.members_version = proto.members_version();
  r.members_unchanged = proto.members_unchanged();
  if (r.members_unchanged && !r.replicas.empty()) {
    return Invalid(root.Field("replicas"),
                   "must be empty when members_unchanged is set");
  }
  SLUICE_RETURN_IF_ERROR(CheckCount(root.Field("policies"),
                                    proto.policies_size(), kMaxLeasePolicies));
  r.policies.reserve(proto.policies_size());
  for (int i = 0; i < proto.policies_size(); ++i) {
    SLUICE_ASSIGN_OR_RETURN(
        cluster::PolicyPull p,
        GetPull(proto.policies(i), root.Item("policies", i)));
    r.policies.push_back(std::move(p));
  }
  if (proto.has_config()) {
    SLUICE_ASSIGN_OR_RETURN(r.config,
                            GetConfig(proto.config(), root.Field("config")));
  }
  SLUICE_RETURN_IF_ERROR(GetList(proto.forwarded_to_me(), root,
                                 "forwarded_to_me", kMaxLeaseForwarded,
                                 GetForwarded, &r.forwarded_to_me));
  r.inbox_dropped = proto.inbox_dropped();
  if (proto.has_tick_again_in()) {
    SLUICE_ASSIGN_OR_RETURN(
        r.tick_again_in,
        GetDuration(proto.tick_again_in(), root.Field("tick_again_in")));
  }
  r.breakers_epoch = proto.breakers_epoch();
  r.breakers_version = proto.breakers_version();
  SLUICE_RETURN_IF_ERROR(GetPolicyBreakers(proto, root, &r.breakers));
  return r;
}

absl::Status CheckReplyAnswers(const cluster::TickRequest& request,
                               const cluster::TickReply& reply) {
  // A leave gives everything back and applies nothing from its reply, so a
  // central may answer it with no policies at all (the ledger does). Only
  // an empty answer: a partial one is as wrong for a leave as for a tick.
  if (request.leaving && reply.policies.empty()) return absl::OkStatus();
  if (reply.policies.size() != request.policies.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policies: the reply answers ", reply.policies.size(),
        " policies, the request pushed ", request.policies.size()));
  }
  for (size_t i = 0; i < reply.policies.size(); ++i) {
    const size_t got = reply.policies[i].grants.size();
    const size_t want = request.policies[i].keys.size();
    if (got != want) {
      return absl::InvalidArgumentError(
          absl::StrCat("policies[", i, "].grants: the reply answers ", got,
                       " keys, the request pushed ", want));
    }
  }
  if (reply.breakers.empty()) return absl::OkStatus();
  // A pushed policy's breaker is answered in its pull; a second record
  // for it would leave the leaf two answers to choose from.
  absl::flat_hash_set<absl::string_view> pushed;
  pushed.reserve(request.policies.size());
  for (const cluster::PolicyPush& p : request.policies) pushed.insert(p.policy);
  for (size_t i = 0; i < reply.breakers.size(); ++i) {
    if (pushed.contains(reply.breakers[i].policy)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "breakers[", i, "].policy ",
          wire::QuoteUntrusted(reply.breakers[i].policy),
          " was pushed: its breaker is answered in its pull, not in "
          "breakers"));
    }
  }
  return absl::OkStatus();
}

}  // namespace sluice::tree
