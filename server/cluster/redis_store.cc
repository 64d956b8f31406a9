// SPDX-License-Identifier: Apache-2.0
#include "server/cluster/redis_store.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"
#include "wire/address.h"

namespace sluice::cluster {
namespace {

std::string Ms(absl::Time t) { return absl::StrCat(absl::ToUnixMillis(t)); }
std::string Ms(absl::Duration d) {
  return absl::StrCat(absl::ToInt64Milliseconds(d));
}
std::string Num(double v) { return absl::StrFormat("%.17g", v); }

// Whether the replica applies a grant of `key` now (CollectTick leaves
// applied_left infinite without one, zero while the store is down). A grant
// of no units holds nothing, so its entry's loss costs nothing.
bool InForce(const core::KeyTick& key) {
  return key.applied_left > absl::ZeroDuration() &&
         key.applied_left != absl::InfiniteDuration() &&
         (key.applied[core::kRateUnits] > 0 ||
          key.applied[core::kSlotUnits] > 0);
}

absl::string_view Str(const redisReply* r) {
  if (r == nullptr) return {};
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) {
    return absl::string_view(r->str, r->len);
  }
  return {};
}

double ToDouble(const redisReply* r) {
  double v = 0;
  if (r != nullptr && r->type == REDIS_REPLY_INTEGER) return r->integer;
  return absl::SimpleAtod(Str(r), &v) ? v : 0;
}

uint64_t ToU64(const redisReply* r) {
  if (r != nullptr && r->type == REDIS_REPLY_INTEGER) {
    return r->integer > 0 ? static_cast<uint64_t>(r->integer) : 0;
  }
  uint64_t v = 0;
  if (absl::SimpleAtoi(Str(r), &v)) return v;
  double d = 0;  // Lua may hand back "1e+15" for large totals
  return absl::SimpleAtod(Str(r), &d) && d > 0 ? static_cast<uint64_t>(d) : 0;
}

absl::Time FromMs(const redisReply* r) {
  const auto ms = static_cast<int64_t>(ToDouble(r));
  return ms > 0 ? absl::FromUnixMillis(ms) : absl::InfinitePast();
}

bool IsArray(const redisReply* r, size_t min_elements) {
  return r != nullptr && r->type == REDIS_REPLY_ARRAY &&
         r->elements >= min_elements;
}

// A warm entry of tick.lua: "digest steady_limit baseline_us windows mean_us
// var_us2 success updated_ms"; nullopt when it does not parse.
std::optional<ReplicaWarm> DecodeWarm(absl::string_view replica,
                                      absl::string_view entry) {
  const std::vector<absl::string_view> f = absl::StrSplit(entry, ' ');
  if (f.size() != 8) return std::nullopt;
  ReplicaWarm w;
  w.replica = std::string(replica);
  double baseline_us = 0, updated_ms = 0;
  if (!absl::SimpleAtoi(f[0], &w.digest) ||
      !absl::SimpleAtoi(f[1], &w.adaptive.steady_limit) ||
      !absl::SimpleAtod(f[2], &baseline_us) ||
      !absl::SimpleAtoi(f[3], &w.baseline.windows) ||
      !absl::SimpleAtod(f[4], &w.baseline.mean_us) ||
      !absl::SimpleAtod(f[5], &w.baseline.var_us2) ||
      !absl::SimpleAtod(f[6], &w.baseline.success) ||
      !absl::SimpleAtod(f[7], &updated_ms)) {
    return std::nullopt;
  }
  w.adaptive.baseline = absl::Microseconds(static_cast<int64_t>(baseline_us));
  w.updated = absl::FromUnixMillis(static_cast<int64_t>(updated_ms));
  return w;
}

// A script's refusal of a request older than one it applied (tick.lua and
// config.lua answer "STALE ...").
bool IsStale(const redisReply* r) {
  return r->type == REDIS_REPLY_ERROR &&
         absl::StartsWith(absl::string_view(r->str, r->len), "STALE");
}

absl::StatusOr<PolicyPull> ParsePull(const redisReply* r, size_t nkeys) {
  if (IsStale(r)) {
    return absl::AbortedError(absl::string_view(r->str, r->len));
  }
  if (r->type == REDIS_REPLY_ERROR) {
    return absl::InternalError(
        absl::StrCat("tick script failed: ", absl::string_view(r->str, r->len)));
  }
  if (!IsArray(r, 8) || !IsArray(r->element[3], 0) ||
      !IsArray(r->element[4], 0) || !IsArray(r->element[5], 0) ||
      !IsArray(r->element[7], 0)) {
    return absl::InternalError("tick script answered in an unexpected shape");
  }
  PolicyPull pull;
  pull.epoch = std::string(Str(r->element[1]));
  pull.lost = ToU64(r->element[2]) == 1;
  const redisReply* grants = r->element[3];
  for (size_t k = 0; k < nkeys && k < grants->elements; ++k) {
    const redisReply* g = grants->element[k];
    StoreGrant grant;
    if (IsArray(g, 3)) {
      grant.granted = ToU64(g->element[0]) == 1;
      for (int u = 0; u < core::kClusterResources; ++u) {
        grant.units[u] = static_cast<int64_t>(ToDouble(g->element[u + 1]));
      }
    }
    pull.grants.push_back(grant);
  }
  const redisReply* outcomes = r->element[4];
  for (size_t j = 0; j + 3 < outcomes->elements; j += 4) {
    ReplicaOutcomes o;
    o.replica = std::string(Str(outcomes->element[j]));
    o.totals.calls = ToU64(outcomes->element[j + 1]);
    o.totals.failures = ToU64(outcomes->element[j + 2]);
    o.totals.slow = ToU64(outcomes->element[j + 3]);
    pull.outcomes.push_back(std::move(o));
  }
  const redisReply* breaker = r->element[5];
  if (breaker->elements == 6) {
    core::BreakerRecord rec;
    rec.generation = ToU64(breaker->element[0]);
    rec.state = Str(breaker->element[1]) == "OPEN" ? core::BreakerState::kOpen
                                                    : core::BreakerState::kClosed;
    rec.open_until = FromMs(breaker->element[2]);
    rec.open_duration =
        absl::Milliseconds(static_cast<int64_t>(ToDouble(breaker->element[3])));
    rec.cause = std::string(Str(breaker->element[4]));
    rec.replica = std::string(Str(breaker->element[5]));
    pull.breaker = std::move(rec);
  }
  pull.leases_granted = static_cast<uint32_t>(ToU64(r->element[6]));
  const redisReply* warm = r->element[7];
  for (size_t j = 0; j + 1 < warm->elements; j += 2) {
    if (std::optional<ReplicaWarm> w =
            DecodeWarm(Str(warm->element[j]), Str(warm->element[j + 1]))) {
      pull.warm.push_back(*std::move(w));
    }
  }
  return pull;
}

// A forwarded report as one list element: "outcome latency_ns
// permit_serial permit_mac dependency_length dependency key" (the key is the
// rest, any bytes). The issuer checks the MAC (Engine::Report).
std::string EncodeForwarded(const core::ForwardedReport& f) {
  return absl::StrCat(static_cast<int>(f.outcome), " ",
                      absl::ToInt64Nanoseconds(f.latency), " ",
                      f.permit_id.serial, " ", f.permit_id.mac, " ",
                      f.dependency.size(), " ", f.dependency, f.key);
}

std::optional<core::ForwardedReport> DecodeForwarded(absl::string_view text,
                                                     const std::string& me) {
  core::ForwardedReport f;
  f.issuer = me;
  // outcome, latency_ns, the permit's serial and MAC (unsigned: they use
  // all 64 bits), dependency length.
  int64_t numbers[5] = {};
  for (int i = 0; i < 5; ++i) {
    const size_t space = text.find(' ');
    if (space == absl::string_view::npos) return std::nullopt;
    const absl::string_view field = text.substr(0, space);
    const bool ok =
        i == 2   ? absl::SimpleAtoi(field, &f.permit_id.serial)
        : i == 3 ? absl::SimpleAtoi(field, &f.permit_id.mac)
                 : absl::SimpleAtoi(field, &numbers[i]);
    if (!ok) return std::nullopt;
    text.remove_prefix(space + 1);
  }
  if (numbers[0] < 1 || numbers[0] > 4 || numbers[4] < 0 ||
      static_cast<size_t>(numbers[4]) > text.size()) {
    return std::nullopt;
  }
  f.outcome = static_cast<core::Outcome>(numbers[0]);
  f.latency = absl::Nanoseconds(numbers[1]);
  f.dependency = std::string(text.substr(0, numbers[4]));
  f.key = std::string(text.substr(numbers[4]));
  return f;
}

// Pairs of a flat HGETALL list.
std::vector<std::pair<std::string, std::string>> Pairs(const redisReply* r) {
  std::vector<std::pair<std::string, std::string>> out;
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return out;
  for (size_t i = 0; i + 1 < r->elements; i += 2) {
    out.emplace_back(std::string(Str(r->element[i])),
                     std::string(Str(r->element[i + 1])));
  }
  return out;
}

// config.lua's read answer: {now, epoch, lost, live, live_weight, version,
// members_epoch, members_version, listed} when the config version is
// unchanged, else also the config. live is empty unless listed.
absl::Status ParseConfig(const redisReply* r, TickReply* out) {
  if (IsStale(r)) {
    return absl::AbortedError(absl::string_view(r->str, r->len));
  }
  if (r->type == REDIS_REPLY_ERROR) {
    const absl::string_view error(r->str, r->len);
    if (absl::StartsWith(error, "NOSCRIPT")) {
      return absl::UnavailableError("NOSCRIPT: config script not loaded");
    }
    return absl::InternalError(absl::StrCat("config script failed: ", error));
  }
  if (!IsArray(r, 9) || !IsArray(r->element[3], 0) ||
      (r->elements != 9 && r->elements != 13)) {
    return absl::InternalError("config script answered in an unexpected shape");
  }
  out->store_now = FromMs(r->element[0]);
  out->config_epoch = std::string(Str(r->element[1]));
  out->config_lost = ToU64(r->element[2]) == 1;
  const redisReply* live = r->element[3];
  out->replicas.reserve(live->elements);
  for (size_t i = 0; i < live->elements; ++i) {
    out->replicas.emplace_back(Str(live->element[i]));
  }
  out->live_weight = static_cast<uint32_t>(
      std::min<uint64_t>(ToU64(r->element[4]), UINT32_MAX));
  out->members_epoch = std::string(Str(r->element[6]));
  out->members_version = ToU64(r->element[7]);
  out->members_unchanged = ToU64(r->element[8]) != 1;
  if (r->elements == 9) return absl::OkStatus();
  ConfigSnapshot snapshot;
  snapshot.version = ToU64(r->element[5]);
  absl::flat_hash_map<std::string, uint64_t> versions;
  for (auto& [name, v] : Pairs(r->element[10])) {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(v, &n)) {
      return absl::InternalError(absl::StrCat(
          "config script answered version \"", v, "\" for policy \"", name,
          "\", not a number"));
    }
    versions[name] = n;
  }
  for (auto& [name, blob] : Pairs(r->element[9])) {
    StoredPolicy p;
    p.name = name;
    p.blob = std::move(blob);
    p.version = versions[name];
    snapshot.policies.push_back(std::move(p));
  }
  for (auto& [dep, value] : Pairs(r->element[11])) {
    StoredOverride o;
    o.dependency = dep;
    const size_t space = value.find(' ');
    const std::string mode = value.substr(0, space);
    o.mode = core::BreakerOverride::kAuto;
    for (core::BreakerOverride m : {core::BreakerOverride::kForceOpen,
                                    core::BreakerOverride::kForceClosed}) {
      if (mode == core::BreakerOverrideName(m)) o.mode = m;
    }
    o.note = space == std::string::npos ? "" : value.substr(space + 1);
    snapshot.overrides.push_back(std::move(o));
  }
  for (auto& [name, v] : Pairs(r->element[12])) {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(v, &n)) {
      return absl::InternalError(absl::StrCat(
          "config script answered tombstone version \"", v,
          "\" for policy \"", name, "\", not a number"));
    }
    snapshot.deleted.emplace_back(name, n);
  }
  out->config = std::move(snapshot);
  return absl::OkStatus();
}

