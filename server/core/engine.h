// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_ENGINE_H_
#define SLUICE_SERVER_CORE_ENGINE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/core/clock.h"
#include "server/core/decision.h"
#include "server/core/live_policy.h"
#include "server/core/events.h"
#include "server/core/permit_ledger.h"
#include "server/core/permit_seal.h"
#include "server/core/policy_config.h"
#include "server/core/sweep_alarm.h"
#include "server/core/tick.h"
#include "server/core/warm_state.h"

namespace sluice::core {

// The decision engine: every policy's live state, answering Acquire and
// Report. Safe for concurrent use. The hot path reads an immutable snapshot
// of the policy map without a global lock (each thread caches the snapshot
// and re-reads it only after a change) and then takes only the dependency's
// own lock; it allocates nothing for a known dependency without keys.
class Engine {
 public:
  struct Options {
    // Answer for a dependency without a policy.
    UnknownDependencyAction unknown_dependency =
        UnknownDependencyAction::kAllow;
    // call_timeout handed out with an unknown dependency's ALLOW.
    absl::Duration unknown_call_timeout = absl::Seconds(1);
    // Cluster mode: cluster-scope limits take shares from the sync loop and
    // follow on_store_failure until the first successful sync.
    bool cluster = false;
    // Cluster mode: the replica count LOCAL policies divide by until the
    // first successful sync tells the real one.
    uint32_t expected_replicas = 1;
    // Added to 2 x call_timeout before an unreported permit counts as a
    // TIMEOUT. Cluster mode sets two sync intervals, the time a report that
    // reached another replica takes to be forwarded here.
    absl::Duration permit_grace = absl::ZeroDuration();
    // Where permit ids start, so a restarted process does not reissue the
    // ids of the one before. 0: drawn at random when the engine is built
    // (options() then shows the seed in use).
    uint64_t permit_id_seed = 0;
    // The secret that seals permit ids (PermitSeal), so that a caller
    // cannot settle a permit it was not given. Empty: drawn from the
    // kernel's random source when the engine is built. Tests pass a fixed
    // one.
    PermitKey permit_key;
    // How a dependency without keys spreads its decisions over cores (see
    // CoreSlice): by default a slice per CPU, so threads deciding calls on
    // one dependency do not queue on its lock.
    SliceOptions slices = SliceOptions::PerCpu();
  };

  // `clock` must outlive the engine; `sink` may be null, else it must too.
  Engine(Clock* clock, Options options, EventSink* sink = nullptr);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Installs `policies` (validated, unique names) as the whole set. Policies
  // that keep their name keep their live state; the others start fresh or go.
  void ReplacePolicies(std::vector<PolicyConfig> policies)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Creates or changes one policy, keeping live state when it exists.
  void PutPolicy(PolicyConfig policy) ABSL_LOCKS_EXCLUDED(mu_);
  // Removes a policy; its dependency is then unknown. False if absent.
  bool DeletePolicy(absl::string_view name) ABSL_LOCKS_EXCLUDED(mu_);

  // Decides one call. `permits` 0 means 1. Fails with INVALID_ARGUMENT only
  // when the request can never be admitted (permits above the bucket burst or
  // window limit, or above LivePolicy::kMaxPermits). A permit not reported
  // within 2 x call_timeout counts as `unreported` says: a TIMEOUT for
  // callers that always report, nothing but a freed slot for callers that
  // may not (Envoy's rate-limit protocol; see Unreported::kRelease).
  absl::StatusOr<Decision> Acquire(
      absl::string_view dependency, absl::string_view key, uint32_t permits,
      Unreported unreported = Unreported::kTimeout);

  // One call of AcquireAll.
  struct Call {
    absl::string_view dependency;
    absl::string_view key;
    uint32_t permits = 0;  // 0 means 1, as for Acquire
  };
  // AcquireAll's answer.
  struct JointDecision {
    // Whether every call was admitted, and so holds its permit.
    bool admitted = true;
    // One per call, in order.
    std::vector<Decision> decisions;
  };
  // Most calls one AcquireAll decides.
  static constexpr size_t kMaxCalls = 1000;

