// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_HTTP_GET_H_
#define SLUICE_TESTS_TESTING_HTTP_GET_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>

namespace sluice::testing {

// A whole HTTP answer: status (0 when the request failed: no connection, no
// or a malformed answer), headers (names lowercased) and body.
struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;
  std::string body;

  // The header's value, or "".
  std::string header(const std::string& lowercase_name) const {
    const auto it = headers.find(lowercase_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// `method` http://127.0.0.1:<port><path> with HTTP/1.0 (one connection per
// request), waiting at most `timeout_ms` for each read. `headers` are more
// request header lines, each ending in "\r\n".
inline HttpResponse HttpRequest(int port, const std::string& method,
                                const std::string& path,
                                int timeout_ms = 5000,
                                const std::string& headers = "") {
  HttpResponse out;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return out;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return out;
  }
  const std::string request = method + " " + path +
                              " HTTP/1.0\r\nHost: 127.0.0.1\r\n" + headers +
                              "Content-Length: 0\r\n\r\n";
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return out;
  }
  std::string response;
  char buf[8192];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) response.append(buf, n);
  close(fd);
  const size_t end = response.find("\r\n\r\n");
  if (end == std::string::npos || response.compare(0, 5, "HTTP/") != 0) {
    return out;
  }
  std::istringstream head(response.substr(0, end));
  std::string line;
  std::getline(head, line);
  const size_t space = line.find(' ');
  if (space == std::string::npos) return out;
  out.status = std::atoi(line.c_str() + space + 1);
  while (std::getline(head, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(c));
    size_t value = colon + 1;
    while (value < line.size() && line[value] == ' ') ++value;
    out.headers[name] = line.substr(value);
  }
  out.body = response.substr(end + 4);
  return out;
}

// GET http://127.0.0.1:<port><path> with HTTP/1.0; the body, or "" on error.
inline std::string HttpGet(int port, const std::string& path) {
  return HttpRequest(port, "GET", path).body;
}

// The unlabeled sample `name` on the /metrics page at `port`, or -1 when
// the page has none (or cannot be fetched).
inline double MetricSample(int port, const std::string& name) {
  std::istringstream lines(HttpGet(port, "/metrics"));
  std::string line;
  while (std::getline(lines, line)) {
    if (line.compare(0, name.size() + 1, name + " ") == 0) {
      return std::strtod(line.c_str() + name.size() + 1, nullptr);
    }
  }
  return -1;
}

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_HTTP_GET_H_
