"""One batch's agent phase as a self-contained value, and the blocking function that runs it.

An :class:`AgentUnit` is what a remote worker needs to do what ``runner.batch`` does locally
between "spawn recorded" and "agent exited": a clone of the base, the branch, the scratch files,
the sandboxed agent process, the final commit. It is *path-independent* (nothing in it names a
folder of the coordinator) and picklable (plain data), so it can be shipped to any machine
that has this package, git and, unless opted out, bubblewrap.

Paths the agent needs on its command line are written as placeholders that the worker fills
in with its own folders: ``{io}`` (the batch's io folder, holding the scratch files) and
``{tree}`` (the worktree). Every argv element has each placeholder replaced (``str.replace``),
so an argument that literally contains ``{io}`` cannot be passed.

:func:`run_unit` never touches evidence: it has no store, no key and no state folder, and the
coordinator keeps writing every record (DESIGN §7). It rebuilds the sandbox with the same
:class:`~harness.orchestrate.sandbox.Sandbox` API the local runner uses, for the worker's own
folders; what the worker hides is the worker user's home (the worker has no state folder or
keys to hide). The environment is the allow-list again (``sandbox_env``): ``unit.env`` plays
the host environment, and names beyond the base list reach the agent only with network egress,
exactly as locally.

A proxied batch (runtime.md §18.7) names the coordinator's proxy (``proxy``, ``host:port``):
sandboxed without network, the worker relays ``<io>/model.sock`` to it (``relay.py``, a thread
outside the sandbox) and runs the agent below the in-sandbox bridge with ``proxy_env``;
otherwise the agent gets ``proxy_direct_env`` and reaches the proxy itself. The keys, the
journal and the exchanges' records stay on the coordinator.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from .. import git
from ..model import ProcResult
from ..proxy.bridge import DEFAULT_PORT as BRIDGE_PORT
from ..proxy.bridge import bridge_argv
from ..sandbox import BASE_NAMES, BatchDirs, Sandbox, Settings, support_for
from ..sandbox.policy import argv_files
from ..supervise import MAX_LIFETIME_S, Limits, Supervised
from .gitbundle import base_bundle, branch_bundle, unpack_base
from .relay import SocketRelay

SOCKET_NAME = "model.sock"

__all__ = ["AgentUnit", "UnitResult", "portable_unit", "run_unit", "run_unit_in_tempdir"]

_STEP_S = 1.0
IO_PLACEHOLDER = "{io}"
TREE_PLACEHOLDER = "{tree}"


@dataclass(frozen=True)
class AgentUnit:
    """Everything one batch's agent phase needs, as plain data (see the module docstring)."""

    batch: str
    base: str
    """The base commit id; ``base_bundle`` must carry it as ``refs/heads/harness-base``."""
    branch: str
    """The batch branch, created at ``base`` on the worker and brought back as a bundle."""
    base_bundle: bytes
    argv: tuple[str, ...]
    """Program and arguments, run with the worktree as working directory; ``{io}`` and
    ``{tree}`` are replaced with the worker's folders."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Values the agent may get (the allow-list applies; HOME and TMPDIR are the worker's)."""
    stdin: bytes | None = None
    scratch: Mapping[str, bytes] = field(default_factory=dict)
    """Files written into the io folder before the agent starts: relative name -> content."""
    wall_s: float = 600.0
    idle_s: float | None = None
    """No progress (output, worktree change) for this long: ``hung`` (None: never)."""
    lifetime_s: float = MAX_LIFETIME_S
    grace_s: float = 2.0
    settings: Settings = field(default_factory=Settings)
    network: bool = False
    programs: tuple[str, ...] = ()
    """Further executables the sandbox must expose (``argv[0]`` always is)."""
    message: str = ""
    """The message of the commit that takes the agent's changes (default: the batch id)."""
    git_date: str | None = None
    """The commit date (the run's logical clock), so a worker commits the ids a local run would."""
    proxy: str | None = None
    """A proxied batch: ``host:port`` of the coordinator's recording proxy for this batch
    (runtime.md §18). The worker relays ``<io>/model.sock`` to it; the keys stay there."""
    proxy_env: Mapping[str, str] = field(default_factory=dict)
    """The agent's proxy variables behind the worker's bridge (base URLs on
    ``127.0.0.1:8377``, the batch's access token as key): set whatever the network grant."""
    proxy_direct_env: Mapping[str, str] = field(default_factory=dict)
    """The same variables pointing straight at ``proxy`` (an unsandboxed worker, or a batch
    granted the network: no bridge)."""
    egress: tuple[Mapping[str, Any], ...] = ()
    """The proxy's allow-list (``AllowList.describe()``), recorded in the worker's profile."""

    def __post_init__(self) -> None:
        if not self.argv:
            raise ValueError(f"unit {self.batch}: empty argv")
        if self.proxy is not None:
            from .relay import parse_address

            parse_address(self.proxy)  # raises on a malformed address, before anything ships
        for name in self.scratch:
            _scratch_path(name)  # raises on an unsafe name
        self.limits()  # raises on limits the supervisor refuses, before anything ships

    def limits(self) -> Limits:
        """The supervisor's limits for the agent (the lifetime cap never above the wall)."""
        return Limits(
            wall_s=self.wall_s,
            idle_s=self.idle_s,
            lifetime_s=min(self.lifetime_s, self.wall_s, MAX_LIFETIME_S),
            grace_s=self.grace_s,
        )


