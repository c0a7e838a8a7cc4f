"""File-permission checks, run by an unprivileged user even when the suite runs as root.

CI runs as root, and root reads a mode-000 file, so a permission test run in the test process
proves nothing there (test_policy's ``needs_non_root`` test skips). Here each check runs in a
forked child that drops to ``nobody``/``nogroup`` with no supplementary groups (setgroups,
setgid, setuid: the kernel's own permission checks, nothing simulated) before it touches the
file. The child runs already-imported code (each CLI test first runs the same command as the
owner, which also imports whatever the CLI imports lazily), so it needs no access to the
checkout, the virtualenv or the interpreter's library; the files live in a world-traversable
temporary folder. The first test proves the child really cannot read what it must not.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pwd
import shutil
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.receipts.keys import KeyFileError, init_keys, load_keys
from harness.verify.bundle import verify_bundle
from harness.verify.cli import main as verify_main
from harness.verify.keyids import key_id
from harness.verify.policy import PolicyError, load_policy_file, parse_trusted_key
from harness.verify.report import ExitCode

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork + setuid")

PUBLIC = Ed25519PrivateKey.from_private_bytes(b"\x05" * 32).public_key()
PEM = PUBLIC.public_bytes(
    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
)
KEY_ID = key_id(PUBLIC.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))
GOLDEN_BUNDLE = Path(__file__).resolve().parent / "vectors" / "bundle.tar"


def _nobody() -> tuple[int, int]:
    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


def as_unprivileged(func: Callable[[], Any]) -> dict[str, Any]:
    """Run ``func`` in a child that is not root; return ``{"value": ...}`` or ``{"error": type
    name, "message": ...}``, and what the child wrote to stdout/stderr as ``"output"``."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        result: dict[str, Any]
        output = io.StringIO()
        try:
            if os.geteuid() == 0:
                uid, gid = _nobody()
                os.setgroups([])
                os.setgid(gid)
                os.setuid(uid)
            with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
                try:
                    result = {"value": func()}
                except SystemExit as exc:
                    result = {"exit": exc.code}
                except BaseException as exc:
                    result = {"error": type(exc).__name__, "message": str(exc)}
                    result["traceback"] = traceback.format_exc()
            result["uid"] = os.geteuid()
            result["output"] = output.getvalue()
            data = json.dumps(result, default=repr).encode()
        except BaseException as exc:  # dropping privileges failed
            data = json.dumps({"setup_error": repr(exc)}).encode()
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(data)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    outcome: dict[str, Any] = json.loads(data)
    assert "setup_error" not in outcome, outcome
    assert outcome["uid"] != 0
    return outcome


