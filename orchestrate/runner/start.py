"""The first records of a new run: the policy its decisions depend on, then the plan's tasks.

``run.start`` binds everything a verifier needs to re-decide the run (format 2,
docs/spec/records.md): the plan document (stored first, bound by digest), the effective
capability matrix, the full capsule, the harness version, the repository identity and the
run's default sandbox profile. It is recorded once; a resumed run reads it back instead
(``resume``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness import __version__
from harness.verify.fsm import TaskState

from .. import git
from ..capabilities import matrix_object
from ..capsule import capsule_digest, capsule_document
from ..plandoc import plan_bytes, plan_sha256
from .core import RunCore

S = TaskState


def start(run: RunCore) -> None:
    """Queue ``run.start``, the capsule approval (if any) and one ``task.planned`` per task."""
    run.audit("run.start", run_start_body(run))
    if run.plan.capsule is not None:
        run.audit(
            "capsule.approved",
            {
                "capsule": capsule_digest(run.plan.capsule),
                "goal": run.plan.capsule.goal,
                "expires": run.plan.capsule.expires,
            },
        )
    for task in sorted(run.plan.tasks, key=lambda t: t.order):
        run.audit(
            "task.planned",
            {
                "task": task.id,
                "role": task.role,
                "priority": task.priority,
                "depends": list(task.depends),
                "adapter": task.adapter,
                "tools": list(task.tools),
            },
        )
        run.set_state(task.id, S.PLANNED)
    run.control.begin()
    run.control_begun = True


def run_start_body(run: RunCore) -> dict[str, Any]:
    """Everything the run's decisions depend on (format 2, docs/spec/records.md): the plan
    document (stored first, bound by digest), the effective capability matrix, the full
    capsule, the harness version and the repository identity."""
    document = plan_bytes(run.plan)
    run.recorder.write_plan(document)
    base = git.head(run.repo)
    body: dict[str, Any] = {
        "plan": run.plan.name,
        "plan_sha256": plan_sha256(document),
        "producer": f"harness {__version__}",
        "harness_version": __version__,
        "base_commit": base,
        "repository_roots": git.root_commits(run.repo, base),
        "capabilities": matrix_object(run.capabilities),
        "capsule": capsule_document(run.plan.capsule) if run.plan.capsule else None,
        "sandbox": run.sandbox.run_profile(run.work),
    }
    sandbox = body.get("sandbox")
    run.run_profile = sandbox if isinstance(sandbox, Mapping) else None
    return body
