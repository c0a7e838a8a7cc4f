"""Run one role of a round (Manager, Executor, Auditor, or the Auditor's format repair).

Each role is its own supervised process with its own fresh context: the prompt is built from
the evidence only (``harness.orchestrate.rounds.prompts``), never from another role's
conversation. Where it runs:

* Executor: the agent sandbox of the batch (worktree read-write), the task's adapter;
* Manager and repair: the gate sandbox (worktree read-only, no network, empty HOME);
* Auditor: the auditor sandbox (worktree read-only, no network); the runtime also digests the
  tree before and after it (``treedigest``): the read-only rule holds even without a sandbox.

A role whose adapter is proxied reaches its model only through the batch's one recording
proxy (docs/spec/runtime.md §11a): the Executor as a plain agent does; the Manager, repair and
Auditor with the proxy's socket bound read-only into their sandbox, below the bridge.

The scripted adapter runs ``harness.orchestrate.rounds.scripted_roles`` (plain text on
stdout); any other adapter runs its CLI with the role's tool policy (``AgentRequest.role``,
the adapter's flags) and its answer is the adapter's parsed final text.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from harness.verify.rules.roles import denied as role_denied

from ..adapters import CommandAdapter, get_adapter
from ..adapters.base import AgentRequest
from ..adapters.roles import role_policy, uncovered
from ..model import ModelCall
from ..modelroutes import adapter_routes, task_routes
from ..sandbox.policy import adapter_env_names, adapter_stdin, argv_files, batch_network
from ..supervise import Limits, Supervised
from ..supervise.limits import MAX_LIFETIME_S

if TYPE_CHECKING:
    from ..runner.job import BatchJob

ROLE_MODULE: Final = "harness.orchestrate.rounds.scripted_roles"
SANDBOX_ROLE: Final = {"manager": "gate", "repair": "gate", "auditor": "auditor"}


@dataclass(frozen=True)
class RoleResult:
    """What one role process answered."""

    text: str
    exit_code: int | None
    ok: bool
    """Exit 0 and, for a CLI, its adapter read a successful final answer."""
    error: str | None
    model_calls: tuple[ModelCall, ...] = ()
    stopped: bool = False
    """The operator's stop ended it."""


def adapter_of(job: BatchJob, role: str) -> tuple[str, str | None]:
    """(adapter name, model) of ``role`` for the job's rounds task."""
    task = job.tasks[0]
    spec = task.rounds
    assert spec is not None
    if role == "manager":
        return spec.manager or task.adapter, spec.manager_model or task.model
    if role in ("auditor", "repair"):
        return spec.auditor or task.adapter, spec.auditor_model or task.model
    return task.adapter, task.model


def role_routes(job: BatchJob, role: str) -> tuple[str, ...] | None:
    """The model routes of ``role``'s adapter (None: not proxied). The task's adapter keeps
    its task's ``models`` narrowing; another role adapter gets its default routes."""
    name, _ = adapter_of(job, role)
    commands = job.run.plan.commands
    task = job.tasks[0]
    if name == task.adapter:
        return task_routes(task, commands)
    return adapter_routes(name, commands)


def rounds_routes(job: BatchJob) -> tuple[str, ...] | None:
    """The allow-list of a rounds batch's one proxy: every route of a proxied role, in role
    order (Manager, Executor, Auditor; the repair is the Auditor's adapter); None when no
    role's adapter is proxied."""
    found: list[str] = []
    proxied = False
    for role in ("manager", "executor", "auditor"):
        routes = role_routes(job, role)
        if routes is None:
            continue
        proxied = True
        found += [route for route in routes if route not in found]
    return tuple(found) if proxied else None


def _adapter(job: BatchJob, name: str) -> Any:
    spec = job.run.plan.commands.get(name)
    return CommandAdapter.from_spec(spec) if spec is not None else get_adapter(name)


def _request(job: BatchJob, role: str, prompt: str, model: str | None) -> AgentRequest:
    io = job.dirs.io
    request = AgentRequest(
        batch=job.batch,
        tasks=tuple(job.tasks),
        worktree=job.worktree,
        prompt=prompt,
        prompt_file=io / f"{role}.prompt.txt",
        model=model,
        workfile=io / f"{role}.work.json",
    )
    # The repair is tool-less: it gets the strictest policy (the manager's: no tool at all).
    return dataclasses.replace(request, role="manager" if role == "repair" else role)


