// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_CLIENT_OPTIONS_H_
#define SLUICE_CLIENT_OPTIONS_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace grpc {
class Channel;
class ChannelCredentials;
}  // namespace grpc

namespace sluice::client {

// What Acquire answers when Sluice cannot decide: unreachable, slower than
// acquire_timeout, or failing with an error.
enum class FailureMode {
  // ALLOW with reason kSluiceUnavailable: an outage of Sluice must not become
  // an outage of the gateway.
  kFailOpen,
  // REJECT with reason kSluiceUnavailable and http_status 503.
  kFailClosed,
};

// TLS to sluiced (started with --tls-cert; docs/tls.md). All files empty:
// plaintext. The files are read once, when the Client is created: after a
// client certificate is rotated, create a new Client (or restart).
struct TlsOptions {
  // PEM CA bundle that signed sluiced's certificate; "" with cert_file: the
  // system's CAs.
  std::string ca_file;
  // Client certificate chain and its key, for a sluiced with
  // --tls-client-ca (mutual TLS); both or neither.
  std::string cert_file;
  std::string key_file;
  // The name sluiced's certificate must carry when it is not the target's
  // host (e.g. target "10.0.0.7:50051", certificate for "sluice.prod.svc").
  std::string server_name;
};

// Leases: the client decides a busy dependency in its own process, from
// tokens and in-flight slots its sluiced lends it, instead of asking for
// each call (docs/leases.md). Only a dependency whose gates allow it is
// leased (a token bucket and/or an in-flight cap, a CLOSED breaker; a
// cluster-scope one while its sluiced holds a grant of it; a per_key one
// key by key, for its hot keys); the others keep asking. Limits hold across
// every caller: what a lease holds is lent out of the dependency's (or the
// key's) own gates.
struct LeaseOptions {
  // Off by default; on in SidecarClientOptions.
  bool enabled = false;
  // How often a leased dependency is renewed: the lease's settlement goes
  // up and the breaker's state comes back, so a trip elsewhere reaches
  // this client within one tick. The client asks sooner when a leased
  // call fails or its lease runs short.
  absl::Duration tick = absl::Milliseconds(250);
  // A dependency (or a key) with at least this many Acquires within one
  // tick is leased; a leased one with fewer than a quarter of them in a
  // tick is given back and asked per call again.
  uint32_t hot_calls = 16;
  // Most lease lines at once: dependencies, and hot keys of per_key ones.
  size_t max_leased = 256;
};

// Everything a Client needs. Every field has a working default except
// `target` (or `channel`).
struct ClientOptions {
  // --- Where Sluice is -----------------------------------------------------

  // gRPC target of DecisionService, e.g. "127.0.0.1:50051", "dns:///sluice:50051"
  // or "ipv4:127.0.0.1:50051,127.0.0.1:50061" for several replicas.
  std::string target;
  // Use this channel instead of creating one from `target` (tests use an
  // in-process channel). Channel settings below are then ignored.
  std::shared_ptr<grpc::Channel> channel;
  // TLS from files (see TlsOptions); empty means plaintext.
  TlsOptions tls;
  // Credentials built by the caller instead of `tls` (not both). Null and
  // no `tls` means insecure (plaintext) credentials.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // gRPC load-balancing policy. The default, "pick_first", keeps one
  // connection to one Sluice replica, so every report reaches the replica
  // that issued the permit and settles at once; gateways spread over the
  // replicas by their own number (an L4 Kubernetes Service does that per
  // connection). "round_robin" spreads calls per request: in cluster mode a
  // report that reaches another replica is passed on to the issuer through
  // Redis, which takes up to two sync ticks (docs/cluster.md).
  std::string load_balancing_policy = "pick_first";
  // Extra integer channel arguments, e.g. {"grpc.keepalive_time_ms", 10000}.
  std::vector<std::pair<std::string, int>> channel_int_args;
  // Sent as AcquireRequest.caller, for Sluice's logs ("" = none).
  std::string caller;

  // --- Acquire -------------------------------------------------------------

  // Send Acquires and reports on one long-lived DecisionService.Decide
  // stream per Client instead of one RPC each: calls from many threads that
  // come together share a message, which saves a busy gateway most of the
  // per-RPC cost. Timeouts, fail-open and backoff are the same as without
  // it. Against a server without Decide the client logs once and uses the
  // unary calls for good.
  bool use_stream = false;

