"""``harness dashboard``: serve the live dashboard of a repository's runs.

Starlette and uvicorn (the ``dashboard`` extra) are imported only when the command runs,
so ``harness --help`` works without them. The checks that need no server come first:
a non-loopback ``--host`` without a token is refused (exit 2) before anything is bound.
``register`` adds the command to the ``harness`` app (``harness.cli`` calls it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

TOKEN_ENV = "HARNESS_DASHBOARD_TOKEN"  # noqa: S105 (a variable name, not a secret)


def _usage(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def dashboard(
    repo: Annotated[Path, typer.Option("--repo", help="git repository")] = Path(),
    host: Annotated[str, typer.Option(help="address to bind (loopback by default)")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="port (0 picks a free one)")] = 8799,
    token: Annotated[
        str | None,
        typer.Option(
            help=f"access token (or ${TOKEN_ENV}); required to bind a non-loopback address",
            envvar=TOKEN_ENV,
            show_envvar=False,
        ),
    ] = None,
    allow_control: Annotated[
        bool,
        typer.Option(
            "--allow-control",
            help="allow stop/approve/answer/instruct/resume (commands on the control bus)",
        ),
    ] = False,
    keys_dir: Annotated[
        Path | None,
        typer.Option("--keys", help="keys folder (default: ~/.config/harness/keys/<repo id>)"),
    ] = None,
) -> None:
    """Serve a live dashboard of the runs and their evidence (read-only by default).

    Prints `dashboard: http://HOST:PORT/` once listening; SIGTERM or SIGINT stops it (exit 0).
    """
    if not 0 <= port <= 65535:
        raise _usage(f"--port {port}: must be 0-65535")
    if token is not None and token == "":
        token = None
    from harness.orchestrate.dashboard.security import TOKEN_RE, is_loopback

    if token is not None and not TOKEN_RE.fullmatch(token):
        raise _usage("the token must be 16-256 characters of A-Z a-z 0-9 . _ ~ -")
    if token is None and not is_loopback(host):
        raise _usage(
            f"--host {host} is not a loopback address: anyone who can reach it could read the "
            f"runs' evidence; give a token (--token or ${TOKEN_ENV}) to bind it"
        )
    if not (repo / ".git").exists() and not (repo / ".harness").is_dir():
        raise _usage(f"{repo} is not a git repository with a .harness state folder")
    try:
        from harness.orchestrate.dashboard.server import serve
    except ImportError as exc:
        raise _usage(
            f"the dashboard needs its extra: pip install 'harness-verify[dashboard]' ({exc})"
        ) from None
    try:
        code = serve(
            repo.absolute(),
            host=host,
            port=port,
            token=token,
            allow_control=allow_control,
            keys_dir=keys_dir,
        )
    except OSError as exc:
        typer.echo(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", err=True)
        raise typer.Exit(1) from None
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add ``dashboard`` to ``app``."""
    app.command("dashboard")(dashboard)


__all__ = ["TOKEN_ENV", "dashboard", "register"]
