-- step.lua: one batch of a process's changes to a shared crawl, then (if the
-- batch asks) a lease of more work. A process sends everything it has to say
-- in one call: one round trip, and one atomic change.
--
-- KEYS[1]  P .. 'meta' (for routing only; see prelude.lua)
-- ARGV[1]  P, the crawl's key prefix
-- ARGV[2]  the clock (see prelude.lua)
-- ARGV[3]  the caller (owner): the name its leases are held under
-- ARGV[4]  lease seconds: a lease taken or renewed here runs out that long from now
-- ARGV[5]  the operations (JSON list), applied in order; each is an object whose
--          "k" is its kind, and whose result is:
--   add     o (origin), u (URLs), d, r, s (depth, redirects, sitemap),
--           f (first: to the head of the queue), q (queue them), ref (the
--           URL that offers them, their referrer; absent for none)
--           -> how many were new (with q false: how many are unseen; nothing is
--              written)
--   seen    u (URLs robots.txt turns away): seen, not queued -> the new ones (a list)
--   done    u, o, rec (1: it has a record), x (1: a failure; absent: 0), t (when
--           its answer ended; absent: now), a (1: the caller has a worker for the
--           origin's next URL: leased to it now, ahead of its time, while the caller
--           holds less than its share; see lease_origin and below_share)
--           -> 1 if it was queued or leased (now done), 0 if done already or unseen
--   drop    u, o: leaves without a record (robots.txt forbids it, or it was
--           unreadable) -> as done
--   back    u, e (the entry, with its attempt), w (seconds its origin waits), t
--           (when its attempt's answer or failure ended, for a retry; absent: not
--           fetched): given back -> 1 if the caller held it; one at a time with a
--           delay, the origin's next start waits a delay after t, as after done;
--           with w, while other leases of the origin are held, the channel says
--           'hold T ORIGIN CALLER' (T: when the wait ends), so that their holders do
--           not start them inside it
--   robots  o, st (k|x), rt (rules text), rf (failure), dl (new delay, or absent),
--           t (when its answer ended; absent: now), a (as for done)
--           -> 1 if the caller held the origin's robots.txt lease
--   rback   o: a robots.txt lease given back unfetched -> 1 if the caller held it
--   started u, t (when; absent: now): the request went out: its origin's delay
--           runs from then -> 1 if the caller held it
--   pace    o, s (p: pushback, o: a prompt answer, w: a slow one), t (when the
--           attempt started), e (when it ended, if not now: an attempt that timed
--           out, whose server the caller then waited for): the origin's pace
--           learns from an answer, as of e (see pace_answer)
--           -> the origin's gap if its pace sets one, else 1e-6
--           while it limits the window (slow start included), else 0
--   renew   u (leases): their deadlines move to now + lease seconds
--           -> how many the caller held
--   lease   n, h (seconds; absent: 0), e (absent: 0): up to n more requests
--           -> 0 (what was leased is in "l"); with a budget, a URL's first lease
--           counts in it, and once it is spent only URLs counted before are
--           leased (and no robots.txt); with h, up to e of them may be of origins
--           whose time comes within h, leased ahead (as for a done's "a"): a
--           process woken for work to come calls that much early, and starts
--           the URLs on its own clock, not late by its wake-up and this call
--   bye     (nothing): the caller leaves the crawl, after its other operations:
--           no longer idle, nor among the processes whose calls are timed -> 0
-- Returns  JSON: {"r": the results, in the operations' order,
--                 "l": what was leased, ["p", entry, seconds until it may
--                      start (0 or less: since when it could)] | ["r", origin],
--                 "c": the counts, as in prelude.lua's counts(),
--                 "w": seconds until an origin's delay ends (-1: none waits),
--                 "x": seconds until a lease runs out (-1: none is held), computed
--                      only when nothing was leased (leases ahead aside) or a lease
--                      got less than it asked for,
--                 "n": this call's number (see "work" in prelude.lua),
--                 "b": with a budget (--max-pages): {1 if it is spent else 0,
--                      the URLs it counted that are not done}; absent without,
--                 "o": when nothing was leased (as for "w") and some leases are held by
--                      processes that stopped renewing (prelude.lua's
--                      orphans()): {how many, seconds until the last comes
--                      back}; absent otherwise,
--                 "y": seconds until a process that holds leases would count as
--                      stopped, if it made no call till then (-1: none does;
--                      computed only as "w" is), so that an idle
--                      process can look again then, and say so};
--          {"gone": 1} when the prefix holds no crawl of this layout;
--          {"bad": i} when operation i (from 1; 0: the list itself) is not one
--          of the above, fields and their types included: then nothing at all
--          is written, since every operation is checked before the first write.
-- Keeps    the caller's last call in 'owners' (now, and its lease seconds);
--          pending = queued + leased, changed only where a URL changes state:
--          a URL moves q -> l (lease), l -> q (back, or its lease ran out),
--          l or q -> d (done, drop), and never out of d;
--          only the holder of a lease renews it, gives it back or settles its
--          robots.txt; done and drop are taken from anyone, so that a process
--          whose lease ran out still finishes the URL it fetched (the process
--          that leased it again then fetches a duplicate, never a lost page);
--          after the crawl is finished nothing is queued or leased, so finished
--          stays final; the call that brings pending to zero marks the crawl
--          finished and publishes 'finished' (finish_check, below).

local owner = ARGV[3]
local lease_for = tonumber(ARGV[4])
local ops = cjson.decode(ARGV[5])

-- Every operation is checked before the first write. Redis undoes nothing: a
-- Lua error half-way through would leave the batch half applied (a lease ended
-- and the origin left fetching its robots.txt for ever, say), and the counts
-- that say when the crawl ends out of step with the states they count.
local function text(v) return type(v) == 'string' end
local function number(v) return type(v) == 'number' and v == v and v >= 0 end
local function flag(v) return type(v) == 'boolean' end
local function texts(v)
  if type(v) ~= 'table' then return false end
  for _, x in ipairs(v) do
    if type(x) ~= 'string' then return false end
  end
  return true
end
local function entry(v) return text(v) and string.match(v, '^%d+ %d+ %d+ %d+ .+$') ~= nil end
local function maybe(check, v) return v == nil or check(v) end
-- A URL as an entry holds it: text with no space (URLs are normalised).
local function spaceless(v) return text(v) and v ~= '' and string.find(v, ' ', 1, true) == nil end
local SHAPES = {
  add = function(op)
    return text(op.o) and texts(op.u) and flag(op.q)
      and (not op.q or (number(op.d) and number(op.r) and number(op.s) and flag(op.f)))
      and maybe(spaceless, op.ref)
  end,
  seen = function(op) return texts(op.u) end,
  done = function(op)
    return text(op.u) and text(op.o) and number(op.rec) and maybe(number, op.x)
      and maybe(number, op.t) and maybe(number, op.a)
  end,
  drop = function(op) return text(op.u) and text(op.o) end,
  back = function(op)
    return text(op.u) and entry(op.e) and maybe(number, op.w) and maybe(number, op.t)
  end,
  robots = function(op)
    return text(op.o) and (op.st == 'k' or op.st == 'x') and maybe(text, op.rt)
      and maybe(text, op.rf) and maybe(number, op.dl) and maybe(number, op.t)
      and maybe(number, op.a)
  end,
  rback = function(op) return text(op.o) end,
  started = function(op) return text(op.u) and maybe(number, op.t) end,
  pace = function(op)
    return text(op.o) and (op.s == 'p' or op.s == 'o' or op.s == 'w') and number(op.t)
      and maybe(number, op.e)
  end,
  renew = function(op) return texts(op.u) end,
  lease = function(op) return number(op.n) and maybe(number, op.h) and maybe(number, op.e) end,
  bye = function() return true end,
}
if type(ops) ~= 'table' then return cjson.encode({bad = 0}) end
for i, op in ipairs(ops) do
  local shape = type(op) == 'table' and SHAPES[op.k]
  if not (shape and shape(op)) then return cjson.encode({bad = i}) end
end

if redis.call('HGET', META, 'v') ~= LAYOUT then return cjson.encode({gone = 1}) end
this_call = redis.call('HINCRBY', META, 'calls', 1)
redis.call('HSET', OWNERS, owner, now .. ' ' .. lease_for)
local fin = redis.call('HGET', META, 'fin') == '1'
first_ready = ready_first()
local results = {}
local leased = {}

-- The origin and entry of a lease, if the caller holds it.
local function mine(member)
  local who, o, entry = held_by(member)
  if who == owner then return o, entry end
  return nil
end

-- The pace: trio_crawler/_pace.py's control law, constant for constant and
-- step for step (that module's docstring and docs/manners.md say why it is
-- stable); here so that every process of the crawl slows an origin together.
local GAP_FLOOR, GAP_CAP, BETA, RECOVERY = 0.001, 60.0, 0.7, 4.0
local CUBE = (1 - BETA) / RECOVERY ^ 3
local OPEN_WINDOW = 64
local PACE = {'pg', 'pw', 'pc', 'pk', 'pt', 'pe', 'pn', 'pi', 'pl', 'ps', 'pm', 'pr'}

-- A time a caller gave, on the server's scale: never later than now (a caller's clock
-- may run ahead of the one that sent now); absent: now.
local function at_most_now(t)
  if t == nil then return now end
  return math.min(t, now)
