"""Plan files: the TOML document an operator writes to describe a run.

Full specification: ``docs/spec/plan.md``; JSON Schema of the decoded document:
``schemas/plan.schema.json``. ``load_plan`` reads a file, ``parse_plan`` checks an already
decoded document; both return a ``Plan`` (``harness.orchestrate.model``) or raise ``PlanError``.
Parsing is strict: anything not described here is an error, and the message names the key path
(0-based array indices, e.g. ``task[1].gates[0].timout_s: unknown key``).

Format (TOML 1.0, UTF-8)::

    [plan]                      # required
    name = "demo"               # required: [A-Za-z0-9][A-Za-z0-9._-]{0,127}
    max_batch = 3               # tasks per batch, 1..3 (default 3)
    settle_ticks = 2            # quiescent ticks before the loop stops, 1..1000 (default 2)
    max_in_flight = 4           # batches in flight at once over all roles, 1..256 (default 4)
    max_attempts = 1            # attempts per task, 1..10 (default 1)
    idle_s = 120                # seconds without progress = hung, 1..1800 (default: absent, off)
    lifetime_s = 1800           # cap on any agent's life, 1..1800 (default 1800)
    seal_every_records = 1000   # checkpoint after at most N records, 1..10^7 (default 1000)
    seal_every_s = 60           # checkpoint at least every T seconds, 1..86400 (default 60)

    [plan.budget]               # optional: the run's budget; every key optional
    wall_s = 3600               # summed agent wall-clock, seconds, 1..10^7
    tokens = 2000000            # summed input + output tokens, 1..2^53-1
    cost_usd = 12.50            # summed cost in US dollars, an exact decimal with at most
                                # 6 decimals (whole micro-dollars), 0.000001..1000000

    [plan.budget.role.coder]    # optional: a role's budget (same keys); the role must be
    tokens = 500000             # the role of at least one task

    [plan.concurrency]          # optional: role -> batches of that role in flight at once,
    coder = 2                   # 1..1000 (default 1); every key must be a role some task has

    [capsule]                   # optional intent capsule (see harness.orchestrate.capsule)
    goal = "..."                # required, non-empty
    actions = ["edit", "delete", "gate", "merge"]  # allowed action classes (default ["edit"])
    scope = ["src/**", "tests/**"]                 # globs the run may change (default ["**"])
    adapters = ["scripted"]     # allowed adapters (default []: any adapter)
    egress = []                 # allowed external hosts, lower-case names (default []: none)
    expires = "2027-01-01T00:00:00.000000Z"  # a quoted string, YYYY-MM-DDTHH:MM:SS.ffffffZ (UTC)

    [adapter.mycli]             # zero or more plan-defined command adapters (a name that is
                                # not a built-in adapter); tasks use it as adapter = "mycli"
    command = ["mycli", "--yes", "--model", "{model}"]  # required, non-empty argv template;
                                # placeholders {prompt_file} {worktree} {model}; the prompt
                                # itself goes to stdin, never on the command line
    env = ["MYCLI_API_KEY"]     # env variable names it may get, only with egress (default [])
    model = "m1"                # default for {model} (optional, non-empty)
    models = ["openai"]         # optional: the agent is proxied and reaches only these routes

    [models.anthropic]          # zero or more model upstreams of the recording proxy
    family = "anthropic"        # required: "anthropic" or "openai"
    base = "https://api.anthropic.com"  # required: https://host[:port][/path] (http: loopback)
    key_env = "ANTHROPIC_API_KEY"       # optional: the operator's variable holding the key
    path_prefix = "/v1/"        # optional (see harness.orchestrate.modelroutes)

    [[task]]                    # zero or more; order in the file = creation order (``order``)
    id = "t1"                   # required: [a-z0-9][a-z0-9_-]{0,63}, unique in the plan
    role = "coder"              # required: a name
    prompt = "..."              # required, non-empty
    priority = 10               # integer within +-(2^53-1), higher runs first (default 0)
    adapter = "scripted"        # a name (default "scripted")
    scope = ["src/**"]          # globs the task may change (default ["**"]; [] = nothing)
    depends = []                # ids of tasks that must be DONE first (default [])
    tools = ["edit"]            # tool names, or "mcp:<server>" (default [])
    timeout_s = 60              # wall-clock limit in seconds, > 0 (default 300)
    model = "scripted-model"    # optional, non-empty
    budget = { wall_s = 600, tokens = 100000, cost_usd = 1.25 }  # optional, same keys
    max_attempts = 3            # overrides [plan] max_attempts (1..10)
    idle_s = 60                 # overrides [plan] idle_s (1..1800)
    models = ["anthropic"]      # narrows a proxied adapter's routes (defined, same family)

    [[task.gates]]              # zero or more quality gates, run in this order
    name = "tests"              # required: a name, unique within the task
    command = ["python", "-m", "pytest", "-q"]     # required, non-empty argv
    timeout_s = 120             # > 0 (default 120)

    [[task.edits]]              # zero or more (scripted adapter): one per path
    path = "src/app.py"         # required: normalized relative POSIX path inside the task scope
    content = "..."             # the new file text; omit it (or set delete = true) to delete
    delete = false              # optional; true together with content is an error

A *name* (role, adapter, tool, MCP server, gate) matches ``[A-Za-z0-9][A-Za-z0-9._-]{0,63}``.
Lists of names, ids, globs, hosts and actions must not repeat an entry. Integers are TOML
integers (booleans are not integers); timeouts may be integers or floats, finite and > 0.
``load_plan`` decodes TOML floats as ``decimal.Decimal`` so that ``cost_usd`` is exact.

Whole-plan rules: task ids unique; every ``depends`` entry names a task of the plan; no
dependency cycle (a task depending on itself is a cycle; the error names the cycle as
``a -> b -> a``, starting at the task that comes first in the file); every edit path inside
its task's scope; every ``[plan.concurrency]`` and ``[plan.budget.role]`` key is the role of
at least one task; model routes defined, of the adapter's families, and with a capsule on its
``egress`` hosts (``harness.orchestrate.modelroutes.check_task_models``).

Globs (task and capsule scopes) are repository-relative POSIX patterns, matched against whole
normalized paths, case-sensitively: ``*`` matches any run of characters within one segment
(a leading dot included), ``?`` one character within a segment, and a segment that is exactly
``**`` matches any number of whole segments (zero or more; as the last segment, one or more,
so ``src/**`` matches ``src/a/b.py`` but not ``src`` itself). Everything else is literal
(``[`` included). A glob must not be empty, absolute (leading ``/``), contain ``\\``, a control
character, an empty segment (``a//b``, trailing ``/``), a ``.`` or ``..`` segment, or ``**``
inside a longer segment (``a**``). Paths (edits, actions) follow the same rules without the
wildcard meaning, and must not have a ``.git`` segment (any case).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from harness.verify.rules.configchain import TEMPLATES
from harness.verify.rules.controller import Params, parse_params
from harness.verify.rules.scope import check_rel_path, check_time, in_scope

from .model import NO_BUDGET, CapsuleSpec, CommandSpec, Edit, Gate, Plan, TaskSpec
from .modelroutes import check_task_models, parse_models, parse_route_list
from .planfields import (
    _ADAPTER_KEYS,
    _CAPSULE_KEYS,
    _EDIT_KEYS,
    _GATE_KEYS,
    _PLAN_KEYS,
    _RESERVED_ENV,
    _RUN_BUDGET_KEYS,
    _TASK_KEYS,
    _TOP_KEYS,
    BUILTIN_ADAPTERS,
    ENV_NAME_RE,
    MAX_ATTEMPTS,
    MAX_BATCH_LIMIT,
    MAX_IDLE_S,
    MAX_IN_FLIGHT,
    MAX_LIFETIME_S,
    MAX_SEAL_RECORDS,
    MAX_SEAL_S,
    NAME_RE,
    PLAN_NAME_RE,
    SAFE_INT,
    PlanError,
    _action,
    _budget,
    _glob,
    _host,
    _int,
    _join,
    _kind,
    _list,
    _name,
    _role_budgets,
    _str,
    _table,
    _task_id,
    _timeout,
    _tool,
    _unique_strs,
)
from .rounds.spec import parse_rounds

__all__ = ["PlanError", "check_rel_path", "load_plan", "parse_plan"]
"""``PlanError`` and the typed readers live in ``harness.orchestrate.planfields``."""


def _parse_gate(value: object, key: str) -> Gate:
    table = _table(value, key, _GATE_KEYS, ("name", "command"))
    name = _name(table["name"], _join(key, "name"))
    argv_key = _join(key, "command")
    argv = _list(table["command"], argv_key)
    if not argv:
        raise PlanError(argv_key, "must not be empty")
    command = tuple(_str(arg, f"{argv_key}[{i}]") for i, arg in enumerate(argv))
    timeout = 120.0
    if "timeout_s" in table:
        timeout = _timeout(table["timeout_s"], _join(key, "timeout_s"))
    return Gate(name=name, command=command, timeout_s=timeout)


def _parse_edit(value: object, key: str, scope: tuple[str, ...]) -> Edit:
    table = _table(value, key, _EDIT_KEYS, ("path",))
    path_key = _join(key, "path")
    path = _str(table["path"], path_key)
    problem = check_rel_path(path)
    if problem is not None:
        raise PlanError(path_key, f"bad path {path!r}: {problem}")
    if not in_scope(path, scope):
        raise PlanError(
            path_key, f"{path!r} is outside the task scope ({', '.join(scope) or 'empty'})"
        )
    content: str | None = None
    if "content" in table:
        content = table["content"]
        if not isinstance(content, str):
            raise PlanError(_join(key, "content"), f"must be a string, got {_kind(content)}")
    if "delete" in table:
        delete = table["delete"]
        delete_key = _join(key, "delete")
        if type(delete) is not bool:
            raise PlanError(delete_key, f"must be a boolean, got {_kind(delete)}")
        if delete and content is not None:
            raise PlanError(delete_key, "delete = true and content cannot both be given")
        if not delete and content is None:
            raise PlanError(delete_key, "delete = false needs content")
    return Edit(path=path, content=content)


def _parse_task(value: object, key: str, order: int) -> TaskSpec:
    table = _table(value, key, _TASK_KEYS, ("id", "role", "prompt"))

    def sub(name: str) -> str:
        return _join(key, name)

    task_id = _task_id(table["id"], sub("id"))
    role = _name(table["role"], sub("role"))
    prompt = _str(table["prompt"], sub("prompt"))
    priority = _int(table.get("priority", 0), sub("priority"), -SAFE_INT, SAFE_INT)
    adapter = _name(table.get("adapter", "scripted"), sub("adapter"))
    scope = _unique_strs(table.get("scope", ["**"]), sub("scope"), _glob)
    depends = _unique_strs(table.get("depends", []), sub("depends"), _task_id)
    tools = _unique_strs(table.get("tools", []), sub("tools"), _tool)
    timeout = _timeout(table.get("timeout_s", 300.0), sub("timeout_s"))
    model = _str(table["model"], sub("model")) if "model" in table else None
    budget = _budget(table["budget"], sub("budget")) if "budget" in table else NO_BUDGET
    max_attempts = None
    if "max_attempts" in table:
        max_attempts = _int(table["max_attempts"], sub("max_attempts"), 1, MAX_ATTEMPTS)
    idle_s = _int(table["idle_s"], sub("idle_s"), 1, MAX_IDLE_S) if "idle_s" in table else None

    gates_key = sub("gates")
    gates = tuple(
        _parse_gate(item, f"{gates_key}[{i}]")
        for i, item in enumerate(_list(table.get("gates", []), gates_key))
    )
    seen_gates: dict[str, int] = {}
    for i, gate in enumerate(gates):
        if gate.name in seen_gates:
            raise PlanError(
                f"{gates_key}[{i}].name",
                f"gate name {gate.name!r} repeats {gates_key}[{seen_gates[gate.name]}]",
            )
        seen_gates[gate.name] = i

    edits_key = sub("edits")
    edits = tuple(
        _parse_edit(item, f"{edits_key}[{i}]", scope)
        for i, item in enumerate(_list(table.get("edits", []), edits_key))
    )
    seen_paths: dict[str, int] = {}
    for i, edit in enumerate(edits):
        if edit.path in seen_paths:
            raise PlanError(
                f"{edits_key}[{i}].path",
                f"path {edit.path!r} repeats {edits_key}[{seen_paths[edit.path]}]",
            )
        seen_paths[edit.path] = i

    requirements = _unique_strs(table.get("requirements", []), sub("requirements"), _name)
    usage_tokens = None
    if "usage_tokens" in table:
        usage_tokens = _int(table["usage_tokens"], sub("usage_tokens"), 0, SAFE_INT)
    strategy_edits = _strategy_edits(table.get("strategy_edits"), sub("strategy_edits"), scope)
    models = parse_route_list(table["models"], sub("models")) if "models" in table else None

    rounds = None
    if "rounds" in table:
        rounds = parse_rounds(
            table["rounds"], sub("rounds"), lambda item, at: _parse_edit(item, at, scope)
        )
        if rounds.auditor_writes is not None:
            problem = check_rel_path(rounds.auditor_writes)
            if problem is not None:
                raise PlanError(sub("rounds.auditor_writes"), problem)

    return TaskSpec(
        id=task_id,
        role=role,
        prompt=prompt,
        priority=priority,
        adapter=adapter,
        scope=scope,
        depends=depends,
        tools=tools,
        gates=gates,
        edits=edits,
        timeout_s=timeout,
        model=model,
        order=order,
        budget=budget,
        max_attempts=max_attempts,
        idle_s=idle_s,
        rounds=rounds,
        requirements=requirements,
        strategy_edits=strategy_edits,
        usage_tokens=usage_tokens,
        models=models,
    )


def _strategy_edits(value: object, key: str, scope: tuple[str, ...]) -> dict[str, tuple[Edit, ...]]:
    """``strategy_edits = { focused = [...], stepwise = [...] }``: per prompt template other
    than ``default``, the scripted agent's edits under it."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PlanError(key, f"must be a table, got {_kind(value)}")
    out: dict[str, tuple[Edit, ...]] = {}
    for name, items in value.items():
        at = _join(key, str(name))
        if name not in TEMPLATES or name == TEMPLATES[0]:
            raise PlanError(
                at, f"not a prompt template after the default: {', '.join(TEMPLATES[1:])}"
            )
        out[str(name)] = tuple(
            _parse_edit(item, f"{at}[{i}]", scope) for i, item in enumerate(_list(items, at))
        )
    return dict(sorted(out.items()))


