// SPDX-License-Identifier: Apache-2.0
// A leaf follows one central replica and moves to another behind the same
// target when the one it uses goes away (closes) or stops answering (a
// paused process, a cut network: here a TCP proxy that stops moving bytes).
// Real time: gRPC's keepalive pings and reconnect backoff decide how soon.
// Each test prints the time the move took.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/tree/upstream_store.h"
#include "tests/tree/lease_test_server.h"

namespace sluice::tree {
namespace {

using lease_testing::LeaseTestServer;

// A TCP proxy on 127.0.0.1:<port 0> to a backend port, which can be frozen:
// from then on it moves no byte on any connection, old or new, and closes
// none (accepting new ones), like a SIGSTOPped process or a dropped route.
class FreezableProxy {
 public:
  explicit FreezableProxy(int backend_port) : backend_port_(backend_port) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        listen(listen_fd_, 16) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) !=
            0) {
      return;
    }
    port_ = ntohs(addr.sin_port);
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }

  ~FreezableProxy() {
    stopping_ = true;
    if (accept_thread_.joinable()) accept_thread_.join();
    for (std::thread& t : pumps_) t.join();
    absl::MutexLock lock(&mu_);
    for (int fd : fds_) close(fd);
    close(listen_fd_);
  }

  int port() const { return port_; }
  void Freeze() { frozen_ = true; }
  int connections() const { return connections_; }

 private:
  // Waits up to 20 ms for `fd` to be readable; false when it was not.
  static bool Readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, 20) == 1;
  }

  void AcceptLoop() {
    while (!stopping_) {
      if (!Readable(listen_fd_)) continue;
      const int client = accept(listen_fd_, nullptr, nullptr);
      if (client < 0) continue;
      absl::MutexLock lock(&mu_);
      fds_.push_back(client);
      ++connections_;
      if (frozen_) continue;  // held open, never answered
      const int backend = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(backend_port_));
      fds_.push_back(backend);
      if (connect(backend, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
          0) {
        continue;
      }
      pumps_.emplace_back([this, client, backend] { Pump(client, backend); });
      pumps_.emplace_back([this, client, backend] { Pump(backend, client); });
    }
  }

  void Pump(int from, int to) {
    char buffer[16384];
    while (!stopping_) {
      if (frozen_) {
        absl::SleepFor(absl::Milliseconds(20));
        continue;
      }
      if (!Readable(from) || frozen_) continue;
      const ssize_t n = read(from, buffer, sizeof(buffer));
      if (n <= 0) {
        shutdown(to, SHUT_WR);
        return;
      }
      for (ssize_t sent = 0; sent < n;) {
        const ssize_t w = write(to, buffer + sent, n - sent);
        if (w <= 0) return;
        sent += w;
      }
    }
  }

  const int backend_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> frozen_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<int> connections_{0};
  absl::Mutex mu_;
  std::vector<int> fds_ ABSL_GUARDED_BY(mu_);
  std::thread accept_thread_;
  // Written by the accept thread only; joined after it stopped.
  std::vector<std::thread> pumps_;
};

cluster::TickRequest LeafTick(uint64_t sequence) {
  cluster::TickRequest r;
  r.replica_id = "leaf-1";
  r.sequence = sequence;
  cluster::PolicyPush push;
  push.policy = "inventory";
  core::KeyTick key;
  key.limit = {100, 0};
  push.keys.push_back(key);
  r.policies.push_back(push);
  return r;
}

