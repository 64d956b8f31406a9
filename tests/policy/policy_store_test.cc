// SPDX-License-Identifier: Apache-2.0
#include "server/policy/policy_store.h"

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "server/policy/policy_convert.h"
#include "tests/testing/fake_clock.h"

namespace sluice::policy {

// Found by argument-dependent lookup, so not in the anonymous namespace.
bool operator==(const PolicyChange& a, const PolicyChange& b) {
  return a.name == b.name && a.old_version == b.old_version &&
         a.new_version == b.new_version;
}
void PrintTo(const PolicyChange& c, std::ostream* os) {
  *os << "{" << c.name << ", " << c.old_version << " -> " << c.new_version
      << "}";
}

namespace {

v1::Policy P(const std::string& text) {
  v1::Policy p;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &p)) << text;
  return p;
}

class PolicyStoreTest : public ::testing::Test {
 protected:
  // name:version for every policy in the engine.
  std::vector<std::string> EnginePolicies() {
    std::vector<std::string> out;
    for (const auto& p : engine_.Policies()) {
      out.push_back(absl::StrCat(p->name, ":", p->version));
    }
    return out;
  }
  std::vector<std::string> StorePolicies() {
    std::vector<std::string> out;
    for (const v1::Policy& p : store_.List()) {
      out.push_back(absl::StrCat(p.name(), ":", p.version()));
    }
    return out;
  }

  sluice::testing::FakeClock clock_;
  core::Engine engine_{&clock_, core::Engine::Options()};
  PolicyStore store_{&engine_};
};

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::HasSubstr;

TEST_F(PolicyStoreTest, ReplaceAllCreatesInNameOrder) {
  auto changes = store_.ReplaceAll(
      {P(R"(name: "b")"), P(R"(name: "a" rate_limit { rate: 5 })")});
  ASSERT_TRUE(changes.ok()) << changes.status();
  EXPECT_THAT(*changes,
              ElementsAre(PolicyChange{"a", 0, 1}, PolicyChange{"b", 0, 2}));
  EXPECT_THAT(StorePolicies(), ElementsAre("a:1", "b:2"));
  EXPECT_THAT(EnginePolicies(), ElementsAre("a:1", "b:2"));
  EXPECT_EQ(store_.size(), 2u);
  // The engine got the resolved config.
  ASSERT_TRUE(engine_.Policies()[0]->rate_limit.has_value());
  EXPECT_EQ(engine_.Policies()[0]->rate_limit->burst, 5);
}

TEST_F(PolicyStoreTest, UnchangedContentKeepsItsVersion) {
  ASSERT_TRUE(store_.ReplaceAll({P(R"(name: "a")"), P(R"(name: "b")")}).ok());
  // Same content spelled differently (defaults written out), and a version
  // field the store must ignore.
  auto changes = store_.ReplaceAll(
      {P(R"(name: "a" call_timeout { seconds: 1 } max_keys: 100000
            version: 99)"),
       P(R"(name: "b" on_store_failure: FAIL_OPEN)")});
  ASSERT_TRUE(changes.ok()) << changes.status();
  EXPECT_THAT(*changes, IsEmpty());
  EXPECT_THAT(StorePolicies(), ElementsAre("a:1", "b:2"));
  EXPECT_THAT(EnginePolicies(), ElementsAre("a:1", "b:2"));
}

TEST_F(PolicyStoreTest, ReplaceAllUpdatesAddsAndDeletes) {
  ASSERT_TRUE(
      store_
          .ReplaceAll({P(R"(name: "a")"), P(R"(name: "b")"), P(R"(name: "c")")})
          .ok());
  auto changes = store_.ReplaceAll(
      {P(R"(name: "a")"), P(R"(name: "c" shadow: true)"), P(R"(name: "d")")});
  ASSERT_TRUE(changes.ok()) << changes.status();
  EXPECT_THAT(*changes,
              ElementsAre(PolicyChange{"b", 2, 0}, PolicyChange{"c", 3, 4},
                          PolicyChange{"d", 0, 5}));
  EXPECT_THAT(StorePolicies(), ElementsAre("a:1", "c:4", "d:5"));
  EXPECT_THAT(EnginePolicies(), ElementsAre("a:1", "c:4", "d:5"));
  EXPECT_TRUE(engine_.Policies()[1]->shadow);

  changes = store_.ReplaceAll({});
  ASSERT_TRUE(changes.ok());
  EXPECT_EQ(changes->size(), 3u);
  EXPECT_THAT(EnginePolicies(), IsEmpty());
}

