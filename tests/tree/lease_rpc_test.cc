// SPDX-License-Identifier: Apache-2.0
// A leaf's UpstreamStore against LeaseServiceImpl over in-process gRPC on
// loopback (port 0), with a fake LeafServer in place of the central
// replica's ledger.

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/rpc/message_bounds.h"
#include "server/tree/lease_codec.h"
#include "server/tree/upstream_store.h"
#include "tests/testing/stats_recorder.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_certs.h"
#include "tests/tree/lease_test_server.h"
#include "wire/quote.h"

namespace sluice::tree {
namespace {

using lease_testing::LeaseTestServer;
using ::testing::HasSubstr;
using ::testing::StartsWith;

cluster::TickRequest LeafTick(uint64_t sequence) {
  cluster::TickRequest r;
  r.replica_id = "leaf-1";
  r.incarnation = 0xabcdef;
  r.sequence = sequence;
  cluster::PolicyPush push;
  push.policy = "inventory";
  core::KeyTick key;
  key.limit = {100, 10};
  key.demand = {40, 2};
  push.keys.push_back(key);
  r.policies.push_back(push);
  core::ForwardedReport f;
  f.issuer = "central-0";
  f.dependency = "inventory";
  f.key = "k";
  f.permit_id = {3, 4};
  f.outcome = core::Outcome::kFailure;
  r.forwarded.push_back(f);
  return r;
}

std::unique_ptr<UpstreamStore> Store(
    const std::string& target, absl::Duration timeout = absl::Seconds(5)) {
  UpstreamStore::Options options;
  options.target = target;
  options.timeout = timeout;
  absl::StatusOr<std::unique_ptr<UpstreamStore>> store =
      UpstreamStore::Create(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

bool ValidUtf8(absl::string_view text) {
  return wire::ToValidUtf8(text) == text;
}

TEST(UpstreamStore, ATickIsOneLeaseCallAnsweredByTheLeafServer) {
  LeaseTestServer central("central-a");
  ASSERT_TRUE(central.started());
  std::unique_ptr<UpstreamStore> store = Store(central.address());
  ASSERT_NE(store, nullptr);

  absl::StatusOr<cluster::TickReply> reply = store->Tick(LeafTick(1));
  ASSERT_TRUE(reply.ok()) << reply.status();
  ASSERT_EQ(reply->policies.size(), 1u);
  ASSERT_EQ(reply->policies[0].grants.size(), 1u);
  EXPECT_EQ(reply->policies[0].grants[0].units, (core::Units{50, 5}));
  EXPECT_EQ(reply->policies[0].grants[0].valid_for, absl::Seconds(2));
  EXPECT_EQ(reply->store_now, absl::FromUnixMillis(1700000000000));
  EXPECT_THAT(reply->replicas, ::testing::ElementsAre("central-a", "leaf-1"));
  EXPECT_EQ(reply->live_weight, 2u);

  const std::vector<cluster::TickRequest> seen =
      central.leaf_server().requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].replica_id, "leaf-1");
  EXPECT_EQ(seen[0].incarnation, 0xabcdefu);
  EXPECT_EQ(seen[0].sequence, 1u);
  EXPECT_EQ(seen[0].policies[0].keys[0].demand[0], 40);
  ASSERT_EQ(seen[0].forwarded.size(), 1u);
  EXPECT_EQ(seen[0].forwarded[0].outcome, core::Outcome::kFailure);

  const UpstreamStats stats = store->stats();
  EXPECT_TRUE(stats.up);
  EXPECT_EQ(stats.moves, 0u);
  EXPECT_EQ(stats.failures, 0u);
  EXPECT_GT(stats.last_round_trip, absl::ZeroDuration());
  EXPECT_EQ(stats.peer, absl::StrCat("ipv4:", central.address()));
  const cluster::StoreStatus status = store->status();
  EXPECT_EQ(status.endpoint, stats.peer);
  EXPECT_EQ(status.events.at("moved"), 0u);
  EXPECT_EQ(store->Describe(), absl::StrCat("upstream ", central.address()));

  // Its metrics: the store's status and the upstream it follows.
  sluice::testing::StatsRecorder metrics(*store);
  EXPECT_EQ(metrics.Sum("sluice_upstream_info",
                        {{"target", central.address()}, {"peer", stats.peer}}),
            1);
  EXPECT_EQ(metrics.Sum("sluice_upstream_moves_total"), 0);
  EXPECT_EQ(metrics.Find("sluice_upstream_moves_total").size(), 1u);
  EXPECT_DOUBLE_EQ(metrics.Sum("sluice_upstream_round_trip_seconds"),
                   absl::ToDoubleSeconds(stats.last_round_trip));
  EXPECT_EQ(metrics.Sum("sluice_store_endpoint_info",
                        {{"endpoint", stats.peer}}),
            1);
  EXPECT_EQ(metrics.Sum("sluice_store_events_total", {{"kind", "moved"}}), 0);
  EXPECT_EQ(metrics.Find("sluice_store_events_total").size(), 1u);
}

TEST(UpstreamStore, ForwardedReportsPastTheBoundAreDroppedOldestFirst) {
  LeaseTestServer central("central-a");
  ASSERT_TRUE(central.started());
  std::unique_ptr<UpstreamStore> store = Store(central.address());
  cluster::TickRequest request = LeafTick(1);
  request.forwarded.clear();
  for (size_t i = 0; i < kMaxLeaseForwarded + 5; ++i) {
    core::ForwardedReport f;
    f.issuer = "central-0";
    f.dependency = "inventory";
    f.permit_id = {i + 1, 0};
    f.outcome = core::Outcome::kSuccess;
    request.forwarded.push_back(f);
  }
  absl::StatusOr<cluster::TickReply> reply = store->Tick(request);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->inbox_dropped, 5u);
  const std::vector<cluster::TickRequest> seen =
      central.leaf_server().requests();
  ASSERT_EQ(seen[0].forwarded.size(), kMaxLeaseForwarded);
  EXPECT_EQ(seen[0].forwarded.front().permit_id.serial, 6u);
}

TEST(UpstreamStore, ACentralReplicaThatNeverAnswersCostsOneDeadline) {
  LeaseTestServer central("central-a");
  ASSERT_TRUE(central.started());
  std::unique_ptr<UpstreamStore> store =
      Store(central.address(), absl::Milliseconds(300));
  // Connect first, so the deadline measures the call and not a connect.
  ASSERT_TRUE(store->Tick(LeafTick(1)).ok());

  central.leaf_server().Hold();
  const absl::Time start = absl::Now();
  absl::StatusOr<cluster::TickReply> reply = store->Tick(LeafTick(2));
  const absl::Duration took = absl::Now() - start;
  central.leaf_server().Release();

  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(reply.status().message()),
              StartsWith(absl::StrCat("upstream ", central.address(), ": ")));
  EXPECT_GE(took, absl::Milliseconds(250));
  EXPECT_LT(took, absl::Seconds(3));
  EXPECT_FALSE(store->stats().up);
  EXPECT_EQ(store->stats().failures, 1u);
  EXPECT_EQ(store->status().errors.at("timeout"), 1u);
}

