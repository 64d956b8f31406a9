// SPDX-License-Identifier: Apache-2.0
#include "server/http/json_fast.h"

#include <cstdint>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/duration.pb.h"
#include "wire/quote.h"

namespace sluice::http {
namespace {

// protobuf's limit on a Duration's seconds (google/protobuf/duration.proto:
// about 10,000 years).
constexpr int64_t kMaxDurationSeconds = 315576000000;
constexpr int32_t kNanosPerSecond = 1000000000;

// The character a one-letter JSON escape (the letter after the backslash)
// stands for, or '\0' for \u and any letter JSON does not define.
char Unescape(char letter) {
  switch (letter) {
    case '"': return '"';
    case '\\': return '\\';
    case '/': return '/';
    case 'b': return '\b';
    case 'f': return '\f';
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    default: return '\0';
  }
}

// A cursor over a JSON text that reads only the plain forms FastParseJson
// takes; every method returns false where the text leaves them.
class Reader {
 public:
  explicit Reader(absl::string_view text) : text_(text) {}

  void SkipSpace() {
    while (i_ < text_.size() && (text_[i_] == ' ' || text_[i_] == '\t' ||
                                 text_[i_] == '\n' || text_[i_] == '\r')) {
      ++i_;
    }
  }

  bool Consume(char c) {
    SkipSpace();
    if (i_ < text_.size() && text_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }

  bool AtEnd() {
    SkipSpace();
    return i_ == text_.size();
  }

  // A string literal, unescaped into `out`.
  bool String(std::string* out) {
    if (!Consume('"')) return false;
    out->clear();
    while (i_ < text_.size()) {
      const auto c = static_cast<unsigned char>(text_[i_]);
      if (c == '"') {
        ++i_;
        return true;
      }
      if (c < 0x20) return false;
      if (c == '\\') {
        if (i_ + 1 >= text_.size()) return false;
        const char unescaped = Unescape(text_[i_ + 1]);
        // \u and anything else: left to protobuf.
        if (unescaped == '\0') return false;
        out->push_back(unescaped);
        i_ += 2;
        continue;
      }
      if (c < 0x80) {
        out->push_back(static_cast<char>(c));
        ++i_;
        continue;
      }
      const size_t length = wire::Utf8SequenceLength(text_, i_);
      if (length == 0) return false;
      out->append(text_.data() + i_, length);
      i_ += length;
    }
    return false;  // unterminated
  }

  // An integer written plainly: an optional '-' (when `negative_ok`), then
  // "0" or digits without a leading zero, ended by a delimiter; "-0" is
  // not taken.
  bool Integer(bool negative_ok, int64_t* value) {
    SkipSpace();
    const size_t start = i_;
    if (negative_ok && i_ < text_.size() && text_[i_] == '-') ++i_;
    const size_t digits = i_;
    while (i_ < text_.size() && text_[i_] >= '0' && text_[i_] <= '9') ++i_;
    const size_t count = i_ - digits;
    if (count == 0 || count > 11) return false;
    if (text_[digits] == '0' && (count > 1 || digits > start)) return false;
    if (i_ < text_.size() && text_[i_] != ' ' && text_[i_] != '\t' &&
        text_[i_] != '\n' && text_[i_] != '\r' && text_[i_] != ',' &&
        text_[i_] != '}') {
      return false;
    }
    return absl::SimpleAtoi(text_.substr(start, i_ - start), value);
  }

 private:
  const absl::string_view text_;
  size_t i_ = 0;
};

// "<seconds>[.<1 to 9 digits>]s", optionally negative, within protobuf's
// limits, as protobuf reads it (seconds and nanos carry the same sign).
bool ParseDuration(absl::string_view text, google::protobuf::Duration* out) {
  if (text.empty() || text.back() != 's') return false;
  text.remove_suffix(1);
  const bool negative = !text.empty() && text.front() == '-';
  if (negative) text.remove_prefix(1);
  const size_t dot = text.find('.');
  const absl::string_view whole = text.substr(0, dot);
  const absl::string_view fraction = dot == absl::string_view::npos
                                         ? absl::string_view()
                                         : text.substr(dot + 1);
  if (whole.empty() || whole.size() > 12) return false;
  if (dot != absl::string_view::npos &&
      (fraction.empty() || fraction.size() > 9)) {
    return false;
  }
  int64_t seconds = 0;
  for (char c : whole) {
    if (c < '0' || c > '9') return false;
    seconds = seconds * 10 + (c - '0');
  }
  int64_t nanos = 0;
  for (size_t k = 0; k < 9; ++k) {
    const char c = k < fraction.size() ? fraction[k] : '0';
    if (c < '0' || c > '9') return false;
    nanos = nanos * 10 + (c - '0');
  }
  if (seconds > kMaxDurationSeconds) return false;
  out->set_seconds(negative ? -seconds : seconds);
  out->set_nanos(static_cast<int32_t>(negative ? -nanos : nanos));
  return true;
}

// Field `index` of a message, seen once: false the second time.
bool FirstTime(int index, uint32_t* seen) {
  const uint32_t bit = uint32_t{1} << index;
  if ((*seen & bit) != 0) return false;
  *seen |= bit;
  return true;
}

// Reads an object, handing each member's name to `member(name, reader)`,
// which reads the value; false where either fails.
template <typename Member>
bool ReadObject(absl::string_view json, Member member) {
  Reader reader(json);
  if (!reader.Consume('{')) return false;
  if (reader.Consume('}')) return reader.AtEnd();
  std::string name;
  do {
    if (!reader.String(&name) || !reader.Consume(':')) return false;
    if (!member(name, reader)) return false;
  } while (reader.Consume(','));
  return reader.Consume('}') && reader.AtEnd();
}

// Appends `text` quoted when it is printable ASCII that protobuf prints
// unescaped; false otherwise.
bool AppendPlainString(absl::string_view text, std::string* out) {
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' ||
        c == '>' || c == '&' || c == '\'' || c == '=') {
      return false;
    }
  }
  out->push_back('"');
  out->append(text.data(), text.size());
  out->push_back('"');
  return true;
}

// "1.500s" as protobuf prints a Duration: 0, 3, 6 or 9 fractional digits.
// Only non-negative durations within limits; false otherwise.
bool AppendDuration(const google::protobuf::Duration& d, std::string* out) {
  if (d.seconds() < 0 || d.seconds() > kMaxDurationSeconds || d.nanos() < 0 ||
      d.nanos() >= kNanosPerSecond) {
    return false;
  }
  absl::StrAppend(out, "\"", d.seconds());
  int32_t nanos = d.nanos();
  if (nanos != 0) {
    int digits = 9;
    if (nanos % 1000000 == 0) {
      nanos /= 1000000;
      digits = 3;
    } else if (nanos % 1000 == 0) {
      nanos /= 1000;
      digits = 6;
    }
    char buffer[10];
    buffer[0] = '.';
    for (int k = digits; k >= 1; --k) {
      buffer[k] = static_cast<char>('0' + nanos % 10);
      nanos /= 10;
    }
    out->append(buffer, static_cast<size_t>(digits) + 1);
  }
  out->append("s\"");
  return true;
}

}  // namespace

