"""Operator keys on disk and the ``harness`` command line (real subprocesses)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from harness.receipts.keys import KeyFileError, init_keys, load_hmac_master, load_keys
from harness.verify.keyids import key_id


def _harness(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=dict(os.environ),
    )


def test_init_keys_modes_and_reload(tmp_path: Path) -> None:
    keys = init_keys(tmp_path / "keys")
    folder = tmp_path / "keys"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for name in ("signing.key", "hmac.key"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600
    loaded = load_keys(folder)
    assert loaded.key_id == keys.key_id == key_id(keys.public_raw)
    assert loaded.hmac_master == keys.hmac_master
    vkey = (folder / "signing.vkey").read_text().strip()
    assert vkey == keys.note_signer().verifier_key()
    assert vkey.startswith("harness-" + keys.key_id[:16] + "+")
    with pytest.raises(KeyFileError, match="already exists"):
        init_keys(folder)


def test_secrets_readable_by_others_are_refused(tmp_path: Path) -> None:
    init_keys(tmp_path / "keys")
    os.chmod(tmp_path / "keys" / "hmac.key", 0o644)
    with pytest.raises(KeyFileError, match="readable by others"):
        load_hmac_master(tmp_path / "keys" / "hmac.key")


def test_key_symlink_is_refused(tmp_path: Path) -> None:
    init_keys(tmp_path / "keys")
    (tmp_path / "link.key").symlink_to(tmp_path / "keys" / "hmac.key")
    with pytest.raises(KeyFileError, match="cannot open"):
        load_hmac_master(tmp_path / "link.key")


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_keys_refused_inside_git_tracked_tree(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git("init", "-q", cwd=repo)
    with pytest.raises(KeyFileError, match="inside a git work tree"):
        init_keys(repo / "keys")
    assert not (repo / "keys" / "signing.key").exists()
    (repo / ".gitignore").write_text(".harness/\n")
    init_keys(repo / ".harness" / "keys")
    assert (repo / ".harness" / "keys" / "signing.key").exists()


def test_cli_keys_record_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys default to ~/.config/harness/keys/<repo id> (here XDG_CONFIG_HOME), outside the
    folder the state belongs to; ``record`` finds them there from ``--state``."""
    from harness.receipts.keys import default_keys_dir

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    state = tmp_path / "state"
    made = _harness("keys", "init", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "key id:" in made.stdout
    folder = default_keys_dir(tmp_path)
    assert folder.parent == tmp_path / "config" / "harness" / "keys"
    assert (folder / "signing.key").exists() and not (tmp_path / ".harness").exists()
    appended = _harness(
        "record", "audit", "event", '{"name":"x","data":{"k":1}}',
        "--run", "r1", "--state", str(state), "--checkpoint", cwd=tmp_path,
    )  # fmt: skip
    assert appended.returncode == 0, appended.stderr
    assert json.loads(appended.stdout) == {"store": "audit", "run": "r1", "seq": 0}
    assert (state / "runs" / "r1" / "checkpoints" / "audit").is_dir()
    bad = _harness(
        "record", "audit", "event", '{"name":"x","data":{},"name":"y"}',
        "--run", "r1", "--state", str(state), cwd=tmp_path,
    )  # fmt: skip
    assert bad.returncode == 1
    assert "duplicate key" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_cli_demo_verifies(tmp_path: Path) -> None:
    result = _harness("demo", "--dir", str(tmp_path / "demo"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "VERIFIED" in result.stdout
    assert str(tmp_path / "demo") in result.stdout
