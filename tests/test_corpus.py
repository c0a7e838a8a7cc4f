"""The hostile-bundle corpus (tests/corpus.py) through the real CLI, one subprocess per input.

Every input must give its expected exit code and JSON ``status``, a failure reason matching its
pattern, and never a traceback; memory stays bounded (an address-space limit on every run, and
the peak resident size of the gzip bombs is measured). Cases that need custom ``Limits`` run
through the library. Verifier bugs found while writing the corpus are ``xfail(strict=True)``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.verify.archive import Limits
from harness.verify.bundle import verify_bundle, verify_bundle_contents
from harness.verify.layout import store_member
from harness.verify.policy import TrustPolicy
from harness.verify.render import render
from harness.verify.report import CHECK_ORDER, Report

from .corpus import (
    Case,
    build_corpus,
    export_run,
    gzip_bytes,
    gzip_zeros,
    many_receipts_bundle,
    many_runs_bundle,
    member_offsets,
    operator_keys,
    read_members,
    write_tar,
)

TIMEOUT = 60
ADDRESS_SPACE = 512 << 20
"""Every CLI run gets this much virtual memory at most (it needs ~40 MB resident)."""
BOMB_MAX_RSS = 256 << 20
BUDGET_SECONDS = 10.0
"""The reading budget for inputs of <= 10 MB (docs/spec/verifier.md): time and peak RSS."""
BUDGET_RSS = 256 << 20

KEY_ID = operator_keys().key_id
PINS = TrustPolicy(frozenset({KEY_ID}), "--trusted-key")


def _collect() -> list[tuple[str, str, bool]]:
    """(name, known bug, bomb) of every case: a throwaway build, names come from the generator."""
    with tempfile.TemporaryDirectory() as folder:
        return [(c.name, c.known_bug, c.bomb) for c in build_corpus(Path(folder))]


def _params(cases: list[tuple[str, str, bool]]) -> list[Any]:
    """Cases the verifier gets wrong today are strict xfails carrying the bug's description."""
    return [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=f"BUG: {bug}"))
        if bug
        else name
        for name, bug, _ in cases
    ]


_COLLECTED = _collect()
CASE_NAMES = _params(_COLLECTED)
RENDER_NAMES = _params([c for c in _COLLECTED if not c[2]])
"""Bombs render like any other archive failure and are slow to open twice: left out."""


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    cases = build_corpus(tmp_path_factory.mktemp("corpus"))
    return {case.name: case for case in cases}


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str
    max_rss: int
    """Peak resident set size of the process, in bytes."""
    seconds: float
    """Wall-clock time from spawn to exit."""
    cpu_seconds: float
    """CPU time of the process (user + system): what the budget is checked on, since the
    wall clock of a test on a shared machine measures the other jobs too."""


