// SPDX-License-Identifier: Apache-2.0
// The real sluiced against hostile request shapes, its memory read from
// /proc/<pid>/status: a Decide message of a million empty calls, a client
// that never reads its Decide responses, count-amplified HTTP and RLS
// bodies six at once, and a permit id cut inside a character. Each figure
// are the bounds docs/operations.md states.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/v1/decision.grpc.pb.h"
#include "tests/testing/port_file.h"
#include "tests/testing/sluiced_process.h"
#include "tests/testing/wait_for.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
using Stream = grpc::ClientReaderWriter<v1::DecideRequest, v1::DecideResponse>;

constexpr int64_t kMiB = 1 << 20;

// A field of /proc/<pid>/status in bytes (VmRSS, VmHWM), or -1.
int64_t ProcStatusBytes(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return std::stoll(line.substr(field.size() + 1)) * 1024;
    }
  }
  return -1;
}

// Resets VmHWM to the current RSS (Linux 4.0+), so that a peak read later
// is the peak of what happened in between.
void ResetPeak(pid_t pid) {
  std::ofstream(absl::StrCat("/proc/", pid, "/clear_refs")) << "5";
}

// `n` empty elements of `field` (two bytes each): the cheapest way to make
// a parser build `n` message objects.
std::string EmptyElements(int64_t n, int field) {
  std::string bytes;
  bytes.reserve(2 * n);
  for (int64_t i = 0; i < n; ++i) {
    bytes.push_back(static_cast<char>(field << 3 | 2));
    bytes.push_back('\0');
  }
  return bytes;
}

grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// One unary call of `method` with raw `bytes`, as a hostile client sends
// it; the status.
grpc::Status RawUnary(const std::shared_ptr<grpc::Channel>& channel,
                      const std::string& method, const std::string& bytes) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(30));
  const grpc::ByteBuffer request = Buffer(bytes);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  return done.get_future().get();
}

// A TCP connection to 127.0.0.1:<port>, or -1.
int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// POST `body` to http://127.0.0.1:<port><path> on a connection of its own;
// the status line and body of the answer ("" if none came).
std::string RawPost(int port, const std::string& path,
                    const std::string& body) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return "";
  timeval tv{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const std::string request = absl::StrCat(
      "POST ", path,
      " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Connection: close\r\nContent-Length: ",
      body.size(), "\r\n\r\n", body);
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent,
                           MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string answer;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) answer.append(buf, n);
  close(fd);
  return answer;
}

// Opens a connection to 127.0.0.1:<port>, starts a request and sends up to
// `header_bytes` of tiny header fields ("a:b"), reading as it goes: the
// status line of the answer, or "" if none came within 10 s.
std::string FloodHeaders(int port, int64_t header_bytes) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return "";
  std::string chunk = "GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  std::string fields;
  for (int i = 0; i < 13107; ++i) fields += "a:b\r\n";  // 64 kB
  int64_t sent = 0;
  size_t offset = 0;
  std::string answer;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (answer.find("\r\n") == std::string::npos && absl::Now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (sent < header_bytes) p.events |= POLLOUT;
    if (poll(&p, 1, 100) < 0) break;
    if (p.revents & POLLIN) {
      char buf[512];
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      answer.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (p.revents & POLLOUT) {
      const ssize_t n = send(fd, chunk.data() + offset, chunk.size() - offset,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        sent = header_bytes;  // refused: only the answer is left to read
        continue;
      }
      sent += n;
      offset += static_cast<size_t>(n);
      if (offset == chunk.size()) {
        chunk = fields;
        offset = 0;
      }
    } else if (p.revents & (POLLERR | POLLHUP)) {
      break;
    }
  }
  close(fd);
  return answer.substr(0, answer.find("\r\n"));
}

// `n` empty objects in the top-level array `member`.
std::string AmplifiedJson(const std::string& member, int64_t n) {
  std::string body = "{\"" + member + "\":[{}";
  body.reserve(3 * n + 16);
  for (int64_t i = 1; i < n; ++i) body += ",{}";
  return body + "]}";
}

