"""The plan parser's vocabulary: its limits, name patterns and typed readers of TOML values.

Split from ``harness.orchestrate.plan`` (which builds tasks, gates, capsules and the plan from
these) so each stays small: everything here checks one value and either returns it in its
record form or raises ``PlanError`` naming the key path. Budgets are read here too (seconds
to milliseconds, exact dollar decimals to micro-dollars).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, Final

from harness.verify.rules.budget import Limits
from harness.verify.rules.scope import check_glob

MAX_BATCH_LIMIT: Final = 3
SAFE_INT: Final = 2**53 - 1
TASK_ID_RE: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
PLAN_NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
HOST_RE: Final = re.compile(
    r"(?=.{1,253}\Z)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*"
)
CAPSULE_ACTIONS: Final = ("edit", "delete", "gate", "merge")
"""Action classes a capsule may allow (egress is governed by the capsule's host list)."""
MCP_PREFIX: Final = "mcp:"
_BARE_KEY_RE: Final = re.compile(r"[A-Za-z0-9_-]+")

_TOP_KEYS: Final = ("plan", "capsule", "adapter", "models", "task")
_ADAPTER_KEYS: Final = ("command", "env", "model", "models")
BUILTIN_ADAPTERS: Final = frozenset(
    {"scripted", "claude", "codex", "gemini", "aider", "goose", "opencode"}
)
"""Adapter names a plan cannot redefine (``command`` can: it has no built-in template)."""
ENV_NAME_RE: Final = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")
_RESERVED_ENV: Final = frozenset({"HOME", "PATH", "TMPDIR", "LANG", "LC_ALL", "LC_CTYPE"})
_PLAN_KEYS: Final = (
    "name",
    "max_batch",
    "settle_ticks",
    "concurrency",
    "max_in_flight",
    "max_attempts",
    "idle_s",
    "lifetime_s",
    "seal_every_records",
    "seal_every_s",
    "budget",
    "review_wait_s",
    "control",
)
_BUDGET_KEYS: Final = ("wall_s", "tokens", "cost_usd")
_RUN_BUDGET_KEYS: Final = (*_BUDGET_KEYS, "role")
MAX_IN_FLIGHT: Final = 256
MAX_ATTEMPTS: Final = 10
MAX_IDLE_S: Final = 1800
MAX_LIFETIME_S: Final = 1800
MAX_SEAL_RECORDS: Final = 10**7
MAX_SEAL_S: Final = 86400
MAX_BUDGET_WALL_S: Final = 10**7
MAX_BUDGET_COST_MICROS: Final = 10**12
"""One million US dollars."""
MICROS_PER_USD: Final = 10**6
_CAPSULE_KEYS: Final = ("goal", "actions", "scope", "adapters", "egress", "expires")
_TASK_KEYS: Final = (
    "id",
    "role",
    "prompt",
    "priority",
    "adapter",
    "scope",
    "depends",
    "tools",
    "timeout_s",
    "model",
    "gates",
    "edits",
    "budget",
    "max_attempts",
    "idle_s",
    "rounds",
    "requirements",
    "strategy_edits",
    "usage_tokens",
    "models",
)
_ROUNDS_KEYS: Final = (
    "max_rounds",
    "manager",
    "auditor",
    "manager_model",
    "auditor_model",
    "steps",
    "ghost",
    "auditor_writes",
    "bad_header",
    "gate_wait_s",
)
_STEP_KEYS: Final = ("say", "edits")
MAX_ROUNDS: Final = 1000
"""Hard ceiling of ``rounds.max_rounds`` (``harness.verify.rules.rounds.MAX_ROUNDS_CEILING``)."""
MAX_GATE_WAIT_S: Final = 7 * 86400
_GATE_KEYS: Final = ("name", "command", "timeout_s")
_EDIT_KEYS: Final = ("path", "content", "delete")


class PlanError(ValueError):
    """A plan is not valid. ``key`` is the key path (``""`` for the whole document)."""

    def __init__(self, key: str, message: str, *, source: str | None = None) -> None:
        self.key = key
        self.message = message
        self.source = source
        where = ": ".join(part for part in (source, key) if part)
        super().__init__(f"{where}: {message}" if where else message)


# ---------------------------------------------------------------------------------------------
# Globs and paths (shared with harness.orchestrate.capsule)
# check_glob, check_rel_path, glob_match, in_scope and check_time are the capsule rule's own
# (harness.verify.rules.scope, imported above): one definition for the runtime, the plan
# parser and the verifier.


# ---------------------------------------------------------------------------------------------
# Typed readers


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float | Decimal):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "table"
    if isinstance(value, list | tuple):
        return "array"
    return "datetime (quote it)" if hasattr(value, "isoformat") else type(value).__name__


def _join(path: str, key: str) -> str:
    name = key if _BARE_KEY_RE.fullmatch(key) else '"' + key.replace('"', '\\"') + '"'
    return f"{path}.{name}" if path else name


def _table(value: object, key: str, keys: Sequence[str], required: Sequence[str] = ()) -> Any:
    if not isinstance(value, Mapping):
        raise PlanError(key, f"must be a table, got {_kind(value)}")
    for name in value:
        if name not in keys:
            raise PlanError(_join(key, str(name)), f"unknown key (allowed: {', '.join(keys)})")
    for name in required:
        if name not in value:
            raise PlanError(_join(key, name), "required key is missing")
    return value


