// SPDX-License-Identifier: Apache-2.0
// The lease codec against checked-in golden messages (tests/tree/golden/),
// round trips, and what a hostile peer may send.

#include "server/tree/lease_codec.h"

#include <google/protobuf/text_format.h>
#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/cluster/lease_ledger.h"
#include "server/rpc/message_bounds.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fake_store.h"
#include "wire/limits.h"
#include "wire/quote.h"

namespace sluice::tree {
namespace {

using ::testing::HasSubstr;

// A store-clock instant with whole milliseconds (what the wire carries).
absl::Time StoreMs(int64_t ms) { return absl::FromUnixMillis(ms); }

// Every field of a TickRequest set to something other than its default,
// but for the breaker records seen (QuietRequest): the golden message of a
// leaf that predates them.
cluster::TickRequest FullRequest() {
  cluster::TickRequest r;
  r.replica_id = "leaf-7";
  r.incarnation = 0xfedcba9876543210ULL;
  r.sequence = 42;
  r.weight = 1;
  r.stale_after = absl::Seconds(3);
  r.key_ttl = absl::Minutes(10);
  r.live_replicas = 5;
  r.leaving = true;
  r.config_seen = 17;
  r.config_epoch_seen = "e-config-1";

  cluster::PolicyPush p;
  p.policy = "inventory";
  p.per_key = true;
  p.epoch_seen = "e-inventory-3";
  core::KeyTick k;
  k.key = "tenant-a";
  k.limit = {1000, 50};
  k.demand = {812.5, 12.25};
  k.usage = {3, 7};
  k.applied = {400, 20};
  k.applied_left = absl::Milliseconds(1500);
  k.usage_left = {absl::Seconds(1), absl::Seconds(30)};
  k.admitted_total = 123456789;
  p.keys.push_back(k);
  core::KeyTick dependency;  // key "" with only a rate limit
  dependency.limit = {100, 0};
  dependency.demand = {0.5, 0};
  p.keys.push_back(dependency);
  p.has_breaker = true;
  p.outcomes = {900, 40, 3};
  p.breaker.generation = 9;
  p.breaker.base = 8;
  p.breaker.state = core::BreakerState::kOpen;
  p.breaker.open_until = StoreMs(1700000012345);
  p.breaker.open_duration = absl::Seconds(15);
  p.breaker.cause = "failure rate 0.45 >= 0.4";
  p.breaker.replica = "leaf-7";
  p.publish = false;
  p.leases_wanted = 2;
  p.lease_cap = 3;
  p.lease_ttl = absl::Seconds(2);
  p.has_warm = true;
  p.digest = 0x0123456789abcdefULL;
  p.adaptive.steady_limit = 64;
  p.adaptive.baseline = absl::Microseconds(2500);
  p.baseline = {12, 2100.5, 90.25, 0.995};
  r.policies.push_back(p);

  cluster::PolicyPush plain;  // no breaker, no warm state
  plain.policy = "search";
  plain.keys.push_back(dependency);
  r.policies.push_back(plain);

  r.seed.push_back({"search", std::string("\x0a\x06search\xff", 9), 0});
  cluster::ConfigSnapshot restore;
  restore.version = 16;
  restore.policies.push_back({"inventory", "blob-1", 4});
  restore.overrides.push_back(
      {"search", core::BreakerOverride::kForceOpen, "incident 12"});
  restore.deleted.emplace_back("old", 11);
  r.restore = restore;

  core::ForwardedReport f;
  f.issuer = "central-0";
  f.dependency = "inventory";
  f.key = "tenant-b";
  f.permit_id = {77, 0xffffffffffffffffULL};
  f.outcome = core::Outcome::kTimeout;
  f.latency = absl::Milliseconds(250);
  r.forwarded.push_back(f);
  r.members_epoch_seen = "m-epoch-2";
  r.members_seen = 16;
  return r;
}

// Every field of a TickReply set, but for the breakers of policies left
// out (QuietReply): the golden message of a central that predates them.
cluster::TickReply FullReply() {
  cluster::TickReply r;
  r.store_now = StoreMs(1700000000123);
  r.config_epoch = "e-config-1";
  r.config_lost = true;
  r.replicas = {"central-0", "leaf-7"};
  r.live_weight = 9;
  r.members_epoch = "m-epoch-2";
  r.members_version = 17;

  cluster::PolicyPull p;
  p.epoch = "e-inventory-3";
  p.lost = true;
  cluster::StoreGrant g;
  g.units = {250, 10};
  g.valid_for = absl::Milliseconds(2750);
  p.grants.push_back(g);
  cluster::StoreGrant back;  // a per_key key sent back to its static share
  back.granted = false;
  back.valid_for = absl::InfiniteDuration();
  p.grants.push_back(back);
  p.outcomes.push_back({"central-0", {5000, 100, 7}});
  core::BreakerRecord b;
  b.generation = 10;
  b.state = core::BreakerState::kClosed;
  b.open_duration = absl::Seconds(30);
  b.cause = "probes succeeded";
  b.replica = "central-0";
  p.breaker = b;
  p.leases_granted = 1;
  cluster::ReplicaWarm w;
  w.replica = "central-0";
  w.digest = 0x0123456789abcdefULL;
  w.adaptive = {80, absl::Microseconds(1900)};
  w.baseline = {30, 1800, 40, 0.999};
  w.updated = StoreMs(1699999999000);
  p.warm.push_back(w);
  r.policies.push_back(p);

  cluster::PolicyPull quiet;  // a policy without breaker or warm state
  quiet.epoch = "e-search-1";
  quiet.grants.push_back(g);
  r.policies.push_back(quiet);

  cluster::ConfigSnapshot config;
  config.version = 18;
  config.policies.push_back({"inventory", "blob-2", 5});
  config.overrides.push_back(
      {"search", core::BreakerOverride::kForceClosed, ""});
  config.deleted.emplace_back("old", 11);
  r.config = config;

  core::ForwardedReport f;
  f.issuer = "leaf-7";
  f.dependency = "inventory";
  f.key = "";
  f.permit_id = {5, 6};
  f.outcome = core::Outcome::kSuccess;
  f.latency = absl::Microseconds(1234);
  r.forwarded_to_me.push_back(f);
  r.inbox_dropped = 3;
  r.tick_again_in = absl::Milliseconds(350);
  return r;
}

// A leaf's tick that leaves its quiet policies out: it pushes "inventory"
// only, and says which breaker records it has seen.
cluster::TickRequest QuietRequest() {
  cluster::TickRequest r;
  r.replica_id = "leaf-7";
  r.incarnation = 0xfedcba9876543210ULL;
  r.sequence = 43;
  r.weight = 1;
  r.stale_after = absl::Seconds(3);
  r.live_replicas = 5;
  cluster::PolicyPush p;
  p.policy = "inventory";
  p.epoch_seen = "e-inventory-3";
  core::KeyTick k;
  k.limit = {100, 0};
  k.demand = {40, 0};
  p.keys.push_back(k);
  r.policies.push_back(p);
  r.config_seen = 18;
  r.config_epoch_seen = "e-config-1";
  r.members_epoch_seen = "m-epoch-2";
  r.members_seen = 17;
  r.breakers_epoch_seen = 0x9e3779b97f4a7c15ULL;
  r.breakers_seen = 41;
  return r;
}

// The central's answer to QuietRequest: the pushed policy's pull, and the
// records of two policies the leaf left out that changed since version 41.
cluster::TickReply QuietReply() {
  cluster::TickReply r;
  r.store_now = StoreMs(1700000000123);
  r.config_epoch = "e-config-1";
  r.live_weight = 9;
  r.members_epoch = "m-epoch-2";
  r.members_version = 17;
  r.members_unchanged = true;
  cluster::PolicyPull p;
  p.epoch = "e-inventory-3";
  cluster::StoreGrant g;
  g.units = {60, 0};
  g.valid_for = absl::Milliseconds(2750);
  p.grants.push_back(g);
  r.policies.push_back(p);
  r.breakers_epoch = 0x9e3779b97f4a7c15ULL;
  r.breakers_version = 44;
  cluster::PolicyBreaker open;
  open.policy = "search";
  open.record.generation = 3;
  open.record.base = 2;
  open.record.state = core::BreakerState::kOpen;
  open.record.open_until = StoreMs(1700000015000);
  open.record.open_duration = absl::Seconds(15);
  open.record.cause = "failure rate 0.6 >= 0.5";
  open.record.replica = "leaf-2";
  r.breakers.push_back(open);
  cluster::PolicyBreaker closed;
  closed.policy = "billing";
  closed.record.generation = 6;
  closed.record.state = core::BreakerState::kClosed;
  closed.record.open_duration = absl::Seconds(30);
  closed.record.cause = "probes succeeded";
  closed.record.replica = "central-0";
  r.breakers.push_back(closed);
  return r;
}

template <typename Message>
Message ReadGolden(const std::string& name) {
  const std::string path =
      absl::StrCat(testing::kSourceDir, "/tests/tree/golden/", name);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  Message message;
  EXPECT_TRUE(in.good() || in.eof()) << "cannot read " << path;
  EXPECT_TRUE(
      google::protobuf::TextFormat::ParseFromString(text.str(), &message))
      << path;
  return message;
}

template <typename Message>
void ExpectEqualProto(const Message& want, const Message& got) {
  std::string diff;
  google::protobuf::util::MessageDifferencer differ;
  differ.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differ.Compare(want, got)) << diff << "\ngot:\n"
                                         << got.DebugString();
}

bool ValidUtf8(absl::string_view text) {
  return wire::ToValidUtf8(text) == text;
}

// --- Golden messages ------------------------------------------------------

TEST(LeaseCodecGolden, RequestEncodesAsTheGoldenMessage) {
  v1::LeaseTickRequest proto;
  EncodeTickRequest(FullRequest(), &proto);
  ExpectEqualProto(ReadGolden<v1::LeaseTickRequest>("tick_request.textproto"),
                   proto);
}

TEST(LeaseCodecGolden, ReplyEncodesAsTheGoldenMessage) {
  v1::LeaseTickReply proto;
  EncodeTickReply(FullReply(), &proto);
  ExpectEqualProto(ReadGolden<v1::LeaseTickReply>("tick_reply.textproto"),
                   proto);
}

TEST(LeaseCodecGolden, GoldenRequestDecodesToTheRequest) {
  absl::StatusOr<cluster::TickRequest> r = DecodeTickRequest(
      ReadGolden<v1::LeaseTickRequest>("tick_request.textproto"));
  ASSERT_TRUE(r.ok()) << r.status();
  const cluster::TickRequest want = FullRequest();
  EXPECT_EQ(r->replica_id, "leaf-7");
  EXPECT_EQ(r->incarnation, want.incarnation);
  EXPECT_EQ(r->sequence, 42u);
  EXPECT_EQ(r->stale_after, absl::Seconds(3));
  EXPECT_TRUE(r->leaving);
  ASSERT_EQ(r->policies.size(), 2u);
  const cluster::PolicyPush& p = r->policies[0];
  EXPECT_FALSE(p.publish);
  EXPECT_TRUE(p.has_breaker);
  EXPECT_EQ(p.breaker.state, core::BreakerState::kOpen);
  EXPECT_EQ(p.breaker.open_until, want.policies[0].breaker.open_until);
  ASSERT_EQ(p.keys.size(), 2u);
  EXPECT_EQ(p.keys[0].demand, want.policies[0].keys[0].demand);
  EXPECT_EQ(p.keys[0].applied_left, absl::Milliseconds(1500));
  EXPECT_EQ(p.keys[0].usage_left[core::kRateUnits], absl::Seconds(1));
  EXPECT_EQ(p.keys[0].usage_left[core::kSlotUnits], absl::Seconds(30));
  EXPECT_EQ(p.keys[1].key, "");
  EXPECT_EQ(p.baseline.success, 0.995);
  EXPECT_FALSE(r->policies[1].has_breaker);
  EXPECT_FALSE(r->policies[1].has_warm);
  EXPECT_EQ(r->seed[0].blob, want.seed[0].blob);  // not UTF-8: bytes
  ASSERT_TRUE(r->restore.has_value());
  EXPECT_EQ(r->restore->overrides[0].mode, core::BreakerOverride::kForceOpen);
  ASSERT_EQ(r->forwarded.size(), 1u);
  EXPECT_EQ(r->forwarded[0].permit_id, want.forwarded[0].permit_id);
  EXPECT_EQ(r->forwarded[0].outcome, core::Outcome::kTimeout);
  EXPECT_EQ(r->members_epoch_seen, "m-epoch-2");
  EXPECT_EQ(r->members_seen, 16u);

  // Encoding what was decoded gives the golden message back: no field is
  // lost or moved on the way.
  v1::LeaseTickRequest again;
  EncodeTickRequest(*r, &again);
  ExpectEqualProto(ReadGolden<v1::LeaseTickRequest>("tick_request.textproto"),
                   again);
}

TEST(LeaseCodecGolden, GoldenReplyDecodesToTheReply) {
  absl::StatusOr<cluster::TickReply> r =
      DecodeTickReply(ReadGolden<v1::LeaseTickReply>("tick_reply.textproto"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->store_now, StoreMs(1700000000123));
  EXPECT_EQ(r->live_weight, 9u);
  ASSERT_EQ(r->policies.size(), 2u);
  const cluster::PolicyPull& p = r->policies[0];
  ASSERT_EQ(p.grants.size(), 2u);
  EXPECT_TRUE(p.grants[0].granted);
  EXPECT_EQ(p.grants[0].units, (core::Units{250, 10}));
  EXPECT_EQ(p.grants[0].valid_for, absl::Milliseconds(2750));
  EXPECT_FALSE(p.grants[1].granted);
  EXPECT_EQ(p.grants[1].valid_for, absl::InfiniteDuration());
  ASSERT_TRUE(p.breaker.has_value());
  EXPECT_EQ(p.breaker->open_until, absl::InfinitePast());
  EXPECT_EQ(p.warm[0].updated, StoreMs(1699999999000));
  EXPECT_FALSE(r->policies[1].breaker.has_value());
  ASSERT_TRUE(r->config.has_value());
  EXPECT_EQ(r->config->overrides[0].mode, core::BreakerOverride::kForceClosed);
  EXPECT_EQ(r->inbox_dropped, 3u);
  EXPECT_EQ(r->tick_again_in, absl::Milliseconds(350));
  EXPECT_EQ(r->members_epoch, "m-epoch-2");
  EXPECT_EQ(r->members_version, 17u);
  EXPECT_FALSE(r->members_unchanged);
  EXPECT_EQ(r->replicas.size(), 2u);

  v1::LeaseTickReply again;
  EncodeTickReply(*r, &again);
  ExpectEqualProto(ReadGolden<v1::LeaseTickReply>("tick_reply.textproto"),
                   again);
}

TEST(LeaseCodecGolden, QuietRequestMatchesTheGoldenMessage) {
  v1::LeaseTickRequest proto;
  EncodeTickRequest(QuietRequest(), &proto);
  const v1::LeaseTickRequest golden =
      ReadGolden<v1::LeaseTickRequest>("tick_request_quiet.textproto");
  ExpectEqualProto(golden, proto);

  absl::StatusOr<cluster::TickRequest> r = DecodeTickRequest(golden);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->breakers_epoch_seen, 0x9e3779b97f4a7c15ULL);
  EXPECT_EQ(r->breakers_seen, 41u);
  ASSERT_EQ(r->policies.size(), 1u);
  EXPECT_EQ(r->policies[0].policy, "inventory");
  v1::LeaseTickRequest again;
  EncodeTickRequest(*r, &again);
  ExpectEqualProto(golden, again);
}

TEST(LeaseCodecGolden, QuietReplyMatchesTheGoldenMessage) {
  v1::LeaseTickReply proto;
  EncodeTickReply(QuietReply(), &proto);
  const v1::LeaseTickReply golden =
      ReadGolden<v1::LeaseTickReply>("tick_reply_quiet.textproto");
  ExpectEqualProto(golden, proto);

  absl::StatusOr<cluster::TickReply> r = DecodeTickReply(golden);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->breakers_epoch, 0x9e3779b97f4a7c15ULL);
  EXPECT_EQ(r->breakers_version, 44u);
  ASSERT_EQ(r->breakers.size(), 2u);
  const cluster::PolicyBreaker& open = r->breakers[0];
  EXPECT_EQ(open.policy, "search");
  EXPECT_EQ(open.record.generation, 3u);
  EXPECT_EQ(open.record.base, 2u);
  EXPECT_EQ(open.record.state, core::BreakerState::kOpen);
  EXPECT_EQ(open.record.open_until, StoreMs(1700000015000));
  EXPECT_EQ(open.record.open_duration, absl::Seconds(15));
  EXPECT_EQ(open.record.cause, "failure rate 0.6 >= 0.5");
  EXPECT_EQ(open.record.replica, "leaf-2");
  const cluster::PolicyBreaker& closed = r->breakers[1];
  EXPECT_EQ(closed.policy, "billing");
  EXPECT_EQ(closed.record.state, core::BreakerState::kClosed);
  EXPECT_EQ(closed.record.open_until, absl::InfinitePast());
  EXPECT_EQ(closed.record.replica, "central-0");
  EXPECT_TRUE(CheckReplyAnswers(QuietRequest(), *r).ok());
  v1::LeaseTickReply again;
  EncodeTickReply(*r, &again);
  ExpectEqualProto(golden, again);
}

