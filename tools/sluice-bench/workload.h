// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TOOLS_SLUICE_BENCH_WORKLOAD_H_
#define SLUICE_TOOLS_SLUICE_BENCH_WORKLOAD_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice::bench {

// One entry of a weighted list such as "inventory:3,search:1".
struct WeightedName {
  std::string name;
  uint32_t weight = 1;
};

// "a,b" (weight 1 each) or "a:3,b:1". INVALID_ARGUMENT naming the entry for
// an empty name, a weight that is not a whole number >= 1, or a name given
// twice.
absl::StatusOr<std::vector<WeightedName>> ParseWeightedList(
    absl::string_view text);

enum class KeyDistribution {
  kUniform,
  // Zipf with exponent 1: key k is drawn in proportion to 1 / (k + 1), so
  // k0 is the hot key.
  kZipf,
};

// What the calls of a run look like.
struct WorkloadOptions {
  std::vector<WeightedName> dependencies = {{"bench", 1}};
  // Distinct keys per dependency, named k0..k{keys-1}; 0 sends no key.
  int keys = 0;
  KeyDistribution key_distribution = KeyDistribution::kUniform;
  // The share of reports that say FAILURE; the others say SUCCESS.
  double failure_rate = 0;
};

// One call of the workload, as indexes into Workload's names.
struct CallShape {
  int dependency = 0;
  int key = -1;  // -1: no key
  bool failure = false;
};

// Draws calls from the mix. Immutable after construction; safe for
// concurrent use as long as each thread brings its own generator.
class Workload {
 public:
  explicit Workload(const WorkloadOptions& options);

  CallShape Next(std::mt19937_64& rng) const;

  const std::string& dependency(int i) const { return dependencies_[i]; }
  // "" for -1.
  const std::string& key(int i) const;

 private:
  std::vector<std::string> dependencies_;
  std::vector<double> dependency_cdf_;  // cumulative weight share
  std::vector<std::string> keys_;
  std::vector<double> key_cdf_;  // empty for uniform keys
  std::string no_key_;
  double failure_rate_;
};

}  // namespace sluice::bench

#endif  // SLUICE_TOOLS_SLUICE_BENCH_WORKLOAD_H_
