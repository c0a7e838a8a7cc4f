"""Bundle check "semantics", part two: the run followed its own recorded policy.

A format-2 run binds its whole policy in ``run.start`` (the plan document by digest, the
effective capability matrix, the full capsule, the sandbox profile). From those recorded
inputs only, this check re-decides every decision with the same rule the runtime used
(``harness.verify.rules``, DESIGN §9) and refuses evidence whose recorded decision differs:

* **plan**: ``run.start`` comes first; the plan member's SHA-256 is ``plan_sha256``; every
  ``task.planned`` is a task of the plan with the same role, priority, dependencies, adapter
  and tools, and every task of the plan is declared; ``capsule.approved`` names the digest of
  the recorded capsule, which is also the plan's.
* **trifecta** (``rules.trifecta.decide``): a ``capability.denied`` record must be what the
  rule says for the task under the profile it names (denied, same chain, tags and reason); a
  task the rule denies under the run's profile never opens, and one it denies under its
  spawn's profile never runs.
* **capsule** (``rules.capsule``): every ``capsule.check`` is recomputed from its recorded
  ``now`` and ``actions`` (and ``now`` is not after the record's own time); a task under a
  capsule runs only after a conforming check, runs a gate or merges a branch only when its
  latest check conforms and covers that gate or branch; a task that ends ``done`` must conform
  with the actions the records show it took (its lineage edits and deletes, its gate results,
  its merged branch), each of which its last check covered.
* **gate-integrity** (``rules.integrity``): each ``gate.integrity`` record's verdict is the
  rule's for its recorded snapshots, and a task merges only after an intact one for its batch.

Each refusal names the record, the task and the rule.
"""

from __future__ import annotations

import hashlib
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from .canonical import canonical_bytes, parse_canonical
from .errors import VerificationError
from .layout import plan_member
from .records import Record
from .rules import capsule as capsule_rule
from .rules import integrity, trifecta

PLAN_FORMAT: Final = "harness-verify/plan"
PLAN_VERSION: Final = 1


def listed_plan_member(run_id: str, listed: Container[str]) -> list[str]:
    """The run's plan member if the manifest lists it (whether it must be there is decided
    from the records: exactly the runs with a ``run.start`` carry one)."""
    name = plan_member(run_id)
    return [name] if name in listed else []


class PolicyError(VerificationError):
    """A recorded decision differs from what its rule gives for the recorded inputs."""


def _refuse(where: str, task: str | None, rule: str, detail: str) -> PolicyError:
    subject = f"task {task!r} " if task is not None else ""
    return PolicyError(f"{where}: {subject}breaks rule {rule}: {detail}")


@dataclass(frozen=True)
class PlanTask:
    """What the rules need of a task, read from the plan document."""

    id: str
    role: str
    priority: int
    depends: tuple[str, ...]
    adapter: str
    tools: tuple[str, ...]
    scope: tuple[str, ...]


def _strs(obj: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = obj.get(key)
    if type(value) is not list or any(type(item) is not str for item in value):
        raise PolicyError(f"{where}.{key} must be a list of strings")
    return tuple(value)


def parse_plan_document(data: bytes, member: str) -> tuple[str, Any, dict[str, PlanTask]]:
    """(name, capsule object or None, tasks by id) of a plan document (canonical JSON).

    Members beyond those read here are bound by the digest but not interpreted.
    """
    try:
        obj = parse_canonical(data)
    except VerificationError as exc:
        raise PolicyError(f"{member}: {exc}", member=member) from None
    if type(obj) is not dict:
        raise PolicyError(f"{member}: the plan document must be an object", member=member)
    if obj.get("format") != PLAN_FORMAT or obj.get("version") != PLAN_VERSION:
        raise PolicyError(
            f"{member}: not a {PLAN_FORMAT} version {PLAN_VERSION} document", member=member
        )
    name, tasks = obj.get("name"), obj.get("tasks")
    if type(name) is not str or type(tasks) is not list:
        raise PolicyError(f"{member}: the plan needs a name and a tasks list", member=member)
    out: dict[str, PlanTask] = {}
    for i, item in enumerate(tasks):
        where = f"{member}: tasks[{i}]"
        if type(item) is not dict:
            raise PolicyError(f"{where} must be an object", member=member)
        values = [item.get(key) for key in ("id", "role", "adapter")]
        if any(type(value) is not str for value in values) or type(item.get("priority")) is not int:
            raise PolicyError(f"{where} needs string id, role, adapter and an integer priority")
        task = PlanTask(
            id=item["id"],
            role=item["role"],
            priority=item["priority"],
            depends=_strs(item, "depends", where),
            adapter=item["adapter"],
            tools=_strs(item, "tools", where),
            scope=_strs(item, "scope", where),
        )
        if task.id in out:
            raise PolicyError(f"{where}: task id {task.id!r} repeats", member=member)
        out[task.id] = task
    return name, obj.get("capsule"), out


@dataclass(eq=False, repr=False)
class _Check:
    now: str
    actions: list[tuple[str, str]]
    conforms: bool


@dataclass(eq=False, repr=False)
class _TaskPolicy:
    spec: PlanTask
    checks: list[_Check] = field(default_factory=list)
    gates: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)
    writes: list[tuple[str, str]] = field(default_factory=list)
    batch: str | None = None
    done_at: str | None = None


