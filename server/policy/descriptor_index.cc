// SPDX-License-Identifier: Apache-2.0
#include "server/policy/descriptor_index.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "wire/limits.h"
#include "wire/quote.h"

namespace sluice::policy {
namespace {

std::string Quote(absl::string_view s) {
  return wire::QuoteUntrusted(s, wire::kMaxKeyBytes);
}

// Appends `value` with "\\" and "|" escaped by a backslash.
void AppendEscaped(absl::string_view value, std::string* out) {
  for (char c : value) {
    if (c == '\\' || c == '|') out->push_back('\\');
    out->push_back(c);
  }
}

}  // namespace

std::string DescriptorIndex::ExactKey(absl::string_view key,
                                      absl::string_view value) {
  return absl::StrCat(key.size(), ":", key, value);
}

DescriptorIndex::DescriptorIndex(
    std::vector<std::shared_ptr<const core::PolicyConfig>> policies,
    uint64_t generation)
    : policies_(std::move(policies)), generation_(generation) {
  for (const std::shared_ptr<const core::PolicyConfig>& policy : policies_) {
    for (const core::EnvoyDescriptorConfig& d : policy->envoy_descriptors) {
      std::unique_ptr<Node>& root = domains_[d.domain];
      if (root == nullptr) root = std::make_unique<Node>();
      Node* node = root.get();
      for (const core::EnvoyDescriptorConfig::Entry& e : d.entries) {
        std::unique_ptr<Node>& next =
            e.value.empty() ? node->any[e.key]
                            : node->exact[ExactKey(e.key, e.value)];
        if (next == nullptr) next = std::make_unique<Node>();
        node = next.get();
      }
      if (node->policy != nullptr) {
        std::vector<std::string> entries;
        for (const core::EnvoyDescriptorConfig::Entry& e : d.entries) {
          entries.push_back(absl::StrCat(
              Quote(e.key), ": ", e.value.empty() ? "*" : Quote(e.value)));
        }
        conflicts_.push_back(absl::StrCat(
            "Envoy descriptor ", Quote(d.domain), " [",
            absl::StrJoin(entries, ", "), "] is claimed by policies \"",
            node->policy->name, "\" and \"", policy->name, "\"; \"",
            node->policy->name, "\" answers it"));
        continue;
      }
      node->policy = policy.get();
    }
  }
}

DescriptorIndex::Match DescriptorIndex::Find(
    absl::string_view domain, absl::Span<const DescriptorEntry> entries) const {
  Match match;
  auto root = domains_.find(domain);
  if (root == domains_.end()) return match;
  const Node* node = root->second.get();
  // One any-value entry: its value is the key, as an Acquire caller would
  // send it. Several: the values joined by "|", each with "\\" and "|"
  // escaped, so that no two value lists make the same key.
  std::string key;
  const absl::string_view* first = nullptr;
  bool keyed = false;
  for (const DescriptorEntry& entry : entries) {
    if (auto it = node->exact.find(ExactKey(entry.key, entry.value));
        it != node->exact.end()) {
      node = it->second.get();
      continue;
    }
    auto it = node->any.find(entry.key);
    if (it == node->any.end()) return match;
    node = it->second.get();
    if (keyed) {
      key += '|';
      AppendEscaped(entry.value, &key);
    } else {
      first = &entry.value;
    }
    keyed = true;
  }
  match.policy = node->policy;
  if (match.policy == nullptr || first == nullptr) return match;
  if (key.empty()) {
    match.key = std::string(*first);
  } else {
    AppendEscaped(*first, &match.key);
    match.key += key;
  }
  return match;
}

}  // namespace sluice::policy
