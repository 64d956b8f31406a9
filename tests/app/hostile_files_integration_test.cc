// SPDX-License-Identifier: Apache-2.0
// A real sluiced whose admin token file or state file is a FIFO: the file
// is refused with a log line and never waited on, a later token rotation is
// still seen, start-up goes on, and SIGTERM ends sluiced within 5 s.

#include <sys/stat.h>
#include <unistd.h>

#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/v1/admin.grpc.pb.h"
#include "tests/testing/sluiced_process.h"
#include "tests/testing/wait_for.h"

namespace sluice::testing {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(15);

bool LogHas(const SluicedProcess& sluiced, const std::string& text) {
  return WaitFor([&] { return sluiced.Log().find(text) != std::string::npos; },
                 kWait, absl::Milliseconds(50))
      .has_value();
}

grpc::StatusCode ListWith(SluicedProcess& sluiced, const std::string& token) {
  v1::ListPoliciesResponse resp;
  return sluiced.admin()
      ->ListPolicies(sluiced.Context(token).get(), v1::ListPoliciesRequest(),
                     &resp)
      .error_code();
}

// SIGTERM, and how long sluiced took to exit (Terminate gives up after
// 10 s), printed for the record.
absl::Duration TimeToExit(SluicedProcess& sluiced, int* exit_code) {
  const absl::Time start = absl::Now();
  *exit_code = sluiced.Terminate();
  const absl::Duration took = absl::Now() - start;
  std::cout << "SIGTERM to exit: " << absl::FormatDuration(took)
            << " (exit code " << *exit_code << ")\n";
  return took;
}

TEST(HostileFilesTest, FifoAdminTokenFileIsRefusedAndRotationStillSeen) {
  SluicedProcess sluiced;
  std::string error;
  ASSERT_TRUE(sluiced.Start("policies: []\n", {}, "old-token", &error))
      << error;
  const std::string path = sluiced.token_path();
  ASSERT_EQ(ListWith(sluiced, "old-token"), grpc::StatusCode::OK);

  ASSERT_EQ(::unlink(path.c_str()), 0);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  EXPECT_TRUE(LogHas(sluiced, path + " is a FIFO, not a regular file"));
  EXPECT_EQ(ListWith(sluiced, "old-token"), grpc::StatusCode::OK);

  // The watcher thread was not stuck on the FIFO: the next rotation lands.
  ASSERT_EQ(::unlink(path.c_str()), 0);
  WriteFile(path, "new-token\n");
  EXPECT_TRUE(WaitFor(
                  [&] {
                    return ListWith(sluiced, "new-token") ==
                           grpc::StatusCode::OK;
                  },
                  kWait, absl::Milliseconds(100))
                  .has_value());
  EXPECT_EQ(ListWith(sluiced, "old-token"),
            grpc::StatusCode::UNAUTHENTICATED);

  // A FIFO again, left in place for the shutdown.
  ASSERT_EQ(::unlink(path.c_str()), 0);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  const std::string refused = path + " is a FIFO, not a regular file";
  EXPECT_TRUE(WaitFor(
                  [&] {
                    const std::string log = sluiced.Log();
                    const size_t first = log.find(refused);
                    return first != std::string::npos &&
                           log.find(refused, first + 1) != std::string::npos;
                  },
                  kWait, absl::Milliseconds(50))
                  .has_value());
  int exit_code = -1;
  EXPECT_LE(TimeToExit(sluiced, &exit_code), absl::Seconds(5));
  EXPECT_EQ(exit_code, 0);
}

TEST(HostileFilesTest, FifoStateFileDoesNotBlockStartUp) {
  SluicedProcess sluiced;
  const std::string path = sluiced.dir() + "/sluice.state";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  std::string error;
  const absl::Time start = absl::Now();
  ASSERT_TRUE(
      sluiced.Start("policies: []\n", {"--state-file=" + path}, "", &error))
      << error;
  const absl::Duration took = absl::Now() - start;
  std::cout << "start-up with a FIFO state file: "
            << absl::FormatDuration(took) << "\n";
  EXPECT_LT(took, absl::Seconds(10));
  EXPECT_THAT(sluiced.Log(),
              HasSubstr(path + " is a FIFO, not a regular file"));
  EXPECT_THAT(sluiced.Log(), HasSubstr("starting cold"));
  int exit_code = -1;
  EXPECT_LE(TimeToExit(sluiced, &exit_code), absl::Seconds(5));
  EXPECT_EQ(exit_code, 0);
  // The state written at shutdown replaced the FIFO with a regular file.
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
}

}  // namespace
}  // namespace sluice::testing
