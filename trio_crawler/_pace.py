"""An origin's pace: how fast the crawler may go there, learnt from how it answers.

Theory of operation
-------------------
``--delay`` and ``--max-per-host`` say how fast the crawler may go; a server says how fast
it *can*, by pushing back: a 429 or a 503, a timeout, a refused connection. :class:`Pace`
is one origin's answer to that, a pure state machine the scheduler consults (and the Redis
scripts mirror, field by field, so that every process of a shared crawl slows down
together). It holds two limits, each only ever *tighter* than the user's:

* ``gap``: seconds between two request starts (the rate, 1/gap);
* ``window``: requests in flight at once.

The control law is TCP's AIMD (additive increase, multiplicative decrease), with the
three changes a crawler needs; docs/manners.md gives the derivation and why it is stable.

1. **One decrease per epoch.** A pushback cuts the pace and opens a new epoch. Answers to
   requests that started before the cut were sent at the old pace, so they say nothing
   new, and a burst of them must not cut again and again (TCP halves once per window of
   data for the same reason; AutoThrottle, which reacts to every slow answer, is the
   counter-example). They do shrink the window: each pushback among them is one more
   request in flight than the server took.
2. **The decrease is measured, not only halved.** The new rate is the lower of half the
   rate just used and the *goodput*, the answers the origin gave without pushback per
   second since its first request. A token bucket that refills at R per second never
   accepts more than its burst plus R per second, so goodput is at most about R once the
   first cut is past: two or three cuts find R from any start, where halving alone would
   need one per factor of two (and every cut costs a Retry-After wait).
3. **The increase is scaled to what was learnt.** While the origin answers promptly, each
   answer adds ``ceiling / 4`` of the distance back to the ceiling (the rate just before
   the last cut, bounded by twice the goodput) and then creeps past it by ``ceiling /
   256``: quick back to where trouble began, slow beyond it, as CUBIC plateaus near its
   last loss. The window grows by one per window of prompt answers, TCP's congestion
   avoidance. Both limits lift entirely once they are past the user's.

A *slow* answer (well over the origin's fastest) is a mild signal: no increase, and the
window shrinks by one, at most once per epoch: a server whose latency grows with load is
asking for fewer requests at once, not necessarily for a lower rate.

It reads no clock: every method takes the engine's ``now`` and the attempt's start.
"""

from __future__ import annotations

__all__ = ["Pace", "PaceSignal", "PaceTally"]

from enum import Enum

# The gap's bounds. Under a millisecond the pace is no limit worth keeping (the origin goes
# back to the user's pace); a minute is the longest gap it ever asks, as --delay's cap.
GAP_FLOOR = 0.001
GAP_CAP = 60.0
# The decrease: to 0.7 of the rate that drew the pushback (CUBIC's beta, RFC 9438), or to
# the goodput of the epoch that ended, when that is lower.
BETA = 0.7
# The increase, in time since the cut: back to the old rate in RECOVERY seconds (concave,
# slowing as it nears it), then past it ever faster (convex), as CUBIC's window grows.
RECOVERY = 4.0
CUBE = (1.0 - BETA) / RECOVERY**3
# An origin starts with this many requests at once, one more per prompt answer (TCP's slow
# start: doubling per round trip) until --max-per-host, or until it first pushes back.
INITIAL_WINDOW = 4
# With no --max-per-host, the window is lifted once it reaches this.
OPEN_WINDOW = 64
# An answer is slow when it took more than SLOW_FACTOR times the origin's fastest answer
# and SLOW_MARGIN seconds more (the margin keeps loopback's sub-millisecond noise out).
SLOW_FACTOR = 2.0
SLOW_MARGIN = 0.5
# cut_at of a pace a store kept, until its first request starts the new epoch.
RESTORED = -2.0
# The start-to-start interval is smoothed as TCP smooths its round-trip time (RFC 6298).
SMOOTHING = 0.125


class PaceSignal(Enum):
    """What one answer says about the origin's load."""

    PUSHBACK = "pushback"  # 429, 503, a timeout or a failed connection
    PROMPT = "prompt"  # any other answer, in time
    SLOW = "slow"  # any other answer, slow for this origin