// config.lua's restore arguments for `config`.
std::vector<std::string> RestoreArgs(const ConfigSnapshot& config) {
  std::vector<std::string> args = {"restore", absl::StrCat(config.version),
                                   absl::StrCat(config.policies.size())};
  for (const StoredPolicy& p : config.policies) {
    args.push_back(p.name);
    args.push_back(absl::StrCat(p.version));
    args.push_back(p.blob);
  }
  args.push_back(absl::StrCat(config.deleted.size()));
  for (const auto& [name, version] : config.deleted) {
    args.push_back(name);
    args.push_back(absl::StrCat(version));
  }
  args.push_back(absl::StrCat(config.overrides.size()));
  for (const StoredOverride& o : config.overrides) {
    args.push_back(o.dependency);
    args.push_back(absl::StrCat(core::BreakerOverrideName(o.mode), " ", o.note));
  }
  return args;
}

}  // namespace

absl::StatusOr<RedisStore::Options> RedisStore::ParseAddress(
    const std::string& address) {
  Options options;
  absl::StatusOr<wire::HostPort> parsed =
      wire::ParseHostPort(address, options.port);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--redis: ", parsed.status().message()));
  }
  if (parsed->port == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--redis port must be 1-65535, got \"", address, "\""));
  }
  // hiredis takes an IPv6 literal without its brackets.
  absl::string_view host = parsed->host;
  if (absl::StartsWith(host, "[")) host = host.substr(1, host.size() - 2);
  options.host = std::string(host);
  options.port = parsed->port;
  return options;
}

