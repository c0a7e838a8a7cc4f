"""Model routes: which upstreams a proxied agent may reach, as the plan and the defaults say.

An agent CLI calls its model itself. For a *proxied* adapter the runtime puts the recording
proxy (``harness.orchestrate.proxy``) between them: the agent's base URLs point at the proxy,
and the proxy forwards only to the batch's routes (docs/spec/runtime.md §11a, decision 0047).
This module is the pure part of that: the plan's ``[models.<route>]`` table, the built-in
routes, the routes each adapter speaks by default, a task's own narrowing (``models``), and
what the capsule must allow. The operator's key is never in the plan: a route names the
environment variable that holds it (``key_env``), read by the runtime when it starts the
proxy and given to the proxy only.

Plan syntax::

    [models.anthropic]                    # route name: [a-z][a-z0-9-]{0,31}
    family = "anthropic"                  # "anthropic", "openai" or "google" (required)
    base = "https://api.anthropic.com"    # https://host[:port][/path]; http only for loopback
    key_env = "ANTHROPIC_API_KEY"         # optional: the operator's variable with the key
    path_prefix = "/v1/"                  # optional: forwarded paths must start with it

A route the plan does not define falls back to the built-in of that name (``anthropic``:
``https://api.anthropic.com``, ``ANTHROPIC_API_KEY``; ``openai``:
``https://api.openai.com/v1``, ``OPENAI_API_KEY``; ``google`` (the Gemini API):
``https://generativelanguage.googleapis.com``, ``GEMINI_API_KEY``, paths under ``/v1beta/``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from harness.verify.modelkey import FAMILIES, Family

from .planfields import ENV_NAME_RE, PlanError, _join, _kind, _str, _table
from .proxy.upstream import forwarded_prefix

__all__ = [
    "BUILTIN_ROUTES",
    "DEFAULT_ROUTES",
    "PLACEHOLDER_KEY",
    "ROUTE_RE",
    "ModelRoute",
    "adapter_routes",
    "check_task_models",
    "key_warnings",
    "parse_models",
    "parse_route_list",
    "resolve",
    "task_routes",
]

ROUTE_RE: Final = re.compile(r"[a-z][a-z0-9-]{0,31}")
LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "localhost", "::1"})
PLACEHOLDER_KEY: Final = "harness-proxy"
"""The key an agent sees (some CLIs refuse to start without one); the proxy drops it."""
_MODEL_KEYS: Final = ("family", "base", "key_env", "path_prefix")


@dataclass(frozen=True)
class ModelRoute:
    """One upstream a proxied agent may reach through the proxy route ``/<route>``."""

    route: str
    family: Family
    base: str
    """``scheme://host[:port][/path]``: the origin the proxy connects to, and the path the
    agent's SDK puts before its API paths (the OpenAI SDK's base ends in ``/v1``)."""
    key_env: str | None = None
    """The operator's environment variable holding the key (None: no credential)."""
    path_prefix: str | None = None
    """Forwarded paths must start with it (None: the base's path + ``/``, else the family's
    API version, ``/v1/`` or Google's ``/v1beta/``: ``proxy.upstream.forwarded_prefix``)."""

    @property
    def host(self) -> str:
        return (urlsplit(self.base).hostname or "").lower()

    @property
    def origin(self) -> str:
        parts = urlsplit(self.base)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def base_path(self) -> str:
        return urlsplit(self.base).path.rstrip("/")

    @property
    def prefix(self) -> str:
        return forwarded_prefix(self.family, self.base, self.path_prefix)


