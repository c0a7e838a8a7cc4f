"""Issue 16 item 3: the example workflows of docs/ci/workflows/ sign bundle.tar with the
official Sigstore client and gate on that identity, and every command they run is one our
command lines (and sigstore's) accept.

GitHub Actions cannot run here, so the test reads the YAML, joins each ``run:`` script's
continued lines, replaces the ``${{ ... }}`` expressions by a placeholder, and has the real
parsers parse every ``harness-verify``, ``harness`` and ``sigstore`` command line: click's
(``make_context``: unknown options, missing required options, bad choices all fail) and
sigstore-python's argparse. It also holds the workflows to what docs/ci/sigstore.md promises:
third-party actions pinned by commit SHA, the signing identity fixed to the default branch of
a workflow a pull request cannot trigger, the same identity on both sides, and the trusted
root taken from the base branch.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import click
import pytest
import typer
import yaml

pytest.importorskip("sigstore")  # the extra harness-verify[sigstore]; CI installs it

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / "docs" / "ci" / "workflows"
EVIDENCE = WORKFLOWS / "harness-evidence.yml"
GATE = WORKFLOWS / "harness-gate-sigstore.yml"
EXPRESSION = re.compile(r"\$\{\{[^}]*\}\}")
PINNED = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]+@[0-9a-f]{40}")
IDENTITY = (
    "https://github.com/X/.github/workflows/harness-evidence.yml@refs/heads/main"  # after ${{ }}
)


def _load(path: Path) -> dict[Any, Any]:
    loaded: dict[Any, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return loaded


def _steps(path: Path) -> list[dict[str, Any]]:
    return [step for job in _load(path)["jobs"].values() for step in job["steps"]]


def _commands(path: Path) -> list[list[str]]:
    """Every command line of every run: script, as argv (continuations joined)."""
    found: list[list[str]] = []
    for step in _steps(path):
        script = step.get("run")
        if not script:
            continue
        joined = EXPRESSION.sub("X", script.replace("\\\n", " "))
        for line in joined.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                found.append(words)
    return found


def _click(app: typer.Typer, prog: str, args: list[str]) -> None:
    group = typer.main.get_command(app)
    assert isinstance(group, click.Group)
    name, rest = args[0], args[1:]
    command = group.commands.get(name)
    assert command is not None, f"{prog} has no command {name!r}"
    with click.Context(group, info_name=prog) as parent:
        command.make_context(name, list(rest), parent=parent)  # raises on any bad option


def _check(argv: list[str]) -> str | None:
    tool = argv[0]
    if tool == "harness-verify":
        from harness.verify.cli import app as verify_app

        _click(verify_app, tool, argv[1:])
    elif tool == "harness":
        from harness.cli import app as harness_app

        _click(harness_app, tool, argv[1:])
    elif tool == "sigstore":
        from sigstore._cli import _parser

        _parser().parse_args(argv[1:])  # argparse exits (SystemExit) on anything unknown
    else:
        return None
    return tool


@pytest.mark.parametrize("path", [EVIDENCE, GATE], ids=lambda p: p.name)
def test_every_command_the_workflow_runs_is_accepted(path: Path) -> None:
    checked = [tool for argv in _commands(path) if (tool := _check(argv)) is not None]
    expected = {
        EVIDENCE: ["harness", "harness", "sigstore", "harness-verify"],
        GATE: ["harness-verify"],
    }
    assert checked == expected[path]


def test_a_misspelt_flag_would_be_caught() -> None:
    # the check itself can fail: a flag our CLI lacks, or one sigstore lacks
    with pytest.raises(click.UsageError):
        _check(["harness-verify", "gate", "b.tar", "--base", "x", "--sigstore-bundel", "y"])
    with pytest.raises(SystemExit):
        _check(["sigstore", "sign", "--bundel", "y", "b.tar"])


@pytest.mark.parametrize("path", [EVIDENCE, GATE], ids=lambda p: p.name)
def test_actions_are_pinned_by_commit(path: Path) -> None:
    uses = [step["uses"] for step in _steps(path) if "uses" in step]
    assert uses and all(PINNED.fullmatch(value) for value in uses), uses


def test_the_signing_identity_is_one_a_pull_request_cannot_become() -> None:
    evidence = _load(EVIDENCE)
    # "on" is YAML 1.1's true: PyYAML reads the key as a boolean
    triggers = evidence.get("on", evidence.get(True))
    assert set(triggers) == {"workflow_dispatch"}, triggers
    assert evidence["permissions"]["id-token"] == "write"
    assert "id-token" not in _load(GATE)["permissions"]
    gate = next(argv for argv in _commands(GATE) if argv[:2] == ["harness-verify", "gate"])
    check = next(argv for argv in _commands(EVIDENCE) if argv[:2] == ["harness-verify", "sigstore"])
    for argv in (gate, check):
        assert argv[argv.index("--cert-identity") + 1] == IDENTITY
        assert argv[argv.index("--cert-oidc-issuer") + 1] == (
            "https://token.actions.githubusercontent.com"
        )
        assert "--cert-identity-regex" not in argv
    # the gate's trusted root is a path inside the checkout: the gate reads it from --base
    root = gate[gate.index("--trusted-root") + 1]
    assert not root.startswith(("/", "$")), root
    sign = next(argv for argv in _commands(EVIDENCE) if argv[0] == "sigstore")
    assert sign[1] == "sign" and "--bundle" in sign
