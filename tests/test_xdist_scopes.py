"""README's test command (``-n 2 --dist loadfile``) keeps the Ray cluster tests on one worker
and never runs two Chromium files at once: tests/conftest.py's scheduler gives those files one
scope. A scope that silently stopped applying (as ``--dist loadgroup`` did with pytest 9.2,
pytest-xdist issue #1386) would start two Ray clusters or two browsers side by side."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("xdist")

from . import conftest

TESTS = Path(__file__).resolve().parent


def _scheduler(config: pytest.Config, monkeypatch: pytest.MonkeyPatch, dist: str) -> object:
    # a worker's own option is "no"; with -p no:xdist there is none
    monkeypatch.setattr(config.option, "dist", dist, raising=False)
    monkeypatch.setattr(config.option, "tx", ["popen", "popen"], raising=False)  # as -n 2 does
    return conftest.pytest_xdist_make_scheduler(config, None)


def test_loadfile_puts_shared_resources_in_one_scope(
    pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    sched = _scheduler(pytestconfig, monkeypatch, "loadfile")
    scope = sched._split_scope  # type: ignore[attr-defined]
    assert scope("tests/test_executor_ray.py::test_unit_comes_back_as_a_branch") == "ray"
    assert scope("tests/test_euaiact.py::test_report_renders_in_headless_browser") == "chromium"
    assert scope("tests/test_euaiact_html.py::test_printed_pdf[A4]") == "chromium"
    # every other file is its own scope, as plain loadfile makes it
    assert scope("tests/test_layering.py::test_import_linter_contracts") == "tests/test_layering.py"
    assert scope("tests/test_rules.py::test_rules_are_pure[x.py]") == "tests/test_rules.py"


def test_other_modes_are_xdist_own(
    pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _scheduler(pytestconfig, monkeypatch, "load") is None


def test_a_file_using_the_browser_helpers_shares_the_chromium_scope(tmp_path: Path) -> None:
    browser = tmp_path / "test_new_page.py"
    browser.write_text("from .cdp import Browser\n\n\ndef test_page() -> None:\n    pass\n")
    plain = tmp_path / "test_plain.py"
    plain.write_text("from . import conftest\n\n\ndef test_x() -> None:\n    pass\n")
    assert conftest.shared_scope(browser) == "chromium"
    assert conftest.shared_scope(plain) is None
    assert conftest.shared_scope(TESTS / "test_euaiact.py") == "chromium"