def _parse_control(value: object) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise PlanError("plan.control", f"must be a table, got {_kind(value)}")
    params = parse_params(dict(value))
    if isinstance(params, str):
        raise PlanError("plan.control", params)
    return params.record()


def _parse_capsule(value: object) -> CapsuleSpec:
    key = "capsule"
    table = _table(value, key, _CAPSULE_KEYS, ("goal",))
    goal = _str(table["goal"], "capsule.goal")
    defaults = CapsuleSpec(goal=goal)
    expires = defaults.expires
    if "expires" in table:
        expires = _str(table["expires"], "capsule.expires")
        problem = check_time(expires)
        if problem is not None:
            raise PlanError("capsule.expires", f"{expires!r}: {problem}")
    return CapsuleSpec(
        goal=goal,
        actions=_unique_strs(
            table.get("actions", list(defaults.actions)), "capsule.actions", _action
        ),
        scope=_unique_strs(table.get("scope", list(defaults.scope)), "capsule.scope", _glob),
        adapters=_unique_strs(table.get("adapters", []), "capsule.adapters", _name),
        egress=_unique_strs(table.get("egress", []), "capsule.egress", _host),
        expires=expires,
    )


def _check_rounds_roles(tasks: Sequence[TaskSpec]) -> None:
    """A rounds task has a role of its own: it is always a batch of one, and its role's
    concurrency (one by default) keeps a second rounds task of that role from starting."""
    for i, task in enumerate(tasks):
        if task.rounds is None:
            continue
        other = next((t for t in tasks if t.role == task.role and t.id != task.id), None)
        if other is not None:
            raise PlanError(
                f"task[{i}].role",
                f"a rounds task needs a role of its own; task {other.id!r} also has "
                f"role {task.role!r}",
            )


