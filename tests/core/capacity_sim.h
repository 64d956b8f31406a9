// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_CORE_CAPACITY_SIM_H_
#define SLUICE_TESTS_CORE_CAPACITY_SIM_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/core/engine.h"
#include "tests/testing/fake_clock.h"

namespace sluice::core {

// A dependency with a fixed number of workers and an unbounded FIFO queue,
// driven on simulated time through the engine: calls arrive open loop (at
// a rate that does not care about answers, as users do), ask the engine,
// and those let through queue for a worker, hold it for the service time
// and report SUCCESS with their whole latency. Its capacity is workers /
// service time; beyond it the queue, and so the latency, grows as Little's
// law says. Deterministic: the service-time jitter comes from a seeded
// generator.
class CapacitySim {
 public:
  struct Second {
    double offered = 0;    // calls that arrived
    double served = 0;     // completed (goodput)
    double refused = 0;    // refused by the engine
    double capacity = 0;   // workers / service time, at the end
    uint32_t limit = 0;    // the adaptive limit at the end (0: none)
    absl::Duration mean_latency = absl::ZeroDuration();
    absl::Duration max_latency = absl::ZeroDuration();
  };

  CapacitySim(testing::FakeClock* clock, Engine* engine, std::string dep,
              int workers, absl::Duration service, double jitter = 0.1)
      : clock_(clock),
        engine_(engine),
        dep_(std::move(dep)),
        workers_(workers),
        service_(service),
        jitter_(jitter) {}

  void set_workers(int workers) { workers_ = workers; }
  double capacity() const {
    return workers_ / absl::ToDoubleSeconds(service_);
  }

  // Runs `seconds` whole seconds at `rate(t)` calls per second (t: seconds
  // since this run started), in 1 ms steps, appending one row per second.
  void Run(int seconds, const std::function<double(double)>& rate) {
    const absl::Duration step = absl::Milliseconds(1);
    for (int s = 0; s < seconds; ++s) {
      Second row;
      double latency_sum_ms = 0;
      for (int ms = 0; ms < 1000; ++ms) {
        const absl::Time now = clock_->Now();
        Complete(now, &row, &latency_sum_ms);
        arrivals_ += rate(s + ms / 1000.0) / 1000.0;
        while (arrivals_ >= 1) {
          arrivals_ -= 1;
          ++row.offered;
          absl::StatusOr<Decision> d = engine_->Acquire(dep_, "", 1);
          if (!d.ok() || d->verdict != Verdict::kAllow) {
            ++row.refused;
            continue;
          }
          queue_.push_back(Call{now, d->permit_id, absl::InfinitePast()});
        }
        Start(now);
        if (ms % 100 == 0) engine_->Sweep();
        clock_->Advance(step);
      }
      row.capacity = capacity();
      if (row.served > 0) {
        row.mean_latency = absl::Milliseconds(latency_sum_ms / row.served);
      }
      absl::StatusOr<LivePolicyStatus> st = engine_->Inspect(dep_);
      if (st.ok() && st->gates && st->gates->adaptive_limit) {
        row.limit = st->gates->adaptive_limit->limit;
      }
      seconds_.push_back(row);
    }
  }

  const std::vector<Second>& seconds() const { return seconds_; }

 private:
  struct Call {
    absl::Time arrived;
    PermitId permit;
    absl::Time done;  // InfinitePast while queued
  };

  void Complete(absl::Time now, Second* row, double* latency_sum_ms) {
    for (auto it = busy_.begin(); it != busy_.end();) {
      if (it->done > now) {
        ++it;
        continue;
      }
      const absl::Duration latency = now - it->arrived;
      engine_->Report(dep_, "", it->permit, Outcome::kSuccess, latency);
      ++row->served;
      *latency_sum_ms += absl::ToDoubleMilliseconds(latency);
      row->max_latency = std::max(row->max_latency, latency);
      it = busy_.erase(it);
    }
  }

  void Start(absl::Time now) {
    while (static_cast<int>(busy_.size()) < workers_ && !queue_.empty()) {
      Call call = queue_.front();
      queue_.pop_front();
      const double factor =
          1 + jitter_ * std::uniform_real_distribution<double>(-1, 1)(rng_);
      call.done = now + service_ * factor;
      busy_.push_back(call);
    }
  }

  testing::FakeClock* const clock_;
  Engine* const engine_;
  const std::string dep_;
  int workers_;
  const absl::Duration service_;
  const double jitter_;
  std::mt19937_64 rng_{42};
  double arrivals_ = 0;
  std::deque<Call> queue_;
  std::vector<Call> busy_;
  std::vector<Second> seconds_;
};

}  // namespace sluice::core

#endif  // SLUICE_TESTS_CORE_CAPACITY_SIM_H_
