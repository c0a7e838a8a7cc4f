"""The wheel, installed alone in a fresh virtualenv, verifies a bundle (what `pipx run` does).

Builds the wheel from this checkout, installs it (and only its declared dependencies, from the
package index) into a new venv, and runs that venv's `harness-verify` console script on a
bundle exported by this checkout. Catches packaging mistakes the editable install hides: a
missing sub-package, schemas left out of package data, an undeclared dependency.
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from harness.receipts.bundle import export_bundle
from harness.receipts.run import RunRecorder

from .evidence_helpers import make_keys

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, check=False, timeout=600
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", out, ROOT)
    if built.returncode != 0 and "Could not find a version" in built.stderr:
        pytest.skip(f"no package index reachable to build the wheel: {built.stderr[-300:]}")
    assert built.returncode == 0, built.stderr
    (path,) = out.glob("harness_verify-*.whl")
    return path


def test_wheel_contents(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    code = {n for n in names if not n.startswith("harness_verify-")}
    assert all(n.startswith("harness/") for n in code), sorted(code)
    for required in (
        "harness/verify/cli.py",
        "harness/verify/bundle.py",
        "harness/receipts/bundle.py",
        "harness/schemas/record.schema.json",
        "harness/schemas/verify-report.schema.json",
        "harness/verify/py.typed",
    ):
        assert required in names
    for path in (ROOT / "verify").glob("*.py"):
        assert f"harness/verify/{path.name}" in names, f"{path.name} missing from the wheel"
    assert not any("tests/" in n for n in names)


def test_fresh_venv_install_verifies_a_bundle(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    installed = _run(python, "-m", "pip", "install", "-q", wheel)
    if installed.returncode != 0 and "Could not find a version" in installed.stderr:
        pytest.skip(f"no package index reachable: {installed.stderr[-300:]}")
    assert installed.returncode == 0, installed.stderr
    # the verifier's install is lean (issue 15 §4): typer-slim, not typer with rich, Pygments,
    # pydantic and shellingham, and no jsonschema (a dev tool here)
    listed = _run(python, "-m", "pip", "list", "--format", "json")
    names = {item["name"].lower() for item in json.loads(listed.stdout)}
    heavy = {"rich", "pygments", "pydantic", "pydantic-core", "shellingham", "typer", "jsonschema"}
    assert not names & heavy, sorted(names & heavy)
    assert "typer-slim" in names
    assert len(names - {"pip", "setuptools", "harness-verify"}) <= 12, sorted(names)

    keys = make_keys()
    state = tmp_path / "state"
    with RunRecorder(state, "wheel-run", keys) as run:
        run.record("audit", "event", {"name": "run.begin", "data": {"plan": "p"}})
        run.record("audit", "run.end", {"outcome": "succeeded"})
    bundle = export_bundle(state, tmp_path / "bundle.tar", keys).path

    cli = env_dir / "bin" / "harness-verify"
    result = _run(cli, bundle, "--trusted-key", keys.key_id, "--format", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["status"] == "verified"
    assert report["signer_key_id"] == keys.key_id

    untrusted = _run(cli, bundle, "--quiet", cwd=tmp_path)
    assert untrusted.returncode == 3
    # The installed verifier runs from site-packages, not from this checkout.
    where = _run(python, "-c", "import harness.verify; print(harness.verify.__file__)")
    assert str(env_dir) in where.stdout
