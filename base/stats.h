// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_BASE_STATS_H_
#define SLUICE_BASE_STATS_H_

#include <cstdint>
#include <initializer_list>

#include "absl/strings/string_view.h"

// How a component exports its counters: it implements StatsSource next to
// the counters it keeps, and writes each value by the metric's name. What a
// name means (its help text, its type, its label names) is declared once,
// in the exporter's list of metrics; the writer refuses a name it does not
// know, a counter written as a gauge, or labels other than the declared
// ones, so a mistake shows up in the exporter's tests instead of vanishing.

namespace sluice::base {

// One label of a series: its name as the metric list declares it, and its
// value for this series.
struct StatsLabel {
  absl::string_view name;
  absl::string_view value;
};

// Receives the values of one scrape. Implementations decide where they go
// (Prometheus families, a test's record). Used by one thread at a time.
class StatsWriter {
 public:
  using Labels = std::initializer_list<StatsLabel>;

  virtual ~StatsWriter() = default;

  // A value that only goes up while the process lives.
  virtual void Counter(absl::string_view name, Labels labels,
                       double value) = 0;
  // A value that goes up and down (a state, a count of things open now).
  virtual void Gauge(absl::string_view name, Labels labels, double value) = 0;

  void Counter(absl::string_view name, double value) {
    Counter(name, {}, value);
  }

  // One counter split by one label: a value for each of the label's values,
  // e.g. CountersBy("sluice_rls_requests_total", "code", {{"OK", ok}, ...}).
  struct LabelCount {
    absl::string_view value;
    uint64_t count;
  };
  void CountersBy(absl::string_view name, absl::string_view label,
                  std::initializer_list<LabelCount> counts) {
    for (const LabelCount& c : counts) {
      Counter(name, {{label, c.value}}, static_cast<double>(c.count));
    }
  }
  void Gauge(absl::string_view name, double value) { Gauge(name, {}, value); }
};

// A component whose counters are exported. WriteStats is called at scrape
// time, from the scraping thread, for as long as the source is registered
// with the exporter; it must be safe to call concurrently with the
// component's own work.
class StatsSource {
 public:
  virtual ~StatsSource() = default;
  virtual void WriteStats(StatsWriter& out) const = 0;
};

}  // namespace sluice::base

#endif  // SLUICE_BASE_STATS_H_
