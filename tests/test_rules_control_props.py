"""Hypothesis properties of the control rules (issue 13): what must hold for every input.

Each property states its oracle: the bucket stays within [0, 10 K]; a run of levels at or above
M is crossed into at most once; CUSUM's statistic is never negative and a constant series never
alarms; ``parse_params`` accepts a table exactly when every member is in its range;
``configchain.apply`` only produces documents ``document_error`` accepts; the controller's
versions form a hash chain; and the controller's decisions are invariant under replay, both
for the same steps in a fresh controller and for the recorded ``control.sensor`` bodies read
back with ``step_of`` (the verifier's and a resumed runtime's path).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.verify.rules import bucket, configchain, cusum, meta, strategy
from harness.verify.rules.controller import (
    PARAM_RANGES,
    Controller,
    Params,
    Step,
    parse_params,
    step_of,
)
from harness.verify.rules.cusum import CusumParams, CusumState

RISKY = frozenset({"web", "shell", "secrets"})
TOOLS = ("edit", "web", "shell", "secrets", "read")
AGENTS = ("a", "b", "c", "d")
CLASSES = (None, None, None, "test", "lint", "crash", "conflict", "incomplete", "budget")
PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _denied(adapter: str, tools: Sequence[str]) -> bool:
    return set(tools) >= RISKY


# ---- bucket ----------------------------------------------------------------------------------


@PROPS
@given(st.lists(st.booleans(), max_size=60), st.integers(1, 20))
def test_bucket_is_never_negative_nor_above_ten_k(steps: list[bool], k: int) -> None:
    for end in range(len(steps) + 1):
        window = steps[max(0, end - k) : end]
        assert 0 <= bucket.level(window) <= bucket.ANOMALY * len(window) <= 10 * k


@PROPS
@given(st.lists(st.booleans(), max_size=80), st.integers(1, 60))
def test_crossing_happens_at_most_once_per_run_above_threshold(
    steps: list[bool], threshold: int
) -> None:
    levels = [bucket.level(steps[: i + 1]) for i in range(len(steps))]
    before = [0, *levels][:-1]
    crossings_in_run = 0
    for b, a in zip(before, levels, strict=True):
        if a < threshold:
            crossings_in_run = 0
            assert not bucket.crossed(b, a, threshold)
            continue
        crossings_in_run += bucket.crossed(b, a, threshold)
        assert crossings_in_run <= 1
        # the first level of a run at or above M is the crossing
        assert bucket.crossed(b, a, threshold) is (b < threshold)


# ---- CUSUM -----------------------------------------------------------------------------------

CUSUM_PARAMS = st.builds(
    CusumParams,
    warmup=st.integers(1, 10),
    k_pm=st.integers(0, 5000),
    h_pm=st.integers(1, 5000),
)


@PROPS
@given(CUSUM_PARAMS, st.lists(st.integers(0, 10**7), max_size=60))
def test_cusum_statistic_is_never_negative(params: CusumParams, xs: list[int]) -> None:
    state = CusumState()
    for x in xs:
        out = cusum.update(params, state, x)
        assert out.statistic >= 0 and out.state.s >= 0
        assert out.state.s == (0 if out.alarm else out.statistic)
        if state.n < params.warmup:
            assert not out.alarm and out.threshold == 0
        else:
            assert out.threshold >= 1
        state = out.state


@PROPS
@given(CUSUM_PARAMS, st.integers(0, 10**9), st.integers(1, 60))
def test_cusum_never_alarms_on_a_constant_series(params: CusumParams, x: int, n: int) -> None:
    state = CusumState()
    for _ in range(n):
        out = cusum.update(params, state, x)
        assert not out.alarm and out.statistic == 0
        state = out.state


# ---- parse_params ----------------------------------------------------------------------------


def _around(low: int, high: int) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.integers(low - 2, low + 2),
        st.integers(high - 2, high + 2),
        st.integers(low, high),
        st.sampled_from([True, False, None, "3", 3.0]),
    )


TABLES = st.fixed_dictionaries(
    {},
    optional={name: _around(low, high) for name, (low, high) in PARAM_RANGES.items()},
)


@PROPS
@given(TABLES)
def test_parse_params_accepts_exactly_its_ranges(table: dict[str, Any]) -> None:
    valid = all(
        type(v) is int and PARAM_RANGES[name][0] <= v <= PARAM_RANGES[name][1]
        for name, v in table.items()
    )
    got = parse_params(table)
    assert isinstance(got, Params) is valid, (table, got)
    if isinstance(got, Params):
        record = got.record()
        assert all(record[name] == v for name, v in table.items())
        assert parse_params(record) == got


@PROPS
@given(st.lists(st.integers(-2, 1003), min_size=3, max_size=3))
def test_parse_params_phase_bounds(bounds: list[int]) -> None:
    valid = all(0 <= b <= 1001 for b in bounds) and bounds == sorted(bounds)
    got = parse_params({"phase_bounds": bounds})
    assert isinstance(got, Params) is valid
    if isinstance(got, Params):
        assert got.bounds == tuple(bounds)


# ---- configchain -----------------------------------------------------------------------------

APPLY = st.tuples(
    st.sampled_from(AGENTS),
    st.sampled_from([*strategy.STRATEGIES, "escalate"]),
    st.lists(st.sampled_from(TOOLS), unique=True, max_size=4),
)


@PROPS
@given(st.lists(APPLY, max_size=25))
def test_apply_only_produces_documents_document_error_accepts(
    changes: list[tuple[str, str, list[str]]],
) -> None:
    document = configchain.initial_document()
    for agent, name, tools in changes:
        new = configchain.apply(document, agent, name, tools, lambda t: t in RISKY)
        if new is None:
            continue
        assert configchain.document_error(new) is None, new
        assert new != document  # a change changes something
        assert configchain.impact(document, new) == [agent]
        assert configchain.classify(document, new) in ("expand", "contract", "neutral")
        document = new


# ---- the controller --------------------------------------------------------------------------

STEP = st.builds(
    lambda agent, cls, pace, tokens, modules, contract, loop, backtrack, subtree: Step(
        task=f"{agent}-t",
        agent=agent,
        subtree=subtree,
        attempt=1,
        cls=cls,
        tier1={"outcome": 0 if cls is None else 1, "restarts": 0},
        measures={
            "pace_ms": pace,
            "backtrack": backtrack,
            "loop": loop,
            "modules": modules,
            "contract": contract,
            **({} if tokens is None else {"pace_tokens": tokens}),
        },
    ),
    st.sampled_from(AGENTS),
    st.sampled_from(CLASSES),
    st.sampled_from([100, 100, 100, 120, 250, 400, 1000]),
    st.one_of(st.none(), st.sampled_from([1000, 1000, 2500, 4000])),
    st.integers(0, 5),
    st.integers(0, 2),
    st.integers(0, 4),
    st.integers(0, 4),
    st.sampled_from(["src", "docs", "."]),
)
OPS = st.lists(st.one_of(STEP, STEP, STEP, st.integers(0, 1000)), max_size=60)
PARAMS = st.builds(
    Params,
    threshold=st.integers(10, 40),
    aggregate_agents=st.integers(2, 3),
    rate_window=st.integers(2, 12),
)
TASKS = {
    "a": [("claude", ["edit"])],
    "b": [("claude", ["edit", "web", "secrets"])],
    "c": [("claude", ["edit", "web"])],
    "d": [("scripted", ["read"]), ("claude", ["web"])],
}


def _machine(params: Params) -> Controller:
    return Controller(params, TASKS, risky=lambda t: t in RISKY, denied=_denied)


def _body(controller: Controller, s: Step, phase: str) -> tuple[Any, dict[str, Any]]:
    observed = controller.observe(s)
    return observed, {
        "step": observed.step,
        "task": s.task,
        "agent": s.agent,
        "subtree": s.subtree,
        "attempt": s.attempt,
        "phase": phase,
        "class": s.cls,
        "readings": [r.record() for r in observed.readings],
    }


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PARAMS, OPS)
def test_decisions_are_invariant_under_replay(params: Params, ops: list[Step | int]) -> None:
    live, fresh, verifier = _machine(params), _machine(params), _machine(params)
    progress = 0
    for op in ops:
        if isinstance(op, int):
            progress = max(progress, op)  # progress only grows
            entered = live.settle(progress)
            assert fresh.settle(progress) == entered == verifier.settle(progress)
            continue
        phase = live.phase
        observed, body = _body(live, op, phase)
        assert fresh.observe(op) == observed
        recorded_step, readings = step_of(body)
        assert verifier.readings(recorded_step) == observed.readings
        assert verifier.observe(recorded_step, readings) == observed
    assert live.made == fresh.made == verifier.made
    assert live.document == verifier.document and live.sha256 == verifier.sha256


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PARAMS, OPS)
def test_versions_form_a_chain(params: Params, ops: list[Step | int]) -> None:
    c = _machine(params)
    progress = 0
    referenced: list[int] = []
    for op in ops:
        if isinstance(op, int):
            progress = max(progress, op)
            c.settle(progress)
            continue
        observed = c.observe(op)
        configs = [d.config for d in observed.decisions if d.config is not None]
        assert configs == [v.version for v in observed.versions]
        referenced += configs
        for d in observed.decisions:
            assert d.step == observed.step
            assert (d.config is None) or d.action in strategy.SWITCHES
            assert d.action in (*strategy.STRATEGIES, strategy.ESCALATE, strategy.WARN)
    chain = [c.initial(), *c.made]
    assert [v.version for v in chain] == list(range(1, len(chain) + 1))
    assert referenced == [v.version for v in c.made]
    for parent, child in itertools.pairwise(chain):
        assert child.parent == parent.sha256
        assert child.sha256 == configchain.document_sha256(child.document)
        assert configchain.document_error(child.document) is None
        assert child.change == configchain.classify(parent.document, child.document)
        assert child.channel == configchain.channel(child.change)
        assert list(child.impact) == configchain.impact(parent.document, child.document)
    assert c.version == chain[-1].version and c.sha256 == chain[-1].sha256


@PROPS
@given(PARAMS, OPS)
def test_windows_stay_bounded_and_buckets_in_range(params: Params, ops: list[Step | int]) -> None:
    c = _machine(params)
    for op in ops:
        if isinstance(op, int):
            c.settle(op)
            continue
        c.observe(op)
        k = c.profile.window
        for key, window in c.windows.items():
            assert len(window) <= 20
            # the kept sums give the definition's fold over the last K steps
            assert c.level(key) == bucket.level(bad for bad, _, _ in window[-k:])
            assert 0 <= c.level(key) <= 10 * k
            if key.startswith("agent:"):
                held = {cls for _, cls, _ in window[-k:] if cls is not None}
                assert c.kinds(key) == held
        agents = {key[len("agent:") :]: key for key in c.windows if key.startswith("agent:")}
        for cls, showing in c.showing.items():
            expected = {a for a, key in agents.items() if cls in c.kinds(key)}
            assert showing == expected


@PROPS
@given(st.lists(st.booleans(), max_size=60), st.integers(1, 25), st.integers(-50, 50))
def test_window_level_is_the_fold_over_the_last_k(steps: list[bool], k: int, start: int) -> None:
    sums = [start]
    for bad in steps:
        sums.append(sums[-1] + bucket.delta(bad))
    assert bucket.window_level(sums, k) == bucket.level(steps[-k:])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PARAMS, OPS, st.integers(1, 5))
def test_selftest_never_changes_a_real_outcome(
    params: Params, ops: list[Step | int], every: int
) -> None:
    plain = _machine(params)
    probed = _machine(dataclasses.replace(params, meta=meta.MetaParams(selftest_every=every)))
    for op in ops:
        if isinstance(op, int):
            assert plain.settle(op) == probed.settle(op)
            continue
        a, b = plain.observe(op), probed.observe(op)
        # the false-alarm escalation is a meta decision too, and a real one
        real = tuple(d for d in b.decisions if d.rule != "selftest")
        probes = [d for d in b.decisions if d.rule == "selftest"]
        assert (a.readings, a.decisions, a.versions) == (b.readings, real, b.versions)
        assert [(d.key, d.action) for d in probes] == (
            [(f"selftest:{op.agent}", "detected")] if b.step % every == 0 else []
        )
    assert plain.made == probed.made
