"""The shared frontier's server side: Lua scripts that Redis runs whole.

Every change to a shared crawl is made by one of these scripts, so that no process dying
between two commands can leave the seen set, the queues, the leases and the pending count
out of step: Redis runs a script to its end before any other command, and a script that
raises stops before its first write, or after its last. The pending count (``queued`` +
``leased`` in the crawl's ``meta`` hash) is changed only where a URL changes state, in the
same script; when it reaches zero, that script marks the crawl finished and publishes
``finished``, so every process learns the end by the message, not by asking.

Keys, for a crawl with prefix ``P`` (``trio-crawler:{ID}:``; the braces keep one crawl's
keys in one hash slot)::

    P meta          hash   v, roots, options, obey, delay, mph, redirects,
                           queued, leased, done, failed, fin
    P urls          hash   url -> q (queued) | l (leased) | d (done): the seen set
    P q:ORIGIN      list   queued entries "ATTEMPT DEPTH REDIRECTS SITEMAP URL"
    P o:ORIGIN      hash   rb (robots: u nknown, f etching, k nown, x failed), rt (rules
                           text: "allow", "deny" or the file), rf (failure), dl (delay),
                           nx (when the next request may start), fl (leased), us (a URL
                           leased and not started yet, with a delay), qn (queued)
    P ready         zset   origins with queued work and nothing in their way, by nx
    P leases        zset   lease -> deadline; a lease is a URL, or "r ORIGIN" for robots.txt
    P held          hash   lease -> "OWNER\\nORIGIN\\nENTRY"
    P idle          set    processes that found nothing to lease; told when work comes
    P events        channel  "work", "finished"

Time is the server's (``TIME``): leases and per-host delays are compared across machines
whose clocks differ, and the server's clock is the one they share.
"""

from __future__ import annotations

