"""Exhaustive single-byte flips of a small, uncompressed bundle: none may go unnoticed.

Every byte of the tar is flipped (xor 0x01), and every byte of member data once more (xor 0x80,
the high bit: it turns ASCII into invalid UTF-8). Each result must fail verification with a
non-zero exit code and a reason, and the verifier must never raise. Member data is covered by
the signed digests; headers, padding and the end-of-archive by the canonical-layout check.

The bundle is made small (one run, four short records in one store, two checkpoints and one
consistency proof), not the flips sampled: every position is tried.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.verify.bundle import verify_bundle
from harness.verify.policy import TrustPolicy

from .corpus import export_run, member_offsets, operator_keys

KEYS = operator_keys()
PINS = TrustPolicy(frozenset({KEYS.key_id}), "--trusted-key")
MAX_BUNDLE_BYTES = 2 * tarfile.RECORDSIZE

USTAR_FIELDS = (
    (0, 100, "name"),
    (100, 108, "mode"),
    (108, 116, "uid"),
    (116, 124, "gid"),
    (124, 136, "size"),
    (136, 148, "mtime"),
    (148, 156, "chksum"),
    (156, 157, "typeflag"),
    (157, 257, "linkname"),
    (257, 263, "magic"),
    (263, 265, "version"),
    (265, 297, "uname"),
    (297, 329, "gname"),
    (329, 337, "devmajor"),
    (337, 345, "devminor"),
    (345, 500, "prefix"),
    (500, 512, "header padding"),
)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    folder: Path = tmp_path_factory.mktemp("flips")
    _, path = export_run(folder, KEYS, small=True)
    data = path.read_bytes()
    assert len(data) <= MAX_BUNDLE_BYTES, "keep the flip bundle small (runtime is per byte)"
    report = verify_bundle(io.BytesIO(data), pins=PINS)
    assert report.exit_code == 0, report.failure
    assert any("/proofs/" in name for name, *_ in member_offsets(data))
    return data


def describe(data: bytes, offset: int) -> str:
    """Which member and which header field (or data, padding, end-of-archive) holds a byte."""
    for name, header, data_offset, size in member_offsets(data):
        if header <= offset < data_offset:
            within = (offset - header) % tarfile.BLOCKSIZE
            block = (offset - header) // tarfile.BLOCKSIZE
            field = next(f for start, end, f in USTAR_FIELDS if start <= within < end)
            kind = (
                "header" if data_offset - header == tarfile.BLOCKSIZE else f"header block {block}"
            )
            return f"{name}: {kind}, field {field} (+{within})"
        padded = size + (-size % tarfile.BLOCKSIZE)
        if data_offset <= offset < data_offset + size:
            return f"{name}: data (+{offset - data_offset})"
        if data_offset + size <= offset < data_offset + padded:
            return f"{name}: data padding (+{offset - data_offset - size})"
    return "end-of-archive zeros"


def data_positions(data: bytes) -> Iterator[int]:
    for _, _, data_offset, size in member_offsets(data):
        yield from range(data_offset, data_offset + size)


def flips_accepted(data: bytes, positions: Iterator[int] | range, mask: int) -> list[str]:
    """Flip each position in turn; return a description of every flip that was not refused."""
    problems = []
    buffer = bytearray(data)
    for offset in positions:
        buffer[offset] ^= mask
        try:
            report = verify_bundle(io.BytesIO(bytes(buffer)), pins=PINS)
        except Exception as exc:  # the verifier must never raise for bad input
            problems.append(f"{offset}: raised {type(exc).__name__}: {exc}")
        else:
            reason = report.failure.reason if report.failure is not None else ""
            if int(report.exit_code) == 0 or not reason:
                problems.append(
                    f"{offset} ({describe(data, offset)}): exit {int(report.exit_code)}, "
                    f"reason {reason!r}"
                )
        finally:
            buffer[offset] ^= mask
    return problems


def test_every_single_bit0_flip_is_refused(bundle: bytes) -> None:
    problems = flips_accepted(bundle, range(len(bundle)), 0x01)
    assert not problems, f"{len(problems)} flips accepted or crashed:\n" + "\n".join(problems[:60])


def test_every_high_bit_flip_in_member_data_is_refused(bundle: bytes) -> None:
    problems = flips_accepted(bundle, data_positions(bundle), 0x80)
    assert not problems, f"{len(problems)} flips accepted or crashed:\n" + "\n".join(problems[:60])


def test_describe_names_fields(bundle: bytes) -> None:
    assert describe(bundle, 0) == "manifest.json: header, field name (+0)"
    assert describe(bundle, 148) == "manifest.json: header, field chksum (+148)"
    assert describe(bundle, 512).startswith("manifest.json: data")
    assert describe(bundle, len(bundle) - 1) == "end-of-archive zeros"
