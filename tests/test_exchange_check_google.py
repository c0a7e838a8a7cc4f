"""The exchanges check on Gemini API (family ``google``) records from a real proxy.

The records of a real proxy in front of the fake Gemini endpoints must pass (live, and a
strict replay of the same journal); then each rule the family adds is broken once: the egress
family, the API of a Gemini path, the model and stream the path says (E4), a credential in a
recorded URL (E8), Google's input tokens counted with their cached part (E7), and the journal
key recomputed from the request blob (J4).
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.orchestrate.proxy import AllowList, ProxyServer, Upstream
from harness.orchestrate.replay import Journal
from harness.verify.errors import SchemaError
from harness.verify.exchangecheck import ExchangeError, egress_routes
from harness.verify.modelkey import recompute_exchange_key
from harness.verify.records import check_body

from .exchange_helpers import Session
from .fake_model_server import FakeModelServer
from .proxy_helpers import call
from .test_exchange_check import _json, fold, rec, records_of, spawn

BODY: dict[str, Any] = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
MODELS = "/google/v1beta/models/gemini-x"


def _proxy(base: str, journal: Path, mode: str) -> ProxyServer:
    allow = AllowList([Upstream("google", "google", base, credential="AIza-k")])
    return ProxyServer(allow, Journal(journal, mode)).start()  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Session, Session]]:
    fake = FakeModelServer().start()
    journal = tmp_path_factory.mktemp("journal")
    try:
        with _proxy(fake.base, journal, "live") as proxy:
            port = proxy.port
            assert call(port, f"{MODELS}:generateContent?key=AIza-url", BODY)[0] == 200
            assert call(port, f"{MODELS}:streamGenerateContent?alt=sse", BODY)[0] == 200
            assert call(port, f"{MODELS}:countTokens", BODY)[0] == 200
            assert call(port, "/google/v1beta/models/status-429:generateContent", BODY)[0] == 429
            assert call(port, "/google/v1/models/x:generateContent", BODY)[0] == 403  # prefix
        live = Session("b1", proxy.allow.describe(), list(proxy.exchanges()))
        with _proxy(fake.base, journal, "replay") as replayer:
            assert call(replayer.port, f"{MODELS}:generateContent", BODY)[0] == 200
            assert call(replayer.port, f"{MODELS}:generateContent", {"contents": []})[0] == 502
        replayed = Session("b2", replayer.allow.describe(), list(replayer.exchanges()))
        yield live, replayed
    finally:
        fake.stop()


def test_a_real_proxys_gemini_records_pass(sessions: tuple[Session, Session]) -> None:
    live, replayed = sessions
    assert [e.api for e in live.exchanges] == [
        "google-generate", "google-stream", "other", "google-generate", None,
    ]  # fmt: skip
    for body in live.bodies() + replayed.bodies():
        check_body("replay", "model.exchange", body)  # schema, dict checks and fast path
    check = fold(*records_of(live, replayed))
    assert len(check.journal_refs) == 4  # generate, stream, countTokens, and the replayed one
    for ref in check.journal_refs:  # J4: the key is the request blob's
        journal_blob = json.dumps(BODY).encode()
        assert recompute_exchange_key("google", journal_blob, ref.parameters) == ref.key
    assert egress_routes(live.egress, "e")["google"]["path_prefix"] == "/v1beta/"


def _broken(session: Session, index: int, **changes: Any) -> tuple[list[Any], list[Any]]:
    audit, replay = records_of(session)
    replay = copy.deepcopy(replay)
    replay[index].update(changes)
    return audit, replay


def test_each_gemini_rule_fails_once(sessions: tuple[Session, Session]) -> None:
    live, _ = sessions
    generate, stream = live.bodies()[0], live.bodies()[1]
    cases: list[tuple[int, dict[str, Any], str]] = [
        # E3: a Gemini path's API
        (1, {"api": "google-generate"}, "api 'google-generate' is not what google says"),
        (0, {"api": "openai-chat"}, "api 'openai-chat' is not what google says"),
        # E4: the model and the stream are the path's
        (0, {"model": "gemini-other"}, "model and stream are its path's"),
        (1, {"stream": False, "parameters": {**stream["parameters"], "stream": False}},
         "model and stream are its path's"),
        (0, {"stream": True, "parameters": {**generate["parameters"], "stream": True}},
         "model and stream are its path's"),
        (0, {"parameters": {**generate["parameters"], "headers": {"x-goog-api-key": "k"}}},
         "parameters.headers must be strings named among"),
        # E8: no credential in a recorded URL, whatever else agrees
        (0, {"path": generate["path"] + "?key=AIza-url",
             "parameters": {**generate["parameters"], "path": generate["path"] + "?key=AIza-url"}},
         "carries a credential in the query"),
        (4, {"path": "/v1/models/x:generateContent?alt=sse&k%65y=s"},
         "carries a credential in the query"),
    ]  # fmt: skip
    for index, changes, words in cases:
        with pytest.raises(ExchangeError, match=words):
            fold(*_broken(live, index, **changes))
    # E1: google is an egress family, another name is not
    entry = live.egress[0]
    with pytest.raises(ExchangeError, match="family must be one of anthropic, openai, google"):
        fold([spawn("b1", [{**entry, "family": "cohere"}])], [])


def test_googles_input_tokens_include_the_cache(sessions: tuple[Session, Session]) -> None:
    """E7: promptTokenCount holds the cached part (like OpenAI): a budget that adds
    cache_read again, as it does for Anthropic, disagrees with the exchanges."""
    live, _ = sessions
    audit, replay = records_of(live)
    answered = [b for b in replay if b["outcome"] == "answered" and b["usage"]]
    assert all(b["usage"]["cache_read"] for b in answered)
    exit_at = next(i for i, r in enumerate(audit) if r.kind == "agent.exit")
    usage = dict(audit[exit_at].body["usage"])
    assert usage["input_tokens"] == sum(b["usage"]["input_tokens"] for b in answered)
    fold(audit, replay)
    usage["input_tokens"] += sum(b["usage"]["cache_read"] for b in answered)
    audit[exit_at] = rec("audit", "agent.exit", {"batch": live.batch, "usage": usage})
    with pytest.raises(ExchangeError, match="usage tokens"):
        fold(audit, replay)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_schema_valid_mutations_of_gemini_records_are_refused_cleanly(
    sessions: tuple[Session, Session], data: st.DataObject
) -> None:
    """Members replaced by other records' values or arbitrary JSON: ExchangeError or
    nothing, never another exception."""
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
        seen = st.sampled_from(pool[member]).map(copy.deepcopy)
        body[member] = data.draw(st.one_of(seen, seen, _json))
    try:
        check_body("replay", "model.exchange", body)
    except SchemaError:
        return
    replay[index] = body
    with contextlib.suppress(ExchangeError):
        fold(audit, replay)
