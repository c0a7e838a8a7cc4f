"""The verifier's own version, in a module of its own so that ``harness-verify --version``
imports nothing else of the verifier.

A constant, not ``importlib.metadata.version("harness-verify")``: looking the installed
distribution up imports importlib.metadata, email, zipfile and csv and scans ``sys.path``, about
20 ms on every verification (every report carries the version). It is the version of
``pyproject.toml``; tests/test_startup_imports.py holds them equal.
"""

from __future__ import annotations

from typing import Final

VERSION: Final = "0.1.0"


def verifier_version() -> str:
    return VERSION
