-- clock.lua: the server's clock, read by a process as it joins a crawl, so that it
-- can send its engine's clock on the server's scale (see prelude.lua, "Time").
-- Not prefixed by the prelude: it touches no key.
--
-- KEYS     none
-- ARGV     none
-- Returns  {seconds, microseconds} since the epoch, as the server's TIME says.
--          (Read with a script, as every other exchange of a crawl is, so
--          that a reading's round trip is the same kind as a step call's.)
-- Keeps    everything as it is: it reads no key and writes nothing.

return redis.call('TIME')
