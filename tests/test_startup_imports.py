"""What ``harness-verify`` imports, in a fresh process: start-up stays short because a command
loads only what it uses (issue 14). Verifying a bundle pinned by key id loads nothing of
Sigstore, the gate, TOML, PEM keys, X.509, package metadata or XML; ``--help`` loads none of
the checks. A lazy import turned eager again fails here, not in a timed test."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import harness
from harness.receipts.bundle import export_bundle
from harness.receipts.run import RunRecorder
from harness.verify.version import VERSION, verifier_version

from .evidence_helpers import make_keys

ROOT = Path(__file__).resolve().parent.parent

# Loaded by the command that needs them, never by a plain ``bundle`` verification.
NOT_FOR_A_PLAIN_BUNDLE = (
    "sigstore",  # the optional extra
    "harness.verify.sigstore_bind",
    "harness.verify.sigstore_check",
    "harness.verify.sigstore_identity",
    "harness.verify.sigstore_key",
    "harness.verify.sigstore_render",
    "harness.verify.gate",
    "harness.verify.gitio",
    "harness.verify.basepolicy",
    "harness.verify.receiptcheck",
    "harness.verify.packcheck",
    "harness.verify.compare",
    "cryptography.x509",
    "cryptography.hazmat.primitives.serialization",  # PEM key files only
    "tomllib",  # policy files only
    "importlib.metadata",  # the version is a constant
    "xml.etree.ElementTree",  # JUnit and SARIF only
)


def _loaded(*args: str) -> tuple[int, list[str]]:
    """Run ``harness-verify ARGS`` in a fresh interpreter; its exit code and every module
    loaded by then."""
    code = (
        "import json, sys\n"
        "from harness.verify.cli import main\n"
        "try:\n"
        "    main(sys.argv[1:])\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "else:\n"
        "    code = 0\n"
        "print(json.dumps([code, sorted(sys.modules)]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    exit_code, modules = json.loads(done.stdout.splitlines()[-1])
    return exit_code, modules


def _matches(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == n or m.startswith(n + ".") for n in names)]


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("startup")
    keys = make_keys()
    with RunRecorder(folder / "state", "run-1", keys) as run:
        run.record("audit", "event", {"name": "run.begin", "data": {"plan": "p"}})
    path = export_bundle(folder / "state", folder / "bundle.tar", keys).path
    return path, keys.key_id


def test_verifying_a_pinned_bundle_loads_no_rare_path(signed: tuple[Path, str]) -> None:
    bundle, key_id = signed
    exit_code, modules = _loaded(str(bundle), "--trusted-key", key_id, "--quiet")
    assert exit_code == 0
    assert "harness.verify.bundle" in modules  # it did verify
    assert _matches(modules, NOT_FOR_A_PLAIN_BUNDLE) == []


def test_the_rare_paths_load_what_they_need(signed: tuple[Path, str], tmp_path: Path) -> None:
    """The control: the same check sees the modules a policy file and JUnit bring in, so an
    empty list above means they were not loaded, not that the check is blind."""
    bundle, key_id = signed
    policy = tmp_path / "harness-verify.toml"
    policy.write_text(f'[trust]\nkeys = ["{key_id}"]\n', encoding="utf-8")
    exit_code, modules = _loaded(str(bundle), "--policy", str(policy), "--format", "junit")
    assert exit_code == 0
    assert {"tomllib", "xml.etree.ElementTree"} <= set(modules)
    others = [n for n in NOT_FOR_A_PLAIN_BUNDLE if n not in ("tomllib", "xml.etree.ElementTree")]
    assert _matches(modules, tuple(others)) == []


def test_help_loads_no_check_and_no_cryptography() -> None:
    exit_code, modules = _loaded("--help")
    assert exit_code == 0
    verifier = {m.removeprefix("harness.verify.") for m in modules if m.startswith("harness.")}
    assert verifier <= {
        "harness", "harness.verify", "cli", "sigstore_cli", "archive", "report", "sealing",
        "textsafe", "errors", "layout",
    }  # fmt: skip
    assert _matches(modules, ("cryptography", "orjson", "rfc8785", "cbor2", "tomllib")) == []


def test_the_version_constant_is_the_distributions() -> None:
    """The verifier reports a constant (no importlib.metadata at start-up): it must be the
    version pyproject.toml builds, and the umbrella package's."""
    with (ROOT / "pyproject.toml").open("rb") as handle:
        project = tomllib.load(handle)["project"]
    assert verifier_version() == VERSION == project["version"] == harness.__version__
