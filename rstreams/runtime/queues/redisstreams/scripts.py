"""The Lua scripts of the Redis broker: what must happen atomically on the server.

A script runs alone on the server (nothing interleaves) and all its keys share the job's
hash tag, so on Redis Cluster they live in one slot. Each checks everything before it
writes anything, so a refused call (a fence that moved, a stream that is gone) changes
nothing.
"""

from __future__ import annotations

#: A number the scripts keep in a hash (a queue's start, end, gaps), checked: anything
#: else (a hand edit, damage) fails the script with an error naming the key, the field
#: and what it holds (see BAD_NUMBER), rather than a wrong offset or a short reply.
_NUMBERS = """
local function number_in(key, field, v)
  local n = tonumber(v)
  if not n then error({err = 'RSTREAMS-BAD-NUMBER ' .. key .. ' ' .. field .. ' ' .. v}) end
  return n
end
local function hnum(key, field)
  local v = redis.call('HGET', key, field)
  if not v then return 0 end
  return number_in(key, field, v)
end
"""

#: How a script's error about a damaged number starts (then key, field and value).
BAD_NUMBER = "RSTREAMS-BAD-NUMBER"

#: A queue's end offset, as the other scripts find it: the ends hash the write script
#: keeps (``XINFO STREAM`` would do, but it sends the stream's first and last entries
#: along: some 60 µs each for an entry of 500 lines), else (a stream never written, or
#: written before the hash) the sequence of its last generated id. -1 if the stream is
#: gone; -2 if it holds an entry another program added (an id with a time, above any
#: of ours: one cheap XRANGE finds it).
_END_OF = (
    _NUMBERS
    + """
local function end_of(key, ends, field)
  if redis.call('EXISTS', key) == 0 then return -1 end
  if #redis.call('XRANGE', key, '1-0', '+', 'COUNT', 1) > 0 then return -2 end
  local e = redis.call('HGET', ends, field)
  if e then return number_in(ends, field, e) end
  local info = redis.call('XINFO', 'STREAM', key)
  for j = 1, #info, 2 do
    if info[j] == 'last-generated-id' then
      return tonumber(string.match(info[j + 1], '^0%-(%d+)$') or '-2')
    end
  end
  return -2
end
"""
)

#: Appends and commits, all or nothing, optionally fenced.
#:
#: KEYS: every key the fences and the operations name. ARGV[1] the number n of fences
#: (a worker's commit has one per task), then n pairs: the index of a fence key, the
#: value it must hold; ARGV[2n + 2] the operations as one msgpack array (unpacked here
#: at C speed), each one of
#:   {"x", stream key index, ends hash key index, field, n1, b1, n2, b2, ...}: one
#:      entry per (n, b) pair, holding n records, with the id of its last record (see
#:      codec); the queue's end in the ends hash
#:   {"c", hash key index, field, offset, set key index, group}: HSET + SADD
#: Returns {"ok", first offset of each "x"...}, {"fenced", current value, fence key} (the
#: first fence that moved), {"lost", key} or {"foreign", key} (checked first, so nothing
#: is applied).
WRITE = (
    _END_OF
    + """
local n = tonumber(ARGV[1])
for i = 1, n do
  local fence = KEYS[tonumber(ARGV[2 * i])]
  local v = redis.call('GET', fence)
  if v ~= ARGV[2 * i + 1] then return {'fenced', v, fence} end
end
local ops = cmsgpack.unpack(ARGV[2 * n + 2])
local ends = {}
for _, op in ipairs(ops) do
  if op[1] == 'x' then
    local k = KEYS[op[2]]
    if ends[k] == nil then
      local e = end_of(k, KEYS[op[3]], op[4])
      if e == -1 then return {'lost', k} end
      if e < 0 then return {'foreign', k} end
      -- (an entry above the end: the hash and the stream disagree; XADD would fail)
      if #redis.call('XRANGE', k, string.format('(0-%d', e), '+', 'COUNT', 1) > 0 then
        return {'foreign', k}
      end
      ends[k] = e
    end
  end
end
local out = {'ok'}
for _, op in ipairs(ops) do
  if op[1] == 'x' then
    local key = KEYS[op[2]]
    local e = ends[key]
    out[#out + 1] = e
    for j = 5, #op, 2 do
      e = e + op[j]
      redis.call('XADD', key, string.format('0-%d', e), 'n', op[j], 'b', op[j + 1])
    end
    ends[key] = e
    redis.call('HSET', KEYS[op[3]], op[4], string.format('%d', e))
  else
    redis.call('HSET', KEYS[op[2]], op[3], op[4])
    redis.call('SADD', KEYS[op[5]], op[6])
  end
end
return out
"""
)

