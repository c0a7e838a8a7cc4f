"""Profiles for agents, gates and auditors: what each one may see, decided in one place.

The sandbox root is an empty tmpfs (bubblewrap's default); only what is listed here exists in
it, at the same path as on the host (so the paths an adapter puts on a command line mean the
same thing inside and outside):

* the system, read-only: ``/usr``, the ``/bin``, ``/lib``, ``/lib64``, ``/sbin`` symlinks (or
  folders) as the host has them, and a short list of ``/etc`` files (loader cache, users,
  name service, TLS roots, time zone; ``resolv.conf`` only with network);
* the Python interpreter, read-only: ``sys.prefix``, ``sys.base_prefix`` and the folders of
  the harness packages (an editable install keeps them outside site-packages) — the scripted
  agent and gates such as ``python -m pytest`` need them;
* the program to run, read-only, when it lies outside what is already mounted;
* the task's paths: the worktree (read-write for agents, read-only for gates and auditors),
  the repository's git folder read-only (so ``git status``/``git diff`` work), the batch's io
  folder (prompt file, workfile), a sandbox HOME, a private ``/tmp`` and ``/var/tmp``;
* a fresh ``/proc`` (new PID namespace) and a minimal ``/dev``.

Never mounted: the operator's home (only sub-folders the interpreter or program live in), the
state folder (except, for the scripted agent only, its replay journal folder: the journal is
its model router, not evidence), the keys. ``private_mounts`` is computed from the final list,
not asserted: a mount whose source is, or contains, the home, the state folder or the keys
folder, or lies inside the keys folder, makes it true.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os
import shutil
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .bwrap import NAMESPACES, OPTIONS, Support, probe
from .profile import Mount, Profile, Role, covers

__all__ = [
    "ETC_FILES",
    "Bind",
    "Settings",
    "build_profile",
    "interpreter_dirs",
    "support_for",
]

ETC_FILES: Final = (
    "alternatives",
    "ca-certificates",
    "gai.conf",
    "gitconfig",
    "group",
    "host.conf",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "protocols",
    "services",
    "ssl",
    "terminfo",
    "timezone",
)
"""``/etc`` entries mounted read-only when present (plus ``/etc/python3*``)."""
NETWORK_ETC: Final = ("resolv.conf",)
HARNESS_PACKAGES: Final = (
    "harness",
    "harness.verify",
    "harness.receipts",
    "harness.orchestrate",
    "harness.schemas",
)


@dataclass(frozen=True)
class Settings:
    """The operator's sandbox choice for a run.

    ``opt_out`` true runs every process without a sandbox, explicitly (``harness run
    --no-sandbox``); it is recorded. Without it, a run whose plan uses a real agent CLI is
    refused where no sandbox can be had.
    """

    opt_out: bool = False
    bwrap: str = "bwrap"


@dataclass(frozen=True)
class Bind:
    """A host path the process gets, at the same path."""

    source: Path
    writable: bool
    purpose: str
    dest: str | None = None
    """Where the process sees it (None: at ``source``); the review socket's fixed path."""


def support_for(settings: Settings) -> Support:
    """The sandbox support this run will use (probing bubblewrap unless opted out)."""
    if settings.opt_out:
        return Support(False, None, None, "operator opt-out (--no-sandbox)")
    return probe(settings.bwrap)


def _real(path: str | Path) -> str:
    return os.path.realpath(path)


@functools.lru_cache(maxsize=1)
def interpreter_dirs() -> tuple[str, ...]:
    """Host folders the running Python and the harness packages need (sorted, minimal)."""
    found: set[str] = set()
    for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
        found.add(_real(prefix))
    found.add(_real(Path(sys.executable).parent))  # a venv's bin/ lies in sys.prefix anyway
    for name in HARNESS_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec else []:
            found.add(_real(location))
    return _minimal(p for p in found if os.path.isdir(p))


def _minimal(paths: Iterable[str]) -> tuple[str, ...]:
    """Sorted paths with every path below another one dropped; ``/usr`` counts as given."""
    out: list[str] = []
    for path in sorted(set(paths)):
        if covers("/usr", path) or any(covers(kept, path) for kept in out):
            continue
        out.append(path)
    return tuple(out)


def _system_mounts(network: bool) -> list[Mount]:
    mounts = [Mount("/usr", "ro-bind", "/usr"), Mount("/proc", "proc"), Mount("/dev", "dev")]
    for name in ("bin", "lib", "lib64", "sbin"):
        path = f"/{name}"
        if os.path.islink(path):
            mounts.append(Mount(path, "symlink", os.readlink(path)))
        elif os.path.isdir(path):
            mounts.append(Mount(path, "ro-bind", path))
    names = list(ETC_FILES) + (list(NETWORK_ETC) if network else [])
    names += sorted(os.path.basename(p) for p in glob.glob("/etc/python3*"))
    for name in names:
        path = f"/etc/{name}"
        if os.path.exists(path):  # follows symlinks: a dangling one is left out
            mounts.append(Mount(path, "ro-bind", path))
    # Private, empty temporary folders inside the sandbox (not the host's /tmp).
    mounts.append(Mount("/tmp", "tmpfs", purpose="tmp"))  # noqa: S108
    mounts.append(Mount("/var/tmp", "tmpfs", purpose="tmp"))  # noqa: S108
    return mounts


