#include "server/cluster/redis_connection.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace sluice::cluster {
namespace {

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

absl::Status ErrorOf(const redisContext* c, absl::string_view what) {
  const std::string msg = absl::StrCat(what, ": ", c->errstr);
  if (c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    return absl::DeadlineExceededError(msg);
  }
  return absl::UnavailableError(msg);
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

}  // namespace

void RedisReplyDeleter::operator()(redisReply* r) const {
  if (r != nullptr) freeReplyObject(r);
}

RedisConnection::RedisConnection(const RedisConnectionOptions& options,
                                 std::string host, int port)
    : options_(options),
      host_(std::move(host)),
      port_(port),
      backoff_(options.min_backoff) {}

RedisConnection::~RedisConnection() {
  if (context_ != nullptr) redisFree(context_);
}

std::string RedisConnection::address() const {
  return absl::StrCat(host_, ":", port_);
}

void RedisConnection::Drop(absl::Time now) {
  if (context_ != nullptr) redisFree(context_);
  context_ = nullptr;
  tick_sha_.clear();
  config_sha_.clear();
  next_attempt_ = now + backoff_;
  backoff_ = std::min(backoff_ * 2, options_.max_backoff);
}

absl::Status RedisConnection::Ensure(absl::Time now) {
  if (context_ != nullptr && context_->err == 0 && !tick_sha_.empty() &&
      !config_sha_.empty()) {
    return absl::OkStatus();
  }
  if (context_ == nullptr) {
    if (now < next_attempt_) {
      return absl::UnavailableError(absl::StrCat(
          "waiting ", absl::FormatDuration(next_attempt_ - now),
          " before reconnecting to ", address()));
    }
    context_ = redisConnectWithTimeout(host_.c_str(), port_,
                                       Timeout(options_.timeout));
    if (context_ == nullptr) {
      Drop(now);
      return absl::UnavailableError("cannot allocate a redis context");
    }
    if (context_->err != 0) {
      absl::Status status =
          ErrorOf(context_, absl::StrCat("connect to ", address()));
      Drop(now);
      return status;
    }
    redisSetTimeout(context_, Timeout(options_.timeout));
  }
  for (auto [script, sha] : {std::make_pair(TickScript(), &tick_sha_),
                             std::make_pair(ConfigScript(), &config_sha_)}) {
    RedisReplyPtr reply(static_cast<redisReply*>(
        redisCommand(context_, "SCRIPT LOAD %s", script)));
    if (reply == nullptr) {
      absl::Status status = ErrorOf(context_, "SCRIPT LOAD");
      Drop(now);
      return status;
    }
    if (reply->type != REDIS_REPLY_STRING) {
      absl::Status status = absl::UnavailableError(
          absl::StrCat("SCRIPT LOAD refused: ", Str(reply.get())));
      Drop(now);
      return status;
    }
    *sha = std::string(Str(reply.get()));
  }
  backoff_ = options_.min_backoff;
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
      absl::Status status = ErrorOf(context_, absl::StrCat("redis ", address()));
      Drop(now);
      return status;
    }
    replies.emplace_back(static_cast<redisReply*>(raw));
  }
  return replies;
}

}  // namespace sluice::cluster
