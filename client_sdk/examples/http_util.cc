#include "http_util.h"

#include <signal.h>

#include <cstdio>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sluice::examples {

absl::StatusOr<std::pair<std::string, int>> SplitHostPort(
    absl::string_view address, absl::string_view what) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " must be host:port with a port in [0, 65535], got \"", address,
        "\""));
  }
  return std::make_pair(std::string(address.substr(0, colon)), port);
}

std::string JsonQuote(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += "\"";
  return out;
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
}

}  // namespace sluice::examples
