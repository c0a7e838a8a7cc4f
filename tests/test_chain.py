"""HKDF key derivation (RFC 5869 known answers) and the keyed MAC chain."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

import pytest

from harness.verify.chain import (
    GENESIS_MAC,
    MacChain,
    derive_store_key,
    hkdf_sha256,
    store_key_info,
)
from harness.verify.errors import ChainError


def test_rfc5869_vectors(third_party_vectors: Path) -> None:
    path = third_party_vectors / "rfc5869-hkdf" / "rfc5869-hkdf-sha256.json"
    doc = json.loads(path.read_text())
    assert len(doc["cases"]) == 3
    for case in doc["cases"]:
        salt = bytes.fromhex(case["salt_hex"]) or None
        okm = hkdf_sha256(
            bytes.fromhex(case["ikm_hex"]), salt, bytes.fromhex(case["info_hex"]), case["L"]
        )
        assert okm.hex() == case["okm_hex"], case["id"]
        # PRK = HMAC-Hash(salt, IKM): check the extract step independently with stdlib hmac.
        prk = hmac.new(salt or bytes(32), bytes.fromhex(case["ikm_hex"]), "sha256").hexdigest()
        assert prk == case["prk_hex"]


def test_store_key_known_answer() -> None:
    # Independent HKDF (RFC 5869 §2.2/2.3 in stdlib hmac) for L = 32 (one block).
    master = bytes(range(32))
    info = b"harness/v1/audit/run-1"
    prk = hmac.new(bytes(32), master, "sha256").digest()
    okm = hmac.new(prk, info + b"\x01", "sha256").digest()
    assert store_key_info("audit", "run-1") == info
    assert derive_store_key(master, "audit", "run-1") == okm


def test_keys_are_separated_by_store_and_run() -> None:
    master = b"m" * 32
    keys = {
        derive_store_key(master, store, run)
        for store in ("lineage", "audit", "replay", "control")
        for run in ("r1", "r2")
    }
    assert len(keys) == 8


def test_short_master_key_refused() -> None:
    with pytest.raises(ChainError, match="at least 32"):
        derive_store_key(b"x" * 31, "audit", "r")


def test_mac_chain_matches_definition_and_detects_changes() -> None:
    key = derive_store_key(b"k" * 32, "audit", "r")
    chain = MacChain(key)
    records = [b"first", b"second", b"third"]
    macs = []
    prev = GENESIS_MAC
    for data in records:
        expected = hmac.new(key, prev + data, hashlib.sha256).digest()
        assert chain.next_mac(data) == expected
        chain.advance(expected)
        macs.append(expected)
        prev = expected

    verifier = MacChain(key)
    for data, mac in zip(records, macs, strict=True):
        verifier.check_next(data, mac.hex())

    reordered = MacChain(key)
    with pytest.raises(ChainError, match="does not chain"):
        reordered.check_next(records[1], macs[1].hex())
    wrong_key = MacChain(derive_store_key(b"k" * 32, "audit", "other-run"))
    with pytest.raises(ChainError):
        wrong_key.check_next(records[0], macs[0].hex())
