// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_HTTP_REQUEST_COUNTERS_H_
#define SLUICE_SERVER_HTTP_REQUEST_COUNTERS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "server/http/decision_api.h"

namespace sluice::http {

// The HTTP statuses counted one by one: those the API answers, and those
// the HTTP library may answer by itself. Any other is counted as "other",
// so that the label set stays bounded whatever a client sends.
inline constexpr std::array<int, 17> kCountedStatuses = {
    200, 400, 401, 403, 404, 405, 409, 413, 414,
    415, 416, 429, 431, 499, 500, 501, 503};

// Requests answered, by endpoint and HTTP status. Lock-free: one relaxed
// atomic increment per request. Safe for concurrent use.
class RequestCounters {
 public:
  struct Count {
    Endpoint endpoint;
    // The HTTP status, or "other" (see kCountedStatuses).
    std::string code;
    uint64_t count;
  };

  void Add(Endpoint endpoint, int http_status);

  // Every non-zero counter, and a 200 for each endpoint but kUnknown even
  // at zero (so that a rate over it works from the first request on).
  std::vector<Count> Snapshot() const;

 private:
  static constexpr size_t kSlots = kCountedStatuses.size() + 1;  // + other

  std::array<std::array<std::atomic<uint64_t>, kSlots>, kEndpointCount>
      counts_{};
};

}  // namespace sluice::http

#endif  // SLUICE_SERVER_HTTP_REQUEST_COUNTERS_H_
