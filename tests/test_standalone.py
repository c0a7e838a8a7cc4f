"""The verifier stands alone: it needs nothing of ours, no network, and writes nothing.

Each check runs ``harness-verify`` in a fresh interpreter: with the rest of the project made
unimportable, with sockets disabled, and with the file system watched. Then the command line
itself: formats, output file, quiet mode, HMAC keys, pins, policy files and exit codes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from .corpus import export_run, operator_keys
from .evidence_helpers import MASTER

TIMEOUT = 60
KEYS = operator_keys()
KEY_ID = KEYS.key_id
BLOCKED = ("harness.receipts", "harness.orchestrate", "harness.cli", "harness.demo")

PRELUDE_BLOCK_IMPORTS = f"""
import importlib.abc, sys
BLOCKED = {BLOCKED!r}
class _Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ImportError("blocked by test: " + name)
        return None
sys.meta_path.insert(0, _Blocker())
"""

PRELUDE_NO_NETWORK = """
import socket
class _NoSocket(socket.socket):
    def __init__(self, *args, **kwargs):
        raise OSError("network disabled by test")
def _no_network(*args, **kwargs):
    raise OSError("network disabled by test")
socket.socket = _NoSocket
socket.create_connection = _no_network
socket.getaddrinfo = _no_network
"""

RUN_MAIN = f"""
import sys
from harness.verify.cli import main
try:
    main(sys.argv[1:])
    code = 0
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else 1
BLOCKED = {BLOCKED!r}
loaded = sorted(m for m in sys.modules if any(m == b or m.startswith(b + ".") for b in BLOCKED))
if loaded:
    sys.stderr.write("LOADED " + " ".join(loaded) + "\\n")
    code = 99
sys.exit(code)
"""


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["COLUMNS"] = "200"
    env.update(extra)
    return env


def run_python(
    code: str, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=cwd,
        env=env or _env(),
        check=False,
    )


def run_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.verify.cli", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=cwd,
        env=env or _env(),
        check=False,
    )


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("standalone")
    _, path = export_run(folder / "export", KEYS)
    # The bundle alone in its folder, away from the state it came from.
    target = folder / "bundles" / "bundle.tar"
    target.parent.mkdir()
    path.replace(target)
    return target


@pytest.fixture
def empty_cwd(tmp_path: Path) -> Path:
    """A working folder with no policy file (discovery then finds none above it either)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    return cwd