// A central that predates the breaker records sends none of their fields:
// the leaf reads epoch 0, which tells it to push every policy that has a
// breaker.
TEST(LeaseCodecGolden, AnOlderCentralsReplyHasNoBreakersEpoch) {
  absl::StatusOr<cluster::TickReply> r =
      DecodeTickReply(ReadGolden<v1::LeaseTickReply>("tick_reply.textproto"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->breakers_epoch, 0u);
  EXPECT_EQ(r->breakers_version, 0u);
  EXPECT_TRUE(r->breakers.empty());
  absl::StatusOr<cluster::TickRequest> q = DecodeTickRequest(
      ReadGolden<v1::LeaseTickRequest>("tick_request.textproto"));
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->breakers_epoch_seen, 0u);
  EXPECT_EQ(q->breakers_seen, 0u);
}

// --- Membership -----------------------------------------------------------

// Issue 24: a central's reply to each leaf tick used to list every live
// replica (up to 1,000 leaf ids), so 1,000 leaves ticking once a second cost
// the central a million ids encoded a second. The list now goes only to a
// leaf whose membership (epoch, version) is not the central's.
TEST(LeaseCodecMembership, ALeafTickReplyAtAThousandLeavesLeavesTheListOut) {
  testing::FakeClock clock;
  testing::FakeStore store(&clock);
  cluster::LeaseLedger::Options o;
  o.replica_id = "central-0";
  o.stale_after = absl::Seconds(3);
  o.interval = absl::Seconds(1);
  o.max_leaves = 1000;
  cluster::LeaseLedger ledger(&store, &clock, o);
  cluster::TickRequest central;
  central.replica_id = "central-0";
  central.incarnation = 1;
  central.sequence = 1;
  central.stale_after = o.stale_after;
  ASSERT_TRUE(ledger.Tick(central).ok());

  constexpr int kLeaves = 1000;
  std::vector<cluster::TickRequest> leaves(kLeaves);
  auto tick = [&](cluster::TickRequest* leaf) -> size_t {
    ++leaf->sequence;
    absl::StatusOr<cluster::TickReply> reply = ledger.ServeLeaf(*leaf);
    EXPECT_TRUE(reply.ok()) << reply.status();
    if (!reply.ok()) return 0;
    if (!reply->members_unchanged) {
      leaf->members_epoch_seen = reply->members_epoch;
      leaf->members_seen = reply->members_version;
    }
    v1::LeaseTickReply proto;
    EncodeTickReply(*reply, &proto);
    return proto.ByteSizeLong();
  };
  for (int i = 0; i < kLeaves; ++i) {
    leaves[i].replica_id = absl::StrCat("leaf-", 10000 + i);
    leaves[i].incarnation = 7;
    leaves[i].stale_after = o.stale_after;
    tick(&leaves[i]);
  }
  // Every leaf has joined: the next reply to the first (which saw the
  // membership of its own join) lists all of them, as every reply did
  // before; once each leaf has the list, the replies list nothing.
  const size_t listed = tick(&leaves[0]);
  for (cluster::TickRequest& leaf : leaves) tick(&leaf);
  size_t unchanged = 0;
  for (cluster::TickRequest& leaf : leaves) unchanged = std::max(unchanged, tick(&leaf));
  std::printf("leaf tick reply at %d leaves: %zu bytes with the membership "
              "list (every reply before), %zu bytes once the leaf has it\n",
              kLeaves, listed, unchanged);
  EXPECT_GT(listed, static_cast<size_t>(kLeaves) * 10);
  EXPECT_LT(unchanged, 100u);
}

