// SPDX-License-Identifier: Apache-2.0
#include "base/file_watcher.h"

#include <utility>

#include "absl/status/statusor.h"
#include "base/files.h"

namespace sluice::base {

FileWatcher::FileWatcher(
    std::string path, Options options,
    std::function<void(const std::string& contents)> on_change,
    std::function<void(const std::string& error)> on_error)
    : path_(std::move(path)),
      options_(options),
      on_change_(std::move(on_change)),
      on_error_(std::move(on_error)) {}

FileWatcher::~FileWatcher() { Stop(); }

void FileWatcher::Start(const std::string& initial_contents) {
  if (task_ != nullptr) return;
  {
    absl::MutexLock lock(&poll_mu_);
    last_contents_ = initial_contents;
    failing_ = false;
    empty_pending_ = false;
  }
  base::PeriodicOptions periodic;
  periodic.first_run_in = options_.interval;
  task_ = options_.env->StartPeriodic(periodic, [this] {
    PollOnce();
    return options_.interval;
  });
}

void FileWatcher::Stop() {
  if (task_ != nullptr) task_->Stop();
}

void FileWatcher::PollOnce() {
  // Opening by path each time follows the symlinks afresh, which is what
  // makes a ConfigMap's ..data swap and a rename over the file visible.
  absl::StatusOr<std::string> contents = base::ReadRegularFile(path_);
  absl::MutexLock lock(&poll_mu_);
  if (!contents.ok()) {
    if (!failing_ && on_error_) {
      on_error_(std::string(contents.status().message()));
    }
    failing_ = true;
    return;
  }
  failing_ = false;
  if (*contents == last_contents_) {
    empty_pending_ = false;
    return;
  }
  if (contents->empty() && !empty_pending_) {
    empty_pending_ = true;  // maybe mid-rewrite; confirm on the next poll
    return;
  }
  empty_pending_ = false;
  last_contents_ = *std::move(contents);
  if (on_change_) on_change_(last_contents_);
}

}  // namespace sluice::base