def role_argv(job: BatchJob, role: str, prompt: str) -> tuple[Any, AgentRequest, list[str]]:
    """(adapter, request, argv) of ``role``: what the runtime starts and records."""
    name, model = adapter_of(job, role)
    adapter = _adapter(job, name)
    request = _request(job, role, prompt, model)
    if name == "scripted":
        assert request.workfile is not None
        cli = "repair" if role == "repair" else role
        argv = [os.path.abspath(sys.executable), "-P", "-m", ROLE_MODULE, "--role", cli]
        argv += ["--workfile", str(request.workfile)]
    else:
        argv = list(adapter.argv(request))
    return adapter, request, argv


def run_role(
    job: BatchJob,
    role: str,
    prompt: str,
    work: Mapping[str, Any],
    *,
    should_stop: Callable[[], bool],
) -> RoleResult:
    """Start ``role``, wait for it (stopping it when ``should_stop`` says so), read its answer."""
    run = job.run
    adapter, request, argv = role_argv(job, role, prompt)
    request.prompt_file.write_text(prompt, encoding="utf-8")
    assert request.workfile is not None
    request.workfile.write_text(json.dumps(dict(work), sort_keys=True), encoding="utf-8")
    programs = [argv[0]]
    # A role of a proxied adapter reaches the batch's one proxy (docs/spec/runtime.md §11a):
    # its variables, no key of the operator's, and below the bridge when the proxy is on a
    # Unix socket; a role of another adapter (scripted) runs as before.
    proxy = job.proxy if role_routes(job, role) is not None else None
    if role == "executor":
        profile, env = run.sandbox.agent(
            job.dirs,
            programs=programs,
            files=argv_files(argv),
            network=batch_network(job.tasks, run.capabilities),
            adapter_env=adapter_env_names(adapter) if proxy is None else (),
            proxy_env=proxy.env if proxy is not None else None,
            egress=proxy.egress if proxy is not None else (),
        )
    else:
        profile, env = run.sandbox.gate(
            job.worktree,
            job.dirs.gate_home,
            programs=programs,
            files=argv_files(argv),
            role=SANDBOX_ROLE[role],  # type: ignore[arg-type]
            proxy_socket=proxy.socket if proxy is not None else None,
            proxy_env=proxy.env if proxy is not None else None,
            egress=proxy.egress if proxy is not None else (),
        )
    if proxy is not None:
        argv = proxy.wrap(argv)
    task = job.tasks[0]
    lifetime_s = min(MAX_LIFETIME_S, float(run.plan.lifetime_s))
    limits = Limits(wall_s=task.timeout_s, lifetime_s=lifetime_s, grace_s=run.grace_s)
    scripted = adapter_of(job, role)[0] == "scripted"
    proc = Supervised.start(
        run.sandbox.argv(profile, argv),
        cwd=job.worktree,
        limits=limits,
        env=env,
        stdin=None if scripted else adapter_stdin(adapter, request),
        sandboxed=profile.kind == "bwrap",
        progress_paths=[job.worktree] if role == "executor" else [],
    )
    stopped = False
    while True:
        outcome = proc.step(0.25)
        if outcome is not None:
            break
        if not stopped and should_stop():
            stopped = True
            proc.kill("stop")
    result = outcome.result
    if scripted:
        text = result.stdout.decode("utf-8", "replace")
        ok = result.exit_code == 0 and outcome.anomaly is None
        error = None if ok else (result.stderr.decode("utf-8", "replace")[-2000:] or "failed")
        return RoleResult(text.rstrip("\n"), result.exit_code, ok, error, (), stopped)
    output = adapter.parse(request, result)
    return RoleResult(
        output.summary,
        result.exit_code,
        bool(output.ok) and outcome.anomaly is None,
        output.error,
        tuple(output.model_calls),
        stopped,
    )


def role_policies(job: BatchJob) -> dict[str, Any]:
    """The tool policy of each role as ``round.roles`` records it; a role whose denied tool
    classes neither its CLI's flags nor the sandbox enforce is refused (``RolePolicyError``)."""
    policies: dict[str, Any] = {}
    for role in ("manager", "executor", "auditor"):
        name, model = adapter_of(job, role)
        adapter, request, _ = role_argv(job, role, "")
        if name == "scripted":  # the scripted roles have no tools at all
            denied = list(role_denied(role))
            policies[role] = {
                "adapter": name,
                "model": model,
                "denied": denied,
                "enforced_by_flags": denied,
                "flags": [],
            }
            continue
        missing = uncovered(adapter, role, read_only_mount=role != "executor")
        if missing:
            raise RolePolicyError(
                f"the {role} cannot run through {name}: nothing enforces {', '.join(missing)}"
            )
        policies[role] = role_policy(adapter, request)
    return policies


class RolePolicyError(Exception):
    """A role's tool policy cannot be enforced with the adapter the plan gives it."""