TEST_F(PolicyStoreTest, BadReplaceChangesNothing) {
  ASSERT_TRUE(store_.ReplaceAll({P(R"(name: "a")"), P(R"(name: "b")")}).ok());
  auto changes = store_.ReplaceAll(
      {P(R"(name: "a" shadow: true)"),
       P(R"(name: "inventory" breaker { failure_rate_threshold: 1.5 })")});
  ASSERT_FALSE(changes.ok());
  EXPECT_EQ(changes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(changes.status().message(),
            "policy \"inventory\": breaker.failure_rate_threshold must be in "
            "(0, 1], got 1.5");
  EXPECT_THAT(StorePolicies(), ElementsAre("a:1", "b:2"));
  EXPECT_THAT(EnginePolicies(), ElementsAre("a:1", "b:2"));
  EXPECT_FALSE(engine_.Policies()[0]->shadow);
  // No version was spent on the failed attempt.
  auto put = store_.Put(P(R"(name: "c")"), 0);
  ASSERT_TRUE(put.ok());
  EXPECT_EQ(put->new_version, 3u);
}

TEST_F(PolicyStoreTest, ReplaceAllRejectsDuplicateNames) {
  auto changes = store_.ReplaceAll({P(R"(name: "a")"), P(R"(name: "a")")});
  ASSERT_FALSE(changes.ok());
  EXPECT_EQ(changes.status().message(), "policy \"a\": defined more than once");
  EXPECT_EQ(store_.size(), 0u);
  EXPECT_THAT(EnginePolicies(), IsEmpty());
}

TEST_F(PolicyStoreTest, PutCreatesAndReplaces) {
  auto c = store_.Put(P(R"(name: "a")"), 0);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, (PolicyChange{"a", 0, 1}));
  c = store_.Put(P(R"(name: "a" shadow: true)"), 0);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, (PolicyChange{"a", 1, 2}));
  EXPECT_THAT(EnginePolicies(), ElementsAre("a:2"));
  EXPECT_TRUE(engine_.Policies()[0]->shadow);
}

TEST_F(PolicyStoreTest, PutUnchangedKeepsVersion) {
  ASSERT_TRUE(store_.Put(P(R"(name: "a" shadow: true)"), 0).ok());
  auto c = store_.Put(P(R"(name: "a" shadow: true)"), 1);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, (PolicyChange{"a", 1, 1}));
  EXPECT_THAT(StorePolicies(), ElementsAre("a:1"));
  EXPECT_THAT(EnginePolicies(), ElementsAre("a:1"));
}

TEST_F(PolicyStoreTest, PutCompareAndSwap) {
  ASSERT_TRUE(store_.Put(P(R"(name: "a")"), 0).ok());
  ASSERT_TRUE(store_.Put(P(R"(name: "b")"), 0).ok());

  auto c = store_.Put(P(R"(name: "a" shadow: true)"), 2);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(c.status().message(),
            "policy \"a\": expected version 2, but the stored version is 1");

  c = store_.Put(P(R"(name: "new")"), 5);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(c.status().message(),
            "policy \"new\": expected version 5, but the policy does not "
            "exist");
  EXPECT_THAT(StorePolicies(), ElementsAre("a:1", "b:2"));
  EXPECT_THAT(EnginePolicies(), ElementsAre("a:1", "b:2"));

  c = store_.Put(P(R"(name: "a" shadow: true)"), 1);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, (PolicyChange{"a", 1, 3}));
  EXPECT_THAT(EnginePolicies(), ElementsAre("a:3", "b:2"));
}

TEST_F(PolicyStoreTest, InvalidPutChangesNothing) {
  ASSERT_TRUE(store_.Put(P(R"(name: "a")"), 0).ok());
  auto c = store_.Put(P(R"(name: "a" concurrency {})"), 0);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            "policy \"a\": concurrency.max_in_flight must be >= 1, got 0");
  EXPECT_THAT(StorePolicies(), ElementsAre("a:1"));
  EXPECT_FALSE(engine_.Policies()[0]->concurrency.has_value());
}

TEST_F(PolicyStoreTest, Delete) {
  ASSERT_TRUE(store_.ReplaceAll({P(R"(name: "a")"), P(R"(name: "b")")}).ok());

  auto d = store_.Delete("zzz", 0);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(d.status().message(), "policy \"zzz\" not found");

  d = store_.Delete("a", 7);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(d.status().message(),
            "policy \"a\": expected version 7, but the stored version is 1");
  EXPECT_THAT(EnginePolicies(), ElementsAre("a:1", "b:2"));

  d = store_.Delete("a", 1);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, (PolicyChange{"a", 1, 0}));
  EXPECT_THAT(StorePolicies(), ElementsAre("b:2"));
  EXPECT_THAT(EnginePolicies(), ElementsAre("b:2"));

  // Versions keep rising after a delete, also for a re-created name.
  auto c = store_.Put(P(R"(name: "a")"), 0);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, (PolicyChange{"a", 0, 3}));
}

