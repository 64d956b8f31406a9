// SPDX-License-Identifier: Apache-2.0
#include "base/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace sluice::base {
namespace {

absl::Status Errno(absl::string_view what, absl::string_view path,
                   int error) {
  const std::string message =
      absl::StrCat(what, " ", path, ": ", std::strerror(error));
  if (error == EACCES || error == EPERM) {
    return absl::PermissionDeniedError(message);
  }
  return absl::UnavailableError(message);
}

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return nullptr;
}

// Closes the descriptor on every path out.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now and reports the error (a write's last chance to fail).
  int Close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

}  // namespace

absl::StatusOr<std::string> ReadRegularFile(const std::string& path,
                                            size_t max_bytes) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
  // writer; it does not change reads of a regular file.
  Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (fd.get() < 0) {
    const int error = errno;
    if (error == ENOENT) {
      return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    }
    return Errno("cannot open", path, error);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Errno("cannot stat", path, errno);
  if (!S_ISREG(st.st_mode)) {
    const char* kind = KindOf(st.st_mode);
    return absl::FailedPreconditionError(
        kind == nullptr
            ? absl::StrCat(path, " is not a regular file")
            : absl::StrCat(path, " is ", kind, ", not a regular file"));
  }
  const auto too_large = [&] {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is larger than ", max_bytes, " bytes"));
  };
  if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) > max_bytes) {
    return too_large();
  }
  std::string contents;
  contents.reserve(static_cast<size_t>(st.st_size));
  char buf[64 * 1024];
  while (true) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("cannot read", path, errno);
    }
    if (n == 0) break;
    if (static_cast<size_t>(n) > max_bytes - contents.size()) {
      return too_large();  // grew since the fstat
    }
    contents.append(buf, static_cast<size_t>(n));
  }
  return contents;
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view bytes,
                                 const AtomicWriteOptions& options) {
  const std::string tmp = path + ".tmp";
  // A fresh file every time: whatever is left at PATH.tmp (a file of a
  // crashed write, a FIFO an open would wait on, a symlink) goes first.
  ::unlink(tmp.c_str());
  Fd fd(::open(tmp.c_str(),
               O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
               options.mode));
  if (fd.get() < 0) return Errno("cannot create", tmp, errno);
  absl::Status status;
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n =
        ::write(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = Errno("cannot write", tmp, errno);
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (status.ok() && options.mtime.has_value()) {
    const timespec ts = absl::ToTimespec(*options.mtime);
    const timespec times[2] = {ts, ts};
    if (::futimens(fd.get(), times) != 0) {
      status = Errno("cannot set the time of", tmp, errno);
    }
  }
  if (status.ok() && ::fsync(fd.get()) != 0) {
    status = Errno("cannot fsync", tmp, errno);
  }
  if (fd.Close() != 0 && status.ok()) {
    status = Errno("cannot close", tmp, errno);
  }
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = Errno(absl::StrCat("cannot rename ", tmp, " to"), path, errno);
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  // The rename itself lasts only once the directory is on disk.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0) return Errno("cannot open directory", dir, errno);
  if (::fsync(dir_fd.get()) != 0) {
    return Errno("cannot fsync directory", dir, errno);
  }
  return absl::OkStatus();
}

}  // namespace sluice::base
