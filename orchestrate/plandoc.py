"""The plan document: the plan as one canonical JSON object, a member of the evidence.

``run.start.plan_sha256`` is the SHA-256 of these bytes, and the exporter puts them in the
bundle as ``runs/<run>/plan.json``, so an auditor can tell which plan a run followed and the
verifier can re-decide capsule conformance with the tasks' scopes (docs/spec/bundle.md).

The object is derived from the parsed ``Plan`` (not the TOML text), so plans built in code and
plans read from files are bound the same way, and a second implementation needs only RFC 8785:
every dataclass field of ``Plan``, ``TaskSpec``, ``Gate``, ``Edit`` and ``CapsuleSpec`` by
name (tuples as arrays, mappings as objects), plus ``"format": "harness-verify/plan"`` and
``"version": 1``. Records carry integers only, so a field in seconds (``timeout_s``, a float)
becomes ``timeout_ms`` (an integer, ``int(seconds * 1000)``, as ``agent.spawn`` records it);
an unset one (``idle_s``: ``None``) becomes ``idle_ms: null``. Budgets (``budget``,
``role_budgets``) are already in record units: ``{"wall_ms", "tokens", "cost_micros"}``.
New fields join automatically, so the digest never silently leaves part of a plan unbound.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any, Final

from harness.verify.canonical import canonical_bytes

from .model import Plan

PLAN_FORMAT: Final = "harness-verify/plan"
PLAN_VERSION: Final = 1


def _value(value: Any, where: str) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for item in dataclasses.fields(value):
            field_value = getattr(value, item.name)
            name = item.name
            if name.endswith("_s") and (
                field_value is None or isinstance(field_value, int | float)
            ):
                name = name[:-2] + "_ms"
                field_value = None if field_value is None else int(field_value * 1000)
            out[name] = _value(field_value, f"{where}.{item.name}")
        return out
    if isinstance(value, tuple | list):
        return [_value(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, Mapping):
        return {str(key): _value(item, f"{where}.{key}") for key, item in value.items()}
    if value is None or isinstance(value, str | bool | int):
        return value
    raise ValueError(f"{where}: {type(value).__name__} cannot be recorded (integers only)")


def plan_document(plan: Plan) -> dict[str, Any]:
    """The plan as a JSON object (see the module docstring)."""
    document: dict[str, Any] = _value(plan, "plan")
    document["format"] = PLAN_FORMAT
    document["version"] = PLAN_VERSION
    return document


def plan_bytes(plan: Plan) -> bytes:
    """Canonical (RFC 8785) bytes of the plan document."""
    return canonical_bytes(plan_document(plan))


def plan_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
