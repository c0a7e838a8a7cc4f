"""``harness stop|abort|approve|answer|instruct|resume``: operator commands on a run's bus.

Every command goes through ``harness.orchestrate.state.request_command`` (the control store,
idempotent by ``--id``: the same command again under the same id is answered with the record
already there; another payload under it is refused). The runtime answers each command with a
receipt in the audit store, the only terminal authority for it (docs/spec/control.md).
``register`` adds them to the ``harness`` app (``harness.cli`` calls it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

_KEYS_HELP = "keys folder (default: ~/.config/harness/keys/<repo id>, outside the repository)"

_ID_HELP = "Command id (default: random); the same id again replays, never duplicates."
_REVISION_HELP = "The run epoch this command is meant for (default: the current one)."


def _usage(message: str) -> typer.Exit:
    """One line on stderr and exit 2 (the convention of ``harness`` and ``harness-verify``)."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def _issue(
    repo: Path,
    run_id: str,
    command: str,
    args: dict[str, Any],
    operator: str,
    keys_dir: Path | None,
    command_id: str | None,
    revision: int | None,
) -> None:
    from harness.orchestrate.state import StateError, UsageError, request_command

    try:
        issued = request_command(
            repo.absolute(),
            run_id,
            command,
            args,
            operator,
            keys_dir,
            command_id=command_id,
            revision=revision,
        )
    except UsageError as exc:
        raise _usage(str(exc)) from None
    except StateError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    again = " (already recorded: replayed)" if issued.replayed else ""
    typer.echo(f"{command} requested: control record {issued.seq}, id {issued.id}{again}")


RunOpt = Annotated[str, typer.Option("--run", help="run id")]
RepoOpt = Annotated[Path, typer.Option("--repo", help="git repository")]
OperatorOpt = Annotated[str, typer.Option(help="who asks (recorded)")]
KeysOpt = Annotated[Path | None, typer.Option("--keys", help=_KEYS_HELP)]
IdOpt = Annotated[str | None, typer.Option("--id", help=_ID_HELP)]
RevisionOpt = Annotated[int | None, typer.Option("--revision", help=_REVISION_HELP)]


def stop(
    run_id: RunOpt,
    repo: RepoOpt = Path(),
    operator: OperatorOpt = "operator",
    keys_dir: KeysOpt = None,
    command_id: IdOpt = None,
    revision: RevisionOpt = None,
) -> None:
    """Ask a running run to stop (it ends cancelled); honoured at the next decision point."""
    _issue(repo, run_id, "stop", {}, operator, keys_dir, command_id, revision)


def abort(
    run_id: RunOpt,
    reason: Annotated[str, typer.Option(help="why (recorded)")],
    repo: RepoOpt = Path(),
    operator: OperatorOpt = "operator",
    keys_dir: KeysOpt = None,
    command_id: IdOpt = None,
    revision: RevisionOpt = None,
) -> None:
    """Abort a running run: it stops at once and ends failed."""
    _issue(repo, run_id, "abort", {"reason": reason}, operator, keys_dir, command_id, revision)


def approve(
    run_id: RunOpt,
    text: Annotated[str, typer.Option(help="a note for the Manager (optional)")] = "",
    review: Annotated[
        str | None,
        typer.Option(help="an action review waiting for approval: <batch>/<n>, e.g. b0001/3"),
    ] = None,
    repo: RepoOpt = Path(),
    operator: OperatorOpt = "operator",
    keys_dir: KeysOpt = None,
    command_id: IdOpt = None,
    revision: RevisionOpt = None,
) -> None:
    """Approve a round gate opened by failing rounds (the rounds go on, the streak reset), or
    with --review an agent's irreversible action waiting for approval (it then runs)."""
    args: dict[str, Any] = {"text": text} if text else {}
    if review is not None:
        batch, _, number = review.partition("/")
        if not batch or not number.isdigit() or int(number) < 1 or text:
            raise _usage("--review takes <batch>/<n> (n from 1), and no --text")
        args = {"review": review}
    _issue(repo, run_id, "approve", args, operator, keys_dir, command_id, revision)


