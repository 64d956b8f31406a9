#ifndef SLUICE_SERVER_APP_UNIX_SOCKET_H_
#define SLUICE_SERVER_APP_UNIX_SOCKET_H_

// The life of a listener's Unix socket file: sluiced claims the path before
// gRPC binds it, sets its mode once bound, and removes it at exit.
//
// gRPC itself unlinks whatever socket is at the path before it binds, so a
// second sluiced started on the path of a live one would silently take its
// clients. ClaimUnixSocketPath refuses that case, removes only a socket
// nobody accepts on (left behind by a crash), and never removes a file that
// is not a socket.

#include <sys/types.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sluice::app {

// "0660": a mode as chmod(1) spells it.
std::string FormatSocketMode(mode_t mode);

// Makes `path` free for a new listening socket. OK when nothing is there,
// or when a socket is there that refuses connections (it is removed, and a
// warning logged). Otherwise, and nothing is touched:
//   UNAVAILABLE          another process accepts connections on it
//   FAILED_PRECONDITION  it exists and is not a socket; the directory is
//                        missing or not a directory
//   PERMISSION_DENIED    the stale socket cannot be removed
absl::Status ClaimUnixSocketPath(const std::string& path);

// A socket file that this process bound. Remove() deletes it only while it
// is still the same file (device and inode), so a successor's socket at the
// same path survives a late exit.
class UnixSocketFile {
 public:
  // Sets `mode` (e.g. 0660) on the socket gRPC just bound at `path`, and
  // records which file it is. The mode decides who may connect: connecting
  // needs write permission on the socket.
  static absl::StatusOr<UnixSocketFile> Adopt(const std::string& path,
                                              mode_t mode);

  UnixSocketFile(UnixSocketFile&& other) noexcept;
  UnixSocketFile& operator=(UnixSocketFile&& other) noexcept;
  UnixSocketFile(const UnixSocketFile&) = delete;
  UnixSocketFile& operator=(const UnixSocketFile&) = delete;
  ~UnixSocketFile();  // Remove()

  const std::string& path() const { return path_; }
  // Unlinks the file if it is still the one adopted; idempotent.
  void Remove();

 private:
  UnixSocketFile(std::string path, dev_t device, ino_t inode)
      : path_(std::move(path)), device_(device), inode_(inode) {}

  std::string path_;  // empty once removed or moved from
  dev_t device_ = 0;
  ino_t inode_ = 0;
};

}  // namespace sluice::app

#endif  // SLUICE_SERVER_APP_UNIX_SOCKET_H_
