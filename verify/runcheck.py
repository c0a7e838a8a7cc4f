"""Open a store's signed checkpoints: each note's one signature first, then its body.

Used by the bundle verifier and by tools that check a run folder with ``verify_store``.
"""

from __future__ import annotations

from collections.abc import Sequence

from .checkpoint import Checkpoint, parse_checkpoint
from .errors import CheckpointError, NoteError
from .note import open_note_signed_once


def open_checkpoints(
    notes: Sequence[tuple[str, bytes]], verifier_keys: Sequence[str]
) -> list[Checkpoint]:
    """Check each signed checkpoint note against the trusted keys, then parse its body."""
    checkpoints = []
    for name, data in notes:
        try:
            note = open_note_signed_once(data, verifier_keys)
        except NoteError as exc:
            raise type(exc)(f"{name}: {exc}") from None
        try:
            checkpoints.append(parse_checkpoint(note.text.encode("utf-8")))
        except CheckpointError as exc:
            raise CheckpointError(f"{name}: {exc}") from None
    return checkpoints
