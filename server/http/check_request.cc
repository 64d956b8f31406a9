// SPDX-License-Identifier: Apache-2.0
#include "server/http/check_request.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "wire/quote.h"

namespace sluice::http {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// RFC 9110 tchar: what a header name and a method are made of.
bool IsTokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         absl::StrContains("!#$%&'*+-.^_`|~", c);
}

bool IsToken(absl::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), IsTokenChar);
}

// The value of the header `name`, refusing it twice: two values of a
// header that says what the original request was leave it ambiguous.
absl::StatusOr<std::optional<absl::string_view>> SingleField(
    const ParsedHead& head, absl::string_view name) {
  size_t count = 0;
  std::optional<absl::string_view> value = head.FindField(name, &count);
  if (count > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the header ", name, " is sent ", count,
                     " times; a check takes it once"));
  }
  return value;
}

// "host", "host:port", "[v6]" or "[v6]:port" -> the host, lowercased and
// without the port. INVALID_ARGUMENT for anything else (a path, user
// information, spaces).
absl::StatusOr<std::string> HostWithoutPort(absl::string_view authority,
                                            absl::string_view from) {
  absl::string_view host = authority;
  if (absl::StartsWith(host, "[")) {
    const size_t close = host.find(']');
    if (close == absl::string_view::npos ||
        (close + 1 < host.size() && host[close + 1] != ':')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the host in ", from, " is not a host name or address: ",
          wire::QuoteUntrusted(authority)));
    }
    host = host.substr(0, close + 1);
  } else {
    host = host.substr(0, host.find(':'));
  }
  const bool valid =
      !host.empty() && std::all_of(host.begin(), host.end(), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
               c == '.' || c == '-' || c == '_' || c == '[' || c == ']' ||
               c == ':';
      });
  if (!valid) {
    return absl::InvalidArgumentError(
        absl::StrCat("the host in ", from, " is not a host name or address: ",
                     wire::QuoteUntrusted(authority)));
  }
  return absl::AsciiStrToLower(host);
}

// A request target's path: without the query string and fragment.
absl::StatusOr<std::string> PathOf(absl::string_view target,
                                   absl::string_view from) {
  const absl::string_view path = target.substr(0, target.find_first_of("?#"));
  if (!absl::StartsWith(path, "/")) {
    return absl::InvalidArgumentError(
        absl::StrCat("the path in ", from, " does not start with '/': ",
                     wire::QuoteUntrusted(target)));
  }
  return std::string(path);
}

}  // namespace

bool IsCheckPath(absl::string_view path) {
  return absl::StartsWith(path, kCheckPath) &&
         (path.size() == kCheckPath.size() || path[kCheckPath.size()] == '/');
}

absl::StatusOr<std::string> PercentDecode(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '+') {
      out.push_back(' ');
    } else if (c != '%') {
      out.push_back(c);
    } else {
      const int hi = i + 1 < text.size() ? HexValue(text[i + 1]) : -1;
      const int lo = i + 2 < text.size() ? HexValue(text[i + 2]) : -1;
      if (hi < 0 || lo < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a '%' not followed by two hex digits in ",
            wire::QuoteUntrusted(text)));
      }
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    }
  }
  if (!wire::IsValidUtf8(out)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not valid UTF-8 once decoded: ", wire::QuoteUntrusted(text)));
  }
  return out;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseQuery(
    absl::string_view query) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t pieces = 0;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const absl::string_view piece = query.substr(0, amp);
    query = amp == absl::string_view::npos ? absl::string_view()
                                           : query.substr(amp + 1);
    if (piece.empty()) continue;
    if (++pieces > kMaxQueryParameters) {
      return absl::InvalidArgumentError(absl::StrCat(
          "more than ", kMaxQueryParameters, " query parameters"));
    }
    const size_t eq = piece.find('=');
    absl::StatusOr<std::string> name = PercentDecode(piece.substr(0, eq));
    if (!name.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("query parameter name: ", name.status().message()));
    }
    absl::StatusOr<std::string> value =
        eq == absl::string_view::npos ? std::string()
                                      : PercentDecode(piece.substr(eq + 1));
    if (!value.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("query parameter ", wire::QuoteUntrusted(*name), ": ",
                       value.status().message()));
    }
    for (const auto& [seen, unused] : out) {
      if (seen == *name) {
        return absl::InvalidArgumentError(
            absl::StrCat("the query parameter ", wire::QuoteUntrusted(*name),
                         " is given twice"));
      }
    }
    out.emplace_back(*std::move(name), *std::move(value));
  }
  return out;
}