class Pace:
    """One origin's learnt limits (see the module docstring).

    Attributes:
        gap: Seconds between two request starts it asks for; 0 when it asks for none.
        window: Requests in flight at once it allows; 0 when it sets no limit.
        ceiling: The rate (per second) at which the origin last pushed back; 0 before.
        slowed: Whether it ever slowed the origin (the report's ``slowed_origins``).
    """

    __slots__ = (
        "ceiling",
        "credit",
        "cut_at",
        "epoch_prompt",
        "epoch_start",
        "fastest",
        "gap",
        "interval",
        "knee",
        "last_start",
        "slowed",
        "trimmed",
        "window",
    )

    def __init__(self, window: int = INITIAL_WINDOW) -> None:
        self.gap = 0.0
        self.window = window
        self.ceiling = 0.0
        self.slowed = False
        self.cut_at = -1.0  # when the current epoch began (-1: no cut yet)
        self.knee = 0.0  # seconds after the cut at which the rate is back to the ceiling
        self.trimmed = False  # a slow answer trimmed the window in this epoch
        self.epoch_start = -1.0  # the first start of this epoch, for its goodput
        self.epoch_prompt = 0  # answers without pushback in this epoch
        self.last_start = -1.0
        self.interval = 0.0  # smoothed seconds between request starts
        self.fastest = 0.0  # the quickest answer seen, for telling a slow one
        self.credit = 0  # prompt answers towards the window's next increase

    @property
    def active(self) -> bool:
        """Whether a pushback has it limiting the origin now (slow start does not count)."""
        return self.slowed and (self.gap > 0.0 or self.window > 0)

    def restore(self, *, gap: float, window: int, ceiling: float) -> None:
        """Take up a pace a store kept: a resumed crawl starts where it was, in a fresh
        epoch whose increase begins at the kept gap."""
        self.gap, self.window, self.ceiling = gap, window, ceiling
        self.slowed = True
        self.cut_at = RESTORED
        rate = 1.0 / gap if gap > 0.0 else 0.0
        low = rate / ceiling if ceiling > 0.0 and rate else 1.0
        self.knee = (max(0.0, 1.0 - low) / CUBE) ** (1.0 / 3.0)

    def kept(self) -> str:
        """The pace as a store keeps it: ``gap window ceiling``."""
        return f"{self.gap!r} {self.window} {self.ceiling!r}"

    @staticmethod
    def read_kept(text: object) -> tuple[float, int, float] | None:
        """What :meth:`kept` wrote, or None for anything else (a file is not trusted)."""
        parts: list[str] = text.split() if isinstance(text, str) else []
        try:
            gap, window, ceiling = float(parts[0]), int(parts[1]), float(parts[2])
        except (IndexError, ValueError):
            return None
        if not (0.0 <= gap <= GAP_CAP and window >= 0 and 0.0 <= ceiling < float("inf")):
            return None
        return gap, window, ceiling

    def started(self, now: float) -> None:
        """A request to the origin starts now: the measured rate follows."""
        if self.cut_at == RESTORED:
            self.cut_at = now
        if self.epoch_start < 0.0:
            self.epoch_start = now
        if self.last_start >= 0.0 and now > self.last_start:
            sample = now - self.last_start
            # The first sample is taken whole, as RFC 6298 takes the first round trip.
            self.interval += SMOOTHING * (sample - self.interval) if self.interval else sample
        self.last_start = now

    def idle(self, elapsed: float) -> bool:
        """Whether an answer that took ``elapsed`` seconds, not a pushback, leaves the
        pace as it is: nothing limits the origin and the answer is not slow (the path
        of every page of a crawl that meets no pushback, so kept short)."""
        return not (self.gap or self.window) and self.classify(elapsed) is PaceSignal.PROMPT

    def classify(self, elapsed: float) -> PaceSignal:
        """PROMPT or SLOW, for an answer that took ``elapsed`` seconds."""
        fastest = self.fastest
        if fastest == 0.0 or elapsed < fastest:
            self.fastest = elapsed
            return PaceSignal.PROMPT
        if elapsed > SLOW_FACTOR * fastest + SLOW_MARGIN:
            return PaceSignal.SLOW
        return PaceSignal.PROMPT

    def answered(
        self,
        signal: PaceSignal,
        *,
        started: float,
        now: float,
        in_flight: int,
        user_gap: float,
        user_window: int | None,
    ) -> str | None:
        """Take one answer; say why the pace changed (for ``-v``), or None.

        Args:
            signal: What the answer says.
            started: When its attempt started (the engine's clock).
            now: The engine's clock.
            in_flight: The origin's other requests in flight now.
            user_gap: The gap the user's limits ask (``--delay``, ``Crawl-delay``).
            user_window: ``--max-per-host`` (None: no limit).
        """
        current = started >= self.cut_at
        if signal is PaceSignal.PUSHBACK:
            if current:
                return self._cut(now, in_flight)
            if self.window > 1:
                self.window -= 1
            return None
        if not current:
            return None
        self.epoch_prompt += 1
        if signal is PaceSignal.SLOW:
            if self.trimmed:
                return None
            self.trimmed = True
            self.slowed = True
            self.window = max(1, min(self.window or in_flight + 1, in_flight + 1) - 1)
            return f"slow answers: {self.window} at once"
        return self._increase(now, user_gap, user_window)

    def _cut(self, now: float, in_flight: int) -> str:
        spacing = self.gap or self.interval
        rate = 1.0 / max(spacing, GAP_FLOOR)
        span = now - self.epoch_start if self.epoch_start >= 0.0 else 0.0
        goodput = self.epoch_prompt / span if span > 0.0 and self.epoch_prompt else rate
        low = max(1.0 / GAP_CAP, min(BETA * rate, goodput))
        # The rate that drew the pushback is an upper bound on what the origin takes, the
        # goodput (over the whole epoch, its Retry-After wait included) nearly a lower one:
        # the ceiling is their geometric mean, so each cut halves the doubt, in log terms.
        self.ceiling = (rate * min(rate, goodput / BETA)) ** 0.5
        self.knee = (max(0.0, 1.0 - low / self.ceiling) / CUBE) ** (1.0 / 3.0)
        self.gap = min(GAP_CAP, max(GAP_FLOOR, 1.0 / low))
        self.window = max(1, in_flight)
        self.cut_at = now
        self.epoch_start = now
        self.epoch_prompt = 0
        self.trimmed = False
        self.credit = 0
        self.slowed = True
        return f"gap {self.gap:.3g} s, {self.window} at once"

    def _increase(self, now: float, user_gap: float, user_window: int | None) -> str | None:
        lifted = False
        if self.gap > 0.0:
            rate = self.ceiling * (1.0 + CUBE * (now - self.cut_at - self.knee) ** 3)
            self.gap = 1.0 / rate if rate > 0.0 else GAP_CAP
            if self.gap <= max(user_gap, GAP_FLOOR):
                self.gap = 0.0
                lifted = True
        if self.window:
            self.credit += 1
            if not self.slowed or self.credit >= self.window:
                self.credit = 0
                self.window += 1
                if self.window >= (user_window or OPEN_WINDOW):
                    self.window = 0
                    lifted = True
        if lifted and self.slowed and not self.gap and not self.window:
            return "answering promptly: back to the crawl's own limits"
        return None


class PaceTally:
    """How many origins their pace slows now, and how many it ever slowed: the progress
    line's and the report's counts, kept as paces change rather than counted over every
    origin (a broad crawl has thousands)."""

    __slots__ = ("_ever", "_now")

    def __init__(self) -> None:
        self._now = 0
        self._ever: set[str] = set()

    def note(self, key: str, pace: Pace, *, was_active: bool) -> None:
        """Origin ``key``'s pace changed (or was restored); it limited it before or not."""
        self._now += pace.active - was_active
        if pace.slowed:
            self._ever.add(key)

    @property
    def counts(self) -> tuple[int, int]:
        """Origins slowed now, and ever."""
        return self._now, len(self._ever)
