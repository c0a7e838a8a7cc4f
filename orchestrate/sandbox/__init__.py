"""Sandboxes for every agent, gate and auditor process (Linux: bubblewrap).

``profile`` is the recordable value (what a process could see and reach), ``build`` decides
the profile of each role, ``bwrap`` probes support and turns a profile into a command line,
``env`` is the allow-listed environment, ``spawn`` ties them to a run's batch folders. See
docs/spec/runtime.md §14 and decision 0017.
"""

from __future__ import annotations

from .build import Bind, Settings, build_profile, interpreter_dirs, support_for
from .bwrap import NAMESPACES, Support, bwrap_argv, probe
from .env import BASE_NAMES, sandbox_env
from .profile import Mount, Profile, covers
from .spawn import BatchDirs, Sandbox, default_work_root, git_common_dir, repo_id

__all__ = [
    "BASE_NAMES",
    "NAMESPACES",
    "BatchDirs",
    "Bind",
    "Mount",
    "Profile",
    "Sandbox",
    "Settings",
    "Support",
    "build_profile",
    "bwrap_argv",
    "covers",
    "default_work_root",
    "git_common_dir",
    "interpreter_dirs",
    "probe",
    "repo_id",
    "sandbox_env",
    "support_for",
]