class HostileInputTest : public ::testing::Test {
 protected:
  void Start(const std::string& policies,
             std::vector<std::string> extra = {}) {
    std::string error;
    ASSERT_TRUE(sluiced_.Start(policies, extra, "", &error)) << error;
    pid_ = sluiced_.pid();
    ASSERT_GT(pid_, 0);
  }
  int64_t Rss() const { return ProcStatusBytes(pid_, "VmRSS"); }
  int64_t Peak() const { return ProcStatusBytes(pid_, "VmHWM"); }

  // Sends a few ordinary calls, so that lazily built state (thread pools,
  // the policy index) is in the baseline rather than in a figure.
  void WarmUp() {
    for (int i = 0; i < 20; ++i) sluiced_.Acquire("inventory");
  }

  testing::SluicedProcess sluiced_;
  pid_t pid_ = -1;
};

constexpr char kPolicies[] = R"(policies:
  - name: inventory
    call_timeout: 60s
    concurrency: { max_in_flight: 100000000 }
)";

TEST_F(HostileInputTest, OneDecideMessageOfAMillionEmptyCallsCostsItsBytes) {
  Start(kPolicies);
  WarmUp();
  ResetPeak(pid_);
  const int64_t before = Rss();

  // 1,048,568 empty calls in just under 2 MiB (the port's limit), and
  // 2,097,152 in 4 MiB: one error each, no answer per call.
  for (const int64_t calls : {int64_t{(1 << 20) - 8}, int64_t{2} << 20}) {
    v1::DecideRequest request;
    ASSERT_TRUE(request.ParseFromString(EmptyElements(calls, 1)));
    grpc::ClientContext context;
    std::unique_ptr<Stream> stream =
        v1::DecisionService::NewStub(sluiced_.data_channel())
            ->Decide(&context);
    stream->Write(request);
    v1::DecideResponse response;
    EXPECT_FALSE(stream->Read(&response)) << "an answer per call came back";
    const grpc::Status status = stream->Finish();
    if (calls < (1 << 20)) {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
      EXPECT_THAT(status.error_message(),
                  HasSubstr(absl::StrCat("at most 1000 per DecideRequest, got ",
                                         calls)));
    } else {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    }
  }
  const int64_t growth = Peak() - before;
  std::printf("Decide 2 MiB + 4 MiB hostile messages: peak RSS growth %.1f MB"
              " (before %.1f MB)\n",
              growth / 1e6, before / 1e6);
  EXPECT_LE(growth, 16 * kMiB);
  sluiced_.Acquire("inventory");  // still serving
}

constexpr char kFallbackPolicies[] = R"(policies:
  - name: inventory
    call_timeout: 60s
    concurrency: { max_in_flight: 100000000 }
  - name: big
    call_timeout: 60s
    concurrency: { max_in_flight: 100000000 }
    fallback:
      strategy: STATIC
      content_type: text/plain
      serve_on_failure: true
      payload: ')";

