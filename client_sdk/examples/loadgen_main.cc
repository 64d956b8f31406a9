// SPDX-License-Identifier: Apache-2.0
// sluice-example-loadgen: an open-loop HTTP load generator for the example
// gateway. Requests go out on a schedule of rates (RateSchedule), whatever
// the answers, as real users arrive; each waits for a free keep-alive
// connection (at most --connections, opened as needed) and is timed from
// its scheduled send time, so a queue in front of a saturated server counts
// in the latency. One thread, non-blocking sockets and epoll.
//
// Writes one CSV row per second (--csv; see Recorder::CsvHeader) and,
// with --requests, one line per request:
//   scheduled_ms,finished_ms,outcome,status,latency_us,reason
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/files.h"
#include "loadgen_schedule.h"
#include "loadgen_stats.h"

ABSL_FLAG(std::string, url, "http://127.0.0.1:8080/",
          "http://IPv4:port/path to GET (no DNS, no TLS).");
ABSL_FLAG(std::string, schedule, "",
          "Rates over time, e.g. \"5s:100,20s:100-600,30s:600\".");
ABSL_FLAG(std::string, schedule_file, "",
          "File with the schedule (one segment a line, # comments).");
ABSL_FLAG(int, connections, 512, "Most keep-alive connections open at once.");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(2),
          "A request not answered this long after its scheduled time is a "
          "timeout (its connection is closed).");
ABSL_FLAG(std::string, csv, "", "Per-second CSV output file (required).");
ABSL_FLAG(std::string, requests, "", "Optional per-request output file.");

namespace sluice::examples {
namespace {

int64_t MonoNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

struct Target {
  sockaddr_in addr{};
  std::string request;  // the whole GET request
};

absl::StatusOr<Target> ParseUrl(const std::string& url) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "http://")) {
    return absl::InvalidArgumentError("--url must start with http://");
  }
  const size_t slash = rest.find('/');
  const absl::string_view hostport = rest.substr(0, slash);
  const std::string path =
      slash == absl::string_view::npos ? "/" : std::string(rest.substr(slash));
  const size_t colon = hostport.rfind(':');
  int port = 0;
  Target t;
  t.addr.sin_family = AF_INET;
  if (colon == absl::string_view::npos ||
      !absl::SimpleAtoi(hostport.substr(colon + 1), &port) || port <= 0 ||
      port > 65535 ||
      inet_pton(AF_INET, std::string(hostport.substr(0, colon)).c_str(),
                &t.addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--url ", url, ": want http://IPv4:port/path"));
  }
  t.addr.sin_port = htons(static_cast<uint16_t>(port));
  t.request = absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: ", hostport,
                           "\r\nUser-Agent: sluice-example-loadgen\r\n\r\n");
  return t;
}

struct Request {
  uint64_t id = 0;
  int64_t scheduled_ns = 0;  // monotonic
};

struct Connection {
  int fd = -1;
  bool connected = false;
  bool busy = false;
  Request request;
  size_t written = 0;
  std::string in;
  int64_t idle_since_ns = 0;
};

class LoadGenerator {
 public:
  LoadGenerator(Target target, RateSchedule schedule, int max_connections,
                absl::Duration timeout, std::FILE* requests_out)
      : target_(std::move(target)),
        schedule_(std::move(schedule)),
        max_connections_(max_connections),
        timeout_ns_(absl::ToInt64Nanoseconds(timeout)),
        requests_out_(requests_out) {}

