// SPDX-License-Identifier: Apache-2.0
#include "tools/sluice-bench/load_phase.h"

#include <grpcpp/alarm.h>

#include <atomic>
#include <deque>
#include <random>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "sluice/v1/decision.grpc.pb.h"
#include "wire/time.h"
#include "wire/tls.h"

namespace sluice::bench {

uint64_t PhaseResult::error_count() const {
  uint64_t total = 0;
  for (const auto& [code, n] : errors) total += n;
  return total;
}

double PhaseResult::per_second() const {
  const double seconds = absl::ToDoubleSeconds(elapsed);
  return seconds > 0 ? static_cast<double>(completed) / seconds : 0;
}

void PhaseResult::Merge(const PhaseResult& other) {
  completed += other.completed;
  first.Merge(other.first);
  pair.Merge(other.pair);
  for (size_t i = 0; i < verdicts.size(); ++i) verdicts[i] += other.verdicts[i];
  for (const auto& [code, n] : other.errors) errors[code] += n;
  if (first_error.empty()) first_error = other.first_error;
}

namespace {

constexpr char kUnanswered[] = "UNANSWERED";

std::string CodeName(int code) {
  std::string name =
      absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  return name.empty() ? absl::StrCat("CODE_", code) : name;
}

// Collects what the callbacks of a phase observe, and knows when every
// worker (call chain or stream) has finished. Safe for concurrent use.
class Tally {
 public:
  explicit Tally(int workers) : workers_(workers) {}

  void Acquired(absl::Duration latency, int verdict) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    result_.first.Record(latency);
    if (verdict >= 0 && verdict < static_cast<int>(result_.verdicts.size())) {
      ++result_.verdicts[verdict];
    }
  }
  // A decision (or health check) is complete; `pair` is its Acquire +
  // report latency when it had a report.
  void Completed(absl::Duration pair, bool reported) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    ++result_.completed;
    if (reported) result_.pair.Record(pair);
  }
  void Failed(const std::string& code, const std::string& message,
              uint64_t calls = 1) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    result_.errors[code] += calls;
    if (result_.first_error.empty()) {
      result_.first_error =
          message.empty() ? code : absl::StrCat(code, ": ", message);
    }
  }
  // A call that ended with a gRPC error.
  void Failed(const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_) {
    Failed(CodeName(status.error_code()), status.error_message());
  }
  void WorkerDone() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    --workers_;
  }
  // Waits for every worker; the result, timed from `start`.
  PhaseResult Wait(absl::Time start) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* workers) { return *workers == 0; }, &workers_));
    result_.elapsed = absl::Now() - start;
    return std::move(result_);
  }

 private:
  absl::Mutex mu_;
  int workers_ ABSL_GUARDED_BY(mu_);
  PhaseResult result_ ABSL_GUARDED_BY(mu_);
};

// The domain of rls mode's requests.
constexpr char kRlsDomain[] = "sluice-bench";

// What every worker of a decision phase reads.
struct Shared {
  const BenchOptions& options;
  const Workload& workload;
  Budget& budget;
  Tally& tally;
  // Of each Decide stream: a timed phase plus options.deadline, so that a
  // server that stops answering ends the run; none for a counted phase.
  absl::Time stream_deadline;
};

void FillAcquire(const Shared& shared, const CallShape& call,
                 v1::AcquireRequest* request) {
  request->set_dependency(shared.workload.dependency(call.dependency));
  request->set_key(shared.workload.key(call.key));
  request->set_caller(shared.options.caller);
}

void FillReport(const Shared& shared, const CallShape& call,
                const std::string& permit_id, v1::ReportResultRequest* report) {
  report->set_dependency(shared.workload.dependency(call.dependency));
  report->set_key(shared.workload.key(call.key));
  report->set_permit_id(permit_id);
  report->set_outcome(call.failure ? v1::FAILURE : v1::SUCCESS);
  wire::DurationToProto(shared.options.latency, report->mutable_latency());
}

std::unique_ptr<grpc::ClientContext> Context(absl::Duration deadline) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  return context;
}

// What the call chains of unary mode, rls mode and the health checks share:
// one call after another, each taken from the budget, until the budget is
// spent; the steps run one after another on gRPC's callback threads. Each
// call gets a fresh context with the deadline and is timed from its start; a
// call that fails is counted and the chain goes on with the next. A subclass
// builds and starts its protocol's call (StartCall) and reads the answer
// (OnAnswer).
class CallChain {
 public:
  CallChain(Budget& budget, Tally& tally, absl::Duration deadline)
      : budget_(budget), tally_(tally), deadline_(deadline) {}
  virtual ~CallChain() = default;

