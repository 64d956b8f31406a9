// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_RPC_MESSAGE_BOUNDS_H_
#define SLUICE_SERVER_RPC_MESSAGE_BOUNDS_H_

// What each data-port method takes, checked on the serialized request before
// protobuf builds it. Parsing allocates per field (a message object per
// repeated element, an entry per unknown field), so a 2 MiB message of empty
// elements would cost tens of MB; the counts are checked on the raw bytes
// first, without allocating. Pure functions; safe for concurrent use.

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/zero_copy_stream.h>
#include <google/protobuf/message.h>
#include <grpcpp/support/byte_buffer.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace sluice::rpc {

// What one method's request may hold.
struct MessageBudget {
  // The serialized request.
  size_t max_bytes = 0;
  // Fields at every depth, known or unknown (a repeated element, a string,
  // a nested message each count one).
  int64_t max_fields = 0;
  // A repeated field of the top-level message whose count has its own,
  // clearer refusal: its number (0: none), its name and its cap.
  int counted_field = 0;
  absl::string_view counted_name;
  int64_t max_counted = 0;
  // Non-zero: counted_field is a field of the message in this top-level
  // field instead (its elements summed over every occurrence).
  int counted_within = 0;
};

// The largest request the data port takes, the largest of the budgets
// below: the gRPC server refuses anything larger before a handler runs.
inline constexpr size_t kMaxDataMessageBytes = size_t{2} << 20;

// A key of 1,024 bytes, a dependency of 256, a permit id and a latency are
// under 2 KiB, so 16 KiB leaves room for the caller and fields added later.
inline constexpr MessageBudget kAcquireBudget{16 << 10, 64, 0, "", 0};
inline constexpr MessageBudget kReportBudget{16 << 10, 64, 0, "", 0};
// 10,000 reports (DecisionServiceImpl::kMaxBatch) of about 200 bytes; the
// SDK sends at most 256 per call.
inline constexpr MessageBudget kReportsBudget{kMaxDataMessageBytes,
                                              10000 * 12 + 64, 1, "reports",
                                              10000};
// 1,000 calls (DecisionServiceImpl::kMaxDecideCalls) of the largest valid
// size (about 1.7 kB each).
inline constexpr MessageBudget kDecideBudget{kMaxDataMessageBytes,
                                             1000 * 16 + 64, 1, "calls", 1000};
// 256 renewals (DecisionServiceImpl::kMaxRenewals) of a dependency of 256
// bytes and 12 numbers each (under 400 bytes).
inline constexpr MessageBudget kRenewLeasesBudget{128 << 10, 256 * 16 + 64, 2,
                                                  "leases", 256};
// Envoy's RateLimitRequest: 64 descriptors of 64 entries at most
// (RateLimitServiceImpl::kMaxDescriptors, kMaxEntries), each entry a key
// and a value; real requests are a few hundred bytes.
inline constexpr MessageBudget kRateLimitBudget{64 << 10, 64 * 200 + 64, 2,
                                                "descriptors", 64};
// One message of Envoy's access-log stream: at most 1,000 entries
// (AccessLogServiceImpl::kMaxEntries) in http_logs (field 2), each up to
// 256 fields (an entry with its timings, flags, metadata and a few logged
// headers has about 60). Envoy sends a message per 16 KiB buffered by
// default.
inline constexpr MessageBudget kAccessLogBudget{
    1 << 20, 1000 * 256 + 64, 1, "log_entry", 1000, 2};

// Envoy's CheckRequest (external authorization): the request's headers
// (AuthorizationServiceImpl::kMaxHeaders, 256, of three fields each), its
// context extensions and the attributes Sluice does not read. Envoy's own
// limit on a request's headers is 60 KiB by default; a body Envoy is told
// to buffer counts too.
inline constexpr MessageBudget kExtAuthzBudget{256 << 10, 4096, 0, "", 0};

// Checks `size` bytes from `in`, a serialized `type`, against `budget`
// without building the message: RESOURCE_EXHAUSTED for too many bytes,
// INVALID_ARGUMENT for too many elements of the counted field ("calls: at
// most 1000 per DecideRequest, got 2000000"), too many fields in all, or
// bytes that are not a protobuf message.
absl::Status CheckWireShape(google::protobuf::io::ZeroCopyInputStream* in,
                            size_t size,
                            const google::protobuf::Descriptor& type,
                            const MessageBudget& budget);

// `buffer` checked by CheckWireShape, then parsed into `message`.
absl::Status ParseBounded(const grpc::ByteBuffer& buffer,
                          const MessageBudget& budget,
                          google::protobuf::Message* message);
// The same over bytes in memory.
absl::Status ParseBounded(absl::string_view bytes, const MessageBudget& budget,
                          google::protobuf::Message* message);

// `message` serialized into `buffer`; INTERNAL if protobuf refuses it (a
// string that is not valid UTF-8).
absl::Status SerializeToBuffer(const google::protobuf::Message& message,
                               grpc::ByteBuffer* buffer);

}  // namespace sluice::rpc

#endif  // SLUICE_SERVER_RPC_MESSAGE_BOUNDS_H_