  // How long Acquire waits for Sluice. After that it decides by on_failure.
  // AcquireAsync uses it as the RPC deadline.
  // A Sluice answer normally takes well under a millisecond on a LAN.
  absl::Duration acquire_timeout = absl::Milliseconds(20);
  // What Acquire answers when Sluice cannot decide (see FailureMode).
  FailureMode on_failure = FailureMode::kFailOpen;
  // call_timeout of an ALLOW the SDK decided itself (Sluice unreachable).
  absl::Duration local_call_timeout = absl::Seconds(1);

  // Decide busy dependencies in-process from leases (see LeaseOptions).
  // While Sluice is slow or unreachable a leased dependency keeps its
  // limit until its lease ends (at most 4 s after the last renewal):
  // calls its lease cannot cover are refused (RATE_LIMITED), not decided
  // by on_failure. After that, on_failure applies as without leases.
  LeaseOptions lease;

  // --- Local backoff while Sluice is unreachable ---------------------------

  // After this many Acquires in a row fail for transport reasons (unavailable
  // or too slow), the client stops asking Sluice for a while and decides
  // locally by on_failure, so a dead Sluice costs nothing per call.
  int backoff_after_failures = 3;
  // First backoff; doubles after each failed retry up to backoff_max.
  absl::Duration backoff_initial = absl::Milliseconds(250);
  absl::Duration backoff_max = absl::Seconds(5);
  // Each backoff is scaled by a random factor in [1 - jitter, 1 + jitter].
  double backoff_jitter = 0.2;

  // --- Reports -------------------------------------------------------------

  // Deadline of one ReportResult RPC. An Acquire the caller stopped waiting
  // for also stays open this much longer, so that a late ALLOW can be handed
  // back (reported CANCELLED) instead of holding a slot until it expires.
  absl::Duration report_timeout = absl::Seconds(1);
  // Reports in flight at once. Beyond that they wait in a queue.
  int max_reports_in_flight = 512;
  // Reports waiting for a free in-flight slot. When the queue is full, the
  // newest report is dropped and counted in Stats::reports_dropped; Sluice
  // then expires that permit after 2 x call_timeout as a TIMEOUT.
  size_t max_queued_reports = 100000;
  // How long the Client's destructor waits for queued and in-flight reports.
  absl::Duration shutdown_timeout = absl::Milliseconds(500);

  // --- Response cache for CACHE fallbacks (Call only) ----------------------

  // The last good response per (dependency, key) is kept in an LRU so that a
  // CACHE fallback can serve it. 0 turns the cache off.
  size_t cache_max_entries = 10000;
  // Bound on the cached bodies' total size.
  size_t cache_max_bytes = 64 << 20;
};

// Where the sidecar overlay (deploy/kubernetes/overlays/sidecar) puts
// sluiced's socket: an emptyDir shared by the gateway and sluiced.
inline constexpr char kDefaultSidecarSocket[] = "/run/sluice/sluice.sock";

// ClientOptions for a sluiced sidecar in the same pod, reached over its Unix
// socket. Change any field afterwards; the preset is:
//   target                  "unix:" + socket_path
//   load_balancing_policy   "pick_first" (there is one sluiced)
//   acquire_timeout         5ms: an answer over the socket takes tens of
//                           microseconds, so a slower one means the sidecar is
//                           in trouble, and the gateway must not wait on it
//   on_failure              kFailOpen
//   backoff_initial / max   50ms / 1s
//   channel_int_args        grpc.{initial,min,max}_reconnect_backoff_ms =
//                           100 / 100 / 1000: gRPC reconnects to the socket
//                           at least once a second (its own default grows to
//                           2 minutes, which would keep a gateway that started
//                           before its sidecar deciding locally that long)
//   lease.enabled           true: a busy dependency is decided in the
//                           gateway's process from a lease its sidecar lends,
//                           so the sidecar's CPU is no longer spent per call,
//                           and a frozen or CPU-starved sidecar still holds
//                           the limit for the rest of the lease (at most 4 s)
// While the socket is missing (the gateway started first, or sluiced is
// restarting) every Acquire is ALLOW with reason kSluiceUnavailable, decided
// at once by the client. (Any client whose connection, not just an answer,
// failed asks again as soon as the connection is back, without waiting for
// the end of its backoff period.) So the gateway decides through its
// sidecar again about a second (gRPC's reconnect, with jitter) after the
// sidecar serves.
ClientOptions SidecarClientOptions(
    const std::string& socket_path = kDefaultSidecarSocket);

}  // namespace sluice::client

#endif  // SLUICE_CLIENT_OPTIONS_H_
