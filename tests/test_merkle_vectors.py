"""Third-party RFC 6962 vectors (transparency-dev/merkle) against our verifier and builder.

The vectors are in the repository, ``tests/vectors/third_party/transparency-dev-merkle`` (see
its SOURCES.md); a missing file fails the run, never skips.
"""

from __future__ import annotations

import base64
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from harness.receipts.merkle import CompactRange, MerkleTree
from harness.verify.errors import ConsistencyProofError, InclusionProofError, ProofError
from harness.verify.merkle import (
    EMPTY_ROOT,
    leaf_hash,
    node_hash,
    verify_consistency,
    verify_inclusion,
)

VECTORS = Path(__file__).resolve().parent / "vectors" / "third_party" / "transparency-dev-merkle"


def _cases(kind: str, *, positive_only: bool = False) -> list[Any]:
    """One pytest param per ``<kind>/*/*.json`` file, id = path relative to the vector folder.

    With ``positive_only``, only files with ``wantErr: false``.
    """
    files = sorted((VECTORS / kind).glob("*/*.json"))
    assert files, f"no vectors under {VECTORS / kind}"
    if positive_only:
        files = [f for f in files if not json.loads(f.read_text(encoding="utf-8"))["wantErr"]]
    return [pytest.param(f, id=f.relative_to(VECTORS).as_posix()) for f in files]


def _need_vectors() -> Path:
    assert VECTORS.is_dir(), f"third-party vectors missing: {VECTORS}"
    return VECTORS


def _b64(value: str) -> bytes:
    return base64.b64decode(value, validate=True)


def _proof(value: list[str] | None) -> list[bytes]:
    return [] if value is None else [_b64(p) for p in value]


@cache
def _tree_hashes() -> dict[str, Any]:
    path = _need_vectors() / "rfc6962-tree-hashes.json"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _standard_tree() -> MerkleTree:
    """The tree of the 8 standard CT test leaves that upstream's vectors were made from."""
    leaves = [bytes.fromhex(x) for x in _tree_hashes()["leaf_inputs_hex"]]
    return MerkleTree(leaf_hash(d) for d in leaves)


# --------------------------------------------------------------------------- counts


def test_vector_counts_match_sources_md() -> None:
    """SOURCES.md promises 49 inclusion and 43 consistency files; catch a partial copy."""
    root = _need_vectors()
    inclusion = list((root / "inclusion").glob("*/*.json"))
    consistency = list((root / "consistency").glob("*/*.json"))
    assert len(inclusion) == 49
    assert len(consistency) == 43
    assert sum(1 for f in inclusion if not json.loads(f.read_text())["wantErr"]) == 3
    assert sum(1 for f in consistency if not json.loads(f.read_text())["wantErr"]) == 3


# --------------------------------------------------------------------------- inclusion


@pytest.mark.parametrize("path", _cases("inclusion"))
def test_inclusion_vector(path: Path) -> None:
    v = json.loads(path.read_text(encoding="utf-8"))
    args = (v["leafIdx"], v["treeSize"], _b64(v["leafHash"]), _proof(v["proof"]), _b64(v["root"]))
    if v["wantErr"]:
        with pytest.raises(InclusionProofError):
            verify_inclusion(*args)
    else:
        verify_inclusion(*args)


@pytest.mark.parametrize("path", _cases("consistency"))
def test_consistency_vector(path: Path) -> None:
    v = json.loads(path.read_text(encoding="utf-8"))
    args = (v["size1"], v["size2"], _proof(v["proof"]), _b64(v["root1"]), _b64(v["root2"]))
    if v["wantErr"]:
        with pytest.raises(ConsistencyProofError):
            verify_consistency(*args)
    else:
        verify_consistency(*args)


def test_error_classes_are_proof_errors() -> None:
    """Callers may catch ``ProofError`` for both kinds; the vector tests rely on the split."""
    assert issubclass(InclusionProofError, ProofError)
    assert issubclass(ConsistencyProofError, ProofError)
    assert not issubclass(InclusionProofError, ConsistencyProofError)


