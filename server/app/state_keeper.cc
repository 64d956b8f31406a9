// SPDX-License-Identifier: Apache-2.0
#include "server/app/state_keeper.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "spdlog/spdlog.h"

namespace sluice::app {
namespace {

// A failing write is logged at most this often.
constexpr absl::Duration kLogEvery = absl::Minutes(1);

// The first few of `names`, quoted, for a summary line: a file may name
// hundreds of thousands of policies, and the log gets one line.
std::string SomeNames(const std::vector<std::string>& names) {
  constexpr size_t kShown = 5;
  constexpr size_t kMaxShownBytes = 64;
  std::string out;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ", ", "\"",
                    absl::CHexEscape(absl::string_view(names[i]).substr(
                        0, kMaxShownBytes)),
                    names[i].size() > kMaxShownBytes ? "...\"" : "\"");
  }
  if (names.size() > kShown) {
    absl::StrAppend(&out, " and ", names.size() - kShown, " more");
  }
  return out;
}

// One warning per category of values the file held that no policy could
// have learned.
void LogRejects(const std::string& path, const StateFileLimits& limits,
                const StateFileRejects& r) {
  const auto warn = [&](size_t count, const char* what) {
    if (count == 0) return;
    spdlog::warn("state file {}: {} {}; not taken", path, count, what);
  };
  warn(r.dependencies_over_cap,
       absl::StrCat("dependencies beyond the first ", limits.max_dependencies)
           .c_str());
  warn(r.long_names, "dependencies with a name over 256 bytes");
  warn(r.keys_over_cap,
       absl::StrCat("keys beyond the first ", limits.max_keys_per_dependency,
                    " of a dependency")
           .c_str());
  warn(r.long_keys, "keys over 1024 bytes (the request limit)");
  warn(r.bad_limits,
       "adaptive limits out of range (a steady limit of 0 or over "
       "10000000, or a baseline outside [1us, 24h])");
  warn(r.bad_baselines,
       "learned baselines out of range (a mean outside {0} and [1us, 24h], "
       "a variance not in [0, (24h)^2], a success rate outside [0, 1])");
  warn(r.bad_breakers,
       "OPEN breakers out of range (a cause over 1024 bytes or not UTF-8, "
       "an open duration outside (0, 30 days], or an end after the file's "
       "time plus that duration)");
}

}  // namespace

StateFileKeeper::StateFileKeeper(Options options, core::Engine* engine,
                                 core::Clock* clock)
    : options_(std::move(options)), engine_(engine), clock_(clock) {}

StateFileKeeper::~StateFileKeeper() {
  if (task_ != nullptr) task_->Stop();
}

StateFileKeeper::Restored StateFileKeeper::Restore() {
  Restored restored;
  StateFileLimits limits;
  limits.max_keys_per_dependency = options_.max_keys;
  absl::StatusOr<SavedWarmState> saved = ReadStateFile(options_.path, limits);
  if (!saved.ok()) {
    restored.status = saved.status();
    if (absl::IsNotFound(saved.status())) {
      spdlog::info(
          "state file {} does not exist yet; starting cold (it is written "
          "every {} and at shutdown)",
          options_.path, absl::FormatDuration(options_.interval));
    } else {
      spdlog::warn("state file {} ignored, starting cold: {}", options_.path,
                   std::string(saved.status().message()));
    }
    return restored;
  }
  restored.written_at = saved->written_at;
  restored.import = engine_->ImportWarmState(saved->dependencies);
  const core::WarmImport& import = restored.import;
  spdlog::info(
      "state file {} (written {}, {} ago): took the warm state of {} "
      "{} ({} keys); skipped {}",
      options_.path, absl::FormatTime(saved->written_at),
      absl::FormatDuration(absl::Trunc(clock_->Now() - saved->written_at,
                                       absl::Seconds(1))),
      import.dependencies,
      import.dependencies == 1 ? "dependency" : "dependencies", import.keys,
      import.unknown.size() + import.changed.size());
  LogRejects(options_.path, limits, saved->rejected);
  if (!import.unknown.empty()) {
    spdlog::warn(
        "state file {}: saved state of {} {} not taken: no policy of that "
        "name now ({})",
        options_.path, import.unknown.size(),
        import.unknown.size() == 1 ? "dependency" : "dependencies",
        SomeNames(import.unknown));
  }
  if (import.invalid_keys > 0) {
    spdlog::warn(
        "state file {}: {} saved {} held values no policy could have "
        "learned (NaN, negative, or a steady limit of 0); those values were "
        "not taken",
        options_.path, import.invalid_keys,
        import.invalid_keys == 1 ? "key" : "keys");
  }
  if (!import.changed.empty()) {
    spdlog::warn(
        "state file {}: saved state of {} {} not taken: the policy changed "
        "since it was saved (another digest) ({})",
        options_.path, import.changed.size(),
        import.changed.size() == 1 ? "dependency" : "dependencies",
        SomeNames(import.changed));
  }
  return restored;
}

