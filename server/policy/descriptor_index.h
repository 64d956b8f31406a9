// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_POLICY_DESCRIPTOR_INDEX_H_
#define SLUICE_SERVER_POLICY_DESCRIPTOR_INDEX_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/core/policy_config.h"

namespace sluice::policy {

// One entry of a descriptor of Envoy's rate-limit protocol, as received.
struct DescriptorEntry {
  absl::string_view key;
  absl::string_view value;
};

// Which policy answers a descriptor of Envoy's rate-limit protocol, and under
// which per-key partition: one trie per domain built from the policies'
// envoy_descriptors. A descriptor matches when its entries follow one path
// of the trie to its end, entry for entry; at each step an entry with the
// exact key and value wins over an any-value entry of the same key, as in
// Envoy's own rate-limit service. Immutable once built; safe to share.
class DescriptorIndex {
 public:
  struct Match {
    // Null when no policy answers the descriptor.
    const core::PolicyConfig* policy = nullptr;
    // The per-key partition: the value an any-value entry matched; with
    // several, their values joined by "|", each with "\\" and "|" escaped
    // by a backslash; "" when there are none.
    std::string key;
  };

  // `policies` sorted by name, as Engine::Policies() returns them. Two
  // policies claiming the same descriptor are refused by the policy store;
  // should a set adopted from the cluster store still hold such a pair, the
  // first by name answers and conflicts() names the descriptor.
  // `generation`: the engine's policies_generation() the set was read at.
  DescriptorIndex(
      std::vector<std::shared_ptr<const core::PolicyConfig>> policies,
      uint64_t generation = 0);

  Match Find(absl::string_view domain,
             absl::Span<const DescriptorEntry> entries) const;

  const std::vector<std::string>& conflicts() const { return conflicts_; }
  uint64_t generation() const { return generation_; }
  bool empty() const { return domains_.empty(); }

 private:
  struct Node {
    // By ExactKey(key, value).
    absl::flat_hash_map<std::string, std::unique_ptr<Node>> exact;
    // By key: entries that match any value.
    absl::flat_hash_map<std::string, std::unique_ptr<Node>> any;
    const core::PolicyConfig* policy = nullptr;
  };

  static std::string ExactKey(absl::string_view key, absl::string_view value);

  // Keeps every policy the trie points at alive.
  std::vector<std::shared_ptr<const core::PolicyConfig>> policies_;
  absl::flat_hash_map<std::string, std::unique_ptr<Node>> domains_;
  std::vector<std::string> conflicts_;
  uint64_t generation_;
};

}  // namespace sluice::policy

#endif  // SLUICE_SERVER_POLICY_DESCRIPTOR_INDEX_H_
