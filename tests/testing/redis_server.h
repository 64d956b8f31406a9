// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_REDIS_SERVER_H_
#define SLUICE_TESTS_TESTING_REDIS_SERVER_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <hiredis/hiredis.h>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "tests/testing/free_port.h"
#include "tests/testing/wait_for.h"

namespace sluice::testing {

// Runs `args` as one command on 127.0.0.1:`port` (after AUTH `password`
// unless empty) and flattens the reply: strings, statuses and integers as
// text, arrays element by element, nil as "", an error as "(error) ...".
inline std::vector<std::string> RedisQuery(
    int port, const std::vector<std::string>& args,
    const std::string& password = "") {
  std::vector<std::string> out;
  timeval tv{1, 0};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
  if (c == nullptr || c->err != 0) {
    if (c != nullptr) redisFree(c);
    return {"(error) cannot connect"};
  }
  redisSetTimeout(c, tv);
  auto run = [&](const std::vector<std::string>& command) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const std::string& a : command) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    return static_cast<redisReply*>(redisCommandArgv(
        c, static_cast<int>(argv.size()), argv.data(), lens.data()));
  };
  if (!password.empty()) {
    if (redisReply* r = run({"AUTH", password})) freeReplyObject(r);
  }
  redisReply* r = run(args);
  std::function<void(const redisReply*)> flatten = [&](const redisReply* e) {
    switch (e->type) {
      case REDIS_REPLY_ARRAY:
        for (size_t i = 0; i < e->elements; ++i) flatten(e->element[i]);
        break;
      case REDIS_REPLY_INTEGER:
        out.push_back(std::to_string(e->integer));
        break;
      case REDIS_REPLY_ERROR:
        out.push_back("(error) " + std::string(e->str, e->len));
        break;
      case REDIS_REPLY_NIL:
        out.emplace_back();
        break;
      default:
        out.emplace_back(e->str, e->len);
    }
  };
  if (r != nullptr) {
    flatten(r);
    freeReplyObject(r);
  } else {
    out.push_back("(error) no reply");
  }
  redisFree(c);
  return out;
}

// A real redis-server child process on loopback, without persistence, for
// integration tests. It can be paused (SIGSTOP), resumed, killed and started
// again on the same port.
class RedisServer {
 public:
  RedisServer() : port_(FreePort()) {}
  ~RedisServer() { Kill(); }

  // Extra redis-server arguments for the next Start ("--requirepass", "pw",
  // "--replicaof", "127.0.0.1 6380", ...).
  void set_args(std::vector<std::string> args) { args_ = std::move(args); }
  // Extra environment variables ("NAME=VALUE") for the next Start's
  // server, on top of this process's own.
  void set_env(std::vector<std::string> env) { env_ = std::move(env); }
  // The password the test's own commands AUTH with ("" sends no AUTH).
  void set_password(std::string password) { password_ = std::move(password); }

