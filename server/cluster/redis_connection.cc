// SPDX-License-Identifier: Apache-2.0
#include "server/cluster/redis_connection.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/files.h"
#include "spdlog/spdlog.h"

namespace sluice::cluster {
namespace {

// At most one failure line a minute while the kind stays the same.
constexpr absl::Duration kLogEvery = absl::Minutes(1);

timeval Timeout(absl::Duration d) {
  return absl::ToTimeval(std::max(d, absl::Milliseconds(1)));
}

absl::string_view Str(const redisReply* r) {
  if (r == nullptr) return {};
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
      r->type == REDIS_REPLY_ERROR) {
    return absl::string_view(r->str, r->len);
  }
  return {};
}

void Append(redisContext* c, const std::string* prefix_a,
            const std::string* prefix_b, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  argv.reserve(args.size() + 2);
  lens.reserve(args.size() + 2);
  for (const std::string* p : {prefix_a, prefix_b}) {
    if (p == nullptr) continue;
    argv.push_back(p->data());
    lens.push_back(p->size());
  }
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(),
                         lens.data());
}

// What went wrong with a connection, in words ("Resource temporarily
// unavailable" is how a read timeout reads otherwise).
std::string ContextError(const redisContext* c, absl::string_view kind,
                         absl::Duration timeout) {
  if (c == nullptr) return "out of memory";
  if (kind == "timeout") {
    return absl::StrCat("no answer within ", absl::FormatDuration(timeout),
                        " (--redis-timeout)");
  }
  return c->errstr;
}

// The reconnect backoff: no jitter, each connection's own.
base::ExponentialBackoff::Options BackoffOptions(
    const RedisConnectionOptions& options) {
  base::ExponentialBackoff::Options out;
  out.initial = options.min_backoff;
  out.max = options.max_backoff;
  return out;
}

}  // namespace

void RedisHealth::Error(absl::string_view kind, const std::string& message,
                        absl::Time now) {
  absl::MutexLock lock(&mu_);
  ++errors_[std::string(kind)];
  if (kind == last_logged_kind_ && now - last_logged_ < kLogEvery) {
    ++suppressed_;
    return;
  }
  if (suppressed_ > 0) {
    spdlog::error("{} ({} more failures since the last line)", message,
                  suppressed_);
  } else {
    spdlog::error("{}", message);
  }
  last_logged_kind_ = std::string(kind);
  last_logged_ = now;
  suppressed_ = 0;
}

void RedisHealth::Event(absl::string_view kind) {
  absl::MutexLock lock(&mu_);
  ++events_[std::string(kind)];
}

bool RedisHealth::Recovered() {
  absl::MutexLock lock(&mu_);
  const bool failed = !last_logged_kind_.empty();
  last_logged_kind_.clear();
  last_logged_ = absl::InfinitePast();
  suppressed_ = 0;
  return failed;
}

std::map<std::string, uint64_t> RedisHealth::errors() const {
  absl::MutexLock lock(&mu_);
  return errors_;
}

std::map<std::string, uint64_t> RedisHealth::events() const {
  absl::MutexLock lock(&mu_);
  return events_;
}

std::string RedisAddress::ToString() const {
  return absl::StrCat(host, ":", port);
}

absl::string_view RedisReplyErrorKind(absl::string_view error) {
  // Contains, not starts with: Redis reports an error of a command inside
  // a script as "ERR Error running script ...: NOPERM ..." (or READONLY).
  if (absl::StartsWith(error, "WRONGPASS") ||
      absl::StartsWith(error, "NOAUTH") ||
      absl::StrContains(error, "NOPERM") ||
      absl::StrContains(error, "invalid password") ||
      absl::StrContains(error, "no password is set") ||
      absl::StrContains(error, "without any password configured")) {
    return "auth";
  }
  if (absl::StrContains(error, "READONLY")) return "readonly";
  if (absl::StartsWith(error, "NOSCRIPT") ||
      absl::StrContains(error, "script")) {
    return "script";
  }
  return "protocol";
}

absl::string_view RedisContextErrorKind(int err, int errno_value) {
  if (err == REDIS_ERR_IO &&
      (errno_value == EAGAIN || errno_value == EWOULDBLOCK ||
       errno_value == ETIMEDOUT || errno_value == EINPROGRESS)) {
    return "timeout";
  }
  if (err == REDIS_ERR_PROTOCOL || err == REDIS_ERR_OOM ||
      err == REDIS_ERR_OTHER) {
    return "protocol";
  }
  return "connect";  // refused, reset, closed (REDIS_ERR_EOF), unresolved
}

