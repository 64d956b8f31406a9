// SPDX-License-Identifier: Apache-2.0
#include "server/core/policy_config.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace sluice::core {

bool FallbackConfig::AppliesTo(Reason reason) const {
  if (strategy == FallbackStrategy::kNone) return false;
  if (on_mask == 0) return true;
  const auto bit = [](Reason r) { return uint32_t{1} << static_cast<int>(r); };
  if (on_mask & bit(reason)) return true;
  // A probe slot refusal is the breaker refusing, so it follows CIRCUIT_OPEN.
  return reason == Reason::kProbeLimit && (on_mask & bit(Reason::kCircuitOpen));
}

namespace {

int HostKind(const std::string& host) {
  if (host.empty()) return 0;
  return host[0] == '*' ? 1 : 2;
}

// Whether some host matches both patterns. A wildcard "*.example.com"
// matches the hosts that end in ".example.com".
bool HostsOverlap(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return true;
  const bool wild_a = a[0] == '*';
  const bool wild_b = b[0] == '*';
  const absl::string_view sa = wild_a ? absl::string_view(a).substr(1) : a;
  const absl::string_view sb = wild_b ? absl::string_view(b).substr(1) : b;
  if (!wild_a && !wild_b) return a == b;
  if (wild_a && wild_b) {
    return absl::EndsWith(sa, sb) || absl::EndsWith(sb, sa);
  }
  // One exact host, one wildcard: the host must end in the suffix and be
  // longer than it.
  const absl::string_view exact = wild_a ? sb : sa;
  const absl::string_view suffix = wild_a ? sa : sb;
  return exact.size() > suffix.size() && absl::EndsWith(exact, suffix);
}

}  // namespace

bool HttpRouteConfig::Specificity::operator<(const Specificity& o) const {
  if (path != o.path) return path < o.path;
  if (host_kind != o.host_kind) return host_kind < o.host_kind;
  if (host != o.host) return host < o.host;
  return conditions < o.conditions;
}

HttpRouteConfig::Specificity HttpRouteConfig::specificity() const {
  Specificity s;
  s.path = path_prefix.size();
  s.host_kind = HostKind(host);
  s.host = s.host_kind == 1 ? host.size() : 0;
  s.conditions = headers.size() + (methods.empty() ? 0 : 1);
  return s;
}

bool HttpRouteConfig::Overlaps(const HttpRouteConfig& other) const {
  if (!absl::StartsWith(path_prefix, other.path_prefix) &&
      !absl::StartsWith(other.path_prefix, path_prefix)) {
    return false;
  }
  if (!HostsOverlap(host, other.host)) return false;
  if (!methods.empty() && !other.methods.empty()) {
    bool shared = false;
    for (const std::string& m : methods) {
      if (std::find(other.methods.begin(), other.methods.end(), m) !=
          other.methods.end()) {
        shared = true;
        break;
      }
    }
    if (!shared) return false;
  }
  // Both sorted by name: a header both require with two different values
  // is the only way the header conditions exclude each other.
  auto a = headers.begin();
  auto b = other.headers.begin();
  while (a != headers.end() && b != other.headers.end()) {
    if (a->first < b->first) {
      ++a;
    } else if (b->first < a->first) {
      ++b;
    } else {
      if (!a->second.empty() && !b->second.empty() && a->second != b->second) {
        return false;
      }
      ++a;
      ++b;
    }
  }
  return true;
}

bool HttpRouteConfig::SameMatch(const HttpRouteConfig& other) const {
  return host == other.host && path_prefix == other.path_prefix &&
         methods == other.methods && headers == other.headers;
}

std::string HttpRouteConfig::TieGroup() const {
  // Equal specificity means equal lengths; overlapping paths and hosts of
  // equal length (and kind) are then equal.
  return absl::StrCat(path_prefix.size(), ":", path_prefix, host.size(), ":",
                      host, "#", specificity().conditions);
}

}  // namespace sluice::core
