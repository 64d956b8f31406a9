// SPDX-License-Identifier: Apache-2.0
// StateFileKeeper between two engines on fake clocks: what one engine
// learned is where the next one starts, a policy that changed or went is
// reported and left cold, a bad file leaves the engine cold, and write
// failures are counted.

#include "server/app/state_keeper.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/manual_env.h"
#include "tests/testing/stats_recorder.h"
#include "tests/testing/temp_dir.h"

namespace sluice::app {
namespace {

using core::BreakerState;
using core::Engine;
using core::Outcome;
using core::PolicyConfig;
using core::Verdict;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::Duration kLatency = absl::Milliseconds(5);

PolicyConfig Adaptive(const std::string& name, uint64_t digest = 11) {
  PolicyConfig p;
  p.name = name;
  p.digest = digest;
  core::AdaptiveConcurrencyConfig a;
  a.min_limit = 1;
  a.max_limit = 100;
  a.initial_limit = 5;
  p.adaptive_concurrency = a;
  return p;
}

PolicyConfig Breaker(const std::string& name, uint64_t digest = 22) {
  PolicyConfig p;
  p.name = name;
  p.digest = digest;
  core::BreakerConfig b;
  b.consecutive_failures = 3;
  b.open_duration = absl::Seconds(60);
  p.breaker = b;
  return p;
}

Engine::Options Options() {
  Engine::Options o;
  o.permit_id_seed = 1;
  return o;
}

uint32_t LimitOf(Engine& engine, const std::string& dep) {
  absl::StatusOr<core::LivePolicyStatus> s = engine.Inspect(dep);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok() || !s->gates->adaptive_limit) return 0;
  return s->gates->adaptive_limit->limit;
}

// Calls admitted at once, none reported: the limit in force. Gives them
// back as CANCELLED, which the limit does not judge.
int AdmittedAtOnce(Engine& engine, const std::string& dep) {
  std::vector<core::PermitId> ids;
  while (ids.size() < 1000) {
    absl::StatusOr<core::Decision> d = engine.Acquire(dep, "", 1);
    if (!d.ok() || d->verdict != Verdict::kAllow) break;
    ids.push_back(d->permit_id);
  }
  for (const core::PermitId& id : ids) {
    engine.Report(dep, "", id, Outcome::kCancelled, kLatency);
  }
  return static_cast<int>(ids.size());
}

// `windows` windows in which the limit is reached and every call takes the
// same time: each one steps the limit up.
void Grow(Engine& engine, testing::FakeClock& clock, const std::string& dep,
          int windows) {
  for (int w = 0; w < windows; ++w) {
    for (int round = 0; round < 4; ++round) {
      std::vector<core::PermitId> ids;
      while (true) {
        absl::StatusOr<core::Decision> d = engine.Acquire(dep, "", 1);
        ASSERT_TRUE(d.ok());
        if (d->verdict != Verdict::kAllow) break;
        ids.push_back(d->permit_id);
      }
      for (const core::PermitId& id : ids) {
        engine.Report(dep, "", id, Outcome::kSuccess, kLatency);
      }
    }
    clock.Advance(absl::Seconds(1));
  }
}

void Trip(Engine& engine, const std::string& dep) {
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<core::Decision> d = engine.Acquire(dep, "", 1);
    ASSERT_TRUE(d.ok());
    ASSERT_EQ(d->verdict, Verdict::kAllow);
    engine.Report(dep, "", d->permit_id, Outcome::kFailure, kLatency);
  }
  ASSERT_EQ(engine.PeekBreaker(dep), BreakerState::kOpen);
}

class StateKeeperTest : public ::testing::Test {
 protected:
  StateFileKeeper::Options KeeperOptions() {
    StateFileKeeper::Options o;
    o.path = dir_.File("sluice.state");
    o.interval = absl::Hours(1);
    o.env = &env_;  // the periodic writes run when a test says
    return o;
  }

