"""The controller above the P layer, as one pure state machine: sensors in, decisions out.

The runtime feeds it every step (one retired attempt of one task) and records what it
returns; the verifier feeds it the recorded steps and demands the same readings, decisions
and configuration versions (DESIGN §9). Everything is integers: the bucket in tenths
(``bucket``), progress and CUSUM parameters in per-mille; its clock is the step count.

Per step, in this order (each decision names its step, layer, rule and key):

1. **Readings** (``readings``): tier 1 as given; tier 2 as ``sensors.activate`` turns them on
   at the phase's sensor level; every reading flagged by ``sensors.anomalous``. The step is
   anomalous when its attempt failed (``cls``) or a tier-2 reading is flagged.
2. **I layer, per agent** (key ``agent:<role>``) then **per subtree** (``subtree:<path>``):
   the step joins the key's window; when the bucket over the last K (the phase's window)
   crosses M, a decision: for an agent the toolbox strategy (``strategy.choose``), for a
   subtree a topology change (``split``) within bounds, else ``escalate``. The key's window
   then starts empty. A subtree whose window holds the anomalies of one agent only makes no
   decision (that agent's bucket answers it) and starts empty too.
3. **I layer, across agents** (``run``): when the step's class is in the windows of at least
   ``aggregate_agents`` agents, it is a template/toolchain signal (``aggregate_strategy``)
   applied to all of them at once; re-armed once fewer agents show it.
4. **D layer, trends** (``agent:<role>:<sensor>``): CUSUM on ``pace_ms`` and ``pace_tokens``;
   an alarm with the agent's bucket at least half full takes a strategy early (before the I
   counter overflows), otherwise it is a ``warn`` for the operator.
5. **D layer, firing rate** (``run``): every ``rate_window`` steps, the P firings (failed
   steps) and I decisions of the window; at least 3 and more than twice the previous
   window's is acceleration: ``escalate``.
6. **Meta layer**: the scheduled self-test (``meta/selftest`` into a shadow key), then the
   false-alarm rate: alerts (``warn``/``escalate``) wait for the operator's verdict
   (``judge``: confirmed or overridden); one not judged within the phase's window of steps
   is ``ignored``; when the last ``alert_window`` outcomes start crying wolf
   (``meta.cries_wolf``): ``meta/falsealarm -> escalate``.

A strategy that is a config switch produces the next configuration version
(``configchain``): fast channel for a contraction, slow (checked for consistency) otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from . import bucket, configchain, cusum, meta, phases, sensors, strategy, trifecta
from .controlmodel import (
    MAX_AGGREGATE,
    MAX_RATE_WINDOW,
    PARAM_RANGES,
    RATE_MINIMUM,
    VERDICTS,
    Decision,
    Observed,
    Params,
    Reading,
    Step,
    Version,
    parse_params,
    step_of,
    subtree_of,
)
from .keywindows import AGENT, KeyWindows
from .readings import ReadingMaker

__all__ = [
    "MAX_AGGREGATE",
    "MAX_RATE_WINDOW",
    "PARAM_RANGES",
    "RATE_MINIMUM",
    "VERDICTS",
    "Controller",
    "Decision",
    "Observed",
    "Params",
    "Reading",
    "Step",
    "Tasks",
    "Version",
    "parse_params",
    "step_of",
    "subtree_of",
]


@dataclass
class _Agent:
    tried: list[str] = field(default_factory=list)
    switches: int = 0
    topology: int = 0
    last_pace: int | None = None


_FRESH: Final = cusum.CusumState()
Tasks = Mapping[str, Sequence[tuple[str, Sequence[str]]]]
"""Per agent (role): its tasks' (adapter, tools)."""


