// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_BASE_STATS_H_
#define SLUICE_BASE_STATS_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

// How a component exports its counters: it implements StatsSource next to
// the counters it keeps, and declares each metric it writes as a MetricDef
// in its WriteStats, just before the write, so that a new counter is one
// edit in the component (its field, its count, its definition and its
// write) and none anywhere else. The exporter takes what a definition says
// (help, type, label names) from the writes, and refuses a malformed
// definition, a write whose label values do not match the labels, or one
// name defined two ways (MetricDefProblem, SameMetricDef), so a mistake
// shows up in the component's tests instead of vanishing.

namespace sluice::base {

enum class MetricType { kCounter, kGauge, kHistogram };

// What a metric is. Declare it in WriteStats, just before its write (with
// CounterDef or GaugeDef below), e.g.
//   static constexpr base::MetricDef kSyncTicks = base::CounterDef(
//       "sluice_sync_ticks_total", {}, "Sync ticks attempted.");
//   out.Write(kSyncTicks, s.ticks);
// Its strings must outlive the scrape (string literals do): the exporter
// keeps the definition to compare later writes of the same name with it.
struct MetricDef {
  // sluice_[a-z0-9_]+; a counter's ends in _total, a gauge's does not.
  const char* name;
  MetricType type;
  // Label names, in the order a write gives their values; the unused ones
  // null. Never `key`: label values come from policy names and enums only,
  // so the series count is bounded by the number of policies.
  std::array<const char*, 4> labels;
  // One or two plain sentences for the operator: what is counted, and the
  // label values.
  const char* help;

  size_t label_count() const {
    size_t n = 0;
    while (n < labels.size() && labels[n] != nullptr) ++n;
    return n;
  }
};

constexpr MetricDef CounterDef(const char* name,
                               std::array<const char*, 4> labels,
                               const char* help) {
  return {name, MetricType::kCounter, labels, help};
}

constexpr MetricDef GaugeDef(const char* name,
                             std::array<const char*, 4> labels,
                             const char* help) {
  return {name, MetricType::kGauge, labels, help};
}

namespace stats_internal {

inline bool IsNameChar(char c, bool first) {
  return (c >= 'a' && c <= 'z') || c == '_' || (!first && c >= '0' && c <= '9');
}

inline bool IsName(absl::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (!IsNameChar(s[i], i == 0)) return false;
  }
  return true;
}

inline bool Same(const char* a, const char* b) {
  if (a == nullptr || b == nullptr) return a == b;
  return std::strcmp(a, b) == 0;
}

}  // namespace stats_internal

// Why `def` is not a metric this project exposes, or nullptr when it is.
inline const char* MetricDefProblem(const MetricDef& def) {
  using stats_internal::IsName;
  const absl::string_view name = def.name == nullptr ? "" : def.name;
  absl::string_view rest = name;
  if (!absl::ConsumePrefix(&rest, "sluice_") || !IsName(rest)) {
    return "its name is not sluice_ and then [a-z0-9_]";
  }
  const bool total = absl::EndsWith(name, "_total");
  if (def.type == MetricType::kCounter && !total) {
    return "a counter's name must end in _total";
  }
  if (def.type != MetricType::kCounter && total) {
    return "only a counter's name ends in _total";
  }
  const size_t n = def.label_count();
  for (size_t i = 0; i < def.labels.size(); ++i) {
    const char* label = def.labels[i];
    if (i >= n) {
      if (label != nullptr) return "a label name follows a null one";
      continue;
    }
    if (!IsName(label) || absl::StartsWith(label, "__")) {
      return "a label name is not [a-z_][a-z0-9_]*";
    }
    if (absl::string_view(label) == "key") {
      return "a label named key (unbounded series)";
    }
    for (size_t j = 0; j < i; ++j) {
      if (stats_internal::Same(def.labels[j], label)) {
        return "a label name repeats";
      }
    }
  }
  if (def.help == nullptr || *def.help == '\0') return "it has no help text";
  return nullptr;
}

// Whether `a` and `b` say the same thing (a name defined twice must be).
inline bool SameMetricDef(const MetricDef& a, const MetricDef& b) {
  using stats_internal::Same;
  if (!Same(a.name, b.name) || a.type != b.type || !Same(a.help, b.help)) {
    return false;
  }
  for (size_t i = 0; i < a.labels.size(); ++i) {
    if (!Same(a.labels[i], b.labels[i])) return false;
  }
  return true;
}

// Receives the values of one scrape. Implementations decide where they go
// (Prometheus families, a test's record). Used by one thread at a time.
class StatsWriter {
 public:
  // Label values, in the order of the definition's label names.
  using Values = std::initializer_list<absl::string_view>;

  virtual ~StatsWriter() = default;

  // One series of `def` (a counter or a gauge).
  virtual void Write(const MetricDef& def, Values labels, double value) = 0;

  void Write(const MetricDef& def, double value) { Write(def, {}, value); }

  // A metric with one label: a value for each of the label's values, e.g.
  // WriteBy(kRlsRequests, {{"OK", ok}, {"OVER_LIMIT", over}, ...}).
  struct LabelCount {
    LabelCount(absl::string_view value, uint64_t count)
        : value(value), count(count) {}
    // A count kept as a relaxed atomic (counts, not ordering).
    LabelCount(absl::string_view value, const std::atomic<uint64_t>& count)
        : value(value), count(count.load(std::memory_order_relaxed)) {}

    absl::string_view value;
    uint64_t count;
  };
  void WriteBy(const MetricDef& def, std::initializer_list<LabelCount> counts) {
    for (const LabelCount& c : counts) {
      Write(def, {c.value}, static_cast<double>(c.count));
    }
  }
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
