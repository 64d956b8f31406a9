// SPDX-License-Identifier: Apache-2.0
#include "lease_book.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/random/random.h"
#include "coarse_clock.h"
#include "convert.h"

namespace sluice::client::internal {
namespace {

// The most tokens or slots a renewal asks for (the server's bound).
constexpr double kMostWanted = 1000000;

// A renewal closer than this fraction of a tick to the last one keeps the
// last one's demand: too short a window says little about the rate.
constexpr double kShortestWindow = 0.5;

uint32_t Wanted(double n) {
  return static_cast<uint32_t>(std::clamp(std::ceil(n), 1.0, kMostWanted));
}

}  // namespace

LeaseLine::Decision LeaseLine::Decide(uint32_t permits, absl::Time now) {
  const uint32_t n = permits == 0 ? 1 : permits;
  Decision d;
  base::StdLock lock(&mu_);
  if (!hot_ && !giving_back_ && now - window_start_ >= tick_) {
    window_start_ = now;
    calls_ = 0;
    tokens_asked_ = 0;
  }
  ++calls_;
  tokens_asked_ += n;
  if (!hot_ && calls_ >= hot_calls_) {
    hot_ = true;
    giving_back_ = false;
    d.renew_now = true;
  }
  if (lease_ != 0 && now >= until_) {
    // No renewal came in time: the lease is over, and with it the limit
    // this client held from it.
    Counters::Inc(counters_->lease_expiries);
    lease_ = 0;
  }
  if (open_ != nullptr) {
    if (now < open_until_ && now < open_heard_until_) {
      ++open_refused_;
      if (unreachable_) ++unreachable_decided_;
      d.answer = Answer::kOpen;
      d.open = open_;
      d.retry_after = open_until_ - now;
      d.breaker_state = open_->breaker_state;
      d.policy_version = open_->policy_version;
      return d;
    }
    open_.reset();
  }
  if (lease_ == 0 || suspended_) return d;
  if (!unlimited_slots_ && InFlight(std::memory_order_relaxed) >= slot_limit_) {
    ++slot_misses_;
    return d;
  }
  if (!unlimited_tokens_ && tokens_spent_ + n > token_limit_) {
    if (exhausted_ && now < retry_at_) {
      ++refused_;
      tokens_refused_ += n;
      if (unreachable_) ++unreachable_decided_;
      d.answer = Answer::kRefuse;
      d.retry_after = retry_at_ - now;
      d.breaker_state = breaker_state_;
      d.policy_version = policy_version_;
    } else {
      d.renew_now = true;
    }
    return d;
  }
  tokens_spent_ += n;
  ++admitted_;
  if (unreachable_) ++unreachable_decided_;
  ++started_;
  peak_in_flight_ =
      std::max(peak_in_flight_, InFlight(std::memory_order_relaxed));
  d.answer = Answer::kAllow;
  d.call_timeout = call_timeout_;
  d.breaker_state = breaker_state_;
  d.policy_version = policy_version_;
  return d;
}

bool LeaseLine::Settle(Outcome outcome, absl::Duration latency) {
  const int64_t slow_after = slow_after_ns_.load(std::memory_order_relaxed);
  const bool fast = slow_after == std::numeric_limits<int64_t>::max() ||
                    latency <= absl::Nanoseconds(slow_after);
  if (outcome == Outcome::kSuccess && fast) {
    // Most calls: nothing for the breaker to judge now, and no lock; one
    // atomic add counts the success and ends the call.
    settled_.fetch_add(kOneSuccess | kOneSettled, std::memory_order_release);
    return false;
  }
  base::StdLock lock(&mu_);
  bool bad = true;
  switch (outcome) {
    case Outcome::kSuccess:
      ++slow_;
      break;
    case Outcome::kFailure:
      ++failures_;
      break;
    case Outcome::kTimeout:
      ++timeouts_;
      break;
    case Outcome::kCancelled:
      ++cancelled_;
      bad = false;
      break;
  }
  settled_.fetch_add(kOneSettled, std::memory_order_release);
  if (!bad) return false;
  // The breaker judges it: decide nothing more from the lease until Sluice
  // has heard of it and answered.
  ++bad_;
  suspended_ = true;
  return true;
}

bool LeaseLine::HoldsLimit(absl::Time now) {
  base::StdLock lock(&mu_);
  return lease_ != 0 && now < until_;
}

void LeaseLine::RememberOpen(std::shared_ptr<const OpenRefusal> refusal,
                             absl::Time sent, absl::Duration retry_after) {
  if (retry_after <= absl::ZeroDuration()) return;
  base::StdLock lock(&mu_);
  // An older answer does not replace a newer one.
  if (open_ != nullptr && sent < open_sent_) return;
  open_ = std::move(refusal);
  open_sent_ = sent;
  // Counted from when the question left, so never past the breaker's own
  // open time, however long the answer took.
  open_until_ = sent + retry_after;
  open_heard_until_ = sent + kOpenUnheardFor;
}

bool LeaseLine::Fill(absl::Time now, v1::ClientLeaseRenewal* out) {
  base::StdLock lock(&mu_);
  // In flight and fast successes from one load, so they agree: a call
  // Settle ended after it is still in flight here and not counted below.
  const uint64_t settled = settled_.load(std::memory_order_acquire);
  const uint32_t in_flight = started_ - static_cast<uint32_t>(settled);
  const uint32_t fast = static_cast<uint32_t>(settled >> 32);
  successes_ += fast - successes_seen_;  // modulo 2^32, as counted
  successes_seen_ = fast;
  const absl::Duration window = now - window_start_;
  const bool measured = window >= kShortestWindow * tick_;
  const double ticks = measured ? window / tick_ : 1;
  if (measured && hot_ &&
      static_cast<double>(calls_) * 4 < hot_calls_ * ticks) {
    // Cooled: give the lease back and ask per call again.
    hot_ = false;
    giving_back_ = lease_ != 0 || in_flight > 0;
  }
  if (hot_ && (measured || want_tokens_ == 0)) {
    // Enough for two ticks: the next renewal may come late. A first
    // renewal soon after the line turned hot counts what it saw as a
    // tick's demand.
    const double per_tick = static_cast<double>(tokens_asked_) / ticks;
    want_tokens_ = Wanted(2 * per_tick);
    // One more than its busiest moment; twice as many as it holds when
    // calls found no slot free (how many of those ran at once is not
    // known, so the lease doubles towards it).
    const double busiest = std::max(peak_in_flight_, in_flight) + 1.0;
    want_slots_ = Wanted(slot_misses_ > 0
                             ? std::max(busiest, 2.0 * slot_limit_)
                             : busiest);
  }
  if (lease_ == 0 && !owed_ && !giving_back_ && open_ == nullptr &&
      (!hot_ || now < quiet_until_)) {
    // Nothing to settle, and nothing to ask for yet.
    return false;
  }
  if (!hot_ && lease_ != 0) {
    // It stops deciding from the lease before the server hears so.
    lease_ = 0;
    Counters::Inc(counters_->leases_ended);
  }
  out->set_dependency(dependency_);
  out->set_key(key_);
  // 0 when it decides from none: Sluice then takes back what it did not
  // spend of the last one.
  out->set_lease(lease_);
  out->set_tokens_spent(tokens_spent_);
  out->set_tokens_refused(tokens_refused_);
  out->set_admitted(admitted_);
  out->set_successes(successes_);
  out->set_slow(slow_);
  out->set_failures(failures_);
  out->set_timeouts(timeouts_);
  out->set_cancelled(cancelled_);
  out->set_in_flight(in_flight);
  if (hot_) {
    out->set_want_tokens(want_tokens_);
    out->set_want_slots(want_slots_);
  }
  bad_sent_ = bad_;
  if (lease_ == 0 && in_flight == 0) {
    // With this, Sluice holds nothing of the line's any more.
    owed_ = false;
    giving_back_ = false;
  }
  if (measured) {
    window_start_ = now;
    calls_ = 0;
    tokens_asked_ = 0;
    peak_in_flight_ = in_flight;
    slot_misses_ = 0;
  }
  return true;
}

void LeaseLine::Apply(const v1::ClientLeaseGrant& grant, absl::Time sent) {
  base::StdLock lock(&mu_);
  unreachable_ = false;
  breaker_state_ = BreakerStateFromProto(grant.breaker_state());
  policy_version_ = grant.policy_version();
  if (open_ != nullptr && sent >= open_sent_) {
    const bool refuses_all = breaker_state_ == BreakerState::kOpen ||
                             breaker_state_ == BreakerState::kForcedOpen;
    if (refuses_all && policy_version_ == open_->policy_version) {
      open_heard_until_ = std::max(open_heard_until_, sent + kOpenUnheardFor);
    } else {
      // Closed, probing, forced closed or another policy since: ask
      // again.
      open_.reset();
    }
  }
  suspended_ = bad_ != bad_sent_;
  if (grant.lease() == 0 || !hot_) {
    if (lease_ != 0) Counters::Inc(counters_->leases_ended);
    lease_ = 0;
    exhausted_ = false;
    if (grant.lease() == 0 && hot_) {
      // Sluice decides this dependency call by call for now (its breaker
      // is not CLOSED, or its gates must see each call): ask again after
      // a tick, then less often, up to 16 ticks.
      quiet_for_ = std::clamp(2 * quiet_for_, tick_, 16 * tick_);
      quiet_until_ = sent + quiet_for_;
    }
    return;
  }
  quiet_for_ = absl::ZeroDuration();
  quiet_until_ = absl::InfinitePast();
  lease_ = grant.lease();
  owed_ = true;
  until_ = sent + DurationFromProto(grant.valid_for());
  token_limit_ = grant.token_limit();
  unlimited_tokens_ = grant.unlimited_tokens();
  slot_limit_ = grant.slot_limit();
  unlimited_slots_ = grant.unlimited_slots();
  call_timeout_ = DurationFromProto(grant.call_timeout());
  slow_after_ns_.store(
      grant.has_slow_after()
          ? absl::ToInt64Nanoseconds(DurationFromProto(grant.slow_after()))
          : std::numeric_limits<int64_t>::max(),
      std::memory_order_relaxed);
  exhausted_ = grant.exhausted();
  // No sooner than an eighth of a tick: a fast bucket would otherwise
  // have the client renew for every few tokens.
  retry_at_ = sent + std::max(DurationFromProto(grant.retry_after()),
                              tick_ / 8);
}

void LeaseLine::Preheat(absl::Time now, uint32_t calls) {
  base::StdLock lock(&mu_);
  window_start_ = now;
  calls_ = calls;
  tokens_asked_ = calls;
}

bool LeaseLine::Idle() {
  base::StdLock lock(&mu_);
  return !hot_ && !giving_back_ && !owed_ && lease_ == 0 && open_ == nullptr &&
         InFlight(std::memory_order_acquire) == 0;
}

void LeaseLine::AddStats(ClientStats* stats) {
  base::StdLock lock(&mu_);
  const uint64_t decided = admitted_ + refused_ + open_refused_;
  stats->acquires += decided;
  stats->leased_decisions += admitted_;
  stats->lease_refusals += refused_;
  stats->lease_open_refusals += open_refused_;
  stats->lease_decisions_while_unreachable += unreachable_decided_;
}

void LeaseLine::Cool() {
  base::StdLock lock(&mu_);
  hot_ = false;
  giving_back_ = lease_ != 0 || InFlight(std::memory_order_relaxed) > 0;
}

void LeaseLine::RenewalFailed() {
  base::StdLock lock(&mu_);
  unreachable_ = true;
}

absl::Time LeaseLine::wants_renewal_at() {
  base::StdLock lock(&mu_);
  if (suspended_) return absl::InfinitePast();
  if (hot_ && lease_ == 0) return quiet_until_;
  if (lease_ != 0 && exhausted_) return retry_at_;
  return absl::InfiniteFuture();
}

LeaseBook::LeaseBook(const LeaseOptions& options,
                     std::shared_ptr<grpc::Channel> channel,
                     std::shared_ptr<Counters> counters)
    : options_(options),
      channel_(std::move(channel)),
      stub_(v1::DecisionService::NewStub(channel_)),
      counters_(std::move(counters)),
      serial_([] {
        static std::atomic<uint64_t> books{0};
        return books.fetch_add(1, std::memory_order_relaxed) + 1;
      }()),
      client_id_([] {
        absl::BitGen gen;
        uint64_t id = 0;
        while (id == 0) id = absl::Uniform<uint64_t>(gen);
        return id;
      }()) {}

std::shared_ptr<LeaseLine> LeaseBook::Line(absl::string_view dependency) {
  // The line this thread used last, and the book it is of: a gateway thread
  // mostly calls the dependency its last call did. A book never drops a
  // dependency's line (only a key's, which is never cached here), so the
  // one cached stays the book's line of that name; a book's serial is
  // never reused, so a new book at a dead one's address does not match it.
  struct LastLine {
    uint64_t book = 0;
    std::shared_ptr<LeaseLine> line;
  };
  thread_local LastLine last;
  if (last.book == serial_ && last.line->dependency() == dependency) {
    return last.line;
  }
  std::shared_ptr<LeaseLine> line = Lookup(dependency);
  if (line != nullptr) {
    last.book = serial_;
    last.line = line;
  }
  return line;
}

std::shared_ptr<LeaseLine> LeaseBook::Lookup(absl::string_view dependency) {
  // A NUL separates a key's line name (KeyLineName); no policy's name has
  // one, so such a dependency is only ever asked for.
  if (dependency.find('\0') != absl::string_view::npos) return nullptr;
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = lines_.find(dependency);
    if (it != lines_.end()) return it->second;
    if (lines_.size() >= options_.max_leased) return nullptr;
  }
  absl::MutexLock lock(&mu_);
  if (lines_.size() >= options_.max_leased) {
    auto it = lines_.find(dependency);
    return it == lines_.end() ? nullptr : it->second;
  }
  std::shared_ptr<LeaseLine>& line = lines_[dependency];
  if (line == nullptr) {
    line = std::make_shared<LeaseLine>(std::string(dependency), std::string(),
                                       weak_from_this(), counters_,
                                       options_.tick, options_.hot_calls);
  }
  return line;
}

