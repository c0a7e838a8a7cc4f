"""Run check "lifecycle": the run's ``run.status`` records walk the run lifecycle (issue 12 §4).

Folding the audit store in order (docs/spec/verifier.md §3.8, "Run lifecycle";
``harness.verify.rules.lifecycle``):

* every ``run.status`` names a canonical run status and is a legal step from the previous one
  (``legal_run_transition``; the first from none, so ``creating``);
* the epoch starts at 0 and changes only at ``starting``, only by +1 (``epoch_step``), never
  above ``MAX_EPOCH``, and only right after an applied ``resume`` receipt, whose id the
  ``starting`` record names as its ``command``; an applied resume is followed by exactly that;
* at each ``run.end`` the latest status is terminal and equals ``terminal_status`` of the task
  states, the rounds tasks suspended by their last ``round.end`` (incomplete / blocked, until
  the task leaves ``blocked``), and whether a ``stop`` or ``abort`` receipt was applied in
  this epoch;
* after a ``run.end`` only ``resume`` and ``abandon`` receipts may follow, and after an
  applied resume only the ``run.status starting`` of the next epoch (a continued run).

Runs with no ``run.status`` record (format-2 evidence before issue 12, runs not written by the
runtime) are exempt: the rules apply from a run's first ``run.status`` on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .errors import VerificationError
from .records import Record
from .rules.lifecycle import STATES, TERMINAL, legal_run_transition, terminal_status
from .rules.rounds import MAX_EPOCH

AFTER_END: Final = ("abandon", "resume")
"""Commands whose receipts may follow ``run.end``: ``abandon`` deletes an unmerged batch
branch of an ended run (``harness abandon``), ``resume`` continues it."""


class LifecycleError(VerificationError):
    """A run status step the lifecycle forbids, an epoch out of step, or a wrong end status."""


@dataclass(eq=False, repr=False)
class LifecycleCheck:
    run: str
    status: str | None = None
    epoch: int = 0
    ended: str | None = None
    """Where the run ended (while no continue reopened it)."""
    resume: tuple[str, str] | None = None
    """(command id, where) of an applied resume receipt awaiting its ``starting``."""
    stopped: bool = False
    aborted: bool = False
    tasks: dict[str, str] = field(default_factory=dict)
    suspended: dict[str, str] = field(default_factory=dict)

    def audit(self, record: Record, where: str) -> None:
        kind = record.kind
        body = record.body
        if self.ended is not None and self.status is not None:
            self._after_end(kind, body, where)
        if kind == "task.planned":
            self.tasks[str(body["task"])] = "planned"
        elif kind == "task.transition":
            name = str(body["task"])
            self.tasks[name] = str(body["to"])
            if body["from"] == "blocked":
                self.suspended.pop(name, None)
            elif (body["from"], body["to"]) == ("in_progress", "blocked"):
                # a rounds task suspended by a crash recovery (no round.end: the round check
                # allows it only then) is resumable like an incomplete one
                self.suspended.setdefault(name, "incomplete")
        elif kind == "round.end":
            name = str(body["task"])
            if body["outcome"] in ("incomplete", "blocked"):  # until it leaves blocked
                self.suspended[name] = str(body["outcome"])
        elif kind == "command.receipt" and body["outcome"] == "applied":
            self._applied(body, where)
        elif kind == "run.status":
            self._status(body, where)
        elif kind == "run.end":
            self._end(where)

    def _after_end(self, kind: str, body: Mapping[str, Any], where: str) -> None:
        if kind == "command.receipt" and body["command"] in AFTER_END:
            return
        if kind == "run.status" and self.resume is not None:
            return
        raise LifecycleError(
            f"{where}: {kind} after the run ended at {self.ended}: only a resume or abandon "
            "receipt and the next epoch's run.status starting may follow"
        )

    def _applied(self, body: Mapping[str, Any], where: str) -> None:
        command = body["command"]
        if command == "stop":
            self.stopped = True
        elif command == "abort":
            self.aborted = True
        elif command == "resume":
            if self.resume is not None:
                raise LifecycleError(
                    f"{where}: a second applied resume before the run.status starting of the "
                    f"first ({self.resume[1]})"
                )
            self.resume = (str(body["id"]), where)

    def _status(self, body: Mapping[str, Any], where: str) -> None:
        status, epoch = body["status"], body["epoch"]
        if status not in STATES:
            raise LifecycleError(f"{where}: run.status {status!r} is not a run status")
        if epoch > MAX_EPOCH:
            raise LifecycleError(f"{where}: epoch {epoch} is above {MAX_EPOCH}")
        if self.status is None and epoch != 0:
            raise LifecycleError(f"{where}: the run's first run.status is in epoch {epoch}, not 0")
        step = epoch != self.epoch
        if step:
            if status != "starting" or epoch != self.epoch + 1:
                raise LifecycleError(
                    f"{where}: the epoch moves {self.epoch} -> {epoch} at {status!r}: it moves "
                    "only by +1, at 'starting'"
                )
            if self.resume is None:
                raise LifecycleError(
                    f"{where}: epoch {epoch} starts without an applied resume receipt"
                )
            if body["command"] != self.resume[0]:
                raise LifecycleError(
                    f"{where}: epoch {epoch} starts by command {body['command']!r}, the applied "
                    f"resume is {self.resume[0]!r} ({self.resume[1]})"
                )
        elif self.resume is not None:
            raise LifecycleError(
                f"{where}: run.status {status!r} in epoch {epoch}, but the resume applied at "
                f"{self.resume[1]} moves the run to 'starting' in epoch {self.epoch + 1}"
            )
        if not legal_run_transition(self.status, status, epoch_step=step):
            raise LifecycleError(
                f"{where}: run status {self.status or 'none'} -> {status} is not a legal step"
                + (" of a continue" if step else "")
            )
        if step:
            self.resume = None
            self.ended = None
            self.stopped = self.aborted = False
        self.status, self.epoch = status, epoch

    def _end(self, where: str) -> None:
        if self.status is None:
            return  # exempt: no run.status, no lifecycle
        if self.status not in TERMINAL:
            raise LifecycleError(f"{where}: the run ends in the active status {self.status!r}")
        expected = terminal_status(
            self.tasks, self.suspended, stopped=self.stopped, aborted=self.aborted
        )
        if self.status != expected:
            suspended = ", ".join(f"{t} {why}" for t, why in sorted(self.suspended.items()))
            raise LifecycleError(
                f"{where}: the run ends {self.status!r}, the rule gives {expected!r} (stop "
                f"applied {str(self.stopped).lower()}, abort applied "
                f"{str(self.aborted).lower()}, suspended: {suspended or 'none'})"
            )
        self.ended = where

    def control(self, record: Record, where: str) -> None:
        return None

    def lineage(self, record: Record, where: str) -> None:
        return None

    def finish(self) -> None:
        return None


def lifecycle_check(run: str, plan: bytes | None) -> LifecycleCheck:
    return LifecycleCheck(run)
