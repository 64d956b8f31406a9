#ifndef SLUICE_TESTS_TESTING_PORT_FILE_H_
#define SLUICE_TESTS_TESTING_PORT_FILE_H_

// Reads the file `sluiced --port-file=PATH` writes once every listener is
// bound: one "name=host:port" line per listener ("grpc", "admin",
// "metrics"). sluiced writes PATH.tmp and renames it, so a file that exists
// is complete.

#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"

namespace sluice::testing {

// The ports by listener name, or nullopt when the file does not exist (yet)
// or a line does not parse.
inline std::optional<std::map<std::string, int>> ReadPortFile(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::map<std::string, int> ports;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    const size_t colon = line.rfind(':');
    int port = 0;
    if (eq == std::string::npos || eq == 0 || colon == std::string::npos ||
        colon < eq ||
        !absl::SimpleAtoi(absl::string_view(line).substr(colon + 1), &port) ||
        port <= 0 || port > 65535) {
      return std::nullopt;
    }
    ports[line.substr(0, eq)] = port;
  }
  return ports;
}

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_PORT_FILE_H_
