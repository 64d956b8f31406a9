// SPDX-License-Identifier: Apache-2.0
// The SDK against a real DecisionServiceImpl and core Engine, in process.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "server/rpc/decision_service.h"
#include "sluice/client/client.h"
#include "tests/client_sdk/policies_from_yaml.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/wait_for.h"

namespace sluice::client {
namespace {

constexpr char kPolicies[] = R"yaml(
policies:
  - name: guarded
    call_timeout: 250ms
    concurrency: { max_in_flight: 1 }
  - name: limited
    rate_limit: { rate: 5, per: 1s, burst: 5 }
  - name: fragile
    call_timeout: 100ms
    breaker:
      consecutive_failures: 3
      open_duration: 10s
      max_open_duration: 10s
    fallback:
      strategy: CACHE
      cache_ttl: 60s
      payload: '{"cached":false}'
      content_type: application/json
      serve_on_failure: true
  - name: static-fallback
    breaker: { consecutive_failures: 1, open_duration: 10s }
    fallback: { strategy: STATIC, payload: 'static answer', content_type: text/plain }
  - name: open-no-fallback
    breaker: { consecutive_failures: 1, open_duration: 10s }
  - name: shared
    concurrency: { max_in_flight: 4 }
  - name: guarded-batch
    concurrency: { max_in_flight: 1000 }
)yaml";

class InProcessSluice {
 public:
  InProcessSluice() : engine_(&clock_, core::Engine::Options()), service_(&engine_) {
    InstallPolicies(kPolicies, &engine_);
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~InProcessSluice() { server_->Shutdown(); }

  std::shared_ptr<grpc::Channel> Channel() {
    return server_->InProcessChannel(grpc::ChannelArguments());
  }
  testing::FakeClock& clock() { return clock_; }
  core::Engine& engine() { return engine_; }
  rpc::DecisionServiceImpl& service() { return service_; }

 private:
  testing::FakeClock clock_;
  core::Engine engine_;
  rpc::DecisionServiceImpl service_;
  std::unique_ptr<grpc::Server> server_;
};

class ClientTest : public ::testing::Test {
 protected:
  virtual bool UseStream() const { return false; }

