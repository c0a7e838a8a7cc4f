"""C2SP transparency-log checkpoints (c2sp.org/tlog-checkpoint): parsing the note text.

A checkpoint body is the text of a signed note: at least three non-empty lines, each ending in a
newline —

1. the **origin**, non-empty (any text: clients MUST NOT assume it is a URL);
2. the **tree size**, ASCII decimal with no sign and no leading zero (``0`` for an empty tree),
   at most 2^64 − 1;
3. the **root hash**, standard padded base64 in its canonical form;
4. optional **extension lines**, opaque and non-empty.

The parser does not check the root hash length by default: the spec only says "the root of the
RFC 6962 Merkle hash tree", and third-party vectors use other lengths. Pass ``hash_size=32``
(or call :func:`require_sha256_root`) where the tree is known to be SHA-256.

Open a note with :func:`harness.verify.note.open_note` first; parse only authenticated text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import CheckpointError
from .note import strict_b64decode

__all__ = [
    "MAX_TREE_SIZE",
    "SHA256_SIZE",
    "Checkpoint",
    "parse_checkpoint",
    "require_sha256_root",
]

MAX_TREE_SIZE = 2**64 - 1
"""Largest tree size a checkpoint may state (an unsigned 64-bit integer, as in Go)."""

SHA256_SIZE = 32

_SIZE = re.compile(r"0|[1-9][0-9]*")
_MAX_SIZE_DIGITS = len(str(MAX_TREE_SIZE))
_FORBIDDEN_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f]")


@dataclass(frozen=True)
class Checkpoint:
    """A parsed checkpoint body: origin, tree size, root hash and extension lines."""

    origin: str
    size: int
    root_hash: bytes
    extensions: tuple[str, ...] = ()


def parse_checkpoint(body: bytes | str, *, hash_size: int | None = None) -> Checkpoint:
    """Parse a checkpoint body (the note text, final newline included).

    ``hash_size``, if given, is the exact root hash length required. Raises
    :class:`CheckpointError` on any malformation; for any ``bytes`` input nothing else.
    The note rules apply to the body too: valid UTF-8, no control characters but newline.
    """
    if isinstance(body, bytes | bytearray | memoryview):
        try:
            text = bytes(body).decode("utf-8")
        except UnicodeDecodeError:
            raise CheckpointError("checkpoint is not valid UTF-8") from None
    elif isinstance(body, str):
        try:
            body.encode("utf-8")
        except UnicodeEncodeError:
            raise CheckpointError("checkpoint is not valid UTF-8") from None
        text = body
    else:
        raise TypeError("checkpoint body must be bytes or str")
    if _FORBIDDEN_CONTROL.search(text) is not None:
        raise CheckpointError("checkpoint contains an ASCII control character other than newline")
    if not text.endswith("\n"):
        raise CheckpointError("checkpoint must end in a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise CheckpointError("checkpoint needs origin, tree size and root hash lines")
    if any(not line for line in lines):
        raise CheckpointError("checkpoint has an empty line")
    origin, size_line, root_line, *extensions = lines

    if len(size_line) > _MAX_SIZE_DIGITS or _SIZE.fullmatch(size_line) is None:
        raise CheckpointError(
            "checkpoint tree size must be ASCII decimal without sign or leading zeros"
        )
    size = int(size_line)
    if size > MAX_TREE_SIZE:
        raise CheckpointError("checkpoint tree size exceeds 2^64 - 1")

    root = strict_b64decode(root_line)
    if root is None:
        raise CheckpointError("checkpoint root hash is not canonical base64")
    if hash_size is not None and len(root) != hash_size:
        raise CheckpointError(f"checkpoint root hash is {len(root)} bytes, expected {hash_size}")
    return Checkpoint(origin, size, root, tuple(extensions))


def require_sha256_root(checkpoint: Checkpoint) -> bytes:
    """Return the checkpoint's root hash, raising :class:`CheckpointError` unless 32 bytes."""
    if len(checkpoint.root_hash) != SHA256_SIZE:
        raise CheckpointError(
            f"checkpoint root hash is {len(checkpoint.root_hash)} bytes, expected {SHA256_SIZE}"
        )
    return checkpoint.root_hash
