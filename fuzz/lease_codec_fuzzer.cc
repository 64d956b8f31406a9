// libFuzzer target of the lease protocol's codec (server/tree/lease_codec.h).
// Each input is read twice, as the two ends of a lease call read it: as a
// leaf's tick by a central replica (LeaseServiceImpl: the raw bytes checked
// against kLeaseTickBudget by rpc::ParseBounded, then DecodeTickRequest) and
// as a central replica's answer by a leaf (UpstreamStore: kLeaseReplyBudget,
// DecodeTickReply, then CheckReplyAnswers against the request). Findings
// besides crashes and sanitizer reports:
// - an error is INVALID_ARGUMENT (or RESOURCE_EXHAUSTED for too many bytes)
//   and its message is valid UTF-8 on one line;
// - what decodes is within the bounds lease_codec.h states, which the
//   ledger relies on: counts, names, no policy or key pushed twice, no
//   negative amount or duration;
// - what decodes encodes to a message that decodes again, and one pass
//   through the codec is its fixed point: encoding that second decode gives
//   the same message (the first pass may normalise, e.g. an unset breaker
//   state to CLOSED, and drops unknown fields).
// Link: sluice_tree.

#include <google/protobuf/util/message_differencer.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/rpc/message_bounds.h"
#include "server/tree/lease_codec.h"
#include "sluice/v1/lease.pb.h"
#include "wire/limits.h"
#include "wire/quote.h"

namespace {

namespace tree = sluice::tree;
namespace cluster = sluice::cluster;
namespace core = sluice::core;

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "lease_codec_fuzzer: %s\n", what);
  std::abort();
}