  void SetUp() override {
    ClientOptions options;
    options.channel = sluice_.Channel();
    options.use_stream = UseStream();
    // In-process calls are fast, but the test machine may be busy.
    options.acquire_timeout = absl::Seconds(5);
    auto client = Client::Create(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  // Reports are asynchronous; this waits until Sluice has answered `n` of
  // them (a completion, not the passing of time).
  void AwaitReports(uint64_t n) {
    if (!testing::WaitFor(
            [&] {
              const ClientStats s = client_->stats();
              return s.reports_sent + s.reports_failed >= n;
            },
            absl::Seconds(10), absl::Milliseconds(1))) {
      FAIL() << "reports did not complete";
    }
  }

  static absl::StatusOr<Response> Ok(std::string body) {
    Response r;
    r.body = std::move(body);
    r.content_type = "application/json";
    return r;
  }

  InProcessSluice sluice_;
  std::unique_ptr<Client> client_;
};

// The client's behaviour through either transport: one unary RPC per call,
// or the Decide stream (ClientOptions::use_stream).
class ClientTransportTest : public ClientTest,
                            public ::testing::WithParamInterface<bool> {
 protected:
  bool UseStream() const override { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Transports, ClientTransportTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Stream" : "Unary";
                         });

TEST_F(ClientTest, CreateRejectsOptionsWithoutTarget) {
  auto client = Client::Create(ClientOptions());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  ClientOptions options;
  options.target = "127.0.0.1:1";
  options.acquire_timeout = absl::ZeroDuration();
  EXPECT_EQ(Client::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Each bad setting is refused word for word as gateways see it: the field,
// the rule and the value given.
TEST(ClientOptionsTest, CreateNamesTheBadFieldAndItsValue) {
  const struct {
    void (*change)(ClientOptions&);
    const char* error;
  } cases[] = {
      {[](ClientOptions& o) { o.acquire_timeout = absl::ZeroDuration(); },
       "ClientOptions.acquire_timeout must be > 0, got 0"},
      {[](ClientOptions& o) { o.local_call_timeout = absl::Milliseconds(-5); },
       "ClientOptions.local_call_timeout must be > 0, got -5ms"},
      {[](ClientOptions& o) { o.backoff_after_failures = 0; },
       "ClientOptions.backoff_after_failures must be >= 1, got 0"},
      {[](ClientOptions& o) { o.report_timeout = -absl::Seconds(1); },
       "ClientOptions.report_timeout must be > 0, got -1s"},
      {[](ClientOptions& o) { o.max_reports_in_flight = -3; },
       "ClientOptions.max_reports_in_flight must be >= 1, got -3"},
  };
  for (const auto& c : cases) {
    ClientOptions options;
    options.target = "127.0.0.1:1";
    c.change(options);
    EXPECT_EQ(Client::Create(options).status().message(), c.error);
  }
}

TEST_P(ClientTransportTest, AllowCarriesThePolicysCallTimeout) {
  Permit permit = client_->Acquire("guarded");
  EXPECT_TRUE(permit.allowed());
  EXPECT_FALSE(permit.decided_locally());
  EXPECT_EQ(permit.reason(), Reason::kNone);
  EXPECT_EQ(permit.call_timeout(), absl::Milliseconds(250));
  EXPECT_FALSE(permit.reported());
  permit.Report(Outcome::kSuccess, absl::Milliseconds(3));
  EXPECT_TRUE(permit.reported());
}

TEST_P(ClientTransportTest, ReportReleasesTheConcurrencySlot) {
  Permit first = client_->Acquire("guarded");
  ASSERT_TRUE(first.allowed());
  Permit second = client_->Acquire("guarded");
  EXPECT_EQ(second.verdict(), Verdict::kReject);
  EXPECT_EQ(second.reason(), Reason::kConcurrencyLimited);
  EXPECT_EQ(second.http_status(), 429);
  EXPECT_TRUE(second.reported());  // Nothing owed for a refusal.

  first.Report(Outcome::kSuccess, absl::Milliseconds(1));
  AwaitReports(1);
  EXPECT_TRUE(client_->Acquire("guarded").allowed());
}

TEST_P(ClientTransportTest, UnreportedPermitReportsCancelledWhenDestroyed) {
  {
    Permit permit = client_->Acquire("guarded");
    ASSERT_TRUE(permit.allowed());
  }
  AwaitReports(1);
  EXPECT_EQ(client_->stats().reports_auto_cancelled, 1u);
  // The slot is free again, and CANCELLED did not count as a failure.
  Permit again = client_->Acquire("guarded");
  EXPECT_TRUE(again.allowed());
  EXPECT_EQ(again.breaker_state(), BreakerState::kClosed);
}

TEST_P(ClientTransportTest, MoveAssignSettlesTheOverwrittenPermit) {
  Permit held = client_->Acquire("guarded");
  ASSERT_TRUE(held.allowed());
  held = Permit();  // Drops the ALLOW: reported CANCELLED.
  AwaitReports(1);
  EXPECT_TRUE(client_->Acquire("guarded").allowed());
}

TEST_P(ClientTransportTest, RateLimitRejectsWithRetryAfter) {
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(client_->Acquire("limited").allowed()) << i;
  }
  Permit over = client_->Acquire("limited");
  EXPECT_EQ(over.verdict(), Verdict::kReject);
  EXPECT_EQ(over.reason(), Reason::kRateLimited);
  EXPECT_EQ(over.http_status(), 429);
  EXPECT_GT(over.retry_after(), absl::ZeroDuration());
  sluice_.clock().Advance(absl::Seconds(1));
  EXPECT_TRUE(client_->Acquire("limited").allowed());
}

TEST_P(ClientTransportTest, CallReturnsTheBackendAnswerAndReportsSuccess) {
  absl::Duration seen_timeout;
  CallResult result = client_->Call("fragile", [&](const CallContext& ctx) {
    seen_timeout = ctx.timeout;
    return Ok(R"({"items":[1,2]})");
  });
  EXPECT_EQ(result.kind, CallResult::Kind::kBackend);
  EXPECT_TRUE(result.backend_called);
  EXPECT_EQ(result.outcome, Outcome::kSuccess);
  EXPECT_EQ(result.response.body, R"({"items":[1,2]})");
  EXPECT_EQ(seen_timeout, absl::Milliseconds(100));
  AwaitReports(1);
  EXPECT_EQ(client_->stats().reports_sent, 1u);
}

TEST_P(ClientTransportTest, OpenBreakerServesTheCachedGoodResponse) {
  client_->Call("fragile", [](const CallContext&) { return Ok("fresh"); });
  // Unary reports go up side by side and may land in any order: the
  // success must land before the three failures for them to be the
  // consecutive failures that trip the breaker (ASan CI once had it land
  // between them).
  AwaitReports(1);
  // The policy serves its fallback on failure, so the ALLOW carries it: a
  // failed call gets the cached good answer without any gateway setting.
  CallOptions options;
  options.default_fallback.body = "gateway default";
  for (int i = 0; i < 3; ++i) {
    CallResult failed = client_->Call(
        "fragile",
        [](const CallContext&) -> absl::StatusOr<Response> {
          return absl::UnavailableError("connection refused");
        },
        options);
    EXPECT_EQ(failed.kind, CallResult::Kind::kDegraded);
    EXPECT_EQ(failed.reason, Reason::kCallFailed);
    EXPECT_EQ(failed.outcome, Outcome::kFailure);
    EXPECT_EQ(failed.fallback_source, CallResult::FallbackSource::kCache);
    EXPECT_EQ(failed.response.body, "fresh");
  }
  AwaitReports(4);

  bool called = false;
  CallResult result = client_->Call("fragile", [&](const CallContext&) {
    called = true;
    return Ok("should not run");
  });
  EXPECT_FALSE(called);
  EXPECT_EQ(result.kind, CallResult::Kind::kDegraded);
  EXPECT_EQ(result.reason, Reason::kCircuitOpen);
  EXPECT_EQ(result.breaker_state, BreakerState::kOpen);
  EXPECT_EQ(result.fallback_source, CallResult::FallbackSource::kCache);
  EXPECT_EQ(result.response.body, "fresh");
  EXPECT_EQ(client_->stats().cache_hits, 4u);  // three failed calls, then this

  // Another key has nothing cached: the policy's payload.
  CallOptions other;
  other.key = "tenant-b";
  CallResult miss = client_->Call(
      "fragile", [](const CallContext&) { return Ok("x"); }, other);
  EXPECT_EQ(miss.fallback_source, CallResult::FallbackSource::kStatic);
  EXPECT_EQ(miss.response.body, R"({"cached":false})");
  EXPECT_EQ(miss.response.content_type, "application/json");
}

TEST_P(ClientTransportTest, StaticFallbackAndTimeoutClassification) {
  CallResult timed_out = client_->Call(
      "static-fallback", [](const CallContext&) -> absl::StatusOr<Response> {
        return absl::DeadlineExceededError("too slow");
      });
  EXPECT_EQ(timed_out.kind, CallResult::Kind::kBackend);  // No fallback asked.
  EXPECT_EQ(timed_out.outcome, Outcome::kTimeout);
  EXPECT_EQ(timed_out.error.code(), absl::StatusCode::kDeadlineExceeded);
  AwaitReports(1);

  CallResult degraded = client_->Call(
      "static-fallback", [](const CallContext&) { return Ok("x"); });
  EXPECT_EQ(degraded.kind, CallResult::Kind::kDegraded);
  EXPECT_EQ(degraded.reason, Reason::kCircuitOpen);
  EXPECT_EQ(degraded.fallback_source, CallResult::FallbackSource::kStatic);
  EXPECT_EQ(degraded.response.body, "static answer");
  EXPECT_EQ(degraded.response.content_type, "text/plain");
}

TEST_P(ClientTransportTest, GatewaySettingServesItsDefaultOnFailure) {
  // The policy has no fallback; the route asks for its own on failure.
  CallOptions options;
  options.fallback_on_failure = true;
  options.default_fallback.body = "gateway default";
  CallResult failed = client_->Call(
      "open-no-fallback",
      [](const CallContext&) -> absl::StatusOr<Response> {
        return absl::UnavailableError("connection refused");
      },
      options);
  EXPECT_EQ(failed.kind, CallResult::Kind::kDegraded);
  EXPECT_EQ(failed.reason, Reason::kCallFailed);
  EXPECT_EQ(failed.response.body, "gateway default");
}

TEST_P(ClientTransportTest, OpenBreakerWithoutFallbackRejects503) {
  client_->Call("open-no-fallback", [](const CallContext&) {
    Response r;
    r.status_code = 502;  // A 5xx is a failure.
    return absl::StatusOr<Response>(r);
  });
  AwaitReports(1);
  CallResult result =
      client_->Call("open-no-fallback", [](const CallContext&) { return Ok(""); });
  EXPECT_EQ(result.kind, CallResult::Kind::kRejected);
  EXPECT_EQ(result.reason, Reason::kCircuitOpen);
  EXPECT_EQ(result.http_status, 503);
  EXPECT_GT(result.retry_after, absl::ZeroDuration());
}

TEST_P(ClientTransportTest, AsyncAcquireRunsTheCallbackOnce) {
  absl::Notification done;
  std::atomic<int> calls{0};
  Verdict verdict = Verdict::kReject;
  client_->AcquireAsync("guarded", "", 1, [&](Permit permit) {
    verdict = permit.verdict();
    permit.Report(Outcome::kSuccess, absl::Milliseconds(1));
    calls.fetch_add(1);
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(verdict, Verdict::kAllow);
  EXPECT_EQ(calls.load(), 1);
  AwaitReports(1);
  EXPECT_TRUE(client_->Acquire("guarded").allowed());
}

TEST_P(ClientTransportTest, BadNamesAreDecidedLocallyWithoutARoundTrip) {
  Permit permit = client_->Acquire("");
  EXPECT_TRUE(permit.decided_locally());
  EXPECT_TRUE(permit.allowed());  // Fail open, the default.
  EXPECT_EQ(permit.sluice_error().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(ClientTransportTest, ConcurrentCallsKeepTheBooks) {
  constexpr int kThreads = 8;
  constexpr int kCallsPerThread = 200;
  std::atomic<int> backend{0}, rejected{0}, other{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kCallsPerThread; ++i) {
        CallResult r = client_->Call("shared", [](const CallContext&) {
          return Ok("ok");
        });
        if (r.kind == CallResult::Kind::kBackend) {
          backend.fetch_add(1);
        } else if (r.kind == CallResult::Kind::kRejected &&
                   r.reason == Reason::kConcurrencyLimited) {
          rejected.fetch_add(1);
        } else {
          other.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(backend.load() + rejected.load(), kThreads * kCallsPerThread);
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(backend.load(), 0);
  AwaitReports(backend.load());
  EXPECT_EQ(client_->stats().reports_sent, static_cast<uint64_t>(backend.load()));
  // Every slot came back: four permits fit again.
  std::vector<Permit> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(client_->Acquire("shared"));
    EXPECT_TRUE(held.back().allowed()) << i;
  }
  EXPECT_FALSE(client_->Acquire("shared").allowed());
}

class ClientStreamTest : public ClientTest {
 protected:
  bool UseStream() const override { return true; }
};

TEST_F(ClientStreamTest, EightThreadsShareOneStreamAndEveryCallIsAnswered) {
  constexpr int kThreads = 8;
  constexpr int kCallsPerThread = 100;
  std::atomic<int> answered{0}, local{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kCallsPerThread; ++i) {
        Permit permit = client_->Acquire("guarded-batch");
        if (permit.decided_locally()) {
          local.fetch_add(1);
        } else if (permit.allowed()) {
          answered.fetch_add(1);
        }
        permit.Report(Outcome::kSuccess, absl::Milliseconds(1));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(answered.load(), kThreads * kCallsPerThread);
  EXPECT_EQ(local.load(), 0);
  EXPECT_EQ(sluice_.service().open_streams(), 1);
  AwaitReports(kThreads * kCallsPerThread);
  EXPECT_EQ(client_->stats().reports_sent,
            static_cast<uint64_t>(kThreads * kCallsPerThread));
  // Reports went on the stream too: no ReportResults batch was sent, and
  // Sluice settled every permit.
  EXPECT_EQ(client_->stats().report_batches, 0u);
  absl::StatusOr<core::LivePolicyStatus> status =
      sluice_.engine().Inspect("guarded-batch");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->gates->in_flight, 0u);
  EXPECT_EQ(status->counters.outcomes[static_cast<int>(core::Outcome::kSuccess)],
            static_cast<uint64_t>(kThreads * kCallsPerThread));
}

TEST_F(ClientStreamTest, TheStreamEndsWithTheClient) {
  EXPECT_TRUE(client_->Acquire("limited").allowed());
  EXPECT_EQ(sluice_.service().open_streams(), 1);
  client_.reset();
  EXPECT_TRUE(testing::WaitFor(
      [&] { return sluice_.service().open_streams() == 0; }, absl::Seconds(5)));
}

TEST_F(ClientTest, QueuedReportsGoInBatchesAndAllArrive) {
  // One report in flight at a time: the rest queue and leave in batches.
  ClientOptions options;
  options.channel = sluice_.Channel();
  options.acquire_timeout = absl::Seconds(5);
  options.max_reports_in_flight = 1;
  auto client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  constexpr int kPermits = 600;
  std::vector<Permit> permits;
  for (int i = 0; i < kPermits; ++i) {
    permits.push_back((*client)->Acquire("guarded-batch"));
    ASSERT_TRUE(permits.back().allowed());
  }
  for (Permit& p : permits) p.Report(Outcome::kSuccess, absl::Milliseconds(1));
  testing::WaitFor(
      [&] { return (*client)->stats().reports_sent >= kPermits; },
      absl::Seconds(10), absl::Milliseconds(1));
  EXPECT_EQ((*client)->stats().reports_sent, static_cast<uint64_t>(kPermits));
  EXPECT_EQ((*client)->stats().reports_dropped, 0u);
  // Fewer calls than reports: the queue left in batches.
  EXPECT_GT((*client)->stats().report_batches, 0u);
  EXPECT_LT((*client)->stats().report_batches, static_cast<uint64_t>(kPermits));
  // Sluice settled every permit: all slots are free again.
  absl::StatusOr<core::LivePolicyStatus> status =
      sluice_.engine().Inspect("guarded-batch");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->gates->in_flight, 0u);
  EXPECT_EQ(status->counters.outcomes[static_cast<int>(core::Outcome::kSuccess)],
            static_cast<uint64_t>(kPermits));
}

TEST_F(ClientTest, ServerRefusesABatchWithAnInvalidReportWhole) {
  auto stub = v1::DecisionService::NewStub(sluice_.Channel());
  v1::AcquireRequest acquire;
  acquire.set_dependency("guarded-batch");
  v1::AcquireResponse held;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub->Acquire(&context, acquire, &held).ok());
  }
  ASSERT_EQ(held.verdict(), v1::ALLOW);
  v1::ReportResultsRequest request;
  v1::ReportResultRequest* good = request.add_reports();
  good->set_dependency("guarded-batch");
  good->set_permit_id(held.permit_id());
  good->set_outcome(v1::SUCCESS);
  v1::ReportResultRequest* bad = request.add_reports();
  bad->set_dependency("guarded-batch");  // no outcome
  v1::ReportResultsResponse response;
  grpc::ClientContext context;
  const grpc::Status status = stub->ReportResults(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("reports[1]"), std::string::npos)
      << status.error_message();
  // Nothing was applied: the good report's slot is still held.
  EXPECT_EQ(sluice_.engine().Inspect("guarded-batch")->gates->in_flight, 1u);
}

}  // namespace
}  // namespace sluice::client
