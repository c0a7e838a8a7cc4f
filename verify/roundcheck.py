"""Run check "rounds": every audited round is re-decided from its recorded texts.

A rounds task (issue 12) runs Manager / Executor / Auditor rounds. The runtime records, per
task and in audit order: ``round.roles`` (once per task per epoch), then per round
``round.plan`` -> [``round.step`` -> ``round.audit``] -> ``round.end`` (+ ``round.gate`` when
the outcome is ``gate``), and ``round.input`` for the operator's answers and instructions. The
texts (plan, claim, report, repair answer, question, operator input) are bundle members
``runs/<run>/rounds/<sha256>.txt`` the records cite by digest. This fold re-parses every text
with the rules the runtime used (``harness.verify.rules.header``) and re-decides every round
(``harness.verify.rules.rounds``), so a recorded decision that differs from its recorded inputs
is refused (docs/spec/verifier.md §3.8, "Rounds"):

* every digest names a member whose bytes hash to it and are UTF-8; a rounds member no record
  names is refused (at the end of the run);
* ``round.plan``: ``next``/``valid``/``cites`` equal ``parse_next``/``accept_done``/
  ``parse_cites`` of the plan text (``next`` is null when the plan is invalid, a ``done`` that
  ``accept_done`` refuses included);
* ``round.step``: ``changed`` is false iff ``commit_before == commit_after`` and no path
  changed; ``commit_before`` is the previous round's checkpoint (unless a crash came between);
* ``round.audit``: the header parsed from the report (or from the repair answer, when a repair
  was needed), else ``REPLACEMENT``, and ``VIOLATION`` when the auditor's tree changed; ghost
  success and the effective status are the rules';
* ``round.end``: ``decide_round`` of the round, with the failing count of the previous round
  (0 at the first, 0 after a gate closed by ``approve``); the checkpoint is the step's commit;
* rounds are numbered 1, 2, 3... per task across epochs; a round left unfinished is allowed
  only before a crash (``run.status starting``; the next round then reuses its number; the
  recovery may suspend the task, in_progress -> blocked) or when the task leaves
  ``in_progress`` for ``failed``/``cancelled``; never at ``run.end``;
* a ``done`` round is followed by the task's ``in_progress -> gating``, an ``incomplete`` or
  ``blocked`` one by ``in_progress -> blocked``, and a ``violation`` by no merge of the task.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from .errors import VerificationError
from .layout import (
    ROUND_TEXT_MAX_BYTES,
    ROUND_TEXTS_MAX_BYTES,
    round_text_digest,
    round_text_member,
)
from .records import Record
from .rules.header import (
    REPLACEMENT,
    VIOLATION,
    Header,
    accept_done,
    effective_status,
    parse_cites,
    parse_header,
    parse_next,
)
from .rules.rounds import MAX_ROUNDS_CEILING, decide_round, is_ghost

ROLE_NAMES: Final = ("auditor", "executor", "manager")
"""The roles ``round.roles.roles`` names, each mapped to its recorded tool policy."""
INPUT_KINDS: Final = ("answer", "approve", "instruct")
"""``round.input.kind``: an answer to an ask or gate, an approval of the gate, an instruction."""


class RoundError(VerificationError):
    """A round record disagrees with its texts, with the rules or with the rounds before it."""


def _roles_rule() -> ModuleType | None:
    """``harness.verify.rules.roles`` (the role tool policies) when it is installed."""
    try:
        return importlib.import_module(f"{__package__}.rules.roles")
    except ModuleNotFoundError:
        return None


@dataclass(eq=False, repr=False)
class _Round:
    number: int
    valid: bool
    next: str | None
    step: Mapping[str, Any] | None = None
    audit: tuple[str, Header] | None = None
    """(effective status, header as re-decided) of the round's audit."""


