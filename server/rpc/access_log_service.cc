// SPDX-License-Identifier: Apache-2.0
#include "server/rpc/access_log_service.h"

#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"
#include "server/rpc/decision_convert.h"
#include "server/rpc/message_bounds.h"
#include "wire/limits.h"
#include "wire/quote.h"
#include "wire/status.h"

namespace sluice::rpc {
namespace {

using envoy::data::accesslog::v3::HTTPAccessLogEntry;
using envoy::data::accesslog::v3::ResponseFlags;
using envoy::service::accesslog::v3::StreamAccessLogsMessage;
using google::protobuf::Value;

// The metadata names an entry is read by.
enum NameIndex {
  kExtAuthz = 0,
  kRateLimit,
  kSluicePermits,
  kDependencyField,
  kKeyField,
  kPermitField,
  kDependencyHeader,
  kKeyHeader,
  kPermitHeader
};

// As std::string, so that a map lookup builds none.
const std::string& Name(NameIndex i) {
  static const auto* const kNames = new std::array<std::string, 9>{
      std::string(kExtAuthzNamespace), std::string(kRateLimitNamespace),
      "sluice_permits", "dependency", "key", "permit_id",
      "x-sluice-dependency", "x-sluice-key", "x-sluice-permit"};
  return (*kNames)[i];
}

// Protobuf's Duration range: about 10,000 years.
constexpr int64_t kMaxDurationSeconds = 315576000000;

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The string field `name` of `fields`: "" when absent, nullptr when it is
// there but not a string.
const std::string* StringField(
    const google::protobuf::Map<std::string, Value>& fields,
    const std::string& name) {
  static const std::string* const kEmpty = new std::string();
  auto it = fields.find(name);
  if (it == fields.end()) return kEmpty;
  if (it->second.kind_case() != Value::kStringValue) return nullptr;
  return &it->second.string_value();
}

// A non-negative Duration as absl::Duration; false for one out of range,
// negative or with mixed signs.
bool Latency(const google::protobuf::Duration& d, absl::Duration* out) {
  if (d.seconds() < 0 || d.seconds() > kMaxDurationSeconds || d.nanos() < 0 ||
      d.nanos() > 999999999) {
    return false;
  }
  *out = absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
  return true;
}

}  // namespace

core::Outcome AccessLogOutcome(const HTTPAccessLogEntry& entry) {
  const ResponseFlags& f = entry.common_properties().response_flags();
  const uint32_t code = entry.response().response_code().value();
  if (f.upstream_request_timeout() || code == 504) {
    return core::Outcome::kTimeout;
  }
  if (f.no_healthy_upstream() || f.upstream_connection_failure() ||
      f.upstream_overflow() || f.upstream_retry_limit_exceeded() ||
      f.upstream_connection_termination() || f.upstream_remote_reset() ||
      (code >= 500 && code <= 599)) {
    return core::Outcome::kFailure;
  }
  // Envoy logs 0 (or nothing) when no response was sent.
  if (f.downstream_connection_termination() && code == 0) {
    return core::Outcome::kCancelled;
  }
  return core::Outcome::kSuccess;
}

bool PercentDecode(absl::string_view encoded, std::string* out) {
  out->clear();
  for (size_t i = 0; i < encoded.size(); ++i) {
    const char c = encoded[i];
    if (c == '%') {
      if (i + 2 >= encoded.size()) return false;
      const int hi = HexDigit(encoded[i + 1]);
      const int lo = HexDigit(encoded[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out->push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
      continue;
    }
    // What the encoder escapes never appears bare.
    if (c <= ' ' || c > '~' || c == ',') return false;
    out->push_back(c);
  }
  return true;
}

// One StreamAccessLogs call on raw bytes. Reads one message at a time and
// settles it before reading the next, so gRPC's flow control holds Envoy
// back while Sluice is busy; what it holds is one message. Finishes OK when
// Envoy half-closes, with the refusal when a message is refused, and with
// UNAVAILABLE when the server ends it (End). Owns itself: created by the
// service's handler, deleted in OnDone. gRPC runs one OnReadDone at a time;
// End may come from another thread, so the state both touch is under mu_.
class AccessLogStream final
    : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  AccessLogStream(AccessLogServiceImpl* service, std::string peer)
      : service_(service), peer_(std::move(peer)) {
    spdlog::debug("access-log stream from {} started", peer_);
    // Joined first, so a shutdown under way ends this stream too.
    service_->streams_.Add(this);
    absl::MutexLock lock(&mu_);
    if (!finished_) StartRead(&buffer_);
  }

  void End() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    ending_ = true;
    if (!handling_) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                "sluiced is shutting down; open a new stream"));
    }
  }

  void OnReadDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      if (!ok) {
        // Envoy half-closed (or the call broke: then nobody reads this).
        FinishLocked(grpc::Status::OK);
        return;
      }
      if (finished_) return;
      handling_ = true;
    }
    absl::Status status = Handle();
    absl::MutexLock lock(&mu_);
    handling_ = false;
    if (!status.ok()) {
      // Refusal messages are ours, but the last line of defence holds: a
      // status message must be valid UTF-8.
      FinishLocked(grpc::Status(wire::ToGrpcStatus(status).error_code(),
                                wire::ToValidUtf8(status.message())));
    } else if (ending_) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                "sluiced is shutting down; open a new stream"));
    } else {
      StartRead(&buffer_);
    }
  }

  void OnDone() override {
    service_->streams_.Remove(this);
    spdlog::debug(
        "access-log stream from {} ended: {} entries settled, {} without a "
        "permit, {} with an unknown permit, {} invalid",
        peer_, totals_.settled, totals_.no_permit, totals_.unknown_permit,
        totals_.invalid);
    delete this;
  }

 private:
  // The message read: checked on its bytes, parsed and settled.
  absl::Status Handle() {
    message_.Clear();
    absl::Status status = ParseBounded(buffer_, kAccessLogBudget, &message_);
    buffer_.Clear();
    if (!status.ok()) {
      service_->Count(AccessLogServiceImpl::EntryResult::kInvalid, 1,
                      &totals_);
      return status;
    }
    if (message_.has_identifier() && !identified_) {
      identified_ = true;
      spdlog::debug("access-log stream from {} is log {}", peer_,
                    wire::QuoteUntrusted(message_.identifier().log_name()));
    }
    return service_->Handle(message_, &totals_);
  }

  void FinishLocked(const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  AccessLogServiceImpl* const service_;
  const std::string peer_;

  // Read side: touched by OnReadDone only, one at a time.
  grpc::ByteBuffer buffer_;
  StreamAccessLogsMessage message_;
  bool identified_ = false;
  AccessLogServiceImpl::Totals totals_;

  absl::Mutex mu_;
  // A message is being handled outside mu_: End waits for its end.
  bool handling_ ABSL_GUARDED_BY(mu_) = false;
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

AccessLogServiceImpl::AccessLogServiceImpl(core::Engine* engine,
                                           DecisionServiceImpl* decisions)
    : engine_(engine), decisions_(decisions) {}

grpc::ServerReadReactor<grpc::ByteBuffer>*
AccessLogServiceImpl::StreamAccessLogs(grpc::CallbackServerContext* context,
                                       grpc::ByteBuffer* response) {
  // The answer is empty, and only sent when the stream ends.
  (void)SerializeToBuffer(
      envoy::service::accesslog::v3::StreamAccessLogsResponse(), response);
  return new AccessLogStream(this, context->peer());
}

absl::Status AccessLogServiceImpl::Handle(
    const StreamAccessLogsMessage& message, Totals* stream_totals) {
  switch (message.log_entries_case()) {
    case StreamAccessLogsMessage::kHttpLogs:
      break;
    case StreamAccessLogsMessage::kTcpLogs:
      // A TCP entry names no HTTP outcome: nothing to settle.
      Count(EntryResult::kInvalid, message.tcp_logs().log_entry_size(),
            stream_totals);
      return absl::OkStatus();
    case StreamAccessLogsMessage::LOG_ENTRIES_NOT_SET:
      return absl::OkStatus();
  }
  const auto& entries = message.http_logs().log_entry();
  if (entries.size() > kMaxEntries) {
    // The budget refuses this on the raw bytes already; a caller that
    // parsed the message itself gets the same answer.
    Count(EntryResult::kInvalid, 1, stream_totals);
    return absl::InvalidArgumentError(
        absl::StrCat("log_entry: at most ", kMaxEntries,
                     " per StreamAccessLogsMessage, got ", entries.size(),
                     "; none was handled"));
  }
  for (const HTTPAccessLogEntry& entry : entries) {
    Count(SettleEntry(entry), 1, stream_totals);
  }
  return absl::OkStatus();
}

AccessLogServiceImpl::EntryResult AccessLogServiceImpl::SettleEntry(
    const HTTPAccessLogEntry& entry) {
  // Every permit the entry names, and its shape checked, before any is
  // settled: a malformed entry settles nothing.
  std::array<NamedPermit, 2 * kMaxPermitsPerEntry> named;
  int n = 0;
  const auto& filter_metadata =
      entry.common_properties().metadata().filter_metadata();
  for (NameIndex ns : {kExtAuthz, kRateLimit}) {
    auto it = filter_metadata.find(Name(ns));
    if (it == filter_metadata.end()) continue;
    const auto& fields = it->second.fields();
    if (auto list = fields.find(Name(kSluicePermits)); list != fields.end()) {
      // gRPC ext_authz and RLS: a list of {dependency, key, permit_id}.
      if (list->second.kind_case() != Value::kListValue) {
        return EntryResult::kInvalid;
      }
      const auto& values = list->second.list_value().values();
      if (values.size() > kMaxPermitsPerEntry) return EntryResult::kInvalid;
      for (const Value& v : values) {
        if (v.kind_case() != Value::kStructValue) return EntryResult::kInvalid;
        const auto& permit = v.struct_value().fields();
        const std::string* dependency =
            StringField(permit, Name(kDependencyField));
        const std::string* key = StringField(permit, Name(kKeyField));
        const std::string* id = StringField(permit, Name(kPermitField));
        if (dependency == nullptr || key == nullptr || id == nullptr) {
          return EntryResult::kInvalid;
        }
        if (id->empty()) continue;  // a decision that took no permit
        named[n++] = {*dependency, *key, *id, false};
      }
      continue;
    }
    // HTTP-mode ext_authz: the answer's headers copied into the metadata.
    const std::string* dependency =
        StringField(fields, Name(kDependencyHeader));
    const std::string* key = StringField(fields, Name(kKeyHeader));
    const std::string* id = StringField(fields, Name(kPermitHeader));
    if (dependency == nullptr || key == nullptr || id == nullptr) {
      return EntryResult::kInvalid;
    }
    if (id->empty()) continue;
    named[n++] = {*dependency, *key, *id, true};
  }
  if (n == 0) return EntryResult::kNoPermit;

  ReportArgs args;
  args.outcome = AccessLogOutcome(entry);
  const auto& common = entry.common_properties();
  if (common.has_time_to_last_upstream_rx_byte()) {
    if (!Latency(common.time_to_last_upstream_rx_byte(), &args.latency)) {
      return EntryResult::kInvalid;
    }
  } else if (common.has_time_to_last_downstream_tx_byte()) {
    if (!Latency(common.time_to_last_downstream_tx_byte(), &args.latency)) {
      return EntryResult::kInvalid;
    }
  }
  std::string decoded;
  for (int i = 0; i < n; ++i) {
    if (named[i].encoded_key && !PercentDecode(named[i].key, &decoded)) {
      return EntryResult::kInvalid;
    }
  }

  EntryResult result = EntryResult::kSettled;
  for (int i = 0; i < n; ++i) {
    const NamedPermit& p = named[i];
    absl::string_view key = p.key;
    if (p.encoded_key) {
      PercentDecode(p.key, &decoded);
      key = decoded;
    }
    // Names too long or empty can name no permit of ours.
    if (!wire::ValidateRequestNames(p.dependency, key).ok()) {
      result = EntryResult::kUnknownPermit;
      continue;
    }
    absl::StatusOr<core::PermitId> id = ParsePermitId(p.permit_id);
    if (!id.ok()) {
      engine_->CountMalformedPermit();
      result = EntryResult::kUnknownPermit;
      continue;
    }
    args.permit_id = *id;
    const absl::string_view issuer = PermitIssuer(p.permit_id);
    args.issuer.assign(issuer.data(), issuer.size());
    bool forged = false;
    decisions_->SettleReport(p.dependency, key, args, &forged);
    if (forged) result = EntryResult::kUnknownPermit;
  }
  return result;
}

void AccessLogServiceImpl::Count(EntryResult result, int64_t n,
                                 Totals* stream_totals) {
  const uint64_t k = static_cast<uint64_t>(n);
  switch (result) {
    case EntryResult::kSettled:
      settled_.fetch_add(k, std::memory_order_relaxed);
      stream_totals->settled += k;
      break;
    case EntryResult::kNoPermit:
      no_permit_.fetch_add(k, std::memory_order_relaxed);
      stream_totals->no_permit += k;
      break;
    case EntryResult::kUnknownPermit:
      unknown_permit_.fetch_add(k, std::memory_order_relaxed);
      stream_totals->unknown_permit += k;
      break;
    case EntryResult::kInvalid:
      invalid_.fetch_add(k, std::memory_order_relaxed);
      stream_totals->invalid += k;
      break;
  }
}

void AccessLogServiceImpl::WriteStats(base::StatsWriter& out) const {
  static constexpr base::MetricDef kAccessLogEntries = base::CounterDef(
      "sluice_access_log_entries_total", {"result"},
      "HTTP entries of Envoy's access-log service (StreamAccessLogs) by "
      "what became of them: settled (every permit it named was settled "
      "like a ReportResult), no_permit (it named none), unknown_permit "
      "(a permit id unreadable or not issued here), invalid (a TCP "
      "entry, malformed metadata, or a message refused whole, counted "
      "once).");
  out.WriteBy(kAccessLogEntries, {{"settled", settled_},
                                  {"no_permit", no_permit_},
                                  {"unknown_permit", unknown_permit_},
                                  {"invalid", invalid_}});
}

void AccessLogServiceImpl::EndStreams() { streams_.EndAll(); }

}  // namespace sluice::rpc
