// SPDX-License-Identifier: Apache-2.0
// The pieces of the Redis connection set-up that need no server: parsing
// --redis-sentinels, classifying errors, reading the password file, and the
// rate-limited failure log.
#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "gtest/gtest.h"
#include "server/cluster/redis_connection.h"
#include "server/cluster/redis_sentinel.h"

namespace sluice::cluster {
namespace {

TEST(ParseSentinelsTest, ParsesAListWithTheSentinelPortByDefault) {
  absl::StatusOr<std::vector<RedisAddress>> s =
      ParseSentinels("a.ns:26380, b.ns ,[::1]:7000");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 3u);
  EXPECT_EQ((*s)[0], (RedisAddress{"a.ns", 26380}));
  EXPECT_EQ((*s)[1], (RedisAddress{"b.ns", 26379}));
  EXPECT_EQ((*s)[2], (RedisAddress{"::1", 7000}));
}

TEST(ParseSentinelsTest, RefusesBadEntriesNamingTheFlag) {
  for (const char* bad : {"", ",", "a:http", "a:0", "a:1,::1:80", ":26379"}) {
    absl::StatusOr<std::vector<RedisAddress>> s = ParseSentinels(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.status().message().find("--redis-sentinels"),
              std::string::npos)
        << s.status();
  }
}

TEST(RedisErrorKindTest, ClassifiesErrorReplies) {
  EXPECT_EQ(RedisReplyErrorKind(
                "WRONGPASS invalid username-password pair or user is "
                "disabled."),
            "auth");
  EXPECT_EQ(RedisReplyErrorKind("NOAUTH Authentication required."), "auth");
  EXPECT_EQ(RedisReplyErrorKind("ERR invalid password"), "auth");
  EXPECT_EQ(RedisReplyErrorKind("ERR Client sent AUTH, but no password is set"),
            "auth");
  EXPECT_EQ(RedisReplyErrorKind(
                "ERR AUTH <password> called without any password configured "
                "for the default user. Are you sure your configuration is "
                "correct?"),
            "auth");
  EXPECT_EQ(RedisReplyErrorKind("NOPERM this user has no permissions to run "
                                "the 'role' command"),
            "auth");
  EXPECT_EQ(RedisReplyErrorKind("READONLY You can't write against a read only "
                                "replica. script: 41d0, on @user_script:1."),
            "readonly");
  EXPECT_EQ(RedisReplyErrorKind("NOSCRIPT No matching script."), "script");
  EXPECT_EQ(RedisReplyErrorKind("ERR Error running script (call to f_1)"),
            "script");
  EXPECT_EQ(RedisReplyErrorKind("ERR DB index is out of range"), "protocol");
}

TEST(RedisErrorKindTest, ClassifiesConnectionErrors) {
  EXPECT_EQ(RedisContextErrorKind(REDIS_ERR_IO, EAGAIN), "timeout");
  EXPECT_EQ(RedisContextErrorKind(REDIS_ERR_IO, ETIMEDOUT), "timeout");
  EXPECT_EQ(RedisContextErrorKind(REDIS_ERR_IO, ECONNREFUSED), "connect");
  EXPECT_EQ(RedisContextErrorKind(REDIS_ERR_EOF, 0), "connect");
  EXPECT_EQ(RedisContextErrorKind(REDIS_ERR_PROTOCOL, 0), "protocol");
}

TEST(ReadPasswordFileTest, StripsTrailingWhitespaceAndRefusesEmptyFiles) {
  char name[] = "/tmp/password_test_XXXXXX";
  const int fd = mkstemp(name);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "p w\r\n \n", 7), 7);
  close(fd);
  EXPECT_EQ(*ReadPasswordFile(name), "p w");
  ASSERT_EQ(truncate(name, 0), 0);
  absl::StatusOr<std::string> empty = ReadPasswordFile(name);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("is empty"), std::string::npos);
  unlink(name);
  absl::StatusOr<std::string> missing = ReadPasswordFile(name);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(name), std::string::npos);
  // A FIFO is refused at once instead of waiting for a writer.
  ASSERT_EQ(mkfifo(name, 0600), 0);
  absl::StatusOr<std::string> fifo = ReadPasswordFile(name);
  unlink(name);
  ASSERT_FALSE(fifo.ok());
  EXPECT_NE(fifo.status().message().find("is a FIFO, not a regular file"),
            std::string::npos);
}

TEST(RedisHealthTest, CountsEveryErrorAndLogsAfterAKindChangeOrAMinute) {
  RedisHealth health;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  health.Error("auth", "refused", t0);
  health.Error("auth", "refused", t0 + absl::Seconds(1));
  health.Error("connect", "refused", t0 + absl::Seconds(2));
  EXPECT_EQ(health.errors().at("auth"), 2u);
  EXPECT_EQ(health.errors().at("connect"), 1u);
  EXPECT_TRUE(health.Recovered());
  EXPECT_FALSE(health.Recovered());
  health.Event("master_changed");
  EXPECT_EQ(health.events().at("master_changed"), 1u);
}

TEST(SentinelLocatorTest, CountsAMoveOnlyWhenTheConfirmedMasterChanges) {
  RedisHealth health;
  SentinelOptions options;
  options.sentinels = {{"127.0.0.1", 1}};
  options.master_name = "m";
  SentinelLocator locator(options, &health);
  EXPECT_EQ(locator.Describe(), "sentinel master \"m\" at (not found yet)");
  const uint64_t first = locator.Confirmed({"10.0.0.1", 6379});
  EXPECT_EQ(locator.Confirmed({"10.0.0.1", 6379}), first);
  EXPECT_EQ(health.events().count("master_changed"), 0u);
  EXPECT_GT(locator.Confirmed({"10.0.0.2", 6379}), first);
  EXPECT_EQ(health.events().at("master_changed"), 1u);
  EXPECT_EQ(locator.Describe(), "sentinel master \"m\" at 10.0.0.2:6379");
}

TEST(SentinelLocatorTest, NoSentinelAnsweringNamesTheFlags) {
  SentinelOptions options;
  options.sentinels = {{"127.0.0.1", 1}};  // nothing listens on port 1
  options.master_name = "m";
  options.timeout = absl::Milliseconds(100);
  SentinelLocator locator(options, nullptr);
  absl::StatusOr<RedisAddress> master = locator.Locate(absl::Now());
  ASSERT_FALSE(master.ok());
  EXPECT_NE(master.status().message().find("--redis-sentinels"),
            std::string::npos)
      << master.status();
  EXPECT_NE(master.status().message().find("127.0.0.1:1"), std::string::npos);
}

}  // namespace
}  // namespace sluice::cluster