@dataclass(eq=False, repr=False)
class _Task:
    roles: dict[int, int] = field(default_factory=dict)
    """epoch -> max_rounds, from ``round.roles``."""
    ended: int = 0
    """The number of the task's last ended round (0: none yet)."""
    failing: int = 0
    open: _Round | None = None
    checkpoint: str | None = None
    checkpoint_sure: bool = False
    """Whether the next step must start from ``checkpoint`` (no crash since it was taken)."""
    latest: tuple[str, Header] | None = None
    """(effective, header) of the task's latest audit in an ended round (for ``accept_done``)."""
    gate_record: tuple[int, bool] | None = None
    """(round, asked): a ``gate`` round.end whose ``round.gate`` record is due next."""
    gate_open: int | None = None
    """The round of a gate not yet closed by an ``approve`` or ``answer`` input."""
    expect: tuple[str, str] | None = None
    """(target state, where): the transition a done/incomplete/blocked round demands next."""
    violated: str | None = None
    """Where a round of the task ended ``violation``: the task is never merged."""
    recovering: bool = False
    """A ``run.status starting`` came since the task's last round record: the crash recovery
    may suspend the task (in_progress -> blocked) without a round.end."""


@dataclass(eq=False, repr=False)
class RoundCheck:
    run: str
    texts: dict[str, bytes]
    """digest -> bytes of every rounds member of the run."""
    epoch: int = 0
    tasks: dict[str, _Task] = field(default_factory=dict)
    named: set[str] = field(default_factory=set)
    declared: set[str] = field(default_factory=set)
    """Tasks declared by ``task.planned``: only those run rounds."""
    decoded: dict[str, str] = field(default_factory=dict)
    roles_rule: ModuleType | None = field(default_factory=_roles_rule)

    # ---- texts ---------------------------------------------------------------------------------
    def _text(self, digest: str, where: str, what: str) -> str:
        """The text a record cites: a member whose bytes hash to ``digest``, in UTF-8."""
        self.named.add(digest)
        known = self.decoded.get(digest)
        if known is not None:
            return known
        name = round_text_member(self.run, digest)
        data = self.texts.get(digest)
        if data is None:
            raise RoundError(f"{where}: the {what} {digest} has no member {name}")
        if hashlib.sha256(data).hexdigest() != digest:
            raise RoundError(f"{where}: member {name}: its bytes do not hash to its name")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RoundError(
                f"{where}: member {name} ({what}) is not UTF-8: byte {exc.start}"
            ) from None
        self.decoded[digest] = text
        return text

    # ---- the fold ------------------------------------------------------------------------------
    def audit(self, record: Record, where: str) -> None:
        kind = record.kind
        body = record.body
        if kind.startswith("round."):
            self._epoch(kind, body, where)
            handler = _HANDLERS.get(kind)
            if handler is not None:
                handler(self, body, where)
        elif kind == "task.planned":
            self.declared.add(str(body["task"]))
        elif kind == "run.status":
            self._status(body)
        elif kind == "task.transition":
            self._transition(body, where)
        elif kind == "merge.result" and body["merged"]:
            task = self.tasks.get(str(body["task"]))
            if task is not None and task.violated is not None:
                raise RoundError(
                    f"{where}: task {body['task']!r} is merged after its round ended "
                    f"'violation' ({task.violated})"
                )
        elif kind == "run.end":
            self._run_end(where)

    def _epoch(self, kind: str, body: Mapping[str, Any], where: str) -> None:
        if body["epoch"] != self.epoch:
            raise RoundError(
                f"{where}: {kind} of task {body['task']!r} is recorded in epoch "
                f"{body['epoch']}, the run is in epoch {self.epoch}"
            )

    def _task(self, kind: str, body: Mapping[str, Any], where: str) -> _Task:
        """The rounds task a record names: its ``round.roles`` of this epoch came first."""
        task = self.tasks.get(str(body["task"]))
        if task is None or self.epoch not in task.roles:
            raise RoundError(
                f"{where}: {kind} of task {body['task']!r} before the task's round.roles of "
                f"epoch {self.epoch}"
            )
        return task

    def _open(self, kind: str, body: Mapping[str, Any], where: str) -> tuple[_Task, _Round]:
        task = self._task(kind, body, where)
        current = task.open
        if current is None or current.number != body["round"]:
            state = f"round {current.number} is open" if current else "no round is open"
            raise RoundError(
                f"{where}: {kind} of task {body['task']!r} names round {body['round']}, but {state}"
            )
        return task, current

    def _status(self, body: Mapping[str, Any]) -> None:
        self.epoch = int(body["epoch"])
        if body["status"] != "starting":
            return
        for task in self.tasks.values():  # a crash (or a continue): unfinished rounds are left
            task.open = None  # the next round reuses its number (the last ended + 1)
            task.gate_record = None
            task.checkpoint_sure = False
            task.recovering = True

    def _roles(self, body: Mapping[str, Any], where: str) -> None:
        name = str(body["task"])
        if name not in self.declared:
            raise RoundError(f"{where}: round.roles of task {name!r}, which was never declared")
        task = self.tasks.setdefault(name, _Task())
        if self.epoch in task.roles:
            raise RoundError(f"{where}: round.roles of task {name!r} again in epoch {self.epoch}")
        max_rounds = body["max_rounds"]
        if not 1 <= max_rounds <= MAX_ROUNDS_CEILING:
            raise RoundError(
                f"{where}: round.roles of task {name!r}: max_rounds {max_rounds} is not "
                f"1..{MAX_ROUNDS_CEILING}"
            )
        roles = body["roles"]
        if sorted(roles) != list(ROLE_NAMES):
            raise RoundError(
                f"{where}: round.roles of task {name!r} names roles {sorted(roles)}, expected "
                f"{list(ROLE_NAMES)}"
            )
        for role in ROLE_NAMES:
            policy = roles[role]
            if type(policy) is not dict:
                raise RoundError(f"{where}: round.roles of task {name!r}: {role} is no object")
            if self.roles_rule is not None:
                expected = list(self.roles_rule.denied(role))
                if policy.get("denied") != expected:
                    raise RoundError(
                        f"{where}: round.roles of task {name!r}: the {role} is denied "
                        f"{policy.get('denied')!r}, the role rule denies {expected}"
                    )
        task.roles[self.epoch] = max_rounds

    def _plan(self, body: Mapping[str, Any], where: str) -> None:
        name = str(body["task"])
        task = self._task("round.plan", body, where)
        number = body["round"]
        what = f"round.plan of task {name!r} round {number}"
        if task.open is not None:
            raise RoundError(f"{where}: {what}, but round {task.open.number} is unfinished")
        if task.gate_record is not None:
            raise RoundError(
                f"{where}: {what}, but round {task.gate_record[0]} ended 'gate' without its "
                "round.gate record"
            )
        if task.gate_open is not None:
            raise RoundError(
                f"{where}: {what}, but the gate of round {task.gate_open} was not closed by an "
                "approve or answer input"
            )
        if task.expect is not None:
            raise RoundError(
                f"{where}: {what}, but the round ended at {task.expect[1]} demands the task's "
                f"in_progress -> {task.expect[0]} first"
            )
        expected = task.ended + 1
        if number != expected:
            raise RoundError(f"{where}: {what}: expected round {expected}")
        text = self._text(body["text"], f"{where}: {what}", "plan text")
        parsed = parse_next(text)
        latest_effective, latest = task.latest if task.latest else (None, None)
        valid = parsed.action is not None and (
            parsed.action != "done" or accept_done(latest_effective, latest)
        )
        recorded = (body["next"], body["valid"])
        if recorded != (parsed.action if valid else None, valid):
            why = parsed.problem or (
                "'done' refused: the latest audit is not complete, clean and aligned"
                if not valid
                else f"next {parsed.action!r}"
            )
            raise RoundError(
                f"{where}: {what} records next {body['next']!r} valid "
                f"{str(body['valid']).lower()}, the plan text gives next "
                f"{parsed.action if valid else None!r} valid {str(valid).lower()} ({why})"
            )
        cites = list(parse_cites(text))
        if body["cites"] != cites:
            raise RoundError(
                f"{where}: {what} records cites {body['cites']}, the plan text cites {cites}"
            )
        task.recovering = False
        task.open = _Round(number, valid, parsed.action if valid else None)

    def _step(self, body: Mapping[str, Any], where: str) -> None:
        task, current = self._open("round.step", body, where)
        what = f"round.step of task {body['task']!r} round {current.number}"
        if not current.valid or current.next not in ("gui", "cli") or current.step is not None:
            raise RoundError(
                f"{where}: {what}, but the round's plan is "
                + ("already stepped" if current.step is not None else f"next {current.next!r}")
            )
        paths = list(body["paths"])
        if paths != sorted(set(paths)):
            raise RoundError(f"{where}: {what}: paths must be sorted without repeats")
        unchanged = body["commit_before"] == body["commit_after"] and not paths
        if body["changed"] == unchanged:
            raise RoundError(
                f"{where}: {what} records changed {str(body['changed']).lower()}, but commit "
                f"{body['commit_before'][:12]} -> {body['commit_after'][:12]} with "
                f"{len(paths)} changed paths"
            )
        if task.checkpoint_sure and body["commit_before"] != task.checkpoint:
            raise RoundError(
                f"{where}: {what} starts from {body['commit_before'][:12]}, not from the "
                f"verified progress of round {task.ended} ({str(task.checkpoint)[:12]})"
            )
        self._text(body["text"], f"{where}: {what}", "executor claim")
        current.step = body

    def _audit(self, body: Mapping[str, Any], where: str) -> None:
        _, current = self._open("round.audit", body, where)
        what = f"round.audit of task {body['task']!r} round {current.number}"
        step = current.step
        if step is None or current.audit is not None:
            raise RoundError(
                f"{where}: {what}, but the round has "
                + ("no round.step" if step is None else "an audit already")
            )
        report = self._text(body["text"], f"{where}: {what}", "auditor report")
        parsed = parse_header(report)
        if body["repair"] is not None:
            if parsed.header is not None:
                raise RoundError(f"{where}: {what}: a repair of a report whose header is valid")
            parsed = parse_header(self._text(body["repair"], f"{where}: {what}", "repair answer"))
        header = parsed.header if parsed.header is not None else REPLACEMENT
        if body["tree_before"] != body["tree_after"]:
            header = VIOLATION
        recorded = (body["header_valid"], body["status"], body["integrity"], body["contract"])
        wanted = (parsed.header is not None, header.status, header.integrity, header.contract)
        if recorded != wanted:
            why = (
                "the auditor's tree changed"
                if header is VIOLATION
                else parsed.problem or "the header as parsed"
            )
            raise RoundError(
                f"{where}: {what} records header_valid/status/integrity/contract "
                f"{_values(recorded)}, the report gives {_values(wanted)} ({why})"
            )
        ghost = is_ghost(claims_success=bool(step["claims_success"]), changed=bool(step["changed"]))
        if body["ghost"] != ghost:
            raise RoundError(
                f"{where}: {what} records ghost {str(body['ghost']).lower()}, the step "
                f"(claims_success {str(step['claims_success']).lower()}, changed "
                f"{str(step['changed']).lower()}) gives {str(ghost).lower()}"
            )
        effective = effective_status(header, ghost=ghost)
        if body["effective"] != effective:
            raise RoundError(
                f"{where}: {what} records effective {body['effective']!r}, the rule gives "
                f"{effective!r}"
            )
        current.audit = (effective, header)

    def _end(self, body: Mapping[str, Any], where: str) -> None:
        name = str(body["task"])
        task, current = self._open("round.end", body, where)
        what = f"round.end of task {name!r} round {current.number}"
        stepped = current.valid and current.next in ("gui", "cli")
        if stepped and current.audit is None:
            raise RoundError(f"{where}: {what} before the round's step and audit")
        effective, header = current.audit if current.audit else (None, None)
        try:
            decision = decide_round(
                round=current.number,
                max_rounds=task.roles[self.epoch],
                failing_before=task.failing,
                plan_valid=current.valid,
                next_action=current.next,
                effective=effective,
                integrity=header.integrity if header else None,
            )
        except ValueError as exc:
            raise RoundError(f"{where}: {what}: {exc}") from None
        if (body["outcome"], body["failing"]) != (decision.outcome, decision.failing):
            raise RoundError(
                f"{where}: {what} records outcome {body['outcome']!r} failing "
                f"{body['failing']}, the rule gives {decision.outcome!r} failing "
                f"{decision.failing} (failing before {task.failing})"
            )
        step = current.step
        checkpoint = step["commit_after"] if step is not None else task.checkpoint
        if checkpoint is not None and body["checkpoint"] != checkpoint:
            raise RoundError(
                f"{where}: {what} records checkpoint {body['checkpoint'][:12]}, the round's "
                f"verified progress is {checkpoint[:12]}"
            )
        task.failing = decision.failing
        task.ended = current.number
        task.checkpoint = body["checkpoint"]
        task.checkpoint_sure = True
        if current.audit is not None:
            task.latest = current.audit
        task.open = None
        outcome = decision.outcome
        if outcome == "done":
            task.expect = ("gating", where)
        elif outcome in ("incomplete", "blocked"):
            task.expect = ("blocked", where)
        elif outcome == "violation":
            task.violated = where
        elif outcome == "gate":
            task.gate_record = (current.number, current.next == "ask")
            task.gate_open = current.number

    def _gate(self, body: Mapping[str, Any], where: str) -> None:
        name = str(body["task"])
        task = self._task("round.gate", body, where)
        pending = task.gate_record
        if pending is None or pending[0] != body["round"]:
            raise RoundError(
                f"{where}: round.gate of task {name!r} round {body['round']} without a round "
                "that ended 'gate' right before it"
            )
        asked = pending[1]
        if (body["question"] is not None) != asked:
            raise RoundError(
                f"{where}: round.gate of task {name!r} round {body['round']}: "
                + ("an ask carries its question" if asked else "only an ask carries a question")
            )
        if body["question"] is not None:
            self._text(body["question"], f"{where}: round.gate of task {name!r}", "question")
        task.gate_record = None

    def _input(self, body: Mapping[str, Any], where: str) -> None:
        name = str(body["task"])
        task = self._task("round.input", body, where)
        kind = body["kind"]
        number = body["round"]
        what = f"round.input ({kind}) of task {name!r} round {number}"
        if kind not in INPUT_KINDS:
            raise RoundError(f"{where}: {what}: kind must be one of {list(INPUT_KINDS)}")
        if task.gate_record is not None:
            raise RoundError(f"{where}: {what} before the round.gate of its round")
        if kind == "instruct":
            if not max(1, task.ended) <= number <= task.ended + 1:
                raise RoundError(
                    f"{where}: {what}: an instruction names the last ended round "
                    f"({task.ended}) or the next"
                )
        else:
            if task.gate_open is None or task.gate_open != number:
                raise RoundError(f"{where}: {what}, but no gate of that round is open")
            task.gate_open = None
            if kind == "approve":
                task.failing = 0  # the operator approved going on: the count starts again
        self._text(body["text"], f"{where}: {what}", f"{kind} text")

    def _transition(self, body: Mapping[str, Any], where: str) -> None:
        name = str(body["task"])
        task = self.tasks.get(name)
        if task is None:
            return
        move = (body["from"], body["to"])
        if task.expect is not None:
            target, at = task.expect
            if move != ("in_progress", target):
                raise RoundError(
                    f"{where}: task {name!r} moves {move[0]} -> {move[1]}, but its round "
                    f"ended at {at} demands in_progress -> {target}"
                )
            task.expect = None
        elif move == ("in_progress", "blocked") and task.recovering:
            return  # a crash recovery suspends the task it interrupted (resumed by continue)
        elif move in (("in_progress", "gating"), ("in_progress", "blocked")):
            raise RoundError(
                f"{where}: rounds task {name!r} moves {move[0]} -> {move[1]} without a round "
                "that ended " + ("'done'" if move[1] == "gating" else "'incomplete' or 'blocked'")
            )
        elif move[0] == "in_progress" and move[1] in ("failed", "cancelled"):
            task.open = None  # stopped, aborted or failed mid-round: the round is abandoned
            task.gate_record = None

    def _run_end(self, where: str) -> None:
        for name, task in sorted(self.tasks.items()):
            if task.open is not None:
                raise RoundError(
                    f"{where}: the run ends while round {task.open.number} of task {name!r} "
                    "is unfinished"
                )
            if task.gate_record is not None:
                raise RoundError(
                    f"{where}: the run ends before the round.gate of round "
                    f"{task.gate_record[0]} of task {name!r}"
                )
            if task.expect is not None:
                raise RoundError(
                    f"{where}: the run ends before task {name!r} moves in_progress -> "
                    f"{task.expect[0]} as its round ended at {task.expect[1]} demands"
                )

    def control(self, record: Record, where: str) -> None:
        return None

    def lineage(self, record: Record, where: str) -> None:
        return None

    def finish(self) -> None:
        for digest in sorted(self.texts):
            if digest not in self.named:
                raise RoundError(
                    f"{round_text_member(self.run, digest)}: a rounds member no round record names"
                )


