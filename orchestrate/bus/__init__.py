"""The control bus: the runtime's reader of operator commands (docs/spec/control.md).

Commands are written by ``harness.receipts.commands.issue_command``; the runtime polls them
with ``ControlBus`` and answers each with exactly one ``command.receipt`` in its audit store.
"""

from harness.receipts.commands import Command

from .reader import BusError, ControlBus

__all__ = ["BusError", "Command", "ControlBus"]