// --- Round trips ----------------------------------------------------------

TEST(LeaseCodecRoundTrip, DefaultRequestAndReplySurviveTheWire) {
  cluster::TickRequest request;
  request.replica_id = "r";
  v1::LeaseTickRequest request_proto;
  EncodeTickRequest(request, &request_proto);
  std::string bytes;
  ASSERT_TRUE(request_proto.SerializeToString(&bytes));
  v1::LeaseTickRequest parsed;
  ASSERT_TRUE(rpc::ParseBounded(bytes, kLeaseTickBudget, &parsed).ok());
  absl::StatusOr<cluster::TickRequest> decoded = DecodeTickRequest(parsed);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->weight, 1u);
  EXPECT_EQ(decoded->key_ttl, absl::Minutes(10));
  EXPECT_FALSE(decoded->restore.has_value());

  cluster::TickReply reply;
  v1::LeaseTickReply reply_proto;
  EncodeTickReply(reply, &reply_proto);
  absl::StatusOr<cluster::TickReply> back = DecodeTickReply(reply_proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->store_now, absl::InfinitePast());
  EXPECT_FALSE(back->config.has_value());
}

TEST(LeaseCodecRoundTrip, FullMessagesSurviveSerialization) {
  v1::LeaseTickRequest request;
  EncodeTickRequest(FullRequest(), &request);
  std::string bytes;
  ASSERT_TRUE(request.SerializeToString(&bytes));
  v1::LeaseTickRequest parsed;
  ASSERT_TRUE(rpc::ParseBounded(bytes, kLeaseTickBudget, &parsed).ok());
  absl::StatusOr<cluster::TickRequest> decoded = DecodeTickRequest(parsed);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  v1::LeaseTickRequest again;
  EncodeTickRequest(*decoded, &again);
  ExpectEqualProto(request, again);

  v1::LeaseTickReply reply;
  EncodeTickReply(FullReply(), &reply);
  ASSERT_TRUE(reply.SerializeToString(&bytes));
  v1::LeaseTickReply reply_parsed;
  ASSERT_TRUE(rpc::ParseBounded(bytes, kLeaseReplyBudget, &reply_parsed).ok());
  absl::StatusOr<cluster::TickReply> reply_decoded =
      DecodeTickReply(reply_parsed);
  ASSERT_TRUE(reply_decoded.ok()) << reply_decoded.status();
  v1::LeaseTickReply reply_again;
  EncodeTickReply(*reply_decoded, &reply_again);
  ExpectEqualProto(reply, reply_again);
}

