// SPDX-License-Identifier: Apache-2.0
#include "wire/quote.h"

#include <cstdint>

namespace sluice::wire {
namespace {

constexpr char kHex[] = "0123456789abcdef";

void AppendHexByte(unsigned char c, std::string* out) {
  out->append("\\x");
  out->push_back(kHex[c >> 4]);
  out->push_back(kHex[c & 0xf]);
}

}  // namespace

size_t Utf8SequenceLength(absl::string_view text, size_t i) {
  const auto c = static_cast<unsigned char>(text[i]);
  if (c < 0x80) return 1;
  size_t length = 0;
  uint32_t min = 0;
  if ((c & 0xe0) == 0xc0) {
    length = 2;
    min = 0x80;
  } else if ((c & 0xf0) == 0xe0) {
    length = 3;
    min = 0x800;
  } else if ((c & 0xf8) == 0xf0) {
    length = 4;
    min = 0x10000;
  } else {
    return 0;  // a continuation byte, or 0xf8 and above
  }
  if (length > text.size() - i) return 0;
  uint32_t code = c & (0x7fu >> length);
  for (size_t k = 1; k < length; ++k) {
    const auto next = static_cast<unsigned char>(text[i + k]);
    if ((next & 0xc0) != 0x80) return 0;
    code = (code << 6) | (next & 0x3f);
  }
  if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) {
    return 0;
  }
  return length;
}

bool IsValidUtf8(absl::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceLength(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string QuoteUntrusted(absl::string_view text, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes) + 8);
  out.push_back('"');
  size_t i = 0;
  while (i < text.size()) {
    const size_t length = Utf8SequenceLength(text, i);
    // An invalid byte is shown as one \xNN and counts as one byte.
    const size_t taken = length == 0 ? 1 : length;
    if (i + taken > max_bytes) break;
    const auto c = static_cast<unsigned char>(text[i]);
    if (length == 0) {
      AppendHexByte(c, &out);
    } else if (length > 1) {
      out.append(text.data() + i, length);
    } else if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out.append("\\n");
    } else if (c == '\r') {
      out.append("\\r");
    } else if (c == '\t') {
      out.append("\\t");
    } else if (c < 0x20 || c == 0x7f) {
      AppendHexByte(c, &out);
    } else {
      out.push_back(static_cast<char>(c));
    }
    i += taken;
  }
  if (i < text.size()) out.append("...");
  out.push_back('"');
  return out;
}

std::string ToValidUtf8(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const size_t length = Utf8SequenceLength(text, i);
    if (length == 0) {
      out.append("\xef\xbf\xbd");  // U+FFFD
      ++i;
    } else {
      out.append(text.data() + i, length);
      i += length;
    }
  }
  return out;
}

}  // namespace sluice::wire
