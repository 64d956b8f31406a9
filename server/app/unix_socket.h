// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_APP_UNIX_SOCKET_H_
#define SLUICE_SERVER_APP_UNIX_SOCKET_H_

// The life of a listener's Unix socket file. sluiced claims the path before
// gRPC binds it, sets the socket's mode once bound, and gives the path up
// after the listener has shut down.
//
// gRPC itself unlinks whatever is at the path before it binds, and unlinks
// the path again when the listener shuts down. So two processes must never
// serve one path at a time: the claim is an exclusive lock on PATH.lock,
// taken before the path is looked at and held until the listener is gone.
// A second sluiced on the same path is refused at once, and a socket that
// a crashed process left behind (its lock died with it) is removed.

#include <sys/types.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sluice::app {

// "0660": a mode as chmod(1) spells it.
std::string FormatSocketMode(mode_t mode);

class UnixSocketClaim {
 public:
  // Locks PATH.lock (without waiting), then makes `path` free for a new
  // listening socket: nothing there, or a stale socket, which is removed
  // with a warning in the log. Otherwise nothing is touched:
  //   UNAVAILABLE          another sluiced holds the lock, or a process that
  //                        does not take it accepts (or queues) connections
  //                        on the socket
  //   FAILED_PRECONDITION  the path exists and is not a socket; the
  //                        directory is missing, or the lock file cannot be
  //                        made
  //   PERMISSION_DENIED    the stale socket cannot be removed
  static absl::StatusOr<UnixSocketClaim> Take(const std::string& path);

  UnixSocketClaim(UnixSocketClaim&& other) noexcept;
  UnixSocketClaim& operator=(UnixSocketClaim&& other) noexcept;
  UnixSocketClaim(const UnixSocketClaim&) = delete;
  UnixSocketClaim& operator=(const UnixSocketClaim&) = delete;
  ~UnixSocketClaim();  // Release()

  const std::string& path() const { return path_; }

  // Sets `mode` (e.g. 0660) on the socket bound at path(). The mode decides
  // who may connect: connecting needs write permission on the socket.
  absl::Status SetMode(mode_t mode) const;

  // Removes the socket (if a listener left it) and the lock file, and lets
  // the lock go. Call once the listener has shut down; idempotent.
  void Release();

 private:
  UnixSocketClaim(std::string path, int lock_fd)
      : path_(std::move(path)), lock_fd_(lock_fd) {}

  std::string path_;
  int lock_fd_ = -1;  // -1 once released or moved from
  // The path was free (or made free) for our socket: Release removes it.
  bool owns_socket_ = false;
};

}  // namespace sluice::app

#endif  // SLUICE_SERVER_APP_UNIX_SOCKET_H_
