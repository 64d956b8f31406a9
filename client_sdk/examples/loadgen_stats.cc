// SPDX-License-Identifier: Apache-2.0
#include "loadgen_stats.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/percentile.h"

namespace sluice::examples {

absl::string_view OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kOk: return "ok";
    case Outcome::kDegraded: return "degraded";
    case Outcome::kRefused: return "refused";
    case Outcome::kError: return "error";
    case Outcome::kOther: return "other";
    case Outcome::kTimeout: return "timeout";
    case Outcome::kConnError: return "conn_error";
  }
  return "other";
}

std::optional<ResponseHead> ParseResponseHead(absl::string_view data) {
  const size_t end = data.find("\r\n\r\n");
  if (end == absl::string_view::npos) return std::nullopt;
  ResponseHead head;
  head.head_bytes = end + 4;
  std::vector<absl::string_view> lines =
      absl::StrSplit(data.substr(0, end), "\r\n");
  // "HTTP/1.1 200 OK"
  const absl::string_view status_line = lines[0];
  int status = 0;
  if (!absl::StartsWith(status_line, "HTTP/1.") || status_line.size() < 12 ||
      !absl::SimpleAtoi(status_line.substr(9, 3), &status)) {
    return head;
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos) continue;
    const std::string name = absl::AsciiStrToLower(lines[i].substr(0, colon));
    const absl::string_view value =
        absl::StripAsciiWhitespace(lines[i].substr(colon + 1));
    if (name == "content-length") {
      if (!absl::SimpleAtoi(value, &head.content_length)) return head;
    } else if (name == "transfer-encoding") {
      return head;  // status stays 0: not supported
    } else if (name == "connection") {
      head.close = absl::EqualsIgnoreCase(value, "close");
    } else if (name == "x-sluice-result") {
      head.result = std::string(value);
    } else if (name == "x-sluice-reason") {
      head.reason = std::string(value);
    }
  }
  head.status = status;
  return head;
}

Outcome Classify(const ResponseHead& head) {
  if (head.result == "rejected") return Outcome::kRefused;
  if (head.status >= 200 && head.status < 300) {
    return head.result == "degraded" ? Outcome::kDegraded : Outcome::kOk;
  }
  if (head.status >= 500 && head.status < 600) return Outcome::kError;
  return Outcome::kOther;
}

SecondStats& Recorder::At(absl::Duration at) {
  const int64_t second =
      std::max<int64_t>(0, absl::ToInt64Seconds(absl::Floor(at, absl::Seconds(1))));
  if (seconds_.size() <= static_cast<size_t>(second)) {
    seconds_.resize(second + 1);
  }
  return seconds_[second];
}

void Recorder::Sent(absl::Duration at) { ++At(at).sent; }

void Recorder::Finished(absl::Duration at, Outcome outcome,
                        absl::string_view reason, absl::Duration latency) {
  SecondStats& s = At(at);
  switch (outcome) {
    case Outcome::kOk:
      ++s.ok;
      s.ok_latency_ms.push_back(absl::ToDoubleMilliseconds(latency));
      break;
    case Outcome::kDegraded: ++s.degraded; break;
    case Outcome::kRefused: ++s.refused; break;
    case Outcome::kError: ++s.errors; break;
    case Outcome::kOther: ++s.other; break;
    case Outcome::kTimeout: ++s.timeouts; break;
    case Outcome::kConnError: ++s.conn_errors; break;
  }
  if ((outcome == Outcome::kRefused || outcome == Outcome::kDegraded) &&
      !reason.empty()) {
    ++s.reasons[std::string(reason)];
  }
}

void Recorder::Outstanding(absl::Duration at, uint64_t n) {
  SecondStats& s = At(at);
  s.outstanding_max = std::max(s.outstanding_max, n);
}

std::string Recorder::CsvHeader() {
  return "second,offered,sent,ok,degraded,refused,errors,other,timeouts,"
         "conn_errors,outstanding_max,p50_ms,p99_ms,reasons";
}

std::string Recorder::CsvRow(size_t index, double offered) {
  SecondStats& s = seconds_[index];
  std::vector<std::string> reasons;
  for (const auto& [reason, n] : s.reasons) {
    reasons.push_back(absl::StrCat(reason, "=", n));
  }
  const bool any = !s.ok_latency_ms.empty();
  return absl::StrCat(
      index, ",", absl::StrFormat("%.1f", offered), ",", s.sent, ",", s.ok, ",",
      s.degraded, ",", s.refused, ",", s.errors, ",", s.other, ",", s.timeouts,
      ",", s.conn_errors, ",", s.outstanding_max, ",",
      any ? absl::StrFormat("%.2f", base::Percentile(s.ok_latency_ms, 0.50))
          : "",
      ",",
      any ? absl::StrFormat("%.2f", base::Percentile(s.ok_latency_ms, 0.99))
          : "",
      ",", absl::StrJoin(reasons, ";"));
}

}  // namespace sluice::examples
