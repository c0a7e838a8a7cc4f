"""Issue 9 §2: ``harness-verify receipt`` accepts only receipts of final artifacts.

An inclusion proof shows a write was *recorded*; anyone holding a bundle can mint one for any
leaf of the lineage tree from public data: the record line, a Merkle path over the public store,
the signed checkpoint, and a genuine COSE receipt of the same tree size whose unprotected proof
is swapped (the COSE signature covers only the root). The demo's failed task (break-add, its
gate failed, never merged) wrote calc.py; such a minted receipt for that write verified before
format 2. Now a receipt must carry the operator's signed final-artifact note for exactly its
record, which only the exporter signs, only for final artifacts.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import cbor2
import pytest

from harness.orchestrate.demo import DemoResult, run_demo
from harness.receipts.merkle import MerkleTree
from harness.verify.canonical import canonical_bytes
from harness.verify.cose import HEADER_VDP, INCLUSION_PROOFS
from harness.verify.layout import store_member
from harness.verify.merkle import leaf_hash

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    return run_demo(tmp_path_factory.mktemp("finality"))


def _members(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(bundle) as tar:
        return {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def _mint(demo: DemoResult, task: str) -> dict[str, Any]:
    """A receipt for ``task``'s write of calc.py, built from the bundle's public data only."""
    members = _members(demo.bundle)
    lines = members[store_member(demo.run_id, "lineage")].splitlines()
    seq, line = next(
        (i, raw)
        for i, raw in enumerate(lines)
        if json.loads(raw)["kind"] == "artifact.write"
        and json.loads(raw)["body"]["task"] == task
        and json.loads(raw)["body"]["path"] == "calc.py"
    )
    genuine = json.loads(
        next(
            data
            for name, data in sorted(members.items())
            if name.startswith(f"runs/{demo.run_id}/receipts/")
        )
    )
    size = genuine["tree_size"]
    assert seq < size
    tree = MerkleTree()
    for raw in lines[:size]:
        tree.append(leaf_hash(raw))
    path = tree.inclusion_proof(seq, size)
    cose = cbor2.loads(base64.b64decode(genuine["cose"]))
    sign1 = cose.value
    proof = cbor2.dumps([size, seq, list(path)])
    sign1[1] = {HEADER_VDP: {INCLUSION_PROOFS: [proof]}}
    minted = dict(genuine)
    minted.update(
        audit_path=[h.hex() for h in path],
        leaf_index=seq,
        record=line.decode("utf-8"),
        cose=base64.b64encode(cbor2.dumps(cbor2.CBORTag(18, sign1))).decode(),
    )
    return minted


def _receipt_cli(
    cwd: Path, receipt: dict[str, Any], artifact: bytes, demo: DemoResult
) -> subprocess.CompletedProcess[str]:
    (cwd / "calc.py").write_bytes(artifact)
    os.chmod(cwd / "calc.py", 0o644)
    (cwd / "calc.py.receipt.json").write_bytes(canonical_bytes(receipt))
    return subprocess.run(
        [str(BIN / "harness-verify"), "receipt", "calc.py.receipt.json", "--artifact",
         "calc.py", "--trusted-key", demo.key_id, "--format", "json"],
        cwd=cwd, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def _check_again(cwd: Path, demo: DemoResult) -> subprocess.CompletedProcess[str]:
    """``harness-verify receipt`` on the receipt and artifact already in ``cwd`` (text)."""
    return subprocess.run(
        [str(BIN / "harness-verify"), "receipt", "calc.py.receipt.json", "--artifact",
         "calc.py", "--trusted-key", demo.key_id],
        cwd=cwd, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


FAILED_CALC = b"def add(a, b):\n    return a - b\n"


def test_minted_receipt_for_a_failed_tasks_write_is_refused(
    demo: DemoResult, tmp_path: Path
) -> None:
    assert demo.summary.states["break-add"].value == "failed"
    minted = _mint(demo, "break-add")
    done = _receipt_cli(tmp_path, minted, FAILED_CALC, demo)
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "invalid"
    assert "final-artifact note names another record" in report["reason"]


def test_minted_receipt_without_a_final_note_is_refused(demo: DemoResult, tmp_path: Path) -> None:
    minted = _mint(demo, "break-add")
    for final in ("", "harness-verify/v1/demo-run/final-artifact\n0\n" + "0" * 64 + "\n\n"):
        minted["final"] = final
        done = _receipt_cli(tmp_path, minted, FAILED_CALC, demo)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "not signed as a final artifact" in json.loads(done.stdout)["reason"]


def test_genuine_receipt_verifies_and_says_what_it_certifies(
    demo: DemoResult, tmp_path: Path
) -> None:
    members = _members(demo.bundle)
    genuine = next(
        json.loads(data)
        for name, data in sorted(members.items())
        if name.startswith(f"runs/{demo.run_id}/receipts/")
        and json.loads(json.loads(data)["record"])["body"]["path"] == "calc.py"
    )
    content = (demo.repo / "calc.py").read_bytes()
    done = _receipt_cli(tmp_path, genuine, content, demo)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert "final write of its path" in report["certifies"]
    assert report["mode"] == "100644"
    # The same bytes with the executable bit: not what the record attests.
    os.chmod(tmp_path / "calc.py", 0o755)
    done = _check_again(tmp_path, demo)
    assert done.returncode == 1, done.stdout
    assert "git mode 100755" in done.stdout
    # A symbolic link whose target text is the attested content is not the file either.
    (tmp_path / "calc.py").unlink()
    os.symlink(content.decode(), tmp_path / "calc.py")
    done = _check_again(tmp_path, demo)
    assert done.returncode == 1, done.stdout
    assert "git mode 120000" in done.stdout
