-- status.lua: the counts of a shared crawl, for --status and for processes that
-- join. Reads only: it changes nothing.
--
-- KEYS[1]  P .. 'meta' (for routing only; see prelude.lua)
-- ARGV[1]  P, the crawl's key prefix
-- ARGV[2]  the clock (see prelude.lua)
-- Returns  the counts, as in prelude.lua's counts():
--          {queued, leased, done, failed, finished (1/0), seen};
--          {} when the prefix holds no crawl of this layout.
-- Keeps    everything as it is: no write, no publish (the prelude only reads).

if redis.call('HGET', META, 'v') ~= LAYOUT then return {} end
return counts()