TEST(LeaseCodecRoundTrip, BreakerRecordsSurviveSerialization) {
  // The widest values the fields take: the epoch is a fixed64.
  cluster::TickRequest request = QuietRequest();
  request.breakers_epoch_seen = std::numeric_limits<uint64_t>::max();
  request.breakers_seen = std::numeric_limits<uint64_t>::max() - 1;
  v1::LeaseTickRequest request_proto;
  EncodeTickRequest(request, &request_proto);
  std::string bytes;
  ASSERT_TRUE(request_proto.SerializeToString(&bytes));
  v1::LeaseTickRequest parsed;
  ASSERT_TRUE(rpc::ParseBounded(bytes, kLeaseTickBudget, &parsed).ok());
  absl::StatusOr<cluster::TickRequest> decoded = DecodeTickRequest(parsed);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->breakers_epoch_seen, request.breakers_epoch_seen);
  EXPECT_EQ(decoded->breakers_seen, request.breakers_seen);

  cluster::TickReply reply = QuietReply();
  reply.breakers_epoch = std::numeric_limits<uint64_t>::max();
  reply.breakers_version = std::numeric_limits<uint64_t>::max() - 1;
  // A name that is a whole name's worth of bytes, and a record as long
  // as a record may be.
  cluster::PolicyBreaker longest;
  longest.policy = std::string(wire::kMaxNameBytes, 'p');
  longest.record.generation = std::numeric_limits<uint64_t>::max();
  longest.record.state = core::BreakerState::kForcedOpen;
  longest.record.cause = std::string(kMaxLeaseTextBytes, 'c');
  longest.record.replica = std::string(wire::kMaxNameBytes, 'r');
  reply.breakers.push_back(longest);
  v1::LeaseTickReply reply_proto;
  EncodeTickReply(reply, &reply_proto);
  ASSERT_TRUE(reply_proto.SerializeToString(&bytes));
  v1::LeaseTickReply reply_parsed;
  ASSERT_TRUE(rpc::ParseBounded(bytes, kLeaseReplyBudget, &reply_parsed).ok());
  absl::StatusOr<cluster::TickReply> back = DecodeTickReply(reply_parsed);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->breakers_epoch, reply.breakers_epoch);
  EXPECT_EQ(back->breakers_version, reply.breakers_version);
  ASSERT_EQ(back->breakers.size(), 3u);
  for (size_t i = 0; i < reply.breakers.size(); ++i) {
    const core::BreakerRecord& want = reply.breakers[i].record;
    const core::BreakerRecord& got = back->breakers[i].record;
    EXPECT_EQ(back->breakers[i].policy, reply.breakers[i].policy) << i;
    EXPECT_EQ(got.generation, want.generation) << i;
    EXPECT_EQ(got.base, want.base) << i;
    EXPECT_EQ(got.state, want.state) << i;
    EXPECT_EQ(got.open_until, want.open_until) << i;
    EXPECT_EQ(got.open_duration, want.open_duration) << i;
    EXPECT_EQ(got.cause, want.cause) << i;
    EXPECT_EQ(got.replica, want.replica) << i;
  }
}

