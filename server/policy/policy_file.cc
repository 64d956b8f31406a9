// SPDX-License-Identifier: Apache-2.0
#include "server/policy/policy_file.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "base/files.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/time_util.h"
#include "nlohmann/json.hpp"
#include "wire/status.h"
#include "wire/time.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

namespace sluice::policy {
namespace {

// yaml-cpp 0.7 never returns from some malformed documents: a ',' outside
// a flow collection where a node should start ("," alone, "- a\n,",
// "---\n,") makes its parser emit nodes forever, growing memory until the
// process dies (found by fuzz/policy_parser_fuzzer). So a document is first
// parsed with this handler, which only counts the parser's events and gives
// up past a bound no document can reach: every event but a few per
// document consumes at least a token, and no token is shorter than a byte,
// so a finite parse emits at most about 2 events a byte (measured: "?\n"
// repeated, 2.0; "{," repeated, 1.5).
class EventBudget final : public YAML::EventHandler {
 public:
  struct Exceeded {};
  explicit EventBudget(size_t bytes) : left_(4 * bytes + 64) {}

  void OnDocumentStart(const YAML::Mark&) override { Spend(); }
  void OnDocumentEnd() override { Spend(); }
  void OnNull(const YAML::Mark&, YAML::anchor_t) override { Spend(); }
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override { Spend(); }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {
    Spend();
  }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    Spend();
  }
  void OnSequenceEnd() override { Spend(); }
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Spend();
  }
  void OnMapEnd() override { Spend(); }

 private:
  void Spend() {
    if (left_-- == 0) throw Exceeded{};
  }
  size_t left_;
};

// Whether yaml-cpp finishes parsing `text` (its own syntax errors count as
// finishing: they are thrown, and reported, by the real parse).
bool ParserFinishes(const std::string& text) {
  std::istringstream in(text);
  EventBudget budget(text.size());
  try {
    YAML::Parser parser(in);
    while (parser.HandleNextDocument(budget)) {
    }
  } catch (const EventBudget::Exceeded&) {
    return false;
  } catch (const YAML::Exception&) {
  }
  return true;
}

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;

// The offset of the first byte of `s` that is not part of well-formed
// UTF-8 (RFC 3629: no overlong forms, surrogates or values past U+10FFFF),
// or npos.
size_t FirstInvalidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (s.size() - i <= n) return i;
    for (size_t k = 1; k <= n; ++k) {
      const unsigned char b = s[i + k];
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return i;
    }
    i += n + 1;
  }
  return absl::string_view::npos;
}

// YAML 1.2 core-schema number syntax, plus the JSON forms.
bool LooksLikeNumber(absl::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  size_t digits = 0;
  while (i < s.size() && absl::ascii_isdigit(s[i])) ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && absl::ascii_isdigit(s[i])) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < s.size() && absl::ascii_isdigit(s[i])) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == s.size();
}

std::string EnumNames(const EnumDescriptor* e) {
  std::vector<std::string> names;
  for (int i = 0; i < e->value_count(); ++i) {
    const std::string& n = e->value(i)->name();
    if (absl::EndsWith(n, "_UNSPECIFIED")) continue;
    names.push_back(n);
  }
  return absl::StrJoin(names, ", ");
}

const char* NodeKind(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Null:
      return "empty";
    default:
      return "a scalar";
  }
}

// Turns one policy's YAML tree into a JSON value in the proto JSON mapping,
// guided by the Policy descriptor: that is what lets it report unknown fields and bad
// values with their YAML line, read "250ms" durations, and keep a string
// field a string even when it looks like a number. Each field's line goes
// into `lines` under its proto path (`key`: proto field names, whichever
// spelling the file used), for errors found later by validation.
class PolicyConverter {
 public:
  // `values_left` is shared by the document's policies: see Value.
  PolicyConverter(absl::string_view source, std::string label,
                  std::map<std::string, int>* lines, size_t* values_left)
      : source_(source),
        label_(std::move(label)),
        lines_(lines),
        values_left_(values_left) {}

