// SPDX-License-Identifier: Apache-2.0
// libFuzzer target of the --state-file reader: any bytes go through
// app::DecodeStateFile (header, length, CRC-32C, JSON, then the bounds of
// every value) without a crash, a leak or undefined behaviour, and what it
// accepts is within the bounds it promises. Each input is tried twice: as
// a whole file, and as the body of a file whose header is made right for
// it, since a random mutation almost never keeps the CRC-32C true and the
// JSON and the bounds would otherwise go unexplored. Link:
// sluice_state_file.

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/app/state_file.h"

namespace {

// A bound DecodeStateFile promises, broken: abort, so libFuzzer reports it.
void Check(bool ok) {
  if (!ok) std::abort();
}

void DecodeAndCheck(absl::string_view bytes) {
  sluice::app::StateFileLimits limits;
  // Small caps, so that inputs near them are cheap to reach.
  limits.max_dependencies = 64;
  limits.max_keys_per_dependency = 64;
  const absl::StatusOr<sluice::app::SavedWarmState> state =
      sluice::app::DecodeStateFile(bytes, limits);
  if (!state.ok()) return;
  Check(state->dependencies.size() <= limits.max_dependencies);
  for (const sluice::core::DependencyWarmState& dep : state->dependencies) {
    Check(!dep.name.empty() && dep.name.size() <= 256);
    Check(dep.keys.size() <= limits.max_keys_per_dependency);
    for (const sluice::core::KeyWarmState& key : dep.keys) {
      Check(key.key.size() <= 1024);
      if (key.limit) {
        Check(key.limit->steady_limit >= 1 &&
              key.limit->steady_limit <= sluice::app::kMaxStateSteadyLimit);
      }
      if (key.breaker) {
        Check(key.breaker->cause.size() <= sluice::app::kMaxStateCauseBytes);
        Check(key.breaker->open_duration > absl::ZeroDuration() &&
              key.breaker->open_duration <=
                  sluice::app::kMaxStateOpenDuration);
      }
      if (key.baseline) {
        Check(key.baseline->success >= 0 && key.baseline->success <= 1);
        Check(key.baseline->var_us2 >= 0);
      }
    }
  }
  // Whatever was taken encodes again.
  Check(sluice::app::EncodeStateFile(*state).ok());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  DecodeAndCheck(bytes);
  DecodeAndCheck(absl::StrCat(
      "sluice-state ", sluice::app::kStateFileVersion, " ", size, " ",
      absl::Hex(sluice::app::Crc32c(bytes), absl::kZeroPad8), "\n", bytes));
  return 0;
}
