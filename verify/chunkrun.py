"""Who checks a store's chunks: this thread, threads of this process, or worker processes.

Each runner takes the chunk tasks in order and yields each with its verdict in the same order
(an error item of the stream passes through, last), so ``storecheck``'s join is the same
whoever checked them; a check's exception is raised where the in-process runner raises it.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from .chunkcore import load_core
from .errors import VerificationError
from .storechunk import ChunkTask, ChunkVerdict, check_chunk

__all__ = ["CORE_IN_READER", "ChunkRunner", "run_here", "run_threads", "runner_for"]

CORE_IN_READER = True
"""With the compiled core, check chunks in this process even when a pool is given: the core
checks a record in about the time its line takes to reach a worker and its verdict to come
back, and it lets go of the interpreter lock while it does (docs/spec/performance.md). So
chunks go to threads here, as many as the pool has workers, and the pool's processes are
left the receipts."""


def runner_for(pool: ChunkRunner | None) -> ChunkRunner:
    """How a store's chunks are checked: here without a pool; with one, in threads where the
    compiled core is (``CORE_IN_READER``), else by the pool's processes."""
    if pool is None:
        return run_here
    workers = getattr(pool, "workers", 0)  # a ChunkPool's
    if CORE_IN_READER and workers > 1 and load_core() is not None:
        return functools.partial(run_threads, workers)
    return pool


ChunkRunner = Callable[
    [Iterator[ChunkTask | VerificationError]],
    Iterator[tuple[ChunkTask, ChunkVerdict] | VerificationError],
]
"""Checks chunks and yields each with its verdict, in the order given (errors pass through)."""


def run_here(
    tasks: Iterator[ChunkTask | VerificationError],
) -> Iterator[tuple[ChunkTask, ChunkVerdict] | VerificationError]:
    """The in-process runner: each chunk checked when the join asks for it."""
    for task in tasks:
        if isinstance(task, VerificationError):
            yield task
            return
        yield task, check_chunk(task)


def run_threads(
    workers: int, tasks: Iterator[ChunkTask | VerificationError]
) -> Iterator[tuple[ChunkTask, ChunkVerdict] | VerificationError]:
    """Chunks checked by ``workers`` threads (for the compiled core, which checks without the
    interpreter lock) while this thread reads on; verdicts yielded in chunk order, at most
    ``workers + 2`` chunks in flight (memory stays flat). An exception of a chunk's check is
    raised here, where the in-process runner raises it."""
    with ThreadPoolExecutor(workers, thread_name_prefix="harness-verify-chunks") as executor:
        window: deque[tuple[ChunkTask, Future[ChunkVerdict]]] = deque()
        try:
            for task in tasks:
                if isinstance(task, VerificationError):
                    while window:
                        done, future = window.popleft()
                        yield done, future.result()
                    yield task
                    return
                window.append((task, executor.submit(check_chunk, task)))
                if len(window) > workers + 1:
                    done, future = window.popleft()
                    yield done, future.result()
            while window:
                done, future = window.popleft()
                yield done, future.result()
        finally:
            for _, future in window:
                future.cancel()
