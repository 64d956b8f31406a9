// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_PORT_FILE_H_
#define SLUICE_TESTS_TESTING_PORT_FILE_H_

// Reads the file `sluiced --port-file=PATH` writes once every listener is
// bound: one "name=address" line per listener ("grpc", "admin",
// "metrics"), the address "host:port" or "unix:PATH". sluiced writes
// PATH.tmp and renames it, so a file that exists is complete.

#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"

namespace sluice::testing {

// The addresses by listener name, as written; nullopt when the file does
// not exist (yet) or a line is not "name=address".
inline std::optional<std::map<std::string, std::string>> ReadListenerFile(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::map<std::string, std::string> listeners;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == line.size()) {
      return std::nullopt;
    }
    listeners[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return listeners;
}

// The port of a "host:port" address, or 0 (for "unix:PATH" too).
inline int PortOf(absl::string_view address) {
  if (absl::StartsWith(address, "unix:")) return 0;
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    return 0;
  }
  return port;
}

// The TCP ports by listener name (Unix socket listeners are left out), or
// nullopt when the file does not exist (yet) or a TCP address does not
// parse.
inline std::optional<std::map<std::string, int>> ReadPortFile(
    const std::string& path) {
  std::optional<std::map<std::string, std::string>> listeners =
      ReadListenerFile(path);
  if (!listeners.has_value()) return std::nullopt;
  std::map<std::string, int> ports;
  for (const auto& [name, address] : *listeners) {
    if (absl::StartsWith(address, "unix:")) continue;
    const int port = PortOf(address);
    if (port == 0) return std::nullopt;
    ports[name] = port;
  }
  return ports;
}

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_PORT_FILE_H_
