// SPDX-License-Identifier: Apache-2.0
#include "server/app/unix_socket.h"

#include <fcntl.h>
#include <sys/file.h>
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

std::string LockPath(const std::string& path) { return path + ".lock"; }

// Whether a process accepts connections on the socket at `path`, without
// waiting: 0 when one accepts, EAGAIN when one listens but its backlog is
// full (alive, only busy), ECONNREFUSED when nobody listens (stale),
// another errno otherwise.
int Probe(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) return ENAMETOOLONG;
  std::memcpy(address.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return errno;
  const int rc = connect(fd, reinterpret_cast<const sockaddr*>(&address),
                         sizeof(address));
  const int error = rc == 0 ? 0 : errno;
  close(fd);
  return error == EINPROGRESS ? EAGAIN : error;
}

// Opens and locks PATH.lock: the fd, -1 when another process holds the
// lock, or an error. The file at the path is checked to be the one locked,
// so that a lock file unlinked by its previous holder meanwhile does not
// count.
absl::StatusOr<int> Lock(const std::string& path) {
  const std::string lock_path = LockPath(path);
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int fd = open(lock_path.c_str(),
                        O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot listen on unix:", path, ": cannot open ",
                       lock_path, ": ", Errno(errno)));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      close(fd);
      if (error == EWOULDBLOCK) return -1;
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot listen on unix:", path, ": cannot lock ", lock_path, ": ",
          Errno(error)));
    }
    struct stat locked {}, named {};
    if (fstat(fd, &locked) == 0 && lstat(lock_path.c_str(), &named) == 0 &&
        locked.st_dev == named.st_dev && locked.st_ino == named.st_ino) {
      return fd;
    }
    close(fd);  // unlinked by its last holder after we opened it: again
  }
  return absl::UnavailableError(absl::StrCat(
      "cannot listen on unix:", path, ": ", lock_path, " keeps changing"));
}

}  // namespace

std::string FormatSocketMode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

absl::StatusOr<UnixSocketClaim> UnixSocketClaim::Take(const std::string& path) {
  const std::string directory = Directory(path);
  struct stat dir_info {};
  if (stat(directory.c_str(), &dir_info) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot listen on unix:", path, ": directory ", directory,
                     ": ", Errno(errno)));
  }
  if (!S_ISDIR(dir_info.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot listen on unix:", path, ": ", directory, " is not a directory"));
  }
  absl::StatusOr<int> lock = Lock(path);
  if (!lock.ok()) return lock.status();
  if (*lock < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on unix:", path, ": another sluiced holds ",
                     LockPath(path), " and serves on it"));
  }
  // From here the lock is ours; it is given back (and the lock file
  // removed) when the path is not free.
  UnixSocketClaim claim(path, *lock);
  struct stat info {};
  if (lstat(path.c_str(), &info) != 0) {
    if (errno != ENOENT) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot listen on unix:", path, ": ", Errno(errno)));
    }
    claim.owns_socket_ = true;
    return claim;
  }
  if (!S_ISSOCK(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot listen on unix:", path,
                     ": the path exists and is not a socket; sluiced does "
                     "not remove it"));
  }
  const int probe = Probe(path);
  if (probe == 0 || probe == EAGAIN) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on unix:", path,
                     ": another process is serving on it"));
  }
  if (probe != ECONNREFUSED && probe != ENOENT) {  // ENOENT: gone meanwhile
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot listen on unix:", path, ": cannot tell whether its socket is "
        "in use: ", Errno(probe)));
  }
  if (probe == ECONNREFUSED) {
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot listen on unix:", path,
                       ": cannot remove the stale socket: ", Errno(errno)));
    }
    spdlog::warn(
        "removed the stale socket {} (nothing accepted on it: left by a "
        "process that is gone)",
        path);
  }
  claim.owns_socket_ = true;
  return claim;
}

UnixSocketClaim::UnixSocketClaim(UnixSocketClaim&& other) noexcept
    : path_(std::exchange(other.path_, std::string())),
      lock_fd_(std::exchange(other.lock_fd_, -1)),
      owns_socket_(std::exchange(other.owns_socket_, false)) {}

UnixSocketClaim& UnixSocketClaim::operator=(UnixSocketClaim&& other) noexcept {
  if (this != &other) {
    Release();
    path_ = std::exchange(other.path_, std::string());
    lock_fd_ = std::exchange(other.lock_fd_, -1);
    owns_socket_ = std::exchange(other.owns_socket_, false);
  }
  return *this;
}

UnixSocketClaim::~UnixSocketClaim() { Release(); }

absl::Status UnixSocketClaim::SetMode(mode_t mode) const {
  struct stat info {};
  if (lstat(path_.c_str(), &info) != 0 || !S_ISSOCK(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("unix:", path_, " is not the socket just bound"));
  }
  if (chmod(path_.c_str(), mode) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot set mode ", FormatSocketMode(mode), " on unix:", path_, ": ",
        Errno(errno)));
  }
  return absl::OkStatus();
}

void UnixSocketClaim::Release() {
  if (lock_fd_ < 0) return;
  if (owns_socket_) {
    // While the lock is held, a socket at the path can only be ours.
    struct stat info {};
    if (lstat(path_.c_str(), &info) == 0 && S_ISSOCK(info.st_mode)) {
      unlink(path_.c_str());
    }
  }
  // Unlinked before the lock goes, so that whoever locks next locks a file
  // that is at the path (Lock checks).
  unlink(LockPath(path_).c_str());
  close(lock_fd_);
  lock_fd_ = -1;
  owns_socket_ = false;
  path_.clear();
}

}  // namespace sluice::app
