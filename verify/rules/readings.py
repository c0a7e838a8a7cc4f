"""A step's sensor readings (docs/spec/control-layers.md §3), made as the controller needs
them: tier 1 as given, then the tier-2 sensors ``sensors.activate`` turns on, each flagged by
``sensors.anomalous``.

Split from ``controller`` because it is the controller's hottest path (a reading is its unit
of cost, bench/control.py): readings are immutable, so those of small values are made once
per controller and shared, and what ``observe`` needs of them (a flagged tier-2 reading, the
pace readings) is found while they are made.
"""

from __future__ import annotations

from typing import Final

from . import sensors
from .controlmodel import Reading, Step

MADE_BELOW: Final = 64
"""Readings of values below this are made once per controller and shared; larger values
(times, tokens, per-mille) are made each time, so the rows stay bounded whatever the input."""


def _reading(sensor: str, tier: int, value: int, trigger: str | None) -> Reading:
    return Reading(sensor, tier, value, sensors.anomalous(sensor, value), trigger)


class ReadingMaker:
    def __init__(self) -> None:
        self.tier1_rows: dict[str, list[Reading | None]] = {
            name: [None] * MADE_BELOW for name in sensors.TIER1
        }
        """Per tier-1 sensor, its readings by value, made once."""
        self.tier2_rows: dict[str, dict[str, list[Reading | None]]] = {
            name: {} for name in sensors.TIER2
        }
        """Per tier-2 sensor and trigger, its readings by value, made once."""

    def read(
        self, step: Step, sensor_level: str, last_pace: int | None
    ) -> tuple[tuple[Reading, ...], bool, list[Reading]]:
        """The step's readings at ``sensor_level`` (``last_pace``: the agent's previous
        ``pace_ms``), whether a tier-2 one is flagged, and the pace readings."""
        out = []
        tier1, rows = step.tier1, self.tier1_rows
        for name in sensors.TIER1:
            if name in tier1:
                value = tier1[name]
                if 0 <= value < MADE_BELOW:
                    row = rows[name]
                    reading = row[value]
                    if reading is None:
                        reading = row[value] = _reading(name, 1, value, None)
                else:
                    reading = _reading(name, 1, value, None)
                out.append(reading)
        measures = step.measures
        pace = measures.get("pace_ms", 0)
        jumped = sensors.pace_jump(last_pace, pace)
        active = sensors.activate(
            sensor_level,
            failed=step.cls is not None,
            jumped=jumped,
            modules=measures.get("modules", 0),
            shared=measures.get("contract", 0),
            tokens_known="pace_tokens" in measures,
        )
        flagged = False
        paced: list[Reading] = []
        triggered = self.tier2_rows
        for name, trigger in active.items():  # in TIER2 order
            value = measures.get(name, 0)
            if 0 <= value < MADE_BELOW:
                by_trigger = triggered[name]
                line = by_trigger.get(trigger)
                if line is None:
                    line = by_trigger[trigger] = [None] * MADE_BELOW
                reading = line[value]
                if reading is None:
                    reading = line[value] = _reading(name, 2, value, trigger)
            else:
                reading = _reading(name, 2, value, trigger)
            out.append(reading)
            if reading.anomaly:
                flagged = True
            if name in sensors.PACE:
                paced.append(reading)
        return tuple(out), flagged, paced