def _json(ran: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert "Traceback" not in ran.stderr, ran.stderr
    document: dict[str, object] = json.loads(ran.stdout)
    return document


def _checks(document: dict[str, object]) -> dict[str, str]:
    checks = document["checks"]
    assert isinstance(checks, list)
    return {c["name"]: c["outcome"] for c in checks}


# ------------------------------------------------------------------ needs nothing of ours


def test_verifies_with_the_rest_of_the_project_unimportable(bundle: Path, empty_cwd: Path) -> None:
    args = (str(bundle), "--format", "json", "--trusted-key", KEY_ID)
    blocked = run_python(PRELUDE_BLOCK_IMPORTS + RUN_MAIN, *args, cwd=empty_cwd)
    free = run_python(RUN_MAIN, *args, cwd=empty_cwd)
    assert blocked.returncode == 0, blocked.stderr
    assert free.returncode == 0, free.stderr
    assert _json(blocked)["status"] == "verified"
    assert blocked.stdout == free.stdout


def test_blocker_really_blocks(empty_cwd: Path) -> None:
    """The import blocker above is not a no-op: importing the exporter fails under it."""
    ran = run_python(PRELUDE_BLOCK_IMPORTS + "import harness.receipts.bundle\n", cwd=empty_cwd)
    assert ran.returncode != 0
    assert "blocked by test: harness.receipts" in ran.stderr


def test_verifies_without_network(bundle: Path, empty_cwd: Path) -> None:
    args = (str(bundle), "--format", "json", "--trusted-key", KEY_ID)
    offline = run_python(
        PRELUDE_NO_NETWORK + PRELUDE_BLOCK_IMPORTS + RUN_MAIN, *args, cwd=empty_cwd
    )
    assert offline.returncode == 0, offline.stderr
    assert _json(offline)["status"] == "verified"
    probe = run_python(
        PRELUDE_NO_NETWORK + "import socket\nsocket.create_connection(('127.0.0.1', 9))\n"
    )
    assert "network disabled by test" in probe.stderr


# ------------------------------------------------------------------ writes nothing


def snapshot(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry below ``folder``: (size, mtime_ns, mode), keyed by relative path."""
    entries = {}
    for path in [folder, *folder.rglob("*")]:
        info = path.lstat()
        entries[str(path.relative_to(folder))] = (info.st_size, info.st_mtime_ns, info.st_mode)
    return entries


def test_writes_nothing(bundle: Path, tmp_path: Path) -> None:
    cwd, home, tmp = tmp_path / "cwd", tmp_path / "home", tmp_path / "tmp"
    for folder in (cwd, home, tmp):
        folder.mkdir()
    env = _env(HOME=str(home), TMPDIR=str(tmp), XDG_CACHE_HOME=str(home / ".cache"))
    watched = (cwd, home, tmp, bundle.parent)
    before = [snapshot(folder) for folder in watched]
    for fmt in ("text", "json", "junit", "sarif"):
        ran = run_cli(str(bundle), "--format", fmt, "--trusted-key", KEY_ID, cwd=cwd, env=env)
        assert ran.returncode == 0, ran.stderr
    untrusted = run_cli(str(bundle), cwd=cwd, env=env)
    assert untrusted.returncode == 3
    assert [snapshot(folder) for folder in watched] == before

    ran = run_cli(
        str(bundle), "--format", "json", "--output", "report.json", "--trusted-key", KEY_ID,
        cwd=cwd, env=env,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    after = snapshot(cwd)
    new = set(after) - set(before[0])
    assert new == {"report.json"}
    assert {k: v for k, v in after.items() if k not in new and k != "."} == {
        k: v for k, v in before[0].items() if k != "."
    }
    assert json.loads((cwd / "report.json").read_text())["status"] == "verified"
    assert [snapshot(folder) for folder in watched[1:]] == before[1:]


# ------------------------------------------------------------------ command line


@pytest.mark.parametrize("fmt", ["json", "junit", "sarif", "text"])
def test_formats(bundle: Path, empty_cwd: Path, fmt: str) -> None:
    ran = run_cli(str(bundle), "--format", fmt, "--trusted-key", KEY_ID, "-q", cwd=empty_cwd)
    assert ran.returncode == 0, ran.stderr
    assert "Traceback" not in ran.stderr
    if fmt == "json":
        document = json.loads(ran.stdout)
        assert document["status"] == "verified"
        assert document["signer_key_id"] == KEY_ID
        assert document["trusted_by"] == "--trusted-key"
        assert set(_checks(document).values()) <= {"passed", "skipped"}
    elif fmt == "junit":
        root = ET.fromstring(ran.stdout)
        assert root.iter("testcase")
        assert not list(root.iter("failure"))
    elif fmt == "sarif":
        document = json.loads(ran.stdout)
        assert document["version"] == "2.1.0"
        assert document["runs"][0]["invocations"][0]["exitCode"] == 0
    else:
        assert ran.stdout == "", "-q prints no text summary"


def test_text_format_by_default(bundle: Path, empty_cwd: Path) -> None:
    ran = run_cli(str(bundle), "--trusted-key", KEY_ID, cwd=empty_cwd)
    assert ran.returncode == 0
    assert "exit code 0" in ran.stdout
    assert KEY_ID in ran.stdout


def test_output_file(bundle: Path, empty_cwd: Path) -> None:
    out = empty_cwd / "out" / "report.sarif"
    out.parent.mkdir()
    ran = run_cli(
        str(bundle), "--format", "sarif", "--output", str(out), "--trusted-key", KEY_ID,
        cwd=empty_cwd,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == ""
    assert "exit code 0" in ran.stderr  # the human summary goes to stderr
    assert json.loads(out.read_text())["version"] == "2.1.0"
    quiet = run_cli(
        str(bundle), "-q", "--format", "json", "-o", str(out), "--trusted-key", KEY_ID,
        cwd=empty_cwd,
    )  # fmt: skip
    assert quiet.returncode == 0
    assert quiet.stdout == "" and quiet.stderr == ""
    assert json.loads(out.read_text())["status"] == "verified"


def test_output_to_unwritable_place_is_a_usage_error(bundle: Path, empty_cwd: Path) -> None:
    ran = run_cli(
        str(bundle), "--output", str(empty_cwd / "missing" / "r.json"), "--trusted-key", KEY_ID,
        cwd=empty_cwd,
    )  # fmt: skip
    assert ran.returncode == 2
    assert "cannot write" in ran.stderr
    assert "Traceback" not in ran.stderr


def _key_file(folder: Path, name: str, key: bytes) -> Path:
    path = folder / name
    path.write_text(key.hex() + "\n")
    path.chmod(0o600)
    return path


def test_hmac_key_right(bundle: Path, empty_cwd: Path) -> None:
    key = _key_file(empty_cwd, "hmac.key", MASTER)
    ran = run_cli(
        str(bundle), "--format", "json", "--hmac-key", str(key), "--trusted-key", KEY_ID,
        cwd=empty_cwd,
    )  # fmt: skip
    document = _json(ran)
    assert ran.returncode == 0
    assert document["hmac_checked"] is True
    assert _checks(document)["hmac-chain"] == "passed"


def test_hmac_key_wrong(bundle: Path, empty_cwd: Path) -> None:
    key = _key_file(empty_cwd, "wrong.key", bytes(reversed(MASTER)))
    ran = run_cli(
        str(bundle), "--format", "json", "--hmac-key", str(key), "--trusted-key", KEY_ID,
        cwd=empty_cwd,
    )  # fmt: skip
    document = _json(ran)
    assert ran.returncode == 1
    assert document["status"] == "invalid"
    failure = document["failure"]
    assert isinstance(failure, dict)
    assert failure["check"] == "hmac-chain"
    assert _checks(document)["hmac-chain"] == "failed"
    assert _checks(document)["trust"] == "not-run"


def test_hmac_key_skipped_without_key(bundle: Path, empty_cwd: Path) -> None:
    document = _json(run_cli(str(bundle), "--format", "json", "--trusted-key", KEY_ID))
    assert _checks(document)["hmac-chain"] == "skipped"
    assert document["hmac_checked"] is False


@pytest.mark.parametrize("content", ["not hex\n", "00" * 16 + "\n"])
def test_hmac_key_file_malformed_is_usage_error(
    bundle: Path, empty_cwd: Path, content: str
) -> None:
    key = empty_cwd / "bad.key"
    key.write_text(content)
    ran = run_cli(str(bundle), "--hmac-key", str(key), "--trusted-key", KEY_ID, cwd=empty_cwd)
    assert ran.returncode == 2
    assert "Traceback" not in ran.stderr


@pytest.mark.parametrize(
    "value", ["not-a-key", "ab" * 31, "harness-x+00000000+AAAA", "/nonexistent/key.pub"]
)
def test_bad_trusted_key_is_usage_error(bundle: Path, empty_cwd: Path, value: str) -> None:
    ran = run_cli(str(bundle), "--format", "json", "--trusted-key", value, cwd=empty_cwd)
    assert ran.returncode == 2, ran.stdout
    assert ran.stdout == ""
    assert ran.stderr.startswith("error:")
    assert "Traceback" not in ran.stderr


def test_trusted_key_as_verifier_key_text(bundle: Path, empty_cwd: Path) -> None:
    vkey = KEYS.note_signer().verifier_key()
    ran = run_cli(str(bundle), "--format", "json", "--trusted-key", vkey, cwd=empty_cwd)
    assert ran.returncode == 0, ran.stderr


def test_untrusted_without_pins(bundle: Path, empty_cwd: Path) -> None:
    ran = run_cli(str(bundle), "--format", "json", cwd=empty_cwd)
    document = _json(ran)
    assert ran.returncode == 3
    assert document["status"] == "verified-untrusted"
    failure = document["failure"]
    assert isinstance(failure, dict)
    assert failure["check"] == "trust"
    assert "not pinned" in failure["reason"]
    text = run_cli(str(bundle), cwd=empty_cwd)
    assert text.returncode == 3
    assert "not pinned" in text.stdout


def test_untrusted_when_another_key_is_pinned(bundle: Path, empty_cwd: Path) -> None:
    ran = run_cli(str(bundle), "--format", "json", "--trusted-key", "ab" * 32, cwd=empty_cwd)
    document = _json(ran)
    assert ran.returncode == 3
    failure = document["failure"]
    assert isinstance(failure, dict)
    assert "is not among the pinned keys" in failure["reason"]


def _policy(folder: Path, name: str, key: str) -> Path:
    path = folder / name
    path.write_text(f'[trust]\nkeys = ["{key}"]\n')
    return path


def test_policy_file(bundle: Path, empty_cwd: Path, tmp_path: Path) -> None:
    policy = _policy(tmp_path, "pins.toml", KEY_ID)
    ran = run_cli(str(bundle), "--format", "json", "--policy", str(policy), cwd=empty_cwd)
    document = _json(ran)
    assert ran.returncode == 0
    assert document["trusted_by"] == str(policy)
    other = _policy(tmp_path, "other.toml", "cd" * 32)
    ran = run_cli(str(bundle), "--format", "json", "--policy", str(other), cwd=empty_cwd)
    assert ran.returncode == 3


def test_policy_file_broken_is_usage_error(bundle: Path, empty_cwd: Path) -> None:
    policy = empty_cwd / "broken.toml"
    policy.write_text("[trust\nkeys = 1\n")
    ran = run_cli(str(bundle), "--policy", str(policy), cwd=empty_cwd)
    assert ran.returncode == 2
    assert "not valid TOML" in ran.stderr


def test_policy_files_in_cwd_or_above_are_not_discovered(bundle: Path, empty_cwd: Path) -> None:
    """Decision 0016: a CI job's working directory is the change's checkout, so nothing there
    (or above it) may pin a key: exit 3, and the message says how to pin."""
    _policy(empty_cwd, "harness-verify.toml", KEY_ID)
    (empty_cwd / "pyproject.toml").write_text(
        f'[project]\nname = "x"\n\n[tool.harness-verify.trust]\nkeys = ["{KEY_ID}"]\n'
    )
    below = empty_cwd / "sub" / "dir"
    below.mkdir(parents=True)
    for cwd in (empty_cwd, below):
        ran = run_cli(str(bundle), "--format", "json", cwd=cwd)
        assert ran.returncode == 3, ran.stdout
        document = _json(ran)
        assert document["trusted_by"] is None
        assert "--trusted-key" in json.dumps(document)


def test_no_args_is_usage_error(empty_cwd: Path) -> None:
    ran = run_cli(cwd=empty_cwd)
    assert ran.returncode == 2
    assert "Usage" in ran.stdout + ran.stderr


def test_unknown_option_is_usage_error(bundle: Path, empty_cwd: Path) -> None:
    ran = run_cli(str(bundle), "--no-such-option", cwd=empty_cwd)
    assert ran.returncode == 2
    assert "Traceback" not in ran.stderr


def test_missing_bundle_is_unreadable(empty_cwd: Path) -> None:
    ran = run_cli(str(empty_cwd / "nope.tar"), "--format", "json", cwd=empty_cwd)
    assert ran.returncode == 4
    assert _json(ran)["status"] == "unreadable"
    folder = run_cli(str(empty_cwd), "--format", "json", cwd=empty_cwd)
    assert folder.returncode == 4


@pytest.mark.parametrize("args", [["--help"], ["bundle", "--help"]])
def test_help_mentions_exit_codes(args: list[str], empty_cwd: Path) -> None:
    ran = run_cli(*args, cwd=empty_cwd)
    assert ran.returncode == 0
    text = re.sub(r"[\s│]+", " ", ran.stdout)
    assert "Exit codes:" in text
    for phrase in (
        "0 verified and trusted",
        "1 evidence invalid",
        "2 usage error",
        "3 verified but signer not trusted",
        "4 unreadable or unsupported input",
    ):
        assert phrase in text, phrase


def test_bundle_subcommand_spelled_out(bundle: Path, empty_cwd: Path) -> None:
    ran = run_cli("bundle", str(bundle), "--trusted-key", KEY_ID, "-q", cwd=empty_cwd)
    assert ran.returncode == 0
