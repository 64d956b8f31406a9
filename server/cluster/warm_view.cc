// SPDX-License-Identifier: Apache-2.0
#include "server/cluster/warm_view.h"

#include <algorithm>
#include <cmath>

namespace sluice::cluster {
namespace {

bool LearnedLimit(const ReplicaWarm& w) {
  return w.adaptive.steady_limit > 0 &&
         w.adaptive.baseline > absl::ZeroDuration();
}

bool LearnedBaseline(const ReplicaWarm& w) { return w.baseline.windows > 0; }

std::optional<core::AdaptiveLimitState> MeanLimit(
    const std::vector<const ReplicaWarm*>& from) {
  double sum = 0;
  int n = 0;
  core::AdaptiveLimitState out;
  for (const ReplicaWarm* w : from) {
    if (!LearnedLimit(*w)) continue;
    sum += w->adaptive.steady_limit;
    ++n;
    out.baseline = out.baseline == absl::ZeroDuration()
                       ? w->adaptive.baseline
                       : std::min(out.baseline, w->adaptive.baseline);
  }
  if (n == 0) return std::nullopt;
  out.steady_limit = static_cast<uint32_t>(std::lround(sum / n));
  return out;
}

std::optional<core::BaselineState> MostLearned(
    const std::vector<const ReplicaWarm*>& from) {
  const ReplicaWarm* best = nullptr;
  for (const ReplicaWarm* w : from) {
    if (!LearnedBaseline(*w)) continue;
    if (best == nullptr || w->baseline.windows > best->baseline.windows) {
      best = w;
    }
  }
  if (best == nullptr) return std::nullopt;
  return best->baseline;
}

}  // namespace

WarmView CombineWarm(const std::vector<ReplicaWarm>& entries, uint64_t digest,
                     const std::string& me,
                     const absl::flat_hash_set<std::string>& live) {
  std::vector<const ReplicaWarm*> others, departed;
  for (const ReplicaWarm& w : entries) {
    if (w.digest != digest) continue;
    if (w.replica != me && live.contains(w.replica)) {
      others.push_back(&w);
    } else {
      departed.push_back(&w);
    }
  }
  WarmView view;
  view.adaptive = MeanLimit(others);
  if (!view.adaptive) view.adaptive = MeanLimit(departed);
  view.baseline = MostLearned(others);
  if (!view.baseline) view.baseline = MostLearned(departed);
  return view;
}

}  // namespace sluice::cluster