def _values(values: tuple[Any, ...]) -> str:
    return "/".join(str(v).lower() if type(v) is bool else str(v) for v in values)


_HANDLERS: Final = {
    "round.roles": RoundCheck._roles,
    "round.plan": RoundCheck._plan,
    "round.step": RoundCheck._step,
    "round.audit": RoundCheck._audit,
    "round.end": RoundCheck._end,
    "round.gate": RoundCheck._gate,
    "round.input": RoundCheck._input,
}


def round_texts(run: str, members: Mapping[str, bytes] | None) -> dict[str, bytes]:
    """digest -> bytes of the run's ``runs/<run>/rounds/<digest>.txt`` members."""
    texts: dict[str, bytes] = {}
    for name, data in (members or {}).items():
        digest = round_text_digest(run, name)
        if digest is not None:
            texts[digest] = data
    return texts


def folder_round_texts(run_folder: Path, run_id: str) -> dict[str, bytes]:
    """The round texts of a run folder (``<run folder>/rounds/<sha256>.txt``) by member name,
    for checking a run on disk as its bundle would be checked. Within the bundle's limits;
    a file that is not a regular file (a link, a FIFO: never opened) or not named
    ``<64 hex>.txt`` is refused, as the bundle check refuses such a member."""
    folder = run_folder / "rounds"
    if not folder.is_dir():
        return {}
    texts: dict[str, bytes] = {}
    total = 0
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        name = round_text_member(run_id, entry.name[: -len(".txt")])
        mode = entry.stat(follow_symlinks=False)
        if not entry.name.endswith(".txt") or round_text_digest(run_id, name) is None:
            raise RoundError(f"{entry.path}: not a round text (<sha256>.txt)")
        if not stat.S_ISREG(mode.st_mode):
            raise RoundError(f"{entry.path}: not a regular file")
        total += mode.st_size
        if mode.st_size > ROUND_TEXT_MAX_BYTES or total > ROUND_TEXTS_MAX_BYTES:
            raise RoundError(f"{entry.path}: round texts over their size limits")
        texts[name] = Path(entry.path).read_bytes()
    return texts


def round_check(
    run: str, plan: bytes | None, members: Mapping[str, bytes] | None = None
) -> RoundCheck:
    """The fold for one run; ``members`` are the run's members by name (its rounds texts are
    taken from them; None: no text member, so every cited text is missing)."""
    return RoundCheck(run, round_texts(run, members))
