// SPDX-License-Identifier: Apache-2.0
#include "server/http/request_parser.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

// What Beast 1.74's parser does with each framing shape RFC 9112 says to
// refuse, checked by reading basic_parser.ipp and by
// tests/http/request_parser_test.cc; the rest is done here:
//   Content-Length with Transfer-Encoding (either order)  Beast refuses
//   two different Content-Lengths                        Beast refuses
//   the same Content-Length twice, or "26, 26"           Beast accepts; here
//                                                         refused (NGINX too)
//   Content-Length "+26" or " 2 6"                       Beast refuses
//   "Transfer-Encoding : chunked" (space before colon)   Beast refuses
//   Transfer-Encoding other than exactly "chunked"
//     ("xchunked", "%63hunked", "gzip, chunked")         Beast accepts
//                                                         (framing by
//                                                         length 0, or
//                                                         chunked); here
//                                                         refused
//   Transfer-Encoding on HTTP/1.0                        here refused
//   obs-fold (a line starting with SP or HTAB)           Beast unfolds it;
//                                                         here refused
//   HTTP/1.1 without Host, or two Hosts                  here refused
// Header values are never URL-decoded: they stay the bytes sent.

namespace sluice::http {

namespace beast_http = boost::beast::http;
using boost::beast::error_code;

// Beast's parser with the checks above. It parses one message only, so a
// new one is made for each request.
class RequestParser::Beast final : public beast_http::basic_parser<true> {
 public:
  Beast(RequestParser* owner, size_t head_bytes) : owner_(owner) {
    // The head's size was checked already; Beast sees the whole head at
    // once and must not refuse it again.
    header_limit(static_cast<std::uint32_t>(head_bytes + 1));
    // The body's limit is checked here, so that a Content-Length above it
    // reaches the caller, who answers it with its own message. (Not
    // boost::none: Beast 1.74 compares the length with the optional, and
    // every number is above none.)
    body_limit(std::numeric_limits<std::uint64_t>::max());
    eager(false);
  }

  bool in_body() const { return in_body_; }

 private:
  void Refuse(error_code& ec, int status, absl::string_view why) {
    owner_->Fail(status, why);
    ec = beast_http::error::bad_value;
  }

  void on_request_impl(beast_http::verb, boost::beast::string_view method,
                       boost::beast::string_view target, int version,
                       error_code&) override {
    ParsedHead& head = owner_->head_;
    head.method.assign(method.data(), method.size());
    head.target.assign(target.data(), target.size());
    head.version = version;
    absl::string_view path(target.data(), target.size());
    // Absolute form (RFC 9112 3.2.2): the path after the authority.
    for (absl::string_view scheme : {"http://", "https://"}) {
      if (path.size() > scheme.size() &&
          absl::StartsWithIgnoreCase(path, scheme)) {
        path.remove_prefix(scheme.size());
        const size_t slash = path.find('/');
        path = slash == absl::string_view::npos ? absl::string_view("/")
                                                : path.substr(slash);
        break;
      }
    }
    const absl::string_view bare = path.substr(0, path.find('?'));
    head.path.assign(bare.data(), bare.size());
  }

  void on_response_impl(int, boost::beast::string_view, int,
                        error_code& ec) override {
    ec = beast_http::error::bad_method;  // never called for requests
  }

  void on_field_impl(beast_http::field name, boost::beast::string_view name_sv,
                     boost::beast::string_view value_sv,
                     error_code& ec) override {
    if (in_body_) return;  // a trailer field: not used
    ParsedHead& head = owner_->head_;
    const absl::string_view value(value_sv.data(), value_sv.size());
    // Sizes fit: the whole head is below max_head_bytes.
    ParsedHead::FieldSpan span;
    span.name_at = static_cast<uint32_t>(head.field_bytes.size());
    span.name_size = static_cast<uint32_t>(name_sv.size());
    head.field_bytes.append(name_sv.data(), name_sv.size());
    span.value_at = static_cast<uint32_t>(head.field_bytes.size());
    span.value_size = static_cast<uint32_t>(value.size());
    head.field_bytes.append(value.data(), value.size());
    head.field_spans.push_back(span);
    switch (name) {
      case beast_http::field::content_length: {
        if (head.content_length.has_value()) {
          return Refuse(ec, 400, "more than one Content-Length");
        }
        uint64_t length = 0;
        if (value.empty() || value.size() > 19 ||
            !std::all_of(value.begin(), value.end(), absl::ascii_isdigit) ||
            !absl::SimpleAtoi(value, &length)) {
          return Refuse(ec, 400, "Content-Length is not a number");
        }
        head.content_length = length;
        return;
      }
      case beast_http::field::transfer_encoding:
        if (saw_transfer_encoding_) {
          return Refuse(ec, 400, "more than one Transfer-Encoding");
        }
        saw_transfer_encoding_ = true;
        if (!absl::EqualsIgnoreCase(value, "chunked")) {
          return Refuse(ec, 400,
                        "Transfer-Encoding other than \"chunked\" alone");
        }
        return;
      case beast_http::field::host:
        if (++hosts_ > 1) return Refuse(ec, 400, "more than one Host");
        return;
      case beast_http::field::content_type:
        if (head.content_type.has_value()) {
          return Refuse(ec, 400, "more than one Content-Type");
        }
        head.content_type = std::string(value);
        return;
      case beast_http::field::expect:
        if (absl::EqualsIgnoreCase(value, "100-continue")) {
          head.expect_continue = true;
        }
        return;
      default:
        return;
    }
  }

