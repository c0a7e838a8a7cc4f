"""RFC 6962 / RFC 9162 §2 Merkle tree hashes and proof checks (the checking side).

Why this module exists: a transparency-log checkpoint only proves something about a record if
the verifier can recompute the log's root hash from the record and a short proof, byte for byte
as the log computed it. This module is that recomputation, and nothing else.

Design choices, and why:

* Hashing is RFC 6962's SHA-256 with domain separation: a leaf is ``SHA-256(0x00 || data)``, an
  interior node ``SHA-256(0x01 || left || right)``. The prefixes make a leaf hash and a node hash
  of the same bytes differ, so nobody can present an interior node as a leaf (the classic second
  pre-image trick on plain Merkle trees). The empty tree's root is ``SHA-256("")``.
* The checks follow transparency-dev/merkle ``proof/verify.go`` (the verifier behind Go's
  checksum database, Trillian and Rekor), so a proof is accepted here iff it is accepted there,
  with stricter input rules: every hash (leaf hash, roots, each proof element) must be a
  ``bytes`` object of exactly 32 bytes, counts must be non-bool ``int`` in ``0 .. 2**64-1`` (the
  RFC's ``uint64``), and wrong types give a ``ProofError`` rather than a ``TypeError``, so a caller
  catching ``VerificationError`` never misses a malformed proof.
* The proof length is fully determined by the index and the size(s). A proof that is too long
  is rejected, not truncated: accepting trailing data would let one proof verify under several
  interpretations.
* Only ``hashlib`` is used: code on the trust path stays small, auditable and offline.

Every failure raises ``InclusionProofError`` or ``ConsistencyProofError`` (both ``ProofError``)
with a message naming the check; success returns ``None``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Final

from .errors import ConsistencyProofError, InclusionProofError, ProofError

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "MAX_TREE_SIZE",
    "CompactRange",
    "leaf_hash",
    "node_hash",
    "prefix_subtrees",
    "root_from_inclusion_proof",
    "subtree_levels",
    "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE: Final = 32
"""Length in bytes of every hash in an RFC 6962 SHA-256 tree."""

MAX_TREE_SIZE: Final = 2**64 - 1
"""RFC 9162 encodes tree sizes and leaf indices as uint64; larger values cannot be real."""

EMPTY_ROOT: Final[bytes] = hashlib.sha256(b"").digest()
"""Root hash of the tree with no leaves (RFC 6962 §2.1: MTH({}) = SHA-256())."""

_LEAF_PREFIX: Final = b"\x00"
_NODE_PREFIX: Final = b"\x01"


def leaf_hash(data: bytes) -> bytes:
    """Return ``SHA-256(0x00 || data)``, the hash of a leaf holding ``data``.

    The 0x00 prefix separates leaves from interior nodes (see the module docstring). ``update``
    is used instead of concatenation so large leaves are not copied.
    """
    h = hashlib.sha256(_LEAF_PREFIX)
    h.update(data)
    return h.digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """Return ``SHA-256(0x01 || left || right)``, the hash of an interior node.

    No length check: the RFC hasher is defined on any byte strings (its own test vectors hash
    4-byte children), and the proof checks below validate lengths before they get here.
    """
    return hashlib.sha256(_NODE_PREFIX + left + right).digest()


# --------------------------------------------------------------------------- input checks


def _check_count(name: str, value: object, error: type[ProofError]) -> int:
    """Return ``value`` if it is a usable index or size, else raise ``error``.

    ``bool`` is refused although it is an ``int`` subclass: ``True`` as a leaf index is a bug in
    the caller, never a meaningful index.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{name} must be an int, got {type(value).__name__}")
    if value < 0 or value > MAX_TREE_SIZE:
        # Never str() an unbounded int in a message: past 4300 digits that raises ValueError.
        shown = str(value) if value.bit_length() <= 128 else f"of {value.bit_length()} bits"
        if value < 0:
            raise error(f"{name} {shown} is negative")
        raise error(f"{name} {shown} exceeds the uint64 range of RFC 9162")
    return value


def _check_hash(name: str, value: object, error: type[ProofError]) -> bytes:
    """Return ``value`` if it is a 32-byte ``bytes`` hash, else raise ``error``.

    A hash of another length can never be a SHA-256 output; comparing or hashing it anyway would
    turn a malformed input into a confusing "root mismatch" (or, for proof elements, change how
    the bytes are framed inside the next hash).
    """
    if not isinstance(value, bytes):
        raise error(f"{name} is {type(value).__name__}, expected bytes")
    if len(value) != HASH_SIZE:
        raise error(f"{name} is {len(value)} bytes, expected {HASH_SIZE}")
    return value


