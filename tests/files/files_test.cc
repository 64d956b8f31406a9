// SPDX-License-Identifier: Apache-2.0
// base::ReadRegularFile never blocks and reads only regular files, within
// a size bound; base::WriteFileAtomically replaces a file whole, with the
// mode and modification time asked for.

#include "base/files.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace sluice::base {
namespace {

using ::testing::HasSubstr;

void Put(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

class RegularFileTest : public ::testing::Test {
 protected:
  testing::TempDir dir_{"regular_file_test"};
};

TEST_F(RegularFileTest, ReadsARegularFileWholeThroughASymlink) {
  const std::string bytes("a\0b\nc", 5);
  Put(dir_.File("f"), bytes);
  EXPECT_EQ(*ReadRegularFile(dir_.File("f")), bytes);
  // Kubernetes: name -> ..data/name, ..data -> ..v1.
  std::filesystem::create_directory(dir_.File("..v1"));
  Put(dir_.File("..v1/name"), "mounted");
  std::filesystem::create_directory_symlink("..v1", dir_.File("..data"));
  std::filesystem::create_symlink("..data/name", dir_.File("name"));
  EXPECT_EQ(*ReadRegularFile(dir_.File("name")), "mounted");
  Put(dir_.File("empty"), "");
  EXPECT_EQ(*ReadRegularFile(dir_.File("empty")), "");
}

TEST_F(RegularFileTest, RefusesWhatIsNotARegularFileWithoutWaiting) {
  const std::string fifo = dir_.File("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // A blocking open of a FIFO with no writer would never return.
  absl::StatusOr<std::string> r = ReadRegularFile(fifo);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(), fifo + " is a FIFO, not a regular file");

  r = ReadRegularFile(dir_.path());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(),
            dir_.path() + " is a directory, not a regular file");

  r = ReadRegularFile("/dev/null");
  EXPECT_EQ(r.status().message(),
            "/dev/null is a character device, not a regular file");

  // A listening Unix socket cannot even be opened: an error, not a wait.
  const std::string sock = dir_.File("s");
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_FALSE(ReadRegularFile(sock).ok());
  ::close(fd);
}

TEST_F(RegularFileTest, MissingUnreadableAndOversizedAreToldApart) {
  absl::StatusOr<std::string> r = ReadRegularFile(dir_.File("none"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), dir_.File("none") + " does not exist");

  Put(dir_.File("big"), std::string(101, 'x'));
  r = ReadRegularFile(dir_.File("big"), 100);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(),
            dir_.File("big") + " is larger than 100 bytes");
  EXPECT_TRUE(ReadRegularFile(dir_.File("big"), 101).ok());

  if (geteuid() != 0) {  // root reads anything
    Put(dir_.File("locked"), "x");
    ::chmod(dir_.File("locked").c_str(), 0);
    r = ReadRegularFile(dir_.File("locked"));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(r.status().message(), HasSubstr(dir_.File("locked")));
  }
}

TEST_F(RegularFileTest, AtomicWriteReplacesWholeWithModeAndTime) {
  const std::string path = dir_.File("out");
  Put(path, "old contents, longer than the new");
  AtomicWriteOptions options;
  options.mode = 0640;
  options.mtime = absl::FromUnixSeconds(2'000'000'000);
  ASSERT_TRUE(WriteFileAtomically(path, "new", options).ok());
  EXPECT_EQ(*ReadRegularFile(path), "new");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mtim.tv_sec, 2'000'000'000);
  EXPECT_EQ(st.st_mode & 0777, 0640u & ~[] {
              const mode_t mask = ::umask(0);
              ::umask(mask);
              return mask;
            }());
  // A FIFO (or a symlink) left at PATH.tmp is removed, never opened.
  ASSERT_EQ(::mkfifo((path + ".tmp").c_str(), 0600), 0);
  ASSERT_TRUE(WriteFileAtomically(path, "after a fifo").ok());
  EXPECT_EQ(*ReadRegularFile(path), "after a fifo");
  Put(dir_.File("victim"), "untouched");
  std::filesystem::create_symlink(dir_.File("victim"), path + ".tmp");
  ASSERT_TRUE(WriteFileAtomically(path, "after a symlink").ok());
  EXPECT_EQ(*ReadRegularFile(dir_.File("victim")), "untouched");
  // A FIFO in the way is replaced, not written into.
  ASSERT_EQ(::unlink(path.c_str()), 0);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  ASSERT_TRUE(WriteFileAtomically(path, "x").ok());
  EXPECT_EQ(*ReadRegularFile(path), "x");

  const absl::Status s =
      WriteFileAtomically(dir_.File("no/such/dir/f"), "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr(dir_.File("no/such/dir/f.tmp")));
}

}  // namespace
}  // namespace sluice::base
