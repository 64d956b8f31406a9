// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_TREE_UPSTREAM_STORE_H_
#define SLUICE_SERVER_TREE_UPSTREAM_STORE_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/cluster/store.h"
#include "wire/tls.h"

namespace sluice::tree {

// What UpstreamStore shows the metrics (cumulative since it was made).
struct UpstreamStats {
  // The last tick got an answer from a central replica.
  bool up = false;
  // Times the answering central replica changed (not counting the first).
  uint64_t moves = 0;
  // Ticks that failed, whatever the reason.
  uint64_t failures = 0;
  // Round trip of the last tick that got an answer (0 before the first).
  absl::Duration last_round_trip = absl::ZeroDuration();
  // The central replica that answered last ("" before the first answer).
  std::string peer;
};

// The cluster store of a leaf (sluiced --upstream TARGET): each Tick is one
// unary call sluice.v1.Lease/Tick to a central replica, which answers from
// its own grants (LeaseServiceImpl, cluster::LeafServer). The leaf never
// writes the shared config: PutPolicy, DeletePolicy and SetOverride are
// FAILED_PRECONDITION naming the upstream.
//
// One gRPC channel, pick_first: for a target naming several central
// replicas (dns:///NAME:PORT, ipv4:A:P,B:P) the channel keeps to one and
// moves to the next when its connection breaks or stops answering
// keepalive pings. Every call has a deadline (`timeout`), so a central
// replica that hangs costs one tick, never a stuck sync loop. Tick is called
// from one thread (the sync loop's); everything else is safe from any thread.
class UpstreamStore final : public cluster::Store {
 public:
  struct Options {
    // gRPC target of the central replicas: HOST:PORT, unix:PATH,
    // dns:///NAME:PORT (every address the name resolves to) or
    // ipv4:HOST:PORT,HOST:PORT.
    std::string target;
    // TLS to the central replicas, as the SDK and sluicectl take it; all
    // empty: plaintext.
    wire::ClientTlsFiles tls;
    // How errors about `tls` name its settings.
    wire::ClientTlsNames tls_names = {
        "--upstream-tls-ca", "--upstream-tls-cert", "--upstream-tls-key",
        "--upstream-tls-server-name"};
    // Deadline of one tick's call. The sync loop's tick must not hang: keep
    // it at most the tick interval.
    absl::Duration timeout = absl::Seconds(1);
    // Keepalive ping interval on an open connection, and how long a ping
    // may go unanswered before the connection counts as broken and the
    // channel moves to another address. The ticks themselves cannot do
    // this: a tick that misses its deadline leaves a connection that is
    // open but silent (a paused or cut-off central replica) in place, and
    // gRPC moves only off a broken one. Pings go while idle too: with
    // GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS off they would have to come
    // every half tick deadline (125 ms at the default 250 ms) to fall
    // inside a tick that hangs, and the keepalive timer firing that often
    // cost an idle leaf as much as the pings it saves. Measured
    // (tests/tree/lease_move_test, 1 s deadline, 200 ms retries): a leaf
    // moves 1.95 s after its central replica stops answering (the same as
    // with 500 ms, which gRPC 1.51 paced at up to two pings a second) and
    // within 45 ms after it closes; 1.5 s moved after 2.45 s, too close to
    // the 3 s grace period of a 1 s tick. On an idle leaf with 100
    // policies, 1 s instead of 500 ms halved gRPC's timer-thread wake-ups
    // (about 460 to 300 in 26 s).
    absl::Duration keepalive_time = absl::Seconds(1);
    absl::Duration keepalive_timeout = absl::Milliseconds(500);
    // Reconnect backoff after a failed connect: from min up to max. gRPC
    // also gives each connect attempt (TCP and TLS handshakes) at least the
    // minimum, so it bounds what an address that accepts TCP but never
    // answers costs a move (100 ms here moved in 1.3-1.8 s instead), and
    // must leave room for a TLS handshake.
    absl::Duration min_reconnect_backoff = absl::Milliseconds(250);
    absl::Duration max_reconnect_backoff = absl::Seconds(1);
    // Use this channel instead of making one from target and tls (tests).
    std::shared_ptr<grpc::Channel> channel;
  };

  // INVALID_ARGUMENT for an empty target or unusable TLS files (naming the
  // flag).
  static absl::StatusOr<std::unique_ptr<UpstreamStore>> Create(Options options);

  ~UpstreamStore() override;

  absl::StatusOr<cluster::TickReply> Tick(
      const cluster::TickRequest& request) override;
  absl::StatusOr<cluster::ConfigWrite> PutPolicy(
      const cluster::StoredPolicy& policy, uint64_t expected_version) override;
  absl::StatusOr<cluster::ConfigWrite> DeletePolicy(
      const std::string& name, uint64_t expected_version) override;
  absl::StatusOr<cluster::ConfigWrite> SetOverride(
      const cluster::StoredOverride& override) override;
  // "upstream <target>".
  std::string Describe() const override;
  // endpoint: the central replica answering now (the target before the
  // first answer); errors by kind ("unavailable", "timeout", "refused",
  // "protocol", ...); events: "moved".
  cluster::StoreStatus status() const override;

  UpstreamStats stats() const;
  // status(), and stats() as the metrics of a leaf's upstream
  // (sluice_upstream_*).
  void WriteStats(base::StatsWriter& out) const override;

 private:
  UpstreamStore(Options options, std::shared_ptr<grpc::Channel> channel);

  // FAILED_PRECONDITION's message for an admin write.
  std::string AdminRefusal() const;
  // Counts a failed tick under `kind`.
  void Failed(const std::string& kind) ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  const std::shared_ptr<grpc::Channel> channel_;
  // The first block of each tick's protobuf arena (Tick runs on the sync
  // loop's thread only): the request and reply messages of an ordinary tick
  // fit in it, so a tick allocates and frees them as one.
  static constexpr size_t kArenaBlockBytes = 256 * 1024;
  const std::unique_ptr<char[]> arena_block_;
  // Raw bytes both ways, so the reply's size and counts are checked before
  // protobuf builds it (kLeaseTickBudget), as the central replica does.
  grpc::GenericStub stub_;

  mutable absl::Mutex mu_;
  UpstreamStats stats_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> errors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::tree

#endif  // SLUICE_SERVER_TREE_UPSTREAM_STORE_H_