BUILTIN_ROUTES: Final[Mapping[str, ModelRoute]] = {
    "anthropic": ModelRoute("anthropic", "anthropic", "https://api.anthropic.com",
                            "ANTHROPIC_API_KEY"),
    "openai": ModelRoute("openai", "openai", "https://api.openai.com/v1", "OPENAI_API_KEY"),
    "google": ModelRoute("google", "google", "https://generativelanguage.googleapis.com",
                         "GEMINI_API_KEY"),
}  # fmt: skip
DEFAULT_ROUTES: Final[Mapping[str, tuple[str, ...]]] = {
    "claude": ("anthropic",),
    "codex": ("openai",),
    "aider": ("anthropic", "openai"),
    "goose": ("anthropic", "openai"),
    "opencode": ("anthropic", "openai"),
    "gemini": ("google",),
}
"""Built-in adapters that are proxied, and the routes they get unless a task narrows them.
``scripted`` (its own journal) and plan command adapters without ``models`` are not
proxied."""


def _check_base(base: str, key: str) -> None:
    parts = urlsplit(base)
    try:
        port = parts.port
    except ValueError:
        raise PlanError(key, f"{base!r} has a bad port") from None
    del port
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("https", "http") or not host:
        raise PlanError(key, f"{base!r} must be https://host[:port][/path]")
    if parts.scheme == "http" and host not in LOOPBACK_HOSTS:
        raise PlanError(key, f"{base!r}: http:// only for a loopback host (127.0.0.1, localhost)")
    if parts.query or parts.fragment or parts.username or parts.password or "@" in parts.netloc:
        raise PlanError(key, f"{base!r} must not hold a query, fragment or userinfo")
    if any(ord(c) < 0x21 or ord(c) == 0x7F or c == "\\" for c in base):
        raise PlanError(key, f"{base!r} holds a control character, a space or a backslash")
    if any(segment in (".", "..") for segment in parts.path.split("/")):
        raise PlanError(key, f"{base!r} holds a '.' or '..' path segment")


def _check_prefix(prefix: str, key: str) -> None:
    if not prefix.startswith("/") or any(ord(c) < 0x21 or c in "\\?#%" for c in prefix):
        raise PlanError(key, f"{prefix!r} must be an absolute path (no query, '%', '\\\\')")
    if any(segment in (".", "..") for segment in prefix.split("/")):
        raise PlanError(key, f"{prefix!r} holds a '.' or '..' path segment")


def parse_models(value: object) -> dict[str, ModelRoute]:
    """The plan's ``[models.<route>]`` tables (sorted by route); ``PlanError`` naming the key."""
    if not isinstance(value, Mapping):
        raise PlanError("models", f"must be a table of [models.ROUTE] tables, not {_kind(value)}")
    out: dict[str, ModelRoute] = {}
    for raw, entry in value.items():
        route = str(raw)
        key = _join("models", route)
        if not ROUTE_RE.fullmatch(route):
            raise PlanError(key, f"{route!r} is not a route name ({ROUTE_RE.pattern})")
        table = _table(entry, key, _MODEL_KEYS, ("family", "base"))
        family = _str(table["family"], _join(key, "family"))
        if family not in FAMILIES:
            raise PlanError(_join(key, "family"), f"{family!r} is not one of {', '.join(FAMILIES)}")
        base = _str(table["base"], _join(key, "base"))
        _check_base(base, _join(key, "base"))
        key_env = None
        if "key_env" in table:
            key_env = _str(table["key_env"], _join(key, "key_env"), ENV_NAME_RE,
                           "environment variable name")  # fmt: skip
        prefix = None
        if "path_prefix" in table:
            prefix = _str(table["path_prefix"], _join(key, "path_prefix"))
            _check_prefix(prefix, _join(key, "path_prefix"))
        out[route] = ModelRoute(route, family, base, key_env, prefix)
    return dict(sorted(out.items()))


def parse_route_list(value: object, key: str) -> tuple[str, ...]:
    """A ``models = [...]`` list: distinct route names, at least one."""
    if not isinstance(value, list | tuple):
        raise PlanError(key, f"must be an array of route names, got {_kind(value)}")
    out: list[str] = []
    for i, item in enumerate(value):
        name = _str(item, f"{key}[{i}]")
        if not ROUTE_RE.fullmatch(name):
            raise PlanError(f"{key}[{i}]", f"{name!r} is not a route name ({ROUTE_RE.pattern})")
        if name in out:
            raise PlanError(f"{key}[{i}]", f"route {name!r} repeats")
        out.append(name)
    if not out:
        raise PlanError(key, "must name at least one route")
    return tuple(out)


