// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_CHILD_PROCESS_H_
#define SLUICE_TESTS_TESTING_CHILD_PROCESS_H_

// A child process other than sluiced (a backend, nginx) for integration
// tests, its output in a log file. It runs in a process group of its own, so
// that a server that forks workers (nginx) is ended with all of them.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "tests/testing/sluiced_process.h"
#include "tests/testing/wait_for.h"

namespace sluice::testing {

// Not thread-safe; one test thread owns it.
class ChildProcess {
 public:
  ChildProcess() = default;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() { Kill(); }

  // Starts args[0] with `args` and this process's environment, stdout and
  // stderr appended to `log_path`. False when it cannot be spawned.
  bool Start(std::vector<std::string> args, const std::string& log_path) {
    Kill();
    log_path_ = log_path;
    std::vector<std::string> env = CurrentEnvironment();
    std::vector<char*> argv, envp;
    for (std::string& s : args) argv.push_back(s.data());
    for (std::string& s : env) envp.push_back(s.data());
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);  // a group led by the child
    pid_t pid = -1;
    const int rc =
        posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    pid_ = rc == 0 ? pid : -1;
    return pid_ > 0;
  }

  pid_t pid() const { return pid_; }
  std::string Log() const { return ReadFile(log_path_); }

  // True once the child has exited (and been reaped).
  bool Exited() {
    if (pid_ <= 0) return true;
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) pid_ = -1;
    return pid_ <= 0;
  }

  // Sends `signal` to the child alone (SIGSTOP, SIGCONT ...).
  void Signal(int signal) {
    if (pid_ > 0) kill(pid_, signal);
  }

  // Sends `signal` (SIGTERM, SIGQUIT) and waits up to `timeout` for the
  // child to exit; then SIGKILL to its whole group. True if it exited on
  // its own.
  bool Stop(int signal, absl::Duration timeout) {
    if (pid_ <= 0) return true;
    const pid_t group = pid_;
    kill(pid_, signal);
    const bool exited =
        WaitFor([&] { return Exited(); }, timeout, absl::Milliseconds(10))
            .has_value();
    kill(-group, SIGKILL);  // what the child left behind, if anything
    if (!exited) Kill();
    return exited;
  }

  // SIGKILL to the child's whole group, then reaps the child.
  void Kill() {
    if (pid_ <= 0) return;
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  std::string log_path_;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_CHILD_PROCESS_H_
