// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_RPC_ADMIN_TOKENS_H_
#define SLUICE_SERVER_RPC_ADMIN_TOKENS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/stats.h"
#include "base/file_watcher.h"

namespace sluice::rpc {

// The bearer tokens the admin API accepts now. Admin calls are rare, so a
// reader lock on each is cheap enough. Safe for concurrent use.
class AdminTokens {
 public:
  explicit AdminTokens(std::vector<std::string> tokens);

  // True when `presented` equals one of the tokens. Every token is compared
  // in full whatever the outcome, so the timing says nothing about which
  // bytes or which token matched.
  bool Accepts(absl::string_view presented) const ABSL_LOCKS_EXCLUDED(mu_);
  void Replace(std::vector<std::string> tokens) ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);
  // How many of `tokens` are not in force now (for the reload log line).
  size_t CountNew(const std::vector<std::string>& tokens) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> tokens_ ABSL_GUARDED_BY(mu_);
};

// Keeps AdminTokens in step with --admin-token-file. A FileWatcher thread
// polls the file (by content, so an in-place rewrite and a Secret's ..data
// symlink swap are both seen) and installs each new valid token set. A file
// that turns unreadable, empty or invalid keeps the last good set in force
// and logs an error: a broken rotation neither opens the admin API nor
// locks everyone out. Safe for concurrent use.
class AdminTokenFile final : public base::StatsSource {
 public:
  struct Options {
    std::string path;
    // How often the file is checked.
    absl::Duration interval = absl::Seconds(1);
  };
  // Reloads since start, for sluice_admin_token_reloads_total.
  struct Stats {
    uint64_t ok = 0;     // a changed file was read and its set installed
    uint64_t error = 0;  // a change left the file unreadable or invalid
  };

  // Reads the file once. INVALID_ARGUMENT naming --admin-token-file when it
  // cannot be read or holds no valid token (at startup this is fatal).
  static absl::StatusOr<std::unique_ptr<AdminTokenFile>> Load(Options options);
  ~AdminTokenFile();  // Stops watching.

  // Starts the watcher thread.
  void StartWatching();
  // Checks the file once, now, on the caller's thread (tests).
  void PollOnce();

  const AdminTokens* tokens() const { return &tokens_; }
  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);
  // stats() as sluice_admin_token_reloads_total.
  void WriteStats(base::StatsWriter& out) const override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  AdminTokenFile(Options options, std::vector<std::string> tokens,
                 std::string contents);
  void OnChange(const std::string& contents) ABSL_LOCKS_EXCLUDED(mu_);
  void OnError(const std::string& error) ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  const std::string initial_contents_;
  AdminTokens tokens_;

  mutable absl::Mutex mu_;
  Stats stats_ ABSL_GUARDED_BY(mu_);

  // Last: its thread calls back into the members above, so it goes first.
  base::FileWatcher watcher_;
};

}  // namespace sluice::rpc

#endif  // SLUICE_SERVER_RPC_ADMIN_TOKENS_H_
