// SPDX-License-Identifier: Apache-2.0
// The grant tree's flags (--upstream, --upstream-tls-*, --upstream-timeout,
// --max-leaves) and their wiring in app::Server: a central replica on the
// in-memory store serving a leaf over a real loopback gRPC connection. The
// engines run on a fake clock and the test drives every sync tick.
#include <grpcpp/grpcpp.h>

#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/app/options.h"
#include "server/app/server.h"
#include "sluice/v1/admin.grpc.pb.h"
#include "sluice/v1/decision.grpc.pb.h"
#include "spdlog/spdlog.h"
#include "tests/app/in_process_server.h"
#include "tests/testing/captured_log.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fake_store.h"
#include "tests/testing/free_port.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_certs.h"

namespace sluice::app {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

ServerOptions Leaf(const std::string& upstream) {
  ServerOptions options;
  options.upstream = upstream;
  return options;
}

TEST(TreeOptionsTest, UpstreamExcludesEveryRedisFlag) {
  struct Case {
    const char* flag;
    void (*set)(ServerOptions*);
  };
  const Case cases[] = {
      {"--redis", [](ServerOptions* o) { o->redis = "127.0.0.1:6379"; }},
      {"--redis-sentinels",
       [](ServerOptions* o) { o->redis_sentinels = "127.0.0.1:26379"; }},
      {"--redis-cluster",
       [](ServerOptions* o) { o->redis_cluster = "127.0.0.1:7000"; }},
      {"--redis-master", [](ServerOptions* o) { o->redis_master = "m"; }},
      {"--redis-user", [](ServerOptions* o) { o->redis_user = "u"; }},
      {"--redis-password-file",
       [](ServerOptions* o) { o->redis_password_file = "/run/pw"; }},
      {"--redis-db", [](ServerOptions* o) { o->redis_db = 2; }},
  };
  for (const Case& c : cases) {
    ServerOptions options = Leaf("127.0.0.1:50051");
    c.set(&options);
    const absl::Status s = ValidateOptions(options);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.flag;
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("--upstream and ", c.flag,
                                                    " exclude each other")))
        << c.flag;
  }
  EXPECT_TRUE(ValidateOptions(Leaf("127.0.0.1:50051")).ok());
}

TEST(TreeOptionsTest, ALeafRefusesAPoliciesFile) {
  ServerOptions options = Leaf("sluice-central:50051");
  options.policies_path = "/etc/sluice/policies.yaml";
  EXPECT_THAT(ValidateOptions(options).message(),
              HasSubstr("--policies /etc/sluice/policies.yaml cannot be used "
                        "with --upstream sluice-central:50051: a leaf takes "
                        "its policies"));
}

TEST(TreeOptionsTest, UpstreamTargets) {
  for (const char* good :
       {"127.0.0.1:50051", "sluice-central:50051", "[::1]:50051",
        "unix:/run/sluice/central.sock", "dns:///sluice-central:50051",
        "dns:sluice-central:50051", "ipv4:10.0.0.1:50051,10.0.0.2:50051",
        "ipv6:[::1]:50051"}) {
    EXPECT_TRUE(ValidateUpstreamTarget(good).ok()) << good;
    EXPECT_TRUE(ValidateOptions(Leaf(good)).ok()) << good;
  }
  struct Bad {
    const char* target;
    const char* message;
  };
  for (const Bad& bad : {
           Bad{"sluice-central", "expected HOST:PORT"},
           Bad{"sluice-central:0", "port must be 1-65535"},
           Bad{"unix:", "unix: needs a socket path"},
           Bad{"dns:///", "dns: needs something to resolve"},
           Bad{"ipv4:", "ipv4: needs something to resolve"},
           Bad{"a b:1", "no spaces or control characters"},
       }) {
    const absl::Status s = ValidateOptions(Leaf(bad.target));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad.target;
    EXPECT_THAT(s.message(), HasSubstr("--upstream: ")) << bad.target;
    EXPECT_THAT(s.message(), HasSubstr(bad.message)) << bad.target;
  }
  EXPECT_THAT(
      ValidateUpstreamTarget(std::string(kMaxUpstreamTargetBytes + 1, 'a'))
          .message(),
      HasSubstr("at most 1024 bytes"));
}