void LeaseBook::KeyLineName(absl::string_view dependency, absl::string_view key,
                            std::string* out) {
  out->assign(dependency.data(), dependency.size());
  out->push_back('\0');
  out->append(key.data(), key.size());
}

std::shared_ptr<LeaseLine> LeaseBook::KeyLine(absl::string_view dependency,
                                              absl::string_view key,
                                              absl::Time now) {
  if (dependency.find('\0') != absl::string_view::npos) return nullptr;
  // Reused by the thread: no allocation once it has held a long name.
  thread_local std::string name;
  KeyLineName(dependency, key, &name);
  bool keyless = false;
  {
    absl::ReaderMutexLock lock(&mu_);
    keyless = keyless_.contains(dependency);
    if (!keyless) {
      auto it = lines_.find(name);
      if (it != lines_.end()) return it->second;
    }
  }
  // Sluice leases it without keys: every key's calls share its line.
  if (keyless) return Line(dependency);
  absl::MutexLock lock(&mu_);
  if (auto it = lines_.find(name); it != lines_.end()) return it->second;
  if (now - keys_counted_at_ >= options_.tick) {
    key_calls_.clear();
    keys_counted_at_ = now;
  }
  auto count = key_calls_.find(name);
  if (count == key_calls_.end()) {
    if (key_calls_.size() >= kMostCountedKeys) return nullptr;
    count = key_calls_.emplace(name, 0).first;
  }
  if (++count->second < options_.hot_calls ||
      lines_.size() >= options_.max_leased) {
    return nullptr;
  }
  const uint32_t calls = count->second;
  key_calls_.erase(count);
  auto line = std::make_shared<LeaseLine>(
      std::string(dependency), std::string(key), weak_from_this(), counters_,
      options_.tick, options_.hot_calls);
  // This call, decided next, makes it hot.
  line->Preheat(now, calls - 1);
  lines_.emplace(name, line);
  return line;
}

