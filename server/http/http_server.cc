// SPDX-License-Identifier: Apache-2.0
#include "server/http/http_server.h"

#include <openssl/ssl.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <iterator>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/intrusive/list.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "server/http/decision_api.h"
#include "spdlog/spdlog.h"
#include "wire/address.h"

// How connections are served: a few threads each run an event loop with an
// acceptor on the shared socket; a connection lives on the loop that
// accepted it, so nothing of a connection is locked. One timer a connection
// enforces a deadline per phase; requests are bounded before anything is
// allocated for them; the connection cap is shared evenly by the loops; a
// connection with unread bytes lingers before it closes so that its answer
// is not reset away. The reasons, at length: docs/http.md, "How the server
// serves connections".

namespace sluice::http {
namespace {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
namespace bi = boost::intrusive;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

// The read buffer a connection starts with.
constexpr size_t kInitialBuffer = 4096;
// How long a closing connection may drain unread bytes or finish its TLS
// close_notify.
constexpr auto kLinger = std::chrono::seconds(1);
// File descriptors left for everything else (gRPC, Redis, files) when the
// connection cap meets RLIMIT_NOFILE.
constexpr rlim_t kReservedDescriptors = 1024;
// How long accepting pauses when the process is out of descriptors.
constexpr auto kAcceptRetry = std::chrono::milliseconds(50);

Clock::duration ToChrono(absl::Duration d) {
  return std::chrono::duration_cast<Clock::duration>(
      absl::ToChronoNanoseconds(std::max(d, absl::ZeroDuration())));
}

// Where a connection is. Handshake, idle and head are the phases a
// connection may be shed in.
enum class Phase {
  kHandshake,
  kIdle,
  kHead,
  kBody,
  kHandle,
  kWrite,
  kClosing,
  kClosed,
};

bool Sheddable(Phase phase) {
  return phase == Phase::kHandshake || phase == Phase::kIdle ||
         phase == Phase::kHead;
}

// The deadline counted when a connection in `phase` reaches it; none for
// handling a request, which writes its answer at once, or closing.
std::optional<Timeout> TimeoutIn(Phase phase) {
  switch (phase) {
    case Phase::kHandshake:
      return Timeout::kHandshake;
    case Phase::kIdle:
      return Timeout::kIdle;
    case Phase::kHead:
      return Timeout::kHead;
    case Phase::kBody:
      return Timeout::kBody;
    case Phase::kWrite:
      return Timeout::kWrite;
    default:
      return std::nullopt;
  }
}

// The reason label values of sluice_http_connections_closed_total and
// sluice_http_requests_rejected_total, in the order of Timeout and of
// Rejection.
constexpr absl::string_view kTimeoutReasons[] = {
    "timeout_handshake", "timeout_head", "timeout_body", "timeout_write",
    "timeout_idle"};
static_assert(std::size(kTimeoutReasons) == kTimeoutCount);
constexpr absl::string_view kRejectionReasons[] = {"framing", "limits"};
static_assert(std::size(kRejectionReasons) == kRejectionCount);

const char* Reason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 415:
      return "Unsupported Media Type";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 499:
      return "Client Closed Request";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Unknown";
  }
}

// Whether `value` can go into a response header field as it is: no CR, LF
// or NUL that would end the field early or split the response.
bool SafeFieldValue(absl::string_view value) {
  return value.find_first_of(absl::string_view("\r\n\0", 3)) ==
         absl::string_view::npos;
}

// What every loop and connection shares; owned by HttpServerImpl.
struct Shared {
  Shared(const HttpServerOptions& o, rpc::DecisionServiceImpl* service,
         rpc::HttpCheck* check)
      : options(o), api(service, check) {}

  // Connections open, all loops together, for Stop to wait on.
  void Opened() ABSL_LOCKS_EXCLUDED(mu) {
    absl::MutexLock lock(&mu);
    ++live;
  }
  void Closed() ABSL_LOCKS_EXCLUDED(mu) {
    absl::MutexLock lock(&mu);
    --live;
  }
  // Waits until no connection is open, or `deadline`; true if none is.
  bool AwaitNoConnections(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu) {
    absl::MutexLock lock(&mu);
    return mu.AwaitWithDeadline(
        absl::Condition(+[](int64_t* n) { return *n == 0; }, &live),
        deadline);
  }

  const HttpServerOptions options;
  const DecisionApi api;
  RequestCounters counters;
  std::atomic<bool> serving{false};
  std::atomic<bool> stopping{false};
  // Accepting failed for good; serving stays false.
  std::atomic<bool> failed{false};

  absl::Mutex mu;
  int64_t live ABSL_GUARDED_BY(mu) = 0;
};

