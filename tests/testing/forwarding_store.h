// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_FORWARDING_STORE_H_
#define SLUICE_TESTS_TESTING_FORWARDING_STORE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "server/cluster/store.h"

namespace sluice::testing {

// A cluster::Store that passes every call to an inner store the test owns:
// as it is, so that several servers share one store, or as the base of a
// test decorator that overrides only the calls it changes (a path that can
// be cut, a recorder). `inner` must outlive it; thread-safety is the inner
// store's and the decorator's.
class ForwardingStore : public cluster::Store {
 public:
  explicit ForwardingStore(cluster::Store* inner) : inner_(inner) {}

  absl::StatusOr<cluster::TickReply> Tick(
      const cluster::TickRequest& request) override {
    return inner_->Tick(request);
  }
  absl::StatusOr<cluster::ConfigWrite> PutPolicy(
      const cluster::StoredPolicy& policy, uint64_t expected_version) override {
    return inner_->PutPolicy(policy, expected_version);
  }
  absl::StatusOr<cluster::ConfigWrite> DeletePolicy(
      const std::string& name, uint64_t expected_version) override {
    return inner_->DeletePolicy(name, expected_version);
  }
  absl::StatusOr<cluster::ConfigWrite> SetOverride(
      const cluster::StoredOverride& override) override {
    return inner_->SetOverride(override);
  }
  std::string Describe() const override { return inner_->Describe(); }
  cluster::StoreStatus status() const override { return inner_->status(); }

 protected:
  cluster::Store* inner() const { return inner_; }

 private:
  cluster::Store* const inner_;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_FORWARDING_STORE_H_