TEST_F(HostileInputTest, AClientThatNeverReadsHoldsABoundedAmount) {
  // Every allowed Acquire of "big" answers with its 60 kB fallback: one
  // message of 1000 calls would answer 60 MB.
  Start(absl::StrCat(kFallbackPolicies, std::string(60000, 'f'), "'\n"));
  WarmUp();
  const int64_t before = Rss();

  v1::DecideRequest message;
  for (int i = 0; i < 1000; ++i) {
    v1::DecideCall* call = message.add_calls();
    call->set_request_id(i + 1);
    call->mutable_acquire()->set_dependency("big");
  }
  constexpr int kStreams = 2;
  std::unique_ptr<v1::DecisionService::Stub> stub =
      v1::DecisionService::NewStub(sluiced_.data_channel());
  grpc::ClientContext contexts[kStreams];
  std::unique_ptr<Stream> streams[kStreams];
  std::vector<std::thread> writers;
  std::atomic<int> written{0};
  for (int s = 0; s < kStreams; ++s) {
    streams[s] = stub->Decide(&contexts[s]);
    writers.emplace_back([&, s] {
      // Writes until flow control stops it (or the stream is cancelled);
      // never reads.
      for (int m = 0; m < 100000 && streams[s]->Write(message); ++m) ++written;
    });
  }
  // The server stops handling once its queue is full: the count of
  // decisions settles.
  const auto decisions = [&] {
    return sluiced_.Metric("sluice_acquire_duration_seconds_count");
  };
  double settled = -1;
  for (int i = 0; i < 50; ++i) {
    absl::SleepFor(absl::Milliseconds(200));
    const double now = decisions();
    if (now == settled) break;
    settled = now;
  }
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(decisions(), settled) << "the server went on handling calls";
  const int64_t held = Rss() - before;
  std::printf("never-reading clients: %d streams hold %.1f MB (%.1f MB each);"
              " %d messages written, %.0f calls handled\n",
              kStreams, held / 1e6, held / 1e6 / kStreams, written.load(),
              settled);
  EXPECT_LE(held, kStreams * 16 * kMiB);
  // Still serving others meanwhile.
  EXPECT_EQ(sluiced_.Acquire("inventory").verdict(), v1::ALLOW);

  for (auto& context : contexts) context.TryCancel();
  for (std::thread& t : writers) t.join();
  for (auto& stream : streams) stream->Finish();
  ASSERT_TRUE(testing::WaitFor(
      [&] { return sluiced_.Metric("sluice_decide_streams") == 0; },
      absl::Seconds(10)));
  absl::SleepFor(absl::Milliseconds(500));
  const int64_t after = Rss() - before;
  std::printf("after cancel: %.1f MB above the start\n", after / 1e6);
  EXPECT_LE(after, 4 * kMiB) << "memory of cancelled streams stayed held";
}

TEST_F(HostileInputTest, SixCountAmplifiedBodiesAtOnce) {
  Start(kPolicies, {"--http-listen=127.0.0.1:0"});
  const int http = testing::PortOf(sluiced_.listener("http"));
  ASSERT_GT(http, 0);
  WarmUp();
  // 1.3 million empty calls or reports (3.9 MB, under the 4 MiB body
  // limit); 2.1 million empty descriptors (4.2 MB, above the port's limit)
  // and 30,000 (in 60 kB, under every size limit).
  const std::string decide = AmplifiedJson("calls", 1300000);
  const std::string reports = AmplifiedJson("reports", 1300000);
  const std::string rls_huge =
      "\x0a\x04" "edge" + EmptyElements(2100000, 2);
  const std::string rls_many = "\x0a\x04" "edge" + EmptyElements(30000, 2);
  const std::string kRls =
      "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

  ResetPeak(pid_);
  const int64_t before = Rss();
  std::vector<std::future<std::string>> answers;
  answers.push_back(std::async(std::launch::async,
                               [&] { return RawPost(http, "/v1/decide", decide); }));
  answers.push_back(std::async(std::launch::async,
                               [&] { return RawPost(http, "/v1/decide", decide); }));
  answers.push_back(std::async(std::launch::async, [&] {
    return RawPost(http, "/v1/reports", reports);
  }));
  answers.push_back(std::async(std::launch::async, [&] {
    return RawPost(http, "/v1/reports", reports);
  }));
  answers.push_back(std::async(std::launch::async, [&] {
    const grpc::Status s = RawUnary(sluiced_.data_channel(), kRls, rls_huge);
    return absl::StrCat(s.error_code(), " ", s.error_message());
  }));
  answers.push_back(std::async(std::launch::async, [&] {
    const grpc::Status s = RawUnary(sluiced_.data_channel(), kRls, rls_many);
    return absl::StrCat(s.error_code(), " ", s.error_message());
  }));
  std::vector<std::string> got;
  for (auto& a : answers) got.push_back(a.get());
  const int64_t peak = Peak() - before;
  absl::SleepFor(absl::Milliseconds(500));
  const int64_t after = Rss() - before;
  std::printf("six count-amplified bodies at once: peak RSS growth %.1f MB,"
              " %.1f MB after\n",
              peak / 1e6, after / 1e6);

  EXPECT_THAT(got[0], HasSubstr("calls: at most 1000 per request, got 1300000"));
  EXPECT_THAT(got[1], HasSubstr("400"));
  EXPECT_THAT(got[2],
              HasSubstr("reports: at most 10000 per request, got 1300000"));
  EXPECT_THAT(got[3], HasSubstr("400"));
  EXPECT_THAT(got[4], HasSubstr(absl::StrCat(
                          grpc::StatusCode::RESOURCE_EXHAUSTED, " ")));
  EXPECT_THAT(got[5], HasSubstr("descriptors: at most 64 per "
                                "RateLimitRequest, got 30000"));
  EXPECT_LE(peak, 32 * kMiB);
  EXPECT_LE(after, 8 * kMiB) << "memory stayed held after the answers";
  sluiced_.Acquire("inventory");
}

