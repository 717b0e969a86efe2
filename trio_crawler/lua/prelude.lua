-- prelude.lua: shared by every script of the shared frontier; the loader
-- (trio_crawler/_cluster_scripts.py) puts it in front of each script's body, so
-- it is not a script of its own.
--
-- KEYS[1]  P .. 'meta'. No script reads KEYS: it is declared so that a Redis
--          Cluster routes the call to the node holding the crawl; every key is
--          made from P below, and all of them share one hash slot.
-- ARGV[1]  P, the crawl's key prefix, 'trio-crawler:{ID}:' (the braces keep one
--          crawl's keys in one hash slot).
-- ARGV[2]  the clock: the caller's reading of the server's time, in seconds, or ''
--          to read the server's TIME here. The body reads ARGV[3] and on.
-- Returns  nothing: it defines, for the body, the clock (now), the key names,
--          the crawl's settings (obey, base_delay, mph) and the helpers below.
-- Keeps    the helpers are the only code that changes a count, and each changes
--          the count together with the state it counts:
--            * pending = queued + leased (meta), where leased counts URL leases
--              and robots.txt leases alike;
--            * a URL in the seen set is in exactly one state, q, l or d, and is
--              counted in queued (and its origin's qn) only while q, in leased
--              (and its origin's fl) only while l; d is final;
--            * every lease has one member in 'leases' and one in 'held';
--            * an origin is in 'ready' only with queued work and nothing in its
--              way (robots.txt being fetched, a delay, --max-per-host);
--            * finish_check marks the crawl finished and publishes 'finished' in
--              the call that brings pending to zero; finished is final;
--            * with a budget (--max-pages): started = the URLs in 'started', each
--              counted at its first lease, never past the budget; sdone = those of
--              them done; a URL turned away unfetched (drop) is counted out again.
--
-- Keys, for a crawl with prefix P:
--
--   P meta        hash     v (layout version, LAYOUT below), roots (JSON), rsum (their
--                          SHA-1, in hex), options (JSON), obey (1/0), delay,
--                          mph (max per host, '' for none), redirects, queued,
--                          leased, done, failed, fin (1/0), created (server
--                          time), budget (--max-pages, '' for none), started,
--                          sdone (see 'started'), adapt (1/0: whether origins
--                          learn a pace; absent: 1), slowed
--   P urls        hash     url -> q (queued) | l (leased) | d (done): the seen set
--   P q:ORIGIN    list     queued entries "ATTEMPT DEPTH REDIRECTS SITEMAP URL",
--                          followed by " REFERRER" for a URL found through
--                          another (a URL holds no space: it is normalised);
--                          entries of URLs no longer queued are skipped when popped
--   P o:ORIGIN    hash     rb (robots: u nknown, f etching, k nown, x failed),
--                          rt (rules text: "allow", "deny" or the file),
--                          rf (failure), dl (delay), nx (when the next request
--                          may start), fl (leased), us (a URL leased and not
--                          started yet, with a delay), qn (queued), ra (when
--                          robots.txt was decided), lh (the process that leased
--                          from it last) and sk (the calls that passed it over
--                          since: step.lua's lease), and the pace (step.lua's
--                          pace_answer): pg (gap), pw (window), pc, pk, pt,
--                          pe, pn, pi, pl, ps, pm, pr
--   P paced       set      origins whose pace limits them now ('slowed' in
--                          meta counts the origins it ever limited)
--   P ready       zset     origins with queued work and nothing in their way, by nx
--   P leases      zset     lease -> deadline; a lease is a URL, or "r ORIGIN" for
--                          robots.txt
--   P held        hash     lease -> "OWNER\nORIGIN\nENTRY"
--   P holds       hash     owner -> how many leases it holds (above zero only): for the
--                          share a process may lease ahead (step.lua's below_share)
--   P started     set      with a budget: the URLs whose first lease counted in it
--   P owners      hash     owner -> "TIME LEASE": when each process last called the
--                          step script, and its lease seconds (see orphans())
--   P idle        set      processes that found less to lease than they asked; told when work
--                          comes
--   P events      channel  "work N" (N: the step call that made work ready), "work N T"
--                          (work is ready at T, server time: see finish_check),
--                          "finished"
--
-- Time is the server's: leases and per-host delays are compared across machines
-- whose clocks differ, and the server's clock is the one they share. A process
-- reads the server's TIME once, as it joins, and from then on sends its engine's
-- clock on that scale (ARGV[2]); so the scripts take time as an input, and a test
-- can step a shared crawl on a virtual clock. '' reads TIME here instead (the
-- --status command, which has no engine). A script that reads TIME and then
-- writes needs Redis 5 or later, which replicates scripts by their effects.

-- The layout these scripts read and write: a crawl of another (an earlier
-- trio-crawler's, whose entries had no referrer) is not touched. The same as
-- _cluster.LAYOUT.
local LAYOUT = '2'

local P = ARGV[1]
local now = tonumber(ARGV[2])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local META = P .. 'meta'
local URLS = P .. 'urls'
local READY = P .. 'ready'
local LEASES = P .. 'leases'
local HELD = P .. 'held'
local IDLE = P .. 'idle'
local STARTED = P .. 'started'
local OWNERS = P .. 'owners'
local EVENTS = P .. 'events'
local PACED = P .. 'paced'
local HOLDS = P .. 'holds'
-- Whether an origin became ready to go now, so that the idle processes are told to call
-- at once; and the earliest time an origin in 'ready' could go, as the script began (nil:
-- none), so that they are told of an earlier one (see finish_check).
local woke = false
local first_ready = nil
-- The number of the step call running (set by step.lua), sent with "work" so that a
-- process can tell a message its own later call already answered for.
local this_call = 0

local function okey(o) return P .. 'o:' .. o end
local function qkey(o) return P .. 'q:' .. o end

-- The crawl's settings, as CREATE stored them: obey robots.txt, the delay
-- between two requests to one origin, the most leases one origin may have out
-- at once (nil: no limit), the most URLs the crawl starts (nil: no limit), and
-- whether each origin learns a pace (step.lua's pace_answer).
local function settings()
  local m = redis.call('HMGET', META, 'obey', 'delay', 'mph', 'budget', 'adapt')
  return m[1] == '1', tonumber(m[2]) or 0, tonumber(m[3]), tonumber(m[4]), m[5] ~= '0'
end
local obey, base_delay, mph, budget, adapt = settings()
-- A new origin's window with a pace: trio_crawler/_pace.py's INITIAL_WINDOW.
local INITIAL_WINDOW = 4

-- An origin's hash, the first time one of its URLs is queued.
local function origin_new(o)
  if redis.call('EXISTS', okey(o)) == 0 then
    redis.call('HSET', okey(o), 'rb', obey and 'u' or 'k', 'rt', obey and '' or 'allow',
      'rf', '', 'dl', base_delay, 'nx', 0, 'fl', 0, 'us', '', 'qn', 0,
      'pw', adapt and INITIAL_WINDOW or 0)
  end
end

-- The most leases origin o may have out: --max-per-host, or its pace's window
-- when that is lower (pw, 0 or absent: none); nil for no limit.
local function limit_of(pw)
  pw = tonumber(pw) or 0
  if pw > 0 and (not mph or pw < mph) then return pw end
  return mph
end

-- Put an origin in the ready set if it has queued work and nothing in its way.
local function make_ready(o)
  local h = redis.call('HMGET', okey(o), 'rb', 'qn', 'fl', 'us', 'nx', 'pw')
  local qn, fl = tonumber(h[2]) or 0, tonumber(h[3]) or 0
  local most = limit_of(h[6])
  if qn <= 0 or h[1] == 'f' or (h[4] and h[4] ~= '') or (most and fl >= most) then
    redis.call('ZREM', READY, o)
    return
  end
  local at = tonumber(h[5]) or 0
  redis.call('ZADD', READY, at, o)
  if at <= now then woke = true end
end

-- The earliest time an origin in 'ready' could go; nil when none is there.
local function ready_first()
  local first = redis.call('ZRANGE', READY, 0, 0, 'WITHSCORES')
  return first[2] and tonumber(first[2]) or nil
end

local function count(field, by) redis.call('HINCRBY', META, field, by) end

-- The budget (--max-pages): whether every URL it allows has been started.
local function spent()
  return budget ~= nil and (tonumber(redis.call('HGET', META, 'started')) or 0) >= budget
end

-- Whether a URL leaving the queue may be leased: with a budget, a URL counted
-- before may (a lease that ran out, or was given back), and a new one only
-- while the budget lasts, counted now.
local function may_start(url)
  if budget == nil or redis.call('SISMEMBER', STARTED, url) == 1 then return true end
  if spent() then return false end
  redis.call('SADD', STARTED, url)
  count('started', 1)
  return true
end

-- A URL leaves the crawl: with a budget, if it counted, it is done (sdone), or
-- counted out again when it leaves unfetched (drop), as in one process, where a
-- URL robots.txt turns away starts nothing.
local function leave_budget(url, unfetched)
  if budget == nil or redis.call('SISMEMBER', STARTED, url) == 0 then return end
  if unfetched then
    redis.call('SREM', STARTED, url)
    count('started', -1)
  else
    count('sdone', 1)
  end
end

-- A lease ends (done, given back, or run out): the counts that go with it.
-- Who holds a lease, for which origin, and the entry it was leased with.
local function held_by(member)
  local h = redis.call('HGET', HELD, member)
  if not h then return nil end
  local owner, o, entry = string.match(h, '^([^\n]*)\n([^\n]*)\n(.*)$')
  return owner, o, entry
end

-- A process's count of the leases it holds goes up or down by one ('holds' keeps only
-- counts above zero: a crawl an earlier trio-crawler began has none for its leases).
local function hold(who, by)
  if redis.call('HINCRBY', HOLDS, who, by) <= 0 then redis.call('HDEL', HOLDS, who) end
end

local function unlease(member, o)
  local who = held_by(member)
  if who then hold(who, -1) end
  redis.call('HDEL', HELD, member)
  redis.call('ZREM', LEASES, member)
  count('leased', -1)
  redis.call('HINCRBY', okey(o), 'fl', -1)
end

-- A leased URL goes back to the head of its origin's queue (the caller has
-- ended its lease).
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
        -- Its request may have gone out just before its holder stopped, with the start
        -- not yet told (step.lua's started goes with the holder's next call): the
        -- origin's next request waits a delay from now.
        local h = redis.call('HMGET', okey(o), 'nx', 'dl', 'pg')
        local wait = math.max(tonumber(h[2]) or 0, tonumber(h[3]) or 0)
        if wait > 0 then
          redis.call('HSET', okey(o), 'nx', math.max(tonumber(h[1]) or 0, now + wait))
        end
      end
      make_ready(o)
    end
  end
end

-- At the end of a script that changed the crawl: finished when nothing is pending; the
-- idle processes told when an origin became ready now ("work N": they call, and those
-- that find nothing say so again), or told the time when one will be ready sooner than
-- any was ("work N T": each waits until then at most, and stays idle). Every idle
-- process waits at most until the earliest time in 'ready' as it last called, which
-- never comes earlier untold; so a host whose delay ends later than that, the broad
-- crawl's usual case, costs no process a call.
local function finish_check()
  local m = redis.call('HMGET', META, 'queued', 'leased', 'fin')
  if m[3] == '0' and tonumber(m[1]) == 0 and tonumber(m[2]) == 0 then
    redis.call('HSET', META, 'fin', '1')
    redis.call('PUBLISH', EVENTS, 'finished')
  end
  if redis.call('SCARD', IDLE) == 0 then return end
  if woke then
    redis.call('DEL', IDLE)
    redis.call('PUBLISH', EVENTS, 'work ' .. this_call)
    return
  end
  local first = ready_first()
  if first and first > now and (first_ready == nil or first < first_ready) then
    redis.call('PUBLISH', EVENTS, 'work ' .. this_call .. ' ' .. string.format('%.6f', first))
  end
end

-- Queue new entries on an origin: at the head in their order (first), or at the
-- tail, 500 to a command (unpack's limit on arguments is well above that).
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

-- The leases whose holder stopped renewing them, the time by which the last of them
-- runs out (nil when there is none), and the time at which the first live holder would
-- count as stopped if it made no call till then (nil: none): what an idle process waits
-- for, and why. A process renews its leases every third of its lease, in a step call,
-- which notes the time in 'owners'; one that has made no call for half a lease has
-- missed a renewal by half a period again, so it stopped (it was killed, or is cut off
-- from the server), and its leases come back at their deadlines, each set in one of its
-- calls, so by its last call and a lease at the latest. Read from the counts in 'holds'
-- and the calls in 'owners': a look per process, not per lease (a broad crawl holds a
-- lease for nearly every host).
-- A process's last call and its lease seconds, as 'owners' keeps them (nil: none).
local function last_call(who)
  local at, span = string.match(redis.call('HGET', OWNERS, who) or '', '^(%S+) (%S+)$')
  return tonumber(at), tonumber(span)
end

-- Whether a process whose last call was at ``at``, with ``span`` lease seconds, counts as
-- live: it called within half its lease (see orphans()).
local function is_live(at, span)
  return at ~= nil and span ~= nil and now <= at + span / 2
end

local function orphans()
  local count, latest, suspect = 0, nil, nil
  local holds = redis.call('HGETALL', HOLDS)
  for i = 1, #holds, 2 do
    local at, span = last_call(holds[i])
    if is_live(at, span) then
      if suspect == nil or at + span / 2 < suspect then suspect = at + span / 2 end
    else
      count = count + tonumber(holds[i + 1])
      local back = at and span and at + span or now
      if latest == nil or back > latest then latest = back end
    end
  end
  return count, latest, suspect
end

-- The counts every script answers with: {queued, leased, done, failed,
-- finished (1/0), seen, origins slowed now, origins slowed ever}.
local function counts()
  local m = redis.call('HMGET', META, 'queued', 'leased', 'done', 'failed', 'fin', 'slowed')
  return {tonumber(m[1]), tonumber(m[2]), tonumber(m[3]), tonumber(m[4]),
    m[5] == '1' and 1 or 0, redis.call('HLEN', URLS), redis.call('SCARD', PACED),
    tonumber(m[6]) or 0}
end
