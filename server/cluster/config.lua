-- The operator config every replica shares: policies and breaker overrides,
-- under one hash tag. KEYS[1] is the prefix "sluice:{config}".
--   <prefix>:version    config version counter (INCR on every change)
--   <prefix>:policies   hash name -> serialized sluice.v1.Policy (version 0)
--   <prefix>:pversions  hash name -> config version that last wrote it
--   <prefix>:deleted    hash name -> config version of its deletion
--   <prefix>:overrides  hash dependency -> "FORCE_OPEN <note>" | "FORCE_CLOSED <note>"
-- These keys have no TTL: they are the cluster's configuration, like the
-- policies file, and are only changed by operators.
--
-- ARGV[1] is the operation:
--   read SEEN NSEED [NAME BLOB]...   stores each seed policy whose name is
--       neither stored nor deleted; then {version} when version == SEEN,
--       else {version, policies, pversions, overrides} (flat HGETALL lists)
--   put NAME BLOB EXPECTED           {"OK", old, new, version} | {"ABORTED", stored}
--   delete NAME EXPECTED             {"OK", old, "0", version} | {"ABORTED", stored}
--                                    | {"NOT_FOUND"}
--   override DEP MODE NOTE           {"OK", version} | {"NOT_FOUND"}
-- EXPECTED "0" skips the compare-and-set. A put of unchanged content keeps
-- the stored version and does not bump the counter.

local prefix = KEYS[1]
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
  local n = tonumber(ARGV[3])
  for j = 0, n - 1 do
    local name, blob = ARGV[4 + 2 * j], ARGV[5 + 2 * j]
    if redis.call('HEXISTS', pkey, name) == 0 and
       redis.call('HEXISTS', dkey, name) == 0 then
      local v = redis.call('INCR', vkey)
      redis.call('HSET', pkey, name, blob)
      redis.call('HSET', verkey, name, v)
    end
  end
  local version = current()
  if version == ARGV[2] then return {version} end
  return {version, redis.call('HGETALL', pkey), redis.call('HGETALL', verkey),
          redis.call('HGETALL', okey)}
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
  local v = redis.call('INCR', vkey)
  redis.call('HSET', pkey, name, blob)
  redis.call('HSET', verkey, name, v)
  redis.call('HDEL', dkey, name)
  return {'OK', stored or '0', tostring(v), tostring(v)}
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
