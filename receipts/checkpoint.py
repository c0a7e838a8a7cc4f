"""Writing C2SP transparency-log checkpoint bodies (c2sp.org/tlog-checkpoint).

The output is the note text to sign (see :mod:`harness.receipts.note`); it always parses back
with :func:`harness.verify.checkpoint.parse_checkpoint` to the same values.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence

from harness.verify.checkpoint import MAX_TREE_SIZE

__all__ = ["format_checkpoint_body"]

_FORBIDDEN_CONTROL = re.compile(r"[\x00-\x1f]")


def _check_line(what: str, line: str) -> None:
    if not isinstance(line, str):
        raise TypeError(f"checkpoint {what} must be a str")
    if not line:
        raise ValueError(f"checkpoint {what} must be non-empty")
    if _FORBIDDEN_CONTROL.search(line) is not None:
        raise ValueError(f"checkpoint {what} must not contain a newline or control character")
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"checkpoint {what} is not valid UTF-8") from None


def format_checkpoint_body(
    origin: str,
    size: int,
    root_hash: bytes,
    extensions: Sequence[str] = (),
) -> bytes:
    """The checkpoint body ``origin\\nsize\\nbase64(root_hash)\\n[extension\\n...]``.

    Raises ``ValueError`` for an empty origin or extension line, one holding a newline or
    control character, a size outside 0..2^64 − 1 or an empty root hash.
    """
    _check_line("origin", origin)
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError("checkpoint tree size must be an int")
    if not 0 <= size <= MAX_TREE_SIZE:
        raise ValueError("checkpoint tree size must be in 0..2^64 - 1")
    if not isinstance(root_hash, bytes | bytearray | memoryview):
        raise TypeError("checkpoint root hash must be bytes")
    if not root_hash:
        raise ValueError("checkpoint root hash must be non-empty")
    if isinstance(extensions, str):
        raise TypeError("extensions must be a sequence of lines, not a str")
    for line in extensions:
        _check_line("extension line", line)
    root64 = base64.b64encode(bytes(root_hash)).decode("ascii")
    lines = [origin, str(size), root64, *extensions]
    return "".join(f"{line}\n" for line in lines).encode("utf-8")