bool IsValidUtf8(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = sluice::wire::Utf8SequenceLength(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// An error a caller turns into a gRPC status (LeaseServiceImpl) or a log
// line (UpstreamStore).
void CheckError(const absl::Status& s) {
  Check(s.code() == absl::StatusCode::kInvalidArgument ||
            s.code() == absl::StatusCode::kResourceExhausted,
        "an error that is neither INVALID_ARGUMENT nor RESOURCE_EXHAUSTED");
  Check(!s.message().empty(), "an error without a message");
  Check(IsValidUtf8(s.message()), "an error message that is not UTF-8");
  Check(s.message().find('\n') == absl::string_view::npos,
        "an error message of more than one line");
}

void CheckUnits(const core::Units& u) {
  for (int64_t v : u) Check(v >= 0, "negative units");
}

bool NonNegative(absl::Duration d) { return d >= absl::ZeroDuration(); }

void CheckName(const std::string& name) {
  Check(!name.empty() && name.size() <= sluice::wire::kMaxNameBytes,
        "a name out of bounds");
}

void CheckForwarded(const std::vector<core::ForwardedReport>& list) {
  Check(list.size() <= tree::kMaxLeaseForwarded, "too many forwarded reports");
  for (const core::ForwardedReport& f : list) {
    CheckName(f.issuer);
    CheckName(f.dependency);
    Check(f.key.size() <= sluice::wire::kMaxKeyBytes, "a key too long");
    Check(NonNegative(f.latency), "a negative latency");
  }
}

void CheckRequestBounds(const cluster::TickRequest& r) {
  CheckName(r.replica_id);
  Check(r.weight >= 1, "weight below 1");
  Check(r.stale_after > absl::ZeroDuration(), "stale_after not positive");
  Check(NonNegative(r.key_ttl), "a negative key_ttl");
  Check(r.policies.size() <= tree::kMaxLeasePolicies, "too many policies");
  size_t keys = 0;
  absl::flat_hash_set<std::string> policies;
  for (const cluster::PolicyPush& p : r.policies) {
    CheckName(p.policy);
    Check(policies.insert(p.policy).second, "a policy pushed twice");
    Check(p.keys.size() <= tree::kMaxLeaseKeysPerPolicy, "too many keys");
    keys += p.keys.size();
    absl::flat_hash_set<std::string> seen;
    for (const core::KeyTick& k : p.keys) {
      Check(k.key.size() <= sluice::wire::kMaxKeyBytes, "a key too long");
      Check(seen.insert(k.key).second, "a key pushed twice");
      CheckUnits(k.limit);
      CheckUnits(k.usage);
      CheckUnits(k.applied);
      for (double d : k.demand) {
        Check(std::isfinite(d) && d >= 0, "a demand not finite and >= 0");
      }
      for (absl::Duration d : k.usage_left) {
        Check(NonNegative(d), "a negative usage_left");
      }
      Check(NonNegative(k.applied_left), "a negative applied_left");
    }
    Check(NonNegative(p.lease_ttl), "a negative lease_ttl");
  }
  Check(keys <= tree::kMaxLeaseKeys, "too many keys in all");
  Check(r.seed.size() <= tree::kMaxLeaseConfigEntries, "too large a seed");
  CheckForwarded(r.forwarded);
}

void CheckReplyBounds(const cluster::TickReply& r) {
  Check(r.replicas.size() <= tree::kMaxLeaseReplicas, "too many replicas");
  for (const std::string& replica : r.replicas) CheckName(replica);
  Check(r.policies.size() <= tree::kMaxLeasePolicies, "too many policies");
  for (const cluster::PolicyPull& p : r.policies) {
    Check(p.grants.size() <= tree::kMaxLeaseKeysPerPolicy, "too many grants");
    for (const cluster::StoreGrant& g : p.grants) {
      CheckUnits(g.units);
      Check(NonNegative(g.valid_for), "a negative valid_for");
    }
    Check(p.outcomes.size() <= tree::kMaxLeaseReplicas, "too many outcomes");
    Check(p.warm.size() <= tree::kMaxLeaseReplicas, "too many warm entries");
  }
  CheckForwarded(r.forwarded_to_me);
}

template <typename Message>
bool Same(const Message& a, const Message& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

// The request as a central replica reads it, or why it refuses it.
absl::StatusOr<cluster::TickRequest> ReadRequest(absl::string_view bytes) {
  sluice::v1::LeaseTickRequest proto;
  if (absl::Status s =
          sluice::rpc::ParseBounded(bytes, tree::kLeaseTickBudget, &proto);
      !s.ok()) {
    CheckError(s);
    return s;
  }
  absl::StatusOr<cluster::TickRequest> request = tree::DecodeTickRequest(proto);
  if (!request.ok()) {
    CheckError(request.status());
    Check(request.status().code() == absl::StatusCode::kInvalidArgument,
          "DecodeTickRequest failed other than INVALID_ARGUMENT");
    return request;
  }
  CheckRequestBounds(*request);

  sluice::v1::LeaseTickRequest once;
  tree::EncodeTickRequest(*request, &once);
  std::string wire;
  Check(once.SerializeToString(&wire), "a decoded request does not serialize");
  absl::StatusOr<cluster::TickRequest> again = tree::DecodeTickRequest(once);
  Check(again.ok(), "a re-encoded request does not decode");
  sluice::v1::LeaseTickRequest twice;
  tree::EncodeTickRequest(*again, &twice);
  Check(Same(once, twice), "request: the codec's second pass changed it");
  return request;
}

// The reply as a leaf reads it, or why it refuses it.
absl::StatusOr<cluster::TickReply> ReadReply(absl::string_view bytes) {
  sluice::v1::LeaseTickReply proto;
  if (absl::Status s =
          sluice::rpc::ParseBounded(bytes, tree::kLeaseReplyBudget, &proto);
      !s.ok()) {
    CheckError(s);
    return s;
  }
  absl::StatusOr<cluster::TickReply> reply = tree::DecodeTickReply(proto);
  if (!reply.ok()) {
    CheckError(reply.status());
    Check(reply.status().code() == absl::StatusCode::kInvalidArgument,
          "DecodeTickReply failed other than INVALID_ARGUMENT");
    return reply;
  }
  CheckReplyBounds(*reply);

  sluice::v1::LeaseTickReply once;
  tree::EncodeTickReply(*reply, &once);
  std::string wire;
  Check(once.SerializeToString(&wire), "a decoded reply does not serialize");
  absl::StatusOr<cluster::TickReply> again = tree::DecodeTickReply(once);
  Check(again.ok(), "a re-encoded reply does not decode");
  sluice::v1::LeaseTickReply twice;
  tree::EncodeTickReply(*again, &twice);
  Check(Same(once, twice), "reply: the codec's second pass changed it");
  return reply;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<cluster::TickRequest> request = ReadRequest(bytes);
  const absl::StatusOr<cluster::TickReply> reply = ReadReply(bytes);
  if (request.ok() && reply.ok()) {
    // The same bytes as both: the leaf's check of its answer.
    const absl::Status answers = tree::CheckReplyAnswers(*request, *reply);
    if (answers.ok()) {
      Check(reply->policies.size() == request->policies.size(),
            "CheckReplyAnswers took a reply for other policies");
      for (size_t i = 0; i < reply->policies.size(); ++i) {
        Check(reply->policies[i].grants.size() ==
                  request->policies[i].keys.size(),
              "CheckReplyAnswers took a reply for other keys");
      }
    } else {
      CheckError(answers);
    }
  }
  return 0;
}
