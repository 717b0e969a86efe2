-- clock.lua: the server's clock, read by a process as it joins a crawl, so that it
-- can send its engine's clock on the server's scale (see prelude.lua, "Time").
-- Not prefixed by the prelude: it touches no key.
--
-- KEYS     none
-- ARGV     none
-- Returns  {seconds, microseconds} since the epoch, as the server's TIME says.
--          (Read here rather than with the client's TIME command: coredis 6
--          reads that reply's second field as milliseconds.)
-- Keeps    everything as it is: it reads no key and writes nothing.

return redis.call('TIME')