void StateFileKeeper::Start() {
  if (task_ != nullptr) return;
  base::PeriodicOptions periodic;
  periodic.first_run_in = options_.interval;
  task_ = options_.env->StartPeriodic(periodic, [this] {
    SaveNow().IgnoreError();  // logged and counted inside
    return options_.interval;
  });
}

void StateFileKeeper::Stop() {
  if (task_ != nullptr) task_->Stop();
  if (SaveNow().ok()) {
    spdlog::info("state file {} written at shutdown", options_.path);
  }
}

absl::Status StateFileKeeper::SaveNow() {
  absl::MutexLock save_lock(&save_mu_);
  SavedWarmState state;
  state.written_at = clock_->Now();
  state.dependencies = engine_->ExportWarmState(options_.max_keys);
  absl::StatusOr<std::string> bytes = EncodeStateFile(state);
  absl::Status status = bytes.status();
  if (status.ok()) status = base::WriteFileAtomically(options_.path, *bytes);
  RecordWrite(status, state.written_at);
  return status;
}

void StateFileKeeper::RecordWrite(const absl::Status& status, absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (status.ok()) {
    if (failing_ > 0) {
      spdlog::info("state file {} written again after {} failed writes",
                   options_.path, failing_);
    }
    failing_ = 0;
    ++stats_.writes;
    stats_.last_write = now;
    return;
  }
  ++failing_;
  ++stats_.failures;
  stats_.last_error = std::string(status.message());
  if (failing_ == 1 || now - last_logged_ >= kLogEvery) {
    last_logged_ = now;
    spdlog::error(
        "cannot write state file {} ({} failed writes in a row; the last "
        "good one at {}): {}",
        options_.path, failing_,
        stats_.last_write == absl::InfinitePast()
            ? std::string("never")
            : absl::FormatTime(stats_.last_write),
        std::string(status.message()));
  }
}

StateFileKeeper::Stats StateFileKeeper::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void StateFileKeeper::WriteStats(base::StatsWriter& out) const {
  const Stats s = stats();
  static constexpr base::MetricDef kStateFileWrites = base::CounterDef(
      "sluice_state_file_writes_total", {"result"},
      "Writes of the warm state file (--state-file) by result: ok or "
      "error (the log says why, at most once a minute). Only with "
      "--state-file.");
  out.WriteBy(kStateFileWrites, {{"ok", s.writes}, {"error", s.failures}});
  static constexpr base::MetricDef kStateFileLastWriteTimestampSeconds =
      base::GaugeDef(
          "sluice_state_file_last_write_timestamp_seconds", {},
          "Unix time of the last good write of the state file; 0 before the "
          "first. Only with --state-file.");
  out.Write(kStateFileLastWriteTimestampSeconds,
            s.last_write == absl::InfinitePast()
                ? 0
                : absl::ToDoubleSeconds(s.last_write - absl::UnixEpoch()));
}

}  // namespace sluice::app
