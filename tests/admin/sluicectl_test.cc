// SPDX-License-Identifier: Apache-2.0
// sluicectl end to end against a real standalone sluiced: apply (diff,
// dry run, CAS), get, list, breaker open, state, watch, and its exit codes
// for an unreachable server, a wrong token and a refused request.

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/sluiced_process.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/wait_for.h"

namespace sluice {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::CommandResult;
using testing::RunCommand;
using testing::SluicedProcess;

constexpr char kToken[] = "ctl-token";

class SluicectlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    ASSERT_TRUE(server_.Start("policies: []\n", {}, kToken, &error)) << error;
  }
  void TearDown() override { EXPECT_EQ(server_.Terminate(), 0) << server_.Log(); }

  CommandResult Ctl(const std::string& args) {
    return RunCommand(absl::StrCat(testing::kSluicectlPath, " --target ",
                                   server_.admin_target(), " --token-file ",
                                   server_.token_path(), " ", args));
  }
  std::string WriteYaml(const std::string& name, const std::string& text) {
    const std::string path = server_.dir() + "/" + name;
    testing::WriteFile(path, text);
    return path;
  }

  SluicedProcess server_;
};

constexpr char kPolicies[] = R"(policies:
  - name: inventory
    rate_limit: { rate: 100, burst: 150 }
    breaker: { consecutive_failures: 5 }
    fallback: { strategy: STATIC, payload: '{"degraded":true}', on: [CIRCUIT_OPEN] }
  - name: search
    concurrency: { max_in_flight: 8 }
)";

TEST_F(SluicectlTest, ApplyGetBreakerStateWatch) {
  const std::string file = WriteYaml("p.yaml", kPolicies);

  // Dry run: a diff, nothing applied.
  CommandResult r = Ctl("apply -f " + file + " --dry-run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("create inventory"),
                              HasSubstr("+   - name: inventory"),
                              HasSubstr("dry run: nothing applied")));
  EXPECT_THAT(Ctl("list").output, Not(HasSubstr("inventory")));

  r = Ctl("apply -f " + file);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("create inventory"),
                              HasSubstr("create search"),
                              HasSubstr("-> version")));
  // Applying the same file again changes nothing.
  r = Ctl("apply -f " + file);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("unchanged inventory"),
                              Not(HasSubstr("-> version"))));

  r = Ctl("list");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("NAME"), HasSubstr("inventory"),
                              HasSubstr("rate 100/1s"), HasSubstr("search")));

  r = Ctl("get inventory");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("name: inventory"),
                              HasSubstr("burst: 150"),
                              HasSubstr("consecutive_failures: 5")));
  r = Ctl("get inventory -o json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("\"name\": \"inventory\""));

  // An edit shows a diff of just the changed line.
  const std::string edited = WriteYaml(
      "edited.yaml", absl::StrReplaceAll(kPolicies, {{"rate: 100,", "rate: 20,"}}));
  r = Ctl("apply -f " + edited);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("update inventory"),
                              HasSubstr("-       rate: 100"),
                              HasSubstr("+       rate: 20")));
  // The same from stdin (kubectl exec ... sluicectl apply -f - < file).
  const std::string piped = WriteYaml(
      "piped.yaml", absl::StrReplaceAll(kPolicies, {{"rate: 100,", "rate: 30,"}}));
  r = Ctl("apply -f - < " + piped);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("-       rate: 20"),
                              HasSubstr("+       rate: 30")));

  // watch in the background, then force the breaker open.
  const std::string watch_out = server_.dir() + "/watch.out";
  std::thread watcher([&] {
    CommandResult w = Ctl("watch inventory --count 2 -o json > " + watch_out);
    EXPECT_EQ(w.exit_code, 0) << w.output;
  });
  // The watch is subscribed once the server counts it.
  ASSERT_TRUE(testing::WaitFor(
      [&] { return server_.Metric("sluice_watchers") == 1; },
      absl::Seconds(5)))
      << "the watch did not subscribe";

  r = Ctl("breaker open inventory --note INC-7");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("FORCED_OPEN"));
  watcher.join();
  const std::string events = testing::ReadFile(watch_out);
  EXPECT_THAT(events, AllOf(HasSubstr("BREAKER_TRANSITION"),
                            HasSubstr("FORCED_OPEN"), HasSubstr("INC-7"),
                            HasSubstr("OVERRIDE_SET")));
  EXPECT_EQ(server_.Acquire("inventory").verdict(), v1::DEGRADE);

  r = Ctl("state inventory");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("FORCED_OPEN"), HasSubstr("standalone"),
                              HasSubstr("1 acquired"), HasSubstr("1 degraded")));
  r = Ctl("state inventory -o json");
  EXPECT_THAT(r.output, HasSubstr("\"breaker_state\": \"FORCED_OPEN\""));

  r = Ctl("breaker auto inventory");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(server_.Acquire("inventory").verdict(), v1::ALLOW);

  r = Ctl("delete search");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(Ctl("list").output, Not(HasSubstr("search")));
}

