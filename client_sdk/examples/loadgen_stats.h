// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_CLIENT_SDK_EXAMPLES_LOADGEN_STATS_H_
#define SLUICE_CLIENT_SDK_EXAMPLES_LOADGEN_STATS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace sluice::examples {

// What the example gateway's answer meant for the user who asked.
enum class Outcome {
  kOk,         // 2xx from the backend: a good answer
  kDegraded,   // 200 with X-Sluice-Result: degraded (a fallback)
  kRefused,    // Sluice said no: X-Sluice-Result: rejected (429 or 503)
  kError,      // any other 5xx (502: the backend failed or was too slow)
  kOther,      // any other status (4xx that is not a refusal)
  kTimeout,    // no answer within the client's timeout
  kConnError,  // the connection failed or closed before the answer
};
absl::string_view OutcomeName(Outcome outcome);

// The parts of an HTTP/1.1 response head the load generator reads.
struct ResponseHead {
  int status = 0;
  size_t head_bytes = 0;  // through the blank line
  size_t content_length = 0;
  bool close = false;  // Connection: close
  std::string result;  // X-Sluice-Result
  std::string reason;  // X-Sluice-Reason
};
// Parses the head at the start of `data`. nullopt while it is incomplete;
// status 0 when it is not HTTP/1.x or uses a transfer encoding (the example
// servers always send Content-Length).
std::optional<ResponseHead> ParseResponseHead(absl::string_view data);

Outcome Classify(const ResponseHead& head);

// One second of a run: requests sent in it (by their scheduled time) and
// answers finished in it (by the time they finished or timed out).
struct SecondStats {
  uint64_t sent = 0;
  uint64_t ok = 0;
  uint64_t degraded = 0;
  uint64_t refused = 0;
  uint64_t errors = 0;
  uint64_t other = 0;
  uint64_t timeouts = 0;
  uint64_t conn_errors = 0;
  // Refusals and degraded answers by X-Sluice-Reason.
  std::map<std::string, uint64_t> reasons;
  // Latency of good answers, from their scheduled send time, milliseconds.
  std::vector<double> ok_latency_ms;
  // Requests sent and not yet finished, the most seen in this second.
  uint64_t outstanding_max = 0;
};

// Per-second counts of a run. Not thread-safe: the load generator's single
// event loop owns it.
class Recorder {
 public:
  void Sent(absl::Duration at);
  // `latency` is measured from the request's scheduled send time, so that
  // waiting for a free connection counts (no coordinated omission).
  void Finished(absl::Duration at, Outcome outcome, absl::string_view reason,
                absl::Duration latency);
  void Outstanding(absl::Duration at, uint64_t n);

  const std::vector<SecondStats>& seconds() const { return seconds_; }

  static std::string CsvHeader();
  // One CSV row for second `index`; `offered` is the schedule's rate at its
  // middle. Sorts that second's latencies.
  std::string CsvRow(size_t index, double offered);

 private:
  SecondStats& At(absl::Duration at);

  std::vector<SecondStats> seconds_;
};

}  // namespace sluice::examples

#endif  // SLUICE_CLIENT_SDK_EXAMPLES_LOADGEN_STATS_H_