void LeaseBook::AddStats(ClientStats* stats) {
  absl::ReaderMutexLock lock(&mu_);
  for (const auto& [name, line] : lines_) line->AddStats(stats);
  stats->acquires += dropped_.acquires;
  stats->leased_decisions += dropped_.leased_decisions;
  stats->lease_refusals += dropped_.lease_refusals;
  stats->lease_open_refusals += dropped_.lease_open_refusals;
  stats->lease_decisions_while_unreachable +=
      dropped_.lease_decisions_while_unreachable;
}

std::shared_ptr<LeaseLine> LeaseBook::Find(absl::string_view dependency,
                                           absl::string_view key) {
  std::string name;
  if (!key.empty()) KeyLineName(dependency, key, &name);
  absl::ReaderMutexLock lock(&mu_);
  if (!key.empty() && keyless_.contains(dependency)) name.clear();
  auto it = lines_.find(name.empty() ? dependency : name);
  return it == lines_.end() ? nullptr : it->second;
}

// One RenewLeases call in flight.
struct LeaseBook::Renewal {
  grpc::ClientContext context;
  v1::RenewLeasesRequest request;
  v1::RenewLeasesResponse response;
  // The line of each renewal, in order.
  std::vector<std::shared_ptr<LeaseLine>> lines;
  absl::Time sent;
};