absl::StatusOr<RedisStore::Options> RedisStore::ParseClusterSeeds(
    const std::string& seeds) {
  Options options;
  for (absl::string_view seed : absl::StrSplit(seeds, ',')) {
    seed = absl::StripAsciiWhitespace(seed);
    absl::StatusOr<wire::HostPort> parsed = wire::ParseHostPort(seed);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--redis-cluster: seed \"", seed, "\": ", parsed.status().message()));
    }
    if (parsed->port == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--redis-cluster: seed port must be 1-65535, got \"", seed, "\""));
    }
    absl::string_view host = parsed->host;
    if (absl::StartsWith(host, "[")) host = host.substr(1, host.size() - 2);
    options.cluster_seeds.push_back({std::string(host), parsed->port});
  }
  return options;
}

namespace {

RedisConnectionOptions ConnectionOptions(const RedisStore::Options& o,
                                         RedisHealth* health) {
  RedisConnectionOptions c;
  c.timeout = o.timeout;
  c.min_backoff = o.min_backoff;
  c.max_backoff = o.max_backoff;
  c.user = o.user;
  c.password_file = o.password_file;
  c.db = o.db;
  c.require_master = !o.sentinels.empty();
  c.health = health;
  return c;
}

std::unique_ptr<SentinelLocator> MakeSentinel(const RedisStore::Options& o,
                                              RedisHealth* health) {
  if (o.sentinels.empty()) return nullptr;
  SentinelOptions s;
  s.sentinels = o.sentinels;
  s.master_name = o.master_name;
  s.timeout = o.timeout;
  return std::make_unique<SentinelLocator>(std::move(s), health);
}

}  // namespace

