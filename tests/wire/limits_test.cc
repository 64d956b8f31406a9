// SPDX-License-Identifier: Apache-2.0
#include "wire/limits.h"

#include <string>

#include "gtest/gtest.h"
#include "wire/http_status.h"

namespace sluice::wire {
namespace {

TEST(LimitsTest, RequestNames) {
  EXPECT_TRUE(ValidateRequestNames("inventory", "").ok());
  EXPECT_EQ(ValidateRequestNames("", "k").message(), "dependency is required");
  EXPECT_TRUE(ValidateRequestNames(std::string(256, 'd'), "").ok());
  EXPECT_EQ(ValidateRequestNames(std::string(257, 'd'), "").message(),
            "dependency must be at most 256 bytes, got 257");
  EXPECT_TRUE(ValidateRequestNames("d", std::string(1024, 'k')).ok());
  EXPECT_EQ(ValidateRequestNames("d", std::string(1025, 'k')).message(),
            "key must be at most 1024 bytes, got 1025");
}

TEST(LimitsTest, NamesNameTheField) {
  EXPECT_TRUE(ValidateName("policy", std::string(kMaxNameBytes, 'p')).ok());
  EXPECT_EQ(ValidateName("policy", "").message(), "policy must be set");
  EXPECT_EQ(ValidateName("replica", std::string(257, 'r')).message(),
            "replica must be at most 256 bytes, got 257");
}

TEST(HttpStatusTest, ClientRefusalsAre503) {
  // Nothing tells a client that refuses on its own that the caller went
  // over a limit, so it never answers 429.
  EXPECT_EQ(kClientRefusalHttpStatus, 503);
}

}  // namespace
}  // namespace sluice::wire
