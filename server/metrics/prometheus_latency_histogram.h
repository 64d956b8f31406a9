// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_METRICS_PROMETHEUS_LATENCY_HISTOGRAM_H_
#define SLUICE_SERVER_METRICS_PROMETHEUS_LATENCY_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "prometheus/client_metric.h"

namespace sluice::metrics {

// A fixed-bucket latency histogram for the request path. Observe is a few
// relaxed atomic adds on one of several cache-line-aligned shards picked per
// thread: no lock and no allocation. prometheus::Histogram (1.0.1) takes a
// std::mutex in Observe, which would be one global lock per Acquire.
// Safe for concurrent use.
class PrometheusLatencyHistogram {
 public:
  // Upper bounds in seconds, from 25us to 1s.
  static constexpr std::array<double, 14> kBounds = {
      0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
      0.005,    0.01,    0.025,  0.05,    0.1,    0.25,  1.0};

  void Observe(absl::Duration d);

  // Cumulative buckets (+Inf last), count and sum, as Prometheus wants.
  prometheus::ClientMetric Collect() const;

  uint64_t count() const;

 private:
  static constexpr int kShards = 16;
  struct alignas(64) Shard {
    std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets{};
    std::atomic<int64_t> sum_nanos{0};
  };

  std::array<Shard, kShards> shards_;
};

}  // namespace sluice::metrics

#endif  // SLUICE_SERVER_METRICS_PROMETHEUS_LATENCY_HISTOGRAM_H_
