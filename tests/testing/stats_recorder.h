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
// write the exporter would refuse (metrics::RefusalOf: a malformed
// definition, label values that do not match its labels, a name of the
// engine's list) or on one name written under two definitions, so each
// component's test checks its metric definitions. A test links
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

  void Write(const base::MetricDef& def, Values labels, double value) override {
    const std::string name = def.name == nullptr ? "" : def.name;
    if (const char* why = metrics::RefusalOf(def, labels.size())) {
      ADD_FAILURE() << name << ": " << why;
      return;
    }
    auto [it, added] = defs_.try_emplace(name, def);
    if (!added && !base::SameMetricDef(it->second, def)) {
      ADD_FAILURE() << name << ": defined twice, differently";
      return;
    }
    Series s{name, {}, value};
    size_t i = 0;
    for (absl::string_view label : labels) {
      s.labels[def.labels[i++]] = std::string(label);
    }
    series_.push_back(std::move(s));
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
  std::map<std::string, base::MetricDef> defs_;
  std::vector<Series> series_;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_STATS_RECORDER_H_