// The admin token file is rotated while sluiced runs: add the new token,
// move the client, remove the old one; a broken file keeps the last good
// set. Same process throughout.
TEST_F(SluicectlTest, TokenFileRotationWithoutRestart) {
  const pid_t pid = server_.pid();
  const std::string old_file = WriteYaml("old-token", "ctl-token\n");
  const std::string new_file = WriteYaml("new-token", "rotated-token-2\n");
  const auto list_with = [&](const std::string& token_file) {
    return RunCommand(absl::StrCat(testing::kSluicectlPath, " --target ",
                                   server_.admin_target(), " --token-file ",
                                   token_file, " list"))
        .exit_code;
  };
  const auto reloads = [&](const std::string& result) {
    return server_.Metric(absl::StrCat(
        "sluice_admin_token_reloads_total{result=\"", result, "\"}"));
  };
  ASSERT_EQ(list_with(old_file), 0);
  ASSERT_EQ(list_with(new_file), 4);
  EXPECT_EQ(reloads("ok"), 0);

  // Step 1: both tokens valid (written by rename, as a Secret update is).
  testing::WriteFile(server_.token_path(),
                     "# rotation: new token added\nctl-token\nrotated-token-2\n");
  const std::optional<absl::Duration> added = testing::WaitFor(
      [&] { return list_with(new_file) == 0; }, absl::Seconds(10),
      absl::Milliseconds(100));
  ASSERT_TRUE(added) << server_.Log();
  std::printf("TOKEN_ROTATION new token accepted after %.2f s\n",
              absl::ToDoubleSeconds(*added));
  EXPECT_EQ(list_with(old_file), 0);
  EXPECT_EQ(reloads("ok"), 1);
  // sluicectl pointed at the server's own file sends its last token.
  EXPECT_EQ(Ctl("list").exit_code, 0);

  // Step 2: the old token removed, rewritten in place this time.
  {
    std::ofstream out(server_.token_path(), std::ios::trunc);
    out << "rotated-token-2\n";
  }
  const std::optional<absl::Duration> removed = testing::WaitFor(
      [&] { return list_with(old_file) == 4; }, absl::Seconds(10),
      absl::Milliseconds(100));
  ASSERT_TRUE(removed) << server_.Log();
  std::printf("TOKEN_ROTATION old token refused after %.2f s\n",
              absl::ToDoubleSeconds(*removed));
  EXPECT_EQ(list_with(new_file), 0);

  // A file left with no token keeps the last good set: no lockout, and the
  // API is not opened either.
  testing::WriteFile(server_.token_path(), "# oops, emptied\n");
  ASSERT_TRUE(testing::WaitFor([&] { return reloads("error") == 1; },
                               absl::Seconds(10)))
      << server_.Log();
  EXPECT_EQ(list_with(new_file), 0);
  EXPECT_EQ(list_with(old_file), 4);
  EXPECT_EQ(RunCommand(absl::StrCat(testing::kSluicectlPath, " --target ",
                                    server_.admin_target(), " list"))
                .exit_code,
            4);
  EXPECT_EQ(reloads("ok"), 2);

  const std::string log = server_.Log();
  EXPECT_THAT(log, HasSubstr("reloaded: 2 token(s) accepted (1 added, 0 removed)"));
  EXPECT_THAT(log, HasSubstr("reloaded: 1 token(s) accepted (0 added, 1 removed)"));
  EXPECT_THAT(log, HasSubstr("still accepting the last good set of 1 token(s)"));
  EXPECT_THAT(log, Not(HasSubstr("rotated-token-2")));
  EXPECT_THAT(log, Not(HasSubstr("ctl-token")));
  // The same process all along: started (and serving admin) once.
  EXPECT_EQ(server_.pid(), pid);
  size_t starts = 0;
  for (size_t at = log.find("serving AdminService"); at != std::string::npos;
       at = log.find("serving AdminService", at + 1)) {
    ++starts;
  }
  EXPECT_EQ(starts, 1u);
}

