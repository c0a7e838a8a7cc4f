"""The allow-listed environment of agents, gates and auditors.

The runtime's own environment may hold anything (cloud credentials, tokens, the operator's
SSH agent socket); none of it reaches a sandboxed process unless listed here. A process gets:

* ``PATH``, ``LANG``, ``LC_ALL``, ``LC_CTYPE``, ``TERM``, ``TZ`` from the runtime, when set;
* ``HOME`` (the sandbox home) and ``TMPDIR=/tmp``, set by the harness;
* per adapter, the names it declares (``Adapter.env_names``, e.g. ``ANTHROPIC_API_KEY``), only
  when the task is granted network egress (a model API key is of no use without it, and must
  not sit in the environment of a process that cannot reach the API anyway), and only when the
  runtime has them.

Records carry the sorted names (``Profile.env``), never the values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

__all__ = ["BASE_NAMES", "sandbox_env"]

BASE_NAMES: Final = ("LANG", "LC_ALL", "LC_CTYPE", "PATH", "TERM", "TZ")
DEFAULT_PATH: Final = "/usr/local/bin:/usr/bin:/bin"


def sandbox_env(
    host: Mapping[str, str],
    *,
    home: Path,
    extra_names: Sequence[str] = (),
    fixed: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment for one process: allow-listed names copied from ``host``, plus HOME,
    TMPDIR and ``fixed`` (harness-chosen values, e.g. ``PYTHONDONTWRITEBYTECODE``)."""
    env = {name: host[name] for name in (*BASE_NAMES, *extra_names) if name in host}
    env.setdefault("PATH", DEFAULT_PATH)
    env["HOME"] = str(home)
    env["TMPDIR"] = "/tmp"  # noqa: S108 - the sandbox's private tmpfs
    env.update(fixed or {})
    return env
