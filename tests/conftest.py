"""Shared test fixtures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

# Third-party vectors live in the repository (see its SOURCES.md), so a clone alone runs every
# vector test; a missing file is a failure (tests/test_third_party_vectors.py), never a skip.
THIRD_PARTY_VECTORS = Path(__file__).resolve().parent / "vectors" / "third_party"


@pytest.fixture(scope="session")
def third_party_vectors() -> Path:
    """The third-party test vector folder, ``tests/vectors/third_party``."""
    assert THIRD_PARTY_VECTORS.is_dir(), f"third-party vectors missing: {THIRD_PARTY_VECTORS}"
    return THIRD_PARTY_VECTORS


def _use_xdg(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)


@pytest.fixture(scope="session", autouse=True)
def _private_xdg_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Keys (``XDG_CONFIG_HOME``) and worktrees (``XDG_CACHE_HOME``) go to a temporary folder,
    never the real ~/.config or ~/.cache: a test must not write into the home of whoever runs
    it. This one covers module- and session-scoped fixtures (they run before any per-test
    fixture); ``_private_xdg`` then gives every test a fresh folder of its own. Subprocesses
    inherit the variables; a test that builds its own environment sets them itself."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        _use_xdg(monkeypatch, tmp_path_factory.mktemp("xdg-session"))
        yield


@pytest.fixture(autouse=True)
def _private_xdg(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh XDG folder per test (see ``_private_xdg_session``), outside the test's
    ``tmp_path``: a test's repository may live there, and keys inside a repository are
    refused."""
    _use_xdg(monkeypatch, tmp_path_factory.mktemp("xdg"))
