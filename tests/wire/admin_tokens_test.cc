// SPDX-License-Identifier: Apache-2.0
// The admin token file's format, which sluiced and sluicectl share.

#include "wire/admin_tokens.h"

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::wire {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(ParseAdminTokensTest, OneTokenALineCommentsAndBlanksSkipped) {
  absl::StatusOr<std::vector<std::string>> tokens = ParseAdminTokens(
      "# rotated 2026-12-01: old first, new last\n"
      "\n"
      "  old-token  \n"
      "\tnew-token\r\n"
      "   # indented comment\n"
      "old-token\n");  // a repeat counts once
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_THAT(*tokens, ElementsAre("old-token", "new-token"));

  // The single-token file of earlier releases still reads the same.
  tokens = ParseAdminTokens("s3cret");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_THAT(*tokens, ElementsAre("s3cret"));
}

TEST(ParseAdminTokensTest, NoTokenIsAnError) {
  for (const char* text : {"", "\n\n", "  \n", "# only a comment\n"}) {
    absl::StatusOr<std::vector<std::string>> tokens = ParseAdminTokens(text);
    ASSERT_FALSE(tokens.ok()) << "'" << text << "'";
    EXPECT_EQ(tokens.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(tokens.status().message(), HasSubstr("no token"));
  }
}

TEST(ParseAdminTokensTest, TokenThatCannotBeAHeaderNamesTheLineNotTheToken) {
  absl::StatusOr<std::vector<std::string>> tokens =
      ParseAdminTokens("good\nsecret-one secret-two\n");
  ASSERT_FALSE(tokens.ok());
  EXPECT_THAT(tokens.status().message(), HasSubstr("line 2"));
  EXPECT_THAT(tokens.status().message(), Not(HasSubstr("secret")));
  EXPECT_FALSE(ParseAdminTokens("t\x01k\n").ok());
  EXPECT_FALSE(ParseAdminTokens("t\xc3\xa9k\n").ok());
}

}  // namespace
}  // namespace sluice::wire
