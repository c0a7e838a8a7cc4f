"""A run's receipts verified on the worker processes as they are read, before the stores are.

Why: a bundle lists a run's receipts before its stores (layout order), and a receipt's own
checks (its record, inclusion proof, two Ed25519 signatures: ~0.3 ms) need nothing the stores
decide. Only its match with the lineage log (leaf index, tree size, root, sealing note, path,
digest) must wait for the stores. So, where a worker pool exists, each batch of receipts goes
to the workers as soon as it is read, and is verified while the reader (and, with the compiled
core, its threads) checks the stores; at the run's end ``check_run_receipts`` only matches.

Nothing is decided here: a receipt a worker could not verify is left out of ``verified``, and
the run's end verifies it again, in order, where the one-by-one loop would, so the first
failure and its message are unchanged (``runreceipts``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from .bundlehead import bounded_json
from .receipt import ReceiptMemo, VerifiedReceipt, verify_receipt
from .storepool import ChunkPool

__all__ = ["PARALLEL_MIN_RECEIPTS", "RECEIPT_BATCH", "ReceiptPrefetch", "verify_receipts"]

PARALLEL_MIN_RECEIPTS: Final = 64
"""A run with fewer receipts has them verified at its end, in-process: sending them would cost
more than it saves."""
RECEIPT_BATCH: Final = 128
"""Receipts per job: a job's transfer is small beside its checks."""

_Batch = tuple[str, list[tuple[str, bytes]]]


def verify_receipts(batch: _Batch) -> list[VerifiedReceipt | None]:
    """Each receipt of ``(signer, [(member, bytes)])`` verified on its own, as the run's end
    would (density check, then ``verify_receipt`` with one memo), or None where that fails."""
    signer, items = batch
    memo = ReceiptMemo()
    out: list[VerifiedReceipt | None] = []
    for name, data in items:
        try:
            bounded_json(data, name)
            out.append(verify_receipt(data, signer=signer, memo=memo))
        except Exception:  # any failure: decided (and worded) again at the run's end
            out.append(None)
    return out


class ReceiptPrefetch:
    """One run's receipts sent to ``pool`` in batches as they are read (``add``), collected
    at the run's end (``verified``)."""

    def __init__(self, pool: ChunkPool, signer: str) -> None:
        self.pool = pool
        self.signer = signer
        self.batch: list[tuple[str, bytes]] = []
        self.sent: list[tuple[int, _Batch]] = []

    def add(self, name: str, data: bytes) -> None:
        self.batch.append((name, data))
        if len(self.batch) >= RECEIPT_BATCH:
            self._send()

    def _send(self) -> None:
        payload = (self.signer, self.batch)
        self.sent.append((self.pool.submit(verify_receipts, payload), payload))
        self.batch = []

    def verified(self) -> Mapping[str, tuple[bytes, VerifiedReceipt]]:
        """Per receipt member the workers verified: the bytes they verified, and the result."""
        if self.batch:
            self._send()
        out: dict[str, tuple[bytes, VerifiedReceipt]] = {}
        for tag, payload in self.sent:
            outcomes = self.pool.collect(verify_receipts, tag, payload)
            for (name, data), receipt in zip(payload[1], outcomes, strict=True):
                if receipt is not None:
                    out[name] = (data, receipt)
        self.sent = []
        return out
