// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_REDIS_CLUSTER_H_
#define SLUICE_TESTS_TESTING_REDIS_CLUSTER_H_

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"

namespace sluice::testing {

// A real Redis Cluster on loopback for integration tests: 3 masters with one
// replica each (6 redis-servers on free ports, no persistence), made with
// `redis-cli --cluster create`. It can move one slot to another master the
// way a reshard does, one step at a time.
class RedisCluster {
 public:
  static constexpr int kNodes = 6;

  RedisCluster() : dir_("sluice_redis_cluster") {
    for (int i = 0; i < kNodes; ++i) {
      nodes_.push_back(std::make_unique<RedisServer>());
    }
  }
  // Extra environment variables ("NAME=VALUE") for every node's Start.
  void set_env(const std::vector<std::string>& env) {
    for (auto& n : nodes_) n->set_env(env);
  }
  // The nodes' cluster-node-timeout and repl-timeout (ms; the default 2000
  // lets the tests fail a master over quickly). A cluster on a simulated
  // clock that jumps takes long ones, or it would fail its masters over.
  void set_timeouts_ms(int64_t ms) { timeout_ms_ = ms; }
  ~RedisCluster() {
    for (auto& n : nodes_) n->Kill();
  }

  // Starts the nodes, creates the cluster and waits until every node says
  // cluster_state:ok. False on failure, with the reason in StartError().
  bool Start() {
    for (auto& n : nodes_) {
      const std::string port = std::to_string(n->port());
      // The bus port is a free one too (by default it is port + 10000,
      // which may be taken or past 65535).
      // A replica's first full sync starts at once, not after Redis's
      // default 5 s wait for more replicas to share it.
      if (!n->Start({"--cluster-enabled", "yes", "--cluster-config-file",
                     "nodes-" + port + ".conf", "--dir", dir_.path(),
                     "--cluster-node-timeout", std::to_string(timeout_ms_),
                     "--repl-timeout",
                     std::to_string(std::max<int64_t>(60, timeout_ms_ / 1000)),
                     "--cluster-port", std::to_string(FreePort()),
                     "--repl-diskless-sync-delay", "0"})) {
        start_error_ = "redis cluster: node " + port +
                       " did not start: " + n->StartError();
        return false;
      }
    }
    std::vector<std::string> args = {"redis-cli", "--cluster", "create"};
    for (auto& n : nodes_) args.push_back(n->address());
    args.insert(args.end(), {"--cluster-replicas", "1", "--cluster-yes"});
    if (!RunQuietly(args)) {
      start_error_ = "redis cluster: redis-cli --cluster create failed";
      return false;
    }
    const bool ok =
        WaitFor(
            [this] {
              for (auto& n : nodes_) {
                if (n->Command("CLUSTER INFO").find("cluster_state:ok") ==
                    std::string::npos) {
                  return false;
                }
              }
              // Every node must also know every slot's master, and every
              // replica have its master's data: a failover before the
              // first sync would lose what the master held.
              return Agreed() && ReplicasInSync();
            },
            absl::Seconds(30), absl::Milliseconds(100))
            .has_value();
    if (!ok) {
      start_error_ =
          "redis cluster: the nodes did not all say cluster_state:ok, agree "
          "on the slots and have their replicas in sync within 30 s";
    }
    return ok;
  }
  // Why Start failed.
  const std::string& StartError() const { return start_error_; }

  // "127.0.0.1:P1,127.0.0.1:P2": two seeds, the way an operator gives some.
  std::string Seeds() const {
    return absl::StrCat(nodes_[0]->address(), ",", nodes_[1]->address());
  }
  std::vector<RedisServer*> nodes() const {
    std::vector<RedisServer*> out;
    for (auto& n : nodes_) out.push_back(n.get());
    return out;
  }
  // The masters, as the first node sees them now.
  std::vector<RedisServer*> Masters() const {
    std::vector<RedisServer*> out;
    for (const NodeLine& l : Nodes()) {
      if (l.master) out.push_back(ByPort(l.port));
    }
    return out;
  }
  RedisServer* ByPort(int port) const {
    for (auto& n : nodes_) {
      if (n->port() == port) return n.get();
    }
    return nullptr;
  }
  std::string IdOf(const RedisServer* node) const {
    return node->Command("CLUSTER MYID");
  }
  int SlotOf(const std::string& key) const {
    return std::atoi(nodes_[0]->Run({"CLUSTER", "KEYSLOT", key})[0].c_str());
  }
  // The master that owns `slot`, as the first node sees it.
  RedisServer* OwnerOf(int slot) const {
    for (const NodeLine& l : Nodes()) {
      if (l.master && l.Serves(slot)) return ByPort(l.port);
    }
    return nullptr;
  }

