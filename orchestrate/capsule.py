"""Intent capsules: the approved goal of a run, its digest, and the conformance check.

A capsule (``CapsuleSpec``, the ``[capsule]`` table of a plan) binds what the operator approved:
the goal, the allowed action classes, the file scope, the allowed adapters, the allowed egress
hosts and an expiry time. Conformance is a pure function of (capsule, now, task, actions), the
verifier's rule ``harness.verify.rules.capsule`` (this module re-exports it): the runtime
checks each task before spawn (expiry, adapter) and, before its gates, the edits and deletes
its agent made (from the git diff) plus the gates it will run and the branch it will merge;
it records every check with its inputs (``capsule.check``: ``now``, ``actions``); a non-empty
list fails the task (capsule drift). The full capsule document is recorded in ``run.start``.

Digest (``capsule_digest``): the lowercase hex SHA-256 of the RFC 8785 canonical JSON bytes
(docs/spec/canonical-json.md) of the object with exactly these six members, lists in the
order written in the plan::

    {"actions": [...], "adapters": [...], "egress": [...], "expires": "...",
     "goal": "...", "scope": [...]}

Changing any field (including the order of a list) changes the digest; the same capsule always
has the same digest. It contains no floats, so every implementation can reproduce it.

Actions are ``(class, target)`` pairs:

======================  ==================  =============================================
class                   target              allowed when
======================  ==================  =============================================
``edit``, ``delete``    repository path     the class is in ``actions``, the path is a
                                            normalized relative path (no ``..``, not
                                            absolute, not in ``.git``) matching a glob of
                                            the capsule scope *and* of the task scope
``gate``                gate name           the class is in ``actions``
``merge``               branch name         the class is in ``actions``
``egress``              host name           the host (compared lower-case, one trailing dot
                                            ignored) is in ``egress``; ``egress`` is not an
                                            entry of ``actions``
anything else           —                   never (unknown action class)
======================  ==================  =============================================

Glob semantics are those of plan scopes (``harness.orchestrate.plan``): ``src/**`` matches
``src/a/b.py``, ``*.md`` only top-level files.

Each violation is one string starting with its kind: ``expired:``, ``bad-capsule:``,
``adapter:``, ``action:``, ``path:``, ``scope:``, ``task-scope:``, ``egress:``. Violations come in
a fixed order: expiry, adapter, then per action in the given order.
"""

from __future__ import annotations

import hashlib

from harness.verify.canonical import canonical_bytes
from harness.verify.rules.capsule import (
    ACTION_CLASSES,
    PATH_ACTIONS,
    capsule_document,
    conformance,
    pre_spawn_violations,
)

from .model import CapsuleSpec

__all__ = [
    "ACTION_CLASSES",
    "PATH_ACTIONS",
    "capsule_digest",
    "capsule_document",
    "conformance",
    "pre_spawn_violations",
]


def capsule_digest(spec: CapsuleSpec) -> str:
    """Lowercase hex SHA-256 of the canonical JSON of the capsule's six fields."""
    return hashlib.sha256(canonical_bytes(capsule_document(spec))).hexdigest()
