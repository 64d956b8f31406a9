// SPDX-License-Identifier: Apache-2.0
// Cluster mode against a TLS-only Redis through a stunnel sidecar, end to
// end: hiredis 0.14 speaks no TLS, so sluiced talks plaintext to stunnel on
// loopback and stunnel talks TLS (server verified against a CA, client
// certificate presented) to a real redis-server with --tls-auth-clients.
// The figures print on lines starting with "REDIS_TLS" (grep for them).

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/redis_tls.h"
#include "tests/testing/sluiced_process.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
using testing::SluicedProcess;
using testing::StunnelClient;
using testing::TlsFiles;
using testing::TlsRedisServer;
using testing::WaitFor;

constexpr char kPolicy[] = R"(policies:
  - name: inventory
    rate_limit: { rate: 100, per: 1s, burst: 10, scope: CLUSTER }
)";

// Short ticks keep the test quick: the store counts as down after 3 failed
// ticks (750 ms).
constexpr char kSyncInterval[] = "250ms";

class RedisTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    std::string error;
    ASSERT_TRUE(testing::MakeTlsFiles(dir_.path(), &files_, &error)) << error;
    redis_ = std::make_unique<TlsRedisServer>(dir_.path(), files_);
    ASSERT_TRUE(redis_->Start(&error)) << error;
  }

  void StartStunnel(const std::string& ca_file) {
    stunnel_ = std::make_unique<StunnelClient>(dir_.path(), files_, ca_file,
                                               redis_->port());
    std::string error;
    ASSERT_TRUE(stunnel_->Start(&error)) << error;
  }

  void StartSluiced() {
    std::string error;
    ASSERT_TRUE(sluiced_.Start(
        kPolicy,
        {"--redis=" + stunnel_->address(),
         std::string("--sync-interval=") + kSyncInterval,
         "--replica-id=tls-replica"},
        "", &error))
        << error;
  }

  double Metric(const std::string& name) const { return sluiced_.Metric(name); }
  double GoodTicks() const {
    return Metric("sluice_sync_ticks_total") -
           Metric("sluice_sync_errors_total");
  }
  // sluiced answers Acquire for the cluster-scope policy.
  ::testing::AssertionResult AcquireAllowed() {
    grpc::Status status;
    const v1::AcquireResponse r = sluiced_.Acquire("inventory", &status);
    if (status.ok() && r.verdict() == v1::ALLOW) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << "status " << status.error_message() << ", answer "
           << r.ShortDebugString();
  }

  // The median of sluice_sync_tick_duration_seconds over the next `n`
  // ticks, in ms.
  double MedianTickMs(int n) {
    std::vector<double> ms;
    for (int i = 0; i < n; ++i) {
      EXPECT_TRUE(testing::WaitForSyncTicks({&sluiced_}, 1, absl::Seconds(5)));
      ms.push_back(Metric("sluice_sync_tick_duration_seconds") * 1000);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }

  // Of `n` Acquire calls in a row, how many were allowed; every call must be
  // answered.
  int AllowedOf(int n) {
    int allowed = 0;
    for (int i = 0; i < n; ++i) {
      grpc::Status status;
      const v1::AcquireResponse r = sluiced_.Acquire("inventory", &status);
      EXPECT_TRUE(status.ok()) << status.error_message();
      if (r.verdict() == v1::ALLOW) ++allowed;
    }
    return allowed;
  }

  testing::TempDir dir_{"sluice_redis_tls"};
  TlsFiles files_;
  std::unique_ptr<TlsRedisServer> redis_;
  std::unique_ptr<StunnelClient> stunnel_;
  SluicedProcess sluiced_;
};