TEST(LeaseCodecRoundTrip, TheLargestValidRequestFitsTheBudget) {
  // kMaxLeaseKeys keys of 100 bytes, spread over policies of
  // kMaxLeaseKeysPerPolicy, every number at its widest.
  cluster::TickRequest r;
  r.replica_id = std::string(wire::kMaxNameBytes, 'r');
  for (size_t p = 0; p < kMaxLeaseKeys / kMaxLeaseKeysPerPolicy; ++p) {
    cluster::PolicyPush push;
    push.policy = absl::StrCat("policy-", p);
    for (size_t k = 0; k < kMaxLeaseKeysPerPolicy; ++k) {
      core::KeyTick key;
      key.key = absl::StrCat(k, "-", std::string(94, 'k'));
      key.limit = {1'000'000'000, 1'000'000};
      key.demand = {1e9 + 0.5, 1e6 + 0.5};
      key.usage = key.limit;
      key.applied = key.limit;
      key.applied_left = absl::Milliseconds(2999);
      key.admitted_total = 1ULL << 50;
      push.keys.push_back(std::move(key));
    }
    r.policies.push_back(std::move(push));
  }
  v1::LeaseTickRequest proto;
  EncodeTickRequest(r, &proto);
  std::string bytes;
  ASSERT_TRUE(proto.SerializeToString(&bytes));
  v1::LeaseTickRequest parsed;
  const absl::Status parse =
      rpc::ParseBounded(bytes, kLeaseTickBudget, &parsed);
  EXPECT_TRUE(parse.ok()) << parse << " (" << bytes.size() << " bytes)";
  EXPECT_TRUE(DecodeTickRequest(parsed).ok());
  ::testing::Test::RecordProperty("bytes", std::to_string(bytes.size()));
}

// --- Hostile input --------------------------------------------------------

v1::LeaseTickRequest GoldenRequest() {
  return ReadGolden<v1::LeaseTickRequest>("tick_request.textproto");
}

v1::LeaseTickReply GoldenReply() {
  return ReadGolden<v1::LeaseTickReply>("tick_reply.textproto");
}

// The request decodes to INVALID_ARGUMENT whose message contains `want`.
void ExpectRequestRefused(const v1::LeaseTickRequest& proto,
                          const std::string& want) {
  absl::StatusOr<cluster::TickRequest> r = DecodeTickRequest(proto);
  ASSERT_FALSE(r.ok()) << "accepted; wanted " << want;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(want));
  EXPECT_TRUE(ValidUtf8(r.status().message()));
}

