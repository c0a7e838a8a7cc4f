"""The round loop of one rounds task: Manager -> Executor -> Auditor, recorded round by round.

A rounds task is a batch of one (its role is its own) and runs ALONE: the tick loop starts it
only with nothing else in flight and starts nothing beside it (decision 0033), so its records
may be written as each round ends without breaking the in-order retirement of batches; a crash
loses at most the round in progress. Per round, in this order, each record flushed before the
next role starts:

1. ``round.plan`` — the Manager's text (a bundle member by digest), its ``Next:`` action, the
   reports it cites; invalid (bad grammar, a failed process, or ``done`` without a complete,
   clean, aligned latest audit) means a failing round, the reason fed back next round;
2. ``round.step`` — for gui/cli: the Executor's claim, the commits before and after, the paths
   it changed (``changed`` is ``paths`` non-empty: an empty commit changes nothing);
3. ``round.audit`` — the Auditor's report, the tree digests before and after it (a change is
   an integrity violation: the report is replaced, the task never merges), the header as parsed
   (after at most one tool-less repair; still invalid: ``blocked/suspect/unknown``), the ghost
   rule and the effective status;
4. ``round.end`` — ``rules.rounds.decide_round``: continue, done, incomplete, blocked, gate or
   violation, the failing streak and the checkpoint commit.

A gate (``ask``, or ``GATE_AFTER`` failing rounds in a row) records ``round.gate``, sets the
run ``waiting_approval`` and waits for an ``approve`` or ``answer`` on the control bus (its
receipt first, then ``run.status running`` and ``round.input`` naming the command).
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.verify.rules import header as header_rule
from harness.verify.rules import rounds as round_rule
from harness.verify.rules.header import REPLACEMENT, VIOLATION, Header

from .. import git
from ..model import RoundsSpec
from ..runner.proxied import first_miss
from . import prompts
from .roles import RoleResult, role_policies, run_role
from .texts import load_text, save_text
from .treedigest import tree_digest

if TYPE_CHECKING:
    from ..runner.job import BatchJob


class _ReplayMissError(Exception):
    """A role's request missed the journal under strict replay (the run is to abort)."""


@dataclass
class RoundsState:
    """What the loop knows of a task's rounds: rebuilt from the records on a continue."""

    round: int = 0
    """The last round that ended (``round.end``)."""
    failing: int = 0
    checkpoint: str | None = None
    latest: Header | None = None
    latest_effective: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    """Per ended round: round, plan text, report text (or None), effective status."""
    feedback: str | None = None
    inputs: list[tuple[str, str]] = field(default_factory=list)
    """Operator answers and instructions not yet shown to the Manager."""


@dataclass(frozen=True)
class RoundsEnd:
    """How the loop ended: ``outcome`` is done, incomplete, blocked, violation or stopped."""

    outcome: str
    round: int
    reason: str
    model_calls: tuple[Any, ...] = ()


def _spec(job: BatchJob) -> RoundsSpec:
    spec = job.tasks[0].rounds
    assert spec is not None
    return spec


def _script(spec: RoundsSpec) -> list[dict[str, Any]]:
    return [
        {"say": s.say, "edits": [{"path": e.path, "content": e.content} for e in s.edits]}
        for s in spec.steps
    ]


def _diff(job: BatchJob, before: str, after: str) -> str:
    if before == after:
        return ""
    out = subprocess.run(
        ["git", "-C", str(job.worktree), "diff", "--no-color", "--no-ext-diff", before, after],
        capture_output=True,
        check=False,
    )
    return out.stdout.decode("utf-8", "replace")


