"""The keyed chain: per-store, per-run HMAC-SHA256 keys derived with HKDF-SHA256.

Each record carries ``mac = HMAC-SHA256(K_store, prev_mac || mac_input)`` where ``prev_mac`` is
the previous record's MAC (32 zero bytes before the first record) and ``mac_input`` is the
record's canonical bytes without ``mac``. ``K_store = HKDF-SHA256(IKM = master key, salt =
none, info = "harness/v1/<store>/<run id>", L = 32)``: a key never serves two stores or two runs,
so a record cannot be moved between them and still chain.
"""

from __future__ import annotations

import hmac
from typing import Final, Protocol

try:  # the OpenSSL HMAC object that ``hmac.HMAC`` wraps (CPython's own, not a reimplementation)
    import _hashlib
except ImportError:  # pragma: no cover - a Python built without OpenSSL
    _hashlib = None  # type: ignore[assignment]

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .errors import ChainError, MacMismatchError

GENESIS_MAC: Final = bytes(32)
MIN_MASTER_KEY_BYTES: Final = 32
KEY_INFO_PREFIX: Final = "harness/v1/"
MAC_MISMATCH: Final = "MAC does not chain (record edited, reordered, moved, or wrong key)"


def store_key_info(store: str, run_id: str) -> bytes:
    """HKDF ``info`` for one store of one run (domain separation by store and run)."""
    return f"{KEY_INFO_PREFIX}{store}/{run_id}".encode()


def hkdf_sha256(ikm: bytes, salt: bytes | None, info: bytes, length: int) -> bytes:
    """RFC 5869 HKDF with SHA-256 (``cryptography``'s implementation; salt None = zeros)."""
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(ikm)


def derive_store_key(master: bytes, store: str, run_id: str) -> bytes:
    """Derive ``K_store`` from the master key; refuses master keys shorter than 32 bytes."""
    if len(master) < MIN_MASTER_KEY_BYTES:
        raise ChainError(f"HMAC master key is {len(master)} bytes, need at least 32")
    return hkdf_sha256(master, None, store_key_info(store, run_id), 32)


class _KeyedHmac(Protocol):
    def copy(self) -> _KeyedHmac: ...
    def update(self, data: bytes, /) -> None: ...
    def digest(self) -> bytes: ...


def _keyed_hmac(store_key: bytes) -> _KeyedHmac:
    """A keyed HMAC-SHA256 state to ``copy`` per message. OpenSSL's object directly where
    there is one: ``hmac.HMAC`` forwards ``copy``, ``update`` and ``digest`` to that very object
    through three Python methods, about a third of a record MAC's cost on the append path."""
    if _hashlib is not None:
        return _hashlib.hmac_new(store_key, digestmod="sha256")
    return hmac.new(store_key, digestmod="sha256")  # pragma: no cover - no OpenSSL


class MacChain:
    """Computes successive record MACs for one store; keyed once, so each MAC costs two
    SHA-256 passes over the data instead of re-keying (which ``hmac.digest`` does per call)."""

    __slots__ = ("_keyed", "prev")

    def __init__(self, store_key: bytes, prev: bytes = GENESIS_MAC) -> None:
        self._keyed: _KeyedHmac = _keyed_hmac(store_key)
        self.prev = prev

    @classmethod
    def resume(cls, keyed_from: MacChain, prev: bytes) -> MacChain:
        """A chain with the same key continuing from ``prev`` (for tentative batches)."""
        chain = cls.__new__(cls)
        chain._keyed = keyed_from._keyed
        chain.prev = prev
        return chain

    def next_mac(self, mac_input: bytes) -> bytes:
        """MAC of the next record; does not advance (call ``advance`` once it is accepted)."""
        state = self._keyed.copy()
        state.update(self.prev)
        state.update(mac_input)
        return state.digest()

    def advance(self, mac: bytes) -> None:
        self.prev = mac

    def chains(self, mac_input: bytes, claimed_hex: str) -> bool:
        """Whether a record's MAC chains (constant-time comparison); advances if it does."""
        expected = self.next_mac(mac_input)
        if not hmac.compare_digest(expected.hex(), claimed_hex):
            return False
        self.prev = expected
        return True

    def check_next(self, mac_input: bytes, claimed_hex: str) -> None:
        """Verify a record's MAC in constant time and advance the chain."""
        if not self.chains(mac_input, claimed_hex):
            raise MacMismatchError(MAC_MISMATCH)
