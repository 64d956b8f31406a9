// SPDX-License-Identifier: Apache-2.0
// The life of a listener's Unix socket file: what UnixSocketClaim frees,
// what it refuses to touch, its lock, and what Release removes. Real sockets
// in a temporary directory; no network, no sleeps.

#include "server/app/unix_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace sluice::app {
namespace {

using ::testing::HasSubstr;

bool Exists(const std::string& path) {
  struct stat info {};
  return lstat(path.c_str(), &info) == 0;
}

mode_t ModeOf(const std::string& path) {
  struct stat info {};
  EXPECT_EQ(lstat(path.c_str(), &info), 0) << path;
  return info.st_mode & 0777;
}

// A socket bound at `path`; listening (a live server) or not (what a
// crashed process leaves: the file stays, nobody accepts). Closed, and its
// file left in place, on destruction.
class BoundSocket {
 public:
  BoundSocket(const std::string& path, bool listening, int backlog = 4) {
    fd_ = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    ok_ = bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) ==
              0 &&
          (!listening || listen(fd_, backlog) == 0);
  }
  ~BoundSocket() { close(fd_); }
  bool ok() const { return ok_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

class UnixSocketTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()); }

  testing::TempDir dir_{"sluice_unix_socket"};
  const std::string path_ = dir_.File("sluice.sock");
};

TEST_F(UnixSocketTest, AFreePathIsClaimedAsIs) {
  absl::StatusOr<UnixSocketClaim> claim = UnixSocketClaim::Take(path_);
  ASSERT_TRUE(claim.ok()) << claim.status();
  EXPECT_FALSE(Exists(path_));
  EXPECT_TRUE(Exists(path_ + ".lock"));
  claim->Release();
  EXPECT_FALSE(Exists(path_ + ".lock"));
}

TEST_F(UnixSocketTest, AStaleSocketLeftByACrashIsRemoved) {
  {
    BoundSocket crashed(path_, /*listening=*/false);
    ASSERT_TRUE(crashed.ok());
  }
  ASSERT_TRUE(Exists(path_));
  absl::StatusOr<UnixSocketClaim> claim = UnixSocketClaim::Take(path_);
  ASSERT_TRUE(claim.ok()) << claim.status();
  EXPECT_FALSE(Exists(path_));
}

// The lock decides, not the socket file: gRPC unlinks the path before it
// binds, so a second claimant must be refused even when the file is gone.
TEST_F(UnixSocketTest, ASecondClaimWhileTheFirstHoldsItIsRefused) {
  absl::StatusOr<UnixSocketClaim> first = UnixSocketClaim::Take(path_);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<UnixSocketClaim> second = UnixSocketClaim::Take(path_);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(),
              HasSubstr("another sluiced holds " + path_ + ".lock"));
  first->Release();
  EXPECT_TRUE(UnixSocketClaim::Take(path_).ok());
}

TEST_F(UnixSocketTest, ASocketAProcessWithoutTheLockServesIsRefusedAndKept) {
  BoundSocket live(path_, /*listening=*/true);
  ASSERT_TRUE(live.ok());
  absl::StatusOr<UnixSocketClaim> claim = UnixSocketClaim::Take(path_);
  EXPECT_EQ(claim.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(claim.status().message(),
              HasSubstr("another process is serving on it"));
  EXPECT_TRUE(Exists(path_));
  EXPECT_FALSE(Exists(path_ + ".lock"));  // given back with the refusal
}

// A live server whose accept queue is full must count as live, and the
// probe must not wait for it.
TEST_F(UnixSocketTest, ALiveSocketWithAFullBacklogIsRefusedWithoutWaiting) {
  BoundSocket live(path_, /*listening=*/true, /*backlog=*/0);
  ASSERT_TRUE(live.ok());
  std::vector<int> queued;  // fill the backlog: nobody accepts
  for (int i = 0; i < 8; ++i) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path_.c_str(), sizeof(address.sun_path) - 1);
    connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    queued.push_back(fd);
  }
  absl::StatusOr<UnixSocketClaim> claim = UnixSocketClaim::Take(path_);
  EXPECT_EQ(claim.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(Exists(path_));
  for (int fd : queued) close(fd);
}

TEST_F(UnixSocketTest, AFileThatIsNotASocketIsNeverRemoved) {
  std::FILE* f = std::fopen(path_.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("precious\n", f);
  std::fclose(f);
  absl::StatusOr<UnixSocketClaim> claim = UnixSocketClaim::Take(path_);
  EXPECT_EQ(claim.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(claim.status().message(), HasSubstr("exists and is not a socket"));
  EXPECT_TRUE(Exists(path_));
}

TEST_F(UnixSocketTest, AMissingDirectoryIsNamed) {
  absl::StatusOr<UnixSocketClaim> claim =
      UnixSocketClaim::Take(dir_.File("no/such.sock"));
  EXPECT_EQ(claim.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(claim.status().message(),
              HasSubstr("directory " + dir_.File("no") + ": No such file"));
}

TEST_F(UnixSocketTest, SetModeAndReleaseRemoveTheBoundSocket) {
  absl::StatusOr<UnixSocketClaim> claim = UnixSocketClaim::Take(path_);
  ASSERT_TRUE(claim.ok()) << claim.status();
  BoundSocket bound(path_, /*listening=*/true);  // what gRPC does
  ASSERT_TRUE(bound.ok());
  ASSERT_TRUE(claim->SetMode(0660).ok());
  EXPECT_EQ(ModeOf(path_), 0660u);
  claim->Release();
  EXPECT_FALSE(Exists(path_));
  EXPECT_FALSE(Exists(path_ + ".lock"));
  claim->Release();  // idempotent
}

TEST_F(UnixSocketTest, SetModeRefusesWhatIsNotASocket) {
  absl::StatusOr<UnixSocketClaim> claim = UnixSocketClaim::Take(path_);
  ASSERT_TRUE(claim.ok()) << claim.status();
  std::FILE* f = std::fopen(path_.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  EXPECT_FALSE(claim->SetMode(0660).ok());
}

TEST(SocketModeTest, FormatsAsChmodSpellsIt) {
  EXPECT_EQ(FormatSocketMode(0660), "0660");
  EXPECT_EQ(FormatSocketMode(0600), "0600");
  EXPECT_EQ(FormatSocketMode(0777), "0777");
}

}  // namespace
}  // namespace sluice::app
