// SPDX-License-Identifier: Apache-2.0
#include "gateway_config.h"

#include <exception>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "yaml-cpp/yaml.h"

namespace sluice::examples {
namespace {

absl::Status Bad(absl::string_view source, absl::string_view field,
                 absl::string_view rule) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": ", field, " ", rule));
}

// Reads `root[field]`, when present, into `*out`: a positive duration
// ("20ms", "1.5s").
absl::Status PositiveDuration(const YAML::Node& root, const char* field,
                              absl::string_view source,
                              std::optional<absl::Duration>* out) {
  if (!root[field]) return absl::OkStatus();
  const std::string value = root[field].as<std::string>();
  absl::Duration d;
  if (!absl::ParseDuration(value, &d) || d <= absl::ZeroDuration()) {
    return Bad(source, field,
               absl::StrCat("must be a positive duration, got \"", value,
                            "\""));
  }
  *out = d;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GatewayConfig> ParseGatewayConfig(absl::string_view text,
                                                 absl::string_view source) {
  GatewayConfig config;
  try {
    YAML::Node root = YAML::Load(std::string(text));
    if (!root.IsMap()) return Bad(source, "document", "must be a mapping");
    if (root["listen"]) config.listen = root["listen"].as<std::string>();
    if (root["sluice"]) config.sluice = root["sluice"].as<std::string>();
    if (const YAML::Node tls = root["sluice_tls"]) {
      if (!tls.IsMap()) return Bad(source, "sluice_tls", "must be a mapping");
      for (const auto& entry : tls) {
        const std::string name = entry.first.as<std::string>();
        const std::string value = entry.second.as<std::string>();
        if (name == "ca_file") {
          config.sluice_tls.ca_file = value;
        } else if (name == "cert_file") {
          config.sluice_tls.cert_file = value;
        } else if (name == "key_file") {
          config.sluice_tls.key_file = value;
        } else if (name == "server_name") {
          config.sluice_tls.server_name = value;
        } else {
          return Bad(source, absl::StrCat("sluice_tls.", name),
                     "is not a field (ca_file, cert_file, key_file, "
                     "server_name)");
        }
      }
    }
    if (absl::Status s = PositiveDuration(root, "acquire_timeout", source,
                                          &config.acquire_timeout);
        !s.ok()) {
      return s;
    }
    if (root["fail_open"]) config.fail_open = root["fail_open"].as<bool>();
    if (root["lease"]) config.lease = root["lease"].as<bool>();
    if (absl::Status s =
            PositiveDuration(root, "lease_tick", source, &config.lease_tick);
        !s.ok()) {
      return s;
    }
    if (root["threads"]) {
      config.threads = root["threads"].as<int>();
      if (config.threads < 1) return Bad(source, "threads", "must be >= 1");
    }
    const YAML::Node routes = root["routes"];
    if (!routes || !routes.IsSequence() || routes.size() == 0) {
      return Bad(source, "routes", "must be a non-empty list");
    }
    for (size_t i = 0; i < routes.size(); ++i) {
      const YAML::Node r = routes[i];
      const std::string where = absl::StrCat("routes[", i, "]");
      Route route;
      if (!r["prefix"] || !r["dependency"] || !r["backend"]) {
        return Bad(source, where, "needs prefix, dependency and backend");
      }
      route.prefix = r["prefix"].as<std::string>();
      route.dependency = r["dependency"].as<std::string>();
      route.backend = r["backend"].as<std::string>();
      if (!absl::StartsWith(route.prefix, "/")) {
        return Bad(source, absl::StrCat(where, ".prefix"),
                   absl::StrCat("must start with /, got \"", route.prefix,
                                "\""));
      }
      if (!absl::StartsWith(route.backend, "http://")) {
        return Bad(source, absl::StrCat(where, ".backend"),
                   absl::StrCat("must be http://host:port, got \"",
                                route.backend, "\""));
      }
      if (r["key_header"]) route.key_header = r["key_header"].as<std::string>();
      if (r["default_fallback"]) {
        route.default_fallback = r["default_fallback"].as<std::string>();
      }
      if (r["fallback_on_failure"]) {
        route.fallback_on_failure = r["fallback_on_failure"].as<bool>();
      }
      config.routes.push_back(std::move(route));
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", e.what()));
  }
  return config;
}

const Route* MatchRoute(const GatewayConfig& config, absl::string_view path) {
  const Route* best = nullptr;
  for (const Route& route : config.routes) {
    if (absl::StartsWith(path, route.prefix) &&
        (best == nullptr || route.prefix.size() > best->prefix.size())) {
      best = &route;
    }
  }
  return best;
}

}  // namespace sluice::examples
