"""A child process for the Ctrl-C tests: a crawl's main task and two idle workers.

Run as ``python child_ctrl_c.py RUNTIME`` with RUNTIME one of ``asyncio`` (the chapter's
``create_task`` workers under ``asyncio.run``), ``asyncio-taskgroup``, ``trio``,
``anyio-asyncio`` or ``anyio-trio``. It prints one line per event, flushed at once:

* ``ready`` once both workers wait (the parent then sends SIGINT);
* ``worker N finally`` as each worker unwinds;
* ``main finally; workers running: K`` as the main task unwinds, with how many workers
  had not unwound yet;
* ``run raised X``, the shape of what the runtime's ``run`` raised: ``KeyboardInterrupt``
  or ``BaseExceptionGroup[KeyboardInterrupt]``. It is then re-raised, so the exit status is
  the interpreter's own for that exception.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Callable

import anyio
import trio
import trio.testing

running_workers = 0
# asyncio keeps only weak references to tasks; the chapter kept its workers in a list too.
asyncio_workers: list[asyncio.Task[None]] = []


def log(line: str) -> None:
    print(line, flush=True)


def log_main_finally() -> None:
    log(f"main finally; workers running: {running_workers}")


async def asyncio_worker(name: str) -> None:
    global running_workers
    running_workers += 1
    try:
        await asyncio.Event().wait()
    finally:
        running_workers -= 1
        log(f"{name} finally")


async def asyncio_main() -> None:
    asyncio_workers.extend(asyncio.create_task(asyncio_worker(f"worker {n}")) for n in range(2))
    try:
        await asyncio.sleep(0)  # each worker runs to its first await
        log("ready")
        await asyncio.Event().wait()  # stands for the chapter's ``await queue.join()``
    finally:
        log_main_finally()


async def asyncio_task_group_main() -> None:
    try:
        async with asyncio.TaskGroup() as task_group:
            for n in range(2):
                task_group.create_task(asyncio_worker(f"worker {n}"))
            await asyncio.sleep(0)
            log("ready")
    finally:
        log_main_finally()


async def trio_worker(name: str) -> None:
    global running_workers
    running_workers += 1
    try:
        await trio.sleep_forever()
    finally:
        running_workers -= 1
        log(f"{name} finally")


async def trio_main() -> None:
    try:
        async with trio.open_nursery() as nursery:
            for n in range(2):
                nursery.start_soon(trio_worker, f"worker {n}")
            await trio.testing.wait_all_tasks_blocked()
            log("ready")
    finally:
        log_main_finally()


# Alike by design: the same worker and main on each runtime, so only the runtime differs.
async def anyio_worker(name: str) -> None:
    global running_workers
    running_workers += 1
    try:
        await anyio.sleep_forever()
    finally:
        running_workers -= 1
        log(f"{name} finally")


async def anyio_main() -> None:
    try:
        async with anyio.create_task_group() as task_group:
            for n in range(2):
                task_group.start_soon(anyio_worker, f"worker {n}")
            await anyio.wait_all_tasks_blocked()
            log("ready")
    finally:
        log_main_finally()


def shape(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return f"{type(exc).__name__}[{', '.join(shape(inner) for inner in exc.exceptions)}]"
    return type(exc).__name__


RUNS: dict[str, Callable[[], object]] = {
    "asyncio": lambda: asyncio.run(asyncio_main()),
    "asyncio-taskgroup": lambda: asyncio.run(asyncio_task_group_main()),
    "trio": lambda: trio.run(trio_main),
    "anyio-asyncio": lambda: anyio.run(anyio_main, backend="asyncio"),
    "anyio-trio": lambda: anyio.run(anyio_main, backend="trio"),
}

if __name__ == "__main__":
    # The scenario is Python's own Ctrl-C. A parent can hand us SIGINT ignored or blocked
    # (a background job of a non-interactive shell; a test runner's worker process), in
    # which case Python installs no KeyboardInterrupt handler and the SIGINT never lands.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        RUNS[sys.argv[1]]()
    except BaseException as exc:
        log(f"run raised {shape(exc)}")
        raise
