// SPDX-License-Identifier: Apache-2.0
#include "server/core/latency_baseline.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sluice::core {
namespace {

// A standard deviation below this share of the mean counts as this share.
constexpr double kMinRelativeStddev = 0.05;

std::string Millis(double us) { return absl::StrFormat("%.1fms", us / 1000); }

}  // namespace

LatencyBaseline::LatencyBaseline(const BreakerConfig& config, absl::Time now)
    : config_(&config),
      live_(config.window, config.buckets),
      period_start_(now) {
  live_.Advance(now);
}

void LatencyBaseline::MaybeLearn(absl::Time now) {
  if (now - period_start_ < config_->window) return;
  // A shift late in the period has not tripped yet (the live window needs
  // its calls); it is still no normal to learn.
  if (!period_tainted_ && ready() && LiveDeparts(now, nullptr)) {
    period_tainted_ = true;
  }
  if (!period_tainted_ && period_.calls > 0 &&
      period_.calls >= static_cast<int64_t>(config_->minimum_calls)) {
    const double success =
        static_cast<double>(period_.successes) / period_.calls;
    // A period without a successful call has no latency to learn; its
    // success rate (0) still counts.
    const bool has_latency = period_.successes > 0;
    const double mean_us =
        has_latency ? period_.latency_us / period_.successes : 0;
    if (learned_.windows == 0) {
      learned_.mean_us = mean_us;
      learned_.var_us2 = 0;
      learned_.success = success;
    } else {
      const double alpha = 2.0 / (rule().history_windows + 1.0);
      if (has_latency) {
        // Exponentially weighted mean and variance (West's incremental
        // form): the variance is that of the windows' means around it.
        const double diff = mean_us - learned_.mean_us;
        const double incr = alpha * diff;
        learned_.mean_us += incr;
        learned_.var_us2 = (1 - alpha) * (learned_.var_us2 + diff * incr);
      }
      learned_.success += alpha * (success - learned_.success);
    }
    ++learned_.windows;
  }
  period_ = Counts{};
  period_start_ = now;
  period_tainted_ = false;
}

void LatencyBaseline::Record(Outcome outcome, absl::Duration latency,
                             absl::Time now) {
  if (outcome == Outcome::kCancelled) return;
  MaybeLearn(now);
  Counts one;
  one.calls = 1;
  if (outcome == Outcome::kSuccess) {
    one.successes = 1;
    one.latency_us = std::max(0.0, absl::ToDoubleMicroseconds(latency));
  }
  period_ += one;
  live_.Advance(now);
  live_.Add(one);
}

bool LatencyBaseline::Departs(absl::Time now, std::string* cause) {
  MaybeLearn(now);
  return LiveDeparts(now, cause);
}

bool LatencyBaseline::Import(const BaselineState& state) {
  const bool valid = std::isfinite(state.mean_us) && state.mean_us >= 0 &&
                     std::isfinite(state.var_us2) && state.var_us2 >= 0 &&
                     std::isfinite(state.success) && state.success >= 0 &&
                     state.success <= 1;
  if (!valid) return false;
  learned_ = state;
  return true;
}

bool LatencyBaseline::LiveDeparts(absl::Time now, std::string* cause) {
  if (!ready()) return false;
  live_.Advance(now);
  const Counts& live = live_.Sum();
  if (live.calls == 0 ||
      live.calls < static_cast<int64_t>(config_->minimum_calls)) {
    return false;
  }
  const LatencyBaselineConfig& r = rule();
  const auto over = [&] {
    return absl::StrCat(" over ", absl::FormatDuration(config_->window), ", ",
                        live.calls, " calls");
  };
  const bool latency_rule = r.factor > 0 || r.deviations > 0;
  if (latency_rule && live.successes > 0 && learned_.mean_us > 0) {
    const double mean = live.latency_us / live.successes;
    const double sd = std::max(std::sqrt(learned_.var_us2),
                               kMinRelativeStddev * learned_.mean_us);
    const double ratio = mean / learned_.mean_us;
    const double z = (mean - learned_.mean_us) / sd;
    const bool beyond_factor = r.factor <= 0 || ratio > r.factor;
    const bool beyond_deviations = r.deviations <= 0 || z > r.deviations;
    if (beyond_factor && beyond_deviations) {
      if (cause != nullptr) {
        *cause = absl::StrFormat(
            "mean latency %s is %.2fx the baseline %s (%+.1f sd)%s",
            Millis(mean), ratio, Millis(learned_.mean_us), z, over());
      }
      return true;
    }
  }
  if (r.success_rate_drop > 0) {
    const double success = static_cast<double>(live.successes) / live.calls;
    if (success < learned_.success - r.success_rate_drop) {
      if (cause != nullptr) {
        *cause = absl::StrFormat(
            "success rate %.0f%% is %.0f points below the baseline %.0f%%%s",
            success * 100, (learned_.success - success) * 100,
            learned_.success * 100, over());
      }
      return true;
    }
  }
  return false;
}

void LatencyBaseline::Tripped(absl::Time now) {
  period_tainted_ = true;
  live_.Clear();
}

void LatencyBaseline::Restart(absl::Time now) {
  period_ = Counts{};
  period_start_ = now;
  period_tainted_ = false;
  live_.Clear();
  live_.Advance(now);
}

BaselineStatus LatencyBaseline::Status(absl::Time now) {
  MaybeLearn(now);
  live_.Advance(now);
  BaselineStatus s;
  s.learned = learned_;
  s.ready = ready();
  s.mean = absl::Microseconds(learned_.mean_us);
  s.stddev = absl::Microseconds(std::sqrt(learned_.var_us2));
  const Counts& live = live_.Sum();
  s.live_calls = live.calls;
  if (live.successes > 0) {
    s.live_mean = absl::Microseconds(live.latency_us / live.successes);
  }
  s.live_success =
      live.calls > 0 ? static_cast<double>(live.successes) / live.calls : 1;
  return s;
}

void LatencyBaseline::Reconfigure(const BreakerConfig& config,
                                  absl::Time now) {
  config_ = &config;
  live_.Reshape(config.window, config.buckets, now);
}

}  // namespace sluice::core
