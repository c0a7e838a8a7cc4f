"""Worker processes that check store chunks while the verifier reads on (docs/spec/performance.md).

Why processes: the per-record checks are Python work under one interpreter lock; a chunk's
checks need nothing from other chunks (``storechunk``), so they spread over every core. The
reader stays the only process that sees the archive, joins the verdicts strictly in chunk
order and folds the records into the checks that need the whole history (``storecheck``).

Choices, and why:

* **fork**, started before any thread of ours exists (the progress ticker starts later): a
  forked worker has every module already imported, so a pool costs milliseconds, not the
  interpreter start-up that ``spawn``/``forkserver`` pay. Where fork is unavailable, or the
  process already runs other threads (fork would copy their held locks), there is no pool and
  chunks are checked in-process: same verdicts, one core.
* Two queues shared by all workers: a free worker takes the next chunk (no straggler waits
  for a busy one), and ``multiprocessing.Queue`` writes from a feeder thread, so neither side
  ever blocks on a full pipe while the other waits for it.
* A bounded window of chunks in flight (``workers + 2``: about one in hand and one queued per
  worker), so memory stays flat whatever the store's size; verdicts that arrive early wait in
  a small dict for their turn.
* A worker that dies or fails unexpectedly never hangs or changes a verdict: the reader
  checks its chunks itself (``check_chunk`` is deterministic), so the outcome, and any
  exception, is the one the in-process path gives.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import queue
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, TypeVar

from .errors import VerificationError
from .storechunk import ChunkTask, ChunkVerdict, check_chunk

if TYPE_CHECKING:  # imported when a pool starts: small bundles never pay for it
    import multiprocessing
    from multiprocessing.process import BaseProcess

POLL_SECONDS: Final = 0.5
"""How often the reader, waiting for a verdict, checks that the workers are still alive."""
MIN_PARALLEL_BYTES: Final = 4 << 20
"""Inputs smaller than this are checked in-process: a pool would cost more than it saves."""

FORK_WITH_THREADS = False
"""Fork even though other threads run. Only for test harnesses whose own threads (pytest-xdist's
channel) hold no lock the workers could need; a verifier inside a threaded program stays on one
process."""

P = TypeVar("P")
R = TypeVar("R")

_Result = tuple[int, bool, object]
"""(tag, done, outcome): ``done`` False when the job raised (the reader runs it again)."""
_Task = tuple[int, "Callable[[Any], object]", object]


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _work(
    tasks: multiprocessing.Queue[_Task | None], results: multiprocessing.Queue[_Result]
) -> None:
    """A worker's loop: run jobs until told to stop; a job that raised is reported undone.

    Ctrl-C is the reader's to handle (it reaches the whole process group): a worker ignores it
    and is stopped by the reader, or ends with it as a daemon.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.freeze()  # the reader's objects, inherited: never traversed (nor their pages copied)
    while (item := tasks.get()) is not None:
        tag, job, payload = item
        try:
            outcome = job(payload)
        except BaseException:  # the reader runs the job again and meets the same failure
            results.put((tag, False, None))
        else:
            results.put((tag, True, outcome))