def _find_cycle(tasks: Sequence[TaskSpec]) -> list[str] | None:
    """A dependency cycle (first node repeated at the end), or None. Iterative DFS."""
    deps = {task.id: task.depends for task in tasks}
    order = {task.id: task.order for task in tasks}
    color: dict[str, int] = {}  # absent: unvisited, 1: on the stack, 2: finished
    for task in tasks:
        if task.id in color:
            continue
        stack: list[tuple[str, int]] = [(task.id, 0)]
        color[task.id] = 1
        while stack:
            node, index = stack[-1]
            children = deps[node]
            if index == len(children):
                stack.pop()
                color[node] = 2
                continue
            stack[-1] = (node, index + 1)
            child = children[index]
            state = color.get(child)
            if state is None:
                color[child] = 1
                stack.append((child, 0))
            elif state == 1:
                path = [name for name, _ in stack]
                cycle = path[path.index(child) :]
                start = min(range(len(cycle)), key=lambda i: order[cycle[i]])
                cycle = cycle[start:] + cycle[:start]
                return [*cycle, cycle[0]]
    return None


def _env_name(item: object, key: str) -> str:
    name = _str(item, key, ENV_NAME_RE, "environment variable name")
    if name in _RESERVED_ENV:
        raise PlanError(key, f"{name} is set by the harness, not passed through")
    return name


