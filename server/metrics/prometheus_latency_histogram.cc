// SPDX-License-Identifier: Apache-2.0
#include "server/metrics/prometheus_latency_histogram.h"

#include <algorithm>
#include <functional>
#include <thread>

namespace sluice::metrics {
namespace {

int ShardIndex(int shards) {
  thread_local const int index = static_cast<int>(
      std::hash<std::thread::id>()(std::this_thread::get_id()) % shards);
  return index;
}

}  // namespace

void PrometheusLatencyHistogram::Observe(absl::Duration d) {
  const double seconds = absl::ToDoubleSeconds(d);
  const size_t bucket =
      std::lower_bound(kBounds.begin(), kBounds.end(), seconds) -
      kBounds.begin();
  Shard& shard = shards_[ShardIndex(kShards)];
  shard.buckets[bucket].fetch_add(1, std::memory_order_relaxed);
  shard.sum_nanos.fetch_add(absl::ToInt64Nanoseconds(d),
                            std::memory_order_relaxed);
}

prometheus::ClientMetric PrometheusLatencyHistogram::Collect() const {
  std::array<uint64_t, kBounds.size() + 1> counts{};
  int64_t sum_nanos = 0;
  for (const Shard& shard : shards_) {
    for (size_t i = 0; i < counts.size(); ++i) {
      counts[i] += shard.buckets[i].load(std::memory_order_relaxed);
    }
    sum_nanos += shard.sum_nanos.load(std::memory_order_relaxed);
  }
  prometheus::ClientMetric metric;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    cumulative += counts[i];
    prometheus::ClientMetric::Bucket bucket;
    bucket.cumulative_count = cumulative;
    bucket.upper_bound = i < kBounds.size()
                             ? kBounds[i]
                             : std::numeric_limits<double>::infinity();
    metric.histogram.bucket.push_back(bucket);
  }
  metric.histogram.sample_count = cumulative;
  metric.histogram.sample_sum = static_cast<double>(sum_nanos) / 1e9;
  return metric;
}

uint64_t PrometheusLatencyHistogram::count() const {
  uint64_t n = 0;
  for (const Shard& shard : shards_) {
    for (const auto& b : shard.buckets) n += b.load(std::memory_order_relaxed);
  }
  return n;
}

}  // namespace sluice::metrics
