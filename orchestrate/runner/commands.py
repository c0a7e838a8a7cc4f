"""The runtime's side of the control bus: every command gets exactly one receipt.

The bus (``harness.orchestrate.bus.ControlBus``) hands over each new command once, read from
the control store safely (no link followed, no FIFO waited on, MAC chain checked). Here each is
decided and answered with a ``command.receipt`` — the only terminal authority for a command —
written BEFORE any effect of it (an effect is a record whose ``command`` member names it):

* ``stop``: applied; the loop stops at once (run ``stopping``, then ``cancelled``);
* ``abort``: applied; like stop, and the run ends ``failed``;
* ``approve`` / ``answer``: applied when a round gate of that kind is open (its effect is the
  gate's ``run.status running`` and ``round.input``), else rejected ("no open gate");
* ``approve`` with ``args.review`` (``<batch>/<n>``): applied when that action review waits
  for an approval (its effect: the review's ``action.review.approval``), else rejected;
* ``instruct``: applied when ``args.task`` names a rounds task that has not ended (its effect,
  ``round.input``, comes when the Manager's next prompt is built), else rejected;
* ``judge``: applied when ``args.alert`` (``<step>:<key>``) names a control alert still
  waiting for a verdict and ``args.verdict`` is ``confirmed`` or ``overridden`` (its effect:
  ``control.verdict``), else rejected;
* ``resume``: applied only while a continue reads the bus before the loop starts
  (``harness.orchestrate.runner.lifecycle``), else rejected;
* ``abandon``: answered by ``harness abandon`` itself (it deletes the branch): skipped here.

A command whose ``revision`` is not the run's current epoch is rejected ("stale revision"): it
was meant for an earlier life of the run.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from harness.verify.fsm import TaskState

from ..bus import Command, ControlBus

if TYPE_CHECKING:
    from .core import RunCore

S = TaskState
SELF_ANSWERED = frozenset({"abandon"})
"""Commands the CLI that issues them also answers (receipt and effect)."""


class CommandDesk:
    """Reads the bus and writes receipts for one run."""

    def __init__(self, run: RunCore) -> None:
        self.run = run
        # The operator's own path may go through links (a symlinked home): resolved once
        # here; from then on every component is opened without following links.
        self.bus = ControlBus(run.folder.resolve(), run.run_id, run.keys.hmac_master)
        self.gate_inputs: deque[Command] = deque()
        self.instructions: dict[str, list[Command]] = {}
        self.stop_command: str | None = None
        self.abort_command: str | None = None
        self.accept_resume = False
        """Set by a continue while it reads the bus before the loop starts."""
        self.resume_command: str | None = None

    def receipt(self, command: Command, outcome: str, reason: str) -> None:
        self.run.audit(
            "command.receipt",
            {
                "id": command.id,
                "command": command.command,
                "control_seq": command.seq,
                "outcome": outcome,
                "reason": reason,
            },
        )

    def poll(self) -> bool:
        """Answer every new command; True once a stop or an abort was applied."""
        commands = self.bus.poll()
        for command in commands:
            self.decide(command)
        if commands:
            self.run.flush()
        return self.stop_command is not None or self.abort_command is not None

    def decide(self, command: Command) -> None:
        run = self.run
        if command.command in SELF_ANSWERED:
            return
        if command.revision != run.epoch:
            self.receipt(command, "rejected", "stale revision")
            return
        name = command.command
        if name in ("stop", "abort"):
            if self.stop_command is not None or self.abort_command is not None:
                self.receipt(command, "rejected", "the run is already stopping")
                return
            self.receipt(command, "applied", f"the run {name}s")
            if name == "stop":
                self.stop_command = command.id
                run.set_status("stopping", "operator stop", command=command.id)
            else:  # an abort ends the run failed, straight from where it is
                self.abort_command = command.id
        elif name == "approve" and "review" in command.args:
            from ..review.desk import ReviewDesk  # an action review waiting for approval

            outcome, reason = ReviewDesk.of(run).approve(command.id, command.args["review"])
            self.receipt(command, outcome, reason)
        elif name in ("approve", "answer"):
            gate = run.open_gate
            if gate is None or gate[2] != name:
                wanted = "no open gate" if gate is None else f"the open gate needs {gate[2]}"
                self.receipt(command, "rejected", wanted)
                return
            self.receipt(command, "applied", f"closes the gate of round {gate[1]}")
            self.gate_inputs.append(command)
        elif name == "instruct":
            task = command.args.get("task")
            spec = run.specs.get(task) if isinstance(task, str) else None
            text = command.args.get("text")
            if spec is None or spec.rounds is None:
                self.receipt(command, "rejected", "args.task names no rounds task")
            elif not isinstance(text, str) or not text:
                self.receipt(command, "rejected", "args.text is missing")
            elif run.states.get(spec.id) in (S.DONE, S.FAILED, S.CANCELLED, S.DENIED):
                self.receipt(command, "rejected", f"task {spec.id} has ended")
            else:
                self.receipt(command, "applied", f"for the next round of {spec.id}")
                self.instructions.setdefault(spec.id, []).append(command)
        elif name == "judge":
            alert, verdict = command.args.get("alert"), command.args.get("verdict")
            problem = (
                run.control.judge(alert, verdict)
                if isinstance(alert, str) and isinstance(verdict, str)
                else "args.alert and args.verdict are required"
            )
            if problem is not None:
                self.receipt(command, "rejected", problem)
            else:
                self.receipt(command, "applied", f"alert {alert} judged {verdict}")
                run.audit(
                    "control.verdict", {"alert": alert, "verdict": verdict, "command": command.id}
                )
        elif name == "resume":
            if self.accept_resume and self.resume_command is None:
                self.receipt(command, "applied", f"continue as epoch {run.epoch + 1}")
                self.resume_command = command.id
            else:
                self.receipt(command, "rejected", "the run is running or cannot continue")
        else:
            self.receipt(command, "rejected", f"unknown command {name!r}")

    def take_gate_input(self) -> Command | None:
        return self.gate_inputs.popleft() if self.gate_inputs else None

    def take_instructions(self, task: str) -> list[Command]:
        return self.instructions.pop(task, [])

    def drain(self) -> Any:
        """The exclusive hold on the bus the run ends under: new commands are answered
        (a stop still being read is applied), nobody can add one until run.end is written."""
        return self.bus.exclusive()
