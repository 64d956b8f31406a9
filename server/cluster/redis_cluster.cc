// SPDX-License-Identifier: Apache-2.0
#include "server/cluster/redis_cluster.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <array>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "spdlog/spdlog.h"

namespace sluice::cluster {
namespace {

// CRC16-CCITT as Redis Cluster uses it (XMODEM: polynomial 0x1021, initial
// value 0, no reflection), one table entry per leading byte.
constexpr std::array<uint16_t, 256> Crc16Table() {
  std::array<uint16_t, 256> table{};
  for (int byte = 0; byte < 256; ++byte) {
    uint16_t crc = static_cast<uint16_t>(byte << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) != 0 ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                                : static_cast<uint16_t>(crc << 1);
    }
    table[byte] = crc;
  }
  return table;
}

constexpr std::array<uint16_t, 256> kCrc16 = Crc16Table();

uint16_t Crc16(absl::string_view data) {
  uint16_t crc = 0;
  for (unsigned char c : data) {
    crc = static_cast<uint16_t>((crc << 8) ^ kCrc16[((crc >> 8) ^ c) & 0xff]);
  }
  return crc;
}

absl::string_view Text(const redisReply* r) {
  if (r == nullptr) return {};
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
      r->type == REDIS_REPLY_ERROR) {
    return absl::string_view(r->str, r->len);
  }
  return {};
}

bool IsError(const redisReply* r) {
  return r != nullptr && r->type == REDIS_REPLY_ERROR;
}

// A cluster error after which the same call would fail again until the
// cluster settles: the whole call fails and the sync loop retries.
bool IsUnstable(absl::string_view error) {
  return absl::StartsWith(error, "TRYAGAIN") ||
         absl::StartsWith(error, "CLUSTERDOWN") ||
         // A script that met a key of a slot being migrated away.
         absl::StrContains(error, "non local key") ||
         absl::StrContains(error, "do not hash to the same slot");
}

}  // namespace

int KeySlot(absl::string_view key) {
  const size_t open = key.find('{');
  if (open != absl::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != absl::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return Crc16(key) % kClusterSlots;
}

bool SplitNodeAddress(absl::string_view address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return false;
  int p = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &p) || p < 1 || p > 65535) {
    return false;
  }
  absl::string_view h = address.substr(0, colon);
  if (absl::StartsWith(h, "[") && absl::EndsWith(h, "]")) {
    h = h.substr(1, h.size() - 2);
  }
  *host = std::string(h);
  *port = p;
  return true;
}

RedisClusterRouter::RedisClusterRouter(
    const RedisConnectionOptions& connection_options, std::vector<Node> seeds,
    ClusterEvents* events)
    : connection_options_(connection_options),
      seeds_(std::move(seeds)),
      events_(events),
      slots_(kClusterSlots, -1) {
  std::vector<std::string> names;
  for (const Node& s : seeds_)
    names.push_back(absl::StrCat(s.host, ":", s.port));
  absl::MutexLock lock(&describe_mu_);
  description_ = absl::StrCat("redis cluster: seeds ",
                              absl::StrJoin(names, ", "), " (no slot map yet)");
}

RedisClusterRouter::~RedisClusterRouter() = default;

std::string RedisClusterRouter::Describe() const {
  absl::MutexLock lock(&describe_mu_);
  return description_;
}

void RedisClusterRouter::Reset() {
  connections_.clear();
  refresh_wanted_ = true;
}

RedisConnection& RedisClusterRouter::ConnectionTo(const std::string& address) {
  std::unique_ptr<RedisConnection>& c = connections_[address];
  if (c == nullptr) {
    std::string host;
    int port = 0;
    SplitNodeAddress(address, &host, &port);  // every address here was checked
    c = std::make_unique<RedisConnection>(connection_options_, host, port);
  }
  return *c;
}

