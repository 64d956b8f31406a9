#include "server/rpc/decision_stream.h"

namespace sluice::rpc {

DecideStream::DecideStream(const Handler* handle,
                           std::atomic<int64_t>* open_streams)
    : handle_(handle), open_streams_(open_streams) {
  if (open_streams_ != nullptr) open_streams_->fetch_add(1);
  StartRead(&request_);
}

void DecideStream::OnReadDone(bool ok) {
  if (!ok) {
    absl::MutexLock lock(&mu_);
    reads_done_ = true;
    MaybeFinishLocked();
    return;
  }
  // Outside the lock: the engine may take a while, and a write completing
  // meanwhile should not wait for it.
  v1::DecideResponse results;
  (*handle_)(request_, &results);
  request_.Clear();

  absl::MutexLock lock(&mu_);
  if (broken_) {
    // Nothing can be sent any more; the read that follows fails and ends
    // the stream.
    reads_done_ = true;
    MaybeFinishLocked();
    return;
  }
  if (pending_.results_size() == 0) {
    pending_.Swap(&results);
  } else {
    for (v1::DecideResult& r : *results.mutable_results()) {
      pending_.add_results()->Swap(&r);
    }
  }
  MaybeWriteLocked();
  if (pending_.results_size() > kMaxPendingResults) {
    read_paused_ = true;  // OnWriteDone reads on
  } else {
    StartRead(&request_);
  }
}

void DecideStream::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  write_in_flight_ = false;
  writing_.Clear();
  if (!ok) {
    broken_ = true;
    MaybeFinishLocked();
    return;
  }
  MaybeWriteLocked();
  if (read_paused_ && pending_.results_size() <= kMaxPendingResults) {
    read_paused_ = false;
    StartRead(&request_);
  }
  MaybeFinishLocked();
}

void DecideStream::OnCancel() {
  absl::MutexLock lock(&mu_);
  broken_ = true;
  MaybeFinishLocked();
}

void DecideStream::OnDone() {
  if (open_streams_ != nullptr) open_streams_->fetch_sub(1);
  delete this;
}

void DecideStream::MaybeWriteLocked() {
  if (write_in_flight_ || broken_ || pending_.results_size() == 0) return;
  writing_.Swap(&pending_);
  write_in_flight_ = true;
  StartWrite(&writing_);
}

void DecideStream::MaybeFinishLocked() {
  // The message being written must stay put until OnWriteDone, which comes
  // (failed, if the stream broke) and calls here again.
  if (finished_ || write_in_flight_) return;
  if (broken_) {
    // An outstanding read fails once the call is finished; OnDone follows.
    finished_ = true;
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "Decide stream broken"));
    return;
  }
  if (!reads_done_ || pending_.results_size() > 0) return;
  finished_ = true;
  Finish(grpc::Status::OK);
}

}  // namespace sluice::rpc
