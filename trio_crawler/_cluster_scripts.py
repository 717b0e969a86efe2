"""The shared frontier's server side: Lua scripts that Redis runs whole.

Every change to a shared crawl is made by one of these scripts, so that no process dying
between two commands can leave the seen set, the queues, the leases and the pending count
out of step: Redis runs a script to its end before any other command. The pending count
(``queued`` + ``leased`` in the crawl's ``meta`` hash) is changed only where a URL changes
state, in the same script; when it reaches zero, that script marks the crawl finished and
publishes ``finished``, so every process learns the end by the message, not by asking.

Redis refuses a script (out of memory, say) only before its first write, and undoes
nothing: a Lua error after a write leaves the writes made so far. The scripts therefore
trust their arguments, which only :mod:`~trio_crawler._cluster` writes.

The scripts are the files in ``trio_crawler/lua/``, one a file, each with a header that
says its keys, its arguments, what it returns and which invariants it keeps.
``prelude.lua`` is shared: its header maps the crawl's keys on the server, and it defines
the clock, the key names and the helpers that keep the counts. Each script is the prelude
followed by its body, read once, here, at import; a file missing from the installed package
fails the import. The callers run them with :meth:`~trio_crawler._redis.Redis.run_script`,
which calls each by its SHA (EVALSHA) and sends its text only to a server that lacks it.
"""

from __future__ import annotations

from importlib.resources import files

from ._redis import Script

__all__ = [
    "CLOCK",
    "CLOCK_SCRIPT",
    "CREATE",
    "CREATE_SCRIPT",
    "DETAILS",
    "DETAILS_SCRIPT",
    "STATUS",
    "STATUS_SCRIPT",
    "STEP",
    "STEP_SCRIPT",
]


def _source(name: str) -> str:
    """The text of ``lua/<name>`` in the installed package; raises if it is not there."""
    return (files("trio_crawler") / "lua" / name).read_text(encoding="utf-8")


_PRELUDE = _source("prelude.lua")

# Create the crawl, or join it (lua/create.lua).
CREATE = _PRELUDE + _source("create.lua")
# One batch of a process's changes, then optionally a lease of more work (lua/step.lua).
STEP = _PRELUDE + _source("step.lua")
# The counts, for --status and for processes that join (lua/status.lua).
STATUS = _PRELUDE + _source("status.lua")
# What --status shows after the counts: leases held by no live process, the budget
# (lua/details.lua).
DETAILS = _PRELUDE + _source("details.lua")
# The server's clock, for a process that joins (lua/clock.lua); no prelude: no keys.
CLOCK = _source("clock.lua")

# Each as the client runs it: by its SHA, computed once here.
CREATE_SCRIPT, STEP_SCRIPT, STATUS_SCRIPT, DETAILS_SCRIPT, CLOCK_SCRIPT = (
    Script.of(source) for source in (CREATE, STEP, STATUS, DETAILS, CLOCK)
)
