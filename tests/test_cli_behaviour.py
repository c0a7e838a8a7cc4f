"""`harness` and `harness-verify` behave like the tools their users know (issue 15, part 3):
no tracebacks, `--version`, usage errors on one stderr line with exit 2, unknown run ids
refused everywhere, a run that did not complete exits non-zero and says why.

Real subprocesses through the console entry points (``python -m``), real git."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from harness import __version__
from harness.orchestrate.demo import make_repo


@pytest.fixture(autouse=True)
def _private_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys and worktrees go to per-test XDG folders, never the real ~/.config or ~/.cache."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)


def _run(module: str, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        cwd=cwd, capture_output=True, text=True, check=False, timeout=300, env=dict(os.environ),
    )  # fmt: skip


def harness(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _run("harness.cli", *args, cwd=cwd)


def verifier(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _run("harness.verify.cli", *args, cwd=cwd)


def assert_usage_error(
    done: subprocess.CompletedProcess[str], *needles: str, code: int = 2
) -> None:
    """Exit ``code`` (2: usage), one ``error:`` line on stderr naming the problem, no
    traceback, nothing on stdout."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "Error" not in done.stderr.replace("error:", "")
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert done.stdout == ""


PLAN = textwrap.dedent(
    """
    [plan]
    name = "cli"
    [[task]]
    id = "good"
    role = "coder"
    prompt = "Add a module."
    gates = [{{ name = "ok", command = ["{python}", "-c", "import good"] }}]
    [[task.edits]]
    path = "good.py"
    content = "x = 1\\n"
    [[task]]
    id = "gateless"
    role = "writer"
    prompt = "Write notes."
    [[task.edits]]
    path = "NOTES.md"
    content = "notes\\n"
    """
).format(python=sys.executable)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """An initialised repository (keys in the per-test XDG folder) with one run, ``r1``."""
    repo = tmp_path / "repo"
    make_repo(repo)
    (tmp_path / "plan.toml").write_text(PLAN)
    assert harness("init", cwd=repo).returncode == 0
    return repo


def test_versions(tmp_path: Path) -> None:
    for flag in ("--version", "-v"):
        done = harness(flag, cwd=tmp_path)
        assert (done.returncode, done.stdout) == (0, f"harness {__version__}\n"), done.stderr
        done = verifier(flag, cwd=tmp_path)
        assert (done.returncode, done.stdout) == (0, f"harness-verify {__version__}\n"), done.stderr


def test_malformed_run_id_is_a_usage_error_not_a_traceback(repo: Path) -> None:
    done = harness("run", repo.parent / "plan.toml", "--run", "bad id!", cwd=repo)
    assert_usage_error(done, "invalid run id 'bad id!'")
    assert not (repo / ".harness" / "runs" / "bad id!").exists()


