"""The event bus end to end: the demo's real run publishes P, I and meta messages, its bundle
carries the events store and verifies; a bundle whose events store was re-recorded with one
change (under the operator's own keys, so every signature and MAC is valid) is refused; and
``harness status`` shows what waits for a human.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.demo import DemoResult, run_demo
from harness.receipts.bundle import export_bundle
from harness.receipts.keys import load_keys
from harness.receipts.store import StoreWriter
from harness.verify.bundle import verify_bundle
from harness.verify.layout import store_member
from harness.verify.policy import TrustPolicy
from harness.verify.records import parse_record_line

Body = dict[str, Any]
Row = tuple[str, str, Body]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    return run_demo(tmp_path_factory.mktemp("events-demo"))


def _events(demo: DemoResult) -> list[Row]:
    path = demo.repo / ".harness" / "runs" / demo.run_id / "events.jsonl"
    records = [
        parse_record_line(line, "events", demo.run_id) for line in path.read_bytes().splitlines()
    ]
    return [(r.time, r.kind, dict(r.body)) for r in records]


def _rerecorded(demo: DemoResult, tmp_path: Path, change: Callable[[list[Row]], list[Row]]) -> Any:
    """The demo's state with its events store written again from ``change(rows)`` (original
    times kept), exported and verified with the demo's key pinned."""
    state = tmp_path / "state"
    shutil.copytree(demo.repo / ".harness", state)
    folder = state / "runs" / demo.run_id
    (folder / "events.jsonl").unlink()
    shutil.rmtree(folder / "checkpoints" / "events")
    rows = change(_events(demo))
    times = iter([time for time, _, _ in rows])
    keys = load_keys(demo.keys_dir)
    with StoreWriter(
        folder / "events.jsonl",
        store="events",
        run_id=demo.run_id,
        hmac_master=keys.hmac_master,
        clock=lambda: next(times),
    ) as writer:
        for _, kind, body in rows:
            writer.append(kind, body)
        writer.checkpoint(keys.note_signer())
    bundle = export_bundle(state, tmp_path / "bundle.tar", keys).path
    return verify_bundle(bundle, pins=TrustPolicy(frozenset({keys.key_id}), "demo key"))


def _refused(report: Any, words: str) -> None:
    assert report.status.value == "invalid", "tampered events verified"
    assert report.failure.check == "semantics", report.failure
    assert words in report.failure.reason, report.failure.reason


def test_the_demo_publishes_every_tier_and_verifies(demo: DemoResult) -> None:
    assert demo.report.exit_code == 0, demo.report.failure
    rows = _events(demo)
    messages = [body for _, kind, body in rows if kind == "event.message"]
    assert {m["tier"] for m in messages} == {"P", "I", "meta"}
    assert all(m["to"] in ("role:" + m["partition"], "human") for m in messages)
    assert any(kind == "event.handled" for _, kind, _ in rows)
    stores = {s.store: s.records for s in demo.report.stores}
    assert stores["events"] == len(rows) > 0
    members = [line for line in demo.bundle.read_bytes().split(b"\0") if b"/stores/events" in line]
    assert members, "the bundle carries no events store"
    assert store_member(demo.run_id, "events").encode() in b"".join(members)


def test_an_unchanged_rerecording_verifies(demo: DemoResult, tmp_path: Path) -> None:
    report = _rerecorded(demo, tmp_path, lambda rows: rows)
    assert report.status.value == "verified", report.failure


def _edit(index: Callable[[list[Row]], int], **changes: Any) -> Callable[[list[Row]], list[Row]]:
    def change(rows: list[Row]) -> list[Row]:
        out = list(rows)
        at = index(rows)
        time, kind, body = out[at]
        out[at] = (time, kind, {**body, **changes})
        return out

    return change


def _first(tier: str) -> Callable[[list[Row]], int]:
    return lambda rows: next(
        i
        for i, (_, kind, body) in enumerate(rows)
        if kind == "event.message" and body["tier"] == tier
    )


def test_a_side_channel_in_a_real_run_is_refused(demo: DemoResult, tmp_path: Path) -> None:
    _refused(_rerecorded(demo, tmp_path, _edit(_first("P"), to="human")), "no side channels")


def test_a_wrong_ttl_in_a_real_run_is_refused(demo: DemoResult, tmp_path: Path) -> None:
    report = _rerecorded(demo, tmp_path, _edit(_first("I"), ttl_ms=3_600_000))
    _refused(report, "the tier's TTL is 21600000")


def test_a_message_without_its_cause_in_a_real_run_is_refused(
    demo: DemoResult, tmp_path: Path
) -> None:
    _refused(_rerecorded(demo, tmp_path, _edit(_first("P"), cause=0)), "no attempt.failed")


def test_a_dropped_meta_alert_in_a_real_run_is_refused(demo: DemoResult, tmp_path: Path) -> None:
    def drop(rows: list[Row]) -> list[Row]:
        at = _first("meta")(rows)
        assert at == len(rows) - 1 or all(k != "event.handled" for _, k, _ in rows[at + 1 :])
        return rows[:at] + rows[at + 1 :]

    _refused(_rerecorded(demo, tmp_path, drop), "has no meta message")


def test_a_dropped_events_store_is_refused(demo: DemoResult, tmp_path: Path) -> None:
    _refused(_rerecorded(demo, tmp_path, lambda rows: []), "has no P message")


def test_status_shows_the_messages_waiting_for_a_human(demo: DemoResult) -> None:
    harness = Path(sys.executable).with_name("harness")
    out = subprocess.run(
        [str(harness), "status", "--repo", str(demo.repo)],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    human = [
        body for _, kind, body in _events(demo) if kind == "event.message" and body["to"] == "human"
    ]
    assert f"messages for you ({len(human)}):" in out, out
    assert "[meta]" in out and "D/rate on run" in out, out