  // Moves `slot` from its master to `to` as a reshard does it, one step at a
  // time: IMPORTING on `to`, MIGRATING on the owner (commands for keys the
  // owner still has run there), `before_keys` later every key of the slot in
  // one MIGRATE (from then on the owner answers ASK), `before_owner` later
  // SETSLOT NODE on every master (from then on MOVED). `on_step` hears
  // "migrating", "keys moved" and "owner set" as each step is done. False on
  // a failed step, with the reason on stderr.
  bool MoveSlot(
      int slot, RedisServer* to, absl::Duration before_keys,
      absl::Duration before_owner,
      const std::function<void(const std::string&)>& on_step =
          [](const std::string&) {}) {
    RedisServer* from = OwnerOf(slot);
    if (from == nullptr || from == to) return false;
    const std::string s = std::to_string(slot);
    const std::string from_id = IdOf(from), to_id = IdOf(to);
    if (!Ok(to->Run({"CLUSTER", "SETSLOT", s, "IMPORTING", from_id})) ||
        !Ok(from->Run({"CLUSTER", "SETSLOT", s, "MIGRATING", to_id}))) {
      return false;
    }
    on_step("migrating");
    absl::SleepFor(before_keys);
    for (;;) {
      std::vector<std::string> keys =
          from->Run({"CLUSTER", "GETKEYSINSLOT", s, "1000"});
      if (keys.empty()) break;
      std::vector<std::string> migrate = {
          "MIGRATE", "127.0.0.1", std::to_string(to->port()), "", "0",
          "5000",    "KEYS"};
      migrate.insert(migrate.end(), keys.begin(), keys.end());
      if (!Ok(from->Run(migrate))) return false;
    }
    on_step("keys moved");
    absl::SleepFor(before_owner);
    // The new owner first, so it never refuses its own slot (as redis-cli).
    if (!Ok(to->Run({"CLUSTER", "SETSLOT", s, "NODE", to_id})) ||
        !Ok(from->Run({"CLUSTER", "SETSLOT", s, "NODE", to_id}))) {
      return false;
    }
    for (RedisServer* m : Masters()) {
      if (m != to && m != from)
        m->Run({"CLUSTER", "SETSLOT", s, "NODE", to_id});
    }
    on_step("owner set");
    return WaitFor([this] { return Agreed(); }, absl::Seconds(10),
                   absl::Milliseconds(50))
        .has_value();
  }

  // The lowest slot `master` owns (the first that `redis-cli --cluster
  // reshard` takes from it); -1 if none.
  int FirstSlotOf(const RedisServer* master) const {
    int first = -1;
    for (const NodeLine& l : Nodes()) {
      if (l.port != master->port()) continue;
      for (auto [a, b] : l.ranges) {
        if (first < 0 || a < first) first = a;
      }
    }
    return first;
  }

