"""Shared test fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_VECTORS = Path(__file__).resolve().parents[2] / "shared" / "vectors"


@pytest.fixture(scope="session")
def shared_vectors() -> Path:
    """The third-party test vector folder (``/work/shared/vectors``); skip if it is absent."""
    if not SHARED_VECTORS.is_dir():
        pytest.skip(f"shared test vectors not found at {SHARED_VECTORS}")
    return SHARED_VECTORS
