"""The verifier's own version (the installed distribution's), in a module of its own so that
``harness-verify --version`` imports nothing else of the verifier."""

from __future__ import annotations

from importlib import metadata


def verifier_version() -> str:
    try:
        return metadata.version("harness-verify")
    except metadata.PackageNotFoundError:
        return "unknown"
