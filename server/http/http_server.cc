#include "server/http/http_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/http/decision_api.h"
#include "spdlog/spdlog.h"
#include "wire/address.h"

// How connections are served, and why.
//
// cpp-httplib serves a connection on one thread of its pool for the whole
// life of the connection: with keep-alive, a gateway's connection holds its
// thread between requests too. httplib's default pool
// (CPPHTTPLIB_THREAD_POOL_COUNT: the cores less one, at least 8) would serve
// only 8 gateway connections on a small node and leave the ninth waiting
// until one of them closes. A thread that waits on a socket costs no CPU
// and a little memory (its stack is reserved, not used), so the pool has
// HttpServerOptions::threads (128) threads, enough for the keep-alive pools
// of a few gateways (an NGINX upstream keeps `keepalive N` idle connections
// per worker process). When every thread is taken anyway, an accepted
// connection waits, and each connection closes after its current request
// (idle ones at once) until it got a thread: under overload every gateway
// is served, one request per connection, instead of the first ones only.
// While a thread is free nothing closes: closing an idle connection races
// with the client's next request on it.
//
// httplib's own connection loop polls an idle connection about every 10 ms
// and does not notice a stop until its keep-alive timeout ends, so a stop
// with one idle gateway connection took 5 s. Here the loop is Sluice's
// (Listener::process_and_close_socket): it waits in poll(2) for the next
// request, the stop and a waiting connection at once, and reads and writes
// through ConnectionStream, which buffers (httplib reads the request line
// and headers a byte at a time) and sends each response in one write.
//
// Timeouts: a request that has begun must keep arriving (read_timeout, 5 s,
// per wait) and the client must keep taking the response (write_timeout,
// 5 s): decisions are small, so a client slower than that is broken, and
// it holds a thread meanwhile. An idle connection is kept 65 s, longer than
// the 60 s NGINX keeps an idle upstream connection by default, so that the
// gateway closes first and never sends a request on a connection the
// server is closing.
//
// TLS (HttpServerOptions::tls_context): the connection's thread does the
// handshake (within read_timeout, like any wait for the client) and then
// reads and writes through OpenSSL on a non-blocking socket, waiting in
// poll(2) as the plaintext path does; everything above ConnectionStream is
// the same for both. A connection turned away for want of a thread is
// closed without the plaintext 503 (the accepting thread does no
// handshakes).
//
// Bodies: at most kMaxBodyBytes (4 MiB), for Content-Length and chunked
// bodies alike. A request refused before its body was read (404, 405, 413,
// 415) has its connection closed after the answer, so the unread body is
// never taken for the next request.

namespace sluice::http {
namespace {

using Clock = std::chrono::steady_clock;

// Bytes read from a socket at once; larger than any usual request.
constexpr size_t kReadBufferBytes = 16 * 1024;
// A response this large is sent as it grows instead of at the end.
constexpr size_t kWriteFlushBytes = 64 * 1024;
// How long a connection closed with an unread body keeps reading (and
// dropping) it, so that the client reads the answer instead of a reset.
constexpr absl::Duration kLinger = absl::Seconds(1);

int PollMillis(absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(
      absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1))),
      INT32_MAX));
}

// Waits until `fd` is ready for `events` (or has an error or hang-up), at
// most `timeout`; true if it is.
bool AwaitFd(int fd, short events, absl::Duration timeout) {
  pollfd p{fd, events, 0};
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const int n = ::poll(&p, 1, PollMillis(deadline - absl::Now()));
    if (n >= 0) return n > 0;
    if (errno != EINTR) return false;
  }
}

// OpenSSL writes with write(2), which raises SIGPIPE when the client has
// gone, and the default action ends the process. Blocked on the writing
// thread (the SIGPIPE of a write goes to that thread alone), the write
// fails with EPIPE instead. The plaintext path sends with MSG_NOSIGNAL.
void BlockSigpipeOnThisThread() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// "ip" and port of a socket address.
void FormatAddress(const sockaddr_storage& address, std::string* ip,
                   int* port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
    *port = ntohs(v4->sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
    *port = ntohs(v6->sin6_port);
  }
  *ip = text;
}

