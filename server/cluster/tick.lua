-- SPDX-License-Identifier: Apache-2.0
-- One replica's tick for one policy. All keys share the policy's hash tag:
-- KEYS[1] is the policy's epoch key "sluice:{<policy>}:epoch" and every
-- other key starts with its prefix "sluice:{<policy>}". The declared key is
-- one that exists while the policy has state: while Redis Cluster migrates
-- the slot, the script then runs where the data is (a declared key that
-- never exists would be sent to the importing node, ASK, ahead of the
-- data, and the writes there would make the migration fail). Every time is Redis's own
-- (TIME), never a replica's clock; replicas send durations only.
--
-- ARGV: replica, stale_ms, ttl_ms, live (replicas this one knows of),
--   leaving ("1": give everything back), epoch_seen ("" if none), per_key,
--   incarnation (the replica process's life), sequence (its tick count),
--   nkeys, and per key:
--     key, limit1, limit2, demand1, demand2, usage1, usage2,
--     applied1, applied2, applied_left_ms, usage_left1_ms, usage_left2_ms,
--     in_force ("1": the replica applies a grant of this key now),
--     admitted_total;
--   has_breaker ("1" or "0"), and if "1":
--     calls, failures, slow (cumulative outcome totals),
--     publish ("1" may store a transition), base, generation,
--     state ("OPEN" | "CLOSED"), open_until_ms, open_duration_ms, cause,
--     leases_wanted, lease_cap, lease_ttl_ms;
--   has_warm ("1" or "0"), and if "1" (the policy's adaptive limit or
--   latency baseline, see core::DependencyTick):
--     digest, steady_limit, baseline_us, windows, mean_us, var_us2, success.
-- Resource 1 is the rate resource (token bucket capacity or window count),
-- resource 2 the concurrency slots; limit 0 means not cluster-scope.
--
-- Returns {now_ms, epoch, lost, grants, outcomes, breaker, leases, warm}:
--   epoch     this policy's store epoch; lost is 1 when the replica knew
--             another one (Redis lost the policy's data)
--   grants[k] {granted (1, or 0 for a per_key key back on its static
--             share), units1, units2} for pushed key k
--   outcomes  flat {replica, calls, failures, slow, ...} of live replicas
--   breaker   {generation, state, open_until_ms, open_duration_ms, cause,
--             replica} or {} when none is stored
--   leases    probe leases granted to this replica
--   warm      flat {replica, entry, ...}: the warm entries stored before
--             this tick (this replica's previous one included), each
--             "digest steady_limit baseline_us windows mean_us var_us2
--             success updated_ms", younger than ttl; {} without has_warm
--
-- Grants: the hash <prefix>:g:<key> holds, per replica,
--   "exp g1 d1 u1 g2 d2 u2 h1 h2 hexp uexp life": the grant's expiry, then
--   per resource the grant, the demand and the usage (window count, calls
--   in flight), then the grant it applied before (held until that one's
--   expiry, in case this reply is lost; 0 when it is not above the new
--   grant), then until when grant and usage may still be in use (held that
--   long even after the replica left, restarted or died: a window count for
--   the window, a call until its permit expires), then a tag of the process
--   life that wrote it (the incarnation's last six digits). Times are
--   milliseconds since the policy's epoch was created, and trailing zeros
--   are left out: memory per key matters with many keys. An entry is live
--   (a competitor, with a demand) until exp; it holds until the last of
--   its times. A replica may be granted only what no entry of another
--   replica holds (max of grant, previous grant, usage, each while its time
--   lasts), so the grants in force never add up to more than the limit,
--   whatever the timing of ticks and replies. An entry of another life of
--   this replica (a restart under the same name) moves to the field
--   "<replica>\0prev" and keeps holding, but takes no part in the split;
--   a leave leaves its usage.

local ekey = KEYS[1]
local prefix = string.sub(ekey, 1, -7)  -- without ":epoch"
local replica = ARGV[1]
local stale = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local live = math.max(1, tonumber(ARGV[4]))
local leaving = ARGV[5] == '1'
local epoch_seen = ARGV[6]
local per_key = ARGV[7] == '1'
local incarnation = ARGV[8]
local sequence = tonumber(ARGV[9])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local headroom = 1.05
local i = 10

-- Each replica's life and last sequence ("incarnation sequence"): a request
-- older than one applied for the same life is refused, so a delayed or
-- retried tick never puts back an older entry; a leave of another life
-- (the process restarted under this name since) leaves the new one's
-- entries alone.
local lkey = prefix .. ':lives'
local other_life = false
-- The tag of this life in grant entries, and where an entry of another
-- life of this replica is kept.
local life = tonumber(string.sub(incarnation, -6)) or 0
local prev_field = replica .. '\0prev'
-- The entry also keeps when this life first ticked the policy (`since`,
-- Redis's time; see <prefix>:least).
local since = now
do
  local stored = redis.call('HGET', lkey, replica)
  if stored then
    local inc, seq, at = string.match(stored, '^(%S+) (%S+) ?(%S*)$')
    if inc == incarnation and tonumber(seq) > sequence then
      return redis.error_reply('STALE tick request: a newer one was applied')
    end
    other_life = leaving and inc ~= incarnation
    if inc == incarnation and at ~= '' then since = tonumber(at) end
  end
  if not other_life then
    redis.call('HSET', lkey, replica,
               incarnation .. ' ' .. sequence .. ' ' .. since)
    redis.call('PEXPIRE', lkey, ttl)
  end
end

-- The policy's epoch: created with its first state. A replica that knew an
-- older one sees that Redis lost the data (restart without persistence,
-- failover to an empty replica, eviction); for one stale period after that
-- no replica is granted more than it already applies, while the survivors
-- rebuild their entries from memory.
--
-- Every new epoch opens that window, whoever creates it. A missing epoch
-- looks the same whether the policy never had state or Redis lost it, and
-- the first replica to tick may be one with no memory of the epoch (a new
-- or restarted pod, or one that never pushed this policy): the others may
-- still apply grants of the lost state, up to the whole limit, until their
-- next reply, or for a stale period if their replies are lost. Those grants
-- have all ended or been rebuilt here one stale period after the loss, so
-- only then is anything that nobody applies handed out. The cost: a
-- policy's first stale period (a fresh Redis, a brand-new policy) grants
-- nothing beyond what replicas apply already.
local rkey = prefix .. ':recovering'
local epoch = redis.call('GET', ekey)
local lost = 0
if not epoch then
  epoch = t[1] .. '.' .. t[2]
  redis.call('SET', ekey, epoch)
  redis.call('SET', rkey, '1', 'PX', stale)
end
-- The epoch outlives the policy's other keys (a day, or ttl if longer): a
-- policy quiet for longer than ttl, whose grants all ended long ago, then
-- keeps its epoch and wakes without a recovery window (and replicas that
-- remember the epoch raise no false data-loss alarm). One short key per
-- policy, a deleted one's for a day.
redis.call('PEXPIRE', ekey, math.max(ttl, 86400000))
if epoch_seen ~= '' and epoch_seen ~= epoch then lost = 1 end
local recovering = redis.call('EXISTS', rkey) == 1
-- Grant entries keep their times as milliseconds since the epoch was
-- created: shorter than Redis's full time, which matters per key.
local base = tonumber(string.match(epoch, '^(%d+)')) * 1000

-- per_key: the live count a key's static share `each` is reserved with.
-- A process applies the static share of the live count it last heard of,
-- and a central leases out its leaves' shares under the live count it last
-- sent, each for up to a stale period; a tick that counts more processes
-- must not shrink the reservation under them at once. So each is
-- floor(limit / least), least being the smallest live count any replica
-- sent for this policy within the last stale period. <prefix>:least holds
-- "least until pending pending_until" (Redis times): least counts until
-- `until`; `pending` is the smallest larger count sent since, which takes
-- over when least ends. One short key per policy, expiring a stale period
-- after its last tick. A life's counts are recorded only once it has
-- ticked the policy for half a stale period: before that it applies no
-- static share (a process waits a stale period and an interval after its
-- first tick, a central keeps no leaf's share before its pushes of a stale
-- period), and its first counts may be low (when many start together, each
-- first hears only those that ticked before it).
local least = live
local settled = now - since >= stale / 2
if per_key then
  local qkey = prefix .. ':least'
  local q = {}
  for x in string.gmatch(redis.call('GET', qkey) or '', '%S+') do
    q[#q + 1] = tonumber(x)
  end
  local held, held_until, pend, pend_until = q[1], q[2], q[3], q[4]
  if held and held_until < now then
    held, held_until, pend, pend_until = pend, pend_until, nil, nil
    if held and held_until < now then held, held_until = nil, nil end
  end
  if not settled then
    least = held or live
  else
    if not held or live <= held then
      -- A pending count (larger, and ending no later) no longer matters.
      held, held_until, pend, pend_until = live, now + stale, nil, nil
    elseif not pend or live <= pend then
      pend, pend_until = live, now + stale
    else
      pend_until = now + stale
    end
    least = held
    local v = held .. ' ' .. held_until
    if pend then v = v .. ' ' .. pend .. ' ' .. pend_until end
    redis.call('SET', qkey, v, 'PX', stale + 1)
  end
end

-- A grant entry as {exp, g1, d1, u1, g2, d2, u2, h1, h2, hexp, uexp,
-- life}, with the fields left out as zeros.
local function fields(v)
  local out = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
  local n = 0
  for x in string.gmatch(v, '%S+') do
    n = n + 1
    out[n] = tonumber(x)
  end
  if n == 0 then out[1] = nil end
  return out
end

-- Max-min fair split of `total` whole units by demand, then whole units by
-- largest remainder. Whatever nobody wants is spread evenly. names[j] and
-- demand[j] describe entry j. Equal remainders go by replica name, in an
-- order that turns every 10 s, so that when a small limit cannot give every
-- replica a unit, the units move round instead of staying with the same few.
local function allocate(total, names, demand)
  local n = #names
  local units = {}
  if n == 0 then return units end
  if total <= 0 then
    for j = 1, n do units[j] = 0 end
    return units
  end
  local order = {}
  for j = 1, n do order[j] = j end
  table.sort(order, function(a, b)
    if demand[a] ~= demand[b] then return demand[a] < demand[b] end
    return names[a] < names[b]
  end)
  local share = {}
  local left = total
  local remaining = n
  for _, j in ipairs(order) do
    local give = math.min(demand[j] * headroom, left / remaining)
    share[j] = give
    left = left - give
    remaining = remaining - 1
  end
  local used = 0
  for j = 1, n do
    share[j] = share[j] + left / n
    units[j] = math.floor(share[j] + 1e-9)
    used = used + units[j]
  end
  local rank = {}
  table.sort(order, function(a, b) return names[a] < names[b] end)
  local turn = math.floor(now / 10000)
  for pos, j in ipairs(order) do rank[j] = (pos - 1 + turn) % n end
  table.sort(order, function(a, b)
    local ra, rb = share[a] - units[a], share[b] - units[b]
    if ra ~= rb then return ra > rb end
    return rank[a] < rank[b]
  end)
  local extra = math.min(n, math.max(0, total - used))
  for k = 1, extra do units[order[k]] = units[order[k]] + 1 end
  return units
end

local nkeys = tonumber(ARGV[i]); i = i + 1
local grants = {}
for k = 1, nkeys do
  local key = ARGV[i]
  local limit = {tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])}
  local demand = {tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])}
  local usage = {tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6])}
  local applied = {tonumber(ARGV[i + 7]), tonumber(ARGV[i + 8])}
  local applied_left = tonumber(ARGV[i + 9])
  local usage_left = {tonumber(ARGV[i + 10]), tonumber(ARGV[i + 11])}
  local in_force = ARGV[i + 12] == '1'
  local admitted = ARGV[i + 13]
  i = i + 14
  local h = prefix .. ':g:' .. key
  -- Units taken stay in use after the grant they were taken under ends
  -- (a window count for the window, a call until its permit expires): an
  -- entry keeps holding its grant and usage that much longer (uexp), so a
  -- replica that dies, or is cut off, has nothing it may still use handed
  -- to another. A leave reports its usage as it is, for that long.
  local keep = 0
  for r = 1, 2 do
    if limit[r] > 0 then keep = math.max(keep, usage_left[r]) end
  end
  local uexp = 0
  if keep > 0 then uexp = now + stale + keep - base end

  -- Every live replica may use a per_key key's static share without asking
  -- (see below); an entry's grant comes on top of it.
  local each = {0, 0}
  if per_key then
    each = {math.floor(limit[1] / least), math.floor(limit[2] / least)}
  end
  -- Entries of the other replicas (and of this one's other lives): what
  -- each holds, and the live ones' demand.
  local all = redis.call('HGETALL', h)
  local held = {0, 0}
  local names, wants = {{}, {}}, {{}, {}}
  local others = 0
  -- Where this life's own entry is (for a leave), and another life's entry
  -- found in this replica's field (moved to prev_field below).
  local own_field, moved = nil, nil
  local own_found = false
  for j = 1, #all, 2 do
    local name, e = all[j], fields(all[j + 1])
    if e[1] == nil or math.max(e[1], e[10], e[11]) + base < now then
      redis.call('HDEL', h, name)
    else
      if name == replica and e[12] == life then own_found = true end
      if e[12] == life and (name == replica or name == prev_field) then
        own_field = name
      end
      if name == replica and e[12] ~= life then
        moved = all[j + 1]
        name = prev_field
      end
      if name ~= replica then
        local alive = e[1] + base >= now
        if alive then others = others + 1 end
        for r = 1, 2 do
          if limit[r] > 0 then
            local at = 3 * r - 1  -- grant, demand, usage of resource r
            local held_r = 0
            if alive then held_r = math.max(e[at], e[at + 2], each[r]) end
            if e[10] + base >= now then held_r = math.max(held_r, e[7 + r]) end
            if e[11] + base >= now then
              held_r = math.max(held_r, e[at], e[at + 2])
            end
            held[r] = held[r] + held_r
            -- An earlier life's entry holds what it may still use, but
            -- takes no part in the split: its replica competes under its
            -- own name, and two lives of one replica would otherwise
            -- squeeze every other replica's share until the old one ends.
            if alive and string.sub(name, -5) ~= '\0prev' then
              names[r][#names[r] + 1] = name
              wants[r][#wants[r] + 1] = e[at + 1]
            end
          end
        end
      end
    end
  end
  if moved and not leaving then
    redis.call('HSET', h, prev_field, moved)
  end
  -- A replica that applies a grant of this key always has its entry here:
  -- the store keeps it longer than the replica applies the grant. Without
  -- it, the store lost data (restored from an older snapshot, a failover to
  -- a lagging replica, an evicted key, its clock stepped forward) and the
  -- others' entries may be gone too: for one stale period nobody is
  -- granted more than it already applies, while every replica rebuilds
  -- its entries.
  if in_force and not leaving and not own_found then
    if redis.call('SET', rkey, '1', 'PX', stale, 'NX') then lost = 1 end
    recovering = true
  end
  -- Live replicas without an entry hold the static share.
  local cold = math.max(0, live - others - 1)
  local granted = 1
  local units = {0, 0}
  if leaving then
    -- The grant goes back; the usage stays held while it may be in use.
    if own_field then
      uexp = 0
      if usage[1] > 0 or usage[2] > 0 then uexp = now + keep - base end
      if uexp + base > now then
        redis.call('HSET', h, own_field, table.concat(
            {0, 0, 0, usage[1], 0, 0, usage[2], 0, 0, 0, uexp, life}, ' '))
      else
        redis.call('HDEL', h, own_field)
      end
    end
    granted = 0
  else
    local back_to_static = per_key
    for r = 1, 2 do
      if limit[r] > 0 then
        local pool = limit[r] - cold * each[r]
        local avail = pool - held[r]
        names[r][#names[r] + 1] = replica
        wants[r][#wants[r] + 1] = demand[r]
        local split = allocate(pool, names[r], wants[r])
        units[r] = math.max(0, math.min(split[#split], avail))
        if recovering then units[r] = math.min(units[r], applied[r]) end
        local static = math.floor(limit[r] / (live + 1))
        if demand[r] * headroom > static or usage[r] > static or
           avail < each[r] then
          back_to_static = false
        end
      end
    end
    if back_to_static then
      -- No longer live, but the grant applied now stays held until it
      -- ends: until this reply arrives, or for good if it is lost.
      local hexp = now + math.min(applied_left, stale) - base
      if (applied[1] > 0 or applied[2] > 0) and hexp + base >= now then
        redis.call('HSET', h, replica, table.concat(
            {0, 0, 0, 0, 0, 0, 0, applied[1], applied[2], hexp, 0, life}, ' '))
        redis.call('PEXPIRE', h, ttl)
      else
        redis.call('HDEL', h, replica)
      end
      granted = 0
      units = {0, 0}
    else
      local entry = {now + stale - base, units[1],
                     string.format('%.4g', demand[1]), usage[1], units[2],
                     string.format('%.4g', demand[2]), usage[2], 0, 0, 0,
                     uexp, life}
      if applied[1] > units[1] or applied[2] > units[2] then
        entry[8], entry[9] = applied[1], applied[2]
        entry[10] = now + math.min(applied_left, stale) - base
      end
      local n = #entry
      while n > 1 and tonumber(entry[n]) == 0 do n = n - 1 end
      redis.call('HSET', h, replica, table.concat(entry, ' ', 1, n))
      redis.call('PEXPIRE', h, ttl)
    end
  end
  if not per_key then
    local a = prefix .. ':a:' .. key
    redis.call('HSET', a, replica, admitted)
    redis.call('PEXPIRE', a, ttl)
  end
  grants[k] = {granted, units[1], units[2]}
end

-- Reads hash h as {field, value, ...}, dropping entries whose last field
-- (a time) is older than `stale`.
local function live_entries(h)
  local entries = redis.call('HGETALL', h)
  local out = {}
  for j = 1, #entries, 2 do
    local ts = tonumber(string.match(entries[j + 1], '(%S+)$'))
    if ts == nil or ts + stale < now then
      redis.call('HDEL', h, entries[j])
    else
      out[#out + 1] = entries[j]
      out[#out + 1] = entries[j + 1]
    end
  end
  return out
end

local outcomes, breaker, leases = {}, {}, 0
local has_breaker = ARGV[i] == '1'
i = i + 1
if has_breaker then
  local o = prefix .. ':outcomes'
  local b = prefix .. ':breaker'
  local l = prefix .. ':probes'
  if leaving then
    if not other_life then
      redis.call('HDEL', o, replica)
      redis.call('HDEL', l, replica)
    end
  else
    redis.call('HSET', o, replica,
               ARGV[i] .. ' ' .. ARGV[i + 1] .. ' ' .. ARGV[i + 2] .. ' ' .. now)
    redis.call('PEXPIRE', o, ttl)
  end
  i = i + 3
  local entries = live_entries(o)
  for j = 1, #entries, 2 do
    local c, f, s = string.match(entries[j + 1], '^(%S+) (%S+) (%S+)')
    outcomes[#outcomes + 1] = entries[j]
    outcomes[#outcomes + 1] = c
    outcomes[#outcomes + 1] = f
    outcomes[#outcomes + 1] = s
  end

  -- The breaker record, compare-and-set on the generation: a transition is
  -- stored only if it started from the stored generation. A Redis that lost
  -- the record takes the first replica's state as it is.
  local publish, base, gen = ARGV[i] == '1', tonumber(ARGV[i + 1]),
                             tonumber(ARGV[i + 2])
  local stored = redis.call('HGET', b, 'generation')
  local store = false
  if not stored then
    store = not leaving
  elseif publish and gen ~= base and tonumber(stored) == base then
    store = true
  end
  if store then
    redis.call('HSET', b, 'generation', math.max(gen, (tonumber(stored) or 0) + 1),
               'state', ARGV[i + 3], 'open_until', ARGV[i + 4],
               'open_duration', ARGV[i + 5], 'cause', ARGV[i + 6],
               'replica', replica)
  end
  i = i + 7
  local rec = redis.call('HMGET', b, 'generation', 'state', 'open_until',
                         'open_duration', 'cause', 'replica')
  if rec[1] then
    breaker = rec
    -- An open breaker outlives quiet replicas until its time is over.
    local until_ms = tonumber(rec[3]) or 0
    redis.call('PEXPIRE', b, ttl + math.max(0, until_ms - now))
  end

  -- Probe leases for the stored generation: at most lease_cap across the
  -- cluster. A lease is void once its generation is past, once its probe
  -- had time to finish, or as soon as its holder stops ticking.
  local wanted, cap, lease_ttl =
      tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  i = i + 3
  local current = rec[1] or '0'
  local all = redis.call('HGETALL', l)
  local others = 0
  for j = 1, #all, 2 do
    local lgen, count, expiry, alive =
        string.match(all[j + 1], '^(%S+) (%S+) (%S+) (%S+)$')
    if lgen ~= current or tonumber(expiry) < now or tonumber(alive) < now then
      redis.call('HDEL', l, all[j])
    elseif all[j] ~= replica then
      others = others + tonumber(count)
    end
  end
  if not leaving then
    leases = math.max(0, math.min(wanted, cap - others))
  end
  if leases > 0 then
    redis.call('HSET', l, replica, table.concat(
        {current, leases, now + lease_ttl, now + stale}, ' '))
    redis.call('PEXPIRE', l, ttl)
  elseif not other_life then
    redis.call('HDEL', l, replica)
  end
end

-- Warm state: each replica's adaptive limit and latency baseline, kept
-- for ttl after its last tick, so that a replica that starts fresh (even
-- after all the others left, in a rollout) starts from what they learned.
-- The sync loop combines the entries (it knows which replicas are live);
-- an entry that learned nothing is not stored, so a fresh replica never
-- replaces what its previous life learned under the same name.
local warm = {}
if ARGV[i] == '1' then
  local w = prefix .. ':warm'
  local all = redis.call('HGETALL', w)
  for j = 1, #all, 2 do
    local updated = tonumber(string.match(all[j + 1], '(%S+)$'))
    if updated == nil or updated + ttl < now then
      redis.call('HDEL', w, all[j])
    else
      warm[#warm + 1] = all[j]
      warm[#warm + 1] = all[j + 1]
    end
  end
  local steady, baseline_us, windows =
      tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
  if (steady > 0 and baseline_us > 0) or windows > 0 then
    redis.call('HSET', w, replica, table.concat(
        {ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5],
         ARGV[i + 6], ARGV[i + 7], now}, ' '))
    redis.call('PEXPIRE', w, ttl)
  end
  i = i + 8
end

return {now, epoch, lost, grants, outcomes, breaker, leases, warm}