// With Sentinel both connections ask the locator at every connect, and
// whichever finds a new master first moves the other at its next use.
RedisStore::RedisStore(Options options)
    : options_(std::move(options)),
      sentinel_(MakeSentinel(options_, &health_)),
      connection_options_(ConnectionOptions(options_, &health_)),
      tick_connection_(sentinel_ != nullptr
                           ? RedisConnection(connection_options_,
                                             sentinel_.get())
                           : RedisConnection(connection_options_,
                                             options_.host, options_.port)),
      admin_connection_(sentinel_ != nullptr
                            ? RedisConnection(connection_options_,
                                              sentinel_.get())
                            : RedisConnection(connection_options_,
                                              options_.host, options_.port)) {
  if (!options_.cluster_seeds.empty()) {
    cluster_events_ = std::make_unique<ClusterEvents>();
    tick_router_ = std::make_unique<RedisClusterRouter>(
        connection_options_, options_.cluster_seeds, cluster_events_.get());
    admin_router_ = std::make_unique<RedisClusterRouter>(
        connection_options_, options_.cluster_seeds, cluster_events_.get());
  }
}

RedisStore::~RedisStore() = default;

std::string RedisStore::Describe() const {
  if (sentinel_ != nullptr) return sentinel_->Describe();
  if (tick_router_ != nullptr) return tick_router_->Describe();
  return absl::StrCat("redis ", options_.host, ":", options_.port);
}

