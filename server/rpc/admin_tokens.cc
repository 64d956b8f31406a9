// SPDX-License-Identifier: Apache-2.0
#include "server/rpc/admin_tokens.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "spdlog/spdlog.h"
#include "wire/admin_tokens.h"

namespace sluice::rpc {
namespace {

// Constant-time comparison, so a token cannot be guessed byte by byte.
bool SameSecret(absl::string_view a, absl::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^
            static_cast<unsigned char>(i < b.size() ? b[i] : 0);
  }
  return diff == 0;
}

}  // namespace

AdminTokens::AdminTokens(std::vector<std::string> tokens)
    : tokens_(std::move(tokens)) {}

bool AdminTokens::Accepts(absl::string_view presented) const {
  absl::ReaderMutexLock lock(&mu_);
  bool accepted = false;
  for (const std::string& token : tokens_) {
    accepted |= SameSecret(presented, token);  // no early exit
  }
  return accepted;
}

void AdminTokens::Replace(std::vector<std::string> tokens) {
  absl::MutexLock lock(&mu_);
  tokens_ = std::move(tokens);
}

size_t AdminTokens::size() const {
  absl::ReaderMutexLock lock(&mu_);
  return tokens_.size();
}

size_t AdminTokens::CountNew(const std::vector<std::string>& tokens) const {
  absl::ReaderMutexLock lock(&mu_);
  size_t fresh = 0;
  for (const std::string& t : tokens) {
    if (std::find(tokens_.begin(), tokens_.end(), t) == tokens_.end()) ++fresh;
  }
  return fresh;
}

absl::StatusOr<std::unique_ptr<AdminTokenFile>> AdminTokenFile::Load(
    Options options) {
  absl::StatusOr<std::string> text = base::ReadRegularFile(options.path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--admin-token-file ", options.path, ": ", text.status().message()));
  }
  absl::StatusOr<std::vector<std::string>> tokens =
      wire::ParseAdminTokens(*text);
  if (!tokens.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--admin-token-file ", options.path, ": ", tokens.status().message()));
  }
  return std::unique_ptr<AdminTokenFile>(new AdminTokenFile(
      std::move(options), *std::move(tokens), *std::move(text)));
}

AdminTokenFile::AdminTokenFile(Options options, std::vector<std::string> tokens,
                               std::string contents)
    : options_(std::move(options)),
      initial_contents_(std::move(contents)),
      tokens_(std::move(tokens)),
      watcher_(
          options_.path, base::FileWatcher::Options{options_.interval},
          [this](const std::string& contents) { OnChange(contents); },
          [this](const std::string& error) { OnError(error); }) {}

AdminTokenFile::~AdminTokenFile() { watcher_.Stop(); }

void AdminTokenFile::StartWatching() {
  spdlog::info("admin token file {}: {} token(s) accepted; checked for "
               "changes every {}",
               options_.path, tokens_.size(),
               absl::FormatDuration(options_.interval));
  watcher_.Start(initial_contents_);
}

void AdminTokenFile::PollOnce() { watcher_.PollOnce(); }

AdminTokenFile::Stats AdminTokenFile::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void AdminTokenFile::WriteStats(base::StatsWriter& out) const {
  const Stats s = stats();
  static constexpr base::MetricDef kAdminTokenReloads = base::CounterDef(
      "sluice_admin_token_reloads_total", {"result"},
      "Changes of the admin token file (--admin-token-file) by result: ok "
      "(the new token set is in force) or error (unreadable, empty or "
      "invalid; the last good set stays in force and the log says why). "
      "Only with --admin-token-file.");
  out.WriteBy(kAdminTokenReloads, {{"ok", s.ok}, {"error", s.error}});
}

void AdminTokenFile::OnChange(const std::string& contents) {
  absl::StatusOr<std::vector<std::string>> tokens =
      wire::ParseAdminTokens(contents);
  if (!tokens.ok()) {
    OnError(std::string(tokens.status().message()));
    return;
  }
  const size_t added = tokens_.CountNew(*tokens);
  const size_t before = tokens_.size();
  const size_t now = tokens->size();
  // Every token now in force is either new or was there before.
  const size_t removed = before - (now - added);
  tokens_.Replace(*std::move(tokens));
  {
    absl::MutexLock lock(&mu_);
    ++stats_.ok;
  }
  spdlog::info("admin token file {} reloaded: {} token(s) accepted ({} added, "
               "{} removed)",
               options_.path, now, added, removed);
}

void AdminTokenFile::OnError(const std::string& error) {
  {
    absl::MutexLock lock(&mu_);
    ++stats_.error;
  }
  spdlog::error("admin token file {}: {}; still accepting the last good set "
                "of {} token(s)",
                options_.path, error, tokens_.size());
}

}  // namespace sluice::rpc
