"""Shared test fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

# Third-party vectors live in the repository (see its SOURCES.md), so a clone alone runs every
# vector test; a missing file is a failure (tests/test_third_party_vectors.py), never a skip.
THIRD_PARTY_VECTORS = Path(__file__).resolve().parent / "vectors" / "third_party"


@pytest.fixture(scope="session")
def third_party_vectors() -> Path:
    """The third-party test vector folder, ``tests/vectors/third_party``."""
    assert THIRD_PARTY_VECTORS.is_dir(), f"third-party vectors missing: {THIRD_PARTY_VECTORS}"
    return THIRD_PARTY_VECTORS