StoreStatus RedisStore::status() const {
  StoreStatus s;
  s.endpoint = sentinel_ != nullptr ? sentinel_->Describe()
               : tick_router_ != nullptr
                   ? tick_router_->Describe()
                   : absl::StrCat(options_.host, ":", options_.port);
  s.errors = health_.errors();
  s.events = health_.events();
  if (cluster_events_ != nullptr) {
    s.events["moved"] = cluster_events_->moved.load(std::memory_order_relaxed);
    s.events["ask"] = cluster_events_->ask.load(std::memory_order_relaxed);
    s.events["slots_refreshed"] =
        cluster_events_->slots_refreshed.load(std::memory_order_relaxed);
  }
  return s;
}

absl::StatusOr<TickReply> RedisStore::Tick(const TickRequest& request) {
  absl::StatusOr<TickReply> reply = RunTick(request);
  // A Redis restart forgets loaded scripts; load them again and retry once.
  if (!reply.ok() && absl::StrContains(reply.status().message(), "NOSCRIPT")) {
    tick_connection_.Drop(absl::InfinitePast());
    if (tick_router_ != nullptr) tick_router_->Reset();
    reply = RunTick(request);
  }
  // The connection counts its own failures; these are answers it got but
  // could not use.
  if (!reply.ok() && reply.status().code() == absl::StatusCode::kInternal) {
    const absl::string_view message = reply.status().message();
    health_.Error(RedisReplyErrorKind(message),
                  absl::StrCat(Describe(), ": ", message), absl::Now());
  }
  return reply;
}

