// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_POLICY_FILE_WATCHER_H_
#define SLUICE_SERVER_POLICY_FILE_WATCHER_H_

#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sluice::policy {

// Watches one file and calls `on_change(contents)` from its own thread
// whenever the contents differ from the last seen. It polls: it re-resolves
// the path every `interval`, so an edit in place, a rename over the file and a
// Kubernetes ConfigMap symlink swap (..data -> new directory) are all seen.
// A file that cannot be read is reported once per failure streak to
// `on_error` and the last contents stay in force. A file that turns empty is
// reported only when the next poll still finds it empty, because an in-place
// rewrite truncates first and "no policies" would delete them all.
// Callbacks run one at a time and must not call PollOnce. Safe for
// concurrent use.
class FileWatcher {
 public:
  struct Options {
    absl::Duration interval = absl::Seconds(1);
  };
  FileWatcher(std::string path, Options options,
              std::function<void(const std::string& contents)> on_change,
              std::function<void(const std::string& error)> on_error);
  ~FileWatcher();  // Stops the thread.

  // Starts polling. `initial_contents` is what the caller already loaded,
  // so it is not reported again.
  void Start(const std::string& initial_contents);
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // Checks the file once, now, on the caller's thread (tests use this).
  void PollOnce() ABSL_LOCKS_EXCLUDED(poll_mu_);

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);

  const std::string path_;
  const Options options_;
  const std::function<void(const std::string&)> on_change_;
  const std::function<void(const std::string&)> on_error_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  // Serializes polls from the thread and from PollOnce callers.
  absl::Mutex poll_mu_;
  std::string last_contents_ ABSL_GUARDED_BY(poll_mu_);
  bool failing_ ABSL_GUARDED_BY(poll_mu_) = false;
  // The last poll read an empty file that replaced non-empty contents.
  bool empty_pending_ ABSL_GUARDED_BY(poll_mu_) = false;

  std::thread thread_;
};

}  // namespace sluice::policy

#endif  // SLUICE_SERVER_POLICY_FILE_WATCHER_H_
