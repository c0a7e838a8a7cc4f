"""verify/ed25519.py: remembering repeated signature checks never changes an answer."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from harness.verify import ed25519
from harness.verify.ed25519 import CACHED_MESSAGE_BYTES, verify_ed25519

KEY = Ed25519PrivateKey.from_private_bytes(b"\x07" * 32)
PUBLIC = KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
OTHER = (
    Ed25519PrivateKey.from_private_bytes(b"\x08" * 32)
    .public_key()
    .public_bytes(Encoding.Raw, PublicFormat.Raw)
)


def test_answers_are_the_same_the_first_and_every_later_time() -> None:
    message = b"harness-verify/v1/run-1/lineage\n2\nroot\n"
    good = KEY.sign(message)
    bad = good[:-1] + bytes([good[-1] ^ 1])
    for _ in range(3):
        assert verify_ed25519(PUBLIC, good, message) is True
        assert verify_ed25519(PUBLIC, bad, message) is False
        assert verify_ed25519(OTHER, good, message) is False
        assert verify_ed25519(PUBLIC, good, message + b"x") is False


def test_malformed_inputs_are_false_not_errors() -> None:
    assert verify_ed25519(b"\x00" * 31, b"\x00" * 64, b"m") is False
    assert verify_ed25519(PUBLIC, b"\x00" * 10, b"m") is False


def test_repeats_reach_openssl_once_and_large_messages_are_not_kept() -> None:
    ed25519._verify_remembered.cache_clear()
    message = b"m" * 100
    signature = KEY.sign(message)
    for _ in range(5):
        assert verify_ed25519(PUBLIC, signature, message)
    info = ed25519._verify_remembered.cache_info()
    assert (info.misses, info.hits) == (1, 4)
    large = b"l" * (CACHED_MESSAGE_BYTES + 1)
    assert verify_ed25519(PUBLIC, KEY.sign(large), large)
    assert ed25519._verify_remembered.cache_info().currsize == 1


def test_the_cache_bound_is_inclusive() -> None:
    ed25519._verify_remembered.cache_clear()
    edge = b"e" * CACHED_MESSAGE_BYTES
    assert verify_ed25519(PUBLIC, KEY.sign(edge), edge)
    assert ed25519._verify_remembered.cache_info().currsize == 1