absl::StatusOr<TickReply> RedisStore::RunTick(const TickRequest& request) {
  // The connection's backoff runs on this process's clock; every time in the
  // store itself is Redis's own.
  const absl::Time local_now = absl::Now();
  const std::string config_key = ConfigKey();
  const std::string stale_ms = Ms(request.stale_after);

  std::vector<RedisCommand> commands;
  if (request.restore) {
    std::vector<std::string> args = {"1", config_key};
    std::vector<std::string> restore = RestoreArgs(*request.restore);
    args.insert(args.end(), std::make_move_iterator(restore.begin()),
                std::make_move_iterator(restore.end()));
    commands.push_back({RedisScript::kConfig, config_key, std::move(args)});
  }
  const size_t config_reply = commands.size();
  {
    std::vector<std::string> args = {
        "1",                config_key,
        "read",             request.replica_id,
        stale_ms,           request.leaving ? "1" : "0",
        absl::StrCat(request.config_seen), request.config_epoch_seen,
        absl::StrCat(request.incarnation), absl::StrCat(request.sequence),
        absl::StrCat(request.weight), request.members_epoch_seen,
        absl::StrCat(request.members_seen), absl::StrCat(request.seed.size())};
    for (const StoredPolicy& p : request.seed) {
      args.push_back(p.name);
      args.push_back(p.blob);
    }
    commands.push_back({RedisScript::kConfig, config_key, std::move(args)});
  }
  const size_t first_policy = commands.size();
  for (const PolicyPush& push : request.policies) {
    std::string key =
        absl::StrCat(options_.key_prefix, "{", push.policy, "}:epoch");
    std::vector<std::string> args = {
        "1",
        key,
        request.replica_id,
        stale_ms,
        Ms(request.key_ttl),
        absl::StrCat(request.live_replicas),
        request.leaving ? "1" : "0",
        push.epoch_seen,
        push.per_key ? "1" : "0",
        absl::StrCat(request.incarnation),
        absl::StrCat(request.sequence),
        absl::StrCat(push.keys.size())};
    for (const core::KeyTick& key : push.keys) {
      args.push_back(key.key);
      for (int64_t v : key.limit) args.push_back(absl::StrCat(v));
      for (double v : key.demand) args.push_back(Num(v));
      for (int64_t v : key.usage) args.push_back(absl::StrCat(v));
      for (int64_t v : key.applied) args.push_back(absl::StrCat(v));
      args.push_back(Ms(std::min(key.applied_left, request.stale_after)));
      // A usage's life is bounded (a day), so a hostile duration cannot
      // pin an entry for ever.
      for (absl::Duration d : key.usage_left) {
        args.push_back(Ms(std::clamp(d, absl::ZeroDuration(), absl::Hours(24))));
      }
      args.push_back(InForce(key) ? "1" : "0");
      args.push_back(absl::StrCat(key.admitted_total));
    }
    args.push_back(push.has_breaker ? "1" : "0");
    if (push.has_breaker) {
      args.push_back(absl::StrCat(push.outcomes.calls));
      args.push_back(absl::StrCat(push.outcomes.failures));
      args.push_back(absl::StrCat(push.outcomes.slow));
      args.push_back(push.publish ? "1" : "0");
      args.push_back(absl::StrCat(push.breaker.base));
      args.push_back(absl::StrCat(push.breaker.generation));
      args.push_back(push.breaker.state == core::BreakerState::kOpen ? "OPEN"
                                                                     : "CLOSED");
      args.push_back(push.breaker.open_until == absl::InfinitePast()
                         ? "0"
                         : Ms(push.breaker.open_until));
      args.push_back(Ms(push.breaker.open_duration));
      args.push_back(push.breaker.cause);
      args.push_back(absl::StrCat(push.leases_wanted));
      args.push_back(absl::StrCat(push.lease_cap));
      args.push_back(Ms(push.lease_ttl));
    }
    args.push_back(push.has_warm ? "1" : "0");
    if (push.has_warm) {
      args.push_back(absl::StrCat(push.digest));
      args.push_back(absl::StrCat(push.adaptive.steady_limit));
      args.push_back(
          absl::StrCat(absl::ToInt64Microseconds(push.adaptive.baseline)));
      args.push_back(absl::StrCat(push.baseline.windows));
      args.push_back(Num(push.baseline.mean_us));
      args.push_back(Num(push.baseline.var_us2));
      args.push_back(Num(push.baseline.success));
    }
    commands.push_back({RedisScript::kTick, std::move(key), std::move(args)});
  }

  // Forwarded reports: pushed to each issuer's inbox, which keeps at most
  // kMaxInbox (the oldest go first); this replica's own inbox is emptied in
  // the same round trip.
  absl::flat_hash_map<std::string, std::vector<std::string>> outbox;
  for (const core::ForwardedReport& f : request.forwarded) {
    outbox[f.issuer].push_back(EncodeForwarded(f));
  }
  const size_t first_inbox = commands.size();
  for (auto& [issuer, items] : outbox) {
    const std::string inbox = absl::StrCat(options_.key_prefix, "inbox:", issuer);
    std::vector<std::string> args = {"RPUSH", inbox};
    args.insert(args.end(), std::make_move_iterator(items.begin()),
                std::make_move_iterator(items.end()));
    commands.push_back({RedisScript::kNone, inbox, std::move(args)});
    commands.push_back({RedisScript::kNone, inbox,
                        {"LTRIM", inbox, absl::StrCat(-kMaxInbox), "-1"}});
    commands.push_back(
        {RedisScript::kNone, inbox, {"PEXPIRE", inbox, Ms(request.key_ttl)}});
  }
  const std::string my_inbox =
      absl::StrCat(options_.key_prefix, "inbox:", request.replica_id);
  commands.push_back({RedisScript::kNone, my_inbox,
                      {"LPOP", my_inbox, absl::StrCat(kMaxInbox)}});

  absl::StatusOr<std::vector<RedisReplyPtr>> executed =
      Execute(commands, local_now);
  if (!executed.ok()) return executed.status();
  const std::vector<RedisReplyPtr>& replies = *executed;

  TickReply out;
  if (absl::Status s = ParseConfig(replies[config_reply].get(), &out);
      !s.ok()) {
    return s;
  }
  for (size_t p = 0; p < request.policies.size(); ++p) {
    const redisReply* r = replies[first_policy + p].get();
    if (r->type == REDIS_REPLY_ERROR &&
        absl::StartsWith(absl::string_view(r->str, r->len), "NOSCRIPT")) {
      return absl::UnavailableError("NOSCRIPT: tick script not loaded");
    }
    absl::StatusOr<PolicyPull> pull =
        ParsePull(r, request.policies[p].keys.size());
    if (!pull.ok()) return pull.status();
    out.policies.push_back(*std::move(pull));
  }
  // An inbox command refused (an ACL without RPUSH or LPOP, say) would
  // lose forwarded reports without a word: fail the tick instead.
  for (size_t i = first_inbox; i < replies.size(); ++i) {
    const redisReply* r = replies[i].get();
    if (r->type == REDIS_REPLY_ERROR) {
      return absl::InternalError(absl::StrCat(
          "inbox command ", commands[i].args.front(),
          " failed: ", absl::string_view(r->str, r->len)));
    }
  }
  size_t inbox_reply = first_inbox;
  for (auto& [issuer, items] : outbox) {
    const redisReply* pushed = replies[inbox_reply].get();
    if (pushed->type == REDIS_REPLY_INTEGER && pushed->integer > kMaxInbox) {
      // The issuer's inbox was full: that many of its oldest reports went.
      out.inbox_dropped += static_cast<uint64_t>(
          std::min<long long>(pushed->integer - kMaxInbox,
                              static_cast<long long>(items.size())));
    }
    inbox_reply += 3;
  }
  const redisReply* inbox = replies.back().get();
  if (inbox->type == REDIS_REPLY_ARRAY) {
    for (size_t i = 0; i < inbox->elements; ++i) {
      if (std::optional<core::ForwardedReport> f =
              DecodeForwarded(Str(inbox->element[i]), request.replica_id)) {
        out.forwarded_to_me.push_back(*std::move(f));
      }
    }
  }
  return out;
}