// A loop's own counters: written by its thread, read by Stats().
struct LoopStats {
  std::atomic<int64_t> open{0};
  std::atomic<int64_t> idle{0};
  std::atomic<uint64_t> shed{0};
  std::atomic<uint64_t> refused{0};
  CountsBy<Timeout, kTimeoutCount, std::atomic<uint64_t>> timeouts;
  CountsBy<Rejection, kRejectionCount, std::atomic<uint64_t>> rejected;
};

void Bump(std::atomic<uint64_t>& counter) {
  counter.fetch_add(1, std::memory_order_relaxed);
}

// Adds one loop's counters into the sum of them all.
template <typename Kind, size_t kCount>
void AddTo(CountsBy<Kind, kCount>& sum,
           const CountsBy<Kind, kCount, std::atomic<uint64_t>>& loop) {
  for (size_t i = 0; i < kCount; ++i) {
    sum.values[i] += loop.values[i].load(std::memory_order_relaxed);
  }
}

class Loop;

using Hook = bi::list_member_hook<bi::link_mode<bi::auto_unlink>>;

// One connection; lives on one Loop's thread, which alone touches it. Kept
// alive by the handlers of its pending operations (its timer always has
// one while it is open).
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  virtual ~Connection() = default;
  virtual void Start() = 0;
  // Closes at once (shed, or cut at the end of a stop).
  virtual void CloseNow() = 0;
  // The server stops: closes at once if no request is under way, else
  // after the current answer.
  virtual void StopServing() = 0;

  Hook hook;
};

using ConnectionList =
    bi::list<Connection,
             bi::member_hook<Connection, Hook, &Connection::hook>,
             bi::constant_time_size<false>>;

// An event loop: its thread, its acceptor on the listening socket, and its
// connections.
class Loop {
 public:
  Loop(Shared* shared, size_t cap)
      : shared_(shared), cap_(cap), acceptor_(io_), retry_(io_) {}

  asio::io_context& io() { return io_; }
  Shared& shared() { return *shared_; }
  LoopStats& stats() { return stats_; }

  // Accepts on `fd`, this loop's own descriptor of the listening socket.
  void Listen(tcp::acceptor::protocol_type protocol, int fd) {
    error_code ec;
    acceptor_.assign(protocol, fd, ec);
    if (ec) {
      spdlog::error("HTTP API: cannot use the listening socket: {}",
                    ec.message());
    }
  }

  void Run() {
    thread_ = std::thread([this] {
      auto work = asio::make_work_guard(io_);
      Accept();
      io_.run();
    });
  }

  // From another thread: stop accepting, close the idle connections, and
  // close the others after their answer. `done` is notified once this loop
  // has done so (its listening descriptor is closed by then).
  void BeginStop(absl::Notification* done) {
    if (!thread_.joinable()) {  // never run (Start failed): nothing to stop
      error_code ignored;
      acceptor_.close(ignored);
      done->Notify();
      return;
    }
    asio::post(io_, [this, done] {
      stopping_ = true;
      error_code ignored;
      acceptor_.close(ignored);
      retry_.cancel();
      for (ConnectionList* list : {&sheddable_, &busy_}) {
        for (auto it = list->begin(); it != list->end();) {
          Connection& c = *it++;
          c.StopServing();
        }
      }
      done->Notify();
    });
  }
  // From another thread: close every connection now.
  void CutAll() {
    asio::post(io_, [this] {
      for (ConnectionList* list : {&sheddable_, &busy_}) {
        while (!list->empty()) list->front().CloseNow();
      }
    });
  }
  void Join() {
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }

  bool stopping() const { return stopping_; }

  // Connection bookkeeping, on this loop's thread only.
  void Add(Connection* c) {
    ++open_;
    stats_.open.fetch_add(1, std::memory_order_relaxed);
    busy_.push_back(*c);
  }
  // Into the sheddable list's end (it entered a sheddable phase now), or
  // into the busy list.
  void Place(Connection* c, bool sheddable) {
    c->hook.unlink();
    (sheddable ? sheddable_ : busy_).push_back(*c);
  }
  void Remove(Connection* c) {
    c->hook.unlink();
    --open_;
    stats_.open.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  void Accept();
  void OnAccept(tcp::socket socket);

  Shared* const shared_;
  const size_t cap_;
  // Declared first: destroyed last, after everything that uses it.
  asio::io_context io_{1};
  tcp::acceptor acceptor_;
  asio::steady_timer retry_;
  // Idle, handshaking and head-reading connections, oldest first; and the
  // rest.
  ConnectionList sheddable_;
  ConnectionList busy_;
  size_t open_ = 0;
  bool stopping_ = false;
  Clock::time_point last_descriptor_warning_{};
  LoopStats stats_;
  std::thread thread_;
};

// A connection over `Stream`: tcp::socket, or ssl::stream<tcp::socket>.
template <typename Stream>
class ConnectionImpl final : public Connection {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, tcp::socket>;