class ChunkPool:
    """Chunk checks in ``workers`` forked processes, verdicts handed back in chunk order.

    Use as a context manager; call it (a ``chunkrun.ChunkRunner``) once per store, ``map``
    another job over its payloads, or ``submit`` jobs to ``collect`` later (the receipts,
    ``receiptprefetch``).
    ``ChunkPool.start`` returns None where a pool cannot be used safely.
    """

    def __init__(self, workers: int) -> None:
        import multiprocessing

        context = multiprocessing.get_context("fork")
        self._tasks: multiprocessing.Queue[_Task | None] = context.Queue()
        self._results: multiprocessing.Queue[_Result] = context.Queue()
        self._processes: list[BaseProcess] = []
        self._next_tag = 0
        self._early: dict[int, tuple[bool, object]] = {}
        self._reserved: set[int] = set()
        """Tags of ``submit``ted jobs not yet ``collect``ed: their outcomes are kept whatever
        else runs in between."""
        self.window = workers + 2
        self.workers = workers
        for _ in range(workers):
            process = context.Process(
                target=_work, args=(self._tasks, self._results), name="harness-verify-chunks"
            )
            process.daemon = True
            process.start()
            self._processes.append(process)
        self.broken = False

    @classmethod
    def start(cls, workers: int) -> ChunkPool | None:
        """A pool of ``workers`` processes, or None: fewer than 2 wanted, no fork here, or
        other threads running (a fork would copy their locks, possibly held)."""
        if workers < 2 or (threading.active_count() > 1 and not FORK_WITH_THREADS):
            return None
        import multiprocessing

        if "fork" not in multiprocessing.get_all_start_methods():
            return None
        return cls(workers)

    def __enter__(self) -> ChunkPool:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers (they finish the chunk in hand) and release the queues."""
        for _ in self._processes:
            with contextlib.suppress(Exception):
                self._tasks.put(None)
        for process in self._processes:
            process.join(timeout=2)
            if process.is_alive():
                process.kill()
                process.join()
        self._processes.clear()
        for channel in (self._tasks, self._results):
            channel.close()
            channel.cancel_join_thread()

    def __call__(
        self, tasks: Iterator[ChunkTask | VerificationError]
    ) -> Iterator[tuple[ChunkTask, ChunkVerdict] | VerificationError]:
        """Yield each chunk with its verdict in order; an error item passes through, last."""
        final: list[VerificationError] = []

        def chunks() -> Iterator[ChunkTask]:
            for task in tasks:
                if isinstance(task, VerificationError):
                    final.append(task)
                    return
                yield task

        yield from self.map(check_chunk, chunks())
        yield from final

    def map(self, job: Callable[[P], R], payloads: Iterator[P]) -> Iterator[tuple[P, R]]:
        """``(payload, job(payload))`` for each payload, in order, the jobs run by the workers
        (a module-level ``job``: it is sent by name). A job no worker could run (it raised, or
        its worker died) is run here, so its outcome, or exception, is the in-process one."""
        pickle.dumps(job)  # a job the queue's feeder thread cannot send would never return
        # outcomes of an earlier call that stopped early go; those of submitted jobs stay
        self._early = {tag: got for tag, got in self._early.items() if tag in self._reserved}
        pending: deque[tuple[int, P]] = deque()
        for payload in payloads:
            if self.broken:
                pending.append((-1, payload))
            else:
                tag = self._next_tag
                self._next_tag += 1
                self._tasks.put((tag, job, payload))
                pending.append((tag, payload))
            while len(pending) >= self.window:
                yield self._take(job, pending.popleft())
        while pending:
            yield self._take(job, pending.popleft())

    def submit(self, job: Callable[[P], R], payload: P) -> int:
        """Start ``job(payload)`` on a worker now; ``collect`` its outcome later (in any order
        with ``map``). Returns its tag (-1: the pool is broken, ``collect`` runs it here)."""
        if self.broken:
            return -1
        tag = self._next_tag
        self._next_tag += 1
        self._tasks.put((tag, job, payload))
        self._reserved.add(tag)
        return tag

    def collect(self, job: Callable[[P], R], tag: int, payload: P) -> R:
        """The outcome of a ``submit``ted job; run here, with the in-process outcome or
        exception, if no worker could run it."""
        try:
            return self._take(job, (tag, payload))[1]
        finally:
            self._reserved.discard(tag)

    def _take(self, job: Callable[[P], R], item: tuple[int, P]) -> tuple[P, R]:
        tag, payload = item
        done, outcome = self._wait(tag) if tag >= 0 else (False, None)
        if not done:  # no worker could run it: run it here, with the same outcome
            return payload, job(payload)
        return payload, outcome  # type: ignore[return-value]  # job(payload), in a worker

    def _wait(self, tag: int) -> tuple[bool, object]:
        """The outcome of job ``tag``; outcomes of later jobs are kept, of abandoned earlier
        ones (a store whose check stopped) dropped."""
        while tag not in self._early:
            if self.broken:
                return False, None
            try:
                got, done, outcome = self._results.get(timeout=POLL_SECONDS)
            except queue.Empty:
                if not all(process.is_alive() for process in self._processes):
                    self.broken = True
                continue
            if got >= tag or got in self._reserved:
                self._early[got] = (done, outcome)
        return self._early.pop(tag)
