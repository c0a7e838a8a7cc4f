"""Plan files (harness.orchestrate.plan): the valid format, and every strictness rule."""

from __future__ import annotations

import copy
import json
import re
import tomllib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from harness.orchestrate.model import CapsuleSpec, Edit, Gate, TaskSpec
from harness.orchestrate.plan import PlanError, load_plan, parse_plan
from harness.orchestrate.plandoc import plan_document
from harness.verify.rules.budget import Limits

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "schemas" / "plan.schema.json").read_text())
SPEC_PAGE = ROOT / "docs" / "spec" / "plan.md"

PLAN_TOML = """\
[plan]
name = "demo"
max_batch = 3
settle_ticks = 2
max_in_flight = 8
max_attempts = 2
idle_s = 120
lifetime_s = 900
seal_every_records = 500
seal_every_s = 30

[plan.concurrency]
coder = 2

[plan.budget]
wall_s = 3600
tokens = 2000000
cost_usd = 12.5

[plan.budget.role.tester]
tokens = 300000

[plan.budget.role.coder]
cost_usd = 0.000001

[capsule]
goal = "Fix the greeting"
actions = ["edit", "delete", "gate", "merge"]
scope = ["src/**", "tests/**"]
adapters = ["scripted"]
egress = []
expires = "2027-01-01T00:00:00.000000Z"

[[task]]
id = "t1"
role = "coder"
prompt = "Fix the greeting"
priority = 10
adapter = "scripted"
scope = ["src/**"]
depends = []
tools = ["edit"]
timeout_s = 60
model = "scripted-model"
budget = { wall_s = 600, tokens = 100000, cost_usd = 1.25 }
max_attempts = 3
idle_s = 60

[[task.gates]]
name = "tests"
command = ["python", "-m", "pytest", "-q"]
timeout_s = 120

[[task.edits]]
path = "src/app.py"
content = "print('hello')\\n"

[[task.edits]]
path = "src/old.py"

[[task.edits]]
path = "src/older.py"
delete = true

[[task]]
id = "t2"
role = "tester"
prompt = "Add a test"
depends = ["t1"]
timeout_s = 2.5
tools = ["shell", "mcp:github"]

[[task.edits]]
path = "tests/test_app.py"
content = ""
delete = false
"""


def base() -> dict[str, Any]:
    return tomllib.loads(PLAN_TOML)


def test_valid_plan_parses(tmp_path: Path) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(PLAN_TOML)
    plan = load_plan(path)
    assert plan == parse_plan(base())
    assert plan.name == "demo"
    assert plan.max_batch == 3
    assert plan.settle_ticks == 2
    assert plan.concurrency == {"coder": 2}
    assert plan.capsule == CapsuleSpec(
        goal="Fix the greeting",
        actions=("edit", "delete", "gate", "merge"),
        scope=("src/**", "tests/**"),
        adapters=("scripted",),
        egress=(),
        expires="2027-01-01T00:00:00.000000Z",
    )
    t1, t2 = plan.tasks
    assert t1 == TaskSpec(
        id="t1",
        role="coder",
        prompt="Fix the greeting",
        priority=10,
        adapter="scripted",
        scope=("src/**",),
        depends=(),
        tools=("edit",),
        gates=(Gate("tests", ("python", "-m", "pytest", "-q"), 120.0),),
        edits=(
            Edit("src/app.py", "print('hello')\n"),
            Edit("src/old.py", None),
            Edit("src/older.py", None),
        ),
        timeout_s=60.0,
        model="scripted-model",
        order=0,
        budget=Limits(wall_ms=600_000, tokens=100_000, cost_micros=1_250_000),
        max_attempts=3,
        idle_s=60,
    )
    assert t2.order == 1
    assert t2.depends == ("t1",)
    assert t2.priority == 0
    assert t2.adapter == "scripted"
    assert t2.scope == ("**",)
    assert t2.timeout_s == 2.5
    assert t2.model is None
    assert t2.tools == ("shell", "mcp:github")
    assert t2.edits == (Edit("tests/test_app.py", ""),)
    assert isinstance(t1.timeout_s, float)
    assert t2.budget == Limits() and t2.max_attempts is None and t2.idle_s is None
    assert (plan.max_in_flight, plan.max_attempts, plan.idle_s, plan.lifetime_s) == (8, 2, 120, 900)
    assert (plan.seal_every_records, plan.seal_every_s) == (500, 30)
    assert plan.budget == Limits(wall_ms=3_600_000, tokens=2_000_000, cost_micros=12_500_000)
    assert plan.role_budgets == {"coder": Limits(cost_micros=1), "tester": Limits(tokens=300_000)}
    assert list(plan.role_budgets) == ["coder", "tester"]
    assert (plan.attempts_for(t1), plan.attempts_for(t2)) == (3, 2)
    assert (plan.idle_s_for(t1), plan.idle_s_for(t2)) == (60, 120)


