// SPDX-License-Identifier: Apache-2.0
// AdminService over real in-process gRPC (port 0), standalone backend.

#include "server/rpc/admin_service.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "server/policy/policy_store.h"
#include "server/rpc/admin_backend.h"
#include "server/rpc/admin_events.h"
#include "tests/testing/fake_clock.h"

namespace sluice::rpc {
namespace {

using ::testing::HasSubstr;

v1::Policy P(const std::string& text) {
  v1::Policy p;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &p)) << text;
  return p;
}

constexpr char kInventory[] = R"pb(
  name: "inventory"
  rate_limit { rate: 100 }
  breaker { consecutive_failures: 5 }
  fallback { strategy: STATIC payload: "{}" }
)pb";

class AdminServiceTest : public ::testing::Test {
 protected:
  void Start(const std::string& token) {
    AdminServiceImpl::Options options;
    if (!token.empty()) {
      tokens_ = std::make_unique<AdminTokens>(std::vector<std::string>{token});
      options.tokens = tokens_.get();
    }
    service_ = std::make_unique<AdminServiceImpl>(&engine_, &backend_, &hub_,
                                                  options);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::AdminService::NewStub(channel_);
  }
  void SetUp() override { Start(""); }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }

  std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token = "") {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(5));
    if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
    return ctx;
  }

  grpc::Status Put(const v1::Policy& policy, uint64_t expected = 0,
                   v1::PutPolicyResponse* out = nullptr) {
    v1::PutPolicyRequest req;
    *req.mutable_policy() = policy;
    req.set_expected_version(expected);
    v1::PutPolicyResponse resp;
    grpc::Status s = stub_->PutPolicy(Ctx().get(), req, &resp);
    if (out) *out = resp;
    return s;
  }

  grpc::Status Override(const std::string& dep, v1::BreakerOverride o,
                        v1::SetBreakerOverrideResponse* out = nullptr) {
    v1::SetBreakerOverrideRequest req;
    req.set_dependency(dep);
    req.set_override(o);
    req.set_note("INC-1");
    v1::SetBreakerOverrideResponse resp;
    grpc::Status s = stub_->SetBreakerOverride(Ctx().get(), req, &resp);
    if (out) *out = resp;
    return s;
  }

  sluice::testing::FakeClock clock_;
  EventHub hub_{{/*queue_size=*/64, /*replica_id=*/"test-replica"}};
  core::Engine engine_{&clock_, core::Engine::Options(), &hub_};
  policy::PolicyStore store_{&engine_};
  LocalAdminBackend backend_{&store_, &engine_, &hub_};
  std::unique_ptr<AdminTokens> tokens_;
  std::unique_ptr<AdminServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::AdminService::Stub> stub_;
};