  // Starts the next call, or ends the chain when the budget is spent.
  void Next() {
    if (!budget_.Take()) {
      tally_.WorkerDone();
      return;
    }
    StartCall();
  }

 protected:
  Tally& tally() { return tally_; }

  // A new context for the call StartCall starts, which is timed from now.
  grpc::ClientContext* TimedContext() {
    grpc::ClientContext* context = NewContext();
    started_ = absl::Now();
    return context;
  }
  // A new context for a later call of the same turn (a report), whose
  // timing goes on from TimedContext's.
  grpc::ClientContext* NewContext() {
    context_ = Context(deadline_);
    return context_.get();
  }
  absl::Duration SinceStart() const { return absl::Now() - started_; }

  // Where the call StartCall started completes.
  void Answered(const grpc::Status& status) {
    if (!status.ok()) {
      tally_.Failed(status);
      Next();
      return;
    }
    OnAnswer(SinceStart());
  }

  // Counts the turn complete, with nothing reported, and goes on.
  void CompleteAndContinue() {
    tally_.Completed(absl::ZeroDuration(), /*reported=*/false);
    Next();
  }

 private:
  // Builds the next request and starts its call on TimedContext(), to
  // complete in Answered.
  virtual void StartCall() = 0;
  // The call was answered `latency` after it started.
  virtual void OnAnswer(absl::Duration latency) = 0;

  Budget& budget_;
  Tally& tally_;
  const absl::Duration deadline_;
  absl::Time started_;
  std::unique_ptr<grpc::ClientContext> context_;
};

// A chain of decisions: each call's shape is drawn from the workload, with
// a random source of the chain's own.
class DecisionChain : public CallChain {
 protected:
  DecisionChain(const Shared& shared, uint64_t seed)
      : CallChain(shared.budget, shared.tally, shared.options.deadline),
        shared_(shared),
        rng_(seed) {}

  const Shared& shared() const { return shared_; }
  CallShape NextCall() { return shared_.workload.Next(rng_); }

 private:
  const Shared& shared_;
  std::mt19937_64 rng_;
};

// One of the concurrent decisions of a connection in unary mode: Acquire,
// (hold,) ReportResult, then the next decision, until the budget is spent.
class UnaryChain : public DecisionChain {
 public:
  UnaryChain(const Shared& shared, v1::DecisionService::Stub* stub,
             uint64_t seed)
      : DecisionChain(shared, seed), stub_(stub) {}

 private:
  void StartCall() override {
    call_ = NextCall();
    acquire_.Clear();
    FillAcquire(shared(), call_, &acquire_);
    stub_->async()->Acquire(TimedContext(), &acquire_, &acquired_,
                            [this](grpc::Status status) { Answered(status); });
  }

  void OnAnswer(absl::Duration latency) override {
    tally().Acquired(latency, acquired_.verdict());
    if (acquired_.verdict() != v1::ALLOW) {
      CompleteAndContinue();
      return;
    }
    if (shared().options.hold &&
        shared().options.latency > absl::ZeroDuration()) {
      hold_ = std::make_unique<grpc::Alarm>();
      hold_->Set(absl::ToChronoTime(absl::Now() + shared().options.latency),
                 [this](bool) { Report(); });
      return;
    }
    Report();
  }

  void Report() {
    report_.Clear();
    FillReport(shared(), call_, acquired_.permit_id(), &report_);
    stub_->async()->ReportResult(
        NewContext(), &report_, &reported_,
        [this](grpc::Status status) { OnReported(status); });
  }

  void OnReported(const grpc::Status& status) {
    if (status.ok()) {
      tally().Completed(SinceStart(), /*reported=*/true);
    } else {
      tally().Failed(status);
    }
    Next();
  }

  v1::DecisionService::Stub* const stub_;
  CallShape call_;
  std::unique_ptr<grpc::Alarm> hold_;
  v1::AcquireRequest acquire_;
  v1::AcquireResponse acquired_;
  v1::ReportResultRequest report_;
  v1::ReportResultResponse reported_;
};

// One of the concurrent decisions of a connection in rls mode: a
// ShouldRateLimit call with one descriptor, [dependency=DEP] or
// [dependency=DEP, key=KEY], then the next, until the budget is spent. Envoy
// reports nothing, so neither does this. OK counts as ALLOW, OVER_LIMIT as
// REJECT.
class RlsChain : public DecisionChain {
 public:
  RlsChain(const Shared& shared,
           envoy::service::ratelimit::v3::RateLimitService::Stub* stub,
           uint64_t seed)
      : DecisionChain(shared, seed), stub_(stub) {}

