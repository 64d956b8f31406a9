// SPDX-License-Identifier: Apache-2.0
#include "http_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <cstdio>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sluice::examples {

std::string JsonText(const nlohmann::ordered_json& body) {
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void StopOnSignal(httplib::Server* server) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([server, set] {
    int sig = 0;
    sigwait(&set, &sig);
    server->stop();
  }).detach();
}

void ConfigureServer(httplib::Server* server, int threads) {
  server->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server->set_keep_alive_max_count(1000000);
  server->set_keep_alive_timeout(30);
  // Small responses: Nagle plus delayed ACKs would add ~40 ms each.
  server->set_tcp_nodelay(true);
}

void WidenListenBacklog(int port) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  while (dirent* entry = readdir(dir)) {
    int fd = 0;
    if (!absl::SimpleAtoi(entry->d_name, &fd)) continue;
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 ||
        !listening) {
      continue;
    }
    sockaddr_storage addr{};
    socklen_t addr_len = sizeof(addr);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0) {
      continue;
    }
    int bound = -1;
    if (addr.ss_family == AF_INET) {
      bound = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    } else if (addr.ss_family == AF_INET6) {
      bound = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    }
    // listen() again on a listening socket only changes its backlog.
    if (bound == port) listen(fd, 1024);
  }
  closedir(dir);
}

}  // namespace sluice::examples