TEST(TreeOptionsTest, UpstreamTlsFlags) {
  testing::TempDir dir("tree_options_tls");
  testing::TestCerts certs(dir.path());
  ASSERT_TRUE(certs.ok()) << certs.error();

  ServerOptions no_upstream;
  no_upstream.upstream_tls.ca_file = certs.ca_cert();
  EXPECT_THAT(ValidateOptions(no_upstream).message(),
              HasSubstr("--upstream-tls-ca needs --upstream"));
  no_upstream.upstream_tls = {};
  no_upstream.upstream_tls.server_name = "sluice-central";
  EXPECT_THAT(ValidateOptions(no_upstream).message(),
              HasSubstr("--upstream-tls-server-name needs --upstream"));

  ServerOptions tls = Leaf("10.0.0.7:50051");
  tls.upstream_tls.ca_file = certs.ca_cert();
  tls.upstream_tls.cert_file = certs.client_cert();
  tls.upstream_tls.key_file = certs.client_key();
  tls.upstream_tls.server_name = "localhost";
  EXPECT_TRUE(ValidateOptions(tls).ok()) << ValidateOptions(tls);

  ServerOptions no_key = tls;
  no_key.upstream_tls.key_file.clear();
  EXPECT_THAT(ValidateOptions(no_key).message(),
              HasSubstr("--upstream-tls-cert needs --upstream-tls-key"));
  ServerOptions missing = tls;
  missing.upstream_tls.ca_file = dir.File("nope.crt");
  EXPECT_THAT(ValidateOptions(missing).message(),
              HasSubstr("--upstream-tls-ca " + dir.File("nope.crt") +
                        ": cannot read it"));
  ServerOptions swapped = tls;
  swapped.upstream_tls.key_file = certs.client_cert();
  EXPECT_THAT(ValidateOptions(swapped).message(),
              HasSubstr("--upstream-tls-key"));
  ServerOptions name_only = Leaf("10.0.0.7:50051");
  name_only.upstream_tls.server_name = "localhost";
  EXPECT_THAT(ValidateOptions(name_only).message(),
              HasSubstr("--upstream-tls-server-name needs TLS"));
}

TEST(TreeOptionsTest, TimeoutAndMaxLeaves) {
  ServerOptions timeout = Leaf("127.0.0.1:50051");
  timeout.upstream_timeout = absl::ZeroDuration();
  EXPECT_THAT(ValidateOptions(timeout).message(),
              HasSubstr("--upstream-timeout must be > 0"));
  ServerOptions leaves;
  leaves.redis = "127.0.0.1:6379";
  leaves.max_leaves = kMaxLeavesLimit + 1;
  EXPECT_THAT(ValidateOptions(leaves).message(),
              HasSubstr("--max-leaves must be in [0, 100000]"));
  leaves.max_leaves = 0;
  EXPECT_TRUE(ValidateOptions(leaves).ok());
}

TEST(TreeOptionsTest, WhichKindOfReplica) {
  const ServerOptions standalone;
  EXPECT_FALSE(ClusterModeEnabled(standalone));
  EXPECT_FALSE(CentralReplica(standalone));
  EXPECT_FALSE(LeafReplica(standalone));
  const ServerOptions leaf = Leaf("127.0.0.1:50051");
  EXPECT_TRUE(ClusterModeEnabled(leaf));
  EXPECT_FALSE(CentralReplica(leaf));
  EXPECT_TRUE(LeafReplica(leaf));
  ServerOptions central;
  central.redis_cluster = "127.0.0.1:7000";
  EXPECT_TRUE(ClusterModeEnabled(central));
  EXPECT_TRUE(CentralReplica(central));
  EXPECT_FALSE(LeafReplica(central));
}

// ---- A central replica and a leaf, in process.

constexpr char kPolicies[] = R"(policies:
  - name: payments
    rate_limit: {rate: 100, per: 1s, burst: 10, scope: CLUSTER}
)";

class TreeServerTest : public ::testing::Test {
 protected:
  TreeServerTest() : dir_("tree_server") {}

  // A central replica on the shared in-memory store, seeded with
  // kPolicies; TLS on its listeners with `tls`.
  std::unique_ptr<Server> StartCentral(
      uint32_t max_leaves, const testing::TestCerts* tls = nullptr) {
    std::ofstream(dir_.File("policies.yaml")) << kPolicies;
    ServerOptions options = testing::LoopbackServerOptions();
    if (tls != nullptr) {
      options.tls_cert_file = tls->server_cert();
      options.tls_key_file = tls->server_key();
      options.tls_client_ca_file = tls->ca_cert();
    }
    options.redis = "in-memory:6379";  // a central replica
    options.replica_id = "central";
    options.policies_path = dir_.File("policies.yaml");
    options.max_leaves = max_leaves;
    auto server = std::make_unique<Server>(
        std::move(options),
        testing::DrivenServerDependencies(&clock_, &store_));
    const absl::Status s = server->BuildAndStart();
    EXPECT_TRUE(s.ok()) << s;
    return server;
  }