def _check_proof(
    proof: object, expected: int, context: str, error: type[ProofError]
) -> list[bytes]:
    """Return the proof as a list of 32-byte hashes if it has exactly ``expected`` elements."""
    if isinstance(proof, str | bytes | bytearray | memoryview) or not isinstance(proof, Sequence):
        raise error(f"proof must be a sequence of hashes, got {type(proof).__name__}")
    if len(proof) != expected:
        raise error(f"proof has {len(proof)} hashes, expected {expected} ({context})")
    return [_check_hash(f"proof[{i}]", h, error) for i, h in enumerate(proof)]


def _short(h: bytes) -> str:
    """Abbreviate a hash for error messages; 16 hex digits tell two hashes apart in practice."""
    return h.hex()[:16] + "…"


# --------------------------------------------------------------------------- the algorithms


def _decompose(index: int, size: int) -> tuple[int, int]:
    """Split the audit path of leaf ``index`` in a tree of ``size`` leaves into (inner, border).

    The paths from leaf ``index`` and from the last leaf (``size - 1``) to the root meet at level
    ``inner = bit_length(index XOR (size - 1))``. Below that level the leaf lies in a perfect
    subtree of ``2**inner`` leaves, so every level has a sibling, on the left or the right as bit
    ``level`` of ``index`` says. Above it the path runs along the tree's right border: a node
    there has a (left) sibling only where it is a right child, i.e. at the 1-bits of
    ``index >> inner``; where it would be a left child it has no right sibling and is carried up
    unchanged. Hence ``border = popcount(index >> inner)`` and the proof has ``inner + border``
    hashes, ordered from the leaf up.
    """
    inner = (index ^ (size - 1)).bit_length()
    border = (index >> inner).bit_count()
    return inner, border


def _chain_inner(seed: bytes, proof: Sequence[bytes], index: int) -> bytes:
    """Hash ``seed`` up through the inner levels; bit ``i`` of ``index`` says which side it is."""
    for i, h in enumerate(proof):
        seed = node_hash(h, seed) if (index >> i) & 1 else node_hash(seed, h)
    return seed


def _chain_inner_right(seed: bytes, proof: Sequence[bytes], index: int) -> bytes:
    """Like ``_chain_inner`` but use only left siblings (the 1-bits of ``index``).

    Used to rebuild the *old* root of a consistency proof: right siblings cover leaves appended
    after the old size, so the old tree does not contain them and the node is carried up as is.
    """
    for i, h in enumerate(proof):
        if (index >> i) & 1:
            seed = node_hash(h, seed)
    return seed


def _chain_border_right(seed: bytes, proof: Sequence[bytes]) -> bytes:
    """Hash ``seed`` up the right border, where every sibling is on the left."""
    for h in proof:
        seed = node_hash(h, seed)
    return seed


def root_from_inclusion_proof(
    leaf_index: int, tree_size: int, leaf_hash: bytes, proof: Sequence[bytes]
) -> bytes:
    """Return the root that ``proof`` implies for leaf ``leaf_index`` of a ``tree_size`` tree.

    Exposed separately from ``verify_inclusion`` for callers that must compare the result with
    several candidate roots, or report it. Raises ``InclusionProofError`` for malformed input
    (out-of-range index, wrong hash lengths, wrong proof length); a well-formed but wrong proof
    simply yields a different root.
    """
    err = InclusionProofError
    index = _check_count("index", leaf_index, err)
    size = _check_count("size", tree_size, err)
    if index >= size:
        raise err(f"index {index} >= size {size}")
    leaf = _check_hash("leaf hash", leaf_hash, err)
    inner, border = _decompose(index, size)
    hashes = _check_proof(proof, inner + border, f"index {index}, size {size}", err)
    res = _chain_inner(leaf, hashes[:inner], index)
    return _chain_border_right(res, hashes[inner:])


