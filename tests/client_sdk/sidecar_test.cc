// SPDX-License-Identifier: Apache-2.0
// The SDK's sidecar preset against a Sluice on a Unix socket that is not
// there yet, then starts, then restarts: the gateway side of a pod whose
// sidecar starts late or crashes. Real time (gRPC's reconnect backoff is
// real), so this binary carries the `integration` label.
#include <grpcpp/grpcpp.h>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "server/rpc/decision_service.h"
#include "sluice/client/client.h"
#include "sluice/client/options.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"

namespace sluice::client {
namespace {

// DecisionService on a Unix socket, deciding from an engine with no
// policies (every dependency is unknown and allowed, with a permit id).
class SocketSluice {
 public:
  explicit SocketSluice(const std::string& path)
      : engine_(core::RealClock::Get(), core::Engine::Options()),
        service_(&engine_) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("unix:" + path, grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    EXPECT_NE(server_, nullptr) << path;
  }
  ~SocketSluice() {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  }

 private:
  core::Engine engine_;
  rpc::DecisionServiceImpl service_;
  std::unique_ptr<grpc::Server> server_;
};

class SidecarClientTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()); }

  // Asks until an Acquire is answered by Sluice rather than by the client;
  // how long that took, or nullopt after `timeout`.
  std::optional<absl::Duration> UntilSluiceDecides(Client& client,
                                                   absl::Duration timeout) {
    return testing::WaitFor(
        [&] { return !client.Acquire("inventory").decided_locally(); },
        timeout, absl::Milliseconds(10));
  }

  testing::TempDir dir_{"sluice_sidecar_client"};
  const std::string socket_ = dir_.File("sluice.sock");
};

TEST(SidecarClientOptionsTest, ThePresetIsWhatItsCommentSays) {
  const ClientOptions options = SidecarClientOptions();
  EXPECT_EQ(options.target, "unix:/run/sluice/sluice.sock");
  EXPECT_EQ(options.load_balancing_policy, "pick_first");
  EXPECT_EQ(options.acquire_timeout, absl::Milliseconds(5));
  EXPECT_EQ(options.on_failure, FailureMode::kFailOpen);
  EXPECT_EQ(options.backoff_max, absl::Seconds(1));
  EXPECT_TRUE(options.lease.enabled);
  EXPECT_EQ(SidecarClientOptions("/tmp/s.sock").target, "unix:/tmp/s.sock");
}

// The gateway starts before its sidecar: it fails open at once, and decides
// through the sidecar within about a second of the sidecar serving.
TEST_F(SidecarClientTest, FailsOpenUntilTheSidecarServesThenUsesIt) {
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Create(SidecarClientOptions(socket_));
  ASSERT_TRUE(client.ok()) << client.status();
  for (int i = 0; i < 20; ++i) {
    const absl::Time start = absl::Now();
    Permit permit = (*client)->Acquire("inventory");
    EXPECT_LE(absl::Now() - start, absl::Milliseconds(5) + absl::Milliseconds(20))
        << "call " << i;
    EXPECT_TRUE(permit.allowed()) << "call " << i;
    EXPECT_TRUE(permit.decided_locally()) << "call " << i;
    EXPECT_EQ(permit.reason(), Reason::kSluiceUnavailable);
  }
  // Long enough for gRPC's reconnect backoff to have grown, were it not
  // capped at a second by the preset (its default grows to 2 minutes).
  absl::SleepFor(absl::Seconds(6));
  SocketSluice sidecar(socket_);
  const std::optional<absl::Duration> took =
      UntilSluiceDecides(**client, absl::Seconds(10));
  ASSERT_TRUE(took.has_value()) << "the client never reached the sidecar";
  std::printf("sidecar serving -> first decision by Sluice: %.0f ms\n",
              absl::ToDoubleMilliseconds(*took));
  // gRPC's reconnect backoff: at most 1 s plus its 20% jitter; the
  // connection's return ends the client's own backoff at once. Plus slack.
  EXPECT_LE(*took, absl::Milliseconds(1700));
}

// The sidecar crashes and comes back on the same socket: the gateway fails
// open meanwhile and returns to the sidecar once it is back.
TEST_F(SidecarClientTest, RidesOutASidecarRestart) {
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Create(SidecarClientOptions(socket_));
  ASSERT_TRUE(client.ok()) << client.status();
  {
    SocketSluice sidecar(socket_);
    ASSERT_TRUE(UntilSluiceDecides(**client, absl::Seconds(10)).has_value());
  }
  // Down: every Acquire is allowed by the client itself.
  ASSERT_TRUE(testing::WaitFor(
                  [&] {
                    Permit permit = (*client)->Acquire("inventory");
                    return permit.allowed() && permit.decided_locally();
                  },
                  absl::Seconds(5), absl::Milliseconds(10))
                  .has_value());
  // Down for a few seconds, as a container restart is: both backoffs grow
  // to their caps.
  absl::SleepFor(absl::Seconds(3));
  std::remove(socket_.c_str());
  SocketSluice restarted(socket_);
  const std::optional<absl::Duration> took =
      UntilSluiceDecides(**client, absl::Seconds(10));
  ASSERT_TRUE(took.has_value()) << "the client never returned to the sidecar";
  std::printf("sidecar restarted -> first decision by Sluice: %.0f ms\n",
              absl::ToDoubleMilliseconds(*took));
  EXPECT_LE(*took, absl::Milliseconds(1700));
}

}  // namespace
}  // namespace sluice::client