  // A leaf of `central` over a real loopback connection, with `tls` as
  // its upstream TLS.
  std::unique_ptr<Server> StartLeaf(const Server& central,
                                    wire::ClientTlsFiles tls = {}) {
    return StartLeaf(central.target(), std::move(tls));
  }
  std::unique_ptr<Server> StartLeaf(const std::string& upstream,
                                    wire::ClientTlsFiles tls = {}) {
    ServerOptions options = testing::LoopbackServerOptions();
    options.upstream = upstream;
    options.upstream_tls = std::move(tls);
    options.replica_id = "leaf";
    // Real time on the wire: a generous deadline for a loaded machine.
    options.upstream_timeout = absl::Seconds(2);
    options.sync_interval = absl::Seconds(2);
    auto server = std::make_unique<Server>(
        std::move(options), testing::DrivenServerDependencies(&clock_));
    const absl::Status s = server->BuildAndStart();
    EXPECT_TRUE(s.ok()) << s;
    return server;
  }

  static v1::DependencyState State(Server& server, const std::string& dep) {
    auto admin = v1::AdminService::NewStub(server.AdminInProcessChannel());
    v1::GetStateRequest request;
    request.set_dependency(dep);
    v1::DependencyState state;
    grpc::ClientContext context;
    const grpc::Status s = admin->GetState(&context, request, &state);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return state;
  }

  testing::TempDir dir_;
  testing::FakeClock clock_;
  testing::FakeStore store_{&clock_};
};

TEST_F(TreeServerTest, ALeafLeasesFromItsCentralReplicaAndRefusesAdminWrites) {
  std::unique_ptr<Server> central = StartCentral(/*max_leaves=*/16);
  ASSERT_TRUE(central->SyncNow().ok());
  std::unique_ptr<Server> leaf = StartLeaf(*central);
  // The leaf learns the policy from upstream (it has no file), then the
  // central replica counts it.
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Milliseconds(500));
    ASSERT_TRUE(central->SyncNow().ok());
    const absl::Status s = leaf->SyncNow();
    ASSERT_TRUE(s.ok()) << s;
  }

  const v1::DependencyState on_leaf = State(*leaf, "payments");
  EXPECT_EQ(on_leaf.store_status(), "up");
  EXPECT_THAT(on_leaf.grant_source(),
              StartsWith(absl::StrCat("upstream ", central->target(), " (peer ")));
  EXPECT_EQ(on_leaf.leaves(), 0u);
  const v1::DependencyState on_central = State(*central, "payments");
  EXPECT_EQ(on_central.grant_source(), "fake store");
  EXPECT_EQ(on_central.leaves(), 1u);

  // An admin write on the leaf is refused, naming where to make it.
  auto admin = v1::AdminService::NewStub(leaf->AdminInProcessChannel());
  v1::PutPolicyRequest put;
  put.mutable_policy()->set_name("search");
  v1::PutPolicyResponse response;
  grpc::ClientContext context;
  const grpc::Status refused = admin->PutPolicy(&context, put, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(), HasSubstr(central->target()));
}

// A central replica with --tls-cert and --tls-client-ca serves its leaves
// over mutual TLS on its data port; a leaf without a client certificate
// is refused in the handshake.
TEST_F(TreeServerTest, LeasesOverMutualTls) {
  testing::TempDir certs_dir("tree_server_tls");
  testing::TestCerts certs(certs_dir.path());
  ASSERT_TRUE(certs.ok()) << certs.error();
  std::unique_ptr<Server> central = StartCentral(16, &certs);
  ASSERT_TRUE(central->SyncNow().ok());

  wire::ClientTlsFiles tls;
  tls.ca_file = certs.ca_cert();
  tls.cert_file = certs.client_cert();
  tls.key_file = certs.client_key();
  tls.server_name = "localhost";
  std::unique_ptr<Server> leaf = StartLeaf(*central, tls);
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Milliseconds(500));
    ASSERT_TRUE(central->SyncNow().ok());
    const absl::Status s = leaf->SyncNow();
    ASSERT_TRUE(s.ok()) << s;
  }
  EXPECT_EQ(State(*leaf, "payments").store_status(), "up");
  EXPECT_EQ(State(*central, "payments").leaves(), 1u);

  wire::ClientTlsFiles no_cert;
  no_cert.ca_file = certs.ca_cert();
  no_cert.server_name = "localhost";
  std::unique_ptr<Server> stranger = StartLeaf(*central, no_cert);
  EXPECT_FALSE(stranger->SyncNow().ok());
  EXPECT_EQ(State(*central, "payments").leaves(), 1u);
}