def run_cli(
    args: Sequence[str],
    *,
    timeout: float = TIMEOUT,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> Ran:
    """``python -m harness.verify.cli ARGS`` with a timeout and an address-space limit; its
    own peak RSS comes from ``wait4`` (not the cumulative RUSAGE_CHILDREN)."""
    command = [sys.executable, "-c", _REPORT_HWM, *args]
    hwm = Path(tempfile.mkstemp(prefix="hwm-")[1])
    env = {**(os.environ if env is None else env), "HARNESS_TEST_HWM_FILE": str(hwm)}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, cwd=cwd, env=env)
        with contextlib.suppress(ProcessLookupError):  # already gone: wait4 still reports it
            resource.prlimit(process.pid, resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
        timer = threading.Timer(timeout, process.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(process.pid, 0)
            seconds = time.perf_counter() - started
        finally:
            timer.cancel()
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        reported = hwm.read_text().strip()
        hwm.unlink()
        return Ran(
            process.returncode,
            out.read().decode("utf-8", "replace"),
            err.read().decode("utf-8", "replace"),
            int(reported) * 1024 if reported else usage.ru_maxrss * 1024,
            seconds,
            usage.ru_utime + usage.ru_stime,
        )


# The verifier's own peak memory: VmHWM of the process image after exec. (ru_maxrss from
# wait4 also counts the image before exec, i.e. the test runner's own memory when it spawned
# the child, which made this check depend on what ran before it.)
_REPORT_HWM = (
    "import atexit, os, sys\n"
    "def _hwm():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    "            open(os.environ['HARNESS_TEST_HWM_FILE'], 'w').write(line.split()[1])\n"
    "atexit.register(_hwm)\n"
    "from harness.verify.cli import main\n"
    "main(sys.argv[1:])\n"
)


def _cli_args(case: Case) -> list[str]:
    return [str(case.path), "--format", "json", "--trusted-key", KEY_ID, *case.args]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_cli_rejects_hostile_input(corpus: dict[str, Case], name: str) -> None:
    case = corpus[name]
    ran = run_cli(_cli_args(case))
    assert ran.returncode >= 0, f"killed by signal {-ran.returncode} (timeout {TIMEOUT}s?)"
    assert "Traceback" not in ran.stderr, ran.stderr
    assert "MemoryError" not in ran.stderr, ran.stderr
    assert ran.returncode == case.expected_exit, (ran.returncode, ran.stdout[-2000:], ran.stderr)
    document = json.loads(ran.stdout)
    assert document["status"] == case.expected_status
    assert document["exit_code"] == case.expected_exit
    failure = document["failure"]
    if case.expected_exit == 0:
        assert failure is None
        return
    assert failure is not None
    assert failure["reason"], "a failure must say why"
    assert re.search(case.reason_regex, failure["reason"]), failure["reason"]
    if case.check is not None:
        assert failure["check"] == case.check, failure
    failed = [c["name"] for c in document["checks"] if c["outcome"] == "failed"]
    assert failed == [failure["check"]]
    # Only checks before the failing one pass (records and merkle-roots are one pass over the
    # stores), and no store is summarized unless all of them verified.
    passed = [c["name"] for c in document["checks"] if c["outcome"] in ("passed", "skipped")]
    before = list(CHECK_ORDER[: CHECK_ORDER.index(failure["check"])])
    assert passed == [
        n for n in before if not (n == "records" and failure["check"] == "merkle-roots")
    ]
    if CHECK_ORDER.index(failure["check"]) <= CHECK_ORDER.index("merkle-roots"):
        assert document["stores"] == []
    if case.bomb:
        assert ran.max_rss < BOMB_MAX_RSS, f"peak RSS {ran.max_rss >> 20} MiB"
    if case.budget or case.bomb:
        _assert_within_budget(case.path, ran)


def _assert_within_budget(path: Path, ran: Ran) -> None:
    assert path.stat().st_size <= 10_000_000, "the budget is for inputs of at most 10 MB"
    assert ran.cpu_seconds <= BUDGET_SECONDS, f"{path.name}: {ran.cpu_seconds:.1f} s CPU"
    assert ran.max_rss <= BUDGET_RSS, f"{path.name}: peak RSS {ran.max_rss >> 20} MiB"


@pytest.mark.parametrize("name", RENDER_NAMES)
def test_every_report_format_renders(corpus: dict[str, Case], name: str) -> None:
    """Hostile names and reasons never break the text, JUnit or SARIF renderers."""
    case = corpus[name]
    limits = Limits(max_total_bytes=int(case.args[1])) if case.args else None
    report = verify_bundle(case.path, pins=PINS, limits=limits)
    assert int(report.exit_code) == case.expected_exit
    for fmt in ("text", "json", "junit", "sarif"):
        document = render(report, fmt)
        document.encode("utf-8")  # no lone surrogates from raw member names
        if fmt == "json":
            assert json.loads(document)["status"] == case.expected_status
        elif fmt == "sarif":
            assert json.loads(document)["runs"]
        elif fmt == "junit":
            ET.fromstring(document)
        else:
            assert f"exit code {case.expected_exit}" in document


def test_corpus_is_small_and_complete(corpus: dict[str, Case]) -> None:
    sizes = {name: case.path.stat().st_size for name, case in corpus.items()}
    assert sum(sizes.values()) < 16 << 20, sizes  # the cost-* shapes are ~7 MB of it
    assert {1, 4} <= {case.expected_exit for case in corpus.values()}
    statuses = {case.expected_status for case in corpus.values()}
    assert {"empty", "seal-only", "invalid", "unreadable"} <= statuses


def test_rebuilt_tar_mirrors_the_exporter(corpus: dict[str, Case]) -> None:
    """The corpus' tar writer reproduces the exporter byte for byte, so a re-signed bundle
    differs from a real one only where a case means it to."""
    base = corpus["valid"].path.read_bytes()
    assert write_tar(read_members(base)) == base


# ---------------------------------------------------------------- library-level limits


def _verify(data: bytes, limits: Limits | None = None) -> Report:
    return verify_bundle(io.BytesIO(data), pins=PINS, limits=limits)


def _assert_unreadable(report: Report, pattern: str) -> None:
    assert int(report.exit_code) == 4
    assert report.status.value == "unreadable"
    assert report.failure is not None
    assert report.failure.check == "archive"
    assert re.search(pattern, report.failure.reason), report.failure.reason


def test_member_over_size_cap(corpus: dict[str, Case]) -> None:
    base = corpus["valid"].path.read_bytes()
    largest = max(len(data) for _, data in read_members(base))
    _assert_unreadable(
        _verify(base, Limits(max_member_bytes=largest - 1)),
        rf"declares {largest} bytes, limit {largest - 1}",
    )
    assert _verify(base, Limits(max_member_bytes=largest)).exit_code == 0


def test_too_many_members(corpus: dict[str, Case]) -> None:
    base = corpus["valid"].path.read_bytes()
    count = len(read_members(base))
    _assert_unreadable(_verify(base, Limits(max_members=count - 1)), rf"more than {count - 1}")
    assert _verify(base, Limits(max_members=count)).exit_code == 0


def test_total_size_cap(corpus: dict[str, Case]) -> None:
    base = corpus["valid"].path.read_bytes()
    total = sum(len(data) for _, data in read_members(base))
    _assert_unreadable(
        _verify(base, Limits(max_total_bytes=total - 1)), rf"add up to more than {total - 1}"
    )
    assert _verify(base, Limits(max_total_bytes=total)).exit_code == 0


def test_gzip_bomb_stops_at_the_read_budget() -> None:
    """256 MiB of zeros behind 256 KiB of gzip: refused after reading about the budget (or, as
    now, at the end-of-archive check one byte past the expected trailer), not the whole stream."""
    import tracemalloc

    bomb = gzip_zeros(256 << 20)
    tracemalloc.start()
    try:
        report = _verify(bomb, Limits(max_members=10, max_total_bytes=1 << 20))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    _assert_unreadable(report, r"gzip bomb|expands beyond|zero bytes after the last member")
    assert peak < 32 << 20, f"peak {peak >> 20} MiB of Python allocations"


def test_gzip_valid_bundle_verifies(corpus: dict[str, Case]) -> None:
    base = corpus["valid"].path.read_bytes()
    report = _verify(gzip_bytes(base))
    assert report.exit_code == 0
    assert "(gzip)" in report.check("archive").detail


# ---------------------------------------------------------------- findings (verifier bugs, fixed)


def test_non_seekable_input_is_unreadable_not_a_traceback(corpus: dict[str, Case]) -> None:
    data = corpus["valid"].path.read_bytes()
    ran = subprocess.run(
        [sys.executable, "-m", "harness.verify.cli", "/dev/stdin", "--format", "json"],
        input=data,
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    stderr = ran.stderr.decode("utf-8", "replace")
    assert "Traceback" not in stderr, stderr[-800:]
    # A pipe is never a regular file: unreadable input, exit 4, refused by the archive check.
    assert ran.returncode == 4, ran.returncode
    report = json.loads(ran.stdout)
    assert (report["status"], report["failure"]["check"]) == ("unreadable", "archive")


class _HighWater(io.BytesIO):
    """A stream that remembers how far into it anyone has read."""

    high = 0

    def read(self, size: int | None = -1, /) -> bytes:
        data = super().read(size)
        self.high = max(self.high, self.tell())
        return data


def test_trailing_zeros_refused_without_inflating_them_all(corpus: dict[str, Case]) -> None:
    head = gzip_bytes(corpus["valid"].path.read_bytes())
    stream = _HighWater(head + gzip_zeros(32 * 1600 * 10240))
    report = verify_bundle(stream, pins=PINS)
    assert int(report.exit_code) == 4
    # gzip pulls compressed input in 128 KiB reads: a verifier that stops early reads about
    # one such buffer past the bundle, not the ~0.5 MB of zeros behind it.
    assert len(stream.getbuffer()) > len(head) + (400 << 10)
    assert stream.high < len(head) + (256 << 10), stream.high


def test_negative_max_bytes_is_a_usage_error(corpus: dict[str, Case]) -> None:
    ran = run_cli([str(corpus["valid"].path), "--trusted-key", KEY_ID, "--max-bytes", "-5"])
    assert ran.returncode == 2, ran.stdout


# ---------------------------------------------------------------- cost: one pass, bounded (issue 9)


class _ForwardOnly:
    """A stream that can only be read forward (no seek, no tell), counting what is read."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self.position = 0
        self.reads = 0

    def read(self, size: int = -1, /) -> bytes:
        end = len(self._data) if size < 0 else self.position + size
        chunk = self._data[self.position : end]
        self.position += len(chunk)
        self.reads += 1
        return chunk


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    _, path = export_run(tmp_path_factory.mktemp("three"), operator_keys(), runs=3)
    return path.read_bytes()


@pytest.mark.parametrize("packed", [False, True], ids=["tar", "tar.gz"])
def test_input_is_read_once_forward(three_runs: bytes, packed: bool) -> None:
    """One forward pass: every byte of the input read exactly once, never sought (seeking a
    .tar.gz backwards re-inflates it from byte 0: quadratic in the member count)."""
    data = gzip_bytes(three_runs) if packed else three_runs
    stream = _ForwardOnly(data)
    report = verify_bundle(stream, pins=PINS)  # type: ignore[arg-type]
    assert report.status.value == "verified", report.failure
    assert stream.position == len(data)


def test_verified_contents_are_the_bytes_checked(three_runs: bytes) -> None:
    """The gate's API: verify from bytes in memory, get back exactly the verified members."""
    wanted = store_member("run-2", "lineage")
    done = verify_bundle_contents(three_runs, keep=lambda name: name == wanted, pins=PINS)
    assert done.report.status.value == "verified"
    assert dict(done.members) == {wanted: dict(read_members(three_runs))[wanted]}
    untrusted = verify_bundle_contents(gzip_bytes(three_runs), keep=lambda name: True)
    assert untrusted.report.status.value == "verified-untrusted"
    assert dict(untrusted.members) == dict(read_members(three_runs))
    tampered = bytearray(three_runs)
    offset = next(o for o in member_offsets(three_runs) if o[0] == wanted)[2]
    tampered[offset + 10] ^= 1
    refused = verify_bundle_contents(bytes(tampered), keep=lambda name: True, pins=PINS)
    assert refused.report.status.value == "invalid"
    assert refused.report.failure is not None and refused.report.failure.check == "members"
    assert refused.members == {}


@pytest.fixture(scope="module")
def costly(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The shapes whose cost grew with the square of the member count, as tar and tar.gz."""
    folder = tmp_path_factory.mktemp("costly")
    shapes: dict[str, Path] = {}
    for packed in (False, True):
        suffix = ".tar.gz" if packed else ".tar"
        shapes[f"receipts{suffix}"] = many_receipts_bundle(folder / "r", 3000, compress=packed)
        shapes[f"runs{suffix}"] = many_runs_bundle(folder / "m", 100, 10_000, compress=packed)
    return shapes


@pytest.mark.parametrize("shape", ["receipts", "runs"])
def test_gzip_costs_no_more_than_tar(costly: dict[str, Path], shape: str) -> None:
    """3000 receipts (was 23 s as .tar.gz, 5.6 s as .tar) and one large run followed by 100
    tiny ones: within the budget, and the .tar.gz within 1.5x of the .tar."""
    timings = {}
    for suffix in (".tar", ".tar.gz"):
        path = costly[shape + suffix]
        ran = run_cli([str(path), "--format", "json", "--trusted-key", KEY_ID])
        assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
        if path.stat().st_size <= 10_000_000:  # the .tar of 3000 receipts weighs ~15 MB
            _assert_within_budget(path, ran)
        timings[suffix] = ran.cpu_seconds
    assert timings[".tar.gz"] <= 1.5 * timings[".tar"] + 0.5, timings
