// SPDX-License-Identifier: Apache-2.0
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
//   negative amount or duration; and, which the leaf relies on, breaker
//   records of policies left out only under a breakers epoch, one per
//   policy, none for a policy the leaf pushed;
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

// An error a caller turns into a gRPC status (LeaseServiceImpl) or a log
// line (UpstreamStore).
void CheckError(const absl::Status& s) {
  Check(s.code() == absl::StatusCode::kInvalidArgument ||
            s.code() == absl::StatusCode::kResourceExhausted,
        "an error that is neither INVALID_ARGUMENT nor RESOURCE_EXHAUSTED");
  Check(!s.message().empty(), "an error without a message");
  Check(sluice::wire::ToValidUtf8(s.message()) == s.message(),
        "an error message that is not UTF-8");
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
  Check(r.breakers.empty() || r.breakers_epoch != 0,
        "breaker records without a breakers epoch");
  Check(r.breakers.size() <= tree::kMaxLeaseBreakers,
        "too many breaker records");
  absl::flat_hash_set<std::string> policies;
  for (const cluster::PolicyBreaker& b : r.breakers) {
    CheckName(b.policy);
    Check(policies.insert(b.policy).second, "two records for one policy");
    Check(NonNegative(b.record.open_duration), "a negative open_duration");
  }
}

// One lease message read as its receiver reads it: the raw bytes checked
// against `budget` and parsed, then decoded; what decodes is checked by
// `check_bounds` and taken once more through the codec. Returns the decoded
// value, or why the receiver refuses the bytes.
template <typename Proto, typename Value>
absl::StatusOr<Value> Read(absl::string_view bytes,
                           const sluice::rpc::MessageBudget& budget,
                           absl::StatusOr<Value> (*decode)(const Proto&),
                           void (*encode)(const Value&, Proto*),
                           void (*check_bounds)(const Value&)) {
  Proto proto;
  if (absl::Status s = sluice::rpc::ParseBounded(bytes, budget, &proto);
      !s.ok()) {
    CheckError(s);
    return s;
  }
  absl::StatusOr<Value> value = decode(proto);
  if (!value.ok()) {
    CheckError(value.status());
    Check(value.status().code() == absl::StatusCode::kInvalidArgument,
          "decoding failed other than INVALID_ARGUMENT");
    return value;
  }
  check_bounds(*value);

  Proto once;
  encode(*value, &once);
  std::string wire;
  Check(once.SerializeToString(&wire), "what decoded does not serialize");
  absl::StatusOr<Value> again = decode(once);
  Check(again.ok(), "what decoded does not decode once encoded");
  Proto twice;
  encode(*again, &twice);
  Check(google::protobuf::util::MessageDifferencer::Equals(once, twice),
        "the codec's second pass changed the message");
  return value;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  // As a central replica reads a leaf's tick (LeaseServiceImpl)...
  const absl::StatusOr<cluster::TickRequest> request =
      Read(bytes, tree::kLeaseTickBudget, tree::DecodeTickRequest,
           tree::EncodeTickRequest, CheckRequestBounds);
  // ... and as a leaf reads the answer (UpstreamStore).
  const absl::StatusOr<cluster::TickReply> reply =
      Read(bytes, tree::kLeaseReplyBudget, tree::DecodeTickReply,
           tree::EncodeTickReply, CheckReplyBounds);
  if (request.ok() && reply.ok()) {
    // The same bytes as both: the leaf's check of its answer.
    const absl::Status answers = tree::CheckReplyAnswers(*request, *reply);
    // A leave may be answered with no policies at all (the ledger answers
    // a leave so); any other answer names every policy pushed.
    const bool empty_leave = request->leaving && reply->policies.empty();
    if (answers.ok()) {
      Check(empty_leave || reply->policies.size() == request->policies.size(),
            "CheckReplyAnswers took a reply for other policies");
      for (size_t i = 0; i < reply->policies.size(); ++i) {
        Check(reply->policies[i].grants.size() ==
                  request->policies[i].keys.size(),
              "CheckReplyAnswers took a reply for other keys");
      }
      if (!empty_leave) {
        absl::flat_hash_set<std::string> pushed;
        for (const cluster::PolicyPush& p : request->policies) {
          pushed.insert(p.policy);
        }
        for (const cluster::PolicyBreaker& b : reply->breakers) {
          Check(!pushed.contains(b.policy),
                "CheckReplyAnswers took a record for a pushed policy");
        }
      }
    } else {
      CheckError(answers);
    }
  }
  return 0;
}