absl::StatusOr<std::string> ReadPasswordFile(const std::string& path) {
  // Far above any real password; a larger file is not one.
  constexpr size_t kMaxPasswordFileBytes = 64 * 1024;
  absl::StatusOr<std::string> text =
      base::ReadRegularFile(path, kMaxPasswordFileBytes);
  if (!text.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot read the password file: ", text.status().message()));
  }
  std::string password = *std::move(text);
  password.erase(password.find_last_not_of(" \t\r\n") + 1);
  if (password.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the password file ", path, " is empty"));
  }
  return password;
}

void RedisReplyDeleter::operator()(redisReply* r) const {
  if (r != nullptr) freeReplyObject(r);
}

RedisConnection::RedisConnection(const RedisConnectionOptions& options,
                                 std::string host, int port)
    : options_(options),
      host_(std::move(host)),
      port_(port),
      backoff_(BackoffOptions(options)) {}

RedisConnection::RedisConnection(const RedisConnectionOptions& options,
                                 RedisLocator* locator)
    : options_(options), locator_(locator), backoff_(BackoffOptions(options)) {}

RedisConnection::~RedisConnection() { Close(); }

std::string RedisConnection::address() const {
  return absl::StrCat(host_, ":", port_);
}

void RedisConnection::Close() {
  if (context_ != nullptr) redisFree(context_);
  context_ = nullptr;
  tick_sha_.clear();
  config_sha_.clear();
}

void RedisConnection::Drop(absl::Time now) {
  Close();
  next_attempt_ = now + backoff_.Next();
}

absl::Status RedisConnection::Fail(absl::string_view kind,
                                   const std::string& message,
                                   absl::Time now) {
  if (options_.health != nullptr) options_.health->Error(kind, message, now);
  Drop(now);
  if (kind == "timeout") return absl::DeadlineExceededError(message);
  return absl::UnavailableError(message);
}

RedisReplyPtr RedisConnection::Command(const std::vector<std::string>& args) {
  Append(context_, nullptr, nullptr, args);
  void* raw = nullptr;
  if (redisGetReply(context_, &raw) != REDIS_OK) return nullptr;
  return RedisReplyPtr(static_cast<redisReply*>(raw));
}

absl::Status RedisConnection::Ensure(absl::Time now) {
  if (context_ != nullptr && locator_ != nullptr &&
      locator_->generation() != generation_) {
    // Another connection of the store found a new master: follow it now.
    spdlog::info("redis connection to {} moves to the new master",
                 address());
    Close();
  }
  if (context_ != nullptr && context_->err == 0 && !tick_sha_.empty() &&
      !config_sha_.empty()) {
    return absl::OkStatus();
  }
  if (context_ != nullptr) Close();
  if (now < next_attempt_) {
    return absl::UnavailableError(absl::StrCat(
        "waiting ", absl::FormatDuration(next_attempt_ - now),
        " before reconnecting to ",
        locator_ != nullptr ? "the redis master" : address()));
  }
  if (absl::Status s = Connect(now); !s.ok()) return s;
  // The backoff is reset by the first good round trip (Pipeline), not here:
  // a server that accepts connections but refuses the work (a replica at a
  // fixed --redis address answers READONLY) must not be redialled at the
  // shortest backoff for ever.
  if (options_.health != nullptr && options_.health->Recovered()) {
    spdlog::info("redis {}: connected again", address());
  }
  return absl::OkStatus();
}