  // Decides calls that one request needs together (the descriptors of an
  // Envoy rate-limit request): all are admitted or none is. Every call is
  // decided in order, as by Acquire, so each decision tells its own
  // verdict, remaining and retry_after. When any call is not admitted
  // (REJECT or DEGRADE), the permits the others took are cancelled (a
  // CANCELLED report): their concurrency, adaptive and probe slots come
  // back and their permit ids are cleared; the tokens they took stay spent,
  // as in Envoy's own rate-limit service. A call that can never be admitted
  // (one Acquire fails with INVALID_ARGUMENT) is a refusal here, so that
  // the others still get their answers: REJECT RATE_LIMITED with remaining
  // 0, or ALLOW SHADOW under a shadow policy. The decisions' `policy` is
  // null: it would not stay valid across the calls (see Decision::policy).
  // `on_decided`, when set, runs right after each call is decided (a front
  // end times each decision with it). INVALID_ARGUMENT, and nothing
  // decided, for more than kMaxCalls calls.
  absl::StatusOr<JointDecision> AcquireAll(
      absl::Span<const Call> calls, Unreported unreported,
      const std::function<void()>& on_decided = nullptr);

  // Settles a permit. Harmless for unknown dependencies and for unknown,
  // repeated or expired permits. A permit whose seal does not match this
  // engine's key, the dependency and the key (guessed, altered, reported
  // under another dependency or key, or issued by another process) settles
  // nothing and counts in PermitReportsRefused().forged; `forged`, when
  // given, tells the caller so. Returns the breaker state afterwards
  // (kClosed when the dependency has no breaker or no policy).
  BreakerState Report(absl::string_view dependency, absl::string_view key,
                      const PermitId& permit_id, Outcome outcome,
                      absl::Duration latency, bool* forged = nullptr);

  // Reports whose permit id was refused, since start: `forged`, a well-formed
  // id whose seal did not verify (Report); `malformed`, a permit id that
  // could not even be read (counted by the front end that read it, through
  // CountMalformedPermit).
  struct RefusedPermits {
    uint64_t forged = 0;
    uint64_t malformed = 0;
  };
  RefusedPermits PermitReportsRefused() const {
    return {forged_permits_.load(std::memory_order_relaxed),
            malformed_permits_.load(std::memory_order_relaxed)};
  }
  void CountMalformedPermit() {
    malformed_permits_.fetch_add(1, std::memory_order_relaxed);
  }

  // Settles what a client decided from its lease on `dependency` (and,
  // for a per_key policy, `key`) and answers its next lease
  // (ClientLeases). A dependency without a policy, or one whose gates must
  // decide each call, answers lease 0 with the reason; the client then
  // asks Acquire for each call.
  LeaseTerms RenewLease(absl::string_view dependency,
                        const LeaseSettlement& settlement,
                        absl::string_view key = "");

  // The breaker state of a dependency (and key), without reporting
  // anything; kClosed without a policy or a breaker.
  BreakerState PeekBreaker(absl::string_view dependency,
                           absl::string_view key = "");

  // Expires overdue permits and moves breakers whose open time is over, so
  // that idle dependencies also move on. Reads the clock once; a
  // dependency with nothing due costs a lock and a comparison. Afterwards
  // sweep_alarm().due() is the earliest time another sweep can change
  // anything (until a change lowers it): the server's housekeeping sleeps
  // until then.
  void Sweep();
  // When the next Sweep is due, and the wait for it (see SweepAlarm).
  SweepAlarm& sweep_alarm() { return sweep_alarm_; }

  // Forces the breaker of `dependency` (every key) open or closed, or clears
  // the override. NOT_FOUND without a policy, FAILED_PRECONDITION if the
  // policy has no breaker.
  absl::Status SetOverride(absl::string_view dependency,
                           BreakerOverride override, const std::string& cause);

  // Live state of one dependency (and one key of a per_key policy).
  absl::StatusOr<LivePolicyStatus> Inspect(absl::string_view dependency,
                                           absl::string_view key = "");

  // Cluster mode. The sync loop calls these once per tick, off the request
  // path: CollectTick drains each dependency's demand of the tick that ends
  // now; ApplyTick hands back shares and shared breaker state; and
  // SetStoreState says whether the store answered, how many processes
  // share static shares, and whether this one may apply its own yet (a
  // per_key key's static share; see ClusterState::static_shares).
  std::vector<DependencyTick> CollectTick(absl::Duration interval);
  void ApplyTick(const std::vector<DependencyUpdate>& updates);
  void SetStoreState(bool up, uint32_t live_replicas,
                     bool static_shares = true) ABSL_LOCKS_EXCLUDED(mu_);

