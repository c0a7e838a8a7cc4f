"""What ``harness status`` shows of the bus: the open messages addressed to a human.

Read-only and best effort like the status reader of the audit store (a live run may be
appending): it stops at a torn tail, and it never decides anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.verify.canonical import parse_canonical
from harness.verify.errors import VerificationError
from harness.verify.rules import events as rule


def human_messages(run_folder: Path) -> list[dict[str, Any]]:
    """Messages to ``human`` neither handled nor expired, oldest first, each with its
    events ``seq`` and ``time``."""
    path = run_folder / "events.jsonl"
    if not path.is_file():
        return []
    open_: dict[int, dict[str, Any]] = {}
    for line in path.read_bytes().splitlines():
        try:
            obj = parse_canonical(line)
        except VerificationError:
            break
        if not isinstance(obj, dict) or not isinstance(obj.get("body"), dict):
            continue
        kind, body, seq = obj.get("kind"), obj["body"], obj.get("seq")
        if kind == "event.message" and body.get("to") == rule.HUMAN and type(seq) is int:
            open_[seq] = {"seq": seq, "time": obj.get("time"), **body}
        elif kind in ("event.handled", "event.expired") and type(body.get("message")) is int:
            open_.pop(body["message"], None)
    return [open_[seq] for seq in sorted(open_)]