def resolve(route: str, models: Mapping[str, ModelRoute]) -> ModelRoute | None:
    """The plan's route of that name, else the built-in one, else None."""
    return models.get(route) or BUILTIN_ROUTES.get(route)


def adapter_routes(adapter: str, commands: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The routes an adapter gets by default; None when it is not proxied."""
    spec = commands.get(adapter)
    if spec is not None:
        routes = getattr(spec, "models", None)
        return tuple(routes) if routes else None
    return DEFAULT_ROUTES.get(adapter)


def task_routes(task: Any, commands: Mapping[str, Any]) -> tuple[str, ...] | None:
    """A task's routes: its own ``models`` when set, else its adapter's; None: not proxied."""
    default = adapter_routes(task.adapter, commands)
    if default is None:
        return None
    own: tuple[str, ...] | None = getattr(task, "models", None)
    return own if own else default


def batch_routes(tasks: Sequence[Any], commands: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The routes of a batch (one process): those every task has, in the first task's order
    (never more than any task's grant); None when the adapter is not proxied."""
    lists = [task_routes(task, commands) for task in tasks]
    if not lists or any(routes is None for routes in lists):
        return None
    first = lists[0]
    assert first is not None
    return tuple(r for r in first if all(r in (other or ()) for other in lists[1:]))


def check_task_models(
    tasks: Sequence[Any],
    models: Mapping[str, ModelRoute],
    commands: Mapping[str, Any],
    capsule_egress: Sequence[str] | None,
) -> None:
    """Whole-plan rules: a task's ``models`` only on a proxied adapter, every route defined
    and of a family its adapter speaks; every route of a plan adapter defined; with a
    capsule, every upstream host a task may reach is among the capsule's ``egress`` hosts."""
    for name, spec in commands.items():
        for j, route in enumerate(getattr(spec, "models", None) or ()):
            if resolve(route, models) is None:
                raise PlanError(f"adapter.{name}.models[{j}]", f"route {route!r} is not defined")
    for i, task in enumerate(tasks):
        own: tuple[str, ...] | None = getattr(task, "models", None)
        default = adapter_routes(task.adapter, commands)
        if own:
            if default is None:
                raise PlanError(
                    f"task[{i}].models",
                    f"adapter {task.adapter!r} is not proxied: it takes no model routes",
                )
            families = {r.family for r in (resolve(d, models) for d in default) if r is not None}
            for j, route in enumerate(own):
                found = resolve(route, models)
                if found is None:
                    raise PlanError(f"task[{i}].models[{j}]", f"route {route!r} is not defined")
                if found.family not in families:
                    raise PlanError(
                        f"task[{i}].models[{j}]",
                        f"route {route!r} is {found.family}; adapter {task.adapter!r} speaks "
                        f"{', '.join(sorted(families))}",
                    )
        if capsule_egress is None:
            continue
        for route in task_routes(task, commands) or ():
            found = resolve(route, models)
            if found is not None and found.host not in capsule_egress:
                raise PlanError(
                    f"task[{i}]",
                    f"model route {route!r} reaches {found.host}, which is not in the "
                    "capsule's egress hosts",
                )


def key_warnings(tasks: Sequence[Any], plan_models: Mapping[str, ModelRoute],
                 commands: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:  # fmt: skip
    """Routes some task uses whose ``key_env`` the runtime's environment does not set: a live
    run then forwards their requests without a key (the upstream refuses them)."""
    used: list[str] = []
    for task in tasks:
        for route in task_routes(task, commands) or ():
            if route not in used:
                used.append(route)
    out = []
    for name in used:
        found = resolve(name, plan_models)
        if found is not None and found.key_env and not env.get(found.key_env):
            out.append(
                f"model route {name!r}: {found.key_env} is not set, so its requests go "
                f"upstream ({found.host}) without a key"
            )
    return out
