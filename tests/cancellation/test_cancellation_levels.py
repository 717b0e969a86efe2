"""Scenarios c, e, j and h: how long a cancellation lasts, and what it lets run.

c. Edge versus level. asyncio delivers a cancellation once, as one CancelledError (an
   edge): code that catches it and retries goes on as if nothing happened, and even an
   ``asyncio.timeout`` around it lets the late result through. Trio and AnyIO cancel a
   *scope*, and every checkpoint inside a cancelled scope raises again (a level), so the
   retry fails at its first await.
e. Cleanup while cancelled. Because the level stays up, an await in a ``finally`` under
   Trio or AnyIO dies at its first checkpoint unless it is shielded (``CancelScope(shield=
   True)``, bounded with ``move_on_after(..., shield=True)``). asyncio's cleanup awaits just
   work, and ``asyncio.shield`` protects an inner task while the task awaiting it leaves.
j. Cancelled before its first step. An asyncio task cancelled before it runs never runs
   at all, not even its ``finally``; a Trio or AnyIO task started into a cancelled scope
   runs up to its first checkpoint, so its ``try``/``finally`` pairs always match.
h. AnyIO follows Trio on both backends, even for native asyncio awaits inside an AnyIO
   scope. What still differs between its backends: the cancellation exception's class and
   the exception group's message (both here), and Ctrl-C (``test_cancellation_ctrl_c.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel
import pytest
import trio
from trio.testing import MockClock

from cancellation_support import anyio_backend_spec
from support import HANG_LIMIT


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, object]]:
    return anyio_backend_spec(request.param)


async def fetch_with_one_retry(
    fetch: Callable[[], Awaitable[str]], cancelled: type[BaseException], attempts: list[str]
) -> str:
    """A retry loop that treats one cancellation like any other failed attempt."""
    try:
        return await fetch()
    except cancelled:
        attempts.append("cancelled; retrying")
    return await fetch()


def answer_on_second_try(
    never: Callable[[], Awaitable[object]], checkpoint: Callable[[], Awaitable[object]]
) -> Callable[[], Awaitable[str]]:
    """A fetch whose first try waits on ``never()`` and whose second answers after one
    ``checkpoint()``: a server that never answers the first request and answers the next."""
    tries = 0

    async def fetch() -> str:
        nonlocal tries
        tries += 1
        if tries == 1:
            await never()
        await checkpoint()
        return "late result"

    return fetch


async def asyncio_never() -> None:
    await asyncio.Event().wait()


async def asyncio_checkpoint() -> None:
    await asyncio.sleep(0)


# -- c. Edge versus level ------------------------------------------------------------------


def test_c_asyncio_a_swallowed_cancel_is_gone() -> None:
    """asyncio: after the retry swallows CancelledError the task simply runs on, with
    ``cancelling() == 1`` as the only trace, and returns the late result."""

    async def scenario() -> None:
        attempts: list[str] = []
        fetch = answer_on_second_try(asyncio_never, asyncio_checkpoint)
        task = asyncio.create_task(fetch_with_one_retry(fetch, asyncio.CancelledError, attempts))
        await asyncio.sleep(0)  # the task starts and waits for its first answer
        task.cancel()
        await asyncio.sleep(0)  # the task catches the CancelledError and retries
        assert attempts == ["cancelled; retrying"]
        assert not task.done()
        assert task.cancelling() == 1
        async with asyncio.timeout(HANG_LIMIT):
            assert await task == "late result"
        assert not task.cancelled()

    asyncio.run(scenario())


def test_c_asyncio_timeout_around_a_swallowed_cancel_returns_a_late_result() -> None:
    """asyncio: ``asyncio.timeout`` expires (``expired()`` is true), but since its one
    CancelledError was swallowed it raises no TimeoutError: the late result comes out."""

    async def scenario() -> str:
        attempts: list[str] = []
        fetch = answer_on_second_try(asyncio_never, asyncio_checkpoint)
        async with asyncio.timeout(HANG_LIMIT):
            # A deadline that passes at the first await; a later one would behave the same.
            async with asyncio.timeout(0) as deadline:
                result = await fetch_with_one_retry(fetch, asyncio.CancelledError, attempts)
        assert deadline.expired()
        assert attempts == ["cancelled; retrying"]
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
        return result

    assert asyncio.run(scenario()) == "late result"


@pytest.mark.trio
async def test_c_trio_a_swallowed_cancel_is_raised_again_at_the_next_checkpoint(
    virtual_clock: MockClock,
) -> None:
    """Trio: the deadline passes at 1 s (virtual); the retry's first checkpoint raises
    Cancelled again, so no late result ever arrives and the scope catches it at 1 s."""
    attempts: list[str] = []
    result = None
    with trio.fail_after(HANG_LIMIT), trio.move_on_after(1) as deadline:
        result = await fetch_with_one_retry(
            answer_on_second_try(trio.sleep_forever, trio.lowlevel.checkpoint),
            trio.Cancelled,
            attempts,
        )
    assert result is None
    assert attempts == ["cancelled; retrying"]
    assert deadline.cancelled_caught
    assert trio.current_time() == 1


@pytest.mark.anyio
async def test_c_anyio_a_swallowed_cancel_is_raised_again_at_the_next_checkpoint(
    anyio_backend: tuple[str, dict[str, object]],
) -> None:
    """AnyIO, both backends: level-triggered like Trio; the retry is cancelled again."""
    attempts: list[str] = []
    result = None
    with anyio.fail_after(HANG_LIMIT), anyio.move_on_after(0) as deadline:
        result = await fetch_with_one_retry(
            answer_on_second_try(anyio.sleep_forever, anyio.lowlevel.checkpoint),
            anyio.get_cancelled_exc_class(),
            attempts,
        )
    assert result is None
    assert attempts == ["cancelled; retrying"]
    assert deadline.cancelled_caught


# -- e. Cleanup while cancelled ------------------------------------------------------------


def test_e_asyncio_cleanup_awaits_run_after_a_cancel() -> None:
    """asyncio: the cancellation was delivered once, so an await in ``finally`` completes
    without any shield."""

    async def scenario() -> list[str]:
        events: list[str] = []

        async def worker() -> None:
            try:
                await asyncio.Event().wait()
            finally:
                events.append("cleanup started")
                await asyncio.sleep(0)  # flushing the last records
                events.append("cleanup finished")

        task = asyncio.create_task(worker())
        await asyncio.sleep(0)
        task.cancel()
        async with asyncio.timeout(HANG_LIMIT):
            await asyncio.wait([task])
        assert task.cancelled()
        return events

    assert asyncio.run(scenario()) == ["cleanup started", "cleanup finished"]


def test_e_asyncio_shield_protects_the_inner_task_but_the_caller_leaves_first() -> None:
    """asyncio: ``asyncio.shield(flush)`` keeps the flush running, but the cancelled
    caller stops waiting at once: it has left (and could close what the flush writes to)
    before the flush finishes."""

    async def scenario() -> list[str]:
        events: list[str] = []
        may_finish = asyncio.Event()
        flushes: list[asyncio.Task[None]] = []

        async def flush() -> None:
            await may_finish.wait()
            events.append("flush finished")

        async def close_crawl() -> None:
            flushes.append(asyncio.create_task(flush()))
            try:
                await asyncio.shield(flushes[0])
            finally:
                events.append("caller left")

        closing = asyncio.create_task(close_crawl())
        await asyncio.sleep(0)  # close_crawl starts the flush and waits on the shield
        closing.cancel()
        async with asyncio.timeout(HANG_LIMIT):
            await asyncio.wait([closing])
            assert closing.cancelled()
            assert events == ["caller left"]
            may_finish.set()
            await flushes[0]
        return events

    assert asyncio.run(scenario()) == ["caller left", "flush finished"]


@pytest.mark.parametrize(
    ("shield", "events", "cleanup_time"),
    [
        (False, ["cleanup started"], 0),
        (True, ["cleanup started", "cleanup finished"], 1),
    ],
    ids=["unshielded", "shielded"],
)
@pytest.mark.trio
async def test_e_trio_cleanup_dies_at_its_first_checkpoint_unless_shielded(
    virtual_clock: MockClock, shield: bool, events: list[str], cleanup_time: float
) -> None:
    """Trio: an unshielded await in ``finally`` raises Cancelled at once, so the cleanup
    never finishes; inside ``CancelScope(shield=True)`` it runs its full (virtual) second."""
    seen: list[str] = []
    with trio.fail_after(HANG_LIMIT), trio.CancelScope() as crawl_scope:
        try:
            crawl_scope.cancel()
            await trio.sleep_forever()
        finally:
            seen.append("cleanup started")
            with trio.CancelScope(shield=shield):
                await trio.sleep(1)  # flushing the last records
            seen.append("cleanup finished")
    assert seen == events
    assert trio.current_time() == cleanup_time


@pytest.mark.trio
async def test_e_trio_shielded_cleanup_is_bounded_with_move_on_after(
    virtual_clock: MockClock,
) -> None:
    """Trio: ``move_on_after(5, shield=True)``, as the engine closes its HTTP clients:
    shielded from the crawl's cancellation, yet a cleanup that hangs is given up after 5 s."""
    seen: list[str] = []
    with trio.fail_after(HANG_LIMIT), trio.CancelScope() as crawl_scope:
        try:
            crawl_scope.cancel()
            await trio.sleep_forever()
        finally:
            with trio.move_on_after(5, shield=True) as cleanup_scope:
                await trio.sleep_forever()  # a peer that never acknowledges the close
            seen.append(f"cleanup gave up: {cleanup_scope.cancelled_caught}")
    assert seen == ["cleanup gave up: True"]
    assert trio.current_time() == 5


