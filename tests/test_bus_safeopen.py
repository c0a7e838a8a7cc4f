"""receipts/safeopen.py: every unsafe kind of file or path is refused, nothing hangs.

The two ``old_style`` tests drive the way the runtime read its control store before the bus
(``Path.open("rb")``, as in Runtime._stop_requested at commit 1627228): it follows a symlink
to another file and blocks forever on a FIFO. The same files are refused by ``open_read``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness.receipts import safeopen
from harness.receipts.safeopen import (
    SafeOpenError,
    UnsupportedPlatformError,
    open_append,
    open_read,
)

ROOT = Path(__file__).resolve().parents[1]


def read_all(fd: int) -> bytes:
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def refused(path: Path, reason: str) -> None:
    with pytest.raises(SafeOpenError, match=reason) as info:
        open_read(path)
    assert info.value.path == str(path)
    with pytest.raises(SafeOpenError, match=reason):
        open_append(path)


def test_a_regular_file_opens_blocking_and_read_only(tmp_path: Path) -> None:
    path = tmp_path / "control.jsonl"
    path.write_bytes(b"line\n")
    fd = open_read(path)
    assert fd is not None
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    assert not flags & os.O_NONBLOCK
    assert flags & os.O_ACCMODE == os.O_RDONLY
    assert not os.get_inheritable(fd)
    assert read_all(fd) == b"line\n"


def test_append_opens_read_write_append_only(tmp_path: Path) -> None:
    path = tmp_path / "control.jsonl"
    path.write_bytes(b"a\n")
    fd = open_append(path)
    assert fd is not None
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    assert flags & os.O_APPEND and flags & os.O_ACCMODE == os.O_RDWR
    assert not flags & os.O_NONBLOCK
    os.pwrite(fd, b"b\n", 0)  # O_APPEND: lands at the end anyway
    assert os.pread(fd, 10, 0) == b"a\nb\n"
    os.close(fd)


def test_absent_file_and_absent_folder_are_a_distinct_answer(tmp_path: Path) -> None:
    assert open_read(tmp_path / "nope.jsonl") is None
    assert open_read(tmp_path / "no" / "such" / "control.jsonl") is None
    assert open_append(tmp_path / "nope.jsonl") is None
    assert open_append(tmp_path / "no" / "x.jsonl", create=True) is None
    assert not (tmp_path / "nope.jsonl").exists()


def test_append_create_makes_the_file(tmp_path: Path) -> None:
    fd = open_append(tmp_path / "new.jsonl", create=True, mode=0o600)
    assert fd is not None
    os.close(fd)
    assert (tmp_path / "new.jsonl").stat().st_size == 0


def test_symlink_as_the_final_file(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"secret\n")
    link = tmp_path / "control.jsonl"
    link.symlink_to(target)
    refused(link, "is a symbolic link")
    with pytest.raises(SafeOpenError, match="symbolic link"):
        open_append(link, create=True)


def test_dangling_symlink_is_not_created_through(tmp_path: Path) -> None:
    link = tmp_path / "control.jsonl"
    link.symlink_to(tmp_path / "created-elsewhere")
    with pytest.raises(SafeOpenError, match="symbolic link"):
        open_append(link, create=True)
    assert not (tmp_path / "created-elsewhere").exists()


def test_symlink_as_a_middle_directory(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "control.jsonl").write_bytes(b"x\n")
    (tmp_path / "run").symlink_to(real)
    with pytest.raises(SafeOpenError, match="a symbolic link") as info:
        open_read(tmp_path / "run" / "control.jsonl")
    assert info.value.path == str(tmp_path / "run")
    with pytest.raises(SafeOpenError, match="symbolic link"):
        open_append(tmp_path / "run" / "control.jsonl", create=True)


def test_a_file_as_a_middle_component(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(SafeOpenError, match=r"not a directory \(a regular file\)"):
        open_read(tmp_path / "file" / "control.jsonl")


SAFE_OPEN_FIFO = """
import sys
from harness.receipts.safeopen import SafeOpenError, open_append, open_read
for opener in (open_read, open_append):
    try:
        opener(sys.argv[1])
    except SafeOpenError as exc:
        print(exc.reason)
