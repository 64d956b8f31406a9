// SPDX-License-Identifier: Apache-2.0
#include "decide_stream.h"

#include <grpc/support/log.h>

#include <queue>
#include <utility>
#include <vector>

#include "grpcpp/client_context.h"
#include "grpcpp/support/client_callback.h"

namespace sluice::client::internal {

// One Decide RPC. Its state is guarded by the owner's mutex, so that a call
// that joins the queue and a stream that breaks never cross. Holds the RPC
// open (AddHold) until it has seen the stream end, so that no write can be
// started after OnDone. Deletes itself in OnDone.
//
// Each waiting call remembers how many responses the stream had received
// when it was queued; a call past its deadline with that count unchanged
// means the stream has said nothing since, and is taken for dead.
class DecideStream::Session final
    : public grpc::ClientBidiReactor<v1::DecideRequest, v1::DecideResponse> {
 public:
  Session(DecideStream* owner) ABSL_EXCLUSIVE_LOCKS_REQUIRED(owner->mu_)
      : owner_(owner) {
    owner_->stub_->async()->Decide(&context_, this);
    StartRead(&response_);
    AddHold();
    StartCall();
  }

  struct Waiting {
    Done done;
    uint64_t reads_when_queued;
  };

  void Enqueue(v1::DecideCall call, absl::Time deadline, Done done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(owner_->mu_) {
    // Deadlines of calls answered since are dropped lazily, from the top;
    // answers come mostly in order, so few linger.
    while (!deadlines_.empty() &&
           !waiting_.contains(deadlines_.top().second)) {
      deadlines_.pop();
    }
    const uint64_t id = call.request_id();
    waiting_.emplace(id, Waiting{std::move(done), reads_});
    deadlines_.emplace(deadline, id);
    queue_.push_back(std::move(call));
    MaybeWrite();
  }

  // The earliest deadline of a call queued on this stream (possibly answered
  // since); InfiniteFuture when none.
  absl::Time next_deadline() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(owner_->mu_) {
    return deadlines_.empty() ? absl::InfiniteFuture()
                              : deadlines_.top().first;
  }

  // Takes the calls whose deadline is `now` or earlier into `overdue`. When
  // the stream has received nothing since one of them was queued, ends it:
  // OnDone then completes the rest.
  void Expire(absl::Time now, std::vector<Done>* overdue)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(owner_->mu_) {
    bool silent = false;
    while (!deadlines_.empty() && deadlines_.top().first <= now) {
      const uint64_t id = deadlines_.top().second;
      deadlines_.pop();
      auto it = waiting_.find(id);
      if (it == waiting_.end()) continue;  // answered
      silent = silent || it->second.reads_when_queued == reads_;
      overdue->push_back(std::move(it->second.done));
      waiting_.erase(it);
    }
    if (silent && !ended_) {
      dead_ = true;
      End();
    }
  }

  // Whether Expire ended the stream for saying nothing.
  // The owner's lock, which guards this session. Callers holding it as
  // their own mu_ assert it through this, for clang's lock analysis.
  absl::Mutex& mu() const ABSL_LOCK_RETURNED(owner_->mu_) {
    return owner_->mu_;
  }

  bool dead() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(owner_->mu_) {
    return dead_;
  }

  // The stream is finished or going to be; no call may join it.
  bool ended() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(owner_->mu_) {
    return ended_;
  }

  void Cancel() ABSL_EXCLUSIVE_LOCKS_REQUIRED(owner_->mu_) {
    context_.TryCancel();
  }

  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(owner_->mu_) {
    absl::MutexLock lock(&owner_->mu_);
    writing_ = false;
    if (!ok) {
      End();  // the read fails too, and OnDone reports the status
      return;
    }
    MaybeWrite();
  }

  void OnReadDone(bool ok) override ABSL_LOCKS_EXCLUDED(owner_->mu_) {
    if (!ok) {
      absl::MutexLock lock(&owner_->mu_);
      End();
      return;
    }
    std::vector<std::pair<Done, v1::DecideResult>> answered;
    answered.reserve(response_.results_size());
    {
      absl::MutexLock lock(&owner_->mu_);
      ++reads_;
      for (v1::DecideResult& result : *response_.mutable_results()) {
        auto it = waiting_.find(result.request_id());
        if (it == waiting_.end()) continue;  // not ours, or past its deadline
        answered.emplace_back(std::move(it->second.done), std::move(result));
        waiting_.erase(it);
      }
    }
    response_.Clear();
    StartRead(&response_);
    for (auto& [done, result] : answered) done(grpc::Status::OK, std::move(result));
  }

  void OnDone(const grpc::Status& status) override {
    owner_->OnSessionDone(this, status);
  }

  // Takes the calls still waiting; called once, from OnDone.
  absl::flat_hash_map<uint64_t, Waiting> TakeWaiting()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(owner_->mu_) {
    return std::exchange(waiting_, {});
  }

 private:
  void MaybeWrite() ABSL_EXCLUSIVE_LOCKS_REQUIRED(owner_->mu_) {
    if (writing_ || ended_ || queue_.empty()) return;
    request_.Clear();
    while (!queue_.empty() &&
           request_.calls_size() < DecideStream::kMaxCallsPerMessage) {
      *request_.add_calls() = std::move(queue_.front());
      queue_.pop_front();
    }
    writing_ = true;
    StartWrite(&request_);
  }

  void End() ABSL_EXCLUSIVE_LOCKS_REQUIRED(owner_->mu_) {
    if (ended_) return;
    ended_ = true;
    if (owner_->session_ == this) owner_->session_ = nullptr;
    context_.TryCancel();  // a failed write: make sure the read ends too
    RemoveHold();
  }

  DecideStream* const owner_;
  grpc::ClientContext context_;
  v1::DecideResponse response_;  // the one outstanding read's

  v1::DecideRequest request_ ABSL_GUARDED_BY(owner_->mu_);  // being written
  bool writing_ ABSL_GUARDED_BY(owner_->mu_) = false;
  bool ended_ ABSL_GUARDED_BY(owner_->mu_) = false;
  std::deque<v1::DecideCall> queue_ ABSL_GUARDED_BY(owner_->mu_);
  absl::flat_hash_map<uint64_t, Waiting> waiting_ ABSL_GUARDED_BY(owner_->mu_);
  // (deadline, request id), earliest first; may hold calls answered since.
  std::priority_queue<std::pair<absl::Time, uint64_t>,
                      std::vector<std::pair<absl::Time, uint64_t>>,
                      std::greater<>>
      deadlines_ ABSL_GUARDED_BY(owner_->mu_);
  // Responses received so far.
  uint64_t reads_ ABSL_GUARDED_BY(owner_->mu_) = 0;
  bool dead_ ABSL_GUARDED_BY(owner_->mu_) = false;
};

DecideStream::DecideStream(std::shared_ptr<grpc::Channel> channel)
    : channel_(std::move(channel)),
      stub_(v1::DecisionService::NewStub(channel_)) {}

DecideStream::~DecideStream() { Shutdown(); }

bool DecideStream::Send(v1::DecideCall call, absl::Time deadline,
                        Done&& done) {
  if (unimplemented_.load()) return false;
  Rearm rearm;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return false;
    call.set_request_id(next_id_++);
    if (session_ == nullptr) {
      session_ = new Session(this);
      ++live_sessions_;
    }
    session_->mu().AssertHeld();
    session_->Enqueue(std::move(call), deadline, std::move(done));
    rearm = ArmBy(deadline);
  }
  SetAlarm(std::move(rearm));
  return true;
}

void DecideStream::Shutdown() {
  std::shared_ptr<grpc::Alarm> alarm;
  {
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
    if (session_ != nullptr) {
      session_->mu().AssertHeld();
      session_->Cancel();
    }
    alarm = std::move(alarm_);
    alarm_at_ = absl::InfiniteFuture();
  }
  // Cancels the alarm (unless a thread is about to set it, which then
  // cancels it on letting go): its callback runs soon, with false.
  alarm.reset();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &DecideStream::Idle));
}