def test_demo_into_a_used_folder_is_a_usage_error(tmp_path: Path) -> None:
    folder = tmp_path / "D"
    first = harness("demo", "--dir", folder, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    again = harness("demo", "--dir", folder, cwd=tmp_path)
    assert_usage_error(again, "--dir", str(folder), "not an empty folder")


def test_unknown_run_ids_are_errors_everywhere(repo: Path) -> None:
    runs = repo / ".harness" / "runs"
    cases = (
        ("stop", "--run", "nope"),
        ("status", "--run", "nope"),
        ("export", repo.parent / "b.tar", "--run", "nope"),
        ("export", repo.parent / "pack", "--eu-ai-act", "--run", "nope"),
        ("receipt", "calc.py", "--run", "nope"),
    )
    for args in cases:
        done = harness(*args, cwd=repo)
        assert_usage_error(done, "no run 'nope'")
        assert not (runs / "nope").exists(), args  # no phantom run
    assert not (repo.parent / "b.tar").exists() and not (repo.parent / "pack").exists()
    assert harness("status", cwd=repo).stdout == "no runs\n"


def test_export_never_creates_missing_parent_folders(repo: Path) -> None:
    ran = harness("run", repo.parent / "plan.toml", "--run", "r1", cwd=repo)
    assert ran.returncode == 1  # one task has no gates
    out = repo.parent / "missing" / "b.tar"
    assert_usage_error(harness("export", out, cwd=repo), str(out.parent), "does not exist")
    assert not out.parent.exists()


def test_run_that_did_not_complete_exits_1_and_says_why(repo: Path) -> None:
    done = harness("run", repo.parent / "plan.toml", "--run", "r1", cwd=repo)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "warning: task 'gateless' has no gates: it can never be done" in done.stderr
    assert "did not complete: 1 of 2 task(s) not done" in done.stderr
    lines = dict(line.split(None, 1) for line in done.stdout.splitlines()[1:])
    assert lines["good"] == "done"
    assert lines["gateless"].startswith("failed: ") and "gate" in lines["gateless"]
    status = harness("status", "--run", "r1", cwd=repo)
    assert status.returncode == 0 and "gateless" in status.stdout


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A demo folder (bundle.tar, keys/) and the signer's key id."""
    folder = tmp_path_factory.mktemp("demo") / "D"
    done = harness("demo", "--dir", folder, cwd=folder.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    key_id = done.stdout.rsplit("--trusted-key ", 1)[1].strip()
    # the next step it suggests names the demo's own repository and keys
    look = [line for line in done.stdout.splitlines() if line.startswith("look at it:")]
    assert look and look[0].split(None, 3)[3].startswith(
        f"harness dashboard --repo {folder / 'repo'} --keys {folder / 'keys'}"
    ), look
    return folder, key_id


def test_verifier_file_errors_are_one_stderr_line(demo: tuple[Path, str], tmp_path: Path) -> None:
    folder, key_id = demo
    missing = verifier(tmp_path / "nope.tar", "--trusted-key", key_id, cwd=tmp_path)
    assert_usage_error(missing, "nope.tar: no such file", code=4)  # 4: unreadable input
    assert "damaged or crafted" not in missing.stderr
    assert_usage_error(verifier(folder, cwd=tmp_path), "is a folder", code=4)
    as_json = verifier(tmp_path / "nope.tar", "--format", "json", cwd=tmp_path)
    assert as_json.returncode == 4  # a machine format keeps its document, with the hint
    assert "no such file" in json.loads(as_json.stdout)["failure"]["hint"]
    for tool, suffix in (("xz", "xz"), ("zstd", "zst")):
        packed = tmp_path / f"bundle.tar.{suffix}"
        try:
            data = subprocess.run([tool, "-c", str(folder / "bundle.tar")], capture_output=True,
                                  check=True).stdout  # fmt: skip
        except FileNotFoundError:
            continue  # the compressor is not installed here
        packed.write_bytes(data)
        done = verifier(packed, cwd=tmp_path)
        assert_usage_error(done, f"{tool}-compressed", "gzip", code=4)
    bad_hmac = verifier(folder / "bundle.tar", "--hmac-key", folder / "bundle.tar", cwd=tmp_path)
    assert_usage_error(bad_hmac, "--hmac-key", "does not hold a hex HMAC key")


def test_max_bytes_hint_names_the_users_limit(demo: tuple[Path, str], tmp_path: Path) -> None:
    folder, _key_id = demo
    done = verifier(folder / "bundle.tar", "--max-bytes", "100", cwd=tmp_path)
    assert done.returncode == 4
    assert "larger than the --max-bytes limit (100 bytes)" in done.stdout
    assert "damaged or crafted" not in done.stdout


def test_wrong_hmac_key_is_reported_as_failed_not_unchecked(
    demo: tuple[Path, str], tmp_path: Path
) -> None:
    folder, key_id = demo
    wrong = tmp_path / "wrong.key"
    wrong.write_text("ab" * 32 + "\n")
    done = verifier(folder / "bundle.tar", "--trusted-key", key_id, "--hmac-key", wrong,
                    cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1
    assert "MAC does not chain" in done.stdout
    assert "not checked" not in done.stdout and "hmac chain:    FAILED" in done.stdout


def test_trusted_key_spellings(demo: tuple[Path, str], tmp_path: Path) -> None:
    folder, key_id = demo
    bundle = folder / "bundle.tar"
    done = verifier(bundle, "--trusted-key", f"sha256:{key_id}", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    hmac_file = folder / "keys" / "hmac.key"
    for value in (hmac_file, tmp_path / "copy"):
        if value != hmac_file:  # a copy beside a signing key is recognised by its format
            keys = tmp_path / "keys"
            keys.mkdir()
            (keys / "signing.key").write_bytes((folder / "keys" / "signing.key").read_bytes())
            value = keys / "master.hex"
            value.write_bytes(hmac_file.read_bytes())
        refused = verifier(bundle, "--trusted-key", value, cwd=tmp_path)
        assert_usage_error(refused, "HMAC master key", "secret")


def test_pack_period_must_not_be_empty(repo: Path) -> None:
    done = harness("export", repo.parent / "pack", "--eu-ai-act",
                   "--since", "2026-12-02T00:00:00.000000Z",
                   "--until", "2026-11-01T00:00:00.000000Z", cwd=repo)  # fmt: skip
    assert_usage_error(done, "--since 2026-12-02T00:00:00.000000Z is after --until")


def _git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env |= {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@e"}  # fmt: skip
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True, env=env)  # fmt: skip
    return done.stdout.strip()


def test_gate_reports_digests_and_sarif_bases(demo: tuple[Path, str], tmp_path: Path) -> None:
    """Gate JSON says which content the evidence vouches for and which is at head; gate SARIF
    locations are relative to %SRCROOT%, bundle SARIF member locations to BUNDLEROOT."""
    folder, key_id = demo
    repo = tmp_path / "clone"
    shutil.copytree(folder / "repo", repo, ignore=shutil.ignore_patterns(".harness"))
    base = _git(repo, "log", "--format=%H", "--grep=initial project")
    (repo / "README.md").write_text("# calc, by hand\n", encoding="utf-8")
    _git(repo, "commit", "-qam", "manual readme")
    bundle = folder / "bundle.tar"
    args = ("gate", "--base", base, "--trusted-key", key_id, str(bundle))
    done = _run("harness.verify.cli", *args, "--format", "json", cwd=repo)
    assert done.returncode == 1, done.stderr
    files = {entry["path"]: entry for entry in json.loads(done.stdout)["files"]}
    readme = files["README.md"]
    assert readme["verdict"] == "uncovered"
    assert readme["actual_sha256"] == hashlib.sha256(b"# calc, by hand\n").hexdigest()
    assert readme["expected_sha256"] is not None
    assert readme["expected_sha256"] != readme["actual_sha256"]
    calc = files["calc.py"]
    assert calc["verdict"] == "covered"
    assert calc["expected_sha256"] == calc["actual_sha256"]
    assert calc["actual_sha256"] == hashlib.sha256((repo / "calc.py").read_bytes()).hexdigest()

    sarif = json.loads(_run("harness.verify.cli", *args, "--format", "sarif", cwd=repo).stdout)
    (run,) = sarif["runs"]
    (result,) = run["results"]
    location = result["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location == {"uri": "README.md", "uriBaseId": "%SRCROOT%"}
    assert "%SRCROOT%" in run["originalUriBaseIds"]
    assert all(rule["fullDescription"]["text"] for rule in run["tool"]["driver"]["rules"])

    # the bundle verifier: a tampered member is located inside the bundle, not the checkout
    tampered = tmp_path / "tampered.tar"
    with tarfile.open(bundle) as source, tarfile.open(tampered, "w") as out:
        for member in source.getmembers():
            data = source.extractfile(member).read()  # type: ignore[union-attr]
            if member.name.endswith("audit.jsonl"):  # same size, other bytes
                data = data.replace(b'"reason":"', b'"reason":"X', 1)[:-1] + b"\n"
                data = data[: member.size - 1] + b"\n"
            out.addfile(member, io.BytesIO(data))
    report = verifier(tampered, "--trusted-key", key_id, "--format", "sarif", cwd=tmp_path)
    assert report.returncode == 1, report.stdout + report.stderr
    (run,) = json.loads(report.stdout)["runs"]
    (result,) = run["results"]
    location = result["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location["uriBaseId"] == "BUNDLEROOT" and location["uri"].endswith("audit.jsonl")
    assert "BUNDLEROOT" in run["originalUriBaseIds"]
    rules = run["tool"]["driver"]["rules"]
    assert all(rule["fullDescription"]["text"].startswith("Check ") for rule in rules)


def test_action_pins_by_commit_uses_its_own_venv_and_has_outputs(
    demo: tuple[Path, str], tmp_path: Path
) -> None:
    """action.yml: third-party actions pinned by a 40-hex commit, setup-python leaves the
    caller's environment alone, pip runs in the action's own venv; its "Run the gate" step
    (run as the runner runs it) sets the passed / exit-code / report / sarif outputs."""
    import re

    from tests.action_steps import ACTION, action_step

    text = ACTION.read_text(encoding="utf-8")
    uses = re.findall(r"uses:\s*(\S+)", text)
    assert uses and all(re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", u) for u in uses), uses
    assert "update-environment: false" in text
    install = action_step("Install harness-verify")
    assert '-m venv "$venv"' in install and '"$venv/bin/python" -m pip install' in install
    assert re.search(r"^\s*python -m pip", install, re.M) is None  # never the caller's pip
    for name in ("passed", "exit-code", "report", "sarif"):
        assert re.search(rf"^  {name}:\n", text.split("outputs:", 1)[1], re.M), name
    # pip's cache: restored before the install, in the runner's temp (never the checkout),
    # and the install uses that very folder; the key names the OS, the Python and the source
    cache = text[text.index("- name: Cache harness-verify's packages") :]
    cache = cache[: cache.index("- name: Install harness-verify")]
    assert "uses: actions/cache@" in cache
    (path,) = re.findall(r"^\s+path: (.+)$", cache, re.M)
    assert path == "${{ runner.temp }}/harness-verify-pip-cache"
    (key,) = re.findall(r"^\s+key: (.+)$", cache, re.M)
    for part in ("runner.os", "steps.python.outputs.python-version", "inputs.source"):
        assert part in key, key
    installing = text[
        text.index("- name: Install harness-verify") : text.index(
            "run: |", text.index("- name: Install harness-verify")
        )
    ]
    assert f"PIP_CACHE_DIR: {path}" in installing

    folder, key_id = demo
    repo = tmp_path / "clone"
    shutil.copytree(folder / "repo", repo, ignore=shutil.ignore_patterns(".harness"))
    temp = tmp_path / "runner-temp"
    temp.mkdir()
    outputs = tmp_path / "github-output"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
        "HV_BIN": str(Path(sys.executable).parent / "harness-verify"),
        "HV_BUNDLE": str(folder / "bundle.tar"),
        "HV_BASE": _git(repo, "log", "--format=%H", "--grep=initial project"),
        "HV_HEAD": "HEAD",
        "HV_KEYS": key_id,
        "HV_BASE_POLICY": "false",
        "HV_SARIF": "",
        "GITHUB_OUTPUT": str(outputs),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "RUNNER_TEMP": str(temp),
    }
    done = subprocess.run(["bash", "-c", action_step("Run the gate")], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    got = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    assert got["passed"] == "true" and got["exit-code"] == "0"
    assert got["report"] == str(temp / "harness-gate.json")
    assert got["sarif"] == str(temp / "harness-gate.sarif")
    report = json.loads(Path(got["report"]).read_text("utf-8"))
    assert report["passed"] is True and report["format"] == "harness-verify/gate-report"

    outputs.unlink()
    env["HV_KEYS"] = ""  # no pin: exit 2, and the outputs still say so
    done = subprocess.run(["bash", "-c", action_step("Run the gate")], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 2
    got = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    assert got == {"exit-code": "2", "passed": "false"}


STARTUP_PROBE = """
import sys
from harness.verify.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = ("harness.verify.bundle", "harness.verify.policy", "typer.rich_utils", "rich.console")
print("loaded:", *(m for m in heavy if m in sys.modules))
"""


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_import_no_checks_and_no_rich(flag: str, tmp_path: Path) -> None:
    # start-up: --help and --version load neither the checks nor the trust policy (and its
    # cryptography) nor rich's help formatter; the command that needs them imports them
    done = subprocess.run(
        [sys.executable, "-c", STARTUP_PROBE, flag], capture_output=True, text=True, cwd=tmp_path
    )
    lines = done.stdout.strip().splitlines()
    assert lines and lines[-1] == "loaded:", done.stdout + done.stderr
    if flag == "--version":
        assert lines[0] == f"harness-verify {__version__}"


def _choices(help_text: str) -> str | None:
    """The ``--format`` choices a help text lists, as ``a|b|c``."""
    found = re.search(r"--format [<\[]([a-z|]+)[>\]]", help_text)
    return found.group(1) if found else None


@pytest.mark.parametrize("command", ["pack"])
def test_receipt_and_pack_offer_only_the_formats_they_write(command: str, tmp_path: Path) -> None:
    # their --help advertised junit and sarif, which they then refused without naming --format
    shown = verifier(command, "--help", cwd=tmp_path)
    # the choices exactly (click and typer releases bracket them <...> or [...])
    assert shown.returncode == 0 and _choices(shown.stdout) == "text|json", shown.stdout
    for fmt in ("junit", "sarif"):
        args = [command, tmp_path / "x.json", "--format", fmt]
        done = verifier(*args, *(["--artifact", "x"] if command == "receipt" else []), cwd=tmp_path)
        assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
        assert "'--format'" in done.stderr, done.stderr
        assert f"'{fmt}' is not one of 'text', 'json'" in done.stderr
        assert "Traceback" not in done.stderr


def test_receipt_offers_the_ci_formats(tmp_path: Path) -> None:
    # receipt is the per-file CI check: it writes junit and sarif as well (tested end to end
    # in tests/test_receipts_flow.py); an unknown format is still a usage error
    shown = verifier("receipt", "--help", cwd=tmp_path)
    assert shown.returncode == 0 and _choices(shown.stdout) == "text|json|junit|sarif"
    done = verifier(
        "receipt", tmp_path / "x.json", "--artifact", "x", "--format", "xml", cwd=tmp_path
    )
    assert done.returncode == 2 and done.stdout == "" and "'--format'" in done.stderr
