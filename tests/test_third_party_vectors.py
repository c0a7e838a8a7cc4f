"""The third-party vectors are in the repository, complete and unchanged.

The vector tests read ``tests/vectors/third_party`` (see its SOURCES.md). A missing, changed or
unlisted file must fail here, loudly, rather than make the vector tests vanish or skip.
Run ``python -m tests.test_third_party_vectors`` to rewrite MANIFEST.sha256 after a deliberate
refresh from upstream.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from tests.conftest import THIRD_PARTY_VECTORS

MANIFEST = THIRD_PARTY_VECTORS / "MANIFEST.sha256"
SOURCES = THIRD_PARTY_VECTORS / "SOURCES.md"
# Files about the vectors rather than vectors.
META = {"MANIFEST.sha256", "SOURCES.md"}
TESTS = Path(__file__).resolve().parent


def _vector_files() -> list[str]:
    return sorted(
        p.relative_to(THIRD_PARTY_VECTORS).as_posix()
        for p in THIRD_PARTY_VECTORS.rglob("*")
        if p.is_file() and p.name not in META and "LICENSES" not in p.parts
    )


def _manifest() -> dict[str, str]:
    entries: dict[str, str] = {}
    for line in MANIFEST.read_text(encoding="utf-8").splitlines():
        digest, name = line.split("  ", 1)
        assert re.fullmatch(r"[0-9a-f]{64}", digest), line
        assert name not in entries, f"listed twice: {name}"
        entries[name] = digest
    return entries


def _sha256(rel: str) -> str:
    return hashlib.sha256((THIRD_PARTY_VECTORS / rel).read_bytes()).hexdigest()


def test_every_listed_vector_is_present_and_unchanged() -> None:
    manifest = _manifest()
    assert len(manifest) == 142  # 93 merkle, 12 JCS, 6 COSE WG, 3 go-cose, 21 Sigstore, 7 single
    for rel, digest in manifest.items():
        path = THIRD_PARTY_VECTORS / rel
        assert path.is_file(), f"third-party vector missing: {rel}"
        assert _sha256(rel) == digest, f"third-party vector changed: {rel}"


def test_no_unlisted_file() -> None:
    assert _vector_files() == sorted(_manifest())


def test_merkle_counts() -> None:
    names = _manifest()
    inclusion = [n for n in names if n.startswith("transparency-dev-merkle/inclusion/")]
    consistency = [n for n in names if n.startswith("transparency-dev-merkle/consistency/")]
    assert (len(inclusion), len(consistency)) == (49, 43)


def test_every_folder_has_a_source_and_its_licence_file_exists() -> None:
    sources = SOURCES.read_text(encoding="utf-8")
    for top in sorted({rel.split("/", 1)[0] for rel in _manifest()}):
        assert f"`{top}/" in sources, f"{top} has no row in SOURCES.md"
    licences = set(re.findall(r"`(LICENSES/[^`]+)`", sources))
    assert len(licences) >= 6
    for rel in licences:
        assert (THIRD_PARTY_VECTORS / rel).is_file(), rel


def test_no_test_reads_vectors_outside_the_repository() -> None:
    """The old layout (../shared/vectors) let 52 tests skip on a clone; it must not come back."""
    pattern = re.compile(r"""["']shared["']\s*/\s*["']vectors|shared/vectors""")
    offenders = [
        p.name
        for p in sorted(TESTS.glob("*.py"))
        if p.name != Path(__file__).name and pattern.search(p.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def write_manifest() -> None:
    """Rewrite MANIFEST.sha256 from the files present (sha256sum format)."""
    lines = [f"{_sha256(rel)}  {rel}\n" for rel in _vector_files()]
    MANIFEST.write_text("".join(lines), encoding="utf-8")


if __name__ == "__main__":
    write_manifest()