void ExpectReplyRefused(const v1::LeaseTickReply& proto,
                        const std::string& want) {
  absl::StatusOr<cluster::TickReply> r = DecodeTickReply(proto);
  ASSERT_FALSE(r.ok()) << "accepted; wanted " << want;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(want));
  EXPECT_TRUE(ValidUtf8(r.status().message()));
}

TEST(LeaseCodecHostile, RequestFieldsOutOfRangeAreNamed) {
  {
    v1::LeaseTickRequest p = GoldenRequest();
    p.clear_replica_id();
    ExpectRequestRefused(p, "replica_id must be set");
  }
  {
    v1::LeaseTickRequest p = GoldenRequest();
    p.set_replica_id(std::string(257, 'x'));
    ExpectRequestRefused(p, "replica_id must be at most 256 bytes, got 257");
  }
  {
    v1::LeaseTickRequest p = GoldenRequest();
    p.set_members_epoch_seen(std::string(1025, 'm'));
    ExpectRequestRefused(p,
                         "members_epoch_seen must be at most 1024 bytes, got 1025");
  }
  {
    v1::LeaseTickRequest p = GoldenRequest();
    p.set_weight(0);
    ExpectRequestRefused(p, "weight must be at least 1, got 0");
  }
  {
    v1::LeaseTickRequest p = GoldenRequest();
    p.mutable_stale_after()->set_seconds(0);
    ExpectRequestRefused(p, "stale_after must be positive");
  }
  {
    v1::LeaseTickRequest p = GoldenRequest();
    p.mutable_policies(0)->mutable_keys(1)->set_key(std::string(1025, 'k'));
    ExpectRequestRefused(
        p, "policies[0].keys[1].key must be at most 1024 bytes, got 1025");
  }
  {
    v1::LeaseTickRequest p = GoldenRequest();
    p.mutable_policies(0)->mutable_keys(0)->mutable_limit()->set_rate(-1);
    ExpectRequestRefused(p,
                         "policies[0].keys[0].limit.rate must not be negative");
  }
  {
    v1::LeaseTickRequest p = GoldenRequest();
    p.mutable_policies(0)->mutable_keys(0)->mutable_demand()->set_slots(
        std::numeric_limits<double>::quiet_NaN());
    ExpectRequestRefused(p,
                         "policies[0].keys[0].demand.slots must be a finite");
  }
  {
    v1::LeaseTickRequest p = GoldenRequest();
    p.mutable_policies(0)
        ->mutable_keys(0)
        ->mutable_usage_left()
        ->mutable_slots()
        ->set_seconds(-5);
    ExpectRequestRefused(
        p, "policies[0].keys[0].usage_left.slots must not be negative");
  }
  {
    v1::LeaseTickRequest p = GoldenRequest();
    p.mutable_policies(0)->mutable_keys(0)->mutable_applied_left()->set_seconds(
        -1);
    p.mutable_policies(0)->mutable_keys(0)->mutable_applied_left()->set_nanos(
        0);
    ExpectRequestRefused(
        p, "policies[0].keys[0].applied_left must not be negative");
  }
  {
    v1::LeaseTickRequest p = GoldenRequest();
    p.mutable_policies(0)->mutable_lease_ttl()->set_nanos(-5);
    p.mutable_policies(0)->mutable_lease_ttl()->set_seconds(1);
    ExpectRequestRefused(p, "policies[0].lease_ttl must be a valid duration");
  }
  {
    v1::LeaseTickRequest p = GoldenRequest();
    p.mutable_policies(0)->mutable_breaker()->set_state(
        static_cast<v1::BreakerState>(9));
    ExpectRequestRefused(
        p, "policies[0].breaker.state must be a BreakerState, got 9");
  }
  {
    v1::LeaseTickRequest p = GoldenRequest();
    p.mutable_policies(0)->mutable_breaker()->set_open_until_ms(-1);
    ExpectRequestRefused(p, "policies[0].breaker.open_until_ms must not be");
  }
  {
    v1::LeaseTickRequest p = GoldenRequest();
    p.mutable_policies(0)->mutable_baseline()->set_success(1.5);
    ExpectRequestRefused(p, "policies[0].baseline.success must be in [0, 1]");
  }
  {
    v1::LeaseTickRequest p = GoldenRequest();
    p.mutable_forwarded(0)->set_outcome(v1::OUTCOME_UNSPECIFIED);
    ExpectRequestRefused(p, "forwarded[0].outcome must be an Outcome, got 0");
  }
  {
    v1::LeaseTickRequest p = GoldenRequest();
    p.mutable_restore()->mutable_overrides(0)->set_mode(
        static_cast<v1::BreakerOverride>(7));
    ExpectRequestRefused(
        p, "restore.overrides[0].mode must be a BreakerOverride, got 7");
  }
  {
    v1::LeaseTickRequest p = GoldenRequest();
    p.mutable_seed(0)->set_blob(std::string(kMaxLeasePolicyBlobBytes + 1, 'b'));
    ExpectRequestRefused(p, "seed[0].blob must be at most 1048576 bytes");
  }
  {
    v1::LeaseTickRequest p = GoldenRequest();
    p.mutable_policies(1)->set_policy("");
    ExpectRequestRefused(p, "policies[1].policy must be set");
  }
}

TEST(LeaseCodecHostile, DuplicatesAreRefusedAndQuotedSafely) {
  {
    // A key that is not UTF-8, pushed twice: the error repeats it escaped.
    v1::LeaseTickRequest p = GoldenRequest();
    p.mutable_policies(0)->mutable_keys(0)->set_key("a\xff\"b");
    p.mutable_policies(0)->mutable_keys(1)->set_key("a\xff\"b");
    ExpectRequestRefused(
        p, "policies[0].keys[1].key \"a\\xff\\\"b\" is pushed twice");
  }
  {
    v1::LeaseTickRequest p = GoldenRequest();
    p.mutable_policies(1)->set_policy("inventory");
    ExpectRequestRefused(p, "policies[1].policy \"inventory\" is pushed twice");
  }
}

