// The life of a listener's Unix socket file: what ClaimUnixSocketPath frees,
// what it refuses to touch, and that UnixSocketFile removes only its own
// socket. Real sockets in a temporary directory; no network, no sleeps.

#include "server/app/unix_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

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
  BoundSocket(const std::string& path, bool listening) {
    fd_ = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    ok_ = bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) ==
              0 &&
          (!listening || listen(fd_, 4) == 0);
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
  EXPECT_TRUE(ClaimUnixSocketPath(path_).ok());
  EXPECT_FALSE(Exists(path_));
}

TEST_F(UnixSocketTest, AStaleSocketLeftByACrashIsRemoved) {
  {
    BoundSocket crashed(path_, /*listening=*/false);
    ASSERT_TRUE(crashed.ok());
  }
  ASSERT_TRUE(Exists(path_));
  EXPECT_TRUE(ClaimUnixSocketPath(path_).ok());
  EXPECT_FALSE(Exists(path_));
}

TEST_F(UnixSocketTest, ASocketALiveProcessServesIsRefusedAndKept) {
  BoundSocket live(path_, /*listening=*/true);
  ASSERT_TRUE(live.ok());
  const absl::Status status = ClaimUnixSocketPath(path_);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("another process is serving on it"));
  EXPECT_TRUE(Exists(path_));
}

TEST_F(UnixSocketTest, AFileThatIsNotASocketIsNeverRemoved) {
  std::FILE* f = std::fopen(path_.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("precious\n", f);
  std::fclose(f);
  const absl::Status status = ClaimUnixSocketPath(path_);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("exists and is not a socket"));
  EXPECT_TRUE(Exists(path_));
}

TEST_F(UnixSocketTest, AMissingDirectoryIsNamed) {
  const absl::Status status = ClaimUnixSocketPath(dir_.File("no/such.sock"));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(),
              HasSubstr("directory " + dir_.File("no") + " does not exist"));
}

TEST_F(UnixSocketTest, AdoptSetsTheModeAndRemoveDeletesTheSocket) {
  BoundSocket bound(path_, /*listening=*/true);
  ASSERT_TRUE(bound.ok());
  absl::StatusOr<UnixSocketFile> file = UnixSocketFile::Adopt(path_, 0660);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(ModeOf(path_), 0660u);
  file->Remove();
  EXPECT_FALSE(Exists(path_));
  file->Remove();  // idempotent
}

TEST_F(UnixSocketTest, RemoveLeavesASuccessorsSocketAlone) {
  absl::StatusOr<UnixSocketFile> first;
  {
    BoundSocket old_socket(path_, /*listening=*/true);
    ASSERT_TRUE(old_socket.ok());
    first = UnixSocketFile::Adopt(path_, 0600);
    ASSERT_TRUE(first.ok()) << first.status();
  }
  // Another process has since taken the path (a restart that overlapped).
  // The old file is moved aside rather than unlinked, so that the new
  // socket cannot reuse its inode number.
  const std::string aside = dir_.File("old.sock");
  ASSERT_EQ(std::rename(path_.c_str(), aside.c_str()), 0);
  BoundSocket successor(path_, /*listening=*/true);
  ASSERT_TRUE(successor.ok());
  first->Remove();
  EXPECT_TRUE(Exists(path_));
}

TEST_F(UnixSocketTest, AdoptRefusesWhatIsNotASocket) {
  std::FILE* f = std::fopen(path_.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  EXPECT_FALSE(UnixSocketFile::Adopt(path_, 0660).ok());
}

TEST(SocketModeTest, FormatsAsChmodSpellsIt) {
  EXPECT_EQ(FormatSocketMode(0660), "0660");
  EXPECT_EQ(FormatSocketMode(0600), "0600");
  EXPECT_EQ(FormatSocketMode(0777), "0777");
}

}  // namespace
}  // namespace sluice::app