void LeaseBook::MaybeRenew(absl::Time now, bool now_anyway) {
  // While the alarm is set, it renews on time.
  if (!now_anyway &&
      (alarm_set_.load(std::memory_order_relaxed) ||
       absl::ToUnixNanos(now) <
           next_renewal_ns_.load(std::memory_order_relaxed))) {
    return;
  }
  // Due by the caller's clock, which may be the coarse one. A lease is
  // counted from when its renewal was sent, so that time is read exactly:
  // it must not be later than the truth.
  now = absl::Now();
  CheckCoarseClock(now);
  auto renewal = std::make_unique<Renewal>();
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    if (renewing_) {
      if (now_anyway) again_ = true;
      return;
    }
    if (!now_anyway && now < next_renewal_) return;
    renewal->request.set_client(client_id_);
    for (auto it = lines_.begin(); it != lines_.end();) {
      const std::shared_ptr<LeaseLine>& line = it->second;
      v1::ClientLeaseRenewal* r = renewal->request.add_leases();
      if (line->Fill(now, r)) {
        renewal->lines.push_back(line);
      } else {
        renewal->request.mutable_leases()->RemoveLast();
        if (!line->key().empty() && line->Idle()) {
          // A key gone cold: its line goes, what it counted stays.
          line->AddStats(&dropped_);
          lines_.erase(it++);
          continue;
        }
      }
      ++it;
    }
    next_renewal_ = now + options_.tick;
    next_renewal_ns_.store(absl::ToUnixNanos(next_renewal_),
                           std::memory_order_relaxed);
    if (renewal->lines.empty()) return;
    renewing_ = true;
    outstanding_.fetch_add(1);
  }
  renewal->sent = now;
  // An answer later than a tick is as good as none: the lines keep their
  // leases until they run out, and the next renewal tries again.
  renewal->context.set_deadline(absl::ToChronoTime(now + options_.tick));
  Renewal* r = renewal.release();
  stub_->async()->RenewLeases(
      &r->context, &r->request, &r->response,
      [this, r](grpc::Status status) { Done(r, status); });
}

