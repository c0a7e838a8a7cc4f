"""Known answers for the control rules' building blocks (issue 13): the leaky bucket, CUSUM,
phases, sensor activation, the strategy toolbox and the configuration chain.

Every expected value is computed by hand from the rule's definition (the arithmetic is in the
comments), never by calling the code under test; docs/spec/control-layers.md states the same
rules. The controller end to end is in tests/test_rules_control_machine.py, the hypothesis
properties in tests/test_rules_control_props.py.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from harness.verify.rules import bucket, configchain, cusum, phases, sensors, strategy
from harness.verify.rules.cusum import CusumParams, CusumState

T, F = True, False

# ---- bucket ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        ([], 0),
        ([F], 0),  # floor: 0 - 1 -> 0, never -1
        ([F, F, F], 0),
        ([T], 10),  # +1.0 in tenths
        ([T, F], 9),  # 10 - 1
        ([T, F, F], 8),
        ([T, T, F, T], 29),  # 10 + 10 - 1 + 10
        ([T, T, T], 30),
        ([T, *[F] * 9], 1),  # 10 - 9
        ([T, *[F] * 11], 0),  # 10 - 11 floors at 0 ...
        ([T, *[F] * 11, T], 10),  # ... so the next anomaly starts from 0, not from -1
        ([F, F, T], 10),  # normal steps before anything leave no credit
        ([T, T, *[F] * 25, T], 10),  # 20 - 25 -> 0, + 10
    ],
)
def test_bucket_level_by_hand(window: list[bool], expected: int) -> None:
    assert bucket.level(window) == expected


def test_bucket_constants_are_tenths() -> None:
    assert (bucket.ANOMALY, bucket.NORMAL, bucket.DEFAULT_THRESHOLD) == (10, 1, 30)
    assert bucket.MAX_THRESHOLD == 1000


@pytest.mark.parametrize(
    ("before", "after", "threshold", "expected"),
    [
        (29, 30, 30, True),  # reaching M exactly is a crossing
        (20, 30, 30, True),
        (29, 39, 30, True),
        (0, 10, 10, True),
        (20, 29, 30, False),  # still below
        (30, 40, 30, False),  # already at M before: not again while at or above
        (31, 30, 30, False),  # draining while above
        (39, 38, 30, False),
        (30, 29, 30, False),  # leaving M is no crossing
        (0, 0, 1, False),
    ],
)
def test_bucket_crossing_by_hand(before: int, after: int, threshold: int, expected: bool) -> None:
    assert bucket.crossed(before, after, threshold) is expected


def test_bucket_crossing_happens_once_in_a_run_above_threshold() -> None:
    # M = 30, steps T T T T F T: levels 10 20 30 40 39 49; only 20 -> 30 crosses.
    steps = [T, T, T, T, F, T]
    levels = [bucket.level(steps[: i + 1]) for i in range(len(steps))]
    assert levels == [10, 20, 30, 40, 39, 49]
    before = [0, *levels[:-1]]
    assert [bucket.crossed(b, a, 30) for b, a in zip(before, levels, strict=True)] == [
        F,
        F,
        T,
        F,
        F,
        F,
    ]


# ---- CUSUM ------------------------------------------------------------------------------------

DEFAULT = CusumParams()


def _feed(params: CusumParams, xs: list[int]) -> list[cusum.CusumStep]:
    state, out = CusumState(), []
    for x in xs:
        step = cusum.update(params, state, x)
        out.append(step)
        state = step.state
    return out


def test_cusum_defaults() -> None:
    assert (DEFAULT.warmup, DEFAULT.k_pm, DEFAULT.h_pm) == (3, 500, 2000)


def test_cusum_warmup_sets_the_reference_and_never_alarms() -> None:
    steps = _feed(DEFAULT, [100, 5000, 7])
    # During warm-up: no alarm, S = 0, h reported as 0, the state sums the readings.
    assert [(s.alarm, s.statistic, s.threshold) for s in steps] == [(F, 0, 0)] * 3
    assert steps[-1].state == CusumState(3, 5107, 0)


def test_cusum_reference_and_allowance_are_floor_divisions() -> None:
    params = CusumParams(warmup=3, k_pm=333, h_pm=1500)
    # ref = (10 + 10 + 11) // 3 = 31 // 3 = 10 (not 10.33);
    # k = 10 * 333 // 1000 = 3 (not 3.33); h = max(1, 10 * 1500 // 1000) = 15.
    # x = 20: S = max(0, 0 + 20 - 10 - 3) = 7.
    step = _feed(params, [10, 10, 11, 20])[-1]
    assert (step.statistic, step.threshold, step.alarm) == (7, 15, F)
    assert step.state == CusumState(4, 31, 7)


def test_cusum_threshold_is_at_least_one() -> None:
    # ref = 0, k = 0, h = max(1, 0) = 1; x = 0 keeps S = 0: no alarm.
    step = _feed(DEFAULT, [0, 0, 0, 0])[-1]
    assert (step.statistic, step.threshold, step.alarm) == (0, 1, F)
    # x = 2: S = 2 > 1: alarm.
    step = _feed(DEFAULT, [0, 0, 0, 2])[-1]
    assert (step.statistic, step.threshold, step.alarm) == (2, 1, T)


def test_cusum_flat_series_never_alarms() -> None:
    # ref = 100, k = 50: S = max(0, S + 100 - 150) = 0 at every reading.
    steps = _feed(DEFAULT, [100] * 50)
    assert not any(s.alarm for s in steps)
    assert {s.statistic for s in steps[3:]} == {0}


def test_cusum_one_spike_of_three_and_a_half_times_alarms() -> None:
    # ref = 100, k = 50, h = 200; x = 350: S = 350 - 100 - 50 = 200, the threshold reached.
    steps = _feed(DEFAULT, [100, 100, 100, 350])
    assert (steps[-1].statistic, steps[-1].threshold, steps[-1].alarm) == (200, 200, T)
    # and the alarm resets S: the next normal reading starts from 0.
    assert steps[-1].state.s == 0


def test_cusum_a_smaller_spike_does_not_alarm() -> None:
    # x = 349: S = 199 < 200; the next flat reading drains it: 199 + 100 - 150 = 149.
    steps = _feed(DEFAULT, [100, 100, 100, 349, 100])
    assert [(s.statistic, s.alarm) for s in steps[3:]] == [(199, F), (149, F)]


def test_cusum_three_readings_of_2_2_times_alarm() -> None:
    # x = 220: each adds 220 - 150 = 70: S = 70, 140, 210 >= 200: alarm at the third.
    steps = _feed(DEFAULT, [100, 100, 100, 220, 220, 220])
    assert [(s.statistic, s.alarm) for s in steps[3:]] == [(70, F), (140, F), (210, T)]
    # two of them do not: 140 < 200.
    assert not any(s.alarm for s in _feed(DEFAULT, [100, 100, 100, 220, 220, 100]))


def test_cusum_slow_drift_alarms_then_resets() -> None:
    # x = 160, 170, ..., 210 add 10, 20, 30, 40, 50, 60: S = 10, 30, 60, 100, 150, 210.
    # 210 >= 200: alarm, S restarts at 0; x = 220 then gives 70.
    xs = [100, 100, 100, 160, 170, 180, 190, 200, 210, 220]
    steps = _feed(DEFAULT, xs)
    assert [s.statistic for s in steps[3:]] == [10, 30, 60, 100, 150, 210, 70]
    assert [s.alarm for s in steps[3:]] == [F, F, F, F, F, T, F]


def test_cusum_below_the_reference_drains_and_floors() -> None:
    # ref = 100: 300 gives 150; 10 gives max(0, 150 + 10 - 150) = 10; 0 gives max(0, -140) = 0.
    steps = _feed(DEFAULT, [100, 100, 100, 300, 10, 0])
    assert [s.statistic for s in steps[3:]] == [150, 10, 0]


def test_cusum_k_and_h_are_per_mille_of_the_reference() -> None:
    # ref = 1000: k = 1000 * 250 // 1000 = 250, h = 1000 * 700 // 1000 = 700.
    # x = 1900: S = 1900 - 1000 - 250 = 650 (no alarm); x = 1300: 650 + 50 = 700 (alarm).
    params = CusumParams(warmup=1, k_pm=250, h_pm=700)
    steps = _feed(params, [1000, 1900, 1300])
    assert [(s.statistic, s.threshold, s.alarm) for s in steps[1:]] == [
        (650, 700, F),
        (700, 700, T),
    ]


# ---- phases -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settled", "total", "expected"),
    [(0, 8, 0), (1, 8, 125), (1, 3, 333), (2, 3, 666), (3, 3, 1000), (0, 0, 1000), (5, 7, 714)],
)
def test_progress_per_mille_floors(settled: int, total: int, expected: int) -> None:
    # 1 * 1000 // 3 = 333, 2 * 1000 // 3 = 666, 5000 // 7 = 714; a plan without tasks is done.
    assert phases.progress_pm(settled, total) == expected


@pytest.mark.parametrize(
    ("progress", "expected"),
    [
        (0, "explore"),
        (249, "explore"),
        (250, "implement"),  # a bound at or below the progress counts
        (749, "implement"),
        (750, "integrate"),
        (899, "integrate"),
        (900, "converge"),
        (1000, "converge"),
    ],
)
def test_phase_for_default_bounds(progress: int, expected: str) -> None:
    assert phases.DEFAULT_BOUNDS == (250, 750, 900)
    assert phases.phase_for(progress) == expected


def test_phase_bounds_of_1001_are_never_reached() -> None:
    assert phases.phase_for(1000, (1001, 1001, 1001)) == "explore"
    assert phases.phase_for(1000, (0, 1001, 1001)) == "implement"


def test_equal_bounds_skip_a_phase() -> None:
    # bounds 250, 250, 900: at 250 two bounds count, so implement is skipped.
    assert [phases.phase_for(p, (250, 250, 900)) for p in (249, 250, 899, 900)] == [
        "explore",
        "integrate",
        "integrate",
        "converge",
    ]
    assert phases.phase_for(0, (0, 0, 0)) == "converge"


@pytest.mark.parametrize(
    ("bounds", "expected"),
    [
        ((250, 750, 900), None),
        ((0, 0, 0), None),
        ((1001, 1001, 1001), None),
        ((250, 750), "three integers between 0 and 1001 (per-mille of settled tasks)"),
        ((250, 750, 900, 950), "three integers between 0 and 1001 (per-mille of settled tasks)"),
        ((250, 750, 1002), "three integers between 0 and 1001 (per-mille of settled tasks)"),
        ((-1, 750, 900), "three integers between 0 and 1001 (per-mille of settled tasks)"),
        ((True, 750, 900), "three integers between 0 and 1001 (per-mille of settled tasks)"),
        ((250.0, 750, 900), "three integers between 0 and 1001 (per-mille of settled tasks)"),
        ((300, 200, 900), "non-decreasing bounds"),
        ((300, 900, 899), "non-decreasing bounds"),
    ],
)
def test_bounds_error(bounds: tuple[Any, ...], expected: str | None) -> None:
    assert phases.bounds_error(bounds) == expected


def test_profiles_table() -> None:
    rows = {
        name: (
            p.checkpoint_min,
            p.sensor_level,
            p.review,
            p.window,
            p.config_switches,
            p.topology_changes,
        )
        for name, p in phases.PROFILES.items()
    }
    assert rows == {
        "explore": (30, "basic", "loose", 20, 4, 2),
        "implement": (10, "standard", "normal", 12, 3, 1),
        "integrate": (3, "full", "strict", 6, 2, 1),
        "converge": (5, "full", "strictest", 4, 2, 0),
    }
    assert max(p.window for p in phases.PROFILES.values()) == phases.MAX_WINDOW
    assert all(phases.PROFILES[n].name == n for n in phases.ORDER)


@pytest.mark.parametrize(
    ("last", "step", "expected"),
    [
        (None, 1, T),
        (9, 10, T),  # (10 - 9) * 1000 = 1000 >= 10 * 100
        (18, 20, T),  # 2000 >= 2000
        (19, 20, F),  # 1000 < 2000
        (10, 11, F),  # 1000 < 1100
        (10, 20, T),
        (100, 111, F),  # 11 * 1000 = 11000 < 111 * 100 = 11100
        (100, 112, T),  # 12000 >= 11200
    ],
)
def test_topology_spacing(last: int | None, step: int, expected: bool) -> None:
    assert phases.topology_spaced(last, step) is expected


@pytest.mark.parametrize(
    ("elapsed_us", "expected"),
    [
        (0, F),
        (4 * 3600 * 10**6 - 1, F),  # 3 h 59 min 59.999999 s floors to 14399 s
        (4 * 3600 * 10**6, T),
        (6 * 3600 * 10**6 - 1, T),
        (6 * 3600 * 10**6, F),
    ],
)
def test_heightened_hours_four_to_six(elapsed_us: int, expected: bool) -> None:
    start = 1_700_000_000_000_000
    assert phases.heightened(start, start + elapsed_us) is expected


# ---- sensors ----------------------------------------------------------------------------------


def _activate(level: str, **kw: Any) -> dict[str, str]:
    args = {"failed": False, "jumped": False, "modules": 1, "shared": 0, "tokens_known": False}
    args.update(kw)
    return sensors.activate(level, **args)


def test_activation_basic_normal_step_reads_nothing() -> None:
    assert _activate("basic") == {}
    # a jump alone does not turn backtrack on: pace is not read at basic without an anomaly.
    assert _activate("basic", jumped=True) == {}


def test_activation_on_an_anomaly() -> None:
    assert _activate("basic", failed=True) == {"pace_ms": "anomaly", "loop": "anomaly"}
    assert _activate("basic", failed=True, tokens_known=True) == {
        "pace_ms": "anomaly",
        "pace_tokens": "anomaly",
        "loop": "anomaly",
    }
    assert _activate("basic", failed=True, jumped=True) == {
        "pace_ms": "anomaly",
        "backtrack": "pace-jump",
        "loop": "anomaly",
    }


def test_activation_standard_reads_pace_by_level() -> None:
    assert _activate("standard") == {"pace_ms": "level"}
    assert _activate("standard", tokens_known=True) == {
        "pace_ms": "level",
        "pace_tokens": "level",
    }
    assert _activate("standard", jumped=True) == {"pace_ms": "level", "backtrack": "pace-jump"}
    # a condition beats the level
    assert _activate("standard", failed=True) == {"pace_ms": "anomaly", "loop": "anomaly"}


def test_activation_structure_conditions_at_any_level() -> None:
    assert _activate("basic", modules=2) == {"modules": "cross-module"}
    assert _activate("basic", modules=0) == {}
    assert _activate("basic", shared=1) == {"contract": "shared-boundary"}
    assert _activate("basic", shared=0) == {}


def test_activation_full_reads_everything_and_conditions_win() -> None:
    assert _activate("full") == {
        "pace_ms": "level",
        "backtrack": "level",
        "loop": "level",
        "modules": "level",
        "contract": "level",
    }
    got = _activate("full", failed=True, jumped=True, modules=3, shared=2, tokens_known=True)
    assert got == {
        "pace_ms": "anomaly",
        "pace_tokens": "anomaly",
        "backtrack": "pace-jump",
        "loop": "anomaly",
        "modules": "cross-module",
        "contract": "shared-boundary",
    }
    assert list(got) == list(sensors.TIER2)  # in TIER2 order


def test_pace_jump_is_more_than_twice() -> None:
    assert sensors.pace_jump(None, 10**9) is False
    assert sensors.pace_jump(100, 200) is False
    assert sensors.pace_jump(100, 201) is True
    assert sensors.pace_jump(0, 1) is True


@pytest.mark.parametrize(
    ("sensor", "value", "expected"),
    [
        ("outcome", 0, F),
        ("outcome", 1, T),
        ("tests", 0, F),
        ("tests", 1, T),
        ("types", 2, T),
        ("build", 1, T),
        ("lint", 1, T),
        ("lint", 0, F),
        ("contract", 1, T),
        ("contract", 0, F),
        ("loop", 2, F),
        ("loop", 3, T),
        ("backtrack", 2, F),
        ("backtrack", 3, T),
        ("modules", 3, F),
        ("modules", 4, T),
        ("pace_ms", 10**9, F),  # pace is judged by its trend (CUSUM), not per reading
        ("pace_tokens", 10**9, F),
        ("restarts", 9, F),
        ("coverage", 0, F),
    ],
)
def test_anomalous_thresholds(sensor: str, value: int, expected: bool) -> None:
    assert sensors.anomalous(sensor, value) is expected


def test_modules_of_counts_top_level_entries() -> None:
    assert sensors.modules_of(["src/a.py", "src/b/c.py", "README.md"]) == 2
    assert sensors.modules_of([]) == 0
    assert sensors.modules_of(("a", "b", "c/d")) == 3


# ---- strategy ---------------------------------------------------------------------------------

ALL = ("template", "toolchain", "scope")


def _choose(cls: str | None, **kw: Any) -> str:
    args: dict[str, Any] = {
        "tried": (),
        "available": ALL,
        "switches_left": 3,
        "topology_left": 1,
        "spaced": True,
    }
    args.update(kw)
    return strategy.choose(cls, **args)


@pytest.mark.parametrize("cls", ["test", "type", "lint", "build"])
def test_gate_classes_order(cls: str) -> None:
    assert strategy.ORDERS[cls] == ("template", "toolchain", "split")
    assert _choose(cls) == "template"
    assert _choose(cls, tried=["template"]) == "toolchain"
    assert _choose(cls, tried=["template", "toolchain"]) == "split"
    assert _choose(cls, tried=["template", "toolchain", "split"]) == "escalate"


@pytest.mark.parametrize("cls", ["hung", "timeout", "lifetime", "crash", "agent", None])
def test_process_classes_order(cls: str | None) -> None:
    assert _choose(cls) == "template"
    assert _choose(cls, tried=["template"]) == "scope"
    assert _choose(cls, tried=["template", "scope"]) == "split"
    assert _choose(cls, tried=["template", "scope", "split"]) == "escalate"


def test_conflict_and_round_orders() -> None:
    assert _choose("conflict") == "scope"
    assert _choose("conflict", tried=["scope"]) == "split"
    for cls in ("incomplete", "blocked"):
        assert _choose(cls) == "template"
        assert _choose(cls, tried=["template"]) == "split"


@pytest.mark.parametrize("cls", ["budget", "stop", "scope", "capsule", "integrity", "other"])
def test_policy_refusals_are_never_strategy_problems(cls: str) -> None:
    assert _choose(cls) == "escalate"


def test_unavailable_and_bounded_strategies_are_skipped() -> None:
    # toolchain not available now: the next in order
    assert _choose("test", tried=["template"], available=["template", "scope"]) == "split"
    assert _choose("crash", available=["toolchain", "scope"]) == "scope"
    # no config switch left: straight to the topology change
    assert _choose("test", switches_left=0) == "split"
    # no topology change left, or too soon after the last: escalate
    assert _choose("test", switches_left=0, topology_left=0) == "escalate"
    assert _choose("test", switches_left=0, spaced=False) == "escalate"
    # a split needs no availability: it is not a config switch
    assert _choose("conflict", tried=["scope"], available=()) == "split"


def test_aggregate_strategy() -> None:
    assert [strategy.aggregate_strategy(c) for c in ("test", "lint", "type", "build")] == [
        "toolchain"
    ] * 4
    assert [strategy.aggregate_strategy(c) for c in ("crash", "conflict", "incomplete")] == [
        "template"
    ] * 3


# ---- configchain ------------------------------------------------------------------------------

FMT = "harness.control-config/1"
RISKY = frozenset({"web", "shell", "secrets"})


def _risky(tool: str) -> bool:
    return tool in RISKY


def _entry(
    template: str = "default",
    add: list[str] | None = None,
    drop: list[str] | None = None,
    gates: bool = False,
) -> dict[str, Any]:
    return {"template": template, "add": add or [], "drop": drop or [], "gates_in_prompt": gates}


def _doc(**agents: dict[str, Any]) -> dict[str, Any]:
    return {"format": FMT, "agents": agents}


def test_initial_document_and_its_hash_is_sha256_of_the_jcs_bytes() -> None:
    assert configchain.initial_document() == _doc()
    jcs = b'{"agents":{},"format":"harness.control-config/1"}'  # keys sorted, no spaces
    assert configchain.document_sha256(_doc()) == hashlib.sha256(jcs).hexdigest()
    doc = _doc(a=_entry("focused"))
    jcs = (
        b'{"agents":{"a":{"add":[],"drop":[],"gates_in_prompt":false,"template":"focused"}},'
        b'"format":"harness.control-config/1"}'
    )
    assert configchain.document_sha256(doc) == hashlib.sha256(jcs).hexdigest()


def test_apply_template_steps_through_the_templates() -> None:
    one = configchain.apply(_doc(), "a", "template", ["edit"], _risky)
    assert one == _doc(a=_entry("focused"))
    assert one is not None
    two = configchain.apply(one, "a", "template", ["edit"], _risky)
    assert two == _doc(a=_entry("stepwise"))
    assert two is not None
    assert configchain.apply(two, "a", "template", ["edit"], _risky) is None  # no fourth


def test_apply_toolchain_adds_the_shell_and_the_gates() -> None:
    one = configchain.apply(_doc(), "a", "toolchain", ["edit"], _risky)
    assert one == _doc(a=_entry(add=["shell"], gates=True))
    assert one is not None
    assert configchain.apply(one, "a", "toolchain", ["edit"], _risky) is None
    # a dropped shell is taken back out of drop
    dropped = _doc(a=_entry(drop=["shell", "web"]))
    assert configchain.apply(dropped, "a", "toolchain", ["shell", "web"], _risky) == _doc(
        a=_entry(add=["shell"], drop=["web"], gates=True)
    )
    # shell added but the gates not yet in the prompt: still a change
    half = _doc(a=_entry(add=["shell"]))
    assert configchain.apply(half, "a", "toolchain", [], _risky) == _doc(
        a=_entry(add=["shell"], gates=True)
    )


def test_apply_scope_drops_every_risky_tool() -> None:
    one = configchain.apply(_doc(), "a", "scope", ["edit", "web", "secrets"], _risky)
    assert one == _doc(a=_entry(drop=["secrets", "web"]))
    assert one is not None
    assert configchain.apply(one, "a", "scope", ["edit", "web", "secrets"], _risky) is None
    assert configchain.apply(_doc(), "a", "scope", ["edit"], _risky) is None  # nothing risky
    # after toolchain: the added shell leaves add, and drop keeps only the task's own tools
    tooled = _doc(a=_entry(add=["shell"], gates=True))
    assert configchain.apply(tooled, "a", "scope", ["edit", "web"], _risky) == _doc(
        a=_entry(drop=["web"], gates=True)
    )


def test_apply_back_to_the_default_entry_leaves_the_agent_out() -> None:
    # add ["web"] on a task without web: scope removes it from add and drop stays empty
    doc = _doc(a=_entry(add=["web"]), b=_entry("focused"))
    assert configchain.apply(doc, "a", "scope", ["edit"], _risky) == _doc(b=_entry("focused"))


def test_apply_keeps_agents_sorted_and_other_agents_untouched() -> None:
    doc = _doc(m=_entry("focused"))
    new = configchain.apply(doc, "b", "template", [], _risky)
    assert new is not None
    assert list(new["agents"]) == ["b", "m"]
    assert new["agents"]["m"] == _entry("focused")
    assert doc == _doc(m=_entry("focused"))  # the input is not changed


@pytest.mark.parametrize("name", ["split", "escalate", "warn", "nonsense"])
def test_apply_non_switches_change_nothing(name: str) -> None:
    assert configchain.apply(_doc(), "a", name, ["web"], _risky) is None


def test_entry_is_a_copy() -> None:
    doc = _doc(a=_entry(add=["shell"], gates=True))
    got = configchain.entry(doc, "a")
    got["add"].append("x")
    assert doc["agents"]["a"]["add"] == ["shell"]
    assert configchain.entry(doc, "zz") == _entry()


def test_effective_tools() -> None:
    agent = _entry(add=["shell"], drop=["web"])
    assert configchain.effective_tools(["web", "edit"], agent) == ["edit", "shell"]
    assert configchain.effective_tools([], _entry()) == []


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (_doc(), _doc(a=_entry("focused")), "neutral"),  # a template change
        (_doc(), _doc(a=_entry(add=["shell"], gates=True)), "expand"),
        (_doc(), _doc(a=_entry(gates=True)), "expand"),  # gates in the prompt alone
        (_doc(), _doc(a=_entry(drop=["web"])), "contract"),
        (_doc(a=_entry(add=["shell"])), _doc(), "contract"),  # less add
        (_doc(a=_entry(drop=["web"])), _doc(), "expand"),  # less drop
        # mixed: something granted and something taken: the slow channel's expand wins
        (_doc(a=_entry(add=["shell"])), _doc(a=_entry(add=["web"])), "expand"),
        (_doc(a=_entry(add=["shell"])), _doc(a=_entry(drop=["web"])), "contract"),  # both taken
        (_doc(a=_entry(drop=["web"])), _doc(b=_entry(drop=["web"])), "expand"),
        (_doc(a=_entry(gates=True)), _doc(), "neutral"),  # gates out of the prompt
        (_doc(a=_entry("focused")), _doc(a=_entry("focused")), "neutral"),
    ],
)
def test_classify(old: dict[str, Any], new: dict[str, Any], expected: str) -> None:
    assert configchain.classify(old, new) == expected


def test_channel() -> None:
    assert configchain.channel("contract") == "fast"
    assert [configchain.channel(c) for c in ("expand", "neutral", "initial")] == ["slow"] * 3


def test_impact_lists_changed_agents_sorted() -> None:
    old = _doc(a=_entry("focused"), c=_entry(drop=["web"]))
    new = _doc(b=_entry("focused"), c=_entry(drop=["web"]), a=_entry("stepwise"))
    assert configchain.impact(old, new) == ["a", "b"]
    assert configchain.impact(old, old) == []


def test_consistent_with_a_trifecta_stub() -> None:
    # stub: denied when the tools hold all three of web, secrets and shell
    def denied(adapter: str, tools: Any) -> bool:
        return adapter != "safe" and set(tools) >= RISKY

    tasks = {"a": [("claude", ["edit", "web", "secrets"])], "b": [("claude", ["edit"])]}
    tooled = _doc(a=_entry(add=["shell"], gates=True), b=_entry(add=["shell"], gates=True))
    assert configchain.consistent(tooled, ["a"], tasks, denied) is False
    assert configchain.consistent(tooled, ["b"], tasks, denied) is True
    assert configchain.consistent(tooled, ["a", "b"], tasks, denied) is False
    assert configchain.consistent(tooled, [], tasks, denied) is True
    # the adapter is passed through: the stub never denies "safe"
    safe = {"a": [("safe", ["edit", "web", "secrets"])]}
    assert configchain.consistent(tooled, ["a"], safe, denied) is True
    # the effective tools are judged: a drop of web makes it consistent again
    narrowed = _doc(a=_entry(add=["shell"], drop=["web"], gates=True))
    assert configchain.consistent(narrowed, ["a"], tasks, denied) is True
    # an agent without tasks is trivially consistent
    assert configchain.consistent(tooled, ["nobody"], tasks, denied) is True


SHAPE = "an object with exactly format and agents"
EXACT = "exactly ['add', 'drop', 'gates_in_prompt', 'template']"
KNOWN = "a known template and a boolean gates_in_prompt"
ADD_LIST = "agent 'a': add a sorted list of distinct tool names"
DROP_LIST = "agent 'a': drop a sorted list of distinct tool names"


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (_doc(), None),
        (_doc(a=_entry("stepwise", ["shell"], ["web"], True)), None),
        ([], SHAPE),
        ("doc", SHAPE),
        ({"format": FMT}, SHAPE),
        ({"format": FMT, "agents": {}, "x": 1}, SHAPE),
        ({"format": "harness.control-config/2", "agents": {}}, f"format {FMT!r}"),
        ({"format": FMT, "agents": []}, "agents: an object"),
        (_doc(a=[]), f"agent 'a': {EXACT}"),  # type: ignore[arg-type]
        (_doc(a={"template": "focused"}), f"agent 'a': {EXACT}"),
        (_doc(a={**_entry("focused"), "x": 1}), f"agent 'a': {EXACT}"),
        (_doc(a=_entry("clever")), f"agent 'a': {KNOWN}"),
        (_doc(a={**_entry("focused"), "gates_in_prompt": 1}), f"agent 'a': {KNOWN}"),
        (
            _doc(a={**_entry("focused"), "add": "shell"}),
            ADD_LIST,
        ),
        (_doc(a=_entry("focused", add=[1])), ADD_LIST),  # type: ignore[list-item]
        (
            _doc(a=_entry("focused", add=[""])),
            ADD_LIST,
        ),
        (
            _doc(a=_entry("focused", drop=["web", "edit"])),
            DROP_LIST,
        ),
        (
            _doc(a=_entry("focused", drop=["web", "web"])),
            DROP_LIST,
        ),
        (_doc(a=_entry()), "agent 'a': a default entry is left out"),
        (_doc(a=_entry("focused"), b=_entry()), "agent 'b': a default entry is left out"),
    ],
)
def test_document_error(document: Any, expected: str | None) -> None:
    assert configchain.document_error(document) == expected


# ---- boundaries found by mutation testing (tests/mutation.py) ---------------------------------


def test_cusum_threshold_is_an_integer_floor() -> None:
    # ref = 10, h = max(1, 10 * 1234 // 1000) = 12 (not 12.34); k = 0.
    # x = 22: S = 22 - 10 - 0 = 12 >= 12: alarm (a fractional h would not alarm).
    step = _feed(CusumParams(warmup=1, k_pm=0, h_pm=1234), [10, 22])[-1]
    assert (step.statistic, step.threshold, step.alarm) == (12, 12, T)
    assert type(step.threshold) is int


def test_progress_of_a_one_task_plan() -> None:
    # 0 * 1000 // 1 = 0 and 1 * 1000 // 1 = 1000: only an empty plan is done by definition.
    assert (phases.progress_pm(0, 1), phases.progress_pm(1, 1)) == (0, 1000)


def test_topology_spacing_is_exactly_ten_percent() -> None:
    # (1001 - 901) * 1000 = 100000 < 1001 * 100 = 100100: not spaced; one step later it is.
    assert phases.topology_spaced(901, 1001) is False
    assert phases.topology_spaced(900, 1000) is True