  int Run() {
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_ < 0) {
      std::perror("sluice-example-loadgen: epoll_create1");
      return 1;
    }
    start_ns_ = MonoNanos();
    std::vector<epoll_event> events(256);
    int64_t last_sweep_ns = 0;
    while (true) {
      const int64_t now = MonoNanos();
      Schedule(now);
      if (schedule_done_ && waiting_.empty() && busy_ == 0) break;
      if (now - last_sweep_ns > 5'000'000) {
        ExpireBusy(now);
        CloseIdle(now);
        last_sweep_ns = now;
      }
      ExpireWaiting(now);
      Dispatch(now);
      recorder_.Outstanding(Since(now), waiting_.size() + busy_);
      const int n = epoll_wait(epoll_, events.data(),
                               static_cast<int>(events.size()), WaitMs());
      for (int i = 0; i < n; ++i) {
        auto* c = static_cast<Connection*>(events[i].data.ptr);
        OnEvent(c, events[i].events);
      }
      // Closed connections are freed here, after their events were handled.
      dead_.clear();
    }
    close(epoll_);
    return 0;
  }

  Recorder& recorder() { return recorder_; }
  const RateSchedule& schedule() const { return schedule_; }

 private:
  absl::Duration Since(int64_t ns) const {
    return absl::Nanoseconds(ns - start_ns_);
  }

  void Schedule(int64_t now) {
    while (!schedule_done_) {
      const std::optional<absl::Duration> at = schedule_.SendTime(next_id_);
      if (!at.has_value()) {
        schedule_done_ = true;
        break;
      }
      const int64_t due = start_ns_ + absl::ToInt64Nanoseconds(*at);
      if (due > now) {
        next_due_ns_ = due;
        return;
      }
      waiting_.push_back({next_id_++, due});
      recorder_.Sent(*at);
    }
  }

  int WaitMs() const {
    if (schedule_done_) return 5;
    const int64_t ms = (next_due_ns_ - MonoNanos()) / 1'000'000;
    return static_cast<int>(std::min<int64_t>(std::max<int64_t>(ms, 0), 5));
  }

  void Finish(const Request& r, int64_t now, Outcome outcome, int status,
              absl::string_view reason) {
    const absl::Duration latency = absl::Nanoseconds(now - r.scheduled_ns);
    recorder_.Finished(Since(now), outcome, reason, latency);
    if (requests_out_ != nullptr) {
      std::fprintf(requests_out_, "%lld,%lld,%s,%d,%lld,%s\n",
                   static_cast<long long>((r.scheduled_ns - start_ns_) / 1000000),
                   static_cast<long long>((now - start_ns_) / 1000000),
                   std::string(OutcomeName(outcome)).c_str(), status,
                   static_cast<long long>(absl::ToInt64Microseconds(latency)),
                   std::string(reason).c_str());
    }
  }

  void ExpireWaiting(int64_t now) {
    while (!waiting_.empty() &&
           now - waiting_.front().scheduled_ns >= timeout_ns_) {
      Finish(waiting_.front(), now, Outcome::kTimeout, 0, "");
      waiting_.pop_front();
    }
  }

  void ExpireBusy(int64_t now) {
    std::vector<Connection*> late;
    for (const auto& c : connections_) {
      if (c->busy && now - c->request.scheduled_ns >= timeout_ns_) {
        late.push_back(c.get());
      }
    }
    for (Connection* c : late) Fail(c, now, Outcome::kTimeout);
  }

  // Connections idle long enough that the server may close them: closed
  // first, so a request never goes out on a connection about to die.
  void CloseIdle(int64_t now) {
    std::vector<Connection*> old;
    for (const auto& c : connections_) {
      if (!c->busy && c->connected && now - c->idle_since_ns > 10'000'000'000) {
        old.push_back(c.get());
      }
    }
    for (Connection* c : old) Close(c);
  }

  void Dispatch(int64_t now) {
    while (!waiting_.empty()) {
      Connection* c = nullptr;
      if (!idle_.empty()) {
        c = idle_.back();  // the most recently used: warm
        idle_.pop_back();
      } else if (static_cast<int>(connections_.size()) < max_connections_) {
        c = Open(now);
        if (c == nullptr) return;
      } else {
        return;
      }
      c->busy = true;
      ++busy_;
      c->request = waiting_.front();
      waiting_.pop_front();
      c->written = 0;
      c->in.clear();
      if (c->connected) Write(c, now);
    }
  }

  Connection* Open(int64_t now) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      std::perror("sluice-example-loadgen: socket");
      return nullptr;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, reinterpret_cast<const sockaddr*>(&target_.addr),
                sizeof(target_.addr)) != 0 &&
        errno != EINPROGRESS) {
      close(fd);
      return nullptr;
    }
    auto conn = std::make_unique<Connection>();
    conn->fd = fd;
    conn->idle_since_ns = now;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.ptr = conn.get();
    epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev);
    connections_.push_back(std::move(conn));
    return connections_.back().get();
  }

  void Close(Connection* c) {
    epoll_ctl(epoll_, EPOLL_CTL_DEL, c->fd, nullptr);
    close(c->fd);
    c->fd = -1;
    if (c->busy) --busy_;
    for (size_t i = 0; i < idle_.size(); ++i) {
      if (idle_[i] == c) {
        idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
    }
    for (size_t i = 0; i < connections_.size(); ++i) {
      if (connections_[i].get() == c) {
        dead_.push_back(std::move(connections_[i]));
        connections_[i] = std::move(connections_.back());
        connections_.pop_back();
        break;
      }
    }
  }

  void Fail(Connection* c, int64_t now, Outcome outcome) {
    if (c->busy) Finish(c->request, now, outcome, 0, "");
    Close(c);
  }

  void OnEvent(Connection* c, uint32_t events) {
    if (c->fd < 0) return;  // closed earlier in this batch
    const int64_t now = MonoNanos();
    if (!c->connected && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0 || (events & EPOLLERR)) {
        Fail(c, now, Outcome::kConnError);
        return;
      }
      c->connected = true;
      if (!c->busy) idle_.push_back(c);
    }
    if (c->busy && (events & EPOLLOUT)) {
      if (!Write(c, now)) return;
    }
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) Read(c, now);
  }

  // False when the connection was closed.
  bool Write(Connection* c, int64_t now) {
    const std::string& req = target_.request;
    while (c->written < req.size()) {
      const ssize_t n = send(c->fd, req.data() + c->written,
                             req.size() - c->written, MSG_NOSIGNAL);
      if (n > 0) {
        c->written += static_cast<size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return true;
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        Fail(c, now, Outcome::kConnError);
        return false;
      }
    }
    return true;
  }

  void Read(Connection* c, int64_t now) {
    char buf[16384];
    bool eof = false;
    while (true) {
      const ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
      if (n > 0) {
        c->in.append(buf, static_cast<size_t>(n));
      } else if (n == 0) {
        eof = true;
        break;
      } else if (errno == EINTR) {
        continue;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        break;
      } else {
        eof = true;
        break;
      }
    }
    if (c->busy) {
      const std::optional<ResponseHead> head = ParseResponseHead(c->in);
      if (head.has_value() && head->status == 0) {
        Fail(c, now, Outcome::kConnError);
        return;
      }
      if (head.has_value() &&
          c->in.size() >= head->head_bytes + head->content_length) {
        const Outcome outcome = Classify(*head);
        Finish(c->request, now, outcome, head->status, head->reason);
        c->busy = false;
        --busy_;
        c->in.clear();
        c->idle_since_ns = now;
        if (head->close || eof) {
          Close(c);
        } else {
          idle_.push_back(c);
        }
        return;
      }
    }
    if (eof) Fail(c, now, Outcome::kConnError);
  }

  const Target target_;
  const RateSchedule schedule_;
  const int max_connections_;
  const int64_t timeout_ns_;
  std::FILE* const requests_out_;

  int epoll_ = -1;
  int64_t start_ns_ = 0;
  uint64_t next_id_ = 0;
  int64_t next_due_ns_ = 0;
  bool schedule_done_ = false;
  std::deque<Request> waiting_;
  uint64_t busy_ = 0;
  std::vector<std::unique_ptr<Connection>> connections_;
  std::vector<Connection*> idle_;
  std::vector<std::unique_ptr<Connection>> dead_;
  Recorder recorder_;
};