#: Read: the start mark checked, then the entries from the one holding an offset on,
#: until they hold COUNT records from it, returned flat: per batch entry its id, record
#: count and ``b`` field, per one-record entry (fields t, k, v, h) its id, 0 and the four
#: fields (false where absent). The client decodes the ``b`` fields at C speed (see
#: codec): the server handles a few entries, not a field per record.
#: KEYS: the stream, the starts hash, the ends hash. ARGV: the queue's field, offset,
#: the id of the entry to start from, count ("" = all), entries per XRANGE to begin
#: with. Returns {"ok", entries...}, {"empty", the end offset} (no entry from there on:
#: the caller checks that the stream really ends there), {"purged", start}, {"lost"}
#: or {"foreign", id}.
READ = (
    _END_OF
    + """
local start = hnum(KEYS[2], ARGV[1])
local offset = tonumber(ARGV[2])
if offset < start then return {'purged', start} end
if redis.call('EXISTS', KEYS[1]) == 0 then return {'lost'} end
local want = math.huge
if ARGV[4] ~= '' then want = tonumber(ARGV[4]) end
if want == 0 then return {'empty', -1} end
local out, got, from, chunk = {'ok'}, 0, ARGV[3], tonumber(ARGV[5])
while true do
  local e
  if want == math.huge then
    e = redis.call('XRANGE', KEYS[1], from, '+')
  else
    e = redis.call('XRANGE', KEYS[1], from, '+', 'COUNT', chunk)
  end
  for i = 1, #e do
    local id, f = e[i][1], e[i][2]
    local seq = string.match(id, '^0%-(%d+)$')
    if not seq then return {'foreign', id} end
    if f[1] == 'n' and f[3] == 'b' then
      out[#out + 1] = id
      out[#out + 1] = f[2]
      out[#out + 1] = f[4]
      got = got + math.min(tonumber(f[2]), tonumber(seq) - offset)
    else
      local t, k, v, h = nil, false, false, false
      for j = 1, #f, 2 do
        local name = f[j]
        if name == 't' then t = f[j + 1]
        elseif name == 'k' then k = f[j + 1]
        elseif name == 'v' then v = f[j + 1]
        elseif name == 'h' then h = f[j + 1] end
      end
      if t == nil then return {'foreign', id} end
      out[#out + 1] = id
      out[#out + 1] = 0
      out[#out + 1] = t
      out[#out + 1] = k
      out[#out + 1] = v
      out[#out + 1] = h
      got = got + 1
    end
    if got >= want then return out end
  end
  if want == math.huge or #e < chunk then break end
  from = '(' .. e[#e][1]
  chunk = chunk * 2
end
if #out == 1 then return {'empty', end_of(KEYS[1], KEYS[3], ARGV[1])} end
return out
"""
)

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

#: The end offset of each queue (see _END_OF). KEYS: the streams, then the ends hash.
#: ARGV: the queues' fields. Returns a list of the numbers.
ENDS = (
    _END_OF
    + """
local out = {}
for i = 1, #ARGV do out[i] = end_of(KEYS[i], KEYS[#KEYS], ARGV[i]) end
return out
"""
)

#: Purge: trim the entries below an offset and move the queue's start mark, atomically
#: (an empty purged stream still knows its start). An entry holding records on both
#: sides stays whole: reads skip what lies below the start. The queue's compaction gaps
#: are forgotten (they may lie below the start now; see HELD). KEYS: the stream, the
#: starts hash, the gaps hash, the ends hash. ARGV: the queue's field, ``before``.
#: Returns the new start, -1 if the stream is gone, -2 if it is foreign.
PURGE = (
    _END_OF
    + """
local last = end_of(KEYS[1], KEYS[4], ARGV[1])
if last < 0 then return last end
local start = hnum(KEYS[2], ARGV[1])
local new = math.min(tonumber(ARGV[2]), last)
if new <= start then return start end
redis.call('XTRIM', KEYS[1], 'MINID', string.format('0-%d', new + 1))
redis.call('HSET', KEYS[2], ARGV[1], string.format('%d', new))
redis.call('HDEL', KEYS[3], ARGV[1])
return new
"""
)

#: Records a queue holds: its end minus its start minus the records compaction removed
#: in between (kept in the gaps hash by COMPACT). KEYS: the stream, the starts hash,
#: the gaps hash, the ends hash. ARGV: the field. Returns -1 if the stream is gone, -2
#: if foreign.
HELD = (
    _END_OF
    + """
local e = end_of(KEYS[1], KEYS[4], ARGV[1])
if e < 0 then return e end
local start = hnum(KEYS[2], ARGV[1])
local gaps = hnum(KEYS[3], ARGV[1])
return math.max(e - start - gaps, 0)
"""
)

