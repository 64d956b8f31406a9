// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_RLS_RLS_TEST_UTIL_H_
#define SLUICE_TESTS_RLS_RLS_TEST_UTIL_H_

// What the rate-limit service tests share: building RLS requests and
// reading the headers of an answer.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.pb.h"

namespace sluice::rls_test {

// The key/value entries of one descriptor.
using Entries = std::vector<std::pair<std::string, std::string>>;

// A request in `domain` with one descriptor per element of `descriptors`.
inline envoy::service::ratelimit::v3::RateLimitRequest Request(
    const std::string& domain, const std::vector<Entries>& descriptors,
    uint32_t hits_addend = 0) {
  envoy::service::ratelimit::v3::RateLimitRequest request;
  request.set_domain(domain);
  request.set_hits_addend(hits_addend);
  for (const Entries& entries : descriptors) {
    auto* d = request.add_descriptors();
    for (const auto& [key, value] : entries) {
      auto* e = d->add_entries();
      e->set_key(key);
      e->set_value(value);
    }
  }
  return request;
}

// response_headers_to_add as (name, value) pairs.
inline std::vector<std::pair<std::string, std::string>> Headers(
    const envoy::service::ratelimit::v3::RateLimitResponse& r) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& h : r.response_headers_to_add()) {
    out.emplace_back(h.key(), h.value());
  }
  return out;
}

}  // namespace sluice::rls_test

#endif  // SLUICE_TESTS_RLS_RLS_TEST_UTIL_H_