@pytest.mark.parametrize(
    ("shield", "events"),
    [(False, ["cleanup started"]), (True, ["cleanup started", "cleanup finished"])],
    ids=["unshielded", "shielded"],
)
@pytest.mark.anyio
async def test_e_anyio_cleanup_dies_at_its_first_checkpoint_unless_shielded(
    anyio_backend: tuple[str, dict[str, object]], shield: bool, events: list[str]
) -> None:
    """AnyIO, both backends: as on Trio, ``anyio.CancelScope(shield=True)`` is needed for
    an await in ``finally`` to complete inside a cancelled scope."""
    seen: list[str] = []
    with anyio.fail_after(HANG_LIMIT), anyio.CancelScope() as crawl_scope:
        try:
            crawl_scope.cancel()
            await anyio.sleep_forever()
        finally:
            seen.append("cleanup started")
            with anyio.CancelScope(shield=shield):
                await anyio.lowlevel.checkpoint()  # flushing the last records
            seen.append("cleanup finished")
    assert seen == events


# -- j. Cancelled before its first step ----------------------------------------------------


# Intended twin of taskgroup's scenario j: the same steps, a bare task instead of a group.
def test_j_asyncio_task_cancelled_before_its_first_step_never_runs() -> None:
    """asyncio: ``cancel()`` before the task's first step means the coroutine is never
    entered: neither its body nor its ``finally`` runs."""

    async def scenario() -> list[str]:
        events: list[str] = []

        async def worker() -> None:
            events.append("body started")
            try:
                await asyncio.sleep(0)
            finally:
                events.append("finally")

        task = asyncio.create_task(worker())
        task.cancel()
        async with asyncio.timeout(HANG_LIMIT):
            await asyncio.wait([task])
        assert task.cancelled()
        return events

    assert asyncio.run(scenario()) == []