class RoundLoop:
    """Runs the rounds of ``job`` (prepared, spawn recorded) until an ending outcome."""

    def __init__(self, job: BatchJob, state: RoundsState) -> None:
        self.job = job
        self.run = job.run
        self.task = job.tasks[0]
        self.spec = _spec(job)
        self.state = state
        self.calls: list[Any] = []
        self._audit_exit = ""
        """``, the auditor exited N`` when the last auditor process failed (for reasons)."""

    # -- helpers ---------------------------------------------------------------------------

    def _stop(self) -> bool:
        return bool(self.run.poll_bus())

    def _role(self, role: str, prompt: str, work: dict[str, Any]) -> RoleResult:
        base = {"goal": self.task.prompt, "steps": _script(self.spec)}
        result = run_role(self.job, role, prompt, {**base, **work}, should_stop=self._stop)
        self.calls.extend(result.model_calls)
        proxy = self.job.proxy
        if proxy is not None:  # strict replay could not answer: no further role, no round end
            miss = first_miss(proxy.server.exchanges())
            if miss is not None:
                raise _ReplayMissError(miss.reason or f"replay miss: no journaled answer ({role})")
        return result

    def _record(self, kind: str, body: dict[str, Any]) -> None:
        self.run.audit(kind, {"task": self.task.id, **body})
        self.run.flush()

    # -- the loop --------------------------------------------------------------------------

    def run_all(self) -> RoundsEnd:
        run, state = self.run, self.state
        if state.checkpoint is None:
            state.checkpoint = git.head(self.job.worktree)
        self._record(
            "round.roles",
            {
                "epoch": run.epoch,
                "max_rounds": self.spec.max_rounds,
                "roles": role_policies(self.job),
            },
        )
        while True:
            if self._stop():
                return self._end("stopped", "operator stop")
            if state.round >= self.spec.max_rounds:
                return self._end("incomplete", f"no rounds left ({self.spec.max_rounds})")
            try:
                ended = self._one_round(state.round + 1)
            except _ReplayMissError as miss:  # retirement aborts the run on the proxy's miss
                return self._end("blocked", str(miss))
            if ended is not None:
                return ended

    def _end(self, outcome: str, reason: str) -> RoundsEnd:
        return RoundsEnd(outcome, self.state.round, reason, tuple(self.calls))

    def _one_round(self, number: int) -> RoundsEnd | None:
        run, state = self.run, self.state
        epoch = run.epoch
        reports = [(h["round"], h["effective"], h["report"]) for h in state.history if h["report"]]
        for command in run.take_instructions(self.task.id):
            text = str(command.args["text"])
            self._record(
                "round.input",
                {
                    "round": number,
                    "epoch": epoch,
                    "command": command.id,
                    "kind": "instruct",
                    "text": save_text(run.folder, text),
                },
            )
            state.inputs.append(("instruct", text))
        inputs, state.inputs = state.inputs, []
        prompt = prompts.manager_prompt(
            self.task,
            rounds_done=state.round,
            checkpoint=state.checkpoint or "",
            reports=reports,
            feedback=state.feedback,
            inputs=inputs,
        )
        history = [{"round": h["round"], "plan": h["plan"], "effective": h["effective"] or ""}
                   for h in state.history]  # fmt: skip
        manager = self._role("manager", prompt, {"history": history, "feedback": state.feedback})
        if manager.stopped:
            return self._end("stopped", "operator stop")
        plan_text = manager.text
        parsed = header_rule.parse_next(plan_text)
        valid = manager.exit_code == 0 and parsed.action is not None
        reason = "valid"
        if manager.exit_code != 0:
            reason = f"the manager exited {manager.exit_code}: {manager.error or ''}".strip()
        elif parsed.action is None:
            reason = parsed.problem or "no Next line"
        elif parsed.action == "done" and not header_rule.accept_done(
            state.latest_effective, state.latest
        ):
            valid = False
            reason = "done refused: the latest audit is not complete, clean and aligned"
        action = parsed.action if valid else None
        cites = list(header_rule.parse_cites(plan_text)) if valid else []
        self._record(
            "round.plan",
            {
                "round": number,
                "epoch": epoch,
                "text": save_text(run.folder, plan_text),
                "next": action,
                "valid": valid,
                "reason": reason,
                "cites": cites,
                "exit_code": manager.exit_code,
            },
        )
        state.feedback = None if valid else reason
        effective: str | None = None
        integrity: str | None = None
        report_text: str | None = None
        if action in ("gui", "cli"):
            audited = self._execute_and_audit(number, plan_text, cites)
            if audited is None:
                return self._end("stopped", "operator stop")
            effective, integrity, report_text = audited
        decision = round_rule.decide_round(
            round=number,
            max_rounds=self.spec.max_rounds,
            failing_before=state.failing,
            plan_valid=valid,
            next_action=action,
            effective=effective,
            integrity=integrity,
        )
        checkpoint = git.head(self.job.worktree)
        self._record(
            "round.end",
            {
                "round": number,
                "epoch": epoch,
                "outcome": decision.outcome,
                "failing": decision.failing,
                "checkpoint": checkpoint,
            },
        )
        state.round, state.failing, state.checkpoint = number, decision.failing, checkpoint
        state.history.append(
            {"round": number, "plan": plan_text, "report": report_text, "effective": effective}
        )
        outcome = decision.outcome
        if outcome == "continue":
            return None
        if outcome == "gate":
            return self._gate(number, action, plan_text)
        reasons = {
            "done": "the manager said done after a complete, clean, aligned audit",
            "incomplete": f"round {number} of {self.spec.max_rounds}: not done",
            "blocked": f"round {number}: "
            + (
                "the manager says blocked"
                if action == "blocked"
                else f"the audit is blocked (integrity {integrity}{self._audit_exit})"
            ),
            "violation": f"round {number}: the auditor changed the tree it may only read",
        }
        return self._end(outcome, reasons[outcome])

    def _execute_and_audit(
        self, number: int, plan_text: str, cites: list[int]
    ) -> tuple[str, str, str] | None:
        """Executor then Auditor; (effective, integrity, report) or None when stopped."""
        run, state, job = self.run, self.state, self.job
        epoch = run.epoch
        cited = {
            h["round"]: h["report"] for h in state.history if h["round"] in cites and h["report"]
        }
        before = git.head(job.worktree)
        executor = self._role(
            "executor",
            prompts.executor_prompt(self.task, plan_text, cited),
            {"plan": plan_text, "ghost": self.spec.ghost},
        )
        if executor.stopped:
            return None
        git.commit_all(job.worktree, f"{job.batch.id}: round {number}", date=run.git_date)
        after = git.head(job.worktree)
        paths = (
            sorted(c.path for c in git.changed_files(run.repo, before, after))
            if after != before
            else []
        )
        claims = executor.exit_code == 0 and executor.ok
        self._record(
            "round.step",
            {
                "round": number,
                "epoch": epoch,
                "text": save_text(run.folder, executor.text),
                "exit_code": executor.exit_code,
                "claims_success": claims,
                "commit_before": before,
                "commit_after": after,
                "changed": bool(paths),
                "paths": paths,
            },
        )
        tree_before = tree_digest(job.worktree)
        auditor = self._role(
            "auditor",
            prompts.auditor_prompt(self.task, plan_text, executor.text, _diff(job, before, after)),
            {
                "plan": plan_text,
                "auditor_writes": self.spec.auditor_writes,
                "bad_header": self.spec.bad_header,
            },
        )
        if auditor.stopped:
            return None
        tree_after = tree_digest(job.worktree)
        self._audit_exit = f", the auditor exited {auditor.exit_code}" if auditor.exit_code else ""
        report = auditor.text
        repair_digest: str | None = None
        parsed = header_rule.parse_header(report) if auditor.exit_code == 0 else None
        header: Header
        header_valid = parsed is not None and parsed.header is not None
        if tree_before != tree_after:
            header = VIOLATION
            git.reset_hard(job.worktree, after)  # nothing the auditor wrote is kept
        elif parsed is None:
            header = REPLACEMENT
        elif parsed.header is not None:
            header = parsed.header
        else:
            repaired = self._role(
                "repair",
                prompts.repair_prompt(report, parsed.problem or ""),
                {"report": report},
            )
            if repaired.stopped:
                return None
            repair_digest = save_text(run.folder, repaired.text)
            again = header_rule.parse_header(repaired.text)
            header_valid = again.header is not None
            header = again.header if again.header is not None else REPLACEMENT
        ghost = round_rule.is_ghost(claims_success=claims, changed=bool(paths))
        effective = header_rule.effective_status(header, ghost=ghost)
        self._record(
            "round.audit",
            {
                "round": number,
                "epoch": epoch,
                "text": save_text(run.folder, report),
                "repair": repair_digest,
                "exit_code": auditor.exit_code,
                "tree_before": tree_before,
                "tree_after": tree_after,
                "header_valid": header_valid,
                "status": header.status,
                "integrity": header.integrity,
                "contract": header.contract,
                "ghost": ghost,
                "effective": effective,
            },
        )
        state.latest, state.latest_effective = header, effective
        shown = load_text(run.folder, repair_digest) if repair_digest else report
        return effective, header.integrity, shown

    def _gate(self, number: int, action: str | None, plan_text: str) -> RoundsEnd | None:
        """Wait for the operator: ``approve`` (failing streak reset) or ``answer``."""
        run = self.run
        asks = action == "ask"
        reason = (
            "the manager asks the operator"
            if asks
            else (f"{round_rule.GATE_AFTER} failing rounds in a row")
        )
        self._record(
            "round.gate",
            {
                "round": number,
                "epoch": run.epoch,
                "reason": reason,
                "question": save_text(run.folder, plan_text) if asks else None,
            },
        )
        run.set_status("waiting_approval", reason)
        deadline = time.monotonic() + self.spec.gate_wait_s
        run.open_gate = (self.task.id, number, "answer" if asks else "approve")
        try:
            while time.monotonic() < deadline:
                if run.poll_bus():
                    return self._end("stopped", "operator stop")
                command = run.take_gate_input()
                if command is not None:
                    return self._close_gate(number, command)
                time.sleep(0.2)
        finally:
            run.open_gate = None
        run.set_status("running", "the round gate timed out")
        return self._end("blocked", f"round {number}: nobody answered the gate in time")

    def _close_gate(self, number: int, command: Any) -> RoundsEnd | None:
        run, state = self.run, self.state
        text = str(command.args.get("text", ""))
        run.set_status("running", f"{command.command} {command.id}", command=command.id)
        self._record(
            "round.input",
            {
                "round": number,
                "epoch": run.epoch,
                "command": command.id,
                "kind": command.command,
                "text": save_text(run.folder, text),
            },
        )
        if command.command == "approve":
            state.failing = 0
        if text:
            state.inputs.append((command.command, text))
        if state.round >= self.spec.max_rounds:
            return self._end("incomplete", f"no rounds left ({self.spec.max_rounds})")
        return None