 private:
  void StartCall() override {
    const CallShape call = NextCall();
    request_.Clear();
    request_.set_domain(kRlsDomain);
    auto* descriptor = request_.add_descriptors();
    auto* entry = descriptor->add_entries();
    entry->set_key("dependency");
    entry->set_value(shared().workload.dependency(call.dependency));
    if (call.key >= 0) {
      entry = descriptor->add_entries();
      entry->set_key("key");
      entry->set_value(shared().workload.key(call.key));
    }
    stub_->async()->ShouldRateLimit(
        TimedContext(), &request_, &response_,
        [this](grpc::Status status) { Answered(status); });
  }

  void OnAnswer(absl::Duration latency) override {
    const bool ok = response_.overall_code() ==
                    envoy::service::ratelimit::v3::RateLimitResponse::OK;
    tally().Acquired(latency, ok ? v1::ALLOW : v1::REJECT);
    CompleteAndContinue();
  }

  envoy::service::ratelimit::v3::RateLimitService::Stub* const stub_;
  envoy::service::ratelimit::v3::RateLimitRequest request_;
  envoy::service::ratelimit::v3::RateLimitResponse response_;
};

// One DecisionService.Decide stream with options.concurrency decisions
// outstanding on it. Decision i of the stream uses request ids 2i (its
// Acquire) and 2i + 1 (its report); a call waits in `pending_` while a write
// is under way, and the next write takes up to options.batch of them.
// Reads, write completions and hold alarms run on gRPC's threads, possibly
// at once; mu_ guards what they share, and each slot is touched only by the
// step its decision is at. Reactor holds keep OnDone until Start has sent
// every first call and every hold alarm has fired.
class DecideStream
    : public grpc::ClientBidiReactor<v1::DecideRequest, v1::DecideResponse> {
 public:
  DecideStream(const Shared& shared, v1::DecisionService::Stub* stub,
               uint64_t seed)
      : shared_(shared), stub_(stub), slots_(shared.options.concurrency) {
    for (size_t i = 0; i < slots_.size(); ++i) slots_[i].rng.seed(seed + i);
  }

  void Start() {
    if (shared_.stream_deadline != absl::InfiniteFuture()) {
      context_.set_deadline(absl::ToChronoTime(shared_.stream_deadline));
    }
    stub_->async()->Decide(&context_, this);
    // OnDone waits for this hold: a stream refused at once must still see
    // every slot's first call as unanswered.
    AddHold();
    StartRead(&response_);
    {
      absl::MutexLock lock(&mu_);
      active_ = static_cast<int>(slots_.size());
    }
    StartCall();
    for (size_t i = 0; i < slots_.size(); ++i) NextDecision(i);
    RemoveHold();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return;  // the stream is ending; OnDone follows
    bool write = false, writes_done = false;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      write = TakeBatch();
      if (!write) writes_done = TakeWritesDone();
    }
    if (write) StartWrite(&request_);
    if (writes_done) StartWritesDone();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    for (const v1::DecideResult& result : response_.results()) Handle(result);
    StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    uint64_t unanswered = 0;
    for (const Slot& slot : slots_) unanswered += slot.busy ? 1 : 0;
    if (unanswered > 0) {
      if (status.ok()) {
        shared_.tally.Failed(kUnanswered, "the stream ended early", unanswered);
      } else {
        std::string message = "Decide stream ended";
        if (!status.error_message().empty()) {
          absl::StrAppend(&message, ": ", status.error_message());
        }
        if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
          absl::StrAppend(&message,
                          " (this sluiced does not serve the Decide stream)");
        }
        shared_.tally.Failed(CodeName(status.error_code()), message,
                             unanswered);
      }
    }
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
    }
    shared_.tally.WorkerDone();
  }

 private:
  struct Slot {
    std::mt19937_64 rng;
    CallShape call;
    absl::Time started;
    std::string permit_id;
    std::unique_ptr<grpc::Alarm> hold;
    bool busy = false;  // a decision is under way
  };

  void NextDecision(size_t i) {
    Slot& slot = slots_[i];
    if (!shared_.budget.Take()) {
      slot.busy = false;
      SlotFinished();
      return;
    }
    slot.busy = true;
    slot.call = shared_.workload.Next(slot.rng);
    v1::DecideCall call;
    call.set_request_id(2 * i);
    FillAcquire(shared_, slot.call, call.mutable_acquire());
    slot.started = absl::Now();
    Send(std::move(call));
  }

  void SendReport(size_t i) {
    Slot& slot = slots_[i];
    v1::DecideCall call;
    call.set_request_id(2 * i + 1);
    FillReport(shared_, slot.call, slot.permit_id, call.mutable_report());
    Send(std::move(call));
  }

  void Handle(const v1::DecideResult& result) {
    const size_t i = result.request_id() / 2;
    if (i >= slots_.size() || !slots_[i].busy) {
      shared_.tally.Failed(
          kUnanswered,
          absl::StrCat("a result for request_id ", result.request_id(),
                       " that no call is waiting for"));
      return;
    }
    Slot& slot = slots_[i];
    switch (result.result_case()) {
      case v1::DecideResult::kError:
        shared_.tally.Failed(CodeName(result.error().code()),
                             result.error().message());
        NextDecision(i);
        return;
      case v1::DecideResult::kAcquire:
        shared_.tally.Acquired(absl::Now() - slot.started,
                               result.acquire().verdict());
        if (result.acquire().verdict() != v1::ALLOW) {
          shared_.tally.Completed(absl::ZeroDuration(), /*reported=*/false);
          NextDecision(i);
          return;
        }
        slot.permit_id = result.acquire().permit_id();
        if (shared_.options.hold &&
            shared_.options.latency > absl::ZeroDuration()) {
          Hold(i);
        } else {
          SendReport(i);
        }
        return;
      case v1::DecideResult::kReport:
        shared_.tally.Completed(absl::Now() - slot.started,
                                /*reported=*/true);
        NextDecision(i);
        return;
      case v1::DecideResult::RESULT_NOT_SET:
        break;
    }
    shared_.tally.Failed(
        kUnanswered,
        absl::StrCat("an empty result for request_id ", result.request_id()));
    NextDecision(i);
  }

  // Reports slot i's permit once options.latency has passed. The reactor
  // hold keeps OnDone (and so the stream's deletion) until the alarm fired.
  void Hold(size_t i) {
    AddHold();
    slots_[i].hold = std::make_unique<grpc::Alarm>();
    slots_[i].hold->Set(
        absl::ToChronoTime(absl::Now() + shared_.options.latency),
        [this, i](bool) {
          SendReport(i);
          RemoveHold();
        });
  }

  void Send(v1::DecideCall call) ABSL_LOCKS_EXCLUDED(mu_) {
    bool write = false;
    {
      absl::MutexLock lock(&mu_);
      if (done_) return;
      pending_.push_back(std::move(call));
      if (!writing_) write = TakeBatch();
    }
    if (write) StartWrite(&request_);
  }

  void SlotFinished() ABSL_LOCKS_EXCLUDED(mu_) {
    bool writes_done = false;
    {
      absl::MutexLock lock(&mu_);
      --active_;
      if (!writing_) writes_done = TakeWritesDone();
    }
    if (writes_done) StartWritesDone();
  }

  // Moves up to options.batch pending calls into request_; false when none
  // is pending.
  bool TakeBatch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (pending_.empty()) return false;
    request_.Clear();
    const size_t batch = static_cast<size_t>(shared_.options.batch);
    while (!pending_.empty() &&
           static_cast<size_t>(request_.calls_size()) < batch) {
      *request_.add_calls() = std::move(pending_.front());
      pending_.pop_front();
    }
    writing_ = true;
    return true;
  }

  // True once, when every slot has finished and nothing is left to write.
  bool TakeWritesDone() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (active_ > 0 || !pending_.empty() || writes_done_ || done_) return false;
    writes_done_ = true;
    return true;
  }

  const Shared& shared_;
  v1::DecisionService::Stub* const stub_;
  grpc::ClientContext context_;
  std::vector<Slot> slots_;
  v1::DecideResponse response_;  // the one read in flight owns it
  v1::DecideRequest request_;    // the one write in flight owns it

  absl::Mutex mu_;
  std::deque<v1::DecideCall> pending_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  int active_ ABSL_GUARDED_BY(mu_) = 0;  // slots not yet finished
  bool writes_done_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;  // OnDone has run
};

