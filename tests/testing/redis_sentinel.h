// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_REDIS_SENTINEL_H_
#define SLUICE_TESTS_TESTING_REDIS_SENTINEL_H_

// A Redis Sentinel setup on loopback for integration tests: one master, one
// replica and three redis-sentinel processes monitoring the master as "m"
// (quorum 2, down after 1 s, failover timeout 5 s), each on a free port,
// with config files in a temp dir. With a password, both servers require it
// (and the replica uses it for replication) and the sentinels know it.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"

namespace sluice::testing {

class RedisSentinelGroup {
 public:
  static constexpr const char* kMaster = "m";

  explicit RedisSentinelGroup(std::string password = "")
      : password_(std::move(password)), dir_("redis_sentinel") {
    for (auto& s : servers_) s = std::make_unique<RedisServer>();
    for (int& port : sentinel_ports_) port = FreePort();
  }
  ~RedisSentinelGroup() {
    for (pid_t& pid : sentinel_pids_) {
      if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
  }

  // Starts everything and waits until the replica is in sync and every
  // sentinel knows the replica and the other sentinels (so a failover can
  // run). False after 30 s.
  bool Start() {
    for (int i = 0; i < 2; ++i) {
      std::vector<std::string> args;
      if (!password_.empty()) {
        args = {"--requirepass", password_, "--masterauth", password_};
      }
      if (i == 1) {
        args.push_back("--replicaof");
        args.push_back(absl::StrCat("127.0.0.1 ", servers_[0]->port()));
      }
      servers_[i]->set_args(args);
      servers_[i]->set_password(password_);
      if (!servers_[i]->Start()) return false;
    }
    for (int i = 0; i < 3; ++i) {
      const std::string conf = dir_.File(absl::StrCat("sentinel", i, ".conf"));
      std::ofstream out(conf);
      out << "port " << sentinel_ports_[i] << "\n"
          << "bind 127.0.0.1\n"
          << "dir " << dir_.path() << "\n"
          << "loglevel warning\n"
          << "logfile " << dir_.File(absl::StrCat("sentinel", i, ".log"))
          << "\n"
          << "sentinel monitor " << kMaster << " 127.0.0.1 "
          << servers_[0]->port() << " 2\n"
          << "sentinel down-after-milliseconds " << kMaster << " 1000\n"
          << "sentinel failover-timeout " << kMaster << " 5000\n";
      if (!password_.empty()) {
        out << "sentinel auth-pass " << kMaster << " " << password_ << "\n";
      }
      out.close();
      sentinel_pids_[i] = fork();
      if (sentinel_pids_[i] == 0) {
        execlp("redis-sentinel", "redis-sentinel", conf.c_str(),
               static_cast<char*>(nullptr));
        _exit(127);
      }
    }
    return WaitFor(
               [&] {
                 if (!InSync()) return false;
                 for (int i = 0; i < 3; ++i) {
                   if (SentinelQuery(i, {"SENTINEL", "replicas", kMaster})
                           .empty() ||
                       SentinelQuery(i, {"SENTINEL", "sentinels", kMaster})
                               .size() < 2) {
                     return false;
                   }
                 }
                 return true;
               },
               absl::Seconds(30), absl::Milliseconds(100))
        .has_value();
  }

  // "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3" for --redis-sentinels.
  std::string sentinels() const {
    std::vector<std::string> out;
    for (int port : sentinel_ports_) out.push_back(absl::StrCat("127.0.0.1:", port));
    return absl::StrJoin(out, ",");
  }
  RedisServer& server(int i) { return *servers_[i]; }

  // The index of the server that says ROLE master, or -1.
  int MasterIndex() const {
    for (int i = 0; i < 2; ++i) {
      const std::vector<std::string> role = servers_[i]->Query({"ROLE"});
      if (!role.empty() && role[0] == "master") return i;
    }
    return -1;
  }
  // What sentinel `i` answers for the master: "127.0.0.1:PORT" or "".
  std::string SentinelMaster(int i) const {
    const std::vector<std::string> a =
        SentinelQuery(i, {"SENTINEL", "get-master-addr-by-name", kMaster});
    return a.size() == 2 ? absl::StrCat(a[0], ":", a[1]) : std::string();
  }
  std::vector<std::string> SentinelQuery(
      int i, const std::vector<std::string>& args) const {
    return RedisQuery(sentinel_ports_[i], args);
  }

  // Whether the replica (of the current master) has everything the master
  // had written when this was called: Redis replication is asynchronous.
  bool WaitReplicated(absl::Duration timeout) const {
    const int master = MasterIndex();
    if (master < 0) return false;
    const int64_t target = Offset(master, "master_repl_offset:");
    return WaitFor([&] { return Offset(1 - master, "slave_repl_offset:") >= target; },
                   timeout, absl::Milliseconds(20))
        .has_value();
  }

 private:
  bool InSync() const {
    return servers_[1]->Command("INFO replication").find(
               "master_link_status:up") != std::string::npos;
  }
  int64_t Offset(int server, const std::string& field) const {
    const std::string info = servers_[server]->Command("INFO replication");
    const size_t at = info.find(field);
    if (at == std::string::npos) return -1;
    return std::atoll(info.c_str() + at + field.size());
  }

  const std::string password_;
  TempDir dir_;
  std::unique_ptr<RedisServer> servers_[2];
  int sentinel_ports_[3] = {};
  pid_t sentinel_pids_[3] = {-1, -1, -1};
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_REDIS_SENTINEL_H_
