#include "server/app/state_keeper.h"

#include <utility>

#include "spdlog/spdlog.h"

namespace sluice::app {
namespace {

// A failing write is logged at most this often.
constexpr absl::Duration kLogEvery = absl::Minutes(1);

}  // namespace

StateFileKeeper::StateFileKeeper(Options options, core::Engine* engine,
                                 core::Clock* clock)
    : options_(std::move(options)), engine_(engine), clock_(clock) {}

StateFileKeeper::~StateFileKeeper() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

StateFileKeeper::Restored StateFileKeeper::Restore() {
  Restored restored;
  absl::StatusOr<SavedWarmState> saved = ReadStateFile(options_.path);
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
  for (const std::string& name : import.unknown) {
    spdlog::warn(
        "state file {}: no policy \"{}\" now; its saved state is not taken",
        options_.path, name);
  }
  if (import.invalid_keys > 0) {
    spdlog::warn(
        "state file {}: {} saved {} held values no policy could have "
        "learned (NaN, negative, or a steady limit of 0); those values were "
        "not taken",
        options_.path, import.invalid_keys,
        import.invalid_keys == 1 ? "key" : "keys");
  }
  for (const std::string& name : import.changed) {
    spdlog::warn(
        "state file {}: policy \"{}\" changed since its state was saved "
        "(another digest); its saved state is not taken",
        options_.path, name);
  }
  return restored;
}

void StateFileKeeper::Start() {
  absl::MutexLock lock(&mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { Run(); });
}

void StateFileKeeper::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  if (SaveNow().ok()) {
    spdlog::info("state file {} written at shutdown", options_.path);
  }
}

void StateFileKeeper::Run() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                               options_.interval)) {
        return;
      }
    }
    SaveNow().IgnoreError();  // logged and counted inside
  }
}

absl::Status StateFileKeeper::SaveNow() {
  absl::MutexLock save_lock(&save_mu_);
  SavedWarmState state;
  state.written_at = clock_->Now();
  state.dependencies = engine_->ExportWarmState(options_.max_keys);
  absl::StatusOr<std::string> bytes = EncodeStateFile(state);
  absl::Status status = bytes.status();
  if (status.ok()) status = WriteFileAtomically(options_.path, *bytes);
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

}  // namespace sluice::app