// One of the concurrent health checks of a connection: Check, then the
// next, until the budget is spent.
class HealthChain : public CallChain {
 public:
  HealthChain(Budget& budget, Tally& tally,
              grpc::health::v1::Health::Stub* stub, absl::Duration deadline)
      : CallChain(budget, tally, deadline), stub_(stub) {}

 private:
  void StartCall() override {
    stub_->async()->Check(TimedContext(), &request_, &response_,
                          [this](grpc::Status status) { Answered(status); });
  }

  void OnAnswer(absl::Duration latency) override {
    tally().Acquired(latency, -1);
    CompleteAndContinue();
  }

  grpc::health::v1::Health::Stub* const stub_;
  grpc::health::v1::HealthCheckRequest request_;
  grpc::health::v1::HealthCheckResponse response_;
};

}  // namespace

absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>> OpenConnections(
    const BenchOptions& options) {
  wire::ClientTlsFiles tls;
  tls.ca_file = options.tls_ca;
  tls.cert_file = options.tls_cert;
  tls.key_file = options.tls_key;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      wire::MakeChannelCredentials(tls);
  if (!credentials.ok()) return credentials.status();
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < options.connections; ++i) {
    grpc::ChannelArguments args;
    // Channels with equal arguments share a subchannel, and so a connection.
    args.SetInt("sluice_bench.connection", i);
    channels.push_back(
        grpc::CreateCustomChannel(options.target, *credentials, args));
  }
  const auto deadline = absl::ToChronoTime(absl::Now() + options.deadline);
  for (const auto& channel : channels) {
    if (!channel->WaitForConnected(deadline)) {
      return absl::UnavailableError(
          absl::StrCat("cannot connect to ", options.target, " within ",
                       absl::FormatDuration(options.deadline)));
    }
  }
  return channels;
}