// 16 MB of tiny header fields on one connection, then on 128 at once: each
// is answered 431 once its head passes the 64 KiB the server reads, and
// the server's memory grows by the heads it holds, not by what was sent.
TEST_F(HostileInputTest, SixteenMegabytesOfHeadersAreRefusedAt64KiB) {
  Start(kPolicies, {"--http-listen=127.0.0.1:0"});
  const int http = testing::PortOf(sluiced_.listener("http"));
  ASSERT_GT(http, 0);
  WarmUp();
  for (const int connections : {1, 128}) {
    ResetPeak(pid_);
    const int64_t before = Rss();
    std::vector<std::future<std::string>> answers;
    for (int i = 0; i < connections; ++i) {
      answers.push_back(std::async(std::launch::async, [http] {
        return FloodHeaders(http, int64_t{16} << 20);
      }));
    }
    int refused = 0;
    std::string other;
    for (auto& a : answers) {
      const std::string status = a.get();
      if (absl::StrContains(status, " 431 ")) {
        ++refused;
      } else {
        other = status;
      }
    }
    const int64_t peak = Peak() - before;
    std::printf("%d connection(s) x 16 MB of headers: %d answered 431, peak "
                "RSS growth %.1f MB\n",
                connections, refused, peak / 1e6);
    EXPECT_EQ(refused, connections) << "one answer was: \"" << other << "\"";
    EXPECT_LE(peak, 32 * kMiB);
  }
  sluiced_.Acquire("inventory");
}

TEST_F(HostileInputTest, APermitIdCutInsideACharacterKeepsTheStream) {
  Start(kPolicies);
  grpc::ClientContext context;
  // Fails rather than hangs if the stream dies.
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  std::unique_ptr<Stream> stream =
      v1::DecisionService::NewStub(sluiced_.data_channel())->Decide(&context);
  // 40 bytes are quoted; byte 40 is inside the three-byte euro sign.
  v1::DecideRequest request;
  v1::DecideCall* report = request.add_calls();
  report->set_request_id(1);
  report->mutable_report()->set_dependency("inventory");
  report->mutable_report()->set_permit_id(std::string(38, '1') +
                                          "\xe2\x82\xac" "1");
  report->mutable_report()->set_outcome(v1::SUCCESS);
  v1::DecideCall* acquire = request.add_calls();
  acquire->set_request_id(2);
  acquire->mutable_acquire()->set_dependency("inventory");
  ASSERT_TRUE(stream->Write(request));
  v1::DecideResponse response;
  int results = 0;
  while (results < 2 && stream->Read(&response)) {
    for (const v1::DecideResult& r : response.results()) {
      ++results;
      if (r.request_id() == 1) {
        ASSERT_TRUE(r.has_error());
        EXPECT_THAT(r.error().message(), HasSubstr("permit_id"));
      } else {
        ASSERT_TRUE(r.has_acquire());
        EXPECT_EQ(r.acquire().verdict(), v1::ALLOW);
      }
    }
  }
  ASSERT_EQ(results, 2) << "the stream died: " << stream->Finish().error_message();
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

}  // namespace
}  // namespace sluice