"""


def test_fifo_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "control.jsonl"
    os.mkfifo(fifo)
    done = subprocess.run(
        [sys.executable, "-c", SAFE_OPEN_FIFO, str(fifo)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "is not a regular file (a FIFO)",  # O_RDONLY|O_NONBLOCK opens a FIFO at once
        "is not a regular file (a FIFO)",  # so does O_RDWR: fstat refuses it
    ]


def test_old_style_open_hangs_on_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "control.jsonl"
    os.mkfifo(fifo)
    old = "import sys, pathlib\nwith pathlib.Path(sys.argv[1]).open('rb') as fh: fh.read()"
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run([sys.executable, "-c", old, str(fifo)], timeout=3)


def test_old_style_open_follows_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "other-run-control.jsonl"
    target.write_bytes(b"other\n")
    (tmp_path / "control.jsonl").symlink_to(target)
    with (tmp_path / "control.jsonl").open("rb") as fh:
        assert fh.read() == b"other\n"  # the old reader reads another file
    with pytest.raises(SafeOpenError):
        open_read(tmp_path / "control.jsonl")


def test_hard_link_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "control.jsonl"
    path.write_bytes(b"x\n")
    os.link(path, tmp_path / "second-name")
    refused(path, "2 hard links")


def test_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(path))
        server.listen(1)
        refused(path, "socket")
    finally:
        server.close()


def test_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "control.jsonl").mkdir()
    with pytest.raises(SafeOpenError, match="a directory"):
        open_read(tmp_path / "control.jsonl")
    with pytest.raises(SafeOpenError, match="is a directory"):
        open_append(tmp_path / "control.jsonl")


def test_device_is_refused() -> None:
    with pytest.raises(SafeOpenError, match="character device"):
        open_read(Path("/dev/null"))


@pytest.mark.parametrize("path", ["relative/control.jsonl", "/", "/tmp/../tmp/x", "/tmp/./x"])
def test_paths_that_are_not_plain_absolute_are_refused(path: str) -> None:
    with pytest.raises(SafeOpenError):
        open_read(path)


@pytest.mark.parametrize("flag", ["O_NOFOLLOW", "O_DIRECTORY", "O_NONBLOCK", "O_CLOEXEC"])
def test_a_platform_without_the_flags_fails_closed(
    flag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "f").write_bytes(b"")
    monkeypatch.delattr(os, flag)
    with pytest.raises(UnsupportedPlatformError, match=flag) as info:
        open_read(tmp_path / "f")
    assert info.value.path == str(tmp_path / "f")


def test_a_platform_without_dir_fd_fails_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "f").write_bytes(b"")
    monkeypatch.setattr(os, "supports_dir_fd", set())
    with pytest.raises(UnsupportedPlatformError, match="dir_fd"):
        open_read(tmp_path / "f")
    assert safeopen.UnsupportedPlatformError.__mro__[1] is SafeOpenError


def test_no_descriptor_leaks_on_refusals(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_bytes(b"")
    os.link(tmp_path / "f", tmp_path / "g")
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        for bad in ("d", "f", "missing"):
            with contextlib.suppress(SafeOpenError):
                open_read(tmp_path / bad)
    assert len(os.listdir("/proc/self/fd")) == before


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("relative/control.jsonl", "relative/control.jsonl: not an absolute path"),
        ("/", "/: names no file"),
        ("/tmp/../tmp/x", "/tmp/../tmp/x: has a '..' component"),
        ("/tmp/./x", "/tmp/./x: has a '.' component"),
    ],
)
def test_path_refusals_name_the_path_and_reason(path: str, message: str) -> None:
    with pytest.raises(SafeOpenError) as info:
        open_read(path)
    assert str(info.value) == message
    assert info.value.path == path and f"{info.value.path}: {info.value.reason}" == message


def test_the_final_component_is_named_in_full(tmp_path: Path) -> None:
    link = tmp_path / "control.jsonl"
    link.symlink_to(tmp_path / "x")
    with pytest.raises(SafeOpenError) as info:
        open_read(link)
    assert (info.value.path, info.value.reason) == (str(link), "is a symbolic link")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(SafeOpenError) as info:
        open_read(fifo)  # in-process too: O_NONBLOCK, so this cannot hang
    assert (info.value.path, info.value.reason) == (str(fifo), "is not a regular file (a FIFO)")
    with pytest.raises(SafeOpenError) as info:
        open_append(fifo, create=True)
    assert (info.value.path, info.value.reason) == (str(fifo), "is not a regular file (a FIFO)")


def test_other_errors_carry_the_system_reason(tmp_path: Path) -> None:
    long_name = "n" * 300
    with pytest.raises(SafeOpenError) as info:
        open_read(tmp_path / long_name)
    assert (info.value.path, info.value.reason) == (str(tmp_path / long_name), "File name too long")
    with pytest.raises(SafeOpenError) as info:
        open_read(tmp_path / long_name / "control.jsonl")
    assert (info.value.path, info.value.reason) == (str(tmp_path / long_name), "File name too long")


@pytest.mark.parametrize(
    ("mode", "kind"),
    [
        (0o040755, "a directory"),
        (0o010644, "a FIFO"),
        (0o140755, "a socket"),
        (0o020666, "a character device"),
        (0o060660, "a block device"),
        (0o120777, "a symbolic link"),
        (0o100644, "a regular file"),
        (0o000644, "mode 644"),
    ],
)
def test_file_kinds_are_named(mode: int, kind: str) -> None:
    assert safeopen._kind(mode) == kind


def test_created_files_get_the_requested_mode(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        for name, kwargs in (("default", {}), ("private", {"mode": 0o600})):
            fd = open_append(tmp_path / name, create=True, **kwargs)
            assert fd is not None
            os.close(fd)
        assert (tmp_path / "default").stat().st_mode & 0o777 == 0o644
        assert (tmp_path / "private").stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(old)


def test_a_zero_flag_counts_as_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "f").write_bytes(b"")
    monkeypatch.setattr(os, "O_NOFOLLOW", 0)
    with pytest.raises(UnsupportedPlatformError) as info:
        open_read(tmp_path / "f")
    assert info.value.path == str(tmp_path / "f")
    assert info.value.reason == "this platform has no os.O_NOFOLLOW; refusing to open unsafely"
    monkeypatch.undo()
    monkeypatch.setattr(os, "supports_dir_fd", set())
    with pytest.raises(UnsupportedPlatformError) as info:
        open_read(tmp_path / "f")
    assert (info.value.path, info.value.reason) == (
        str(tmp_path / "f"),
        "os.open has no dir_fd support; refusing to open unsafely",
    )
