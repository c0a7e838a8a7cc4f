"""Bubblewrap: whether it works here, and the command line for a profile.

Support is decided by running ``bwrap`` once with the very options every sandbox uses (new
user, PID, IPC, UTS, cgroup and network namespaces, a read-only ``/usr``): having the binary is
not enough, since containers and hardened kernels often forbid unprivileged namespaces. The
answer is cached per process and per executable.

The command line is a pure function of the profile (:func:`bwrap_argv`), so what is recorded
is what is enforced.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from .profile import Profile

__all__ = ["NAMESPACES", "OPTIONS", "Support", "bwrap_argv", "probe"]

NAMESPACES: Final = ("cgroup", "ipc", "net", "pid", "user", "uts")
"""Namespaces a sandbox unshares (``net`` is left out when the task is granted egress)."""
OPTIONS: Final = ("die-with-parent", "new-session")
_PROBE_TIMEOUT_S: Final = 10.0


@dataclass(frozen=True)
class Support:
    """Whether bubblewrap can build a sandbox on this machine."""

    available: bool
    executable: str | None
    version: str | None
    reason: str
    """``ok``, or why not (missing binary, namespaces refused: bwrap's own message)."""


def _namespace_flags(namespaces: Sequence[str]) -> list[str]:
    return [f"--unshare-{name}" for name in NAMESPACES if name in namespaces]


@functools.lru_cache(maxsize=8)
def probe(bwrap: str = "bwrap") -> Support:
    """Run bubblewrap once with the sandbox's namespaces; report whether that worked."""
    executable = shutil.which(bwrap)
    if executable is None:
        return Support(False, None, None, f"{bwrap!r} not found on PATH (install bubblewrap)")
    try:
        version = subprocess.run(
            [executable, "--version"],
            check=False,
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
        ).stdout.strip()
        argv = [executable, *_system_args(), *_namespace_flags(NAMESPACES)]
        argv += ["--die-with-parent", "--new-session", "--", "/usr/bin/true"]
        if not os.path.exists("/usr/bin/true"):
            argv[-1] = "/bin/true"
        check = subprocess.run(
            argv, check=False, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Support(False, executable, None, f"{executable} could not be run: {exc}")
    if check.returncode != 0:
        detail = check.stderr.strip() or f"exit status {check.returncode}"
        return Support(False, executable, version or None, f"bwrap cannot sandbox here: {detail}")
    return Support(True, executable, version or None, "ok")


def _system_args() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64", "sbin"):
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return [*args, "--proc", "/proc", "--dev", "/dev"]


def bwrap_argv(executable: str, profile: Profile, argv: Sequence[str]) -> list[str]:
    """The bubblewrap command line that runs ``argv`` inside ``profile``."""
    if profile.kind != "bwrap":
        raise ValueError("bwrap_argv: the profile is not a bubblewrap profile")
    out = [executable]
    for mount in profile.mounts:
        if mount.how in ("ro-bind", "bind"):
            assert mount.source is not None
            out += [f"--{mount.how}", mount.source, mount.dest]
        elif mount.how == "symlink":
            assert mount.source is not None
            out += ["--symlink", mount.source, mount.dest]
        else:  # tmpfs, proc, dev
            out += [f"--{mount.how}", mount.dest]
    out += _namespace_flags(profile.namespaces)
    out += [f"--{option}" for option in profile.options]
    out += ["--chdir", profile.workdir, "--", *argv]
    return out