PhaseResult RunDecisions(
    const BenchOptions& options, const Workload& workload,
    const std::vector<std::shared_ptr<grpc::Channel>>& channels,
    PhaseLength length, uint64_t seed) {
  const bool stream = options.mode == Mode::kStream;
  const int workers =
      static_cast<int>(channels.size()) * (stream ? 1 : options.concurrency);
  Budget budget(length);
  Tally tally(workers);
  const Shared shared{options, workload, budget, tally,
                      length.count > 0
                          ? absl::InfiniteFuture()
                          : absl::Now() + length.duration + options.deadline};
  std::vector<std::unique_ptr<v1::DecisionService::Stub>> stubs;
  for (const auto& channel : channels) {
    stubs.push_back(v1::DecisionService::NewStub(channel));
  }
  std::vector<std::unique_ptr<
      envoy::service::ratelimit::v3::RateLimitService::Stub>>
      rls_stubs;
  std::vector<std::unique_ptr<CallChain>> chains;
  std::vector<std::unique_ptr<DecideStream>> streams;
  const absl::Time start = absl::Now();
  for (size_t c = 0; c < stubs.size(); ++c) {
    const uint64_t base = seed + c * static_cast<uint64_t>(options.concurrency);
    if (options.mode == Mode::kRls) {
      rls_stubs.push_back(
          envoy::service::ratelimit::v3::RateLimitService::NewStub(
              channels[c]));
      for (int m = 0; m < options.concurrency; ++m) {
        chains.push_back(std::make_unique<RlsChain>(
            shared, rls_stubs.back().get(), base + m));
        chains.back()->Next();
      }
      continue;
    }
    if (stream) {
      streams.push_back(
          std::make_unique<DecideStream>(shared, stubs[c].get(), base));
      streams.back()->Start();
      continue;
    }
    for (int m = 0; m < options.concurrency; ++m) {
      chains.push_back(
          std::make_unique<UnaryChain>(shared, stubs[c].get(), base + m));
      chains.back()->Next();
    }
  }
  return tally.Wait(start);
}

PhaseResult RunHealthChecks(
    const BenchOptions& options,
    const std::vector<std::shared_ptr<grpc::Channel>>& channels,
    PhaseLength length) {
  Budget budget(length);
  Tally tally(static_cast<int>(channels.size()) * options.concurrency);
  std::vector<std::unique_ptr<grpc::health::v1::Health::Stub>> stubs;
  std::vector<std::unique_ptr<HealthChain>> chains;
  const absl::Time start = absl::Now();
  for (const auto& channel : channels) {
    stubs.push_back(grpc::health::v1::Health::NewStub(channel));
    for (int m = 0; m < options.concurrency; ++m) {
      chains.push_back(std::make_unique<HealthChain>(
          budget, tally, stubs.back().get(), options.deadline));
      chains.back()->Next();
    }
  }
  return tally.Wait(start);
}

}  // namespace sluice::bench
