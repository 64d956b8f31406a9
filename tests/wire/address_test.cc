// SPDX-License-Identifier: Apache-2.0
#include "wire/address.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::wire {
namespace {

using ::testing::HasSubstr;

TEST(HostPortTest, ParsesNamesIpv4AndBracketedIpv6) {
  absl::StatusOr<HostPort> a = ParseHostPort("redis.ns:6380");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "redis.ns");
  EXPECT_EQ(a->port, 6380);
  a = ParseHostPort("127.0.0.1:0");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->port, 0);
  a = ParseHostPort("[::1]:50051");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "[::1]");
  EXPECT_EQ(a->port, 50051);
  EXPECT_EQ(FormatHostPort(*a), "[::1]:50051");
  EXPECT_EQ(ParseHostPort("h:65535")->port, 65535);
}

TEST(HostPortTest, DefaultPortOnlyWhenGiven) {
  EXPECT_EQ(ParseHostPort("redis.ns", 6379)->port, 6379);
  EXPECT_EQ(ParseHostPort("[::1]", 6379)->host, "[::1]");
  EXPECT_THAT(ParseHostPort("nowhere").status().message(),
              HasSubstr("expected HOST:PORT, got \"nowhere\""));
}

TEST(HostPortTest, RejectsWithTheRuleBroken) {
  EXPECT_THAT(ParseHostPort(":6379").status().message(),
              HasSubstr("expected HOST:PORT"));
  EXPECT_THAT(ParseHostPort("").status().message(),
              HasSubstr("expected HOST:PORT"));
  EXPECT_THAT(ParseHostPort("::1:80").status().message(),
              HasSubstr("IPv6 hosts go in brackets"));
  for (const char* bad : {"host:http", "host:70000", "host:65536", "host:-1",
                          "host:", "host:+80", "host: 80", "[::1]:x"}) {
    EXPECT_THAT(ParseHostPort(bad).status().message(),
                HasSubstr("port must be a number in [0, 65535]"))
        << bad;
  }
  for (const char* bad : {"[]:80", "[::1", "[::1]80"}) {
    EXPECT_EQ(ParseHostPort(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(EndpointTest, TcpIsHostPort) {
  absl::StatusOr<Endpoint> e = ParseEndpoint("127.0.0.1:50051");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_FALSE(e->is_unix());
  EXPECT_EQ(e->tcp.port, 50051);
  EXPECT_EQ(FormatEndpoint(*e), "127.0.0.1:50051");
  EXPECT_THAT(ParseEndpoint("nowhere").status().message(),
              HasSubstr("expected HOST:PORT"));
}

TEST(EndpointTest, UnixPathsAbsoluteRelativeAndUriForm) {
  absl::StatusOr<Endpoint> e = ParseEndpoint("unix:/run/sluice/sluice.sock");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(e->is_unix());
  EXPECT_EQ(e->unix_path, "/run/sluice/sluice.sock");
  EXPECT_EQ(FormatEndpoint(*e), "unix:/run/sluice/sluice.sock");
  EXPECT_EQ(ParseEndpoint("unix:sluice.sock")->unix_path, "sluice.sock");
  EXPECT_EQ(ParseEndpoint("unix:///run/s.sock")->unix_path, "/run/s.sock");
}

TEST(EndpointTest, RejectsUnixPathsTheKernelCannotBind) {
  EXPECT_THAT(ParseEndpoint("unix:").status().message(),
              HasSubstr("unix socket path is empty"));
  EXPECT_THAT(ParseEndpoint("unix://").status().message(),
              HasSubstr("unix:// takes an absolute path"));
  EXPECT_THAT(ParseEndpoint("unix://host/x.sock").status().message(),
              HasSubstr("unix:// takes an absolute path"));
  EXPECT_THAT(ParseEndpoint(std::string("unix:/a\0b", 10)).status().message(),
              HasSubstr("NUL"));
  const std::string longest = "/" + std::string(kMaxUnixSocketPathBytes - 1, 'a');
  EXPECT_TRUE(ParseEndpoint("unix:" + longest).ok());
  EXPECT_THAT(ParseEndpoint("unix:" + longest + "a").status().message(),
              HasSubstr("longer than 107 bytes"));
  for (const char* uri_syntax : {"unix:/run/a%20b.sock", "unix:/run/a?b",
                                 "unix:/run/a#b"}) {
    EXPECT_THAT(ParseEndpoint(uri_syntax).status().message(),
                HasSubstr("must not contain %, ? or #"))
        << uri_syntax;
  }
  EXPECT_THAT(ParseEndpoint("unix-abstract:sluice").status().message(),
              HasSubstr("abstract Unix sockets are not supported"));
}

}  // namespace
}  // namespace sluice::wire