TEST_F(AdminServiceTest, PutGetListDelete) {
  v1::PutPolicyResponse put;
  ASSERT_TRUE(Put(P(kInventory), 0, &put).ok());
  EXPECT_EQ(put.previous_version(), 0u);
  EXPECT_GT(put.version(), 0u);

  v1::GetPolicyRequest get;
  get.set_name("inventory");
  v1::Policy got;
  ASSERT_TRUE(stub_->GetPolicy(Ctx().get(), get, &got).ok());
  EXPECT_EQ(got.version(), put.version());
  EXPECT_DOUBLE_EQ(got.rate_limit().rate(), 100);

  // The engine enforces it.
  auto decision = engine_.Acquire("inventory", "", 1);
  ASSERT_TRUE(decision.ok());
  EXPECT_EQ(decision->policy_version, put.version());

  v1::ListPoliciesResponse list;
  ASSERT_TRUE(stub_->ListPolicies(Ctx().get(), {}, &list).ok());
  ASSERT_EQ(list.policies_size(), 1);

  v1::DeletePolicyRequest del;
  del.set_name("inventory");
  v1::DeletePolicyResponse del_resp;
  ASSERT_TRUE(stub_->DeletePolicy(Ctx().get(), del, &del_resp).ok());
  // The dependency now follows --unknown-dependency (allow by default).
  decision = engine_.Acquire("inventory", "", 1);
  ASSERT_TRUE(decision.ok());
  EXPECT_EQ(decision->reason, core::Reason::kUnknownDependency);
  EXPECT_EQ(stub_->GetPolicy(Ctx().get(), get, &got).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(stub_->DeletePolicy(Ctx().get(), del, &del_resp).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(AdminServiceTest, VersionsIncreaseMonotonically) {
  v1::PutPolicyResponse a, b, c;
  ASSERT_TRUE(Put(P(kInventory), 0, &a).ok());
  v1::Policy changed = P(kInventory);
  changed.mutable_rate_limit()->set_rate(50);
  ASSERT_TRUE(Put(changed, 0, &b).ok());
  EXPECT_GT(b.version(), a.version());
  EXPECT_EQ(b.previous_version(), a.version());
  ASSERT_TRUE(Put(P(R"pb(name: "other")pb"), 0, &c).ok());
  EXPECT_GT(c.version(), b.version());
}

TEST_F(AdminServiceTest, InvalidPolicyNamesFieldAndChangesNothing) {
  v1::PutPolicyResponse put;
  ASSERT_TRUE(Put(P(kInventory), 0, &put).ok());
  v1::Policy bad = P(kInventory);
  bad.mutable_rate_limit()->set_rate(10);
  bad.mutable_breaker()->set_failure_rate_threshold(1.5);
  grpc::Status s = Put(bad);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("breaker.failure_rate_threshold"));
  auto policy = store_.Get("inventory");
  ASSERT_TRUE(policy.ok());
  EXPECT_EQ(policy->version(), put.version());
  EXPECT_DOUBLE_EQ(policy->rate_limit().rate(), 100);
}

TEST_F(AdminServiceTest, CompareAndSetConflictIsAborted) {
  v1::PutPolicyResponse first;
  ASSERT_TRUE(Put(P(kInventory), 0, &first).ok());
  v1::Policy edit = P(kInventory);
  edit.mutable_rate_limit()->set_rate(7);
  v1::PutPolicyResponse second;
  ASSERT_TRUE(Put(edit, first.version(), &second).ok());
  // A second writer still holding the first version loses.
  edit.mutable_rate_limit()->set_rate(8);
  grpc::Status s = Put(edit, first.version());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(s.error_message(), HasSubstr("expected version"));
  EXPECT_DOUBLE_EQ(store_.Get("inventory")->rate_limit().rate(), 7);
}

TEST_F(AdminServiceTest, OverrideForcesBreakerAndAutoRestores) {
  ASSERT_TRUE(Put(P(kInventory)).ok());
  v1::SetBreakerOverrideResponse resp;
  ASSERT_TRUE(Override("inventory", v1::FORCE_OPEN, &resp).ok());
  EXPECT_EQ(resp.breaker_state(), v1::FORCED_OPEN);
  auto d = engine_.Acquire("inventory", "", 1);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->verdict, core::Verdict::kDegrade);
  EXPECT_EQ(d->reason, core::Reason::kCircuitOpen);

  ASSERT_TRUE(Override("inventory", v1::AUTO, &resp).ok());
  EXPECT_EQ(resp.breaker_state(), v1::CLOSED);
  d = engine_.Acquire("inventory", "", 1);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->verdict, core::Verdict::kAllow);

  EXPECT_EQ(Override("nope", v1::FORCE_OPEN).error_code(),
            grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(Put(P(R"pb(name: "nobreaker")pb")).ok());
  EXPECT_EQ(Override("nobreaker", v1::FORCE_OPEN).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Override("inventory", v1::BREAKER_OVERRIDE_UNSPECIFIED)
                .error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(AdminServiceTest, GetStateShowsLiveState) {
  ASSERT_TRUE(Put(P(kInventory)).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(engine_.Acquire("inventory", "", 1).ok());
  ASSERT_TRUE(Override("inventory", v1::FORCE_OPEN).ok());
  ASSERT_TRUE(engine_.Acquire("inventory", "", 1).ok());

  v1::GetStateRequest req;
  req.set_dependency("inventory");
  v1::DependencyState state;
  ASSERT_TRUE(stub_->GetState(Ctx().get(), req, &state).ok());
  EXPECT_EQ(state.dependency(), "inventory");
  EXPECT_EQ(state.decisions().acquired(), 4u);
  EXPECT_EQ(state.decisions().allowed(), 3u);
  EXPECT_EQ(state.decisions().degraded(), 1u);
  EXPECT_EQ(state.breaker_state(), v1::FORCED_OPEN);
  EXPECT_EQ(state.override(), v1::FORCE_OPEN);
  EXPECT_EQ(state.in_flight(), 3u);
  EXPECT_NEAR(state.tokens_available(), 97, 0.01);
  EXPECT_EQ(state.store_status(), "standalone");
  EXPECT_EQ(state.replica_id(), "test-replica");
  EXPECT_EQ(state.share(), 0);
  // No adaptive blocks in the policy: none in the state.
  EXPECT_FALSE(state.has_throttle());
  EXPECT_FALSE(state.has_adaptive_limit());
  EXPECT_FALSE(state.has_latency_baseline());

  req.set_dependency("missing");
  EXPECT_EQ(stub_->GetState(Ctx().get(), req, &state).error_code(),
            grpc::StatusCode::NOT_FOUND);
  req.set_dependency("");
  EXPECT_EQ(stub_->GetState(Ctx().get(), req, &state).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

constexpr char kAdaptive[] = R"pb(
  name: "search"
  breaker {
    consecutive_failures: 100
    window { seconds: 10 }
    minimum_calls: 2
    latency_baseline { factor: 3 }
  }
  adaptive_throttle { minimum_requests: 1000 }
  adaptive_concurrency {
    min_limit: 1
    max_limit: 100
    initial_limit: 2
    minimum_samples: 2
    window { seconds: 1 }
  }
)pb";

TEST_F(AdminServiceTest, GetStateShowsTheAdaptiveGatesAndTheirEvents) {
  ASSERT_TRUE(Put(P(kAdaptive)).ok());
  auto events = hub_.Subscribe("search", nullptr);

  // Two calls fill the limit of 2; the third is refused by it.
  std::vector<core::PermitId> permits;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<core::Decision> d = engine_.Acquire("search", "", 1);
    ASSERT_TRUE(d.ok());
    ASSERT_EQ(d->verdict, core::Verdict::kAllow);
    permits.push_back(d->permit_id);
  }
  absl::StatusOr<core::Decision> refused = engine_.Acquire("search", "", 1);
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->verdict, core::Verdict::kReject);
  EXPECT_EQ(refused->reason, core::Reason::kAdaptiveThrottled);
  clock_.Advance(absl::Milliseconds(20));
  for (const core::PermitId& id : permits) {
    engine_.Report("search", "", id, core::Outcome::kSuccess,
                   absl::Milliseconds(20));
  }
  // A window later, a third report judges it: the limit was reached and the
  // latency is at its baseline, so it grows by one.
  clock_.Advance(absl::Seconds(1));
  absl::StatusOr<core::Decision> d = engine_.Acquire("search", "", 1);
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->verdict, core::Verdict::kAllow);
  engine_.Report("search", "", d->permit_id, core::Outcome::kSuccess,
                 absl::Milliseconds(20));

  v1::GetStateRequest req;
  req.set_dependency("search");
  v1::DependencyState state;
  ASSERT_TRUE(stub_->GetState(Ctx().get(), req, &state).ok());
  ASSERT_TRUE(state.has_adaptive_limit());
  EXPECT_EQ(state.adaptive_limit().limit(), 3u);
  EXPECT_EQ(state.adaptive_limit().in_flight(), 0u);
  EXPECT_EQ(state.adaptive_limit().refused(), 1u);
  EXPECT_EQ(state.adaptive_limit().baseline().nanos(), 20'000'000);
  EXPECT_EQ(state.adaptive_limit().last_latency().nanos(), 20'000'000);
  ASSERT_TRUE(state.has_throttle());
  EXPECT_EQ(state.throttle().accepts(), 3);
  EXPECT_GE(state.throttle().requests(), 3);
  EXPECT_EQ(state.throttle().probability(), 0);  // below minimum_requests
  EXPECT_EQ(state.throttle().refused(), 0u);
  ASSERT_TRUE(state.has_latency_baseline());
  // The breaker's 10 s window has not ended: nothing learned yet.
  EXPECT_EQ(state.latency_baseline().windows_learned(), 0u);
  EXPECT_FALSE(state.latency_baseline().ready());
  EXPECT_FALSE(state.latency_baseline().has_mean());
  EXPECT_EQ(state.latency_baseline().live_calls(), 3);
  EXPECT_EQ(state.latency_baseline().live_mean().nanos(), 20'000'000);
  EXPECT_EQ(state.latency_baseline().live_success_rate(), 1);

  v1::Event e;
  std::vector<v1::Event> changes;
  while (events->Pop(&e)) {
    if (e.kind() == v1::Event::ADAPTIVE_LIMIT_CHANGED) changes.push_back(e);
  }
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].old_value(), 2);
  EXPECT_EQ(changes[0].new_value(), 3);
  EXPECT_THAT(changes[0].cause(), HasSubstr("limit reached"));
  EXPECT_EQ(changes[0].replica_id(), "test-replica");
}

