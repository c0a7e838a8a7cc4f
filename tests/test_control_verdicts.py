"""The meta layer's false-alarm rate: alerts wait for the operator's verdict.

An alert is a control decision whose action is ``warn`` or ``escalate``. The operator judges
it (``harness judge``: confirmed or overridden); one nobody judged within the phase's window
of steps counts as ignored. Each new outcome re-weighs the last ``alert_window`` ones, and the
step at which they start crying wolf (more than ``false_alarm_pm`` per-mille false, over at
least three) is a ``meta/falsealarm -> escalate`` decision, once per episode. The verifier
folds the recorded verdicts (``control.verdict``) through the same controller.
"""

from __future__ import annotations

from typing import Any

from harness.verify.rules import controller as ctl
from harness.verify.rules.controller import Controller, Params, Step

from .test_control_check_units import at, fold, lawful, refused

IMPLEMENT = {"phase_bounds": [0, 1001, 1001]}  # window K = 12 throughout


def _machine(**control: Any) -> Controller:
    params = ctl.parse_params({**IMPLEMENT, **control})
    assert isinstance(params, Params)
    return Controller(params, {"a": [("scripted", ["edit"])]}, risky=bool, denied=lambda *_: False)


def _slow(tokens: int) -> Step:
    """A landed step of agent a reporting ``tokens``: with warm-up 1 and h = 1x the
    reference, a step at 2.5x the first one alarms (S = 2.5r - r - 0.5r = r = h)."""
    return Step("t", "a", ".", 1, None, {"outcome": 0, "restarts": 0}, {"pace_tokens": tokens})


def _alarms(machine: Controller, count: int) -> list[str]:
    """Steps 1 (the reference), then ``count`` alarms; the alert ids, oldest first."""
    machine.observe(_slow(100))
    ids = []
    for _ in range(count):
        observed = machine.observe(_slow(250))
        (warn,) = [d for d in observed.decisions if d.rule == "cusum"]
        assert warn.action == "warn"
        ids.append(f"{warn.step}:{warn.key}")
    return ids


CUSUM = {"cusum_warmup": 1, "cusum_h_pm": 1000}


def test_an_alert_waits_for_a_verdict_and_is_taken_once() -> None:
    machine = _machine(**CUSUM)
    (alert,) = _alarms(machine, 1)
    assert alert == "2:agent:a:pace_tokens" and machine.pending == {alert: 2}
    assert machine.judge(alert, "maybe") == "verdict 'maybe' is not one of confirmed, overridden"
    assert machine.judge(alert, "confirmed") is None
    assert machine.outcomes == ["confirmed"] and machine.pending == {}
    assert machine.judge(alert, "overridden") == f"alert {alert!r} is not waiting for a verdict"
    assert machine.judge("9:agent:a:pace_ms", "confirmed") is not None


def test_an_unjudged_alert_is_ignored_after_the_window() -> None:
    machine = _machine(**CUSUM)
    (alert,) = _alarms(machine, 1)  # step 2
    for _ in range(11):  # steps 3..13: 2 + 12 > 13, still waiting
        machine.observe(_slow(100))
    assert alert in machine.pending and machine.outcomes == []
    machine.observe(_slow(100))  # step 14 = 2 + 12: ignored
    assert machine.pending == {} and machine.outcomes == ["ignored"]


def test_three_overridden_alerts_cry_wolf_once() -> None:
    machine = _machine(**CUSUM)
    alerts = _alarms(machine, 4)  # steps 2..5, four warnings
    for alert in alerts[:3]:
        assert machine.judge(alert, "overridden") is None
    observed = machine.observe(_slow(100))  # step 6 weighs them: 3 of 3 false = 1000 > 500
    (wolf,) = [d for d in observed.decisions if d.rule == "falsealarm"]
    assert (wolf.layer, wolf.key, wolf.level, wolf.threshold, wolf.action) == (
        "meta",
        "run",
        1000,
        500,
        "escalate",
    )
    assert f"{wolf.step}:run" not in machine.pending  # the meta escalation is no alert
    machine.judge(alerts[3], "overridden")
    again = machine.observe(_slow(100))  # still crying: no second decision
    assert not [d for d in again.decisions if d.rule == "falsealarm"]


def test_confirmed_alerts_do_not_cry_wolf() -> None:
    machine = _machine(**CUSUM)
    alerts = _alarms(machine, 3)
    machine.judge(alerts[0], "overridden")
    machine.judge(alerts[1], "confirmed")
    machine.judge(alerts[2], "confirmed")  # 1 of 3 false = 333 <= 500
    observed = machine.observe(_slow(100))
    assert not [d for d in observed.decisions if d.rule == "falsealarm"]
    assert machine.outcomes == ["overridden", "confirmed", "confirmed"]


def test_the_verifier_folds_a_verdict_and_refuses_one_the_rule_cannot_take() -> None:
    rows = lawful()
    warn = at(rows, "control.decision", action="warn")
    alert = f"{rows[warn][2]['step']}:{rows[warn][2]['key']}"
    verdict = (
        "audit",
        "control.verdict",
        {"alert": alert, "verdict": "confirmed", "command": "c1"},
    )
    check = fold([*rows[: warn + 1], verdict, *rows[warn + 1 :]])
    assert check.machine is not None and check.machine.outcomes == ["confirmed"]
    unknown = (
        "audit",
        "control.verdict",
        {"alert": "99:run", "verdict": "confirmed", "command": "c1"},
    )
    refused(
        [*rows[: warn + 1], unknown, *rows[warn + 1 :]],
        "control.verdict refused by the rule",
        "'99:run' is not waiting",
    )
    early = at(rows, "control.sensor", step=rows[warn][2]["step"])  # before the alert exists
    refused([*rows[:early], verdict, *rows[early:]], "is not waiting for a verdict")


def test_the_rate_uses_the_plans_window_and_threshold() -> None:
    """alert_window 3, false_alarm_pm 700: the last three outcomes [o, o, c] are 667 per-mille
    false (not above 700: no alarm; the defaults, 20 and 500, would alarm); three more
    overridden make the last three 1000 (the defaults' whole-history rate would be 833)."""
    machine = _machine(**CUSUM, alert_window=3, false_alarm_pm=700)
    alerts = _alarms(machine, 6)
    for alert, verdict in zip(alerts[:3], ("overridden", "overridden", "confirmed"), strict=True):
        assert machine.judge(alert, verdict) is None
    quiet = machine.observe(_slow(100))
    assert not [d for d in quiet.decisions if d.rule == "falsealarm"]
    for alert in alerts[3:]:
        machine.judge(alert, "overridden")
    loud = machine.observe(_slow(100))
    (wolf,) = [d for d in loud.decisions if d.rule == "falsealarm"]
    assert (wolf.level, wolf.threshold) == (1000, 700)
