// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_HTTP_REQUEST_PARSER_H_
#define SLUICE_SERVER_HTTP_REQUEST_PARSER_H_

// How the HTTP server reads a request from the bytes a client sends: the
// sizes and counts it allows, and the framing it refuses, without any I/O,
// so that a test or a fuzzer drives it with bytes alone.
//
// The syntax is Boost.Beast's (http::basic_parser), through its public
// interface; this file adds what RFC 9112 asks of a server that Beast
// leaves to its user, and the bounds: the head is scanned line by line
// before Beast sees it, so no more than `max_head_bytes` are ever held, and
// every value that decides where a request ends is checked before a byte of
// its body is read. A refusal always closes the connection: after a
// framing error, nobody can tell where the next request starts.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace sluice::http {

// What one request may hold. Each limit answers a status of its own.
struct RequestLimits {
  // The request line ("POST /v1/acquire HTTP/1.1") with its CRLF: 414
  // beyond (NGINX's large_client_header_buffers default is 8 KiB).
  size_t max_request_line_bytes = 8 * 1024;
  // The whole head, request line and header fields: 431 beyond. Also the
  // most bytes a connection ever holds unparsed.
  size_t max_head_bytes = 64 * 1024;
  // Header fields: 431 beyond (Envoy's max_headers_count default).
  size_t max_header_count = 100;
  // The body, Content-Length or chunked: 413 beyond.
  size_t max_body_bytes = size_t{4} << 20;
};

// A request's head as the server acts on it. Header values are the bytes
// sent (never URL-decoded), without surrounding whitespace.
struct ParsedHead {
  std::string method;
  // The request-target as sent ("/v1/acquire?x=1").
  std::string target;
  // The target's path, without the query; for an absolute-form target
  // ("http://host/v1/acquire") the path after the authority.
  std::string path;
  int version = 11;  // 10 or 11
  std::optional<std::string> content_type;
  std::optional<uint64_t> content_length;
  bool chunked = false;
  // Whether a body follows the head (chunked, or a Content-Length above 0).
  bool has_body = false;
  // "Expect: 100-continue" on an HTTP/1.1 request.
  bool expect_continue = false;
  // Whether the connection may serve another request after this one
  // (HTTP/1.1 without "Connection: close", or HTTP/1.0 with keep-alive).
  bool keep_alive = true;

  // Every header field, in the order sent: its name as sent (FindField
  // compares ignoring case) and its value. Bounded by the head's limits.
  size_t field_count() const { return field_spans.size(); }
  absl::string_view field_name(size_t i) const;
  absl::string_view field_value(size_t i) const;
  // The value of the field `name` (any case), or nullopt when absent.
  // `count` (if given) is set to how many fields have that name, so that a
  // caller can refuse a field sent twice.
  std::optional<absl::string_view> FindField(absl::string_view name,
                                             size_t* count = nullptr) const;

  // Storage of the fields: their names and values one after the other,
  // and where each one is. Kept between requests, so that a keep-alive
  // connection does not allocate them again.
  struct FieldSpan {
    uint32_t name_at = 0;
    uint32_t name_size = 0;
    uint32_t value_at = 0;
    uint32_t value_size = 0;
  };
  std::string field_bytes;
  std::vector<FieldSpan> field_spans;
};

// Reads one request from the bytes of a connection, incrementally. Not
// thread-safe; one per connection, reused with Reset() between requests.
class RequestParser {
 public:
  enum class State {
    kHead,      // the head is not complete yet
    kBody,      // the head is read; its body is not complete yet
    kComplete,  // head and body read (or the head alone, without a body)
    kError,     // refused: answer error_status() and close
  };

  explicit RequestParser(const RequestLimits& limits = RequestLimits());
  ~RequestParser();
  RequestParser(const RequestParser&) = delete;
  RequestParser& operator=(const RequestParser&) = delete;

  // Reads what it can of `input`, the bytes received and not yet consumed,
  // and returns how many it consumed. The caller keeps the rest and passes
  // it again, followed by what it receives next. A head is consumed only
  // once complete (so input stays below max_head_bytes plus one read, or
  // this refuses it); Consume stops after the head, so that the caller can
  // refuse or accept it before the body is read (state() kBody), and at
  // the end of the request (bytes after it are the next request's).
  size_t Consume(absl::string_view input);

  // The client ended its side: a request cut short is an error (400) ...
  // or, when nothing of one arrived, not (state() stays kHead).
  void Finish();

  State state() const { return state_; }
  // Whether any byte of the current request has been seen.
  bool started() const { return started_; }
  // From kBody on.
  const ParsedHead& head() const { return head_; }
  // From kComplete on; the caller may move it out.
  std::string& body() { return body_; }
  // In kError: 400, 413, 414 or 431.
  int error_status() const { return error_status_; }
  // In kError: what was wrong, for a debug log line.
  absl::string_view error() const { return error_; }

  // Ready for the next request on the connection. Frees the body.
  void Reset();

 private:
  class Beast;
  friend class Beast;

  // Scans the head's new lines; true once the head's end is found
  // (head_end_ set), false while more is needed or on a refusal.
  bool ScanHead(absl::string_view input);
  void Fail(int status, absl::string_view why);

  const RequestLimits limits_;
  State state_ = State::kHead;
  bool started_ = false;
  // Head scanning: where the next unscanned byte is, how many lines were
  // seen, and where the head ends (the byte after its empty line).
  size_t scanned_ = 0;
  size_t lines_ = 0;
  size_t head_end_ = 0;
  // A chunked body: Beast is at a chunk-size line (the first, or the one
  // after a chunk's data and its CRLF). Such a line goes to Beast only
  // whole (see Consume).
  bool at_chunk_line_ = true;
  bool after_chunk_ = false;
  // Bytes of the current chunk's data Beast has not taken yet.
  uint64_t chunk_left_ = 0;
  std::unique_ptr<Beast> beast_;
  ParsedHead head_;
  std::string body_;
  int error_status_ = 0;
  std::string error_;
};

// What the server does with `bytes` received on a fresh connection (and
// nothing more): the request it serves, or the refusal it answers, or
// nothing yet. The function a fuzzer drives: the very parser the server
// uses, fed `bytes` in pieces of `piece` bytes (0: all at once), as reads
// from a socket would.
struct ParseOutcome {
  // kStalled is a defect of the parser: the server's buffer is full and the
  // parser takes nothing from it, so the connection would wait for ever.
  enum class Kind { kRequest, kRefused, kIncomplete, kStalled };
  Kind kind = Kind::kIncomplete;
  ParsedHead head;  // kRequest
  std::string body;  // kRequest
  int status = 0;     // kRefused: the status answered
  // Whether the connection closes after the answer (always for kRefused).
  bool close = false;
  // Bytes the request used; the rest belong to the next request.
  size_t consumed = 0;
};
ParseOutcome ParseRequest(absl::string_view bytes,
                          const RequestLimits& limits = RequestLimits(),
                          size_t piece = 0);

}  // namespace sluice::http

#endif  // SLUICE_SERVER_HTTP_REQUEST_PARSER_H_
