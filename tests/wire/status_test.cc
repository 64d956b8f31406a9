// SPDX-License-Identifier: Apache-2.0
#include "wire/status.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace sluice::wire {
namespace {

absl::StatusOr<int> Half(int n) {
  if (n % 2 != 0) return absl::InvalidArgumentError("odd");
  return n / 2;
}

absl::StatusOr<int> Quarter(int n) {
  SLUICE_ASSIGN_OR_RETURN(const int half, Half(n));
  SLUICE_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

absl::Status Check(int n) {
  SLUICE_RETURN_IF_ERROR(Half(n).status());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<int>> Boxed(bool ok) {
  if (!ok) return absl::NotFoundError("none");
  return std::make_unique<int>(7);
}

absl::StatusOr<int> Unbox(bool ok) {
  std::unique_ptr<int> box;
  SLUICE_ASSIGN_OR_RETURN(box, Boxed(ok));  // move-only, existing variable
  return *box;
}

TEST(StatusMacrosTest, AssignOrReturn) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().message(), "odd");
  EXPECT_EQ(Quarter(3).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*Unbox(true), 7);
  EXPECT_EQ(Unbox(false).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Check(2).ok());
  EXPECT_EQ(Check(1).message(), "odd");
}

TEST(GrpcStatusTest, KeepsCodeAndMessageBothWays) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  for (absl::StatusCode code :
       {absl::StatusCode::kInvalidArgument, absl::StatusCode::kUnavailable,
        absl::StatusCode::kDeadlineExceeded, absl::StatusCode::kNotFound,
        absl::StatusCode::kFailedPrecondition}) {
    const grpc::Status g = ToGrpcStatus(absl::Status(code, "why"));
    EXPECT_EQ(static_cast<int>(g.error_code()), static_cast<int>(code));
    EXPECT_EQ(g.error_message(), "why");
    const absl::Status back = FromGrpcStatus(g);
    EXPECT_EQ(back.code(), code);
    EXPECT_EQ(back.message(), "why");
  }
  EXPECT_EQ(ToGrpcStatus(absl::Status(static_cast<absl::StatusCode>(42), "x"))
                .error_code(),
            grpc::StatusCode::UNKNOWN);
}

TEST(StatusTest, ToGrpcStatusSendsOnlyValidUtf8) {
  // A message that quotes client bytes cut inside a character.
  const grpc::Status g = ToGrpcStatus(
      absl::InvalidArgumentError("got \"ab\xe2\x82\""));
  EXPECT_EQ(g.error_message(), "got \"ab\xef\xbf\xbd\xef\xbf\xbd\"");
}

}  // namespace
}  // namespace sluice::wire