end

-- One at a time with a delay, origin o's next start waits a delay after t, the end of
-- an attempt's answer or failure (OriginScheduler.answered): its request may have
-- reached the server late.
local function delay_after(o, t)
  local dl = tonumber(redis.call('HGET', okey(o), 'dl')) or 0
  if dl > 0 and mph == 1 then
    local nx = tonumber(redis.call('HGET', okey(o), 'nx')) or 0
    redis.call('HSET', okey(o), 'nx', math.max(nx, at_most_now(t) + dl))
  end
end

-- The seconds between two starts in force at origin hash k: its delay or its gap.
local function spacing_of(dl, pg)
  dl, pg = tonumber(dl) or 0, tonumber(pg) or 0
  return math.max(dl, pg)
end

-- A request to origin o started at time now (Pace.started).
local function pace_started(o, now)
  local k = okey(o)
  local h = redis.call('HMGET', k, 'pt', 'pe', 'pi', 'pl')
  local cut, epoch, interval, last = tonumber(h[1]) or -1, tonumber(h[2]) or -1,
    tonumber(h[3]) or 0, tonumber(h[4]) or -1
  if epoch < 0 then redis.call('HSET', k, 'pe', now) end
  if last >= 0 and now > last and interval > 0 then
    interval = interval + 0.125 * (now - last - interval)
  elseif last >= 0 and now > last then
    interval = now - last
  end
  redis.call('HSET', k, 'pi', interval, 'pl', now)