# Shared by the scripts: the clock, key names, and the helpers that keep the counts.
_PRELUDE = r"""
local P = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local META = P .. 'meta'
local URLS = P .. 'urls'
local READY = P .. 'ready'
local LEASES = P .. 'leases'
local HELD = P .. 'held'
local IDLE = P .. 'idle'
local EVENTS = P .. 'events'
local woke = false

local function okey(o) return P .. 'o:' .. o end
local function qkey(o) return P .. 'q:' .. o end

local function settings()
  local m = redis.call('HMGET', META, 'obey', 'delay', 'mph')
  return m[1] == '1', tonumber(m[2]) or 0, tonumber(m[3])
end
local obey, base_delay, mph = settings()

local function origin_new(o)
  if redis.call('EXISTS', okey(o)) == 0 then
    redis.call('HSET', okey(o), 'rb', obey and 'u' or 'k', 'rt', obey and '' or 'allow',
      'rf', '', 'dl', base_delay, 'nx', 0, 'fl', 0, 'us', '', 'qn', 0)
  end
end

-- Put an origin in the ready set if it has queued work and nothing in its way.
local function make_ready(o)
  local h = redis.call('HMGET', okey(o), 'rb', 'qn', 'fl', 'us', 'nx')
  local qn, fl = tonumber(h[2]) or 0, tonumber(h[3]) or 0
  if qn <= 0 or h[1] == 'f' or (h[4] and h[4] ~= '') or (mph and fl >= mph) then
    redis.call('ZREM', READY, o)
    return
  end
  redis.call('ZADD', READY, tonumber(h[5]) or 0, o)
  woke = true
end

local function count(field, by) redis.call('HINCRBY', META, field, by) end

-- A lease ends (done, given back, or run out): the counts that go with it.
local function unlease(member, o)
  redis.call('HDEL', HELD, member)
  redis.call('ZREM', LEASES, member)
  count('leased', -1)
  redis.call('HINCRBY', okey(o), 'fl', -1)
end

local function held_by(member)
  local h = redis.call('HGET', HELD, member)
  if not h then return nil end
  local owner, o, entry = string.match(h, '^([^\n]*)\n([^\n]*)\n(.*)$')
  return owner, o, entry
end

local function requeue(url, o, entry)
  redis.call('HSET', URLS, url, 'q')
  redis.call('LPUSH', qkey(o), entry)
  redis.call('HINCRBY', okey(o), 'qn', 1)
  count('queued', 1)
end

local function clear_unstarted(o, url)
  if redis.call('HGET', okey(o), 'us') == url then
    redis.call('HSET', okey(o), 'us', '')
  end
end

-- Leases whose holder stopped renewing them come back to the queue (or, for robots.txt,
-- leave the origin to be asked again).
local function reclaim()
  local expired = redis.call('ZRANGEBYSCORE', LEASES, '-inf', now, 'LIMIT', 0, 1000)
  for _, member in ipairs(expired) do
    local owner, o, entry = held_by(member)
    if not owner then
      redis.call('ZREM', LEASES, member)
    else
      unlease(member, o)
      if string.sub(member, 1, 2) == 'r ' then
        redis.call('HSET', okey(o), 'rb', 'u')
      elseif redis.call('HGET', URLS, member) == 'l' then
        clear_unstarted(o, member)
        requeue(member, o, entry)
      end
      make_ready(o)
    end
  end
end

local function finish_check()
  local m = redis.call('HMGET', META, 'queued', 'leased', 'fin')
  if m[3] == '0' and tonumber(m[1]) == 0 and tonumber(m[2]) == 0 then
    redis.call('HSET', META, 'fin', '1')
    redis.call('PUBLISH', EVENTS, 'finished')
  end
  if woke and redis.call('SCARD', IDLE) > 0 then
    redis.call('DEL', IDLE)
    redis.call('PUBLISH', EVENTS, 'work')
  end
end

local function push_entries(o, entries, first)
  if first then
    for i = #entries, 1, -1 do redis.call('LPUSH', qkey(o), entries[i]) end
  else
    for i = 1, #entries, 500 do
      redis.call('RPUSH', qkey(o), unpack(entries, i, math.min(i + 499, #entries)))
    end
  end
  redis.call('HINCRBY', okey(o), 'qn', #entries)
  count('queued', #entries)
  make_ready(o)
end

local function counts()
  local m = redis.call('HMGET', META, 'queued', 'leased', 'done', 'failed', 'fin')
  return {tonumber(m[1]), tonumber(m[2]), tonumber(m[3]), tonumber(m[4]),
    m[5] == '1' and 1 or 0, redis.call('HLEN', URLS)}
end
"""

# Create the crawl, or join it. ARGV: prefix, roots (JSON), options (JSON), obey (1/0),
# delay, max per host ('' for none), max redirects, then the roots one by one.
# Answers {"created"|"joined"|"mismatch"|"none"|"foreign", stored roots (JSON), counts}.
CREATE = (
    _PRELUDE
    + r"""
local exists = redis.call('EXISTS', META) == 1
if exists then
  local m = redis.call('HMGET', META, 'v', 'roots')
  if m[1] ~= '1' then return {'foreign', '', counts()} end
  if ARGV[2] ~= '[]' and ARGV[2] ~= m[2] then return {'mismatch', m[2], counts()} end
  return {'joined', m[2], counts()}
end
if ARGV[2] == '[]' then return {'none', '', {0, 0, 0, 0, 0, 0}} end
redis.call('HSET', META, 'v', '1', 'roots', ARGV[2], 'options', ARGV[3], 'obey', ARGV[4],
  'delay', ARGV[5], 'mph', ARGV[6], 'redirects', ARGV[7],
  'queued', 0, 'leased', 0, 'done', 0, 'failed', 0, 'fin', '0', 'created', now)
obey, base_delay, mph = settings()
for i = 8, #ARGV, 2 do
  local url, o = ARGV[i], ARGV[i + 1]
  if redis.call('HSETNX', URLS, url, 'q') == 1 then
    origin_new(o)
    push_entries(o, {'1 0 ' .. ARGV[7] .. ' 0 ' .. url}, false)
  end
end
return {'created', ARGV[2], counts()}
"""
)

