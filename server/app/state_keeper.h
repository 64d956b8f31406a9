// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_APP_STATE_KEEPER_H_
#define SLUICE_SERVER_APP_STATE_KEEPER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/env.h"
#include "base/stats.h"
#include "server/app/state_file.h"
#include "server/core/clock.h"
#include "server/core/engine.h"
#include "server/core/warm_state.h"

namespace sluice::app {

// Keeps one engine's warm state in one file: Restore reads it back at start,
// a periodic task of its Env writes it every `interval`, and Stop writes it
// once more. Nothing
// it does is on the request path, and nothing it meets in the file is fatal:
// a missing file is logged as info, anything else wrong with it as a warning
// naming the problem, and the engine starts cold. Write failures are logged
// (the first at once, then at most once a minute while they last) and
// counted in stats(). Restore, Start and Stop are called from one thread
// (the mode's owner); SaveNow and stats are safe from any thread.
class StateFileKeeper final : public base::StatsSource {
 public:
  struct Options {
    // The state file; its directory must exist and be writable.
    std::string path;
    // How often the state is written while running.
    absl::Duration interval = absl::Seconds(10);
    // At most this many keys of each per_key policy are kept.
    size_t max_keys = 10000;
    // Where the periodic writes run; must outlive the keeper. Tests give a
    // manual one.
    base::Env* env = base::Env::Default();
  };

  struct Stats {
    uint64_t writes = 0;    // good writes
    uint64_t failures = 0;  // failed writes
    absl::Time last_write = absl::InfinitePast();  // on the engine's clock
    std::string last_error;  // of the last failed write
  };

  // What Restore found and did.
  struct Restored {
    // OK when the file was read; otherwise why it was not (NOT_FOUND: no
    // file yet).
    absl::Status status;
    absl::Time written_at = absl::InfinitePast();
    core::WarmImport import;
  };

  // `engine` and `clock` (the engine's) must outlive the keeper.
  StateFileKeeper(Options options, core::Engine* engine, core::Clock* clock);
  ~StateFileKeeper();  // Stops the writes without a last one.
  StateFileKeeper(const StateFileKeeper&) = delete;
  StateFileKeeper& operator=(const StateFileKeeper&) = delete;

  // Reads the file and hands its state to the engine, whose policies must be
  // installed already. Logs what was taken and each policy skipped.
  Restored Restore();
  // Starts writing every interval, the first an interval from now.
  void Start();
  // Stops the periodic writes, then writes the state once more (call it
  // after the RPCs have drained, so the file has their last outcomes).
  void Stop() ABSL_LOCKS_EXCLUDED(save_mu_, mu_);
  // Writes the state now.
  absl::Status SaveNow() ABSL_LOCKS_EXCLUDED(save_mu_, mu_);

  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);
  // stats() as the sluice_state_file_* metrics.
  void WriteStats(base::StatsWriter& out) const override
      ABSL_LOCKS_EXCLUDED(mu_);
  const Options& options() const { return options_; }

 private:
  void RecordWrite(const absl::Status& status, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  core::Engine* const engine_;
  core::Clock* const clock_;

  // Serializes writes (the periodic task's and Stop's).
  absl::Mutex save_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  mutable absl::Mutex mu_;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  // Failed writes in a row, and when one was last logged.
  uint64_t failing_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_logged_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();

  std::unique_ptr<base::PeriodicTask> task_;
};

}  // namespace sluice::app

#endif  // SLUICE_SERVER_APP_STATE_KEEPER_H_