class Controller:
    """The I and D layers' state for one run, advanced one step at a time."""

    def __init__(
        self,
        params: Params,
        tasks: Tasks,
        *,
        risky: Callable[[str], bool],
        denied: Callable[[str, Sequence[str]], bool],
    ) -> None:
        self.params = params
        self.tasks = tasks
        self.risky = risky
        self.denied = denied
        self.steps = 0
        self.progress = 0
        self._phase = phases.phase_for(0, params.bounds)
        self.document: dict[str, Any] = configchain.initial_document()
        self.sha256 = configchain.document_sha256(self.document)
        self.version = 1
        self._profile = self.profile
        self.keys = KeyWindows(self._profile.window)
        """The I layer's per-key history (``keywindows``)."""
        self.windows = self.keys.windows
        self.sums = self.keys.sums
        self.levels = self.keys.levels
        self.seen = self.keys.seen
        self.showing = self.keys.showing
        self._candidates_at: dict[tuple[int, str], dict[str, dict[str, Any] | None]] = {}
        self.maker = ReadingMaker()
        self.trends: dict[str, cusum.CusumState] = {}
        self.agents: dict[str, _Agent] = {}
        self.last_topology: int | None = None
        self.fires = 0
        self.previous_fires = 0
        self.aggregated: set[str] = set()
        self.made: list[Version] = []
        """Every version after the first, in order."""
        self.classes: list[str | None] = []
        """Every real step's class, in order (the meta layer's constraint-task fit)."""
        self.changes: list[tuple[int, str]] = []
        """(step, agent) of every strategy change (the meta layer's controllability)."""
        self.landed: list[tuple[int, str]] = []
        """(step, agent) of every landed step."""
        self.pending: dict[str, int] = {}
        """Alerts (``<step>:<key>``) waiting for the operator's verdict, and their step."""
        self.outcomes: list[str] = []
        """Every judged alert's outcome in order: confirmed, overridden or ignored."""
        self.judged = 0
        """Outcomes already weighed by the false-alarm rate."""
        self.crying = False
        """Whether the last false-alarm evaluation found the sensors crying wolf."""

    @classmethod
    def under(
        cls,
        params: Params,
        tasks: Tasks,
        matrix: trifecta.MatrixLike,
        sandbox: Mapping[str, Any] | None,
    ) -> Controller:
        """The controller of a run under capability ``matrix`` and ``sandbox`` profile: a
        tool is risky when it carries a risk tag, a tool set denied when the trifecta rule
        denies it. The one place the runtime, the verifier and the report get these from."""

        def risky(tool: str) -> bool:
            return bool(trifecta.tool_tags(matrix, tool))

        def denied(adapter: str, tools: Sequence[str]) -> bool:
            return trifecta.decide(matrix, adapter, tools, sandbox).denied

        return cls(params, tasks, risky=risky, denied=denied)

    @property
    def phase(self) -> str:
        return self._phase

    @phase.setter
    def phase(self, name: str) -> None:
        """Enter a phase (also as recorded: a resumed runtime, the report's fold)."""
        if name != self._phase:
            self._phase = name
            self._profile = phases.PROFILES[name]
            self.keys.rewindow(self._profile.window)  # the window K is the phase's

    @property
    def profile(self) -> phases.Profile:
        return phases.PROFILES[self.phase]

    def initial(self) -> Version:
        """Configuration version 1, recorded at the run's start (the initial document, also
        when asked after later versions)."""
        document = configchain.initial_document()
        sha256 = configchain.document_sha256(document)
        return Version(1, None, sha256, document, "initial", "initial", None, ())

    def settle(self, progress: int) -> str | None:
        """New progress (per-mille of settled tasks): the phase it enters, or None."""
        self.progress = progress
        phase = phases.phase_for(progress, self.params.bounds)
        if phase == self.phase:
            return None
        self.phase = phase
        return phase

    def _agent(self, name: str) -> _Agent:
        found = self.agents.get(name)
        if found is None:
            found = self.agents[name] = _Agent()
        return found

    @property
    def k(self) -> int:
        """The phase's window K."""
        return self.keys.k

    def level(self, key: str) -> int:
        """The bucket level of ``key`` over its last K steps now (tenths; 0 right after its
        decision)."""
        return self.keys.level(key)

    def kinds(self, key: str) -> frozenset[str]:
        """The anomaly classes in agent key ``key``'s last K steps."""
        return self.keys.kinds(key)

    def readings(self, step: Step) -> tuple[Reading, ...]:
        """The step's readings at the current phase: tier 1, then the tier-2 sensors the
        activation rule turns on, each flagged."""
        return self._read(step)[0]

    def _read(self, step: Step) -> tuple[tuple[Reading, ...], bool, list[Reading]]:
        agent = self.agents.get(step.agent)
        last_pace = None if agent is None else agent.last_pace
        return self.maker.read(step, self._profile.sensor_level, last_pace)

    def observe(self, step: Step, readings: Sequence[Reading] | None = None) -> Observed:
        """Advance by one step; ``readings`` as recorded (the verifier) or None (computed)."""
        if readings is None:
            taken, flagged, paced = self._read(step)
        else:
            taken, flagged, paced = tuple(readings), False, []
            for reading in taken:
                if reading.anomaly and reading.tier == 2:
                    flagged = True
                if reading.sensor in sensors.PACE:
                    paced.append(reading)
        self.steps += 1
        number = self.steps
        anomalous = step.cls is not None or flagged
        decisions: list[Decision] = []
        versions: list[Version] = []
        if step.cls is not None:
            self.fires += 1
        self._buckets(step, number, anomalous, decisions, versions)
        if step.cls is not None or (self.aggregated and self.keys.reshown):
            self._aggregate(step, number, decisions, versions)
        if paced:
            self._trends(step, number, paced, decisions, versions)
        if not number % self.params.rate_window:
            self._rate(number, decisions)
        if self.params.meta.selftest_every:
            self._selftest(step, number, decisions)
        if decisions or self.pending or len(self.outcomes) > self.judged:
            self._alerts(number, decisions)
        self.classes.append(step.cls)
        if step.cls is None:
            self.landed.append((number, step.agent))
        for decision in decisions:
            if meta.is_strategy_change(decision.layer, decision.action):
                self.changes.append((number, step.agent))
        for reading in paced:
            if reading.sensor == "pace_ms":
                self._agent(step.agent).last_pace = reading.value
        if not decisions:
            return Observed(number, taken, (), ())
        return Observed(number, taken, tuple(decisions), tuple(versions))

    def _buckets(
        self,
        step: Step,
        number: int,
        anomalous: bool,
        decisions: list[Decision],
        versions: list[Version],
    ) -> None:
        threshold, k, levels = self.params.threshold, self.k, self.levels
        for key, counted in ((AGENT + step.agent, True), ("subtree:" + step.subtree, False)):
            before = levels.get(key)
            if before is None:
                before = self.level(key)
            sums = self.keys.push(key, anomalous, step.cls, step.agent, counted)
            after = levels[key] = bucket.window_level(sums, k)
            if not bucket.crossed(before, after, threshold):
                continue
            if counted:
                action, version = self._switch(step, number, step.cls)
            else:
                recent = self.windows[key][-self.k :]
                if len({agent for bad, _, agent in recent if bad}) < 2:
                    # One agent's trouble: its own bucket answers it.
                    self.keys.reset(key)
                    continue
                action, version = self._split(step, number), None
            self.keys.reset(key)
            decisions.append(
                Decision(number, "I", "bucket", key, after, threshold, step.cls, action, version)
            )
            if version is not None:
                versions.append(self.made[-1])
            self.fires += 1

    def _aggregate(
        self, step: Step, number: int, decisions: list[Decision], versions: list[Version]
    ) -> None:
        """(``observe`` calls it when the step failed, or when a class is armed and the
        windows' classes changed since: else there is nothing to decide or re-arm.)"""
        self.keys.reshown = False
        showing = self.showing
        need = self.params.aggregate_agents
        self.aggregated = {c for c in self.aggregated if len(showing.get(c, ())) >= need}
        cls = step.cls
        if cls is None or cls in self.aggregated or len(showing.get(cls, ())) < need:
            return
        self.aggregated.add(cls)
        agents = sorted(showing[cls])
        chosen = strategy.aggregate_strategy(cls)
        document = self.document
        applied: list[str] = []
        for agent in agents:
            state = self._agent(agent)
            if state.switches >= self.profile.config_switches:
                continue
            new = self._candidate(document, agent, chosen)
            if new is not None:
                document = new
                applied.append(agent)
        version = None
        if applied:
            for agent in applied:
                state = self._agent(agent)
                state.switches += 1
                if chosen not in state.tried:
                    state.tried.append(chosen)
            version = self._advance(document, number)
            versions.append(self.made[-1])
        decisions.append(
            Decision(
                number,
                "I",
                "aggregate",
                "run",
                len(agents),
                need,
                cls,
                chosen if applied else strategy.ESCALATE,
                version,
            )
        )
        self.fires += 1

    def _trends(
        self,
        step: Step,
        number: int,
        paced: Sequence[Reading],
        decisions: list[Decision],
        versions: list[Version],
    ) -> None:
        """CUSUM on the step's pace readings (``paced``: those of ``sensors.PACE``)."""
        trends = self.trends
        for reading in paced:
            key = f"agent:{step.agent}:{reading.sensor}"
            result = cusum.update(self.params.cusum, trends.get(key, _FRESH), reading.value)
            trends[key] = result.state
            if not result.alarm:
                continue
            agent_key = f"agent:{step.agent}"
            version = None
            if 2 * self.level(agent_key) >= self.params.threshold:
                latest = next(
                    (c for _, c, _ in reversed(self.windows.get(agent_key, [])) if c is not None),
                    None,
                )
                action, version = self._switch(step, number, latest)
                self.keys.reset(agent_key)
            else:
                action = strategy.WARN
            decisions.append(
                Decision(
                    number,
                    "D",
                    "cusum",
                    key,
                    result.statistic,
                    result.threshold,
                    step.cls,
                    action,
                    version,
                )
            )
            if version is not None:
                versions.append(self.made[-1])

    def _rate(self, number: int, decisions: list[Decision]) -> None:
        """At the end of each ``rate_window`` steps (``observe`` calls it then)."""
        current, previous = self.fires, self.previous_fires
        self.previous_fires, self.fires = current, 0
        needed = max(RATE_MINIMUM, 2 * previous + 1)
        if current >= needed:
            decisions.append(
                Decision(number, "D", "rate", "run", current, needed, None, "escalate", None)
            )

    def _selftest(self, step: Step, number: int, decisions: list[Decision]) -> None:
        """The meta layer's self-test: on schedule, one synthetic anomaly into the agent's
        shadow key only (never a real key: it cannot change a real outcome), flagged by the
        real sensor rule; a probe the rule does not flag, or that leaks, is an alert."""
        every = self.params.meta.selftest_every
        if not meta.selftest_due(number, every):
            return
        sensor, value = meta.selftest_probe(number, every)
        flagged = sensors.anomalous(sensor, value)
        key = meta.shadow_key(step.agent)
        self.keys.push(key, flagged, None, step.agent, False)
        problem = meta.selftest_problem(
            sensor, value, flagged=flagged, keys=[key], agent=step.agent
        )
        action = "detected" if problem is None else strategy.ESCALATE
        decisions.append(Decision(number, "meta", "selftest", key, value, 0, sensor, action, None))

    def judge(self, alert: str, verdict: str) -> str | None:
        """The operator's verdict on an alert (``confirmed``: it was right; ``overridden``:
        it was a false alarm); the reason it cannot be taken, or None. Weighed at the next
        step."""
        if verdict not in VERDICTS:
            return f"verdict {verdict!r} is not one of {', '.join(VERDICTS)}"
        if alert not in self.pending:
            return f"alert {alert!r} is not waiting for a verdict"
        del self.pending[alert]
        self.outcomes.append(verdict)
        return None

    def _alerts(self, number: int, decisions: list[Decision]) -> None:
        """The false-alarm rate (meta layer): an alert nobody judged within the phase's
        window of steps counts as ignored; each new outcome re-weighs the last
        ``alert_window`` ones, and the moment they cross into crying wolf is a meta
        escalation (not itself an alert). Then this step's alerts start waiting."""
        window = self.k
        if self.pending:
            for alert, at in list(self.pending.items()):  # all become "ignored": order is moot
                if at + window <= number:
                    del self.pending[alert]
                    self.outcomes.append("ignored")
        params = self.params.meta
        if len(self.outcomes) > self.judged:
            self.judged = len(self.outcomes)
            crying = meta.cries_wolf(self.outcomes, params.alert_window, params.false_alarm_pm)
            if crying and not self.crying:
                rate = meta.false_alarm_pm(self.outcomes, params.alert_window)
                decisions.append(
                    Decision(
                        number, "meta", "falsealarm", "run", rate, params.false_alarm_pm,
                        None, strategy.ESCALATE, None,
                    )
                )  # fmt: skip
            self.crying = crying
        for decision in decisions:
            if meta.is_alert(decision.action) and decision.rule != "falsealarm":
                self.pending[f"{decision.step}:{decision.key}"] = number

    def reviews(self, previous: int, *, heightened: bool) -> tuple[meta.Review, ...]:
        """The meta layer's reviews for the progress step from ``previous`` to the current
        progress (after ``settle``, in the phase it entered): one per review point (25, 50,
        75 %) it passes, over the steps so far."""
        points = meta.progress_reviews(previous, self.progress)
        return tuple(
            meta.review(
                point,
                classes=self.classes,
                changes=self.changes,
                landed=self.landed,
                window=self.profile.window,
                now=self.steps,
                params=self.params.meta,
                heightened=heightened,
            )
            for point in points
        )

    # -- strategies ---------------------------------------------------------------------

    def _tools(self, agent: str) -> list[str]:
        return sorted({tool for _, tools in self.tasks.get(agent, ()) for tool in tools})

    def _candidate(
        self, document: Mapping[str, Any], agent: str, chosen: str
    ) -> dict[str, Any] | None:
        """``document`` after ``chosen`` for ``agent``, when it changes something and (for
        the slow channel) stays consistent; else None."""
        new = configchain.apply(document, agent, chosen, self._tools(agent), self.risky)
        if new is None:
            return None
        change = configchain.classify(document, new)
        if configchain.channel(change) == "slow" and not configchain.consistent(
            new, [agent], self.tasks, self.denied
        ):
            return None
        return new

    def _candidates(self, agent: str) -> dict[str, dict[str, Any] | None]:
        """``_candidate`` of each config switch for ``agent`` on the current document,
        kept per (version, agent): the inputs besides the document never change in a run,
        and an agent whose switches are spent keeps crossing (each crossing then escalates
        at the cost of a lookup, not of three document builds)."""
        key = (self.version, agent)
        found = self._candidates_at.get(key)
        if found is None:
            found = self._candidates_at[key] = {
                s: self._candidate(self.document, agent, s) for s in strategy.SWITCHES
            }
        return found

    def _switch(self, step: Step, number: int, cls: str | None) -> tuple[str, int | None]:
        state = self._agent(step.agent)
        profile = self.profile
        candidates = self._candidates(step.agent)
        available = [s for s in sorted(strategy.SWITCHES) if candidates[s] is not None]
        chosen = strategy.choose(
            cls,
            tried=state.tried,
            available=available,
            switches_left=profile.config_switches - state.switches,
            topology_left=profile.topology_changes - state.topology,
            spaced=phases.topology_spaced(self.last_topology, number),
        )
        if chosen == strategy.ESCALATE:
            return chosen, None
        state.tried.append(chosen)
        if chosen in strategy.TOPOLOGY:
            state.topology += 1
            self.last_topology = number
            return chosen, None
        new = candidates[chosen]
        assert new is not None  # it was available
        state.switches += 1
        return chosen, self._advance(new, number)

    def _split(self, step: Step, number: int) -> str:
        state = self._agent(step.agent)
        if (
            "split" not in state.tried
            and state.topology < self.profile.topology_changes
            and phases.topology_spaced(self.last_topology, number)
        ):
            state.tried.append("split")
            state.topology += 1
            self.last_topology = number
            return "split"
        return strategy.ESCALATE

    def _advance(self, document: dict[str, Any], number: int) -> int:
        old = self.document
        change = configchain.classify(old, document)
        self.version += 1
        version = Version(
            self.version,
            self.sha256,
            configchain.document_sha256(document),
            document,
            change,
            configchain.channel(change),
            number,
            tuple(configchain.impact(old, document)),
        )
        self.document = document
        self.sha256 = version.sha256
        self.made.append(version)
        self._candidates_at.clear()  # they were the old document's
        return self.version