def _parse_commands(value: object) -> dict[str, CommandSpec]:
    if not isinstance(value, Mapping):
        raise PlanError("adapter", f"must be a table of [adapter.NAME] tables, not {_kind(value)}")
    out: dict[str, CommandSpec] = {}
    for raw_name, entry in value.items():
        name = str(raw_name)
        key = _join("adapter", name)
        if not NAME_RE.fullmatch(name):
            raise PlanError(key, f"{name!r} is not a valid adapter name")
        if name in BUILTIN_ADAPTERS:
            raise PlanError(key, f"{name!r} is a built-in adapter and cannot be redefined")
        table = _table(entry, key, _ADAPTER_KEYS, ("command",))
        command = _list(table["command"], _join(key, "command"))
        if not command:
            raise PlanError(_join(key, "command"), "must be a non-empty argv list")
        argv = tuple(_str(item, f"{_join(key, 'command')}[{i}]") for i, item in enumerate(command))
        env = _unique_strs(table.get("env", []), _join(key, "env"), _env_name)
        model = _str(table["model"], _join(key, "model")) if "model" in table else None
        routes = None
        if "models" in table:
            routes = parse_route_list(table["models"], _join(key, "models"))
        out[name] = CommandSpec(name=name, command=argv, env=env, model=model, models=routes)
    return dict(sorted(out.items()))