TEST(LeaseCodecHostile, CountsAreBoundedBeforeBuilding) {
  {
    v1::LeaseTickRequest p;
    p.set_replica_id("r");
    p.set_weight(1);
    for (size_t i = 0; i <= kMaxLeasePolicies; ++i) p.add_policies();
    ExpectRequestRefused(p,
                         "policies must hold at most 4096 entries, got 4097");
  }
  {
    v1::LeaseTickRequest p = GoldenRequest();
    v1::LeasePolicyPush* push = p.mutable_policies(1);
    for (size_t i = 0; i < kMaxLeaseKeysPerPolicy; ++i) {
      push->add_keys()->set_key(absl::StrCat(i));
    }
    ExpectRequestRefused(
        p, "policies[1].keys must hold at most 10000 entries, got 10001");
  }
  {
    // Each policy within its bound, all of them together past the total.
    v1::LeaseTickRequest p = GoldenRequest();
    p.clear_policies();
    for (int policy = 0; policy < 6; ++policy) {
      v1::LeasePolicyPush* push = p.add_policies();
      push->set_policy(absl::StrCat("p", policy));
      for (int i = 0; i < 9000; ++i) {
        push->add_keys()->set_key(absl::StrCat(i));
      }
    }
    ExpectRequestRefused(p,
                         "more than 10000 keys in all (at policies[1].keys)");
  }
  {
    v1::LeaseTickRequest p = GoldenRequest();
    for (size_t i = 0; i < kMaxLeaseForwarded; ++i) {
      *p.add_forwarded() = p.forwarded(0);
    }
    ExpectRequestRefused(p, "forwarded must hold at most 20000 entries");
  }
}

TEST(LeaseCodecHostile, ReplyFieldsOutOfRangeAreNamed) {
  {
    v1::LeaseTickReply p = GoldenReply();
    p.set_store_now_ms(-5);
    ExpectReplyRefused(p, "store_now_ms must not be negative, got -5");
  }
  {
    v1::LeaseTickReply p = GoldenReply();
    p.mutable_policies(0)->mutable_grants(0)->mutable_units()->set_slots(-2);
    ExpectReplyRefused(p, "policies[0].grants[0].units.slots must not be");
  }
  {
    v1::LeaseTickReply p = GoldenReply();
    p.mutable_policies(0)->mutable_grants(0)->mutable_valid_for()->set_seconds(
        -1);
    p.mutable_policies(0)->mutable_grants(0)->mutable_valid_for()->set_nanos(0);
    ExpectReplyRefused(p, "policies[0].grants[0].valid_for must not be");
  }
  {
    v1::LeaseTickReply p = GoldenReply();
    p.mutable_policies(0)->mutable_warm(0)->set_updated_ms(-1);
    ExpectReplyRefused(p, "policies[0].warm[0].updated_ms must not be");
  }
  {
    v1::LeaseTickReply p = GoldenReply();
    p.set_replicas(1, "");
    ExpectReplyRefused(p, "replicas[1] must be set");
  }
  {
    v1::LeaseTickReply p = GoldenReply();
    for (size_t i = 0; i < kMaxLeaseReplicas; ++i) p.add_replicas("x");
    ExpectReplyRefused(p, "replicas must hold at most 100000 entries");
  }
  {
    // "Unchanged" with a list is a contradiction, not a list to keep.
    v1::LeaseTickReply p = GoldenReply();
    p.set_members_unchanged(true);
    ExpectReplyRefused(p, "replicas must be empty when members_unchanged");
  }
  {
    v1::LeaseTickReply p = GoldenReply();
    p.set_members_epoch(std::string(1025, 'm'));
    ExpectReplyRefused(p, "members_epoch must be at most 1024");
  }
  {
    v1::LeaseTickReply p = GoldenReply();
    p.mutable_policies(0)->mutable_breaker()->set_cause(std::string(1025, 'c'));
    ExpectReplyRefused(p, "policies[0].breaker.cause must be at most 1024");
  }
  {
    v1::LeaseTickReply p = GoldenReply();
    p.mutable_config()->mutable_deleted(0)->clear_name();
    ExpectReplyRefused(p, "config.deleted[0].name must be set");
  }
  {
    v1::LeaseTickReply p = GoldenReply();
    p.mutable_forwarded_to_me(0)->clear_issuer();
    ExpectReplyRefused(p, "forwarded_to_me[0].issuer must be set");
  }
}

v1::LeaseTickReply QuietGoldenReply() {
  return ReadGolden<v1::LeaseTickReply>("tick_reply_quiet.textproto");
}

