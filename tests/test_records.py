"""Store record envelope and bodies: the fast checker, the JSON Schema, and their agreement."""

from __future__ import annotations

import copy
import json
from importlib import resources
from typing import Any

import jsonschema
import orjson
import pytest

from harness.verify.canonical import canonical_bytes
from harness.verify.errors import CanonicalEncodingError, SchemaError, VerificationError
from harness.verify.records import (
    BODY_SPECS,
    RECORD_VERSION,
    _line_pattern,
    check_envelope,
    parse_record_line,
    split_mac,
)

HEX = "ab" * 32
SAMPLE_BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("lineage", "artifact.write"): {
        "path": "src/a.py",
        "sha256": HEX,
        "mode": "100755",
        "parents": [HEX],
        "parent_mode": "100644",
        "actor": "agent",
        "task": "t1",
        "step": 0,
        "model": None,
    },
    ("lineage", "artifact.delete"): {
        "path": "src/a.py",
        "parents": [HEX],
        "parent_mode": "100755",
        "actor": "agent",
        "task": "t1",
        "step": 2,
        "model": "m",
    },
    ("audit", "run.start"): {
        "producer": "harness 0.1.0",
        "plan": "plan",
        "plan_sha256": HEX,
        "harness_version": "0.1.0",
        "base_commit": "ab" * 20,
        "repository_roots": ["ab" * 20, "cd" * 32],
        "capabilities": {"adapters": {"scripted": []}, "mcp": {}, "tools": {"web": ["x"]}},
        "capsule": None,
        "sandbox": {"kind": "bwrap", "network": False, "private_mounts": False, "opt_out": False},
    },
    ("audit", "run.end"): {"outcome": "succeeded"},
    ("audit", "event"): {"name": "gate.passed", "data": {"task": "t1"}},
    ("replay", "model.call"): {
        "key": HEX,
        "adapter": "scripted",
        "model": "m",
        "request_sha256": HEX,
        "response_sha256": HEX,
    },
    ("replay", "model.exchange"): {
        "batch": "b1",
        "seq": 0,
        "route": "anthropic",
        "method": "POST",
        "path": "/v1/messages",
        "outcome": "answered",
        "status": 200,
        "family": "anthropic",
        "api": "anthropic-messages",
        "upstream": "https://api.anthropic.com:443",
        "key": HEX,
        "model": "claude-x",
        "stream": False,
        "parameters": {"method": "POST", "path": "/v1/messages", "stream": False, "headers": {}},
        "request_sha256": HEX,
        "response_sha256": HEX,
        "journaled": True,
        "usage": {"input_tokens": 10, "output_tokens": 3, "cache_read": None, "cache_write": 0},
        "dropped_credentials": ["x-api-key"],
        "reason": None,
        "response_bytes": 120,
    },
    ("control", "command"): {
        "operator": "op",
        "command": "stop",
        "args": {},
        "id": "c-1",
        "revision": 0,
    },
    ("events", "event.message"): {
        "partition": "coder",
        "source": "role:coder",
        "to": "run",
        "tier": "P",
        "ttl_ms": 3_600_000,
        "topic": "anomaly.gates",
        "cause": 12,
        "text": "task t1 attempt 1 failed (gates); retried",
        "escalates": 3,
    },
    ("events", "event.handled"): {"message": 0, "by": "role:coder", "cause": 14},
    ("events", "event.expired"): {"message": 0},
    ("audit", "run.status"): {"status": "running", "epoch": 0, "reason": "r", "command": None},
    ("audit", "command.receipt"): {
        "id": "c-1",
        "command": "stop",
        "control_seq": 0,
        "outcome": "applied",
        "reason": "stopped",
    },
    ("audit", "round.roles"): {
        "task": "t1",
        "epoch": 0,
        "max_rounds": 25,
        "roles": {"manager": {"adapter": "scripted", "model": None, "denied": ["shell"]}},
    },
    ("audit", "round.plan"): {
        "task": "t1",
        "round": 1,
        "epoch": 0,
        "text": HEX,
        "next": "cli",
        "valid": True,
        "reason": "ok",
        "cites": [1, 2],
        "exit_code": 0,
    },
    ("audit", "round.step"): {
        "task": "t1",
        "round": 1,
        "epoch": 0,
        "text": HEX,
        "exit_code": 0,
        "claims_success": True,
        "commit_before": "a" * 40,
        "commit_after": "b" * 40,
        "changed": True,
        "paths": ["src/a.py"],
    },
    ("audit", "round.audit"): {
        "task": "t1",
        "round": 1,
        "epoch": 0,
        "text": HEX,
        "repair": None,
        "exit_code": 0,
        "tree_before": HEX,
        "tree_after": HEX,
        "header_valid": True,
        "status": "complete",
        "integrity": "clean",
        "contract": "aligned",
        "ghost": False,
        "effective": "complete",
    },
    ("audit", "round.end"): {
        "task": "t1",
        "round": 1,
        "epoch": 0,
        "outcome": "continue",
        "failing": 0,
        "checkpoint": "b" * 40,
    },
    ("audit", "round.gate"): {
        "task": "t1",
        "round": 3,
        "epoch": 0,
        "reason": "three failing rounds",
        "question": None,
    },
    ("audit", "round.input"): {
        "task": "t1",
        "round": 2,
        "epoch": 0,
        "command": "c-2",
        "kind": "instruct",
        "text": HEX,
    },
    ("audit", "control.phase"): {
        "phase": "implement",
        "progress_pm": 250,
        "step": 3,
        "reason": "progress",
    },
    ("audit", "control.sensor"): {
        "step": 1,
        "task": "t1",
        "agent": "coder",
        "subtree": "src",
        "attempt": 1,
        "phase": "implement",
        "class": "test",
        "readings": [
            {"sensor": "outcome", "tier": 1, "value": 1, "anomaly": True, "trigger": None},
            {"sensor": "pace_ms", "tier": 2, "value": 120, "anomaly": False, "trigger": "anomaly"},
        ],
    },
    ("audit", "control.decision"): {
        "step": 2,
        "layer": "I",
        "rule": "bucket",
        "key": "agent:coder",
        "level": 30,
        "threshold": 30,
        "class": "test",
        "action": "template",
        "config": 2,
    },
    ("audit", "config.version"): {
        "version": 2,
        "parent": HEX,
        "sha256": HEX,
        "document": {"format": "harness.control-config/1", "agents": {}},
        "change": "neutral",
        "channel": "slow",
        "step": 2,
        "impact": ["coder"],
        "snapshot": "a" * 40,
    },
    ("audit", "control.verdict"): {
        "alert": "11:agent:writer:pace_tokens",
        "verdict": "confirmed",
        "command": "c-9",
    },
    ("audit", "control.review"): {
        "step": 6,
        "point": 250,
        "progress_pm": 300,
        "elapsed_s": 12,
        "heightened": False,
        "failed": 3,
        "refused": 1,
        "fit_pm": 333,
        "fit_alert": True,
        "judged": 1,
        "followed": 1,
        "controllability_pm": 1000,
        "controllability_alert": False,
    },
    ("audit", "action.review"): {
        "task": "t1",
        "batch": "b1",
        "review": 1,
        "tool": "Bash",
        "input_sha256": HEX,
        "target": "git push",
        "class": "irreversible",
        "phase": "implement",
        "decision": "deny",
        "reason": "needs approval",
        "approval": None,
    },
    ("audit", "task.planned"): {
        "task": "t1",
        "role": "coder",
        "priority": -2,
        "depends": ["t0"],
        "adapter": "scripted",
        "tools": ["edit", "shell"],
    },
    ("audit", "task.transition"): {"task": "t1", "from": "open", "to": "claimed", "reason": "b1"},
    ("audit", "task.refused"): {"task": "t1", "from": "done", "to": "open", "reason": "illegal"},
    ("audit", "agent.spawn"): {
        "batch": "b1",
        "tasks": ["t1", "t2"],
        "adapter": "scripted",
        "branch": "harness/b1",
        "worktree": "/tmp/w",
        "timeout_ms": 60000,
        "sandbox": {"kind": "bwrap", "network": False, "private_mounts": False, "opt_out": False},
        "env": ["HOME", "PATH"],
        "supervisor": "role:coder",
        "attempt": 2,
        "idle_ms": 30000,
        "lifetime_ms": 60000,
        "grace_ms": 2000,
        "lock": ["src/**"],
        "budget": {"wall_ms": 60000, "tokens": None, "cost_micros": None},
        "config": 1,
    },
    ("audit", "agent.started"): {
        "batch": "b1",
        "pid": 4242,
        "pgid": 4242,
        "start_ticks": 123456,
        "boot_id": "6f1c2c9e-1b7e-4a53-9d0e-3f6f0f3d2a11",
    },
    ("audit", "agent.exit"): {
        "batch": "b1",
        "exit_code": -9,
        "signal": "SIGKILL",
        "timed_out": True,
        "duration_ms": 61000,
        "anomaly": "timeout",
        "usage": {"input_tokens": 10, "output_tokens": 3, "cost_micros": None},
    },
    ("audit", "model.source"): {"batch": "b1", "seq": 0, "source": "journal"},
    ("audit", "orphan.reaped"): {
        "batch": "b1",
        "pid": 4242,
        "pgid": 4242,
        "start_ticks": 123456,
        "boot_id": "6f1c2c9e-1b7e-4a53-9d0e-3f6f0f3d2a11",
        "outcome": "killed",
    },
    ("audit", "budget.exceeded"): {
        "batch": "b1",
        "scope": "task",
        "name": "t1",
        "resource": "tokens",
        "limit": 1000,
        "used": 1001,
        "decision": "kill",
    },
    ("audit", "lock.acquire"): {"batch": "b1", "globs": ["src/**", "tests/*.py"]},
    ("audit", "lock.release"): {"batch": "b1", "reason": "retired"},
    ("audit", "attempt.failed"): {
        "task": "t1",
        "batch": "b1",
        "attempt": 1,
        "anomaly": "test",
        "reason": "a quality gate failed",
        "retry": True,
        "checkpoint": "0" * 40,
        "feedback_sha256": "a" * 64,
    },
    ("audit", "merge.fork"): {
        "task": "t1",
        "batch": "b2",
        "base": "1" * 40,
        "ours": "2" * 40,
        "theirs": "3" * 40,
        "paths": ["src/a.py"],
    },
    ("audit", "gate.result"): {
        "task": "t1",
        "gate": "tests",
        "passed": False,
        "exit_code": -15,
        "duration_ms": 12,
    },
    ("audit", "merge.result"): {
        "task": "t1",
        "branch": "harness/b1",
        "merged": True,
        "commit": "ab" * 20,
        "reason": "clean",
    },
    ("audit", "capability.denied"): {
        "task": "t3",
        "tools": ["web", "secrets"],
        "tags": ["PRIVATE_DATA", "UNTRUSTED_INPUT", "EXTERNAL_COMM"],
        "reason": "lethal trifecta",
        "sandbox": None,
    },
    ("audit", "capsule.approved"): {"capsule": HEX, "goal": "fix bug", "expires": "2027-01-01"},
    ("audit", "capsule.check"): {
        "task": "t1",
        "capsule": HEX,
        "now": "2026-11-30T05:24:23.123456Z",
        "actions": [["edit", "x"], ["merge", "harness/b1"]],
        "conforms": False,
        "violations": ["wrote outside scope: x"],
    },
    ("audit", "gate.integrity"): {
        "batch": "b1",
        "tasks": ["t1"],
        "commit": "ab" * 20,
        "tree": "cd" * 20,
        "head": "ef" * 20,
        "head_tree": "cd" * 20,
        "clean_before": True,
        "clean_after": False,
        "intact": False,
        "reason": "HEAD moved",
    },
}
for _store in BODY_SPECS:
    SAMPLE_BODIES[(_store, "store.recovered")] = {"offset": 10, "length": 3, "sha256": HEX}