absl::Status RedisConnection::Connect(absl::Time now) {
  // 1. Where: fixed, or the master Sentinel names now.
  if (locator_ != nullptr) {
    generation_ = locator_->generation();
    absl::StatusOr<RedisAddress> master = locator_->Locate(now);
    if (!master.ok()) {
      return Fail("sentinel", std::string(master.status().message()), now);
    }
    host_ = master->host;
    port_ = master->port;
  }
  const std::string where = address();
  auto context_error = [&](absl::string_view step) {
    const int saved_errno = errno;
    const absl::string_view kind =
        context_ != nullptr ? RedisContextErrorKind(context_->err, saved_errno)
                            : absl::string_view("connect");
    return Fail(kind,
                absl::StrCat("redis ", where, ": ", step, " failed: ",
                             ContextError(context_, kind, options_.timeout)),
                now);
  };
  auto refused = [&](absl::string_view step, const redisReply* reply,
                     absl::string_view hint) {
    const absl::string_view error = Str(reply);
    return Fail(RedisReplyErrorKind(error),
                absl::StrCat("redis ", where, " refused ", step, ": ", error,
                             hint),
                now);
  };

  // 2. Connect, with the timeout on the connect and on every reply.
  context_ = redisConnectWithTimeout(host_.c_str(), port_,
                                     Timeout(options_.timeout));
  if (context_ == nullptr || context_->err != 0) {
    return context_error("connect");
  }
  redisSetTimeout(context_, Timeout(options_.timeout));

  // 3. AUTH, with the password read now: a rotated secret needs no restart.
  if (!options_.password_file.empty()) {
    absl::StatusOr<std::string> password =
        ReadPasswordFile(options_.password_file);
    if (!password.ok()) {
      return Fail("auth",
                  absl::StrCat("redis ", where, ": --redis-password-file: ",
                               password.status().message()),
                  now);
    }
    std::vector<std::string> auth = {"AUTH"};
    if (!options_.user.empty()) auth.push_back(options_.user);
    auth.push_back(*std::move(password));
    RedisReplyPtr reply = Command(auth);
    if (reply == nullptr) return context_error("AUTH");
    if (reply->type == REDIS_REPLY_ERROR) {
      return Fail(
          "auth",
          absl::StrCat("redis ", where, " refused AUTH as user \"",
                       options_.user.empty() ? "default" : options_.user,
                       "\" with the password in ", options_.password_file,
                       " (--redis-user, --redis-password-file): ",
                       Str(reply.get())),
          now);
    }
  }

  // 4. SELECT the database.
  if (options_.db != 0) {
    RedisReplyPtr reply = Command({"SELECT", absl::StrCat(options_.db)});
    if (reply == nullptr) return context_error("SELECT");
    if (reply->type == REDIS_REPLY_ERROR) {
      return refused(absl::StrCat("SELECT ", options_.db), reply.get(),
                     " (--redis-db)");
    }
  }

  // 5. ROLE: never write to a replica a stale sentinel pointed at.
  if (options_.require_master) {
    RedisReplyPtr reply = Command({"ROLE"});
    if (reply == nullptr) return context_error("ROLE");
    if (reply->type == REDIS_REPLY_ERROR) {
      return refused("ROLE", reply.get(), "");
    }
    const absl::string_view role =
        reply->type == REDIS_REPLY_ARRAY && reply->elements > 0
            ? Str(reply->element[0])
            : absl::string_view();
    if (role != "master") {
      return Fail("readonly",
                  absl::StrCat("redis ", where, " is a ",
                               role.empty() ? "server of unknown role" : role,
                               ", not a master; asking again"),
                  now);
    }
  }
  if (locator_ != nullptr) generation_ = locator_->Confirmed({host_, port_});

  // 6. Load both scripts.
  for (auto [script, sha] : {std::make_pair(TickScript(), &tick_sha_),
                             std::make_pair(ConfigScript(), &config_sha_)}) {
    RedisReplyPtr reply = Command({"SCRIPT", "LOAD", script});
    if (reply == nullptr) return context_error("SCRIPT LOAD");
    if (reply->type != REDIS_REPLY_STRING) {
      const bool no_auth = options_.password_file.empty() &&
                           absl::StartsWith(Str(reply.get()), "NOAUTH");
      return refused("SCRIPT LOAD", reply.get(),
                     no_auth ? "; this Redis wants a password: set "
                               "--redis-password-file"
                             : "");
    }
    *sha = std::string(Str(reply.get()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RedisReplyPtr>> RedisConnection::Pipeline(
    const std::vector<RedisCommand>& commands, absl::Time now) {
  if (absl::Status s = Ensure(now); !s.ok()) return s;
  static const std::string kEvalSha = "EVALSHA";
  for (const RedisCommand& command : commands) {
    switch (command.script) {
      case RedisScript::kNone:
        Append(context_, nullptr, nullptr, command.args);
        break;
      case RedisScript::kTick:
        Append(context_, &kEvalSha, &tick_sha_, command.args);
        break;
      case RedisScript::kConfig:
        Append(context_, &kEvalSha, &config_sha_, command.args);
        break;
    }
  }
  std::vector<RedisReplyPtr> replies;
  replies.reserve(commands.size());
  for (size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(context_, &raw) != REDIS_OK || raw == nullptr) {
      const absl::string_view kind =
          RedisContextErrorKind(context_->err, errno);
      return Fail(kind,
                  absl::StrCat("redis ", address(), ": ",
                               ContextError(context_, kind, options_.timeout)),
                  now);
    }
    replies.emplace_back(static_cast<redisReply*>(raw));
  }
  // A master demoted under us answers READONLY: whatever it did take is
  // lost to the new master, so the tick fails as a whole and is redone.
  for (const RedisReplyPtr& reply : replies) {
    if (reply->type == REDIS_REPLY_ERROR &&
        RedisReplyErrorKind(Str(reply.get())) == "readonly") {
      return Fail("readonly",
                  absl::StrCat("redis ", address(),
                               " is a replica now: ", Str(reply.get())),
                  now);
    }
  }
  backoff_.Reset();
  return replies;
}

}  // namespace sluice::cluster
