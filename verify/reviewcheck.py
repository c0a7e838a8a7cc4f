"""Run check "reviews": every recorded action review re-decided (issue 13 §5).

The runtime answers an agent's pre-tool hook with ``harness.verify.rules.review`` and records
``action.review`` {task, batch, review, tool, input_sha256, target, class, phase, decision,
reason, approval} before it answers (docs/spec/review.md). Folding the audit store in order,
then the control store, this check recomputes what the rule decides from the recorded members
and the evidence around them, and refuses (docs/spec/verifier.md, "Reviews"):

* a review outside its batch: the batch has no ``agent.started`` before it, or its
  ``agent.exit`` came first; a ``task`` that is not one of the batch's;
* review numbers that are not 1, 2, ... per batch (each once; at the batch's ``agent.exit``
  exactly 1..n were recorded);
* an unknown class or decision, or a ``phase`` that is not the one in force (the ``phase`` of
  the latest ``control.phase``; ``implement`` before any);
* a wrong class (``classify(tool, target)`` differs), a wrong decision or reason (``decide``
  on the recomputed inputs differs): ``in_scope`` from the batch's lock (the union of its
  tasks' scopes, bound to the plan by the locks check), ``locked`` from the locks other
  batches held at that point (``lock.acquire``/``lock.release``), ``host_known`` from the
  plan's capsule egress hosts and the task's earlier approved egress;
* an allow of an irreversible action without an approval (named separately: the rule's
  central promise);
* an approval that names no ``command.receipt`` before the review, a receipt whose outcome is
  not ``applied``, an approval used twice, an approval on a review that needed none, and (in
  the control store) an approval command that is not ``approve`` with ``args.review`` equal to
  ``<batch>/<review>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import VerificationError
from .records import Record
from .rules.review import (
    CLASSES,
    DECISIONS,
    DEFAULT_PHASE,
    PATH_TOOLS,
    classify,
    decide,
    egress_host,
    needs_approval,
    strictness_of,
)
from .rules.scope import glob_match, in_scope
from .runchecks import plan_object


class ReviewError(VerificationError):
    """An action review the rule does not reproduce, or one outside its batch or protocol."""


@dataclass(eq=False, repr=False)
class _Batch:
    tasks: tuple[str, ...]
    lock: tuple[str, ...]
    started: bool = False
    exited: bool = False
    numbers: set[int] = field(default_factory=set)


@dataclass(eq=False, repr=False)
class ReviewCheck:
    egress: frozenset[str]
    """The plan's capsule egress hosts (empty: none, or no plan member)."""
    phase: str = DEFAULT_PHASE
    batches: dict[str, _Batch] = field(default_factory=dict)
    held: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """batch -> lock globs, while held."""
    receipts: dict[str, tuple[str, str]] = field(default_factory=dict)
    """command id -> (outcome, where)."""
    used: dict[str, tuple[str, str]] = field(default_factory=dict)
    """approval command id -> (``batch/review``, where the review is)."""
    known: dict[str, set[str]] = field(default_factory=dict)
    """task -> hosts approved for it so far."""
    commands: dict[str, tuple[str, Mapping[str, Any], str]] = field(default_factory=dict)
    """command id -> (name, args, where), from the control store."""

    def audit(self, record: Record, where: str) -> None:
        kind = record.kind
        body = record.body
        if kind == "control.phase":
            self.phase = str(body["phase"])
        elif kind == "lock.acquire":
            self.held[str(body["batch"])] = tuple(body["globs"])
        elif kind == "lock.release":
            self.held.pop(str(body["batch"]), None)
        elif kind == "agent.spawn":
            tasks = tuple(str(t) for t in body["tasks"])
            self.batches[str(body["batch"])] = _Batch(tasks, tuple(body["lock"]))
        elif kind == "agent.started":
            batch = self.batches.get(str(body["batch"]))
            if batch is not None:
                batch.started = True
        elif kind == "agent.exit":
            self._exit(str(body["batch"]), where)
        elif kind == "command.receipt":
            self.receipts.setdefault(str(body["id"]), (str(body["outcome"]), where))
        elif kind == "action.review":
            self._review(body, where)

    def _exit(self, name: str, where: str) -> None:
        batch = self.batches.get(name)
        if batch is None:
            return
        batch.exited = True
        expected = set(range(1, len(batch.numbers) + 1))
        if batch.numbers != expected:
            missing = sorted(expected - batch.numbers)
            raise ReviewError(
                f"{where}: batch {name!r} exits with reviews {sorted(batch.numbers)}: the "
                f"numbers must be 1..{len(batch.numbers)}, {missing} missing"
            )

    def _review(self, body: Mapping[str, Any], where: str) -> None:
        name = str(body["batch"])
        number = int(body["review"])
        label = f"review {name}/{number}"
        batch = self.batches.get(name)
        if batch is None or not batch.started:
            raise ReviewError(f"{where}: {label} comes before its batch's agent.started")
        if batch.exited:
            raise ReviewError(f"{where}: {label} comes after its batch's agent.exit")
        task = str(body["task"])
        if task not in batch.tasks:
            raise ReviewError(
                f"{where}: {label} names task {task!r}, not one of the batch's {list(batch.tasks)}"
            )
        if number < 1 or number in batch.numbers:
            raise ReviewError(f"{where}: {label} is numbered twice or below 1")
        batch.numbers.add(number)
        cls = str(body["class"])
        if cls not in CLASSES:
            raise ReviewError(f"{where}: {label} has an unknown class {cls!r}")
        decision = str(body["decision"])
        if decision not in DECISIONS:
            raise ReviewError(f"{where}: {label} has an unknown decision {decision!r}")
        if body["phase"] != self.phase:
            raise ReviewError(
                f"{where}: {label} records phase {body['phase']!r}, but the phase in force "
                f"is {self.phase!r}"
            )
        try:
            strictness = strictness_of(self.phase)
        except ValueError as exc:
            raise ReviewError(f"{where}: {label}: {exc}") from None
        tool = str(body["tool"])
        target = str(body["target"])
        expected_class = classify(tool, target)
        if cls != expected_class:
            raise ReviewError(
                f"{where}: {label} classifies {tool} {target!r} as {cls!r}; the rule says "
                f"{expected_class!r}"
            )
        path = tool in PATH_TOOLS and cls == "write"
        scoped = in_scope(target, batch.lock) if path else True
        locked = path and any(
            glob_match(glob, target)
            for other, globs in self.held.items()
            if other != name
            for glob in globs
        )
        host = egress_host(tool, target)
        known = bool(host) and (host in self.egress or host in self.known.get(task, set()))
        approval = body["approval"]
        if approval is not None:
            self._approval(str(approval), label, where, cls, strictness, known)
        if (
            decision == "allow"
            and cls == "irreversible"
            and approval is None
            and not (known and strictness in ("loose", "normal"))
        ):
            raise ReviewError(f"{where}: {label} allows an irreversible action without approval")
        expected = decide(
            cls, in_scope=scoped, locked=locked, strictness=strictness,
            approved=approval is not None, host_known=known,
        )  # fmt: skip
        if (decision, body["reason"]) != expected:
            raise ReviewError(
                f"{where}: {label} decides {decision!r} ({body['reason']!r}); the rule decides "
                f"{expected[0]!r} ({expected[1]!r}) for class {cls}, {strictness} review, "
                f"in scope {scoped}, locked {locked}, approved {approval is not None}, "
                f"known host {known}"
            )
        if host and approval is not None:  # an approved call was allowed (decide says so)
            self.known.setdefault(task, set()).add(host)

    def _approval(
        self, command: str, label: str, where: str, cls: str, strictness: str, known: bool
    ) -> None:
        receipt = self.receipts.get(command)
        if receipt is None:
            raise ReviewError(
                f"{where}: {label} names approval {command!r}, which has no command.receipt "
                "before it"
            )
        if receipt[0] != "applied":
            raise ReviewError(
                f"{where}: {label} names approval {command!r}, whose receipt ({receipt[1]}) is "
                f"{receipt[0]!r}, not 'applied'"
            )
        if command in self.used:
            raise ReviewError(
                f"{where}: {label} reuses approval {command!r}, already given to "
                f"{self.used[command][0]} ({self.used[command][1]})"
            )
        if not needs_approval(cls, strictness=strictness, host_known=known):
            raise ReviewError(
                f"{where}: {label} carries approval {command!r}, but a {cls} call in "
                f"{strictness} review needs none"
            )
        self.used[command] = (label.removeprefix("review "), where)

    def control(self, record: Record, where: str) -> None:
        if record.kind == "command":  # args: an object (records.md, the control store)
            body = record.body
            self.commands.setdefault(str(body["id"]), (str(body["command"]), body["args"], where))

    def lineage(self, record: Record, where: str) -> None:
        return None

    def finish(self) -> None:
        """Every approval names an ``approve`` command for exactly its review."""
        for command, (review, at) in sorted(self.used.items()):
            found = self.commands.get(command)
            if found is None:
                raise ReviewError(
                    f"{at}: approval {command!r} of review {review} names no command of the "
                    "control store"
                )
            name, args, where = found
            if name != "approve" or args.get("review") != review:
                raise ReviewError(
                    f"{at}: approval {command!r} of review {review} is the {name!r} command "
                    f"at {where} with review {args.get('review')!r}, not an approve of {review}"
                )


def capsule_egress(plan: bytes | None) -> frozenset[str]:
    """The plan member's capsule egress hosts (empty without a plan member or capsule)."""
    document = plan_object(plan)
    capsule = document.get("capsule") if document is not None else None
    hosts = capsule.get("egress") if type(capsule) is dict else None
    if type(hosts) is not list:
        return frozenset()
    return frozenset(str(h) for h in hosts if type(h) is str)


def review_check(run: str, plan: bytes | None) -> ReviewCheck:
    """The check for one run. The batches' scopes come from ``agent.spawn.lock``, which the
    locks check binds to the plan member; the plan gives the capsule's egress hosts."""
    del run  # every message names the record; the run is the bundle member's
    return ReviewCheck(capsule_egress(plan))
