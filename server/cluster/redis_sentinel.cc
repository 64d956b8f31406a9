// SPDX-License-Identifier: Apache-2.0
#include "server/cluster/redis_sentinel.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/ascii.h"
#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"
#include "wire/address.h"

namespace sluice::cluster {
namespace {

constexpr int kSentinelPort = 26379;

absl::string_view Str(const redisReply* r) {
  if (r == nullptr) return {};
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
      r->type == REDIS_REPLY_ERROR) {
    return absl::string_view(r->str, r->len);
  }
  return {};
}

}  // namespace

absl::StatusOr<std::vector<RedisAddress>> ParseSentinels(
    const std::string& list) {
  std::vector<RedisAddress> out;
  for (absl::string_view entry :
       absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    absl::StatusOr<wire::HostPort> parsed =
        wire::ParseHostPort(entry, kSentinelPort);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--redis-sentinels: ", parsed.status().message()));
    }
    if (parsed->port == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--redis-sentinels: port must be 1-65535, got \"", entry, "\""));
    }
    absl::string_view host = parsed->host;
    if (absl::StartsWith(host, "[")) host = host.substr(1, host.size() - 2);
    out.push_back({std::string(host), parsed->port});
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--redis-sentinels: expected HOST:PORT,HOST:PORT,..., got \"", list,
        "\""));
  }
  return out;
}

SentinelLocator::SentinelLocator(SentinelOptions options, RedisHealth* health)
    : options_(std::move(options)), health_(health) {}

absl::StatusOr<RedisAddress> SentinelLocator::Ask(
    const RedisAddress& sentinel) const {
  const timeval timeout =
      absl::ToTimeval(std::max(options_.timeout, absl::Milliseconds(1)));
  redisContext* c =
      redisConnectWithTimeout(sentinel.host.c_str(), sentinel.port, timeout);
  if (c == nullptr || c->err != 0) {
    const std::string error =
        c != nullptr ? c->errstr : std::string("out of memory");
    if (c != nullptr) redisFree(c);
    return absl::UnavailableError(
        absl::StrCat(sentinel.ToString(), ": ", error));
  }
  redisSetTimeout(c, timeout);
  RedisReplyPtr reply(static_cast<redisReply*>(
      redisCommand(c, "SENTINEL get-master-addr-by-name %s",
                   options_.master_name.c_str())));
  absl::StatusOr<RedisAddress> out;
  int port = 0;
  if (reply == nullptr) {
    out = absl::UnavailableError(
        absl::StrCat(sentinel.ToString(), ": ", c->errstr));
  } else if (reply->type == REDIS_REPLY_NIL) {
    out = absl::NotFoundError(absl::StrCat(
        sentinel.ToString(), ": monitors no master named \"",
        options_.master_name, "\""));
  } else if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
             !absl::SimpleAtoi(Str(reply->element[1]), &port)) {
    out = absl::UnavailableError(
        absl::StrCat(sentinel.ToString(), ": unexpected answer ",
                     reply->type == REDIS_REPLY_ERROR ? Str(reply.get())
                                                      : "shape"));
  } else {
    out = RedisAddress{std::string(Str(reply->element[0])), port};
  }
  redisFree(c);
  return out;
}

absl::StatusOr<RedisAddress> SentinelLocator::Locate(absl::Time now) {
  (void)now;
  size_t first = 0;
  {
    absl::MutexLock lock(&mu_);
    first = first_;
  }
  std::vector<std::string> errors;
  const size_t n = options_.sentinels.size();
  for (size_t i = 0; i < n; ++i) {
    const size_t index = (first + i) % n;
    absl::StatusOr<RedisAddress> master = Ask(options_.sentinels[index]);
    if (master.ok()) {
      absl::MutexLock lock(&mu_);
      first_ = index;
      return master;
    }
    errors.emplace_back(master.status().message());
  }
  return absl::UnavailableError(absl::StrCat(
      "no sentinel named the redis master \"", options_.master_name,
      "\" (--redis-sentinels, --redis-master): ",
      absl::StrJoin(errors, "; ")));
}

uint64_t SentinelLocator::Confirmed(const RedisAddress& address) {
  absl::MutexLock lock(&mu_);
  if (found_ && master_ == address) return generation_;
  if (found_) {
    spdlog::warn("redis master \"{}\" moved from {} to {}",
                 options_.master_name, master_.ToString(),
                 address.ToString());
    if (health_ != nullptr) health_->Event("master_changed");
  } else {
    spdlog::info("redis master \"{}\" is at {}", options_.master_name,
                 address.ToString());
  }
  found_ = true;
  master_ = address;
  return ++generation_;
}

uint64_t SentinelLocator::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

std::string SentinelLocator::Describe() const {
  absl::MutexLock lock(&mu_);
  return absl::StrCat("sentinel master \"", options_.master_name, "\" at ",
                      found_ ? master_.ToString() : "(not found yet)");
}

}  // namespace sluice::cluster