absl::StatusOr<std::vector<RedisReplyPtr>> RedisStore::Execute(
    const std::vector<RedisCommand>& commands, absl::Time now) {
  if (tick_router_ != nullptr) return tick_router_->Execute(commands, now);
  return tick_connection_.Pipeline(commands, now);
}

absl::StatusOr<std::vector<std::string>> RedisStore::RunConfig(
    const std::vector<std::string>& args) {
  absl::MutexLock lock(&admin_mu_);
  RedisConnection& c = admin_connection_;
  const std::string config_key = ConfigKey();
  std::vector<RedisCommand> commands(1);
  commands[0].script = RedisScript::kConfig;
  commands[0].key = config_key;
  commands[0].args = {"1", config_key};
  commands[0].args.insert(commands[0].args.end(), args.begin(), args.end());
  for (int attempt = 0; attempt < 2; ++attempt) {
    // Admin writes are rare, so their connection sits idle for long; Redis
    // may have closed it meanwhile (a restart, `timeout`, CLIENT KILL, a
    // stunnel restart). A write that fails on a connection that was open
    // is tried once more on a new one before the operator sees an error.
    const bool was_open = admin_router_ != nullptr || c.connected();
    absl::StatusOr<std::vector<RedisReplyPtr>> replies =
        admin_router_ != nullptr ? admin_router_->Execute(commands, absl::Now())
                                 : c.Pipeline(commands, absl::Now());
    if (!replies.ok()) {
      if (attempt == 0 && was_open &&
          replies.status().code() == absl::StatusCode::kUnavailable) {
        c.Drop(absl::InfinitePast());  // reconnect now, not after a backoff
        if (admin_router_ != nullptr) admin_router_->Reset();
        continue;
      }
      return replies.status();
    }
    const redisReply* reply = (*replies)[0].get();
    if (reply->type == REDIS_REPLY_ERROR) {
      const absl::string_view error(reply->str, reply->len);
      if (absl::StartsWith(error, "NOSCRIPT") && attempt == 0) {
        c.Drop(absl::InfinitePast());  // reload the scripts, then retry
        if (admin_router_ != nullptr) admin_router_->Reset();
        continue;
      }
      return absl::InternalError(absl::StrCat("config script failed: ", error));
    }
    std::vector<std::string> out;
    if (reply->type == REDIS_REPLY_ARRAY) {
      for (size_t i = 0; i < reply->elements; ++i) {
        const redisReply* e = reply->element[i];
        out.push_back(e->type == REDIS_REPLY_INTEGER
                          ? absl::StrCat(e->integer)
                          : std::string(Str(e)));
      }
    }
    return out;
  }
  return absl::UnavailableError("config script not loaded");
}

