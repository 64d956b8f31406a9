// SPDX-License-Identifier: Apache-2.0
#include "server/rpc/message_bounds.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "wire/status.h"

namespace sluice::rpc {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::io::CodedInputStream;
using google::protobuf::internal::WireFormatLite;

// Deeper than any request of the data port (DecideRequest > DecideCall >
// ReportResultRequest > Duration is 4).
constexpr int kMaxDepth = 16;

struct Walk {
  CodedInputStream* in;
  const MessageBudget& budget;
  int64_t fields = 0;
  int64_t counted = 0;
  // More fields than the budget: nested messages are skipped whole from
  // then on, so that the counted field is still counted to the end at a
  // cost of one pass over the bytes.
  bool over() const { return fields > budget.max_fields; }
};

// Walks one message of `type` up to the stream's current limit. false for
// bytes that are not a message. `counting`: this message holds the counted
// field.
bool WalkMessage(Walk& w, const Descriptor& type, int depth, bool counting) {
  if (depth > kMaxDepth) return false;
  while (true) {
    if (depth > 0 && w.over() && !counting) {
      return w.in->Skip(w.in->BytesUntilLimit());
    }
    const uint32_t tag = w.in->ReadTag();
    if (tag == 0) return w.in->BytesUntilLimit() == 0;
    const int number = WireFormatLite::GetTagFieldNumber(tag);
    if (number == 0) return false;
    ++w.fields;
    if (counting && number == w.budget.counted_field) ++w.counted;
    switch (WireFormatLite::GetTagWireType(tag)) {
      case WireFormatLite::WIRETYPE_VARINT: {
        uint64_t value;
        if (!w.in->ReadVarint64(&value)) return false;
        break;
      }
      case WireFormatLite::WIRETYPE_FIXED64: {
        uint64_t value;
        if (!w.in->ReadLittleEndian64(&value)) return false;
        break;
      }
      case WireFormatLite::WIRETYPE_FIXED32: {
        uint32_t value;
        if (!w.in->ReadLittleEndian32(&value)) return false;
        break;
      }
      case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
        uint32_t length;
        if (!w.in->ReadVarint32(&length)) return false;
        if (length > static_cast<uint32_t>(w.in->BytesUntilLimit())) {
          return false;  // longer than what is left
        }
        const FieldDescriptor* field = type.FindFieldByNumber(number);
        if (field != nullptr && !w.over() &&
            field->type() == FieldDescriptor::TYPE_MESSAGE) {
          const CodedInputStream::Limit limit =
              w.in->PushLimit(static_cast<int>(length));
          const bool ok =
              WalkMessage(w, *field->message_type(), depth + 1,
                          depth == 0 && w.budget.counted_within != 0 &&
                              number == w.budget.counted_within);
          w.in->PopLimit(limit);
          if (!ok) return false;
        } else if (!w.in->Skip(static_cast<int>(length))) {
          return false;
        }
        break;
      }
      default:
        // Groups (none in proto3) and invalid wire types.
        return false;
    }
  }
}

}  // namespace

absl::Status CheckWireShape(google::protobuf::io::ZeroCopyInputStream* in,
                            size_t size, const Descriptor& type,
                            const MessageBudget& budget) {
  if (size > budget.max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(type.name(), " is ", size, " bytes; the limit is ",
                     budget.max_bytes, " bytes"));
  }
  CodedInputStream coded(in);
  const CodedInputStream::Limit limit =
      coded.PushLimit(static_cast<int>(size));
  Walk w{&coded, budget};
  const bool ok = WalkMessage(w, type, 0, budget.counted_within == 0);
  coded.PopLimit(limit);
  if (budget.max_counted > 0 && w.counted > budget.max_counted) {
    return absl::InvalidArgumentError(absl::StrCat(
        budget.counted_name, ": at most ", budget.max_counted, " per ",
        type.name(), ", got ", w.counted, "; none was handled"));
  }
  if (w.fields > budget.max_fields) {
    return absl::InvalidArgumentError(
        absl::StrCat(type.name(), " holds more than ", budget.max_fields,
                     " fields; no valid request has that many"));
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request is not a valid ", type.name()));
  }
  return absl::OkStatus();
}

absl::Status ParseBounded(const grpc::ByteBuffer& buffer,
                          const MessageBudget& budget,
                          google::protobuf::Message* message) {
  // Copies share the slices (reference counts), not the bytes.
  grpc::ByteBuffer scan_copy(buffer);
  const size_t size = scan_copy.Length();
  {
    grpc::ProtoBufferReader reader(&scan_copy);
    SLUICE_RETURN_IF_ERROR(
        CheckWireShape(&reader, size, *message->GetDescriptor(), budget));
  }
  grpc::ByteBuffer parse_copy(buffer);
  grpc::ProtoBufferReader reader(&parse_copy);
  if (!message->ParseFromZeroCopyStream(&reader)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the request is not a valid ", message->GetDescriptor()->name()));
  }
  return absl::OkStatus();
}

absl::Status ParseBounded(absl::string_view bytes, const MessageBudget& budget,
                          google::protobuf::Message* message) {
  google::protobuf::io::ArrayInputStream in(bytes.data(),
                                            static_cast<int>(std::min<size_t>(
                                                bytes.size(), INT32_MAX)));
  SLUICE_RETURN_IF_ERROR(CheckWireShape(&in, bytes.size(),
                                        *message->GetDescriptor(), budget));
  if (!message->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the request is not a valid ", message->GetDescriptor()->name()));
  }
  return absl::OkStatus();
}

absl::Status SerializeToBuffer(const google::protobuf::Message& message,
                               grpc::ByteBuffer* buffer) {
  bool own = false;
  const grpc::Status status =
      grpc::SerializationTraits<google::protobuf::Message>::Serialize(
          message, buffer, &own);
  return wire::FromGrpcStatus(status);
}

}  // namespace sluice::rpc