  // `redis-cli --cluster reshard` of `slots` slots from `from` to `to`,
  // with `extra` arguments ("--cluster-replace"); true when it exits 0 and
  // the nodes agree again.
  bool Reshard(RedisServer* from, RedisServer* to, int slots,
               const std::vector<std::string>& extra) {
    std::vector<std::string> args = {
        "redis-cli",           "--cluster",      "reshard",
        from->address(),       "--cluster-from", IdOf(from),
        "--cluster-to",        IdOf(to),         "--cluster-slots",
        std::to_string(slots), "--cluster-yes"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunQuietly(args) &&
           WaitFor([this] { return Agreed(); }, absl::Seconds(10),
                   absl::Milliseconds(50))
               .has_value();
  }

  // A manual failover of `master`: its replica takes over.
  bool Failover(RedisServer* master) {
    const std::string id = IdOf(master);
    for (const NodeLine& l : Nodes()) {
      if (!l.master && l.master_id == id) {
        if (!Ok(ByPort(l.port)->Run({"CLUSTER", "FAILOVER"}))) return false;
        return WaitFor(
                   [&] {
                     const std::vector<std::string> role =
                         ByPort(l.port)->Run({"ROLE"});
                     return !role.empty() && role[0] == "master" && Agreed();
                   },
                   absl::Seconds(20), absl::Milliseconds(100))
            .has_value();
      }
    }
    return false;
  }

 private:
  struct NodeLine {
    int port = 0;
    std::string id;
    bool master = false;
    std::string master_id;
    std::vector<std::pair<int, int>> ranges;
    bool Serves(int slot) const {
      for (auto [a, b] : ranges) {
        if (slot >= a && slot <= b) return true;
      }
      return false;
    }
  };

  // CLUSTER NODES of the first node: "id ip:port@cport flags master ping
  // pong epoch link slot-ranges...".
  std::vector<NodeLine> Nodes() const {
    std::vector<NodeLine> out;
    std::istringstream in(nodes_[0]->Command("CLUSTER NODES"));
    std::string line;
    while (std::getline(in, line)) {
      const std::vector<std::string> f =
          absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() < 8) continue;
      NodeLine l;
      l.id = f[0];
      const std::string addr = f[1].substr(0, f[1].find('@'));
      l.port = std::atoi(addr.substr(addr.rfind(':') + 1).c_str());
      l.master = f[2].find("master") != std::string::npos &&
                 f[2].find("fail") == std::string::npos;
      l.master_id = f[3];
      for (size_t i = 8; i < f.size(); ++i) {
        if (f[i][0] == '[') continue;  // a migration in progress
        const size_t dash = f[i].find('-');
        const int a = std::atoi(f[i].c_str());
        const int b =
            dash == std::string::npos ? a : std::atoi(f[i].c_str() + dash + 1);
        l.ranges.emplace_back(a, b);
      }
      out.push_back(std::move(l));
    }
    return out;
  }

  // Whether every replica's link to its master is up (its first sync done).
  bool ReplicasInSync() const {
    for (auto& n : nodes_) {
      const std::string info = n->Command("INFO replication");
      if (info.find("role:slave") != std::string::npos &&
          info.find("master_link_status:up") == std::string::npos) {
        return false;
      }
    }
    return true;
  }

  // Whether every node answers the same CLUSTER SLOTS.
  bool Agreed() const {
    const std::vector<std::string> first = Normalized(nodes_[0].get());
    if (first.empty()) return false;
    for (auto& n : nodes_) {
      if (Normalized(n.get()) != first) return false;
    }
    return true;
  }
  static std::vector<std::string> Normalized(const RedisServer* n) {
    std::vector<std::string> out;
    std::istringstream in(n->Command("CLUSTER NODES"));
    std::string line;
    while (std::getline(in, line)) {
      std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() < 8) continue;
      // id, role and slots; not the times, the epoch nor "myself".
      const bool master = f[2].find("master") != std::string::npos;
      std::string slots;
      for (size_t i = 8; i < f.size(); ++i) {
        if (f[i][0] != '[') slots += f[i] + " ";
      }
      out.push_back(
          absl::StrCat(f[0], master ? " master " : " replica ", slots));
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  static bool Ok(const std::vector<std::string>& reply) {
    if (reply.empty() || reply[0].rfind("OK", 0) != 0) {
      std::fprintf(stderr, "redis cluster: step answered \"%s\"\n",
                   reply.empty() ? "(nothing)" : reply[0].c_str());
      return false;
    }
    return true;
  }

  // Runs a command with its output discarded; true on exit status 0.
  static bool RunQuietly(std::vector<std::string> args) {
    const pid_t pid = fork();
    if (pid == 0) {
      freopen("/dev/null", "w", stdout);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp(argv[0], argv.data());
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }

  TempDir dir_;
  std::vector<std::unique_ptr<RedisServer>> nodes_;
  int64_t timeout_ms_ = 2000;
  std::string start_error_;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_REDIS_CLUSTER_H_
