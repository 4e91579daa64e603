
-- A number this script wrote, or 0: nil, NaN, infinities, negatives and anything from 2^53 on
-- (not exact as a Lua number) read as 0.
local function num(v)
  local n = tonumber(v)
  if n == nil or n ~= n or n < 0 or n >= 9007199254740992 then return 0 end
  return n
end
local function int(v) return string.format('%d', v) end
local replica, attempt, seq = ARGV[1], num(ARGV[2]), num(ARGV[3])
local nd, nr, nq = num(ARGV[4]), num(ARGV[5]), num(ARGV[6])
local keep, alive = ARGV[7], num(ARGV[8])
for _, key in ipairs(KEYS) do
  local kind = redis.call('TYPE', key).ok
  if kind ~= 'none' and kind ~= (key == KEYS[4] and 'zset' or 'hash') then
    return redis.error_reply('fairq: ' .. key .. ' holds a ' .. kind)
  end
end
local time = redis.call('TIME')
local now = num(time[1]) * 1000 + math.floor(num(time[2]) / 1000)
local i = 9
local last_seq = num(redis.call('HGET', KEYS[1], 'seq:' .. replica))
local applied = 0
if seq > last_seq then
  for _ = 1, nd do
    -- A field that is not an integer (or would overflow) restarts from this delta, instead of
    -- failing the script halfway through the batch.
    local r = redis.pcall('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
    if type(r) == 'table' and r.err then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
    i = i + 2
  end
  redis.call('HSET', KEYS[1], 'seq:' .. replica, ARGV[3])
  applied = 1
else
  i = i + 2 * nd
end
redis.call('HSET', KEYS[1], 'hb:' .. replica, int(now))
redis.call('PEXPIRE', KEYS[1], keep)
local function add(field, by)
  if by ~= 0 then
    local sum = num(redis.call('HGET', KEYS[2], field)) + by
    if sum > 0 then redis.call('HSET', KEYS[2], field, int(sum))
    else redis.call('HDEL', KEYS[2], field) end
  end
end
local last_attempt = num(redis.call('HGET', KEYS[3], 'attempt'))
local taken = 0
if attempt > last_attempt then
  for _ = 1, nr do
    local field, rate = ARGV[i], num(ARGV[i + 1])
    add(field, rate - num(redis.call('HGET', KEYS[3], field)))
    if rate > 0 then redis.call('HSET', KEYS[3], field, int(rate))
    else redis.call('HDEL', KEYS[3], field) end
    i = i + 2
  end
  redis.call('HSET', KEYS[3], 'attempt', ARGV[2])
  taken = 1
else
  i = i + 2 * nr
end
redis.call('PEXPIRE', KEYS[3], keep)
redis.call('ZADD', KEYS[4], now + alive, replica)
local prefix = string.sub(KEYS[3], 1, #KEYS[3] - #replica)
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, 4)) do
  local key = prefix .. gone
  local kv = redis.call('HGETALL', key)
  for j = 1, #kv, 2 do
    if kv[j] ~= 'attempt' then add(kv[j], -num(kv[j + 1])) end
  end
  redis.call('DEL', key)
  redis.call('ZREM', KEYS[4], gone)
end
redis.call('PEXPIRE', KEYS[2], keep)
redis.call('PEXPIRE', KEYS[4], keep)
local out = {applied, last_seq, taken, last_attempt}
local first = 9 + 2 * nd
for j = 0, nr - 1 do
  out[#out + 1] = num(redis.call('HGET', KEYS[2], ARGV[first + 2 * j]))
end
for j = 0, nq - 1 do
  out[#out + 1] = num(redis.call('HGET', KEYS[2], ARGV[first + 2 * nr + j]))
end
return out
