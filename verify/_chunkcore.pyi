"""Types of the optional compiled core (verify/_chunkcore.c); see its docstrings."""

from _typeshed import WriteableBuffer

def prepare(
    table: bytes,
    byte_class: bytes,
    accept: bytes,
    classes: int,
    start: int,
    folds: bytes,
    seq_member: int,
    time_member: int,
    mac_member: int,
    key: bytes | None,
    max_line: int,
    /,
) -> object: ...
def check(
    lines: list[bytes],
    first: int,
    prepared: object,
    seq: int,
    prev_time: bytes,
    prev_mac: bytes | None,
    leaves: WriteableBuffer,
    counts: WriteableBuffer,
    fold: tuple[dict[bytes, int | None], dict[bytes, int], object] | None,
    /,
) -> tuple[int, int, bytes, bytes, bytes | None]: ...
def levels(leaves: WriteableBuffer, count: int, /) -> list[bytes]: ...
def pack(line: bytes, members: bytes, /) -> bytes: ...
