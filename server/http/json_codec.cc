// SPDX-License-Identifier: Apache-2.0
#include "server/http/json_codec.h"

#include <google/protobuf/util/json_util.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "wire/quote.h"

namespace sluice::http {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::OneofDescriptor;

// How much of the body a syntax error quotes, from where parsing stopped.
constexpr size_t kQuotedBytes = 24;

// Protobuf 3.21's phrases (google/protobuf/util/internal/*), matched to
// rewrite them; an error in any other shape is passed on as it is.
constexpr absl::string_view kUnknownField = "Cannot find field.";
constexpr absl::string_view kNotRepeated =
    "Proto field is not repeating, cannot start list.";
constexpr absl::string_view kInvalidValue = ": invalid value ";
constexpr absl::string_view kForType = " for type ";
constexpr absl::string_view kObjectOnScalar =
    "Starting an object on a scalar field";
constexpr absl::string_view kRootNotMessage = "Root element must be a message";

// "dependency, key, permits, caller": the JSON names of `message`'s fields.
std::string FieldNames(const Descriptor& message) {
  std::vector<std::string> names;
  names.reserve(message.field_count());
  for (int i = 0; i < message.field_count(); ++i) {
    names.push_back(message.field(i)->json_name());
  }
  return absl::StrJoin(names, ", ");
}

// The field a protobuf error path names ("calls[0].report.status_code"),
// or nullptr when the path does not lead to one.
const FieldDescriptor* FieldAt(const Descriptor& root, absl::string_view path) {
  const Descriptor* message = &root;
  const FieldDescriptor* field = nullptr;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    if (message == nullptr) return nullptr;
    const std::string name(part.substr(0, part.find('[')));
    field = message->FindFieldByName(name);
    for (int i = 0; field == nullptr && i < message->field_count(); ++i) {
      if (message->field(i)->json_name() == name) field = message->field(i);
    }
    if (field == nullptr) return nullptr;
    message = field->message_type();
  }
  return field;
}

// The message a path leads to: `root` for "", the field's message type for
// a message field, else nullptr.
const Descriptor* MessageAt(const Descriptor& root, absl::string_view path) {
  if (path.empty()) return &root;
  const FieldDescriptor* field = FieldAt(root, path);
  return field == nullptr ? nullptr : field->message_type();
}

std::string EnumNames(const EnumDescriptor& type) {
  std::vector<std::string> names;
  names.reserve(type.value_count());
  for (int i = 0; i < type.value_count(); ++i) {
    names.push_back(type.value(i)->name());
  }
  return absl::StrJoin(names, ", ");
}

// What a JSON value for one element of `field` must look like.
std::string Expected(const FieldDescriptor& field) {
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      return field.type() == FieldDescriptor::TYPE_BYTES ? "a base64 string"
                                                         : "a string";
    case FieldDescriptor::CPPTYPE_BOOL:
      return "true or false";
    case FieldDescriptor::CPPTYPE_INT32:
      return "a whole number from -2147483648 to 2147483647";
    case FieldDescriptor::CPPTYPE_UINT32:
      return "a whole number from 0 to 4294967295";
    case FieldDescriptor::CPPTYPE_INT64:
      return "a whole number from -9223372036854775808 to "
             "9223372036854775807, as a string or a number";
    case FieldDescriptor::CPPTYPE_UINT64:
      return "a whole number from 0 to 18446744073709551615, as a string or "
             "a number";
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      return "a number";
    case FieldDescriptor::CPPTYPE_ENUM:
      return absl::StrCat("one of ", EnumNames(*field.enum_type()));
    case FieldDescriptor::CPPTYPE_MESSAGE:
      if (field.message_type()->full_name() == "google.protobuf.Duration") {
        return "a duration string in seconds such as \"0.250s\"";
      }
      return absl::StrCat("a JSON object (", field.message_type()->name(), ")");
  }
  return "a valid value";
}

std::string ExpectedAt(const Descriptor& root, absl::string_view path) {
  const FieldDescriptor* field = FieldAt(root, path);
  return field == nullptr ? std::string("a valid value") : Expected(*field);
}

// "request body is not valid JSON: Expected , or } after key:value pair,
// near '"key": 1}'", from protobuf's three lines: what went wrong, the text
// around the place, and a caret under the place.
std::string DescribeSyntaxError(absl::string_view error) {
  const std::vector<absl::string_view> lines = absl::StrSplit(error, '\n');
  const absl::string_view what = absl::StripSuffix(lines[0], ".");
  std::string out = absl::StrCat("request body is not valid JSON: ", what);
  if (lines.size() >= 3) {
    const absl::string_view context = lines[1];
    const size_t column = lines[2].find('^');
    if (column != absl::string_view::npos && column < context.size()) {
      // Cut at a character boundary; the bytes are the client's.
      absl::string_view near = context.substr(column, kQuotedBytes);
      while (!near.empty() && near.size() < context.size() - column &&
             (static_cast<unsigned char>(context[column + near.size()]) &
              0xc0) == 0x80) {
        near.remove_suffix(1);
      }
      absl::StrAppend(&out, ", near '", wire::ToValidUtf8(near), "'");
    } else if (column == context.size()) {
      absl::StrAppend(&out, " (at the end of the body)");
    }
  }
  return out;
}

