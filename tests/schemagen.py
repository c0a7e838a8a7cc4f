"""Derive schemas/record.schema.json from BODY_SPECS (one source of truth for record kinds).

    python -m tests.schemagen          # rewrite schemas/record.schema.json

tests/test_records.py asserts the committed schema equals this output, and holds the schema,
the dict checks and the regex fast path to the same verdicts on many records.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.verify import recordkinds as rk
from harness.verify import records as r
from harness.verify.fsm import TaskState

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "record.schema.json"
HEX64 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
STRING = {"type": "string", "minLength": 1}
SAFE = 9007199254740991
TIME_PATTERN = "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6}Z$"
COMMAND_ID = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"}
COMMIT = {"type": "string", "pattern": "^([0-9a-f]{40}|[0-9a-f]{64})$"}


def _checkers() -> dict[Any, dict[str, Any]]:
    return {
        r._str: STRING,
        r._opt_str: {"oneOf": [{"type": "null"}, STRING]},
        r._hex64: HEX64,
        r._nat: {"type": "integer", "minimum": 0, "maximum": SAFE},
        r._int: {"type": "integer", "minimum": -SAFE, "maximum": SAFE},
        r._opt_int: {
            "oneOf": [{"type": "null"}, {"type": "integer", "minimum": -SAFE, "maximum": SAFE}]
        },
        r._bool: {"type": "boolean"},
        r._str_list: {"type": "array", "items": STRING},
        r._hex64_list: {"type": "array", "items": HEX64},
        r._nat_list: {
            "type": "array",
            "items": {"type": "integer", "minimum": 0, "maximum": SAFE},
        },
        r._command_id: COMMAND_ID,
        r._opt_command_id: {"oneOf": [{"type": "null"}, COMMAND_ID]},
        r._opt_hex64: {"oneOf": [{"type": "null"}, HEX64]},
        r._task_state: {"enum": [state.value for state in TaskState]},
        r._object: {"type": "object"},
        r._git_mode: {"enum": list(r.GIT_MODES)},
        r._opt_git_mode: {"oneOf": [{"type": "null"}, {"enum": list(r.GIT_MODES)}]},
        r._opt_object: {"oneOf": [{"type": "null"}, {"type": "object"}]},
        r._time: {"type": "string", "pattern": TIME_PATTERN},
        r._commit: COMMIT,
        r._commit_list: {"type": "array", "items": COMMIT, "minItems": 1, "uniqueItems": True},
        r._action_list: {
            "type": "array",
            "items": {"type": "array", "items": STRING, "minItems": 2, "maxItems": 2},
        },
        r._opt_nat: {
            "oneOf": [{"type": "null"}, {"type": "integer", "minimum": 0, "maximum": SAFE}]
        },
        r._outcome: {"enum": list(rk.EXCHANGE_OUTCOMES)},
        r._opt_family: {"oneOf": [{"type": "null"}, {"enum": list(rk.MODEL_FAMILIES)}]},
        r._opt_api: {"oneOf": [{"type": "null"}, {"enum": list(rk.MODEL_APIS)}]},
        r._source: {"enum": list(rk.MODEL_SOURCES)},
        r._opt_usage: {
            "oneOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "additionalProperties": False,
                    "required": list(rk.USAGE_MEMBERS),
                    "properties": {
                        name: {
                            "oneOf": [
                                {"type": "null"},
                                {"type": "integer", "minimum": 0, "maximum": SAFE},
                            ]
                        }
                        for name in rk.USAGE_MEMBERS
                    },
                },
            ]
        },
        r._reading_list: {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": sorted(r.READING_MEMBERS),
                "properties": {
                    "sensor": STRING,
                    "tier": {"enum": [1, 2]},
                    "value": {"type": "integer", "minimum": -SAFE, "maximum": SAFE},
                    "anomaly": {"type": "boolean"},
                    "trigger": {"oneOf": [{"type": "null"}, STRING]},
                },
            },
        },
    }


def record_schema() -> dict[str, Any]:
    checkers = _checkers()
    defs: dict[str, Any] = {}
    branches = []
    for store, kinds in r.BODY_SPECS.items():
        for kind, spec in kinds.items():
            name = f"{store}:{kind}"
            defs[name] = {
                "type": "object",
                "additionalProperties": False,
                "required": sorted(k for k, (required, _) in spec.items() if required),
                "properties": {k: checkers[c] for k, (_, c) in spec.items()},
            }
            branches.append(
                {
                    "if": {"properties": {"store": {"const": store}, "kind": {"const": kind}}},
                    "then": {"properties": {"body": {"$ref": f"#/$defs/{name}"}}},
                }
            )
    allowed = {
        "anyOf": [
            {"properties": {"store": {"const": store}, "kind": {"enum": sorted(kinds)}}}
            for store, kinds in r.BODY_SPECS.items()
        ]
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://harness-verify.invalid/schemas/record.schema.json",
        "title": f"harness-verify store record, version {r.RECORD_VERSION}",
        "description": "One line of a store (lineage, audit, replay, control): the RFC 8785 "
        "canonical encoding of this object, then LF. Integers only (no floats), within "
        "+-(2^53-1). Generated from harness.verify.records.BODY_SPECS by tests/schemagen.py. "
        "See docs/spec/records.md.",
        "type": "object",
        "additionalProperties": False,
        "required": sorted(r.ENVELOPE_KEYS),
        "properties": {
            "v": {"const": r.RECORD_VERSION},
            "store": {"enum": list(r.STORES)},
            "run": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"},
            "seq": {"type": "integer", "minimum": 0, "maximum": SAFE},
            "time": {
                "type": "string",
                "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6}Z$",
            },
            "kind": {"type": "string", "pattern": "^[a-z][a-z0-9_]*(\\.[a-z][a-z0-9_]*)*$"},
            "body": {"type": "object"},
            "mac": HEX64,
        },
        "allOf": [allowed, *branches],
        "$defs": defs,
    }


def render() -> str:
    return json.dumps(record_schema(), indent=2) + "\n"


if __name__ == "__main__":
    SCHEMA_PATH.write_text(render())
    print(SCHEMA_PATH)