// One connection's socket as httplib reads and writes it, plain or TLS.
// Reads are buffered; writes are collected and sent when the response is
// complete (Flush), when they grow large, or before the next read (so that
// a "100 Continue" goes out before the body is awaited). Not thread-safe:
// the connection's thread alone uses it.
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(int fd, absl::Duration read_timeout,
                   absl::Duration write_timeout)
      : fd_(fd),
        read_timeout_(read_timeout),
        write_timeout_(write_timeout),
        in_(kReadBufferBytes) {}
  ~ConnectionStream() override {
    if (ssl_ != nullptr) SSL_free(ssl_);
  }
  ConnectionStream(const ConnectionStream&) = delete;
  ConnectionStream& operator=(const ConnectionStream&) = delete;

  // Makes this a TLS connection: the server side of the handshake, within
  // the read timeout. False (and the reason in `error`) when it failed.
  bool AcceptTls(SSL_CTX* context, std::string* error) {
    ERR_clear_error();
    ssl_ = SSL_new(context);
    if (ssl_ == nullptr || SSL_set_fd(ssl_, fd_) != 1) {
      *error = "cannot set up TLS";
      return false;
    }
    const int flags = ::fcntl(fd_, F_GETFL);
    ::fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
    set_deadline(absl::Now() + read_timeout_);
    bool done = false;
    while (!done) {
      const int r = SSL_accept(ssl_);
      if (r == 1) {
        done = true;
      } else if (!AwaitTls(r)) {
        const unsigned long e = ERR_get_error();
        const char* reason = e != 0 ? ERR_reason_error_string(e) : nullptr;
        *error = reason != nullptr ? reason : "cut short or timed out";
        ERR_clear_error();
        return false;
      }
    }
    handshake_done_ = true;
    set_deadline(absl::InfiniteFuture());
    return true;
  }

  // Sends TLS close_notify (once, without waiting); nothing for plaintext.
  void CloseTls() {
    if (ssl_ != nullptr && handshake_done_) {
      SSL_shutdown(ssl_);
      ERR_clear_error();
    }
  }

  bool is_readable() const override {
    return has_input() || AwaitFd(fd_, POLLIN, Within(read_timeout_));
  }
  bool is_writable() const override {
    return AwaitFd(fd_, POLLOUT, Within(write_timeout_));
  }

  // The request now begun must be read and answered by `deadline`; every
  // wait after it is cut short, and fails, at the deadline.
  void set_deadline(absl::Time deadline) { deadline_ = deadline; }

  ssize_t read(char* ptr, size_t size) override {
    if (!has_input()) {
      if (!Flush()) return -1;
      const ssize_t n = Receive();
      if (n <= 0) return n;
    }
    const size_t n = std::min(size, in_end_ - in_pos_);
    std::memcpy(ptr, in_.data() + in_pos_, n);
    in_pos_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    out_.append(ptr, size);
    if (out_.size() >= kWriteFlushBytes && !Flush()) return -1;
    return static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    Addresses();
    ip = remote_ip_;
    port = remote_port_;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    Addresses();
    ip = local_ip_;
    port = local_port_;
  }
  socket_t socket() const override { return fd_; }

  // Sends what was written; false when the client does not take it.
  bool Flush() {
    if (ssl_ != nullptr) return FlushTls();
    size_t sent = 0;
    while (sent < out_.size()) {
      const ssize_t n = ::send(fd_, out_.data() + sent, out_.size() - sent,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
          AwaitFd(fd_, POLLOUT, Within(write_timeout_))) {
        continue;
      }
      out_.clear();
      return false;
    }
    out_.clear();
    return true;
  }

  // Bytes of a next request already read (a pipelining client).
  bool has_input() const {
    return in_pos_ < in_end_ || (ssl_ != nullptr && SSL_pending(ssl_) > 0);
  }

 private:
  // After an OpenSSL call returned `result` <= 0: waits for what it wants
  // (the socket readable or writable) and answers true to call it again;
  // false for an error, the end of the stream or a timeout.
  bool AwaitTls(int result) {
    switch (SSL_get_error(ssl_, result)) {
      case SSL_ERROR_WANT_READ:
        return AwaitFd(fd_, POLLIN, Within(read_timeout_));
      case SSL_ERROR_WANT_WRITE:
        return AwaitFd(fd_, POLLOUT, Within(write_timeout_));
      case SSL_ERROR_SYSCALL:
        return errno == EINTR;
      default:
        return false;
    }
  }

  bool FlushTls() {
    bool ok = true;
    size_t sent = 0;
    while (ok && sent < out_.size()) {
      ERR_clear_error();
      const int n = SSL_write(ssl_, out_.data() + sent,
                              static_cast<int>(std::min<size_t>(
                                  out_.size() - sent, INT32_MAX)));
      if (n > 0) {
        sent += static_cast<size_t>(n);
      } else {
        ok = AwaitTls(n);
      }
    }
    out_.clear();
    return ok;
  }

  // Refills the buffer: the bytes read, 0 at the end of the stream, -1 on
  // an error or when nothing came within the read timeout.
  ssize_t Receive() {
    in_pos_ = in_end_ = 0;
    while (ssl_ != nullptr) {
      ERR_clear_error();
      const int n = SSL_read(ssl_, in_.data(), static_cast<int>(in_.size()));
      if (n > 0) {
        in_end_ = static_cast<size_t>(n);
        return n;
      }
      if (SSL_get_error(ssl_, n) == SSL_ERROR_ZERO_RETURN) return 0;
      if (!AwaitTls(n)) return -1;
    }
    while (true) {
      const ssize_t n = ::recv(fd_, in_.data(), in_.size(), MSG_DONTWAIT);
      if (n >= 0) {
        in_end_ = static_cast<size_t>(n);
        return n;
      }
      if (errno == EINTR) continue;
      if ((errno == EAGAIN || errno == EWOULDBLOCK) &&
          AwaitFd(fd_, POLLIN, Within(read_timeout_))) {
        continue;
      }
      return -1;
    }
  }

  // `timeout`, or less when the request's deadline comes first.
  absl::Duration Within(absl::Duration timeout) const {
    return std::min(timeout, deadline_ - absl::Now());
  }

  // httplib asks for both addresses on every request; they do not change.
  void Addresses() const {
    if (addresses_known_) return;
    addresses_known_ = true;
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&address), &length) ==
        0) {
      FormatAddress(address, &remote_ip_, &remote_port_);
    }
    length = sizeof(address);
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) ==
        0) {
      FormatAddress(address, &local_ip_, &local_port_);
    }
  }

  const int fd_;
  const absl::Duration read_timeout_;
  const absl::Duration write_timeout_;
  absl::Time deadline_ = absl::InfiniteFuture();
  SSL* ssl_ = nullptr;  // TLS connections only
  bool handshake_done_ = false;
  std::vector<char> in_;
  size_t in_pos_ = 0;
  size_t in_end_ = 0;
  std::string out_;
  mutable bool addresses_known_ = false;
  mutable std::string remote_ip_, local_ip_;
  mutable int remote_port_ = 0, local_port_ = 0;
};

