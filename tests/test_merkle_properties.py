"""Property and unit tests for RFC 6962 Merkle trees: builder (receipts) vs. checker (verify).

Three kinds of evidence that the two sides are right, not merely consistent with each other:

* an independent reference, written here straight from the RFC 6962 §2.1 definitions (MTH,
  PATH, SUBPROOF) with plain ``hashlib``, compared with the builder for every size 0..64 and
  every index / old size;
* hypothesis properties over a shared tree of a few thousand random leaves: every proof the
  builder makes verifies, and every single-point corruption of a proof, hash, index or size is
  rejected (or, where the RFC makes it indistinguishable, accepted, and we check that too);
* unit tests of the argument checks and of the error messages.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.receipts.merkle import CompactRange, MerkleTree
from harness.verify.errors import (
    ConsistencyProofError,
    InclusionProofError,
    ProofError,
    VerificationError,
)
from harness.verify.merkle import (
    EMPTY_ROOT,
    MAX_TREE_SIZE,
    leaf_hash,
    node_hash,
    root_from_inclusion_proof,
    verify_consistency,
    verify_inclusion,
)

BIG = 3000  # leaves in the shared tree the properties pick sizes from
PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MANY = settings(PROPS, max_examples=500)

# --------------------------------------------------------------------------- RFC 6962 reference
# Written from RFC 6962 §2.1 / RFC 9162 §2.1 only; deliberately naive (slices, recursion, no
# caching) and independent of harness.verify.merkle, including its hash helpers.


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _ref_k(n: int) -> int:
    """ "the largest power of two smaller than n" (n > 1)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def ref_mth(d: Sequence[bytes]) -> bytes:
    """MTH(D[n]) over leaf *data*."""
    n = len(d)
    if n == 0:
        return _sha256(b"")
    if n == 1:
        return _sha256(b"\x00" + d[0])
    k = _ref_k(n)
    return _sha256(b"\x01" + ref_mth(d[:k]) + ref_mth(d[k:n]))


def ref_path(m: int, d: Sequence[bytes]) -> list[bytes]:
    """PATH(m, D[n]), RFC 6962 §2.1.1."""
    n = len(d)
    if n == 1:
        return []
    k = _ref_k(n)
    if m < k:
        return [*ref_path(m, d[:k]), ref_mth(d[k:n])]
    return [*ref_path(m - k, d[k:n]), ref_mth(d[:k])]


def ref_subproof(m: int, d: Sequence[bytes], b: bool) -> list[bytes]:
    """SUBPROOF(m, D[n], b), RFC 6962 §2.1.2."""
    n = len(d)
    if m == n:
        return [] if b else [ref_mth(d)]
    k = _ref_k(n)
    if m <= k:
        return [*ref_subproof(m, d[:k], b), ref_mth(d[k:n])]
    return [*ref_subproof(m - k, d[k:n], False), ref_mth(d[:k])]


def ref_proof(m: int, d: Sequence[bytes]) -> list[bytes]:
    """PROOF(m, D[n]); RFC 9162 §2.1.4.1: the proof from the empty tree is empty."""
    return [] if m == 0 else ref_subproof(m, d, True)


REF_DATA = [b""] + [b"leaf %d" % i for i in range(1, 65)]


def test_reference_agrees_with_published_root() -> None:
    """Sanity of the reference itself: RFC 6962's empty root and one CT test-vector root."""
    assert ref_mth([]) == EMPTY_ROOT
    ct_leaves = [bytes.fromhex(x) for x in ("", "00", "10", "2021", "3031", "40414243")]
    want = "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4"  # size 5
    assert ref_mth(ct_leaves[:5]).hex() == want


