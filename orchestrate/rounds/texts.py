"""The texts of rounds (plans, claims, reports, repairs, questions, operator inputs).

Each is saved once as ``<run folder>/rounds/<sha256>.txt`` (UTF-8, exact bytes, mode 0600,
fsynced) before the record that names its digest is written, so the record never names a text
the evidence lacks. The folder is in the state folder: out of every agent's reach. The
exporter carries them as bundle members ``runs/<run>/rounds/<sha256>.txt``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Final

MAX_TEXT_BYTES: Final = 256 * 1024
"""A role's answer is clipped to this many bytes (UTF-8, on a character boundary) before it
is saved and parsed: the verifier refuses longer rounds members."""


def clip_text(text: str) -> str:
    data = text.encode("utf-8")
    if len(data) <= MAX_TEXT_BYTES:
        return text
    return data[:MAX_TEXT_BYTES].decode("utf-8", "ignore")


def text_folder(run_folder: Path) -> Path:
    return run_folder / "rounds"


def save_text(run_folder: Path, text: str) -> str:
    """Save ``text`` (clipped) and return its SHA-256 (hex); idempotent."""
    data = clip_text(text).encode("utf-8")
    digest = hashlib.sha256(data).hexdigest()
    folder = text_folder(run_folder)
    folder.mkdir(mode=0o700, exist_ok=True)
    target = folder / f"{digest}.txt"
    if target.is_file() and target.read_bytes() == data:
        return digest
    # The temporary file lives beside the folder, not in it: a crash between the write and
    # the rename must never leave in ``rounds/`` a file the exporter refuses.
    tmp = run_folder / f".rounds-{digest}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return digest


def load_text(run_folder: Path, digest: str) -> str:
    """A saved text by digest (``FileNotFoundError`` when absent; ``ValueError`` when its bytes
    no longer hash to its name)."""
    data = (text_folder(run_folder) / f"{digest}.txt").read_bytes()
    if hashlib.sha256(data).hexdigest() != digest:
        raise ValueError(f"rounds text {digest}: content does not match its digest")
    return data.decode("utf-8")
