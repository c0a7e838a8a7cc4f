"""The runtime's side of the sandbox: a batch's folders, and the profile + argv + env per role.

A batch gets one folder outside the state folder (``<work root>/<run>/<batch>/``, see
:func:`default_work_root`) holding ``tree/`` (its git worktree), ``io/`` (prompt file,
workfile, history files an adapter redirects there) and ``home/`` (the agent's HOME). Being
outside ``.harness/`` keeps the stores and keys out of an agent's reach even where there is no
sandbox and the agent walks up from its working directory.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.receipts.keys import default_keys_dir, repo_id

from .build import Bind, Settings, build_profile, support_for
from .bwrap import Support, bwrap_argv
from .env import sandbox_env
from .profile import Profile, Role

__all__ = ["BatchDirs", "Sandbox", "default_work_root", "git_common_dir", "repo_id"]


def default_work_root(repo: Path, env: Mapping[str, str] | None = None) -> Path:
    """Where a repository's worktrees go: ``$XDG_RUNTIME_DIR/harness/work/<repo id>`` when that
    folder exists, else ``${XDG_CACHE_HOME:-~/.cache}/harness/work/<repo id>``."""
    env = os.environ if env is None else env
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime):
        base = Path(runtime)
    else:
        cache = env.get("XDG_CACHE_HOME")
        base = Path(cache) if cache and os.path.isabs(cache) else Path.home() / ".cache"
    return base / "harness" / "work" / repo_id(repo)


def git_common_dir(repo: Path) -> Path:
    """The repository's git folder (shared by all its worktrees)."""
    out = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--path-format=absolute", "--git-common-dir"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return Path(out.stdout.strip())


@dataclass(frozen=True)
class BatchDirs:
    root: Path

    @property
    def tree(self) -> Path:
        return self.root / "tree"

    @property
    def io(self) -> Path:
        return self.root / "io"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def gate_home(self) -> Path:
        return self.root / "gate-home"

    def create(self) -> None:
        for folder in (self.root, self.io, self.home, self.gate_home):
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)


