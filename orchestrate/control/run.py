"""One run's controller: the pure state machine of ``harness.verify.rules.controller`` fed
from retirement, and everything it decides recorded before it takes effect.

* At the run's start: configuration version 1 (``config.version``) and the phase the run
  starts in (``control.phase``).
* At every retired attempt of a task (a *step*), after its ``attempt.failed`` or
  ``merge.result``: one ``control.sensor`` with its readings, then each ``control.decision``
  the step provokes, then each ``config.version`` a decision produced — queued together, so
  the group commit at the end of retirement makes them durable before the next spawn loads
  the new version (``agent.spawn.config``): a strategy change reaches an agent at its next
  restart, which is how the P layer propagates policy.
* Whenever a task settles (done, failed, cancelled, denied) and progress moves the run into
  another phase: ``control.phase``, and the phase's checkpoint spacing bounds sealing.

A resumed run folds its audit records through the same machine (``replay``), so the state
after a crash is the state the records prove.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from harness.verify.rules import configchain, meta, phases, trifecta
from harness.verify.rules.controller import (
    Controller,
    Observed,
    Params,
    Step,
    parse_params,
    step_of,
    subtree_of,
)

from .. import git
from .facts import History, JobFacts, measures, remember, tier1

TEMPLATE_TEXT: Final = {
    "focused": (
        "earlier attempts of your role kept failing. Do not repeat the approach that failed: "
        "read what failed below, make only the change the task asks for, and keep it small."
    ),
    "stepwise": (
        "earlier attempts kept failing even with a focused prompt. Work in small steps: make "
        "one change, check it, then the next; stop and explain if a step cannot be made."
    ),
}
"""The instruction each prompt template adds (``default`` adds none)."""

if TYPE_CHECKING:
    from ..model import TaskSpec
    from ..runner.core import RunCore


class RunControl:
    """The controller of one run and the records it writes."""

    def __init__(self, run: RunCore) -> None:
        self.run = run
        params = parse_params(run.plan.control)
        assert isinstance(params, Params)  # the plan parser checked it
        tasks: dict[str, list[tuple[str, Sequence[str]]]] = {}
        for task in run.plan.tasks:
            tasks.setdefault(task.role, []).append((task.adapter, list(task.tools)))
        self.machine = Controller(params, tasks, risky=self._risky, denied=self._denied)
        self.history = History()
        self.requirements = sorted({r for task in run.plan.tasks for r in task.requirements})
        self.started_us = 0
        """The run's start (its clock, µs): hours 4 to 6 heighten the meta layer's reviews."""

    # -- rule inputs ---------------------------------------------------------------------
    # ``Controller.under`` for a run being made: read at each call, because the run's
    # sandbox profile is settled after its controller is built.

    def _risky(self, tool: str) -> bool:
        return bool(trifecta.tool_tags(self.run.capabilities, tool))

    def _denied(self, adapter: str, tools: Sequence[str]) -> bool:
        return trifecta.decide(self.run.capabilities, adapter, tools, self.run.run_profile).denied

    # -- what agents load ----------------------------------------------------------------

    @property
    def version(self) -> int:
        return self.machine.version

    @property
    def phase(self) -> str:
        return self.machine.phase

    def entry(self, role: str) -> dict[str, Any]:
        """The configuration entry of an agent (role) in force now."""
        return configchain.entry(self.machine.document, role)

    def tools_for(self, task: TaskSpec) -> list[str]:
        """A task's tools under its agent's entry (minus ``drop``, plus ``add``)."""
        return configchain.effective_tools(task.tools, self.entry(task.role))

    def configure(self, task: TaskSpec) -> TaskSpec:
        """The task as its agent runs it under the configuration in force: effective tools,
        the prompt with what the configuration adds (the template's instruction; with
        ``gates_in_prompt`` the checks to run before finishing), and for the scripted
        adapter the edits of its template (``strategy_edits``). The model sees a different
        request under another strategy, so a replay journal keeps their answers apart."""
        entry = self.entry(task.role)
        edits = task.strategy_edits.get(entry["template"], task.edits)
        tools = tuple(configchain.effective_tools(task.tools, entry))
        notes = []
        template = TEMPLATE_TEXT.get(entry["template"])
        if template is not None:
            notes.append(f"Strategy ({entry['template']}): {template}")
        if entry["gates_in_prompt"] and task.gates:
            checks = "; ".join(" ".join(gate.command) for gate in task.gates)
            notes.append(f"Before you finish, run these checks yourself: {checks}")
        if edits == task.edits and set(tools) == set(task.tools) and not notes:
            return task
        prompt = "\n\n".join([task.prompt, *notes])
        return dataclasses.replace(task, prompt=prompt, edits=edits, tools=tools)

    # -- records -------------------------------------------------------------------------

    def begin(self) -> None:
        """Version 1 and the starting phase, right after the run's first records."""
        # The run's clock from here on counts from after run.start is durable (and before
        # version 1 is): the verifier bounds a review's elapsed_s by those two record times.
        self.run.flush()
        self.started_us = _micros(self._now())
        self.run.audit("config.version", self.machine.initial().record(git.head(self.run.repo)))
        self.machine.settle(self._progress())
        self._phase("run start")
        self._spacing()

    def settled(self) -> None:
        """A task settled: the phase progress moves the run into, if any, then the meta
        layer's reviews for every review point progress passed (25, 50, 75 %; thresholds
        tightened in hours 4 to 6)."""
        progress = self._progress()
        if progress == self.machine.progress:
            return
        previous = self.machine.progress
        elapsed_s, heightened = 0, False
        if meta.progress_reviews(previous, progress):
            # A review will carry elapsed_s: the settling transition is durable before the
            # clock is read, so elapsed_s lies between its record's time and the review's
            # (what the verifier checks). Without a review nothing here reads the clock, and
            # the transition waits for the next group commit (before the next effect).
            self.run.flush()
            elapsed_s = max(0, (_micros(self._now()) - self.started_us) // 1_000_000)
            heightened = phases.HEIGHTENED_FROM_S <= elapsed_s < phases.HEIGHTENED_UNTIL_S
        if self.machine.settle(progress) is not None:
            self._phase("progress")
            self._spacing()
        for review in self.machine.reviews(previous, heightened=heightened):
            self.run.audit(
                "control.review",
                {
                    "step": self.machine.steps,
                    "progress_pm": progress,
                    "elapsed_s": elapsed_s,
                    "heightened": heightened,
                    **review.record(),
                },
            )

    def _now(self) -> str:
        """The run clock's current reading, without advancing a logical clock."""
        clock = self.run.clock
        peek = getattr(clock, "peek", None)
        return str(peek() if callable(peek) else clock())

    def step(self, task: TaskSpec, attempt: int, cls: str | None, facts: JobFacts) -> Observed:
        """One retired attempt: its readings, the decisions they provoke, new versions."""
        agent = task.role
        step = Step(
            task=task.id,
            agent=agent,
            subtree=subtree_of(task.scope),
            attempt=attempt,
            cls=cls,
            tier1=tier1(
                cls=cls, attempt=attempt, task=task.id, facts=facts, coverage=self._coverage()
            ),
            measures=measures(agent, facts, self.history),
        )
        remember(agent, facts, cls is None, self.history)
        phase = self.machine.phase
        observed = self.machine.observe(step)
        self.run.audit(
            "control.sensor",
            {
                "step": observed.step,
                "task": step.task,
                "agent": agent,
                "subtree": step.subtree,
                "attempt": attempt,
                "phase": phase,
                "class": cls,
                "readings": [reading.record() for reading in observed.readings],
            },
        )
        for decision in observed.decisions:
            self.run.audit("control.decision", decision.record())
        if observed.versions:
            snapshot = git.head(self.run.repo)
            for version in observed.versions:
                self.run.audit("config.version", version.record(snapshot))
        return observed

    def judge(self, alert: str, verdict: str) -> str | None:
        """The operator's verdict on an alert (``harness judge``): None when taken, else why
        not. Its record (``control.verdict``) is the command desk's, after the receipt."""
        return self.machine.judge(alert, verdict)

    def resumed(self) -> None:
        """After the fold of a resumed run: progress is the task states' (a review point
        already passed is not passed again)."""
        self.machine.progress = self._progress()

    def replay(self, kind: str, body: Mapping[str, Any], time: str | None = None) -> None:
        """Fold one audit record of a run being resumed (in store order)."""
        if kind == "run.start" and time is not None:
            self.started_us = _micros(time)
        elif kind == "control.sensor":
            step, readings = step_of(body)
            self.machine.observe(step, readings)
        elif kind == "control.verdict":
            self.machine.judge(str(body["alert"]), str(body["verdict"]))
        elif kind == "control.phase":
            self.machine.phase = str(body["phase"])
            self.machine.progress = int(body["progress_pm"])

    # -- helpers -------------------------------------------------------------------------

    def _phase(self, reason: str) -> None:
        self.run.audit(
            "control.phase",
            {
                "phase": self.machine.phase,
                "progress_pm": self.machine.progress,
                "step": self.machine.steps,
                "reason": reason,
            },
        )

    def _spacing(self) -> None:
        """Seal at least as often as the phase's checkpoint spacing (or the plan's, if
        shorter)."""
        minutes = phases.PROFILES[self.machine.phase].checkpoint_min
        self.run.recorder.respace_time(min(self.run.plan.seal_every_s, minutes * 60))

    def _progress(self) -> int:
        states = self.run.states
        settled = sum(1 for state in states.values() if state.value in phases.SETTLED)
        return phases.progress_pm(settled, len(self.run.plan.tasks))

    def _coverage(self) -> int | None:
        if not self.requirements:
            return None
        states = self.run.states
        covered = {
            r
            for task in self.run.plan.tasks
            if states.get(task.id) is not None and states[task.id].value == "done"
            for r in task.requirements
        }
        return len(covered) * 1000 // len(self.requirements)


def _micros(stamp: str) -> int:
    """Microseconds since the epoch of a record time ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""
    moment = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return int(moment.timestamp()) * 1_000_000 + moment.microsecond
