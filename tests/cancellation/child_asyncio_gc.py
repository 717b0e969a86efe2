"""A child process showing what asyncio reports only when a task is garbage-collected.

Run as ``python child_asyncio_gc.py MODE``; it prints one line per event, flushed at once,
and the parent reads stdout and stderr as one stream, so asyncio's own log lines (written
to stderr when the task is collected) land in order among them.

``forgotten-cancel`` (scenario a): the chapter's crawl without its ``cancel()`` loop, run
the chapter's way, ``loop.run_until_complete()`` then ``loop.close()``. The workers are
still pending when the loop closes; at interpreter exit asyncio logs "Task was destroyed
but it is pending!" for each, and their ``finally`` blocks run only then, on a closed loop.

``unretrieved-exception`` (scenario b): a worker raises; ``join()`` is left waiting, and
nothing is reported until the failed task is collected, when asyncio logs "Task exception
was never retrieved" with the traceback: here when the test drops its last reference.
"""

from __future__ import annotations

import asyncio
import gc
import sys


def log(line: str) -> None:
    print(line, flush=True)


async def worker(name: str, queue: asyncio.Queue[str]) -> None:
    try:
        while True:
            url = await queue.get()
            if url == "/bad":
                raise ZeroDivisionError(f"bug while parsing {url}")
            queue.task_done()
    finally:
        log(f"{name} finally")


async def crawl_forgetting_to_cancel() -> None:
    queue: asyncio.Queue[str] = asyncio.Queue()
    queue.put_nowait("/")
    workers = [
        asyncio.create_task(worker(f"worker {n}", queue), name=f"worker {n}") for n in range(2)
    ]
    await queue.join()
    log(f"crawl returned; workers pending: {sum(not task.done() for task in workers)}")


def forgotten_cancel() -> None:
    loop = asyncio.new_event_loop()
    loop.run_until_complete(crawl_forgetting_to_cancel())
    loop.close()
    log("loop closed")


async def crawl_with_a_bug() -> None:
    queue: asyncio.Queue[str] = asyncio.Queue()
    queue.put_nowait("/bad")
    workers = [
        asyncio.create_task(worker(f"worker {n}", queue), name=f"worker {n}") for n in range(2)
    ]
    join = asyncio.create_task(queue.join())
    # Sequence, no sleeping: wait for the failed worker, then give join() a loop iteration.
    done, idle = await asyncio.wait(workers, return_when=asyncio.FIRST_COMPLETED)
    await asyncio.sleep(0)
    log(f"worker failed; join done: {join.done()}")
    log("dropping the last references to the failed task")
    del workers, done
    gc.collect()
    log("dropped")
    for task in [*idle, join]:
        task.cancel()
    await asyncio.gather(*idle, join, return_exceptions=True)


def unretrieved_exception() -> None:
    asyncio.run(crawl_with_a_bug())


if __name__ == "__main__":
    {"forgotten-cancel": forgotten_cancel, "unretrieved-exception": unretrieved_exception}[
        sys.argv[1]
    ]()
