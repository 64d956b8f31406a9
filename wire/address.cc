// SPDX-License-Identifier: Apache-2.0
#include "wire/address.h"

#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"

namespace sluice::wire {
namespace {

absl::Status Malformed(absl::string_view text) {
  return absl::InvalidArgumentError(
      absl::StrCat("expected HOST:PORT, got \"", text, "\""));
}

bool ParsePort(absl::string_view digits, int* port) {
  if (digits.empty() || digits.size() > 5) return false;
  for (char c : digits) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  return absl::SimpleAtoi(digits, port) && *port >= 0 && *port <= 65535;
}

}  // namespace

absl::StatusOr<HostPort> ParseHostPort(absl::string_view text,
                                       std::optional<int> default_port) {
  HostPort out;
  absl::string_view host = text;
  absl::string_view port;
  bool has_port = false;
  if (!text.empty() && text.front() == '[') {
    // [v6] or [v6]:port
    const size_t close = text.find(']');
    if (close == absl::string_view::npos || close == 1) return Malformed(text);
    host = text.substr(0, close + 1);
    absl::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return Malformed(text);
      port = rest.substr(1);
      has_port = true;
    }
  } else {
    const size_t colon = text.rfind(':');
    if (colon != absl::string_view::npos) {
      host = text.substr(0, colon);
      port = text.substr(colon + 1);
      has_port = true;
      if (host.find(':') != absl::string_view::npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            "IPv6 hosts go in brackets ([::1]:50051), got \"", text, "\""));
      }
    }
  }
  if (host.empty()) return Malformed(text);
  out.host = std::string(host);
  if (!has_port) {
    if (!default_port.has_value()) return Malformed(text);
    out.port = *default_port;
    return out;
  }
  if (!ParsePort(port, &out.port)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "port must be a number in [0, 65535], got \"", text, "\""));
  }
  return out;
}

std::string FormatHostPort(const HostPort& address) {
  return absl::StrCat(address.host, ":", address.port);
}

absl::StatusOr<Endpoint> ParseEndpoint(absl::string_view text) {
  if (absl::StartsWith(text, "unix-abstract:")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "abstract Unix sockets are not supported, got \"", text, "\""));
  }
  absl::string_view path = text;
  if (!absl::ConsumePrefix(&path, "unix:")) {
    absl::StatusOr<HostPort> tcp = ParseHostPort(text);
    if (!tcp.ok()) return tcp.status();
    Endpoint endpoint;
    endpoint.tcp = *std::move(tcp);
    return endpoint;
  }
  // gRPC's URI form: "unix://" + an absolute path (no authority).
  if (absl::ConsumePrefix(&path, "//") && !absl::StartsWith(path, "/")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unix:// takes an absolute path (unix:///run/x.sock), got \"", text,
        "\""));
  }
  if (path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unix socket path is empty, got \"", text, "\""));
  }
  if (path.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        "unix socket path must not contain a NUL byte");
  }
  // gRPC reads the address as a URI: it would decode "%20" and cut the path
  // at "?" or "#", and bind a path other than the one named here.
  if (path.find_first_of("%?#") != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unix socket path must not contain %, ? or #, got \"", text, "\""));
  }
  if (path.size() > kMaxUnixSocketPathBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unix socket path is longer than ", kMaxUnixSocketPathBytes,
        " bytes, got \"", text, "\""));
  }
  Endpoint endpoint;
  endpoint.unix_path = std::string(path);
  return endpoint;
}

std::string FormatEndpoint(const Endpoint& endpoint) {
  return endpoint.is_unix() ? absl::StrCat("unix:", endpoint.unix_path)
                            : FormatHostPort(endpoint.tcp);
}

}  // namespace sluice::wire
