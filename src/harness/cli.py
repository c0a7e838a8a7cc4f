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


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False,
) -> None:
    if version:
        typer.echo(__version__)
        raise typer.Exit(0)


@keys_app.command("init")
def keys_init(
    folder: Annotated[Path, typer.Option("--dir", help="Where to create the keys.")] = Path(
        ".harness/keys"
    ),
) -> None:
    """Create the signing key and HMAC master key (mode 0600, never in git's tracked tree)."""
    from harness.receipts.keys import KeyFileError, init_keys

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
        keys = load_keys(keys_dir or state / "keys")
        parsed = parse_strict_json(body.encode("utf-8"))
        with RunRecorder(state, run_id, keys) as run:
            seq = run.record(store, kind, parsed)
            if checkpoint:
                run.store(store).checkpoint(keys.note_signer())
    except (KeyFileError, StoreError, VerificationError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(json.dumps({"store": store, "run": run_id, "seq": seq}))


@app.command("demo")
def demo(
    folder: Annotated[
        Path | None, typer.Option("--dir", help="Folder for the demo (default: a new temp dir).")
    ] = None,
) -> None:
    """Record a small run end to end, sign checkpoints, and verify it offline."""
    from harness.demo import run_demo
    from harness.verify.errors import VerificationError

    try:
        result = run_demo(folder)
    except VerificationError as exc:
        typer.echo(f"FAILED: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"demo folder: {result.folder.absolute()}")
    typer.echo(f"run: {result.run_id}")
    typer.echo(f"signer key id: {result.key_id}")
    for name, store in result.stores.items():
        typer.echo(
            f"  {name:8} {store.size:3} records  root {store.root.hex()[:16]}…  "
            f"checkpoints at {store.checkpoint_sizes}  HMAC chain {'ok' if store.keyed else '-'}"
        )
    typer.echo("VERIFIED: signatures, canonical records, Merkle roots and HMAC chains all check")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
