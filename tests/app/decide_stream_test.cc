// SPDX-License-Identifier: Apache-2.0
// DecisionService.Decide against app::Server in process, on a fake clock:
// results matched by request_id, error results that leave the stream open,
// the per-message limit, many calls in flight on one stream, half-close and
// cancellation, and a broken stream whose permit only expires.

#include <google/protobuf/text_format.h>
#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/app/options.h"
#include "server/app/server.h"
#include "sluice/v1/admin.grpc.pb.h"
#include "sluice/v1/decision.grpc.pb.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/http_get.h"
#include "tests/testing/wait_for.h"

namespace sluice::app {
namespace {

using ::testing::HasSubstr;

using Stream = grpc::ClientReaderWriter<v1::DecideRequest, v1::DecideResponse>;

v1::DecideCall AcquireCall(uint64_t id, const std::string& dependency,
                           uint32_t permits = 0) {
  v1::DecideCall call;
  call.set_request_id(id);
  call.mutable_acquire()->set_dependency(dependency);
  call.mutable_acquire()->set_permits(permits);
  return call;
}

v1::DecideCall ReportCall(uint64_t id, const std::string& dependency,
                          const std::string& permit_id, v1::Outcome outcome) {
  v1::DecideCall call;
  call.set_request_id(id);
  v1::ReportResultRequest* report = call.mutable_report();
  report->set_dependency(dependency);
  report->set_permit_id(permit_id);
  report->set_outcome(outcome);
  return call;
}

v1::DecideRequest Message(std::vector<v1::DecideCall> calls) {
  v1::DecideRequest request;
  for (v1::DecideCall& call : calls) *request.add_calls() = std::move(call);
  return request;
}

class DecideStreamTest : public ::testing::Test {
 protected:
  // With `metrics`, also the /metrics listener (whose shutdown takes a
  // while, so only the tests that read it have one).
  void Start(bool metrics = false) {
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.admin_listen = "127.0.0.1:0";
    options.metrics_listen = "127.0.0.1:0";
    options.sweep_interval = absl::Milliseconds(5);
    Server::Dependencies deps;
    deps.clock = &clock_;
    deps.metrics_listener = metrics;
    server_ = std::make_unique<Server>(std::move(options), deps);
    ASSERT_TRUE(server_->BuildAndStart().ok());
    decisions_ = v1::DecisionService::NewStub(server_->InProcessChannel());
    admin_ = v1::AdminService::NewStub(server_->AdminInProcessChannel());
  }