// The connections of a server: those being served (so that a stop can cut
// them), those accepted and waiting for a thread, and the two events that
// end an idle connection early: the stop, and "pressure" (a connection waits
// while every thread serves one). Each event is an eventfd that an idle
// connection polls with its socket. Safe for concurrent use.
class Connections {
 public:
  explicit Connections(size_t threads)
      : threads_(threads),
        stop_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
        pressure_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~Connections() {
    if (stop_fd_ >= 0) ::close(stop_fd_);
    if (pressure_fd_ >= 0) ::close(pressure_fd_);
  }
  Connections(const Connections&) = delete;
  Connections& operator=(const Connections&) = delete;

  bool valid() const { return stop_fd_ >= 0 && pressure_fd_ >= 0; }

  // An accepted connection was queued for a thread, and later got one.
  void Queued() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    ++waiting_;
    UpdatePressure();
  }
  // A connection was turned away: too many were waiting for a thread.
  void Refused() { refused_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

  void Dequeued() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    --waiting_;
    UpdatePressure();
  }

  // A thread took the connection on `fd`; false once stopping (then the
  // caller closes it unserved).
  bool Open(int fd) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (stopping_.load(std::memory_order_relaxed)) return false;
    open_.insert(fd);
    UpdatePressure();
    return true;
  }
  // Forgets `fd` and closes it.
  void Close(int fd) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      open_.erase(fd);
      UpdatePressure();
    }
    ::close(fd);
  }

  // Whether a connection should close after its current request. Read on
  // every request, without the lock.
  bool ShouldClose() const {
    return stopping_.load(std::memory_order_relaxed) ||
           pressure_.load(std::memory_order_relaxed);
  }

  // Waits until the next request arrives on `fd` (true), or until `idle`
  // has passed, the server stops or there is pressure (false). A request
  // already on its way is served even then.
  bool AwaitRequest(int fd, absl::Duration idle) const {
    const absl::Time deadline = absl::Now() + idle;
    while (true) {
      pollfd fds[3] = {
          {fd, POLLIN, 0}, {stop_fd_, POLLIN, 0}, {pressure_fd_, POLLIN, 0}};
      const int n = ::poll(fds, 3, PollMillis(deadline - absl::Now()));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;  // idle for too long, or an error
      if (fds[0].revents != 0) return true;
      if (fds[1].revents != 0) return false;
      // pressure_fd_ was readable; the pressure may have ended since.
      if (pressure_.load(std::memory_order_relaxed)) return false;
    }
  }

  // From now on connections close when idle or after their request.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    stopping_.store(true, std::memory_order_relaxed);
    Signal(stop_fd_);
  }

  // Waits until no connection is open, or `deadline`; true if none is.
  bool AwaitAllClosed(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithDeadline(
        absl::Condition(
            +[](absl::flat_hash_set<int>* open) { return open->empty(); },
            &open_),
        deadline);
  }

  // Shuts down the socket of every open connection: its thread's next (or
  // current) read or write fails, and the thread closes it.
  void CutAll() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
  }

  int64_t open() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return static_cast<int64_t>(open_.size());
  }
  int64_t waiting() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return waiting_;
  }

 private:
  static void Signal(int fd) {
    const uint64_t one = 1;
    (void)!::write(fd, &one, sizeof(one));
  }

  // A connection queued while a thread is free is picked up at once; only
  // one queued while every thread serves a connection needs them to yield.
  // pressure_fd_ is readable exactly while pressure_ is true: both change
  // here, under mu_.
  void UpdatePressure() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const bool pressure = waiting_ > 0 && open_.size() >= threads_;
    if (pressure == pressure_.load(std::memory_order_relaxed)) return;
    pressure_.store(pressure, std::memory_order_relaxed);
    if (pressure) {
      Signal(pressure_fd_);
    } else {
      uint64_t value = 0;
      (void)!::read(pressure_fd_, &value, sizeof(value));
    }
  }

  const size_t threads_;
  const int stop_fd_;
  const int pressure_fd_;

  mutable absl::Mutex mu_;
  absl::flat_hash_set<int> open_ ABSL_GUARDED_BY(mu_);
  int64_t waiting_ ABSL_GUARDED_BY(mu_) = 0;
  // Written under mu_, read without it.
  std::atomic<bool> pressure_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> refused_{0};
};

