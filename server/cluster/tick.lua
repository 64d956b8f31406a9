-- One replica's tick for one policy. All keys share the policy's hash tag:
-- KEYS[1] is the prefix "sluice:{<policy>}".
--
-- ARGV: replica, now_ms, stale_ms, ttl_ms, then
--   nkeys, and per key: key, rate_demand, concurrency_demand, admitted_total;
--   has_breaker ("1" or "0"), and if "1":
--     calls, failures, slow (cumulative outcome totals),
--     generation, state ("OPEN" | "CLOSED"), open_until_ms, open_duration_ms,
--     cause, leases_wanted, lease_cap, lease_ttl_ms.
--
-- Returns {demands, outcomes, breaker, leases}:
--   demands[k]  flat {replica, rate_demand, concurrency_demand, ...} of the
--               live replicas for pushed key k;
--   outcomes    flat {replica, calls, failures, slow, ...} of live replicas;
--   breaker     {generation, state, open_until_ms, open_duration_ms, cause,
--               replica} or {} when none is stored;
--   leases      probe leases granted to this replica.
--
-- Every stored value is a level or a cumulative total, so running a tick
-- twice (a retry after a timeout) counts nothing twice.

local prefix = KEYS[1]
local replica = ARGV[1]
local now = tonumber(ARGV[2])
local stale = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])
local i = 5

-- Reads hash h as {field, value, ...}, dropping entries whose last field
-- (a timestamp) is older than `stale`.
local function live_entries(h)
  local all = redis.call('HGETALL', h)
  local out = {}
  for j = 1, #all, 2 do
    local ts = tonumber(string.match(all[j + 1], '(%S+)$'))
    if ts == nil or ts + stale < now then
      redis.call('HDEL', h, all[j])
    else
      out[#out + 1] = all[j]
      out[#out + 1] = all[j + 1]
    end
  end
  return out
end

local nkeys = tonumber(ARGV[i]); i = i + 1
local demands = {}
for k = 1, nkeys do
  local key, rate, conc, admitted = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  i = i + 4
  local h = prefix .. ':d:' .. key
  redis.call('HSET', h, replica, rate .. ' ' .. conc .. ' ' .. now)
  redis.call('PEXPIRE', h, ttl)
  local a = prefix .. ':a:' .. key
  redis.call('HSET', a, replica, admitted)
  redis.call('PEXPIRE', a, ttl)
  local entries = live_entries(h)
  local out = {}
  for j = 1, #entries, 2 do
    local r, c = string.match(entries[j + 1], '^(%S+) (%S+)')
    out[#out + 1] = entries[j]
    out[#out + 1] = r
    out[#out + 1] = c
  end
  demands[k] = out
end

local outcomes, breaker, leases = {}, {}, 0
if ARGV[i] == '1' then
  i = i + 1
  local o = prefix .. ':outcomes'
  redis.call('HSET', o, replica,
             ARGV[i] .. ' ' .. ARGV[i + 1] .. ' ' .. ARGV[i + 2] .. ' ' .. now)
  redis.call('PEXPIRE', o, ttl)
  i = i + 3
  local entries = live_entries(o)
  for j = 1, #entries, 2 do
    local c, f, s = string.match(entries[j + 1], '^(%S+) (%S+) (%S+)')
    outcomes[#outcomes + 1] = entries[j]
    outcomes[#outcomes + 1] = c
    outcomes[#outcomes + 1] = f
    outcomes[#outcomes + 1] = s
  end

  -- The breaker record: the highest generation wins; a tie keeps the first.
  local b = prefix .. ':breaker'
  local gen = tonumber(ARGV[i])
  local stored = tonumber(redis.call('HGET', b, 'generation') or '0')
  if gen > stored then
    redis.call('HSET', b, 'generation', ARGV[i], 'state', ARGV[i + 1],
               'open_until', ARGV[i + 2], 'open_duration', ARGV[i + 3],
               'cause', ARGV[i + 4], 'replica', replica)
  end
  i = i + 5
  local rec = redis.call('HMGET', b, 'generation', 'state', 'open_until',
                         'open_duration', 'cause', 'replica')
  if rec[1] then
    breaker = rec
    -- An open breaker outlives quiet replicas until its time is over.
    local until_ms = tonumber(rec[3]) or 0
    redis.call('PEXPIRE', b, ttl + math.max(0, until_ms - now))
  end

  -- Probe leases for the stored generation: at most lease_cap across the
  -- cluster. Leases of other generations, and expired ones, are void.
  local wanted, cap, lease_ttl =
      tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  i = i + 3
  local l = prefix .. ':probes'
  local current = rec[1] or '0'
  local all = redis.call('HGETALL', l)
  local others = 0
  for j = 1, #all, 2 do
    local lgen, count, expiry = string.match(all[j + 1], '^(%S+) (%S+) (%S+)$')
    if lgen ~= current or tonumber(expiry) < now then
      redis.call('HDEL', l, all[j])
    elseif all[j] ~= replica then
      others = others + tonumber(count)
    end
  end
  leases = math.max(0, math.min(wanted, cap - others))
  if leases > 0 then
    redis.call('HSET', l, replica,
               current .. ' ' .. leases .. ' ' .. (now + lease_ttl))
    redis.call('PEXPIRE', l, ttl)
  else
    redis.call('HDEL', l, replica)
  end
end

return {demands, outcomes, breaker, leases}