// "(calls[0].acquire): invalid value <value> for type <type>", or
// ": invalid value ..." at the top level: `path` and what follows "invalid
// value ".
std::string DescribeInvalidValue(absl::string_view error,
                                 absl::string_view path, absl::string_view rest,
                                 const Descriptor& root) {
  const size_t for_type = rest.rfind(kForType);
  if (for_type == absl::string_view::npos) return std::string(error);
  const absl::string_view value = rest.substr(0, for_type);
  const absl::string_view type = rest.substr(for_type + kForType.size());

  if (type == "oneof") {
    // value: "oneof field 'call' is already set. Cannot set 'report'"
    std::vector<absl::string_view> quoted = absl::StrSplit(value, '\'');
    const Descriptor* message = MessageAt(root, path);
    const OneofDescriptor* oneof =
        message != nullptr && quoted.size() >= 2
            ? message->FindOneofByName(std::string(quoted[1]))
            : nullptr;
    if (oneof != nullptr) {
      std::vector<std::string> names;
      for (int i = 0; i < oneof->field_count(); ++i) {
        names.push_back(oneof->field(i)->json_name());
      }
      return absl::StrCat(path, ": set only one of ",
                          absl::StrJoin(names, " or "));
    }
    return absl::StrCat(path, ": ", value);
  }
  if (value == kObjectOnScalar) {
    // The type is the scalar field's name, inside the message at `path`.
    const std::string field =
        path.empty() ? std::string(type) : absl::StrCat(path, ".", type);
    return absl::StrCat(field, ": expected ", ExpectedAt(root, field),
                        ", got a JSON object");
  }
  if (absl::StartsWith(value, "Field '")) {
    // A well-known type's own check: "Field 'latency', <why>".
    const size_t why = value.find("', ");
    const absl::string_view reason =
        why == absl::string_view::npos ? value : value.substr(why + 3);
    return absl::StrCat(path, ": ", reason, "; expected ",
                        ExpectedAt(root, path));
  }
  return absl::StrCat(path, ": invalid value ", value, "; expected ",
                      ExpectedAt(root, path));
}

// "(path) name: detail" or "name: detail".
std::string DescribeFieldError(absl::string_view error,
                               const Descriptor& root) {
  absl::string_view path;
  absl::string_view rest = error;
  if (absl::StartsWith(error, "(")) {
    const size_t close = error.find(") ");
    if (close == absl::string_view::npos) return std::string(error);
    path = error.substr(1, close - 1);
    rest = error.substr(close + 2);
  }
  const size_t colon = rest.rfind(": ");
  if (colon == absl::string_view::npos) return std::string(error);
  const absl::string_view name = rest.substr(0, colon);
  const absl::string_view detail = rest.substr(colon + 2);
  const std::string field =
      path.empty() ? std::string(name) : absl::StrCat(path, ".", name);

  if (detail == kUnknownField) {
    const Descriptor* message = MessageAt(root, path);
    std::string out =
        absl::StrCat("unknown field ", wire::QuoteUntrusted(name));
    if (!path.empty()) absl::StrAppend(&out, " in ", path);
    if (message != nullptr) {
      absl::StrAppend(&out, " (", message->name(), " has ",
                      FieldNames(*message), ")");
    }
    return out;
  }
  if (detail == kNotRepeated) {
    return absl::StrCat(field, ": expected ", ExpectedAt(root, field),
                        ", got a JSON array");
  }
  return absl::StrCat(field, ": ", absl::StripSuffix(detail, "."));
}

}  // namespace

std::string DescribeParseError(absl::string_view error,
                               const Descriptor& root) {
  if (absl::StrContains(error, kRootNotMessage)) {
    return absl::StrCat("request body must be a JSON object (", root.name(),
                        ")");
  }
  if (absl::StrContains(error, '\n')) return DescribeSyntaxError(error);
  if (absl::StartsWith(error, kInvalidValue)) {
    return DescribeInvalidValue(error, "", error.substr(kInvalidValue.size()),
                                root);
  }
  if (absl::StartsWith(error, "(")) {
    const size_t close = error.find(absl::StrCat(")", kInvalidValue));
    if (close != absl::string_view::npos) {
      return DescribeInvalidValue(
          error, error.substr(1, close - 1),
          error.substr(close + 1 + kInvalidValue.size()), root);
    }
  }
  if (absl::StrContains(error, ": ")) return DescribeFieldError(error, root);
  return absl::StrCat("request body: ", error);
}

