// SPDX-License-Identifier: Apache-2.0
#include "tools/sluice-bench/workload.h"

#include <algorithm>
#include <cstddef>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace sluice::bench {
namespace {

// An index drawn from a cumulative distribution that ends at 1.
int Draw(const std::vector<double>& cdf, std::mt19937_64& rng) {
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  const auto it = std::upper_bound(cdf.begin(), cdf.end(), u);
  return static_cast<int>(std::min<ptrdiff_t>(
      it - cdf.begin(), static_cast<ptrdiff_t>(cdf.size()) - 1));
}

std::vector<double> Cumulative(const std::vector<double>& weights) {
  double total = 0;
  for (double w : weights) total += w;
  std::vector<double> cdf;
  double running = 0;
  for (double w : weights) {
    running += w;
    cdf.push_back(running / total);
  }
  return cdf;
}

}  // namespace

absl::StatusOr<std::vector<WeightedName>> ParseWeightedList(
    absl::string_view text) {
  std::vector<WeightedName> list;
  std::set<std::string> seen;
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    const std::vector<absl::string_view> parts =
        absl::StrSplit(entry, absl::MaxSplits(':', 1));
    WeightedName item;
    item.name = std::string(parts[0]);
    if (item.name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("entry \"", entry, "\" has no name"));
    }
    if (parts.size() == 2 &&
        (!absl::SimpleAtoi(parts[1], &item.weight) || item.weight == 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "entry \"", entry, "\": the weight must be a whole number >= 1"));
    }
    if (!seen.insert(item.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", item.name, "\" is given twice"));
    }
    list.push_back(std::move(item));
  }
  return list;
}

Workload::Workload(const WorkloadOptions& options)
    : failure_rate_(options.failure_rate) {
  std::vector<double> weights;
  for (const WeightedName& d : options.dependencies) {
    dependencies_.push_back(d.name);
    weights.push_back(d.weight);
  }
  dependency_cdf_ = Cumulative(weights);
  for (int k = 0; k < options.keys; ++k) keys_.push_back(absl::StrCat("k", k));
  if (options.key_distribution == KeyDistribution::kZipf && options.keys > 0) {
    std::vector<double> key_weights;
    for (int k = 0; k < options.keys; ++k) key_weights.push_back(1.0 / (k + 1));
    key_cdf_ = Cumulative(key_weights);
  }
}

CallShape Workload::Next(std::mt19937_64& rng) const {
  CallShape call;
  call.dependency = dependencies_.size() == 1 ? 0 : Draw(dependency_cdf_, rng);
  if (!keys_.empty()) {
    call.key = key_cdf_.empty()
                   ? static_cast<int>(std::uniform_int_distribution<size_t>(
                         0, keys_.size() - 1)(rng))
                   : Draw(key_cdf_, rng);
  }
  call.failure = failure_rate_ > 0 && std::uniform_real_distribution<double>(
                                          0.0, 1.0)(rng) < failure_rate_;
  return call;
}

const std::string& Workload::key(int i) const {
  return i < 0 ? no_key_ : keys_[i];
}

}  // namespace sluice::bench