  void on_header_impl(error_code& ec) override {
    ParsedHead& head = owner_->head_;
    if (saw_transfer_encoding_ && head.version < 11) {
      return Refuse(ec, 400, "Transfer-Encoding in an HTTP/1.0 request");
    }
    if (head.version >= 11 && hosts_ == 0) {
      return Refuse(ec, 400, "HTTP/1.1 request without Host");
    }
    if (head.version < 11) head.expect_continue = false;
    head.chunked = chunked();
    head.has_body = head.chunked || head.content_length.value_or(0) > 0;
    head.keep_alive = keep_alive();
    in_body_ = true;
  }

  void on_body_init_impl(boost::optional<std::uint64_t> const& length,
                         error_code& ec) override {
    const size_t limit = owner_->limits_.max_body_bytes;
    if (length.has_value() && *length > limit) {
      return Refuse(ec, 413, "Content-Length above the body limit");
    }
    // Grows with what arrives, not with what was announced.
    owner_->body_.reserve(static_cast<size_t>(
        std::min<uint64_t>(length.value_or(0), 64 * 1024)));
  }

  std::size_t on_body_impl(boost::beast::string_view body,
                           error_code& ec) override {
    return Append(body, ec);
  }

  void on_chunk_header_impl(std::uint64_t size, boost::beast::string_view,
                            error_code& ec) override {
    const size_t limit = owner_->limits_.max_body_bytes;
    if (size > limit - std::min(limit, owner_->body_.size())) {
      Refuse(ec, 413, "chunked body above the body limit");
      return;
    }
    if (size > 0) {
      owner_->at_chunk_line_ = false;
      owner_->chunk_left_ = size;
    }
  }

  std::size_t on_chunk_body_impl(std::uint64_t remain,
                                 boost::beast::string_view body,
                                 error_code& ec) override {
    const size_t n = Append(body, ec);
    owner_->chunk_left_ = remain - std::min<uint64_t>(remain, n);
    if (!ec && owner_->chunk_left_ == 0) {
      owner_->at_chunk_line_ = true;
      owner_->after_chunk_ = true;
    }
    return n;
  }

  void on_finish_impl(error_code&) override {}

  std::size_t Append(boost::beast::string_view data, error_code& ec) {
    std::string& body = owner_->body_;
    if (data.size() > owner_->limits_.max_body_bytes - body.size()) {
      Refuse(ec, 413, "body above the body limit");
      return 0;
    }
    body.append(data.data(), data.size());
    return data.size();
  }

