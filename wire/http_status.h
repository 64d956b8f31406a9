// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_WIRE_HTTP_STATUS_H_
#define SLUICE_WIRE_HTTP_STATUS_H_

// The HTTP status a gateway answers for a refusal.
//
// The server decides it: the core's rule (core::RefusalHttpStatus: 429 when
// the caller went over a rate or concurrency limit, 503 for every other
// refusal) fills Decision::http_status, and AcquireResponse.http_status
// carries it to the gateway. A client never re-derives it from the reason.
//
// A refusal the client makes itself has no limit behind it: Sluice is
// unreachable and the policy fails closed, or a reply came without a status.
// Those answer kClientRefusalHttpStatus. A refusal a client's lease makes
// (the tokens Sluice lent it are spent) is a rate-limit refusal like the
// server's: kLeaseRefusalHttpStatus.

namespace sluice::wire {

inline constexpr int kClientRefusalHttpStatus = 503;
inline constexpr int kLeaseRefusalHttpStatus = 429;

}  // namespace sluice::wire

#endif  // SLUICE_WIRE_HTTP_STATUS_H_
