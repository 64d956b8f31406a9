// SPDX-License-Identifier: Apache-2.0
// The SDK when Sluice is down or slow: every Acquire returns within its
// deadline (plus 5 ms, the bound) and follows the failure mode.
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "sluice/client/client.h"
#include "sluice/v1/decision.grpc.pb.h"

namespace sluice::client {
namespace {

constexpr absl::Duration kDeadline = absl::Milliseconds(20);
// What a call may take past its deadline: scheduling on a loaded 2-core
// machine took up to 20 ms. Still well short of the slow server's 100 ms, so
// a call that waited for the answer fails.
constexpr absl::Duration kSlack = absl::Milliseconds(30);

// A loopback port nothing listens on: bound, then closed.
int ClosedPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::unique_ptr<Client> DownClient(FailureMode mode, bool use_stream) {
  ClientOptions options;
  options.use_stream = use_stream;
  options.target = absl::StrCat("127.0.0.1:", ClosedPort());
  options.acquire_timeout = kDeadline;
  options.on_failure = mode;
  auto client = Client::Create(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return *std::move(client);
}

// Every test runs with unary calls and with the Decide stream.
class SluiceDownTest : public ::testing::TestWithParam<bool> {};

INSTANTIATE_TEST_SUITE_P(Transports, SluiceDownTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Stream" : "Unary";
                         });

TEST_P(SluiceDownTest, EveryAcquireFailsOpenWithinTheDeadline) {
  std::unique_ptr<Client> client = DownClient(FailureMode::kFailOpen, GetParam());
  for (int i = 0; i < 100; ++i) {
    const absl::Time start = absl::Now();
    Permit permit = client->Acquire("inventory");
    const absl::Duration took = absl::Now() - start;
    EXPECT_LE(took, kDeadline + kSlack) << "call " << i;
    EXPECT_TRUE(permit.allowed());
    EXPECT_TRUE(permit.decided_locally());
    EXPECT_EQ(permit.reason(), Reason::kSluiceUnavailable);
    EXPECT_FALSE(permit.sluice_error().ok());
    EXPECT_EQ(permit.call_timeout(), absl::Seconds(1));
    permit.Report(Outcome::kSuccess, absl::Milliseconds(1));  // A no-op.
  }
  ClientStats stats = client->stats();
  EXPECT_EQ(stats.acquires, 100u);
  EXPECT_EQ(stats.local_decisions, 100u);
  // After three failures in a row the client stopped asking.
  EXPECT_GT(stats.backoff_decisions, 50u);
  EXPECT_EQ(stats.reports_sent + stats.reports_failed, 0u);
}

TEST_P(SluiceDownTest, FailClosedRejects503) {
  std::unique_ptr<Client> client = DownClient(FailureMode::kFailClosed, GetParam());
  for (int i = 0; i < 10; ++i) {
    const absl::Time start = absl::Now();
    Permit permit = client->Acquire("inventory");
    EXPECT_LE(absl::Now() - start, kDeadline + kSlack);
    EXPECT_EQ(permit.verdict(), Verdict::kReject);
    EXPECT_EQ(permit.reason(), Reason::kSluiceUnavailable);
    EXPECT_EQ(permit.http_status(), 503);
  }
}

TEST_P(SluiceDownTest, CallStillReachesTheBackendWhenFailingOpen) {
  std::unique_ptr<Client> client = DownClient(FailureMode::kFailOpen, GetParam());
  CallResult result = client->Call("inventory", [](const CallContext& ctx) {
    EXPECT_EQ(ctx.timeout, absl::Seconds(1));
    Response r;
    r.body = "real";
    return absl::StatusOr<Response>(r);
  });
  EXPECT_EQ(result.kind, CallResult::Kind::kBackend);
  EXPECT_TRUE(result.decided_locally);
  EXPECT_EQ(result.reason, Reason::kSluiceUnavailable);
  EXPECT_EQ(result.response.body, "real");
}

TEST_P(SluiceDownTest, AsyncAcquireFailsOpen) {
  std::unique_ptr<Client> client = DownClient(FailureMode::kFailOpen, GetParam());
  for (int i = 0; i < 5; ++i) {
    absl::Notification done;
    bool allowed = false, local = false;
    client->AcquireAsync("inventory", "", 1, [&](Permit permit) {
      allowed = permit.allowed();
      local = permit.decided_locally();
      done.Notify();
    });
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
    EXPECT_TRUE(allowed);
    EXPECT_TRUE(local);
  }
}

// A DecisionService that answers ALLOW after `delay` and records reports.
class SlowSluice final : public v1::DecisionService::CallbackService {
 public:
  explicit SlowSluice(absl::Duration delay) : delay_(delay) {}
  ~SlowSluice() override { JoinAll(); }

  grpc::ServerUnaryReactor* Acquire(grpc::CallbackServerContext* context,
                                    const v1::AcquireRequest* request,
                                    v1::AcquireResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    absl::MutexLock lock(&mu_);
    const int id = ++granted_;
    threads_.emplace_back([this, reactor, response, id] {
      absl::SleepFor(delay_);  // the slowness under test
      response->set_verdict(v1::ALLOW);
      response->set_permit_id(absl::StrCat(id));
      reactor->Finish(grpc::Status::OK);
    });
    return reactor;
  }

