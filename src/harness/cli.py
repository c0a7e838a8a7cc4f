"""The ``harness`` command: keys, recording and the demo. Verification is ``harness-verify``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from harness import __version__

app = typer.Typer(
    name="harness",
    help="Record AI coding-agent runs as verifiable evidence.",
    no_args_is_help=True,
    add_completion=False,
)
keys_app = typer.Typer(help="Operator keys (Ed25519 signing key, HMAC master key).")
app.add_typer(keys_app, name="keys")


def _keys_for(state: Path, keys_dir: Path | None) -> Path:
    """``--keys``, else the default keys folder of the repository ``state`` belongs to, else
    (for these sealing commands only, never ``run``) a ``keys/`` folder inside the state
    folder when one exists there: the demo's throw-away layout."""
    from harness.receipts.keys import default_keys_dir

    if keys_dir is not None:
        return keys_dir
    default = default_keys_dir(state.absolute().parent)
    legacy = state / "keys"
    return legacy if not default.exists() and legacy.is_dir() else default


EXIT_HELP = (
    "Exit codes: 0 success (for run: every task done); 1 the work failed (a task not done, "
    "evidence invalid, a key or store error); 2 usage error (bad option, malformed or unknown "
    "run id, a folder that must be new is not)."
)


def _print_version(value: bool) -> None:
    """Eager: ``harness --version`` needs no subcommand (a group would otherwise ask for one)."""
    if value:
        typer.echo(f"harness {__version__}")
        raise typer.Exit(0)


def _usage_error(message: str) -> typer.Exit:
    """One line on stderr and exit 2, the convention shared with ``harness-verify``."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


@app.callback(epilog=EXIT_HELP)
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-v",
            help="Print the version and exit.",
            is_eager=True,
            callback=_print_version,
        ),
    ] = False,
) -> None:
    """Record AI coding-agent runs as verifiable evidence."""


@keys_app.command("init")
def keys_init(
    folder_opt: Annotated[
        Path | None,
        typer.Option(
            "--dir",
            help="Where to create the keys (default: the current repository's keys folder, "
            "~/.config/harness/keys/<repo id>).",
        ),
    ] = None,
) -> None:
    """Create the signing key and HMAC master key (mode 0600, never in git's tracked tree)."""
    from harness.receipts.keys import KeyFileError, default_keys_dir, init_keys

    folder = folder_opt if folder_opt is not None else default_keys_dir(Path.cwd())
    try:
        keys = init_keys(folder)
    except KeyFileError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"key id: {keys.key_id}")
    typer.echo(f"verifier key: {keys.note_signer().verifier_key()}")
    typer.echo(f"keys written to {folder.absolute()}")