TEST(UpstreamStore, AnUnreachableUpstreamFailsAsUnavailable) {
  // A port nothing listens on (the server's, once it stopped).
  LeaseTestServer gone("gone");
  ASSERT_TRUE(gone.started());
  const std::string address = gone.address();
  gone.Stop();
  std::unique_ptr<UpstreamStore> store =
      Store(address, absl::Milliseconds(500));
  absl::StatusOr<cluster::TickReply> reply = store->Tick(LeafTick(1));
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store->status().errors.at("unavailable"), 1u);
  EXPECT_EQ(store->status().endpoint, address);
}

TEST(UpstreamStore, AdminWritesAreRefusedNamingTheUpstream) {
  std::unique_ptr<UpstreamStore> store = Store("dns:///central.sluice:50051");
  const std::string want =
      "this sluiced is a leaf of dns:///central.sluice:50051; send admin "
      "writes to the central replicas";
  absl::StatusOr<cluster::ConfigWrite> put =
      store->PutPolicy({"inventory", "blob", 0}, 0);
  EXPECT_EQ(put.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(put.status().message()), HasSubstr(want));
  EXPECT_THAT(std::string(put.status().message()), HasSubstr("sluicectl"));
  absl::StatusOr<cluster::ConfigWrite> del = store->DeletePolicy("x", 0);
  EXPECT_EQ(del.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(del.status().message()), HasSubstr(want));
  absl::StatusOr<cluster::ConfigWrite> override = store->SetOverride(
      {"inventory", core::BreakerOverride::kForceOpen, "note"});
  EXPECT_EQ(override.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(override.status().message()), HasSubstr(want));
}