@dataclass(frozen=True)
class Sandbox:
    """One run's sandbox policy: what is hidden, whether bwrap works, the host environment."""

    settings: Settings
    support: Support
    hidden: tuple[Path, ...]
    """The operator's home, the state folder, the keys folder."""
    secret: tuple[Path, ...]
    """The keys folder (nothing inside it is ever mounted)."""
    git_dir: Path | None
    confine: tuple[Path, ...] = ()
    """The state folder and the keys folder: no program or file inside them is mounted."""
    host_env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    @classmethod
    def for_run(
        cls, settings: Settings, *, repo: Path, state_dir: Path, keys_dir: Path | None
    ) -> Sandbox:
        hidden = [Path.home(), state_dir]
        secret = [keys_dir if keys_dir is not None else default_keys_dir(repo)]
        try:
            git_dir: Path | None = git_common_dir(repo)
        except (OSError, subprocess.CalledProcessError):
            git_dir = None
        return cls(
            settings,
            support_for(settings),
            tuple(hidden + secret),
            tuple(secret),
            git_dir,
            (state_dir, *secret),
        )

    @property
    def available(self) -> bool:
        return self.support.available

    def agent(
        self,
        dirs: BatchDirs,
        *,
        programs: Sequence[str],
        network: bool,
        adapter_env: Sequence[str] = (),
        journal_dir: Path | None = None,
        files: Sequence[str] = (),
        review: tuple[Path, Mapping[str, str]] | None = None,
        proxy_env: Mapping[str, str] | None = None,
        egress: Sequence[Mapping[str, Any]] = (),
    ) -> tuple[Profile, dict[str, str]]:
        """Profile and environment of a batch's agent: worktree, io and home read-write.

        ``review``: the batch's review socket and the variables its hook needs; the socket is
        bound read-only at ``SANDBOX_SOCKET`` (a short, fixed path) and the socket variable
        names that path, or the host path where there is no sandbox (docs/spec/review.md).

        ``proxy_env`` / ``egress``: a proxied agent's variables (base URLs of the recording
        proxy, placeholder keys, proxy variables: set whatever the network grant, since they
        hold no secret) and the proxy's allow-list, recorded as the profile's ``egress``
        (docs/spec/runtime.md §11a). A proxied agent gets none of its adapter's variables
        from the runtime's environment: ``adapter_env`` is then empty, so a real key never
        reaches it."""
        binds = [Bind(dirs.tree, True, "worktree"), Bind(dirs.io, True, "io")]
        if self.git_dir is not None:
            binds.append(Bind(self.git_dir, False, "git"))
        if journal_dir is not None:
            journal_dir.mkdir(parents=True, exist_ok=True)
            binds.append(Bind(journal_dir, True, "journal"))
        fixed: dict[str, str] = {}
        if review is not None:
            from ..review.protocol import ENV_SOCKET, SANDBOX_SOCKET

            socket_path, variables = review
            fixed.update(variables)
            fixed[ENV_SOCKET] = SANDBOX_SOCKET if self.available else str(socket_path)
            binds.append(Bind(socket_path, False, "review", dest=SANDBOX_SOCKET))
        extra = list(adapter_env) if network else []
        fixed.update(proxy_env or {})
        env = sandbox_env(self.host_env, home=dirs.home, extra_names=extra, fixed=fixed)
        profile = build_profile(
            role="agent", support=self.support, settings=self.settings, workdir=dirs.tree,
            binds=binds, home=dirs.home, home_writable=True, network=network,
            env_names=list(env), hidden=self.hidden, secret=self.secret, confine=self.confine,
            programs=programs, files=files, path_env=env.get("PATH"),
        )  # fmt: skip
        if egress:
            items = sorted((dict(item) for item in egress), key=lambda item: str(item["route"]))
            profile = dataclasses.replace(profile, egress=tuple(items))
        return profile, env

    def gate(
        self,
        worktree: Path,
        home: Path,
        *,
        programs: Sequence[str] = (),
        files: Sequence[str] = (),
        role: Role = "gate",
        proxy_socket: Path | None = None,
        proxy_env: Mapping[str, str] | None = None,
        egress: Sequence[Mapping[str, Any]] = (),
    ) -> tuple[Profile, dict[str, str]]:
        """Profile and environment of a gate (or auditor): everything read-only, no network,
        a fresh empty HOME, no bytecode writes (the worktree is read-only).

        ``proxy_socket`` / ``proxy_env`` / ``egress``: a rounds role of a proxied adapter
        (Manager, repair, Auditor: docs/spec/runtime.md §11a, §21): the batch proxy's Unix
        socket is bound read-only at its own path (purpose ``proxy``; a read-only bind still
        admits ``connect()``, which needs no write to the file system), the proxy's variables
        are set (no secret in them) and its allow-list is the profile's ``egress``."""
        binds = [Bind(worktree, False, "worktree")]
        if self.git_dir is not None:
            binds.append(Bind(self.git_dir, False, "git"))
        if proxy_socket is not None:
            binds.append(Bind(proxy_socket, False, "proxy"))
        fixed = {"PYTHONDONTWRITEBYTECODE": "1", **(proxy_env or {})}
        env = sandbox_env(self.host_env, home=home, fixed=fixed)
        profile = build_profile(
            role=role, support=self.support,
            settings=self.settings, workdir=worktree, binds=binds, home=home,
            home_writable=False, network=False, env_names=list(env), hidden=self.hidden,
            secret=self.secret, confine=self.confine, programs=programs, files=files,
            path_env=env.get("PATH"),
        )  # fmt: skip
        if egress:
            items = sorted((dict(item) for item in egress), key=lambda item: str(item["route"]))
            profile = dataclasses.replace(profile, egress=tuple(items))
        return profile, env

    def run_profile(self, work: Path) -> dict[str, Any]:
        """The run's default profile, as ``run.start`` records it (``sandbox``).

        It is an agent's profile without network egress for the batch folder template
        ``<work>/{batch}`` (no program mounts: those depend on the adapter), with the gates'
        profile as its member ``gate``. A task's trifecta decision before spawn is taken under
        it: a batch only gets the network when its tools carry ``external_comm`` (so the
        decision cannot change), and its ``private_mounts`` is the same as every agent's.
        """
        dirs = BatchDirs(work / "{batch}")
        agent, _ = self.agent(dirs, programs=(), network=False)
        gate, _ = self.gate(dirs.tree, dirs.gate_home)
        return {**agent.to_json(), "gate": gate.to_json()}

    def argv(self, profile: Profile, argv: Sequence[str]) -> list[str]:
        """The command line that runs ``argv`` under ``profile``."""
        if profile.kind == "none":
            return list(argv)
        assert self.support.executable is not None
        return bwrap_argv(self.support.executable, profile, argv)
