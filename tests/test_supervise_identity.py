"""Process identity and orphan reaping (harness.orchestrate.supervise.identity), with real
processes in their own sessions standing in for the children of a crashed runtime."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.supervise import ProcIdentity, boot_id, identity_of, reap_orphan

from .test_orchestrate_proc import is_dead, subreaper, wait_for_file

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")
__all__ = ["subreaper"]  # the fixture, used by name
BOOTS = ("fe6d2243-823a-4f94-9e45-4b2da4f4e956", "00000000-0000-4000-8000-000000000000")
BOOT = next(b for b in BOOTS if b != boot_id())
"""A boot id that is not this boot's."""


@pytest.fixture
def orphan() -> Iterator[subprocess.Popen[bytes]]:
    """A detached group (its own session), as a crashed runtime leaves one: a shell that
    started a background ``sleep`` in its group and waits."""
    proc = subprocess.Popen(
        ["sh", "-c", "sleep 30 & echo $!; wait"], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _stat_fields(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def test_identity_of_own_child_matches_proc(tmp_path: Path) -> None:
    before = time.time()
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        ident = identity_of(proc.pid)
        assert ident is not None
        fields = _stat_fields(proc.pid)  # fields[0] is field 3 (state)
        assert ident.pid == proc.pid and ident.pgid == int(fields[2]) == proc.pid
        assert ident.start_ticks == int(fields[22 - 3])
        assert ident.boot_id == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        # field 22 really is the start time: boot time + ticks / HZ is about now
        btime = next(
            int(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        started = btime + ident.start_ticks / os.sysconf("SC_CLK_TCK")
        assert before - 2 <= started <= time.time() + 2
        assert identity_of(os.getpid()) != ident
        assert ProcIdentity.from_json(ident.to_json()) == ident
    finally:
        proc.kill()
        proc.wait()
    assert identity_of(proc.pid) is None  # reaped: no such process


def test_reap_orphan_kills_a_detached_group(orphan: subprocess.Popen[bytes]) -> None:
    assert orphan.stdout is not None
    child = int(orphan.stdout.readline())
    ident = identity_of(orphan.pid)
    assert ident is not None
    t0 = time.monotonic()
    assert reap_orphan(ident, grace_s=1.0) == "killed"
    assert time.monotonic() - t0 < 1.0  # sh and sleep die on SIGTERM: no wait for the grace
    assert is_dead(orphan.pid) and is_dead(child)
    assert orphan.wait(timeout=2) == -signal.SIGTERM


def test_reap_orphan_sigkills_after_the_grace(tmp_path: Path) -> None:
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    code += "print('ready', flush=True); time.sleep(30)"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        ident = identity_of(proc.pid)
        assert ident is not None
        t0 = time.monotonic()
        assert reap_orphan(ident, grace_s=0.3) == "killed"
        assert 0.3 <= time.monotonic() - t0 < 2.5
        assert is_dead(proc.pid)
        assert proc.wait(timeout=2) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.usefixtures("subreaper")
def test_reap_orphan_kills_members_left_by_a_dead_leader(tmp_path: Path) -> None:
    pidfile = tmp_path / "member.pid"
    leader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
                import subprocess, time
                p = subprocess.Popen(["sleep", "30"])
                open({str(pidfile)!r}, "w").write(str(p.pid))
                time.sleep(30)
            """),
        ],
        start_new_session=True,
    )
    member = int(wait_for_file(pidfile))
    ident = identity_of(leader.pid)
    assert ident is not None
    leader.kill()
    leader.wait()  # the leader is gone (reaped); its member still runs in its group
    assert not is_dead(member)
    assert reap_orphan(ident, grace_s=1.0) == "killed"
    assert is_dead(member)
    os.waitpid(member, 0)  # ours, through the subreaper
    assert reap_orphan(ident) == "gone"


def test_reap_orphan_of_an_exited_process_is_gone(tmp_path: Path) -> None:
    proc = subprocess.Popen(["sleep", "0.05"], start_new_session=True)
    ident = identity_of(proc.pid)
    assert ident is not None
    proc.wait()
    assert reap_orphan(ident) == "gone"


def test_reused_pid_is_never_signalled(orphan: subprocess.Popen[bytes]) -> None:
    assert orphan.stdout is not None
    child = int(orphan.stdout.readline())
    ident = identity_of(orphan.pid)
    assert ident is not None
    forged = dataclasses.replace(ident, start_ticks=ident.start_ticks + 1)
    assert reap_orphan(forged, grace_s=0.2) == "reused"
    other_boot = dataclasses.replace(ident, boot_id=BOOT)
    assert reap_orphan(other_boot, grace_s=0.2) == "reused"
    time.sleep(0.3)
    assert orphan.poll() is None and not is_dead(orphan.pid) and not is_dead(child)


def test_reap_orphan_refuses_groups_it_cannot_own() -> None:
    me = identity_of(os.getpid())
    assert me is not None
    with pytest.raises(ValueError, match=r"own|does not lead"):
        reap_orphan(me)
    with pytest.raises(ValueError, match="does not lead"):
        reap_orphan(ProcIdentity(pid=4000, pgid=4001, start_ticks=1, boot_id=BOOT))
    with pytest.raises(ValueError, match="grace_s"):
        reap_orphan(ProcIdentity(pid=4000, pgid=4000, start_ticks=1, boot_id=BOOT), -1)
    # an identity from another boot whose pid is unused is simply gone
    unused = ProcIdentity(pid=(1 << 22) - 1, pgid=(1 << 22) - 1, start_ticks=1, boot_id=BOOT)
    assert reap_orphan(unused) == "gone"


GOOD: dict[str, Any] = {"pid": 1234, "pgid": 1234, "start_ticks": 56789, "boot_id": BOOT}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"pid": 1234.0}, "pid must be an integer"),
        ({"pgid": True}, "pgid must be an integer"),
        ({"start_ticks": -1}, "start_ticks -1 outside"),
        ({"pid": 0}, "pid 0 outside"),
        ({"pgid": 1}, "pgid 1 outside"),
        ({"pid": 1 << 22 | 1}, "outside"),
        ({"start_ticks": 1 << 53}, "outside"),
        ({"start_ticks": "5"}, "must be an integer"),
        ({"boot_id": BOOTS[0].upper()}, "boot_id"),
        ({"boot_id": ""}, "boot_id"),
        ({"boot_id": 7}, "boot_id"),
        ({"extra": 1}, "unexpected keys \\['extra'\\]"),
    ],
)
def test_from_json_is_strict(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ProcIdentity.from_json({**GOOD, **change})


@pytest.mark.parametrize("missing", sorted(GOOD))
def test_from_json_rejects_missing_keys(missing: str) -> None:
    obj = {k: v for k, v in GOOD.items() if k != missing}
    with pytest.raises(ValueError, match=f"missing keys \\['{missing}'\\]"):
        ProcIdentity.from_json(obj)


def test_from_json_rejects_non_objects_and_round_trips() -> None:
    for bad in (None, [], "x", [("pid", 1)]):
        with pytest.raises(ValueError, match="expected an object"):
            ProcIdentity.from_json(bad)
    ident = ProcIdentity.from_json(dict(GOOD))
    assert ident.to_json() == GOOD
    assert all(type(v) is int for k, v in ident.to_json().items() if k != "boot_id")