TEST(UpstreamStore, CreateRefusesAnEmptyTargetAndBadTlsFiles) {
  UpstreamStore::Options options;
  absl::StatusOr<std::unique_ptr<UpstreamStore>> store =
      UpstreamStore::Create(options);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(store.status().message()), HasSubstr("--upstream"));

  options.target = "127.0.0.1:1";
  options.tls.ca_file = "/nonexistent/ca.pem";
  store = UpstreamStore::Create(options);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(store.status().message()),
              HasSubstr("--upstream-tls-ca"));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(UpstreamStore, MutualTlsWithTheSdksClientSettings) {
  sluice::testing::TempDir dir("sluice_lease_tls");
  sluice::testing::TestCerts certs(dir.path());
  ASSERT_TRUE(certs.ok()) << certs.error();
  grpc::SslServerCredentialsOptions server_tls(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  server_tls.pem_root_certs = ReadFile(certs.ca_cert());
  server_tls.pem_key_cert_pairs.push_back(
      {ReadFile(certs.server_key()), ReadFile(certs.server_cert())});
  LeaseTestServer central("central-a", true,
                          grpc::SslServerCredentials(server_tls));
  ASSERT_TRUE(central.started());

  // The certificate names localhost; the target is an IP address.
  UpstreamStore::Options options;
  options.target = central.address();
  options.timeout = absl::Seconds(5);
  options.tls.ca_file = certs.ca_cert();
  options.tls.cert_file = certs.client_cert();
  options.tls.key_file = certs.client_key();
  options.tls.server_name = "localhost";
  absl::StatusOr<std::unique_ptr<UpstreamStore>> store =
      UpstreamStore::Create(options);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<cluster::TickReply> reply = (*store)->Tick(LeafTick(1));
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->policies[0].grants[0].units, (core::Units{50, 5}));

  // Without a client certificate the central replica refuses the leaf.
  options.tls.cert_file.clear();
  options.tls.key_file.clear();
  store = UpstreamStore::Create(options);
  ASSERT_TRUE(store.ok()) << store.status();
  reply = (*store)->Tick(LeafTick(1));
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnavailable);

  // Plaintext to a TLS listener gets nowhere either.
  std::unique_ptr<UpstreamStore> plain =
      Store(central.address(), absl::Seconds(2));
  EXPECT_FALSE(plain->Tick(LeafTick(1)).ok());
  EXPECT_EQ(central.leaf_server().requests().size(), 1u);
}

TEST(UpstreamStore, ARequestPastTheMessageBoundFailsBeforeTheCall) {
  std::unique_ptr<UpstreamStore> store = Store("127.0.0.1:1");
  cluster::TickRequest request = LeafTick(1);
  request.seed.resize(20, {"p", std::string(kMaxLeasePolicyBlobBytes, 'b'), 0});
  absl::StatusOr<cluster::TickReply> reply = store->Tick(request);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(reply.status().message()),
              HasSubstr("the lease protocol takes at most 2097152"));
  EXPECT_EQ(store->status().errors.at("too_large"), 1u);
}