def test_minimal_plan_defaults() -> None:
    plan = parse_plan({"plan": {"name": "p"}})
    assert plan.tasks == ()
    assert plan.max_batch == 3
    assert plan.settle_ticks == 2
    assert plan.concurrency == {}
    assert plan.capsule is None
    assert (plan.max_in_flight, plan.max_attempts, plan.idle_s, plan.lifetime_s) == (
        4,
        1,
        None,
        1800,
    )
    assert (plan.seal_every_records, plan.seal_every_s) == (1000, 60)
    assert plan.budget == Limits() and plan.role_budgets == {}
    capsule = parse_plan({"plan": {"name": "p"}, "capsule": {"goal": "g"}}).capsule
    assert capsule == CapsuleSpec(goal="g")


def test_concurrency_is_sorted_by_role() -> None:
    doc = base()
    doc["plan"]["concurrency"] = {"tester": 1, "coder": 3}
    assert list(parse_plan(doc).concurrency) == ["coder", "tester"]


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation setting a dotted path (``task.0.gates.0.name``) to ``value``."""

    def apply(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return apply


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        del node[last]

    return apply


def _extra_task(**fields: Any) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        doc["task"].append({"role": "coder", "prompt": "p", **fields})

    return apply


def _chain(*steps: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        for step in steps:
            step(doc)

    return apply


LONG_ID = "a" * 65
PLAN_KEYS = (
    "name, max_batch, settle_ticks, concurrency, max_in_flight, max_attempts, idle_s, "
    "lifetime_s, seal_every_records, seal_every_s, budget, review_wait_s, control)"
)
# (case id, mutation, exact error message, whether the JSON Schema can see the problem)
CASES: list[tuple[str, Callable[[dict[str, Any]], None], str, bool]] = [
    # unknown keys, anywhere
    (
        "unknown-top",
        _set("tasks", []),
        "tasks: unknown key (allowed: plan, capsule, adapter, models, task)",
        True,
    ),
    (
        "unknown-plan",
        _set("plan.nmae", "x"),
        "plan.nmae: unknown key (allowed: " + PLAN_KEYS,
        True,
    ),
    (
        "unknown-capsule",
        _set("capsule.goals", "x"),
        "capsule.goals: unknown key (allowed: goal, actions, scope, adapters, egress, expires)",
        True,
    ),
    (
        "unknown-task",
        _set("task.0.promt", "x"),
        "task[0].promt: unknown key (allowed: id, role, prompt, priority, adapter, scope, "
        "depends, tools, timeout_s, model, gates, edits, budget, max_attempts, idle_s, rounds, "
        "requirements, strategy_edits, usage_tokens, models)",
        True,
    ),
    (
        "unknown-gate",
        _set("task.0.gates.0.timout_s", 1),
        "task[0].gates[0].timout_s: unknown key (allowed: name, command, timeout_s)",
        True,
    ),
    (
        "unknown-edit",
        _set("task.0.edits.0.contents", "x"),
        "task[0].edits[0].contents: unknown key (allowed: path, content, delete)",
        True,
    ),
    (
        "unknown-quoted",
        _set("plan.a b", 1),
        'plan."a b": unknown key (allowed: ' + PLAN_KEYS,
        True,
    ),
    # required keys and types
    ("missing-plan", _delete("plan"), "plan: required key is missing", True),
    ("missing-name", _delete("plan.name"), "plan.name: required key is missing", True),
    ("missing-id", _delete("task.1.id"), "task[1].id: required key is missing", True),
    ("missing-role", _delete("task.0.role"), "task[0].role: required key is missing", True),
    ("missing-goal", _delete("capsule.goal"), "capsule.goal: required key is missing", True),
    (
        "missing-gate-command",
        _delete("task.0.gates.0.command"),
        "task[0].gates[0].command: required key is missing",
        True,
    ),
    (
        "missing-edit-path",
        _delete("task.0.edits.0.path"),
        "task[0].edits[0].path: required key is missing",
        True,
    ),
    ("plan-array", _set("plan", [{}]), "plan: must be a table, got array", True),
    (
        "task-table",
        _set("task", {"id": "t1"}),
        "task: must be an array of tables ([[task]]), got table",
        True,
    ),
    ("empty-prompt", _set("task.0.prompt", ""), "task[0].prompt: must not be empty", True),
    (
        "bad-plan-name",
        _set("plan.name", "my plan"),
        "plan.name: 'my plan' is not a valid plan name (must match "
        "[A-Za-z0-9][A-Za-z0-9._-]{0,127})",
        True,
    ),
    (
        "bool-priority",
        _set("task.0.priority", True),
        "task[0].priority: must be an integer, got boolean",
        True,
    ),
    (
        "float-priority",
        _set("task.0.priority", 1.5),
        "task[0].priority: must be an integer, got float",
        True,
    ),
    (
        "huge-priority",
        _set("task.0.priority", 2**53),
        "task[0].priority: must be between -9007199254740991 and 9007199254740991, "
        "got 9007199254740992",
        True,
    ),
    (
        "model-empty",
        _set("task.0.model", ""),
        "task[0].model: must not be empty",
        True,
    ),
    (
        "command-empty",
        _set("task.0.gates.0.command", []),
        "task[0].gates[0].command: must not be empty",
        True,
    ),
    (
        "command-item",
        _set("task.0.gates.0.command", ["python", 3]),
        "task[0].gates[0].command[1]: must be a string, got integer",
        True,
    ),
    (
        "bad-tool",
        _set("task.1.tools", ["mcp:"]),
        "task[1].tools[0]: 'mcp:' is not a valid tool (a name or mcp:<name>, name "
        "[A-Za-z0-9][A-Za-z0-9._-]{0,63})",
        True,
    ),
    # ids
    (
        "bad-id",
        _set("task.0.id", "T1"),
        "task[0].id: 'T1' is not a valid task id (must match [a-z0-9][a-z0-9_-]{0,63})",
        True,
    ),
    (
        "long-id",
        _set("task.0.id", LONG_ID),
        f"task[0].id: '{LONG_ID}' is not a valid task id (must match [a-z0-9][a-z0-9_-]{{0,63}})",
        True,
    ),
    (
        "duplicate-id",
        _extra_task(id="t1"),
        "task[2].id: duplicate task id 't1' (first at task[0])",
        False,
    ),
    # dependencies
    (
        "unknown-dep",
        _set("task.1.depends", ["t1", "nope"]),
        "task[1].depends[1]: unknown task id 'nope'",
        False,
    ),
    (
        "repeated-dep",
        _set("task.1.depends", ["t1", "t1"]),
        "task[1].depends[1]: 't1' repeats task[1].depends[0]",
        True,
    ),
    (
        "cycle-2",
        _set("task.0.depends", ["t2"]),
        "task[0].depends: dependency cycle: t1 -> t2 -> t1",
        False,
    ),
    (
        "cycle-self",
        _set("task.0.depends", ["t1"]),
        "task[0].depends: dependency cycle: t1 -> t1",
        False,
    ),
    (
        "cycle-3-with-tail",
        _chain(
            _extra_task(id="t3", depends=["t4"]),
            _extra_task(id="t4", depends=["t5"]),
            _extra_task(id="t5", depends=["t3"]),
            _set("task.1.depends", ["t1", "t4"]),
        ),
        "task[2].depends: dependency cycle: t3 -> t4 -> t5 -> t3",
        False,
    ),
    # globs and paths
    (
        "glob-absolute",
        _set("task.0.scope", ["/src/**"]),
        "task[0].scope[0]: bad glob '/src/**': glob is absolute (starts with '/')",
        True,
    ),
    (
        "glob-dotdot",
        _set("task.0.scope", ["src/../etc/*"]),
        "task[0].scope[0]: bad glob 'src/../etc/*': glob has a '..' segment",
        True,
    ),
    (
        "glob-dot",
        _set("task.0.scope", ["./src/**"]),
        "task[0].scope[0]: bad glob './src/**': glob has a '.' segment",
        True,
    ),
    (
        "glob-empty-segment",
        _set("task.0.scope", ["src//a"]),
        "task[0].scope[0]: bad glob 'src//a': glob has an empty segment",
        True,
    ),
    (
        "glob-trailing-slash",
        _set("task.0.scope", ["src/"]),
        "task[0].scope[0]: bad glob 'src/': glob has an empty segment",
        True,
    ),
    (
        "glob-backslash",
        _set("task.0.scope", ["src\\*.py"]),
        "task[0].scope[0]: bad glob 'src\\\\*.py': glob contains a backslash",
        True,
    ),
    (
        "glob-star-star-inside",
        _set("task.0.scope", ["src/a**"]),
        "task[0].scope[0]: bad glob 'src/a**': '**' must be a whole path segment",
        True,
    ),
    (
        "glob-empty",
        _set("task.0.scope", [""]),
        "task[0].scope[0]: must not be empty",
        True,
    ),
    (
        "glob-capsule",
        _set("capsule.scope", ["src/**", "/etc/**"]),
        "capsule.scope[1]: bad glob '/etc/**': glob is absolute (starts with '/')",
        True,
    ),
    (
        "glob-repeated",
        _set("task.0.scope", ["src/**", "src/**"]),
        "task[0].scope[1]: 'src/**' repeats task[0].scope[0]",
        True,
    ),
    (
        "edit-outside-scope",
        _set("task.0.edits.0.path", "docs/readme.md"),
        "task[0].edits[0].path: 'docs/readme.md' is outside the task scope (src/**)",
        False,
    ),
    (
        "edit-empty-scope",
        _set("task.0.scope", []),
        "task[0].edits[0].path: 'src/app.py' is outside the task scope (empty)",
        False,
    ),
    (
        "edit-dotdot",
        _set("task.0.edits.0.path", "src/../../etc/passwd"),
        "task[0].edits[0].path: bad path 'src/../../etc/passwd': path has a '..' segment",
        True,
    ),
    (
        "edit-absolute",
        _set("task.0.edits.0.path", "/etc/passwd"),
        "task[0].edits[0].path: bad path '/etc/passwd': path is absolute (starts with '/')",
        True,
    ),
    (
        "edit-git",
        _chain(_set("task.0.scope", ["**"]), _set("task.0.edits.0.path", ".git/hooks/pre")),
        "task[0].edits[0].path: bad path '.git/hooks/pre': path is inside .git",
        True,
    ),
    (
        "edit-repeated-path",
        _set("task.0.edits.1.path", "src/app.py"),
        "task[0].edits[1].path: path 'src/app.py' repeats task[0].edits[0]",
        False,
    ),
    (
        "edit-delete-and-content",
        _set("task.0.edits.0.delete", True),
        "task[0].edits[0].delete: delete = true and content cannot both be given",
        True,
    ),
    (
        "edit-keep-without-content",
        _set("task.0.edits.1.delete", False),
        "task[0].edits[1].delete: delete = false needs content",
        True,
    ),
    (
        "edit-content-type",
        _set("task.0.edits.0.content", 3),
        "task[0].edits[0].content: must be a string, got integer",
        True,
    ),
    # timeouts
    (
        "timeout-zero",
        _set("task.0.timeout_s", 0),
        "task[0].timeout_s: must be a finite number > 0, got 0",
        True,
    ),
    (
        "timeout-negative",
        _set("task.0.timeout_s", -1.5),
        "task[0].timeout_s: must be a finite number > 0, got -1.5",
        True,
    ),
    (
        "timeout-inf",
        _set("task.0.timeout_s", float("inf")),
        "task[0].timeout_s: must be a finite number > 0, got inf",
        False,
    ),
    (
        "timeout-nan",
        _set("task.0.timeout_s", float("nan")),
        "task[0].timeout_s: must be a finite number > 0, got nan",
        False,
    ),
    (
        "timeout-string",
        _set("task.0.timeout_s", "60"),
        "task[0].timeout_s: must be a number of seconds, got string",
        True,
    ),
    (
        "timeout-bool",
        _set("task.0.timeout_s", True),
        "task[0].timeout_s: must be a number of seconds, got boolean",
        True,
    ),
    (
        "gate-timeout-zero",
        _set("task.0.gates.0.timeout_s", 0),
        "task[0].gates[0].timeout_s: must be a finite number > 0, got 0",
        True,
    ),
    # plan limits
    (
        "max-batch-0",
        _set("plan.max_batch", 0),
        "plan.max_batch: must be between 1 and 3, got 0",
        True,
    ),
    (
        "max-batch-4",
        _set("plan.max_batch", 4),
        "plan.max_batch: must be between 1 and 3, got 4",
        True,
    ),
    (
        "max-batch-string",
        _set("plan.max_batch", "3"),
        "plan.max_batch: must be an integer, got string",
        True,
    ),
    (
        "settle-0",
        _set("plan.settle_ticks", 0),
        "plan.settle_ticks: must be between 1 and 1000, got 0",
        True,
    ),
    (
        "concurrency-0",
        _set("plan.concurrency", {"coder": 0}),
        "plan.concurrency.coder: must be between 1 and 1000, got 0",
        True,
    ),
    (
        "concurrency-unknown-role",
        _set("plan.concurrency", {"codr": 2}),
        "plan.concurrency.codr: no task has role 'codr'",
        False,
    ),
    (
        "concurrency-not-table",
        _set("plan.concurrency", 2),
        "plan.concurrency: must be a table, got integer",
        True,
    ),
    # issue 11: in-flight limit, attempts, idle and lifetime limits, sealing, budgets
    *[
        (
            f"{key}-range-{value}",
            _set(f"plan.{key}", value),
            f"plan.{key}: must be between {low} and {high}, got {value}",
            True,
        )
        for key, low, high in [
            ("max_in_flight", 1, 256),
            ("max_attempts", 1, 10),
            ("idle_s", 1, 1800),
            ("lifetime_s", 1, 1800),
            ("seal_every_records", 1, 10**7),
            ("seal_every_s", 1, 86400),
        ]
        for value in (low - 1, high + 1)
    ],
    (
        "max-in-flight-bool",
        _set("plan.max_in_flight", True),
        "plan.max_in_flight: must be an integer, got boolean",
        True,
    ),
    (
        "idle-float",
        _set("plan.idle_s", 1.5),
        "plan.idle_s: must be an integer, got float",
        True,
    ),
    (
        "task-max-attempts-range",
        _set("task.0.max_attempts", 11),
        "task[0].max_attempts: must be between 1 and 10, got 11",
        True,
    ),
    (
        "task-idle-range",
        _set("task.1.idle_s", 0),
        "task[1].idle_s: must be between 1 and 1800, got 0",
        True,
    ),
    (
        "budget-unknown-key",
        _set("plan.budget.tokens_max", 3),
        "plan.budget.tokens_max: unknown key (allowed: wall_s, tokens, cost_usd, role)",
        True,
    ),
    (
        "task-budget-unknown-key",
        _set("task.0.budget", {"role": {}}),
        "task[0].budget.role: unknown key (allowed: wall_s, tokens, cost_usd)",
        True,
    ),
    (
        "role-budget-unknown-key",
        _set("plan.budget.role.coder", {"wall_ms": 5}),
        "plan.budget.role.coder.wall_ms: unknown key (allowed: wall_s, tokens, cost_usd)",
        True,
    ),
    (
        "budget-not-table",
        _set("plan.budget", 5),
        "plan.budget: must be a table, got integer",
        True,
    ),
    (
        "task-budget-not-table",
        _set("task.1.budget", "lots"),
        "task[1].budget: must be a table, got string",
        True,
    ),
    (
        "role-budgets-not-table",
        _set("plan.budget.role", 1),
        "plan.budget.role: must be a table of [plan.budget.role.ROLE] tables, got integer",
        True,
    ),
    (
        "role-budget-unknown-role",
        _set("plan.budget.role.auditor", {"tokens": 5}),
        "plan.budget.role.auditor: no task has role 'auditor'",
        False,
    ),
    (
        "role-budget-bad-name",
        _set("plan.budget.role", {"-x": {"tokens": 5}}),
        "plan.budget.role.-x: '-x' is not a valid role name",
        True,
    ),
    (
        "budget-wall-zero",
        _set("plan.budget.wall_s", 0),
        "plan.budget.wall_s: must be between 1 and 10000000, got 0",
        True,
    ),
    (
        "budget-wall-float",
        _set("task.0.budget.wall_s", 1.5),
        "task[0].budget.wall_s: must be an integer, got float",
        True,
    ),
    (
        "budget-tokens-huge",
        _set("plan.budget.tokens", 2**53),
        f"plan.budget.tokens: must be between 1 and {2**53 - 1}, got {2**53}",
        True,
    ),
    (
        "budget-cost-seven-decimals",
        _set("plan.budget.cost_usd", 0.0000015),
        "plan.budget.cost_usd: 1.5e-06 has more than 6 decimals (whole micro-dollars only)",
        False,
    ),
    (
        "budget-cost-zero",
        _set("task.0.budget.cost_usd", 0),
        "task[0].budget.cost_usd: must be between 0.000001 and 1000000, got 0",
        True,
    ),
    (
        "budget-cost-negative",
        _set("plan.budget.cost_usd", -1.0),
        "plan.budget.cost_usd: must be between 0.000001 and 1000000, got -1.0",
        True,
    ),
    (
        "budget-cost-too-much",
        _set("plan.budget.cost_usd", 1_000_000.5),
        "plan.budget.cost_usd: must be between 0.000001 and 1000000, got 1000000.5",
        True,
    ),
    (
        "budget-cost-inf",
        _set("plan.budget.cost_usd", float("inf")),
        "plan.budget.cost_usd: must be between 0.000001 and 1000000, got inf",
        False,
    ),
    (
        "budget-cost-string",
        _set("plan.budget.cost_usd", "12.50"),
        "plan.budget.cost_usd: must be a number of US dollars, got string",
        True,
    ),
    (
        "budget-cost-bool",
        _set("plan.budget.role.coder.cost_usd", True),
        "plan.budget.role.coder.cost_usd: must be a number of US dollars, got boolean",
        True,
    ),
    # capsule
    (
        "capsule-action",
        _set("capsule.actions", ["edit", "push"]),
        "capsule.actions[1]: unknown action class 'push' (allowed: edit, delete, gate, merge)",
        True,
    ),
    (
        "capsule-egress-case",
        _set("capsule.egress", ["Example.COM"]),
        "capsule.egress[0]: 'Example.COM' is not a valid host name (a lower-case DNS name: no "
        "scheme, port or path)",
        True,
    ),
    (
        "capsule-egress-url",
        _set("capsule.egress", ["https://example.com"]),
        "capsule.egress[0]: 'https://example.com' is not a valid host name",
        True,
    ),
    (
        "capsule-expires-format",
        _set("capsule.expires", "2027-01-01T00:00:00Z"),
        "capsule.expires: '2027-01-01T00:00:00Z': time must be YYYY-MM-DDTHH:MM:SS.ffffffZ",
        True,
    ),
    (
        "capsule-expires-calendar",
        _set("capsule.expires", "2027-02-30T00:00:00.000000Z"),
        "capsule.expires: '2027-02-30T00:00:00.000000Z': time is not a valid calendar date",
        False,
    ),
    (
        "capsule-expires-datetime",
        _set("capsule.expires", datetime(2027, 1, 1, tzinfo=UTC)),
        "capsule.expires: must be a string, got datetime (quote it)",
        False,
    ),
    (
        "capsule-adapters-repeat",
        _set("capsule.adapters", ["scripted", "scripted"]),
        "capsule.adapters[1]: 'scripted' repeats capsule.adapters[0]",
        True,
    ),
    (
        "gate-name-repeat",
        _set(
            "task.0.gates",
            [{"name": "tests", "command": ["true"]}, {"name": "tests", "command": ["false"]}],
        ),
        "task[0].gates[1].name: gate name 'tests' repeats task[0].gates[0]",
        False,
    ),
]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [pytest.param(mutate, message, id=case) for case, mutate, message, _ in CASES],
)
def test_strictness(mutate: Callable[[dict[str, Any]], None], message: str) -> None:
    doc = base()
    mutate(doc)
    with pytest.raises(PlanError) as info:
        parse_plan(doc)
    text = str(info.value)
    assert text.startswith(message), text
    key = message.split(": ", 1)[0]
    assert info.value.key == key


def _jsonable(doc: dict[str, Any]) -> Any:
    return json.loads(json.dumps(doc, default=str))


def test_schema_is_valid_and_accepts_the_valid_plan() -> None:
    Draft202012Validator.check_schema(SCHEMA)
    validator = Draft202012Validator(SCHEMA)
    assert not list(validator.iter_errors(_jsonable(base())))
    assert not list(validator.iter_errors({"plan": {"name": "p"}}))


@pytest.mark.parametrize(
    "mutate",
    [pytest.param(mutate, id=case) for case, mutate, _, seen in CASES if seen],
)
def test_schema_rejects_what_it_can_express(mutate: Callable[[dict[str, Any]], None]) -> None:
    doc = base()
    mutate(doc)
    assert list(Draft202012Validator(SCHEMA).iter_errors(_jsonable(doc)))


def test_load_plan_errors_name_the_file(tmp_path: Path) -> None:
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text("[plan\nname = 1\n")
    with pytest.raises(PlanError, match=re.escape(str(bad_toml)) + ": invalid TOML"):
        load_plan(bad_toml)
    bad_utf8 = tmp_path / "bad-utf8.toml"
    bad_utf8.write_bytes(b'[plan]\nname = "\xff"\n')
    with pytest.raises(PlanError, match="not valid UTF-8 at byte 15"):
        load_plan(bad_utf8)
    invalid = tmp_path / "invalid.toml"
    invalid.write_text('[plan]\nname = "p"\nmax_batch = 9\n')
    with pytest.raises(PlanError) as info:
        load_plan(invalid)
    assert str(info.value) == f"{invalid}: plan.max_batch: must be between 1 and 3, got 9"
    assert info.value.key == "plan.max_batch"


def test_duplicate_toml_keys_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "dup.toml"
    path.write_text('[plan]\nname = "a"\nname = "b"\n')
    with pytest.raises(PlanError, match="invalid TOML"):
        load_plan(path)


def test_unquoted_toml_datetime_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "dt.toml"
    path.write_text('[plan]\nname = "p"\n[capsule]\ngoal = "g"\nexpires = 2027-01-01T00:00:00Z\n')
    with pytest.raises(PlanError, match=r"capsule\.expires: must be a string, got datetime"):
        load_plan(path)


def test_dependencies_in_any_file_order_are_fine() -> None:
    doc = {
        "plan": {"name": "p"},
        "task": [
            {"id": "b", "role": "r", "prompt": "p", "depends": ["a"]},
            {"id": "a", "role": "r", "prompt": "p"},
        ],
    }
    plan = parse_plan(doc)
    assert [(t.id, t.order) for t in plan.tasks] == [("b", 0), ("a", 1)]


def test_parse_does_not_mutate_its_input() -> None:
    doc = base()
    before = copy.deepcopy(doc)
    parse_plan(doc)
    assert doc == before


def _budget_toml(cost: str) -> str:
    return f'[plan]\nname = "p"\n[plan.budget]\ncost_usd = {cost}\n'


@pytest.mark.parametrize(
    ("cost", "micros"),
    [
        ("0.1", 100_000),
        ("0.3", 300_000),
        ("12.345678", 12_345_678),
        ("1.2500000000", 1_250_000),
        ("1e-6", 1),
        ("7", 7_000_000),
        ("1_000_000.0", 10**12),
    ],
)
def test_cost_is_read_as_an_exact_decimal(tmp_path: Path, cost: str, micros: int) -> None:
    """TOML floats are decoded as decimals: 0.1 + 0.2 style binary drift cannot creep in, and
    a value is a whole number of micro-dollars or an error (trailing zeros are the same value)."""
    path = tmp_path / "plan.toml"
    path.write_text(_budget_toml(cost))
    assert load_plan(path).budget == Limits(cost_micros=micros)


@pytest.mark.parametrize("cost", ["0.0000001", "12.3456789", "1e-7", "nan", "inf", "-0.5", "0"])
def test_cost_that_is_not_whole_micro_dollars_is_refused(tmp_path: Path, cost: str) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(_budget_toml(cost))
    with pytest.raises(PlanError) as info:
        load_plan(path)
    assert info.value.key == "plan.budget.cost_usd", str(info.value)


def test_timeouts_still_accept_toml_floats(tmp_path: Path) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(PLAN_TOML)
    t2 = load_plan(path).tasks[1]
    assert t2.timeout_s == 2.5 and isinstance(t2.timeout_s, float)


def test_plan_document_carries_the_issue_11_fields() -> None:
    """The verifier reads limits from the plan member: every new field is in it, in record
    units (integers only; seconds become milliseconds, an unset idle limit is null)."""
    doc = plan_document(parse_plan(base()))
    assert doc["max_in_flight"] == 8 and doc["max_attempts"] == 2
    assert doc["idle_ms"] == 120_000 and doc["lifetime_ms"] == 900_000
    assert doc["seal_every_records"] == 500 and doc["seal_every_ms"] == 30_000
    assert doc["budget"] == {"wall_ms": 3_600_000, "tokens": 2_000_000, "cost_micros": 12_500_000}
    assert doc["role_budgets"] == {
        "coder": {"wall_ms": None, "tokens": None, "cost_micros": 1},
        "tester": {"wall_ms": None, "tokens": 300_000, "cost_micros": None},
    }
    t1, t2 = doc["tasks"]
    assert t1["budget"] == {"wall_ms": 600_000, "tokens": 100_000, "cost_micros": 1_250_000}
    assert (t1["max_attempts"], t1["idle_ms"]) == (3, 60_000)
    assert t2["budget"] == {"wall_ms": None, "tokens": None, "cost_micros": None}
    assert (t2["max_attempts"], t2["idle_ms"]) == (None, None)
    assert "idle_s" not in doc and "idle_s" not in t2
    minimal = plan_document(parse_plan({"plan": {"name": "p"}}))
    assert minimal["idle_ms"] is None and minimal["lifetime_ms"] == 1_800_000


def _toml_blocks(text: str) -> list[str]:
    return re.findall(r"```toml\n(.*?)```", text, flags=re.DOTALL)


def test_spec_page_plan_example_parses() -> None:
    blocks = [b for b in _toml_blocks(SPEC_PAGE.read_text()) if b.startswith("[plan]")]
    assert blocks, "docs/spec/plan.md has no [plan] example"
    for block in blocks:
        parse_plan(tomllib.loads(block))


GLOBS = [
    "**",
    "src/**",
    "**/*.md",
    "a/**/b",
    "*.md",
    "src/?.py",
    "src/[ab].py",
    ".github/**",
    "...",
    "a.",
    "",
    "/src",
    "src/",
    "src//a",
    ".",
    "./a",
    "a/..",
    "..b",
    "a**",
    "***",
    "**a/b",
    "a\\b",
    "a\tb",
    "a\x7fb",
]
PATHS = [
    "src/a.py",
    "a",
    ".gitignore",
    ".github/workflows/ci.yml",
    "src/.git",
    "src/.GIT/x",
    ".git",
    "a/../b",
    "/a",
    "a/",
    "a//b",
    "./a",
    "..x",
    "x..",
    "a\\b",
    "a\nb",
    "",
    "src/*.py",
]


@pytest.mark.parametrize("glob", GLOBS)
def test_schema_glob_pattern_agrees_with_check_glob(glob: str) -> None:
    from harness.orchestrate.planfields import check_glob

    pattern = re.compile(SCHEMA["$defs"]["glob"]["pattern"])
    assert (pattern.search(glob) is not None) == (check_glob(glob) is None)


@pytest.mark.parametrize("path", PATHS)
def test_schema_path_pattern_agrees_with_check_rel_path(path: str) -> None:
    from harness.orchestrate.plan import check_rel_path

    pattern = re.compile(SCHEMA["$defs"]["path"]["pattern"])
    assert (pattern.search(path) is not None) == (check_rel_path(path) is None)
