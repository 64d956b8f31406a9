#ifndef SLUICE_TESTS_TESTING_HTTP_GET_H_
#define SLUICE_TESTS_TESTING_HTTP_GET_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <string>

namespace sluice::testing {

// GET http://127.0.0.1:<port><path> with HTTP/1.0; the body, or "" on error.
inline std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string request =
      "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (send(fd, request.data(), request.size(), 0) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return "";
  }
  std::string response;
  char buf[8192];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) response.append(buf, n);
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
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