absl::Status RedisClusterRouter::LoadSlots(const redisReply* reply,
                                           const Node& from) {
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY) {
    return absl::UnavailableError(absl::StrCat(
        "CLUSTER SLOTS answered ",
        IsError(reply) ? Text(reply)
                       : absl::string_view("an unexpected shape")));
  }
  std::vector<std::string> masters;
  std::vector<int> slots(kClusterSlots, -1);
  std::map<std::string, std::pair<int, int>> ranges;  // slots, ranges
  for (size_t i = 0; i < reply->elements; ++i) {
    const redisReply* range = reply->element[i];
    if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
        range->element[0]->type != REDIS_REPLY_INTEGER ||
        range->element[1]->type != REDIS_REPLY_INTEGER ||
        range->element[2]->type != REDIS_REPLY_ARRAY ||
        range->element[2]->elements < 2 ||
        range->element[2]->element[1]->type != REDIS_REPLY_INTEGER) {
      return absl::UnavailableError(
          "CLUSTER SLOTS answered an unexpected shape");
    }
    const long long first = range->element[0]->integer;
    const long long last = range->element[1]->integer;
    const redisReply* master = range->element[2];
    std::string host(Text(master->element[0]));
    // An empty host is the node we asked; "?" is a node without a known
    // address, which cannot be reached.
    if (host.empty()) host = from.host;
    if (host == "?" || first < 0 || last >= kClusterSlots || first > last) {
      continue;
    }
    const std::string address =
        absl::StrCat(host, ":", master->element[1]->integer);
    std::string check_host;
    int check_port = 0;
    if (!SplitNodeAddress(address, &check_host, &check_port)) continue;
    auto it = std::find(masters.begin(), masters.end(), address);
    const int index = static_cast<int>(it - masters.begin());
    if (it == masters.end()) masters.push_back(address);
    for (long long s = first; s <= last; ++s) slots[s] = index;
    ranges[address].first += static_cast<int>(last - first + 1);
    ranges[address].second += 1;
  }
  if (masters.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "CLUSTER SLOTS of ", from.host, ":", from.port, " named no master"));
  }
  const int unserved =
      static_cast<int>(std::count(slots.begin(), slots.end(), -1));
  std::vector<std::string> parts;
  for (const auto& [address, counts] : ranges) {
    parts.push_back(absl::StrCat(address, " ", counts.first, " slots in ",
                                 counts.second, " range",
                                 counts.second == 1 ? "" : "s"));
  }
  spdlog::info("redis cluster: slot map from {}:{}: {} masters ({}){}",
               from.host, from.port, masters.size(), absl::StrJoin(parts, ", "),
               unserved == 0
                   ? ""
                   : absl::StrCat("; ", unserved, " slots without a master"));
  masters_ = std::move(masters);
  slots_ = std::move(slots);
  // A node that left the map (or a seed that is no master) keeps no
  // connection.
  for (auto it = connections_.begin(); it != connections_.end();) {
    auto next = std::next(it);
    if (std::find(masters_.begin(), masters_.end(), it->first) ==
        masters_.end()) {
      connections_.erase(it);
    }
    it = next;
  }
  std::vector<std::string> sorted = masters_;
  std::sort(sorted.begin(), sorted.end());
  absl::MutexLock lock(&describe_mu_);
  description_ = absl::StrCat("redis cluster: ", sorted.size(), " masters (",
                              absl::StrJoin(sorted, ", "), ")");
  return absl::OkStatus();
}

absl::Status RedisClusterRouter::RefreshSlots(absl::Time now) {
  // The known masters first: they are most likely up; then the seeds.
  std::vector<Node> candidates;
  for (const std::string& address : masters_) {
    Node n;
    if (SplitNodeAddress(address, &n.host, &n.port)) candidates.push_back(n);
  }
  for (const Node& s : seeds_) {
    const bool known = std::any_of(
        candidates.begin(), candidates.end(),
        [&s](const Node& n) { return n.host == s.host && n.port == s.port; });
    if (!known) candidates.push_back(s);
  }
  std::vector<std::string> failures;
  const std::vector<RedisCommand> ask = {
      {RedisScript::kNone, "", {"CLUSTER", "SLOTS"}}};
  for (const Node& node : candidates) {
    const std::string address = absl::StrCat(node.host, ":", node.port);
    absl::StatusOr<std::vector<RedisReplyPtr>> replies =
        ConnectionTo(address).Pipeline(ask, now);
    absl::Status status =
        replies.ok() ? LoadSlots((*replies)[0].get(), node) : replies.status();
    if (status.ok()) {
      refresh_wanted_ = false;
      events_->slots_refreshed.fetch_add(1, std::memory_order_relaxed);
      return status;
    }
    failures.push_back(absl::StrCat(address, ": ", status.message()));
  }
  const std::string message =
      absl::StrCat("redis cluster: no node answered CLUSTER SLOTS (",
                   absl::StrJoin(failures, "; "), ")");
  spdlog::warn("{}", message);
  return absl::UnavailableError(message);
}