TEST_F(PolicyStoreTest, GetReturnsDefaultsAndVersion) {
  ASSERT_TRUE(
      store_.Put(P(R"(name: "a" breaker { consecutive_failures: 3 })"), 0)
          .ok());
  absl::StatusOr<v1::Policy> p = store_.Get("a");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->version(), 1u);
  EXPECT_EQ(p->call_timeout().seconds(), 1);
  EXPECT_EQ(p->breaker().open_duration().seconds(), 15);
  EXPECT_EQ(p->breaker().minimum_calls(), 20u);
  EXPECT_EQ(p->fallback().strategy(), v1::Fallback::NONE);
  EXPECT_EQ(p->max_keys(), 100000u);

  EXPECT_EQ(store_.Get("b").status().code(), absl::StatusCode::kNotFound);
}

// Saved adaptive state is matched by digest, so the engine's configs must
// carry it whichever way they came in, and a new version of the same content
// keeps it.
TEST_F(PolicyStoreTest, EngineConfigsCarryTheContentDigest) {
  const std::string text =
      R"(name: "a" adaptive_concurrency { max_limit: 100 })";
  ASSERT_TRUE(store_.ReplaceAll({P(text)}).ok());
  const uint64_t first = engine_.Policies().at(0)->digest;
  EXPECT_NE(first, 0u);
  absl::StatusOr<core::PolicyConfig> converted = ToConfig(P(text));
  ASSERT_TRUE(converted.ok());
  EXPECT_EQ(first, converted->digest);

  ASSERT_TRUE(
      store_.Put(P(R"(name: "a" adaptive_concurrency { max_limit: 101 })"), 0)
          .ok());
  const uint64_t edited = engine_.Policies().at(0)->digest;
  EXPECT_NE(edited, first);
  EXPECT_EQ(engine_.Policies().at(0)->version, 2u);

  ASSERT_TRUE(store_.Put(P(text), 0).ok());
  EXPECT_EQ(engine_.Policies().at(0)->version, 3u);
  EXPECT_EQ(engine_.Policies().at(0)->digest, first);
}

