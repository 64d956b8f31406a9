// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_BASE_FILE_WATCHER_H_
#define SLUICE_BASE_FILE_WATCHER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/env.h"

namespace sluice::base {

// Watches one file and calls `on_change(contents)` from a periodic task of
// its Env (the process's own: a thread) whenever the contents differ from the
// last seen. It polls: it re-resolves the path every `interval`, so an edit
// in place, a rename over the file and a Kubernetes ConfigMap symlink swap
// (..data -> new directory) are all seen. A file that cannot be read is
// reported once per failure streak to `on_error` and the last contents stay
// in force. A file that turns empty is reported only when the next poll
// still finds it empty, because an in-place rewrite truncates first and an
// empty file would replace every setting it holds. Callbacks run one at a time and must not
// call PollOnce. Safe for concurrent use.
class FileWatcher {
 public:
  struct Options {
    absl::Duration interval = absl::Seconds(1);
    // Where the polls run; must outlive the watcher. Tests give a manual
    // one.
    Env* env = Env::Default();
  };
  FileWatcher(std::string path, Options options,
              std::function<void(const std::string& contents)> on_change,
              std::function<void(const std::string& error)> on_error);
  ~FileWatcher();  // Stops polling.

  // Starts polling, the first poll an interval from now. `initial_contents`
  // is what the caller already loaded, so it is not reported again. Start
  // and Stop are called from one thread.
  void Start(const std::string& initial_contents);
  void Stop();

  // Checks the file once, now, on the caller's thread (tests use this).
  void PollOnce() ABSL_LOCKS_EXCLUDED(poll_mu_);

 private:
  const std::string path_;
  const Options options_;
  const std::function<void(const std::string&)> on_change_;
  const std::function<void(const std::string&)> on_error_;

  // Serializes polls from the task and from PollOnce callers.
  absl::Mutex poll_mu_;
  std::string last_contents_ ABSL_GUARDED_BY(poll_mu_);
  bool failing_ ABSL_GUARDED_BY(poll_mu_) = false;
  // The last poll read an empty file that replaced non-empty contents.
  bool empty_pending_ ABSL_GUARDED_BY(poll_mu_) = false;

  std::unique_ptr<base::PeriodicTask> task_;
};

}  // namespace sluice::base

#endif  // SLUICE_BASE_FILE_WATCHER_H_