namespace {

// Turns config.lua's write answers into a ConfigWrite or a status.
absl::StatusOr<ConfigWrite> WriteResult(
    const std::vector<std::string>& r, absl::string_view what,
    absl::string_view name, uint64_t expected_version) {
  if (r.empty()) {
    return absl::InternalError("config script answered nothing");
  }
  if (r[0] == "NOT_FOUND") {
    return absl::NotFoundError(
        absl::StrCat("no policy named \"", name, "\""));
  }
  if (r[0] == "ABORTED") {
    const std::string stored = r.size() > 1 ? r[1] : "0";
    return absl::AbortedError(absl::StrCat(
        what, " policy \"", name, "\": expected version ", expected_version,
        ", but ",
        stored == "0" ? std::string("the policy does not exist")
                      : absl::StrCat("the stored version is ", stored)));
  }
  ConfigWrite w;
  if (r[0] != "OK") {
    return absl::InternalError(absl::StrCat("config script answered ", r[0]));
  }
  if (r.size() == 2) {  // override: {"OK", version}
    if (!absl::SimpleAtoi(r[1], &w.config_version)) {
      return absl::InternalError(
          absl::StrCat("config script answered version \"", r[1],
                       "\" for an override, not a number"));
    }
    return w;
  }
  if (r.size() < 4 || !absl::SimpleAtoi(r[1], &w.old_version) ||
      !absl::SimpleAtoi(r[2], &w.new_version) ||
      !absl::SimpleAtoi(r[3], &w.config_version)) {
    return absl::InternalError("config script answered in an unexpected shape");
  }
  return w;
}

}  // namespace

absl::StatusOr<ConfigWrite> RedisStore::PutPolicy(const StoredPolicy& policy,
                                                  uint64_t expected_version) {
  absl::StatusOr<std::vector<std::string>> r =
      RunConfig({"put", policy.name, policy.blob,
                 absl::StrCat(expected_version), Ms(options_.stale_after)});
  if (!r.ok()) return r.status();
  absl::StatusOr<ConfigWrite> w =
      WriteResult(*r, "put", policy.name, expected_version);
  // A policy no replica can hold a grant of (config.lua answers "fresh")
  // gets its epoch now, so its first tick opens no recovery window. The
  // write itself has succeeded: a failure here costs that window only.
  if (w.ok() && w->old_version == 0 && r->size() > 4 && (*r)[4] == "1" &&
      !CreateEpoch(policy.name)) {
    spdlog::debug(
        "policy \"{}\": epoch not created with the write; its first tick "
        "makes it, with a recovery window",
        policy.name);
  }
  return w;
}

bool RedisStore::CreateEpoch(const std::string& policy) {
  // The epoch as tick.lua makes it (Redis TIME "sec.usec"), on the policy's
  // own slot, and kept a day: tick.lua stretches it to max(ttl, a day) at
  // every tick. NX: an epoch that exists (a deleted policy's, whose grants
  // replicas may still hold) stays.
  static constexpr char kCreate[] =
      "local t = redis.call('TIME') "
      "return redis.call('SET', KEYS[1], t[1] .. '.' .. t[2], 'NX', 'PX', "
      "ARGV[1]) and 1 or 0";
  const std::string key =
      absl::StrCat(options_.key_prefix, "{", policy, "}:epoch");
  std::vector<RedisCommand> commands(1);
  commands[0].key = key;
  commands[0].args = {"EVAL", kCreate, "1", key, Ms(absl::Hours(24))};
  absl::MutexLock lock(&admin_mu_);
  absl::StatusOr<std::vector<RedisReplyPtr>> replies =
      admin_router_ != nullptr
          ? admin_router_->Execute(commands, absl::Now())
          : admin_connection_.Pipeline(commands, absl::Now());
  return replies.ok() && (*replies)[0]->type == REDIS_REPLY_INTEGER;
}

absl::StatusOr<ConfigWrite> RedisStore::DeletePolicy(
    const std::string& name, uint64_t expected_version) {
  absl::StatusOr<std::vector<std::string>> r =
      RunConfig({"delete", name, absl::StrCat(expected_version)});
  if (!r.ok()) return r.status();
  return WriteResult(*r, "delete", name, expected_version);
}

absl::StatusOr<ConfigWrite> RedisStore::SetOverride(
    const StoredOverride& override) {
  const absl::string_view mode = core::BreakerOverrideName(override.mode);
  absl::StatusOr<std::vector<std::string>> r = RunConfig(
      {"override", override.dependency, std::string(mode), override.note});
  if (!r.ok()) return r.status();
  return WriteResult(*r, "override", override.dependency, 0);
}

}  // namespace sluice::cluster
