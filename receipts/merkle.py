"""RFC 6962 / RFC 9162 §2 Merkle trees, building side: roots and proofs for a log store.

Why two classes:

* ``CompactRange`` (defined in ``harness.verify.merkle``, because the verifier streams roots
  with it too; re-exported here) is what the append path of a log store needs: the current
  root after every append, in O(log n) memory and amortized O(1) hashing per leaf.
  Its state (size plus one hash per 1-bit of the size) can be persisted and restored, so a
  store can resume after a restart without rehashing its history.
* ``MerkleTree`` is what a proof server needs: all leaf hashes plus every cached interior node,
  so that the root, inclusion proofs and consistency proofs for *any past size* cost O(log n)
  hash operations instead of rehashing the leaves.

Hashing itself (``leaf_hash``, ``node_hash``, ``EMPTY_ROOT``) is imported from the checking side
``harness.verify.merkle``, never re-implemented: the builder and the verifier must agree byte
for byte, and one definition is the simplest way to guarantee that.

Proofs are RFC 6962 §2.1.1 PATH and §2.1.2 SUBPROOF (RFC 9162 §2.1.3.1, §2.1.4.1). Both classes
take *leaf hashes* (32 bytes), not leaf data, so callers choose what a leaf's bytes are; use
``leaf_hash(data)`` to get one. Bad arguments raise ``TypeError`` (wrong type, including
``bool`` for a count) or ``ValueError`` (wrong value).
"""

from __future__ import annotations

from collections.abc import Iterable

from harness.verify.merkle import EMPTY_ROOT, HASH_SIZE, CompactRange, node_hash

__all__ = ["CompactRange", "MerkleTree"]


def _check_leaf_hash(value: object) -> bytes:
    """Refuse anything but a 32-byte ``bytes`` leaf hash, before it becomes part of a root."""
    if not isinstance(value, bytes):
        raise TypeError(f"leaf hash must be bytes, got {type(value).__name__}")
    if len(value) != HASH_SIZE:
        raise ValueError(f"leaf hash is {len(value)} bytes, expected {HASH_SIZE}")
    return value


def _check_int(name: str, value: object) -> int:
    """Refuse non-int (and ``bool``) counts and negative values."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} {value} is negative")
    return value


def _split(n: int) -> int:
    """Return the largest power of two strictly less than ``n`` (n >= 2): RFC 6962's ``k``."""
    return 1 << ((n - 1).bit_length() - 1)


