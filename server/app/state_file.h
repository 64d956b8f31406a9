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

// What a state file holds.
struct SavedWarmState {
  // On the engine's clock, which is the wall clock in a server.
  absl::Time written_at = absl::InfinitePast();
  std::vector<core::DependencyWarmState> dependencies;
};

// The state format version this sluiced writes and reads.
inline constexpr int kStateFileVersion = 1;

// CRC-32C (Castagnoli), as the header carries it.
uint32_t Crc32c(absl::string_view data);

// The whole file for `state`. INTERNAL only if the JSON printer fails.
absl::StatusOr<std::string> EncodeStateFile(const SavedWarmState& state);
// DATA_LOSS naming the problem ("not a sluice state file", "format version
// 2; this sluiced reads 1", "truncated: ...", "checksum mismatch ...", "bad
// JSON ...") when `bytes` is not a whole, intact state file of this version.
absl::StatusOr<SavedWarmState> DecodeStateFile(absl::string_view bytes);

// NOT_FOUND when `path` does not exist; PERMISSION_DENIED or UNAVAILABLE
// when it cannot be read; DATA_LOSS as DecodeStateFile.
absl::StatusOr<SavedWarmState> ReadStateFile(const std::string& path);
// Writes `bytes` to PATH.tmp in the same directory, fsyncs it, renames it
// over `path` and fsyncs the directory: a reader (or a crash) sees the old
// file or the new one, never a part. UNAVAILABLE naming the step that
// failed.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view bytes);

}  // namespace sluice::app

#endif  // SLUICE_SERVER_APP_STATE_FILE_H_