  testing::TempDir dir_{"state_keeper_test"};
  testing::FakeClock clock_{absl::FromUnixSeconds(1'780'000'000)};
  testing::ManualEnv env_{&clock_};
  Engine before_{&clock_, Options()};
};

TEST_F(StateKeeperTest, RestartStartsFromTheLearnedLimitAndTheOpenBreaker) {
  before_.ReplacePolicies({Adaptive("search"), Breaker("payments")});
  Grow(before_, clock_, "search", 6);
  const uint32_t learned = LimitOf(before_, "search");
  ASSERT_GT(learned, 5u) << "the limit did not grow; nothing to carry over";
  Trip(before_, "payments");
  const absl::Time open_until =
      before_.Inspect("payments")->gates->open_until;
  ASSERT_GT(open_until, clock_.Now());

  StateFileKeeper writer(KeeperOptions(), &before_, &clock_);
  ASSERT_TRUE(writer.SaveNow().ok());
  EXPECT_EQ(writer.stats().writes, 1u);

  // The restart, 5 s later, with the same policies.
  clock_.Advance(absl::Seconds(5));
  Engine after(&clock_, Options());
  after.ReplacePolicies({Adaptive("search"), Breaker("payments")});
  ASSERT_EQ(AdmittedAtOnce(after, "search"), 5);  // cold: the initial limit
  StateFileKeeper reader(KeeperOptions(), &after, &clock_);
  const StateFileKeeper::Restored restored = reader.Restore();
  ASSERT_TRUE(restored.status.ok()) << restored.status;
  EXPECT_EQ(restored.written_at, clock_.Now() - absl::Seconds(5));
  EXPECT_EQ(restored.import.dependencies, 2u);
  EXPECT_TRUE(restored.import.unknown.empty());
  EXPECT_TRUE(restored.import.changed.empty());

  EXPECT_EQ(LimitOf(after, "search"), learned);
  EXPECT_EQ(AdmittedAtOnce(after, "search"), static_cast<int>(learned));
  // Still OPEN, until the same time.
  EXPECT_EQ(after.PeekBreaker("payments"), BreakerState::kOpen);
  EXPECT_EQ(after.Inspect("payments")->gates->open_until, open_until);
  absl::StatusOr<core::Decision> refused = after.Acquire("payments", "", 1);
  ASSERT_TRUE(refused.ok());
  EXPECT_NE(refused->verdict, Verdict::kAllow);
  clock_.SetTime(open_until + absl::Milliseconds(1));
  EXPECT_EQ(after.PeekBreaker("payments"), BreakerState::kHalfOpen);
}

TEST_F(StateKeeperTest, ChangedAndUnknownPoliciesAreReportedAndStayCold) {
  before_.ReplacePolicies({Adaptive("search"), Breaker("payments")});
  Grow(before_, clock_, "search", 6);
  ASSERT_GT(LimitOf(before_, "search"), 5u);
  Trip(before_, "payments");
  StateFileKeeper writer(KeeperOptions(), &before_, &clock_);
  ASSERT_TRUE(writer.SaveNow().ok());

  // "search" was edited (another digest); "payments" is gone; "new" has
  // no saved state.
  Engine after(&clock_, Options());
  after.ReplacePolicies({Adaptive("search", /*digest=*/12), Breaker("new")});
  StateFileKeeper reader(KeeperOptions(), &after, &clock_);
  const StateFileKeeper::Restored restored = reader.Restore();
  ASSERT_TRUE(restored.status.ok()) << restored.status;
  EXPECT_EQ(restored.import.dependencies, 0u);
  EXPECT_THAT(restored.import.changed, ElementsAre("search"));
  EXPECT_THAT(restored.import.unknown, ElementsAre("payments"));
  EXPECT_EQ(LimitOf(after, "search"), 5u);
  EXPECT_EQ(after.PeekBreaker("new"), BreakerState::kClosed);
}

// The log lines of one Restore, captured from spdlog's default logger.
class CapturedLog {
 public:
  CapturedLog()
      : previous_(spdlog::default_logger()),
        sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink_));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::vector<std::string> Lines() {
    spdlog::default_logger()->flush();
    std::vector<std::string> lines;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

// 20,000 unknown policy names and a bad value of every kind: one warning
// per category, never one per entry, and no line longer than a few hundred
// bytes however long the names.
TEST_F(StateKeeperTest, RejectedEntriesLogOneSummaryLineEach) {
  SavedWarmState state;
  state.written_at = clock_.Now();
  for (int i = 0; i < 20000; ++i) {
    core::DependencyWarmState dep;
    dep.name = absl::StrCat("gone-", i, std::string(200, 'x'));
    state.dependencies.push_back(dep);
  }
  core::DependencyWarmState search;
  search.name = "search";
  search.digest = 11;
  for (int i = 0; i < 3; ++i) {
    core::KeyWarmState key;
    key.key = std::string(2000, 'k') + std::to_string(i);
    key.limit = core::AdaptiveLimitState{10, absl::Nanoseconds(1)};
    key.baseline = core::BaselineState{3, 1e308, 0, 1};
    search.keys.push_back(key);
  }
  core::KeyWarmState bad;
  bad.limit = core::AdaptiveLimitState{10, absl::Nanoseconds(1)};
  bad.baseline = core::BaselineState{3, 5e-324, 0, 1};
  core::BreakerRecord breaker;
  breaker.open_until = clock_.Now();
  breaker.open_duration = absl::Seconds(1);
  breaker.cause = std::string(8 << 20, 'c');
  bad.breaker = breaker;
  search.keys.push_back(bad);
  search.keys.push_back(bad);
  state.dependencies.insert(state.dependencies.begin(), search);
  ASSERT_TRUE(
      base::WriteFileAtomically(KeeperOptions().path, *EncodeStateFile(state))
          .ok());

  Engine after(&clock_, Options());
  after.ReplacePolicies({Adaptive("search")});
  StateFileKeeper reader(KeeperOptions(), &after, &clock_);
  CapturedLog log;
  const StateFileKeeper::Restored restored = reader.Restore();
  ASSERT_TRUE(restored.status.ok()) << restored.status;
  const std::vector<std::string> lines = log.Lines();
  EXPECT_LE(lines.size(), 10u);
  for (const std::string& line : lines) EXPECT_LT(line.size(), 1000u) << line;
  const auto count = [&](const std::string& text) {
    return std::count_if(lines.begin(), lines.end(), [&](const auto& l) {
      return l.find(text) != std::string::npos;
    });
  };
  // The cap of dependencies: 10,000 taken, the rest counted.
  EXPECT_EQ(count("10001 dependencies beyond the first 10000"), 1);
  EXPECT_EQ(count("saved state of 9999 dependencies not taken: no policy of that name"),
            1);
  EXPECT_EQ(count("and 9994 more"), 1);
  EXPECT_EQ(count("3 keys over 1024 bytes"), 1);
  EXPECT_EQ(count("2 adaptive limits out of range"), 1);
  EXPECT_EQ(count("2 learned baselines out of range"), 1);
  EXPECT_EQ(count("2 OPEN breakers out of range"), 1);
  EXPECT_EQ(restored.import.dependencies, 1u);
  EXPECT_EQ(LimitOf(after, "search"), 5u);  // nothing plausible to take
}

TEST_F(StateKeeperTest, MissingOrCorruptFileLeavesTheEngineCold) {
  Engine after(&clock_, Options());
  after.ReplacePolicies({Adaptive("search")});
  StateFileKeeper reader(KeeperOptions(), &after, &clock_);
  EXPECT_EQ(reader.Restore().status.code(), absl::StatusCode::kNotFound);

  before_.ReplacePolicies({Adaptive("search")});
  Grow(before_, clock_, "search", 6);
  ASSERT_GT(LimitOf(before_, "search"), 5u);
  StateFileKeeper writer(KeeperOptions(), &before_, &clock_);
  ASSERT_TRUE(writer.SaveNow().ok());
  // One byte of the body changed on disk.
  std::fstream f(KeeperOptions().path,
                 std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(-5, std::ios::end);
  f.put('#');
  f.close();

  const StateFileKeeper::Restored restored = reader.Restore();
  EXPECT_EQ(restored.status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(restored.status.message(), HasSubstr("checksum mismatch"));
  EXPECT_EQ(restored.import.dependencies, 0u);
  EXPECT_EQ(LimitOf(after, "search"), 5u);
}

TEST_F(StateKeeperTest, StopWritesOnceMore) {
  before_.ReplacePolicies({Breaker("payments")});
  StateFileKeeper keeper(KeeperOptions(), &before_, &clock_);
  keeper.Start();
  Trip(before_, "payments");
  keeper.Stop();  // no periodic write ran: only Stop writes
  EXPECT_EQ(keeper.stats().writes, 1u);
  absl::StatusOr<SavedWarmState> saved = ReadStateFile(KeeperOptions().path);
  ASSERT_TRUE(saved.ok()) << saved.status();
  ASSERT_EQ(saved->dependencies.size(), 1u);
  EXPECT_EQ(saved->dependencies[0].name, "payments");
  ASSERT_EQ(saved->dependencies[0].keys.size(), 1u);
  EXPECT_TRUE(saved->dependencies[0].keys[0].breaker.has_value());
}

TEST_F(StateKeeperTest, WritesEveryIntervalUntilStopped) {
  before_.ReplacePolicies({Breaker("payments")});
  StateFileKeeper keeper(KeeperOptions(), &before_, &clock_);
  keeper.Start();
  clock_.Advance(absl::Minutes(59));
  EXPECT_EQ(env_.RunDue(), 0);
  EXPECT_EQ(keeper.stats().writes, 0u);
  clock_.Advance(absl::Minutes(1));
  EXPECT_EQ(env_.RunDue(), 1);
  EXPECT_EQ(keeper.stats().writes, 1u);
  EXPECT_EQ(keeper.stats().last_write, clock_.Now());
  clock_.Advance(absl::Hours(1));
  EXPECT_EQ(env_.RunDue(), 1);
  EXPECT_EQ(keeper.stats().writes, 2u);
  keeper.Stop();
  EXPECT_EQ(keeper.stats().writes, 3u);
  clock_.Advance(absl::Hours(1));
  EXPECT_EQ(env_.RunAll(), 0);
  EXPECT_EQ(keeper.stats().writes, 3u);
}

TEST_F(StateKeeperTest, WriteFailuresAreCountedAndRecover) {
  before_.ReplacePolicies({Breaker("payments")});
  StateFileKeeper::Options options = KeeperOptions();
  options.path = dir_.File("later/sluice.state");
  StateFileKeeper keeper(options, &before_, &clock_);
  EXPECT_FALSE(keeper.SaveNow().ok());
  EXPECT_FALSE(keeper.SaveNow().ok());
  StateFileKeeper::Stats stats = keeper.stats();
  EXPECT_EQ(stats.failures, 2u);
  EXPECT_EQ(stats.writes, 0u);
  EXPECT_THAT(stats.last_error, HasSubstr(options.path + ".tmp"));

  std::filesystem::create_directory(dir_.File("later"));
  EXPECT_TRUE(keeper.SaveNow().ok());
  stats = keeper.stats();
  EXPECT_EQ(stats.writes, 1u);
  EXPECT_EQ(stats.failures, 2u);
  EXPECT_EQ(stats.last_write, clock_.Now());
  EXPECT_TRUE(ReadStateFile(options.path).ok());
}

// Its metrics are stats(): writes by result and the time of the last good
// one, 0 before the first.
TEST_F(StateKeeperTest, StatsAreItsMetrics) {
  before_.ReplacePolicies({Breaker("payments")});
  StateFileKeeper::Options options = KeeperOptions();
  options.path = dir_.File("later/sluice.state");
  StateFileKeeper keeper(options, &before_, &clock_);
  using sluice::testing::StatsRecorder;
  const std::string writes = "sluice_state_file_writes_total";
  const std::string last = "sluice_state_file_last_write_timestamp_seconds";
  StatsRecorder fresh(keeper);
  EXPECT_EQ(fresh.Find(writes).size(), 2u);
  EXPECT_EQ(fresh.Sum(writes), 0);
  EXPECT_EQ(fresh.Find(last).size(), 1u);
  EXPECT_EQ(fresh.Sum(last), 0);

  EXPECT_FALSE(keeper.SaveNow().ok());
  std::filesystem::create_directory(dir_.File("later"));
  EXPECT_TRUE(keeper.SaveNow().ok());
  StatsRecorder after(keeper);
  EXPECT_EQ(after.Sum(writes, {{"result", "ok"}}), 1);
  EXPECT_EQ(after.Sum(writes, {{"result", "error"}}), 1);
  EXPECT_EQ(after.Sum(last), absl::ToUnixSeconds(clock_.Now()));
}

}  // namespace
}  // namespace sluice::app
