"""The verifier's progress display (verify/progress.py): percent and time left from the input's
position, a rewritten terminal line, a plain line every few seconds in a log, and a ticker
that keeps a long silent pass visible. Clocks are injected; one test runs the real thread."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.verify.progress import LOG_EVERY_S, TTY_EVERY_S, Progress, _duration


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _progress(tty: bool, size: int | None = 1000) -> tuple[Progress, io.StringIO, Clock, list[int]]:
    out, clock, read = io.StringIO(), Clock(), [0]
    progress = Progress(True, out, tty=tty, clock=clock, ticker=False)
    progress.begin(size, lambda: read[0])
    return progress, out, clock, read


def test_a_log_gets_one_plain_line_per_interval_with_percent_and_time_left() -> None:
    progress, out, clock, read = _progress(tty=False)
    for n in range(1, 1000):  # many steps within the first interval: nothing written
        progress.step("records", "runs/r/stores/audit.jsonl", n, 4000)
        progress.tick()
    assert out.getvalue() == ""
    clock.now += LOG_EVERY_S
    read[0] = 250
    progress.tick()
    assert out.getvalue() == (
        "verifying  25% records runs/r/stores/audit.jsonl 999/4,000, about 15 s left\n"
    )
    progress.tick()  # no second line within the interval
    clock.now += LOG_EVERY_S - 0.01
    progress.tick()
    assert out.getvalue().count("\n") == 1
    # a pass after the last byte: named, 100 %, time so far (no "left" once all is read)
    read[0] = 1000
    progress.step("semantics", "run r")
    clock.now += 0.01
    progress.tick()
    assert out.getvalue().splitlines()[-1] == "verifying 100% semantics run r, 10 s so far"
    progress.end()
    assert not out.getvalue().endswith("\r\033[K")


def test_a_terminal_line_is_rewritten_and_cleared_at_the_end() -> None:
    progress, out, clock, read = _progress(tty=True)
    progress.step("members")
    progress.tick()
    assert out.getvalue() == ""  # nothing before the first tenth of a second
    clock.now += TTY_EVERY_S * 1.5
    read[0] = 500
    progress.step("records", "runs/r/stores/lineage.jsonl", 65536, 131072)
    progress.tick()
    clock.now += 0.01
    progress.tick()  # too soon: not drawn again
    clock.now += TTY_EVERY_S * 1.5
    read[0] = 600
    progress.tick()
    drawn = out.getvalue().split("\r\033[K")[1:]
    assert len(drawn) == 2
    assert drawn[0].startswith("verifying  50% records runs/r/stores/lineage.jsonl 65,536/131,072")
    assert drawn[1].startswith("verifying  60%")
    progress.end()
    assert out.getvalue().endswith("\r\033[K")


def test_time_left_needs_a_second_of_work_and_an_unknown_size_shows_none() -> None:
    progress, _, clock, read = _progress(tty=False)
    read[0] = 100
    clock.now += 0.5
    assert progress.line("records", "", None, None) == "verifying  10% records, 0 s so far"
    clock.now += 0.5
    assert progress.line("records", "", None, None) == "verifying  10% records, about 9 s left"
    unknown, _, clock2, _ = _progress(tty=False, size=None)
    clock2.now += 90
    assert unknown.line("receipts", "", 3, 7) == "verifying receipts 3/7, 1 min 30 s so far"


def test_member_names_are_shown_in_display_form() -> None:
    progress, _, _, _ = _progress(tty=False)
    line = progress.line("members", "runs/x\x1b[2J\n/evil", None, None)
    assert "\x1b" not in line and "\n" not in line


def test_durations() -> None:
    assert [_duration(s) for s in (0, 0.4, 59.6, 61, 3599, 3600, 7322)] == [
        "0 s",
        "0 s",
        "1 min 00 s",
        "1 min 01 s",
        "59 min 59 s",
        "1 h 00 min",
        "2 h 02 min",
    ]


def test_disabled_shows_nothing() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress(False, out, tty=True, clock=clock, ticker=True)
    progress.begin(10, lambda: 5)
    progress.step("records")
    clock.now += 60
    progress.tick()
    progress.end()
    assert out.getvalue() == ""


def test_the_ticker_draws_a_step_that_is_never_repeated() -> None:
    """A pass that makes one step and then works for a while is still drawn (real thread)."""
    out = io.StringIO()
    progress = Progress(True, out, tty=True)
    progress.begin(100, lambda: 40)
    progress.step("semantics", "run r")
    deadline = time.monotonic() + 10
    while "semantics" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.02)
    progress.end()
    assert "verifying  40% semantics run r" in out.getvalue()
    assert out.getvalue().endswith("\r\033[K")
    assert progress._thread is None


def _big_bundle(tmp_path: Path, records: int) -> tuple[Path, str]:
    from harness.receipts.bundle import export_bundle
    from harness.receipts.run import RunRecorder

    from .evidence_helpers import make_keys

    keys = make_keys(21)
    with RunRecorder(tmp_path / "state", "big", keys) as run:
        audit = run.store("audit")
        for start in range(0, records, 2000):
            audit.append_many(
                ("event", {"name": "tick", "data": {"n": n, "pad": "x" * 200}})
                for n in range(start, min(records, start + 2000))
            )
        run.record("audit", "run.end", {"outcome": "succeeded"})
    return export_bundle(tmp_path / "state", tmp_path / "big.tar", keys).path, keys.key_id


def _on_pty(command: list[str], cwd: Path | None = None) -> tuple[int, str]:
    """Run ``command`` with its standard error on a new pseudo-terminal; (status, what it drew)."""
    leader, follower = pty.openpty()
    done = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=follower, stdin=subprocess.DEVNULL, cwd=cwd
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return done.wait(timeout=300), b"".join(chunks).decode("utf-8", "replace")


def test_a_terminal_shows_percent_and_passes_and_a_pipe_shows_no_carriage_returns(
    tmp_path: Path,
) -> None:
    """Through the console entry point on a real pseudo-terminal: the rewritten line names the
    passes with a percentage and is cleared at the end; with stderr a pipe (a CI log of a
    short run) nothing is drawn; --quiet draws nothing on a terminal either."""
    bundle, key_id = _big_bundle(tmp_path, 20_000)
    command = [sys.executable, "-m", "harness.verify.cli", str(bundle), "--trusted-key", key_id]

    def on_pty(*extra: str) -> tuple[int, str]:
        return _on_pty([*command, *extra])

    code, shown = on_pty()
    assert code == 0
    drawn = [line for line in shown.split("\r\x1b[K") if line]
    assert drawn, shown
    assert all(line.startswith("verifying ") and "%" in line for line in drawn), drawn
    assert any(
        "records runs/big/stores/audit.jsonl" in line and "/20,001" in line for line in drawn
    )
    assert shown.endswith("\r\x1b[K")  # the terminal line is cleared before the report
    code, quiet = on_pty("--quiet")
    assert code == 0 and quiet == ""
    piped = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert piped.returncode == 0 and "\r" not in piped.stderr


def test_the_gate_shows_the_bundle_verification_on_a_terminal(tmp_path: Path) -> None:
    bundle, key_id = _big_bundle(tmp_path, 20_000)
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@e"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "base"], check=True)
    command = [sys.executable, "-m", "harness.verify.cli", "gate", "--base", "HEAD", "--head",
               "HEAD", "--trusted-key", key_id, str(bundle)]  # fmt: skip
    code, shown = _on_pty(command, cwd=repo)
    assert code == 0, shown
    drawn = [line for line in shown.split("\r\x1b[K") if line]
    assert any(line.startswith("verifying ") and "% records" in line for line in drawn), shown
    assert shown.endswith("\r\x1b[K")


def test_edges_of_the_line_never_crash_or_lie() -> None:
    """A count without a total, an empty input, nothing read yet after a second, an input closed
    under the ticker, and a step without detail."""
    progress, out, clock, _ = _progress(tty=False)
    assert progress.line("receipts", "", 3, None) == "verifying   0% receipts 3, 0 s so far"
    clock.now += 2
    assert progress.line("records", "", None, None) == "verifying   0% records, 2 s so far"
    empty, _, _, _ = _progress(tty=False, size=0)
    assert empty.line("members", "", None, None) == "verifying members, 0 s so far"

    def closed() -> int:
        raise ValueError("I/O operation on closed file")

    progress.begin(1000, closed)
    assert progress.line("trust", "", None, None).startswith("verifying 100% trust")
    progress.step("trust")
    clock.now += LOG_EVERY_S
    progress.tick()
    assert out.getvalue().splitlines()[-1] == "verifying 100% trust, 5 s so far"


def test_standard_error_is_the_default_stream(capsys: pytest.CaptureFixture[str]) -> None:
    clock = Clock()
    progress = Progress(True, tty=False, clock=clock, ticker=False)
    progress.begin(10, lambda: 5)
    progress.step("records")
    clock.now += LOG_EVERY_S
    progress.tick()
    assert capsys.readouterr().err == "verifying  50% records, about 5 s left\n"


def test_the_ticker_writes_log_lines_too() -> None:
    """Not a terminal: the real thread writes a plain line once the interval has passed."""
    out = io.StringIO()
    progress = Progress(True, out, tty=False, interval_s=0.05)
    progress.begin(100, lambda: 60)
    progress.step("semantics", "run r")
    deadline = time.monotonic() + 10
    while "\n" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.02)
    progress.end()
    assert out.getvalue().startswith("verifying  60% semantics run r")
    assert "\r" not in out.getvalue()
