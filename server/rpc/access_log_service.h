// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_RPC_ACCESS_LOG_SERVICE_H_
#define SLUICE_SERVER_RPC_ACCESS_LOG_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "base/stats.h"
#include "envoy/service/accesslog/v3/als.grpc.pb.h"
#include "server/core/engine.h"
#include "server/core/outcome.h"
#include "server/rpc/decision_service.h"
#include "server/rpc/open_streams.h"

namespace sluice::rpc {

class AccessLogStream;

// The metadata namespaces an access-log entry names its permits under: the
// ones Envoy's external-authorization and rate-limit filters write.
inline constexpr absl::string_view kExtAuthzNamespace =
    "envoy.filters.http.ext_authz";
inline constexpr absl::string_view kRateLimitNamespace =
    "envoy.filters.http.ratelimit";

// How an HTTP request that held a permit ended, from what Envoy logged: an
// upstream timeout (flag UT, or a 504) is a TIMEOUT; any other upstream
// failure flag (UH, UF, UO, URX, UC, UR) or a 5xx a FAILURE; the downstream
// leaving (DC) before any response a CANCELLED; anything else a SUCCESS.
core::Outcome AccessLogOutcome(
    const envoy::data::accesslog::v3::HTTPAccessLogEntry& entry);

// `encoded` with every %XX replaced by its byte, into `out`: the x-sluice-key
// header's form (bytes outside visible ASCII, '%' and ',' escaped). false,
// `out` unspecified, for a '%' without two hex digits after it or a byte
// that should have been escaped.
bool PercentDecode(absl::string_view encoded, std::string* out);

// envoy.service.accesslog.v3.AccessLogService on the data port: Envoy's
// gRPC access logger streams its HTTP entries here, and every permit an
// entry names in its filter metadata (see kExtAuthzNamespace) is settled
// with the outcome and latency the entry tells, exactly as a ReportResult
// would settle it: the in-flight slot is freed and the breaker, adaptive
// limit and latency baseline are fed. So a gateway reports outcomes without
// a script of its own.
//
// Each message is checked on its raw bytes (kAccessLogBudget: size, at most
// kMaxEntries entries) before protobuf builds it; a message over the budget
// or not a message at all ends the stream with RESOURCE_EXHAUSTED or
// INVALID_ARGUMENT, entries already settled staying settled. A malformed
// entry is counted and skipped; the stream goes on. Every permit is settled
// on its own under its dependency's lock only, so a large message never
// holds a lock across entries. Safe for concurrent use.
class AccessLogServiceImpl final
    : public envoy::service::accesslog::v3::AccessLogService::
          WithRawCallbackMethod_StreamAccessLogs<
              envoy::service::accesslog::v3::AccessLogService::Service>,
      public base::StatsSource {
 public:
  // Entries since start, by what became of them, for the metrics.
  struct Totals {
    uint64_t settled = 0;         // every permit named was settled
    uint64_t no_permit = 0;       // no permit named: nothing to do
    uint64_t unknown_permit = 0;  // a permit id unreadable or not ours
    // Malformed: a TCP entry, metadata of the wrong shape, a bad escape,
    // an impossible duration; or a message refused whole (counted once).
    uint64_t invalid = 0;
  };

  // Both must outlive the service.
  AccessLogServiceImpl(core::Engine* engine, DecisionServiceImpl* decisions);

  grpc::ServerReadReactor<grpc::ByteBuffer>* StreamAccessLogs(
      grpc::CallbackServerContext* context,
      grpc::ByteBuffer* response) override;

  // Settles the entries of one parsed message, counting each; the
  // stream's own counts are added to `stream_totals`. INVALID_ARGUMENT
  // (nothing settled) for more than kMaxEntries entries.
  absl::Status Handle(
      const envoy::service::accesslog::v3::StreamAccessLogsMessage& message,
      Totals* stream_totals);

  // The counts since start as sluice_access_log_entries_total.
  void WriteStats(base::StatsWriter& out) const override;
  // Access-log streams open now.
  int64_t open_streams() const { return streams_.open(); }
  // Ends every stream, now and from now on, after the message it is
  // handling: Envoy's logger reconnects (to another replica). The server
  // calls this when it begins to shut down.
  void EndStreams();

  // Most entries one message may carry.
  static constexpr int kMaxEntries = 1000;
  // Most permits one entry may name in each namespace.
  static constexpr int kMaxPermitsPerEntry = 64;

 private:
  friend class AccessLogStream;

  // A permit as an entry names it: the key still percent-encoded when it
  // came from a header (`encoded_key`).
  struct NamedPermit {
    absl::string_view dependency;
    absl::string_view key;
    absl::string_view permit_id;
    bool encoded_key = false;
  };
  enum class EntryResult { kSettled, kNoPermit, kUnknownPermit, kInvalid };

  EntryResult SettleEntry(
      const envoy::data::accesslog::v3::HTTPAccessLogEntry& entry);
  void Count(EntryResult result, int64_t n, Totals* stream_totals);

  core::Engine* const engine_;
  DecisionServiceImpl* const decisions_;
  std::atomic<uint64_t> settled_{0};
  std::atomic<uint64_t> no_permit_{0};
  std::atomic<uint64_t> unknown_permit_{0};
  std::atomic<uint64_t> invalid_{0};

  OpenStreams<AccessLogStream> streams_;
};

}  // namespace sluice::rpc

#endif  // SLUICE_SERVER_RPC_ACCESS_LOG_SERVICE_H_