def test_builder_matches_reference_for_all_small_trees() -> None:
    """Sizes 0..64, every index and every old size: roots, PATH and PROOF byte for byte."""
    tree = MerkleTree()
    cr = CompactRange()
    fresh_roots = []
    for n in range(65):
        data = REF_DATA[:n]
        if n:
            tree.append(_sha256(b"\x00" + data[-1]))
            cr.append(_sha256(b"\x00" + data[-1]))
        want = ref_mth(data)
        assert tree.root() == want, n
        assert cr.root() == want, n
        fresh_roots.append(want)
        for m in range(n):
            proof = tree.inclusion_proof(m, n)
            assert proof == ref_path(m, data), (m, n)
            verify_inclusion(m, n, _sha256(b"\x00" + data[m]), proof, want)
        for m in range(n + 1):
            proof = tree.consistency_proof(m, n)
            assert proof == ref_proof(m, data), (m, n)
            verify_consistency(m, n, proof, ref_mth(data[:m]), want)
    # The same answers for past sizes, from the full tree's cached nodes.
    for n in range(65):
        assert tree.root(n) == fresh_roots[n]
        for m in range(n):
            assert tree.inclusion_proof(m, n) == ref_path(m, REF_DATA[:n])
        for m in range(0, n + 1, 3):
            assert tree.consistency_proof(m, n) == ref_proof(m, REF_DATA[:n])


# --------------------------------------------------------------------------- shared big tree


@cache
def big_leaves() -> tuple[bytes, ...]:
    rng = random.Random(6962)
    return tuple(leaf_hash(rng.randbytes(rng.randrange(0, 40))) for _ in range(BIG))


@cache
def big_tree() -> MerkleTree:
    return MerkleTree(big_leaves())


def test_compact_range_matches_tree_at_every_size() -> None:
    tree = big_tree()
    cr = CompactRange()
    assert cr.root() == tree.root(0) == EMPTY_ROOT
    for n, h in enumerate(big_leaves(), start=1):
        cr.append(h)
        assert cr.size == len(cr) == n
        assert cr.root() == tree.root(n), n
        # Persisted state restores to the same range.
        if n % 97 == 0:
            restored = CompactRange.from_state(cr.size, cr.peaks)
            assert restored.root() == cr.root()
            assert len(cr.peaks) == n.bit_count()


