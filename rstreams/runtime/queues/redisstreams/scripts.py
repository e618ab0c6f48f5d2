"""The Lua scripts of the Redis broker: what must happen atomically on the server.

A script runs alone on the server (nothing interleaves) and all its keys share the job's
hash tag, so on Redis Cluster they live in one slot. Each checks everything before it
writes anything, so a refused call (a fence that moved, a stream that is gone) changes
nothing.
"""

from __future__ import annotations

#: Appends and commits, all or nothing, optionally fenced.
#:
#: KEYS: the fence key (when ARGV[1] is "1"), then every key the operations name.
#: ARGV[1] "1" with a fence, ARGV[2] the value the fence key must hold; then operations:
#:   "x", stream key index, record count, then per record: item count, items (XADD 0-*)
#:   "c", hash key index, field, offset, set key index, group (HSET + SADD)
#: Returns {"ok", first id of each "x"...}, {"fenced", current value}, {"lost", key}.
WRITE = """
local i = 3
if ARGV[1] == '1' then
  local v = redis.call('GET', KEYS[1])
  if v ~= ARGV[2] then return {'fenced', v} end
end
while i <= #ARGV do
  if ARGV[i] == 'x' then
    local k = KEYS[tonumber(ARGV[i + 1])]
    if redis.call('EXISTS', k) == 0 then return {'lost', k} end
    local n = tonumber(ARGV[i + 2])
    i = i + 3
    for r = 1, n do i = i + 1 + tonumber(ARGV[i]) end
  else
    i = i + 6
  end
end
local out = {'ok'}
i = 3
while i <= #ARGV do
  if ARGV[i] == 'x' then
    local k = KEYS[tonumber(ARGV[i + 1])]
    local n = tonumber(ARGV[i + 2])
    i = i + 3
    for r = 1, n do
      local m = tonumber(ARGV[i])
      local id = redis.call('XADD', k, '0-*', unpack(ARGV, i + 1, i + m))
      if r == 1 then out[#out + 1] = id end
      i = i + 1 + m
    end
  else
    redis.call('HSET', KEYS[tonumber(ARGV[i + 1])], ARGV[i + 2], ARGV[i + 3])
    redis.call('SADD', KEYS[tonumber(ARGV[i + 4])], ARGV[i + 5])
    i = i + 6
  end
end
return out
"""

#: Create a topic: its options in the topics hash and an empty stream per queue (made
#: with a throw-away consumer group: the stream exists, its last id is 0-0), only if
#: the topic is new. KEYS: topics hash, then the queue streams. ARGV: name, options.
#: Returns false when created, else the options the topic already has.
CREATE_TOPIC = """
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return redis.call('HGET', KEYS[1], ARGV[1])
end
for j = 2, #KEYS do
  redis.call('XGROUP', 'CREATE', KEYS[j], 'rstreams-create', '$', 'MKSTREAM')
  redis.call('XGROUP', 'DESTROY', KEYS[j], 'rstreams-create')
end
return false
"""

#: The end offset of a stream: the sequence number of its last generated id (kept by
#: XDEL and XTRIM), without sending its first and last entries. KEYS: the stream.
#: Returns -1 when the stream does not exist.
END = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
for j = 1, #info, 2 do
  if info[j] == 'last-generated-id' then
    return tonumber(string.match(info[j + 1], '^0%-(%d+)$') or '-2')
  end
end
return -2
"""

#: Purge: trim the entries below an offset and move the queue's start mark, atomically
#: (an empty purged stream still knows its start). KEYS: the stream, the starts hash.
#: ARGV: the start field, ``before``. Returns the new start, or -1 if the stream is gone.
PURGE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local last = -2
for j = 1, #info, 2 do
  if info[j] == 'last-generated-id' then
    last = tonumber(string.match(info[j + 1], '^0%-(%d+)$') or '-2')
  end
end
if last < 0 then return -2 end
local start = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
local new = math.min(tonumber(ARGV[2]), last)
if new <= start then return start end
redis.call('XTRIM', KEYS[1], 'MINID', string.format('0-%d', new + 1))
redis.call('HSET', KEYS[2], ARGV[1], string.format('%d', new))
return new
"""