@dataclass(frozen=True)
class UnitResult:
    """What comes back: exit facts and transcript, the tip, the branch bundle, the profile."""

    result: ProcResult
    anomaly: str | None
    """The supervisor's: None, "timeout", "hung" or "lifetime" (see ``supervise.Outcome``)."""
    idle_ms: int
    """The longest silence the worker's supervisor observed, in ms."""
    tip: str
    """The branch tip after the final commit (the base when nothing changed)."""
    branch_bundle: bytes | None
    """``refs/heads/<branch>`` minus the base's history; None when the tip is the base."""
    sandbox_profile: dict[str, Any]
    """The worker's effective profile (``Profile.to_json()``), for the coordinator to record."""


def _scratch_path(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or str(path) != name or "\0" in name:
        raise ValueError(f"scratch file name {name!r} is not a plain relative path")
    return path


def _fill(arg: str, dirs: BatchDirs) -> str:
    return arg.replace(IO_PLACEHOLDER, str(dirs.io)).replace(TREE_PLACEHOLDER, str(dirs.tree))


_WORKER_SET = ("HOME", "TMPDIR")
"""Environment names the worker sets for its own folders (dropped from a unit's env)."""


def portable_unit(
    *,
    batch: str,
    base: str,
    branch: str,
    repo: Path,
    dirs: BatchDirs,
    argv: Sequence[str],
    env: Mapping[str, str],
    stdin: bytes | None,
    limits: Limits,
    settings: Settings,
    network: bool,
    message: str,
    git_date: str | None,
    programs: Sequence[str] = (),
    proxy: str | None = None,
    proxy_env: Mapping[str, str] | None = None,
    proxy_direct_env: Mapping[str, str] | None = None,
    egress: Sequence[Mapping[str, Any]] = (),
) -> AgentUnit:
    """The unit of a batch prepared on the coordinator as for a local agent.

    ``argv`` is the adapter's command line (not wrapped in bubblewrap), ``env`` the agent's
    environment as ``Sandbox.agent`` computed it; ``dirs`` the batch's folders, whose io
    folder holds the scratch files (prompt, workfile) by now. ``proxy`` and the two proxy
    environments: a proxied batch (``env``'s proxy variables are then dropped from ``env``:
    the worker sets the right ones for its sandbox). The io folder and worktree paths
    become ``{io}``/``{tree}``; ``HOME`` and ``TMPDIR`` are left to the worker. Raises
    ValueError when the result would still name a coordinator folder of the batch (an
    argument or value the placeholders do not cover) or the io folder holds anything but
    regular files and folders.
    """
    root = str(dirs.root)
    portable = tuple(
        arg.replace(str(dirs.io), IO_PLACEHOLDER).replace(str(dirs.tree), TREE_PLACEHOLDER)
        for arg in argv
    )
    proxied = set(proxy_direct_env or {}) | set(proxy_env or {})
    values = {k: v for k, v in env.items() if k not in _WORKER_SET and k not in proxied}
    leaks = [a for a in portable if root in a] + [k for k, v in values.items() if root in v]
    if leaks:
        raise ValueError(f"unit {batch}: still names the batch folder {root}: {leaks!r}")
    scratch: dict[str, bytes] = {}
    for path in sorted(dirs.io.rglob("*")):
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise ValueError(f"unit {batch}: {path} is not a regular file")
        if path.is_file():
            scratch[path.relative_to(dirs.io).as_posix()] = path.read_bytes()
    return AgentUnit(
        batch=batch,
        base=base,
        branch=branch,
        base_bundle=base_bundle(repo, base),
        argv=portable,
        env=values,
        stdin=stdin,
        scratch=scratch,
        wall_s=limits.wall_s,
        idle_s=limits.idle_s,
        lifetime_s=limits.lifetime_s,
        grace_s=limits.grace_s,
        settings=settings,
        network=network,
        programs=tuple(programs),
        message=message,
        git_date=git_date,
        proxy=proxy,
        proxy_env=dict(proxy_env or {}),
        proxy_direct_env=dict(proxy_direct_env or {}),
        egress=tuple(dict(item) for item in egress),
    )


def run_unit(unit: AgentUnit, workdir: Path) -> UnitResult:
    """Run ``unit`` in ``workdir`` (an empty or missing folder of the worker); BLOCKING.

    Clones the base bundle into ``workdir/repo.git`` (bare), checks the branch out at the base
    in ``workdir/batch/tree``, writes the scratch files to ``workdir/batch/io``, runs the agent
    sandboxed as a :class:`~harness.orchestrate.supervise.Supervised` process stepped to
    completion (wall clock, lifetime cap, idle limit on output and worktree changes, grace,
    group kill: what ``run_process`` does, plus ``hung``), commits everything
    (``git.commit_all``) and returns the result. Raises
    ``GitError``/``BundleError`` for a bad base bundle (the caller reports it as a crash).
    """
    workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
    repo = unpack_base(unit.base_bundle, workdir / "repo.git", unit.base)
    dirs = BatchDirs(workdir / "batch")
    dirs.create()
    git.add_worktree(repo, dirs.tree, unit.branch, unit.base)
    for name, content in sorted(unit.scratch.items()):
        target = dirs.io / _scratch_path(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    sandbox = Sandbox(
        settings=unit.settings,
        support=support_for(unit.settings),
        hidden=(Path.home(),),
        secret=(),
        git_dir=repo,
        host_env=dict(unit.env),
    )
    argv = [_fill(arg, dirs) for arg in unit.argv]
    # A proxied unit behind the bridge: sandboxed without network, its only way out is the
    # relay (below) to the coordinator's proxy; otherwise it is pointed at the proxy itself.
    bridged = unit.proxy is not None and sandbox.available and not unit.network
    proxy_env = unit.proxy_env if bridged else unit.proxy_direct_env
    python = os.path.abspath(sys.executable)
    profile, env = sandbox.agent(
        dirs,
        programs=[argv[0], *unit.programs, *([python] if bridged else [])],
        files=argv_files(argv),
        network=unit.network,
        adapter_env=sorted(set(unit.env) - set(BASE_NAMES)) if unit.proxy is None else (),
        proxy_env=proxy_env if unit.proxy is not None else None,
        egress=unit.egress,
    )
    relay: SocketRelay | None = None
    if bridged:
        assert unit.proxy is not None
        relay = SocketRelay(dirs.io / SOCKET_NAME, unit.proxy).start()
        argv = bridge_argv(python, dirs.io / SOCKET_NAME, BRIDGE_PORT, argv)
    try:
        proc = Supervised.start(
            sandbox.argv(profile, argv),
            cwd=dirs.tree,
            limits=unit.limits(),
            env=env,
            stdin=unit.stdin,
            sandboxed=profile.kind == "bwrap",
            progress_paths=[dirs.tree],
        )
        try:
            while (outcome := proc.step(_STEP_S)) is None:
                pass
        finally:
            proc.close()  # an exception escaped the loop: leave nothing behind
    finally:
        if relay is not None:
            relay.stop()
    git.commit_all(dirs.tree, unit.message or unit.batch, date=unit.git_date)
    tip = git.head(dirs.tree)  # also covers commits the agent made itself
    bundle = branch_bundle(repo, unit.branch, unit.base)
    return UnitResult(
        outcome.result, outcome.anomaly, outcome.idle_ms, tip, bundle, profile.to_json()
    )


def run_unit_in_tempdir(unit: AgentUnit) -> UnitResult:
    """:func:`run_unit` in a fresh private temporary folder, removed afterwards: the body of
    the Ray task (module level, so Ray ships it by reference, not by value)."""
    root = Path(tempfile.mkdtemp(prefix="harness-unit-"))
    try:
        os.chmod(root, 0o700)
        return run_unit(unit, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
