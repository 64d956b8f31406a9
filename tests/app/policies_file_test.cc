// SPDX-License-Identifier: Apache-2.0
// The policies file as sluiced loads, reloads and checks it: a temp dir, a
// fake clock, no server.
#include "server/app/policies_file.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/app/mode.h"
#include "server/core/engine.h"
#include "server/policy/policy_store.h"
#include "server/rpc/admin_events.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/stats_recorder.h"
#include "tests/testing/temp_dir.h"

namespace sluice::app {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

std::string RatePolicy(const std::string& rate) {
  return "policies:\n"
         "  - name: inventory\n"
         "    rate_limit:\n"
         "      rate: " +
         rate + "\n";
}

class PoliciesFileTest : public ::testing::Test {
 protected:
  PoliciesFileTest() {
    options_.policies_path = dir_.File("policies.yaml");
    // The watcher's own thread never polls during a test; PollOnce does.
    options_.policies_poll_interval = absl::Hours(1);
  }

  double Rate() {
    absl::StatusOr<v1::Policy> policy = store_.Get("inventory");
    return policy.ok() ? policy->rate_limit().rate() : -1;
  }

  testing::TempDir dir_{"policies_file_test"};
  ServerOptions options_;
  testing::FakeClock clock_;
  core::Engine engine_{&clock_, core::Engine::Options()};
  policy::PolicyStore store_{&engine_};
  rpc::EventHub events_{rpc::EventHub::Options()};
};

TEST_F(PoliciesFileTest, BadReloadCountsAnErrorAndKeepsThePreviousPolicies) {
  Write(options_.policies_path, RatePolicy("100"));
  absl::StatusOr<LoadedPolicies> loaded =
      InstallStartupPolicies(options_, &store_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::unique_ptr<Mode> mode =
      MakeMode(options_, &clock_, nullptr, "test", /*sync_thread=*/false);
  ASSERT_TRUE(
      mode->Start({&engine_, &store_, &events_, nullptr}, loaded->policies)
          .ok());
  PolicyReloads reloads;
  std::unique_ptr<base::FileWatcher> watcher =
      WatchPoliciesFile(options_, loaded->contents, mode.get(), &reloads);
  ASSERT_NE(watcher, nullptr);

  // An invalid file: counted as an error, the policies in force unchanged.
  Write(options_.policies_path, RatePolicy("-5"));
  watcher->PollOnce();
  PolicyReloads::Stats stats = reloads.stats();
  EXPECT_EQ(stats.ok, 0u);
  EXPECT_EQ(stats.error, 1u);
  EXPECT_TRUE(stats.last_failed);
  EXPECT_EQ(Rate(), 100);

  // A good one: counted ok, in force, and the error is behind.
  Write(options_.policies_path, RatePolicy("200"));
  watcher->PollOnce();
  stats = reloads.stats();
  EXPECT_EQ(stats.ok, 1u);
  EXPECT_EQ(stats.error, 1u);
  EXPECT_FALSE(stats.last_failed);
  EXPECT_EQ(Rate(), 200);

  // An unreadable file is a failed reload too.
  std::remove(options_.policies_path.c_str());
  watcher->PollOnce();
  stats = reloads.stats();
  EXPECT_EQ(stats.error, 2u);
  EXPECT_TRUE(stats.last_failed);
  EXPECT_EQ(Rate(), 200);
  // Its metrics are its stats().
  testing::StatsRecorder metrics(reloads);
  EXPECT_EQ(metrics.Sum("sluice_policy_reloads_total", {{"result", "ok"}}), 1);
  EXPECT_EQ(metrics.Sum("sluice_policy_reloads_total", {{"result", "error"}}),
            2);
  EXPECT_EQ(metrics.Sum("sluice_policy_reload_last_error"), 1);
  watcher->Stop();
  mode->Stop();
}

TEST_F(PoliciesFileTest, InstallErrorNamesTheFieldsLine) {
  absl::StatusOr<std::vector<policy::PolicyChange>> changes =
      InstallPoliciesFile("p.yaml", RatePolicy("-5"), &store_);
  ASSERT_FALSE(changes.ok());
  EXPECT_EQ(changes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(changes.status().message()),
              StartsWith("p.yaml:4: policy \"inventory\": rate_limit.rate "
                         "must be > 0"));
  EXPECT_EQ(store_.size(), 0u);
}

TEST_F(PoliciesFileTest, CheckReportsEveryInvalidPolicyAtItsLine) {
  const std::string path = dir_.File("check.yaml");
  Write(path,
        "policies:\n"
        "  - name: a\n"
        "    concurrency: { max_in_flight: 0 }\n"
        "  - name: b\n"
        "    rate_limit: { rate: 10 }\n"
        "  - name: c\n"
        "    breaker:\n"
        "      window: 10s\n");
  const PoliciesFileCheck check = CheckPoliciesFile(path);
  EXPECT_EQ(check.policies, 3u);
  EXPECT_THAT(check.errors,
              ElementsAre(StartsWith(path + ":3: policy \"a\": "
                                            "concurrency.max_in_flight"),
                          StartsWith(path + ":7: policy \"c\": breaker "
                                            "needs")));

  Write(path, RatePolicy("10"));
  const PoliciesFileCheck valid = CheckPoliciesFile(path);
  EXPECT_TRUE(valid.errors.empty());
  EXPECT_EQ(valid.policies, 1u);
}

TEST_F(PoliciesFileTest, CheckPointsAtTheSecondClaimOfAnEnvoyDescriptor) {
  const std::string path = dir_.File("check.yaml");
  Write(path,
        "policies:\n"
        "  - name: a\n"
        "    rate_limit: { rate: 10 }\n"
        "    envoy_descriptors:\n"
        "      - { domain: edge, entries: [{ key: k, value: v }] }\n"
        "  - name: b\n"
        "    rate_limit: { rate: 10 }\n"
        "    envoy_descriptors:\n"
        "      - { domain: edge, entries: [{ key: k, value: w }] }\n"
        "      - { domain: edge, entries: [{ key: k, value: v }] }\n");
  const PoliciesFileCheck check = CheckPoliciesFile(path);
  ASSERT_EQ(check.errors.size(), 1u);
  EXPECT_THAT(check.errors[0], StartsWith(path + ":10: policies \"a\" and "
                                                 "\"b\" both answer"));
}

TEST_F(PoliciesFileTest, CheckRefusesWhatIsNotARegularFile) {
  const PoliciesFileCheck check = CheckPoliciesFile(dir_.path());
  ASSERT_EQ(check.errors.size(), 1u);
  EXPECT_THAT(check.errors[0], StartsWith(dir_.path() + ": "));
  EXPECT_THAT(check.errors[0], HasSubstr("not a regular file"));
}

}  // namespace
}  // namespace sluice::app