TEST_F(RedisTlsTest, SyncsThroughStunnelAndReconnectsAfterItsRestart) {
  // A plaintext client gets nothing from the TLS-only Redis.
  EXPECT_THAT(testing::RunCommand(absl::StrCat("redis-cli -h 127.0.0.1 -p ",
                                               redis_->port(), " PING"))
                  .output,
              ::testing::Not(HasSubstr("PONG")));
  ASSERT_NO_FATAL_FAILURE(StartStunnel(files_.ca_cert));
  const absl::Time started = absl::Now();
  ASSERT_NO_FATAL_FAILURE(StartSluiced());
  const std::optional<absl::Duration> up = WaitFor(
      [&] { return Metric("sluice_store_up") == 1; }, absl::Seconds(15));
  ASSERT_TRUE(up) << sluiced_.Log() << stunnel_->Log();
  // A replica holds no share of a cluster limit until its first call asks
  // for one (granted at the next tick), so the first call may be refused.
  EXPECT_TRUE(WaitFor([&] { return bool(AcquireAllowed()); }, absl::Seconds(5),
                      absl::Milliseconds(50)));
  std::printf("REDIS_TLS store up %.2f s after sluiced started\n",
              absl::ToDoubleSeconds(absl::Now() - started));

  const double tick_ms = MedianTickMs(9);
  std::printf("REDIS_TLS median sync tick over stunnel+TLS: %.2f ms (9 ticks)\n",
              tick_ms);

  // The state is in the TLS Redis, read with redis-cli --tls.
  ASSERT_TRUE(WaitFor(
      [&] {
        return absl::StrContains(redis_->Cli("KEYS 'sluice:{inventory}:*'"),
                                 "sluice:{inventory}:");
      },
      absl::Seconds(5)));
  EXPECT_THAT(redis_->Cli("ZRANGE 'sluice:{config}:replicas' 0 -1"),
              HasSubstr("tls-replica"));
  EXPECT_THAT(stunnel_->Log(), HasSubstr("Certificate accepted"));

  // stunnel restarted at once (a container restart): the next ticks fail
  // until sluiced has reconnected.
  const double errors_before = Metric("sluice_sync_errors_total");
  ASSERT_TRUE(stunnel_->Stop());
  std::string error;
  ASSERT_TRUE(stunnel_->Start(&error)) << error;
  const absl::Time back = absl::Now();
  // The first tick after the restart fails on the connection stunnel
  // closed; then sluiced reconnects (backoff from 100 ms) and syncs.
  ASSERT_TRUE(WaitFor(
      [&] { return Metric("sluice_sync_errors_total") > errors_before; },
      absl::Seconds(5)))
      << sluiced_.Log();
  const double good = GoodTicks();
  ASSERT_TRUE(WaitFor([&] { return GoodTicks() > good; }, absl::Seconds(15),
                      absl::Milliseconds(20)))
      << sluiced_.Log();
  const absl::Duration resynced = absl::Now() - back;
  std::printf("REDIS_TLS stunnel restarted at once: first good tick %.2f s "
              "after it was back (%.0f failed ticks, store_up %.0f)\n",
              absl::ToDoubleSeconds(resynced),
              Metric("sluice_sync_errors_total") - errors_before,
              Metric("sluice_store_up"));

  // stunnel down for longer than the grace period: store down, fail open.
  const absl::Time stopped = absl::Now();
  ASSERT_TRUE(stunnel_->Stop());
  const std::optional<absl::Duration> down = WaitFor(
      [&] { return Metric("sluice_store_up") == 0; }, absl::Seconds(15));
  ASSERT_TRUE(down) << sluiced_.Log();
  const double down_after = absl::ToDoubleSeconds(absl::Now() - stopped);
  // Fail open: the cluster limit (burst 10) is not enforced meanwhile.
  EXPECT_EQ(AllowedOf(30), 30);
  // A longer outage, as a crash-looping stunnel gives: sluiced's reconnect
  // backoff reaches its 1 s cap, which bounds the time to recover.
  absl::SleepFor(absl::Seconds(2));
  ASSERT_TRUE(stunnel_->Start(&error)) << error;
  const std::optional<absl::Duration> up_again = WaitFor(
      [&] { return Metric("sluice_store_up") == 1; }, absl::Seconds(15));
  ASSERT_TRUE(up_again) << sluiced_.Log();
  std::printf("REDIS_TLS stunnel down: store_up 0 after %.2f s; stunnel "
              "back after %.2f s down: store_up 1 again after %.2f s\n",
              down_after, absl::ToDoubleSeconds(absl::Now() - stopped) -
                              absl::ToDoubleSeconds(*up_again),
              absl::ToDoubleSeconds(*up_again));
  // Limiting again: 30 calls at once exceed the burst of 10 (the admits of
  // the outage are charged too, so possibly none pass).
  ASSERT_TRUE(testing::WaitForSyncTicks({&sluiced_}, 2, absl::Seconds(5)));
  EXPECT_LT(AllowedOf(30), 30);
  EXPECT_THAT(sluiced_.Log(), HasSubstr(stunnel_->address()));
}

TEST_F(RedisTlsTest, WrongCaFailsTheTicksAndSluicedFailsOpen) {
  // stunnel trusts a CA that did not sign the Redis certificate.
  ASSERT_NO_FATAL_FAILURE(StartStunnel(files_.other_ca_cert));
  ASSERT_NO_FATAL_FAILURE(StartSluiced());
  ASSERT_TRUE(WaitFor(
      [&] { return Metric("sluice_sync_errors_total") >= 4; },
      absl::Seconds(15)))
      << sluiced_.Log();
  EXPECT_EQ(Metric("sluice_store_up"), 0);
  EXPECT_EQ(GoodTicks(), 0);
  // Fail open (on_store_failure defaults to FAIL_OPEN): Acquire is answered,
  // and the cluster limit is not enforced while the store is down.
  const int allowed = AllowedOf(50);
  EXPECT_EQ(allowed, 50);
  EXPECT_THAT(stunnel_->Log(), HasSubstr("certificate verify failed"));
  // Nothing reached Redis.
  EXPECT_EQ(redis_->Cli("DBSIZE"), "0");
  // What the operator sees: the store error names the stunnel address.
  const std::string log = sluiced_.Log();
  EXPECT_THAT(log, HasSubstr(stunnel_->address()));
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StrContains(line, "[error]")) {
      std::printf("REDIS_TLS wrong CA, sluiced logs: %s\n",
                  std::string(line).c_str());
      break;
    }
  }
  std::printf("REDIS_TLS wrong CA: %.0f ticks, all failed; store_up %.0f; "
              "%d of 50 Acquire allowed\n",
              Metric("sluice_sync_ticks_total"), Metric("sluice_store_up"),
              allowed);
}

// The baseline for the tick figure above: the same sluiced and policy
// against a plain redis-server, no stunnel.
TEST_F(RedisTlsTest, PlainRedisTickBaseline) {
  testing::RedisServer plain;
  ASSERT_TRUE(plain.Start());
  std::string error;
  ASSERT_TRUE(sluiced_.Start(
      kPolicy,
      {"--redis=" + plain.address(),
       std::string("--sync-interval=") + kSyncInterval,
       "--replica-id=plain-replica"},
      "", &error))
      << error;
  ASSERT_TRUE(WaitFor([&] { return Metric("sluice_store_up") == 1; },
                      absl::Seconds(15)))
      << sluiced_.Log();
  std::printf("REDIS_TLS median sync tick, plain Redis (baseline): %.2f ms "
              "(9 ticks)\n",
              MedianTickMs(9));
}

}  // namespace
}  // namespace sluice
