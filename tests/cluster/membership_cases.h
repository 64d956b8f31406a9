// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_CLUSTER_MEMBERSHIP_CASES_H_
#define SLUICE_TESTS_CLUSTER_MEMBERSHIP_CASES_H_

// The membership rules every Store keeps, run against the FakeStore (unit)
// and config.lua in a real redis-server (integration) alike: a tick reply
// lists the live replicas only when the membership differs from the one the
// request saw, and the (epoch, version) pair changes with every join,
// leave, weight change, expiry and loss of the store's data.

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/cluster/store.h"

namespace sluice::cluster::testing_members {

// A replica ticking by hand: it applies the membership the way SyncLoop
// does (keeps its list when the reply leaves it out).
class MemberClient {
 public:
  MemberClient(Store* store, std::string id, absl::Duration stale_after)
      : store_(store), id_(std::move(id)), stale_after_(stale_after) {}

  // One tick; false when the store failed it.
  bool Tick(bool leaving = false) {
    TickRequest request;
    request.replica_id = id_;
    request.incarnation = 7;
    request.sequence = ++sequence_;
    request.weight = weight;
    request.stale_after = stale_after_;
    request.leaving = leaving;
    request.members_epoch_seen = epoch_;
    request.members_seen = version_;
    absl::StatusOr<TickReply> reply = store_->Tick(request);
    EXPECT_TRUE(reply.ok()) << id_ << ": " << reply.status();
    if (!reply.ok()) return false;
    last = *reply;
    if (!reply->members_unchanged) {
      list = reply->replicas;
      std::sort(list.begin(), list.end());
      epoch_ = reply->members_epoch;
      version_ = reply->members_version;
    }
    return true;
  }
  // Forgets the membership it applied (a new process).
  void Forget() {
    epoch_.clear();
    version_ = 0;
  }
  std::pair<std::string, uint64_t> seen() const { return {epoch_, version_}; }

  uint32_t weight = 1;
  TickReply last;
  std::vector<std::string> list;

 private:
  Store* const store_;
  const std::string id_;
  const absl::Duration stale_after_;
  uint64_t sequence_ = 0;
  std::string epoch_;
  uint64_t version_ = 0;
};

// `wait` lets the store's clock pass; `lose_data` makes the store forget
// everything (a restart without persistence).
inline void CheckMembershipVersions(
    Store* store, const std::function<void(absl::Duration)>& wait,
    const std::function<void()>& lose_data) {
  using List = std::vector<std::string>;
  const absl::Duration long_life = absl::Seconds(30);
  MemberClient a(store, "a", long_life);
  MemberClient b(store, "b", long_life);
  // The first tick always lists.
  ASSERT_TRUE(a.Tick());
  EXPECT_FALSE(a.last.members_unchanged);
  EXPECT_EQ(a.list, List({"a"}));
  EXPECT_EQ(a.last.live_weight, 1u);
  EXPECT_FALSE(a.last.members_epoch.empty());
  // Nothing changed: no list, the same pair, the weight all the same.
  auto seen = a.seen();
  ASSERT_TRUE(a.Tick());
  EXPECT_TRUE(a.last.members_unchanged);
  EXPECT_TRUE(a.last.replicas.empty());
  EXPECT_EQ(a.seen(), seen);
  EXPECT_EQ(a.last.live_weight, 1u);

  // A join.
  ASSERT_TRUE(b.Tick());
  EXPECT_EQ(b.list, List({"a", "b"}));
  ASSERT_TRUE(a.Tick());
  EXPECT_FALSE(a.last.members_unchanged);
  EXPECT_EQ(a.list, List({"a", "b"}));
  EXPECT_NE(a.seen(), seen);
  EXPECT_EQ(a.last.live_weight, 2u);
  ASSERT_TRUE(b.Tick());
  EXPECT_TRUE(b.last.members_unchanged);
  ASSERT_TRUE(a.Tick());
  EXPECT_TRUE(a.last.members_unchanged);

  // A weight change: the list is the same, the weight and version not.
  seen = a.seen();
  b.weight = 3;
  ASSERT_TRUE(b.Tick());
  EXPECT_FALSE(b.last.members_unchanged);
  EXPECT_EQ(b.last.live_weight, 4u);
  ASSERT_TRUE(a.Tick());
  EXPECT_FALSE(a.last.members_unchanged);
  EXPECT_NE(a.seen(), seen);
  EXPECT_EQ(a.last.live_weight, 4u);
  // The running total answers without the list.
  ASSERT_TRUE(a.Tick());
  EXPECT_TRUE(a.last.members_unchanged);
  EXPECT_EQ(a.last.live_weight, 4u);

  // A leave.
  seen = a.seen();
  ASSERT_TRUE(b.Tick(/*leaving=*/true));
  ASSERT_TRUE(a.Tick());
  EXPECT_FALSE(a.last.members_unchanged);
  EXPECT_EQ(a.list, List({"a"}));
  EXPECT_EQ(a.last.live_weight, 1u);
  EXPECT_NE(a.seen(), seen);

  // An expiry, noticed lazily by the next tick of anyone.
  MemberClient c(store, "c", absl::Milliseconds(300));
  ASSERT_TRUE(c.Tick());
  ASSERT_TRUE(a.Tick());
  EXPECT_EQ(a.list, List({"a", "c"}));
  EXPECT_EQ(a.last.live_weight, 2u);
  ASSERT_TRUE(a.Tick());
  EXPECT_TRUE(a.last.members_unchanged);
  seen = a.seen();
  wait(absl::Milliseconds(600));
  ASSERT_TRUE(a.Tick());
  EXPECT_FALSE(a.last.members_unchanged);
  EXPECT_EQ(a.list, List({"a"}));
  EXPECT_EQ(a.last.live_weight, 1u);
  EXPECT_NE(a.seen(), seen);
  ASSERT_TRUE(a.Tick());
  EXPECT_TRUE(a.last.members_unchanged);

  // The store loses its data: its versions start again, and the pair seen
  // still never comes back (the epoch is new).
  seen = a.seen();
  lose_data();
  ASSERT_TRUE(a.Tick());
  EXPECT_FALSE(a.last.members_unchanged);
  EXPECT_EQ(a.list, List({"a"}));
  EXPECT_NE(a.seen().first, seen.first);
  ASSERT_TRUE(a.Tick());
  EXPECT_TRUE(a.last.members_unchanged);

  // A replica without a list always gets one.
  a.Forget();
  ASSERT_TRUE(a.Tick());
  EXPECT_FALSE(a.last.members_unchanged);
  EXPECT_EQ(a.list, List({"a"}));
}

}  // namespace sluice::cluster::testing_members

#endif  // SLUICE_TESTS_CLUSTER_MEMBERSHIP_CASES_H_
