"""harness.orchestrate.proc: real subprocesses, real process groups, real signals."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.orchestrate.proc import run_process, signal_name

PY = sys.executable
PR_SET_CHILD_SUBREAPER = 36

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux process groups")


def py(code: str) -> list[str]:
    return [PY, "-c", textwrap.dedent(code)]


def wait_for_file(path: Path, timeout: float = 5.0) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.01)
    raise AssertionError(f"{path} never written")


def is_dead(pid: int) -> bool:
    """Gone, or a zombie (dead, waiting for its reaper)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


@pytest.fixture
def subreaper() -> Iterator[None]:
    """Make this test process the reaper of orphaned descendants, so that we can reap them.

    (pid 1 in a container may never reap; without this a killed grandchild stays a zombie.)
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        pytest.skip("prctl(PR_SET_CHILD_SUBREAPER) unavailable")
    try:
        yield
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def reap(pid: int, timeout: float = 3.0) -> None:
    """Reap ``pid`` (our child by re-parenting); fail if it does not die within ``timeout``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done:
            return
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} still alive after {timeout}s")


def test_normal_exit(tmp_path: Path) -> None:
    r = run_process(
        py("import sys; print('hello'); sys.stderr.write('warn')"), cwd=tmp_path, timeout_s=10
    )
    assert (r.exit_code, r.signal, r.timed_out) == (0, None, False)
    assert r.stdout == b"hello\n"
    assert r.stderr == b"warn"
    assert not r.stdout_truncated and not r.stderr_truncated


def test_nonzero_exit(tmp_path: Path) -> None:
    r = run_process(py("import sys; sys.exit(3)"), cwd=tmp_path, timeout_s=10)
    assert (r.exit_code, r.signal, r.timed_out) == (3, None, False)


def test_cwd_env_and_stdin(tmp_path: Path) -> None:
    data = os.urandom(1 << 20)  # > pipe buffer: the writer must not deadlock with the readers
    r = run_process(
        py("""
            import os, sys
            data = sys.stdin.buffer.read()
            sys.stdout.buffer.write(data)
            sys.stderr.write(os.getcwd() + '|' + os.environ['FOO'])
        """),
        cwd=tmp_path,
        timeout_s=10,
        env={"FOO": "bar", "PATH": os.environ.get("PATH", "")},
        stdin=data,
    )
    assert r.exit_code == 0
    assert r.stdout == data
    assert r.stderr.decode() == f"{tmp_path.resolve()}|bar"


def test_stdin_not_read_is_fine(tmp_path: Path) -> None:
    r = run_process(py("pass"), cwd=tmp_path, timeout_s=10, stdin=b"x" * (4 << 20))
    assert r.exit_code == 0 and not r.timed_out


def test_large_output_both_streams_capped_without_deadlock(tmp_path: Path) -> None:
    # 10 MB on each stream, interleaved: a reader that drains one pipe at a time would block.
    r = run_process(
        py("""
            import sys
            chunk = b'o' * 65536
            for _ in range(160):
                sys.stdout.buffer.write(chunk); sys.stdout.flush()
                sys.stderr.buffer.write(chunk.replace(b'o', b'e')); sys.stderr.flush()
            sys.stdout.buffer.write(b'END')
        """),
        cwd=tmp_path,
        timeout_s=20,
        max_output=1 << 20,
    )
    assert (r.exit_code, r.timed_out) == (0, False)
    assert r.stdout == b"o" * (1 << 20)
    assert r.stderr == b"e" * (1 << 20)
    assert r.stdout_truncated and r.stderr_truncated


def test_output_below_cap_is_exact(tmp_path: Path) -> None:
    r = run_process(
        py("""
            import sys
            sys.stdout.buffer.write(bytes(range(256)) * 12288)
            sys.stderr.buffer.write(b'z' * 3_000_000)
        """),
        cwd=tmp_path,
        timeout_s=20,
    )
    assert r.exit_code == 0
    assert r.stdout == bytes(range(256)) * 12288
    assert r.stderr == b"z" * 3_000_000
    assert not r.stdout_truncated and not r.stderr_truncated


def test_timeout_sigterm_honoured(tmp_path: Path) -> None:
    r = run_process(
        py("import time; print('started', flush=True); time.sleep(30)"),
        cwd=tmp_path,
        timeout_s=0.5,
        grace_s=3.0,
    )
    assert r.timed_out
    assert r.exit_code is None and r.signal == "SIGTERM"
    assert r.stdout == b"started\n"
    assert 450 <= r.duration_ms < 2500  # exited on SIGTERM, well within the grace