@pytest.mark.trio
async def test_j_trio_task_started_in_a_cancelled_nursery_runs_to_its_first_checkpoint() -> None:
    """Trio: a task started with ``start_soon`` into an already-cancelled nursery runs its
    code up to its first checkpoint, where Cancelled is raised, so its ``finally`` runs."""
    events: list[str] = []

    async def worker() -> None:
        events.append("body started")
        try:
            await trio.lowlevel.checkpoint()
            events.append("after the first checkpoint")
        finally:
            events.append("finally")

    with trio.fail_after(HANG_LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.cancel_scope.cancel()
            nursery.start_soon(worker)
    assert events == ["body started", "finally"]


# Intended twin of the Trio test above: scenario j on AnyIO, compared in the docs' table.
@pytest.mark.anyio
async def test_j_anyio_task_started_in_a_cancelled_group_runs_to_its_first_checkpoint(
    anyio_backend: tuple[str, dict[str, object]],
) -> None:
    """AnyIO, both backends: as on Trio, even on asyncio (where a bare asyncio task
    cancelled this early would never run)."""
    events: list[str] = []

    async def worker() -> None:
        events.append("body started")
        try:
            await anyio.lowlevel.checkpoint()
            events.append("after the first checkpoint")
        finally:
            events.append("finally")

    with anyio.fail_after(HANG_LIMIT):
        async with anyio.create_task_group() as task_group:
            task_group.cancel_scope.cancel()
            task_group.start_soon(worker)
    assert events == ["body started", "finally"]


# -- h. AnyIO on asyncio: level-triggered even for native awaits; what differs ----------------


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", [anyio_backend_spec("asyncio")], ids=["asyncio"])
async def test_h_anyio_scope_cancels_native_asyncio_awaits_again(
    anyio_backend: tuple[str, dict[str, object]],
) -> None:
    """AnyIO on asyncio: inside an AnyIO scope, plain ``asyncio.Event().wait()`` and
    ``asyncio.sleep(0)`` are cancelled again after one CancelledError is swallowed, while
    the same code under bare asyncio (scenario c) runs on."""
    attempts: list[str] = []
    result = None
    with anyio.fail_after(HANG_LIMIT), anyio.move_on_after(0) as deadline:
        result = await fetch_with_one_retry(
            answer_on_second_try(asyncio_never, asyncio_checkpoint),
            asyncio.CancelledError,
            attempts,
        )
    assert result is None
    assert attempts == ["cancelled; retrying"]
    assert deadline.cancelled_caught
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_h_anyio_cancellation_exception_class_differs_by_backend(
    anyio_backend_name: str,
) -> None:
    """AnyIO: code inside a cancelled scope sees the backend's own exception,
    ``asyncio.CancelledError`` or ``trio.Cancelled``; ``anyio.get_cancelled_exc_class()``
    names it. Catch that (and re-raise it), never a hard-coded class."""
    expected = {"asyncio": asyncio.CancelledError, "trio": trio.Cancelled}[anyio_backend_name]
    seen: list[type[BaseException]] = []
    with anyio.fail_after(HANG_LIMIT), anyio.CancelScope() as scope:
        scope.cancel()
        try:
            await anyio.sleep_forever()
        except BaseException as exc:
            seen.append(type(exc))
            raise
    assert seen == [expected]
    assert anyio.get_cancelled_exc_class() is expected


@pytest.mark.anyio
async def test_h_anyio_task_group_error_group_message_differs_by_backend(
    anyio_backend_name: str,
) -> None:
    """AnyIO: a failing task group raises the built-in ExceptionGroup on both backends,
    with asyncio.TaskGroup's message on asyncio and a Trio nursery's message on Trio."""
    expected = {
        "asyncio": "unhandled errors in a TaskGroup",
        "trio": "Exceptions from Trio nursery",
    }[anyio_backend_name]

    async def fail() -> None:
        raise ZeroDivisionError("bug")

    with anyio.fail_after(HANG_LIMIT), pytest.RaisesGroup(ZeroDivisionError) as group:
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(fail)
            await anyio.sleep_forever()
    assert type(group.value) is ExceptionGroup
    assert group.value.message == expected
