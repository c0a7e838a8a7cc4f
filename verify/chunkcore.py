"""The optional compiled core of a chunk check: whether it is here, and the tables it reads.

The core (``_chunkcore``, built from ``verify/_chunkcore.c`` where a C compiler and OpenSSL 3
are present) proves a chunk's lines with the store's canonical grammar as an automaton
(``grammardfa``) and hashes and MACs them with OpenSSL; ``storechunk`` uses it for chunks
that would take the grammar path, and the pure path for everything else, and wherever the
core is absent or ``HARNESS_PURE=1`` is set (decision 0052). Both give the same verdicts; the
tests hold them to it.
"""

from __future__ import annotations

import functools
import importlib
import os
from array import array
from types import ModuleType
from typing import Final, NamedTuple

from .grammardfa import store_dfa
from .records import BODY_SPECS, ENVELOPE_KEYS, MAX_LINE_BYTES

__all__ = ["FOLD_DELETE", "FOLD_WRITE", "NativeGrammar", "load_core", "native_grammar"]

PURE_ENV: Final = "HARNESS_PURE"
"""Set to ``1`` to verify with the pure-Python path even where the core is built."""
_ENVELOPE_ORDER: Final = sorted(ENVELOPE_KEYS)


ENABLED = os.environ.get(PURE_ENV) != "1"
"""Whether the core is used where it is built (tests switch it to hold both paths equal)."""


def load_core() -> ModuleType | None:
    """The compiled core, or None when it is not built, or not ``ENABLED``."""
    return _import_core() if ENABLED else None


@functools.cache
def _import_core() -> ModuleType | None:
    try:
        return importlib.import_module(f"{__package__}._chunkcore")
    except ImportError:
        return None


FOLD_WRITE: Final = 1
FOLD_DELETE: Final = 2
"""How the lineage fold takes a kind (``_chunkcore.check``'s ``fold``): its records set the
last operation of the path they name, a write also counting one more write of it."""


class NativeGrammar(NamedTuple):
    """What ``_chunkcore.check`` reads for one store of one run, and how to read back what it
    reports."""

    prepared: object
    """The store's automaton and rules, as ``_chunkcore.prepare`` keeps them."""
    kinds: tuple[str, ...]
    """Kind index (as ``counts`` gives it) -> kind."""
    members: tuple[tuple[str, ...], ...]
    """Per kind index: its body's member names, in line order."""


@functools.lru_cache(maxsize=8)  # as store_dfa: up to ~3 MB each (audit), not kept per run
def native_grammar(
    store: str, run: str, mac_key: bytes | None, fold: tuple[tuple[str, int], ...]
) -> NativeGrammar | None:
    """The core's tables for ``store`` of ``run`` (HMAC key ``mac_key``; ``fold``: the kinds
    the lineage fold takes, with ``FOLD_WRITE`` or ``FOLD_DELETE``), or None when the grammar
    has no automaton or the core is absent."""
    core = _import_core()
    dfa = store_dfa(store, run)
    if core is None or dfa is None:
        return None
    members = tuple(tuple(sorted(BODY_SPECS[store][kind])) for kind in dfa.kinds)
    ops = dict(fold)
    folds = bytearray()
    for kind, names in zip(dfa.kinds, members, strict=True):
        op = ops.get(kind, 0)
        task, path = (names.index("task"), names.index("path")) if op else (0, 0)
        folds += bytes((len(names), task, path, op))
    offsets = array("H")
    offsets.frombytes(dfa.table)
    table = array("I", (state * dfa.classes for state in offsets))
    prepared = core.prepare(
        table.tobytes(),
        dfa.byte_class,
        dfa.accept,
        dfa.classes,
        dfa.start,
        bytes(folds),
        _ENVELOPE_ORDER.index("seq"),
        _ENVELOPE_ORDER.index("time"),
        _ENVELOPE_ORDER.index("mac"),
        mac_key,
        MAX_LINE_BYTES,
    )
    return NativeGrammar(prepared, dfa.kinds, members)