  absl::Status Message(const YAML::Node& node, const Descriptor* desc,
                       const std::string& path, const std::string& key,
                       nlohmann::json* out) {
    if (!node.IsMap()) {
      return Error(node, path,
                   absl::StrCat("must be a mapping, got ", NodeKind(node)));
    }
    *out = nlohmann::json::object();
    std::set<const FieldDescriptor*> seen;
    for (const auto& kv : node) {
      const YAML::Node& name_node = kv.first;
      if (!name_node.IsScalar()) {
        return Error(name_node, path, "field names must be plain words");
      }
      const std::string& name = name_node.Scalar();
      const FieldDescriptor* field = desc->FindFieldByName(name);
      if (field == nullptr) {
        for (int i = 0; i < desc->field_count(); ++i) {
          if (desc->field(i)->json_name() == name) field = desc->field(i);
        }
      }
      const std::string field_path =
          path.empty() ? name : absl::StrCat(path, ".", name);
      if (field == nullptr) {
        return Error(
            name_node, path,
            absl::StrCat("unknown field \"", name, "\" in ", desc->name()));
      }
      if (!seen.insert(field).second) {
        return Error(name_node, field_path, "is set twice");
      }
      const std::string field_key =
          key.empty() ? field->name() : absl::StrCat(key, ".", field->name());
      (*lines_)[field_key] = name_node.Mark().line + 1;
      // An empty value means "not set", as in the JSON mapping's null.
      if (kv.second.IsNull()) continue;
      nlohmann::json& value = (*out)[field->name()];
      if (field->is_map()) {
        SLUICE_RETURN_IF_ERROR(
            Map(kv.second, field, field_path, field_key, &value));
      } else if (field->is_repeated()) {
        SLUICE_RETURN_IF_ERROR(
            Repeated(kv.second, field, field_path, field_key, &value));
      } else {
        SLUICE_RETURN_IF_ERROR(
            Value(kv.second, field, field_path, field_key, &value));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Error(const YAML::Node& node, absl::string_view path,
                     absl::string_view message) const {
    const int line = node.Mark().line;
    return absl::InvalidArgumentError(absl::StrCat(
        source_, line >= 0 ? absl::StrCat(":", line + 1) : "", ": ", label_,
        ": ", path, path.empty() ? "" : ": ", message));
  }

 private:
  absl::Status Repeated(const YAML::Node& node, const FieldDescriptor* field,
                        const std::string& path, const std::string& key,
                        nlohmann::json* out) {
    if (!node.IsSequence()) {
      return Error(node, path,
                   absl::StrCat("must be a list, got ", NodeKind(node)));
    }
    *out = nlohmann::json::array();
    for (size_t i = 0; i < node.size(); ++i) {
      nlohmann::json item;
      const std::string item_key = absl::StrCat(key, "[", i, "]");
      (*lines_)[item_key] = node[i].Mark().line + 1;
      SLUICE_RETURN_IF_ERROR(Value(node[i], field,
                                   absl::StrCat(path, "[", i, "]"), item_key,
                                   &item));
      out->push_back(std::move(item));
    }
    return absl::OkStatus();
  }

  // A map field (HttpRoute.headers): a mapping of plain keys, as in the
  // JSON mapping's object.
  absl::Status Map(const YAML::Node& node, const FieldDescriptor* field,
                   const std::string& path, const std::string& field_key,
                   nlohmann::json* out) {
    if (!node.IsMap()) {
      return Error(node, path,
                   absl::StrCat("must be a mapping, got ", NodeKind(node)));
    }
    const FieldDescriptor* value_field =
        field->message_type()->map_value();
    *out = nlohmann::json::object();
    for (const auto& kv : node) {
      if (!kv.first.IsScalar()) {
        return Error(kv.first, path, "keys must be plain words");
      }
      const std::string& key = kv.first.Scalar();
      const std::string at = absl::StrCat(path, ".", key);
      if (out->contains(key)) return Error(kv.first, at, "is set twice");
      const std::string entry_key = absl::StrCat(field_key, ".", key);
      (*lines_)[entry_key] = kv.first.Mark().line + 1;
      nlohmann::json& value = (*out)[key];
      if (kv.second.IsNull()) {
        // `name:` with nothing after it: the empty value.
        value = "";
        continue;
      }
      SLUICE_RETURN_IF_ERROR(
          Value(kv.second, value_field, at, entry_key, &value));
    }
    return absl::OkStatus();
  }

  absl::Status Value(const YAML::Node& node, const FieldDescriptor* field,
                     const std::string& path, const std::string& key,
                     nlohmann::json* out) {
    // An alias is a reference: a small document whose aliases nest (a list
    // of *a, each a list of *b, ...) would expand to billions of values.
    if (*values_left_ == 0) {
      return Error(node, path,
                   "the document expands to too many values (are YAML "
                   "aliases repeated inside aliases?)");
    }
    --*values_left_;
    if (field->type() == FieldDescriptor::TYPE_MESSAGE) {
      if (field->message_type()->full_name() == "google.protobuf.Duration") {
        return Duration(node, path, out);
      }
      return Message(node, field->message_type(), path, key, out);
    }
    if (!node.IsScalar()) {
      return Error(
          node, path,
          absl::StrCat("must be a single value, got ", NodeKind(node)));
    }
    const std::string& text = node.Scalar();
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_STRING:
        *out = text;
        return absl::OkStatus();
      case FieldDescriptor::CPPTYPE_BOOL:
        if (text == "true" || text == "True" || text == "TRUE") {
          *out = true;
        } else if (text == "false" || text == "False" || text == "FALSE") {
          *out = false;
        } else {
          return Error(
              node, path,
              absl::StrCat("must be true or false, got \"", text, "\""));
        }
        return absl::OkStatus();
      case FieldDescriptor::CPPTYPE_ENUM: {
        const EnumDescriptor* e = field->enum_type();
        if (e->FindValueByName(text) == nullptr) {
          return Error(
              node, path,
              absl::StrCat("\"", text, "\" is not one of ", EnumNames(e)));
        }
        *out = text;
        return absl::OkStatus();
      }
      case FieldDescriptor::CPPTYPE_DOUBLE:
      case FieldDescriptor::CPPTYPE_FLOAT:
        return Double(node, text, path, out);
      default:
        return Integer(node, field, text, path, out);
    }
  }

  absl::Status Double(const YAML::Node& node, const std::string& text,
                      const std::string& path, nlohmann::json* out) {
    // Let non-finite values through so that validation can name the rule;
    // the proto JSON mapping spells them as strings. Its spellings are read
    // too, since PoliciesToYaml writes them.
    const std::string lower = absl::AsciiStrToLower(text);
    if (lower == ".inf" || lower == "+.inf" || text == "Infinity") {
      *out = "Infinity";
      return absl::OkStatus();
    }
    if (lower == "-.inf" || text == "-Infinity") {
      *out = "-Infinity";
      return absl::OkStatus();
    }
    if (lower == ".nan" || text == "NaN") {
      *out = "NaN";
      return absl::OkStatus();
    }
    double v = 0;
    if (!LooksLikeNumber(text) || !absl::SimpleAtod(text, &v) ||
        !std::isfinite(v)) {
      return Error(node, path,
                   absl::StrCat("must be a number, got \"", text, "\""));
    }
    *out = v;
    return absl::OkStatus();
  }

  absl::Status Integer(const YAML::Node& node, const FieldDescriptor* field,
                       const std::string& text, const std::string& path,
                       nlohmann::json* out) {
    const bool is_unsigned =
        field->cpp_type() == FieldDescriptor::CPPTYPE_UINT32 ||
        field->cpp_type() == FieldDescriptor::CPPTYPE_UINT64;
    const bool is_32 = field->cpp_type() == FieldDescriptor::CPPTYPE_UINT32 ||
                       field->cpp_type() == FieldDescriptor::CPPTYPE_INT32;
    const std::string want =
        is_unsigned ? "a whole number >= 0" : "a whole number";
    if (is_unsigned) {
      uint64_t v = 0;
      if (!absl::SimpleAtoi(text, &v) ||
          (is_32 && v > std::numeric_limits<uint32_t>::max())) {
        return Error(
            node, path,
            absl::StrCat("must be ", want, is_32 ? " that fits 32 bits" : "",
                         ", got \"", text, "\""));
      }
      *out = v;
    } else {
      int64_t v = 0;
      if (!absl::SimpleAtoi(text, &v) ||
          (is_32 && (v > std::numeric_limits<int32_t>::max() ||
                     v < std::numeric_limits<int32_t>::min()))) {
        return Error(node, path,
                     absl::StrCat("must be ", want, ", got \"", text, "\""));
      }
      *out = v;
    }
    return absl::OkStatus();
  }

  absl::Status Duration(const YAML::Node& node, const std::string& path,
                        nlohmann::json* out) {
    absl::Duration d;
    const std::string text = node.IsScalar() ? node.Scalar() : "";
    // absl also takes a bare "0" and "inf"; a unit is what users mean.
    if (!node.IsScalar() || !absl::ParseDuration(text, &d) ||
        d == absl::InfiniteDuration() || d == -absl::InfiniteDuration() ||
        (text != "0" && LooksLikeNumber(text))) {
      return Error(node, path,
                   absl::StrCat("must be a duration such as \"15s\" or "
                                "\"250ms\", got ",
                                node.IsScalar() ? absl::StrCat("\"", text, "\"")
                                                : NodeKind(node)));
    }
    if (absl::AbsDuration(d) > absl::Hours(24 * 365 * 100)) {
      return Error(node, path,
                   absl::StrCat("must be under 100 years, got \"", text, "\""));
    }
    *out = google::protobuf::util::TimeUtil::ToString(wire::DurationToProto(d));
    return absl::OkStatus();
  }

  const absl::string_view source_;
  const std::string label_;
  std::map<std::string, int>* const lines_;
  size_t* const values_left_;
};

// Values a document may expand to: what its text can hold without aliases
// (a value takes at least two bytes), with room for aliases used as
// intended (a shared block repeated in each policy).
size_t ValueBudget(size_t bytes) { return bytes / 2 + 100'000; }

absl::StatusOr<ParsedPolicies> ParseDocument(const YAML::Node& root,
                                             absl::string_view source,
                                             size_t bytes) {
  ParsedPolicies parsed;
  std::vector<v1::Policy>& policies = parsed.policies;
  auto at = [&](const YAML::Node& node) {
    const int line = node.Mark().line;
    return absl::StrCat(source, line >= 0 ? absl::StrCat(":", line + 1) : "");
  };
  if (root.IsNull()) return parsed;
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(
        at(root), ": the document must be a mapping with a `policies:` list"));
  }
  YAML::Node list;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar() || kv.first.Scalar() != "policies") {
      return absl::InvalidArgumentError(
          absl::StrCat(at(kv.first), ": unknown top-level key \"",
                       kv.first.IsScalar() ? kv.first.Scalar() : "?",
                       "\" (only `policies` is allowed)"));
    }
    list = kv.second;
  }
  if (!list || list.IsNull()) return parsed;
  if (!list.IsSequence()) {
    return absl::InvalidArgumentError(absl::StrCat(
        at(list), ": policies must be a list, got ", NodeKind(list)));
  }

  std::map<std::string, int> first_line;  // name -> 1-based line
  size_t values_left = ValueBudget(bytes);
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node item = list[i];
    std::string label = absl::StrCat("policies[", i, "]");
    if (!item.IsMap()) {
      return absl::InvalidArgumentError(absl::StrCat(
          at(item), ": ", label, ": must be a mapping, got ", NodeKind(item)));
    }
    const YAML::Node name = item["name"];
    if (!name || !name.IsScalar() || name.Scalar().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(at(item), ": ", label, ": name is required"));
    }
    label = absl::StrCat("policy \"", name.Scalar(), "\"");
    const int line = name.Mark().line + 1;
    auto [it, inserted] = first_line.emplace(name.Scalar(), line);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(
          at(name), ": ", label, ": duplicate name (first defined at line ",
          it->second, ")"));
    }

    std::map<std::string, int> lines = {{"", item.Mark().line + 1}};
    PolicyConverter converter(source, label, &lines, &values_left);
    nlohmann::json json;
    SLUICE_RETURN_IF_ERROR(
        converter.Message(item, v1::Policy::descriptor(), "", "", &json));
    std::string text;
    try {
      text = json.dump();
    } catch (const nlohmann::json::exception& e) {
      // A string that is not UTF-8 has no JSON form.
      return converter.Error(item, "", e.what());
    }
    v1::Policy policy;
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = false;
    const auto status =
        google::protobuf::util::JsonStringToMessage(text, &policy, options);
    if (!status.ok()) {
      // The converter checks every field, so this means a gap in it.
      return converter.Error(item, "", std::string(status.message()));
    }
    policies.push_back(std::move(policy));
    parsed.lines.push_back(std::move(lines));
  }
  return parsed;
}

