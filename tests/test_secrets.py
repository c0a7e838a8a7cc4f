"""Never ship secrets (DESIGN §8): no form of the private key or HMAC key is in a bundle.

The bundle is exported with the fixed test keys, as a plain tar and as a .tar.gz (searched after
decompression), and scanned for the Ed25519 private seed (raw, hex, base64 in several
alphabets, the PEM and DER encodings, the signed-note signer key text) and for the HMAC master
key and every per-store key derived from it (raw and hex).
"""

from __future__ import annotations

import base64
import gzip
import re

import pytest
from cryptography.hazmat.primitives import serialization

from harness.verify.chain import derive_store_key
from harness.verify.records import STORES

from .corpus import RUN_ID, export_run, operator_keys

KEYS = operator_keys()


def _b64_forms(secret: bytes) -> set[bytes]:
    """Base64 text that any base64 stream holding ``secret`` contains, whatever the bytes
    around it: one form per alignment (mod 3) and alphabet, partial groups at both ends cut."""
    forms = set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        for shift in (0, 1, 2):
            text = encode(b"\x00" * shift + secret)
            forms.add(text[4 if shift else 0 : -4])
    return forms


def secret_forms() -> dict[str, bytes]:
    """Every encoding of a secret that must never appear in a bundle, by a readable name."""
    seed = KEYS.signing_key.private_bytes_raw()
    pem = KEYS.signing_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    der = KEYS.signing_key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    pem_body = b"".join(line for line in pem.splitlines() if not line.startswith(b"-----"))
    forms: dict[str, bytes] = {
        "seed raw": seed,
        "seed hex": seed.hex().encode(),
        "seed HEX": seed.hex().upper().encode(),
        "PKCS8 DER": der,
        "PKCS8 PEM": pem,
        "PKCS8 PEM body": pem_body,
        "PEM header": b"PRIVATE KEY-----",
        "note signer key": KEYS.note_signer().signer_key().encode(),
        "note signer key prefix": b"PRIVATE+KEY+",
        "signer key base64": base64.b64encode(b"\x01" + seed),
    }
    for index, form in enumerate(sorted(_b64_forms(seed))):
        forms[f"seed base64 #{index}"] = form
    secrets = {"hmac master": KEYS.hmac_master}
    for store in STORES:
        secrets[f"hmac key of {store}"] = derive_store_key(KEYS.hmac_master, store, RUN_ID)
    for name, secret in secrets.items():
        forms[f"{name} raw"] = secret
        forms[f"{name} hex"] = secret.hex().encode()
        forms[f"{name} HEX"] = secret.hex().upper().encode()
        for index, form in enumerate(sorted(_b64_forms(secret))):
            forms[f"{name} base64 #{index}"] = form
    return forms


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    folder = tmp_path_factory.mktemp("secrets")
    _, plain = export_run(folder / "plain", KEYS)
    _, packed = export_run(folder / "packed", KEYS, name="bundle.tar.gz")
    unpacked = gzip.decompress(packed.read_bytes())
    return {"bundle.tar": plain.read_bytes(), "bundle.tar.gz (decompressed)": unpacked}


def test_fixed_keys_are_the_ones_used() -> None:
    assert KEYS.signing_key.private_bytes_raw() == b"\x01" * 32
    assert KEYS.hmac_master == bytes(range(32))


@pytest.mark.parametrize("which", ["bundle.tar", "bundle.tar.gz (decompressed)"])
def test_no_secret_in_bundle(exported: dict[str, bytes], which: str) -> None:
    data = exported[which]
    found = [name for name, form in secret_forms().items() if form in data]
    assert not found, f"{which} contains: {found}"


B64_TOKEN = re.compile(rb"[A-Za-z0-9+/_-]{40,}={0,2}")


@pytest.mark.parametrize("which", ["bundle.tar", "bundle.tar.gz (decompressed)"])
def test_no_secret_in_decoded_base64(exported: dict[str, bytes], which: str) -> None:
    """An independent look: decode every base64-looking token (signatures, keys, quarantined
    data) and search the decoded bytes for the raw secrets."""
    raw_secrets = [KEYS.signing_key.private_bytes_raw(), KEYS.hmac_master]
    tokens = 0
    for match in B64_TOKEN.finditer(exported[which]):
        token = match.group().rstrip(b"=")
        for start in range(4):  # the token may begin mid-group
            piece = token[start:]
            piece = piece[: len(piece) - len(piece) % 4]
            for decode in (base64.b64decode, base64.urlsafe_b64decode):
                try:
                    raw = decode(piece)
                except ValueError:
                    continue
                tokens += 1
                assert not any(secret in raw for secret in raw_secrets), match.group()
    assert tokens, "the bundle holds signatures and keys in base64: the scan must see them"


def test_gzip_and_plain_bundles_hold_the_same_tar(exported: dict[str, bytes]) -> None:
    assert exported["bundle.tar"] == exported["bundle.tar.gz (decompressed)"]


def test_public_key_is_in_the_bundle(exported: dict[str, bytes]) -> None:
    """Sanity for the scan: what *should* be there is found by the same search."""
    public = KEYS.note_signer().verifier_key().encode()
    assert public in exported["bundle.tar"]
    assert KEYS.key_id.encode() in exported["bundle.tar"]
