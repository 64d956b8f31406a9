// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_RPC_OPEN_STREAMS_H_
#define SLUICE_SERVER_RPC_OPEN_STREAMS_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"

namespace sluice::rpc {

// The open streams of one service, so that shutdown can end them: a stream
// never ends by itself while its peer lives. A stream joins when it starts
// and leaves in its OnDone. `Stream::End()` asks it to finish; EndAll calls
// it under this registry's lock, so End must not join or leave. Safe for
// concurrent use.
template <typename Stream>
class OpenStreams {
 public:
  // A stream that joins after EndAll is ended at once.
  void Add(Stream* stream) ABSL_LOCKS_EXCLUDED(mu_) {
    bool end;
    {
      absl::MutexLock lock(&mu_);
      open_.insert(stream);
      end = ending_;
    }
    if (end) stream->End();
  }

  void Remove(Stream* stream) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    open_.erase(stream);
  }

  // Ends every open stream, and every stream opened from now on.
  void EndAll() ABSL_LOCKS_EXCLUDED(mu_) {
    // A stream's OnDone removes it under mu_, so none is deleted while this
    // holds it.
    absl::MutexLock lock(&mu_);
    ending_ = true;
    for (Stream* stream : open_) stream->End();
  }

  int64_t open() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return static_cast<int64_t>(open_.size());
  }

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_set<Stream*> open_ ABSL_GUARDED_BY(mu_);
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sluice::rpc

#endif  // SLUICE_SERVER_RPC_OPEN_STREAMS_H_