  grpc::ServerUnaryReactor* ReportResult(
      grpc::CallbackServerContext* context,
      const v1::ReportResultRequest* request,
      v1::ReportResultResponse* response) override {
    {
      absl::MutexLock lock(&mu_);
      if (request->outcome() == v1::CANCELLED) ++cancelled_;
    }
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  // Waits (bounded) until `n` CANCELLED reports came in.
  bool AwaitCancelled(int n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return cancelled_ >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
  }

  // Acquires that reached this service.
  int acquires() {
    absl::MutexLock lock(&mu_);
    return granted_;
  }

  void JoinAll() {
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&mu_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }

 private:
  const absl::Duration delay_;
  absl::Mutex mu_;
  int granted_ ABSL_GUARDED_BY(mu_) = 0;
  int cancelled_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

// SlowSluice has no Decide, like a server older than the stream: a client
// that asks for the stream uses the unary calls instead, and loses nothing.
TEST(SluiceWithoutDecideTest, AStreamClientFallsBackToUnaryCalls) {
  SlowSluice service(absl::ZeroDuration());
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();

  ClientOptions options;
  options.channel = server->InProcessChannel(grpc::ChannelArguments());
  options.acquire_timeout = absl::Seconds(5);  // the answer, not the clock
  options.use_stream = true;
  auto client = Client::Create(options);
  ASSERT_TRUE(client.ok());
  constexpr int kCalls = 5;
  for (int i = 0; i < kCalls; ++i) {
    Permit permit = (*client)->Acquire("inventory");
    EXPECT_TRUE(permit.allowed()) << i;
    EXPECT_FALSE(permit.decided_locally()) << i;
    permit.Report(Outcome::kCancelled, absl::ZeroDuration());
  }
  absl::Notification done;
  bool async_local = true;
  (*client)->AcquireAsync("inventory", "", 1, [&](Permit permit) {
    async_local = permit.decided_locally();
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_FALSE(async_local);
  EXPECT_EQ(service.acquires(), kCalls + 1);
  // The reports reached the unary ReportResult (the permit of the async
  // call is reported CANCELLED when it goes away).
  EXPECT_TRUE(service.AwaitCancelled(kCalls + 1));
  EXPECT_EQ((*client)->stats().local_decisions, 0u);
  server->Shutdown();
}

TEST(SluiceSlowTest, AcquireGivesUpAtTheDeadlineAndHandsLateAllowsBack) {
  SlowSluice service(absl::Milliseconds(100));
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();

  ClientOptions options;
  options.channel = server->InProcessChannel(grpc::ChannelArguments());
  options.acquire_timeout = kDeadline;
  options.backoff_after_failures = 1000;  // Ask every time.
  auto client = Client::Create(options);
  ASSERT_TRUE(client.ok());

  constexpr int kCalls = 10;
  for (int i = 0; i < kCalls; ++i) {
    const absl::Time start = absl::Now();
    Permit permit = (*client)->Acquire("inventory");
    EXPECT_LE(absl::Now() - start, kDeadline + kSlack) << "call " << i;
    EXPECT_TRUE(permit.allowed());
    EXPECT_TRUE(permit.decided_locally());
    EXPECT_EQ(permit.sluice_error().code(),
              absl::StatusCode::kDeadlineExceeded);
  }
  // Each ALLOW that arrived after the caller moved on is reported CANCELLED,
  // so it does not hold a slot or count as a TIMEOUT when it expires.
  EXPECT_TRUE(service.AwaitCancelled(kCalls));
  service.JoinAll();
  server->Shutdown();
}

// A Sluice that is connected but slow is not asked again during the
// backoff: only a failed connection coming back ends a period early.
TEST(SluiceSlowTest, BackoffStopsAskingASlowSluice) {
  SlowSluice service(absl::Milliseconds(100));
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();

  ClientOptions options;
  options.channel = server->InProcessChannel(grpc::ChannelArguments());
  options.acquire_timeout = kDeadline;
  options.backoff_after_failures = 2;
  options.backoff_initial = absl::Seconds(30);  // Stays off for the test.
  options.backoff_max = absl::Seconds(30);
  auto client = Client::Create(options);
  ASSERT_TRUE(client.ok());
  for (int i = 0; i < 10; ++i) {
    const absl::Time start = absl::Now();
    Permit permit = (*client)->Acquire("inventory");
    EXPECT_LE(absl::Now() - start, kDeadline + kSlack);
    EXPECT_TRUE(permit.allowed());
  }
  EXPECT_EQ((*client)->stats().backoff_decisions, 8u);
  EXPECT_EQ(service.acquires(), 2);
  service.AwaitCancelled(2);
  service.JoinAll();
  server->Shutdown();
}

}  // namespace
}  // namespace sluice::client