def _record(store: str, kind: str, **changes: Any) -> dict[str, Any]:
    record = {
        "v": RECORD_VERSION,
        "store": store,
        "run": "run-1",
        "seq": 0,
        "time": "2026-11-30T05:24:23.123456Z",
        "kind": kind,
        "body": copy.deepcopy(SAMPLE_BODIES[(store, kind)]),
        "mac": HEX,
    }
    record.update(changes)
    return record


def _schema_accepts(validator: jsonschema.Draft202012Validator, record: Any) -> bool:
    return validator.is_valid(record)


def _checker_accepts(record: Any) -> bool:
    try:
        check_envelope(record)
    except SchemaError:
        return False
    return True


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    text = resources.files("harness.schemas").joinpath("record.schema.json").read_text()
    schema = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_committed_schema_is_generated_from_the_specs() -> None:
    from .schemagen import SCHEMA_PATH, render

    assert SCHEMA_PATH.read_text() == render(), "run: python -m tests.schemagen"


def test_every_spec_kind_has_a_sample() -> None:
    declared = {(store, kind) for store, kinds in BODY_SPECS.items() for kind in kinds}
    assert declared == set(SAMPLE_BODIES)


def _mutations() -> list[tuple[str, dict[str, Any]]]:
    cases: list[tuple[str, dict[str, Any]]] = []
    for store, kind in SAMPLE_BODIES:
        base = _record(store, kind)
        cases.append((f"{store}:{kind}:valid", base))
        for member in list(base):
            missing = copy.deepcopy(base)
            del missing[member]
            cases.append((f"{store}:{kind}:missing-{member}", missing))
        for name in list(base["body"]):
            no_member = copy.deepcopy(base)
            del no_member["body"][name]
            cases.append((f"{store}:{kind}:body-missing-{name}", no_member))
            wrong = copy.deepcopy(base)
            wrong["body"][name] = 1.5 if isinstance(wrong["body"][name], int) else 7
            cases.append((f"{store}:{kind}:body-wrong-{name}", wrong))
        extra_body = copy.deepcopy(base)
        extra_body["body"]["surprise"] = 1
        cases.append((f"{store}:{kind}:body-extra", extra_body))
    base = _record("audit", "event")
    for name, value in [
        ("v", 1),
        ("v", 3),
        ("v", True),
        ("store", "other"),
        ("run", ""),
        ("run", "a b"),
        ("run", "-lead"),
        ("seq", -1),
        ("seq", "1"),
        ("seq", True),
        ("time", "2026-11-30T05:24:23Z"),
        ("time", "2026-11-30T05:24:23.123456+00:00"),
        ("kind", "Event"),
        ("kind", "nope"),
        ("kind", "artifact.write"),
        ("mac", "AB" * 32),
        ("mac", "ab" * 31),
        ("body", []),
    ]:
        cases.append((f"envelope-{name}-{value!r}", {**base, name: value}))
    cases.append(("envelope-extra", {**base, "extra": 1}))
    return cases


