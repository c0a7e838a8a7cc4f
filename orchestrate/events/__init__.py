"""The event bus (issue 13 §8): the control layers' messages along the supervision tree,
recorded in the run's ``events`` store (docs/spec/events.md)."""

from .bus import EventBus, derive
from .status import human_messages

__all__ = ["EventBus", "derive", "human_messages"]