void LeaseBook::Done(Renewal* renewal, const grpc::Status& status) {
  std::unique_ptr<Renewal> owned(renewal);
  const absl::Time now = absl::Now();
  const bool ok = status.ok() && renewal->response.grants_size() ==
                                     renewal->request.leases_size();
  if (ok) {
    for (size_t i = 0; i < renewal->lines.size(); ++i) {
      const v1::ClientLeaseGrant& grant =
          renewal->response.grants(static_cast<int>(i));
      LeaseLine& line = *renewal->lines[i];
      line.Apply(grant, renewal->sent);
      if (!line.key().empty() && grant.lease() == 0 && !grant.per_key() &&
          grant.policy_version() != 0) {
        // The policy has no per_key: its calls are leased without a key,
        // whatever key they carry. This line goes idle and is dropped.
        absl::MutexLock lock(&mu_);
        if (keyless_.size() < options_.max_leased) {
          keyless_.insert(line.dependency());
        }
      } else if (line.key().empty() && grant.per_key()) {
        // It has per_key now: each key is leased on its own again.
        absl::MutexLock lock(&mu_);
        keyless_.erase(line.dependency());
      }
    }
  } else {
    for (const auto& line : renewal->lines) line->RenewalFailed();
  }
  bool again = false;
  absl::Time arm_at = absl::InfiniteFuture();
  {
    absl::MutexLock lock(&mu_);
    renewing_ = false;
    absl::Time next = renewal->sent + options_.tick;
    if (ok) {
      for (const auto& line : renewal->lines) {
        next = std::min(next, line->wants_renewal_at());
      }
    }
    again = again_ || next <= now;
    again_ = false;
    next_renewal_ = std::max(next, now);
    next_renewal_ns_.store(absl::ToUnixNanos(next_renewal_),
                           std::memory_order_relaxed);
    // Something to settle or renew: the alarm brings the next renewal
    // whether or not calls come.
    if (!again && !renewal->lines.empty()) arm_at = next_renewal_;
  }
  if (arm_at != absl::InfiniteFuture()) ArmAlarm(arm_at);
  owned.reset();  // before the count, with its ClientContext
  // Counted once the answer is in force, so a caller that saw the count
  // sees the lease it brought.
  Counters::Inc(ok ? counters_->lease_renewals
                   : counters_->lease_renewal_failures);
  // Something waits for Sluice now (a leased call failed meanwhile, or a
  // lease is spent): ask again without waiting for the next call. Not
  // after a failure, which waits its tick.
  if (again && ok) MaybeRenew(now, true);
  outstanding_.fetch_sub(1);
}