def verify_inclusion(
    leaf_index: int, tree_size: int, leaf_hash: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    """Check that ``leaf_hash`` is leaf ``leaf_index`` of the ``tree_size``-leaf tree ``root``.

    RFC 9162 §2.1.3.2. Note what this does *not* bind: ``tree_size`` only fixes the shape of
    the path, so a proof may also verify for another size with the same path shape (e.g. leaf 0
    of sizes 3 and 4). The root is what binds the size; callers must take ``root`` and
    ``tree_size`` together from one signed checkpoint.

    Raises ``InclusionProofError`` on any failure, returns ``None`` on success.
    """
    computed = root_from_inclusion_proof(leaf_index, tree_size, leaf_hash, proof)
    expected = _check_hash("root", root, InclusionProofError)
    if computed != expected:
        raise InclusionProofError(
            f"computed root {_short(computed)} != expected {_short(expected)} "
            f"(index {leaf_index}, size {tree_size})"
        )


def verify_consistency(
    size1: int, size2: int, proof: Sequence[bytes], root1: bytes, root2: bytes
) -> None:
    """Check that the ``size1`` tree ``root1`` is a prefix of the ``size2`` tree ``root2``.

    RFC 9162 §2.1.4.2, in the formulation of transparency-dev/merkle. The old tree is a row of
    perfect subtrees, one per 1-bit of ``size1``; the smallest has ``2**shift`` leaves, where
    ``shift`` is the number of trailing zero bits of ``size1``. Its root (the "seed") is the
    proof's first element, or ``root1`` itself when ``size1`` is a power of two (the seed is then
    the whole old tree, and the RFC omits it). The remaining elements are the inclusion path of
    that seed node in the new tree, from level ``shift`` up. Hashing the seed with only the left
    siblings must give ``root1`` (right siblings are newer leaves), hashing it with all of them
    must give ``root2``.

    Edge cases, decided here:

    * ``size1 > size2``: error; a log never shrinks.
    * ``size1 == size2``: the proof must be empty and ``root1 == root2``.
    * ``size1 == 0``: every tree extends the empty tree, so the proof must be empty (RFC 9162
      §2.1.4.1 defines no proof elements for it) and ``root1``'s *value* is not compared, as in
      transparency-dev/merkle; it must still be a 32-byte hash like every other input.
      Checking that a size-0 checkpoint carries ``EMPTY_ROOT`` is the checkpoint reader's job.

    Raises ``ConsistencyProofError`` on any failure, returns ``None`` on success.
    """
    err = ConsistencyProofError
    old = _check_count("size1", size1, err)
    new = _check_count("size2", size2, err)
    if old > new:
        raise err(f"size1 {old} > size2 {new}: a log cannot shrink")
    r1 = _check_hash("root1", root1, err)
    r2 = _check_hash("root2", root2, err)
    context = f"size1 {old}, size2 {new}"

    if old == new:
        _check_proof(proof, 0, context, err)
        if r1 != r2:
            raise err(f"root1 {_short(r1)} != root2 {_short(r2)} for equal sizes {old}")
        return
    if old == 0:
        _check_proof(proof, 0, context, err)
        return

    inner, border = _decompose(old - 1, new)
    shift = (old & -old).bit_length() - 1  # trailing zero bits of size1; shift < inner here
    inner -= shift
    seed_given = old != 1 << shift
    hashes = _check_proof(proof, int(seed_given) + inner + border, context, err)
    if seed_given:
        seed, path = hashes[0], hashes[1:]
    else:
        seed, path = r1, hashes
    mask = (old - 1) >> shift  # the seed's index among the nodes of level ``shift``

    hash1 = _chain_inner_right(seed, path[:inner], mask)
    hash1 = _chain_border_right(hash1, path[inner:])
    if hash1 != r1:
        raise err(f"computed root1 {_short(hash1)} != expected {_short(r1)} ({context})")

    hash2 = _chain_inner(seed, path[:inner], mask)
    hash2 = _chain_border_right(hash2, path[inner:])
    if hash2 != r2:
        raise err(f"computed root2 {_short(hash2)} != expected {_short(r2)} ({context})")


def _builder_leaf_hash(value: object) -> bytes:
    """Refuse anything but a 32-byte ``bytes`` leaf hash, before it becomes part of a root."""
    if not isinstance(value, bytes):
        raise TypeError(f"leaf hash must be bytes, got {type(value).__name__}")
    if len(value) != HASH_SIZE:
        raise ValueError(f"leaf hash is {len(value)} bytes, expected {HASH_SIZE}")
    return value


class CompactRange:
    """Running RFC 6962 root of an append-only sequence of leaf hashes, in O(log n) memory.

    The tree over ``n`` leaves is a row of perfect subtrees, one per 1-bit of ``n``, largest
    first; ``peaks`` holds their roots. Appending a leaf works like incrementing a binary
    counter: the new leaf is pushed, then merged with the previous peak once per trailing 1-bit
    of the old size. That is amortized one hash per append. The root folds the peaks from the
    right (O(log n) hashes) and is cached until the next append, so reading it after every
    append costs no more than the fold.
    """

    __slots__ = ("_peaks", "_root", "_size")

    def __init__(self) -> None:
        self._size = 0
        self._peaks: list[bytes] = []
        self._root: bytes | None = EMPTY_ROOT

    @classmethod
    def from_state(cls, size: int, peaks: Sequence[bytes]) -> CompactRange:
        """Restore a range saved as ``(cr.size, cr.peaks)``.

        The peak count must equal the number of 1-bits of ``size``; anything else cannot be
        the state of a real range.
        """
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"size {size!r} is not a non-negative int")
        n = size
        if len(peaks) != n.bit_count():
            raise ValueError(f"size {n} needs {n.bit_count()} peaks, got {len(peaks)}")
        cr = cls()
        cr._peaks = [_builder_leaf_hash(p) for p in peaks]
        cr._size = n
        cr._root = None
        return cr

    @property
    def size(self) -> int:
        """Number of leaves appended so far."""
        return self._size

    @property
    def peaks(self) -> tuple[bytes, ...]:
        """Roots of the perfect subtrees making up the tree, largest (leftmost) first."""
        return tuple(self._peaks)

    def __len__(self) -> int:
        return self._size

    def append(self, leaf_hash: bytes) -> None:
        """Append one leaf hash (amortized one ``node_hash`` call)."""
        peaks = self._peaks
        peaks.append(_builder_leaf_hash(leaf_hash))
        n = self._size
        while n & 1:
            right = peaks.pop()
            peaks[-1] = node_hash(peaks[-1], right)
            n >>= 1
        self._size += 1
        self._root = None

    def append_subtree(self, height: int, root: bytes) -> None:
        """Append the root of a perfect subtree of ``2**height`` leaves.

        Only an aligned subtree can join a range: the size must be a multiple of
        ``2**height`` (RFC 6962's perfect subtrees start at multiples of their own size).
        This is how chunks hashed apart (in other processes) join one running root: appending
        the subtrees of ``prefix_subtrees`` gives the state ``append`` would reach leaf by leaf.
        """
        if isinstance(height, bool) or not isinstance(height, int) or not 0 <= height < 64:
            raise ValueError(f"height {height!r} is not an int in 0..63")
        if self._size & ((1 << height) - 1):
            raise ValueError(f"size {self._size} is not a multiple of 2**{height}")
        peaks = self._peaks
        peaks.append(_builder_leaf_hash(root))
        n = self._size >> height
        while n & 1:
            right = peaks.pop()
            peaks[-1] = node_hash(peaks[-1], right)
            n >>= 1
        self._size += 1 << height
        self._root = None

    def copy(self) -> CompactRange:
        """An independent range in the same state (to read a root a few leaves ahead)."""
        cr = CompactRange.__new__(CompactRange)
        cr._size, cr._peaks, cr._root = self._size, list(self._peaks), self._root
        return cr

    def extend(self, leaf_hashes: Iterable[bytes]) -> None:
        """Append each leaf hash in order."""
        for h in leaf_hashes:
            self.append(h)

    def root(self) -> bytes:
        """RFC 6962 root of all leaves appended so far; ``EMPTY_ROOT`` when there are none."""
        if self._root is None:
            peaks = self._peaks
            if not peaks:
                return EMPTY_ROOT
            res = peaks[-1]
            for peak in reversed(peaks[:-1]):
                res = node_hash(peak, res)
            self._root = res
        return self._root