int Main() {
  absl::StatusOr<Target> target = ParseUrl(absl::GetFlag(FLAGS_url));
  if (!target.ok()) {
    std::fprintf(stderr, "sluice-example-loadgen: %s\n",
                 std::string(target.status().message()).c_str());
    return 2;
  }
  std::string spec = absl::GetFlag(FLAGS_schedule);
  if (const std::string file = absl::GetFlag(FLAGS_schedule_file);
      !file.empty()) {
    absl::StatusOr<std::string> text = base::ReadRegularFile(file);
    if (!text.ok()) {
      std::fprintf(stderr, "sluice-example-loadgen: cannot read %s: %s\n",
                   file.c_str(), std::string(text.status().message()).c_str());
      return 2;
    }
    spec = *std::move(text);
  }
  absl::StatusOr<RateSchedule> schedule = RateSchedule::Parse(spec);
  if (!schedule.ok()) {
    std::fprintf(stderr, "sluice-example-loadgen: %s\n",
                 std::string(schedule.status().message()).c_str());
    return 2;
  }
  const std::string csv_path = absl::GetFlag(FLAGS_csv);
  if (csv_path.empty() || absl::GetFlag(FLAGS_connections) < 1) {
    std::fprintf(stderr,
                 "sluice-example-loadgen: --csv is required, --connections "
                 ">= 1\n");
    return 2;
  }
  std::FILE* csv = std::fopen(csv_path.c_str(), "w");
  std::FILE* requests = nullptr;
  if (!absl::GetFlag(FLAGS_requests).empty()) {
    requests = std::fopen(absl::GetFlag(FLAGS_requests).c_str(), "w");
  }
  if (csv == nullptr ||
      (!absl::GetFlag(FLAGS_requests).empty() && requests == nullptr)) {
    std::fprintf(stderr, "sluice-example-loadgen: cannot write the output\n");
    return 2;
  }
  std::fprintf(stderr,
               "sluice-example-loadgen: %s for %s, %.0f requests, up to %d "
               "connections\n",
               absl::GetFlag(FLAGS_url).c_str(),
               absl::FormatDuration(schedule->length()).c_str(),
               schedule->CountBy(schedule->length()),
               absl::GetFlag(FLAGS_connections));
  LoadGenerator gen(*std::move(target), *std::move(schedule),
                    absl::GetFlag(FLAGS_connections),
                    absl::GetFlag(FLAGS_timeout), requests);
  const int rc = gen.Run();
  Recorder& rec = gen.recorder();
  std::fprintf(csv, "%s\n", Recorder::CsvHeader().c_str());
  uint64_t sent = 0, ok = 0, degraded = 0, refused = 0, errors = 0,
           timeouts = 0, conn_errors = 0;
  for (size_t i = 0; i < rec.seconds().size(); ++i) {
    const SecondStats& s = rec.seconds()[i];
    sent += s.sent;
    ok += s.ok;
    degraded += s.degraded;
    refused += s.refused;
    errors += s.errors + s.other;
    timeouts += s.timeouts;
    conn_errors += s.conn_errors;
    const double offered =
        gen.schedule().RateAt(absl::Seconds(static_cast<double>(i) + 0.5));
    std::fprintf(csv, "%s\n", rec.CsvRow(i, offered).c_str());
  }
  std::fclose(csv);
  if (requests != nullptr) std::fclose(requests);
  std::fprintf(stderr,
               "sluice-example-loadgen: sent %llu: ok %llu, degraded %llu, "
               "refused %llu, errors %llu, timeouts %llu, connection errors "
               "%llu\n",
               static_cast<unsigned long long>(sent),
               static_cast<unsigned long long>(ok),
               static_cast<unsigned long long>(degraded),
               static_cast<unsigned long long>(refused),
               static_cast<unsigned long long>(errors),
               static_cast<unsigned long long>(timeouts),
               static_cast<unsigned long long>(conn_errors));
  return rc;
}

}  // namespace
}  // namespace sluice::examples

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Open-loop HTTP load generator for the Sluice example gateway. Usage: "
      "sluice-example-loadgen --url http://127.0.0.1:8080/api/x "
      "--schedule 5s:100,20s:100-600 --csv out.csv [--requests req.csv]");
  absl::ParseCommandLine(argc, argv);
  return sluice::examples::Main();
}
