// SPDX-License-Identifier: Apache-2.0
// sluice-call end to end against a real standalone sluiced: health,
// acquire, report, where flags may go, and its exit codes (0 ok, 1 RPC error
// or not SERVING, 2 usage).

#include <regex>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/redis_server.h"  // FreePort
#include "tests/testing/sluiced_process.h"

namespace sluice {
namespace {

using ::testing::AllOf;
using testing::CommandResult;
using ::testing::HasSubstr;
using testing::RunCommand;
using testing::SluicedProcess;

constexpr char kPolicies[] = R"(policies:
  - name: inventory
    rate_limit: { rate: 100, burst: 150 }
    breaker: { consecutive_failures: 5 }
)";

class SluiceCallTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    ASSERT_TRUE(server_.Start(kPolicies, {}, "", &error)) << error;
  }
  void TearDown() override {
    EXPECT_EQ(server_.Terminate(), 0) << server_.Log();
  }

  std::string Target() const {
    return absl::StrCat("127.0.0.1:", server_.port());
  }
  CommandResult Call(const std::string& args) {
    return RunCommand(absl::StrCat(testing::kSluiceCallPath, " --target ",
                                   Target(), " ", args));
  }

  SluicedProcess server_;
};

TEST_F(SluiceCallTest, HealthAcquireReport) {
  CommandResult r = Call("health");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("SERVING"));

  r = Call("acquire inventory --key tenant-1 --permits 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("verdict:        ALLOW"),
                              HasSubstr("remaining:      148")));
  std::smatch permit;
  const std::string output = r.output;
  ASSERT_TRUE(
      std::regex_search(output, permit, std::regex("permit_id: +([0-9a-f]+)")))
      << r.output;

  r = Call(absl::StrCat("report inventory ", permit[1].str(),
                        " success --latency=120ms --status-code 200"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("breaker_state:  CLOSED"));

  // Flags may come before the command; "--key=" is an empty key.
  r = RunCommand(absl::StrCat(testing::kSluiceCallPath,
                              " --key=tenant-2 --target=", Target(),
                              " acquire inventory"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Call("acquire inventory --key=").exit_code, 0);

  // SLUICE_TARGET is the default target.
  r = RunCommand(absl::StrCat("SLUICE_TARGET=", Target(), " ",
                              testing::kSluiceCallPath, " health"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(SluiceCallTest, ExitCodes) {
  // 1: the RPC failed.
  CommandResult r = Call("health no.such.Service");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("error: NOT_FOUND"));
  r = RunCommand(absl::StrCat(testing::kSluiceCallPath, " --target 127.0.0.1:",
                              testing::FreePort(), " --deadline 2s health"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("error: UNAVAILABLE"));

  // 2: usage, with the usage text.
  for (const char* args :
       {"", "frobnicate", "acquire", "acquire inventory --permits many",
        "acquire inventory --latency 1s", "report inventory 1 sideways",
        "report inventory 1", "health --key k", "health a b",
        "--deadline 0s health", "--target"}) {
    r = Call(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr("Usage:")) << args;
  }

  // 0: help, on stdout.
  for (const char* args : {"--help", "-h", "help", "acquire --help"}) {
    r = RunCommand(absl::StrCat(testing::kSluiceCallPath, " ", args));
    EXPECT_EQ(r.exit_code, 0) << args;
    EXPECT_THAT(r.output, HasSubstr("Exit codes")) << args;
  }
}

// A sidecar's shape: sluiced on Unix sockets only, reached by sluice-call
// and sluicectl through unix: targets. The sockets are gone after SIGTERM,
// and a socket a SIGKILL left behind does not stop the next start.
TEST(UnixSocketTargetTest, SluiceCallAndSluicectlReachTheSockets) {
  SluicedProcess server;
  const std::string data = server.dir() + "/sluice.sock";
  const std::string admin = server.dir() + "/admin.sock";
  server.set_listen("unix:" + data, "unix:" + admin);
  std::string error;
  ASSERT_TRUE(server.Start(kPolicies, {}, "", &error)) << error;
  EXPECT_EQ(server.target(), "unix:" + data);
  EXPECT_EQ(server.admin_target(), "unix:" + admin);

  CommandResult r = RunCommand(absl::StrCat(
      testing::kSluiceCallPath, " --target unix:", data, " health"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("SERVING"));
  r = RunCommand(absl::StrCat(testing::kSluiceCallPath, " --target unix:", data,
                              " acquire inventory"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("verdict:        ALLOW"));
  r = RunCommand(
      absl::StrCat(testing::kSluicectlPath, " --target unix:", admin, " list"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("inventory"));

  // SIGKILL leaves both sockets; the next start removes them as stale.
  server.Kill();
  EXPECT_EQ(RunCommand("test -S " + data).exit_code, 0);
  ASSERT_TRUE(server.Start(kPolicies, {}, "", &error)) << error;
  EXPECT_THAT(server.Log(), HasSubstr("removed the stale socket " + data));
  r = RunCommand(absl::StrCat(testing::kSluiceCallPath, " --target unix:", data,
                              " health"));
  EXPECT_EQ(r.exit_code, 0) << r.output;

  // A clean exit removes them; a client then fails at once.
  EXPECT_EQ(server.Terminate(), 0) << server.Log();
  EXPECT_NE(RunCommand("test -e " + data).exit_code, 0);
  EXPECT_NE(RunCommand("test -e " + admin).exit_code, 0);
  r = RunCommand(absl::StrCat(testing::kSluiceCallPath, " --target unix:", data,
                              " --deadline 1s health"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
}

}  // namespace
}  // namespace sluice
