"""The controller end to end on hand-computed step sequences (issue 13, verify/rules/controller.py).

Each test feeds ``Controller.observe`` the steps a runtime would and compares every decision
and configuration version with values computed by hand in the comments (bucket levels in
tenths: +10 per anomalous step, -1 per normal one, floor 0). The phase is set with
``settle`` the way the runtime does from progress (explore below 250 per-mille, implement
below 750, integrate below 900, converge from there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.verify.rules import configchain, meta
from harness.verify.rules.controller import (
    Controller,
    Decision,
    Observed,
    Params,
    Reading,
    Step,
    parse_params,
    step_of,
    subtree_of,
)

RISKY = frozenset({"web", "shell", "secrets"})
IMPLEMENT, INTEGRATE, CONVERGE = 300, 800, 950
"""Progress per-mille that puts the controller in that phase."""


def _denied(adapter: str, tools: Sequence[str]) -> bool:
    """A trifecta stub: all three risky tools together are denied."""
    return set(tools) >= RISKY


def machine(tasks: dict[str, list[tuple[str, list[str]]]] | None = None, **kw: Any) -> Controller:
    kw.setdefault("rate_window", 1000)  # no firing-rate decision unless a test wants one
    agents = tasks or {a: [("scripted", ["edit"])] for a in ("a", "b", "c", "flaky")}
    return Controller(Params(**kw), agents, risky=lambda t: t in RISKY, denied=_denied)


def step(
    agent: str,
    cls: str | None = None,
    *,
    pace: int = 1000,
    subtree: str | None = None,
    **measures: int,
) -> Step:
    values = {"pace_ms": pace, "backtrack": 0, "loop": 0, "modules": 1, "contract": 0}
    values.update(measures)
    return Step(
        task=f"{agent}-task",
        agent=agent,
        subtree=subtree if subtree is not None else agent,
        attempt=1,
        cls=cls,
        tier1={"outcome": 0 if cls is None else 1, "restarts": 0},
        measures=values,
    )


def run(c: Controller, steps: Sequence[Step]) -> list[Observed]:
    return [c.observe(s) for s in steps]


def decisions(observed: Sequence[Observed]) -> list[Decision]:
    return [d for o in observed for d in o.decisions]


def bucket_decision(
    step: int,
    key: str,
    level: int,
    threshold: int,
    cls: str | None,
    action: str,
    config: int | None,
) -> Decision:
    return Decision(step, "I", "bucket", key, level, threshold, cls, action, config)


# ---- the agent bucket ------------------------------------------------------------------------


def test_two_failures_with_threshold_20_take_the_template_as_version_2() -> None:
    # The worked example of docs/spec/control-layers.md: threshold 20, two "test" failures.
    # Step 1: level 10 < 20. Step 2: 10 -> 20 crosses; "test" orders template first.
    c = machine(threshold=20)
    v1 = c.initial()
    assert (v1.version, v1.parent, v1.change, v1.channel, v1.step, v1.impact) == (
        1,
        None,
        "initial",
        "initial",
        None,
        (),
    )
    assert v1.sha256 == configchain.document_sha256(configchain.initial_document())
    one, two = run(c, [step("flaky", "test"), step("flaky", "test")])
    assert one.decisions == () and one.versions == ()
    assert two.decisions == (bucket_decision(2, "agent:flaky", 20, 20, "test", "template", 2),)
    (v2,) = two.versions
    assert v2.version == 2 and v2.parent == v1.sha256 and v2.step == 2
    assert v2.document == {
        "format": "harness.control-config/1",
        "agents": {
            "flaky": {"template": "focused", "add": [], "drop": [], "gates_in_prompt": False}
        },
    }
    assert v2.sha256 == configchain.document_sha256(v2.document)
    assert (v2.change, v2.channel, v2.impact) == ("neutral", "slow", ("flaky",))
    assert v2.sha256 == "6e86172d9935431055d108801c748667f2bf66c01eb4026abe5b88b17b056342"
    assert c.version == 2 and c.sha256 == v2.sha256 and c.document == v2.document


def test_version_1_stays_the_initial_document_after_changes() -> None:
    # A resumed runtime or a verifier may ask for version 1 after folding steps: it is always
    # the initial document, not the one in force now.
    c = machine(threshold=10)
    first = c.initial()
    c.observe(step("a", "test"))  # 0 -> 10 crosses M = 10: template, version 2
    assert c.version == 2
    assert c.initial() == first
    assert c.made[0].parent == c.initial().sha256


def test_the_window_forgets_old_anomalies() -> None:
    # implement: K = 12, M = 30. Steps 1-2 fail (20), 3-12 are normal: window [T T F*10] = 10.
    # Step 13 fails: window [T F*10 T]: 10 - 10 -> 0, + 10 = 10 (the first T fell out; all
    # history would give 20). Step 14 fails: [F*10 T T] = 20 (history: 30, a crossing).
    # Step 15 fails: [F*9 T T T] = 30: the crossing, one step later than without a window.
    c = machine()
    c.settle(IMPLEMENT)
    seq = [step("a", "test")] * 2 + [step("a")] * 10 + [step("a", "test")] * 3
    got = decisions(run(c, seq))
    assert got == [bucket_decision(15, "agent:a", 30, 30, "test", "template", 2)]


def test_no_second_decision_until_the_bucket_fills_again() -> None:
    # M = 30: crossing at step 3 (template, v2); the window starts empty, so steps 4-5 give 10,
    # 20 and step 6 gives 30: a new crossing, the next strategy for "test" (toolchain, v3).
    c = machine()
    got = decisions(run(c, [step("a", "test")] * 6))
    assert got == [
        bucket_decision(3, "agent:a", 30, 30, "test", "template", 2),
        bucket_decision(6, "agent:a", 30, 30, "test", "toolchain", 3),
    ]
    assert c.document["agents"]["a"] == {
        "template": "focused",
        "add": ["shell"],
        "drop": [],
        "gates_in_prompt": True,
    }
    assert [v.change for v in c.made] == ["neutral", "expand"]


def test_the_toolbox_runs_out_then_escalates() -> None:
    # explore allows 4 switches and 2 topology changes. "test": template (3), toolchain (6),
    # split (9: a topology change, no version), then nothing left: escalate (12).
    c = machine()
    got = decisions(run(c, [step("a", "test")] * 12))
    assert [(d.step, d.action, d.config) for d in got] == [
        (3, "template", 2),
        (6, "toolchain", 3),
        (9, "split", None),
        (12, "escalate", None),
    ]
    assert c.version == 3


def test_a_trifecta_inconsistent_toolchain_is_skipped() -> None:
    # agent "w" works with web and secrets: shell would complete the trifecta, so toolchain is
    # not available and after the template the order goes on to split.
    c = machine({"w": [("claude", ["edit", "web", "secrets"])]})
    got = decisions(run(c, [step("w", "lint")] * 6))
    assert [(d.action, d.config) for d in got] == [("template", 2), ("split", None)]


def test_a_crash_takes_the_scope_strategy_on_the_fast_channel() -> None:
    c = machine({"w": [("claude", ["edit", "web"])]})
    got = decisions(run(c, [step("w", "crash")] * 6))
    assert [(d.action, d.config) for d in got] == [("template", 2), ("scope", 3)]
    v3 = c.made[-1]
    assert (v3.change, v3.channel) == ("contract", "fast")
    assert c.document["agents"]["w"]["drop"] == ["web"]


def test_config_switches_are_bounded_by_phase() -> None:
    # converge: 2 switches, no topology change. Steps 1-3: template (v2); 4-6: toolchain (v3);
    # 7-9: split is not allowed (topology 0): escalate.
    c = machine()
    c.settle(CONVERGE)
    got = decisions(run(c, [step("a", "test")] * 9))
    assert [(d.step, d.action) for d in got] == [(3, "template"), (6, "toolchain"), (9, "escalate")]


# ---- the subtree bucket ----------------------------------------------------------------------


def test_subtree_with_two_agents_is_a_topology_change() -> None:
    # a and b both work in src/. a fails (a 10, src 10), b fails (b 10, src 20), a fails
    # (a 20, src 30: crossed, anomalies of two agents): split for the stepping agent a.
    c = machine()
    got = decisions(
        run(
            c,
            [step(x, "test", subtree="src") for x in "aba"],
        )
    )
    assert got == [bucket_decision(3, "subtree:src", 30, 30, "test", "split", None)]
    assert c.agents["a"].topology == 1 and c.last_topology == 3
    # the subtree starts empty: b's next failure gives src 10 and b 20: nothing.
    assert decisions(run(c, [step("b", "test", subtree="src")])) == []


def test_subtree_with_one_agent_leaves_it_to_the_agent_bucket() -> None:
    # a alone in src/: at step 3 both a and src reach 30; only the agent decides, and the
    # subtree's window starts empty too (step 6 again: one decision, for the agent).
    c = machine()
    got = decisions(run(c, [step("a", "test", subtree="src")] * 6))
    assert [d.key for d in got] == ["agent:a", "agent:a"]
    assert c.windows["subtree:src"] == []


def test_subtree_split_once_per_agent_then_escalate() -> None:
    # a and b alternate failures in src/ (M = 30). Step 3 (a): src 30, two agents: split for a
    # (topology 1 of explore's 2; the first one, so spaced). Step 5: a's own bucket reaches 30
    # (template). Step 6 (b): b's bucket (template) and src again (steps 4-6: b, a, b): split for
    # b: (6 - 3) * 1000 = 3000 >= 6 * 100, spaced. Step 9 (a): src (steps 7-9: a, b, a) crosses
    # for a, which has split already: escalate.
    c = machine()
    seq = [step(x, "test", subtree="src") for x in "ababababa"]
    got = [(d.step, d.key, d.action) for d in decisions(run(c, seq))]
    assert got == [
        (3, "subtree:src", "split"),
        (5, "agent:a", "template"),
        (6, "agent:b", "template"),
        (6, "subtree:src", "split"),
        (9, "subtree:src", "escalate"),
    ]


# ---- aggregation across agents ---------------------------------------------------------------


def test_the_same_class_in_three_agents_is_one_toolchain_change() -> None:
    # a, b, c fail "test" once each (own subtrees, levels 10): at step 3 the class shows in 3
    # agents' windows: one aggregate decision, toolchain for all three, in one version.
    c = machine()
    got = decisions(run(c, [step("a", "test"), step("b", "test"), step("c", "test")]))
    assert got == [Decision(3, "I", "aggregate", "run", 3, 3, "test", "toolchain", 2)]
    v2 = c.made[-1]
    tooled = {"template": "default", "add": ["shell"], "drop": [], "gates_in_prompt": True}
    assert v2.document["agents"] == {"a": tooled, "b": tooled, "c": tooled}
    assert (v2.change, v2.channel, v2.impact) == ("expand", "slow", ("a", "b", "c"))
    assert [c.agents[x].tried for x in "abc"] == [["toolchain"]] * 3


def test_aggregation_re_arms_once_fewer_agents_show_the_class() -> None:
    c = machine()
    run(c, [step("a", "test"), step("b", "test"), step("c", "test")])  # aggregate at 3 (v2)
    # Step 4: a fails again (a 20): "test" still shows in 3 agents: already aggregated.
    assert decisions(run(c, [step("a", "test")])) == []
    # Step 5: a fails (a 30): a's bucket crosses: toolchain was tried, so template (v3); a's
    # window starts empty, "test" shows in b and c only: aggregation re-arms.
    assert decisions(run(c, [step("a", "test")])) == [
        bucket_decision(5, "agent:a", 30, 30, "test", "template", 3)
    ]
    assert c.aggregated == set()
    # Step 6: a fails: 3 agents again: a new aggregate decision, but toolchain is already in
    # force for all three: nothing to apply, escalate.
    assert decisions(run(c, [step("a", "test")])) == [
        Decision(6, "I", "aggregate", "run", 3, 3, "test", "escalate", None)
    ]


def test_aggregation_needs_the_same_class() -> None:
    c = machine()
    assert decisions(run(c, [step("a", "test"), step("b", "lint"), step("c", "test")])) == []
    c = machine(aggregate_agents=2)
    assert decisions(run(c, [step("a", "crash"), step("b", "crash")])) == [
        Decision(2, "I", "aggregate", "run", 2, 2, "crash", "template", 2)
    ]


# ---- the D layer -----------------------------------------------------------------------------


def test_cusum_alarm_with_an_empty_bucket_is_a_warning() -> None:
    # implement reads pace at every step. Steps 1-3 at 100 ms: the reference 100; step 4 at
    # 400 ms: S = 400 - 100 - 50 = 250 >= h = 200: alarm; the bucket is at 0: warn.
    c = machine()
    c.settle(IMPLEMENT)
    got = decisions(run(c, [step("a", pace=100)] * 3 + [step("a", pace=400)]))
    assert got == [Decision(4, "D", "cusum", "agent:a:pace_ms", 250, 200, None, "warn", None)]
    assert c.version == 1


def test_cusum_alarm_with_a_half_full_bucket_takes_a_strategy_early() -> None:
    # Steps 1-2 fail (20), steps 3-6 are normal (16), step 7 is normal at 400 ms (15):
    # 2 * 15 >= 30, half full: the agent's strategy for its latest class ("test"): template.
    c = machine()
    c.settle(IMPLEMENT)
    seq = [step("a", "test", pace=100)] * 2 + [step("a", pace=100)] * 4 + [step("a", pace=400)]
    got = decisions(run(c, seq))
    assert got == [Decision(7, "D", "cusum", "agent:a:pace_ms", 250, 200, None, "template", 2)]
    assert c.windows["agent:a"] == []  # the agent's window starts empty


def test_cusum_alarm_just_below_half_full_warns() -> None:
    # One more normal step: the level at the spike is 14, 2 * 14 = 28 < 30: warn.
    c = machine()
    c.settle(IMPLEMENT)
    seq = [step("a", "test", pace=100)] * 2 + [step("a", pace=100)] * 5 + [step("a", pace=400)]
    assert [d.action for d in decisions(run(c, seq))] == ["warn"]


def test_cusum_on_tokens_when_usage_is_known() -> None:
    c = machine()
    c.settle(IMPLEMENT)
    seq = [step("a", pace=100, pace_tokens=1000)] * 3 + [step("a", pace=100, pace_tokens=3500)]
    # tokens: ref 1000, k 500, h 2000; 3500 - 1500 = 2000 >= 2000: alarm; pace_ms stays flat.
    assert decisions(run(c, seq)) == [
        Decision(4, "D", "cusum", "agent:a:pace_tokens", 2000, 2000, None, "warn", None)
    ]


def test_firing_rate_acceleration_escalates() -> None:
    # rate window 10, M out of reach. Window 1 (steps 1-10): 3 failures >= max(3, 2*0+1) = 3:
    # escalate at step 10. Window 2: needs max(3, 2*3+1) = 7; 6 failures: nothing at 20.
    # Window 3: needs max(3, 13) = 13 > 10 steps: never; window 4 after a quiet window 3
    # (0 fires): needs 3 again.
    c = machine(threshold=1000, rate_window=10)
    fail, ok = step("a", "test"), step("a")
    seq = [fail] * 3 + [ok] * 7 + [fail] * 6 + [ok] * 4 + [ok] * 10 + [fail] * 3 + [ok] * 7
    got = decisions(run(c, seq))
    assert got == [
        Decision(10, "D", "rate", "run", 3, 3, None, "escalate", None),
        Decision(40, "D", "rate", "run", 3, 3, None, "escalate", None),
    ]


def test_firing_rate_counts_i_decisions_too() -> None:
    # M = 20: steps 1-2 fail, the crossing at 2 is an I firing: 2 P + 1 I = 3 >= 3 at step 10.
    c = machine(threshold=20, rate_window=10)
    got = decisions(run(c, [step("a", "test")] * 2 + [step("a")] * 8))
    assert [(d.step, d.rule, d.level) for d in got] == [(2, "bucket", 20), (10, "rate", 3)]


def test_firing_rate_below_minimum_is_quiet() -> None:
    c = machine(threshold=1000, rate_window=10)
    assert decisions(run(c, [step("a", "test")] * 2 + [step("a")] * 8)) == []


# ---- phases change the window and the sensors -------------------------------------------------


def test_the_phase_sets_the_window() -> None:
    # M = 17, steps F N N N F. explore (K = 20): 10, 9, 8, 7, 17: crossing at 5.
    # converge (K = 4): at step 5 the window is [N N N F] = 10: no crossing.
    seq = [step("a", "test")] + [step("a")] * 3 + [step("a", "test")]
    explore = machine(threshold=17)
    assert [d.step for d in decisions(run(explore, seq))] == [5]
    converge = machine(threshold=17)
    converge.settle(CONVERGE)
    assert decisions(run(converge, seq)) == []


def test_narrowing_the_phase_forgets_at_once() -> None:
    # explore: F F (20) then 6 normal steps (14). Into integrate (K = 6): the window's last 6
    # are normal: level 0; a failure then gives 10, not 24.
    c = machine(threshold=30)
    run(c, [step("a", "test")] * 2 + [step("a")] * 6)
    assert c.level("agent:a") == 14
    assert c.settle(INTEGRATE) == "integrate"
    assert c.level("agent:a") == 0
    run(c, [step("a", "test")])
    assert c.level("agent:a") == 10


def test_settle_reports_only_a_change() -> None:
    c = machine()
    assert c.phase == "explore"
    assert c.settle(100) is None
    assert c.settle(250) == "implement"
    assert c.settle(300) is None
    assert c.settle(1000) == "converge"
    assert (c.phase, c.progress, c.profile.window) == ("converge", 1000, 4)


def test_readings_follow_the_phase_and_flag_anomalies() -> None:
    c = machine()
    s = step("a", modules=5, contract=2, loop=4)
    r = c.readings(s)  # explore: basic; modules and contract by their conditions
    assert r == (
        Reading("outcome", 1, 0, False, None),
        Reading("restarts", 1, 0, False, None),
        Reading("modules", 2, 5, True, "cross-module"),
        Reading("contract", 2, 2, True, "shared-boundary"),
    )
    # a tier-2 anomaly makes the step anomalous although the attempt landed
    c.observe(s)
    assert c.level("agent:a") == 10
    c.settle(INTEGRATE)  # full: everything, by level
    assert [(x.sensor, x.trigger) for x in c.readings(step("a")) if x.tier == 2] == [
        ("pace_ms", "level"),
        ("backtrack", "level"),
        ("loop", "level"),
        ("modules", "level"),
        ("contract", "level"),
    ]


def test_pace_jump_compares_with_the_agents_last_read_pace() -> None:
    c = machine()
    c.settle(IMPLEMENT)
    c.observe(step("a", pace=100))
    assert "backtrack" not in {r.sensor for r in c.readings(step("a", pace=200))}
    assert "backtrack" in {r.sensor for r in c.readings(step("a", pace=201))}
    assert "backtrack" not in {r.sensor for r in c.readings(step("b", pace=10**6))}


# ---- replay: the verifier's path -------------------------------------------------------------


def body(observed: Observed, s: Step, phase: str) -> dict[str, Any]:
    """The ``control.sensor`` body the runtime records (orchestrate/control/run.py)."""
    return {
        "step": observed.step,
        "task": s.task,
        "agent": s.agent,
        "subtree": s.subtree,
        "attempt": s.attempt,
        "phase": phase,
        "class": s.cls,
        "readings": [r.record() for r in observed.readings],
    }


def test_recorded_bodies_replay_to_the_same_decisions() -> None:
    seq = (
        [step("a", "test", subtree="src"), step("b", "test", subtree="src")] * 3
        + [step("c", "test")] * 2
        + [step("a", pace=100)] * 3
        + [step("a", pace=900, modules=3)]
    )
    live, again = machine(), machine()
    for n, s in enumerate(seq):
        if n == 8:
            live.settle(IMPLEMENT)
            again.settle(IMPLEMENT)
        phase = live.phase
        observed = live.observe(s)
        replayed_step, readings = step_of(body(observed, s, phase))
        assert again.readings(replayed_step) == observed.readings
        assert again.observe(replayed_step, readings) == observed
    assert live.made and live.made == again.made


def test_step_of_reads_the_body() -> None:
    s, readings = step_of(
        {
            "step": 4,
            "task": "t",
            "agent": "a",
            "subtree": "src",
            "attempt": 2,
            "phase": "implement",
            "class": "lint",
            "readings": [
                {"sensor": "outcome", "tier": 1, "value": 1, "anomaly": True, "trigger": None},
                {"sensor": "pace_ms", "tier": 2, "value": 70, "anomaly": False, "trigger": "x"},
            ],
        }
    )
    assert s == Step("t", "a", "src", 2, "lint", {"outcome": 1}, {"pace_ms": 70})
    assert readings == (
        Reading("outcome", 1, 1, True, None),
        Reading("pace_ms", 2, 70, False, "x"),
    )


# ---- parameters and helpers ------------------------------------------------------------------


CONTROL_MEMBERS = {
    "threshold": 30,
    "cusum_warmup": 3,
    "cusum_k_pm": 500,
    "cusum_h_pm": 2000,
    "aggregate_agents": 3,
    "rate_window": 10,
    "phase_bounds": [250, 750, 900],
}


def test_parse_params_defaults_and_record() -> None:
    p = parse_params(None)
    assert p == Params() == parse_params({})
    record = Params().record()
    assert {name: record[name] for name in CONTROL_MEMBERS} == CONTROL_MEMBERS
    # the rest of the table is the meta layer's (verify/rules/meta.py)
    assert set(record) - set(CONTROL_MEMBERS) <= set(meta.META_RANGES)
    table = {"threshold": 20, "cusum_k_pm": 0, "phase_bounds": [0, 1001, 1001]}
    got = parse_params(table)
    assert isinstance(got, Params)
    assert (got.threshold, got.cusum.k_pm, got.bounds) == (20, 0, (0, 1001, 1001))
    assert parse_params(got.record()) == got


def test_parse_params_refusals() -> None:
    known = ", ".join(sorted(Params().record()))
    assert parse_params({"thresh": 1}) == f"unknown member 'thresh' (known: {known})"
    assert "aggregate_agents, " in known and "threshold" in known
    assert parse_params({"threshold": 0}) == "threshold: an integer between 1 and 1000"
    assert parse_params({"threshold": True}) == "threshold: an integer between 1 and 1000"
    assert parse_params({"cusum_h_pm": 0}) == "cusum_h_pm: an integer between 1 and 100000"
    assert parse_params({"rate_window": 1001}) == "rate_window: an integer between 2 and 1000"
    assert parse_params({"aggregate_agents": 1}) == (
        "aggregate_agents: an integer between 2 and 1000"
    )
    assert parse_params({"phase_bounds": (1, 2, 3)}) == "phase_bounds: a list of three integers"
    assert parse_params({"phase_bounds": [3, 2, 1]}) == "phase_bounds: non-decreasing bounds"


def test_subtree_of() -> None:
    assert subtree_of(["src/a/**", "docs/**"]) == "src"
    assert subtree_of(["calc.py"]) == "calc.py"
    assert subtree_of(["*.md"]) == "."
    assert subtree_of(["s[rc]/x"]) == "."
    assert subtree_of(["?/x"]) == "."
    assert subtree_of([]) == "."


# ---- the meta layer inside the controller -----------------------------------------------------


def test_selftest_probes_land_in_the_shadow_key_only() -> None:
    # every 2: probes at steps 2 and 4 (outcome=1, then tests=1), each a meta decision; the
    # real buckets see only the real steps: a fails at 1 and 3 (M = 30: 10, then 20 - no
    # decision), while the shadow key holds the two probes (20).
    c = machine(meta=meta.MetaParams(selftest_every=2))
    got = decisions(run(c, [step("a", "test"), step("a"), step("a", "test"), step("a")]))
    assert got == [
        Decision(2, "meta", "selftest", "selftest:a", 1, 0, "outcome", "detected", None),
        Decision(4, "meta", "selftest", "selftest:a", 1, 0, "tests", "detected", None),
    ]
    assert c.level("agent:a") == 18  # 10, 9, 19, 18
    assert c.level("selftest:a") == 20
    assert c.version == 1 and c.fires == 2  # the two real failures


def test_reviews_at_the_progress_points() -> None:
    # 3 failed steps (scope, scope, test) and one landing; the template change at step 3
    # (M = 20: a's crossing at its second failure) is followed by a's landing at step 4.
    c = machine(threshold=20)
    run(c, [step("a", "scope"), step("b", "scope"), step("a", "test"), step("a")])
    previous = c.progress
    c.settle(600)  # from 0 to 600: the 250 and 500 points
    got = c.reviews(previous, heightened=False)
    assert [r.point for r in got] == [250, 500]
    # fit: 2 of 3 failures are refusals: 666 > 300; controllability: 1 change, followed.
    assert got[0] == meta.Review(250, 3, 2, 666, True, 1, 1, 1000, False)
    assert c.reviews(600, heightened=False) == ()


def test_the_spec_worked_example() -> None:
    # docs/spec/control-layers.md §10, value for value: the demo's [plan.control], the
    # tuner's two failing attempts of stats (40 ms, 1000 tokens, paths in two modules).
    params = parse_params({"threshold": 20, "cusum_warmup": 2, "phase_bounds": [0, 750, 900]})
    assert isinstance(params, Params)
    c = Controller(
        params, {"tuner": [("scripted", ["edit"])]}, risky=RISKY.__contains__, denied=_denied
    )
    assert c.phase == "implement"
    steps = [
        Step(
            "stats",
            "tuner",
            subtree_of(["stats.py", "tests/test_stats.py"]),
            attempt,
            "test",
            {"outcome": 1, "restarts": attempt - 1, "tests": 1},
            {"pace_ms": 40, "pace_tokens": 1000, "backtrack": 0, "loop": 1, "modules": 2,
             "contract": 0},
        )
        for attempt in (1, 2)
    ]  # fmt: skip
    one, two = run(c, steps)
    assert [(r.sensor, r.value, r.anomaly, r.trigger) for r in one.readings] == [
        ("outcome", 1, True, None),
        ("restarts", 0, False, None),
        ("tests", 1, True, None),
        ("pace_ms", 40, False, "anomaly"),
        ("pace_tokens", 1000, False, "anomaly"),
        ("loop", 1, False, "anomaly"),
        ("modules", 2, False, "cross-module"),
    ]
    assert one.decisions == ()
    assert [d.record() for d in two.decisions] == [
        {"step": 2, "layer": "I", "rule": "bucket", "key": "agent:tuner", "level": 20,
         "threshold": 20, "class": "test", "action": "template", "config": 2}
    ]  # fmt: skip
    assert two.versions[0].record("<HEAD>") == {
        "version": 2,
        "parent": "ca41e4df7369004f9714114ab5fcc4c3511daae3c0290c0bc565219a2846b54e",
        "sha256": "dd44fab3e7900d9da13a830729b5f4c246fc1303984567fc1741947d91023e9f",
        "document": {
            "format": "harness.control-config/1",
            "agents": {
                "tuner": {"template": "focused", "add": [], "drop": [], "gates_in_prompt": False}
            },
        },
        "change": "neutral",
        "channel": "slow",
        "step": 2,
        "impact": ["tuner"],
        "snapshot": "<HEAD>",
    }
    assert c.windows["agent:tuner"] == [] and c.windows["subtree:stats.py"] == []
