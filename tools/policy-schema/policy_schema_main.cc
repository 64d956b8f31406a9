// SPDX-License-Identifier: Apache-2.0
// policy-schema: prints the JSON Schema of the policies file
// (deploy/policies/policy.schema.json), generated from the descriptor of
// sluice.v1.PolicySet that sluiced itself parses with, so that the schema
// follows the proto. It describes what the YAML parser
// (server/policy/policy_file.cc) accepts: the proto JSON mapping, with
// fields under their proto or lowerCamelCase names, enums by name,
// durations as strings with a unit ("250ms", "1.5s", "1h30m"), 64-bit
// integers as numbers or strings, and an empty value meaning "not set".
//
// Usage: policy-schema [DESCRIPTOR_SET]
// DESCRIPTOR_SET, a FileDescriptorSet of policy.proto written by `protoc
// --include_imports --include_source_info --descriptor_set_out`, supplies
// the proto comments as descriptions.

#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/files.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "nlohmann/json.hpp"
#include "sluice/v1/policy.pb.h"

namespace {

using google::protobuf::Descriptor;
using google::protobuf::DescriptorPool;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using nlohmann::json;

// A number as the parser reads a quoted one (YAML 1.2 core schema).
constexpr char kNumberPattern[] =
    "^[-+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][-+]?[0-9]+)?$";
// What absl::ParseDuration takes, less "inf": one or more number-unit
// pairs, or a bare 0.
constexpr char kDurationPattern[] =
    "^[-+]?(0|(([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(ns|us|ms|s|m|h))+)$";
// Policy.name, as policy_convert.cc validates it.
constexpr char kNamePattern[] = "^[A-Za-z0-9._-]+$";
constexpr int kMaxNameBytes = 256;

// The proto comments, from a descriptor set with source info; empty
// without one.
class Comments {
 public:
  bool Load(const std::string& path) {
    absl::StatusOr<std::string> bytes = sluice::base::ReadRegularFile(path);
    google::protobuf::FileDescriptorSet set;
    if (!bytes.ok() || !set.ParseFromString(*bytes)) return false;
    for (const auto& file : set.file()) {
      if (pool_.BuildFile(file) == nullptr) return false;
    }
    return true;
  }

  std::string Of(const Descriptor* d) const {
    const Descriptor* found = pool_.FindMessageTypeByName(d->full_name());
    return found == nullptr ? "" : Text(found);
  }
  std::string Of(const FieldDescriptor* f) const {
    const FieldDescriptor* found = pool_.FindFieldByName(f->full_name());
    return found == nullptr ? "" : Text(found);
  }
  std::string Of(const EnumDescriptor* e, int value) const {
    const EnumDescriptor* found = pool_.FindEnumTypeByName(e->full_name());
    if (found == nullptr) return "";
    const auto* v = found->FindValueByName(e->value(value)->name());
    return v == nullptr ? "" : Text(v);
  }

 private:
  // The leading comment, without the space after each "//" (the indented
  // formulas of some comments keep their shape).
  template <typename T>
  static std::string Text(const T* d) {
    google::protobuf::SourceLocation location;
    if (!d->GetSourceLocation(&location)) return "";
    std::vector<std::string> lines;
    for (absl::string_view line :
         absl::StrSplit(location.leading_comments, '\n')) {
      absl::ConsumePrefix(&line, " ");
      lines.emplace_back(absl::StripTrailingAsciiWhitespace(line));
    }
    while (!lines.empty() && lines.back().empty()) lines.pop_back();
    return absl::StrJoin(lines, "\n");
  }

  DescriptorPool pool_;
};

class SchemaWriter {
 public:
  explicit SchemaWriter(const Comments& comments) : comments_(comments) {}

  json Document() {
    json root = Message(sluice::v1::PolicySet::descriptor());
    // An empty file is an empty set of policies.
    root["type"] = {"object", "null"};
    json out = {
        {"$schema", "http://json-schema.org/draft-07/schema#"},
        {"title", "Sluice policies file"},
        {"description",
         "The file sluiced --policies loads: `policies:` followed by a list "
         "of sluice.v1.Policy in the proto JSON mapping, written as YAML. "
         "Generated from proto/sluice/v1/policy.proto by tools/policy-schema; "
         "do not edit."},
    };
    for (auto& [key, value] : root.items()) out[key] = value;
    out["definitions"] = definitions_;
    return out;
  }

 private:
  // A reference to `d`'s definition, written on first use.
  json Ref(const Descriptor* d) {
    if (!defined_.count(d->full_name())) {
      defined_.insert(d->full_name());
      definitions_[d->full_name()] = Message(d);
    }
    return {{"$ref", absl::StrCat("#/definitions/", d->full_name())}};
  }