TEST(LeaseService, TheLeafServersCodesReachTheLeafAsTheyAre) {
  LeaseTestServer central("central-a");
  ASSERT_TRUE(central.started());
  std::unique_ptr<UpstreamStore> store = Store(central.address());
  uint64_t sequence = 0;
  for (const auto& [status, kind] :
       {std::pair{absl::AbortedError("sequence 3 of leaf-1 is not newer"),
                  "aborted"},
        std::pair{absl::UnavailableError("the central replica's store is "
                                         "down \xff\xfe"),
                  "unavailable"},
        std::pair{absl::ResourceExhaustedError("serving 2000 leaves already"),
                  "refused"}}) {
    central.leaf_server().FailWith(status);
    absl::StatusOr<cluster::TickReply> reply =
        store->Tick(LeafTick(++sequence));
    ASSERT_FALSE(reply.ok());
    EXPECT_EQ(reply.status().code(), status.code());
    EXPECT_THAT(std::string(reply.status().message()),
                HasSubstr(std::string(status.message()).substr(0, 20)));
    EXPECT_TRUE(ValidUtf8(reply.status().message()));
    EXPECT_EQ(store->status().errors.at(kind), 1u) << kind;
  }
  EXPECT_EQ(store->stats().failures, 3u);
}

TEST(LeaseService, AReplyThatDoesNotAnswerTheRequestIsAProtocolError) {
  LeaseTestServer central("central-a");
  ASSERT_TRUE(central.started());
  central.leaf_server().DropGrants();
  std::unique_ptr<UpstreamStore> store = Store(central.address());
  absl::StatusOr<cluster::TickReply> reply = store->Tick(LeafTick(1));
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(reply.status().message()),
              HasSubstr("policies[0].grants: the reply answers 0 keys"));
  EXPECT_EQ(store->status().errors.at("protocol"), 1u);
  EXPECT_FALSE(store->stats().up);
}

TEST(LeaseService, ReportsForTheLeafPastTheBoundLoseTheOldestNotTheTick) {
  LeaseTestServer central("central-a");
  ASSERT_TRUE(central.started());
  central.leaf_server().ForwardToLeaf(kMaxLeaseForwarded + 3);
  std::unique_ptr<UpstreamStore> store = Store(central.address());
  absl::StatusOr<cluster::TickReply> reply = store->Tick(LeafTick(1));
  ASSERT_TRUE(reply.ok()) << reply.status();
  ASSERT_EQ(reply->forwarded_to_me.size(), kMaxLeaseForwarded);
  EXPECT_EQ(reply->forwarded_to_me.front().permit_id.serial, 4u);
  EXPECT_EQ(reply->forwarded_to_me.back().permit_id.serial,
            kMaxLeaseForwarded + 3);
}

// Raw bytes to the service, as a hostile leaf would send them.
grpc::Status CallRaw(const std::string& address, const std::string& bytes) {
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::Status result;
  absl::Notification done;
  stub.UnaryCall(&context, "/sluice.v1.Lease/Tick", grpc::StubOptions(),
                 &request, &response, [&](grpc::Status s) {
                   result = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  return result;
}

TEST(LeaseService, ABadRequestIsInvalidArgumentAndNeverReachesTheLedger) {
  LeaseTestServer central("central-a");
  ASSERT_TRUE(central.started());

  v1::LeaseTickRequest proto;
  proto.set_replica_id("leaf-1");
  proto.set_weight(0);
  std::string bytes;
  ASSERT_TRUE(proto.SerializeToString(&bytes));
  grpc::Status s = CallRaw(central.address(), bytes);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("weight must be at least 1"));

  // A key that is not UTF-8, twice: named, quoted, and the message is valid.
  proto.set_weight(1);
  proto.mutable_stale_after()->set_seconds(3);
  v1::LeasePolicyPush* push = proto.add_policies();
  push->set_policy("inventory");
  push->add_keys()->set_key("\xc3\x28");
  push->add_keys()->set_key("\xc3\x28");
  ASSERT_TRUE(proto.SerializeToString(&bytes));
  s = CallRaw(central.address(), bytes);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("policies[0].keys[1].key \"\\xc3(\" is pushed twice"));
  EXPECT_TRUE(ValidUtf8(s.error_message()));

  // Not a message at all.
  s = CallRaw(central.address(), std::string("\xff\xff\xff\xff", 4));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // Policies past the bound: refused on the raw bytes.
  std::string flood;
  for (size_t i = 0; i <= kMaxLeasePolicies; ++i)
    flood += std::string("\x4a\x00", 2);
  s = CallRaw(central.address(), flood);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("policies: at most 4096"));

  EXPECT_TRUE(central.leaf_server().requests().empty());
}

}  // namespace
}  // namespace sluice::tree
