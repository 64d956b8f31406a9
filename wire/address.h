// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_WIRE_ADDRESS_H_
#define SLUICE_WIRE_ADDRESS_H_

// Addresses as the flags, the config files and the logs write them:
// "host:port" for TCP, "unix:PATH" for a Unix domain socket.

#include <cstddef>
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

// Longest Unix socket path: sockaddr_un's sun_path holds 108 bytes on Linux,
// the last one the terminating NUL.
inline constexpr size_t kMaxUnixSocketPathBytes = 107;

// Where a listener binds or a client connects: a TCP host:port or a Unix
// domain socket.
struct Endpoint {
  // The socket's path for "unix:PATH"; empty for TCP.
  std::string unix_path;
  // For TCP only.
  HostPort tcp;

  bool is_unix() const { return !unix_path.empty(); }
};

// "HOST:PORT" (as ParseHostPort), or "unix:PATH" with PATH absolute or
// relative, or gRPC's "unix:///ABSOLUTE/PATH". INVALID_ARGUMENT otherwise:
//   unix socket path is empty, got "unix:"
//   unix socket path is longer than 107 bytes, got "unix:/..."
//   unix socket path must not contain a NUL byte
//   unix socket path must not contain %, ? or # (gRPC would decode them)
//   abstract Unix sockets are not supported, got "unix-abstract:x"
absl::StatusOr<Endpoint> ParseEndpoint(absl::string_view text);

// "unix:PATH" or "host:port": the spelling gRPC accepts both as a listening
// address and as a channel target.
std::string FormatEndpoint(const Endpoint& endpoint);

}  // namespace sluice::wire

#endif  // SLUICE_WIRE_ADDRESS_H_
