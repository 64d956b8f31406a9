#include "server/cluster/lease_ledger.h"

#include <utility>

#include "absl/status/status.h"

namespace sluice::cluster {

// A first version: the central's ticks pass through unchanged and leaves
// are refused. The pool split replaces it.
class LeaseLedger::Impl {
 public:
  Impl(Store* upstream, core::Clock* clock, Options options)
      : upstream_(upstream), clock_(clock), options_(std::move(options)) {}

  Store* const upstream_;
  core::Clock* const clock_;
  const Options options_;
};

LeaseLedger::LeaseLedger(Store* upstream, core::Clock* clock, Options options)
    : impl_(std::make_unique<Impl>(upstream, clock, std::move(options))) {}

LeaseLedger::~LeaseLedger() = default;

absl::StatusOr<TickReply> LeaseLedger::Tick(const TickRequest& request) {
  return impl_->upstream_->Tick(request);
}

absl::StatusOr<TickReply> LeaseLedger::ServeLeaf(const TickRequest&) {
  return absl::UnavailableError("lease ledger: not serving leaves yet");
}

absl::StatusOr<ConfigWrite> LeaseLedger::PutPolicy(const StoredPolicy& policy,
                                                   uint64_t expected_version) {
  return impl_->upstream_->PutPolicy(policy, expected_version);
}

absl::StatusOr<ConfigWrite> LeaseLedger::DeletePolicy(
    const std::string& name, uint64_t expected_version) {
  return impl_->upstream_->DeletePolicy(name, expected_version);
}

absl::StatusOr<ConfigWrite> LeaseLedger::SetOverride(
    const StoredOverride& override) {
  return impl_->upstream_->SetOverride(override);
}

std::string LeaseLedger::Describe() const {
  return impl_->upstream_->Describe();
}

StoreStatus LeaseLedger::status() const { return impl_->upstream_->status(); }

LedgerStats LeaseLedger::stats() const { return {}; }

}  // namespace sluice::cluster
