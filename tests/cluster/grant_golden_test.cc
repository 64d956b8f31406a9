// SPDX-License-Identifier: Apache-2.0
// The golden cases of the tick protocol's grant arithmetic
// (tests/cluster/golden/grant_cases.txt), run on both of its
// implementations: tick.lua and config.lua in a real redis-server (through
// RedisStore) and the FakeStore the scenario tests use. Every tick of a case
// goes to both at the same store time, and both must answer what the case
// expects and the same as each other.
//
// The redis-server's wall clock is stopped and set by the test (it runs
// with tests/testing/store_clock_shim.cc preloaded), so tick.lua's TIME is
// the case's time to the millisecond, as the FakeStore's FakeClock is.
//
// The file's format is described at its top.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/cluster/redis_store.h"
#include "server/cluster/store.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fake_store.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/temp_dir.h"

namespace sluice::cluster {
namespace {

constexpr char kCasesFile[] = "tests/cluster/golden/grant_cases.txt";
constexpr char kPolicy[] = "golden";
// Bounds on the table, so that a broken file fails loudly.
constexpr int kMinCases = 15;
constexpr int kMaxCases = 100;

// What one tick is expected to answer. Unset fields are not checked.
struct Expect {
  bool refused = false;  // the store refuses the tick as stale (ABORTED)
  std::optional<bool> granted;
  std::optional<core::Units> units;
  std::optional<uint32_t> live_weight;
  std::optional<bool> lost;
  std::optional<absl::Duration> valid_for;
};

// One tick of one replica for one key, and what it must answer.
struct Step {
  int line = 0;
  std::string text;
  int64_t at_ms = 0;
  std::string replica;
  uint64_t incarnation = 0;
  uint64_t sequence = 0;
  uint32_t weight = 1;
  uint32_t live = 1;
  bool leaving = false;
  core::KeyTick key;
  // Expectations of both stores, and where a case marks a known difference,
  // of one store alone ("fake." or "redis." before the field).
  Expect both;
  std::map<std::string, Expect> only;
};

struct GoldenCase {
  std::string name;
  std::string what;
  int line = 0;
  int index = 0;
  bool per_key = false;
  // Whether the case starts on a store that never held the policy (no
  // epoch); otherwise its epoch is older than a stale period (see Settle).
  bool fresh = false;
  absl::Duration stale = absl::Seconds(3);
  std::string known_difference;
  std::vector<Step> steps;
};

// "a" or "a,b" as the two resources (b defaults to 0).
template <typename T>
bool ParsePair(absl::string_view v, std::array<T, core::kClusterResources>* out) {
  const std::vector<absl::string_view> parts = absl::StrSplit(v, ',');
  if (parts.size() > 2) return false;
  *out = {};
  for (size_t i = 0; i < parts.size(); ++i) {
    if constexpr (std::is_same_v<T, double>) {
      if (!absl::SimpleAtod(parts[i], &(*out)[i])) return false;
    } else {
      if (!absl::SimpleAtoi(parts[i], &(*out)[i])) return false;
    }
  }
  return true;
}

bool ParseMs(absl::string_view v, absl::Duration* out) {
  if (v == "inf") {
    *out = absl::InfiniteDuration();
    return true;
  }
  int64_t ms = 0;
  if (!absl::SimpleAtoi(v, &ms) || ms < 0) return false;
  *out = absl::Milliseconds(ms);
  return true;
}

bool ParseBool(absl::string_view v, bool* out) {
  if (v != "0" && v != "1") return false;
  *out = v == "1";
  return true;
}

// An expectation field ("units=3,0", "granted=1", "refused", ...).
bool ParseExpect(absl::string_view field, absl::string_view value,
                 bool has_value, Expect* e) {
  if (field == "refused") {
    e->refused = true;
    return !has_value;
  }
  if (!has_value) return false;
  if (field == "granted") {
    bool b = false;
    if (!ParseBool(value, &b)) return false;
    e->granted = b;
    return true;
  }
  if (field == "lost") {
    bool b = false;
    if (!ParseBool(value, &b)) return false;
    e->lost = b;
    return true;
  }
  if (field == "units") {
    core::Units u{};
    if (!ParsePair(value, &u)) return false;
    e->units = u;
    return true;
  }
  if (field == "live_weight") {
    uint32_t w = 0;
    if (!absl::SimpleAtoi(value, &w)) return false;
    e->live_weight = w;
    return true;
  }
  if (field == "valid_for") {
    absl::Duration d;
    if (!ParseMs(value, &d)) return false;
    e->valid_for = d;
    return true;
  }
  return false;
}

// Parses the table; an error names the line.
absl::StatusOr<std::vector<GoldenCase>> ParseCases(const std::string& text) {
  std::vector<GoldenCase> cases;
  std::set<std::string> names;
  std::string comment;
  // Per replica of the current case: its incarnation and last sequence.
  std::map<std::string, std::pair<uint64_t, uint64_t>> lives;
  int line_no = 0;
  std::istringstream in(text);
  std::string raw;
  auto error = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(kCasesFile, ":", line_no, ": ", why));
  };
  while (std::getline(in, raw)) {
    ++line_no;
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty()) {
      comment.clear();
      continue;
    }
    if (absl::ConsumePrefix(&line, "#")) {
      if (!comment.empty()) comment += " ";
      comment += std::string(absl::StripAsciiWhitespace(line));
      continue;
    }
    std::vector<absl::string_view> words =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words[0] == "case") {
      if (words.size() < 2) return error("a case needs a name");
      GoldenCase c;
      c.name = std::string(words[1]);
      c.what = comment;
      c.line = line_no;
      c.index = static_cast<int>(cases.size());
      if (c.what.empty()) return error("a case needs a comment above it");
      if (!names.insert(c.name).second) return error("case name used twice");
      for (size_t i = 2; i < words.size(); ++i) {
        absl::string_view w = words[i];
        if (w == "per_key") {
          c.per_key = true;
        } else if (w == "fresh") {
          c.fresh = true;
        } else if (absl::ConsumePrefix(&w, "stale=")) {
          if (!ParseMs(w, &c.stale) || c.stale == absl::InfiniteDuration()) {
            return error("stale= takes milliseconds");
          }
        } else {
          return error(absl::StrCat("unknown case option \"", w, "\""));
        }
      }
      cases.push_back(std::move(c));
      if (cases.size() > static_cast<size_t>(kMaxCases)) {
        return error("too many cases");
      }
      lives.clear();
      comment.clear();
      continue;
    }
    if (cases.empty()) return error("a line before the first case");
    GoldenCase& c = cases.back();
    if (words[0] == "known_difference:") {
      c.known_difference = std::string(absl::StripAsciiWhitespace(
          line.substr(std::string("known_difference:").size())));
      if (c.known_difference.empty()) return error("a known difference needs its reason");
      continue;
    }
    if (words[0] != "at" || words.size() < 3) {
      return error("expected \"case NAME\", \"known_difference: WHY\" or "
                   "\"at MS REPLICA ...\"");
    }
    Step s;
    s.line = line_no;
    s.text = std::string(line);
    if (!absl::SimpleAtoi(words[1], &s.at_ms) || s.at_ms < 0 ||
        s.at_ms > 900000) {
      return error("at takes milliseconds in [0, 900000]");
    }
    if (!c.steps.empty() && s.at_ms < c.steps.back().at_ms) {
      return error("ticks go in time order");
    }
    s.replica = std::string(words[2]);
    s.key.key = "k";
    // A replica's first incarnation is 100 + its place in the case.
    auto life = lives.try_emplace(s.replica, 100 + lives.size(), 0).first;
    std::optional<uint64_t> inc, seq;
    bool expecting = false;
    for (size_t i = 3; i < words.size(); ++i) {
      const absl::string_view w = words[i];
      if (w == "->") {
        if (expecting) return error("one \"->\" a tick");
        expecting = true;
        continue;
      }
      const size_t eq = w.find('=');
      const bool has_value = eq != absl::string_view::npos;
      absl::string_view field = w.substr(0, eq);
      const absl::string_view value =
          has_value ? w.substr(eq + 1) : absl::string_view();
      bool ok = true;
      if (expecting) {
        Expect* e = &s.both;
        for (const char* store : {"fake", "redis"}) {
          if (absl::ConsumePrefix(&field, absl::StrCat(store, "."))) {
            if (c.known_difference.empty()) {
              return error("an expectation of one store alone needs a "
                           "known_difference: line in its case");
            }
            e = &s.only[store];
          }
        }
        ok = ParseExpect(field, value, has_value, e);
      } else if (field == "leaving") {
        s.leaving = true;
        ok = !has_value;
      } else if (!has_value) {
        ok = false;
      } else if (field == "live") {
        ok = absl::SimpleAtoi(value, &s.live);
      } else if (field == "weight") {
        ok = absl::SimpleAtoi(value, &s.weight);
      } else if (field == "inc") {
        uint64_t v = 0;
        ok = absl::SimpleAtoi(value, &v);
        inc = v;
      } else if (field == "seq") {
        uint64_t v = 0;
        ok = absl::SimpleAtoi(value, &v);
        seq = v;
      } else if (field == "key") {
        s.key.key = std::string(value);
      } else if (field == "limit") {
        ok = ParsePair(value, &s.key.limit);
      } else if (field == "demand") {
        ok = ParsePair(value, &s.key.demand);
      } else if (field == "usage") {
        ok = ParsePair(value, &s.key.usage);
      } else if (field == "applied") {
        ok = ParsePair(value, &s.key.applied);
      } else if (field == "applied_left") {
        ok = ParseMs(value, &s.key.applied_left);
      } else if (field == "usage_left") {
        std::array<int64_t, core::kClusterResources> ms{};
        ok = ParsePair(value, &ms);
        for (int r = 0; r < core::kClusterResources; ++r) {
          s.key.usage_left[r] = absl::Milliseconds(ms[r]);
        }
      } else {
        ok = false;
      }
      if (!ok) return error(absl::StrCat("cannot read \"", w, "\""));
    }
    // A new incarnation starts its sequence again; an explicit sequence
    // sets where the following ticks count on from.
    if (inc && *inc != life->second.first) {
      life->second = {*inc, 0};
    }
    s.incarnation = life->second.first;
    s.sequence = seq ? *seq : life->second.second + 1;
    life->second.second = std::max(life->second.second, s.sequence);
    c.steps.push_back(std::move(s));
  }
  for (const GoldenCase& c : cases) {
    if (c.steps.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          kCasesFile, ":", c.line, ": case ", c.name, " has no tick"));
    }
  }
  return cases;
}

