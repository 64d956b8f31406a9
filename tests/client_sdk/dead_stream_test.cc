// SPDX-License-Identifier: Apache-2.0
// The SDK on a Decide stream that stays open but stops answering (a hung
// Sluice, a blackholed connection): calls end at the deadlines their unary
// RPCs would have, the dead stream is cancelled and replaced, reports drain,
// and the client shuts down without waiting out shutdown_timeout.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <deque>
#include <memory>
#include <string>

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
// Scheduling on a loaded 2-core machine, as in unavailable_test.cc.
constexpr absl::Duration kSlack = absl::Milliseconds(30);

// A DecisionService whose Decide streams read every call and keep the stream
// open, but answer only Acquires, and those only while answer_acquires is
// set. Reports are never answered. It has no unary methods.
class MuteSluice final : public v1::DecisionService::CallbackService {
 public:
  std::atomic<bool> answer_acquires{false};

  grpc::ServerBidiReactor<v1::DecideRequest, v1::DecideResponse>* Decide(
      grpc::CallbackServerContext* /*context*/) override {
    absl::MutexLock lock(&mu_);
    ++streams_;
    return new Stream(this);
  }

  // Decide streams opened so far.
  int streams() {
    absl::MutexLock lock(&mu_);
    return streams_;
  }

  // Waits (bounded) until `n` streams were opened.
  bool AwaitStreams(int n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return streams_ >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(5));
  }

  // Waits (bounded) until every stream has ended (the client cancelled it).
  bool AwaitAllEnded() {
    absl::MutexLock lock(&mu_);
    auto ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return ended_ == streams_;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&ended), absl::Seconds(5));
  }

 private:
  class Stream final
      : public grpc::ServerBidiReactor<v1::DecideRequest, v1::DecideResponse> {
   public:
    explicit Stream(MuteSluice* service) : service_(service) {
      StartRead(&request_);
    }

    void OnReadDone(bool ok) override {
      absl::MutexLock lock(&mu_);
      if (!ok) {  // the client went away: finish once nothing is written
        finishing_ = true;
        MaybeFinishOrWrite();
        return;
      }
      v1::DecideResponse response;
      if (service_->answer_acquires.load()) {
        for (const v1::DecideCall& call : request_.calls()) {
          if (!call.has_acquire()) continue;
          v1::DecideResult* result = response.add_results();
          result->set_request_id(call.request_id());
          result->mutable_acquire()->set_verdict(v1::ALLOW);
          result->mutable_acquire()->set_permit_id(
              absl::StrCat("p", call.request_id()));
        }
      }
      if (response.results_size() > 0) outbox_.push_back(std::move(response));
      MaybeFinishOrWrite();
      StartRead(&request_);
    }

    void OnWriteDone(bool /*ok*/) override {
      absl::MutexLock lock(&mu_);
      outbox_.pop_front();
      writing_ = false;
      MaybeFinishOrWrite();
    }

    void OnDone() override {
      {
        absl::MutexLock lock(&service_->mu_);
        ++service_->ended_;
      }
      delete this;
    }

   private:
    void MaybeFinishOrWrite() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (writing_ || finished_) return;
      if (finishing_) {
        finished_ = true;
        Finish(grpc::Status::OK);
        return;
      }
      if (outbox_.empty()) return;
      writing_ = true;
      StartWrite(&outbox_.front());
    }

    MuteSluice* const service_;
    v1::DecideRequest request_;  // the one outstanding read's
    absl::Mutex mu_;
    std::deque<v1::DecideResponse> outbox_ ABSL_GUARDED_BY(mu_);
    bool writing_ ABSL_GUARDED_BY(mu_) = false;
    bool finishing_ ABSL_GUARDED_BY(mu_) = false;
    bool finished_ ABSL_GUARDED_BY(mu_) = false;
  };

  absl::Mutex mu_;
  int streams_ ABSL_GUARDED_BY(mu_) = 0;
  int ended_ ABSL_GUARDED_BY(mu_) = 0;
};

class DeadStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }

  void TearDown() override {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  }

  ClientOptions Options() const {
    ClientOptions options;
    options.target = absl::StrCat("127.0.0.1:", port_);
    options.use_stream = true;
    options.acquire_timeout = kDeadline;
    options.report_timeout = absl::Milliseconds(100);
    options.shutdown_timeout = absl::Seconds(10);
    options.backoff_after_failures = 1000;  // Ask every time.
    return options;
  }

  static std::unique_ptr<Client> Create(const ClientOptions& options) {
    auto client = Client::Create(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  }

  // Destroys `client` and says how long that took.
  static absl::Duration Destroy(std::unique_ptr<Client> client) {
    const absl::Time start = absl::Now();
    client.reset();
    return absl::Now() - start;
  }

  MuteSluice service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(DeadStreamTest, AcquiresFailOpenAtTheDeadlineAndANewStreamIsOpened) {
  std::unique_ptr<Client> client = Create(Options());
  // The first stream is dead once its first call is past the deadline its
  // unary RPC would have (acquire_timeout + report_timeout = 120 ms) with
  // nothing heard; the next call then opens a second stream.
  int calls = 0;
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (service_.streams() < 2 && absl::Now() < give_up) {
    const absl::Time start = absl::Now();
    Permit permit = client->Acquire("inventory");
    EXPECT_LE(absl::Now() - start, kDeadline + kSlack) << "call " << calls;
    EXPECT_TRUE(permit.allowed());
    EXPECT_TRUE(permit.decided_locally());
    EXPECT_EQ(permit.reason(), Reason::kSluiceUnavailable);
    // A call still waiting when the stream is found dead ends at once, with
    // UNAVAILABLE; the others wait out their deadline.
    const absl::StatusCode code = permit.sluice_error().code();
    EXPECT_TRUE(code == absl::StatusCode::kDeadlineExceeded ||
                code == absl::StatusCode::kUnavailable)
        << permit.sluice_error();
    if (calls == 0) {
      EXPECT_EQ(code, absl::StatusCode::kDeadlineExceeded);
    }
    ++calls;
  }
  EXPECT_GE(service_.streams(), 2) << "after " << calls << " calls";
  EXPECT_EQ(client->stats().local_decisions, static_cast<uint64_t>(calls));

  // AcquireAsync on the dead stream fails open at its deadline too.
  absl::Notification done;
  bool local = false;
  absl::StatusCode code = absl::StatusCode::kOk;
  const absl::Time start = absl::Now();
  absl::Duration took;
  client->AcquireAsync("inventory", "", 1, [&](Permit permit) {
    took = absl::Now() - start;
    local = permit.decided_locally() && permit.allowed();
    code = permit.sluice_error().code();
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_LE(took, kDeadline + kSlack);
  EXPECT_TRUE(local);
  EXPECT_EQ(code, absl::StatusCode::kDeadlineExceeded);

  EXPECT_LT(Destroy(std::move(client)), absl::Seconds(2));
  // Every stream the client opened was cancelled, none left hanging.
  EXPECT_TRUE(service_.AwaitAllEnded());
}

TEST_F(DeadStreamTest, AStreamThatStopsAnsweringIsReplaced) {
  ClientOptions options = Options();
  // Long enough that an answer is never late on a loaded machine.
  options.acquire_timeout = absl::Milliseconds(200);
  std::unique_ptr<Client> client = Create(options);
  service_.answer_acquires = true;
  Permit permit = client->Acquire("inventory");
  ASSERT_FALSE(permit.decided_locally()) << permit.sluice_error();
  EXPECT_EQ(service_.streams(), 1);

  // Sluice hangs, the stream stays open: the call fails open at its deadline.
  service_.answer_acquires = false;
  Permit hung = client->Acquire("inventory");
  EXPECT_TRUE(hung.decided_locally());
  EXPECT_EQ(hung.sluice_error().code(), absl::StatusCode::kDeadlineExceeded);

  // Once that call is past its RPC deadline with nothing heard, the stream is
  // cancelled; Sluice answers again, and the next call goes on a new stream.
  absl::SleepFor(options.acquire_timeout + options.report_timeout + kSlack);
  service_.answer_acquires = true;
  permit = client->Acquire("inventory");
  EXPECT_FALSE(permit.decided_locally()) << permit.sluice_error();
  EXPECT_EQ(service_.streams(), 2);

  EXPECT_LT(Destroy(std::move(client)), absl::Seconds(2));
}

TEST_F(DeadStreamTest, ReportsOnADeadStreamFailAtTheirDeadlineAndShutdownIsPrompt) {
  ClientOptions options = Options();
  options.acquire_timeout = absl::Seconds(5);  // the answer, not the clock
  std::unique_ptr<Client> client = Create(options);
  service_.answer_acquires = true;
  constexpr int kPermits = 5;
  std::vector<Permit> permits;
  for (int i = 0; i < kPermits; ++i) {
    permits.push_back(client->Acquire("inventory"));
    ASSERT_FALSE(permits.back().decided_locally()) << i;
  }
  // Reports are never answered: each fails at report_timeout, so the
  // reporter drains (before, they stayed in flight for good).
  for (Permit& permit : permits) {
    permit.Report(Outcome::kSuccess, absl::Milliseconds(1));
  }
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (client->stats().reports_failed < kPermits && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(client->stats().reports_failed, static_cast<uint64_t>(kPermits));
  EXPECT_EQ(client->stats().reports_sent, 0u);

  // A report in flight at shutdown: the destructor waits for it only until
  // its deadline, not shutdown_timeout (10 s).
  permits.clear();
  Permit last = client->Acquire("inventory");
  ASSERT_FALSE(last.decided_locally());
  service_.answer_acquires = false;
  last.Report(Outcome::kSuccess, absl::Milliseconds(1));
  EXPECT_LT(Destroy(std::move(client)), absl::Seconds(2));
}

}  // namespace
}  // namespace sluice::client
