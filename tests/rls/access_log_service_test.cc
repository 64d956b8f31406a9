// SPDX-License-Identifier: Apache-2.0
// Envoy's access-log service (ALS v3) against app::Server in process: a
// client built from our als.proto streams HTTP entries naming permits taken
// by Acquire or by the rate-limit service, over a real TCP gRPC channel,
// while the server decides on a fake clock. A stream's Finish returns only
// after the server handled every message of it, so each check below sees
// all that stream's entries settled.

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/rpc_method.h>
#include <grpcpp/support/sync_stream.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "envoy/service/accesslog/v3/als.grpc.pb.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/app/server.h"
#include "server/rpc/access_log_service.h"
#include "sluice/v1/admin.grpc.pb.h"
#include "sluice/v1/decision.grpc.pb.h"
#include "tests/rls/rls_test_util.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/http_get.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"
#include "wire/quote.h"

namespace sluice {
namespace {

using envoy::data::accesslog::v3::HTTPAccessLogEntry;
using envoy::service::accesslog::v3::AccessLogService;
using envoy::service::accesslog::v3::StreamAccessLogsMessage;
using envoy::service::accesslog::v3::StreamAccessLogsResponse;
using ::testing::HasSubstr;

constexpr char kPolicies[] = R"yaml(
policies:
  - name: inventory
    call_timeout: 1s
    concurrency: {max_in_flight: 100}
    breaker: {consecutive_failures: 3}
    envoy_descriptors:
      - domain: edge
        entries: [{key: destination_cluster, value: inventory}]
  - name: search
    per_key: true
    call_timeout: 1s
    concurrency: {max_in_flight: 100}
    breaker: {consecutive_failures: 1000}
  - name: adaptive
    call_timeout: 1s
    adaptive_concurrency: {min_limit: 1, max_limit: 100, window: 1s,
                           minimum_samples: 2}
  - name: baseline
    call_timeout: 1s
    concurrency: {max_in_flight: 100}
    breaker:
      latency_baseline: {factor: 2}
)yaml";

constexpr char kExtAuthz[] = "envoy.filters.http.ext_authz";
constexpr char kRateLimit[] = "envoy.filters.http.ratelimit";
constexpr char kMethod[] =
    "/envoy.service.accesslog.v3.AccessLogService/StreamAccessLogs";

struct Permit {
  std::string dependency;
  std::string key;
  std::string permit_id;
};

// The x-sluice-key header's encoding: bytes outside visible ASCII, '%' and
// ',' as %XX.
std::string PercentEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c <= ' ' || c > '~' || c == '%' || c == ',') {
      absl::StrAppendFormat(&out, "%%%02X", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

// An entry for a response with status `code` (0: none), naming `permits`
// in namespace `ns` as the sluice_permits list.
HTTPAccessLogEntry ListEntry(const std::string& ns,
                             const std::vector<Permit>& permits,
                             uint32_t code = 200) {
  HTTPAccessLogEntry entry;
  if (code != 0) entry.mutable_response()->mutable_response_code()->set_value(code);
  auto& filter = (*entry.mutable_common_properties()
                       ->mutable_metadata()
                       ->mutable_filter_metadata())[ns];
  auto* list = (*filter.mutable_fields())["sluice_permits"].mutable_list_value();
  for (const Permit& p : permits) {
    auto& fields = *list->add_values()->mutable_struct_value()->mutable_fields();
    fields["dependency"].set_string_value(p.dependency);
    fields["key"].set_string_value(p.key);
    fields["permit_id"].set_string_value(p.permit_id);
  }
  return entry;
}

// The same permit as HTTP-mode ext_authz copies the answer's headers into
// the metadata: flat strings, the key percent-encoded (or `raw_key` as is).
HTTPAccessLogEntry HeaderEntry(const std::string& ns, const Permit& p,
                               uint32_t code = 200,
                               const std::string* raw_key = nullptr) {
  HTTPAccessLogEntry entry;
  if (code != 0) entry.mutable_response()->mutable_response_code()->set_value(code);
  auto& fields = *(*entry.mutable_common_properties()
                        ->mutable_metadata()
                        ->mutable_filter_metadata())[ns]
                      .mutable_fields();
  fields["x-sluice-dependency"].set_string_value(p.dependency);
  fields["x-sluice-key"].set_string_value(raw_key ? *raw_key
                                                  : PercentEncode(p.key));
  fields["x-sluice-permit"].set_string_value(p.permit_id);
  return entry;
}

void SetMillis(google::protobuf::Duration* d, int ms) {
  d->set_seconds(ms / 1000);
  d->set_nanos((ms % 1000) * 1000000);
}

StreamAccessLogsMessage Message(const std::vector<HTTPAccessLogEntry>& entries,
                                bool identify = true) {
  StreamAccessLogsMessage m;
  if (identify) m.mutable_identifier()->set_log_name("sluice");
  for (const HTTPAccessLogEntry& e : entries) {
    *m.mutable_http_logs()->add_log_entry() = e;
  }
  return m;
}

class AccessLogServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = dir_.File("policies.yaml");
    std::ofstream(path) << kPolicies;
    app::ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.admin_listen = "127.0.0.1:0";
    options.metrics_listen = "127.0.0.1:0";
    options.policies_path = path;
    app::Server::Dependencies deps;
    deps.clock = &clock_;
    server_ = std::make_unique<app::Server>(options, deps);
    ASSERT_TRUE(server_->BuildAndStart().ok());
    channel_ = grpc::CreateChannel(server_->target(),
                                   grpc::InsecureChannelCredentials());
    als_ = AccessLogService::NewStub(channel_);
    decisions_ = v1::DecisionService::NewStub(channel_);
    rls_ = envoy::service::ratelimit::v3::RateLimitService::NewStub(channel_);
    admin_ = v1::AdminService::NewStub(server_->AdminInProcessChannel());
  }

  Permit Acquire(const std::string& dependency, const std::string& key = "") {
    v1::AcquireRequest request;
    request.set_dependency(dependency);
    request.set_key(key);
    v1::AcquireResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(decisions_->Acquire(&context, request, &response).ok());
    EXPECT_EQ(response.verdict(), v1::ALLOW);
    EXPECT_FALSE(response.permit_id().empty());
    return {dependency, key, response.permit_id()};
  }

  // Streams `messages` and half-closes; the final status.
  grpc::Status Stream(const std::vector<StreamAccessLogsMessage>& messages) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    StreamAccessLogsResponse response;
    auto writer = als_->StreamAccessLogs(&context, &response);
    for (const StreamAccessLogsMessage& m : messages) {
      if (!writer->Write(m)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  void Settle(const std::vector<HTTPAccessLogEntry>& entries) {
    const grpc::Status s = Stream({Message(entries)});
    EXPECT_TRUE(s.ok()) << s.error_message();
  }

  // Streams raw `messages` as a hostile client would; the final status.
  grpc::Status RawStream(const std::vector<std::string>& messages) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    grpc::ByteBuffer response;
    const grpc::internal::RpcMethod method(
        kMethod, grpc::internal::RpcMethod::CLIENT_STREAMING);
    std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
            channel_.get(), method, &context, &response));
    for (const std::string& bytes : messages) {
      grpc::Slice slice(bytes);
      if (!writer->Write(grpc::ByteBuffer(&slice, 1))) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  v1::DependencyState State(const std::string& dependency,
                            const std::string& key = "") {
    v1::GetStateRequest request;
    request.set_dependency(dependency);
    request.set_key(key);
    v1::DependencyState state;
    grpc::ClientContext context;
    EXPECT_TRUE(admin_->GetState(&context, request, &state).ok());
    return state;
  }

  double Entries(const std::string& result) {
    return testing::MetricSample(
        server_->metrics_port(),
        absl::StrCat("sluice_access_log_entries_total{result=\"", result,
                     "\"}"));
  }

  testing::TempDir dir_{"als_test"};
  testing::FakeClock clock_;
  std::unique_ptr<app::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<AccessLogService::Stub> als_;
  std::unique_ptr<v1::DecisionService::Stub> decisions_;
  std::unique_ptr<envoy::service::ratelimit::v3::RateLimitService::Stub> rls_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
};

TEST_F(AccessLogServiceTest, SuccessSettlesThePermitAndFreesItsSlot) {
  const Permit a = Acquire("inventory");
  const Permit b = Acquire("inventory");
  EXPECT_EQ(State("inventory").in_flight(), 2u);
  Settle({ListEntry(kExtAuthz, {a})});
  v1::DependencyState state = State("inventory");
  EXPECT_EQ(state.in_flight(), 1u);
  EXPECT_EQ(state.window_outcomes().successes(), 1u);
  EXPECT_EQ(Entries("settled"), 1);
  // Settled once: the same entry again frees nothing more.
  Settle({ListEntry(kExtAuthz, {a})});
  EXPECT_EQ(State("inventory").in_flight(), 1u);
  Settle({ListEntry(kExtAuthz, {b})});
  EXPECT_EQ(State("inventory").in_flight(), 0u);
}

TEST(AccessLogOutcomeTest, FlagsAndStatusDecideTheOutcome) {
  struct Case {
    const char* name;
    uint32_t code;
    void (*flags)(envoy::data::accesslog::v3::ResponseFlags*);
    core::Outcome want;
  };
  using F = envoy::data::accesslog::v3::ResponseFlags;
  const Case cases[] = {
      {"200", 200, [](F*) {}, core::Outcome::kSuccess},
      {"404", 404, [](F*) {}, core::Outcome::kSuccess},
      {"429", 429, [](F*) {}, core::Outcome::kSuccess},
      {"500", 500, [](F*) {}, core::Outcome::kFailure},
      {"503", 503, [](F*) {}, core::Outcome::kFailure},
      {"504", 504, [](F*) {}, core::Outcome::kTimeout},
      {"UT 504", 504, [](F* f) { f->set_upstream_request_timeout(true); },
       core::Outcome::kTimeout},
      {"UT 200", 200, [](F* f) { f->set_upstream_request_timeout(true); },
       core::Outcome::kTimeout},
      {"UH 503", 503, [](F* f) { f->set_no_healthy_upstream(true); },
       core::Outcome::kFailure},
      {"UF", 0, [](F* f) { f->set_upstream_connection_failure(true); },
       core::Outcome::kFailure},
      {"UO", 0, [](F* f) { f->set_upstream_overflow(true); },
       core::Outcome::kFailure},
      {"URX 200", 200,
       [](F* f) { f->set_upstream_retry_limit_exceeded(true); },
       core::Outcome::kFailure},
      {"UC", 0, [](F* f) { f->set_upstream_connection_termination(true); },
       core::Outcome::kFailure},
      {"UR", 0, [](F* f) { f->set_upstream_remote_reset(true); },
       core::Outcome::kFailure},
      {"DC before a response", 0,
       [](F* f) { f->set_downstream_connection_termination(true); },
       core::Outcome::kCancelled},
      {"DC after a 200", 200,
       [](F* f) { f->set_downstream_connection_termination(true); },
       core::Outcome::kSuccess},
      {"DC after a 502", 502,
       [](F* f) { f->set_downstream_connection_termination(true); },
       core::Outcome::kFailure},
      {"no response, no flag", 0, [](F*) {}, core::Outcome::kSuccess},
  };
  for (const Case& c : cases) {
    HTTPAccessLogEntry entry;
    if (c.code != 0) {
      entry.mutable_response()->mutable_response_code()->set_value(c.code);
    }
    c.flags(entry.mutable_common_properties()->mutable_response_flags());
    EXPECT_EQ(rpc::AccessLogOutcome(entry), c.want) << c.name;
  }
}

TEST_F(AccessLogServiceTest, OutcomesReachTheBreakerWindow) {
  std::vector<HTTPAccessLogEntry> entries;
  entries.push_back(ListEntry(kExtAuthz, {Acquire("search", "k")}, 503));
  entries.push_back(ListEntry(kExtAuthz, {Acquire("search", "k")}, 504));
  HTTPAccessLogEntry ut = ListEntry(kExtAuthz, {Acquire("search", "k")}, 0);
  ut.mutable_common_properties()->mutable_response_flags()
      ->set_upstream_request_timeout(true);
  entries.push_back(ut);
  HTTPAccessLogEntry dc = ListEntry(kExtAuthz, {Acquire("search", "k")}, 0);
  dc.mutable_common_properties()->mutable_response_flags()
      ->set_downstream_connection_termination(true);
  entries.push_back(dc);
  entries.push_back(ListEntry(kExtAuthz, {Acquire("search", "k")}, 200));
  HTTPAccessLogEntry uf = ListEntry(kExtAuthz, {Acquire("search", "k")}, 0);
  uf.mutable_common_properties()->mutable_response_flags()
      ->set_upstream_connection_failure(true);
  entries.push_back(uf);
  Settle(entries);
  const v1::DependencyState state = State("search", "k");
  EXPECT_EQ(state.in_flight(), 0u);
  EXPECT_EQ(state.window_outcomes().successes(), 1u);
  EXPECT_EQ(state.window_outcomes().failures(), 2u);
  EXPECT_EQ(state.window_outcomes().timeouts(), 2u);
  // The cancelled call frees its slot and, as a ReportResult CANCELLED,
  // counts in no outcome.
  EXPECT_EQ(state.window_outcomes().calls(), 5u);
  EXPECT_EQ(Entries("settled"), 6);
}

TEST_F(AccessLogServiceTest, BreakerOpensAtTheNthFailedEntryAndNotBefore) {
  // consecutive_failures: 3, each failure in a stream of its own.
  for (int i = 1; i <= 3; ++i) {
    Settle({ListEntry(kExtAuthz, {Acquire("inventory")}, 503)});
    EXPECT_EQ(State("inventory").breaker_state(),
              i < 3 ? v1::CLOSED : v1::OPEN)
        << "after failure " << i;
  }
  // Open: Acquire refuses without anything else reported.
  v1::AcquireRequest request;
  request.set_dependency("inventory");
  v1::AcquireResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(decisions_->Acquire(&context, request, &response).ok());
  EXPECT_NE(response.verdict(), v1::ALLOW);
}

TEST_F(AccessLogServiceTest, BreakerOpensWithinOneMessageOfThreeFailures) {
  const Permit a = Acquire("inventory");
  const Permit b = Acquire("inventory");
  const Permit c = Acquire("inventory");
  Settle({ListEntry(kExtAuthz, {a}, 500), ListEntry(kRateLimit, {b}, 502)});
  EXPECT_EQ(State("inventory").breaker_state(), v1::CLOSED);
  Settle({HeaderEntry(kExtAuthz, c, 503)});
  EXPECT_EQ(State("inventory").breaker_state(), v1::OPEN);
}

TEST_F(AccessLogServiceTest, LatencyIsUpstreamLastByteElseDownstreamLastByte) {
  // Both timings set: the upstream's (40 ms) counts, not 100 ms.
  HTTPAccessLogEntry both = ListEntry(kExtAuthz, {Acquire("baseline")});
  SetMillis(both.mutable_common_properties()
                ->mutable_time_to_last_upstream_rx_byte(),
            40);
  SetMillis(both.mutable_common_properties()
                ->mutable_time_to_last_downstream_tx_byte(),
            100);
  // No upstream byte (a local answer): the downstream one, 60 ms.
  HTTPAccessLogEntry local = ListEntry(kExtAuthz, {Acquire("baseline")});
  SetMillis(local.mutable_common_properties()
                ->mutable_time_to_last_downstream_tx_byte(),
            60);
  Settle({both, local});
  const v1::LatencyBaselineState baseline =
      State("baseline").latency_baseline();
  EXPECT_EQ(baseline.live_calls(), 2);
  EXPECT_EQ(baseline.live_mean().seconds(), 0);
  EXPECT_EQ(baseline.live_mean().nanos(), 50000000);
}

TEST_F(AccessLogServiceTest, AdaptiveLimitJudgesTheReportedLatency) {
  std::vector<HTTPAccessLogEntry> entries;
  for (int i = 0; i < 2; ++i) {
    HTTPAccessLogEntry e = ListEntry(kRateLimit, {Acquire("adaptive")});
    SetMillis(e.mutable_common_properties()
                  ->mutable_time_to_last_upstream_rx_byte(),
              80);
    entries.push_back(e);
  }
  Settle(entries);
  clock_.Advance(absl::Milliseconds(1100));
  HTTPAccessLogEntry e = ListEntry(kRateLimit, {Acquire("adaptive")});
  SetMillis(
      e.mutable_common_properties()->mutable_time_to_last_upstream_rx_byte(),
      80);
  Settle({e});
  const v1::AdaptiveLimitState adaptive = State("adaptive").adaptive_limit();
  ASSERT_TRUE(adaptive.has_last_latency());
  EXPECT_EQ(adaptive.last_latency().seconds(), 0);
  EXPECT_EQ(adaptive.last_latency().nanos(), 80000000);
  EXPECT_EQ(adaptive.in_flight(), 0u);
}

TEST_F(AccessLogServiceTest, RateLimitServicePermitsAreSettledFromItsMetadata) {
  auto request = rls_test::Request("edge", {{{"destination_cluster",
                                              "inventory"}}});
  envoy::service::ratelimit::v3::RateLimitResponse answer;
  grpc::ClientContext context;
  ASSERT_TRUE(rls_->ShouldRateLimit(&context, request, &answer).ok());
  ASSERT_EQ(answer.overall_code(),
            envoy::service::ratelimit::v3::RateLimitResponse::OK);
  EXPECT_EQ(State("inventory").in_flight(), 1u);
  // Envoy's rate-limit filter stores the answer's dynamic metadata under
  // its own namespace; the access log carries it as it is.
  HTTPAccessLogEntry entry;
  entry.mutable_response()->mutable_response_code()->set_value(503);
  (*entry.mutable_common_properties()
        ->mutable_metadata()
        ->mutable_filter_metadata())[kRateLimit] = answer.dynamic_metadata();
  Settle({entry});
  const v1::DependencyState state = State("inventory");
  EXPECT_EQ(state.in_flight(), 0u);
  EXPECT_EQ(state.window_outcomes().failures(), 1u);
  EXPECT_EQ(Entries("settled"), 1);
}

TEST_F(AccessLogServiceTest, HeaderShapeDecodesThePercentEncodedKey) {
  const std::string key = "tenant 7,%x\xc3\xbc";
  const Permit p = Acquire("search", key);
  EXPECT_EQ(State("search", key).in_flight(), 1u);
  // A bad escape: invalid, nothing settled.
  const std::string bad = "tenant%2";
  Settle({HeaderEntry(kExtAuthz, p, 200, &bad)});
  EXPECT_EQ(State("search", key).in_flight(), 1u);
  EXPECT_EQ(Entries("invalid"), 1);
  // A byte the encoder escapes, bare: invalid too.
  const std::string bare = key;
  Settle({HeaderEntry(kRateLimit, p, 200, &bare)});
  EXPECT_EQ(State("search", key).in_flight(), 1u);
  EXPECT_EQ(Entries("invalid"), 2);
  Settle({HeaderEntry(kRateLimit, p, 503)});
  const v1::DependencyState state = State("search", key);
  EXPECT_EQ(state.in_flight(), 0u);
  EXPECT_EQ(state.window_outcomes().failures(), 1u);
  EXPECT_EQ(Entries("settled"), 1);
}

TEST_F(AccessLogServiceTest, OneEntryCanNameSeveralPermitsInBothNamespaces) {
  const Permit a = Acquire("inventory");
  const Permit b = Acquire("search", "k");
  const Permit c = Acquire("baseline");
  HTTPAccessLogEntry entry = ListEntry(kExtAuthz, {a, b});
  auto& ratelimit = (*entry.mutable_common_properties()
                          ->mutable_metadata()
                          ->mutable_filter_metadata())[kRateLimit];
  *ratelimit.mutable_fields() = ListEntry(kRateLimit, {c})
                                    .common_properties()
                                    .metadata()
                                    .filter_metadata()
                                    .at(kRateLimit)
                                    .fields();
  Settle({entry});
  EXPECT_EQ(State("inventory").in_flight(), 0u);
  EXPECT_EQ(State("search", "k").in_flight(), 0u);
  EXPECT_EQ(State("baseline").in_flight(), 0u);
  EXPECT_EQ(Entries("settled"), 1);
}

TEST_F(AccessLogServiceTest, EntriesWithoutOrWithABadPermitAreCounted) {
  const Permit p = Acquire("inventory");
  // No metadata, another filter's metadata, and a decision without a permit.
  HTTPAccessLogEntry other;
  (*(*other.mutable_common_properties()
          ->mutable_metadata()
          ->mutable_filter_metadata())["envoy.filters.http.jwt_authn"]
        .mutable_fields())["sub"]
      .set_string_value("me");
  Settle({HTTPAccessLogEntry(), other,
          ListEntry(kExtAuthz, {{"inventory", "", ""}})});
  EXPECT_EQ(Entries("no_permit"), 3);

  // Forged (the MAC altered), under another dependency, and unreadable.
  Permit forged = p;
  forged.permit_id.back() = forged.permit_id.back() == '0' ? '1' : '0';
  Permit moved = p;
  moved.dependency = "baseline";
  Permit unreadable = p;
  unreadable.permit_id = "not-a-permit";
  Settle({ListEntry(kExtAuthz, {forged}), ListEntry(kExtAuthz, {moved}),
          HeaderEntry(kExtAuthz, unreadable, 503)});
  EXPECT_EQ(Entries("unknown_permit"), 3);
  EXPECT_EQ(State("inventory").in_flight(), 1u);
  EXPECT_EQ(State("inventory").window_outcomes().failures(), 0u);

  // Metadata of the wrong shape, and TCP entries: invalid.
  HTTPAccessLogEntry not_a_list = ListEntry(kExtAuthz, {p});
  (*(*not_a_list.mutable_common_properties()
          ->mutable_metadata()
          ->mutable_filter_metadata())[kExtAuthz]
        .mutable_fields())["sluice_permits"]
      .set_string_value(p.permit_id);
  HTTPAccessLogEntry negative = ListEntry(kExtAuthz, {p});
  negative.mutable_common_properties()
      ->mutable_time_to_last_upstream_rx_byte()
      ->set_seconds(-1);
  StreamAccessLogsMessage tcp;
  tcp.mutable_tcp_logs()->add_log_entry();
  tcp.mutable_tcp_logs()->add_log_entry();
  ASSERT_TRUE(Stream({Message({not_a_list, negative}), tcp}).ok());
  EXPECT_EQ(Entries("invalid"), 4);
  EXPECT_EQ(State("inventory").in_flight(), 1u);
  EXPECT_EQ(Entries("settled"), 0);
}

TEST_F(AccessLogServiceTest, HostileStreamsAreRefusedCleanly) {
  const Permit before = Acquire("inventory");
  const Permit after = Acquire("inventory");

  // Garbage bytes after a good message: the good one is settled, the
  // stream ends INVALID_ARGUMENT with a valid UTF-8 message.
  grpc::Status s = RawStream({Message({ListEntry(kExtAuthz, {before})})
                                  .SerializeAsString(),
                              std::string("\xff\xfe\x07garbage\xc3", 12)});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(wire::ToValidUtf8(s.error_message()), s.error_message());
  EXPECT_THAT(s.error_message(), HasSubstr("StreamAccessLogsMessage"));
  EXPECT_EQ(State("inventory").in_flight(), 1u);

  // 1,001 entries: refused for the count, none settled.
  std::vector<HTTPAccessLogEntry> many(1001,
                                       ListEntry(kExtAuthz, {after}, 503));
  s = Stream({Message(many)});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "log_entry: at most 1000 per StreamAccessLogsMessage, got 1001; "
            "none was handled");
  EXPECT_EQ(State("inventory").in_flight(), 1u);

  // 500,000 empty entries in 1 MB of http_logs: refused for the count on
  // the raw bytes, never built.
  std::string empties;
  for (int i = 0; i < 500000; ++i) empties.append("\x0a\x00", 2);
  std::string amplified = "\x12";
  {
    std::string length;
    for (uint32_t v = empties.size(); ; v >>= 7) {
      if (v < 0x80) {
        length.push_back(static_cast<char>(v));
        break;
      }
      length.push_back(static_cast<char>((v & 0x7f) | 0x80));
    }
    amplified += length + empties;
  }
  s = RawStream({amplified.substr(0, 1)});  // a lone tag: not a message
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  s = RawStream({amplified});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("log_entry: at most 1000"));

  // Over the method's 1 MiB (under the port's 2 MiB): refused for its size.
  HTTPAccessLogEntry fat = ListEntry(kExtAuthz, {after}, 503);
  (*(*fat.mutable_common_properties()
          ->mutable_metadata()
          ->mutable_filter_metadata())["padding"]
        .mutable_fields())["x"]
      .set_string_value(std::string(1200 << 10, 'x'));
  s = Stream({Message({fat})});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("the limit is 1048576 bytes"));
  EXPECT_EQ(State("inventory").in_flight(), 1u);
  EXPECT_EQ(Entries("invalid"), 5);

  // A well-behaved stream is served as usual afterwards.
  Settle({ListEntry(kExtAuthz, {after})});
  EXPECT_EQ(State("inventory").in_flight(), 0u);
  EXPECT_EQ(State("inventory").breaker_state(), v1::CLOSED);
}