#: Compact a queue: keep the latest record of each key (and every record without one)
#: from the start mark on, rewritten into a new stream that takes the queue's key (XDEL
#: would leave the memory of a stream node in use while one entry of it stays: a
#: changelog's live records are spread over all of them). An entry that keeps all its
#: records is copied as it is; one that keeps some gets them with an offsets column and
#: the id of the last one it keeps. The ids of what stays, the last generated id and the
#: entries-added count stay. Runs on the server in one step (no write can come in
#: between): its time and the copy's memory are those of the queue, which compaction
#: keeps near its key count. KEYS: the stream, a scratch key, the starts hash, the gaps
#: hash. ARGV: entries read per XRANGE, the queue's field in the hashes. Returns the
#: number of records removed, or -1 if the stream is gone.
COMPACT = (
    _NUMBERS
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local chunk = tonumber(ARGV[1])
local start = hnum(KEYS[3], ARGV[2])
local function key_of(f)
  for j = 1, #f, 2 do if f[j] == 'k' then return f[j + 1] end end
  return false
end
local unpack_one = cmsgpack.unpack_one
local function each(fn)  -- fn(id, fields) for every entry, oldest first
  local from = '-'
  while true do
    local e = redis.call('XRANGE', KEYS[1], from, '+', 'COUNT', chunk)
    for i = 1, #e do fn(e[i][1], e[i][2]) end
    if #e < chunk then return end
    from = '(' .. e[#e][1]
  end
end
-- Pass 1: the offset of the latest record of each key, decoding only the keys and
-- offsets of each entry (the first two objects of b; see codec), kept for pass 2 (the
-- keys are the interned strings of ``latest``: little memory). Loops inline: a Lua
-- call per record would cost as much as the rest.
local latest, total = {}, 0
local entry_keys, entry_offs, rest_at = {}, {}, {}
each(function(id, f)
  local last = tonumber(string.sub(id, 3)) - 1
  if f[1] == 'n' and f[3] == 'b' then
    local at, ks = unpack_one(f[4])
    local rest, offs = unpack_one(f[4], at)
    entry_keys[id] = ks
    entry_offs[id] = offs
    rest_at[id] = rest
    local n = tonumber(f[2])
    total = total + n
    for r = 1, n do
      local k = ks[r]
      if k then
        local off = offs and offs[r] or last - n + r
        if off >= start then latest[k] = off end
      end
    end
  else
    total = total + 1
    local k = key_of(f)
    if k and last >= start then latest[k] = last end
  end
end)
-- Pass 2: what each entry keeps, into the scratch stream.
local kept = 0
redis.call('DEL', KEYS[2])
each(function(id, f)
  local last = tonumber(string.sub(id, 3)) - 1
  if f[1] == 'n' and f[3] == 'b' then
    local ks, offs, n = entry_keys[id], entry_offs[id], tonumber(f[2])
    local keep, koffs = {}, {}
    for r = 1, n do
      local k = ks[r]
      local off = offs and offs[r] or last - n + r
      if off >= start and (not k or latest[k] == off) then
        keep[#keep + 1] = r
        koffs[#koffs + 1] = off
      end
    end
    kept = kept + #keep
    if #keep == n then
      redis.call('XADD', KEYS[2], id, unpack(f))
    elseif #keep > 0 then
      local o1, t = unpack_one(f[4], rest_at[id])
      local o2, vs = unpack_one(f[4], o1)
      local _, h = unpack_one(f[4], o2)
      local ts, nks, nvs, hs = {}, {}, {}, false
      if h then hs = {} end
      for j = 1, #keep do
        local r = keep[j]
        ts[j] = string.sub(t, 8 * r - 7, 8 * r)
        nks[j] = ks[r]
        nvs[j] = vs[r]
        if h then hs[j] = h[r] end
      end
      local nb = cmsgpack.pack(nks, koffs, table.concat(ts), nvs, hs)
      redis.call('XADD', KEYS[2], string.format('0-%d', koffs[#koffs] + 1), 'n', #keep, 'b', nb)
    end
  else
    local k = key_of(f)
    if last >= start and (not k or latest[k] == last) then
      kept = kept + 1
      redis.call('XADD', KEYS[2], id, unpack(f))
    end
  end
end)
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local last, added, deleted
for j = 1, #info, 2 do
  if info[j] == 'last-generated-id' then last = info[j + 1]
  elseif info[j] == 'entries-added' then added = info[j + 1]
  elseif info[j] == 'max-deleted-entry-id' then deleted = info[j + 1] end
end
local e = tonumber(string.sub(last, 3))
redis.call('HSET', KEYS[4], ARGV[2], string.format('%d', math.max(e - start - kept, 0)))
if kept == total then
  redis.call('DEL', KEYS[2])
  return 0
end
if kept == 0 then  -- (every record was below the start: the stream stays, empty)
  redis.call('XGROUP', 'CREATE', KEYS[2], 'rstreams-create', '$', 'MKSTREAM')
  redis.call('XGROUP', 'DESTROY', KEYS[2], 'rstreams-create')
end
redis.call('XSETID', KEYS[2], last, 'ENTRIESADDED', added, 'MAXDELETEDID', last)
redis.call('RENAME', KEYS[2], KEYS[1])
return total - kept
"""
)
