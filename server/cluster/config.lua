-- SPDX-License-Identifier: Apache-2.0
-- The operator config every replica shares: policies and breaker overrides,
-- under one hash tag. KEYS[1] is the config's epoch key
-- "sluice:{config}:epoch", the others start with its prefix
-- "sluice:{config}" (an existing key is declared for Redis Cluster's slot
-- migrations; see tick.lua).
--   <prefix>:version    config version counter (INCR on every change)
--   <prefix>:policies   hash name -> serialized sluice.v1.Policy (version 0)
--   <prefix>:pversions  hash name -> config version that last wrote it
--   <prefix>:deleted    hash name -> config version of its deletion
--   <prefix>:overrides  hash dependency -> "FORCE_OPEN <note>" | "FORCE_CLOSED <note>"
--   <prefix>:epoch      when this store's config was created (Redis TIME)
--   <prefix>:replicas   zset replica id -> expiry (ms, Redis TIME)
--   <prefix>:lives      hash replica id -> "incarnation sequence weight" of
--                       the live replicas
--   <prefix>:members    hash: epoch (made like the config's when the hash is
--                       missing), version (+1 on every join, leave, weight
--                       change, new life and expiry), weight (the live
--                       replicas' weights summed when they were last listed)
-- These keys have no TTL (but replicas): they are the cluster's
-- configuration, like the policies file, and are only changed by operators.
--
-- ARGV[1] is the operation:
--   read REPLICA STALE_MS LEAVING SEEN EPOCH_SEEN INCARNATION SEQUENCE WEIGHT
--       MEMBERS_EPOCH_SEEN MEMBERS_SEEN NSEED [NAME BLOB]...
--       refreshes REPLICA's membership (or removes it when LEAVING is "1",
--       unless the id is live under another INCARNATION: a late leave of a
--       process that restarted since); refuses (STALE) a request whose
--       SEQUENCE is below the one stored for the same INCARNATION;
--       stores each seed policy whose name is neither stored nor deleted;
--       then {now_ms, epoch, lost, live, live_weight, version,
--       members_epoch, members_version, listed} when version == SEEN, else
--       the same followed by {policies, pversions, overrides, deleted}
--       (flat HGETALL lists). lost is 1 when EPOCH_SEEN is set and differs:
--       the store lost its config since this replica last looked.
--       live_weight sums the live replicas' WEIGHTs. live lists the live
--       replicas (and listed is 1) only when the membership changed in
--       this call or differs from (MEMBERS_EPOCH_SEEN, MEMBERS_SEEN);
--       otherwise live is empty, listed 0, and live_weight the sum stored
--       when the list was last read. A tick that changes nothing reads no
--       key in proportion to the replicas.
--   restore VERSION NP [NAME PVERSION BLOB]... ND [NAME DVERSION]...
--       NO [DEP VALUE]...   rebuilds a config lost by the store from a
--       replica's memory: every policy, tombstone and override the store
--       does not have again, and the version counter at least VERSION.
--       {version}
--   put NAME BLOB EXPECTED STALE_MS  {"OK", old, new, version, fresh} | {"ABORTED", stored}
--       fresh is "1" when no replica can hold a grant of NAME: the name is
--       neither stored nor deleted, and the config's epoch is at least
--       STALE_MS old (see below); the caller may then create the policy's
--       epoch without a recovery window.
--   delete NAME EXPECTED             {"OK", old, "0", version} | {"ABORTED", stored}
--                                    | {"NOT_FOUND"}
--   override DEP MODE NOTE           {"OK", version} | {"NOT_FOUND"}
-- EXPECTED "0" skips the compare-and-set. A put of unchanged content keeps
-- the stored version and does not bump the counter.

local prefix = string.sub(KEYS[1], 1, -7)  -- without ":epoch"
local vkey = prefix .. ':version'
local pkey = prefix .. ':policies'
local verkey = prefix .. ':pversions'
local dkey = prefix .. ':deleted'
local okey = prefix .. ':overrides'
local op = ARGV[1]

local function current()
  return tostring(redis.call('GET', vkey) or '0')
end