@app.command("record")
def record(
    store: Annotated[str, typer.Argument(help="lineage, audit, replay or control")],
    kind: Annotated[str, typer.Argument(help="record kind, e.g. event")],
    body: Annotated[str, typer.Argument(help="record body as a JSON object")],
    run_id: Annotated[str, typer.Option("--run", help="run id")],
    state: Annotated[Path, typer.Option("--state", help="state folder")] = Path(".harness"),
    keys_dir: Annotated[Path | None, typer.Option("--keys", help="keys folder")] = None,
    checkpoint: Annotated[bool, typer.Option(help="sign a checkpoint afterwards")] = False,
) -> None:
    """Append one record durably to a run's store (low-level; the runtime does this for you)."""
    from harness.receipts.keys import KeyFileError, load_keys
    from harness.receipts.run import RunRecorder
    from harness.receipts.store import StoreError
    from harness.verify.canonical import parse_strict_json
    from harness.verify.errors import VerificationError

    try:
        keys = load_keys(_keys_for(state, keys_dir))
        parsed = parse_strict_json(body.encode("utf-8"))
        with RunRecorder(state, run_id, keys) as run:
            seq = run.record(store, kind, parsed)
            if checkpoint:
                run.store(store).checkpoint(keys.note_signer())
    except (KeyFileError, StoreError, VerificationError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(json.dumps({"store": store, "run": run_id, "seq": seq}))


def _check_runs_and_parent(state: Path, run_ids: list[str] | None, out: Path | None) -> None:
    """Usage errors (exit 2) before anything is sealed: a ``--run`` naming no recorded run,
    and an output whose parent folder does not exist (never created silently: a typo in a
    path would otherwise scatter evidence)."""
    from harness.orchestrate.state import UsageError, require_runs

    try:
        require_runs(state, run_ids or [])
    except UsageError as exc:
        raise _usage_error(str(exc)) from None
    if out is not None and not out.absolute().parent.is_dir():
        raise _usage_error(
            f"{out}: the folder {out.absolute().parent} does not exist (create it first)"
        )


def _check_period(since: str | None, until: str | None) -> None:
    """``--since`` after ``--until`` is an empty period: a usage error saying so (the times
    use one fixed RFC 3339 form, so they compare as strings; malformed ones are left to the
    pack's own check)."""
    from harness.verify.records import TIME_RE

    if since is None or until is None:
        return
    if TIME_RE.fullmatch(since) and TIME_RE.fullmatch(until) and since > until:
        raise _usage_error(f"--since {since} is after --until {until}: the period is empty")


@app.command("export")
def export(
    out: Annotated[
        Path,
        typer.Argument(
            help="bundle.tar or bundle.tar.gz to write (with --eu-ai-act: the pack folder or .tar)"
        ),
    ],
    run_ids: Annotated[
        list[str] | None, typer.Option("--run", help="Run id to export (repeatable; default all).")
    ] = None,
    state: Annotated[Path, typer.Option("--state", help="state folder")] = Path(".harness"),
    keys_dir: Annotated[Path | None, typer.Option("--keys", help="keys folder")] = None,
    eu_ai_act: Annotated[
        bool,
        typer.Option(
            "--eu-ai-act",
            help="Write an EU AI Act Art. 12 evidence pack to OUT (a folder, or a .tar).",
        ),
    ] = False,
    since: Annotated[
        str | None, typer.Option("--since", help="Pack: runs with records at or after this time.")
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", help="Pack: runs with records at or before this time.")
    ] = None,
    controller: Annotated[
        str, typer.Option("--controller", help="Pack: who keeps the logs (retention statement).")
    ] = "the operator of this harness",
    retention_days: Annotated[
        int, typer.Option("--retention-days", help="Pack: retention period (at least 183 days).")
    ] = 183,
    wheel: Annotated[
        Path | None,
        typer.Option(
            "--wheel",
            help="Pack: the harness-verify wheel to carry (default: built from this source tree).",
        ),
    ] = None,
    wheelhouse: Annotated[
        Path | None,
        typer.Option(
            "--wheelhouse", help="Pack: folder of dependency wheels to carry (offline install)."
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Pack: replace an existing pack at OUT.")
    ] = False,
) -> None:
    """Seal every store with a fresh checkpoint and write a signed, deterministic bundle."""
    from harness.receipts.bundle import ExportError, export_bundle
    from harness.receipts.keys import KeyFileError, load_keys
    from harness.receipts.store import StoreError

    _check_runs_and_parent(state, run_ids, out)
    _check_period(since, until)

    if eu_ai_act:
        from harness.receipts.euaiact import PackError, check_pack_out, export_pack

        try:
            check_pack_out(out, force)
        except PackError as exc:
            raise _usage_error(str(exc)) from None

        try:
            keys = load_keys(_keys_for(state, keys_dir))
            pack = export_pack(
                state,
                out,
                keys,
                since=since,
                until=until,
                controller=controller,
                retention_days=retention_days,
                run_ids=run_ids,
                wheel=wheel,
                wheelhouse=wheelhouse,
                force=force,
            )
        except (KeyFileError, StoreError, ExportError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        typer.echo(
            f"wrote EU AI Act evidence pack {pack.path.absolute()}: {len(pack.runs)} run(s), "
            f"bundle {pack.status}, signer key id {pack.key_id}"
        )
        return
    if since or until:
        typer.echo("error: --since/--until apply to --eu-ai-act packs only", err=True)
        raise typer.Exit(2)
    try:
        keys = load_keys(_keys_for(state, keys_dir))
        result = export_bundle(state, out, keys, run_ids)
    except (KeyFileError, StoreError, ExportError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(
        f"wrote {result.path.absolute()}: {len(result.runs)} run(s), {result.members} members, "
        f"{result.bytes} bytes, signer key id {result.key_id}"
    )


@app.command("receipt")
def receipt(
    artifact: Annotated[Path, typer.Argument(help="artifact path, relative to the repository")],
    run_ids: Annotated[
        list[str] | None, typer.Option("--run", help="Run id to look in (repeatable).")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Receipt file (default ARTIFACT.receipt.json).")
    ] = None,
    state: Annotated[Path, typer.Option("--state", help="state folder")] = Path(".harness"),
    keys_dir: Annotated[Path | None, typer.Option("--keys", help="keys folder")] = None,
) -> None:
    """Write the receipt of one artifact: RFC 6962 proof, signed checkpoint, COSE receipt."""
    from harness.receipts.bundle import ExportError, receipt_for_path
    from harness.receipts.keys import KeyFileError, load_keys
    from harness.receipts.store import StoreError

    _check_runs_and_parent(state, run_ids, out)

    name = artifact.as_posix().removeprefix("./")
    try:
        keys = load_keys(_keys_for(state, keys_dir))
        run_id, data = receipt_for_path(state, keys, name, run_ids)
    except (KeyFileError, StoreError, ExportError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    target = out or artifact.with_name(artifact.name + ".receipt.json")
    target.write_bytes(data)
    typer.echo(f"wrote {target} (run {run_id}, signer key id {keys.key_id})")


@app.command("demo")
def demo(
    folder: Annotated[
        Path | None, typer.Option("--dir", help="Folder for the demo (default: a new temp dir).")
    ] = None,
) -> None:
    """The main job end to end: a throw-away repo, a plan run by the scripted agent in real
    worktrees with real gates, then bundle.tar exported and verified offline."""
    from harness.orchestrate.demo import run_demo
    from harness.receipts.keys import KeyFileError
    from harness.verify.render import render_text

    if folder is not None and folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise _usage_error(
            f"--dir {folder}: exists and is not an empty folder; the demo creates a new "
            "repository and keys there, choose a new or empty folder"
        )
    try:
        result = run_demo(folder)
    except (KeyFileError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(render_text(result.report))
    from harness.orchestrate.state import last_status, task_reasons

    state_folder = result.repo / ".harness"
    run_status, _ = last_status(state_folder, result.run_id)
    reasons = task_reasons(state_folder, result.run_id)
    typer.echo(f"run {result.run_id}: {run_status}")
    typer.echo("tasks:")
    for task, state in sorted(result.summary.states.items()):
        why = "" if state.value == "done" else f": {reasons.get(task, '')}"
        typer.echo(f"  {task:12} {state.value}{why}")
    typer.echo(f"demo repository: {result.repo}")
    typer.echo(f"bundle:          {result.bundle}")
    typer.echo(
        f"look at it:      harness dashboard --repo {result.repo} --keys {result.keys_dir}"
        + ("" if _dashboard_installed() else "  (pip install 'harness-verify[dashboard]')")
    )
    typer.echo(f"verify it yourself: harness-verify {result.bundle} --trusted-key {result.key_id}")
    raise typer.Exit(int(result.report.exit_code))


def _dashboard_installed() -> bool:
    """Whether the optional dashboard extra (starlette, uvicorn) is importable."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("starlette", "uvicorn"))


_KEYS_HELP = "keys folder (default: ~/.config/harness/keys/<repo id>, outside the repository)"


@app.command("init")
def init(
    repo: Annotated[Path, typer.Option("--repo", help="git repository")] = Path(),
    keys_dir: Annotated[Path | None, typer.Option("--keys", help=_KEYS_HELP)] = None,
) -> None:
    """Create .harness/ (git-ignored via .git/info/exclude) and the operator keys (outside
    the repository; a keys folder an agent could reach is refused)."""
    from harness.orchestrate.state import StateError, init_state

    try:
        state, folder, keys = init_state(repo, keys_dir)
    except StateError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"state: {state}")
    typer.echo(f"keys: {folder}")
    typer.echo(f"signer key id: {keys.key_id}")


@app.command("doctor")
def doctor(
    repo: Annotated[Path, typer.Option("--repo", help="git repository")] = Path(),
    keys_dir: Annotated[Path | None, typer.Option("--keys", help=_KEYS_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per check.")] = False,
) -> None:
    """Check git, the sandbox (runs bubblewrap once), key modes and reachability, and the
    agent CLIs on PATH; exit 1 when a check fails."""
    from harness.orchestrate.doctor import run_checks

    checks = run_checks(repo, keys=keys_dir)
    for check in checks:
        if as_json:
            typer.echo(json.dumps({"check": check.name, "status": check.status,
                                   "detail": check.detail}))  # fmt: skip
        else:
            typer.echo(f"{check.status:4}  {check.name}: {check.detail}")
    raise typer.Exit(1 if any(c.status == "fail" for c in checks) else 0)


@app.command("run")
def run(
    plan_file: Annotated[Path, typer.Argument(help="plan.toml")],
    repo: Annotated[Path, typer.Option("--repo", help="git repository")] = Path(),
    run_id: Annotated[str | None, typer.Option("--run", help="run id (default: new)")] = None,
    replay: Annotated[
        str | None, typer.Option(help="replay model answers from this run's journal")
    ] = None,
    allow_live_miss: Annotated[bool, typer.Option(help="call live on a replay miss")] = False,
    logical_clock: Annotated[bool, typer.Option(help="deterministic record times")] = False,
    capabilities: Annotated[Path | None, typer.Option(help="capabilities.toml (tool tags)")] = None,
    keys_dir: Annotated[Path | None, typer.Option("--keys", help=_KEYS_HELP)] = None,
    no_sandbox: Annotated[
        bool,
        typer.Option(
            "--no-sandbox",
            help="Run agents and gates without a sandbox (explicit opt-out, recorded in the "
            "evidence). Without it, real agent CLIs refuse to run where bubblewrap cannot.",
        ),
    ] = False,
    executor: Annotated[
        str,
        typer.Option(
            help="Where agents run: 'local' (supervised processes on this machine) or 'ray' "
            "(each batch's agent as a Ray task; needs --address and the ray extra).",
        ),
    ] = "local",
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address (host:port) for --executor ray")
    ] = None,
) -> None:
    """Run (or resume) a plan: agents in sandboxed worktrees, gates, merges, evidence."""
    from harness.orchestrate.capabilities import CapabilityError
    from harness.orchestrate.runtime import RunAbortedError
    from harness.orchestrate.sandbox.policy import SandboxUnavailableError
    from harness.orchestrate.state import StateError, UsageError, run_plan, state_dir, task_reasons
    from harness.receipts.store import StoreError
    from harness.verify.rules.fsm import TaskState

    def warn(message: str) -> None:
        typer.echo(f"warning: {message}", err=True)

    if executor not in ("local", "ray"):
        raise _usage_error(f"--executor must be 'local' or 'ray', not {executor!r}")
    if (executor == "ray") != (address is not None):
        raise _usage_error("--executor ray needs --address HOST:PORT (and only it takes one)")
    try:
        summary = run_plan(
            repo.absolute(),
            plan_file,
            run_id=run_id,
            replay=replay,
            allow_live_miss=allow_live_miss,
            logical_clock=logical_clock,
            capabilities=capabilities,
            keys=keys_dir,
            no_sandbox=no_sandbox,
            warn=warn,
            ray_address=address,
        )
    except UsageError as exc:
        raise _usage_error(str(exc)) from None
    except (
        StateError,
        StoreError,
        CapabilityError,
        RunAbortedError,
        SandboxUnavailableError,
        OSError,
    ) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    reasons = task_reasons(state_dir(repo.absolute()), summary.run_id)
    typer.echo(f"run {summary.run_id}: {summary.batches} batch(es)")
    not_done = 0
    for task, state in sorted(summary.states.items()):
        if state is TaskState.DONE:
            typer.echo(f"  {task:12} {state.value}")
        else:
            not_done += 1
            typer.echo(f"  {task:12} {state.value}: {reasons.get(task, 'no reason recorded')}")
    if not_done:
        typer.echo(
            f"error: run {summary.run_id} did not complete: {not_done} of "
            f"{len(summary.states)} task(s) not done",
            err=True,
        )
        raise typer.Exit(1)


@app.command("status")
def status(
    repo: Annotated[Path, typer.Option("--repo", help="git repository")] = Path(),
    run_ids: Annotated[
        list[str] | None, typer.Option("--run", help="Only this run (repeatable; default all).")
    ] = None,
) -> None:
    """Runs and the state of each task, read from the audit stores."""
    from harness.orchestrate.runtime import task_states
    from harness.orchestrate.state import UsageError, known_runs, require_runs, state_dir

    state = state_dir(repo.absolute())
    try:
        require_runs(state, run_ids or [])
    except UsageError as exc:
        raise _usage_error(str(exc)) from None
    runs = sorted(set(run_ids)) if run_ids else known_runs(state)
    if not runs:
        typer.echo("no runs")
    from harness.orchestrate.state import control_lines, last_status

    for run_id in runs:
        run_status, _ = last_status(state, run_id)
        typer.echo(f"run {run_id}" + (f": {run_status}" if run_status else ""))
        for task, task_state in sorted(task_states(state, run_id).items()):
            typer.echo(f"  {task:12} {task_state}")
        for line in control_lines(state, run_id):
            typer.echo(line)
        _human_messages(state, run_id)


def _human_messages(state: Path, run_id: str) -> None:
    """The run's open event bus messages addressed to a human (docs/spec/events.md)."""
    from harness.orchestrate.events import human_messages
    from harness.receipts.run import run_dir
    from harness.verify import textsafe

    messages = human_messages(run_dir(state, run_id))
    if messages:
        typer.echo(f"  messages for you ({len(messages)}):")
    for message in messages:
        typer.echo(
            f"    [{message['tier']}] {message['time']} from {message['source']}: "
            f"{textsafe.text(message['text'])}"
        )


@app.command("abandon")
def abandon(
    run_id: Annotated[str, typer.Option("--run", help="run id")],
    batch: Annotated[str, typer.Option("--batch", help="batch id (b0001, ...)")],
    reason: Annotated[str, typer.Option(help="why (recorded)")],
    repo: Annotated[Path, typer.Option("--repo", help="git repository")] = Path(),
    operator: Annotated[str, typer.Option(help="who decides")] = "operator",
    keys_dir: Annotated[Path | None, typer.Option("--keys", help=_KEYS_HELP)] = None,
) -> None:
    """Delete the branch of a retired, unmerged batch, after recording the decision (its
    branch and tip) in the run's control store. Branches are never deleted otherwise."""
    from harness.orchestrate.git import GitError
    from harness.orchestrate.state import StateError, UsageError, request_abandon

    try:
        seq, branch, tip = request_abandon(
            repo.absolute(), run_id, batch, operator, reason, keys_dir
        )
    except UsageError as exc:
        raise _usage_error(str(exc)) from None
    except (StateError, GitError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"abandoned {branch} at {tip} (control record {seq})")


from harness.cli_control import register  # noqa: E402  (the operator commands)
from harness.cli_dashboard import register as register_dashboard  # noqa: E402
from harness.cli_hook import register as register_hook  # noqa: E402  (agent CLI hooks)

register(app)
register_hook(app)
register_dashboard(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
