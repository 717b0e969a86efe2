-- details.lua: what --status shows after the contract's counts: the leases held
-- by no live process, and the --max-pages budget. Reads only: it changes nothing.
--
-- KEYS[1]  P .. 'meta' (for routing only; see prelude.lua)
-- ARGV[1]  P, the crawl's key prefix
-- ARGV[2]  the clock (see prelude.lua)
-- Returns  {leases held by processes that stopped renewing them (prelude.lua's
--          orphans()), the server time by which they all come back (a string;
--          '' when there is none), the budget ('' for none), the URLs it
--          counted}; {} when the prefix holds no crawl of this layout.
-- Keeps    everything as it is: no write, no publish (the prelude only reads).

if redis.call('HGET', META, 'v') ~= LAYOUT then return {} end
local count, latest = orphans()
local m = redis.call('HMGET', META, 'budget', 'started')
return {count, latest and tostring(latest) or '', m[1] or '', tonumber(m[2]) or 0}