// Set on the accepting thread while it turns a connection away.
thread_local bool refuse_connection = false;

// httplib's thread pool, telling `connections` when a connection starts
// waiting for a thread and when it got one. At most as many connections
// wait as there are threads: beyond that a new connection is answered 503
// and closed at once on the accepting thread, so that a flood of
// connections (or of slow clients) cannot pile up file descriptors, which
// the gRPC listeners share.
class CountingThreadPool final : public httplib::TaskQueue {
 public:
  CountingThreadPool(size_t threads, Connections* connections)
      : pool_(threads), threads_(threads), connections_(connections) {}

  void enqueue(std::function<void()> task) override {
    if (connections_->waiting() >= static_cast<int64_t>(threads_)) {
      refuse_connection = true;
      task();  // process_and_close_socket, which sees the flag
      refuse_connection = false;
      return;
    }
    connections_->Queued();
    pool_.enqueue([this, task = std::move(task)] {
      connections_->Dequeued();
      task();
    });
  }
  void shutdown() override { pool_.shutdown(); }

 private:
  httplib::ThreadPool pool_;
  const size_t threads_;
  Connections* const connections_;
};

// What a handler tells the connection loop about the request it answers,
// through a thread_local: httplib runs the handlers on the connection's
// thread, inside process_request, and gives them no handle on the
// connection.
struct RequestScope {
  // Close the connection after this response: the request's body was not
  // read (or not all of it).
  bool close = false;
};
thread_local RequestScope* current_request = nullptr;

// Closes the connection once `response` is written, and says so in it.
void CloseAfterResponse(httplib::Response& response) {
  if (current_request != nullptr) current_request->close = true;
  response.set_header("Connection", "close");
}