// Emits `node` (a proto JSON tree read back as YAML) in block style.
void EmitNode(const YAML::Node& node, YAML::Emitter* out) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      *out << YAML::BeginMap;
      for (const auto& kv : node) {
        *out << YAML::Key << kv.first.Scalar() << YAML::Value;
        EmitNode(kv.second, out);
      }
      *out << YAML::EndMap;
      break;
    case YAML::NodeType::Sequence:
      *out << YAML::Flow << YAML::BeginSeq;
      for (const auto& item : node) EmitNode(item, out);
      *out << YAML::EndSeq;
      break;
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      // Plain "null", "~" or "" would read back as empty.
      if (s.empty() || s == "null" || s == "~" || s == "Null" || s == "NULL") {
        *out << YAML::DoubleQuoted << s;
      } else {
        *out << s;
      }
      break;
    }
    default:
      *out << YAML::Null;
  }
}

}  // namespace

absl::StatusOr<std::vector<v1::Policy>> ParsePolicies(
    absl::string_view text, absl::string_view source) {
  absl::StatusOr<ParsedPolicies> parsed = ParsePoliciesWithLines(text, source);
  if (!parsed.ok()) return parsed.status();
  return std::move(parsed->policies);
}

absl::StatusOr<ParsedPolicies> ParsePoliciesWithLines(
    absl::string_view text, absl::string_view source) {
  // YAML is Unicode text, and a string that is not has no JSON form.
  if (const size_t bad = FirstInvalidUtf8(text);
      bad != absl::string_view::npos) {
    const size_t line = 1 + static_cast<size_t>(std::count(
                                text.begin(), text.begin() + bad, '\n'));
    return absl::InvalidArgumentError(absl::StrCat(
        source, ":", line, ": not UTF-8 text (byte 0x",
        absl::Hex(static_cast<unsigned char>(text[bad]), absl::kZeroPad2),
        " at offset ", bad, ")"));
  }
  // yaml-cpp reports errors by throwing; nothing leaves this function.
  try {
    const std::string document(text);
    if (!ParserFinishes(document)) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": YAML syntax error: the document does not parse to an "
                  "end (is there a ',' outside [ ] or { }?)"));
    }
    std::vector<YAML::Node> docs = YAML::LoadAll(document);
    if (docs.empty()) return ParsedPolicies();
    if (docs.size() > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": expected one YAML document, found ", docs.size()));
    }
    return ParseDocument(docs[0], source, document.size());
  } catch (const YAML::Exception& e) {
    const std::string where = e.mark.is_null()
                                  ? std::string(source)
                                  : absl::StrCat(source, ":", e.mark.line + 1,
                                                 ":", e.mark.column + 1);
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": YAML syntax error: ", e.msg));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": cannot parse: ", e.what()));
  }
}

