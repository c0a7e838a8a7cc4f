"""Which process gets what: network egress, adapter environment names, stdin, refusal.

* **Egress** is granted by the task's capabilities, not by its adapter: a task is granted the
  network when one of its *tools* carries ``external_comm`` in the effective capability matrix
  (e.g. ``web``, ``fetch``, ``shell``). An adapter's own ``external_comm`` tag says what the
  program could do, not what the operator allowed; it is lowered by the sandbox instead (the
  trifecta rule, ``harness.verify.rules.trifecta``). A batch shares one process, so it gets the
  network only when every task in it is granted egress (never more than any task's grant).
* **Adapter environment**: ``Adapter.env_names`` (optional attribute; e.g. the model API key
  variable), passed only with egress (``harness.orchestrate.sandbox.env``), and never to a
  *proxied* agent, which gets the recording proxy's variables instead (base URLs, placeholder
  keys: ``harness.orchestrate.runner.proxied``): the real key reaches the proxy only.
* **Prompt**: ``Adapter.stdin(request)`` (optional method) gives the bytes written to the
  process's stdin; adapters never put the prompt on argv.
* **Refusal**: where no sandbox can be had, a plan that uses any adapter other than the
  deterministic ``scripted`` agent is refused before anything is recorded, unless the operator
  opted out explicitly (``Settings.opt_out``, ``harness run --no-sandbox``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Final

from ..capabilities import CapabilityMatrix, Tag
from ..model import Plan, TaskSpec
from .spawn import Sandbox

__all__ = [
    "TRUSTED_ADAPTERS",
    "SandboxUnavailableError",
    "adapter_env_names",
    "adapter_stdin",
    "argv_files",
    "batch_network",
    "check_sandboxed",
    "grants_egress",
]

TRUSTED_ADAPTERS: Final = frozenset({"scripted"})
"""Adapters that may run unsandboxed without an opt-out: the harness's own deterministic
agent, which executes no model output."""


class SandboxUnavailableError(RuntimeError):
    """No sandbox here, the plan needs one, and the operator did not opt out."""


def grants_egress(task: TaskSpec, matrix: CapabilityMatrix) -> bool:
    """Whether the task's capabilities (its tools) grant network egress."""
    return any(Tag.EXTERNAL_COMM in matrix.tool_tags(tool) for tool in task.tools)


def batch_network(tasks: Sequence[TaskSpec], matrix: CapabilityMatrix) -> bool:
    """A batch's process gets the network only when every one of its tasks is granted it."""
    return bool(tasks) and all(grants_egress(task, matrix) for task in tasks)


def adapter_env_names(adapter: Any) -> tuple[str, ...]:
    names = getattr(adapter, "env_names", ())
    return tuple(str(name) for name in names)


def adapter_stdin(adapter: Any, request: Any) -> bytes | None:
    method = getattr(adapter, "stdin", None)
    if method is None:
        return None
    data = method(request)
    return data if data is None or isinstance(data, bytes) else bytes(data)


def argv_files(argv: Sequence[str]) -> list[str]:
    """Arguments after the program that name existing files by absolute path (a script the
    program runs): mounted read-only, one file each, unless inside the state or keys folder."""
    return [arg for arg in argv[1:] if os.path.isabs(arg) and os.path.isfile(arg)]


def check_sandboxed(plan: Plan, sandbox: Sandbox) -> None:
    """Refuse a plan that needs a sandbox this machine cannot give (no opt-out)."""
    if sandbox.available or sandbox.settings.opt_out:
        return
    needing = sorted({t.adapter for t in plan.tasks if t.adapter not in TRUSTED_ADAPTERS})
    if needing:
        raise SandboxUnavailableError(
            f"no sandbox available ({sandbox.support.reason}); adapter(s) "
            f"{', '.join(needing)} run only sandboxed. Install bubblewrap, or opt out "
            "explicitly with --no-sandbox (recorded in the evidence)"
        )