// httplib's server with Sluice's connection loop (see the top of the
// file). Overriding process_and_close_socket, httplib's per-connection
// virtual, keeps httplib's parsing, routing and response writing.
class Listener final : public httplib::Server {
 public:
  Listener(const HttpServerOptions& options, Connections* connections)
      : options_(options), connections_(connections) {
    const size_t threads = static_cast<size_t>(std::max(1, options.threads));
    new_task_queue = [threads, connections] {
      return new CountingThreadPool(threads, connections);
    };
    set_keep_alive_max_count(
        static_cast<size_t>(std::max(1, options.max_requests_per_connection)));
    set_keep_alive_timeout(absl::ToInt64Seconds(options.idle_timeout));
    set_read_timeout(absl::ToChronoMicroseconds(options.read_timeout));
    set_write_timeout(absl::ToChronoMicroseconds(options.write_timeout));
    set_payload_max_length(kMaxBodyBytes);
    // httplib's default also sets SO_REUSEPORT, with which a second sluiced
    // on the same port would bind and quietly take half the connections.
    set_socket_options([](socket_t sock) {
      const int one = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    });
  }

  // Binds host:port (port 0: any free port); the port bound, or -1.
  int Bind(const std::string& host, int port) {
    const int bound = port == 0 ? bind_to_any_port(host)
                                : (bind_to_port(host, port) ? port : -1);
    if (bound <= 0) return -1;
    // httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed
    // in Debian's compiled library); gateways connecting all at once after
    // a restart would see SYNs dropped and retried a second later. Calling
    // listen(2) again on a listening socket sets a new backlog.
    ::listen(svr_sock_, SOMAXCONN);
    return bound;
  }