  template <typename... Args>
  ConnectionImpl(Loop* loop, Args&&... args)
      : loop_(loop),
        shared_(loop->shared()),
        options_(shared_.options),
        stream_(std::forward<Args>(args)...),
        timer_(loop->io()),
        parser_(options_.limits) {}

  void Start() override {
    loop_->Add(this);
    shared_.Opened();
    if constexpr (kTls) {
      Enter(Phase::kHandshake, options_.tls_handshake_timeout);
      stream_.async_handshake(
          ssl::stream_base::server,
          [self = Self()](const error_code& ec) { self->OnHandshake(ec); });
    } else {
      Enter(Phase::kHead, options_.head_timeout);
      ReadMore();
    }
  }

  void CloseNow() override {
    if (phase_ == Phase::kClosed) return;
    if (phase_ == Phase::kIdle) {
      loop_->stats().idle.fetch_sub(1, std::memory_order_relaxed);
    }
    phase_ = Phase::kClosed;
    loop_->Remove(this);
    shared_.Closed();
    error_code ignored;
    timer_.cancel();
    Socket().shutdown(tcp::socket::shutdown_both, ignored);
    Socket().close(ignored);
    in_.reset();
    in_capacity_ = in_begin_ = in_end_ = 0;
    parser_.Reset();
    std::string().swap(out_);
  }

  void StopServing() override {
    close_after_ = true;
    const bool nothing_under_way =
        phase_ == Phase::kIdle || phase_ == Phase::kHandshake ||
        (phase_ == Phase::kHead && !parser_.started() &&
         in_begin_ == in_end_);
    if (nothing_under_way) CloseNow();
  }

 private:
  std::shared_ptr<ConnectionImpl> Self() {
    return std::static_pointer_cast<ConnectionImpl>(shared_from_this());
  }

  tcp::socket& Socket() {
    if constexpr (kTls) {
      return stream_.next_layer();
    } else {
      return stream_;
    }
  }

  // Phases and deadlines.
  void Enter(Phase phase, absl::Duration timeout) {
    const bool was_idle = phase_ == Phase::kIdle;
    const bool sheddable_before = Sheddable(phase_);
    phase_ = phase;
    if (was_idle != (phase == Phase::kIdle)) {
      loop_->stats().idle.fetch_add(was_idle ? -1 : 1,
                                    std::memory_order_relaxed);
    }
    if (Sheddable(phase)) {
      loop_->Place(this, true);  // to the end: the newest in its phase
    } else if (sheddable_before) {
      loop_->Place(this, false);
    }
    Arm(Clock::now() + ToChrono(timeout));
  }

  // One timer per connection. A later deadline leaves the pending wait
  // alone (it re-arms when it fires); an earlier one re-arms it now.
  void Arm(Clock::time_point deadline) {
    deadline_ = deadline;
    if (timer_pending_ && timer_.expiry() <= deadline) return;
    timer_.expires_at(deadline);  // cancels a pending wait
    timer_pending_ = true;
    timer_.async_wait(
        [self = Self()](const error_code& ec) { self->OnTimer(ec); });
  }

  void OnTimer(const error_code& ec) {
    if (ec == asio::error::operation_aborted) return;  // re-armed or closed
    timer_pending_ = false;
    if (phase_ == Phase::kClosed) return;
    if (Clock::now() < deadline_) {
      Arm(deadline_);
      return;
    }
    if (const std::optional<Timeout> timeout = TimeoutIn(phase_)) {
      Bump(loop_->stats().timeouts[*timeout]);
    }
    CloseNow();
  }

  void OnHandshake(const error_code& ec) {
    if (phase_ == Phase::kClosed) return;
    if (ec) {
      // A scanner, or a client that does not trust the certificate: not
      // worth more than a debug line each.
      spdlog::debug("HTTP API: TLS handshake failed: {}", ec.message());
      CloseNow();
      return;
    }
    Enter(Phase::kHead, options_.head_timeout);
    ReadMore();
  }

  // Reading.