TEST(LeaseCodecHostile, BreakerRecordsOfPoliciesLeftOutAreChecked) {
  {
    // Counted before any entry is built: empty entries are enough.
    v1::LeaseTickReply p = QuietGoldenReply();
    p.clear_breakers();
    for (size_t i = 0; i <= kMaxLeaseBreakers; ++i) p.add_breakers();
    ExpectReplyRefused(p,
                       "breakers must hold at most 10000 entries, got 10001");
  }
  {
    // Exactly the bound is taken.
    v1::LeaseTickReply p = QuietGoldenReply();
    p.clear_breakers();
    for (size_t i = 0; i < kMaxLeaseBreakers; ++i) {
      v1::LeasePolicyBreaker* b = p.add_breakers();
      b->set_policy(absl::StrCat("policy-", i));
      b->mutable_record()->set_generation(1);
    }
    absl::StatusOr<cluster::TickReply> r = DecodeTickReply(p);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->breakers.size(), kMaxLeaseBreakers);
  }
  {
    v1::LeaseTickReply p = QuietGoldenReply();
    p.mutable_breakers(1)->clear_record();
    ExpectReplyRefused(p, "breakers[1].record must be set");
  }
  {
    v1::LeaseTickReply p = QuietGoldenReply();
    p.mutable_breakers(0)->clear_policy();
    ExpectReplyRefused(p, "breakers[0].policy must be set");
  }
  {
    v1::LeaseTickReply p = QuietGoldenReply();
    p.mutable_breakers(1)->set_policy(
        std::string(wire::kMaxNameBytes + 1, 'p'));
    ExpectReplyRefused(p,
                       "breakers[1].policy must be at most 256 bytes, got 257");
  }
  {
    v1::LeaseTickReply p = QuietGoldenReply();
    p.mutable_breakers(0)->mutable_record()->set_state(
        static_cast<v1::BreakerState>(9));
    ExpectReplyRefused(
        p, "breakers[0].record.state must be a BreakerState, got 9");
  }
  {
    v1::LeaseTickReply p = QuietGoldenReply();
    p.mutable_breakers(1)->mutable_record()->set_open_until_ms(-1);
    ExpectReplyRefused(p, "breakers[1].record.open_until_ms must not be");
  }
  {
    v1::LeaseTickReply p = QuietGoldenReply();
    p.mutable_breakers(1)->mutable_record()->set_cause(std::string(1025, 'c'));
    ExpectReplyRefused(p, "breakers[1].record.cause must be at most 1024");
  }
  {
    // Records from a store that says it does not answer for policies left
    // out: refused, not applied.
    v1::LeaseTickReply p = QuietGoldenReply();
    p.clear_breakers_epoch();
    ExpectReplyRefused(p, "breakers must be empty when breakers_epoch is 0");
  }
  {
    // Epoch 0 and no records is an older central's reply.
    v1::LeaseTickReply p = QuietGoldenReply();
    p.clear_breakers_epoch();
    p.clear_breakers();
    EXPECT_TRUE(DecodeTickReply(p).ok());
  }
  {
    // Two records for one policy: the leaf could not tell which stands.
    v1::LeaseTickReply p = QuietGoldenReply();
    p.mutable_breakers(1)->set_policy("search");
    ExpectReplyRefused(p, "breakers[1].policy \"search\" has two records");
  }
  {
    // A name that is not UTF-8 is repeated escaped.
    v1::LeaseTickReply p = QuietGoldenReply();
    p.mutable_breakers(0)->set_policy("a\xff\"b");
    p.mutable_breakers(1)->set_policy("a\xff\"b");
    ExpectReplyRefused(p, "breakers[1].policy \"a\\xff\\\"b\" has two records");
  }
}

TEST(LeaseCodecHostile, AReplyHasNoRecordInBreakersForAPushedPolicy) {
  const cluster::TickRequest request = QuietRequest();
  cluster::TickReply reply = QuietReply();
  ASSERT_TRUE(CheckReplyAnswers(request, reply).ok());

  // "inventory" was pushed: its breaker is answered in policies[0].
  reply.breakers[1].policy = "inventory";
  absl::Status s = CheckReplyAnswers(request, reply);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("breakers[1].policy \"inventory\" was pushed"));
}

TEST(LeaseCodecHostile, AReplyMustAnswerEveryPushedKey) {
  const cluster::TickRequest request = FullRequest();
  cluster::TickReply reply = FullReply();
  EXPECT_TRUE(CheckReplyAnswers(request, reply).ok());

  reply.policies[1].grants.clear();
  absl::Status s = CheckReplyAnswers(request, reply);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("policies[1].grants: the reply answers 0 keys, the "
                        "request pushed 1"));

  reply.policies.pop_back();
  s = CheckReplyAnswers(request, reply);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("the reply answers 1 policies, the request pushed 2"));
}

TEST(LeaseCodecHostile, ALeaveMayBeAnsweredWithNoPolicies) {
  // The central's ledger answers a leave with no policies: the leaf gives
  // everything back and applies nothing from the reply.
  cluster::TickRequest request = FullRequest();
  ASSERT_EQ(request.policies.size(), 2u);
  request.leaving = true;
  cluster::TickReply reply = FullReply();
  reply.policies.clear();
  EXPECT_TRUE(CheckReplyAnswers(request, reply).ok());

  // A full answer to a leave is fine too.
  EXPECT_TRUE(CheckReplyAnswers(request, FullReply()).ok());

  // A partial one is not.
  reply = FullReply();
  reply.policies.pop_back();
  absl::Status s = CheckReplyAnswers(request, reply);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("the reply answers 1 policies, the request pushed 2"));

  // An empty answer to a tick that is not a leave is still refused.
  request.leaving = false;
  reply.policies.clear();
  s = CheckReplyAnswers(request, reply);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("the reply answers 0 policies, the request pushed 2"));
}

TEST(LeaseCodecHostile, TheWireBudgetStopsFloodsBeforeParsing) {
  // Half a million empty nested messages in 1 MB: refused on the count,
  // without building them.
  std::string flood;
  for (int i = 0; i < 500'000; ++i) flood += std::string("\x4a\x00", 2);
  v1::LeaseTickRequest parsed;
  absl::Status s = rpc::ParseBounded(flood, kLeaseTickBudget, &parsed);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("policies: at most 4096"));
  EXPECT_EQ(parsed.policies_size(), 0);

  // Past the byte limit: refused as too large.
  const std::string big(kMaxLeaseRequestBytes + 1, '\0');
  s = rpc::ParseBounded(big, kLeaseTickBudget, &parsed);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);

  // Not a protobuf message at all.
  s = rpc::ParseBounded(std::string("\xff\xff\xff", 3), kLeaseTickBudget,
                        &parsed);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice::tree