@dataclass(eq=False, repr=False)
class PolicyCheck:
    """Folds one run's audit records (in order), then its lineage records."""

    run: str
    plan: bytes | None
    plan_member: str
    started: bool = False
    matrix: trifecta.Matrix | None = None
    capsule: capsule_rule.Capsule | None = None
    capsule_sha256: str | None = None
    sandbox: Mapping[str, Any] | None = None
    plan_tasks: dict[str, PlanTask] = field(default_factory=dict)
    tasks: dict[str, _TaskPolicy] = field(default_factory=dict)
    intact: dict[str, bool] = field(default_factory=dict)
    """Batch id -> whether its gates left the worktree intact (from gate.integrity)."""
    spawns: int = 0
    unsandboxed: list[str] = field(default_factory=list)
    """Batches spawned under a profile that is not a bubblewrap sandbox (shown by the
    verifier; refused when the trust policy requires a sandbox)."""

    def sandbox_kind(self) -> str:
        kind = self.sandbox.get("kind") if self.sandbox is not None else None
        return kind if isinstance(kind, str) else "unknown"

    def sandbox_opt_out(self) -> bool:
        return self.sandbox is not None and self.sandbox.get("opt_out") is True

    # ---- audit ------------------------------------------------------------------------------
    def audit(self, record: Record, where: str) -> None:
        kind, body = record.kind, record.body
        if kind == "run.start":
            self._start(body, where)
        elif not self.started:
            if kind in ("task.planned", "capability.denied", "capsule.check", "agent.spawn"):
                raise _refuse(where, None, "plan", f"{kind} before run.start")
            return
        elif kind == "task.planned":
            self._planned(body, where)
        elif kind == "capsule.approved":
            if body["capsule"] != self.capsule_sha256:
                raise _refuse(
                    where, None, "capsule", "capsule.approved names another capsule than run.start"
                )
        elif kind == "capability.denied":
            self._denied(body, where)
        elif kind == "task.transition":
            self._transition(body, record.time, where)
        elif kind == "agent.spawn":
            self._spawn(body, where)
        elif kind == "capsule.check":
            self._capsule_check(body, record.time, where)
        elif kind == "gate.result":
            task = self._task(body["task"], where)
            self._covered(task, ("gate", body["gate"]), where)
            task.gates.append(body["gate"])
        elif kind == "gate.integrity":
            self._integrity(body, where)
        elif kind == "merge.result" and body["merged"]:
            task = self._task(body["task"], where)
            if task.batch is None or not self.intact.get(task.batch, False):
                raise _refuse(
                    where,
                    task.spec.id,
                    "gate-integrity",
                    "merged without an intact gate.integrity record for its batch",
                )
            self._covered(task, ("merge", body["branch"]), where)
            task.merged.append(body["branch"])

    def _start(self, body: Mapping[str, Any], where: str) -> None:
        if self.started:
            raise _refuse(where, None, "plan", "a second run.start")
        self.started = True
        if self.plan is None:
            raise _refuse(
                where,
                None,
                "plan",
                f"run.start binds a plan but {self.plan_member} is not in the bundle",
            )
        digest = hashlib.sha256(self.plan).hexdigest()
        if digest != body["plan_sha256"]:
            raise _refuse(
                where,
                None,
                "plan",
                f"{self.plan_member} has SHA-256 {digest}, run.start binds {body['plan_sha256']}",
            )
        name, plan_capsule, self.plan_tasks = parse_plan_document(self.plan, self.plan_member)
        if name != body["plan"]:
            raise _refuse(
                where,
                None,
                "plan",
                f"run.start names plan {body['plan']!r}, the plan document is {name!r}",
            )
        try:
            self.matrix = trifecta.matrix_from_object(body["capabilities"])
            if body["capsule"] is not None:
                self.capsule = capsule_rule.capsule_from_document(body["capsule"])
        except trifecta.RuleInputError as exc:
            raise _refuse(where, None, "plan", str(exc)) from None
        if plan_capsule != body["capsule"]:
            raise _refuse(where, None, "capsule", "run.start's capsule is not the plan's")
        if body["capsule"] is not None:
            self.capsule_sha256 = hashlib.sha256(canonical_bytes(body["capsule"])).hexdigest()
        sandbox = body.get("sandbox")
        self.sandbox = sandbox if isinstance(sandbox, Mapping) else None

    def _task(self, name: str, where: str) -> _TaskPolicy:
        task = self.tasks.get(name)
        if task is None:
            raise _refuse(where, name, "plan", "not declared by task.planned")
        return task

    def _planned(self, body: Mapping[str, Any], where: str) -> None:
        name = body["task"]
        spec = self.plan_tasks.get(name)
        if spec is None:
            raise _refuse(where, name, "plan", "declared but not a task of the plan document")
        recorded = (
            body["role"],
            body["priority"],
            tuple(body["depends"]),
            body["adapter"],
            tuple(body["tools"]),
        )
        if recorded != (spec.role, spec.priority, spec.depends, spec.adapter, spec.tools):
            raise _refuse(where, name, "plan", "task.planned differs from the plan document")
        self.tasks[name] = _TaskPolicy(spec)

    def _decide(self, task: PlanTask, sandbox: Mapping[str, Any] | None) -> trifecta.Decision:
        assert self.matrix is not None
        return trifecta.decide(self.matrix, task.adapter, task.tools, sandbox)

    def _denied(self, body: Mapping[str, Any], where: str) -> None:
        task = self._task(body["task"], where)
        decision = self._decide(task.spec, body["sandbox"])
        if not decision.denied:
            raise _refuse(
                where,
                task.spec.id,
                "trifecta",
                "recorded as denied, but the rule "
                f"allows it (its chain holds only {list(decision.tags)})",
            )
        recorded = (tuple(body["tools"]), tuple(body["tags"]), body["reason"])
        if recorded != (decision.chain, decision.tags, decision.reason):
            raise _refuse(
                where,
                task.spec.id,
                "trifecta",
                "the recorded denial differs from the "
                f"rule's: {list(decision.chain)}, {list(decision.tags)}, "
                f"{decision.reason!r}",
            )

    def _transition(self, body: Mapping[str, Any], time: str, where: str) -> None:
        task = self._task(body["task"], where)
        if body["from"] == "planned" and body["to"] == "open":
            decision = self._decide(task.spec, self.sandbox)
            if decision.denied:
                raise _refuse(
                    where,
                    task.spec.id,
                    "trifecta",
                    f"opened, but the rule denies it under the run's sandbox: {decision.reason}",
                )
        if body["to"] == "done":
            task.done_at = where

    def _spawn(self, body: Mapping[str, Any], where: str) -> None:
        sandbox = body.get("sandbox")
        profile = sandbox if isinstance(sandbox, Mapping) else None
        self.spawns += 1
        if profile is None or profile.get("kind") != "bwrap":
            self.unsandboxed.append(str(body["batch"]))
        for name in body["tasks"]:
            task = self._task(name, where)
            decision = self._decide(task.spec, profile)
            if decision.denied:
                raise _refuse(
                    where,
                    name,
                    "trifecta",
                    f"ran, but the rule denies it under its spawn's sandbox: {decision.reason}",
                )
            if self.capsule is not None and not (task.checks and task.checks[-1].conforms):
                raise _refuse(where, name, "capsule", "ran without a conforming capsule.check")
            task.batch = body["batch"]

    def _capsule_check(self, body: Mapping[str, Any], time: str, where: str) -> None:
        task = self._task(body["task"], where)
        if self.capsule is None or body["capsule"] != self.capsule_sha256:
            raise _refuse(
                where, task.spec.id, "capsule", "checked against another capsule than run.start's"
            )
        now = body["now"]
        if now > time:
            raise _refuse(
                where,
                task.spec.id,
                "capsule",
                f"decided at {now}, after its own record's time {time}",
            )
        actions = [(str(kind), str(target)) for kind, target in body["actions"]]
        try:
            expected = capsule_rule.conformance(
                self.capsule, now=now, task=task.spec, actions=actions
            )
        except ValueError as exc:
            raise _refuse(where, task.spec.id, "capsule", str(exc)) from None
        if list(body["violations"]) != expected or body["conforms"] != (not expected):
            raise _refuse(
                where,
                task.spec.id,
                "capsule",
                "the recorded decision differs from "
                f"the rule's for its recorded inputs: {expected}",
            )
        task.checks.append(_Check(now, actions, not expected))

    def _covered(self, task: _TaskPolicy, action: tuple[str, str], where: str) -> None:
        if self.capsule is None:
            return
        last = task.checks[-1] if task.checks else None
        if last is None or not last.conforms or action not in last.actions:
            raise _refuse(
                where,
                task.spec.id,
                "capsule",
                f"{action[0]} {action[1]!r} was not covered by a conforming capsule.check",
            )

    def _integrity(self, body: Mapping[str, Any], where: str) -> None:
        before = integrity.WorktreeState(body["commit"], body["tree"], body["clean_before"])
        after = integrity.WorktreeState(body["head"], body["head_tree"], body["clean_after"])
        broken = integrity.violation(before, after)
        if body["intact"] != (broken is None) or body["reason"] != (broken or "unchanged"):
            name = body["tasks"][0] if body["tasks"] else None
            raise _refuse(
                where,
                name,
                "gate-integrity",
                f"the recorded verdict differs from the rule's: {broken or 'unchanged'}",
            )
        self.intact[body["batch"]] = broken is None

    # ---- lineage ----------------------------------------------------------------------------
    def lineage(self, record: Record, where: str) -> None:
        if not self.started or record.kind not in ("artifact.write", "artifact.delete"):
            return
        task = self.tasks.get(str(record.body["task"]))
        if task is not None:
            kind = "edit" if record.kind == "artifact.write" else "delete"
            task.writes.append((kind, str(record.body["path"])))

    # ---- end --------------------------------------------------------------------------------
    def finish(self) -> None:
        if not self.started:
            if self.plan is not None:
                raise _refuse(self.plan_member, None, "plan", "a plan member without run.start")
            return
        missing = sorted(set(self.plan_tasks) - set(self.tasks))
        if missing:
            raise _refuse(self.plan_member, missing[0], "plan", "in the plan but never declared")
        if self.capsule is None:
            return
        for name, task in self.tasks.items():
            if task.done_at is None:
                continue
            self._done_conforms(name, task)

    def _done_conforms(self, name: str, task: _TaskPolicy) -> None:
        assert self.capsule is not None and task.done_at is not None
        last = task.checks[-1] if task.checks else None
        if last is None or not last.conforms:
            raise _refuse(task.done_at, name, "capsule", "done without a conforming check")
        actual: Sequence[tuple[str, str]] = [
            *task.writes,
            *(("gate", gate) for gate in task.gates),
            *(("merge", branch) for branch in task.merged),
        ]
        unchecked = [action for action in actual if action not in last.actions]
        if unchecked:
            kind, target = unchecked[0]
            raise _refuse(
                task.done_at,
                name,
                "capsule",
                f"done, but its {kind} {target!r} was never checked against the capsule",
            )
        violations = capsule_rule.conformance(
            self.capsule, now=last.now, task=task.spec, actions=actual
        )
        if violations:
            raise _refuse(
                task.done_at,
                name,
                "capsule",
                "done, but what it did does not conform: " + "; ".join(violations),
            )