def subtree_levels(leaves: list[bytes]) -> list[list[bytes]]:
    """``levels[h][i]``: the root of the perfect subtree over ``leaves[i*2**h:(i+1)*2**h]``.

    Level by level, complete pairs only (a trailing odd node stays unpaired): one node hash per
    interior node, each level one list comprehension. With the leaves of a chunk that starts
    at a multiple of a power of two at least their count, these are nodes of the whole tree.
    """
    sha256, prefix = hashlib.sha256, _NODE_PREFIX
    levels = [leaves]
    row = leaves
    while len(row) > 1:
        row = [sha256(prefix + row[i] + row[i + 1]).digest() for i in range(0, len(row) - 1, 2)]
        levels.append(row)
    return levels


def prefix_subtrees(levels: Sequence[Sequence[bytes]], count: int) -> list[tuple[int, bytes]]:
    """The perfect subtrees covering leaves ``[0, count)`` of ``levels``, largest first, as
    ``(height, root)``: one per 1-bit of ``count`` (what ``CompactRange.append_subtree``
    takes, in this order)."""
    out: list[tuple[int, bytes]] = []
    position = 0
    for height in range(count.bit_length() - 1, -1, -1):
        if count >> height & 1:
            out.append((height, levels[height][position >> height]))
            position += 1 << height
    return out