TEST_F(PolicyStoreTest, ConcurrentPutsGetDistinctVersions) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t] {
      for (int i = 0; i < kPerThread; ++i) {
        v1::Policy p;
        p.set_name(absl::StrCat("p", t, "-", i % 5));
        p.set_max_keys(static_cast<uint32_t>(i + 1));  // always a change
        EXPECT_TRUE(store_.Put(p, 0).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(store_.size(), static_cast<size_t>(kThreads * 5));
  std::vector<uint64_t> versions;
  for (const v1::Policy& p : store_.List()) versions.push_back(p.version());
  std::sort(versions.begin(), versions.end());
  EXPECT_EQ(std::adjacent_find(versions.begin(), versions.end()),
            versions.end());
  EXPECT_EQ(versions.back(), static_cast<uint64_t>(kThreads * kPerThread));
  // The engine ends up with exactly what the store holds.
  EXPECT_EQ(EnginePolicies(), StorePolicies());
}


TEST_F(PolicyStoreTest, AdoptTakesTheStoresVersionsAndKeepsState) {
  v1::Policy a = P(R"pb(name: "a" rate_limit { rate: 2 burst: 2 } version: 40)pb");
  v1::Policy b = P(R"pb(name: "b" version: 41)pb");
  auto changes = store_.Adopt({a, b});
  ASSERT_TRUE(changes.ok()) << changes.status();
  EXPECT_THAT(*changes, ElementsAre(PolicyChange{"a", 0, 40},
                                    PolicyChange{"b", 0, 41}));
  EXPECT_THAT(EnginePolicies(), ElementsAre("a:40", "b:41"));
  // Spend a's tokens; re-adopting the same snapshot changes nothing.
  ASSERT_TRUE(engine_.Acquire("a", "", 2).ok());
  changes = store_.Adopt({a, b});
  ASSERT_TRUE(changes.ok());
  EXPECT_THAT(*changes, IsEmpty());
  // An edit keeps live state (the bucket stays empty); a missing policy goes.
  a.mutable_rate_limit()->set_rate(3);
  a.mutable_rate_limit()->set_burst(3);
  a.set_version(42);
  changes = store_.Adopt({a});
  ASSERT_TRUE(changes.ok());
  EXPECT_THAT(*changes, ElementsAre(PolicyChange{"a", 40, 42},
                                    PolicyChange{"b", 41, 0}));
  auto d = engine_.Acquire("a", "", 1);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->verdict, core::Verdict::kReject);
  EXPECT_EQ(d->policy_version, 42u);
  // Local versions continue above the adopted ones.
  auto put = store_.Put(P(R"pb(name: "c")pb"), 0);
  ASSERT_TRUE(put.ok());
  EXPECT_EQ(put->new_version, 43u);
  // An invalid snapshot changes nothing.
  v1::Policy bad = P(R"pb(name: "a" rate_limit { rate: -1 } version: 44)pb");
  EXPECT_EQ(store_.Adopt({bad}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(StorePolicies(), ElementsAre("a:42", "c:43"));
}

}  // namespace
}  // namespace sluice::policy

namespace sluice::policy {
namespace {

TEST_F(PolicyStoreTest, TwoPoliciesMayNotAnswerOneEnvoyDescriptor) {
  const char* kDescriptor =
      R"( envoy_descriptors { domain: "edge" entries { key: "k" value: "v" } })";
  absl::StatusOr<std::vector<PolicyChange>> both = store_.ReplaceAll(
      {P(absl::StrCat(R"(name: "a")", kDescriptor)),
       P(absl::StrCat(R"(name: "b")", kDescriptor))});
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.status().message(),
            R"(policies "a" and "b" both answer the Envoy descriptor "edge" ["k": "v"]; a descriptor must map to one policy)");
  EXPECT_THAT(StorePolicies(), IsEmpty());

  ASSERT_TRUE(store_.Put(P(absl::StrCat(R"(name: "a")", kDescriptor)), 0).ok());
  absl::StatusOr<PolicyChange> b =
      store_.Put(P(absl::StrCat(R"(name: "b")", kDescriptor)), 0);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(StorePolicies(), ElementsAre("a:1"));
  // A policy may change its own descriptors, and another may take one that
  // differs by a value.
  EXPECT_TRUE(store_.Put(P(absl::StrCat(R"(name: "a" description: "x")",
                                        kDescriptor)),
                         0)
                  .ok());
  EXPECT_TRUE(store_.Put(P(R"(name: "b" envoy_descriptors { domain: "edge" entries { key: "k" value: "w" } })"), 0).ok());
}

TEST_F(PolicyStoreTest, TwoPoliciesMayNotTieForOneHttpRequest) {
  const char* kRoute =
      R"( http_routes { host: "api.example.com" path_prefix: "/pay" })";
  absl::StatusOr<std::vector<PolicyChange>> both = store_.ReplaceAll(
      {P(absl::StrCat(R"(name: "a")", kRoute)),
       P(absl::StrCat(R"(name: "b")", kRoute))});
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.status().message(),
            R"(policies "a" and "b" both answer HTTP requests to host "api.example.com" path "/pay"... equally specifically (http_routes[0] and [0]); a request must map to one policy)");
  EXPECT_THAT(StorePolicies(), IsEmpty());

  ASSERT_TRUE(store_.Put(P(absl::StrCat(R"(name: "a")", kRoute)), 0).ok());
  // The same route once the host is lowercased.
  absl::StatusOr<PolicyChange> tie = store_.Put(
      P(R"(name: "b" http_routes { host: "API.example.com" path_prefix: "/pay" })"),
      0);
  EXPECT_EQ(tie.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(tie.status().message()),
              HasSubstr(R"(policies "a" and "b" both answer)"));
  EXPECT_EQ(store_.CheckHttpRoutes(P(absl::StrCat(R"(name: "b")", kRoute)))
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(StorePolicies(), ElementsAre("a:1"));
  // A more specific route, or one on another host, is no tie.
  EXPECT_TRUE(store_.Put(P(R"(name: "b" http_routes { host: "api.example.com" path_prefix: "/pay/v2" })"), 0).ok());
  EXPECT_TRUE(store_.Put(P(R"(name: "c" http_routes { host: "*.example.com" path_prefix: "/pay" })"), 0).ok());
  EXPECT_TRUE(store_.CheckHttpRoutes(P(absl::StrCat(R"(name: "a")", kRoute))).ok());

  // Equally specific (one condition each) and a request can meet both:
  // GET /q with x-t: 1.
  ASSERT_TRUE(store_.Put(P(R"(name: "d" http_routes { path_prefix: "/q" methods: ["GET"] })"), 0).ok());
  EXPECT_EQ(store_.Put(P(R"(name: "e" http_routes { path_prefix: "/q" headers { key: "x-t" value: "1" } })"), 0)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  // Methods no request has both of are no tie.
  EXPECT_TRUE(store_.Put(P(R"(name: "e" http_routes { path_prefix: "/q" methods: ["POST"] })"), 0).ok());
}

}  // namespace
}  // namespace sluice::policy
