"""Supervised agent processes (issue 11 §4): non-blocking, with idle and lifetime limits,
recorded identities, and reaping of a crashed runtime's orphans.

``Supervised.start`` launches a process and returns at once; the tick loop calls ``step`` on
each process in flight and ``wait_any`` to sleep until one needs it. ``identity_of`` gives the
identity ``agent.started`` records; ``reap_orphan`` ends what is left of it after a crash.
"""

from __future__ import annotations

from .identity import ProcIdentity, boot_id, identity_of, reap_orphan
from .limits import MAX_LIFETIME_S, Limits, Outcome
from .process import DRAIN_S, Supervised
from .procfs import signal_name
from .progress import MAX_ENTRIES, PROBE_SHARE, Fingerprint, ProbeStats, fingerprint
from .wait import wait_any

__all__ = [
    "DRAIN_S",
    "MAX_ENTRIES",
    "MAX_LIFETIME_S",
    "PROBE_SHARE",
    "Fingerprint",
    "Limits",
    "Outcome",
    "ProbeStats",
    "ProcIdentity",
    "Supervised",
    "boot_id",
    "fingerprint",
    "identity_of",
    "reap_orphan",
    "signal_name",
    "wait_any",
]
