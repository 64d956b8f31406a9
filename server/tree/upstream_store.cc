// SPDX-License-Identifier: Apache-2.0
#include "server/tree/upstream_store.h"

#include <google/protobuf/arena.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "server/rpc/message_bounds.h"
#include "server/tree/lease_codec.h"
#include "wire/quote.h"
#include "wire/status.h"

namespace sluice::tree {
namespace {

constexpr char kTickMethod[] = "/sluice.v1.Lease/Tick";
// How much of a central replica's error message a leaf repeats.
constexpr size_t kMaxPeerMessageBytes = 512;

int Ms(absl::Duration d) {
  return static_cast<int>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(d), 1, INT32_MAX));
}

// The kind a failed call is counted under in StoreStatus::errors.
std::string ErrorKind(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kDeadlineExceeded:
      return "timeout";
    case absl::StatusCode::kUnavailable:
      return "unavailable";
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return "auth";
    case absl::StatusCode::kAborted:
      return "aborted";
    case absl::StatusCode::kResourceExhausted:
      return "refused";
    default:
      return absl::AsciiStrToLower(absl::StatusCodeToString(code));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<UpstreamStore>> UpstreamStore::Create(
    Options options) {
  if (options.target.empty()) {
    return absl::InvalidArgumentError(
        "--upstream must name the central replicas (HOST:PORT, unix:PATH or "
        "dns:///NAME:PORT)");
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the upstream timeout must be positive, got ",
                     absl::FormatDuration(options.timeout)));
  }
  std::shared_ptr<grpc::Channel> channel = options.channel;
  if (channel == nullptr) {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        wire::MakeChannelCredentials(options.tls, options.tls_names);
    if (!credentials.ok()) return credentials.status();
    grpc::ChannelArguments args;
    wire::AddTlsChannelArguments(options.tls, &args);
    args.SetMaxReceiveMessageSize(static_cast<int>(kMaxLeaseMessageBytes));
    args.SetMaxSendMessageSize(static_cast<int>(kMaxLeaseMessageBytes));
    // pick_first (gRPC's default): one central replica at a time, the next
    // address when its connection breaks. A replica that stops answering
    // without closing (paused, cut off) is noticed by its keepalive pings.
    args.SetLoadBalancingPolicyName("pick_first");
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, Ms(options.keepalive_time));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Ms(options.keepalive_timeout));
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    // The reconnect backoff, and with it how long one connect attempt may
    // take (gRPC gives an attempt at least the minimum backoff): a replica
    // that accepts TCP but never answers holds a move up for that long.
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
                Ms(options.min_reconnect_backoff));
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                Ms(options.min_reconnect_backoff));
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
                Ms(options.max_reconnect_backoff));
    channel = grpc::CreateCustomChannel(options.target, *credentials, args);
  }
  return std::unique_ptr<UpstreamStore>(
      new UpstreamStore(std::move(options), std::move(channel)));
}