// What one store answered to one tick.
struct Answer {
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string message;
  bool granted = false;
  core::Units units{};
  uint32_t live_weight = 0;
  bool lost = false;
  absl::Duration valid_for = absl::ZeroDuration();

  std::string ToString() const {
    if (code != absl::StatusCode::kOk) {
      return absl::StrCat("error ", absl::StatusCodeToString(code), ": ",
                          message);
    }
    return absl::StrCat("granted=", granted, " units=", units[0], ",",
                        units[1], " live_weight=", live_weight, " lost=", lost,
                        " valid_for=", absl::FormatDuration(valid_for));
  }
  bool operator==(const Answer& o) const {
    return code == o.code && granted == o.granted && units == o.units &&
           live_weight == o.live_weight && lost == o.lost &&
           valid_for == o.valid_for;
  }
};

// The failures of `got` against `want`, "" when it matches.
std::string Check(const Expect& want, const Answer& got) {
  std::vector<std::string> wrong;
  if (want.refused) {
    if (got.code != absl::StatusCode::kAborted) {
      wrong.push_back("refused (ABORTED) expected");
    }
    return absl::StrJoin(wrong, "; ");
  }
  if (got.code != absl::StatusCode::kOk) return "the tick failed";
  if (want.granted && *want.granted != got.granted) {
    wrong.push_back(absl::StrCat("granted=", *want.granted, " expected"));
  }
  if (want.units && *want.units != got.units) {
    wrong.push_back(absl::StrCat("units=", (*want.units)[0], ",",
                                 (*want.units)[1], " expected"));
  }
  if (want.live_weight && *want.live_weight != got.live_weight) {
    wrong.push_back(absl::StrCat("live_weight=", *want.live_weight,
                                 " expected"));
  }
  if (want.lost && *want.lost != got.lost) {
    wrong.push_back(absl::StrCat("lost=", *want.lost, " expected"));
  }
  if (want.valid_for && *want.valid_for != got.valid_for) {
    wrong.push_back(absl::StrCat(
        "valid_for=", absl::FormatDuration(*want.valid_for), " expected"));
  }
  return absl::StrJoin(wrong, "; ");
}

