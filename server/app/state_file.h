// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_APP_STATE_FILE_H_
#define SLUICE_SERVER_APP_STATE_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/core/warm_state.h"

// The --state-file format: the engine's warm state (adaptive limits, learned
// baselines and OPEN breakers) as a file. Pure functions and plain file
// system calls; safe for concurrent use on different paths.
//
// The file is one header line and a body:
//   sluice-state 1 <body length> <CRC-32C of the body, 8 hex digits>\n
//   <sluice.v1.WarmStateFile as proto JSON>
// The header tells a sluiced state file from any other file, its format
// version from a later one, a truncated body from a whole one and a
// corrupted byte from a good one, before the JSON is parsed at all.

namespace sluice::app {

// How much of a state file is taken back, at most.
struct StateFileLimits {
  // Dependencies (policies) with saved state.
  size_t max_dependencies = 10000;
  // Keys of one dependency (StateFileKeeper passes its max_keys).
  size_t max_keys_per_dependency = 10000;
};

// What DecodeStateFile dropped because no policy could have learned it, by
// category: the caller logs one line per category, never one per entry.
struct StateFileRejects {
  size_t dependencies_over_cap = 0;  // beyond max_dependencies
  size_t long_names = 0;             // a dependency name over 256 bytes
  size_t keys_over_cap = 0;          // beyond max_keys_per_dependency
  size_t long_keys = 0;              // a key over 1,024 bytes (wire limit)
  // An adaptive limit of 0 or over 10,000,000, or a latency baseline
  // outside [1 us, 24 h].
  size_t bad_limits = 0;
  // A learned mean outside {0} and [1 us, 24 h], a variance that is not
  // finite and in [0, (24 h)^2], a success rate outside [0, 1].
  size_t bad_baselines = 0;
  // A breaker cause over 1,024 bytes or not UTF-8, an open duration outside
  // (0, 30 days], or an open_until after written_at + open_duration.
  size_t bad_breakers = 0;

  size_t total() const {
    return dependencies_over_cap + long_names + keys_over_cap + long_keys +
           bad_limits + bad_baselines + bad_breakers;
  }
};

// What a state file holds.
struct SavedWarmState {
  // On the engine's clock, which is the wall clock in a server.
  absl::Time written_at = absl::InfinitePast();
  std::vector<core::DependencyWarmState> dependencies;
  // Filled by DecodeStateFile; EncodeStateFile ignores it.
  StateFileRejects rejected;
};

// The bounds of one saved value (the same numbers as StateFileRejects).
inline constexpr size_t kMaxStateCauseBytes = 1024;
inline constexpr uint32_t kMaxStateSteadyLimit = 10'000'000;
inline constexpr absl::Duration kMinStateLatency = absl::Microseconds(1);
inline constexpr absl::Duration kMaxStateLatency = absl::Hours(24);
inline constexpr absl::Duration kMaxStateOpenDuration = absl::Hours(24 * 30);

// The state format version this sluiced writes and reads.
inline constexpr int kStateFileVersion = 1;

// CRC-32C (Castagnoli), as the header carries it.
uint32_t Crc32c(absl::string_view data);

// The whole file for `state`. INTERNAL only if the JSON printer fails.
absl::StatusOr<std::string> EncodeStateFile(const SavedWarmState& state);
// Parses a whole file from memory (no file system; the fuzz target's
// entry). DATA_LOSS naming the problem ("not a sluice state file", "format
// version 2; this sluiced reads 1", "truncated: ...", "checksum mismatch
// ...", "bad JSON ...") when `bytes` is not a whole, intact state file of
// this version. An intact file's values that no policy could have learned
// are dropped one by one and counted in `rejected`; the rest is kept.
absl::StatusOr<SavedWarmState> DecodeStateFile(
    absl::string_view bytes, const StateFileLimits& limits = {});

// Reads `path` with base::ReadRegularFile (a FIFO or a directory is
// refused at once, never waited on). NOT_FOUND when `path` does not exist;
// PERMISSION_DENIED or UNAVAILABLE when it cannot be read; DATA_LOSS for a
// FIFO, a directory or another non-regular file, a file over 256 MiB, and
// as DecodeStateFile. The file is written with base::WriteFileAtomically.
absl::StatusOr<SavedWarmState> ReadStateFile(
    const std::string& path, const StateFileLimits& limits = {});

}  // namespace sluice::app

#endif  // SLUICE_SERVER_APP_STATE_FILE_H_