# One batch of a process's changes, then (optionally) a lease of more work.
# ARGV: prefix, owner, lease seconds, operations (JSON). Each operation is an object with
# "k", its kind:
#   add     o (origin), u (URLs), d, r, s (depth, redirects, sitemap), f (first), q (queue)
#           -> how many were new (unseen, for q false)
#   done    u, o, rec (1: it has a record), x (1: a failure) -> 1 if it was not done
#   drop    u, o: leaves without a record (robots.txt forbids it, or it was unreadable)
#   back    u, e (the entry, with its attempt), w (seconds its origin waits): given back
#   robots  o, st (k|x), rt (rules text), rf (failure), dl (new delay, or absent)
#   rback   o: a robots.txt lease given back unfetched
#   started u: the request went out: its origin's delay runs from now
#   renew   u (leases): their deadlines move to now + lease seconds
#   lease   n: up to n more requests
# Answers JSON: {"r": results, "l": leased [["p", entry] | ["r", origin]], "c": counts,
# "w": seconds until something may be leased (-1: nothing waits)}.
STEP = (
    _PRELUDE
    + r"""
local owner = ARGV[2]
local lease_for = tonumber(ARGV[3])
local ops = cjson.decode(ARGV[4])
if redis.call('HGET', META, 'v') ~= '1' then return cjson.encode({gone = 1}) end
local fin = redis.call('HGET', META, 'fin') == '1'
local results = {}
local leased = {}

local function mine(member)
  local who, o, entry = held_by(member)
  if who == owner then return o, entry end
  return nil
end

local function lease(n)
  reclaim()
  local origins = redis.call('ZRANGEBYSCORE', READY, '-inf', now, 'LIMIT', 0, n + 16)
  for _, o in ipairs(origins) do
    if #leased >= n then break end
    local k = okey(o)
    local h = redis.call('HMGET', k, 'rb', 'qn', 'fl', 'us', 'dl')
    local rb, qn, fl, us, dl = h[1], tonumber(h[2]), tonumber(h[3]), h[4], tonumber(h[5]) or 0
    if rb == 'u' then
      local member = 'r ' .. o
      redis.call('HSET', k, 'rb', 'f', 'nx', now + dl)
      redis.call('HINCRBY', k, 'fl', 1)
      count('leased', 1)
      redis.call('ZADD', LEASES, now + lease_for, member)
      redis.call('HSET', HELD, member, owner .. '\n' .. o .. '\n')
      leased[#leased + 1] = {'r', o}
    elseif rb == 'k' or rb == 'x' then
      local nx = nil
      while #leased < n and qn > 0 and us == '' and (not mph or fl < mph) do
        local e = redis.call('LPOP', qkey(o))
        if not e then
          count('queued', -qn)
          qn = 0
          break
        end
        local url = string.match(e, '^%d+ %d+ %d+ %d+ (.+)$')
        if url and redis.call('HGET', URLS, url) == 'q' then
          redis.call('HSET', URLS, url, 'l')
          qn = qn - 1
          fl = fl + 1
          count('queued', -1)
          count('leased', 1)
          redis.call('ZADD', LEASES, now + lease_for, url)
          redis.call('HSET', HELD, url, owner .. '\n' .. o .. '\n' .. e)
          leased[#leased + 1] = {'p', e}
          if dl > 0 then
            us = url
            nx = now + dl
          end
        end
      end
      redis.call('HSET', k, 'qn', qn, 'fl', fl, 'us', us)
      if nx then redis.call('HSET', k, 'nx', nx) end
    end
    make_ready(o)
  end
  if #leased == 0 then
    redis.call('SADD', IDLE, owner)
  else
    redis.call('SREM', IDLE, owner)
  end
end

for i, op in ipairs(ops) do
  local k = op.k
  local result = 0
  if k == 'add' then
    if op.q then
      local entries = {}
      if not fin then
        local prefix = '1 ' .. op.d .. ' ' .. op.r .. ' ' .. op.s .. ' '
        for _, url in ipairs(op.u) do
          if redis.call('HSETNX', URLS, url, 'q') == 1 then
            entries[#entries + 1] = prefix .. url
          end
        end
      end
      if #entries > 0 then
        origin_new(op.o)
        push_entries(op.o, entries, op.f)
      end
      result = #entries
    else
      for _, url in ipairs(op.u) do
        if redis.call('HEXISTS', URLS, url) == 0 then result = result + 1 end
      end
    end
  elseif k == 'done' or k == 'drop' then
    local st = redis.call('HGET', URLS, op.u)
    if st == 'l' then
      local _, o = held_by(op.u)
      o = o or op.o
      clear_unstarted(o, op.u)
      unlease(op.u, o)
      make_ready(o)
    elseif st == 'q' then
      -- Queued again after its lease ran out: its entry is skipped when it comes up.
      redis.call('HINCRBY', okey(op.o), 'qn', -1)
      count('queued', -1)
      make_ready(op.o)
    end
    if st == 'l' or st == 'q' then
      redis.call('HSET', URLS, op.u, 'd')
      if k == 'done' and op.rec == 1 then
        count('done', 1)
        if op.x == 1 then count('failed', 1) end
      end
      result = 1
    end
  elseif k == 'back' then
    local o = mine(op.u)
    if o and redis.call('HGET', URLS, op.u) == 'l' then
      clear_unstarted(o, op.u)
      unlease(op.u, o)
      requeue(op.u, o, op.e)
      if op.w and op.w > 0 then
        local nx = tonumber(redis.call('HGET', okey(o), 'nx')) or 0
        redis.call('HSET', okey(o), 'nx', math.max(nx, now + op.w))
      end
      make_ready(o)
      result = 1
    end
  elseif k == 'robots' or k == 'rback' then
    local member = 'r ' .. op.o
    if mine(member) then
      unlease(member, op.o)
      local ok = okey(op.o)
      if k == 'rback' then
        redis.call('HSET', ok, 'rb', 'u')
      else
        redis.call('HSET', ok, 'rb', op.st, 'rt', op.rt or '', 'rf', op.rf or '')
        if op.dl then
          local nx = tonumber(redis.call('HGET', ok, 'nx')) or 0
          redis.call('HSET', ok, 'dl', op.dl, 'nx', math.max(nx, now + op.dl))
        end
      end
      make_ready(op.o)
      result = 1
    end
  elseif k == 'started' then
    local o = mine(op.u)
    if o then
      clear_unstarted(o, op.u)
      local h = redis.call('HMGET', okey(o), 'nx', 'dl')
      local nx, dl = tonumber(h[1]) or 0, tonumber(h[2]) or 0
      redis.call('HSET', okey(o), 'nx', math.max(nx, now + dl))
      make_ready(o)
      result = 1
    end
  elseif k == 'renew' then
    for _, member in ipairs(op.u) do
      if mine(member) then
        redis.call('ZADD', LEASES, 'XX', now + lease_for, member)
        result = result + 1
      end
    end
  elseif k == 'lease' then
    if not fin then lease(op.n) end
  end
  results[i] = result
end

finish_check()
local wait = -1
if #leased == 0 then
  local first = redis.call('ZRANGE', READY, 0, 0, 'WITHSCORES')
  if first[2] then wait = math.max(0, tonumber(first[2]) - now) end
  local soon = redis.call('ZRANGE', LEASES, 0, 0, 'WITHSCORES')
  if soon[2] then
    local expiry = math.max(0, tonumber(soon[2]) - now)
    if wait < 0 or expiry < wait then wait = expiry end
  end
end
return cjson.encode({r = results, l = leased, c = counts(), w = wait})
"""
)

# The counts, for --status and for processes that join. ARGV: prefix.
STATUS = (
    _PRELUDE
    + r"""
if redis.call('HGET', META, 'v') ~= '1' then return {} end
return counts()
"""
)