bool DecideStream::Idle() const {
  return live_sessions_ == 0 && alarm_callbacks_ == 0;
}

DecideStream::Rearm DecideStream::ArmBy(absl::Time at) {
  Rearm rearm;
  if (shut_down_ || at >= alarm_at_) return rearm;  // also: at is infinite
  rearm.replaced = std::move(alarm_);
  alarm_ = std::make_shared<grpc::Alarm>();
  alarm_at_ = at;
  ++alarm_callbacks_;
  rearm.to_set = alarm_;
  rearm.at = at;
  return rearm;
}

void DecideStream::SetAlarm(Rearm rearm) {
  if (rearm.to_set != nullptr) {
    rearm.to_set->Set(absl::ToChronoTime(rearm.at),
                      [this](bool fired) { OnAlarm(fired); });
  }
  // Letting go of the replaced alarm cancels it, as it does `to_set` if that
  // was replaced meanwhile (each is destroyed with its last reference).
}

void DecideStream::OnAlarm(bool fired) {
  std::vector<Done> overdue;
  Rearm rearm;
  if (fired) {
    absl::MutexLock lock(&mu_);
    alarm_at_ = absl::InfiniteFuture();
    if (session_ != nullptr) {
      session_->mu().AssertHeld();
      session_->Expire(absl::Now(), &overdue);
      // Expire may have ended it (and cleared session_).
      if (session_ != nullptr) rearm = ArmBy(session_->next_deadline());
    }
  }
  SetAlarm(std::move(rearm));
  for (Done& done : overdue) {
    done(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded"),
         v1::DecideResult());
  }
  // The callbacks (and what they hold: calls, contexts, alarms) go before
  // the count does, not after Shutdown returned.
  overdue.clear();
  absl::MutexLock lock(&mu_);
  --alarm_callbacks_;  // last: Shutdown may return and the owner go
}

void DecideStream::OnSessionDone(Session* session, const grpc::Status& status) {
  absl::flat_hash_map<uint64_t, Session::Waiting> waiting;
  bool dead = false;
  {
    absl::MutexLock lock(&mu_);
    if (session_ == session) session_ = nullptr;
    session->mu().AssertHeld();
    waiting = session->TakeWaiting();
    dead = session->dead();
  }
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED &&
      !unimplemented_.exchange(true)) {
    // ERROR: gRPC's default verbosity shows nothing less, and an operator
    // should learn that the stream option has no effect.
    gpr_log(GPR_ERROR,
            "Sluice: the server has no DecisionService.Decide (%s); this "
            "client uses the unary calls from now on",
            status.error_message().c_str());
  }
  // A stream that ended cleanly still left these calls unanswered.
  grpc::Status failure = status;
  if (dead) {
    // Cancelled here: say why, rather than CANCELLED.
    failure = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                           "Decide stream answered nothing by a call's "
                           "deadline; cancelled it");
  } else if (status.ok()) {
    failure = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                           "Decide stream ended before answering");
  }
  for (auto& [id, call] : waiting) call.done(failure, v1::DecideResult());
  waiting.clear();  // before the count, as in OnAlarm
  delete session;
  absl::MutexLock lock(&mu_);
  --live_sessions_;  // last: Shutdown may return and the owner go
}

}  // namespace sluice::client::internal