@pytest.mark.usefixtures("subreaper")
def test_sigterm_ignored_by_agent_and_child_then_sigkill(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    child = textwrap.dedent(f"""
        import os, signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open({str(pidfile)!r} + '.tmp', 'w').write(str(os.getpid()))
        os.rename({str(pidfile)!r} + '.tmp', {str(pidfile)!r})
        while True:
            time.sleep(60)
    """)
    agent = f"""
        import signal, subprocess, sys, time, os
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        subprocess.Popen([sys.executable, '-c', {child!r}])
        while not os.path.exists({str(pidfile)!r}):
            time.sleep(0.01)
        print('agent ready', flush=True)
        while True:
            time.sleep(60)
    """
    t0 = time.monotonic()
    r = run_process(py(agent), cwd=tmp_path, timeout_s=1.0, grace_s=0.5)
    elapsed = time.monotonic() - t0
    assert r.timed_out
    assert r.exit_code is None and r.signal == "SIGKILL"
    assert r.stdout == b"agent ready\n"
    assert 1450 <= r.duration_ms < 3500
    assert elapsed < 4.0

    child_pid = int(wait_for_file(pidfile))
    assert is_dead(child_pid)  # killed with the group (at most a zombie awaiting its reaper)
    reap(child_pid)
    with pytest.raises(ProcessLookupError):
        os.kill(child_pid, 0)


@pytest.mark.usefixtures("subreaper")
def test_background_child_does_not_outlive_leader(tmp_path: Path) -> None:
    """The leader exits at once; its background child (holding stdout open) is killed."""
    pidfile = tmp_path / "bg.pid"
    r = run_process(
        py(f"""
            import subprocess, sys
            p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])
            open({str(pidfile)!r}, 'w').write(str(p.pid))
            print('leader done')
        """),
        cwd=tmp_path,
        timeout_s=10,
    )
    assert (r.exit_code, r.signal, r.timed_out) == (0, None, False)
    assert r.stdout == b"leader done\n"
    assert r.duration_ms < 3000  # did not wait for the child's 60 s
    child_pid = int(pidfile.read_text())
    assert is_dead(child_pid)
    reap(child_pid)
    with pytest.raises(ProcessLookupError):
        os.kill(child_pid, 0)


def test_escaped_descendant_holding_pipe_does_not_hang(tmp_path: Path) -> None:
    """A descendant that left the group (setsid) is out of reach, but cannot hang us."""
    pidfile = tmp_path / "escaped.pid"
    r = run_process(
        py(f"""
            import subprocess, sys
            p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'],
                                 start_new_session=True)
            open({str(pidfile)!r}, 'w').write(str(p.pid))
        """),
        cwd=tmp_path,
        timeout_s=10,
    )
    escaped = int(pidfile.read_text())
    try:
        assert r.exit_code == 0
        assert r.duration_ms < 3000
    finally:
        os.kill(escaped, signal.SIGKILL)


def test_missing_executable_is_127(tmp_path: Path) -> None:
    r = run_process(["definitely-not-a-command-xyz", "--help"], cwd=tmp_path, timeout_s=5)
    assert r.exit_code == 127 and r.signal is None and not r.timed_out
    assert b"definitely-not-a-command-xyz" in r.stderr
    assert r.stdout == b""


def test_not_executable_is_126(tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    r = run_process([str(script)], cwd=tmp_path, timeout_s=5)
    assert r.exit_code == 126
    assert b"script.sh" in r.stderr


def test_durations_sane(tmp_path: Path) -> None:
    r = run_process(py("import time; time.sleep(0.3)"), cwd=tmp_path, timeout_s=10)
    assert r.exit_code == 0
    assert 280 <= r.duration_ms < 3000
    fast = run_process(["true"], cwd=tmp_path, timeout_s=10)
    assert fast.exit_code == 0 and 0 <= fast.duration_ms < 1000


def test_killed_by_own_signal_reports_name(tmp_path: Path) -> None:
    r = run_process(py("import os, signal; os.kill(os.getpid(), signal.SIGABRT)"), cwd=tmp_path,
                    timeout_s=10)  # fmt: skip
    assert r.exit_code is None and r.signal == "SIGABRT" and not r.timed_out


def test_signal_name() -> None:
    assert signal_name(9) == "SIGKILL"
    assert signal_name(15) == "SIGTERM"
    assert signal_name(200) == "SIG200"


def test_empty_argv_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="empty argv"):
        run_process([], cwd=tmp_path, timeout_s=1)
