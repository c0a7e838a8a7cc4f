"""The generic command adapter: any program, configured with an argv template.

Usable from a plan without code (docs/spec/plan.md, ``[adapter.<name>]``)::

    [adapter.mycli]
    command = ["mycli", "--non-interactive", "--model", "{model}"]
    env = ["MYCLI_API_KEY"]        # names only; passed only when the task is granted egress
    model = "default-model"        # default for {model}

The prompt is written to the process's **stdin** (and to the prompt file): it never touches
the command line, where any local user could read it (``ps``, ``/proc/PID/cmdline``). Each
template element may hold the placeholders ``{prompt_file}`` (a file holding the prompt,
inside the sandbox), ``{worktree}`` and ``{model}``; they are replaced textually in one pass (a
value holding ``{worktree}`` is not expanded again; other braces stay as they are). No shell
is involved: each element is one argument.

``{model}`` is the request's model, else ``default_model``, else the empty string.
Output is plain text: the summary is the last 2 KB of stdout, success is exit status 0.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..model import CommandSpec, ProcResult
from .base import (
    AdapterConfigError,
    AgentOutput,
    AgentRequest,
    failed,
    process_failure,
    role_denied,
    tail,
)

PLACEHOLDERS = ("{prompt_file}", "{worktree}", "{model}")
_PLACEHOLDER = re.compile("|".join(re.escape(p) for p in PLACEHOLDERS))


@dataclass(frozen=True)
class CommandAdapter:
    """``template[0]`` is the program (``executable``), the rest its arguments."""

    template: tuple[str, ...]
    name: str = "command"
    default_model: str | None = None
    env_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.template, str) or not self.template:
            raise AdapterConfigError(
                "the command adapter needs a non-empty argv template (a list, not a string)"
            )
        if not all(isinstance(item, str) for item in self.template):
            raise AdapterConfigError("every argv template element must be a string")
        object.__setattr__(self, "template", tuple(self.template))
        object.__setattr__(self, "env_names", tuple(self.env_names))

    @classmethod
    def from_template(
        cls,
        template: Sequence[str],
        *,
        name: str = "command",
        default_model: str | None = None,
        env_names: Sequence[str] = (),
    ) -> CommandAdapter:
        return cls(
            template=tuple(template),
            name=name,
            default_model=default_model,
            env_names=tuple(env_names),
        )

    @classmethod
    def from_spec(cls, spec: CommandSpec) -> CommandAdapter:
        """The adapter a plan's ``[adapter.<name>]`` table defines."""
        return cls.from_template(
            spec.command, name=spec.name, default_model=spec.model, env_names=spec.env
        )

    @property
    def executable(self) -> str:
        return self.template[0]

    def argv(self, request: AgentRequest) -> list[str]:
        values = {
            "{prompt_file}": str(request.prompt_file),
            "{worktree}": str(request.worktree),
            "{model}": request.model or self.default_model or "",
        }
        return [_PLACEHOLDER.sub(lambda m: values[m.group(0)], item) for item in self.template]

    def stdin(self, request: AgentRequest) -> bytes:
        return request.prompt.encode("utf-8")

    def policy_flags(self, request: AgentRequest) -> list[str]:
        """None: the program is unknown, so is its way of denying a tool."""
        role_denied(request.role)
        return []

    def enforces(self, role: str) -> tuple[str, ...]:
        """None: see ``policy_flags``."""
        role_denied(role)
        return ()

    def parse(self, request: AgentRequest, result: ProcResult) -> AgentOutput:
        problem = process_failure(self.name, result)
        if problem:
            return failed(problem, result)
        return AgentOutput(ok=True, summary=tail(result.stdout))
