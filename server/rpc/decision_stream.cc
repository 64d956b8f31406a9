#include "server/rpc/decision_stream.h"

namespace sluice::rpc {

void DecideStreams::Add(DecideStream* stream) {
  bool end;
  {
    absl::MutexLock lock(&mu_);
    open_.insert(stream);
    end = ending_;
  }
  if (end) stream->End();
}

void DecideStreams::Remove(DecideStream* stream) {
  absl::MutexLock lock(&mu_);
  open_.erase(stream);
}

void DecideStreams::EndAll() {
  // A stream's OnDone removes it under mu_, so none is deleted while this
  // holds it.
  absl::MutexLock lock(&mu_);
  ending_ = true;
  for (DecideStream* stream : open_) stream->End();
}

int64_t DecideStreams::open() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(open_.size());
}

DecideStream::DecideStream(const Handler* handle, DecideStreams* streams)
    : handle_(handle), streams_(streams) {
  // Joined first, so a shutdown under way ends this stream too (and before
  // it reads anything).
  streams_->Add(this);
  absl::MutexLock lock(&mu_);
  if (!finished_) StartRead(&request_);
}

void DecideStream::End() {
  absl::MutexLock lock(&mu_);
  ending_ = true;
  MaybeFinishLocked();
}

void DecideStream::OnReadDone(bool ok) {
  if (!ok) {
    absl::MutexLock lock(&mu_);
    reads_done_ = true;
    MaybeFinishLocked();
    return;
  }
  // Outside the lock: the engine may take a while, and a write completing
  // meanwhile should not wait for it. Marked, so that an End() meanwhile
  // does not finish the call before these results are written.
  {
    absl::MutexLock lock(&mu_);
    handling_ = true;
  }
  v1::DecideResponse results;
  (*handle_)(request_, &results);
  request_.Clear();

  absl::MutexLock lock(&mu_);
  handling_ = false;
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
  if (ending_) {
    MaybeFinishLocked();
  } else if (pending_.results_size() > kMaxPendingResults) {
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
  if (read_paused_ && !ending_ &&
      pending_.results_size() <= kMaxPendingResults) {
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
  streams_->Remove(this);
  delete this;
}

void DecideStream::MaybeWriteLocked() {
  if (write_in_flight_ || broken_ || finished_ ||
      pending_.results_size() == 0) {
    return;
  }
  writing_.Swap(&pending_);
  write_in_flight_ = true;
  StartWrite(&writing_);
}

void DecideStream::MaybeFinishLocked() {
  // The message being written must stay put until OnWriteDone, which comes
  // (failed, if the stream broke) and calls here again.
  if (finished_ || write_in_flight_ || handling_) return;
  if (broken_) {
    // An outstanding read fails once the call is finished; OnDone follows.
    finished_ = true;
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "Decide stream broken"));
    return;
  }
  if (!(reads_done_ || ending_) || pending_.results_size() > 0) return;
  finished_ = true;
  if (ending_ && !reads_done_) {
    // A read may be outstanding; it fails once the call is finished.
    Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "sluiced is shutting down; open a new stream"));
    return;
  }
  Finish(grpc::Status::OK);
}

}  // namespace sluice::rpc
