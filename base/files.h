// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_BASE_FILES_H_
#define SLUICE_BASE_FILES_H_

#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

// Every file Sluice's programs read (policies, admin tokens, state, TLS
// certificates and keys, the Redis password, the tools' inputs) goes through
// ReadRegularFile, and every file they replace (the state file, the port
// file) through WriteFileAtomically. Plain functions; safe for concurrent
// use.

namespace sluice::base {

// What a configuration file may weigh unless the caller says otherwise.
inline constexpr size_t kDefaultMaxFileBytes = size_t{16} << 20;

// Reads the whole file at `path`, symlinks followed (Kubernetes mounts a
// ConfigMap or Secret through a ..data symlink). The open never blocks: a
// FIFO, a socket or a device is opened non-blocking, without becoming the
// controlling terminal, and refused after fstat, before any read. Errors
// name the path and the rule:
//   NOT_FOUND          "PATH does not exist"
//   PERMISSION_DENIED  "cannot open PATH: Permission denied"
//   FAILED_PRECONDITION "PATH is a FIFO, not a regular file" (also a
//                      directory, a socket, a character or block device),
//                      "PATH is larger than N bytes" (checked before and
//                      while reading, so a growing file is cut off too)
//   UNAVAILABLE        any other open, stat or read error
absl::StatusOr<std::string> ReadRegularFile(
    const std::string& path, size_t max_bytes = kDefaultMaxFileBytes);

struct AtomicWriteOptions {
  // Permission bits of the new file (before the umask).
  mode_t mode = 0600;
  // Forces the new file's modification time (a reader that compares mtimes
  // sees every replacement); unset: the time of the write.
  std::optional<absl::Time> mtime;
};

// Writes `bytes` to a new PATH.tmp in the same directory (whatever was
// there is removed first, so a FIFO or symlink left at that name is never
// opened), fsyncs it, renames it over `path` and fsyncs the directory: a
// reader (or a crash) sees the old file or the new one, never a part. Not
// for two writers of one path at once (the caller serializes). UNAVAILABLE
// (PERMISSION_DENIED for EACCES/EPERM) naming the step that failed; the temp
// file is removed.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view bytes,
                                 const AtomicWriteOptions& options = {});

}  // namespace sluice::base

#endif  // SLUICE_BASE_FILES_H_