def _mountable(path: str, hidden: Sequence[str], confine: Sequence[str]) -> bool:
    """Neither an ancestor of a hidden path nor anything inside a confined one."""
    return not any(covers(path, h) for h in hidden) and not any(covers(c, path) for c in confine)


def _program_paths(
    programs: Sequence[str],
    files: Sequence[str],
    path_env: str | None,
    hidden: Sequence[str],
    confine: Sequence[str],
) -> list[str]:
    """What to mount so the programs (and files named on their command line) are visible:
    a program's folder, or only the file itself when the folder would expose a hidden path;
    nothing inside the state folder or the keys folder, ever."""
    out: list[str] = []
    wanted: list[str] = []
    for program in programs:
        found = shutil.which(program, path=path_env) if program else None
        if found is not None:
            wanted += [os.path.abspath(found), _real(found)]
    for path in wanted:
        folder = os.path.dirname(path)
        if _mountable(folder, hidden, confine):
            out.append(folder)
        elif _mountable(path, hidden, confine):
            out.append(path)
    for path in files:
        for candidate in (os.path.abspath(path), _real(path)):
            if os.path.isfile(candidate) and _mountable(candidate, hidden, confine):
                out.append(candidate)
    return out


def _private(sources: Iterable[str], hidden: Sequence[Path], secret: Sequence[Path]) -> bool:
    hidden_real = [_real(p) for p in hidden]
    secret_real = [_real(p) for p in secret]
    for source in sources:
        if any(covers(source, h) for h in hidden_real + secret_real):
            return True
        if any(covers(s, source) for s in secret_real):
            return True
    return False


def build_profile(
    *,
    role: Role,
    support: Support,
    settings: Settings,
    workdir: Path,
    binds: Sequence[Bind],
    home: Path,
    home_writable: bool,
    network: bool,
    env_names: Sequence[str],
    hidden: Sequence[Path],
    secret: Sequence[Path] = (),
    confine: Sequence[Path] = (),
    programs: Sequence[str] = (),
    files: Sequence[str] = (),
    path_env: str | None = None,
) -> Profile:
    """The effective profile of one process.

    ``hidden``: the operator's home, the state folder, the keys folder (never mounted, nor any
    of their ancestors); ``secret``: folders nothing inside of which may be mounted (the keys).
    ``confine``: folders nothing inside of which is mounted for ``programs``/``files`` (the
    state folder, the keys folder). ``programs``: executables (names looked up on
    ``path_env``, or paths) whose folders are mounted read-only when not already visible;
    ``files``: single files (e.g. a script named on the command line), read-only.
    """
    env = tuple(sorted(set(env_names)))
    if not support.available:
        return Profile(
            kind="none",
            role=role,
            network=True,
            private_mounts=True,
            opt_out=settings.opt_out,
            workdir=str(workdir),
            home=str(home),
            env=env,
            reason=support.reason,
        )
    mounts = _system_mounts(network)
    interpreters = interpreter_dirs()
    mounts += [Mount(path, "ro-bind", path, "interpreter") for path in interpreters]
    visible = ["/usr", *interpreters]
    hidden_real = [_real(p) for p in hidden]
    confine_real = [_real(p) for p in confine]
    wanted = _program_paths(programs, files, path_env, hidden_real, confine_real)
    extra = [path for path in _minimal(wanted) if not any(covers(v, path) for v in visible)]
    mounts += [Mount(path, "ro-bind", path, "executable") for path in extra]
    for bind in binds:
        source = _real(bind.source)
        mounts.append(Mount(bind.dest or str(bind.source), "bind" if bind.writable else "ro-bind",
                            source, bind.purpose))  # fmt: skip
    if home_writable:
        mounts.append(Mount(str(home), "bind", _real(home), "home"))
    else:
        mounts.append(Mount(str(home), "tmpfs", purpose="home"))
    mounts.sort(key=lambda m: (m.dest, m.how))
    sources = [m.source for m in mounts if m.how in ("bind", "ro-bind") and m.source]
    namespaces = tuple(n for n in NAMESPACES if network is False or n != "net")
    return Profile(
        kind="bwrap",
        role=role,
        network=network,
        private_mounts=_private(sources, hidden, secret),
        opt_out=False,
        workdir=str(workdir),
        home=str(home),
        mounts=tuple(mounts),
        namespaces=namespaces,
        env=env,
        interpreters=interpreters,
        options=OPTIONS,
    )
