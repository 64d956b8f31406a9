// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_STATS_RECORDER_H_
#define SLUICE_TESTS_TESTING_STATS_RECORDER_H_

#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "base/stats.h"
#include "gtest/gtest.h"
#include "server/metrics/metric_list.h"

namespace sluice::testing {

// What one StatsSource writes, for a component's test: a test fails on a
// write metric_list.h does not declare (its name, type and label names), so
// each component's test checks its metrics against the list. A test links
// sluice_metrics to use it. Not thread-safe.
class StatsRecorder final : public base::StatsWriter {
 public:
  struct Series {
    std::string name;
    std::map<std::string, std::string> labels;
    double value = 0;
  };

  // Records what `source` writes now.
  explicit StatsRecorder(const base::StatsSource& source) {
    source.WriteStats(*this);
  }

  void Counter(absl::string_view name, Labels labels, double value) override {
    Record(metrics::MetricType::kCounter, name, labels, value);
  }
  void Gauge(absl::string_view name, Labels labels, double value) override {
    Record(metrics::MetricType::kGauge, name, labels, value);
  }

  // The sum of the series of `name` whose labels include `match`.
  double Sum(absl::string_view name,
             const std::map<std::string, std::string>& match = {}) const {
    double sum = 0;
    for (const Series& s : series_) {
      if (s.name != name) continue;
      bool matches = true;
      for (const auto& [label, value] : match) {
        auto it = s.labels.find(label);
        matches = matches && it != s.labels.end() && it->second == value;
      }
      if (matches) sum += s.value;
    }
    return sum;
  }

  // The series of `name`, in the order written.
  std::vector<Series> Find(absl::string_view name) const {
    std::vector<Series> found;
    for (const Series& s : series_) {
      if (s.name == name) found.push_back(s);
    }
    return found;
  }

  const std::vector<Series>& series() const { return series_; }

 private:
  void Record(metrics::MetricType type, absl::string_view name, Labels labels,
              double value) {
    if (const char* why = metrics::RefusalOf(type, name, labels)) {
      ADD_FAILURE() << name << ": " << why;
      return;
    }
    Series s{std::string(name), {}, value};
    for (const base::StatsLabel& label : labels) {
      s.labels[std::string(label.name)] = std::string(label.value);
    }
    series_.push_back(std::move(s));
  }

  std::vector<Series> series_;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_STATS_RECORDER_H_
