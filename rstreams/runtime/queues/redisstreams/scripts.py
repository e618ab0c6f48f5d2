"""The Lua scripts of the Redis broker: what must happen atomically on the server.

A script runs alone on the server (nothing interleaves) and all its keys share the job's
hash tag, so on Redis Cluster they live in one slot. Each checks everything before it
writes anything, so a refused call (a fence that moved, a stream that is gone) changes
nothing.
"""

from __future__ import annotations

#: Appends and commits, all or nothing, optionally fenced.
#:
#: KEYS: every key the fences and the operations name. ARGV[1] the number n of fences
#: (a worker's commit has one per task), then n pairs: the index of a fence key, the
#: value it must hold; ARGV[2n + 2] the operations as one msgpack array (unpacked here
#: at C speed), each one of
#:   {"x", stream key index, n, timestamps, keys, values, headers or nil}: n XADD 0-*
#:      (a nil key, value or headers entry leaves that field out)
#:   {"c", hash key index, field, offset, set key index, group}: HSET + SADD
#: Returns {"ok", first id of each "x"...}, {"fenced", current value, fence key} (the
#: first fence that moved), {"lost", key} or {"foreign", key, id} (XADD 0-* would fail
#: there: checked first, so nothing is applied).
WRITE = """
local n = tonumber(ARGV[1])
for i = 1, n do
  local fence = KEYS[tonumber(ARGV[2 * i])]
  local v = redis.call('GET', fence)
  if v ~= ARGV[2 * i + 1] then return {'fenced', v, fence} end
end
local ops = cmsgpack.unpack(ARGV[2 * n + 2])
for _, op in ipairs(ops) do
  if op[1] == 'x' then
    local k = KEYS[op[2]]
    if redis.call('EXISTS', k) == 0 then return {'lost', k} end
    local last = redis.call('XREVRANGE', k, '+', '-', 'COUNT', 1)[1]
    if last and string.sub(last[1], 1, 2) ~= '0-' then return {'foreign', k, last[1]} end
  end
end
local out = {'ok'}
for _, op in ipairs(ops) do
  if op[1] == 'x' then
    local key, ts, ks, vs, hs = KEYS[op[2]], op[4], op[5], op[6], op[7]
    for r = 1, op[3] do
      local k, v, h = ks[r], vs[r], hs and hs[r]
      local id
      if k and v and not h then
        id = redis.call('XADD', key, '0-*', 't', ts[r], 'k', k, 'v', v)
      else
        local f = {'t', ts[r]}
        if k then f[#f + 1] = 'k'; f[#f + 1] = k end
        if v then f[#f + 1] = 'v'; f[#f + 1] = v end
        if h then f[#f + 1] = 'h'; f[#f + 1] = h end
        id = redis.call('XADD', key, '0-*', unpack(f))
      end
      if r == 1 then out[#out + 1] = id end
    end
  else
    redis.call('HSET', KEYS[op[2]], op[3], op[4])
    redis.call('SADD', KEYS[op[5]], op[6])
  end
end
return out
"""