UpstreamStore::UpstreamStore(Options options,
                             std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      arena_block_(new char[kArenaBlockBytes]),
      stub_(channel_) {}

UpstreamStore::~UpstreamStore() = default;

absl::StatusOr<cluster::TickReply> UpstreamStore::Tick(
    const cluster::TickRequest& request) {
  // Both messages live in one arena, freed at once when the tick ends.
  google::protobuf::ArenaOptions arena_options;
  arena_options.initial_block = arena_block_.get();
  arena_options.initial_block_size = kArenaBlockBytes;
  arena_options.max_block_size = kArenaBlockBytes;
  google::protobuf::Arena arena(arena_options);
  v1::LeaseTickRequest& proto =
      *google::protobuf::Arena::CreateMessage<v1::LeaseTickRequest>(&arena);
  EncodeTickRequest(request, &proto);
  // Past the bound the oldest reports go, as from a full inbox.
  uint64_t dropped = 0;
  if (static_cast<size_t>(proto.forwarded_size()) > kMaxLeaseForwarded) {
    dropped = proto.forwarded_size() - kMaxLeaseForwarded;
    proto.mutable_forwarded()->DeleteSubrange(0, static_cast<int>(dropped));
  }
  if (const size_t size = proto.ByteSizeLong(); size > kMaxLeaseRequestBytes) {
    Failed("too_large");
    return absl::ResourceExhaustedError(absl::StrCat(
        "this tick's lease request is ", size,
        " bytes; the lease protocol takes at most ", kMaxLeaseRequestBytes));
  }
  grpc::ByteBuffer request_bytes;
  if (absl::Status s = rpc::SerializeToBuffer(proto, &request_bytes); !s.ok()) {
    Failed("encode");
    return s;
  }

  grpc::ClientContext context;
  const absl::Time start = absl::Now();
  context.set_deadline(absl::ToChronoTime(start + options_.timeout));
  grpc::ByteBuffer reply_bytes;
  grpc::Status call_status;
  absl::Notification done;
  stub_.UnaryCall(&context, kTickMethod, grpc::StubOptions(), &request_bytes,
                  &reply_bytes, [&](grpc::Status s) {
                    call_status = std::move(s);
                    done.Notify();
                  });
  done.WaitForNotification();
  const absl::Duration round_trip = absl::Now() - start;

  if (!call_status.ok()) {
    absl::Status failed = wire::FromGrpcStatus(call_status);
    Failed(ErrorKind(failed.code()));
    std::string message(failed.message().substr(0, kMaxPeerMessageBytes));
    return absl::Status(
        failed.code(),
        absl::StrCat(Describe(), ": ", wire::ToValidUtf8(message)));
  }
  const std::string peer = context.peer();
  absl::StatusOr<cluster::TickReply> reply =
      [&]() -> absl::StatusOr<cluster::TickReply> {
    v1::LeaseTickReply& reply_proto =
        *google::protobuf::Arena::CreateMessage<v1::LeaseTickReply>(&arena);
    SLUICE_RETURN_IF_ERROR(
        rpc::ParseBounded(reply_bytes, kLeaseReplyBudget, &reply_proto));
    SLUICE_ASSIGN_OR_RETURN(cluster::TickReply decoded,
                            DecodeTickReply(reply_proto));
    SLUICE_RETURN_IF_ERROR(CheckReplyAnswers(request, decoded));
    return decoded;
  }();
  if (!reply.ok()) {
    Failed("protocol");
    // A central replica that answers what this leaf cannot read is as good
    // as none; the sync loop retries, and the operator sees the reason.
    return absl::InternalError(absl::StrCat("upstream ",
                                            wire::QuoteUntrusted(peer),
                                            " answered a reply this leaf "
                                            "cannot use: ",
                                            reply.status().message()));
  }
  reply->inbox_dropped += dropped;
  absl::MutexLock lock(&mu_);
  stats_.up = true;
  stats_.last_round_trip = round_trip;
  if (!stats_.peer.empty() && stats_.peer != peer) ++stats_.moves;
  stats_.peer = peer;
  return reply;
}

void UpstreamStore::Failed(const std::string& kind) {
  absl::MutexLock lock(&mu_);
  stats_.up = false;
  ++stats_.failures;
  ++errors_[kind];
}

absl::StatusOr<cluster::ConfigWrite> UpstreamStore::PutPolicy(
    const cluster::StoredPolicy&, uint64_t) {
  return absl::FailedPreconditionError(AdminRefusal());
}

absl::StatusOr<cluster::ConfigWrite> UpstreamStore::DeletePolicy(
    const std::string&, uint64_t) {
  return absl::FailedPreconditionError(AdminRefusal());
}

absl::StatusOr<cluster::ConfigWrite> UpstreamStore::SetOverride(
    const cluster::StoredOverride&) {
  return absl::FailedPreconditionError(AdminRefusal());
}

std::string UpstreamStore::AdminRefusal() const {
  // The target is the central replicas' data port; sluicectl wants their
  // admin listener, which the leaf does not know.
  return absl::StrCat("this sluiced is a leaf of ", options_.target,
                      "; send admin writes to the central replicas "
                      "(sluicectl --target <a central replica's admin "
                      "address> ...)");
}

std::string UpstreamStore::Describe() const {
  return absl::StrCat("upstream ", options_.target);
}

cluster::StoreStatus UpstreamStore::status() const {
  absl::MutexLock lock(&mu_);
  cluster::StoreStatus s;
  s.endpoint = stats_.peer.empty() ? options_.target : stats_.peer;
  s.errors = errors_;
  s.events["moved"] = stats_.moves;
  return s;
}

UpstreamStats UpstreamStore::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void UpstreamStore::WriteStats(base::StatsWriter& out) const {
  Store::WriteStats(out);
  const UpstreamStats s = stats();
  static constexpr base::MetricDef kUpstreamInfo = base::GaugeDef(
      "sluice_upstream_info", {"target", "peer"},
      "Always 1 on a leaf (--upstream): target is the --upstream target, "
      "peer the central replica that answered last (empty before the "
      "first answer). Whether it answers is sluice_store_up. Leaves "
      "only.");
  out.Write(kUpstreamInfo, {options_.target, s.peer}, 1);
  static constexpr base::MetricDef kUpstreamMoves = base::CounterDef(
      "sluice_upstream_moves_total", {},
      "Times a leaf's answering central replica changed (the one it "
      "followed stopped answering, or the target resolved elsewhere). "
      "Leaves only.");
  out.Write(kUpstreamMoves, static_cast<double>(s.moves));
  static constexpr base::MetricDef kUpstreamRoundTripSeconds = base::GaugeDef(
      "sluice_upstream_round_trip_seconds", {},
      "Round trip of a leaf's last answered lease tick (sluice.v1.Lease/"
      "Tick to a central replica), which a central replica answers from "
      "memory. Leaves only.");
  out.Write(kUpstreamRoundTripSeconds,
            absl::ToDoubleSeconds(s.last_round_trip));
}

}  // namespace sluice::tree