TEST_F(AdminServiceTest, WatchEventsStreamsTransitionsPolicyAndOverrides) {
  ASSERT_TRUE(Put(P(kInventory)).ok());
  auto ctx = Ctx();
  v1::WatchEventsRequest req;
  req.set_dependency("inventory");
  auto reader = stub_->WatchEvents(ctx.get(), req);
  reader->WaitForInitialMetadata();

  v1::Policy other = P(R"pb(name: "other")pb");
  ASSERT_TRUE(Put(other).ok());  // filtered out
  ASSERT_TRUE(Override("inventory", v1::FORCE_OPEN).ok());
  v1::Policy edit = P(kInventory);
  edit.mutable_rate_limit()->set_rate(5);
  ASSERT_TRUE(Put(edit).ok());

  std::vector<v1::Event> events;
  v1::Event e;
  while (events.size() < 3 && reader->Read(&e)) events.push_back(e);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].kind(), v1::Event::BREAKER_TRANSITION);
  EXPECT_EQ(events[0].to(), v1::FORCED_OPEN);
  EXPECT_THAT(events[0].cause(), HasSubstr("INC-1"));
  EXPECT_EQ(events[1].kind(), v1::Event::OVERRIDE_SET);
  EXPECT_EQ(events[1].override(), v1::FORCE_OPEN);
  EXPECT_EQ(events[2].kind(), v1::Event::POLICY_CHANGED);
  EXPECT_EQ(events[2].new_version(), events[2].old_version() + 2);
  for (const v1::Event& ev : events) {
    EXPECT_EQ(ev.dependency(), "inventory");
    EXPECT_EQ(ev.replica_id(), "test-replica");
  }
  ctx->TryCancel();
  reader->Finish();
}

