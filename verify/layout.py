"""Bundle member names (docs/spec/bundle.md): one place that says where each thing lives.

Order inside the tar (chosen for one forward pass; the verifier requires it): manifest
first, then names sorted, which puts each run's checkpoints and proofs before its stores, and
last the journal blobs, sorted, after every store that references them.
"""

from __future__ import annotations

import tarfile
from typing import Final

BUNDLE_FORMAT: Final = "harness-verify/bundle"
BUNDLE_VERSION: Final = 2
MANIFEST: Final = "manifest.json"
MANIFEST_SIG: Final = "manifest.sig"
MANIFEST_NOTE_ORIGIN: Final = "harness-verify/v1/bundle"
"""First line of the note signing the manifest; the second line is its SHA-256 (hex)."""


def key_member(key_id: str) -> str:
    return f"keys/{key_id}.vkey"


def plan_member(run_id: str) -> str:
    """The run's plan document (canonical JSON); ``run.start.plan_sha256`` is its digest."""
    return f"runs/{run_id}/plan.json"


ROUND_TEXT_MAX_BYTES: Final = 1 << 20
"""Largest round text member (a plan, claim, report, repair answer, question or operator
input). The rules read at most 256 KiB (``rules.header.MAX_TEXT_BYTES``) and call a longer text
invalid ("too long") without scanning it; the member cap is larger so that such a text, and the
decision taken on it, stays verifiable (the runtime saves at most this much of an agent's
output). Same bound as a store line (``records.MAX_LINE_BYTES``)."""
ROUND_TEXTS_MAX_BYTES: Final = 64 << 20
"""Largest total of one run's round text members: they are held in memory until the run's
audit store has been checked (25 rounds of 4 texts of 10 KiB are 1 MiB)."""


def round_text_member(run_id: str, digest: str) -> str:
    """A text of a rounds task (plan, claim, report, repair, question, operator input), named
    by the SHA-256 (lowercase hex) of its exact bytes, which round records cite."""
    return f"runs/{run_id}/rounds/{digest}.txt"


def round_text_digest(run_id: str, name: str) -> str | None:
    """The digest a member name ``runs/<run>/rounds/<64 hex>.txt`` carries, else None."""
    prefix = f"runs/{run_id}/rounds/"
    if not name.startswith(prefix) or not name.endswith(".txt"):
        return None
    digest = name[len(prefix) : -len(".txt")]
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        return None
    return digest


JOURNAL_PREFIX: Final = "journal/"
"""Replay journal blobs (request and response bytes of journaled model exchanges) live under
this prefix, named by their SHA-256, shared by every run of the bundle. They come last in
the tar, after every run's stores (``canonical_member_order``), so that a verifier knows which
blobs the replay stores reference, and what each must hold, before it streams them."""
JOURNAL_REQUEST_MAX_BYTES: Final = 16 << 20
"""Largest request blob a verifier reads whole to recompute its key (the proxy's default
request body cap, ``Limits.max_body``); response blobs are streamed and bounded only by the
archive limits."""
JOURNAL_CONTAINER_DENSITY: Final = 16
"""A request blob has at most one ``[`` or ``{`` outside its strings per this many bytes (plus
256): model requests are mostly text, and the bound keeps a hostile blob from making the
decoder allocate containers by the million (tool schemas, the densest real part, are ~1/18)."""


def journal_member(digest: str) -> str:
    """A journal blob, named by the SHA-256 (lowercase hex) of its exact bytes."""
    return f"{JOURNAL_PREFIX}{digest}"


def journal_digest(name: str) -> str | None:
    """The digest a member name ``journal/<64 hex>`` carries, else None."""
    if not name.startswith(JOURNAL_PREFIX):
        return None
    digest = name[len(JOURNAL_PREFIX) :]
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        return None
    return digest


def store_member(run_id: str, store: str) -> str:
    return f"runs/{run_id}/stores/{store}.jsonl"


def quarantine_member(run_id: str, store: str) -> str:
    return f"runs/{run_id}/stores/{store}.quarantine.jsonl"


def checkpoint_member(run_id: str, store: str, size: int) -> str:
    return f"runs/{run_id}/checkpoints/{store}/{size:020d}.note"


def consistency_member(run_id: str, store: str, size1: int, size2: int) -> str:
    return f"runs/{run_id}/proofs/{store}/{size1:020d}-{size2:020d}.json"


def receipt_member(run_id: str, seq: int) -> str:
    """Artifact receipt for the lineage record ``seq`` (the latest write of its path)."""
    return f"runs/{run_id}/receipts/{seq:020d}.json"


ATTESTATIONS: Final = (
    "run-summary.dsse.json",
    "lineage.dsse.json",
    "provenance.dsse.json",
    "run-summary.cose",
)
"""Run-level attestations every run carries (DSSE/in-toto and a COSE_Sign1 statement)."""


def attestation_member(run_id: str, name: str) -> str:
    return f"runs/{run_id}/attestations/{name}"


def manifest_note_text(manifest_sha256_hex: str) -> str:
    return f"{MANIFEST_NOTE_ORIGIN}\n{manifest_sha256_hex}\n"


TAR_RECORD_SIZE: Final = tarfile.RECORDSIZE
"""A bundle tar's total length is a multiple of this (10240), as tarfile pads it."""


def tar_member_info(name: str, size: int) -> tarfile.TarInfo:
    """The one header every bundle member has: regular file, mode 0644, owner 0:0, mtime 0."""
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info


def tar_header_bytes(name: str, size: int) -> bytes:
    """Exact header bytes (PAX format, UTF-8) the exporter writes and the verifier demands."""
    return tar_member_info(name, size).tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def member_sort_key(name: str) -> tuple[bool, str]:
    """Journal members after every other member, each group in name order."""
    return (name.startswith(JOURNAL_PREFIX), name)


def canonical_member_order(names: list[str]) -> list[str]:
    """The order members appear in a bundle: manifest.json, manifest.sig, the rest sorted by
    name except the journal members, which come last, sorted."""
    head = [name for name in (MANIFEST, MANIFEST_SIG) if name in names]
    rest = [name for name in names if name not in (MANIFEST, MANIFEST_SIG)]
    return head + sorted(rest, key=member_sort_key)