  // Room at the end of the read buffer: allocated, compacted or grown as
  // needed, never beyond max_head_bytes + 1. False when the buffer is full
  // of bytes the parser will not take (a defect: it refuses them first).
  bool MakeRoom() {
    const size_t most = options_.limits.max_head_bytes + 1;
    if (in_ == nullptr) {
      in_capacity_ = std::min(kInitialBuffer, most);
      in_ = std::make_unique<char[]>(in_capacity_);
      in_begin_ = in_end_ = 0;
    }
    if (in_begin_ == in_end_) in_begin_ = in_end_ = 0;
    if (in_end_ < in_capacity_) return true;
    if (in_begin_ > 0) {
      std::memmove(in_.get(), in_.get() + in_begin_, in_end_ - in_begin_);
      in_end_ -= in_begin_;
      in_begin_ = 0;
      return true;
    }
    if (in_capacity_ >= most) return false;
    const size_t grown = std::min(in_capacity_ * 2, most);
    auto bigger = std::make_unique<char[]>(grown);
    std::memcpy(bigger.get(), in_.get(), in_end_);
    in_ = std::move(bigger);
    in_capacity_ = grown;
    return true;
  }

  void ReadMore() {
    if (!MakeRoom()) {
      spdlog::error("HTTP API: a request's head filled the read buffer");
      CloseNow();
      return;
    }
    stream_.async_read_some(
        asio::buffer(in_.get() + in_end_, in_capacity_ - in_end_),
        [self = Self()](const error_code& ec, size_t n) {
          self->OnRead(ec, n);
        });
  }

  // Idle between requests: a plaintext connection waits for the socket to
  // become readable without holding a buffer; TLS reads (OpenSSL may hold
  // decrypted bytes the socket no longer shows).
  void AwaitNextRequest() {
    if (in_begin_ == in_end_ && in_capacity_ > kInitialBuffer) {
      in_.reset();
      in_capacity_ = in_begin_ = in_end_ = 0;
    }
    if constexpr (kTls) {
      ReadMore();
    } else {
      in_.reset();
      in_capacity_ = in_begin_ = in_end_ = 0;
      Socket().async_wait(tcp::socket::wait_read,
                          [self = Self()](const error_code& ec) {
                            if (self->phase_ != Phase::kIdle) return;
                            if (ec) {
                              self->CloseNow();
                              return;
                            }
                            self->Enter(Phase::kHead,
                                        self->options_.head_timeout);
                            self->ReadMore();
                          });
    }
  }

  void OnRead(const error_code& ec, size_t n) {
    if (phase_ == Phase::kClosed) return;
    if (phase_ == Phase::kClosing) {
      // Draining before the close: drop what came, stop at its end.
      if (ec) {
        CloseNow();
      } else {
        in_begin_ = in_end_ = 0;
        ReadMore();
      }
      return;
    }
    if (ec) {
      // The client went away (or a request was cut short): nobody to
      // answer.
      CloseNow();
      return;
    }
    in_end_ += n;
    if (phase_ == Phase::kIdle) Enter(Phase::kHead, options_.head_timeout);
    Process();
  }

  // Feeds the parser what was read and acts on where it got to.
  void Process() {
    while (true) {
      const size_t n = parser_.Consume(
          absl::string_view(in_.get() + in_begin_, in_end_ - in_begin_));
      in_begin_ += n;
      switch (parser_.state()) {
        case RequestParser::State::kError:
          RespondToRefusal();
          return;
        case RequestParser::State::kHead:
          ReadMore();
          return;
        case RequestParser::State::kBody:
          if (!head_seen_) {
            head_seen_ = true;
            if (!OnHead()) return;
            continue;
          }
          if (n == 0 || in_begin_ == in_end_) {
            ReadMore();
            return;
          }
          continue;
        case RequestParser::State::kComplete:
          if (!head_seen_) {
            head_seen_ = true;
            if (!OnHead()) return;
          }
          Handle();
          return;
      }
    }
  }

  // The head is read: answer what it alone decides, or go on to the body.
  // False when it answered (or a 100 Continue is on its way).
  bool OnHead() {
    const ParsedHead& head = parser_.head();
    endpoint_ = EndpointForPath(head.path);
    RequestHead request;
    request.method = head.method;
    request.path = head.path;
    request.content_type = head.content_type;
    request.content_length = head.content_length;
    const bool body_unread =
        parser_.state() != RequestParser::State::kComplete;
    if (std::optional<Reply> refusal = DecisionApi::Check(request)) {
      Respond(*refusal, body_unread);
      return false;
    }
    if (endpoint_ == Endpoint::kHealth) {
      Respond(DecisionApi::Health(
                  shared_.serving.load(std::memory_order_relaxed)),
              body_unread);
      return false;
    }
    if (endpoint_ == Endpoint::kCheck && body_unread &&
        (head.chunked ||
         head.content_length.value_or(0) > kMaxCheckBodyBytes)) {
      // The decision needs no body: answer now, and close after draining
      // what the client still sends (for kLinger at most), rather than
      // buffer a body only to drop it.
      Enter(Phase::kHandle, options_.write_timeout);
      Respond(shared_.api.CheckForward(head), true);
      return false;
    }
    if (!body_unread) return true;
    Enter(Phase::kBody, options_.body_timeout);
    if (head.expect_continue && in_begin_ == in_end_) {
      // The client waits for this before it sends the body.
      static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(stream_,
                        asio::buffer(kContinue, sizeof(kContinue) - 1),
                        [self = Self()](const error_code& ec, size_t) {
                          if (self->phase_ == Phase::kClosed) return;
                          if (ec) {
                            self->CloseNow();
                            return;
                          }
                          self->ReadMore();
                        });
      return false;
    }
    return true;
  }