def parse_plan(data: Mapping[str, Any]) -> Plan:
    """Check a decoded plan document (see the module docstring) and build the ``Plan``."""
    root = _table(data, "", _TOP_KEYS, ("plan",))
    head = _table(root["plan"], "plan", _PLAN_KEYS, ("name",))
    name = _str(head["name"], "plan.name", PLAN_NAME_RE, "plan name")
    max_batch = _int(head.get("max_batch", 3), "plan.max_batch", 1, MAX_BATCH_LIMIT)
    settle_ticks = _int(head.get("settle_ticks", 2), "plan.settle_ticks", 1, 1000)
    concurrency: dict[str, int] = {}
    if "concurrency" in head:
        limits = head["concurrency"]
        if not isinstance(limits, Mapping):
            raise PlanError("plan.concurrency", f"must be a table, got {_kind(limits)}")
        for role, limit in limits.items():
            role_key = _join("plan.concurrency", str(role))
            if not NAME_RE.fullmatch(str(role)):
                raise PlanError(role_key, f"{role!r} is not a valid role name")
            concurrency[str(role)] = _int(limit, role_key, 1, 1000)
    max_in_flight = _int(head.get("max_in_flight", 4), "plan.max_in_flight", 1, MAX_IN_FLIGHT)
    max_attempts = _int(head.get("max_attempts", 1), "plan.max_attempts", 1, MAX_ATTEMPTS)
    idle_s = _int(head["idle_s"], "plan.idle_s", 1, MAX_IDLE_S) if "idle_s" in head else None
    lifetime_s = _int(head.get("lifetime_s", 1800), "plan.lifetime_s", 1, MAX_LIFETIME_S)
    seal_every_records = _int(
        head.get("seal_every_records", 1000), "plan.seal_every_records", 1, MAX_SEAL_RECORDS
    )
    seal_every_s = _int(head.get("seal_every_s", 60), "plan.seal_every_s", 1, MAX_SEAL_S)
    run_budget, role_budgets = NO_BUDGET, {}
    if "budget" in head:
        run_budget = _budget(head["budget"], "plan.budget", _RUN_BUDGET_KEYS)
        if "role" in head["budget"]:
            role_budgets = _role_budgets(head["budget"]["role"], "plan.budget.role")

    review_wait_s = _int(head.get("review_wait_s", 300), "plan.review_wait_s", 1, 3600)
    control = _parse_control(head["control"]) if "control" in head else Params().record()
    capsule = _parse_capsule(root["capsule"]) if "capsule" in root else None
    commands = _parse_commands(root["adapter"]) if "adapter" in root else {}
    models = parse_models(root["models"]) if "models" in root else {}

    task_items = root.get("task", [])
    if not isinstance(task_items, list | tuple):
        raise PlanError("task", f"must be an array of tables ([[task]]), got {_kind(task_items)}")
    tasks = tuple(_parse_task(item, f"task[{i}]", i) for i, item in enumerate(task_items))

    first_index: dict[str, int] = {}
    for i, task in enumerate(tasks):
        if task.id in first_index:
            raise PlanError(
                f"task[{i}].id",
                f"duplicate task id {task.id!r} (first at task[{first_index[task.id]}])",
            )
        first_index[task.id] = i
    for i, task in enumerate(tasks):
        for j, dep in enumerate(task.depends):
            if dep not in first_index:
                raise PlanError(f"task[{i}].depends[{j}]", f"unknown task id {dep!r}")
    cycle = _find_cycle(tasks)
    if cycle is not None:
        raise PlanError(
            f"task[{first_index[cycle[0]]}].depends", f"dependency cycle: {' -> '.join(cycle)}"
        )
    _check_rounds_roles(tasks)
    roles = {task.role for task in tasks}
    for role in concurrency:
        if role not in roles:
            raise PlanError(_join("plan.concurrency", role), f"no task has role {role!r}")
    for role in role_budgets:
        if role not in roles:
            raise PlanError(_join("plan.budget.role", role), f"no task has role {role!r}")
    check_task_models(tasks, models, commands, capsule.egress if capsule is not None else None)

    return Plan(
        name=name,
        tasks=tasks,
        max_batch=max_batch,
        concurrency=dict(sorted(concurrency.items())),
        capsule=capsule,
        settle_ticks=settle_ticks,
        commands=commands,
        max_in_flight=max_in_flight,
        max_attempts=max_attempts,
        idle_s=idle_s,
        lifetime_s=lifetime_s,
        seal_every_records=seal_every_records,
        seal_every_s=seal_every_s,
        budget=run_budget,
        role_budgets=role_budgets,
        review_wait_s=review_wait_s,
        control=control,
        models=models,
    )


def load_plan(path: Path) -> Plan:
    """Read and check a plan file; every error is a ``PlanError`` naming the file."""
    source = str(path)
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlanError("", f"not valid UTF-8 at byte {exc.start}", source=source) from None
    try:
        data = tomllib.loads(text, parse_float=Decimal)
    except tomllib.TOMLDecodeError as exc:
        raise PlanError("", f"invalid TOML: {exc}", source=source) from None
    try:
        return parse_plan(data)
    except PlanError as exc:
        raise PlanError(exc.key, exc.message, source=source) from None
