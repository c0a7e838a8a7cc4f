"""The I layer's per-key history: each agent's and subtree's recent steps, with what the
controller reads of them at every step kept up to date instead of recomputed.

Split from ``controller`` (which owns when keys change and what a crossing decides) so each
stays small. Per key (``agent:<role>``, ``subtree:<path>``, the self-test's shadow keys):

* its window, the last ``phases.MAX_WINDOW`` steps since its last decision, each
  ``(anomalous, class, agent)``;
* the running sums of the window's bucket deltas (``bucket.window_level``: a level over the
  last K is one ``min``), and the level after its last step (the next crossing test's
  ``before``), until K changes;
* for agent keys, how many steps of each anomaly class its last K hold, and per class the
  agents showing it (the aggregation across agents), with ``reshown`` set whenever that may
  have changed.
"""

from __future__ import annotations

from typing import Final

from . import bucket, phases

AGENT: Final = "agent:"


class KeyWindows:
    def __init__(self, k: int) -> None:
        self.k = k
        """The phase's window K."""
        self.windows: dict[str, list[tuple[bool, str | None, str]]] = {}
        self.sums: dict[str, list[int]] = {}
        """Per key, one longer than its window."""
        self.levels: dict[str, int] = {}
        self.seen: dict[str, dict[str, int]] = {}
        """Per agent key, the count of each anomaly class in its last K steps."""
        self.showing: dict[str, set[str]] = {}
        """Per anomaly class, the agents whose last K steps hold it."""
        self.reshown = False
        """Whether ``showing`` may have changed since the aggregation last looked (the
        aggregation clears it)."""

    def rewindow(self, k: int) -> None:
        """A phase with window ``k``: levels are recomputed, classes recounted."""
        self.k = k
        self.levels.clear()
        self.seen.clear()
        self.showing.clear()
        self.reshown = True
        for key, window in self.windows.items():
            if key.startswith(AGENT):
                agent, seen = key[len(AGENT) :], self.seen.setdefault(key, {})
                for _, cls, _ in window[-k:]:
                    if cls is not None:
                        self._count(seen, cls, agent, 1)

    def level(self, key: str) -> int:
        """The bucket level of ``key`` over its last K steps now (tenths; 0 right after its
        decision)."""
        sums = self.sums.get(key)
        return 0 if sums is None else bucket.window_level(sums, self.k)

    def kinds(self, key: str) -> frozenset[str]:
        """The anomaly classes in agent key ``key``'s last K steps."""
        return frozenset(self.seen.get(key, ()))

    def push(self, key: str, bad: bool, cls: str | None, agent: str, counted: bool) -> list[int]:
        """Append one step to ``key``'s window (its sums, and for an agent key, ``counted``,
        the classes of its last K steps); its sums."""
        window = self.windows.get(key)
        if window is None:
            window = self.windows[key] = []
            sums = self.sums[key] = [0]
        else:
            sums = self.sums[key]
        if counted:
            k = self.k
            gone = window[-k][1] if len(window) >= k else None  # leaves the last K
            if gone is not None or cls is not None:
                seen = self.seen.get(key)
                if seen is None:
                    seen = self.seen[key] = {}
                if gone is not None:
                    self._count(seen, gone, agent, -1)
                if cls is not None:
                    self._count(seen, cls, agent, 1)
        window.append((bad, cls, agent))
        sums.append(sums[-1] + (bucket.ANOMALY if bad else -bucket.NORMAL))
        if len(window) > phases.MAX_WINDOW:
            del window[0]
            del sums[0]
        return sums

    def reset(self, key: str) -> None:
        """``key``'s history starts empty (after its decision: anti-windup)."""
        self.windows[key] = []
        self.sums[key] = [0]
        self.levels[key] = 0
        seen = self.seen.pop(key, None)
        if seen:
            self.reshown = True
            agent = key[len(AGENT) :]
            for cls in seen:
                self.showing[cls].discard(agent)

    def _count(self, seen: dict[str, int], cls: str, agent: str, change: int) -> None:
        self.reshown = True
        left = seen.get(cls, 0) + change
        if left:
            seen[cls] = left
            if left == 1 and change == 1:
                self.showing.setdefault(cls, set()).add(agent)
        else:
            del seen[cls]
            self.showing[cls].discard(agent)
