"""The verifier's supervision check: supervisors, limits and orphans, from a real run's
records with one change each (the ``retried`` fixture of tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

from .test_attempt_evidence import Records, _edit, _refused, _verify


def _crashed(records: Records) -> Records:
    """The records up to the first agent.started: a runtime that died while its agent ran."""
    cut = next(i for i, r in enumerate(records) if r[1] == "agent.started")
    audit = [r for r in records[: cut + 1] if r[0] == "audit"]
    return audit


def test_a_spawn_under_the_wrong_supervisor_is_refused(
    tmp_path: Path, retried: tuple[Records, bytes]
) -> None:
    records, plan = retried
    tampered = _edit(records, "agent.spawn", lambda b: {**b, "supervisor": "role:other"})
    _refused(_verify(tmp_path, tampered, plan), "its tasks' role supervisor is 'role:r'")


def test_limits_that_are_not_the_plans_are_refused(
    tmp_path: Path, retried: tuple[Records, bytes]
) -> None:
    records, plan = retried
    longer = _edit(records, "agent.spawn", lambda b: {**b, "lifetime_ms": b["lifetime_ms"] + 1})
    _refused(_verify(tmp_path, longer, plan), "records lifetime_ms")
    idle = _edit(records, "agent.spawn", lambda b: {**b, "idle_ms": 5000})
    _refused(_verify(tmp_path / "idle", idle, plan), "records idle_ms 5000, the plan gives None")


def test_an_orphan_is_reaped_only_as_the_agent_it_was(
    tmp_path: Path, retried: tuple[Records, bytes]
) -> None:
    records, plan = retried
    crashed = _crashed(records)
    started = crashed[-1][2]
    reaped = {**{k: started[k] for k in ("batch", "pid", "pgid", "start_ticks", "boot_id")},
              "outcome": "killed"}  # fmt: skip
    lawful = [*crashed, ("audit", "orphan.reaped", reaped)]
    report = _verify(tmp_path / "ok", lawful, plan)
    assert report.status.value == "verified", report.failure
    other = [*crashed, ("audit", "orphan.reaped", {**reaped, "start_ticks": 1})]
    _refused(_verify(tmp_path / "other", other, plan), "reaped with start_ticks 1")
    exited = next(r for r in records if r[1] == "agent.exit")
    late = [*crashed, exited, ("audit", "orphan.reaped", reaped)]
    _refused(_verify(tmp_path / "late", late, plan), "was not running")


def test_an_agent_started_twice_is_refused(tmp_path: Path, retried: tuple[Records, bytes]) -> None:
    records, plan = retried
    crashed = _crashed(records)
    _refused(_verify(tmp_path, [*crashed, crashed[-1]], plan), "started twice")