absl::Status ParseJson(absl::string_view json,
                       google::protobuf::Message* message) {
  if (absl::StripAsciiWhitespace(json).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("request body is empty; expected a JSON object (",
                     message->GetDescriptor()->name(), ")"));
  }
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const google::protobuf::util::Status status =
      google::protobuf::util::JsonStringToMessage(
          google::protobuf::StringPiece(json.data(), json.size()), message,
          options);
  if (status.ok()) return absl::OkStatus();
  const google::protobuf::StringPiece error = status.message();
  return absl::InvalidArgumentError(
      DescribeParseError(absl::string_view(error.data(), error.size()),
                         *message->GetDescriptor()));
}

absl::Status CheckJsonShape(absl::string_view json,
                            const JsonBudget& budget) {
  // One frame per open object or array; `counted` marks the array of the
  // counted member, whose direct elements are counted.
  struct Frame {
    bool object;
    bool counted;
  };
  Frame stack[kMaxJsonDepth];
  int depth = 0;
  bool expect_key = false;   // at a key of the innermost object
  bool key_matches = false;  // the last top-level key is the counted member
  int64_t values = 0;
  int64_t counted = 0;
  const auto on_value = [&] {
    ++values;
    if (depth > 0 && stack[depth - 1].counted) ++counted;
  };
  const size_t n = json.size();
  size_t i = 0;
  bool too_deep = false;
  while (i < n && !too_deep) {
    const char c = json[i];
    switch (c) {
      case ' ':
      case '\t':
      case '\r':
      case '\n':
        ++i;
        continue;
      case ',':
        expect_key = depth > 0 && stack[depth - 1].object;
        ++i;
        continue;
      case ':':
        expect_key = false;
        ++i;
        continue;
      case '}':
      case ']':
        if (depth == 0) {
          i = n;  // malformed: the parser says so
          continue;
        }
        --depth;
        expect_key = false;
        ++i;
        continue;
      case '"': {
        size_t end = i + 1;
        while (end < n && json[end] != '"') end += json[end] == '\\' ? 2 : 1;
        if (end >= n) {
          i = n;  // an unterminated string: the parser says so
          continue;
        }
        if (expect_key) {
          key_matches = depth == 1 && !budget.counted_member.empty() &&
                        json.substr(i + 1, end - i - 1) ==
                            budget.counted_member;
          expect_key = false;
        } else {
          on_value();
        }
        i = end + 1;
        continue;
      }
      case '{':
      case '[':
        on_value();
        if (depth == kMaxJsonDepth) {
          too_deep = true;
          continue;
        }
        stack[depth] = {c == '{', c == '[' && depth == 1 && key_matches};
        ++depth;
        key_matches = false;
        expect_key = c == '{';
        ++i;
        continue;
      default:
        // A number or a literal, up to the next delimiter; any other byte
        // (a stray \f, \v or garbage) is one, so the scan always moves.
        on_value();
        ++i;
        while (i < n && !absl::ascii_isspace(static_cast<unsigned char>(
                            json[i])) &&
               json[i] != ',' && json[i] != ']' && json[i] != '}' &&
               json[i] != ':') {
          ++i;
        }
        continue;
    }
  }
  if (!budget.counted_member.empty() && counted > budget.max_counted) {
    return absl::InvalidArgumentError(absl::StrCat(
        budget.counted_member, ": at most ", budget.max_counted,
        " per request, got ", counted, "; none was handled"));
  }
  if (values > budget.max_values) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request body holds more than ", budget.max_values,
        " JSON values; no valid request has that many"));
  }
  if (too_deep) {
    return absl::InvalidArgumentError(
        absl::StrCat("request body nests objects and arrays deeper than ",
                     kMaxJsonDepth, " levels"));
  }
  return absl::OkStatus();
}

absl::Status ParseJson(absl::string_view json, const JsonBudget& budget,
                       google::protobuf::Message* message) {
  if (absl::Status s = CheckJsonShape(json, budget); !s.ok()) return s;
  return ParseJson(json, message);
}

absl::StatusOr<std::string> PrintJson(
    const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  std::string out;
  const google::protobuf::util::Status status =
      google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot print ", message.GetDescriptor()->name(),
                     " as JSON: ", std::string(status.message())));
  }
  return out;
}

std::string JsonQuote(absl::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out.push_back('"');
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        default:
          if (c < 0x20) {
            static constexpr char kHex[] = "0123456789abcdef";
            out += "\\u00";
            out.push_back(kHex[c >> 4]);
            out.push_back(kHex[c & 0xf]);
          } else {
            out.push_back(static_cast<char>(c));
          }
      }
      ++i;
      continue;
    }
    // A multi-byte UTF-8 sequence: copied when well formed (no overlong
    // forms, no surrogates, at most U+10FFFF), else one U+FFFD per byte.
    const size_t length = wire::Utf8SequenceLength(text, i);
    if (length > 0) {
      out.append(text.data() + i, length);
      i += length;
    } else {
      out += "\xef\xbf\xbd";  // U+FFFD
      ++i;
    }
  }
  out.push_back('"');
  return out;
}

}  // namespace sluice::http