#: Read: the start mark checked, then up to COUNT entries from an id, returned as one
#: msgpack array of columns {sequence numbers, timestamps, keys, values, headers} (keys
#: and values false where the field is absent; headers as {index, blob, ...}): one bulk
#: reply the client decodes at C speed, not a reply element per field.
#: KEYS: the stream, the starts hash. ARGV: start field, offset, first id, count ("" =
#: all). Returns {"ok", blob}, {"empty", the last generated id} (no entry from there
#: on: the caller checks that the stream really ends there), {"purged", start}, {"lost"}
#: or {"foreign", id}.
READ = """
local start = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if tonumber(ARGV[2]) < start then return {'purged', start} end
if redis.call('EXISTS', KEYS[1]) == 0 then return {'lost'} end
local e
if ARGV[4] == '' then
  e = redis.call('XRANGE', KEYS[1], ARGV[3], '+')
else
  e = redis.call('XRANGE', KEYS[1], ARGV[3], '+', 'COUNT', ARGV[4]) or {}  -- (COUNT 0: nil)
end
if #e == 0 then
  if ARGV[4] == '0' then return {'empty', -1} end
  local info = redis.call('XINFO', 'STREAM', KEYS[1])
  for j = 1, #info, 2 do
    if info[j] == 'last-generated-id' then return {'empty', info[j + 1]} end
  end
end
local seqs, ts, ks, vs, hs = {}, {}, {}, {}, {}
for i = 1, #e do
  local id, f = e[i][1], e[i][2]
  if string.sub(id, 1, 2) ~= '0-' then return {'foreign', id} end
  seqs[i] = tonumber(string.sub(id, 3))
  ks[i] = false
  vs[i] = false
  for j = 1, #f, 2 do
    local name = f[j]
    if name == 't' then ts[i] = f[j + 1]
    elseif name == 'k' then ks[i] = f[j + 1]
    elseif name == 'v' then vs[i] = f[j + 1]
    elseif name == 'h' then hs[#hs + 1] = i; hs[#hs + 1] = f[j + 1] end
  end
  if ts[i] == nil then return {'foreign', id} end
end
return {'ok', cmsgpack.pack({seqs, ts, ks, vs, hs})}
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

#: END of every stream in KEYS, in one call: a list of the same numbers.
ENDS = """
local out = {}
for i, key in ipairs(KEYS) do
  local e = -1
  if redis.call('EXISTS', key) == 1 then
    e = -2
    local info = redis.call('XINFO', 'STREAM', key)
    for j = 1, #info, 2 do
      if info[j] == 'last-generated-id' then
        e = tonumber(string.match(info[j + 1], '^0%-(%d+)$') or '-2')
      end
    end
  end
  out[i] = e
end
return out
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

#: Compact a queue: keep the latest entry of each key (and every entry without one),
#: rewritten into a new stream that takes the queue's key (XDEL would leave the memory
#: of a stream node in use while one entry of it stays: a changelog's live entries are
#: spread over all of them). The ids, the last generated id and the entries-added count
#: stay. Runs on the server in one step (no write can come in between): its time and
#: the copy's memory are those of the queue, which compaction keeps near its key count.
#: KEYS: the stream, a scratch key. ARGV: entries read per XRANGE. Returns the number
#: of entries removed, or -1 if the stream is gone.
COMPACT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local chunk = tonumber(ARGV[1])
local function each(fn)
  local from = '-'
  while true do
    local e = redis.call('XRANGE', KEYS[1], from, '+', 'COUNT', chunk)
    for i = 1, #e do fn(e[i][1], e[i][2]) end
    if #e < chunk then return end
    from = '(' .. e[#e][1]
  end
end
local function key_of(f)
  for j = 1, #f, 2 do if f[j] == 'k' then return f[j + 1] end end
  return nil
end
local latest, total = {}, 0
each(function(id, f)
  total = total + 1
  local k = key_of(f)
  if k then latest[k] = id end
end)
local kept = 0
redis.call('DEL', KEYS[2])
each(function(id, f)
  local k = key_of(f)
  if k == nil or latest[k] == id then
    redis.call('XADD', KEYS[2], id, unpack(f))
    kept = kept + 1
  end
end)
if kept == total then
  redis.call('DEL', KEYS[2])
  return 0
end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local last, added, deleted
for j = 1, #info, 2 do
  if info[j] == 'last-generated-id' then last = info[j + 1]
  elseif info[j] == 'entries-added' then added = info[j + 1]
  elseif info[j] == 'max-deleted-entry-id' then deleted = info[j + 1] end
end
if kept == 0 then  -- (only when every entry has a key, which can not all be superseded)
  redis.call('XGROUP', 'CREATE', KEYS[2], 'rstreams-create', '$', 'MKSTREAM')
  redis.call('XGROUP', 'DESTROY', KEYS[2], 'rstreams-create')
end
redis.call('XSETID', KEYS[2], last, 'ENTRIESADDED', added, 'MAXDELETEDID', last)
redis.call('RENAME', KEYS[2], KEYS[1])
return total - kept
"""