void LeaseBook::ArmAlarm(absl::Time at) {
  grpc::Alarm* alarm;
  {
    absl::MutexLock lock(&mu_);
    if (alarm_ != nullptr || closed_) return;
    alarm = alarm_ = new grpc::Alarm();
    alarm_set_.store(true, std::memory_order_relaxed);
    outstanding_.fetch_add(1);
  }
  // Outside the lock, which the callback takes.
  alarm->Set(absl::ToChronoTime(at), [this, alarm](bool fired) {
    {
      absl::MutexLock lock(&mu_);
      alarm_ = nullptr;
      alarm_set_.store(false, std::memory_order_relaxed);
    }
    if (fired) MaybeRenew(absl::Now(), true);
    delete alarm;
    outstanding_.fetch_sub(1);
  });
}

void LeaseBook::Close() {
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    if (alarm_ != nullptr) alarm_->Cancel();
  }
  // Bounded by the renewal's deadline (one tick).
  while (outstanding_.load() > 0) absl::SleepFor(absl::Milliseconds(1));
  // Give every lease back at once, so its unused tokens and slots return
  // now rather than when it runs out. Best effort, briefly.
  const absl::Time now = absl::Now();
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(
      now + std::min(options_.tick, absl::Milliseconds(250))));
  v1::RenewLeasesRequest request;
  request.set_client(client_id_);
  {
    absl::MutexLock lock(&mu_);
    for (auto& [name, line] : lines_) {
      line->Cool();
      if (!line->Fill(now, request.add_leases())) {
        request.mutable_leases()->RemoveLast();
      }
    }
  }
  if (request.leases_size() == 0) return;
  v1::RenewLeasesResponse response;
  stub_->RenewLeases(&context, request, &response);
}

}  // namespace sluice::client::internal
