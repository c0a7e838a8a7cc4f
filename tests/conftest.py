"""Shared test fixtures."""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Third-party vectors live in the repository (see its SOURCES.md), so a clone alone runs every
# vector test; a missing file is a failure (tests/test_third_party_vectors.py), never a skip.
THIRD_PARTY_VECTORS = Path(__file__).resolve().parent / "vectors" / "third_party"


# ---- pytest-xdist: what may run at the same time ------------------------------------------
# README's command runs the suite on two workers with ``--dist loadfile``: a file runs on one
# worker, so its module-scoped fixtures (demo runs, packs, a built wheel: up to 30 s each) are
# built once, as in a serial run. Files that would overload two cores or collide when run at
# once are put in one scope (one worker, one after the other) by the scheduler below.
# (Not ``xdist_group`` + ``--dist loadgroup``: with pytest 9.2 that grouping silently does
# nothing, pytest-xdist issue #1386.)
SHARED_SCOPES = {
    # a real local Ray cluster (module fixture, --num-cpus=2); a head node also binds fixed
    # default ports (the Ray client server's 10001): one cluster on the machine at a time
    "test_executor_ray.py": "ray",
    "test_proxy_ray.py": "ray",  # the same cluster fixture
}
CHROMIUM_SCOPE = "chromium"
"""Files that drive headless Chromium (call ``_chromium()`` or use ``tests/cdp.py``): one
browser at a time, each is a tree of processes that can take both cores."""


@functools.cache
def shared_scope(path: Path) -> str | None:
    """The scope a test file shares with others (``SHARED_SCOPES``, ``CHROMIUM_SCOPE``)."""
    if path.name in SHARED_SCOPES:
        return SHARED_SCOPES[path.name]
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    if "_chromium()" in text or re.search(r"^from \.cdp import", text, re.MULTILINE):
        return CHROMIUM_SCOPE
    return None


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook; without xdist (mutmut) unused
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, except that files sharing a resource share one scope."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    root = config.rootpath

    class SharedScopes(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            scope: str = super()._split_scope(nodeid)
            return shared_scope(root / scope) or scope

    return SharedScopes(config, log)


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


@pytest.fixture
def fake() -> Iterator[Any]:
    """The fake model server on 127.0.0.1 (tests/fake_model_server.py), one per test: the
    proxy tests' upstream."""
    from .fake_model_server import FakeModelServer

    server = FakeModelServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def retried(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[list[tuple[str, str, dict[str, Any]]], bytes]:
    """(records in store order, plan member) of a real run whose task succeeds on attempt 2:
    the lawful base the attempt and supervision evidence tests tamper with."""
    from harness.orchestrate.adapters import ADAPTERS
    from harness.orchestrate.demo import make_repo
    from harness.verify.canonical import parse_canonical

    from .evidence_helpers import make_keys
    from .test_orchestrate_runtime import _runtime, _script

    saved = dict(ADAPTERS)
    tmp = tmp_path_factory.mktemp("retried")
    repo = tmp / "repo"
    make_repo(repo)
    adapter = _script(tmp, "learner.py", """
        import pathlib, sys
        ok = "What failed" in sys.stdin.read()
        pathlib.Path("answer.txt").write_text("42\\n" if ok else "41\\n")
    """)  # fmt: skip
    check = "import pathlib, sys; sys.exit(pathlib.Path('answer.txt').read_text() != '42\\n')"
    gate = {"name": "pytest", "command": [sys.executable, "-c", check], "timeout_s": 30}
    plan = {
        "plan": {"name": "p", "settle_ticks": 1, "max_attempts": 2},
        "task": [{"id": "t1", "role": "r", "prompt": "answer", "adapter": adapter,
                  "gates": [gate]}],
    }  # fmt: skip
    try:
        _runtime(repo, plan, make_keys()).run()
    finally:
        ADAPTERS.clear()
        ADAPTERS.update(saved)
    folder = repo / ".harness" / "runs" / "r1"
    records: list[tuple[str, str, dict[str, Any]]] = []
    for store in ("audit", "lineage", "replay", "control"):
        path = folder / f"{store}.jsonl"
        if path.exists():
            for line in path.read_bytes().splitlines():
                obj = parse_canonical(line)
                records.append((store, obj["kind"], obj["body"]))
    return records, (folder / "plan.json").read_bytes()