// The redis-server of this binary: its clock is a file this test writes.
struct RedisWithClock {
  testing::TempDir dir{"grant_golden"};
  std::string clock_file;
  int clock_fd = -1;
  testing::RedisServer server;

  bool SetClock(absl::Time t) const {
    const int64_t us = absl::ToUnixMicros(t);
    return pwrite(clock_fd, &us, sizeof(us), 0) == sizeof(us);
  }
};
RedisWithClock* redis = nullptr;

// Every case starts at a round time (tick.lua's tie order turns every
// 10 s), each later than the one before.
absl::Time CaseStart(const GoldenCase& c) {
  return absl::FromCivil(absl::CivilSecond(2030, 1, 1, 0, 0, 0),
                         absl::UTCTimeZone()) +
         absl::Seconds(1000) * c.index;
}

class GoldenCaseTest : public ::testing::Test {
 public:
  explicit GoldenCaseTest(GoldenCase c) : case_(std::move(c)) {}

  void TestBody() override {
    ASSERT_NE(redis, nullptr) << "no redis-server for this binary";
    SCOPED_TRACE(absl::StrCat(kCasesFile, ":", case_.line, ": ", case_.name,
                              ": ", case_.what));
    testing::FakeClock clock(CaseStart(case_));
    testing::FakeStore fake(&clock);
    absl::StatusOr<RedisStore::Options> options =
        RedisStore::ParseAddress(redis->server.address());
    ASSERT_TRUE(options.ok()) << options.status();
    options->key_prefix = absl::StrCat("golden:", case_.name, ":");
    options->timeout = absl::Seconds(2);
    RedisStore redis_store(*options);
    // The policy's store epoch each replica knows, per store.
    std::map<std::string, std::string> fake_epochs, redis_epochs;
    if (!case_.fresh) {
      Settle(&clock, &fake);
      Settle(&clock, &redis_store);
    }

    for (const Step& s : case_.steps) {
      const absl::Time at = CaseStart(case_) + absl::Milliseconds(s.at_ms);
      clock.SetTime(at);
      ASSERT_TRUE(redis->SetClock(at));
      const Answer from_fake =
          Run(&fake, s, &fake_epochs[s.replica]);
      const Answer from_redis =
          Run(&redis_store, s, &redis_epochs[s.replica]);
      const std::string where =
          absl::StrCat(kCasesFile, ":", s.line, ": ", s.text);
      for (const auto& [store, got] :
           {std::pair<std::string, const Answer*>{"fake", &from_fake},
            std::pair<std::string, const Answer*>{"redis", &from_redis}}) {
        Expect want = s.both;
        auto only = s.only.find(store);
        if (only != s.only.end()) want = Merge(want, only->second);
        const std::string wrong = Check(want, *got);
        EXPECT_EQ(wrong, "") << where << "\n  " << store << " answered "
                             << got->ToString();
      }
      // Both implementations answer alike, beyond what the case lists,
      // except where the case marks a known difference.
      if (s.only.empty()) {
        EXPECT_TRUE(from_fake == from_redis)
            << where << "\n  the implementations differ:\n  fake  "
            << from_fake.ToString() << "\n  redis " << from_redis.ToString();
      }
    }
  }