  json Message(const Descriptor* d) {
    json properties = json::object();
    for (int i = 0; i < d->field_count(); ++i) {
      const FieldDescriptor* f = d->field(i);
      json schema = Field(f);
      const std::string comment = comments_.Of(f);
      if (!comment.empty()) schema["description"] = comment;
      properties[f->name()] = schema;
      if (f->json_name() != f->name()) {
        json alias = schema;
        alias["description"] =
            absl::StrCat("Same as ", f->name(), ".",
                         comment.empty() ? "" : absl::StrCat(" ", comment));
        properties[f->json_name()] = alias;
      }
    }
    json out = {{"type", "object"},
                {"additionalProperties", false},
                {"properties", properties}};
    const std::string comment = comments_.Of(d);
    if (!comment.empty()) out["description"] = comment;
    if (d == sluice::v1::Policy::descriptor()) {
      // The parser requires the name; policy_convert.cc checks its form.
      out["required"] = {"name"};
      out["properties"]["name"]["type"] = "string";
      out["properties"]["name"]["pattern"] = kNamePattern;
      out["properties"]["name"]["maxLength"] = kMaxNameBytes;
    }
    return out;
  }

  // A field's value; an empty one (null) means "not set".
  json Field(const FieldDescriptor* f) {
    if (f->is_map()) {
      return {{"type", {"object", "null"}},
              {"additionalProperties",
               Single(f->message_type()->FindFieldByName("value"))}};
    }
    if (f->is_repeated()) {
      return {{"type", {"array", "null"}}, {"items", Single(f)}};
    }
    return {{"anyOf", {Single(f), {{"type", "null"}}}}};
  }

  json Single(const FieldDescriptor* f) {
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_MESSAGE:
        if (f->message_type()->full_name() == "google.protobuf.Duration") {
          return {{"oneOf",
                   {{{"type", "string"}, {"pattern", kDurationPattern}},
                    {{"const", 0}}}},
                  {"examples", {"250ms", "1.5s", "15s", "5m", "1h30m"}}};
        }
        return Ref(f->message_type());
      case FieldDescriptor::CPPTYPE_STRING:
        if (f->type() == FieldDescriptor::TYPE_BYTES) {
          return {{"type", "string"}, {"contentEncoding", "base64"}};
        }
        // A plain scalar that YAML reads as a number or a boolean is kept
        // as the text written.
        return {{"type", {"string", "number", "boolean"}}};
      case FieldDescriptor::CPPTYPE_BOOL:
        return {{"type", "boolean"}};
      case FieldDescriptor::CPPTYPE_ENUM:
        return Enum(f->enum_type());
      case FieldDescriptor::CPPTYPE_DOUBLE:
      case FieldDescriptor::CPPTYPE_FLOAT:
        // ".inf" and ".nan" read as numbers; validation refuses them.
        return {{"type", {"number", "string"}}, {"pattern", kNumberPattern}};
      default:
        return Integer(f);
    }
  }

  json Enum(const EnumDescriptor* e) {
    json names = json::array();
    std::vector<std::string> described;
    for (int i = 0; i < e->value_count(); ++i) {
      names.push_back(e->value(i)->name());
      const std::string comment = comments_.Of(e, i);
      if (!comment.empty()) {
        described.push_back(absl::StrCat(e->value(i)->name(), ": ", comment));
      }
    }
    json out = {{"type", "string"}, {"enum", names}};
    if (!described.empty()) {
      out["description"] = absl::StrJoin(described, "\n");
    }
    return out;
  }

  json Integer(const FieldDescriptor* f) {
    const bool is_unsigned =
        f->cpp_type() == FieldDescriptor::CPPTYPE_UINT32 ||
        f->cpp_type() == FieldDescriptor::CPPTYPE_UINT64;
    json number = {{"type", "integer"}};
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        number["minimum"] = -2147483648LL;
        number["maximum"] = 2147483647LL;
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
        number["minimum"] = 0;
        number["maximum"] = 4294967295LL;
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        number["minimum"] = 0;
        break;
      default:
        break;
    }
    // The JSON mapping writes 64-bit integers as strings; the parser takes
    // any integer that way.
    json text = {{"type", "string"},
                 {"pattern", is_unsigned ? "^\\+?[0-9]+$" : "^[-+]?[0-9]+$"}};
    return {{"anyOf", {number, text}}};
  }

  const Comments& comments_;
  json definitions_ = json::object();
  std::set<std::string> defined_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2) {
    std::fprintf(stderr, "usage: policy-schema [DESCRIPTOR_SET]\n");
    return 2;
  }
  Comments comments;
  if (argc == 2 && !comments.Load(argv[1])) {
    std::fprintf(stderr, "policy-schema: cannot read the descriptor set %s\n",
                 argv[1]);
    return 1;
  }
  SchemaWriter writer(comments);
  std::printf("%s\n", writer.Document().dump(2).c_str());
  return 0;
}
