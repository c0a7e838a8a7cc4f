"""The exchanges check (verify/exchangecheck.py) folded over model.exchange / model.source records.

First the records of a real proxy (live, strict replay, a dead upstream) must pass: the rules
are the proxy's behaviour, not a wish. Then each rule (E1-E6, docs/spec/proxy.md §9) is broken
one at a time and the check must name the record and the reason.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from harness.verify.errors import SchemaError
from harness.verify.exchangecheck import ExchangeCheck, ExchangeError, egress_routes
from harness.verify.records import Record, check_body

from .exchange_helpers import Session, error_session, live_session, replay_session
from .fake_model_server import FakeModelServer

HEX = "ab" * 32


def rec(store: str, kind: str, body: dict[str, Any]) -> Record:
    return Record(store, "r", 0, "2026-01-01T00:00:00.000000Z", kind, body, HEX)


def spawn(batch: str, egress: Any) -> Record:
    sandbox: dict[str, Any] = {"kind": "bwrap", "network": False, "private_mounts": False}
    if egress is not ...:
        sandbox["egress"] = egress
    return rec("audit", "agent.spawn", {"batch": batch, "tasks": ["t1"], "sandbox": sandbox})


def fold(
    audit: list[Record], replay: list[dict[str, Any]], *, finish: bool = True
) -> ExchangeCheck:
    check = ExchangeCheck("r")
    for index, record in enumerate(audit):
        check.audit(record, f"audit seq {index}")
    for index, body in enumerate(replay):
        check.replay(rec("replay", "model.exchange", body), f"replay seq {index}")
    if finish:
        check.finish()
    return check


def usage(session: Session) -> dict[str, int | None]:
    """``agent.exit.usage`` as the runtime writes it for a proxied batch (E7)."""
    tokens_in = tokens_out = 0
    for e in session.exchanges:
        if e.outcome == "answered" and e.usage is not None:
            tokens_in += e.usage.input_tokens or 0
            if e.family == "anthropic":
                tokens_in += (e.usage.cache_read or 0) + (e.usage.cache_write or 0)
            tokens_out += e.usage.output_tokens or 0
    return {"input_tokens": tokens_in, "output_tokens": tokens_out, "cost_micros": None}


def records_of(*sessions: Session) -> tuple[list[Record], list[dict[str, Any]]]:
    audit: list[Record] = []
    replay: list[dict[str, Any]] = []
    for session in sessions:
        audit.append(spawn(session.batch, session.egress))
        audit += [rec("audit", "model.source", body) for body in session.sources()]
        audit.append(rec("audit", "agent.exit", {"batch": session.batch, "usage": usage(session)}))
        replay += session.bodies()
    return audit, replay


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Session, ...]]:
    fake = FakeModelServer().start()
    journal = tmp_path_factory.mktemp("journal")
    try:
        live = live_session(fake, journal)
        replayed = replay_session(fake, journal)
        failed = error_session(tmp_path_factory.mktemp("dead"))
        yield live, replayed, failed
    finally:
        fake.stop()


def test_a_real_proxys_records_pass(sessions: tuple[Session, ...]) -> None:
    outcomes = {e.outcome for s in sessions for e in s.exchanges}
    assert outcomes == {"answered", "refused", "replay-miss", "error"}
    assert {e.status for e in sessions[0].exchanges} >= {200, 400, 403, 429}
    check = fold(*records_of(*sessions))
    journaled = [e for s in sessions for e in s.exchanges if e.journaled]
    assert [(r.batch, r.seq) for r in check.journal_refs] == [
        (s.batch, e.seq) for s in sessions for e in s.exchanges if e.journaled
    ]
    assert len(journaled) == 6  # 4 live answers + 2 from the journal
    assert check.exchanges == sum(len(s.exchanges) for s in sessions)


# ---- E1, E2: the batch and its egress --------------------------------------------------------


def test_egress_entries_are_checked(sessions: tuple[Session, ...]) -> None:
    live = sessions[0]
    assert sorted(egress_routes(live.egress, "e")) == ["anthropic", "openai"]
    entry = live.egress[0]
    for bad, reason in [
        ({}, "must be a list"),
        ([{**entry, "extra": 1}], "exactly the members"),
        ([entry, entry], "sorted and distinct"),
        ([live.egress[1], entry], "sorted and distinct"),
        ([{**entry, "route": "Up"}], "route must match"),
        ([{**entry, "port": 0}], "port"),
        ([{**entry, "scheme": "ftp"}], "scheme"),
        ([{**entry, "credential": "yes"}], "credential"),
        ([{**entry, "path_prefix": "v1"}], "path_prefix"),
    ]:
        with pytest.raises(ExchangeError, match=reason):
            fold([spawn("b1", bad)], [])
    start = rec("audit", "run.start", {"sandbox": {"kind": "bwrap", "egress": live.egress}})
    with pytest.raises(
        ExchangeError, match=r"audit seq 0: .*run.start.sandbox.egress must be \[\]"
    ):
        fold([start], [])
    fold([rec("audit", "run.start", {"sandbox": {"kind": "bwrap", "egress": []}})], [])


def test_an_exchange_needs_a_proxied_spawned_batch(sessions: tuple[Session, ...]) -> None:
    live = sessions[0]
    body = live.bodies()[0]
    with pytest.raises(ExchangeError, match=r"replay seq 0: .*batch 'b1', which was never spawned"):
        fold([], [body])
    with pytest.raises(ExchangeError, match="has an empty egress: not proxied"):
        fold([spawn("b1", [])], [body])
    with pytest.raises(ExchangeError, match="records no egress: not proxied"):
        fold([spawn("b1", ...)], [body])


def test_seq_starts_at_zero_and_increases(sessions: tuple[Session, ...]) -> None:
    live = sessions[0]
    audit, replay = records_of(live)
    assert [body["seq"] for body in replay] == list(range(1, len(replay) + 1))
    with pytest.raises(ExchangeError, match="seq 2 must start at 1"):
        fold(audit, replay[1:], finish=False)
    with pytest.raises(ExchangeError, match="seq 2 must follow 2"):
        fold(audit, [replay[0], replay[1], replay[1]], finish=False)
    with pytest.raises(ExchangeError, match="seq 1 must follow 2"):
        fold(audit, [replay[0], replay[1], replay[0]], finish=False)
    zero = {**replay[0], "seq": 0}
    with pytest.raises(ExchangeError, match="seq 0 must start at 1"):
        fold(audit, [zero], finish=False)


# ---- E3-E5: one exchange -----------------------------------------------------------------------


def _changed(session: Session, index: int, **changes: Any) -> tuple[list[Record], list[Any]]:
    audit, replay = records_of(session)
    replay = copy.deepcopy(replay)
    replay[index].update(changes)
    return audit, replay


def _first(session: Session, outcome: str, **where: Any) -> int:
    return next(
        i
        for i, e in enumerate(session.exchanges)
        if e.outcome == outcome and all(getattr(e, k) == v for k, v in where.items())
    )


def test_each_member_rule(sessions: tuple[Session, ...]) -> None:
    live, replayed, failed = sessions
    answered = _first(live, "answered", journaled=True, stream=True)
    refused = _first(live, "refused", route="-")
    miss = _first(replayed, "replay-miss")
    error = _first(failed, "error")
    params = live.exchanges[answered].parameters
    assert params is not None
    cases: list[tuple[Session, int, dict[str, Any], str]] = [
        (live, answered, {"route": "google"}, "route 'google' is not on the batch's egress"),
        (live, refused, {"outcome": "answered"}, "route '-' is only for a refusal"),
        (live, answered, {"family": "openai"}, "family 'openai' is not that of route 'anthropic'"),
        (live, answered, {"upstream": "https://evil:443"}, "upstream 'https://evil:443' is not"),
        (live, answered, {"api": "openai-chat"}, "api 'openai-chat' is not what anthropic says"),
        (live, answered, {"api": None}, "family, api and upstream must be null together"),
        (live, answered, {"model": None}, "key, model and parameters must be null together"),
        (live, answered, {"parameters": {**params, "extra": 1}}, "exactly the members"),
        (live, answered, {"parameters": {**params, "path": "/v1/x"}}, "method and .path"),
        (live, answered, {"parameters": {**params, "stream": False}}, "parameters.stream"),
        (live, answered, {"parameters": {**params, "headers": {"x-other": "1"}}}, "headers"),
        (live, refused, {"stream": True}, "stream is true without a keyed request"),
        (live, refused, {"request_sha256": HEX}, "a request digest needs a key"),
        (failed, error, {"response_bytes": 5}, "response bytes without a response digest"),
        (live, answered, {"status": 201}, "journaled needs both digests and status 200"),
        (live, answered, {"request_sha256": None}, "journaled needs both digests"),
        (live, answered, {"api": "other"}, "api 'other' is not what"),
        (failed, error, {"usage": live.bodies()[answered]["usage"]}, "usage needs a 200"),
        (live, answered, {"journaled": False}, "must say why"),
        (live, refused, {"status": 500}, "refused needs a 4xx status and a reason"),
        (live, refused, {"reason": None}, "refused needs a 4xx status and a reason"),
        (live, refused, {"journaled": True}, "journaled needs both digests"),
        (live, refused, {"response_sha256": HEX}, "refused has no key, digests, usage"),
        (replayed, miss, {"status": 503}, "replay-miss needs status 502"),
        (replayed, miss, {"response_sha256": HEX}, "replay-miss has a request digest and no"),
        (failed, error, {"reason": None}, "error needs a key, a request digest and a reason"),
        (failed, error, {"status": 404}, "error with status 404"),
    ]
    for session, index, changes, reason in cases:
        audit, replay = _changed(session, index, **changes)
        with pytest.raises(ExchangeError, match="breaks rule exchanges") as caught:
            fold(audit, replay)
        assert reason in str(caught.value), (changes, str(caught.value))
        assert f"replay seq {index}" in str(caught.value)
    non_200 = _first(live, "answered", status=429)
    audit, replay = _changed(live, non_200, usage=live.bodies()[answered]["usage"])
    with pytest.raises(ExchangeError, match="usage needs a 200"):
        fold(audit, replay)


# ---- E6: sources -------------------------------------------------------------------------------


def test_one_source_per_answered_exchange(sessions: tuple[Session, ...]) -> None:
    live = sessions[0]
    audit, replay = records_of(live)
    sources = [i for i, r in enumerate(audit) if r.kind == "model.source"]
    without = [r for i, r in enumerate(audit) if i != sources[0]]
    with pytest.raises(
        ExchangeError, match=r"answered exchange 1 of batch 'b1' has no model.source"
    ):
        fold(without, replay)
    twice = [*audit[: sources[0] + 1], audit[sources[0]], *audit[sources[0] + 1 :]]
    with pytest.raises(ExchangeError, match=r"a second model\.source for batch 'b1' seq 1"):
        fold(twice, replay)
    seq = live.exchanges[_first(live, "refused")].seq
    extra = rec("audit", "model.source", {"batch": "b1", "seq": seq, "source": "live"})
    with pytest.raises(ExchangeError, match=f"exchange {seq} of batch 'b1', which is 'refused'"):
        fold([*audit[:-1], extra, audit[-1]], replay)
    ghost = rec("audit", "model.source", {"batch": "b1", "seq": 99, "source": "live"})
    with pytest.raises(ExchangeError, match=r"exchange 99 of batch 'b1', which has no model.exch"):
        fold([*audit[:-1], ghost, audit[-1]], replay)
    late = [*audit, rec("audit", "model.source", {"batch": "b1", "seq": 98, "source": "live"})]
    with pytest.raises(ExchangeError, match=r"model\.source after batch 'b1' exited"):
        fold(late, replay)
    stray = rec("audit", "model.source", {"batch": "zz", "seq": 0, "source": "live"})
    with pytest.raises(ExchangeError, match=r"model\.source of batch 'zz', never spawned"):
        fold([stray], [])


def _with_source(session: Session, seq: int, source: str) -> tuple[list[Record], list[Any]]:
    audit, replay = records_of(session)
    for index, record in enumerate(audit):
        if record.kind == "model.source" and record.body["seq"] == seq:
            audit[index] = rec("audit", "model.source", {**record.body, "source": source})
    return audit, replay


def test_a_journal_source_needs_a_journaled_answer(sessions: tuple[Session, ...]) -> None:
    live = sessions[0]
    not_journaled = _first(live, "answered", status=429)
    audit, replay = _with_source(live, live.exchanges[not_journaled].seq, "journal")
    with pytest.raises(ExchangeError, match="has no journaled answer"):
        fold(audit, replay)


def test_one_batch_has_one_journal_mode(sessions: tuple[Session, ...]) -> None:
    live, replayed, _ = sessions
    audit, replay = _with_source(live, 1, "journal")
    with pytest.raises(ExchangeError, match="mixes live answers with replayed ones"):
        fold(audit, replay)
    answered = _first(replayed, "answered")
    audit, replay = _with_source(replayed, replayed.exchanges[answered].seq, "live-miss")
    with pytest.raises(ExchangeError, match="strict replay miss but answers that are not from"):
        fold(audit, replay)


# ---- E7: usage ---------------------------------------------------------------------------------


def _exit_usage(session: Session, value: Any) -> tuple[list[Record], list[Any]]:
    audit, replay = records_of(session)
    audit[-1] = rec("audit", "agent.exit", {"batch": session.batch, "usage": value})
    return audit, replay


def test_a_proxied_batchs_usage_is_its_exchanges(sessions: tuple[Session, ...]) -> None:
    live, _, failed = sessions
    figures = usage(live)
    cached = [
        e for e in live.exchanges if e.family == "anthropic" and e.usage and e.usage.cache_read
    ]
    assert cached, "the fake reports Anthropic cache reads: the sum must add them"
    assert figures["input_tokens"] and figures["output_tokens"]
    claimed = {**figures, "output_tokens": 999999}
    with pytest.raises(ExchangeError, match=r"usage tokens \(input, output\) are \[\d+, 999999\]"):
        fold(*_exit_usage(live, claimed))
    cache = sum(
        (e.usage.cache_read or 0) + (e.usage.cache_write or 0)
        for e in live.exchanges
        if e.outcome == "answered" and e.family == "anthropic" and e.usage is not None
    )
    assert cache > 0
    without_cache = {**figures, "input_tokens": (figures["input_tokens"] or 0) - cache}
    with pytest.raises(ExchangeError, match="its answered exchanges sum to"):
        fold(*_exit_usage(live, without_cache))
    with pytest.raises(ExchangeError, match="reports no usage, its exchanges"):
        fold(*_exit_usage(live, None))
    fold(*_exit_usage(failed, None))  # nothing answered: null is the sum
    fold(*_exit_usage(failed, {"input_tokens": 0, "output_tokens": 0, "cost_micros": 5}))


# ---- bad input: only ExchangeError, never a crash ----------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 2**53) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_schema_valid_mutation_is_refused_cleanly(
    sessions: tuple[Session, ...], data: st.DataObject
) -> None:
    """Members replaced by arbitrary JSON that still passes the record schema: the fold
    raises ExchangeError or nothing, never another exception (bad input never crashes)."""
    session = data.draw(st.sampled_from(sessions))
    audit, replay = records_of(session)
    pool: dict[str, list[Any]] = {}
    for other in sessions:
        for other_body in other.bodies():
            for name, value in other_body.items():
                pool.setdefault(name, []).append(value)
    index = data.draw(st.integers(0, len(replay) - 1))
    body = copy.deepcopy(replay[index])
    for _ in range(data.draw(st.integers(1, 3))):
        member = data.draw(st.sampled_from(sorted(body)))
        nested = data.draw(st.booleans()) and isinstance(body[member], dict) and body[member]
        if nested:
            inner = data.draw(st.sampled_from(sorted(body[member])))
            body[member][inner] = data.draw(_json)
        else:
            seen = st.sampled_from(pool[member]).map(copy.deepcopy)
            body[member] = data.draw(st.one_of(seen, seen, seen, _json))
    try:
        check_body("replay", "model.exchange", body)
    except SchemaError:
        event("schema refuses")
        return  # the records check refuses it before any fold
    replay[index] = body
    egress = data.draw(st.sampled_from([session.egress, [], [{"route": 1}], ...]))
    audit[0] = spawn(session.batch, egress)
    with contextlib.suppress(ExchangeError):
        fold(audit, replay)