  RequestParser* const owner_;
  bool in_body_ = false;
  bool saw_transfer_encoding_ = false;
  int hosts_ = 0;
};

absl::string_view ParsedHead::field_name(size_t i) const {
  const FieldSpan& span = field_spans[i];
  return absl::string_view(field_bytes).substr(span.name_at, span.name_size);
}

absl::string_view ParsedHead::field_value(size_t i) const {
  const FieldSpan& span = field_spans[i];
  return absl::string_view(field_bytes).substr(span.value_at,
                                               span.value_size);
}

std::optional<absl::string_view> ParsedHead::FindField(
    absl::string_view name, size_t* count) const {
  std::optional<absl::string_view> found;
  size_t seen = 0;
  for (size_t i = 0; i < field_spans.size(); ++i) {
    if (!absl::EqualsIgnoreCase(field_name(i), name)) continue;
    if (!found.has_value()) found = field_value(i);
    ++seen;
  }
  if (count != nullptr) *count = seen;
  return found;
}

namespace {

// The largest body whose storage a connection keeps for its next request:
// an acquire or a report is a few hundred bytes.
constexpr size_t kKeptBodyBytes = 1024;

// The status for an error Beast found by itself.
int StatusForBeastError(const error_code& ec) {
  if (ec == beast_http::error::header_limit) return 431;
  if (ec == beast_http::error::body_limit) return 413;
  return 400;
}

}  // namespace

RequestParser::RequestParser(const RequestLimits& limits) : limits_(limits) {}

RequestParser::~RequestParser() = default;

void RequestParser::Reset() {
  state_ = State::kHead;
  started_ = false;
  scanned_ = 0;
  lines_ = 0;
  head_end_ = 0;
  at_chunk_line_ = true;
  after_chunk_ = false;
  chunk_left_ = 0;
  beast_.reset();
  // The strings keep their storage for the connection's next request (a
  // body only while small), so a keep-alive request allocates little.
  std::string method = std::move(head_.method);
  std::string target = std::move(head_.target);
  std::string path = std::move(head_.path);
  std::string field_bytes = std::move(head_.field_bytes);
  std::vector<ParsedHead::FieldSpan> field_spans =
      std::move(head_.field_spans);
  head_ = ParsedHead();
  method.clear();
  target.clear();
  path.clear();
  field_bytes.clear();
  field_spans.clear();
  head_.method = std::move(method);
  head_.target = std::move(target);
  head_.path = std::move(path);
  head_.field_bytes = std::move(field_bytes);
  head_.field_spans = std::move(field_spans);
  if (body_.capacity() > kKeptBodyBytes) {
    std::string().swap(body_);
  } else {
    body_.clear();
  }
  error_status_ = 0;
  error_.clear();
}

void RequestParser::Fail(int status, absl::string_view why) {
  if (state_ == State::kError) return;  // the first reason stands
  state_ = State::kError;
  error_status_ = status;
  error_ = std::string(why);
}

bool RequestParser::ScanHead(absl::string_view input) {
  size_t pos = scanned_;
  while (pos < input.size()) {
    const void* found =
        std::memchr(input.data() + pos, '\n', input.size() - pos);
    if (found == nullptr) break;
    const size_t nl = static_cast<size_t>(static_cast<const char*>(found) -
                                          input.data());
    const absl::string_view line = input.substr(pos, nl - pos);
    if (lines_ == 0) {
      if (nl + 1 > limits_.max_request_line_bytes) {
        Fail(414, "request line too long");
        return false;
      }
    } else if (line.empty() || line == "\r") {
      head_end_ = nl + 1;
      return true;
    } else if (line[0] == ' ' || line[0] == '\t') {
      Fail(400, "obsolete line folding (a header line starting with "
                "whitespace)");
      return false;
    } else if (lines_ > limits_.max_header_count) {
      Fail(431, "too many header fields");
      return false;
    }
    if (nl + 1 > limits_.max_head_bytes) {
      Fail(431, "request head too large");
      return false;
    }
    ++lines_;
    pos = nl + 1;
  }
  scanned_ = pos;
  if (lines_ == 0 && input.size() > limits_.max_request_line_bytes) {
    Fail(414, "request line too long");
  } else if (input.size() > limits_.max_head_bytes) {
    Fail(431, "request head too large");
  }
  return false;
}

size_t RequestParser::Consume(absl::string_view input) {
  size_t used = 0;
  if (state_ == State::kHead) {
    if (!started_) {
      // RFC 9112 2.2: empty lines before a request line are ignored.
      while (used < input.size() &&
             (input[used] == '\r' || input[used] == '\n')) {
        ++used;
      }
      input.remove_prefix(used);
      if (input.empty()) return used;
      started_ = true;
    }
    if (!ScanHead(input)) return used;
    beast_ = std::make_unique<Beast>(this, head_end_);
    error_code ec;
    const size_t n =
        beast_->put(boost::asio::const_buffer(input.data(), head_end_), ec);
    if (state_ == State::kError) return used;  // refused by a check here
    if (ec || n != head_end_ || !beast_->is_header_done()) {
      Fail(ec ? StatusForBeastError(ec) : 400,
           ec ? absl::StrCat("malformed request head: ", ec.message())
              : std::string("malformed request head"));
      return used;
    }
    used += head_end_;
    state_ = beast_->is_done() ? State::kComplete : State::kBody;
    // Stop after the head: the caller looks at it before any body byte.
    return used;
  }
  if (state_ != State::kBody) return 0;
  beast_->eager(true);
  while (used < input.size()) {
    // Beast reads a chunk-size line's extensions on past the line's end
    // into whatever follows, and when that asks for more it has already
    // taken the chunk's size off its own body limit, again at every retry:
    // the same bytes read in other pieces were answered 400 or 413. So it
    // gets each such line alone and whole (after the previous chunk's CRLF,
    // up to its LF), and each chunk's data up to its end and no further;
    // the answer then depends on the bytes alone. Waiting for the LF is
    // bounded below. A whole line that still asks for more is malformed,
    // unless it is the last chunk's (size 0), which needs its trailer
    // section too: that one gets the line and the section, up to the
    // section's empty line and no further.
    const bool line_alone = head_.chunked && at_chunk_line_;
    size_t size = input.size() - used;
    size_t from = used;  // where the chunk-size line starts
    absl::string_view chunk_size;  // the line's hex digits
    if (head_.chunked && !at_chunk_line_) {
      size = static_cast<size_t>(std::min<uint64_t>(size, chunk_left_));
    }
    if (line_alone) {
      if (after_chunk_) {
        // A chunk's data ends with CRLF.
        if (input.size() - used < 2) break;
        if (input.substr(used, 2) != "\r\n") {
          Fail(400, "malformed request body: bad chunk");
          return used;
        }
      }
      from = used + (after_chunk_ ? 2 : 0);
      const size_t lf = from >= input.size() ? absl::string_view::npos
                                             : input.find('\n', from);
      if (lf == absl::string_view::npos) break;
      size = lf + 1 - used;
      chunk_size = input.substr(from, lf - from);
      chunk_size = chunk_size.substr(
          0, chunk_size.find_first_not_of("0123456789abcdefABCDEF"));
    }
    error_code ec;
    size_t n = beast_->put(
        boost::asio::const_buffer(input.data() + used, size), ec);
    if (line_alone && ec == beast_http::error::need_more && n == 0 &&
        state_ != State::kError) {
      if (chunk_size.find_first_not_of('0') != absl::string_view::npos) {
        Fail(400, "malformed request body: bad chunk extension");
        return used;
      }
      const size_t end = input.find("\r\n\r\n", from);
      if (end == absl::string_view::npos) break;
      n = beast_->put(
          boost::asio::const_buffer(input.data() + used, end + 4 - used), ec);
    }
    used += n;
    if (state_ == State::kError) return used;
    if (ec == beast_http::error::need_more) break;
    if (ec) {
      Fail(StatusForBeastError(ec),
           absl::StrCat("malformed request body: ", ec.message()));
      return used;
    }
    if (beast_->is_done()) {
      state_ = State::kComplete;
      return used;
    }
    if (n == 0) break;
  }
  // Only a chunk-size line or the trailer section waits for more: bounded
  // like the head.
  if (input.size() - used > limits_.max_head_bytes) {
    Fail(400, "chunk-size line or trailer section too long");
  }
  return used;
}

void RequestParser::Finish() {
  if (state_ == State::kHead && !started_) return;
  if (state_ == State::kHead || state_ == State::kBody) {
    Fail(400, "request cut short by the end of the connection");
  }
}

ParseOutcome ParseRequest(absl::string_view bytes, const RequestLimits& limits,
                          size_t piece) {
  ParseOutcome out;
  RequestParser parser(limits);
  // The server holds at most this many bytes unconsumed (one read buffer).
  const size_t capacity = limits.max_head_bytes + 1;
  std::string pending;
  size_t fed = 0;
  while (true) {
    const size_t room = capacity - std::min(capacity, pending.size());
    const size_t take = std::min({bytes.size() - fed, room,
                                  piece == 0 ? bytes.size() : piece});
    pending.append(bytes.data() + fed, take);
    fed += take;
    const size_t n = parser.Consume(pending);
    pending.erase(0, n);
    out.consumed += n;
    // After the head, the server reads on into the body at once.
    if (parser.state() == RequestParser::State::kBody && n > 0) continue;
    if (parser.state() == RequestParser::State::kError) {
      out.kind = ParseOutcome::Kind::kRefused;
      out.status = parser.error_status();
      out.close = true;
      return out;
    }
    if (parser.state() == RequestParser::State::kComplete) {
      out.kind = ParseOutcome::Kind::kRequest;
      out.head = parser.head();
      out.body = std::move(parser.body());
      out.close = !out.head.keep_alive;
      return out;
    }
    if (fed == bytes.size() && take == 0 && n == 0) break;
    if (take == 0 && n == 0) {
      // A full buffer and no progress: the server would wait for ever.
      out.kind = ParseOutcome::Kind::kStalled;
      return out;
    }
  }
  return out;
}

}  // namespace sluice::http