absl::StatusOr<std::vector<v1::Policy>> ParsePoliciesFile(
    const std::string& path) {
  // base's default bound: a policies file is a few kilobytes.
  absl::StatusOr<std::string> text = base::ReadRegularFile(path);
  if (!text.ok()) return text.status();
  return ParsePolicies(*text, path);
}

int FieldLine(const std::map<std::string, int>& lines,
              absl::string_view field) {
  // A field left to its default has no line; its enclosing block has.
  while (true) {
    auto it = lines.find(std::string(field));
    if (it != lines.end()) return it->second;
    if (field.empty()) return 0;
    const size_t cut = field.find_last_of(".[");
    field = cut == absl::string_view::npos ? absl::string_view()
                                           : field.substr(0, cut);
  }
}

std::string PoliciesToYaml(const std::vector<v1::Policy>& policies) {
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "policies" << YAML::Value;
  if (policies.empty()) {
    out << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
  } else {
    out << YAML::BeginSeq;
    google::protobuf::util::JsonPrintOptions options;
    options.preserve_proto_field_names = true;
    for (const v1::Policy& policy : policies) {
      std::string json;
      // Cannot fail for a generated message without Any fields.
      (void)google::protobuf::util::MessageToJsonString(policy, &json, options);
      try {
        EmitNode(YAML::Load(json), &out);
      } catch (const YAML::Exception&) {
        out << YAML::BeginMap << YAML::Key << "name" << YAML::Value
            << policy.name() << YAML::EndMap;
      }
    }
    out << YAML::EndSeq;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace sluice::policy