if op == 'read' then
  local replica, stale, leaving = ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
  local seen, epoch_seen = ARGV[5], ARGV[6]
  local incarnation, sequence = ARGV[7], tonumber(ARGV[8])
  local weight = math.max(1, tonumber(ARGV[9]) or 1)
  local members_epoch_seen, members_seen = ARGV[10], ARGV[11]
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local members = prefix .. ':replicas'
  local lives = prefix .. ':lives'
  local mkey = prefix .. ':members'
  -- Whether this call changes the membership; the version is bumped once,
  -- as soon as a change is written (a STALE refusal below must not leave
  -- an expiry unversioned).
  local changed = false
  local mversion
  local function bump()
    changed = true
    if not mversion then
      mversion = tostring(redis.call('HINCRBY', mkey, 'version', 1))
    end
  end
  local mepoch = redis.call('HGET', mkey, 'epoch')
  if not mepoch then
    -- A new membership epoch: with it no (epoch, version) pair of the lost
    -- one can come back.
    mepoch = t[1] .. '.' .. t[2]
    redis.call('HSET', mkey, 'epoch', mepoch, 'version', 0)
    changed = true
  end
  -- Expiry is noticed here, by whichever replica ticks first after it.
  local gone = redis.call('ZRANGEBYSCORE', members, '-inf', '(' .. now)
  if #gone > 0 then
    for _, name in ipairs(gone) do redis.call('HDEL', lives, name) end
    redis.call('ZREMRANGEBYSCORE', members, '-inf', '(' .. now)
    bump()
  end
  local stored = redis.call('HGET', lives, replica)
  local other_life = false
  if stored then
    local inc, seq = string.match(stored, '^(%S+) (%S+)')
    if inc == incarnation and tonumber(seq) > sequence then
      return redis.error_reply('STALE tick request: a newer one was applied')
    end
    other_life = inc ~= incarnation
  end
  if leaving then
    if not other_life then
      if redis.call('ZREM', members, replica) > 0 then changed = true end
      redis.call('HDEL', lives, replica)
    end
  else
    if redis.call('ZADD', members, now + stale, replica) > 0 then
      changed = true
    end
    -- A new life or a new weight of a member changes the membership too.
    local inc, _, w = string.match(stored or '', '^(%S+) (%S+) (%S+)$')
    if inc ~= incarnation or tonumber(w) ~= weight then changed = true end
    redis.call('HSET', lives, replica,
               incarnation .. ' ' .. sequence .. ' ' .. weight)
  end
  if changed then bump() end
  if not mversion then
    mversion = tostring(redis.call('HGET', mkey, 'version') or '0')
  end
  local listed = changed or mepoch ~= members_epoch_seen or
                 mversion ~= members_seen
  local live = {}
  local live_weight
  if listed then
    -- Expired entries are gone: every member left is live.
    live = redis.call('ZRANGE', members, 0, -1)
    live_weight = 0
    -- In slices: unpack() is bounded by Lua's stack.
    for first = 1, #live, 1000 do
      local last = math.min(#live, first + 999)
      local entries = redis.call('HMGET', lives, unpack(live, first, last))
      for _, e in ipairs(entries) do
        live_weight = live_weight +
                      (tonumber(e and string.match(e, '(%S+)$')) or 1)
      end
    end
    -- The running total is rebuilt from the list whenever it is read, so
    -- it heals from any key lost on its own.
    redis.call('HSET', mkey, 'weight', live_weight)
  else
    live_weight = tonumber(redis.call('HGET', mkey, 'weight')) or 0
  end
  local ekey = KEYS[1]
  local epoch = redis.call('GET', ekey)
  if not epoch then
    epoch = t[1] .. '.' .. t[2]
    redis.call('SET', ekey, epoch)
  end
  local lost = (epoch_seen ~= '' and epoch_seen ~= epoch) and 1 or 0
  local n = tonumber(ARGV[12])
  for j = 0, n - 1 do
    local name, blob = ARGV[13 + 2 * j], ARGV[14 + 2 * j]
    if redis.call('HEXISTS', pkey, name) == 0 and
       redis.call('HEXISTS', dkey, name) == 0 then
      local v = redis.call('INCR', vkey)
      redis.call('HSET', pkey, name, blob)
      redis.call('HSET', verkey, name, v)
    end
  end
  local version = current()
  local answer = {now, epoch, lost, live, live_weight, version, mepoch,
                  mversion, listed and 1 or 0}
  if version == seen then return answer end
  return {now, epoch, lost, live, live_weight, version, mepoch, mversion,
          listed and 1 or 0, redis.call('HGETALL', pkey),
          redis.call('HGETALL', verkey), redis.call('HGETALL', okey),
          redis.call('HGETALL', dkey)}
end

if op == 'restore' then
  local j = 3
  local np = tonumber(ARGV[j]); j = j + 1
  for _ = 1, np do
    local name, pversion, blob = ARGV[j], ARGV[j + 1], ARGV[j + 2]
    j = j + 3
    if redis.call('HEXISTS', pkey, name) == 0 and
       redis.call('HEXISTS', dkey, name) == 0 then
      redis.call('HSET', pkey, name, blob)
      redis.call('HSET', verkey, name, pversion)
    end
  end
  -- NAME VALUE pairs into `hash` where it has none, for the names whose
  -- policy is stored (1: overrides) or not (0: tombstones).
  local function restore_pairs(hash, policy_stored)
    local n = tonumber(ARGV[j]); j = j + 1
    for _ = 1, n do
      if redis.call('HEXISTS', pkey, ARGV[j]) == policy_stored then
        redis.call('HSETNX', hash, ARGV[j], ARGV[j + 1])
      end
      j = j + 2
    end
  end
  restore_pairs(dkey, 0)
  restore_pairs(okey, 1)
  if tonumber(current()) < tonumber(ARGV[2]) then
    redis.call('SET', vkey, ARGV[2])
  end
  return {current()}
end

if op == 'put' then
  local name, blob, expected = ARGV[2], ARGV[3], ARGV[4]
  local stored = redis.call('HGET', verkey, name)
  if expected ~= '0' and stored ~= expected then
    return {'ABORTED', stored or '0'}
  end
  if stored and redis.call('HGET', pkey, name) == blob then
    return {'OK', stored, stored, current()}
  end
  -- Replicas hold grants only of policies in their config. A name this
  -- config never had is one none of them holds, unless the config itself
  -- was lost while they still apply grants of a policy of that name: its
  -- epoch is then new, made at or after the loss, and those grants (each
  -- valid for a stale period at most from a tick Redis answered before
  -- the loss) have all ended once it is a stale period old. A deleted name
  -- may still be applied by replicas that have not ticked since, and its
  -- epoch may be gone with its slot's data: not fresh either.
  local fresh = '0'
  local stale = tonumber(ARGV[5])
  if not stored and stale and redis.call('HEXISTS', dkey, name) == 0 then
    local epoch = redis.call('GET', KEYS[1])
    local s, us = string.match(epoch or '', '^(%d+)%.(%d+)$')
    if s then
      local t = redis.call('TIME')
      local age = (tonumber(t[1]) - tonumber(s)) * 1000 +
                  math.floor((tonumber(t[2]) - tonumber(us)) / 1000)
      if age >= stale then fresh = '1' end
    end
  end
  local v = redis.call('INCR', vkey)
  redis.call('HSET', pkey, name, blob)
  redis.call('HSET', verkey, name, v)
  redis.call('HDEL', dkey, name)
  return {'OK', stored or '0', tostring(v), tostring(v), fresh}
end

if op == 'delete' then
  local name, expected = ARGV[2], ARGV[3]
  local stored = redis.call('HGET', verkey, name)
  if not stored then return {'NOT_FOUND'} end
  if expected ~= '0' and stored ~= expected then return {'ABORTED', stored} end
  local v = redis.call('INCR', vkey)
  redis.call('HDEL', pkey, name)
  redis.call('HDEL', verkey, name)
  redis.call('HDEL', okey, name)
  redis.call('HSET', dkey, name, v)
  return {'OK', stored, '0', tostring(v)}
end

if op == 'override' then
  local dep, mode, note = ARGV[2], ARGV[3], ARGV[4]
  if redis.call('HEXISTS', pkey, dep) == 0 then return {'NOT_FOUND'} end
  if mode == 'AUTO' then
    redis.call('HDEL', okey, dep)
  else
    redis.call('HSET', okey, dep, mode .. ' ' .. note)
  end
  local v = redis.call('INCR', vkey)
  return {'OK', tostring(v)}
end

return redis.error_reply('config.lua: unknown operation ' .. tostring(op))
