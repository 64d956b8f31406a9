// SPDX-License-Identifier: Apache-2.0
#include "server/rpc/decision_stream.h"

#include <malloc.h>

#include "server/rpc/message_bounds.h"
#include "wire/status.h"

namespace sluice::rpc {

DecideStream::DecideStream(const Handler* handle, DecideStreams* streams)
    : handle_(handle), streams_(streams) {
  // Joined first, so a shutdown under way ends this stream too (and before
  // it reads anything).
  streams_->Add(this);
  absl::MutexLock lock(&mu_);
  if (!finished_) StartRead(&read_buffer_);
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
  // The read side is ours until Continue hands the token back; an End()
  // meanwhile does not finish the call under it.
  {
    absl::MutexLock lock(&mu_);
    handling_ = true;
  }
  // Checked on the raw bytes before protobuf builds anything: a message of
  // two million empty calls costs its bytes, not a message object each.
  const absl::Status parsed =
      ParseBounded(read_buffer_, kDecideBudget, &request_);
  read_buffer_.Clear();
  next_call_ = 0;
  if (!parsed.ok()) {
    request_.Clear();
    absl::MutexLock lock(&mu_);
    handling_ = false;
    reads_done_ = true;  // nothing more is read: the stream ends
    refusal_ = wire::ToGrpcStatus(parsed);
    MaybeFinishLocked();
    return;
  }
  Continue();
}

void DecideStream::Continue() {
  while (true) {
    size_t room;
    {
      absl::MutexLock lock(&mu_);
      if (broken_ || ending_) {
        // Nothing more is sent, or the stream is being ended: the calls not
        // handled yet get no answer.
        handling_ = false;
        request_.Clear();
        if (broken_) reads_done_ = true;
        MaybeFinishLocked();
        return;
      }
      if (pending_bytes_ >= kMaxPendingBytes) {
        // Full: OnWriteDone takes the token back once there is room.
        paused_ = true;
        held_much_ = true;
        handling_ = false;
        MaybeWriteLocked();
        return;
      }
      if (next_call_ >= request_.calls_size()) {
        handling_ = false;
        request_.Clear();
        StartRead(&read_buffer_);
        return;
      }
      room = kMaxPendingBytes - pending_bytes_;
    }
    // Outside the lock: the engine may take a while, and a write completing
    // meanwhile should not wait for it.
    v1::DecideResponse chunk;
    size_t bytes = 0;
    const int n = request_.calls_size();
    while (next_call_ < n && bytes < room) {
      v1::DecideResult* result = chunk.add_results();
      (*handle_)(request_.calls(next_call_), next_call_, result);
      // The result's bytes, its tag and its length prefix.
      bytes += result->ByteSizeLong() + 6;
      ++next_call_;
    }
    absl::MutexLock lock(&mu_);
    if (pending_.results_size() == 0) {
      pending_.Swap(&chunk);
    } else {
      for (v1::DecideResult& r : *chunk.mutable_results()) {
        pending_.add_results()->Swap(&r);
      }
    }
    pending_bytes_ += bytes;
    MaybeWriteLocked();
  }
}

void DecideStream::OnWriteDone(bool ok) {
  bool resume = false;
  {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = false;
    writing_.Clear();
    if (!ok) {
      broken_ = true;
      MaybeFinishLocked();
      return;
    }
    MaybeWriteLocked();
    if (paused_ && !handling_ && !ending_ && !broken_ &&
        pending_bytes_ < kMaxPendingBytes) {
      paused_ = false;
      handling_ = true;
      resume = true;
    }
    MaybeFinishLocked();
  }
  if (resume) Continue();
}

void DecideStream::OnCancel() {
  absl::MutexLock lock(&mu_);
  broken_ = true;
  MaybeFinishLocked();
}

void DecideStream::OnDone() {
  streams_->Remove(this);
  bool held_much;
  {
    absl::MutexLock lock(&mu_);
    held_much = held_much_;
  }
  delete this;
  // A stream that filled its queue freed megabytes just now, in chunks that
  // glibc keeps in the arenas of the threads that allocated them; give the
  // free pages back, so that a cancelled stream's memory is returned (a
  // few milliseconds, paid only by streams that filled their queue).
  if (held_much) malloc_trim(0);
}

void DecideStream::MaybeWriteLocked() {
  if (write_in_flight_ || broken_ || finished_ ||
      pending_.results_size() == 0) {
    return;
  }
  const absl::Status serialized = SerializeToBuffer(pending_, &writing_);
  pending_.Clear();
  pending_bytes_ = 0;
  if (!serialized.ok()) {
    // Not expected (every string is ours or checked); end the stream
    // rather than send a part of its answers.
    broken_ = true;
    refusal_ = wire::ToGrpcStatus(serialized);
    MaybeFinishLocked();
    return;
  }
  write_in_flight_ = true;
  StartWrite(&writing_);
}

void DecideStream::MaybeFinishLocked() {
  // The bytes being written must stay put until OnWriteDone, which comes
  // (failed, if the stream broke) and calls here again.
  if (finished_ || write_in_flight_ || handling_) return;
  if (broken_) {
    // An outstanding read fails once the call is finished; OnDone follows.
    finished_ = true;
    Finish(refusal_.ok()
               ? grpc::Status(grpc::StatusCode::CANCELLED,
                              "Decide stream broken")
               : refusal_);
    return;
  }
  if (!(reads_done_ || ending_) || pending_.results_size() > 0) return;
  finished_ = true;
  if (!refusal_.ok()) {
    Finish(refusal_);
    return;
  }
  if (ending_ && !reads_done_) {
    // A read may be outstanding; it fails once the call is finished.
    Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "sluiced is shutting down; open a new stream"));
    return;
  }
  Finish(grpc::Status::OK);
}

}  // namespace sluice::rpc