 private:
  static Expect Merge(Expect base, const Expect& over) {
    base.refused = base.refused || over.refused;
    if (over.granted) base.granted = over.granted;
    if (over.units) base.units = over.units;
    if (over.live_weight) base.live_weight = over.live_weight;
    if (over.lost) base.lost = over.lost;
    if (over.valid_for) base.valid_for = over.valid_for;
    return base;
  }

  // A store on which the policy's epoch was created long enough before the
  // case's start that its recovery window is over (every new epoch opens
  // one: tick.lua), as in a cluster that has been running: one tick of a
  // replica that pushes the policy without keys, two stale periods and a
  // second before the start, when its membership has ended too.
  void Settle(testing::FakeClock* clock, Store* store) {
    const absl::Time at =
        CaseStart(case_) - 2 * case_.stale - absl::Seconds(1);
    clock->SetTime(at);
    ASSERT_TRUE(redis->SetClock(at));
    TickRequest request;
    request.replica_id = "settler";
    request.incarnation = 1;
    request.sequence = 1;
    request.stale_after = case_.stale;
    PolicyPush push;
    push.policy = kPolicy;
    push.per_key = case_.per_key;
    request.policies.push_back(std::move(push));
    absl::StatusOr<TickReply> reply = store->Tick(request);
    ASSERT_TRUE(reply.ok()) << reply.status();
  }