class AdminTokenTest : public AdminServiceTest {
 protected:
  void SetUp() override { Start("s3cret"); }
};

TEST_F(AdminTokenTest, MissingOrWrongTokenIsUnauthenticated) {
  v1::ListPoliciesResponse list;
  EXPECT_EQ(stub_->ListPolicies(Ctx().get(), {}, &list).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(stub_->ListPolicies(Ctx("wrong").get(), {}, &list).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(stub_->ListPolicies(Ctx("s3cre").get(), {}, &list).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(stub_->ListPolicies(Ctx("s3cret").get(), {}, &list).ok());

  // Writes are refused too, and change nothing.
  v1::PutPolicyRequest put;
  *put.mutable_policy() = P(kInventory);
  v1::PutPolicyResponse put_resp;
  EXPECT_EQ(stub_->PutPolicy(Ctx().get(), put, &put_resp).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(store_.size(), 0u);

  auto ctx = Ctx("wrong");
  auto reader = stub_->WatchEvents(ctx.get(), {});
  v1::Event e;
  EXPECT_FALSE(reader->Read(&e));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(AdminTokenTest, ReplacedTokensApplyToTheNextCall) {
  v1::ListPoliciesResponse list;
  tokens_->Replace({"s3cret", "n3w"});  // rotation step 1: both valid
  EXPECT_TRUE(stub_->ListPolicies(Ctx("s3cret").get(), {}, &list).ok());
  EXPECT_TRUE(stub_->ListPolicies(Ctx("n3w").get(), {}, &list).ok());
  tokens_->Replace({"n3w"});  // step 2: the old one removed
  EXPECT_EQ(stub_->ListPolicies(Ctx("s3cret").get(), {}, &list).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(stub_->ListPolicies(Ctx("n3w").get(), {}, &list).ok());
}

}  // namespace
}  // namespace sluice::rpc