absl::StatusOr<CheckParameters> ParseCheckParameters(absl::string_view query) {
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> pairs =
      ParseQuery(query);
  if (!pairs.ok()) return pairs.status();
  CheckParameters out;
  for (auto& [name, value] : *pairs) {
    if (name == "dependency") {
      out.dependency = std::move(value);
    } else if (name == "key") {
      out.key = std::move(value);
    } else if (name == "key_header") {
      if (!IsToken(value)) {
        return absl::InvalidArgumentError(
            absl::StrCat("key_header is not a header name: ",
                         wire::QuoteUntrusted(value)));
      }
      out.key_header = absl::AsciiStrToLower(value);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown query parameter ", wire::QuoteUntrusted(name),
          " (a check takes dependency, key and key_header)"));
    }
  }
  return out;
}

absl::StatusOr<CheckParameters> CheckParametersOf(const ParsedHead& head) {
  if (head.path != kCheckPath) return CheckParameters();
  const size_t mark = head.target.find('?');
  if (mark == std::string::npos) return CheckParameters();
  absl::string_view query = absl::string_view(head.target).substr(mark + 1);
  // A fragment is never sent, but if it is, it is not a parameter.
  query = query.substr(0, query.find('#'));
  return ParseCheckParameters(query);
}

absl::StatusOr<ForwardedRequest> ForwardedRequestOf(const ParsedHead& head) {
  ForwardedRequest out;
  absl::StatusOr<std::optional<absl::string_view>> original_url =
      SingleField(head, "x-original-url");
  if (!original_url.ok()) return original_url.status();
  // X-Original-URL (ingress-nginx) is absolute: scheme://authority/path?q.
  std::optional<absl::string_view> url_authority, url_target;
  if (original_url->has_value()) {
    absl::string_view url = **original_url;
    const size_t scheme_end = url.find("://");
    if (scheme_end == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("X-Original-URL is not an absolute URL: ",
                       wire::QuoteUntrusted(url)));
    }
    url.remove_prefix(scheme_end + 3);
    const size_t slash = url.find_first_of("/?#");
    url_authority = url.substr(0, slash);
    url_target = slash == absl::string_view::npos ? absl::string_view("/")
                                                  : url.substr(slash);
    if (absl::StartsWith(*url_target, "?")) url_target = "/";
  }

  absl::StatusOr<std::optional<absl::string_view>> host =
      SingleField(head, "x-forwarded-host");
  if (!host.ok()) return host.status();
  absl::string_view host_from = "X-Forwarded-Host";
  if (!host->has_value() && url_authority.has_value()) {
    *host = url_authority;
    host_from = "X-Original-URL";
  }
  if (!host->has_value()) {
    *host = head.FindField("host");  // the parser refuses two
    host_from = "Host";
  }
  if (host->has_value() && !(*host)->empty()) {
    // user@host is not a host: "a@b" is refused with the rest.
    absl::StatusOr<std::string> bare = HostWithoutPort(**host, host_from);
    if (!bare.ok()) return bare.status();
    out.host = *std::move(bare);
  }

  absl::StatusOr<std::optional<absl::string_view>> uri =
      SingleField(head, "x-forwarded-uri");
  if (!uri.ok()) return uri.status();
  absl::string_view uri_from = "X-Forwarded-Uri";
  if (!uri->has_value()) {
    uri = SingleField(head, "x-original-uri");
    if (!uri.ok()) return uri.status();
    uri_from = "X-Original-URI";
  }
  if (!uri->has_value() && url_target.has_value()) {
    *uri = url_target;
    uri_from = "X-Original-URL";
  }
  if (uri->has_value()) {
    absl::StatusOr<std::string> path = PathOf(**uri, uri_from);
    if (!path.ok()) return path.status();
    out.path = *std::move(path);
  } else {
    // The parser keeps a fragment a client sent (a gateway sends none); it
    // is not part of the original path.
    absl::string_view rest =
        absl::string_view(head.path).substr(kCheckPath.size());
    rest = rest.substr(0, rest.find('#'));
    out.path = rest.empty() ? "/" : std::string(rest);
  }

  absl::StatusOr<std::optional<absl::string_view>> method =
      SingleField(head, "x-forwarded-method");
  if (!method.ok()) return method.status();
  if (!method->has_value()) {
    method = SingleField(head, "x-original-method");
    if (!method.ok()) return method.status();
  }
  if (method->has_value()) {
    if (!IsToken(**method)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the forwarded method is not a method: ",
                       wire::QuoteUntrusted(**method)));
    }
    out.method = std::string(**method);
  } else {
    out.method = head.method;
  }
  return out;
}

absl::Status CheckNamingHeaders(const ParsedHead& head,
                                const CheckParameters& parameters) {
  std::vector<absl::string_view> names = {"x-sluice-dependency",
                                          "x-sluice-key"};
  if (parameters.key_header.has_value()) {
    names.push_back(*parameters.key_header);
  }
  for (absl::string_view name : names) {
    absl::StatusOr<std::optional<absl::string_view>> value =
        SingleField(head, name);
    if (!value.ok()) return value.status();
    if (value->has_value() && !wire::IsValidUtf8(**value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the header ", name, " is not valid UTF-8: ",
                       wire::QuoteUntrusted(**value)));
    }
  }
  return absl::OkStatus();
}

}  // namespace sluice::http