  void Handle() {
    Enter(Phase::kHandle, options_.write_timeout);
    if (endpoint_ == Endpoint::kCheck) {
      // A small body (at most kMaxCheckBodyBytes) was read; it is dropped.
      Respond(shared_.api.CheckForward(parser_.head()), false);
      return;
    }
    Respond(shared_.api.Post(endpoint_, parser_.body()), false);
  }

  void RespondToRefusal() {
    const int status = parser_.error_status();
    Bump(loop_->stats().rejected[status == 400 ? Rejection::kFraming
                                               : Rejection::kLimits]);
    spdlog::debug("HTTP API: request refused ({}): {}", status,
                  std::string(parser_.error()));
    endpoint_ = parser_.state() == RequestParser::State::kError &&
                        !parser_.head().path.empty()
                    ? EndpointForPath(parser_.head().path)
                    : Endpoint::kUnknown;
    Respond(TransportErrorReply(status), true);
  }

  // Writes `reply`; `unread` says the request's bytes were not all read,
  // so the connection closes after it.
  void Respond(const Reply& reply, bool unread) {
    shared_.counters.Add(endpoint_, reply.status);
    ++served_;
    const bool refused = parser_.state() == RequestParser::State::kError;
    const ParsedHead& head = parser_.head();
    if (unread || refused) {
      close_after_ = true;
      linger_ = true;
    }
    if (refused || !head.keep_alive || shared_.stopping.load() ||
        loop_->stopping() ||
        served_ >= std::max(1, options_.max_requests_per_connection)) {
      close_after_ = true;
    }
    out_.clear();
    absl::StrAppend(&out_, "HTTP/1.1 ", reply.status, " ",
                    Reason(reply.status), "\r\nContent-Type: ",
                    SafeFieldValue(reply.content_type)
                        ? absl::string_view(reply.content_type)
                        : absl::string_view("application/octet-stream"),
                    "\r\nContent-Length: ", reply.body.size(), "\r\n");
    if (!reply.allow.empty()) absl::StrAppend(&out_, "Allow: ", reply.allow,
                                              "\r\n");
    for (const auto& [name, value] : reply.headers) {
      if (!SafeFieldValue(name) || name.empty() || !SafeFieldValue(value)) {
        continue;
      }
      absl::StrAppend(&out_, name, ": ", value, "\r\n");
    }
    if (close_after_) {
      out_.append("Connection: close\r\n");
    } else {
      if (head.version < 11) out_.append("Connection: keep-alive\r\n");
      absl::StrAppend(&out_, "Keep-Alive: timeout=",
                      absl::ToInt64Seconds(options_.idle_timeout),
                      ", max=", options_.max_requests_per_connection, "\r\n");
    }
    out_.append("\r\n");
    if (refused || head.method != "HEAD") out_.append(reply.body);
    Enter(Phase::kWrite, options_.write_timeout);
    asio::async_write(stream_, asio::buffer(out_),
                      [self = Self()](const error_code& ec, size_t) {
                        self->OnWritten(ec);
                      });
  }

  void OnWritten(const error_code& ec) {
    if (phase_ == Phase::kClosed) return;
    if (ec) {
      CloseNow();
      return;
    }
    if (close_after_) {
      Finish();
      return;
    }
    parser_.Reset();
    head_seen_ = false;
    if (out_.capacity() > 16 * 1024) std::string().swap(out_);
    if (in_begin_ < in_end_) {  // a pipelined request
      Enter(Phase::kHead, options_.head_timeout);
      Process();
      return;
    }
    Enter(Phase::kIdle, options_.idle_timeout);
    AwaitNextRequest();
  }

