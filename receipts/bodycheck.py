"""The writer's body check: ``check_body``'s verdicts, specialised once per (store, kind).

Why it exists: every appended record's body is checked against its kind's spec (what readers
refuse must never be written), and on the append path ``check_body`` was the largest cost
after hashing: it looks the spec up and walks both the body and the spec on every call. Here
the spec of a kind is turned, once, into a closure holding its member set and its checkers
(the very ``Checker`` functions of ``harness.verify.recordkinds``, nothing re-implemented),
so a call is one set comparison and one call per member.

The closure only says yes or no; on no, the caller runs ``check_body`` itself, which raises
the precise ``SchemaError``. So error messages stay ``check_body``'s, and a disagreement could
only make a body take the slow path, never accept one ``check_body`` refuses: the closure
accepts exactly when every member is known, every required member present and every present
member passes its checker, which is ``check_body``'s definition.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.verify.records import BODY_SPECS, check_body

BodyCheck = Callable[[dict[str, Any]], bool]


def _compile(store: str, kind: str) -> BodyCheck | None:
    spec = BODY_SPECS.get(store, {}).get(kind)
    if spec is None:
        return None
    members = frozenset(spec)
    required = frozenset(name for name, (needed, _) in spec.items() if needed)
    checks = tuple((name, checker) for name, (_, checker) in spec.items())
    if required == members:

        def exact(body: dict[str, Any]) -> bool:
            if body.keys() != members:
                return False
            for name, checker in checks:  # noqa: SIM110 (a loop is cheaper than all(...))
                if checker(body[name]) is not None:
                    return False
            return True

        return exact

    def with_optional(body: dict[str, Any]) -> bool:
        keys = body.keys()
        if not required <= keys <= members:
            return False
        for name, checker in checks:
            if name in body and checker(body[name]) is not None:
                return False
        return True

    return with_optional


class BodyChecker:
    """``check(kind, body)`` for one store: returns if ``check_body`` would, else raises its
    ``SchemaError``. ``body`` must be a plain ``dict`` (the writer passes the caller's own, or
    its copy of any other mapping: a subclass could show the closure other members than it
    encodes)."""

    __slots__ = ("compiled", "store")

    def __init__(self, store: str) -> None:
        self.store = store
        self.compiled: dict[str, BodyCheck] = {}
        """The closures made so far, by kind (a hot loop may call one directly and fall back
        to ``check`` when there is none or it says no)."""

    def check(self, kind: str, body: dict[str, Any]) -> None:
        fast = self.compiled.get(kind)
        if fast is None:
            fast = _compile(self.store, kind)
            if fast is not None:  # unknown kinds are not kept: callers choose the strings
                self.compiled[kind] = fast
        if fast is None or type(body) is not dict or not fast(body):
            check_body(self.store, kind, body)  # raises the precise error (or agrees)
