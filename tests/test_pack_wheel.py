"""The verifier wheel an Art. 12 pack carries (receipts/euaiact_wheel.py), built once per session.

``verifier_wheel()`` is what the pack tests pass as ``--wheel``/``wheel=``: building a wheel takes
seconds, so it is built once per test process (from a scratch copy of this source tree, exactly
as ``harness export --eu-ai-act`` does without ``--wheel``) and reused.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
import zipfile
from pathlib import Path

import pytest

from harness import __version__
from harness.receipts.euaiact_wheel import CHECKER_MODULE, WheelError, build_wheel, check_wheel


@functools.cache
def verifier_wheel() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="harness-test-wheel-"))
    atexit.register(shutil.rmtree, folder, True)
    return build_wheel(folder)


def test_built_wheel_is_this_verifier() -> None:
    wheel = verifier_wheel()
    assert wheel.name == f"harness_verify-{__version__}-py3-none-any.whl"
    assert check_wheel(wheel) == wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert CHECKER_MODULE in names
    assert "harness/verify/cli.py" in names


def test_other_version_refused(tmp_path: Path) -> None:
    other = tmp_path / "harness_verify-9.9.9-py3-none-any.whl"
    shutil.copyfile(verifier_wheel(), other)
    with pytest.raises(WheelError, match=r"9\.9\.9"):
        check_wheel(other)


def test_wheel_without_pack_checker_refused(tmp_path: Path) -> None:
    hollow = tmp_path / f"harness_verify-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(hollow, "w") as archive:
        archive.writestr("harness/__init__.py", "")
    with pytest.raises(WheelError, match="cannot check its pack"):
        check_wheel(hollow)