# --------------------------------------------------------------------------- builder cross-check


@pytest.mark.parametrize("path", _cases("inclusion", positive_only=True))
def test_builder_reproduces_inclusion_vector(path: Path) -> None:
    """For each happy path built from the standard leaves, our builder emits the same proof."""
    v = json.loads(path.read_text(encoding="utf-8"))
    tree = _standard_tree()
    index, size = v["leafIdx"], v["treeSize"]
    assert size <= len(tree), "vector is not over the standard leaves"
    assert tree.root(size) == _b64(v["root"])
    assert tree.leaf(index) == _b64(v["leafHash"])
    assert tree.inclusion_proof(index, size) == _proof(v["proof"])


@pytest.mark.parametrize("path", _cases("consistency", positive_only=True))
def test_builder_reproduces_consistency_vector(path: Path) -> None:
    v = json.loads(path.read_text(encoding="utf-8"))
    tree = _standard_tree()
    size1, size2 = v["size1"], v["size2"]
    assert size2 <= len(tree), "vector is not over the standard leaves"
    assert tree.root(size2) == _b64(v["root2"])
    assert tree.root(size1) == _b64(v["root1"])
    assert tree.consistency_proof(size1, size2) == _proof(v["proof"])


def test_every_happy_path_is_over_the_standard_leaves() -> None:
    """Every happy path is over the standard leaves, so the two tests above cover them all."""
    root = _need_vectors()
    tree = _standard_tree()
    for f in sorted(root.glob("inclusion/*/happy-path.json")):
        v = json.loads(f.read_text())
        assert tree.root(v["treeSize"]) == _b64(v["root"]), f
    for f in sorted(root.glob("consistency/*/happy-path.json")):
        v = json.loads(f.read_text())
        assert tree.root(v["size2"]) == _b64(v["root2"]), f


# --------------------------------------------------------------------------- tree hashes


def test_hasher_cases() -> None:
    cases = _tree_hashes()["hasher_cases"]
    assert {c["op"] for c in cases} == {"empty_root", "leaf", "node"}
    for c in cases:
        want = bytes.fromhex(c["want_hex"])
        if c["op"] == "empty_root":
            assert want == EMPTY_ROOT, c["desc"]
        elif c["op"] == "leaf":
            assert leaf_hash(bytes.fromhex(c["input_hex"])) == want, c["desc"]
        else:
            left, right = bytes.fromhex(c["left_hex"]), bytes.fromhex(c["right_hex"])
            assert node_hash(left, right) == want, c["desc"]


def test_roots_for_sizes_0_to_8() -> None:
    data = _tree_hashes()
    leaves = [leaf_hash(bytes.fromhex(x)) for x in data["leaf_inputs_hex"]]
    want = {
        r["tree_size"]: bytes.fromhex(r["root_hex"]) for r in data["root_hashes_hex_by_tree_size"]
    }
    assert sorted(want) == list(range(9))

    cr = CompactRange()
    tree = MerkleTree()
    assert cr.root() == tree.root() == want[0] == EMPTY_ROOT
    for size in range(1, 9):
        cr.append(leaves[size - 1])
        tree.append(leaves[size - 1])
        assert cr.size == size
        assert cr.root() == want[size], size
        assert tree.root() == want[size], size
    # Past sizes, from the full tree's cache.
    for size in range(9):
        assert tree.root(size) == want[size], size


def test_node_hashes_by_level() -> None:
    data = _tree_hashes()
    tree = _standard_tree()
    levels = data["node_hashes_hex_by_level"]
    assert [len(row) for row in levels] == [8, 4, 2, 1]
    for level, row in enumerate(levels):
        for index, hex_hash in enumerate(row):
            assert tree.node(level, index) == bytes.fromhex(hex_hash), (level, index)
            # An aligned perfect subtree's hash is also the root of a tree of just its leaves.
            sub = MerkleTree(tree.leaf(i) for i in range(index << level, (index + 1) << level))
            assert sub.root() == bytes.fromhex(hex_hash), (level, index)
