"""The meta layer's rules (verify/rules/meta.py, issue 13 §4), by hand-computed cases.

Self-test schedule, probes and containment; the false-alarm rate over the last N alerts; the
review points and both reviews (constraint-task fit, controllability) with their thresholds
and the heightened hours; the aggregator's watchdog; the parameters' ranges.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.verify.rules import meta, sensors
from harness.verify.rules.meta import MetaParams, Review

# ---- self-test -------------------------------------------------------------------------------


def test_selftest_schedule() -> None:
    # every 5: steps 5, 10, 15 of 1..15; every 0 is off; step 0 (before any step) never.
    assert [n for n in range(16) if meta.selftest_due(n, 5)] == [5, 10, 15]
    assert [n for n in range(1, 50) if meta.selftest_due(n, 0)] == []
    assert [n for n in range(4) if meta.selftest_due(n, 1)] == [1, 2, 3]


def test_selftest_probes_in_turn() -> None:
    # every 4: the injections at 4, 8, ..., 28 are the 1st..7th; the 7th wraps to PROBES[0].
    got = [meta.selftest_probe(n, 4) for n in range(4, 29, 4)]
    assert got == [
        ("outcome", 1),
        ("tests", 1),
        ("loop", 3),
        ("backtrack", 3),
        ("modules", 4),
        ("contract", 1),
        ("outcome", 1),
    ]


def test_every_probe_is_the_smallest_flagged_value() -> None:
    for sensor, value in meta.PROBES:
        assert sensors.anomalous(sensor, value)
        assert not sensors.anomalous(sensor, value - 1)


def test_selftest_detected_only_when_flagged_and_in_its_shadow_key() -> None:
    ok: dict[str, Any] = {"flagged": True, "keys": ["selftest:a"], "agent": "a"}
    assert meta.selftest_problem("loop", 3, **ok) is None
    assert meta.selftest_detected("loop", 3, **ok)
    assert meta.selftest_problem("loop", 3, **{**ok, "flagged": False}) == (
        "probe loop=3 was not flagged anomalous"
    )
    assert meta.selftest_problem("loop", 2, **ok) == (
        "probe loop=2 is not an anomaly under the sensor rule"
    )
    both = {**ok, "keys": ["selftest:a", "agent:a", "subtree:src"]}
    assert meta.selftest_problem("loop", 3, **both) == (
        "synthetic step joined real keys ['agent:a', 'subtree:src']"
    )
    assert meta.selftest_problem("loop", 3, **{**ok, "keys": ["run"]}) == (
        "synthetic step joined real keys ['run']"
    )
    assert meta.selftest_problem("loop", 3, **{**ok, "keys": ["selftest:b"]}) == (
        "synthetic step must join exactly 'selftest:a', joined ['selftest:b']"
    )
    assert meta.selftest_problem("loop", 3, **{**ok, "keys": []}) == (
        "synthetic step must join exactly 'selftest:a', joined []"
    )
    assert not meta.selftest_detected("loop", 3, **both)


def test_keys() -> None:
    assert meta.shadow_key("coder") == "selftest:coder"
    assert [meta.is_real_key(k) for k in ("agent:a", "subtree:.", "run", "selftest:a")] == [
        True,
        True,
        True,
        False,
    ]
    assert meta.is_real_key("agent:a:pace_ms")  # a trend key is an agent's


# ---- false alarms ----------------------------------------------------------------------------

C, IG, OV = "confirmed", "ignored", "overridden"


@pytest.mark.parametrize(
    ("outcomes", "last", "expected"),
    [
        ([], 20, 0),
        ([C], 20, 0),
        ([IG], 20, 1000),
        ([C, IG, OV], 20, 666),  # 2 * 1000 // 3
        ([C, C, IG], 20, 333),
        ([IG] * 10 + [C] * 20, 20, 0),  # the ten ignored ones are older than the last 20
        ([IG] * 10 + [C] * 15, 20, 250),  # last 20: 5 ignored, 15 confirmed: 5000 // 20
        ([C, OV, C, OV], 2, 500),  # last 2: C, OV
        ([IG], 0, 0),  # an empty window
    ],
)
def test_false_alarm_rate(outcomes: list[str], last: int, expected: int) -> None:
    assert meta.false_alarm_pm(outcomes, last) == expected


def test_false_alarm_rate_refuses_an_unknown_outcome() -> None:
    with pytest.raises(ValueError, match="alert outcome 'maybe' is not one of"):
        meta.false_alarm_pm([C, "maybe"])
    # only the window is read: an old unknown outcome outside it is not judged
    assert meta.false_alarm_pm(["maybe", C], last=1) == 0


def test_crying_wolf() -> None:
    # 2 of 3 false: 666 > 500 with 3 alerts: the meta alert.
    assert meta.cries_wolf([C, IG, OV])
    # 2 of 4: 500 is not above 500.
    assert not meta.cries_wolf([C, IG, OV, C])
    # 2 of 2 false, but fewer than MIN_SAMPLE = 3 alerts: no judgement.
    assert not meta.cries_wolf([IG, OV])
    # a custom threshold and window: last 3 of C C IG IG IG are all false
    assert meta.cries_wolf([C, C, IG, IG, IG], last=3, threshold_pm=999)
    assert not meta.cries_wolf([C, C, IG, IG, IG], last=3, threshold_pm=1000)


def test_alerts_are_warn_and_escalate() -> None:
    assert [meta.is_alert(a) for a in ("warn", "escalate", "template", "split")] == [
        True,
        True,
        False,
        False,
    ]


# ---- reviews ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("previous", "progress", "expected"),
    [
        (0, 0, ()),
        (0, 249, ()),
        (0, 250, (250,)),  # at the point counts
        (250, 250, ()),  # already passed
        (250, 499, ()),
        (249, 500, (250, 500)),
        (0, 1000, (250, 500, 750)),
        (750, 1000, ()),
        (600, 400, ()),  # progress does not go back
    ],
)
def test_progress_reviews(previous: int, progress: int, expected: tuple[int, ...]) -> None:
    assert meta.progress_reviews(previous, progress) == expected


def test_thresholds_tighten_in_the_heightened_hours() -> None:
    assert meta.thresholds(300, 500, False) == (300, 500)
    # 300 // 2 = 150; 500 + (1000 - 500) // 2 = 750
    assert meta.thresholds(300, 500, True) == (150, 750)
    # 301 // 2 = 150; 501 + 499 // 2 = 501 + 249 = 750
    assert meta.thresholds(301, 501, True) == (150, 750)
    assert meta.thresholds(0, 1000, True) == (0, 1000)


def test_fit_counts_policy_refusals_among_failures() -> None:
    # 4 failed (test, scope, budget, crash), 2 refusals: 500; landed steps do not count.
    assert meta.fit([None, "test", "scope", None, "budget", "crash"]) == (4, 2, 500)
    assert meta.fit([None, None]) == (0, 0, 0)
    assert meta.fit(["capsule", "integrity", "stop"]) == (3, 2, 666)  # stop is the operator's


def test_controllability_follows_each_change_within_k() -> None:
    changes = [(3, "a"), (5, "b"), (10, "a"), (18, "c")]
    landed = [(4, "b"), (9, "b"), (13, "a"), (19, "a")]
    # K = 4, now = 20:
    #   (3, a): a lands at 13 and 19, neither in 4..7; window over (20 >= 7): judged, not followed
    #   (5, b): b lands at 9, in 6..9: followed (4 is before the change)
    #   (10, a): a lands at 13, in 11..14: followed
    #   (18, c): still inside its window (20 < 22) and no landing: not judged yet
    assert meta.controllability(changes, landed, 4, 20) == (3, 2, 666)
    # now = 22: the last one is judged too: 2 of 4
    assert meta.controllability(changes, landed, 4, 22) == (4, 2, 500)
    assert meta.controllability([], landed, 4, 20) == (0, 0, 1000)
    # a landing at the change's own step does not follow it; at n + K it does
    assert meta.controllability([(5, "a")], [(5, "a")], 3, 100) == (1, 0, 0)
    assert meta.controllability([(5, "a")], [(8, "a")], 3, 8) == (1, 1, 1000)


def test_strategy_changes() -> None:
    assert meta.is_strategy_change("I", "template")
    assert meta.is_strategy_change("D", "split")
    assert not meta.is_strategy_change("I", "escalate")
    assert not meta.is_strategy_change("D", "warn")
    assert not meta.is_strategy_change("meta", "template")


def test_review_raises_both_alerts() -> None:
    classes = ["scope", "scope", "test", None]  # 3 failed, 2 refused: 666 > 300
    changes = [(1, "a"), (2, "a"), (3, "b")]  # none followed, all judged at now = 20
    got = meta.review(250, classes=classes, changes=changes, landed=[], window=4, now=20)
    assert got == Review(250, 3, 2, 666, True, 3, 0, 0, True)
    assert got.record() == {
        "point": 250,
        "failed": 3,
        "refused": 2,
        "fit_pm": 666,
        "fit_alert": True,
        "judged": 3,
        "followed": 0,
        "controllability_pm": 0,
        "controllability_alert": True,
    }


def test_review_thresholds_and_minimum_sample() -> None:
    # fit: 1 refusal of 5 failures = 200: under 300, over the heightened 150
    classes = ["scope", "test", "test", "lint", "crash"]
    # controllability: 2 of 3 followed = 666: over 500, under the heightened 750
    changes = [(1, "a"), (2, "b"), (3, "c")]
    landed = [(2, "a"), (3, "b")]
    args: dict[str, Any] = {"classes": classes, "changes": changes, "landed": landed}
    calm = meta.review(500, **args, window=4, now=10)
    assert (calm.fit_pm, calm.fit_alert, calm.controllability_pm) == (200, False, 666)
    assert calm.controllability_alert is False
    tense = meta.review(500, **args, window=4, now=10, heightened=True)
    assert (tense.fit_alert, tense.controllability_alert) == (True, True)
    # custom thresholds
    strict = meta.review(500, **args, window=4, now=10, params=MetaParams(fit_pm=199))
    assert strict.fit_alert is True
    # fewer than 3 failures or 3 judged changes: no alert whatever the rate
    few = meta.review(
        750, classes=["scope", "scope"], changes=[(1, "a")], landed=[], window=1, now=5
    )
    assert (few.fit_pm, few.fit_alert, few.controllability_pm, few.controllability_alert) == (
        1000,
        False,
        0,
        False,
    )


# ---- watchdog --------------------------------------------------------------------------------


def test_watchdog() -> None:
    limit = 60_000_000
    t = 1_700_000_000_000_000
    assert not meta.watchdog_late(t, t, limit)
    assert not meta.watchdog_late(t, t + limit, limit)  # exactly the limit is in time
    assert meta.watchdog_late(t, t + limit + 1, limit)
    assert not meta.watchdog_late(t, t - 5, limit)  # a step recorded before: never late


# ---- parameters ------------------------------------------------------------------------------


def test_parse_meta_defaults() -> None:
    assert meta.parse_meta(None) == MetaParams() == meta.parse_meta({})
    assert MetaParams().record() == {
        "selftest_every": 0,
        "alert_window": 20,
        "false_alarm_pm": 500,
        "fit_pm": 300,
        "controllability_pm": 500,
        "watchdog_s": 60,
    }


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ({"selftest_every": -1}, "selftest_every: an integer between 0 and 1000"),
        ({"selftest_every": 1001}, "selftest_every: an integer between 0 and 1000"),
        ({"alert_window": 0}, "alert_window: an integer between 1 and 1000"),
        ({"false_alarm_pm": 1001}, "false_alarm_pm: an integer between 0 and 1000"),
        ({"fit_pm": True}, "fit_pm: an integer between 0 and 1000"),
        ({"controllability_pm": 5.0}, "controllability_pm: an integer between 0 and 1000"),
        ({"watchdog_s": 0}, "watchdog_s: an integer between 1 and 86400"),
        ({"watchdog_s": 86_401}, "watchdog_s: an integer between 1 and 86400"),
        (
            {"selftest": 1},
            "unknown member 'selftest' (known: alert_window, controllability_pm, "
            "false_alarm_pm, fit_pm, selftest_every, watchdog_s)",
        ),
    ],
)
def test_parse_meta_refusals(table: dict[str, Any], expected: str) -> None:
    assert meta.parse_meta(table) == expected


@settings(max_examples=150, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            name: st.one_of(st.integers(low - 2, high + 2), st.sampled_from([True, "1", 1.0]))
            for name, (low, high) in meta.META_RANGES.items()
        },
    )
)
def test_parse_meta_accepts_exactly_its_ranges(table: dict[str, Any]) -> None:
    valid = all(
        type(v) is int and meta.META_RANGES[k][0] <= v <= meta.META_RANGES[k][1]
        for k, v in table.items()
    )
    got = meta.parse_meta(table)
    assert isinstance(got, MetaParams) is valid
    if isinstance(got, MetaParams):
        assert meta.parse_meta(got.record()) == got
        assert all(got.record()[k] == v for k, v in table.items())


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(meta.OUTCOMES), max_size=60), st.integers(1, 30))
def test_false_alarm_rate_is_a_per_mille(outcomes: list[str], last: int) -> None:
    rate = meta.false_alarm_pm(outcomes, last)
    window = outcomes[-last:]
    assert 0 <= rate <= 1000
    false = sum(1 for o in window if o != "confirmed")
    # floor division: rate / 1000 <= false / len < (rate + 1) / 1000
    if window:
        assert rate * len(window) <= false * 1000 < (rate + 1) * len(window)


# ---- boundaries found by mutation testing (tests/mutation.py) ---------------------------------


def test_default_alert_window_is_twenty() -> None:
    # one ignored alert 21 alerts ago is outside the default window of 20
    assert meta.false_alarm_pm([IG] + [C] * 20) == 0
    # last 20 of IG*11 + C*10: 10 false = 500, not above 500 (the last 21 would give 523)
    assert not meta.cries_wolf([IG] * 11 + [C] * 10)


def test_default_false_alarm_threshold_is_500() -> None:
    # 501 false of the last 1000: 501 > 500
    assert meta.cries_wolf([IG] * 501 + [C] * 499, last=1000)
    assert not meta.cries_wolf([IG] * 500 + [C] * 500, last=1000)


def test_review_thresholds_are_strict_comparisons() -> None:
    # fit: 1 refusal of 3 failures = 333; a threshold of 333 is not exceeded
    at = meta.review(
        250,
        classes=["scope", "test", "test"],
        changes=[(1, "a"), (2, "b"), (3, "c"), (4, "d")],
        landed=[(2, "a"), (3, "b")],
        window=2,
        now=10,
        params=MetaParams(fit_pm=333, controllability_pm=500),
    )
    # controllability: 2 of 4 followed = 500, not below 500
    assert (at.fit_pm, at.fit_alert, at.controllability_pm, at.controllability_alert) == (
        333,
        False,
        500,
        False,
    )


def test_parse_meta_accepts_every_bound() -> None:
    for name, (low, high) in meta.META_RANGES.items():
        for value in (low, high):
            got = meta.parse_meta({name: value})
            assert isinstance(got, MetaParams) and getattr(got, name) == value