// The messages captured at `level` that start with `prefix`.
std::vector<std::string> LinesStartingWith(testing::CapturedLog& log,
                                           spdlog::level::level_enum level,
                                           const std::string& prefix) {
  std::vector<std::string> found;
  for (const auto& [at, line] : log.lines()) {
    if (at == level && absl::StartsWith(line, prefix)) found.push_back(line);
  }
  return found;
}

TEST_F(TreeServerTest, MaxLeavesZeroServesNoLeaves) {
  testing::CapturedLog log;
  std::unique_ptr<Server> central = StartCentral(/*max_leaves=*/0);
  ASSERT_TRUE(central->SyncNow().ok());
  std::unique_ptr<Server> leaf = StartLeaf(*central);
  const absl::Status s = leaf->SyncNow();
  EXPECT_FALSE(s.ok());
  // The central replica's lease service refuses every leaf, naming the flag.
  EXPECT_THAT(s.ToString(), HasSubstr("UNIMPLEMENTED"));
  EXPECT_THAT(s.message(),
              HasSubstr("this replica serves no leaves (--max-leaves 0)"));
  EXPECT_EQ(State(*central, "payments").leaves(), 0u);
  // The leaf's log shows that refusal once, with its code once.
  EXPECT_THAT(
      LinesStartingWith(log, spdlog::level::warn, "first cluster sync failed"),
      ElementsAre(
          absl::StrCat("first cluster sync failed (UNIMPLEMENTED: upstream ",
                       central->target(),
                       ": this replica serves no leaves (--max-leaves "
                       "0); point --upstream at a central replica started with "
                       "--max-leaves above 0); serving from local state")));
}

// A leaf pointed at another leaf is told that one serves no leaves.
TEST_F(TreeServerTest, ALeafServesNoLeaves) {
  std::unique_ptr<Server> central = StartCentral(/*max_leaves=*/16);
  ASSERT_TRUE(central->SyncNow().ok());
  std::unique_ptr<Server> leaf = StartLeaf(*central);
  ASSERT_TRUE(leaf->SyncNow().ok());
  std::unique_ptr<Server> below = StartLeaf(*leaf);
  const absl::Status s = below->SyncNow();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(
                               "UNIMPLEMENTED: upstream ", leaf->target(),
                               ": this replica is a leaf (--upstream ",
                               central->target(), ") and serves no leaves")));
  EXPECT_EQ(State(*central, "payments").leaves(), 1u);
}

// A leaf whose upstream is unreachable at start logs the failure with the
// code the call ended with, once: "UNAVAILABLE: upstream ...", never
// "UNAVAILABLE: UNAVAILABLE: upstream ...".
TEST_F(TreeServerTest, AnUnreachableUpstreamIsLoggedWithItsCodeOnce) {
  testing::CapturedLog log;
  // Nothing listens there: the connection is refused.
  const std::string upstream = absl::StrCat("127.0.0.1:", testing::FreePort());
  std::unique_ptr<Server> leaf = StartLeaf(upstream);
  const std::vector<std::string> failed =
      LinesStartingWith(log, spdlog::level::warn, "first cluster sync failed");
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_THAT(failed[0],
              StartsWith(absl::StrCat("first cluster sync failed (UNAVAILABLE: "
                                      "upstream ",
                                      upstream, ": ")));
  for (const auto& [level, line] : log.lines()) {
    EXPECT_THAT(line, Not(HasSubstr("UNAVAILABLE: UNAVAILABLE"))) << line;
  }
  // The sync loop's outage line names the upstream once, with the code.
  std::vector<std::string> unreachable;
  for (const auto& [level, line] : log.lines()) {
    if (level == spdlog::level::err &&
        absl::StrContains(line, "is unreachable")) {
      unreachable.push_back(line);
    }
  }
  ASSERT_EQ(unreachable.size(), 1u);
  EXPECT_THAT(unreachable[0],
              StartsWith(absl::StrCat("cluster store upstream ", upstream,
                                      " is unreachable (UNAVAILABLE: ")));
  // (gRPC's own cause may quote the address it dialled, "ipv4:...": that is
  // the connection's word, not the line naming the store a second time.)
  const std::string store = absl::StrCat("upstream ", upstream);
  size_t named = 0;
  for (size_t at = unreachable[0].find(store); at != std::string::npos;
       at = unreachable[0].find(store, at + 1)) {
    ++named;
  }
  EXPECT_EQ(named, 1u) << unreachable[0];
}

}  // namespace
}  // namespace sluice::app