absl::Status RedisClusterRouter::RunOn(
    const std::string& address, const std::vector<RedisCommand>& commands,
    const std::vector<size_t>& indices, bool asking, absl::Time now,
    std::vector<RedisReplyPtr>* replies, std::vector<Redirect>* redirects) {
  std::vector<RedisCommand> batch;
  batch.reserve(indices.size() * (asking ? 2 : 1));
  for (size_t i : indices) {
    // ASKING lets the importing node run the next command for a slot it
    // does not own yet.
    if (asking) batch.push_back({RedisScript::kNone, "", {"ASKING"}});
    batch.push_back(commands[i]);
  }
  absl::StatusOr<std::vector<RedisReplyPtr>> got =
      ConnectionTo(address).Pipeline(batch, now);
  if (!got.ok()) {
    refresh_wanted_ = true;  // the node may have failed over or left
    return absl::UnavailableError(absl::StrCat("redis cluster node ", address,
                                               ": ", got.status().message()));
  }
  const size_t step = asking ? 2 : 1;
  for (size_t k = 0; k < indices.size(); ++k) {
    if (asking && IsError((*got)[2 * k].get())) {
      return absl::UnavailableError(
          absl::StrCat("redis cluster node ", address,
                       " refused ASKING: ", Text((*got)[2 * k].get())));
    }
    RedisReplyPtr& reply = (*got)[step * k + step - 1];
    const size_t i = indices[k];
    if (!IsError(reply.get())) {
      (*replies)[i] = std::move(reply);
      continue;
    }
    const absl::string_view error = Text(reply.get());
    const bool moved = absl::StartsWith(error, "MOVED ");
    if (moved || absl::StartsWith(error, "ASK ")) {
      // "MOVED <slot> <host:port>" or "ASK <slot> <host:port>".
      const std::vector<absl::string_view> f =
          absl::StrSplit(error, ' ', absl::SkipEmpty());
      int slot = -1;
      std::string host;
      int port = 0;
      if (f.size() != 3 || !absl::SimpleAtoi(f[1], &slot) || slot < 0 ||
          slot >= kClusterSlots || !SplitNodeAddress(f[2], &host, &port)) {
        return absl::UnavailableError(absl::StrCat(
            "redis cluster node ", address, " answered \"", error, "\""));
      }
      const std::string target = std::string(f[2]);
      (moved ? events_->moved : events_->ask)
          .fetch_add(1, std::memory_order_relaxed);
      spdlog::warn("redis cluster: {} slot {} (key {}) from {} to {}{}",
                   moved ? "MOVED" : "ASK", slot, commands[i].key, address,
                   target,
                   moved ? "; following it and refreshing the slot map"
                         : "; following it with ASKING (slot migrating)");
      if (moved) {
        // The slot's new owner is known now; the rest of a reshard or
        // failover comes with the refresh before the next call.
        auto it = std::find(masters_.begin(), masters_.end(), target);
        slots_[slot] = static_cast<int>(it - masters_.begin());
        if (it == masters_.end()) masters_.push_back(target);
        refresh_wanted_ = true;
      }
      redirects->push_back({i, !moved, target});
      continue;
    }
    if (IsUnstable(error)) {
      refresh_wanted_ = true;  // TRYAGAIN, CLUSTERDOWN, a non-local key
      return absl::UnavailableError(absl::StrCat("redis cluster node ", address,
                                                 " (key ", commands[i].key,
                                                 "): ", error));
    }
    (*replies)[i] = std::move(reply);  // the caller reads script errors
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RedisReplyPtr>> RedisClusterRouter::Execute(
    const std::vector<RedisCommand>& commands, absl::Time now) {
  if (refresh_wanted_) {
    absl::Status refreshed = RefreshSlots(now);
    // An old map still routes most keys right, and a wrong guess is MOVED.
    if (!refreshed.ok() && masters_.empty()) return refreshed;
  }
  // Commands by master, in command order within each pipeline.
  std::vector<std::vector<size_t>> by_master(masters_.size());
  for (size_t i = 0; i < commands.size(); ++i) {
    const int slot = KeySlot(commands[i].key);
    const int master = slots_[slot];
    if (master < 0) {
      refresh_wanted_ = true;
      return absl::UnavailableError(
          absl::StrCat("redis cluster: slot ", slot, " (key ", commands[i].key,
                       ") has no master in the slot map"));
    }
    by_master[master].push_back(i);
  }
  std::vector<RedisReplyPtr> replies(commands.size());
  std::vector<Redirect> redirects;
  // One master after the other: a tick is one round trip per master, well
  // under a sync interval, and the timeout applies to each node.
  for (size_t m = 0; m < by_master.size(); ++m) {
    if (by_master[m].empty()) continue;
    if (absl::Status s = RunOn(masters_[m], commands, by_master[m], false, now,
                               &replies, &redirects);
        !s.ok()) {
      return s;
    }
  }
  if (!redirects.empty()) {
    // One more round: each redirected command on the node named, grouped by
    // node and kind. A command redirected again fails the call.
    std::map<std::pair<std::string, bool>, std::vector<size_t>> again;
    for (const Redirect& r : redirects) {
      again[{r.address, r.ask}].push_back(r.command);
    }
    std::vector<Redirect> twice;
    for (const auto& [target, indices] : again) {
      if (absl::Status s = RunOn(target.first, commands, indices, target.second,
                                 now, &replies, &twice);
          !s.ok()) {
        return s;
      }
    }
    if (!twice.empty()) {
      refresh_wanted_ = true;
      return absl::UnavailableError(absl::StrCat(
          "redis cluster: key ", commands[twice[0].command].key,
          " was redirected twice in one tick (to ", twice[0].address, ")"));
    }
  }
  return replies;
}

}  // namespace sluice::cluster