  // Starts the server and waits until it answers PING. False on failure,
  // with the reason in StartError() (redis-server's own lines are on this
  // process's stderr). `extra` are more redis-server arguments
  // ("--cluster-enabled", "yes").
  bool Start(const std::vector<std::string>& extra = {}) {
    start_error_.clear();
    std::vector<std::string> args = {
        "redis-server", "--port",       std::to_string(port_), "--bind",
        "127.0.0.1",    "--save",       "",                    "--appendonly",
        "no",           "--loglevel",   "warning"};
    args.insert(args.end(), args_.begin(), args_.end());
    args.insert(args.end(), extra.begin(), extra.end());
    // Built before the fork: the child only execs.
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
    for (std::string& e : env_) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      execvpe("redis-server", argv.data(), envp.data());
      _exit(127);
    }
    // Up when the server that answers on the port is this child (not one
    // another test left there), or given up when the child has exited.
    int status = 0;
    bool exited = false;
    const bool up = WaitFor(
                        [&] {
                          exited = waitpid(pid_, &status, WNOHANG) == pid_;
                          return exited || ServedByChild();
                        },
                        absl::Seconds(5), absl::Milliseconds(25))
                        .has_value() &&
                    !exited;
    if (up) return true;
    if (exited) {
      pid_ = -1;
      start_error_ = absl::StrCat(
          "redis-server on port ", port_, " exited at start (",
          WIFEXITED(status) ? absl::StrCat("exit code ", WEXITSTATUS(status))
                            : absl::StrCat("signal ", WTERMSIG(status)),
          "); its log lines above say why");
    } else {
      start_error_ = absl::StrCat("redis-server on port ", port_,
                                  " did not answer PING within 5 s");
    }
    return false;
  }
  // Why the last Start failed; "" after a good one.
  const std::string& StartError() const { return start_error_; }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGCONT);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  void Pause() { kill(pid_, SIGSTOP); }
  void Resume() { kill(pid_, SIGCONT); }

  // Whether the server answering on the port is the child of the last
  // Start, by the process id it reports.
  bool ServedByChild() const {
    if (pid_ <= 0 || !Ping()) return false;
    const std::string info = Command("INFO server");
    return info.find(absl::StrCat("process_id:", pid_, "\r")) !=
           std::string::npos;
  }

  bool Ping() const {
    timeval tv{0, 200000};
    redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, tv);
    bool ok = false;
    if (c != nullptr && c->err == 0) {
      redisSetTimeout(c, tv);
      if (!password_.empty()) {
        auto* a = static_cast<redisReply*>(
            redisCommand(c, "AUTH %s", password_.c_str()));
        if (a != nullptr) freeReplyObject(a);
      }
      auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
      ok = r != nullptr && r->type == REDIS_REPLY_STATUS;
      if (r != nullptr) freeReplyObject(r);
    }
    if (c != nullptr) redisFree(c);
    return ok;
  }

  // Runs one command and returns its integer or string reply as text.
  std::string Command(const std::string& command) const {
    timeval tv{1, 0};
    redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, tv);
    std::string out;
    if (c != nullptr && c->err == 0) {
      if (!password_.empty()) {
        auto* a = static_cast<redisReply*>(
            redisCommand(c, "AUTH %s", password_.c_str()));
        if (a != nullptr) freeReplyObject(a);
      }
      auto* r = static_cast<redisReply*>(redisCommand(c, command.c_str()));
      if (r != nullptr) {
        if (r->type == REDIS_REPLY_INTEGER) out = std::to_string(r->integer);
        if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) {
          out.assign(r->str, r->len);
        }
        freeReplyObject(r);
      }
    }
    if (c != nullptr) redisFree(c);
    return out;
  }

  // Runs one command given as its arguments; the reply as text, an array
  // as its elements (nested arrays flattened), an error as "ERR ...".
  std::vector<std::string> Run(const std::vector<std::string>& args) const {
    timeval tv{5, 0};
    redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, tv);
    std::vector<std::string> out;
    if (c != nullptr && c->err == 0) {
      redisSetTimeout(c, tv);
      std::vector<const char*> argv;
      std::vector<size_t> lens;
      for (const std::string& a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
      }
      auto* r = static_cast<redisReply*>(redisCommandArgv(
          c, static_cast<int>(argv.size()), argv.data(), lens.data()));
      if (r != nullptr) {
        Flatten(r, &out);
        freeReplyObject(r);
      }
    }
    if (c != nullptr) redisFree(c);
    return out;
  }

  // Calls per command name from INFO commandstats ("zadd", "evalsha", ...).
  std::map<std::string, int64_t> CommandCalls() const {
    std::map<std::string, int64_t> calls;
    std::istringstream info(Command("INFO commandstats"));
    std::string line;
    while (std::getline(info, line)) {
      if (line.rfind("cmdstat_", 0) != 0) continue;
      const std::string name = line.substr(8, line.find(':') - 8);
      const size_t at = line.find("calls=");
      if (at == std::string::npos) continue;
      calls[name] = std::atoll(line.c_str() + at + 6);
    }
    return calls;
  }
  // Calls of every command but the test's own INFO and CONFIG RESETSTAT.
  int64_t TotalCommandCalls() const {
    int64_t total = 0;
    for (const auto& [name, n] : CommandCalls()) {
      if (name != "info" && name != "config|resetstat") total += n;
    }
    return total;
  }

  // Runs one command; see RedisQuery.
  std::vector<std::string> Query(const std::vector<std::string>& args) const {
    return RedisQuery(port_, args, password_);
  }

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  bool running() const { return pid_ > 0; }

 private:
  static void Flatten(const redisReply* r, std::vector<std::string>* out) {
    if (r->type == REDIS_REPLY_ARRAY) {
      for (size_t i = 0; i < r->elements; ++i) Flatten(r->element[i], out);
    } else if (r->type == REDIS_REPLY_INTEGER) {
      out->push_back(std::to_string(r->integer));
    } else if (r->type != REDIS_REPLY_NIL) {
      out->emplace_back(r->str, r->len);
    }
  }

  const int port_;
  std::vector<std::string> args_;
  std::vector<std::string> env_;
  std::string password_;
  std::string start_error_;
  pid_t pid_ = -1;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_REDIS_SERVER_H_