  // Cluster mode, a per_key policy: the units of each cluster-scope
  // resource any key of `dependency` applies without a grant now (its
  // static share; zero while the sync loop holds static shares back, with
  // the store down, or for a policy without per_key cluster limits).
  Units StaticUnits(absl::string_view dependency) ABSL_LOCKS_EXCLUDED(mu_);

  // Cluster mode with the store up: the dependencies whose cluster-scope
  // limits cannot admit a call here yet, each with why ("inventory: no
  // grant of its rate limit"). A whole-dependency limit needs a grant of
  // each cluster-scope resource (and a token bucket a whole token); a
  // per_key policy needs its static shares. Empty standalone, with the
  // store down (each policy's on_store_failure decides then) and once every
  // limit admits. A replica reports SERVING once this is empty, so that a
  // new replica takes traffic only when its share has come.
  std::vector<std::string> ClusterLimitsNotAdmitting() ABSL_LOCKS_EXCLUDED(mu_);

  // Warm start. ExportWarmState: the adaptive limits, learned baselines and
  // OPEN breakers of every dependency, at most `max_keys` keys of each
  // per_key policy. ImportWarmState hands them back after a restart, to
  // the policies of the same name and digest (the rest is reported, not
  // taken).
  std::vector<DependencyWarmState> ExportWarmState(size_t max_keys = 10000);
  WarmImport ImportWarmState(const std::vector<DependencyWarmState>& state);

  // Acquire answers given for dependencies without a policy: {allowed,
  // rejected}.
  std::pair<uint64_t, uint64_t> UnknownDecisions() const {
    return {unknown_allowed_.load(std::memory_order_relaxed),
            unknown_rejected_.load(std::memory_order_relaxed)};
  }

  // The policies in force, sorted by name.
  std::vector<std::shared_ptr<const PolicyConfig>> Policies();
  // Changes whenever the set of policies or one of them changes, after the
  // change is visible to Policies(); cheap, for callers that cache
  // something derived from Policies().
  uint64_t policies_generation() const {
    return policies_generation_.load(std::memory_order_acquire);
  }

  const Options& options() const { return options_; }

 private:
  using DependencyMap =
      absl::flat_hash_map<std::string, std::shared_ptr<LivePolicy>>;

  // The current policy map; valid until this thread's next call into any
  // Engine.
  const DependencyMap& Snapshot();
  LivePolicy* Find(absl::string_view dependency);
  // Publishes `next` as the new snapshot.
  void Publish(std::shared_ptr<const DependencyMap> next)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `previous`: the dependency the new one replaces, if any.
  std::shared_ptr<LivePolicy> MakeLivePolicy(
      PolicyConfig policy, const LivePolicy* previous = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `dep` with `policy` installed: reconfigured in place, or replaced by a
  // new dependency when the shape of its state changes (LivePolicy::Fits).
  std::shared_ptr<LivePolicy> Update(std::shared_ptr<LivePolicy> dep,
                                     PolicyConfig policy)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The dependency named so, off the request path; NOT_FOUND without one.
  absl::StatusOr<std::shared_ptr<LivePolicy>> Lookup(
      absl::string_view dependency) ABSL_LOCKS_EXCLUDED(mu_);
  // The current map, for work off the request path.
  std::shared_ptr<const DependencyMap> CurrentMap() ABSL_LOCKS_EXCLUDED(mu_);

  Clock* const clock_;
  const Options options_;
  EventSink* const sink_;
  // Tells this engine's snapshots apart in the per-thread cache.
  const uint64_t id_;
  // Gives each gate set a distinct permit epoch and first sequence.
  PermitEpochs epochs_;
  // Every shard's next due time; before the map, whose shards point to it.
  SweepAlarm sweep_alarm_;
  const PermitSeal seal_;
  std::atomic<uint64_t> forged_permits_{0};
  std::atomic<uint64_t> malformed_permits_{0};
  std::atomic<uint64_t> unknown_allowed_{0};
  std::atomic<uint64_t> unknown_rejected_{0};
  // Bumped on every Publish; readers compare it with their cached version.
  std::atomic<uint64_t> version_{1};
  // Bumped on every policy change, including those made in place.
  std::atomic<uint64_t> policies_generation_{1};

  absl::Mutex mu_;
  std::shared_ptr<const DependencyMap> current_ ABSL_GUARDED_BY(mu_);
  uint64_t current_version_ ABSL_GUARDED_BY(mu_) = 1;
  ClusterState cluster_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_ENGINE_H_