  Answer Run(Store* store, const Step& s, std::string* epoch) {
    TickRequest request;
    request.replica_id = s.replica;
    request.incarnation = s.incarnation;
    request.sequence = s.sequence;
    request.weight = s.weight;
    request.stale_after = case_.stale;
    request.live_replicas = s.live;
    request.leaving = s.leaving;
    PolicyPush push;
    push.policy = kPolicy;
    push.per_key = case_.per_key;
    push.epoch_seen = *epoch;
    push.keys.push_back(s.key);
    request.policies.push_back(std::move(push));
    absl::StatusOr<TickReply> reply = store->Tick(request);
    Answer a;
    if (!reply.ok()) {
      a.code = reply.status().code();
      a.message = std::string(reply.status().message());
      return a;
    }
    a.live_weight = reply->live_weight;
    if (reply->policies.size() != 1 || reply->policies[0].grants.size() != 1) {
      a.code = absl::StatusCode::kInternal;
      a.message = "a reply of another shape than one policy and one key";
      return a;
    }
    const PolicyPull& pull = reply->policies[0];
    *epoch = pull.epoch;
    a.lost = pull.lost;
    a.granted = pull.grants[0].granted;
    a.units = pull.grants[0].units;
    a.valid_for = pull.grants[0].valid_for;
    return a;
  }

  const GoldenCase case_;
};

// One redis-server for the cases of this binary, started when tests run
// (not when CTest only lists them), its clock stopped at a time the cases
// set.
class RedisEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    ASSERT_FALSE(redis_.dir.path().empty()) << "no temporary directory";
    ASSERT_NE(std::string(testing::kStoreClockShimPath), "")
        << "this build has no sluice_store_clock_shim";
    redis_.clock_file = redis_.dir.File("clock");
    redis_.clock_fd =
        open(redis_.clock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(redis_.clock_fd, 0) << redis_.clock_file;
    const absl::Time start = absl::FromCivil(
        absl::CivilSecond(2030, 1, 1, 0, 0, 0), absl::UTCTimeZone());
    ASSERT_TRUE(redis_.SetClock(start - absl::Seconds(1)));
    redis_.server.set_env(
        {absl::StrCat("LD_PRELOAD=", testing::kStoreClockShimPath),
         absl::StrCat("SLUICE_STORE_CLOCK_FILE=", redis_.clock_file)});
    ASSERT_TRUE(redis_.server.Start()) << redis_.server.StartError();
    // The clock is the file's: a server without the shim would answer its
    // own time.
    const std::vector<std::string> time = redis_.server.Run({"TIME"});
    ASSERT_EQ(time.size(), 2u);
    EXPECT_EQ(time[0], absl::StrCat(absl::ToUnixSeconds(start) - 1))
        << "redis-server does not run on the test's clock";
    redis = &redis_;
  }
  void TearDown() override {
    redis_.server.Kill();
    if (redis_.clock_fd >= 0) close(redis_.clock_fd);
    redis = nullptr;
  }

 private:
  RedisWithClock redis_;
};

std::string ReadCases(std::string* error) {
  const std::string path = absl::StrCat(testing::kSourceDir, "/", kCasesFile);
  std::ifstream in(path);
  if (!in) {
    *error = absl::StrCat("cannot read ", path);
    return "";
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace
}  // namespace sluice::cluster

int main(int argc, char** argv) {
  using sluice::cluster::GoldenCase;
  ::testing::InitGoogleTest(&argc, argv);
  std::string error;
  const std::string text = sluice::cluster::ReadCases(&error);
  absl::StatusOr<std::vector<GoldenCase>> cases =
      error.empty() ? sluice::cluster::ParseCases(text)
                    : absl::StatusOr<std::vector<GoldenCase>>(
                          absl::NotFoundError(error));
  // The table itself: readable, and as large as the issue asks.
  const size_t count = cases.ok() ? cases->size() : 0;
  const absl::Status parsed = cases.status();
  ::testing::RegisterTest(
      "GrantGolden", "TableIsReadable", nullptr, nullptr, __FILE__, __LINE__,
      [parsed, count]() -> ::testing::Test* {
        class Readable : public ::testing::Test {
         public:
          Readable(absl::Status s, size_t n) : s_(std::move(s)), n_(n) {}
          void TestBody() override {
            ASSERT_TRUE(s_.ok()) << s_;
            EXPECT_GE(n_, static_cast<size_t>(sluice::cluster::kMinCases));
          }

         private:
          absl::Status s_;
          size_t n_;
        };
        return new Readable(parsed, count);
      });
  if (cases.ok()) {
    for (const GoldenCase& c : *cases) {
      ::testing::RegisterTest(
          "GrantGolden", c.name.c_str(), nullptr, nullptr, __FILE__, c.line,
          [c]() -> ::testing::Test* {
            return new sluice::cluster::GoldenCaseTest(c);
          });
    }
  }
  ::testing::AddGlobalTestEnvironment(new sluice::cluster::RedisEnvironment);
  return RUN_ALL_TESTS();
}