end

-- Origin o's pace takes an answer s, at time at, to an attempt that started at t
-- (Pace.answered); returns its gap if the pace sets one, else 1e-6 while it
-- limits the window (slow start included), else 0.
local function pace_answer(o, s, t, at)
  local k = okey(o)
  local h = redis.call('HMGET', k, 'pg', 'pw', 'pc', 'pk', 'pt', 'pe', 'pn', 'pi', 'pl',
    'ps', 'pm', 'pr', 'fl', 'dl')
  local gap, window, ceiling, knee = tonumber(h[1]) or 0, tonumber(h[2]) or 0,
    tonumber(h[3]) or 0, tonumber(h[4]) or 0
  local cut, epoch, prompt, interval = tonumber(h[5]) or -1, tonumber(h[6]) or -1,
    tonumber(h[7]) or 0, tonumber(h[8]) or 0
  local slowed, trimmed, credit = h[10] == '1', h[11] == '1', tonumber(h[12]) or 0
  local fl, dl = tonumber(h[13]) or 0, tonumber(h[14]) or 0
  local current = t >= cut
  local first = not slowed
  if s == 'p' and current then
    local spacing = gap > 0 and gap or interval
    local rate = 1 / math.max(spacing, GAP_FLOOR)
    local span = epoch >= 0 and at - epoch or 0
    local goodput = rate
    if span > 0 and prompt > 0 then goodput = prompt / span end
    local low = math.max(1 / GAP_CAP, math.min(BETA * rate, goodput))
    ceiling = math.sqrt(rate * math.min(rate, goodput / BETA))
    knee = (math.max(0, 1 - low / ceiling) / CUBE) ^ (1 / 3)
    gap = math.min(GAP_CAP, math.max(GAP_FLOOR, 1 / low))
    window = math.max(1, fl - 1)
    cut, epoch, prompt, trimmed, credit, slowed = at, at, 0, false, 0, true
  elseif s == 'p' then
    if window > 1 then window = window - 1 end
  elseif current then
    prompt = prompt + 1
    if s == 'w' and not trimmed then
      trimmed, slowed = true, true
      local others = math.max(fl, 1)
      window = math.max(1, math.min(window > 0 and window or others, others) - 1)
    elseif s == 'o' then
      if gap > 0 then
        local rate = ceiling * (1 + CUBE * (at - cut - knee) ^ 3)
        gap = rate > 0 and 1 / rate or GAP_CAP
        if gap <= math.max(dl, GAP_FLOOR) then gap = 0 end
      end
      if window > 0 then
        credit = credit + 1
        if not slowed or credit >= window then
          credit, window = 0, window + 1
          if window >= (mph or OPEN_WINDOW) then window = 0 end
        end
      end
    end
  end
  redis.call('HSET', k, 'pg', gap, 'pw', window, 'pc', ceiling, 'pk', knee, 'pt', cut,
    'pe', epoch, 'pn', prompt, 'ps', slowed and '1' or '0', 'pm', trimmed and '1' or '0',
    'pr', credit)
  if slowed and first then count('slowed', 1) end
  local active = slowed and (gap > 0 or window > 0)
  if active then redis.call('SADD', PACED, o) else redis.call('SREM', PACED, o) end
  -- A longer gap holds the next start back; a wider window may free the origin.
  if gap > 0 then
    local last = tonumber(h[9]) or -1
    local nx = tonumber(redis.call('HGET', k, 'nx')) or 0
    if last >= 0 and last + math.max(gap, dl) > nx then
      redis.call('HSET', k, 'nx', last + math.max(gap, dl))
    end
  end
  make_ready(o)
  if gap > 0 then return gap end
  if window > 0 then return 1e-6 end
  return 0