TEST_F(SluicectlTest, ExitCodesAndErrors) {
  // Refused: an invalid policy names the field and applies nothing.
  const std::string bad = WriteYaml("bad.yaml", R"(policies:
  - name: inventory
    breaker: { failure_rate_threshold: 1.5 }
)");
  CommandResult r = Ctl("apply -f " + bad);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("breaker.failure_rate_threshold"));
  EXPECT_EQ(Ctl("get inventory").exit_code, 1);  // NOT_FOUND
  EXPECT_EQ(Ctl("breaker open nothing").exit_code, 1);

  // Wrong token: 4, with a hint.
  testing::WriteFile(server_.dir() + "/wrong", "nope\n");
  r = RunCommand(absl::StrCat(testing::kSluicectlPath, " --target ",
                              server_.admin_target(), " --token-file ",
                              server_.dir(), "/wrong list"));
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--token-file"));

  // Unreachable: 3, naming the target; SLUICE_ADMIN_TARGET is honoured.
  const int dead = testing::FreePort();
  r = RunCommand(absl::StrCat("SLUICE_ADMIN_TARGET=127.0.0.1:", dead, " ",
                              testing::kSluicectlPath, " list --timeout 2s"));
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("cannot reach"),
                              HasSubstr(absl::StrCat(dead))));

  // The data-plane port is not the admin API.
  r = RunCommand(absl::StrCat(testing::kSluicectlPath,
                              " --target 127.0.0.1:", server_.port(), " list"));
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("does not serve the admin API"));

  // Usage: 2; --help for every command: 0.
  EXPECT_EQ(RunCommand(absl::StrCat(testing::kSluicectlPath, " frobnicate"))
                .exit_code,
            2);
  EXPECT_EQ(Ctl("breaker sideways inventory").exit_code, 2);
  for (const char* command :
       {"list", "get", "apply", "delete", "breaker", "state", "watch"}) {
    r = RunCommand(
        absl::StrCat(testing::kSluicectlPath, " ", command, " --help"));
    EXPECT_EQ(r.exit_code, 0) << command;
    EXPECT_THAT(r.output, HasSubstr(absl::StrCat("Usage: sluicectl ", command)));
  }
  r = RunCommand(absl::StrCat(testing::kSluicectlPath, " --help"));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("Exit codes"));
}


// The command-line rules scripts rely on: flags before or after the command,
// "--flag=" for an empty value, an argument spelled like a command, and
// apply -o json one JSON object per line.
TEST_F(SluicectlTest, CommandLineRules) {
  const std::string file = WriteYaml("p.yaml", kPolicies);
  CommandResult r = Ctl("--dry-run apply -f " + file);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("dry run: nothing applied"));

  r = Ctl("apply --filename=" + file + " -o json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr(R"({"name":"inventory","action":"create","result":"ok","version":)"));

  r = Ctl("state inventory --key=");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = Ctl("--output=json --key tenant-1 state inventory");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("\"dependency\": \"inventory\""));

  // "list" is the policy name here, not a second command.
  r = Ctl("get list");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("policy \"list\" not found"));

  // A flag the command does not take, or an extra argument: usage.
  r = Ctl("list --key tenant-1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("unknown flag --key for list"));
  EXPECT_EQ(Ctl("get inventory search").exit_code, 2);
  EXPECT_EQ(Ctl("watch --count 0").exit_code, 2);
  EXPECT_EQ(Ctl("--timeout").exit_code, 2);
}

}  // namespace
}  // namespace sluice
