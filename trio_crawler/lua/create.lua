-- create.lua: create a shared crawl, or join the one already there.
--
-- KEYS[1]    P .. 'meta' (for routing only; see prelude.lua)
-- ARGV[1]    P, the crawl's key prefix
-- ARGV[2]    the clock (see prelude.lua)
-- ARGV[3]    the SHA-1 of the roots' JSON list (ARGV[9]'s bytes), in hex, or '' to
--            join a crawl without giving them
-- ARGV[4]    the crawl's options (JSON object), stored for the processes that join;
--            its max_pages is the crawl's budget (see prelude.lua)
-- ARGV[5]    obey robots.txt: '1' or '0'
-- ARGV[6]    the delay between two requests to one origin, in seconds
-- ARGV[7]    the most concurrent requests to one origin, or '' for no limit
-- ARGV[8]    the most redirects a chain may follow
-- ARGV[9]    the roots (JSON list), or '' to ask first: the roots go to the server only
--            to create the crawl, and a process that joins one sends their digest
-- ARGV[10..] with ARGV[9], the roots one by one, each followed by its origin: URL,
--            ORIGIN, ...
-- Returns    {outcome, the stored roots (JSON) or '', counts, the stored options
--            (JSON) or ''}, the outcome one of
--              'created'   there was no crawl: this call made it and queued the roots;
--              'joined'    the crawl exists, with these roots (or none were given);
--              'mismatch'  the crawl exists with other roots (the stored roots come
--                          with it, for the caller's error): nothing changed;
--              'absent'    no crawl, and the roots were not sent (ARGV[9] ''): call
--                          again with them to create it; nothing changed;
--              'none'      no crawl, and no roots to start one: nothing changed;
--              'foreign'   the keys are not a crawl of this layout (the stored
--                          roots are then its layout version, or ''): nothing changed;
--            counts as in prelude.lua's counts(), all zero for 'absent', 'none' and
--            'foreign'. A process that joins checks its options against the stored
--            ones (the creator's say what to crawl, and its --delay and --max-per-host
--            hold for all).
-- Keeps      meta is written in the same call that queues the roots, so
--            pending = queued + leased from the start; each root is queued once
--            (HSETNX on the seen set); a crawl that exists is never rewritten,
--            whatever its joiners say, but for the roots' digest (rsum), which a crawl
--            made before meta kept it gets at its first join by digest.

local exists = redis.call('EXISTS', META) == 1
if exists then
  local m = redis.call('HMGET', META, 'v', 'rsum', 'options')
  if m[1] ~= LAYOUT then return {'foreign', m[1] or '', {0, 0, 0, 0, 0, 0}, ''} end
  local options = m[3] or ''
  if ARGV[3] ~= '' then
    local rsum = m[2]
    if not rsum then
      rsum = redis.sha1hex(redis.call('HGET', META, 'roots') or '')
      redis.call('HSET', META, 'rsum', rsum)
    end
    if ARGV[3] ~= rsum then
      return {'mismatch', redis.call('HGET', META, 'roots') or '', counts(), options}
    end
  end
  return {'joined', '', counts(), options}
end
if ARGV[3] == '' then return {'none', '', {0, 0, 0, 0, 0, 0}, ''} end
if ARGV[9] == '' then return {'absent', '', {0, 0, 0, 0, 0, 0}, ''} end
-- The budget is the options' max_pages (a number, or JSON null for none).
local given = cjson.decode(ARGV[4])
local pages = type(given) == 'table' and tonumber(given.max_pages) or nil
-- The digest is the server's own, so that a join by digest compares like with like.
redis.call('HSET', META, 'v', LAYOUT, 'roots', ARGV[9], 'rsum', redis.sha1hex(ARGV[9]),
  'options', ARGV[4], 'obey', ARGV[5], 'delay', ARGV[6], 'mph', ARGV[7], 'redirects', ARGV[8],
  'queued', 0, 'leased', 0, 'done', 0, 'failed', 0, 'fin', '0', 'created', now,
  'budget', pages or '', 'started', 0, 'sdone', 0,
  'adapt', (type(given) == 'table' and given.adapt == false) and '0' or '1')
-- The prelude read the settings before they existed: read them again.
obey, base_delay, mph, budget, adapt = settings()
for i = 10, #ARGV, 2 do
  local url, o = ARGV[i], ARGV[i + 1]
  if redis.call('HSETNX', URLS, url, 'q') == 1 then
    origin_new(o)
    push_entries(o, {'1 0 ' .. ARGV[8] .. ' 0 ' .. url}, false)
  end
end
return {'created', '', counts(), ARGV[4]}
