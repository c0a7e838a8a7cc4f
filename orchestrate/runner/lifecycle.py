"""The run's lifecycle (``run.status``): creating -> starting -> running ... -> terminal.

Active states: creating, starting, running, waiting_approval (a round gate waits),
stopping (a stop or abort was applied). Terminal: completed, failed, cancelled, blocked,
incomplete — decided by ``harness.verify.rules.lifecycle.terminal_status`` from the task
states, the suspended rounds tasks and the applied stop/abort, and recorded right before
``run.end`` while the control bus is held exclusively (a command either arrives before and is
answered, or after and its CLI sees the run ended).

A *continue* (``harness resume``): a ``resume`` command on the bus, whose revision is the
current epoch, reopens a run that ended ``blocked`` or ``incomplete`` (or crashed): receipt,
``run.status starting`` with epoch + 1 (at most ``MAX_EPOCH``) naming the command, then every
blocked task goes back to open (the scheduler re-blocks those whose blocker is still final).
"""

from __future__ import annotations

from harness.verify.fsm import TaskState
from harness.verify.rules import lifecycle as rule
from harness.verify.rules.rounds import MAX_EPOCH

from .core import RunAbortedError, RunCore

S = TaskState


def begin(run: RunCore, *, fresh: bool) -> None:
    """Statuses of a (re)starting run: creating (new runs only), starting, running."""
    if fresh or run.status is None:
        run.set_status("creating", "run.start recorded")
    if run.status != "starting":
        run.set_status("starting", "new run" if fresh else "resumed after a runtime crash")
    run.set_status("running", "the loop runs")


def take_resume(run: RunCore, *, ended: bool) -> bool:
    """Apply a pending ``resume`` command (True). An ended run needs one: without it nothing
    is written and ``RunAbortedError`` says how to go on."""
    desk = run.desk
    commands = desk.bus.poll()
    if ended and not any(c.command == "resume" for c in commands):
        raise RunAbortedError(
            f"run {run.run_id} has already ended ({run.status or 'no status'}); continue it "
            f"with `harness resume --run {run.run_id}` (blocked or incomplete runs only), "
            "start a new run (another --run id), or replay it in a fresh checkout with the "
            "same keys (harness run --replay)"
        )
    continuable = run.status is None or run.status in rule.ACTIVE or rule.may_continue(run.status)
    desk.accept_resume = continuable and run.epoch < MAX_EPOCH
    for command in commands:
        desk.decide(command)
    desk.accept_resume = False
    run.flush()
    command_id = desk.resume_command
    if command_id is None:
        if ended:
            raise RunAbortedError(
                f"run {run.run_id} ended {run.status}: only blocked or incomplete runs continue"
            )
        return False
    run.epoch += 1
    run.attempts.clear()  # attempt limits count within one epoch
    run.set_status("starting", "continue", command=command_id)
    run.suspended.clear()
    for task, state in sorted(run.states.items()):
        if state is S.BLOCKED:
            run.move(task, S.OPEN, f"continue (epoch {run.epoch})")
    run.flush()
    return True


def finish(run: RunCore, *, stopped: bool, outcome: str, bus: bool = True) -> None:
    """The terminal status and ``run.end``, under the bus's exclusive hold (``bus`` False:
    the bus itself is unusable — unsafe or tampered — and the run ends failed without it)."""
    if not bus:
        _end(run, stopped=False, outcome=outcome, aborted=True)
        return
    with run.desk.drain() as late:
        for command in late:
            run.desk.decide(command)
        _end(run, stopped=stopped, outcome=outcome, aborted=run.aborted)


def _end(run: RunCore, *, stopped: bool, outcome: str, aborted: bool) -> None:
    terminal = rule.terminal_status(
        {task: state.value for task, state in run.states.items()},
        dict(run.suspended),
        stopped=stopped and not aborted,
        aborted=aborted,
    )
    run.set_status(terminal, f"the run ends: {outcome}")
    run.audit("run.end", {"outcome": outcome})
    run.flush()
