"""Control-layer benchmark: controller CPU per sensor reading, verifier recomputation per decision.

Prints one JSON line. Run: ``python bench/control.py --steps 100000``.

A seeded synthetic run of ``--steps`` steps (retired attempts) by ``--agents`` agents over 4
subtrees: about 15 % of the steps fail (test, lint, crash, conflict, agent), each agent has its
own pace (time per step, with occasional slow streaks that CUSUM sees) and half of them
report tokens; a few steps span two modules or touch another agent's paths. Progress moves
through the four phases as the run goes (``settle`` after every step), so the sensor level,
and the readings per step, change as they do in a run.

Times are process CPU time (``time.process_time``), so a busy machine inflates them less than
wall time would.

* ``observe_us_per_reading``: ``Controller.observe(step)`` as the runtime calls it (readings
  computed by the controller), total CPU time / readings produced (target <= 5 µs);
  ``observe_us_per_step`` the same per step.
* ``verify_us_per_decision``: the verifier's path: every recorded ``control.sensor`` body read
  back with ``step_of``, its readings recomputed (``readings``) and compared, then
  ``observe(step, readings)`` compared with the recorded decisions and versions; total time
  / decisions. ``verify_us_per_step`` the same per step. The run aborts if anything differs.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from typing import Any

from harness.verify.rules.controller import Controller, Observed, Params, Step, step_of

TARGET_US_PER_READING = 5.0
RISKY = frozenset({"web", "shell", "secrets"})
CLASSES = ("test", "test", "lint", "crash", "conflict", "agent")
SUBTREES = ("src", "tests", "docs", ".")


def _denied(adapter: str, tools: Sequence[str]) -> bool:
    return set(tools) >= RISKY


def make_steps(count: int, agents: int, seed: int) -> list[Step]:
    rng = random.Random(seed)
    names = [f"agent{i}" for i in range(agents)]
    base = {name: rng.randrange(2_000, 60_000) for name in names}
    slow: dict[str, int] = dict.fromkeys(names, 0)
    steps = []
    for n in range(count):
        agent = rng.choice(names)
        if slow[agent] == 0 and rng.random() < 0.01:
            slow[agent] = rng.randrange(3, 8)  # a slow streak
        factor = 3 if slow[agent] else 1
        slow[agent] = max(0, slow[agent] - 1)
        pace = int(base[agent] * factor * rng.uniform(0.8, 1.25))
        cls = rng.choice(CLASSES) if rng.random() < 0.15 else None
        measures = {
            "pace_ms": pace,
            "backtrack": rng.choice((0, 0, 0, 1, 3)),
            "loop": rng.choice((0, 1, 1, 2, 4)) if cls else rng.choice((0, 1)),
            "modules": rng.choice((1, 1, 1, 2)),
            "contract": 1 if rng.random() < 0.05 else 0,
        }
        if int(agent[5:]) % 2 == 0:
            measures["pace_tokens"] = pace * 3
        steps.append(
            Step(
                task=f"t{n}",
                agent=agent,
                subtree=rng.choice(SUBTREES),
                attempt=rng.choice((1, 1, 1, 2)),
                cls=cls,
                tier1={
                    "outcome": 0 if cls is None else 1,
                    "restarts": 0,
                    "tests": 1 if cls == "test" else 0,
                    "lint": 1 if cls == "lint" else 0,
                },
                measures=measures,
            )
        )
    return steps


def tasks_of(agents: int) -> dict[str, list[tuple[str, list[str]]]]:
    tools = (["edit"], ["edit", "web"], ["edit", "web", "secrets"], ["read"])
    return {f"agent{i}": [("claude", tools[i % len(tools)])] for i in range(agents)}


def _machine(agents: int) -> Controller:
    return Controller(Params(), tasks_of(agents), risky=lambda t: t in RISKY, denied=_denied)


def _body(observed: Observed, step: Step, phase: str) -> dict[str, Any]:
    return {
        "step": observed.step,
        "task": step.task,
        "agent": step.agent,
        "subtree": step.subtree,
        "attempt": step.attempt,
        "phase": phase,
        "class": step.cls,
        "readings": [r.record() for r in observed.readings],
    }


def run(count: int, agents: int, seed: int) -> dict[str, Any]:
    steps = make_steps(count, agents, seed)
    live = _machine(agents)
    observed: list[Observed] = []
    phases: list[str] = []
    progress = [(n + 1) * 1000 // count for n in range(count)]
    spent = 0.0
    for n, step in enumerate(steps):
        phases.append(live.phase)
        t0 = time.process_time()
        out = live.observe(step)
        spent += time.process_time() - t0
        observed.append(out)
        live.settle(progress[n])
    bodies = [_body(o, s, p) for o, s, p in zip(observed, steps, phases, strict=True)]
    readings = sum(len(o.readings) for o in observed)
    decisions = sum(len(o.decisions) for o in observed)

    checker = _machine(agents)
    t0 = time.process_time()
    for n, body in enumerate(bodies):
        step, recorded = step_of(body)
        if checker.readings(step) != recorded:
            raise SystemExit(f"step {n + 1}: recomputed readings differ")
        if checker.observe(step, recorded) != observed[n]:
            raise SystemExit(f"step {n + 1}: recomputed decisions differ")
        checker.settle(progress[n])
    verify_s = time.process_time() - t0

    by_rule: dict[str, int] = {}
    for o in observed:
        for d in o.decisions:
            name = f"{d.rule}:{d.action}"
            by_rule[name] = by_rule.get(name, 0) + 1
    return {
        "bench": "control",
        "steps": count,
        "agents": agents,
        "readings": readings,
        "readings_per_step": round(readings / count, 2),
        "decisions": decisions,
        "versions": live.version,
        "decisions_by_rule": dict(sorted(by_rule.items())),
        "observe_us_per_reading": round(spent * 1e6 / max(1, readings), 3),
        "observe_us_per_step": round(spent * 1e6 / count, 3),
        "verify_us_per_decision": round(verify_s * 1e6 / max(1, decisions), 1),
        "verify_us_per_step": round(verify_s * 1e6 / count, 3),
        "target_us_per_reading": TARGET_US_PER_READING,
        "python": sys.version.split()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args()
    print(json.dumps(run(args.steps, args.agents, args.seed), sort_keys=True))


if __name__ == "__main__":
    main()