def answer(
    run_id: RunOpt,
    text: Annotated[str, typer.Option(help="the answer to the Manager's question")],
    repo: RepoOpt = Path(),
    operator: OperatorOpt = "operator",
    keys_dir: KeysOpt = None,
    command_id: IdOpt = None,
    revision: RevisionOpt = None,
) -> None:
    """Answer the question a Manager asked (``Next: ask``); its next plan sees the answer."""
    _issue(repo, run_id, "answer", {"text": text}, operator, keys_dir, command_id, revision)


def instruct(
    run_id: RunOpt,
    task: Annotated[str, typer.Option(help="the rounds task")],
    text: Annotated[str, typer.Option(help="the instruction")],
    repo: RepoOpt = Path(),
    operator: OperatorOpt = "operator",
    keys_dir: KeysOpt = None,
    command_id: IdOpt = None,
    revision: RevisionOpt = None,
) -> None:
    """Give a rounds task's Manager an instruction for its next plan."""
    args = {"task": task, "text": text}
    _issue(repo, run_id, "instruct", args, operator, keys_dir, command_id, revision)


def judge(
    run_id: RunOpt,
    alert: Annotated[
        str, typer.Option(help="the alert, <step>:<key> (as harness status lists it)")
    ],
    verdict: Annotated[
        str, typer.Option(help="confirmed (the alert was right) or overridden (a false alarm)")
    ],
    repo: RepoOpt = Path(),
    operator: OperatorOpt = "operator",
    keys_dir: KeysOpt = None,
    command_id: IdOpt = None,
    revision: RevisionOpt = None,
) -> None:
    """Judge a control alert (a warn or an escalation): the meta layer's false-alarm rate
    counts what the operator confirmed, overrode, or left unjudged (ignored)."""
    if verdict not in ("confirmed", "overridden"):
        raise _usage("--verdict is confirmed or overridden")
    step, _, key = alert.partition(":")
    if not step.isdigit() or not key:
        raise _usage("--alert takes <step>:<key>, e.g. 11:agent:writer:pace_tokens")
    args = {"alert": alert, "verdict": verdict}
    _issue(repo, run_id, "judge", args, operator, keys_dir, command_id, revision)


def resume(
    plan_file: Annotated[Path, typer.Argument(help="the run's plan.toml")],
    run_id: RunOpt,
    retry: Annotated[
        bool, typer.Option(help="start a new run from the saved task instead of continuing")
    ] = False,
    new_run: Annotated[
        str | None, typer.Option("--new-run", help="with --retry: the new run's id")
    ] = None,
    repo: RepoOpt = Path(),
    operator: OperatorOpt = "operator",
    keys_dir: KeysOpt = None,
    command_id: IdOpt = None,
    logical_clock: Annotated[bool, typer.Option(help="deterministic record times")] = False,
    capabilities: Annotated[Path | None, typer.Option(help="capabilities.toml")] = None,
    no_sandbox: Annotated[bool, typer.Option("--no-sandbox", help="as for run")] = False,
) -> None:
    """Continue a blocked, incomplete or crashed run (resume epoch + 1, from its recorded
    rounds), or with --retry start a new run from the saved plan (its digest must match)."""
    from harness.orchestrate.state import (
        StateError,
        UsageError,
        check_continuable,
        check_run_id,
        check_same_plan,
        state_dir,
    )

    state = state_dir(repo.absolute())
    try:
        check_run_id(run_id)
        if retry:
            check_same_plan(state, run_id, plan_file)
        else:
            check_continuable(state, run_id)
    except UsageError as exc:
        raise _usage(str(exc)) from None
    except StateError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    if not retry:
        _issue(repo, run_id, "resume", {}, operator, keys_dir, command_id, None)
    from harness.cli import run as run_command

    run_command(
        plan_file,
        repo=repo,
        run_id=new_run if retry else run_id,
        replay=None,
        allow_live_miss=False,
        logical_clock=logical_clock,
        capabilities=capabilities,
        keys_dir=keys_dir,
        no_sandbox=no_sandbox,
        executor="local",
        address=None,
    )


def register(app: typer.Typer) -> None:
    """Add the operator commands to ``app``."""
    for name, command in (
        ("stop", stop),
        ("abort", abort),
        ("approve", approve),
        ("answer", answer),
        ("instruct", instruct),
        ("judge", judge),
        ("resume", resume),
    ):
        app.command(name)(command)
