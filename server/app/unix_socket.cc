#include "server/app/unix_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace sluice::app {
namespace {

std::string Errno(int error) { return std::strerror(error); }

// The directory part of `path` ("." for a bare name).
std::string Directory(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Whether a process accepts connections on the socket at `path`: 0 when one
// does, ECONNREFUSED when the socket is stale, another errno otherwise.
int Probe(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) return ENAMETOOLONG;
  std::memcpy(address.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  const int rc = connect(fd, reinterpret_cast<const sockaddr*>(&address),
                         sizeof(address));
  const int error = rc == 0 ? 0 : errno;
  close(fd);
  return error;
}

}  // namespace

std::string FormatSocketMode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

absl::Status ClaimUnixSocketPath(const std::string& path) {
  const std::string directory = Directory(path);
  struct stat dir_info {};
  if (stat(directory.c_str(), &dir_info) != 0 || !S_ISDIR(dir_info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot listen on unix:", path, ": directory ", directory,
                     " does not exist"));
  }
  struct stat info {};
  if (lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot listen on unix:", path, ": ", Errno(errno)));
  }
  if (!S_ISSOCK(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot listen on unix:", path,
                     ": the path exists and is not a socket; sluiced does "
                     "not remove it"));
  }
  const int probe = Probe(path);
  if (probe == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on unix:", path,
                     ": another process is serving on it"));
  }
  if (probe != ECONNREFUSED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot listen on unix:", path, ": cannot tell whether its socket is "
        "in use: ", Errno(probe)));
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot listen on unix:", path,
                     ": cannot remove the stale socket: ", Errno(errno)));
  }
  spdlog::warn(
      "removed the stale socket {} (nothing accepted on it: left by a process "
      "that is gone)",
      path);
  return absl::OkStatus();
}

absl::StatusOr<UnixSocketFile> UnixSocketFile::Adopt(const std::string& path,
                                                     mode_t mode) {
  if (chmod(path.c_str(), mode) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot set mode ", FormatSocketMode(mode), " on unix:", path, ": ",
        Errno(errno)));
  }
  struct stat info {};
  if (lstat(path.c_str(), &info) != 0 || !S_ISSOCK(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("unix:", path, " is not the socket just bound"));
  }
  return UnixSocketFile(path, info.st_dev, info.st_ino);
}

UnixSocketFile::UnixSocketFile(UnixSocketFile&& other) noexcept
    : path_(std::exchange(other.path_, std::string())),
      device_(other.device_),
      inode_(other.inode_) {}

UnixSocketFile& UnixSocketFile::operator=(UnixSocketFile&& other) noexcept {
  if (this != &other) {
    Remove();
    path_ = std::exchange(other.path_, std::string());
    device_ = other.device_;
    inode_ = other.inode_;
  }
  return *this;
}

UnixSocketFile::~UnixSocketFile() { Remove(); }

void UnixSocketFile::Remove() {
  if (path_.empty()) return;
  struct stat info {};
  if (lstat(path_.c_str(), &info) == 0 && S_ISSOCK(info.st_mode) &&
      info.st_dev == device_ && info.st_ino == inode_) {
    unlink(path_.c_str());
  }
  path_.clear();
}

}  // namespace sluice::app
