"""``ChunkPool.submit``/``collect``: jobs started early, collected later (issue 14).

The bundle verifier sends a run's receipts to the workers as they are read and collects the
outcomes at the run's end, after the store chunks went through the same pool (``map``). An
outcome must survive whatever ran in between, and a job no worker ran (a dead pool, a job that
raised) must give the in-process outcome or exception.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from harness.verify import storepool


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[storepool.ChunkPool]:
    monkeypatch.setattr(storepool, "FORK_WITH_THREADS", True)
    started = storepool.ChunkPool.start(2)
    assert started is not None
    with started:
        yield started


def square(value: int) -> tuple[int, int]:
    """Module level, so a worker gets it by name: the square, and who computed it."""
    return value * value, os.getpid()


def fails_in_workers(value: int) -> int:
    if os.getpid() != _Parent.pid:
        raise MemoryError("worker out of memory")
    if value < 0:
        raise ValueError(f"negative {value}")
    return value + 1


class _Parent:
    pid = 0


def test_submitted_outcomes_survive_a_map_in_between(pool: storepool.ChunkPool) -> None:
    tags = [(pool.submit(square, value), value) for value in range(5)]
    assert [out[0] for _, out in pool.map(square, iter(range(10, 20)))] == [
        v * v for v in range(10, 20)
    ]
    partial = pool.map(square, iter(range(30, 40)))
    next(partial)  # a map abandoned early: its later outcomes are dropped, not ours
    partial.close()
    outcomes = [pool.collect(square, tag, value) for tag, value in reversed(tags)]
    assert [square_ for square_, _ in outcomes] == [v * v for v in reversed(range(5))]
    assert all(pid != os.getpid() for _, pid in outcomes)  # really computed by the workers
    assert not pool._reserved


def test_a_job_no_worker_ran_runs_here(
    pool: storepool.ChunkPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_Parent, "pid", os.getpid())
    tag = pool.submit(fails_in_workers, 1)
    assert pool.collect(fails_in_workers, tag, 1) == 2  # raised in a worker: run here
    tag = pool.submit(fails_in_workers, -3)
    with pytest.raises(ValueError, match="negative -3"):  # the in-process exception
        pool.collect(fails_in_workers, tag, -3)
    for process in pool._processes:
        process.kill()
        process.join()
    tag = pool.submit(square, 7)
    assert pool.collect(square, tag, 7) == (49, os.getpid())  # dead workers: run here
    assert pool.broken
    assert pool.submit(square, 8) == -1
    assert pool.collect(square, -1, 8) == (64, os.getpid())