bool FastParseJson(absl::string_view json, v1::AcquireRequest* request) {
  request->Clear();
  uint32_t seen = 0;
  return ReadObject(json, [&](const std::string& name, Reader& reader) {
    if (name == "dependency") {
      return FirstTime(0, &seen) &&
             reader.String(request->mutable_dependency());
    }
    if (name == "key") {
      return FirstTime(1, &seen) && reader.String(request->mutable_key());
    }
    if (name == "permits") {
      int64_t permits = 0;
      if (!FirstTime(2, &seen) || !reader.Integer(false, &permits) ||
          permits > int64_t{UINT32_MAX}) {
        return false;
      }
      request->set_permits(static_cast<uint32_t>(permits));
      return true;
    }
    if (name == "caller") {
      return FirstTime(3, &seen) && reader.String(request->mutable_caller());
    }
    return false;
  });
}

bool FastParseJson(absl::string_view json, v1::ReportResultRequest* request) {
  request->Clear();
  uint32_t seen = 0;
  std::string text;
  return ReadObject(json, [&](const std::string& name, Reader& reader) {
    if (name == "dependency") {
      return FirstTime(0, &seen) &&
             reader.String(request->mutable_dependency());
    }
    if (name == "key") {
      return FirstTime(1, &seen) && reader.String(request->mutable_key());
    }
    if (name == "permitId" || name == "permit_id") {
      return FirstTime(2, &seen) && reader.String(request->mutable_permit_id());
    }
    if (name == "outcome") {
      v1::Outcome outcome = v1::OUTCOME_UNSPECIFIED;
      if (!FirstTime(3, &seen) || !reader.String(&text) ||
          !v1::Outcome_Parse(text, &outcome)) {
        return false;
      }
      request->set_outcome(outcome);
      return true;
    }
    if (name == "latency") {
      return FirstTime(4, &seen) && reader.String(&text) &&
             ParseDuration(text, request->mutable_latency());
    }
    if (name == "statusCode" || name == "status_code") {
      int64_t code = 0;
      if (!FirstTime(5, &seen) || !reader.Integer(true, &code) ||
          code < int64_t{INT32_MIN} || code > int64_t{INT32_MAX}) {
        return false;
      }
      request->set_status_code(static_cast<int32_t>(code));
      return true;
    }
    return false;
  });
}

bool FastPrintJson(const v1::AcquireResponse& response, std::string* out) {
  if (response.has_fallback() || !v1::Verdict_IsValid(response.verdict()) ||
      !v1::Reason_IsValid(response.reason()) ||
      !v1::BreakerState_IsValid(response.breaker_state())) {
    return false;
  }
  out->clear();
  absl::StrAppend(out, "{\"verdict\":\"", v1::Verdict_Name(response.verdict()),
                  "\",\"reason\":\"", v1::Reason_Name(response.reason()),
                  "\",\"permitId\":");
  if (!AppendPlainString(response.permit_id(), out)) return false;
  // protobuf prints the scalar fields first, then the message fields that
  // are set, each group in field order.
  absl::StrAppend(out, ",\"breakerState\":\"",
                  v1::BreakerState_Name(response.breaker_state()),
                  "\",\"remaining\":\"", response.remaining(),
                  "\",\"policyVersion\":\"", response.policy_version(),
                  "\",\"httpStatus\":", response.http_status());
  if (response.has_call_timeout()) {
    out->append(",\"callTimeout\":");
    if (!AppendDuration(response.call_timeout(), out)) return false;
  }
  if (response.has_retry_after()) {
    out->append(",\"retryAfter\":");
    if (!AppendDuration(response.retry_after(), out)) return false;
  }
  out->push_back('}');
  return true;
}

bool FastPrintJson(const v1::ReportResultResponse& response, std::string* out) {
  if (!v1::BreakerState_IsValid(response.breaker_state())) return false;
  out->clear();
  absl::StrAppend(out, "{\"breakerState\":\"",
                  v1::BreakerState_Name(response.breaker_state()), "\"}");
  return true;
}

}  // namespace sluice::http