@pytest.fixture
def folder() -> Iterator[Path]:
    """A temporary folder the unprivileged child can enter (pytest's tmp_path is root-only)."""
    path = Path(tempfile.mkdtemp(prefix="harness-perm-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _locked(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o000)
    return path


def _read(path: Path) -> bytes:
    return path.read_bytes()


def test_the_child_really_cannot_read_a_mode_000_file(folder: Path) -> None:
    locked = _locked(folder / "secret", b"x")
    assert as_unprivileged(lambda: _read(locked))["error"] == "PermissionError"
    readable = folder / "public"
    readable.write_bytes(b"y")
    readable.chmod(0o644)
    assert as_unprivileged(lambda: _read(readable).decode())["value"] == "y"


def test_unreadable_key_file_is_a_policy_error(folder: Path) -> None:
    """Twin of test_policy.test_unreadable_key_file_is_a_policy_error, which skips as root."""
    path = folder / "signing.pub"
    path.write_bytes(PEM)
    path.chmod(0o644)
    assert as_unprivileged(lambda: parse_trusted_key(str(path)))["value"] == KEY_ID
    path.chmod(0o000)
    outcome = as_unprivileged(lambda: parse_trusted_key(str(path)))
    assert outcome["error"] == PolicyError.__name__
    assert outcome["message"].startswith(f"cannot read key file {path}: Permission denied")


def test_unreadable_policy_file_is_a_policy_error(folder: Path) -> None:
    path = folder / "harness-verify.toml"
    path.write_text(f'[trust]\nkeys = ["{KEY_ID}"]\n', encoding="utf-8")
    path.chmod(0o644)
    readable = as_unprivileged(lambda: sorted(load_policy_file(path).key_ids))
    assert readable["value"] == [KEY_ID]
    path.chmod(0o000)
    outcome = as_unprivileged(lambda: load_policy_file(path))
    assert outcome["error"] == PolicyError.__name__
    assert "cannot read" in outcome["message"] and str(path) in outcome["message"]
    assert "Permission denied" in outcome["message"]


def _as_owner(argv: list[str], capsys: pytest.CaptureFixture[str]) -> int:
    """Run the CLI in the test process (as the files' owner): the control case, and the import
    of every module the command loads lazily, before the child loses access to the library."""
    with pytest.raises(SystemExit) as exited:
        verify_main(argv)
    capsys.readouterr()
    return int(exited.value.code or 0)


def test_cli_unreadable_trusted_key_file_is_a_usage_error(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = folder / "signing.pub"
    key.write_bytes(PEM)
    key.chmod(0o600)  # readable by its owner only
    bundle = folder / "bundle.tar"
    shutil.copyfile(GOLDEN_BUNDLE, bundle)
    bundle.chmod(0o644)
    assert _as_owner([str(bundle), "--trusted-key", str(key), "--quiet"], capsys) != ExitCode.USAGE
    outcome = as_unprivileged(lambda: verify_main([str(bundle), "--trusted-key", str(key)]))
    assert outcome.get("exit") == ExitCode.USAGE, outcome
    assert f"error: cannot read key file {key}: Permission denied" in outcome["output"]


def test_unreadable_bundle_is_unreadable_for_the_library(folder: Path) -> None:
    bundle = folder / "bundle.tar"
    shutil.copyfile(GOLDEN_BUNDLE, bundle)
    bundle.chmod(0o600)  # readable by its owner only

    def verify() -> list[object]:
        report = verify_bundle(bundle)
        assert report.failure is not None
        return [int(report.exit_code), report.status.value, report.failure.check]

    verify_bundle(folder)  # as the owner, a refusal too (a folder): imports what it needs
    outcome = as_unprivileged(verify)
    assert outcome.get("value") == [ExitCode.UNREADABLE, "unreadable", "archive"], outcome


def test_cli_unreadable_bundle_is_unreadable_input(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = folder / "bundle.tar"
    shutil.copyfile(GOLDEN_BUNDLE, bundle)
    bundle.chmod(0o600)  # readable by its owner only
    argv = [str(bundle), "--trusted-key", KEY_ID, "--format", "json", "--quiet"]
    _as_owner(argv, capsys)
    # the same refusal path, for a reason the owner also meets: a folder is not a bundle
    assert _as_owner([str(folder), *argv[1:]], capsys) == ExitCode.UNREADABLE
    outcome = as_unprivileged(lambda: verify_main(argv))
    assert outcome.get("exit") == ExitCode.UNREADABLE, outcome
    report = json.loads(outcome["output"])
    assert (report["status"], report["failure"]["check"]) == ("unreadable", "archive")
    assert report["failure"]["reason"] == f"cannot open {bundle}: Permission denied"


def test_operator_secret_keys_are_unreadable_by_another_user(folder: Path) -> None:
    """``harness init`` writes the signing and HMAC keys 0600: another local user (an agent run
    under its own uid) can read the public key but neither secret."""
    keys_dir = folder / "keys"
    keys = init_keys(keys_dir)
    keys_dir.chmod(0o755)  # even with the folder opened up, the files themselves refuse
    secrets = sorted(p for p in keys_dir.iterdir() if p.stat().st_mode & 0o077 == 0)
    publics = sorted(p for p in keys_dir.iterdir() if p not in secrets)
    assert len(secrets) == 2 and publics
    for path in secrets:
        assert as_unprivileged(lambda path=path: _read(path))["error"] == "PermissionError"
    for path in publics:
        assert "value" in as_unprivileged(lambda path=path: _read(path).decode())
    outcome = as_unprivileged(lambda: load_keys(keys_dir))
    assert outcome["error"] == KeyFileError.__name__
    assert "cannot open key file" in outcome["message"]
    assert "Permission denied" in outcome["message"]
    assert load_keys(keys_dir).key_id == keys.key_id  # the owner still can
