#include "decide_stream.h"

#include <grpc/support/log.h>

#include <utility>
#include <vector>

#include "grpcpp/client_context.h"
#include "grpcpp/support/client_callback.h"

namespace sluice::client::internal {

// One Decide RPC. Its state is guarded by the owner's mutex, so that a call
// that joins the queue and a stream that breaks never cross. Holds the RPC
// open (AddHold) until it has seen the stream end, so that no write can be
// started after OnDone. Deletes itself in OnDone.
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

  void Enqueue(v1::DecideCall call, Done done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(owner_->mu_) {
    waiting_.emplace(call.request_id(), std::move(done));
    queue_.push_back(std::move(call));
    MaybeWrite();
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
      for (v1::DecideResult& result : *response_.mutable_results()) {
        auto it = waiting_.find(result.request_id());
        if (it == waiting_.end()) continue;  // not ours; nothing waits
        answered.emplace_back(std::move(it->second), std::move(result));
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
  absl::flat_hash_map<uint64_t, Done> TakeWaiting()
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
  absl::flat_hash_map<uint64_t, Done> waiting_ ABSL_GUARDED_BY(owner_->mu_);
};

DecideStream::DecideStream(std::shared_ptr<grpc::Channel> channel)
    : channel_(std::move(channel)),
      stub_(v1::DecisionService::NewStub(channel_)) {}

DecideStream::~DecideStream() { Shutdown(); }

bool DecideStream::Send(v1::DecideCall call, Done&& done) {
  if (unimplemented_.load()) return false;
  absl::MutexLock lock(&mu_);
  if (shut_down_) return false;
  call.set_request_id(next_id_++);
  if (session_ == nullptr) {
    session_ = new Session(this);
    ++live_sessions_;
  }
  session_->Enqueue(std::move(call), std::move(done));
  return true;
}

void DecideStream::Shutdown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
  if (session_ != nullptr) session_->Cancel();
  mu_.Await(absl::Condition(
      +[](int* live) { return *live == 0; }, &live_sessions_));
}

void DecideStream::OnSessionDone(Session* session, const grpc::Status& status) {
  absl::flat_hash_map<uint64_t, Done> waiting;
  {
    absl::MutexLock lock(&mu_);
    if (session_ == session) session_ = nullptr;
    waiting = session->TakeWaiting();
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
  const grpc::Status failure =
      status.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                 "Decide stream ended before answering")
                  : status;
  for (auto& [id, done] : waiting) done(failure, v1::DecideResult());
  delete session;
  absl::MutexLock lock(&mu_);
  --live_sessions_;  // last: Shutdown may return and the owner go
}

}  // namespace sluice::client::internal
