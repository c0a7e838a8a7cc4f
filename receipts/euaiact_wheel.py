"""The verifier wheel an Article 12 pack carries, and the dependency wheels of ``--wheelhouse``.

Why the pack carries a wheel: its README must tell an auditor how to run the very verifier that
wrote ``verification.json``, offline and years later, without trusting whoever holds a package
name on an index. So the exporter puts that verifier's wheel in the pack (its SHA-256 is in the
signed pack manifest) and the instructions install from the file, never from an index.

The wheel is either given (``--wheel FILE``, checked to be this version of harness-verify and to
hold ``harness-verify pack``) or built here from the installed project's source tree with
``pip wheel --no-deps`` on a scratch copy (so no ``build/`` or ``*.egg-info`` lands in the
checkout). ``--wheelhouse DIR`` copies the ``*.whl`` files of DIR (the dependencies, for one
platform) so that ``pip install --no-index --find-links wheelhouse`` works with no network.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Final

from harness import __version__
from harness.verify.archive import MEMBER_NAME_RE

from .bundle import ExportError

WHEEL_RE: Final = re.compile(r"harness_verify-([0-9A-Za-z.+!_-]+?)-py3-none-any\.whl")
CHECKER_MODULE: Final = "harness/verify/packcheck.py"
"""A wheel without this file cannot check the pack it comes in: refused."""
_SOURCE_PARTS: Final = (
    "pyproject.toml",
    "setup.py",
    "README.md",
    "src",
    "verify",
    "receipts",
    "orchestrate",
    "schemas",
)
BUILD_TIMEOUT: Final = 600


class WheelError(ExportError):
    """No usable verifier wheel (not this version, not harness-verify, build failed)."""


def check_wheel(path: Path) -> str:
    """The wheel's file name, once it is known to be this harness-verify's wheel."""
    name = path.name
    match = WHEEL_RE.fullmatch(name)
    if not path.is_file() or match is None:
        raise WheelError(f"{path}: not a harness_verify-<version>-py3-none-any.whl file")
    if match.group(1) != __version__:
        raise WheelError(
            f"{path}: is harness-verify {match.group(1)}, but this exporter is {__version__}: "
            "the pack must carry the verifier that produced verification.json"
        )
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
    except (zipfile.BadZipFile, OSError) as exc:
        raise WheelError(f"{path}: not a readable wheel ({exc})") from None
    if CHECKER_MODULE not in names:
        raise WheelError(f"{path}: has no {CHECKER_MODULE}, so it cannot check its pack")
    return name


def project_root() -> Path | None:
    """The source tree this harness runs from, if it is one (an editable install)."""
    import harness

    root = Path(harness.__file__).resolve().parents[2]
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file() or 'name = "harness-verify"' not in pyproject.read_text("utf-8"):
        return None
    return root


def build_wheel(dest: Path) -> Path:
    """Build this project's wheel into ``dest`` (from a scratch copy of the source tree)."""
    root = project_root()
    if root is None:
        raise WheelError(
            "harness is not running from a source tree: give the verifier wheel with --wheel"
        )
    with tempfile.TemporaryDirectory(prefix="harness-wheel-") as scratch:
        copy = Path(scratch) / "src-copy"
        copy.mkdir()
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "*.so")
        for part in _SOURCE_PARTS:
            source = root / part
            if source.is_dir():
                shutil.copytree(source, copy / part, ignore=ignore)
            elif source.is_file():
                shutil.copy2(source, copy / part)
        out = Path(scratch) / "dist"
        try:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "wheel",
                    "--no-deps",
                    "-q",
                    "-w",
                    str(out),
                    str(copy),
                ],
                capture_output=True,
                text=True,
                # the pure wheel: it runs wherever the auditor's Python does (the compiled
                # core is optional, and only a speed-up)
                env={**os.environ, "HARNESS_PURE_BUILD": "1"},
                timeout=BUILD_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise WheelError(f"building the verifier wheel took over {BUILD_TIMEOUT} s") from None
        built = sorted(out.glob("harness_verify-*.whl")) if out.is_dir() else []
        if done.returncode != 0 or len(built) != 1:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise WheelError("building the verifier wheel failed: " + " | ".join(tail))
        dest.mkdir(parents=True, exist_ok=True)
        target = dest / built[0].name
        shutil.copyfile(built[0], target)
    check_wheel(target)
    return target


def wheelhouse_files(folder: Path) -> list[Path]:
    """The ``*.whl`` regular files of ``folder`` (sorted); names must be plain member names."""
    if not folder.is_dir():
        raise WheelError(f"--wheelhouse {folder}: not a folder")
    found = []
    for path in sorted(folder.iterdir()):
        if not path.name.endswith(".whl"):
            continue
        if path.is_symlink() or not path.is_file():
            raise WheelError(f"--wheelhouse: {path} is not a regular file")
        if not MEMBER_NAME_RE.fullmatch(path.name):
            raise WheelError(f"--wheelhouse: {path.name!r} is not a plain file name")
        found.append(path)
    if not found:
        raise WheelError(f"--wheelhouse {folder}: holds no .whl file")
    return found
