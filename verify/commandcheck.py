"""Run check "commands": a receipt is the only terminal authority for a command (issue 12 §5).

The operator's commands are the control store's ``command`` records {operator, command, args,
id, revision}; the runtime answers each with one ``command.receipt`` {id, command, control_seq,
outcome, reason} in the audit store, and records whatever the command caused (its *effects*:
today ``run.status`` and ``round.input``) with the command's id in their ``command`` member.
Folding the audit store, then the control store (the bundle's member order), this check
demands (docs/spec/verifier.md §3.8, "Commands"):

* at most one receipt per command id, with a known outcome (applied, rejected, failed,
  cancelled);
* an effect only after its command's receipt, and only when that receipt is ``applied``;
* every receipt names a command of the control store: the record at ``control_seq`` has the
  receipt's ``id`` and command name; no two control records share an id;
* a receipt is ``rejected`` with reason ``stale revision`` exactly when the command's
  ``revision`` is not the run's epoch when the receipt was written (the epoch of the latest
  ``run.status`` before it, 0 before any);
* when the audit store's last record is ``run.end``, every command has its receipt — for runs
  that speak the protocol (at least one ``run.status`` or ``command.receipt``); older format-2
  evidence and runs written without the runtime have control records and no receipts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .errors import VerificationError
from .records import Record

OUTCOMES: Final = ("applied", "rejected", "failed", "cancelled")
STALE: Final = "stale revision"
"""The reason of a receipt that rejects a command aimed at another epoch than the current."""


class CommandError(VerificationError):
    """A command without its one receipt, a receipt without its command, or an effect of a
    command that precedes its receipt or was not applied."""


@dataclass(frozen=True)
class _Receipt:
    body: Mapping[str, Any]
    where: str
    epoch: int
    """The run's epoch when the receipt was written."""


@dataclass(eq=False, repr=False)
class CommandCheck:
    run: str
    epoch: int = 0
    protocol: bool = False
    """Whether the run records run.status or command.receipt (the issue-12 runtime)."""
    ended: bool = False
    """Whether the audit store's last record (so far) is ``run.end``."""
    receipts: dict[str, _Receipt] = field(default_factory=dict)
    commands: dict[int, tuple[Mapping[str, Any], str]] = field(default_factory=dict)
    """control seq -> (command body, where)."""
    ids: dict[str, int] = field(default_factory=dict)
    """command id -> control seq."""

    def audit(self, record: Record, where: str) -> None:
        kind = record.kind
        body = record.body
        self.ended = kind == "run.end"
        if kind == "run.status":
            self.protocol = True
            self.epoch = int(body["epoch"])
        if kind == "command.receipt":
            self._receipt(body, where)
        elif body.get("command") is not None:
            self._effect(kind, str(body["command"]), where)

    def _receipt(self, body: Mapping[str, Any], where: str) -> None:
        self.protocol = True
        command_id = str(body["id"])
        first = self.receipts.get(command_id)
        if first is not None:
            raise CommandError(
                f"{where}: a second receipt for command {command_id!r} (the first is at "
                f"{first.where})"
            )
        if body["outcome"] not in OUTCOMES:
            raise CommandError(
                f"{where}: the receipt of command {command_id!r} has outcome "
                f"{body['outcome']!r}, not one of {list(OUTCOMES)}"
            )
        self.receipts[command_id] = _Receipt(body, where, self.epoch)

    def _effect(self, kind: str, command_id: str, where: str) -> None:
        receipt = self.receipts.get(command_id)
        if receipt is None:
            raise CommandError(
                f"{where}: {kind} is an effect of command {command_id!r}, which has no receipt "
                "before it"
            )
        if receipt.body["outcome"] != "applied":
            raise CommandError(
                f"{where}: {kind} is an effect of command {command_id!r}, whose receipt at "
                f"{receipt.where} is {receipt.body['outcome']!r}, not 'applied'"
            )

    def control(self, record: Record, where: str) -> None:
        if record.kind != "command":
            return
        command_id = str(record.body["id"])
        earlier = self.ids.get(command_id)
        if earlier is not None:
            raise CommandError(
                f"{where}: a second command with id {command_id!r} (the first is control seq "
                f"{earlier})"
            )
        self.ids[command_id] = record.seq
        self.commands[record.seq] = (record.body, where)

    def lineage(self, record: Record, where: str) -> None:
        return None

    def finish(self) -> None:
        for command_id, receipt in self.receipts.items():
            self._bound(command_id, receipt)
        if not (self.ended and self.protocol):
            return
        for seq, (body, where) in sorted(self.commands.items()):
            if body["id"] not in self.receipts:
                raise CommandError(
                    f"{where}: command {body['id']!r} ({body['command']}, control seq {seq}) "
                    "has no receipt, and the run has ended"
                )

    def _bound(self, command_id: str, receipt: _Receipt) -> None:
        """The receipt against the control record it names."""
        body, where = receipt.body, receipt.where
        seq = body["control_seq"]
        entry = self.commands.get(seq)
        if entry is None:
            raise CommandError(
                f"{where}: the receipt of command {command_id!r} names control seq {seq}, "
                "which is no command of the control store"
            )
        command = entry[0]
        if (command["id"], command["command"]) != (command_id, body["command"]):
            raise CommandError(
                f"{where}: the receipt names command {command_id!r} ({body['command']}) at "
                f"control seq {seq}, which is command {command['id']!r} ({command['command']})"
            )
        stale = command["revision"] != receipt.epoch
        rejected_stale = body["outcome"] == "rejected" and body["reason"] == STALE
        if stale != rejected_stale:
            raise CommandError(
                f"{where}: command {command_id!r} targets revision {command['revision']} in "
                f"epoch {receipt.epoch}: its receipt must "
                + ("" if stale else "not ")
                + f"be 'rejected' with reason {STALE!r} (it is {body['outcome']!r}, "
                f"{body['reason']!r})"
            )


def command_check(run: str, plan: bytes | None) -> CommandCheck:
    return CommandCheck(run)
