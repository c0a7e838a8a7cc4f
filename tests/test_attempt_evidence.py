"""The verifier re-decides every retry: evidence whose attempts break the P-layer rule is refused.

A real run (a gate fails on attempt 1, passes on attempt 2) provides lawful records; each test
re-records them with one change under a test key, exports the bundle and verifies it. Each
refusal names the record and the rule; the unchanged records verify.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.verify.rules import attempts as rule

from .test_rules_evidence import _replace as _edit
from .test_rules_evidence import _verify

Body = dict[str, Any]
Records = list[tuple[str, str, Body]]


def _refused(report: Any, words: str) -> None:
    assert report.status.value == "invalid", "tampered evidence verified"
    assert report.failure.check == "semantics", report.failure
    assert words in report.failure.reason, report.failure.reason


def test_the_real_retried_run_verifies(tmp_path: Path, retried: tuple[Records, bytes]) -> None:
    records, plan = retried
    kinds = [kind for _, kind, _ in records]
    assert kinds.count("agent.spawn") == 2 and kinds.count("attempt.failed") == 1
    report = _verify(tmp_path, records, plan)
    assert report.status.value == "verified", report.failure


def test_a_retry_the_rule_forbids_is_refused(
    tmp_path: Path, retried: tuple[Records, bytes]
) -> None:
    records, plan = retried
    # a policy refusal (scope) is never retried: claiming a retry for one is refused
    tampered = _edit(records, "attempt.failed", lambda b: {**b, "anomaly": "scope"})
    _refused(_verify(tmp_path, tampered, plan), "the rule says retry=False")


def test_a_final_failure_followed_by_a_retry_is_refused(
    tmp_path: Path, retried: tuple[Records, bytes]
) -> None:
    records, plan = retried
    tampered = _edit(records, "attempt.failed", lambda b: {**b, "retry": False})
    _refused(_verify(tmp_path, tampered, plan), "the rule says retry=True")


def test_a_retry_without_its_attempt_record_is_refused(
    tmp_path: Path, retried: tuple[Records, bytes]
) -> None:
    records, plan = retried
    tampered = [r for r in records if r[1] != "attempt.failed"]
    _refused(_verify(tmp_path, tampered, plan), "retried without an attempt.failed")


def test_a_wrong_attempt_number_is_refused(tmp_path: Path, retried: tuple[Records, bytes]) -> None:
    records, plan = retried
    tampered = _edit(records, "attempt.failed", lambda b: {**b, "attempt": 2})
    _refused(_verify(tmp_path, tampered, plan), "which is at attempt 1")
    respawned = _edit(records, "agent.spawn", lambda b: {**b, "attempt": 1}, nth=1)
    _refused(_verify(tmp_path / "b", respawned, plan), "its tasks are at attempt 2")


def test_a_retry_without_feedback_digest_is_refused(
    tmp_path: Path, retried: tuple[Records, bytes]
) -> None:
    records, plan = retried
    tampered = _edit(records, "attempt.failed", lambda b: {**b, "feedback_sha256": None})
    _refused(_verify(tmp_path, tampered, plan), "feedback's SHA-256")


def test_a_retry_decided_but_not_carried_out_is_refused(
    tmp_path: Path, retried: tuple[Records, bytes]
) -> None:
    records, plan = retried
    index = next(i for i, r in enumerate(records) if r[1] == "attempt.failed")
    store, kind, body = records[index + 1]
    assert kind == "task.transition" and body["to"] == "open"
    tampered = list(records)
    tampered[index + 1] = (store, kind, {**body, "to": "failed"})
    _refused(_verify(tmp_path, tampered[: index + 2], plan), "decided a retry")


# -- the rule itself ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        ({"exit_anomaly": "killed:budget"}, "budget"),
        ({"exit_anomaly": "hung", "signal": "SIGKILL"}, "hung"),
        ({"signal": "SIGSEGV"}, "crash"),
        ({"agent_ok": False}, "agent"),
        ({"refusal": "capsule", "failed_gates": ["pytest"]}, "capsule"),
        ({"failed_gates": ["mypy --strict", "pytest"]}, "type"),
        ({"failed_gates": ["ruff"]}, "lint"),
        ({"failed_gates": ["build-wheel"]}, "build"),
        ({"failed_gates": ["unit"]}, "test"),
        ({"conflict": True}, "conflict"),
    ],
)
def test_classify_takes_the_first_class_that_applies(facts: Body, expected: str) -> None:
    args: Body = {"exit_anomaly": None, "signal": None, "agent_ok": True, "refusal": None,
                  "failed_gates": (), "conflict": False, **facts}  # fmt: skip
    assert rule.classify(**args) == expected


def test_classify_refuses_an_attempt_that_did_not_fail() -> None:
    with pytest.raises(ValueError, match="did not fail"):
        rule.classify(exit_anomaly=None, signal=None, agent_ok=True, refusal=None,
                      failed_gates=(), conflict=False)  # fmt: skip


def test_decide_retries_while_attempts_remain_and_never_policy_refusals() -> None:
    assert rule.decide("test", 1, 2) and not rule.decide("test", 2, 2)
    for never in ("budget", "stop", "scope", "capsule", "integrity"):
        assert not rule.decide(never, 1, 10)
    with pytest.raises(ValueError):
        rule.decide("bogus", 1, 2)
    with pytest.raises(ValueError):
        rule.decide("test", 1, 11)


def test_checkpoint_spacing_widens_after_success_and_narrows_after_failure() -> None:
    assert rule.next_spacing(1000, 1000, True) == 2000
    assert rule.next_spacing(4000, 1000, True) == 4000  # at most 4x the base
    assert rule.next_spacing(1000, 1000, False) == 500
    assert rule.next_spacing(250, 1000, False) == 250  # at least a quarter of the base
    assert rule.next_spacing(1, 1, False) == 1
