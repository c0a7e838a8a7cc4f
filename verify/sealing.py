"""How much of a store a crash could have lost: the largest unsealed stretch between checkpoints.

A signed checkpoint seals a prefix of a store: anyone holding it can prove later that those
records were neither changed nor cut. Records after the newest checkpoint are protected only by
the keyed HMAC chain, which cannot detect a cut tail (DESIGN §3). A run sealed only at its end
is therefore exposed, for its whole length, to a crash (or a deliberate cut) before that end.

The bundle keeps every checkpoint a store received (docs/spec/bundle.md §8.3), so the verifier
can report, per store, the most records that were ever unsealed at once: the largest gap between
consecutive checkpoint sizes, counting from 0 (the empty store, sealed by definition) and up to
the number of records exported. In a bundle the last checkpoint covers every record, so the last
gap is 0; the figure says how often the run sealed, and what a crash at its worst moment would
have cost (docs/spec/checkpoints.md §6.1). Checkpoint sizes are taken after they verified.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # report.py imports this module: keep the CLI's start-up light
    from .storecheck import StoreResult

__all__ = ["largest_unsealed", "unsealed_detail"]


def largest_unsealed(checkpoints: Sequence[int], records: int) -> int:
    """max(b - a) over consecutive elements of ``0, *checkpoints, records``.

    ``checkpoints`` are strictly increasing tree sizes ≤ ``records`` (the manifest and the
    checkpoint rules guarantee it before this is called); a violation is a caller bug.
    """
    sizes = [0, *checkpoints, records]
    gaps = [newer - older for older, newer in itertools.pairwise(sizes)]
    if min(gaps) < 0:
        raise ValueError(f"checkpoint sizes {list(checkpoints)} do not rise to {records}")
    return max(gaps)


def unsealed_detail(results: Iterable[StoreResult]) -> str:
    """The merkle-roots check's detail line: the worst store of the bundle, by name."""
    worst: tuple[int, str] | None = None
    for result in results:
        gap = largest_unsealed(result.checkpoint_sizes, result.size)
        if worst is None or gap > worst[0]:
            worst = (gap, f"{result.run}/{result.store}")
    if worst is None:
        return "no store verified"
    noun = "record" if worst[0] == 1 else "records"
    return f"at most {worst[0]} {noun} unsealed at once ({worst[1]})"
