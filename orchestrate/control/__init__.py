"""The control layers above the P layer (issue 13): sensors, the I and D layers, phases and
the configuration chain, run by ``harness.verify.rules.controller`` and recorded here."""

from .run import RunControl

__all__ = ["RunControl"]