std::unique_ptr<UpstreamStore> Store(const std::string& target) {
  UpstreamStore::Options options;
  options.target = target;
  // What a leaf with a 1 s tick uses: the deadline is the interval.
  options.timeout = absl::Seconds(1);
  absl::StatusOr<std::unique_ptr<UpstreamStore>> store =
      UpstreamStore::Create(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

// Ticks as the sync loop does (a failed tick is retried after 200 ms) until
// one succeeds or `limit` passed; the time from `since` to that success.
absl::Duration TickUntilAnswered(UpstreamStore& store, uint64_t* sequence,
                                 absl::Time since, absl::Duration limit) {
  while (absl::Now() - since < limit) {
    if (store.Tick(LeafTick(++*sequence)).ok()) return absl::Now() - since;
    absl::SleepFor(absl::Milliseconds(200));
  }
  return absl::InfiniteDuration();
}

TEST(UpstreamMove, ALeafMovesWhenItsCentralReplicaCloses) {
  LeaseTestServer a("central-a");
  LeaseTestServer b("central-b");
  ASSERT_TRUE(a.started() && b.started());
  std::unique_ptr<UpstreamStore> store =
      Store(absl::StrCat("ipv4:", a.address(), ",", b.address()));
  uint64_t sequence = 0;
  ASSERT_TRUE(store->Tick(LeafTick(++sequence)).ok());
  ASSERT_TRUE(store->Tick(LeafTick(++sequence)).ok());
  EXPECT_EQ(a.leaf_server().requests().size(), 2u);  // pick_first: one
  EXPECT_EQ(store->stats().peer, absl::StrCat("ipv4:", a.address()));

  const absl::Time stopped = absl::Now();
  a.Stop();
  const absl::Duration move =
      TickUntilAnswered(*store, &sequence, stopped, absl::Seconds(10));
  std::cout << "moved after the central replica closed: "
            << absl::FormatDuration(move) << "\n";
  ::testing::Test::RecordProperty(
      "move_ms", std::to_string(absl::ToInt64Milliseconds(move)));
  EXPECT_LT(move, absl::Seconds(2));
  EXPECT_EQ(store->stats().peer, absl::StrCat("ipv4:", b.address()));
  EXPECT_EQ(store->stats().moves, 1u);
  EXPECT_EQ(store->status().events.at("moved"), 1u);
  EXPECT_FALSE(b.leaf_server().requests().empty());
}

TEST(UpstreamMove, ALeafMovesWhenItsCentralReplicaStopsAnswering) {
  LeaseTestServer a("central-a");
  LeaseTestServer b("central-b");
  ASSERT_TRUE(a.started() && b.started());
  FreezableProxy proxy(a.port());
  ASSERT_NE(proxy.port(), 0);
  const std::string via_proxy = absl::StrCat("127.0.0.1:", proxy.port());
  std::unique_ptr<UpstreamStore> store =
      Store(absl::StrCat("ipv4:", via_proxy, ",", b.address()));
  uint64_t sequence = 0;
  ASSERT_TRUE(store->Tick(LeafTick(++sequence)).ok());
  EXPECT_EQ(store->stats().peer, absl::StrCat("ipv4:", via_proxy));
  EXPECT_EQ(a.leaf_server().requests().size(), 1u);

  const absl::Time frozen = absl::Now();
  proxy.Freeze();
  const absl::Duration move =
      TickUntilAnswered(*store, &sequence, frozen, absl::Seconds(20));
  std::cout << "moved after the central replica stopped answering: "
            << absl::FormatDuration(move) << "\n";
  ::testing::Test::RecordProperty(
      "move_ms", std::to_string(absl::ToInt64Milliseconds(move)));
  // Within the grace period: a leaf's grants last the stale period (3 s
  // at a 1 s tick).
  EXPECT_LT(move, absl::Seconds(3));
  EXPECT_EQ(store->stats().peer, absl::StrCat("ipv4:", b.address()));
  EXPECT_EQ(store->stats().moves, 1u);
  EXPECT_FALSE(b.leaf_server().requests().empty());
}

TEST(UpstreamMove, KeepalivePingsKeepTheConnectionOpenWhileIdle) {
  // gRPC's server defaults answer pings more often than every 5 minutes
  // with GOAWAY (too_many_pings), which would drop the connection every
  // few seconds; AddLeaseServerArguments allows the leaves' pace.
  LeaseTestServer a("central-a");
  ASSERT_TRUE(a.started());
  FreezableProxy proxy(a.port());
  std::unique_ptr<UpstreamStore> store =
      Store(absl::StrCat("127.0.0.1:", proxy.port()));
  uint64_t sequence = 0;
  ASSERT_TRUE(store->Tick(LeafTick(++sequence)).ok());
  // Idle: only pings (gRPC 1.51 sends at most one a second), enough of
  // them for gRPC's default server to count three strikes.
  absl::SleepFor(absl::Milliseconds(4500));
  ASSERT_TRUE(store->Tick(LeafTick(++sequence)).ok());
  EXPECT_EQ(proxy.connections(), 1);
  EXPECT_EQ(store->stats().failures, 0u);
}

TEST(UpstreamMove, ADnsTargetReachesTheCentralReplica) {
  // dns:/// goes through gRPC's resolver, as dns:///central.sluice:50051
  // does in a cluster; localhost resolves without a DNS server.
  LeaseTestServer a("central-a");
  ASSERT_TRUE(a.started());
  std::unique_ptr<UpstreamStore> store =
      Store(absl::StrCat("dns:///localhost:", a.port()));
  uint64_t sequence = 0;
  const absl::Duration took =
      TickUntilAnswered(*store, &sequence, absl::Now(), absl::Seconds(10));
  EXPECT_LT(took, absl::Seconds(10));
  EXPECT_EQ(store->stats().peer, absl::StrCat("ipv4:", a.address()));
}

}  // namespace
}  // namespace sluice::tree
