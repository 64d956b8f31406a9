#ifndef SLUICE_WIRE_ADDRESS_H_
#define SLUICE_WIRE_ADDRESS_H_

// "host:port" as the flags, the config files and the logs write it.

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice::wire {

struct HostPort {
  // As written, with the brackets of an IPv6 literal ("[::1]").
  std::string host;
  int port = 0;
};

// "host:port", "[v6]:port", or "host" alone when `default_port` is given.
// The port is a decimal number in [0, 65535]. INVALID_ARGUMENT otherwise:
//   expected HOST:PORT, got "x"
//   IPv6 hosts go in brackets ([::1]:50051), got "::1:80"
//   port must be a number in [0, 65535], got "host:http"
absl::StatusOr<HostPort> ParseHostPort(
    absl::string_view text, std::optional<int> default_port = std::nullopt);

// "host:port"; the host as stored, so a parsed IPv6 host keeps its brackets.
std::string FormatHostPort(const HostPort& address);

}  // namespace sluice::wire

#endif  // SLUICE_WIRE_ADDRESS_H_