class MerkleTree:
    """All leaf hashes of a log plus cached interior nodes, for roots and proofs at any size.

    ``_levels[k][i]`` is the root of the aligned perfect subtree over leaves
    ``[i * 2**k, (i + 1) * 2**k)``; level 0 holds the leaf hashes. A node is stored as soon as
    its subtree is complete, and never changes afterwards (the log is append-only), so the cache
    is valid for every past size too. Any subtree the RFC recursion visits is either such a
    stored node or splits into at most O(log n) of them, which bounds every query at O(log n)
    hashes. Memory is about two hashes per leaf.
    """

    __slots__ = ("_levels",)

    def __init__(self, leaf_hashes: Iterable[bytes] = ()) -> None:
        self._levels: list[list[bytes]] = [[]]
        self.extend(leaf_hashes)

    def __len__(self) -> int:
        return len(self._levels[0])

    def append(self, leaf_hash: bytes) -> None:
        """Append one leaf hash and store every subtree it completes (amortized one hash)."""
        levels = self._levels
        row = levels[0]
        row.append(_check_leaf_hash(leaf_hash))
        level = 0
        while len(row) % 2 == 0:
            parent = node_hash(row[-2], row[-1])
            level += 1
            if level == len(levels):
                levels.append([])
            row = levels[level]
            row.append(parent)

    def extend(self, leaf_hashes: Iterable[bytes]) -> None:
        """Append each leaf hash in order."""
        for h in leaf_hashes:
            self.append(h)

    def leaf(self, index: int) -> bytes:
        """Return the leaf hash at ``index``."""
        i = _check_int("index", index)
        if i >= len(self):
            raise ValueError(f"index {i} >= size {len(self)}")
        return self._levels[0][i]

    def node(self, level: int, index: int) -> bytes:
        """Root of the complete subtree over leaves ``[index * 2**level, (index+1) * 2**level)``.

        These are the hashes a tiled log (C2SP tlog-tiles) publishes; only complete subtrees
        exist, so asking for one that is not yet complete is a ``ValueError``.
        """
        k = _check_int("level", level)
        i = _check_int("index", index)
        if k >= len(self._levels) or i >= len(self._levels[k]):
            raise ValueError(f"no complete subtree at level {k}, index {i} in size {len(self)}")
        return self._levels[k][i]

    def _size_arg(self, name: str, value: int | None) -> int:
        """Validate a tree size argument; ``None`` means the current size."""
        if value is None:
            return len(self)
        n = _check_int(name, value)
        if n > len(self):
            raise ValueError(f"{name} {n} > number of leaves {len(self)}")
        return n

    def _range_root(self, start: int, end: int) -> bytes:
        """MTH of leaves ``[start, end)``, from stored nodes wherever the RFC split allows.

        An aligned perfect range is one lookup. Otherwise the RFC splits off the largest power
        of two ``k < n``; in the ranges the proofs visit, ``start`` is a multiple of a power of
        two not smaller than ``n``, so the left part is a stored node and only the right part
        recurses, once per 1-bit of ``n``.
        """
        n = end - start
        if n == 0:
            return EMPTY_ROOT
        if n & (n - 1) == 0 and start % n == 0:
            level = n.bit_length() - 1
            return self._levels[level][start >> level]
        k = _split(n)
        return node_hash(self._range_root(start, start + k), self._range_root(start + k, end))

    def root(self, size: int | None = None) -> bytes:
        """RFC 6962 root of the first ``size`` leaves (default: all); ``EMPTY_ROOT`` for 0."""
        return self._range_root(0, self._size_arg("size", size))

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """RFC 6962 §2.1.1 PATH(index, D[0:size]): sibling hashes from the leaf up to the root.

        The recursion ``PATH(m, D[n]) = PATH(m, D[0:k]) : MTH(D[k:n])`` (m < k) or
        ``PATH(m - k, D[k:n]) : MTH(D[0:k])`` (m >= k) is unrolled top-down, collecting the
        sibling of each step, and reversed at the end because the RFC lists the deepest first.
        """
        n = self._size_arg("size", size)
        m = _check_int("index", index)
        if m >= n:
            raise ValueError(f"index {m} >= size {n}")
        siblings: list[bytes] = []
        start, end = 0, n
        while end - start > 1:
            k = _split(end - start)
            if m < start + k:
                siblings.append(self._range_root(start + k, end))
                end = start + k
            else:
                siblings.append(self._range_root(start, start + k))
                start += k
        siblings.reverse()
        return siblings

    def consistency_proof(self, size1: int, size2: int | None = None) -> list[bytes]:
        """RFC 6962 §2.1.2 PROOF(size1, D[0:size2]) = SUBPROOF(size1, D[0:size2], true).

        ``SUBPROOF(m, D[m], true)`` is empty (the verifier knows the old root);
        ``SUBPROOF(m, D[m], false)`` is ``MTH(D[m])``; for ``m < n`` with ``k`` the largest power
        of two below ``n``: ``m <= k`` gives ``SUBPROOF(m, D[0:k], b) : MTH(D[k:n])``, else
        ``SUBPROOF(m - k, D[k:n], false) : MTH(D[0:k])``. The proofs from size 0 and between
        equal sizes are empty (RFC 9162 §2.1.4.1).
        """
        n = self._size_arg("size2", size2)
        m = self._size_arg("size1", size1)
        if m > n:
            raise ValueError(f"size1 {m} > size2 {n}")
        if m in (0, n):
            return []
        siblings: list[bytes] = []
        start, end = 0, n
        whole_old_tree = True  # the RFC's ``b``: still on the path of the entire old tree
        while end != m:
            k = _split(end - start)
            if m - start <= k:
                siblings.append(self._range_root(start + k, end))
                end = start + k
            else:
                siblings.append(self._range_root(start, start + k))
                start += k
                whole_old_tree = False
        if not whole_old_tree:
            siblings.append(self._range_root(start, end))
        siblings.reverse()
        return siblings
