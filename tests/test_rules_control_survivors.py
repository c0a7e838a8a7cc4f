"""Controller behaviours that mutation testing found unpinned (tests/mutation.py on
verify/rules/controller.py): bounds inside aggregation and switches, topology spacing on both
split paths, the fast channel skipping the consistency check, the D layer's early switch,
recorded readings taken as given, defaults of missing measures, reviews' parameters, custom
phase bounds and the parameters table. Hand-computed like tests/test_rules_control_machine.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from harness.verify.rules import configchain, meta, sensors
from harness.verify.rules.controller import (
    PARAM_RANGES,
    Controller,
    Decision,
    Params,
    Reading,
    Step,
    parse_params,
    subtree_of,
)

from .test_rules_control_machine import (
    IMPLEMENT,
    INTEGRATE,
    RISKY,
    _denied,
    decisions,
    machine,
    run,
    step,
)

CONVERGE = 950
WEB = {x: [("claude", ["edit", "web"])] for x in "abc"}


def _actions(c: Controller, steps: Sequence[Step]) -> list[tuple[int, str, str]]:
    return [(d.step, d.key, d.action) for d in decisions(run(c, steps))]


# ---- switch bounds, inside aggregation and out -----------------------------------------------


def test_switch_counts_from_aggregation_bound_later_switches() -> None:
    # integrate: 2 switches, 1 topology change; M = 20; aggregation over 2 agents.
    # 1-2: a crash, crash: a's crossing: template (a switches 1, v2).
    # 3: a lint; 4: b lint: "lint" in 2 agents: toolchain for a and b (a 2, b 1; v3).
    # 5: a crash: a's window [lint, crash] = 20: crossing; template tried, scope needs a
    #    switch but a has none left: split.
    # 6: b crash: b's window [lint, crash] = 20: b has 1 switch left: template (v4).
    c = machine(WEB, threshold=20, aggregate_agents=2)
    c.settle(INTEGRATE)
    steps = [step("a", "crash")] * 2 + [step("a", "lint"), step("b", "lint")]
    steps += [step("a", "crash"), step("b", "crash")]
    observed = run(c, steps)
    assert [(d.step, d.rule, d.key, d.action, d.config) for d in decisions(observed)] == [
        (2, "bucket", "agent:a", "template", 2),
        (4, "aggregate", "run", "toolchain", 3),
        (5, "bucket", "agent:a", "split", None),
        (6, "bucket", "agent:b", "template", 4),
    ]
    assert observed[3].versions == (c.made[1],) and c.made[1].step == 4
    assert (c.agents["a"].switches, c.agents["b"].switches) == (2, 2)


def test_aggregation_skips_an_agent_without_switches_left() -> None:
    # integrate (2 switches), M = 20, aggregation over 2 agents. a spends both of its switches
    # (crash: template at 2, scope at 4); then a lint, b lint: toolchain for b only (a has
    # none left, b still gets it: the loop goes on past a).
    c = machine(WEB, threshold=20, aggregate_agents=2)
    c.settle(INTEGRATE)
    steps = [step("a", "crash")] * 4 + [step("a", "lint"), step("b", "lint")]
    got = decisions(run(c, steps))
    assert [(d.step, d.action, d.config) for d in got] == [
        (2, "template", 2),
        (4, "scope", 3),
        (6, "toolchain", 4),
    ]
    assert configchain.impact(c.made[1].document, c.made[2].document) == ["b"]
    assert got[-1] == Decision(6, "I", "aggregate", "run", 2, 2, "lint", "toolchain", 4)


def test_aggregate_decisions_count_as_firings() -> None:
    # rate window 10: a, b, c fail once (3 P firings) and the aggregate decision (1 I firing):
    # 4 at step 10 >= 3.
    c = machine(rate_window=10)
    steps = [step("a", "test"), step("b", "test"), step("c", "test")] + [step("d")] * 7
    rate = [d for d in decisions(run(c, steps)) if d.rule == "rate"]
    assert rate == [Decision(10, "D", "rate", "run", 4, 3, None, "escalate", None)]


def test_firing_rate_needs_more_than_twice_the_previous_window() -> None:
    # window 1: 2 failures (no decision: 2 < 3); window 2: needs max(3, 2 * 2 + 1) = 5: five
    # failures escalate at step 20.
    c = machine(threshold=1000, rate_window=10)
    fail, ok = step("a", "test"), step("a")
    got = decisions(run(c, [fail] * 2 + [ok] * 8 + [fail] * 5 + [ok] * 5))
    assert got == [Decision(20, "D", "rate", "run", 5, 5, None, "escalate", None)]


# ---- topology spacing on both paths -----------------------------------------------------------


def _padding(n: int) -> list[Step]:
    return [step("p")] * n


def test_an_agent_split_too_soon_after_the_last_escalates() -> None:
    # conflict: scope (no risky tool: unavailable), then split. M = 20. Steps 1-18 pad.
    # 19-20: x conflicts: split at 20 (the run's first). 21-22: y conflicts: split again?
    # (22 - 20) * 1000 = 2000 < 22 * 100 = 2200: too soon: escalate.
    c = machine({x: [("claude", ["edit"])] for x in "pxy"}, threshold=20)
    steps = _padding(18) + [step("x", "conflict")] * 2 + [step("y", "conflict")] * 2
    assert _actions(c, steps) == [(20, "agent:x", "split"), (22, "agent:y", "escalate")]
    assert c.last_topology == 20


def test_a_subtree_split_too_soon_after_the_last_escalates() -> None:
    # As above, x splits at 20 (its own bucket). 21: y, 22: z conflict in subtree s (y 10,
    # z 10, s 20 with two agents): a split for z is 2 steps after 20 < 2.2: escalate.
    c = machine({x: [("claude", ["edit"])] for x in "pxyz"}, threshold=20)
    steps = _padding(18) + [step("x", "conflict")] * 2
    steps += [step("y", "conflict", subtree="s"), step("z", "conflict", subtree="s")]
    assert _actions(c, steps) == [(20, "agent:x", "split"), (22, "subtree:s", "escalate")]


def test_no_subtree_split_in_converge() -> None:
    # converge allows no topology change: two agents crossing src: escalate.
    c = machine()
    c.settle(CONVERGE)
    steps = [step(x, "test", subtree="src") for x in "aba"]
    assert _actions(c, steps) == [(3, "subtree:src", "escalate")]


# ---- the fast channel -------------------------------------------------------------------------


def test_a_contraction_is_applied_without_the_consistency_check() -> None:
    # A stub that denies any tool set without web: the template keeps web (consistent), the
    # scope change drops it, yet takes the fast channel: applied, not checked.
    def denied(adapter: str, tools: Sequence[str]) -> bool:
        return "web" not in tools

    c = Controller(Params(), WEB, risky=RISKY.__contains__, denied=denied)
    got = decisions(run(c, [step("a", "crash")] * 6))
    assert [(d.action, d.config) for d in got] == [("template", 2), ("scope", 3)]
    assert c.made[-1].channel == "fast"


def test_an_agent_without_tasks_still_gets_a_template() -> None:
    c = machine({}, threshold=10)
    assert [(d.action, d.config) for d in decisions(run(c, [step("ghost", "test")]))] == [
        ("template", 2)
    ]


# ---- the D layer's early switch ---------------------------------------------------------------


def test_an_early_switch_uses_the_agents_latest_class() -> None:
    # implement, M = 18. 1-2: a fails test (10, 20): template (v2), window empty. 3-5: normal
    # at 100 ms (the CUSUM warm-up is steps 1-3: reference 100). 6: a fails test (10). 7:
    # normal at 400 ms (9: 2 * 9 >= 18, half full): S = 250 >= 200: the early switch for the
    # latest class, test: template tried, toolchain (v3), whose version names step 7.
    c = machine(threshold=18)
    c.settle(IMPLEMENT)
    steps = [step("a", "test", pace=100)] * 2 + [step("a", pace=100)] * 3
    steps += [step("a", "test", pace=100), step("a", pace=400)]
    observed = run(c, steps)
    assert [(d.step, d.rule, d.action, d.config) for d in decisions(observed)] == [
        (2, "bucket", "template", 2),
        (7, "cusum", "toolchain", 3),
    ]
    assert observed[-1].versions == (c.made[-1],) and c.made[-1].step == 7


def test_an_early_switch_without_any_class_in_the_window() -> None:
    # integrate reads everything; a's steps are anomalous by contract only (class null):
    # 2 of them: 20, 2 * 20 >= 30 half full. Steps 1-3 set the pace reference (100); step 3
    # is normal (19), step 4 at 400 ms: alarm; no class: the process order, template.
    c = machine()
    c.settle(INTEGRATE)
    steps = [step("a", pace=100, contract=1)] * 2 + [step("a", pace=100), step("a", pace=400)]
    got = decisions(run(c, steps))
    assert [(d.step, d.rule, d.cls, d.action) for d in got] == [(4, "cusum", None, "template")]


def test_a_cusum_alarm_on_a_failed_step_names_its_class() -> None:
    # explore reads pace on failures only; M out of reach: warn, with the step's class.
    c = machine(threshold=1000)
    steps = [step("a", "test", pace=100)] * 3 + [step("a", "test", pace=400)]
    assert decisions(run(c, steps)) == [
        Decision(4, "D", "cusum", "agent:a:pace_ms", 250, 200, "test", "warn", None)
    ]


# ---- readings ---------------------------------------------------------------------------------


def test_recorded_readings_are_taken_as_given() -> None:
    # The verifier passes the recorded readings: a flagged tier-2 reading makes the step
    # anomalous even where the step's own candidates would not.
    c = machine()
    s = step("a")
    o = c.observe(s, [Reading("loop", 2, 9, True, "anomaly")])
    assert o.step == 1 and o.readings == (Reading("loop", 2, 9, True, "anomaly"),)
    assert c.level("agent:a") == 10


def test_a_missing_pace_reads_as_zero() -> None:
    # implement reads pace at every step; a step without a pace measure (a crashed attempt
    # has no facts) reads 0, and 0 after 0 is no jump (no backtrack reading).
    c = machine()
    c.settle(IMPLEMENT)
    c.observe(step("a", pace=0))
    bare = Step("t", "a", "a", 1, None, {"outcome": 0}, {})
    assert c.readings(bare) == (
        Reading("outcome", 1, 0, False, None),
        Reading("pace_ms", 2, 0, False, "level"),
    )
    c.observe(step("a", pace=100))
    assert [r for r in c.readings(bare) if r.sensor == "pace_ms"] == [
        Reading("pace_ms", 2, 0, False, "level")
    ]


# ---- meta reviews in the controller -----------------------------------------------------------


def test_reviews_use_the_plans_meta_parameters_and_the_heightened_hours() -> None:
    # 3 failures, 1 refusal: fit 333: alert over 300 (default), not over 400; heightened
    # halves 400 to 200: alert. The change at 2 (M = 20) is never followed by a landing of a:
    # judged once now >= 2 + 12 (steps 3..14 pad with b).
    steps = [step("a", "test")] * 2 + [step("a", "scope")] + [step("b")] * 11
    for fit, heightened, alert in ((300, False, True), (400, False, False), (400, True, True)):
        c = machine(threshold=20, meta=meta.MetaParams(fit_pm=fit))
        run(c, steps)
        c.settle(IMPLEMENT)
        (review,) = c.reviews(0, heightened=heightened)
        assert (review.fit_pm, review.fit_alert) == (333, alert)
        assert (review.judged, review.followed, review.controllability_pm) == (1, 0, 0)


# ---- phases and parameters --------------------------------------------------------------------


def test_the_plans_bounds_decide_the_phases() -> None:
    c = machine(bounds=(1, 1001, 1001))
    assert (c.phase, c.progress) == ("explore", 0)  # progress 0 is below the bound 1
    assert c.settle(1) == "implement"
    assert c.settle(900) is None  # 1001 is never reached


def test_initial_document() -> None:
    assert machine().initial().document == configchain.initial_document()


@pytest.mark.parametrize("name", sorted(PARAM_RANGES))
def test_parse_params_accepts_both_bounds(name: str) -> None:
    low, high = PARAM_RANGES[name]
    for value in (low, high):
        got = parse_params({name: value})
        assert isinstance(got, Params)
        assert got.record()[name] == value


def test_parse_params_reads_every_member() -> None:
    table = {
        "threshold": 11,
        "cusum_warmup": 4,
        "cusum_k_pm": 300,
        "cusum_h_pm": 1500,
        "aggregate_agents": 5,
        "rate_window": 7,
        "phase_bounds": [100, 200, 300],
        "selftest_every": 3,
        "fit_pm": 250,
    }
    got = parse_params(table)
    assert isinstance(got, Params)
    assert (got.threshold, got.aggregate_agents, got.rate_window) == (11, 5, 7)
    assert (got.cusum.warmup, got.cusum.k_pm, got.cusum.h_pm) == (4, 300, 1500)
    assert (got.meta.selftest_every, got.meta.fit_pm) == (3, 250)
    assert parse_params({"selftest_every": 1001}) == (
        "selftest_every: an integer between 0 and 1000"
    )


def test_subtree_of_only_wildcards_count() -> None:
    assert subtree_of(["X/a"]) == "X"
    assert subtree_of(["a/b/c"]) == "a"


def test_a_drifted_sensor_threshold_fails_the_selftest(monkeypatch: pytest.MonkeyPatch) -> None:
    # The probe loop=3 is injected at step 3 (every 1: outcome, tests, loop). With the loop
    # threshold drifted to 4 the real rule no longer flags it: the self-test escalates.
    monkeypatch.setattr(sensors, "LOOP_ANOMALY", 4)
    c = machine(meta=meta.MetaParams(selftest_every=1))
    got = [d for d in decisions(run(c, [step("a")] * 3)) if d.rule == "selftest"]
    assert [(d.step, d.cls, d.action) for d in got] == [
        (1, "outcome", "detected"),
        (2, "tests", "detected"),
        (3, "loop", "escalate"),
    ]
    assert c.level("agent:a") == 0  # still no real anomaly


def test_denied_stub_is_the_trifecta() -> None:
    assert _denied("x", ["web", "secrets", "shell"]) and not _denied("x", ["web", "shell"])


# ---- false alarms inside the controller (the meta layer's crying wolf) -------------------------


def _warns(c: Controller) -> list[Decision]:
    # implement: steps 1-3 at 100 ms set the reference; 4, 5, 6 at 400 ms each alarm
    # (S = 250 >= 200, reset each time) with an empty bucket: three warnings.
    c.settle(IMPLEMENT)
    return decisions(run(c, [step("a", pace=100)] * 3 + [step("a", pace=400)] * 3))


def test_overridden_alerts_make_the_sensors_cry_wolf() -> None:
    c = machine()
    warns = _warns(c)
    assert [(d.step, d.action) for d in warns] == [(4, "warn"), (5, "warn"), (6, "warn")]
    for d in warns:
        assert c.judge(f"{d.step}:{d.key}", "overridden") is None
    # step 7 weighs the three verdicts: 3 of 3 false = 1000 > 500: one meta escalation
    assert decisions(run(c, [step("a", pace=100)])) == [
        Decision(7, "meta", "falsealarm", "run", 1000, 500, None, "escalate", None)
    ]
    assert c.judge("4:agent:a:pace_ms", "confirmed") == (
        "alert '4:agent:a:pace_ms' is not waiting for a verdict"
    )
    # still crying: no second escalation
    assert decisions(run(c, [step("a", pace=100)])) == []


def test_unjudged_alerts_count_as_ignored_after_the_window() -> None:
    # K = 12: the warnings of 4, 5 and 6 are ignored at 16, 17 and 18; the third makes 3 of 3.
    c = machine()
    _warns(c)
    got = decisions(run(c, [step("a", pace=100)] * 12))
    assert got == [Decision(18, "meta", "falsealarm", "run", 1000, 500, None, "escalate", None)]


def test_confirmed_alerts_do_not_cry_wolf() -> None:
    c = machine()
    for d in _warns(c):
        assert c.judge(f"{d.step}:{d.key}", "confirmed") is None
    assert c.judge("6:agent:a:pace_ms", "maybe") is not None
    assert decisions(run(c, [step("a", pace=100)] * 13)) == []


# ---- the kept window state: sums, class counts, shared readings ------------------------------


def test_class_counts_follow_the_last_k_steps() -> None:
    # implement (K = 12), M high (no decision resets a window). a: test, test, then normal
    # steps: the class stays while one of its steps is among the last 12, counted per step.
    c = machine(threshold=1000, aggregate_agents=2)
    c.settle(IMPLEMENT)
    run(c, [step("a", "test"), step("b", "test"), step("a", "test")])
    assert c.seen["agent:a"] == {"test": 2} and c.showing["test"] == {"a", "b"}
    run(c, [step("a")] * 11)  # a's last 12: test, N x 11 (the first test left)
    assert c.seen["agent:a"] == {"test": 1} and c.kinds("agent:a") == {"test"}
    run(c, [step("a")])  # the second test leaves too
    assert c.kinds("agent:a") == frozenset() and c.showing["test"] == {"b"}
    assert all(type(bad) is bool for bad, _, _ in c.windows["agent:a"])


def test_a_narrower_phase_recounts_the_classes() -> None:
    # explore (K = 20): a: lint, then 8 normal steps, b: lint. Into integrate (K = 6): a's
    # lint is 9 steps back (gone), b's is its last step (kept); back to explore: a's again.
    c = machine(threshold=1000, aggregate_agents=2)
    run(c, [step("a", "lint")] + [step("a")] * 8 + [step("b", "lint"), step("b", "lint")])
    assert c.showing["lint"] == {"a", "b"} and c.seen["agent:b"] == {"lint": 2}
    c.settle(INTEGRATE)
    assert c.kinds("agent:a") == frozenset() and c.kinds("agent:b") == {"lint"}
    assert c.showing["lint"] == {"b"} and c.seen["agent:b"] == {"lint": 2}
    c.phase = "explore"
    assert c.showing["lint"] == {"a", "b"} and c.seen["agent:a"] == {"lint": 1}


def test_a_window_keeps_its_last_twenty_steps_in_order() -> None:
    # explore (K = 20), M high: F then 24 normal steps with growing pace: the window holds
    # the last 20 (the F gone), oldest first, and the level is the fold over them.
    c = machine(threshold=1000)
    run(c, [step("a", "test", pace=1)] + [step("a", pace=2 + n) for n in range(24)])
    window = c.windows["agent:a"]
    assert len(window) == 20 and not any(bad for bad, _, _ in window)
    assert c.sums["agent:a"][-1] - c.sums["agent:a"][0] == -20
    assert c.level("agent:a") == 0 and c.level("agent:nobody") == 0
    c2 = machine(threshold=1000)
    run(c2, [step("a")] * 19 + [step("a", "test")] * 2)  # 21 steps: the first N left
    assert [bad for bad, _, _ in c2.windows["agent:a"]] == [False] * 18 + [True, True]
    assert c2.level("agent:a") == 20


def test_threshold_one_crosses_again_right_after_a_reset() -> None:
    # M = 1: every anomaly crosses from 0; after a decision the key starts at 0, so the next
    # anomaly crosses again (a key that restarted at 1 would not).
    c = machine(threshold=1)
    got = decisions(run(c, [step("a", "test"), step("a", "test")]))
    assert [(d.step, d.key, d.level) for d in got if d.rule == "bucket"] == [
        (1, "agent:a", 10),
        (2, "agent:a", 10),
    ]


@pytest.mark.parametrize("value", [-1, 0, 1, 5, 63, 64, 65, 10**6])
def test_readings_are_the_rule_at_every_value(value: int) -> None:
    # shared readings (values below 64 are made once) never change what a reading says
    c = machine()
    c.settle(INTEGRATE)  # sensor level full: every tier-2 sensor is read
    s = Step("t", "a", "src", 1, "test", {"outcome": 1, "restarts": value, "tests": value},
             {"pace_ms": 10, "backtrack": value, "loop": value, "modules": value,
              "contract": value})  # fmt: skip
    for _ in range(2):
        got = c.readings(s)
        by_name = {r.sensor: r for r in got}
        for name in ("restarts", "tests", "backtrack", "loop", "modules", "contract"):
            r = by_name[name]
            assert r.value == value and r.anomaly == sensors.anomalous(name, value), r
        assert [r.sensor for r in got][:3] == ["outcome", "restarts", "tests"]


def test_a_class_re_arms_when_it_leaves_an_agent_window_on_a_normal_step() -> None:
    # integrate (K = 6), M high, aggregation over 2 agents. a lint, b lint: aggregated (once).
    # a's six normal steps push its lint out of its last 6: only b shows lint now, so lint
    # re-arms on that normal step; c's lint then aggregates again (b and c).
    c = machine(threshold=1000, aggregate_agents=2)
    c.settle(INTEGRATE)
    steps = [step("a", "lint"), step("b", "lint")] + [step("a")] * 6 + [step("c", "lint")]
    got = [d for d in decisions(run(c, steps)) if d.rule == "aggregate"]
    assert [(d.step, d.level) for d in got] == [(2, 2), (9, 2)]
    assert c.kinds("agent:nobody") == frozenset()


def test_under_takes_risk_and_denial_from_the_matrix_and_sandbox() -> None:
    from harness.orchestrate.capabilities import DEFAULT_MATRIX
    from harness.verify.rules import trifecta

    sandbox = {"kind": "bwrap", "network": False, "private_mounts": True, "egress": []}
    c = Controller.under(Params(), {"a": [("claude", ["edit"])]}, DEFAULT_MATRIX, sandbox)
    for tool in ("edit", "web", "secrets", "mcp:x"):
        assert c.risky(tool) is bool(trifecta.tool_tags(DEFAULT_MATRIX, tool))
    assert c.risky("web") and not c.risky("edit")
    # the sandbox counts: without it the claude adapter with edit is denied, with it not
    assert trifecta.decide(DEFAULT_MATRIX, "claude", ["edit"], None).denied
    assert c.denied("claude", ["edit"]) is False
    assert (
        c.denied("claude", ["edit", "web", "secrets"])
        is trifecta.decide(DEFAULT_MATRIX, "claude", ["edit", "web", "secrets"], sandbox).denied
    )


def test_a_class_re_arms_when_a_reset_empties_an_agent_window_on_a_normal_step() -> None:
    # integrate (K = 6, sensor level full), M = 20, aggregation over 2 agents.
    # 1 a lint (a: 10); 2 b lint: aggregated. 3 a lands but loops 5 times (a flagged
    # tier-2 reading: anomalous, a: 20): a's crossing resets its window, so only b shows
    # lint and lint re-arms on that step; 4 c lint: aggregated again (b and c).
    c = machine(threshold=20, aggregate_agents=2)
    c.settle(INTEGRATE)
    steps = [step("a", "lint"), step("b", "lint"), step("a", loop=5), step("c", "lint")]
    got = decisions(run(c, steps))
    assert [(d.step, d.rule, d.key) for d in got if d.rule != "cusum"][:1] == [
        (2, "aggregate", "run")
    ]
    assert (3, "bucket", "agent:a") in [(d.step, d.rule, d.key) for d in got]
    assert [d.step for d in got if d.rule == "aggregate"] == [2, 4]