  // Closes after the last answer: a TLS close_notify, or a drain of the
  // bytes still coming when some were left unread; then the socket.
  void Finish() {
    Enter(Phase::kClosing, absl::FromChrono(kLinger));
    if constexpr (kTls) {
      stream_.async_shutdown([self = Self()](const error_code&) {
        self->CloseNow();
      });
    } else {
      if (!linger_ && in_begin_ == in_end_) {
        CloseNow();
        return;
      }
      error_code ignored;
      Socket().shutdown(tcp::socket::shutdown_send, ignored);
      in_begin_ = in_end_ = 0;
      ReadMore();
    }
  }

  Loop* const loop_;
  Shared& shared_;
  const HttpServerOptions& options_;
  Stream stream_;
  asio::steady_timer timer_;
  Clock::time_point deadline_{};
  bool timer_pending_ = false;
  Phase phase_ = Phase::kHead;
  RequestParser parser_;
  bool head_seen_ = false;
  Endpoint endpoint_ = Endpoint::kUnknown;
  std::unique_ptr<char[]> in_;
  size_t in_capacity_ = 0;
  size_t in_begin_ = 0;
  size_t in_end_ = 0;
  std::string out_;
  int served_ = 0;
  bool close_after_ = false;
  bool linger_ = false;
};

void Loop::Accept() {
  if (stopping_ || !acceptor_.is_open()) return;
  acceptor_.async_accept(io_, [this](const error_code& ec,
                                     tcp::socket socket) {
    if (ec == asio::error::operation_aborted || stopping_) return;
    if (ec == asio::error::no_descriptors ||
        ec.value() == ENFILE || ec == asio::error::no_buffer_space ||
        ec == asio::error::no_memory) {
      // Out of descriptors: make room by shedding, and pause accepting
      // (the listening socket stays readable, so retrying at once spins).
      const Clock::time_point now = Clock::now();
      if (now - last_descriptor_warning_ > std::chrono::seconds(10)) {
        last_descriptor_warning_ = now;
        spdlog::warn("HTTP API: cannot accept a connection ({}); shedding "
                     "idle connections (raise the file-descriptor limit or "
                     "lower --http-max-connections)",
                     ec.message());
      }
      if (!sheddable_.empty()) {
        Bump(stats_.shed);
        sheddable_.front().CloseNow();
      }
      retry_.expires_after(kAcceptRetry);
      retry_.async_wait([this](const error_code& e) {
        if (!e) Accept();
      });
      return;
    }
    if (ec && ec != asio::error::connection_aborted &&
        ec != asio::error::interrupted && ec != asio::error::would_block &&
        ec != asio::error::try_again && ec.value() != EPROTO &&
        ec.value() != EPERM) {
      // Not a client's doing and not passing: say so, and stop calling the
      // API healthy, rather than go quiet (or spin).
      shared_->failed.store(true);
      shared_->serving.store(false);
      spdlog::error("the HTTP API stopped accepting connections (accept "
                    "failed: {}); /v1/health now answers 503, the gRPC "
                    "listeners go on",
                    ec.message());
      return;
    }
    if (!ec) OnAccept(std::move(socket));
    Accept();
  });
}

void Loop::OnAccept(tcp::socket socket) {
  const HttpServerOptions& options = shared_->options;
  error_code ignored;
  if (open_ >= cap_) {
    if (sheddable_.empty()) {
      // Every connection is busy with a request: turn this one away, with
      // one non-blocking send at most.
      Bump(stats_.refused);
      if (!options.tls_context) {
        static constexpr char kBusy[] =
            "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n"
            "Retry-After: 1\r\nContent-Length: 0\r\n\r\n";
        socket.non_blocking(true, ignored);
        socket.send(asio::buffer(kBusy, sizeof(kBusy) - 1), 0, ignored);
      }
      socket.close(ignored);
      return;
    }
    Bump(stats_.shed);
    sheddable_.front().CloseNow();
  }
  socket.set_option(tcp::no_delay(true), ignored);
  std::shared_ptr<Connection> connection;
  if (options.tls_context) {
    const std::shared_ptr<SSL_CTX> context = options.tls_context();
    // asio's context takes the handle over and, once destroyed, frees the
    // password-callback data and app data it finds on it; the contexts
    // served here set neither, and one that does is not handed to it.
    if (context == nullptr || SSL_CTX_get_app_data(context.get()) != nullptr ||
        SSL_CTX_get_default_passwd_cb_userdata(context.get()) != nullptr) {
      spdlog::error("HTTP API: no usable TLS context; connection closed");
      socket.close(ignored);
      return;
    }
    SSL_CTX_up_ref(context.get());
    ssl::context wrapper(context.get());  // the SSL made below holds a ref
    connection = std::make_shared<ConnectionImpl<ssl::stream<tcp::socket>>>(
        this, std::move(socket), wrapper);
  } else {
    connection =
        std::make_shared<ConnectionImpl<tcp::socket>>(this, std::move(socket));
  }
  connection->Start();
}

// The connection cap that RLIMIT_NOFILE allows: raises the soft limit to
// the hard one when the cap needs more, and lowers the cap when even that
// is too small.
size_t ConnectionCap(int wanted) {
  const rlim_t want = static_cast<rlim_t>(std::max(1, wanted));
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return want;
  const rlim_t needed = want + kReservedDescriptors;
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < needed &&
      (limit.rlim_max == RLIM_INFINITY || limit.rlim_cur < limit.rlim_max)) {
    const rlim_t before = limit.rlim_cur;
    rlimit raised = limit;
    raised.rlim_cur =
        limit.rlim_max == RLIM_INFINITY ? needed : limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      limit = raised;
      spdlog::info(
          "raised the open-file limit (RLIMIT_NOFILE) from {} to {} for up "
          "to {} HTTP connections",
          before, limit.rlim_cur, want);
    } else {
      spdlog::warn("cannot raise the open-file limit (RLIMIT_NOFILE) from "
                   "{}: {}",
                   before, std::strerror(errno));
    }
  }
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= needed) {
    return want;
  }
  const rlim_t reserve = std::min(kReservedDescriptors, limit.rlim_cur / 2);
  const rlim_t cap = std::max<rlim_t>(1, limit.rlim_cur - reserve);
  spdlog::warn(
      "HTTP connections capped at {} (not {}) by the open-file limit "
      "(RLIMIT_NOFILE {}); raise its hard limit to serve more",
      cap, want, limit.rlim_cur);
  return cap;
}

