// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_HTTP_RAW_CONNECTION_H_
#define SLUICE_TESTS_HTTP_RAW_CONNECTION_H_

// One TCP connection to 127.0.0.1:PORT that sends bytes exactly as written
// and reads HTTP/1.1 responses back one at a time: for what an HTTP client
// library will not send (no Content-Type, a malformed request line,
// pipelined requests, Expect: 100-continue) and to see when the server
// closes the connection. Every read gives up after 5 s.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <map>
#include <string>

namespace sluice::testing {

struct RawResponse {
  int status = 0;                              // 0: no (whole) response
  std::map<std::string, std::string> headers;  // names lowercased
  std::string body;

  std::string header(const std::string& lowercase_name) const {
    const auto it = headers.find(lowercase_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval timeout{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&address),
                  sizeof(address)) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~RawConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  bool Send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n =
          ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }

  // "POST path HTTP/1.1" with Host, the given extra header lines (each
  // ending in \r\n) and `body` with its Content-Length.
  bool SendPost(const std::string& path, const std::string& body,
                const std::string& headers = "") {
    return Send("POST " + path + " HTTP/1.1\r\nHost: t\r\n" + headers +
                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
                body);
  }

  // The next response: a body of Content-Length bytes, or up to the end of
  // the connection when there is none.
  RawResponse Read() {
    RawResponse out;
    size_t end;
    while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill()) return out;
    }
    const std::string head = buffer_.substr(0, end);
    buffer_.erase(0, end + 4);
    size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    const size_t space = status_line.find(' ');
    if (space == std::string::npos) return out;
    const int status = std::atoi(status_line.c_str() + space + 1);
    while (line_end != std::string::npos) {
      const size_t start = line_end + 2;
      line_end = head.find("\r\n", start);
      const std::string line = head.substr(start, line_end - start);
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(c));
      size_t value = colon + 1;
      while (value < line.size() && line[value] == ' ') ++value;
      out.headers[name] = line.substr(value);
    }
    if (out.headers.count("content-length") > 0) {
      const size_t length = std::stoul(out.headers["content-length"]);
      while (buffer_.size() < length) {
        if (!Fill()) return RawResponse();
      }
      out.body = buffer_.substr(0, length);
      buffer_.erase(0, length);
    } else if (status >= 200) {
      while (Fill()) {
      }
      out.body = std::move(buffer_);
      buffer_.clear();
    }
    out.status = status;
    return out;
  }

  // Tells the server this side sends nothing more (a half close).
  void FinishSending() { ::shutdown(fd_, SHUT_WR); }

  // True when the server has closed the connection: a read sees its end
  // (within 5 s) and nothing before it.
  bool ClosedByServer() {
    if (!buffer_.empty()) return false;
    char byte;
    return ::recv(fd_, &byte, 1, 0) == 0;
  }

 private:
  bool Fill() {
    char chunk[16384];
    const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  std::string buffer_;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_HTTP_RAW_CONNECTION_H_