end

-- Of the origins whose time has come, the caller takes those it leased from last (or
-- that no live process did) first, and then, while it has room, the others in order. A
-- crawl paced by its CPU, not by its delays, has every host ready whenever a process
-- asks, and none leased ahead: each request went to whichever process asked first, and
-- opened a connection of its own there (three processes, 5 000 hosts: 21 587
-- connections for 30 000 requests, where one process opened 5 000). An origin passed
-- over so is counted ('sk'), and is anyone's once AFFINITY_SKIPS calls have passed it
-- over: it waits for its last holder, which may be busy or slow, no longer than that.
-- The range read is three times n (and 16 more), so that a caller finds its own among
-- the others' (a third of them, in three processes); it passes over none beyond it.
local AFFINITY_SKIPS = 3
local live_holders = {}
-- Whether an origin whose last holder is who, passed over skips times since, is left to
-- that holder: another process, live, that has not yet kept it waiting too long.
local function held_elsewhere(who, skips)
  if not who or who == owner or (tonumber(skips) or 0) >= AFFINITY_SKIPS then
    return false
  end
  local live = live_holders[who]
  if live == nil then
    live = is_live(last_call(who))
    live_holders[who] = live
  end
  return live
end

-- Lease origin o's next requests to the caller while this call has leased fewer than n:
-- its robots.txt if its rules are unknown (or a day old), else its queued URLs, one if it
-- has a delay, which then holds it until that one starts. Each URL is leased as
-- {"p", entry, nx - now}: when its origin could go (nx), in seconds from the call's
-- clock, so that the process hands its URLs out as the server would, the origin that
-- has waited longest first. An origin whose time has not come yet (nx later than now) is
-- leased only ahead, for a done or robots operation's "a", and only its URLs, with one
-- request at a time to a host (--max-per-host 1: its delay runs from the last answer's
-- end, which the process measured, not from a start told before the request went out).
-- With yielding, an origin held elsewhere (see held_elsewhere) is left as it is, and the
-- answer is true: the caller passed it over.
local function lease_origin(o, n, ahead, yielding)
  local k = okey(o)
  local h = redis.call('HMGET', k, 'rb', 'qn', 'fl', 'us', 'dl', 'pg', 'pw', 'ra', 'nx',
    'lh', 'sk')
  if yielding and held_elsewhere(h[10], h[11]) then return true end
  local rb, qn, fl, us = h[1], tonumber(h[2]), tonumber(h[3]), h[4]
  local dl, most = spacing_of(h[5], h[6]), limit_of(h[7])
  local at = tonumber(h[9]) or 0
  -- Rules older than a day are asked for again (RFC 9309 section 2.4).
  if obey and (rb == 'k' or rb == 'x') and now - (tonumber(h[8]) or now) >= 86400 then
    rb = 'u'
  end
  if ahead and not (mph == 1 and (rb == 'k' or rb == 'x') and dl > 0 and qn > 0) then
    return
  end
  -- Held back by a spent budget, with nothing changed: the origin is left as it is
  -- (make_ready would say it is ready, and wake the idle processes for nothing, each of
  -- whose leases would wake the others).
  local held_back = false
  if rb == 'u' and spent() then
    held_back = true
  elseif rb == 'u' then
    local member = 'r ' .. o
    redis.call('HSET', k, 'rb', 'f', 'nx', now + dl, 'lh', owner, 'sk', 0)
    redis.call('HINCRBY', k, 'fl', 1)
    count('leased', 1)
    redis.call('ZADD', LEASES, now + lease_for, member)
    redis.call('HSET', HELD, member, owner .. '\n' .. o .. '\n')
    hold(owner, 1)
    leased[#leased + 1] = {'r', o}
  elseif rb == 'k' or rb == 'x' then
    local nx, before = nil, #leased
    while #leased < n and qn > 0 and us == '' and (not most or fl < most) do
      local e = redis.call('LPOP', qkey(o))
      if not e then
        -- The queue ran dry while qn says more: the count had drifted.
        count('queued', -qn)
        qn = 0
        break
      end
      -- An entry whose URL is no longer queued (done meanwhile) was counted out when it
      -- was done, and is dropped here. One that is no entry at all (written by another
      -- program) was counted in when it was pushed, as every entry is, so it is counted
      -- out as it is dropped.
      local url = string.match(e, '^%d+ %d+ %d+ %d+ (%S+)')
      if not url then
        qn = qn - 1
        count('queued', -1)
      elseif redis.call('HGET', URLS, url) == 'q' and not may_start(url) then
        -- The budget is spent, and this URL never started: it stays first in line, and
        -- its origin gives nothing more.
        redis.call('LPUSH', qkey(o), e)
        held_back = qn == tonumber(h[2])
        break
      elseif redis.call('HGET', URLS, url) == 'q' then
        redis.call('HSET', URLS, url, 'l')
        qn = qn - 1
        fl = fl + 1
        count('queued', -1)
        count('leased', 1)
        redis.call('ZADD', LEASES, now + lease_for, url)
        redis.call('HSET', HELD, url, owner .. '\n' .. o .. '\n' .. e)
        hold(owner, 1)
        leased[#leased + 1] = {'p', e, at - now}
        if dl > 0 then
          us = url
          nx = math.max(at, now) + dl
        end
      end
    end
    if #leased > before then
      redis.call('HSET', k, 'qn', qn, 'fl', fl, 'us', us, 'lh', owner, 'sk', 0)
    else
      redis.call('HSET', k, 'qn', qn, 'fl', fl, 'us', us)
    end
    if nx then redis.call('HSET', k, 'nx', nx) end
  end
  if not held_back then make_ready(o) end
end

-- Whether the caller may lease ahead: no other live process waits with nothing at all
-- (found nothing to lease, and holds no lease), and the caller holds fewer leases than
-- its share: all the crawl's leases over the processes that hold some or wait for some,
-- and one more, so that a share met exactly does not flap. Otherwise the origin goes to
-- 'ready' for the others: the first process leases every root's robots.txt before the
-- others join, and would keep every origin for good; one host with a delay would stay
-- with one process. A process counts as live as orphans() says: one that waited with
-- nothing and then stopped calling (it left, or died) counts for no share.
local share, hungry = nil, false
local function below_share()
  if share == nil then
    local live = redis.call('HLEN', HOLDS)
    local counted = redis.call('HEXISTS', HOLDS, owner) == 1
    for _, who in ipairs(redis.call('SMEMBERS', IDLE)) do
      if redis.call('HEXISTS', HOLDS, who) == 0 then
        if who == owner then
          live, counted = live + 1, true
        elseif is_live(last_call(who)) then
          live, hungry = live + 1, true
        end
      end
    end
    if not counted then live = live + 1 end
    local total = tonumber(redis.call('HGET', META, 'leased')) or 0
    share = math.ceil(total / live) + 1
  end
  return not hungry and (tonumber(redis.call('HGET', HOLDS, owner)) or 0) < share
end

-- Seconds an origin in 'ready' may have been able to go without having been leased, and
-- still be taken for one that waits for a process to wake and call (a round trip and a
-- wake-up, on a loaded machine), not for a worker.
local WAKE_GRACE = 0.05

-- Lease origin o's next URL ahead to the caller (see lease_origin), counted apart: a
-- lease ahead says nothing of the origins that are ready, which "w" and the rest tell.
-- Not while an origin in 'ready' has waited for a worker longer than WAKE_GRACE: it
-- would wait longer for one that this origin, leased ahead, took first out of turn.
-- An origin whose time came less than that ago waits for a process's wake-up and call,
-- not for a worker: in a crawl with a worker for every host, refused for that, half the
-- leases ahead fell back to 'ready' and cost every process a call and a wake-up each.
-- Nor with leases that run out as they are made (lease seconds 0, or too few to move
-- now): this call's own lease operation, which reclaims first, would take it back.
local ahead_leased = 0
local function lease_ahead(o)
  if now + lease_for <= now then return end
  if #redis.call('ZRANGEBYSCORE', READY, '-inf', now - WAKE_GRACE, 'LIMIT', 0, 1) > 0 then
    return
  end
  local before = #leased
  lease_origin(o, before + 1, true)
  ahead_leased = ahead_leased + #leased - before
end

-- Lease up to n requests from the origins whose time has come, after reclaiming the
-- leases that ran out, and up to early of them from those whose time comes within h
-- (leased ahead: see lease_origin). 'ready' is ordered by that time, so the early ones
-- are the next to come, and the range read is as short as without. Of those whose time
-- has come, the caller's own go first (see held_elsewhere).
local lease_short = false
local function lease(n, h, early)
  reclaim()
  local origins = redis.call('ZRANGEBYSCORE', READY, '-inf', now + h, 'WITHSCORES',
    'LIMIT', 0, 3 * n + 16)
  local i, passed = 1, {}
  while i < #origins and #leased < n and tonumber(origins[i + 1]) <= now do
    if lease_origin(origins[i], n, false, true) then passed[#passed + 1] = origins[i] end
    i = i + 2
  end
  for _, o in ipairs(passed) do
    if #leased < n then
      lease_origin(o, n, false)
    else
      redis.call('HINCRBY', okey(o), 'sk', 1)
    end
  end
  while i < #origins and #leased < n do
    local ahead = tonumber(origins[i + 1]) > now
    if ahead and early <= 0 then break end
    local before = #leased
    lease_origin(origins[i], n, ahead)
    if ahead then early = early - (#leased - before) end
    i = i + 2
  end
  -- A lease that got less than it asked for took all there was: its caller waits for
  -- more, and is told when it comes (the idle processes; see finish_check).
  lease_short = #leased < n
  if lease_short then
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
        local suffix = op.ref and (' ' .. op.ref) or ''
        for _, url in ipairs(op.u) do
          if redis.call('HSETNX', URLS, url, 'q') == 1 then
            entries[#entries + 1] = prefix .. url .. suffix
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
  elseif k == 'seen' then
    -- Links the caller's known robots.txt rules turn away: seen for good, never
    -- queued (state d, and no record, as for drop).
    local new = {}
    for _, url in ipairs(op.u) do
      if redis.call('HSETNX', URLS, url, 'd') == 1 then new[#new + 1] = url end
    end
    result = new
  elseif k == 'done' or k == 'drop' then
    local st = redis.call('HGET', URLS, op.u)
    if st == 'l' then
      local _, o = held_by(op.u)
      o = o or op.o
      clear_unstarted(o, op.u)
      unlease(op.u, o)
      -- The end is the answer's, as the caller timed it (never later than now): this
      -- call comes after the record is written, which is no part of the host's wait.
      delay_after(o, op.t)
      make_ready(o)
      if op.a == 1 and not fin and below_share() then lease_ahead(o) end
    elseif st == 'q' then
      -- Queued again after its lease ran out: its entry is skipped when it comes up.
      redis.call('HINCRBY', okey(op.o), 'qn', -1)
      count('queued', -1)
      make_ready(op.o)
    end
    if st == 'l' or st == 'q' then
      leave_budget(op.u, k == 'drop')
      -- With the budget spent, a URL done may be the last that other processes
      -- wait for before they stop (see "b"): tell the idle ones.
      if spent() then woke = true end
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
      if op.t then delay_after(o, op.t) end  -- a retry: as after done
      if op.w and op.w > 0 then
        local h = redis.call('HMGET', okey(o), 'nx', 'fl')
        redis.call('HSET', okey(o), 'nx', math.max(tonumber(h[1]) or 0, now + op.w))
        -- A lease of the origin that another worker holds (here or in another process)
        -- may not have started yet: its holder hears of the wait at once, not with its
        -- next lease of the origin, which would come too late for this one.
        if (tonumber(h[2]) or 0) > 0 then
          local ends = string.format('%.6f', now + op.w)
          redis.call('PUBLISH', EVENTS, 'hold ' .. ends .. ' ' .. o .. ' ' .. owner)
        end
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
        redis.call('HSET', ok, 'rb', op.st, 'rt', op.rt or '', 'rf', op.rf or '', 'ra', now)
        if op.dl then redis.call('HSET', ok, 'dl', op.dl) end
        -- The delay runs from the answer's end (see OriginScheduler.robots_settled).
        local h = redis.call('HMGET', ok, 'nx', 'dl', 'pg')
        local nx = tonumber(h[1]) or 0
        redis.call('HSET', ok, 'nx', math.max(nx, at_most_now(op.t) + spacing_of(h[2], h[3])))
      end
      make_ready(op.o)
      if k == 'robots' and op.a == 1 and not fin and below_share() then
        lease_ahead(op.o)
      end
      result = 1
    end
  elseif k == 'started' then
    local o = mine(op.u)
    if o then
      clear_unstarted(o, op.u)
      local at = at_most_now(op.t)
      local h = redis.call('HMGET', okey(o), 'nx', 'dl', 'pg')
      local nx, dl = tonumber(h[1]) or 0, spacing_of(h[2], h[3])
      redis.call('HSET', okey(o), 'nx', math.max(nx, at + dl))
      pace_started(o, at)
      make_ready(o)
      result = 1
    end
  elseif k == 'pace' then
    if adapt then result = pace_answer(op.o, op.s, op.t, at_most_now(op.e)) end
  elseif k == 'renew' then
    for _, member in ipairs(op.u) do
      if mine(member) then
        redis.call('ZADD', LEASES, 'XX', now + lease_for, member)
        result = result + 1
      end
    end
  elseif k == 'lease' then
    if not fin then lease(op.n, op.h or 0, op.e or 0) end
  elseif k == 'bye' then
    redis.call('SREM', IDLE, owner)
    redis.call('HDEL', OWNERS, owner)
  end
  results[i] = result
end

finish_check()
-- How long until an origin's delay ends, in every answer: a caller that waits will not
-- wait past it, though its own change made it (an origin it left to 'ready' finds no
-- caller in 'idle' to tell). With the budget spent, a ready origin may hold only URLs
-- that will never start: no wait is said (a URL given back is told by "work").
local wait, expiry = -1, -1
local first = spent() and {} or redis.call('ZRANGE', READY, 0, 0, 'WITHSCORES')
if first[2] then wait = math.max(0, tonumber(first[2]) - now) end
-- Nothing leased (but ahead), or less than asked: how long until a lease runs out, so
-- that the caller knows when to ask again (a lease of its own never runs out while it
-- renews it: it need not wake for that one).
local idle = #leased == ahead_leased or lease_short
if idle then
  local soon = redis.call('ZRANGE', LEASES, 0, 0, 'WITHSCORES')
  if soon[2] then expiry = math.max(0, tonumber(soon[2]) - now) end
end
-- Nothing leased: the leases of processes that stopped renewing, which may be
-- what this one waits for (a count, and seconds until the last comes back).
local stranded, suspect = nil, -1
if idle then
  local count, latest, soonest = orphans()
  if count > 0 then stranded = {count, math.max(0, latest - now)} end
  if soonest then suspect = math.max(0, soonest - now) end
end
-- The budget, when the crawl has one: whether it is spent, and how many of the
-- URLs it counted are not done yet (queued again, or leased).
local spending = nil
if budget then
  local m = redis.call('HMGET', META, 'started', 'sdone')
  spending = {spent() and 1 or 0, (tonumber(m[1]) or 0) - (tonumber(m[2]) or 0)}
end
return cjson.encode({r = results, l = leased, c = counts(), w = wait, x = expiry,
  n = this_call, b = spending, o = stranded, y = suspect})
