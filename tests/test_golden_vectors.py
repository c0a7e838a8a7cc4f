"""Golden vectors (tests/vectors/): re-derived byte for byte, and verified as published."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import cbor2
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from harness.verify.bundle import verify_bundle
from harness.verify.merkle import leaf_hash, root_from_inclusion_proof
from harness.verify.modelkey import recompute_exchange_key
from harness.verify.policy import TrustPolicy

from .vectors.generate import HERE, generate

HAND_WRITTEN = {"headers.json"}  # the control-header tables (test_rules_header.py)
COMMITTED = sorted(
    p.name
    for p in HERE.iterdir()
    if p.suffix not in {".py", ".md"} and p.is_file() and p.name not in HAND_WRITTEN
)


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vectors")
    generate(out)
    return out


def test_the_same_files_are_generated(regenerated: Path) -> None:
    assert sorted(p.name for p in regenerated.iterdir()) == COMMITTED


@pytest.mark.parametrize("name", COMMITTED)
def test_vector_is_reproduced_byte_for_byte(regenerated: Path, name: str) -> None:
    assert (regenerated / name).read_bytes() == (HERE / name).read_bytes(), (
        f"{name} changed: if the format change is intended, run python -m tests.vectors.generate"
    )


def test_published_policy_bundle_verifies(tmp_path: Path) -> None:
    """The format-2 runtime run: its recorded decisions re-decide to themselves."""
    facts = _facts()
    report = verify_bundle(
        HERE / "policy-bundle.tar", pins=TrustPolicy(frozenset({str(facts["key_id"])}), "test")
    )
    assert report.status.value == "verified", report.failure
    plan = (HERE / "policy-plan.json").read_bytes()
    start = json.loads((HERE / "policy-audit.jsonl").read_bytes().splitlines()[0])
    assert start["kind"] == "run.start" and start["v"] == 2
    assert start["body"]["plan_sha256"] == hashlib.sha256(plan).hexdigest()


def test_published_proxy_bundle_verifies_and_its_keys_recompute() -> None:
    """The proxied run: its exchanges, sources and journal members (last in the tar) verify,
    and each published request/parameters pair gives its published key (proxy.md §4)."""
    facts = _facts()
    report = verify_bundle(
        HERE / "proxy-bundle.tar", pins=TrustPolicy(frozenset({str(facts["key_id"])}), "test")
    )
    assert report.status.value == "verified", report.failure
    semantics = next(c for c in report.checks if c.name == "semantics")
    assert "6 journal blobs match, 3 keys recompute" in semantics.detail
    for item in json.loads((HERE / "proxy-keys.json").read_text()):
        request = item["request"].encode()
        assert recompute_exchange_key(item["family"], request, item["parameters"]) == item["key"]
    kinds = [
        json.loads(line)["kind"] for line in (HERE / "proxy-replay.jsonl").read_bytes().splitlines()
    ]
    assert kinds == ["model.exchange"] * 4


def _facts() -> dict[str, object]:
    facts: dict[str, object] = json.loads((HERE / "keys-and-facts.json").read_text())
    return facts


def test_published_bundle_verifies_with_the_published_key(tmp_path: Path) -> None:
    facts = _facts()
    report = verify_bundle(
        HERE / "bundle.tar",
        pins=TrustPolicy(frozenset({str(facts["key_id"])}), "test"),
        hmac_master=bytes.fromhex(str(facts["hmac_master_hex"])),
    )
    assert report.status.value == "verified", report.failure
    assert report.hmac_checked


def test_cose_receipt_checks_with_plain_cbor_and_cryptography() -> None:
    """The README's recipe, done without our COSE code: an independent path for the vectors."""
    facts = _facts()
    public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(str(facts["ed25519_public_hex"])))
    for seq in facts["receipts"]:  # type: ignore[attr-defined]
        doc = json.loads((HERE / f"receipt-{seq}.json").read_text())
        message = cbor2.loads((HERE / f"receipt-{seq}.cose").read_bytes())
        assert message.tag == 18
        protected_bytes, unprotected, payload, signature = message.value
        protected = cbor2.loads(protected_bytes)
        assert protected[1] == -8 and protected[395] == 1 and payload is None
        size, index, path = cbor2.loads(unprotected[396][-1][0])
        assert (size, index) == (doc["tree_size"], doc["leaf_index"])
        root = root_from_inclusion_proof(index, size, leaf_hash(doc["record"].encode()), list(path))
        to_sign = cbor2.dumps(["Signature1", protected_bytes, b"", root])
        public.verify(signature, to_sign)  # raises if invalid
        assert hashlib.sha256(public.public_bytes_raw()).hexdigest() == facts["key_id"]
