"""Where a batch's agent runs: a local supervised process, or a remote executor's task."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..supervise import Supervised

if TYPE_CHECKING:
    from .core import RunCore
    from .job import BatchJob


def start_agent(run: RunCore, job: BatchJob, meter: Any) -> Any:
    """Start ``job``'s agent; the handle steps like ``Supervised`` (``step``/``kill``/``done``).

    Locally: a supervised process in the batch's sandbox, its worktree watched for progress,
    its output fed to the usage meter.
    """
    if run.executor is not None:
        return run.executor.start(run, job)
    return Supervised.start(
        job.argv,
        cwd=job.worktree,
        limits=job.limits,
        env=job.env,
        stdin=job.stdin,
        sandboxed=job.sandboxed,
        progress_paths=[job.worktree],
        on_output=meter.feed if meter is not None else None,
    )
