"""Reports that cannot be forged or crash, and that are never written through a link.

Issue 9 part 4 and the output bullet of part 1, as CI meets them: ``harness-verify`` runs as
a subprocess on a real git repository whose pull request adds files with hostile names (not
UTF-8, a newline forging a "covered" line, ANSI escapes, a GitHub workflow command, Markdown
links and HTML), and on a bundle whose own path is hostile. Every format of every command is
checked: one line per file in text, no lone surrogate in JSON/SARIF, no live link, HTML or
extra cell in the Markdown job summary (rendered by GitHub's cmark-gfm), no line that starts
with ``::``, no traceback. Then the renderers themselves, on any text (hypothesis), and the
refusal to write ``--output``/``--summary`` through a symbolic link, into a FIFO, a folder or
a hard-linked file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import unicodedata
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.orchestrate import git as hgit
from harness.orchestrate.demo import DemoResult, run_demo
from harness.verify.gate import FileVerdict, GateReport
from harness.verify.gate_render import render_gate
from harness.verify.receiptcheck import ReceiptOutcome
from harness.verify.render import render
from harness.verify.report import (
    CHECK_ORDER,
    CheckResult,
    Failure,
    Outcome,
    Report,
    Status,
    StoreSummary,
    failed_report,
)
from tests.action_steps import action_step

DEMO_FILES = 9
HOSTILE_NAMES = [
    b"caf\xe9.txt",  # Latin-1, not UTF-8: arrives as a str with a lone surrogate
    b"evil\n  covered   M calc.py: forged",  # a newline forging a "covered" line
    b"\x1b[31mred\x1b[0m.txt",  # ANSI escapes
    b"::error file=calc.py::forged annotation",  # a GitHub workflow command
    b"##[error]forged v1 command.txt",
    b"[click](https:evil.example) <img src=x onerror=alert(1)>.md",
    b"www.evil.example a@evil.example @octocat #1.md",
    b"a|b`c`.md",
    b"tab\there\rcr\xe2\x80\xaebidi.txt",
]
ESCAPED = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"}
ALLOWED_MD_TAGS = {"h3", "p", "code", "strong", "table", "thead", "tbody", "tr", "th", "td"}


# ---- helpers -----------------------------------------------------------------------------------


def _cli(cwd: Path, *args: str | bytes) -> subprocess.CompletedProcess[bytes]:
    """Run the CLI as CI does: a subprocess, output as raw bytes (nothing decoded for it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(
        [sys.executable, "-m", "harness.verify.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )


def _printable_line(line: str) -> bool:
    return all(ch == " " or unicodedata.category(ch) not in ESCAPED for ch in line)


def _assert_safe_lines(data: bytes | str, what: str) -> str:
    """UTF-8, every line printable, none starting with ``::`` (after blanks), no ``##[``."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    assert "Traceback" not in text, f"{what}: {text}"
    for line in text.split("\n"):
        assert _printable_line(line), f"{what}: unprintable line {line!r}"
        assert not line.lstrip().startswith("::"), f"{what}: workflow command {line!r}"
    assert "##[" not in text, what
    return text


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)


def _assert_json_display_form(document: Any, what: str) -> None:
    """Every string is UTF-8 encodable (no lone surrogate), one printable line, no ``::``."""
    for value in _strings(document):
        value.encode("utf-8")
        assert _printable_line(value), f"{what}: {value!r}"
        assert "::" not in value and "##[" not in value, f"{what}: {value!r}"


def _render_gfm(markdown: str) -> str:
    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)


def _assert_inert_markdown(markdown: str, rows: int) -> None:
    """GitHub renders no link, image or HTML from it, and each table row has five cells."""
    rendered = _render_gfm(markdown)
    tags = {m.group(1).lower() for m in re.finditer(r"</?([a-zA-Z][a-zA-Z0-9]*)", rendered)}
    assert tags <= ALLOWED_MD_TAGS, (tags - ALLOWED_MD_TAGS, rendered)
    body = rendered.split("<tbody>")[1] if "<tbody>" in rendered else ""
    found = re.findall(r"<tr>(.*?)</tr>", body, re.S)
    assert len(found) == rows, rendered
    for row in found:
        assert len(re.findall(r"<td>", row)) == 5, row


# ---- a pull request with hostile file names, gated through the CLI ---------------------------


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    return run_demo(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def hostile(demo: DemoResult, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo repository plus one commit adding a file under every hostile name."""
    repo = tmp_path_factory.mktemp("hostile") / "repo"
    shutil.copytree(demo.repo, repo, ignore=shutil.ignore_patterns(".harness"))
    for name in HOSTILE_NAMES:
        with open(os.path.join(os.fsencode(repo), name), "wb") as handle:
            handle.write(b"not from an agent\n")
    hgit.commit_all(repo, "hostile names")
    return repo


def _base(repo: Path) -> str:
    out = subprocess.run(
        ["git", "-C", str(repo), "log", "--format=%H %s"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for line in out.splitlines():
        sha, _, subject = line.partition(" ")
        if subject == "initial project":
            return sha
    raise AssertionError("no base commit")


def _gate(demo: DemoResult, repo: Path, *args: str | bytes) -> subprocess.CompletedProcess[bytes]:
    return _cli(
        repo, "gate", "--base", _base(repo), "--trusted-key", demo.key_id, *args, str(demo.bundle)
    )


def test_gate_text_has_one_line_per_file_and_no_forgery(demo: DemoResult, hostile: Path) -> None:
    out = _gate(demo, hostile, "--format", "text")
    assert out.returncode == 1, out.stderr
    text = _assert_safe_lines(out.stdout, "gate text")
    lines = text.rstrip("\n").split("\n")
    assert len(lines) == 3 + DEMO_FILES + len(HOSTILE_NAMES), text
    covered = [line for line in lines if line.startswith("  covered")]
    assert len(covered) == DEMO_FILES  # the newline in a name forged none
    assert "\x1b" not in text
    assert "caf\\xe9.txt" in text  # the raw byte, shown escaped
    assert "evil\\x0a  covered   M calc.py: forged" in text
    assert "\\x1b[31mred\\x1b[0m.txt" in text
    _assert_safe_lines(out.stderr, "gate stderr")


def test_gate_json_and_sarif_carry_display_forms(demo: DemoResult, hostile: Path) -> None:
    from harness.verify.textsafe import unescape

    out = _gate(demo, hostile, "--format", "json")
    assert out.returncode == 1, out.stderr
    _assert_safe_lines(out.stdout, "gate json")
    document = json.loads(out.stdout)
    _assert_json_display_form(document, "gate json")
    paths = {os.fsencode(unescape(entry["path"])) for entry in document["files"]}
    assert set(HOSTILE_NAMES) <= paths

    out = _gate(demo, hostile, "--format", "sarif")
    assert out.returncode == 1, out.stderr
    _assert_safe_lines(out.stdout, "gate sarif")
    sarif = json.loads(out.stdout)
    _assert_json_display_form(sarif, "gate sarif")
    uris = {
        result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        for result in sarif["runs"][0]["results"]
    }
    assert uris == {quote(name, safe="/@") for name in HOSTILE_NAMES}


def test_gate_markdown_and_summary_are_inert(
    demo: DemoResult, hostile: Path, tmp_path: Path
) -> None:
    rows = DEMO_FILES + len(HOSTILE_NAMES)
    out = _gate(demo, hostile, "--format", "markdown")
    assert out.returncode == 1, out.stderr
    _assert_inert_markdown(_assert_safe_lines(out.stdout, "gate markdown"), rows)


def test_action_step_with_hostile_names(demo: DemoResult, hostile: Path, tmp_path: Path) -> None:
    """What the Action runs: SARIF to a file, the table appended to the job summary (a file
    name that is not UTF-8 made this raise a traceback, and the Action wrote no SARIF)."""
    rows = DEMO_FILES + len(HOSTILE_NAMES)
    summary = tmp_path / "step-summary.md"
    summary.write_bytes(b"earlier step\n")
    sarif = tmp_path / "gate.sarif"
    out = _gate(
        demo, hostile, "--format", "sarif", "--output", str(sarif), "--summary", str(summary)
    )
    assert out.returncode == 1, out.stderr
    _assert_safe_lines(out.stderr, "gate stderr")
    assert len(json.loads(sarif.read_bytes())["runs"][0]["results"]) == len(HOSTILE_NAMES)
    text = summary.read_bytes().decode("utf-8")
    assert text.startswith("earlier step\n")
    _assert_inert_markdown(_assert_safe_lines(text, "summary"), rows)


def test_the_actions_own_step_with_hostile_names(
    demo: DemoResult, hostile: Path, tmp_path: Path
) -> None:
    """action.yml's "Run the gate" script, as the runner executes it: SARIF and summary are
    written, and nothing in the step's log is a workflow command or a traceback."""
    temp = tmp_path / "runner-temp"
    temp.mkdir()
    sarif = temp / "harness-gate.sarif"
    summary = tmp_path / "step-summary.md"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "HV_BUNDLE": str(demo.bundle),
        "HV_BASE": _base(hostile),
        "HV_HEAD": "HEAD",
        "HV_KEYS": demo.key_id,
        "HV_BASE_POLICY": "false",
        "HV_SARIF": str(sarif),
        "GITHUB_OUTPUT": str(tmp_path / "github-output"),
        "GITHUB_STEP_SUMMARY": str(summary),
        "RUNNER_TEMP": str(temp),
    }
    done = subprocess.run(
        ["bash", "-c", action_step("Run the gate")],
        cwd=hostile,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    _assert_safe_lines(done.stdout, "step stdout")
    _assert_safe_lines(done.stderr, "step stderr")
    results = json.loads(sarif.read_bytes())["runs"][0]["results"]
    assert len(results) == len(HOSTILE_NAMES)
    text = _assert_safe_lines(summary.read_bytes(), "summary")
    _assert_inert_markdown(text, DEMO_FILES + len(HOSTILE_NAMES))


def test_bundle_report_with_a_hostile_bundle_path(demo: DemoResult, tmp_path: Path) -> None:
    """The bundle's own path (a file of the pull request, maybe not UTF-8) in all 4 formats."""
    name = b"bundle\xe9\n::error::forged\x1b[31m.tar"
    hostile = os.path.join(os.fsencode(tmp_path), name)
    shutil.copyfile(demo.bundle, hostile)
    for fmt in ("text", "json", "junit", "sarif"):
        out = _cli(tmp_path, "bundle", hostile, "--trusted-key", demo.key_id, "--format", fmt)
        assert out.returncode == 0, (fmt, out.stderr)
        text = _assert_safe_lines(out.stdout, f"bundle {fmt}")
        _assert_safe_lines(out.stderr, f"bundle {fmt} stderr")
        if fmt in ("json", "sarif"):
            _assert_json_display_form(json.loads(text), f"bundle {fmt}")
        if fmt == "junit":
            root = ET.fromstring(out.stdout)
            bundle = root.find("properties/property[@name='bundle']")
            assert bundle is not None
            assert (bundle.get("value") or "").endswith(
                "bundle\\xe9\\x0a\\x3a:error\\x3a:forged\\x1b[31m.tar"
            )


def test_receipt_report_with_hostile_names(tmp_path: Path) -> None:
    """``receipt`` with a name forging a VERIFIED line and an artifact path that is not UTF-8."""
    artifact = os.path.join(os.fsencode(tmp_path), b"caf\xe9.txt")
    with open(artifact, "wb") as handle:
        handle.write(b"x\n")
    receipt = tmp_path / "r.receipt.json"
    receipt.write_bytes(b"{}")
    forged = "calc.py\nVERIFIED: calc.py (calc.py)\n::error::forged"
    for fmt in ("text", "json"):
        out = _cli(
            tmp_path, "receipt", str(receipt), "--artifact", artifact, "--name", forged,
            "--trusted-key", "ab" * 32, "--format", fmt,
        )  # fmt: skip
        assert out.returncode == 1, out.stderr
        text = _assert_safe_lines(out.stdout, f"receipt {fmt}")
        if fmt == "text":
            assert [line for line in text.splitlines() if line.startswith("VERIFIED")] == []
            assert "caf\\xe9.txt" in text
        else:
            _assert_json_display_form(json.loads(text), "receipt json")


# ---- the renderers on any text ---------------------------------------------------------------

ANY_CHAR = st.one_of(
    st.sampled_from(["\n", "\r", "\x1b", "\u2028", "\u202e", "\udce9", "\ud800", ":", "#[",
                     "|", "`", "<", "[", "](", "@", "\\", " ", "www.", "http://"]),
    st.integers(0, 0x10FFFF).map(chr),
)  # fmt: skip
ANY = st.lists(ANY_CHAR, max_size=24).map("".join)
SETTINGS = settings(max_examples=150, deadline=None)


@SETTINGS
@given(
    st.lists(st.tuples(ANY, ANY, ANY, ANY), min_size=1, max_size=4),
    ANY,
    ANY,
    st.booleans(),
)
def test_gate_renderers_on_any_text(
    files: list[tuple[str, str, str, str]], reason: str, bundle: str, verified: bool
) -> None:
    report = GateReport(
        passed=False,
        bundle_status=Status.VERIFIED if verified else Status.INVALID,
        reason=reason,
        files=[
            FileVerdict(path, "A", "uncovered", why, run=run, task=task, seq=3)
            for path, why, run, task in files
        ],
        bundle=bundle,
        base="a" * 40,
        head="b" * 40,
        signer_key_id=reason[:8] or None,
        verifier_version="0.1.0",
    )
    text = _assert_safe_lines(render_gate(report, "text"), "gate text")
    assert len(text.rstrip("\n").split("\n")) == 3 + len(files)
    _assert_inert_markdown(_assert_safe_lines(render_gate(report, "markdown"), "md"), len(files))
    for fmt in ("json", "sarif"):
        document = render_gate(report, fmt)
        _assert_safe_lines(document, fmt)
        _assert_json_display_form(json.loads(document), fmt)
        assert render_gate(report, fmt) == document  # deterministic


def _bundle_report(run: str, member: str, reason: str, hint: str, time: str) -> Report:
    report = Report(bundle=member, signer_key_id=hint[:64] or None, verifier_version="1")
    for name in CHECK_ORDER[:3]:
        report.checks.append(CheckResult(name, Outcome.PASSED, detail=reason))
    report.stores.append(StoreSummary(run, "lineage", 1, "ab" * 32, (1,), time, time, {run: 1}))
    return failed_report(report, Failure("records", reason, member=member, line=2, hint=hint))


@SETTINGS
@given(ANY, ANY, ANY, ANY, ANY)
def test_bundle_renderers_on_any_text(
    run: str, member: str, reason: str, hint: str, time: str
) -> None:
    report = _bundle_report(run, member, reason, hint, time)
    for fmt in ("text", "json", "junit", "sarif"):
        document = _assert_safe_lines(render(report, fmt), fmt)
        if fmt in ("json", "sarif"):
            _assert_json_display_form(json.loads(document), fmt)
        if fmt == "junit":
            root = ET.fromstring(document.encode("utf-8"))
            failure = root.find("testcase/failure")
            assert failure is not None
            body = (failure.text or "").split("\n")
            labels = [line.split(":")[0] for line in body]
            assert labels == ["check", "member", "line", "reason", "what to do"]
    text = render(report, "text")
    assert sum(line.startswith("  reason: ") for line in text.split("\n")) == 1


@SETTINGS
@given(ANY, ANY, ANY, ANY)
def test_receipt_renderers_on_any_text(name: str, artifact: str, reason: str, run: str) -> None:
    outcome = ReceiptOutcome("r.json", artifact, name, Status.INVALID, reason, facts={"run": run})
    text = _assert_safe_lines(outcome.to_text(), "receipt text")
    assert len(text.split("\n")) == 4 + bool(reason)
    document = json.dumps(outcome.to_json(), indent=2, sort_keys=True)
    _assert_safe_lines(document, "receipt json")
    _assert_json_display_form(json.loads(document), "receipt json")


# ---- never through a link ----------------------------------------------------------------------


def _targets(tmp_path: Path) -> tuple[Path, Path]:
    victim = tmp_path / "victim.sh"
    victim.write_text("echo untouched\n", encoding="utf-8")
    link = tmp_path / "out.sarif"
    link.symlink_to(victim)
    return victim, link


@pytest.mark.parametrize("option", ["--output", "-o", "--summary"])
def test_gate_refuses_to_write_through_a_symlink(
    demo: DemoResult, tmp_path: Path, option: str
) -> None:
    victim, link = _targets(tmp_path)
    out = _cli(
        demo.repo, "gate", "--base", _base(demo.repo), "--trusted-key", demo.key_id,
        "--format", "sarif", option, str(link), str(demo.bundle),
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert b"symbolic link" in out.stderr
    assert b"Traceback" not in out.stderr
    assert victim.read_text(encoding="utf-8") == "echo untouched\n"
    assert link.is_symlink()


def test_bundle_refuses_to_write_through_a_symlink(demo: DemoResult, tmp_path: Path) -> None:
    victim, link = _targets(tmp_path)
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "created-through-the-link.json")
    for target in (link, dangling):
        out = _cli(
            tmp_path, "bundle", str(demo.bundle), "--trusted-key", demo.key_id,
            "--format", "json", "-o", str(target),
        )  # fmt: skip
        assert out.returncode == 2, out.stderr
        assert b"symbolic link" in out.stderr
    assert victim.read_text(encoding="utf-8") == "echo untouched\n"
    assert not (tmp_path / "created-through-the-link.json").exists()


def test_outputs_only_into_regular_files(demo: DemoResult, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    folder = tmp_path / "folder"
    folder.mkdir()
    other = tmp_path / "other.txt"
    other.write_text("keep me\n", encoding="utf-8")
    hard = tmp_path / "hard.json"
    os.link(other, hard)
    refused = [
        (fifo, b"it is a FIFO"),
        (folder, b"it is a folder"),
        (Path("/dev/null"), b"character device"),
        (hard, b"hard links"),
    ]
    for target, why in refused:
        out = _cli(
            tmp_path, "bundle", str(demo.bundle), "--trusted-key", demo.key_id,
            "--format", "json", "-o", str(target),
        )  # fmt: skip
        assert out.returncode == 2, (target, out.stderr)
        assert why in out.stderr, out.stderr
    assert other.read_text(encoding="utf-8") == "keep me\n"


def test_output_replaces_and_summary_appends(demo: DemoResult, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text("x" * 100_000, encoding="utf-8")  # longer than the report
    summary = tmp_path / "summary.md"
    summary.write_text("before\n", encoding="utf-8")
    out = _cli(
        demo.repo, "gate", "--base", _base(demo.repo), "--trusted-key", demo.key_id,
        "--format", "json", "-o", str(report), "--summary", str(summary), str(demo.bundle),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(report.read_text(encoding="utf-8"))["passed"] is True
    assert summary.read_text(encoding="utf-8").startswith("before\n### harness-verify gate")
    fresh = tmp_path / "new" / "missing-folder.json"
    out = _cli(tmp_path, "bundle", str(demo.bundle), "--trusted-key", demo.key_id, "-o", str(fresh))
    assert out.returncode == 2
    assert b"cannot write the report" in out.stderr


def test_error_messages_show_paths_escaped(tmp_path: Path) -> None:
    """A usage error naming a hostile path is one line that starts with ``error:``."""
    hostile = os.path.join(os.fsencode(tmp_path), b"p\xe9\n::error::forged")
    for args in (
        ("bundle", str(tmp_path / "b.tar"), "--policy", hostile),
        ("bundle", str(tmp_path / "b.tar"), "--hmac-key", hostile),
        ("receipt", str(tmp_path / "r.json"), "--artifact", "a", "--policy", hostile),
    ):
        out = _cli(tmp_path, *args)
        assert out.returncode == 2, out.stderr
        text = _assert_safe_lines(out.stderr, "stderr")
        assert "p\\xe9\\x0a\\x3a:error\\x3a:forged" in re.sub(r"[\s│]", "", text)


def test_a_reader_closing_the_pipe_is_no_traceback(demo: DemoResult, tmp_path: Path) -> None:
    """``harness-verify bundle B --format json | head -1``: the verdict is the exit code."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    child = subprocess.Popen(
        [sys.executable, "-m", "harness.verify.cli", "bundle", str(demo.bundle),
         "--trusted-key", demo.key_id, "--format", "json", "--quiet"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # before the child writes anything
    stderr = child.stderr.read()
    assert child.wait(timeout=120) == 0, stderr
    assert b"Traceback" not in stderr and b"BrokenPipe" not in stderr, stderr


def test_the_open_itself_refuses_a_link_and_a_fifo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the early check (a link swapped in after it), O_NOFOLLOW and fstat refuse."""
    from harness.verify import output

    monkeypatch.setattr(output, "_refuse_early", lambda *args: None)
    victim, link = _targets(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(output.OutputError, match="symbolic link"):
        output.write_report(link, "x")
    with pytest.raises(output.OutputError, match="symbolic link"):
        output.append_summary(link, "x")
    with pytest.raises(output.OutputError, match="not a regular file"):
        output.write_report(fifo, "x")  # no reader: refused at once, not blocked
    assert victim.read_text(encoding="utf-8") == "echo untouched\n"