  // Closes the listening socket: the accept loop ends and, once every
  // connection thread is done, listen_after_bind returns. Unlike
  // httplib::Server::stop, it works before the accept loop has started.
  void StopAccepting() {
    const socket_t sock = svr_sock_.exchange(INVALID_SOCKET);
    if (sock != INVALID_SOCKET) {
      ::shutdown(sock, SHUT_RDWR);
      ::close(sock);
    }
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    if (refuse_connection) {
      // Never blocks the accepting thread: one non-blocking send, then close.
      static constexpr char kBusy[] =
          "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n"
          "Retry-After: 1\r\nContent-Length: 0\r\n\r\n";
      if (!options_.tls_context) {
        ::send(sock, kBusy, sizeof(kBusy) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      ::close(sock);
      connections_->Refused();
      return false;
    }
    if (!connections_->Open(sock)) {
      ::close(sock);
      return false;
    }
    const int one = 1;
    ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ConnectionStream stream(sock, options_.read_timeout,
                            options_.write_timeout);
    if (options_.tls_context) {
      BlockSigpipeOnThisThread();
      const std::shared_ptr<SSL_CTX> context = options_.tls_context();
      std::string error = "no TLS context";
      if (context == nullptr || !stream.AcceptTls(context.get(), &error)) {
        // A scanner or a client that does not trust the certificate: not
        // worth more than a debug line each.
        spdlog::debug("HTTP API: TLS handshake failed: {}", error);
        ::shutdown(sock, SHUT_RDWR);
        connections_->Close(sock);
        return true;
      }
    }
    const int max_requests = std::max(1, options_.max_requests_per_connection);
    bool linger = false;
    for (int served = 0; served < max_requests; ++served) {
      if (!stream.has_input() &&
          !connections_->AwaitRequest(sock, options_.idle_timeout)) {
        break;
      }
      stream.set_deadline(absl::Now() + options_.request_timeout);
      const bool last =
          served + 1 == max_requests || connections_->ShouldClose();
      RequestScope scope;
      current_request = &scope;
      bool client_closes = false;
      const bool answered = process_request(
          stream, last, client_closes, [](httplib::Request& request) {
            // Responses are small and a gateway's subrequest may not
            // decompress: never gzip them.
            request.headers.erase("Accept-Encoding");
          });
      current_request = nullptr;
      const bool flushed = stream.Flush();
      if (scope.close) linger = true;
      if (!answered || !flushed || client_closes || last || scope.close) {
        break;
      }
    }
    stream.CloseTls();
    if (linger) Linger(sock);
    ::shutdown(sock, SHUT_RDWR);
    connections_->Close(sock);
    return true;
  }

  // Closing a socket that has unread bytes sends a reset, which can destroy
  // the answer before the client reads it. So: no more writes, then read
  // and drop what still comes, for at most kLinger.
  static void Linger(int sock) {
    ::shutdown(sock, SHUT_WR);
    const absl::Time deadline = absl::Now() + kLinger;
    char buffer[16 * 1024];
    while (AwaitFd(sock, POLLIN, deadline - absl::Now())) {
      const ssize_t n = ::recv(sock, buffer, sizeof(buffer), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;
    }
  }

  const HttpServerOptions options_;
  Connections* const connections_;
};

RequestHead HeadOf(const httplib::Request& request) {
  RequestHead head;
  head.method = request.method;
  head.path = request.path;
  if (request.has_header("Content-Type")) {
    head.content_type = request.get_header_value("Content-Type");
  }
  if (request.has_header("Content-Length")) {
    uint64_t length = 0;
    if (absl::SimpleAtoi(request.get_header_value("Content-Length"), &length)) {
      head.content_length = length;
    }
  }
  return head;
}

// Whether a body follows the head: a non-zero Content-Length, or chunks.
bool HasBody(const httplib::Request& request) {
  if (absl::StrContains(
          absl::AsciiStrToLower(request.get_header_value("Transfer-Encoding")),
          "chunked")) {
    return true;
  }
  const std::string length = request.get_header_value("Content-Length");
  return !length.empty() && length != "0";
}

class HttpServerImpl final : public HttpServer {
 public:
  HttpServerImpl(const HttpServerOptions& options,
                 rpc::DecisionServiceImpl* service)
      : api_(service),
        connections_(static_cast<size_t>(std::max(1, options.threads))),
        listener_(options, &connections_) {
    Route();
  }

  ~HttpServerImpl() override { Stop(absl::Now()); }

  absl::Status Bind(const std::string& listen) {
    if (!connections_.valid()) {
      return absl::InternalError(absl::StrCat(
          "cannot serve the HTTP API: eventfd: ", std::strerror(errno)));
    }
    if (absl::StartsWith(listen, "unix:")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the HTTP API is served over TCP only (HOST:PORT), got \"", listen,
          "\""));
    }
    absl::StatusOr<wire::HostPort> address = wire::ParseHostPort(listen);
    if (!address.ok()) return address.status();
    // httplib resolves the host itself and wants IPv6 without brackets.
    std::string host = address->host;
    if (absl::StartsWith(host, "[")) {
      host = std::string(absl::StripSuffix(absl::StripPrefix(host, "["), "]"));
    }
    port_ = listener_.Bind(host, address->port);
    if (port_ <= 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve the HTTP API on ", listen,
                       " (address in use or not available?)"));
    }
    thread_ = std::thread([this] {
      listener_.listen_after_bind();
      // httplib's accept loop also ends, for good, on an accept error other
      // than running out of descriptors. Say so, and stop calling the API
      // healthy, rather than go quiet.
      if (!stopping_.load(std::memory_order_acquire)) {
        serving_.store(false, std::memory_order_relaxed);
        failed_.store(true, std::memory_order_relaxed);
        spdlog::error(
            "the HTTP API stopped accepting connections (accept failed: "
            "{}); /v1/health now answers 503, the gRPC listeners go on",
            std::strerror(errno));
      }
    });
    return absl::OkStatus();
  }

  int port() const override { return port_; }

  void SetServing(bool serving) override {
    serving_.store(serving && !failed_.load(std::memory_order_relaxed),
                   std::memory_order_relaxed);
  }

  void Stop(absl::Time deadline) override ABSL_LOCKS_EXCLUDED(stop_mu_) {
    absl::MutexLock lock(&stop_mu_);
    if (stopped_) return;
    stopped_ = true;
    stopping_.store(true, std::memory_order_release);
    serving_.store(false, std::memory_order_relaxed);
    connections_.Stop();
    listener_.StopAccepting();
    if (!connections_.AwaitAllClosed(deadline)) connections_.CutAll();
    if (thread_.joinable()) thread_.join();
  }

  HttpStats Stats() const override {
    HttpStats stats;
    stats.requests = counters_.Snapshot();
    stats.connections = connections_.open();
    stats.waiting = connections_.waiting();
    return stats;
  }

 private:
  void Send(Endpoint endpoint, const Reply& reply,
            httplib::Response& response) {
    response.status = reply.status;
    response.set_content(reply.body, "application/json");
    if (!reply.allow.empty()) response.set_header("Allow", reply.allow);
    counters_.Add(endpoint, reply.status);
  }

  void Route() {
    // Everything that can be told from the head: refusals, health, and a
    // POST without a body. The rest goes on to the POST routes below,
    // which read the body.
    listener_.set_pre_routing_handler([this](const httplib::Request& request,
                                             httplib::Response& response) {
      const Endpoint endpoint = EndpointForPath(request.path);
      const bool body = HasBody(request);
      if (std::optional<Reply> refusal = DecisionApi::Check(HeadOf(request))) {
        if (body) CloseAfterResponse(response);
        Send(endpoint, *refusal, response);
        return httplib::Server::HandlerResponse::Handled;
      }
      if (endpoint == Endpoint::kHealth) {
        if (body) CloseAfterResponse(response);
        Send(endpoint,
             DecisionApi::Health(serving_.load(std::memory_order_relaxed)),
             response);
        return httplib::Server::HandlerResponse::Handled;
      }
      if (!body) {
        Send(endpoint, api_.Post(endpoint, ""), response);
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    // A client that sends "Expect: 100-continue" waits for our go-ahead
    // before the body: refuse early what Check refuses.
    listener_.set_expect_100_continue_handler(
        [this](const httplib::Request& request, httplib::Response& response) {
          std::optional<Reply> refusal = DecisionApi::Check(HeadOf(request));
          if (!refusal) return 100;
          CloseAfterResponse(response);
          Send(EndpointForPath(request.path), *refusal, response);
          // httplib writes this answer without adding a Content-Length.
          response.set_header("Content-Length",
                              std::to_string(response.body.size()));
          return refusal->status;
        });
    for (Endpoint endpoint : {Endpoint::kAcquire, Endpoint::kReport,
                              Endpoint::kReports, Endpoint::kDecide}) {
      listener_.Post(std::string(EndpointLabel(endpoint)),
                     [this, endpoint](const httplib::Request& request,
                                      httplib::Response& response,
                                      const httplib::ContentReader& read) {
                       PostWithBody(endpoint, request, response, read);
                     });
    }
    // Errors httplib answers by itself (a malformed request, a body it
    // could not read) get the API's JSON error body.
    listener_.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& request, httplib::Response& response) {
          if (!response.body.empty()) {
            return httplib::Server::HandlerResponse::Unhandled;  // ours
          }
          CloseAfterResponse(response);
          Send(EndpointForPath(request.path),
               TransportErrorReply(response.status), response);
          return httplib::Server::HandlerResponse::Handled;
        }));
    listener_.set_exception_handler([this](const httplib::Request& request,
                                           httplib::Response& response,
                                           std::exception_ptr) {
      CloseAfterResponse(response);
      Send(EndpointForPath(request.path),
           ErrorReply(absl::InternalError("the request failed")), response);
    });
  }

  void PostWithBody(Endpoint endpoint, const httplib::Request& request,
                    httplib::Response& response,
                    const httplib::ContentReader& read) {
    std::string body;
    bool too_large = false;
    const bool complete = read([&](const char* data, size_t size) {
      if (body.size() + size > kMaxBodyBytes) {
        too_large = true;
        return false;
      }
      body.append(data, size);
      return true;
    });
    if (too_large) {
      CloseAfterResponse(response);
      Send(endpoint, TransportErrorReply(413), response);
      return;
    }
    if (!complete) {
      CloseAfterResponse(response);
      Send(endpoint,
           ErrorReply(absl::InvalidArgumentError(
               "request body could not be read (cut short, or bad chunked "
               "encoding)")),
           response);
      return;
    }
    Send(endpoint, api_.Post(endpoint, body), response);
  }

  const DecisionApi api_;
  RequestCounters counters_;
  Connections connections_;
  Listener listener_;
  std::atomic<bool> serving_{false};
  // Set before a Stop closes the listener, so its end is not a failure.
  std::atomic<bool> stopping_{false};
  // The accept loop ended without a Stop; serving_ stays false.
  std::atomic<bool> failed_{false};
  int port_ = 0;
  std::thread thread_;  // runs listener_'s accept loop

  absl::Mutex stop_mu_;
  bool stopped_ ABSL_GUARDED_BY(stop_mu_) = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const HttpServerOptions& options, rpc::DecisionServiceImpl* service) {
  auto server = std::make_unique<HttpServerImpl>(options, service);
  if (absl::Status s = server->Bind(options.listen); !s.ok()) return s;
  return std::unique_ptr<HttpServer>(std::move(server));
}

}  // namespace sluice::http
