#include "server/app/state_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "sluice/v1/state.pb.h"
#include "wire/time.h"

namespace sluice::app {
namespace {

constexpr absl::string_view kMagic = "sluice-state";
// Far above any real state (10,000 keys of a policy are about 2 MB); a file
// this large is not ours.
constexpr size_t kMaxStateFileBytes = size_t{256} << 20;

absl::Status Errno(absl::string_view what, const std::string& path,
                   int error) {
  const std::string message =
      absl::StrCat(what, " ", path, ": ", std::strerror(error));
  if (error == EACCES || error == EPERM) {
    return absl::PermissionDeniedError(message);
  }
  return absl::UnavailableError(message);
}

void ToProto(const core::DependencyWarmState& dep, v1::WarmDependency* out) {
  out->set_name(dep.name);
  out->set_digest(dep.digest);
  for (const core::KeyWarmState& key : dep.keys) {
    v1::WarmKey* k = out->add_keys();
    k->set_key(key.key);
    if (key.limit) {
      k->mutable_limit()->set_steady_limit(key.limit->steady_limit);
      if (key.limit->baseline > absl::ZeroDuration()) {
        wire::DurationToProto(key.limit->baseline,
                              k->mutable_limit()->mutable_baseline());
      }
    }
    if (key.baseline) {
      v1::WarmBaseline* b = k->mutable_baseline();
      b->set_windows(key.baseline->windows);
      b->set_mean_us(key.baseline->mean_us);
      b->set_var_us2(key.baseline->var_us2);
      b->set_success(key.baseline->success);
    }
    if (key.breaker) {
      v1::WarmBreaker* b = k->mutable_breaker();
      b->set_generation(key.breaker->generation);
      *b->mutable_open_until() = wire::TimestampToProto(key.breaker->open_until);
      wire::DurationToProto(key.breaker->open_duration,
                            b->mutable_open_duration());
      b->set_cause(key.breaker->cause);
    }
  }
}

absl::StatusOr<core::DependencyWarmState> FromProto(
    const v1::WarmDependency& dep) {
  if (dep.name().empty()) {
    return absl::DataLossError("a dependency without a name");
  }
  core::DependencyWarmState out;
  out.name = dep.name();
  out.digest = dep.digest();
  for (const v1::WarmKey& key : dep.keys()) {
    core::KeyWarmState k;
    k.key = key.key();
    if (key.has_limit()) {
      core::AdaptiveLimitState limit;
      limit.steady_limit = key.limit().steady_limit();
      absl::StatusOr<absl::Duration> baseline =
          wire::DurationFromProto(key.limit().baseline(), "limit.baseline");
      if (!baseline.ok() || *baseline < absl::ZeroDuration()) {
        return absl::DataLossError(absl::StrCat(
            "dependency \"", dep.name(), "\": a bad limit.baseline"));
      }
      limit.baseline = *baseline;
      k.limit = limit;
    }
    if (key.has_baseline()) {
      core::BaselineState baseline;
      baseline.windows = key.baseline().windows();
      baseline.mean_us = key.baseline().mean_us();
      baseline.var_us2 = key.baseline().var_us2();
      baseline.success = key.baseline().success();
      k.baseline = baseline;
    }
    if (key.has_breaker()) {
      core::BreakerRecord breaker;
      breaker.generation = key.breaker().generation();
      breaker.state = core::BreakerState::kOpen;
      breaker.open_until = wire::TimestampFromProto(key.breaker().open_until());
      absl::StatusOr<absl::Duration> open_duration = wire::DurationFromProto(
          key.breaker().open_duration(), "breaker.open_duration");
      if (!open_duration.ok() || *open_duration < absl::ZeroDuration()) {
        return absl::DataLossError(absl::StrCat(
            "dependency \"", dep.name(), "\": a bad breaker.open_duration"));
      }
      breaker.open_duration = *open_duration;
      breaker.cause = key.breaker().cause();
      k.breaker = std::move(breaker);
    }
    out.keys.push_back(std::move(k));
  }
  return out;
}

}  // namespace

uint32_t Crc32c(absl::string_view data) {
  static const std::array<uint32_t, 256> kTable = [] {
    std::array<uint32_t, 256> table{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int bit = 0; bit < 8; ++bit) {
        c = (c & 1) != 0 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      }
      table[i] = c;
    }
    return table;
  }();
  uint32_t crc = ~0u;
  for (const char ch : data) {
    crc = kTable[(crc ^ static_cast<unsigned char>(ch)) & 0xff] ^ (crc >> 8);
  }
  return ~crc;
}

absl::StatusOr<std::string> EncodeStateFile(const SavedWarmState& state) {
  v1::WarmStateFile file;
  *file.mutable_written_at() = wire::TimestampToProto(state.written_at);
  for (const core::DependencyWarmState& dep : state.dependencies) {
    ToProto(dep, file.add_dependencies());
  }
  google::protobuf::util::JsonPrintOptions print;
  print.add_whitespace = true;
  print.preserve_proto_field_names = true;
  std::string body;
  if (auto s = google::protobuf::util::MessageToJsonString(file, &body, print);
      !s.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot print the state as JSON: ", s.ToString()));
  }
  return absl::StrCat(kMagic, " ", kStateFileVersion, " ", body.size(), " ",
                      absl::StrFormat("%08x", Crc32c(body)), "\n", body);
}