class HttpServerImpl final : public HttpServer {
 public:
  HttpServerImpl(const HttpServerOptions& options,
                 rpc::DecisionServiceImpl* service, rpc::HttpCheck* check)
      : shared_(options, service, check) {}

  ~HttpServerImpl() override { Stop(absl::Now()); }

  absl::Status Bind() {
    const std::string& listen = shared_.options.listen;
    if (absl::StartsWith(listen, "unix:")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the HTTP API is served over TCP only (HOST:PORT), got \"", listen,
          "\""));
    }
    absl::StatusOr<wire::HostPort> address = wire::ParseHostPort(listen);
    if (!address.ok()) return address.status();
    std::string host = address->host;
    if (absl::StartsWith(host, "[")) {
      host = std::string(absl::StripSuffix(absl::StripPrefix(host, "["), "]"));
    }
    const size_t threads =
        static_cast<size_t>(std::max(1, shared_.options.io_threads));
    const size_t cap = ConnectionCap(shared_.options.max_connections);
    for (size_t i = 0; i < threads; ++i) {
      loops_.push_back(std::make_unique<Loop>(
          &shared_, (cap + threads - 1) / threads));
    }
    const absl::Status unavailable = absl::UnavailableError(
        absl::StrCat("cannot serve the HTTP API on ", listen,
                     " (address in use or not available?)"));
    error_code ec;
    tcp::resolver resolver(loops_[0]->io());
    const tcp::resolver::results_type endpoints = resolver.resolve(
        host, std::to_string(address->port),
        tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (ec || endpoints.empty()) return unavailable;
    const tcp::endpoint endpoint = endpoints.begin()->endpoint();
    tcp::acceptor acceptor(loops_[0]->io());
    acceptor.open(endpoint.protocol(), ec);
    // No SO_REUSEPORT: with it a second sluiced on the same port would
    // bind and quietly take half the connections.
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(SOMAXCONN, ec);
    if (ec) return unavailable;
    port_ = acceptor.local_endpoint(ec).port();
    if (ec) return unavailable;
    // Each loop accepts on its own descriptor of the one listening socket.
    const int fd = acceptor.release(ec);
    if (ec) return unavailable;
    for (size_t i = 0; i < loops_.size(); ++i) {
      const int own = i == 0 ? fd : ::dup(fd);
      if (own < 0) {
        return absl::InternalError(absl::StrCat(
            "cannot serve the HTTP API: dup: ", std::strerror(errno)));
      }
      loops_[i]->Listen(endpoint.protocol(), own);
    }
    for (const std::unique_ptr<Loop>& loop : loops_) loop->Run();
    return absl::OkStatus();
  }

  int port() const override { return port_; }

  void SetServing(bool serving) override {
    shared_.serving.store(serving && !shared_.failed.load(),
                          std::memory_order_relaxed);
  }

  void Stop(absl::Time deadline) override ABSL_LOCKS_EXCLUDED(stop_mu_) {
    absl::MutexLock lock(&stop_mu_);
    if (stopped_) return;
    stopped_ = true;
    shared_.serving.store(false, std::memory_order_relaxed);
    shared_.stopping.store(true);
    // Every loop closes its listening descriptor before Stop can return:
    // once the connections are gone, Join stops the loops, and a handler
    // still queued then would never run, leaving the port open.
    std::vector<absl::Notification> stopped(loops_.size());
    for (size_t i = 0; i < loops_.size(); ++i) {
      loops_[i]->BeginStop(&stopped[i]);
    }
    for (absl::Notification& n : stopped) n.WaitForNotification();
    if (!shared_.AwaitNoConnections(deadline)) {
      for (const std::unique_ptr<Loop>& loop : loops_) loop->CutAll();
      // Cutting is immediate on each loop; the wait is for the loops to
      // get to it.
      shared_.AwaitNoConnections(absl::Now() + absl::Seconds(5));
    }
    for (const std::unique_ptr<Loop>& loop : loops_) loop->Join();
  }

  HttpStats Stats() const override {
    HttpStats stats;
    stats.requests = shared_.counters.Snapshot();
    auto load = [](const auto& counter) {
      return counter.load(std::memory_order_relaxed);
    };
    for (const std::unique_ptr<Loop>& loop : loops_) {
      const LoopStats& s = loop->stats();
      stats.connections += load(s.open);
      stats.idle += load(s.idle);
      stats.shed += load(s.shed);
      stats.refused += load(s.refused);
      AddTo(stats.timeouts, s.timeouts);
      AddTo(stats.rejected, s.rejected);
    }
    return stats;
  }

 private:
  Shared shared_;
  std::vector<std::unique_ptr<Loop>> loops_;
  int port_ = 0;

  absl::Mutex stop_mu_;
  bool stopped_ ABSL_GUARDED_BY(stop_mu_) = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const HttpServerOptions& options, rpc::DecisionServiceImpl* service,
    rpc::HttpCheck* check) {
  auto server = std::make_unique<HttpServerImpl>(options, service, check);
  if (absl::Status s = server->Bind(); !s.ok()) return s;
  return std::unique_ptr<HttpServer>(std::move(server));
}