  void Put(const std::string& text) {
    v1::PutPolicyRequest request;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
        text, request.mutable_policy()))
        << text;
    v1::PutPolicyResponse response;
    grpc::ClientContext context;
    const grpc::Status s = admin_->PutPolicy(&context, request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  v1::AcquireResponse UnaryAcquire(const std::string& dependency) {
    v1::AcquireRequest request;
    request.set_dependency(dependency);
    v1::AcquireResponse response;
    grpc::ClientContext context;
    const grpc::Status s = decisions_->Acquire(&context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response;
  }

  // Reads until `n` results came back; by request id.
  static std::map<uint64_t, v1::DecideResult> ReadResults(Stream* stream,
                                                         size_t n) {
    std::map<uint64_t, v1::DecideResult> results;
    v1::DecideResponse response;
    while (results.size() < n && stream->Read(&response)) {
      for (const v1::DecideResult& r : response.results()) {
        EXPECT_TRUE(results.emplace(r.request_id(), r).second)
            << "request_id " << r.request_id() << " answered twice";
      }
    }
    return results;
  }

  double Metric(const std::string& name) {
    return testing::MetricSample(server_->metrics_port(), name);
  }

  testing::FakeClock clock_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::DecisionService::Stub> decisions_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
};

TEST_F(DecideStreamTest, ResultsComeBackByRequestIdAndCallsRunInOrder) {
  Start();
  Put(R"pb(
    name: "inventory"
    concurrency { max_in_flight: 2 }
  )pb");
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = decisions_->Decide(&context);

  ASSERT_TRUE(stream->Write(Message({AcquireCall(7, "inventory"),
                                     AcquireCall(9, "inventory"),
                                     AcquireCall(11, "inventory")})));
  std::map<uint64_t, v1::DecideResult> first = ReadResults(stream.get(), 3);
  ASSERT_EQ(first.size(), 3u);
  ASSERT_TRUE(first[7].has_acquire());
  ASSERT_TRUE(first[9].has_acquire());
  EXPECT_EQ(first[7].acquire().verdict(), v1::ALLOW);
  EXPECT_EQ(first[9].acquire().verdict(), v1::ALLOW);
  EXPECT_NE(first[7].acquire().permit_id(), first[9].acquire().permit_id());
  EXPECT_EQ(first[11].acquire().reason(), v1::CONCURRENCY_LIMITED);

  // The reports come first in the message, so the acquire after them finds
  // both slots free again.
  ASSERT_TRUE(stream->Write(Message(
      {ReportCall(1, "inventory", first[7].acquire().permit_id(), v1::SUCCESS),
       ReportCall(2, "inventory", first[9].acquire().permit_id(), v1::FAILURE),
       AcquireCall(3, "inventory")})));
  std::map<uint64_t, v1::DecideResult> second = ReadResults(stream.get(), 3);
  ASSERT_EQ(second.size(), 3u);
  EXPECT_TRUE(second[1].has_report());
  EXPECT_TRUE(second[2].has_report());
  EXPECT_EQ(second[2].report().breaker_state(), v1::CLOSED);
  ASSERT_TRUE(second[3].has_acquire());
  EXPECT_EQ(second[3].acquire().verdict(), v1::ALLOW);

  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(DecideStreamTest, AMalformedCallGetsAnErrorAndTheStreamGoesOn) {
  Start();
  Put(R"pb(
    name: "inventory"
    rate_limit {
      rate: 100
      burst: 10
      per { seconds: 1 }
    }
  )pb");
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = decisions_->Decide(&context);
  v1::DecideCall empty;
  empty.set_request_id(4);
  ASSERT_TRUE(stream->Write(Message({
      AcquireCall(1, ""),
      ReportCall(2, "inventory", "", v1::OUTCOME_UNSPECIFIED),
      ReportCall(3, "inventory", "not-a-permit", v1::SUCCESS),
      empty,
      AcquireCall(5, "inventory", /*permits=*/11),  // above the burst
      AcquireCall(6, "inventory"),
  })));
  std::map<uint64_t, v1::DecideResult> r = ReadResults(stream.get(), 6);
  ASSERT_EQ(r.size(), 6u);
  const struct {
    uint64_t id;
    const char* prefix;
    const char* says;
  } kErrors[] = {
      {1, "calls[0].acquire: ", "dependency"},
      {2, "calls[1].report: ", "outcome"},
      {3, "calls[2].report: ", "permit_id"},
      {4, "calls[3]: ", "acquire or report"},
      {5, "calls[4].acquire: ", "permits"},
  };
  for (const auto& e : kErrors) {
    ASSERT_TRUE(r[e.id].has_error()) << e.id;
    EXPECT_EQ(r[e.id].error().code(), grpc::StatusCode::INVALID_ARGUMENT)
        << e.id;
    EXPECT_THAT(r[e.id].error().message(), HasSubstr(e.prefix)) << e.id;
    EXPECT_THAT(r[e.id].error().message(), HasSubstr(e.says)) << e.id;
  }
  ASSERT_TRUE(r[6].has_acquire());
  EXPECT_EQ(r[6].acquire().verdict(), v1::ALLOW);

  // The next message is served as usual.
  ASSERT_TRUE(stream->Write(Message({AcquireCall(8, "inventory")})));
  std::map<uint64_t, v1::DecideResult> next = ReadResults(stream.get(), 1);
  ASSERT_TRUE(next[8].has_acquire());
  EXPECT_EQ(next[8].acquire().verdict(), v1::ALLOW);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(DecideStreamTest, AMessageOverTheLimitEndsTheStreamWithOneError) {
  Start();
  Put(R"pb(
    name: "inventory"
    concurrency { max_in_flight: 1000 }
  )pb");
  {
    grpc::ClientContext context;
    std::unique_ptr<Stream> stream = decisions_->Decide(&context);
    // A call before it is answered as usual.
    ASSERT_TRUE(stream->Write(Message({AcquireCall(1, "inventory")})));
    std::map<uint64_t, v1::DecideResult> first = ReadResults(stream.get(), 1);
    ASSERT_TRUE(first[1].has_acquire());
    ASSERT_TRUE(stream->Write(Message({ReportCall(
        2, "inventory", first[1].acquire().permit_id(), v1::SUCCESS)})));
    ASSERT_EQ(ReadResults(stream.get(), 1).size(), 1u);

    std::vector<v1::DecideCall> too_many;
    for (uint64_t id = 1; id <= 1001; ++id) {
      too_many.push_back(AcquireCall(id, "inventory"));
    }
    stream->Write(Message(too_many));
    // Not one result per call: no result at all, and one status.
    v1::DecideResponse response;
    EXPECT_FALSE(stream->Read(&response)) << response.DebugString();
    const grpc::Status status = stream->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(status.error_message(),
              "calls: at most 1000 per DecideRequest, got 1001; none was "
              "handled");
  }

  // Nothing of the refused message was admitted: exactly the limit, on a
  // new stream, takes all 1000 slots.
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = decisions_->Decide(&context);
  std::vector<v1::DecideCall> at_limit;
  for (uint64_t id = 2001; id <= 3000; ++id) {
    at_limit.push_back(AcquireCall(id, "inventory"));
  }
  ASSERT_TRUE(stream->Write(Message(at_limit)));
  std::map<uint64_t, v1::DecideResult> served = ReadResults(stream.get(), 1000);
  ASSERT_EQ(served.size(), 1000u);
  for (const auto& [id, result] : served) {
    ASSERT_TRUE(result.has_acquire()) << id << " " << result.DebugString();
    EXPECT_EQ(result.acquire().verdict(), v1::ALLOW) << id;
  }
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(DecideStreamTest, TwoMillionEmptyCallsAreCountedNotBuilt) {
  Start();
  // 2 MiB of empty calls (two bytes each), the most the port takes: one
  // error naming the count.
  std::string hostile;
  for (int i = 0; i < (1 << 20) - 8; ++i) hostile.append("\x0a\x00", 2);
  grpc::ClientContext context;
  v1::DecideRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(hostile));
  ASSERT_EQ(parsed.calls_size(), (1 << 20) - 8);
  std::unique_ptr<Stream> stream = decisions_->Decide(&context);
  stream->Write(parsed);
  v1::DecideResponse response;
  EXPECT_FALSE(stream->Read(&response));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("at most 1000 per DecideRequest, got 1048568"));
}

TEST_F(DecideStreamTest, AMessageAboveThePortLimitIsRefused) {
  Start();
  v1::DecideRequest request;
  request.add_calls()->mutable_acquire()->set_caller(
      std::string((2 << 20) + 1, 'x'));
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = decisions_->Decide(&context);
  stream->Write(request);
  v1::DecideResponse response;
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_EQ(stream->Finish().error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(DecideStreamTest, APermitIdCutInsideACharacterLeavesTheStreamWorking) {
  Start();
  Put(R"pb(
    name: "inventory"
    concurrency { max_in_flight: 10 }
  )pb");
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = decisions_->Decide(&context);
  // The error quotes 40 bytes of the id: byte 40 falls inside the euro
  // sign (bytes 39 to 41). Before, the quote ended in half a character,
  // the response was not valid proto3 and the client's stream failed.
  const std::string id = std::string(39, '7') + "\xe2\x82\xac" + "9";
  ASSERT_TRUE(stream->Write(
      Message({ReportCall(1, "inventory", id, v1::SUCCESS),
               AcquireCall(3, "inventory")})));
  std::map<uint64_t, v1::DecideResult> r = ReadResults(stream.get(), 2);
  ASSERT_EQ(r.size(), 2u);
  // Refused with a message that names the field, and arrived: the response
  // parsed, so the message is valid UTF-8.
  ASSERT_TRUE(r[1].has_error());
  EXPECT_THAT(r[1].error().message(), HasSubstr("permit_id"));
  ASSERT_TRUE(r[3].has_acquire());
  EXPECT_EQ(r[3].acquire().verdict(), v1::ALLOW);

  // The stream still serves.
  ASSERT_TRUE(stream->Write(Message({AcquireCall(4, "inventory")})));
  EXPECT_TRUE(ReadResults(stream.get(), 1)[4].has_acquire());
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(DecideStreamTest, AnswersLargerThanTheQueueAreAllDeliveredInOrder) {
  Start();
  // Every allowed Acquire carries an 8 KiB fallback (served if the call
  // fails), so one message of 1000 calls answers 8 MB: the stream stops in
  // the middle of each message while its queue (1 MiB) is full, and goes
  // on as the client reads.
  Put(absl::StrCat(R"pb(
    name: "inventory"
    concurrency { max_in_flight: 100000 }
    fallback { strategy: STATIC payload: ")pb",
                   std::string(8 << 10, 'f'),
                   R"pb(" serve_on_failure: true }
  )pb"));
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = decisions_->Decide(&context);
  constexpr int kMessages = 3;
  std::thread writer([&] {
    for (int m = 0; m < kMessages; ++m) {
      std::vector<v1::DecideCall> calls;
      for (int i = 0; i < 1000; ++i) {
        calls.push_back(AcquireCall(m * 1000 + i + 1, "inventory"));
      }
      ASSERT_TRUE(stream->Write(Message(calls)));
    }
    stream->WritesDone();
  });
  // Read in arrival order: within a stream, calls are answered in order.
  uint64_t expected = 1;
  v1::DecideResponse response;
  while (stream->Read(&response)) {
    for (const v1::DecideResult& r : response.results()) {
      ASSERT_EQ(r.request_id(), expected);
      ASSERT_TRUE(r.has_acquire());
      EXPECT_EQ(r.acquire().fallback().payload().size(), 8u << 10);
      ++expected;
    }
  }
  writer.join();
  EXPECT_EQ(expected, kMessages * 1000 + 1u);
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(DecideStreamTest, ManyCallsInFlightOnOneStreamAreEachAnsweredOnce) {
  Start();
  // A writer that never waits for answers and a reader beside it: results
  // come back coalesced and in whatever grouping the server chose.
  constexpr int kMessages = 400;
  constexpr int kPerMessage = 10;
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = decisions_->Decide(&context);
  std::thread writer([&] {
    uint64_t id = 0;
    for (int m = 0; m < kMessages; ++m) {
      std::vector<v1::DecideCall> calls;
      for (int c = 0; c < kPerMessage; ++c) {
        calls.push_back(AcquireCall(++id, "unknown-dependency"));
      }
      if (!stream->Write(Message(std::move(calls)))) return;
    }
    stream->WritesDone();
  });
  std::map<uint64_t, v1::DecideResult> results;
  size_t responses = 0;
  v1::DecideResponse response;
  while (stream->Read(&response)) {
    ++responses;
    for (const v1::DecideResult& r : response.results()) {
      EXPECT_TRUE(results.emplace(r.request_id(), r).second) << r.request_id();
    }
  }
  writer.join();
  EXPECT_TRUE(stream->Finish().ok());
  ASSERT_EQ(results.size(), static_cast<size_t>(kMessages * kPerMessage));
  EXPECT_EQ(results.begin()->first, 1u);
  EXPECT_EQ(results.rbegin()->first,
            static_cast<uint64_t>(kMessages * kPerMessage));
  for (const auto& [id, result] : results) {
    ASSERT_TRUE(result.has_acquire()) << id;
    EXPECT_EQ(result.acquire().reason(), v1::UNKNOWN_DEPENDENCY) << id;
  }
  EXPECT_LE(responses, static_cast<size_t>(kMessages));
}

TEST_F(DecideStreamTest, HalfCloseFinishesOkAfterEveryResult) {
  Start();
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = decisions_->Decide(&context);
  for (uint64_t id = 1; id <= 30; id += 3) {
    ASSERT_TRUE(stream->Write(Message({AcquireCall(id, "a"),
                                       AcquireCall(id + 1, "b"),
                                       AcquireCall(id + 2, "c")})));
  }
  stream->WritesDone();  // before reading a single result
  std::map<uint64_t, v1::DecideResult> results;
  v1::DecideResponse response;
  while (stream->Read(&response)) {
    for (const v1::DecideResult& r : response.results()) {
      results.emplace(r.request_id(), r);
    }
  }
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(results.size(), 30u);
}

TEST_F(DecideStreamTest, StreamedCallsShowInTheMetrics) {
  Start(/*metrics=*/true);
  const double before = Metric("sluice_acquire_duration_seconds_count");
  ASSERT_GE(before, 0);
  EXPECT_EQ(Metric("sluice_decide_streams"), 0);
  {
    grpc::ClientContext context;
    std::unique_ptr<Stream> stream = decisions_->Decide(&context);
    ASSERT_TRUE(stream->Write(Message({AcquireCall(1, "a"),
                                       AcquireCall(2, "a"),
                                       AcquireCall(3, "a")})));
    ASSERT_EQ(ReadResults(stream.get(), 3).size(), 3u);
    EXPECT_EQ(Metric("sluice_decide_streams"), 1);
    EXPECT_EQ(Metric("sluice_acquire_duration_seconds_count"), before + 3);
    stream->WritesDone();
    EXPECT_TRUE(stream->Finish().ok());
  }
  // OnDone runs on a gRPC thread after the client saw the status.
  EXPECT_TRUE(testing::WaitFor(
      [&] { return Metric("sluice_decide_streams") == 0; }, absl::Seconds(5)));
}

TEST_F(DecideStreamTest, ABrokenStreamReleasesNothingItsPermitExpires) {
  Start(/*metrics=*/true);
  Put(R"pb(
    name: "inventory"
    concurrency { max_in_flight: 1 }
    call_timeout { seconds: 1 }
  )pb");
  {
    grpc::ClientContext context;
    std::unique_ptr<Stream> stream = decisions_->Decide(&context);
    ASSERT_TRUE(stream->Write(Message({AcquireCall(1, "inventory")})));
    std::map<uint64_t, v1::DecideResult> r = ReadResults(stream.get(), 1);
    ASSERT_EQ(r[1].acquire().verdict(), v1::ALLOW);
    context.TryCancel();
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  ASSERT_TRUE(testing::WaitFor(
      [&] { return Metric("sluice_decide_streams") == 0; }, absl::Seconds(5)));
  EXPECT_EQ(UnaryAcquire("inventory").reason(), v1::CONCURRENCY_LIMITED);
  // The permit lives 2 x call_timeout; every Acquire first expires what is
  // due on the fake clock. Just before that the slot is still taken.
  clock_.Advance(absl::Seconds(2) - absl::Milliseconds(1));
  EXPECT_EQ(UnaryAcquire("inventory").reason(), v1::CONCURRENCY_LIMITED);
  clock_.Advance(absl::Milliseconds(2));
  EXPECT_EQ(UnaryAcquire("inventory").verdict(), v1::ALLOW);
}

TEST_F(DecideStreamTest, ShutdownEndsAnOpenStreamAfterItsAnswers) {
  Start();
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = decisions_->Decide(&context);
  ASSERT_TRUE(stream->Write(Message({AcquireCall(1, "a"),
                                     AcquireCall(2, "a")})));
  ASSERT_EQ(ReadResults(stream.get(), 2).size(), 2u);
  // An hour's drain: a stream that held shutdown for all of it would hang
  // this test. It ends at once, telling the gateway to open a new one.
  std::thread stopper(
      [&] { server_->Shutdown(absl::Now() + absl::Hours(1)); });
  v1::DecideResponse response;
  while (stream->Read(&response)) {
  }
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status.error_message();
  stopper.join();
}

}  // namespace
}  // namespace sluice::app