absl::StatusOr<SavedWarmState> DecodeStateFile(absl::string_view bytes) {
  const size_t eol = bytes.find('\n');
  // The header is short; a long first line is some other file.
  const absl::string_view header =
      bytes.substr(0, std::min<size_t>(eol, 80));
  const std::vector<absl::string_view> fields = absl::StrSplit(header, ' ');
  if (eol == absl::string_view::npos || eol > 80 || fields.size() != 4 ||
      fields[0] != kMagic) {
    return absl::DataLossError(
        absl::StrCat("not a sluice state file (expected a first line \"",
                     kMagic, " VERSION LENGTH CRC32C\")"));
  }
  int version = 0;
  size_t length = 0;
  uint32_t crc = 0;
  if (!absl::SimpleAtoi(fields[1], &version) ||
      !absl::SimpleAtoi(fields[2], &length) || fields[3].size() != 8 ||
      !absl::SimpleHexAtoi(fields[3], &crc)) {
    return absl::DataLossError(absl::StrCat(
        "bad header line \"", absl::CHexEscape(header), "\""));
  }
  if (version != kStateFileVersion) {
    return absl::DataLossError(absl::StrCat(
        "format version ", version, "; this sluiced reads version ",
        kStateFileVersion));
  }
  const absl::string_view body = bytes.substr(eol + 1);
  if (body.size() < length) {
    return absl::DataLossError(
        absl::StrCat("truncated: the header says ", length,
                     " bytes follow, only ", body.size(), " do"));
  }
  if (body.size() > length) {
    return absl::DataLossError(
        absl::StrCat("the header says ", length, " bytes follow, but ",
                     body.size(), " do"));
  }
  if (const uint32_t actual = Crc32c(body); actual != crc) {
    return absl::DataLossError(absl::StrFormat(
        "checksum mismatch: the header says %08x, the content has %08x "
        "(the file is corrupt)",
        crc, actual));
  }
  v1::WarmStateFile file;
  google::protobuf::util::JsonParseOptions parse;
  // Fields a later version of the same format adds are not an error.
  parse.ignore_unknown_fields = true;
  if (auto s = google::protobuf::util::JsonStringToMessage(
          std::string(body), &file, parse);
      !s.ok()) {
    return absl::DataLossError(
        absl::StrCat("bad JSON in the body: ", s.message().ToString()));
  }
  SavedWarmState state;
  state.written_at = wire::TimestampFromProto(file.written_at());
  for (const v1::WarmDependency& dep : file.dependencies()) {
    absl::StatusOr<core::DependencyWarmState> d = FromProto(dep);
    if (!d.ok()) return d.status();
    state.dependencies.push_back(*std::move(d));
  }
  return state;
}

absl::StatusOr<SavedWarmState> ReadStateFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) {
      return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    }
    return Errno("cannot open", path, error);
  }
  std::string bytes;
  struct stat st {};
  absl::Status status;
  if (fstat(fd, &st) != 0) {
    status = Errno("cannot stat", path, errno);
  } else if (!S_ISREG(st.st_mode)) {
    status = absl::DataLossError(absl::StrCat(path, " is not a regular file"));
  } else if (static_cast<size_t>(st.st_size) > kMaxStateFileBytes) {
    status = absl::DataLossError(absl::StrCat(
        "not a sluice state file (", st.st_size, " bytes, more than ",
        kMaxStateFileBytes, ")"));
  } else {
    char buf[65536];
    while (true) {
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status = Errno("cannot read", path, errno);
        break;
      }
      if (n == 0) break;
      bytes.append(buf, static_cast<size_t>(n));
      if (bytes.size() > kMaxStateFileBytes) {
        status = absl::DataLossError("not a sluice state file (too large)");
        break;
      }
    }
  }
  close(fd);
  if (!status.ok()) return status;
  return DecodeStateFile(bytes);
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view bytes) {
  const std::string tmp = path + ".tmp";
  const int fd =
      open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot create", tmp, errno);
  absl::Status status;
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = Errno("cannot write", tmp, errno);
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (status.ok() && fsync(fd) != 0) status = Errno("cannot fsync", tmp, errno);
  if (close(fd) != 0 && status.ok()) status = Errno("cannot close", tmp, errno);
  if (status.ok() && rename(tmp.c_str(), path.c_str()) != 0) {
    status = Errno(absl::StrCat("cannot rename ", tmp, " to"), path, errno);
  }
  if (!status.ok()) {
    unlink(tmp.c_str());
    return status;
  }
  // The rename itself lasts only once the directory is on disk.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return Errno("cannot open directory", dir, errno);
  if (fsync(dir_fd) != 0) status = Errno("cannot fsync directory", dir, errno);
  close(dir_fd);
  return status;
}

}  // namespace sluice::app