void HttpServer::WriteStats(base::StatsWriter& out) const {
  const HttpStats s = Stats();
  static constexpr base::MetricDef kHttpRequests = base::CounterDef(
      "sluice_http_requests_total", {"endpoint", "code"},
      "Requests the HTTP/JSON API answered, by endpoint (/v1/acquire, ..., "
      "or other for an unknown path) and HTTP status (other for a status "
      "outside the counted set). Only with --http-listen.");
  for (const RequestCounters::Count& c : s.requests) {
    out.Write(kHttpRequests, {EndpointLabel(c.endpoint), c.code},
              static_cast<double>(c.count));
  }
  static constexpr base::MetricDef kHttpConnections = base::GaugeDef(
      "sluice_http_connections", {"state"},
      "HTTP API connections now: active (in a TLS handshake or a request), "
      "idle (keep-alive, between requests) and waiting (always 0: no "
      "connection waits for a thread). Only with --http-listen.");
  for (const auto& [state, n] :
       {std::pair<const char*, int64_t>{"active", s.connections - s.idle},
        {"idle", s.idle},
        {"waiting", s.waiting}}) {
    out.Write(kHttpConnections, {state},
              static_cast<double>(static_cast<uint64_t>(n)));
  }
  static constexpr base::MetricDef kHttpConnectionsClosed = base::CounterDef(
      "sluice_http_connections_closed_total", {"reason"},
      "HTTP API connections the server closed early, by reason: shed (to "
      "make room for a new one at --http-max-connections), refused (a new "
      "one when none could be shed), or a deadline: timeout_handshake, "
      "timeout_head, timeout_body, timeout_write, timeout_idle. Only with "
      "--http-listen.");
  out.WriteBy(kHttpConnectionsClosed,
              {{"shed", s.shed}, {"refused", s.refused}});
  for (size_t i = 0; i < kTimeoutCount; ++i) {
    out.Write(kHttpConnectionsClosed, {kTimeoutReasons[i]},
              static_cast<double>(s.timeouts.values[i]));
  }
  static constexpr base::MetricDef kHttpRequestsRejected = base::CounterDef(
      "sluice_http_requests_rejected_total", {"reason"},
      "HTTP API requests refused before they were read, then their "
      "connection closed: framing (malformed or ambiguous, 400) or limits "
      "(request line 414, head 431, body 413). Only with --http-listen.");
  for (size_t i = 0; i < kRejectionCount; ++i) {
    out.Write(kHttpRequestsRejected, {kRejectionReasons[i]},
              static_cast<double>(s.rejected.values[i]));
  }
}

}  // namespace sluice::http
