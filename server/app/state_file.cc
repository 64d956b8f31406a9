// SPDX-License-Identifier: Apache-2.0
#include "server/app/state_file.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/files.h"
#include "google/protobuf/util/json_util.h"
#include "sluice/v1/state.pb.h"
#include "wire/limits.h"
#include "wire/time.h"

namespace sluice::app {
namespace {

constexpr absl::string_view kMagic = "sluice-state";
// Far above any real state (10,000 keys of a policy are about 2 MB); a file
// this large is not ours.
constexpr size_t kMaxStateFileBytes = size_t{256} << 20;

void ToProto(const core::DependencyWarmState& dep, v1::WarmDependency* out) {
  out->set_name(dep.name);
  out->set_digest(dep.digest);
  for (const core::KeyWarmState& key : dep.keys) {
    v1::WarmKey* k = out->add_keys();
    k->set_key(key.key);
    if (key.limit) {
      k->mutable_limit()->set_steady_limit(key.limit->steady_limit);
      if (key.limit->baseline > absl::ZeroDuration()) {
        wire::DurationToProto(key.limit->baseline,
                              k->mutable_limit()->mutable_baseline());
      }
    }
    if (key.baseline) {
      v1::WarmBaseline* b = k->mutable_baseline();
      b->set_windows(key.baseline->windows);
      b->set_mean_us(key.baseline->mean_us);
      b->set_var_us2(key.baseline->var_us2);
      b->set_success(key.baseline->success);
    }
    if (key.breaker) {
      v1::WarmBreaker* b = k->mutable_breaker();
      b->set_generation(key.breaker->generation);
      *b->mutable_open_until() = wire::TimestampToProto(key.breaker->open_until);
      wire::DurationToProto(key.breaker->open_duration,
                            b->mutable_open_duration());
      b->set_cause(key.breaker->cause);
    }
  }
}

// True when `text` is well-formed UTF-8 (no overlong forms, surrogates or
// code points above U+10FFFF): GetState serves a cause as a proto3 string.
// protobuf 3.21's JSON parser already refuses raw invalid UTF-8 and lone
// surrogate escapes; this keeps the bound true whatever the parser does.
bool IsUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto byte = [&](size_t at) {
      return static_cast<unsigned char>(text[at]);
    };
    const unsigned char c = byte(i);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n = 0;
    uint32_t cp = 0;
    if ((c & 0xe0) == 0xc0) {
      n = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (text.size() - i <= n) return false;
    for (size_t k = 1; k <= n; ++k) {
      if ((byte(i + k) & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (byte(i + k) & 0x3f);
    }
    static constexpr uint32_t kMinForLength[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLength[n] || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

bool PlausibleLatency(absl::Duration d) {
  return d >= kMinStateLatency && d <= kMaxStateLatency;
}

// A learned mean latency in microseconds: 0 (nothing measured) or a
// plausible latency.
bool PlausibleMeanUs(double us) {
  if (!std::isfinite(us)) return false;
  if (us == 0) return true;
  return us >= absl::ToDoubleMicroseconds(kMinStateLatency) &&
         us <= absl::ToDoubleMicroseconds(kMaxStateLatency);
}

bool PlausibleBaseline(const v1::WarmBaseline& b) {
  const double max_us = absl::ToDoubleMicroseconds(kMaxStateLatency);
  return PlausibleMeanUs(b.mean_us()) && std::isfinite(b.var_us2()) &&
         b.var_us2() >= 0 && b.var_us2() <= max_us * max_us &&
         std::isfinite(b.success()) && b.success() >= 0 && b.success() <= 1;
}

std::optional<core::AdaptiveLimitState> LimitFrom(
    const v1::WarmAdaptiveLimit& in) {
  core::AdaptiveLimitState limit;
  limit.steady_limit = in.steady_limit();
  if (limit.steady_limit == 0 || limit.steady_limit > kMaxStateSteadyLimit) {
    return std::nullopt;
  }
  if (in.has_baseline()) {
    absl::StatusOr<absl::Duration> baseline =
        wire::DurationFromProto(in.baseline(), "limit.baseline");
    if (!baseline.ok()) return std::nullopt;
    // Absent or zero: none learned.
    if (*baseline != absl::ZeroDuration() && !PlausibleLatency(*baseline)) {
      return std::nullopt;
    }
    limit.baseline = *baseline;
  }
  return limit;
}

std::optional<core::BreakerRecord> BreakerFrom(const v1::WarmBreaker& in,
                                               absl::Time written_at) {
  if (in.cause().size() > kMaxStateCauseBytes || !IsUtf8(in.cause())) {
    return std::nullopt;
  }
  absl::StatusOr<absl::Duration> open_duration =
      wire::DurationFromProto(in.open_duration(), "breaker.open_duration");
  if (!open_duration.ok() || *open_duration <= absl::ZeroDuration() ||
      *open_duration > kMaxStateOpenDuration) {
    return std::nullopt;
  }
  core::BreakerRecord breaker;
  breaker.generation = in.generation();
  breaker.state = core::BreakerState::kOpen;
  breaker.open_until = wire::TimestampFromProto(in.open_until());
  // Opened at the latest when the file was written (one second of slack
  // for the clock's rounding).
  if (breaker.open_until == absl::InfinitePast() ||
      breaker.open_until == absl::InfiniteFuture() ||
      breaker.open_until > written_at + *open_duration + absl::Seconds(1)) {
    return std::nullopt;
  }
  breaker.open_duration = *open_duration;
  breaker.cause = in.cause();
  return breaker;
}

// The dependency's keys that are within bounds; what is not is counted in
// `rejected`. A key with one bad value keeps its other values.
absl::StatusOr<core::DependencyWarmState> FromProto(
    const v1::WarmDependency& dep, absl::Time written_at,
    const StateFileLimits& limits, StateFileRejects* rejected) {
  if (dep.name().empty()) {
    return absl::DataLossError("a dependency without a name");
  }
  core::DependencyWarmState out;
  out.name = dep.name();
  out.digest = dep.digest();
  const size_t taken =
      std::min<size_t>(dep.keys_size(), limits.max_keys_per_dependency);
  rejected->keys_over_cap += static_cast<size_t>(dep.keys_size()) - taken;
  out.keys.reserve(taken);
  for (size_t i = 0; i < taken; ++i) {
    const v1::WarmKey& key = dep.keys(static_cast<int>(i));
    if (key.key().size() > wire::kMaxKeyBytes) {
      ++rejected->long_keys;
      continue;
    }
    core::KeyWarmState k;
    k.key = key.key();
    if (key.has_limit()) {
      k.limit = LimitFrom(key.limit());
      if (!k.limit) ++rejected->bad_limits;
    }
    if (key.has_baseline()) {
      if (PlausibleBaseline(key.baseline())) {
        core::BaselineState baseline;
        baseline.windows = key.baseline().windows();
        baseline.mean_us = key.baseline().mean_us();
        baseline.var_us2 = key.baseline().var_us2();
        baseline.success = key.baseline().success();
        k.baseline = baseline;
      } else {
        ++rejected->bad_baselines;
      }
    }
    if (key.has_breaker()) {
      k.breaker = BreakerFrom(key.breaker(), written_at);
      if (!k.breaker) ++rejected->bad_breakers;
    }
    const bool had_values =
        key.has_limit() || key.has_baseline() || key.has_breaker();
    if (had_values && !k.limit && !k.baseline && !k.breaker) continue;
    out.keys.push_back(std::move(k));
  }
  return out;
}

}  // namespace

uint32_t Crc32c(absl::string_view data) {
  static const std::array<uint32_t, 256> kTable = [] {
    std::array<uint32_t, 256> table{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int bit = 0; bit < 8; ++bit) {
        c = (c & 1) != 0 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      }
      table[i] = c;
    }
    return table;
  }();
  uint32_t crc = ~0u;
  for (const char ch : data) {
    crc = kTable[(crc ^ static_cast<unsigned char>(ch)) & 0xff] ^ (crc >> 8);
  }
  return ~crc;
}

absl::StatusOr<std::string> EncodeStateFile(const SavedWarmState& state) {
  v1::WarmStateFile file;
  *file.mutable_written_at() = wire::TimestampToProto(state.written_at);
  for (const core::DependencyWarmState& dep : state.dependencies) {
    ToProto(dep, file.add_dependencies());
  }
  google::protobuf::util::JsonPrintOptions print;
  print.add_whitespace = true;
  print.preserve_proto_field_names = true;
  std::string body;
  if (auto s = google::protobuf::util::MessageToJsonString(file, &body, print);
      !s.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot print the state as JSON: ", s.ToString()));
  }
  return absl::StrCat(kMagic, " ", kStateFileVersion, " ", body.size(), " ",
                      absl::StrFormat("%08x", Crc32c(body)), "\n", body);
}

absl::StatusOr<SavedWarmState> DecodeStateFile(absl::string_view bytes,
                                               const StateFileLimits& limits) {
  const size_t eol = bytes.find('\n');
  // The header is short; a long first line is some other file.
  const absl::string_view header =
      bytes.substr(0, std::min<size_t>(eol, 80));
  const std::vector<absl::string_view> fields = absl::StrSplit(header, ' ');
  if (eol == absl::string_view::npos || eol > 80 || fields.size() != 4 ||
      fields[0] != kMagic) {
    return absl::DataLossError(
        absl::StrCat("not a sluice state file (expected a first line \"",
                     kMagic, " VERSION LENGTH CRC32C\")"));
  }
  int version = 0;
  size_t length = 0;
  uint32_t crc = 0;
  if (!absl::SimpleAtoi(fields[1], &version) ||
      !absl::SimpleAtoi(fields[2], &length) || fields[3].size() != 8 ||
      !absl::SimpleHexAtoi(fields[3], &crc)) {
    return absl::DataLossError(absl::StrCat(
        "bad header line \"", absl::CHexEscape(header), "\""));
  }
  if (version != kStateFileVersion) {
    return absl::DataLossError(absl::StrCat(
        "format version ", version, "; this sluiced reads version ",
        kStateFileVersion));
  }
  const absl::string_view body = bytes.substr(eol + 1);
  if (body.size() < length) {
    return absl::DataLossError(
        absl::StrCat("truncated: the header says ", length,
                     " bytes follow, only ", body.size(), " do"));
  }
  if (body.size() > length) {
    return absl::DataLossError(
        absl::StrCat("the header says ", length, " bytes follow, but ",
                     body.size(), " do"));
  }
  if (const uint32_t actual = Crc32c(body); actual != crc) {
    return absl::DataLossError(absl::StrFormat(
        "checksum mismatch: the header says %08x, the content has %08x "
        "(the file is corrupt)",
        crc, actual));
  }
  v1::WarmStateFile file;
  google::protobuf::util::JsonParseOptions parse;
  // Fields a later version of the same format adds are not an error.
  parse.ignore_unknown_fields = true;
  if (auto s = google::protobuf::util::JsonStringToMessage(
          std::string(body), &file, parse);
      !s.ok()) {
    return absl::DataLossError(
        absl::StrCat("bad JSON in the body: ", s.message().ToString()));
  }
  SavedWarmState state;
  state.written_at = wire::TimestampFromProto(file.written_at());
  const size_t taken = std::min<size_t>(file.dependencies_size(),
                                        limits.max_dependencies);
  state.rejected.dependencies_over_cap =
      static_cast<size_t>(file.dependencies_size()) - taken;
  state.dependencies.reserve(taken);
  for (size_t i = 0; i < taken; ++i) {
    const v1::WarmDependency& dep = file.dependencies(static_cast<int>(i));
    if (dep.name().size() > wire::kMaxNameBytes) {
      ++state.rejected.long_names;
      continue;
    }
    absl::StatusOr<core::DependencyWarmState> d =
        FromProto(dep, state.written_at, limits, &state.rejected);
    if (!d.ok()) return d.status();
    state.dependencies.push_back(*std::move(d));
  }
  return state;
}

absl::StatusOr<SavedWarmState> ReadStateFile(const std::string& path,
                                             const StateFileLimits& limits) {
  absl::StatusOr<std::string> bytes =
      base::ReadRegularFile(path, kMaxStateFileBytes);
  if (!bytes.ok()) {
    // Not a regular file, or too large: not a state file of ours.
    if (absl::IsFailedPrecondition(bytes.status())) {
      return absl::DataLossError(bytes.status().message());
    }
    return bytes.status();
  }
  return DecodeStateFile(*bytes, limits);
}

}  // namespace sluice::app