TEST_F(AccessLogServiceTest, ShutdownEndsAnOpenStream) {
  const Permit p = Acquire("inventory");
  grpc::ClientContext context;
  StreamAccessLogsResponse response;
  auto writer = als_->StreamAccessLogs(&context, &response);
  ASSERT_TRUE(writer->Write(Message({ListEntry(kExtAuthz, {p})})));
  // The entry settled: the server holds the stream open, reading.
  ASSERT_TRUE(testing::WaitFor(
      [&] { return State("inventory").in_flight() == 0; }, absl::Seconds(30)));
  // Ended at once with UNAVAILABLE, well before the 10 s drain: Envoy's
  // logger reconnects elsewhere.
  server_->Shutdown(absl::Now() + absl::Seconds(10));
  const grpc::Status s = writer->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(PercentDecodeTest, StrictDecoding) {
  std::string out;
  EXPECT_TRUE(rpc::PercentDecode("a%20b%2C%25%C3%BC", &out));
  EXPECT_EQ(out, "a b,%\xc3\xbc");
  EXPECT_TRUE(rpc::PercentDecode("", &out));
  EXPECT_EQ(out, "");
  EXPECT_TRUE(rpc::PercentDecode("%2c%2C", &out));
  EXPECT_EQ(out, ",,");
  for (const char* bad : {"%", "%2", "a%g0", "%0g", "a b", "a,b", "\x7f",
                          "\xc3\xbc"}) {
    EXPECT_FALSE(rpc::PercentDecode(bad, &out)) << bad;
  }
}

}  // namespace
}  // namespace sluice