@pytest.mark.parametrize(
    ("case", "record"), _mutations(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_checker_and_schema_agree(
    validator: jsonschema.Draft202012Validator, case: str, record: dict[str, Any]
) -> None:
    expected_valid = case.endswith(":valid")
    assert _checker_accepts(record) is expected_valid
    assert _schema_accepts(validator, record) is expected_valid


def test_parse_record_line_reasons() -> None:
    line = canonical_bytes(_record("audit", "run.end"))
    assert parse_record_line(line).kind == "run.end"
    assert parse_record_line(line, "audit", "run-1").kind == "run.end"
    with pytest.raises(SchemaError, match="store 'audit' is not 'lineage'"):
        parse_record_line(line, "lineage", "run-1")
    with pytest.raises(SchemaError, match="run id 'run-1' is not 'run-2'"):
        parse_record_line(line, "audit", "run-2")
    with pytest.raises(CanonicalEncodingError, match="canonical"):
        parse_record_line(line.replace(b":", b": ", 1))
    bad = _record("audit", "run.end")
    bad["body"]["x"] = 1
    with pytest.raises(SchemaError, match="unknown member"):
        parse_record_line(canonical_bytes(bad))


@pytest.mark.parametrize(
    "data",
    [{"f": 1.5}, {"deep": {"x": [1.0]}}, {"n": 2**53}, {"nested": [[[[{}]]]] * 1}],
)
def test_free_form_members_are_integer_only(data: dict[str, Any]) -> None:
    record = _record("audit", "event")
    record["body"]["data"] = data
    if data == {"nested": [[[[{}]]]]}:
        check_envelope(record)  # shallow nesting is fine
        return
    with pytest.raises(SchemaError, match="integer-only"):
        check_envelope(record)


def test_float_in_a_record_line_is_rejected() -> None:
    """decode_canonical leaves floats to the schema: prove the pair rejects them."""
    record = _record("audit", "event")
    record["body"]["data"] = {}
    line = canonical_bytes(record).replace(b'"data":{}', b'"data":{"f":1.5}')
    with pytest.raises(SchemaError, match="integer-only"):
        parse_record_line(line)
    typed = canonical_bytes(_record("lineage", "artifact.write")).replace(
        b'"step":0', b'"step":0.5'
    )
    with pytest.raises(SchemaError, match="step"):
        parse_record_line(typed)


def test_mac_input_is_canonical_record_without_mac() -> None:
    record = _record("lineage", "artifact.write")
    # Nested members called "mac" or "run" must not confuse the splice.
    record["body"]["actor"] = 'x","mac":"' + HEX
    line = canonical_bytes(record)
    without = {k: v for k, v in record.items() if k != "mac"}
    assert split_mac(line) == (HEX, canonical_bytes(without))


def test_oversized_line_refused() -> None:
    with pytest.raises(VerificationError, match="limit"):
        parse_record_line(b"{" + b" " * (1 << 20) + b"}")


@pytest.mark.parametrize(
    ("case", "record"), _mutations(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_regex_fast_path_agrees_with_the_dict_checks(case: str, record: dict[str, Any]) -> None:
    """parse_record_line's one-regex schema must give the verdict check_envelope gives."""
    store = "audit" if case.startswith("envelope") else case.split(":", maxsplit=1)[0]
    line = orjson.dumps(record, option=orjson.OPT_SORT_KEYS)
    try:
        check_envelope(record, store, "run-1")
        slow_ok = True
    except SchemaError:
        slow_ok = False
    try:
        parsed = parse_record_line(line, store, "run-1")
        fast_ok = True
    except VerificationError:
        fast_ok = False
    assert fast_ok is slow_ok
    # Valid records must take the fast path, not only pass through the fallback.
    assert (_line_pattern(store, "run-1").fullmatch(line) is not None) is fast_ok
    if fast_ok:
        assert parsed.body == record["body"]
        assert (parsed.seq, parsed.time, parsed.kind, parsed.mac) == (
            record["seq"],
            record["time"],
            record["kind"],
            record["mac"],
        )


@pytest.mark.parametrize("value", ['a"b', "a\\b", "\u00e9", "\x01", "\n", "\U0001f600", "x" * 5000])
def test_fast_path_accepts_every_string_spelling(value: str) -> None:
    record = _record("lineage", "artifact.write")
    record["body"]["path"] = value
    assert _line_pattern("lineage", "run-1").fullmatch(canonical_bytes(record)) is not None
    assert parse_record_line(canonical_bytes(record), "lineage", "run-1").body["path"] == value


def test_free_form_members_cannot_smuggle_envelope_members() -> None:
    """The fast path's ``{.*}`` for free-form bodies must not let a ninth member through."""
    record = _record("audit", "event")
    record["body"] = {"data": {}, "name": "n"}
    record["extra"] = {"a": {}, "name": "s"}
    line = orjson.dumps(record, option=orjson.OPT_SORT_KEYS)
    assert _line_pattern("audit", "run-1").fullmatch(line) is not None  # the regex alone is fooled
    with pytest.raises(SchemaError, match="unknown extra"):
        parse_record_line(line, "audit", "run-1")