def test_tree_nodes_are_subtree_roots() -> None:
    tree = big_tree()
    leaves = big_leaves()
    for level in range(5):
        width = 1 << level
        for index in (0, 1, 7, (BIG // width) - 1):
            sub = MerkleTree(leaves[index * width : (index + 1) * width])
            assert tree.node(level, index) == sub.root()


def _flip(h: bytes, bit: int) -> bytes:
    b = bytearray(h)
    b[bit // 8] ^= 1 << (bit % 8)
    return bytes(b)


def _incl_shape(index: int, size: int) -> tuple[int, int, int] | None:
    """What determines the computation in verify_inclusion; None if it rejects outright.

    RFC 6962 proofs do not commit to the tree size beyond the path's shape, so a changed
    index/size whose shape (inner, border, low index bits) is unchanged verifies too.
    """
    if not 0 <= index < size:
        return None
    inner = (index ^ (size - 1)).bit_length()
    return inner, (index >> inner).bit_count(), index & ((1 << inner) - 1)


def _cons_shape(size1: int, size2: int) -> tuple[bool, int, int, int] | None:
    """Shape of a proper (0 < size1 < size2) consistency check; None otherwise."""
    if not 0 < size1 < size2:
        return None
    inner = ((size1 - 1) ^ (size2 - 1)).bit_length()
    border = ((size1 - 1) >> inner).bit_count()
    shift = (size1 & -size1).bit_length() - 1
    inner -= shift
    mask = (size1 - 1) >> shift
    return size1 == 1 << shift, inner, border, mask & ((1 << inner) - 1)


def _fails_incl(*args: Any) -> bool:
    try:
        verify_inclusion(*args)
    except InclusionProofError:
        return True
    return False


def _fails_cons(*args: Any) -> bool:
    try:
        verify_consistency(*args)
    except ConsistencyProofError:
        return True
    return False


@st.composite
def index_and_size(draw: st.DrawFn) -> tuple[int, int]:
    size = draw(st.integers(1, BIG) | st.sampled_from([1, 2, 3, 4, 5, 1024, 2047, 2048, BIG]))
    index = draw(st.integers(0, size - 1) | st.sampled_from([0, size - 1]))
    return index, size


@st.composite
def two_sizes(draw: st.DrawFn) -> tuple[int, int]:
    size2 = draw(st.integers(0, BIG) | st.sampled_from([0, 1, 2, 3, 4, 8, 1024, 2048, BIG]))
    size1 = draw(st.integers(0, size2) | st.sampled_from([0, 1, size2 // 2, size2 - 1, size2]))
    return max(0, min(size1, size2)), size2


@MANY
@given(index_and_size(), st.data())
def test_inclusion_proofs_verify_and_tampering_fails(
    case: tuple[int, int], data: st.DataObject
) -> None:
    index, size = case
    tree = big_tree()
    leaf = tree.leaf(index)
    proof = tree.inclusion_proof(index, size)
    root = tree.root(size)
    verify_inclusion(index, size, leaf, proof, root)
    verify_inclusion(index, size, leaf, tuple(proof), root)
    assert root_from_inclusion_proof(index, size, leaf, proof) == root

    bit = data.draw(st.integers(0, 255), label="bit")
    # Any bit of any input hash.
    assert _fails_incl(index, size, _flip(leaf, bit), proof, root)
    assert _fails_incl(index, size, leaf, proof, _flip(root, bit))
    for i in range(len(proof)):
        bad = [*proof[:i], _flip(proof[i], bit), *proof[i + 1 :]]
        assert _fails_incl(index, size, leaf, bad, root), i
    # Dropped or extra elements.
    extra = data.draw(st.binary(min_size=32, max_size=32), label="extra")
    for i in range(len(proof)):
        assert _fails_incl(index, size, leaf, proof[:i] + proof[i + 1 :], root)
    for i in range(len(proof) + 1):
        assert _fails_incl(index, size, leaf, [*proof[:i], extra, *proof[i:]], root)
    # Index / size off by one: rejected unless the path shape (hence the computation) is equal.
    shape = _incl_shape(index, size)
    for i2, n2 in ((index - 1, size), (index + 1, size), (index, size - 1), (index, size + 1)):
        if i2 < 0 or n2 < 0:
            continue
        same = _incl_shape(i2, n2) == shape
        assert _fails_incl(i2, n2, leaf, proof, root) != same, (i2, n2)


@MANY
@given(two_sizes(), st.data())
def test_consistency_proofs_verify_and_tampering_fails(
    case: tuple[int, int], data: st.DataObject
) -> None:
    size1, size2 = case
    tree = big_tree()
    proof = tree.consistency_proof(size1, size2)
    root1, root2 = tree.root(size1), tree.root(size2)
    verify_consistency(size1, size2, proof, root1, root2)

    bit = data.draw(st.integers(0, 255), label="bit")
    # From size 0 to a larger size neither root is compared (anything extends the empty tree);
    # between equal sizes, even 0, the roots must be equal.
    roots_checked = size1 != 0 or size2 == 0
    assert _fails_cons(size1, size2, proof, _flip(root1, bit), root2) == roots_checked
    assert _fails_cons(size1, size2, proof, root1, _flip(root2, bit)) == roots_checked
    for i in range(len(proof)):
        bad = [*proof[:i], _flip(proof[i], bit), *proof[i + 1 :]]
        assert _fails_cons(size1, size2, bad, root1, root2), i
    extra = data.draw(st.binary(min_size=32, max_size=32), label="extra")
    for i in range(len(proof)):
        assert _fails_cons(size1, size2, proof[:i] + proof[i + 1 :], root1, root2)
    for i in range(len(proof) + 1):
        assert _fails_cons(size1, size2, [*proof[:i], extra, *proof[i:]], root1, root2)
    if 0 < size1 < size2:
        assert _fails_cons(size1, size2, proof, root2, root1)  # swapped roots
        assert _fails_cons(size1, size2, [], root1, root2)

    shape = _cons_shape(size1, size2)
    for m, n in ((size1 - 1, size2), (size1 + 1, size2), (size1, size2 - 1), (size1, size2 + 1)):
        if m < 0 or n < 0:
            continue
        if m > n:
            expect_ok = False
        elif m == n:
            expect_ok = not proof and root1 == root2
        elif m == 0:
            expect_ok = not proof
        else:
            expect_ok = shape is not None and _cons_shape(m, n) == shape
        assert _fails_cons(m, n, proof, root1, root2) != expect_ok, (m, n)


@PROPS
@given(st.lists(st.binary(max_size=6), max_size=150))
def test_random_small_trees(leaves: list[bytes]) -> None:
    """Arbitrary (also duplicate or empty) leaf data: both builders agree at every size."""
    hashes = [leaf_hash(d) for d in leaves]
    tree = MerkleTree(hashes)
    cr = CompactRange()
    assert cr.root() == tree.root(0)
    for n, h in enumerate(hashes, start=1):
        cr.append(h)
        assert cr.root() == tree.root(n)
    assert tree.root() == ref_mth(leaves)
    n = len(tree)
    for m in {0, n // 3, n // 2, n - 1} - {-1}:
        if m < n:
            verify_inclusion(m, n, hashes[m], tree.inclusion_proof(m, n), tree.root())
        verify_consistency(m, n, tree.consistency_proof(m, n), tree.root(m), tree.root())


# Junk of the "right" Python shape must only ever produce ProofError, never another exception.
_junk_int = st.one_of(
    st.integers(-3, 40), st.booleans(), st.just(2**64), st.just(2**64 - 1), st.none(), st.floats()
)
_junk_hash = st.one_of(
    st.binary(min_size=30, max_size=34),
    st.binary(min_size=32, max_size=32).map(bytearray),
    st.text(max_size=33),
    st.none(),
    st.integers(),
)
_junk_proof = st.one_of(
    st.lists(st.one_of(st.binary(min_size=32, max_size=32), _junk_hash), max_size=8),
    st.none(),
    st.binary(max_size=64),
    st.text(max_size=4),
    st.integers(),
)


@PROPS
@given(_junk_int, _junk_int, _junk_hash | st.binary(min_size=32, max_size=32), _junk_proof)
def test_junk_inclusion_input_only_raises_proof_error(
    index: Any, size: Any, h: Any, proof: Any
) -> None:
    """Only InclusionProofError, and always it: no leaf is included in the empty tree's root (a
    tree of size >= 1 would need a SHA-256 preimage of the empty string to hash to it)."""
    with pytest.raises(InclusionProofError):
        verify_inclusion(index, size, h, proof, EMPTY_ROOT)


@PROPS
@given(_junk_int, _junk_int, _junk_proof, _junk_hash, _junk_hash)
def test_junk_consistency_input_only_raises_proof_error(
    size1: Any, size2: Any, proof: Any, root1: Any, root2: Any
) -> None:
    """Only ConsistencyProofError; junk passes only in the two trivial cases that need no
    hashing: an empty proof from the empty tree, or equal sizes with equal roots."""
    try:
        verify_consistency(size1, size2, proof, root1, root2)
    except ConsistencyProofError:
        return
    assert type(size1) is int and type(size2) is int
    assert len(proof) == 0
    assert size1 == 0 or (size1 == size2 and bytes(root1) == bytes(root2))
    assert len(root1) == len(root2) == 32


# --------------------------------------------------------------------------- unit: verifier


def _std() -> tuple[MerkleTree, list[bytes]]:
    leaves = [leaf_hash(b"%d" % i) for i in range(8)]
    return MerkleTree(leaves), leaves


def test_hash_helpers() -> None:
    assert hashlib.sha256(b"").digest() == EMPTY_ROOT
    assert leaf_hash(b"x") == hashlib.sha256(b"\x00x").digest()
    assert node_hash(b"a", b"b") == hashlib.sha256(b"\x01ab").digest()
    assert leaf_hash(b"") != node_hash(b"", b"")


def test_error_hierarchy() -> None:
    assert issubclass(InclusionProofError, ProofError)
    assert issubclass(ConsistencyProofError, ProofError)
    assert issubclass(ProofError, VerificationError)


@pytest.mark.parametrize(
    ("index", "size", "message"),
    [
        (True, 8, "index must be an int, got bool"),
        (0, True, "size must be an int, got bool"),
        (1.0, 8, "index must be an int, got float"),
        (-1, 8, "index -1 is negative"),
        (0, -1, "size -1 is negative"),
        (8, 8, "index 8 >= size 8"),
        (0, 0, "index 0 >= size 0"),
        (2**64 - 1, 8, "index 18446744073709551615 >= size 8"),
        (0, 2**64, "size 18446744073709551616 exceeds the uint64 range"),
    ],
)
def test_inclusion_rejects_bad_index_or_size(index: Any, size: Any, message: str) -> None:
    tree, leaves = _std()
    with pytest.raises(InclusionProofError, match=message):
        verify_inclusion(index, size, leaves[0], tree.inclusion_proof(0, 8), tree.root())


@pytest.mark.parametrize("length", [0, 31, 33, 64])
def test_inclusion_rejects_wrong_hash_lengths(length: int) -> None:
    tree, leaves = _std()
    proof, root = tree.inclusion_proof(5, 8), tree.root()
    junk = b"\x5a" * length
    with pytest.raises(InclusionProofError, match=f"leaf hash is {length} bytes, expected 32"):
        verify_inclusion(5, 8, junk, proof, root)
    with pytest.raises(InclusionProofError, match=f"^root is {length} bytes, expected 32"):
        verify_inclusion(5, 8, leaves[5], proof, junk)
    bad = [proof[0], proof[1], junk]
    with pytest.raises(InclusionProofError, match=f"proof\\[2\\] is {length} bytes, expected 32"):
        verify_inclusion(5, 8, leaves[5], bad, root)


@pytest.mark.parametrize("element", ["a" * 32, 7, None, bytearray(32), memoryview(bytes(32))])
def test_inclusion_rejects_non_bytes_in_proof(element: Any) -> None:
    tree, leaves = _std()
    proof: list[Any] = list(tree.inclusion_proof(5, 8))
    proof[1] = element
    with pytest.raises(InclusionProofError, match=r"proof\[1\] is \w+, expected bytes"):
        verify_inclusion(5, 8, leaves[5], proof, tree.root())
    with pytest.raises(InclusionProofError, match="leaf hash is"):
        verify_inclusion(5, 8, element, tree.inclusion_proof(5, 8), tree.root())


@pytest.mark.parametrize("proof", [None, b"\x00" * 96, "abc", 3, iter([b"\x00" * 32])])
def test_inclusion_rejects_proof_that_is_not_a_sequence(proof: Any) -> None:
    tree, leaves = _std()
    with pytest.raises(InclusionProofError, match="proof must be a sequence of hashes"):
        verify_inclusion(5, 8, leaves[5], proof, tree.root())


def test_inclusion_messages() -> None:
    tree, leaves = _std()
    proof, root = tree.inclusion_proof(5, 8), tree.root()
    with pytest.raises(InclusionProofError, match=r"^proof has 4 hashes, expected 3 \("):
        verify_inclusion(5, 8, leaves[5], [*proof, root], root)
    with pytest.raises(InclusionProofError, match=r"^proof has 2 hashes, expected 3"):
        verify_inclusion(5, 8, leaves[5], proof[:2], root)
    with pytest.raises(InclusionProofError, match=r"^computed root [0-9a-f]{16}… != expected "):
        verify_inclusion(5, 8, leaves[4], proof, root)
    # Single-leaf tree: the root is the leaf hash and the proof is empty.
    verify_inclusion(0, 1, leaves[0], [], leaves[0])


def test_inclusion_size_is_bound_only_by_the_root() -> None:
    """Documented RFC property: leaf 0's path in sizes 3 and 4 has the same shape."""
    tree, leaves = _std()
    proof3 = tree.inclusion_proof(0, 3)
    verify_inclusion(0, 4, leaves[0], proof3, tree.root(3))
    with pytest.raises(InclusionProofError):
        verify_inclusion(0, 4, leaves[0], proof3, tree.root(4))


@pytest.mark.parametrize(
    ("size1", "size2", "message"),
    [
        (False, 8, "size1 must be an int, got bool"),
        (1, True, "size2 must be an int, got bool"),
        (None, 8, "size1 must be an int, got NoneType"),
        (-1, 8, "size1 -1 is negative"),
        (9, 8, "size1 9 > size2 8: a log cannot shrink"),
        (1, 2**64, "size2 18446744073709551616 exceeds"),
    ],
)
def test_consistency_rejects_bad_sizes(size1: Any, size2: Any, message: str) -> None:
    tree, _ = _std()
    with pytest.raises(ConsistencyProofError, match=message):
        verify_consistency(size1, size2, tree.consistency_proof(1, 8), tree.root(1), tree.root())


def test_consistency_edge_cases() -> None:
    tree, _ = _std()
    r = [tree.root(n) for n in range(9)]
    # Equal sizes: empty proof and equal roots.
    verify_consistency(5, 5, [], r[5], r[5])
    verify_consistency(0, 0, [], r[0], r[0])
    with pytest.raises(ConsistencyProofError, match="proof has 1 hashes, expected 0"):
        verify_consistency(5, 5, [r[5]], r[5], r[5])
    with pytest.raises(ConsistencyProofError, match=r"root1 .* != root2 .* for equal sizes 5"):
        verify_consistency(5, 5, [], r[5], r[6])
    # From the empty tree: proof must be empty; root1's value is not compared (decision), its
    # length is.
    verify_consistency(0, 8, [], r[0], r[8])
    verify_consistency(0, 8, [], r[3], r[8])
    with pytest.raises(ConsistencyProofError, match="proof has 3 hashes, expected 0"):
        verify_consistency(0, 8, tree.consistency_proof(1, 8), r[0], r[8])
    with pytest.raises(ConsistencyProofError, match="root1 is 31 bytes, expected 32"):
        verify_consistency(0, 8, [], r[0][:31], r[8])
    with pytest.raises(ConsistencyProofError, match="root2 is 33 bytes, expected 32"):
        verify_consistency(0, 8, [], r[0], r[8] + b"\x00")
    # Proper proofs: precise messages.
    proof = tree.consistency_proof(6, 8)
    with pytest.raises(ConsistencyProofError, match=r"^proof has 0 hashes, expected 3 \("):
        verify_consistency(6, 8, [], r[6], r[8])
    with pytest.raises(ConsistencyProofError, match=r"^computed root1 "):
        verify_consistency(6, 8, proof, r[5], r[8])
    with pytest.raises(ConsistencyProofError, match=r"^computed root2 "):
        verify_consistency(6, 8, proof, r[6], r[7])
    with pytest.raises(ConsistencyProofError, match=r"proof\[0\] is str, expected bytes"):
        verify_consistency(6, 8, ["x", *proof[1:]], r[6], r[8])  # type: ignore[list-item]
    with pytest.raises(ConsistencyProofError, match=r"proof\[2\] is 31 bytes, expected 32"):
        verify_consistency(6, 8, [*proof[:2], proof[2][:31]], r[6], r[8])
    with pytest.raises(ConsistencyProofError, match="proof must be a sequence"):
        verify_consistency(6, 8, None, r[6], r[8])  # type: ignore[arg-type]


def test_max_tree_size_accepted() -> None:
    """uint64 extremes are valid counts; the check is on the shape, not a crash."""
    leaf = leaf_hash(b"x")
    with pytest.raises(InclusionProofError, match="proof has 0 hashes, expected 64"):
        verify_inclusion(0, MAX_TREE_SIZE, leaf, [], leaf)
    with pytest.raises(ConsistencyProofError, match="proof has 0 hashes"):
        verify_consistency(1, MAX_TREE_SIZE, [], leaf, leaf)


# --------------------------------------------------------------------------- unit: builder


def test_builder_argument_checks() -> None:
    tree, leaves = _std()
    with pytest.raises(ValueError, match="index 8 >= size 8"):
        tree.inclusion_proof(8, 8)
    with pytest.raises(ValueError, match="index 3 >= size 3"):
        tree.inclusion_proof(3, 3)
    with pytest.raises(ValueError, match="size 9 > number of leaves 8"):
        tree.inclusion_proof(0, 9)
    with pytest.raises(ValueError, match="size 9 > number of leaves 8"):
        tree.root(9)
    with pytest.raises(ValueError, match="size1 5 > size2 4"):
        tree.consistency_proof(5, 4)
    with pytest.raises(ValueError, match="size2 9 > number of leaves 8"):
        tree.consistency_proof(1, 9)
    with pytest.raises(ValueError, match="index -1 is negative"):
        tree.inclusion_proof(-1, 8)
    with pytest.raises(ValueError, match="size -2 is negative"):
        tree.root(-2)
    with pytest.raises(ValueError, match="size1 -1 is negative"):
        tree.consistency_proof(-1)
    with pytest.raises(TypeError, match="index must be an int, got bool"):
        tree.inclusion_proof(True, 8)
    with pytest.raises(TypeError, match="size must be an int, got bool"):
        tree.root(True)
    with pytest.raises(ValueError, match="leaf hash is 31 bytes, expected 32"):
        tree.append(leaves[0][:31])
    with pytest.raises(TypeError, match="leaf hash must be bytes, got str"):
        tree.append("x" * 32)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no complete subtree at level 3, index 1"):
        tree.node(3, 1)
    with pytest.raises(ValueError, match="index 8 >= size 8"):
        tree.leaf(8)
    assert len(tree) == 8  # failed appends changed nothing
    # Defaults: current size.
    assert tree.inclusion_proof(2) == tree.inclusion_proof(2, 8)
    assert tree.consistency_proof(3) == tree.consistency_proof(3, 8)
    assert tree.consistency_proof(8) == tree.consistency_proof(0) == []
    assert MerkleTree().root() == EMPTY_ROOT


def test_compact_range_argument_checks() -> None:
    cr = CompactRange()
    assert cr.root() == EMPTY_ROOT
    assert cr.peaks == ()
    with pytest.raises(ValueError, match="leaf hash is 33 bytes"):
        cr.append(b"\x00" * 33)
    with pytest.raises(TypeError, match="leaf hash must be bytes"):
        cr.append(bytearray(32))  # type: ignore[arg-type]
    assert cr.size == 0
    cr.extend(leaf_hash(b"%d" % i) for i in range(5))
    with pytest.raises(ValueError, match="size 5 needs 2 peaks, got 1"):
        CompactRange.from_state(5, cr.peaks[:1])
    with pytest.raises(ValueError, match="size -1 is not a non-negative int"):
        CompactRange.from_state(-1, [])
    assert CompactRange.from_state(0, []).root() == EMPTY_ROOT
    restored = CompactRange.from_state(5, cr.peaks)
    restored.append(leaf_hash(b"5"))
    cr.append(leaf_hash(b"5"))
    assert restored.root() == cr.root()
    assert restored.peaks == cr.peaks
