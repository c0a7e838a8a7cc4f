"""Wiring a batch to the review gate: which batches get a socket, and their adapter.

A batch is reviewed when its agent CLI has a pre-tool hook the adapter can configure (Claude
Code) and the agent runs locally as a plain task. Rounds roles (issue 12) are confined by
their role tool policies instead, remote agents (the Ray executor) by their worker's sandbox;
every other CLI by its sandbox (docs/spec/runtime.md §23).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..adapters.claude import ClaudeAdapter
from .desk import ReviewDesk
from .hook import hook_argv, hook_timeout_s
from .protocol import ENV_WAIT

Review = tuple[Path, Mapping[str, str]]


def wire_review(run: Any, job: Any, adapter: Any) -> tuple[Any, Review | None]:
    """``(adapter, review)``: for a reviewed batch, the adapter with its hook and the socket
    plus variables for ``Sandbox.agent(review=...)``; else ``(adapter, None)``.

    The socket is listening from here on; ``close_batch`` (when the agent has ended, and at
    the batch's cleanup) removes it.
    """
    desk = ReviewDesk.of(run)
    rounds = any(getattr(run.specs[t], "rounds", None) is not None for t in job.batch.tasks)
    if not isinstance(adapter, ClaudeAdapter) or rounds or run.executor is not None:
        return adapter, None
    path = desk.open(job.batch.id, tuple(job.batch.tasks), tuple(job.lock), job.worktree)
    wired = dataclasses.replace(
        adapter, review_hook=hook_argv(), review_timeout_s=hook_timeout_s(desk.wait_s)
    )
    return wired, (path, {ENV_WAIT: str(desk.wait_s)})