def _str(value: object, key: str, pattern: re.Pattern[str] | None = None, what: str = "") -> str:
    if not isinstance(value, str):
        raise PlanError(key, f"must be a string, got {_kind(value)}")
    if pattern is not None and not pattern.fullmatch(value):
        raise PlanError(key, f"{value!r} is not a valid {what} (must match {pattern.pattern})")
    if pattern is None and not value:
        raise PlanError(key, "must not be empty")
    return value


def _int(value: object, key: str, low: int, high: int) -> int:
    if type(value) is not int:
        raise PlanError(key, f"must be an integer, got {_kind(value)}")
    if not low <= value <= high:
        raise PlanError(key, f"must be between {low} and {high}, got {value}")
    return value


def _timeout(value: object, key: str) -> float:
    if type(value) not in (int, float, Decimal):
        raise PlanError(key, f"must be a number of seconds, got {_kind(value)}")
    seconds = float(value)  # type: ignore[arg-type]
    if not math.isfinite(seconds) or seconds <= 0:
        raise PlanError(key, f"must be a finite number > 0, got {value}")
    return seconds


def _list(value: object, key: str) -> Sequence[Any]:
    if not isinstance(value, list | tuple):
        raise PlanError(key, f"must be an array, got {_kind(value)}")
    return value


def _unique_strs(value: object, key: str, check: Any) -> tuple[str, ...]:
    """An array of strings, each passed through ``check(item, item_key)``, no repeats."""
    items = _list(value, key)
    out: list[str] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        item_key = f"{key}[{i}]"
        text = check(item, item_key)
        if text in seen:
            raise PlanError(item_key, f"{text!r} repeats {key}[{seen[text]}]")
        seen[text] = i
        out.append(text)
    return tuple(out)


def _name(item: object, key: str) -> str:
    return _str(item, key, NAME_RE, "name")


def _task_id(item: object, key: str) -> str:
    return _str(item, key, TASK_ID_RE, "task id")


def _glob(item: object, key: str) -> str:
    text = _str(item, key)
    problem = check_glob(text)
    if problem is not None:
        raise PlanError(key, f"bad glob {text!r}: {problem}")
    return text


def _tool(item: object, key: str) -> str:
    text = _str(item, key)
    name = text.removeprefix(MCP_PREFIX)
    if not NAME_RE.fullmatch(name):
        raise PlanError(
            key, f"{text!r} is not a valid tool (a name or mcp:<name>, name {NAME_RE.pattern})"
        )
    return text


def _host(item: object, key: str) -> str:
    text = _str(item, key)
    if not HOST_RE.fullmatch(text):
        raise PlanError(
            key,
            f"{text!r} is not a valid host name (a lower-case DNS name: no scheme, port or path)",
        )
    return text


def _action(item: object, key: str) -> str:
    text = _str(item, key)
    if text not in CAPSULE_ACTIONS:
        raise PlanError(
            key, f"unknown action class {text!r} (allowed: {', '.join(CAPSULE_ACTIONS)})"
        )
    return text


def _cost_micros(value: object, key: str) -> int:
    """US dollars as exact integer micro-dollars.

    ``load_plan`` decodes TOML floats as ``Decimal`` (the digits as written, never a binary
    float); a ``float`` from a document built in code is read by its shortest repr. A value
    that is not a whole number of micro-dollars is an error, never rounded.
    """
    if type(value) is Decimal:
        amount = value
    elif type(value) is int:
        amount = Decimal(value)
    elif type(value) is float:
        amount = Decimal(repr(value)) if math.isfinite(value) else Decimal("NaN")
    else:
        raise PlanError(key, f"must be a number of US dollars, got {_kind(value)}")
    low, high = Decimal(1).scaleb(-6), Decimal(MAX_BUDGET_COST_MICROS).scaleb(-6)
    if not amount.is_finite() or not low <= amount <= high:
        top = MAX_BUDGET_COST_MICROS // MICROS_PER_USD
        raise PlanError(key, f"must be between 0.000001 and {top}, got {value}")
    micros = amount.scaleb(6)
    if micros != micros.to_integral_value():
        raise PlanError(key, f"{value} has more than 6 decimals (whole micro-dollars only)")
    return int(micros)


def _budget(value: object, key: str, keys: Sequence[str] = _BUDGET_KEYS) -> Limits:
    """A budget table (``wall_s``, ``tokens``, ``cost_usd``; each optional) in record units."""
    table = _table(value, key, keys)
    wall = tokens = cost = None
    if "wall_s" in table:
        wall = _int(table["wall_s"], _join(key, "wall_s"), 1, MAX_BUDGET_WALL_S) * 1000
    if "tokens" in table:
        tokens = _int(table["tokens"], _join(key, "tokens"), 1, SAFE_INT)
    if "cost_usd" in table:
        cost = _cost_micros(table["cost_usd"], _join(key, "cost_usd"))
    return Limits(wall_ms=wall, tokens=tokens, cost_micros=cost)


def _role_budgets(value: object, key: str) -> dict[str, Limits]:
    if not isinstance(value, Mapping):
        raise PlanError(key, f"must be a table of [{key}.ROLE] tables, got {_kind(value)}")
    out: dict[str, Limits] = {}
    for role, entry in value.items():
        role_key = _join(key, str(role))
        if not NAME_RE.fullmatch(str(role)):
            raise PlanError(role_key, f"{role!r} is not a valid role name")
        out[str(role)] = _budget(entry, role_key)
    return dict(sorted(out.items()))


# ---------------------------------------------------------------------------------------------
# Sections
