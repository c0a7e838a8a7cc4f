"""Journal blobs as bundle members (journal/<sha256>), end to end: export, verify, tamper.

A lawful runtime-shaped run (tests/test_rules_evidence.py) whose batch was proxied: its
exchanges come from a real ProxyServer in front of the fake model server, its journal is the
proxy's. ``export_bundle`` must carry exactly the blobs the journaled exchanges name, last in
the tar; the verifier must recompute every key from its request blob. Each tamper (a blob that
does not match its name, a key that does not recompute, a journal source with no blob, an
extra member, a missing member, any flipped byte of a journal member) is refused, naming the
member or the record and the reason.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.plandoc import plan_bytes
from harness.orchestrate.proxy import Exchange
from harness.receipts.bundle import ExportError, export_bundle
from harness.receipts.run import RunRecorder
from harness.verify.bundle import verify_bundle
from harness.verify.layout import (
    JOURNAL_REQUEST_MAX_BYTES,
    canonical_member_order,
    journal_digest,
    journal_member,
)
from harness.verify.modelkey import exchange_key
from harness.verify.policy import TrustPolicy
from harness.verify.report import Report

from .corpus import Bundle, member_offsets, write_tar
from .evidence_helpers import make_keys, with_control
from .exchange_helpers import Session, live_session, replay_session
from .fake_model_server import FakeModelServer
from .proxy_helpers import allow_list, body_of, call, make_proxy
from .test_rules_evidence import PLAN, RUN, lawful

KEYS = make_keys()
PINS = TrustPolicy(frozenset({KEYS.key_id}), "test")
Body = dict[str, Any]
Change = Callable[[list[tuple[str, str, Body]]], list[tuple[str, str, Body]]]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModelServer]:
    server = FakeModelServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("journal")


@pytest.fixture(scope="module")
def live(fake: FakeModelServer, journal: Path) -> Session:
    return live_session(fake, journal, batch="b0001")


@pytest.fixture(scope="module")
def replayed(fake: FakeModelServer, journal: Path, live: Session) -> Session:
    return replay_session(fake, journal, batch="b0001")


def _records(session: Session, change: Change | None = None) -> list[tuple[str, str, Body]]:
    out: list[tuple[str, str, Body]] = []
    for store, kind, body in lawful():
        if kind == "agent.spawn":
            body = {**body, "sandbox": {**body["sandbox"], "egress": session.egress}}
            out.append((store, kind, body))
            out += [("audit", "model.source", source) for source in session.sources()]
            continue
        out.append((store, kind, body))
    out += [("replay", "model.exchange", body) for body in session.bodies()]
    return change(out) if change is not None else out


def _state(tmp: Path, session: Session, journal: Path, change: Change | None = None) -> Path:
    state = tmp / "state"
    with RunRecorder(state, RUN, KEYS, clock=LogicalClock()) as recorder:
        document = plan_bytes(PLAN)
        recorder.write_plan(document)
        for store, kind, body in with_control(_records(session, change), document):
            recorder.record(store, kind, body)
        recorder.checkpoint_all()
    shutil.copytree(journal / "blobs", state / "journals" / RUN / "blobs")
    return state


def _export(tmp: Path, session: Session, journal: Path, change: Change | None = None) -> bytes:
    state = _state(tmp, session, journal, change)
    return export_bundle(state, tmp / "bundle.tar", KEYS).path.read_bytes()


def _verify(data: bytes) -> Report:
    return verify_bundle(io.BytesIO(data), pins=PINS)


def _refused(report: Report, check: str, *parts: str) -> None:
    assert report.status.value == "invalid", report.checks
    assert report.failure is not None
    assert report.failure.check == check, report.failure
    for part in parts:
        assert part in report.failure.reason, report.failure.reason


def _referenced(session: Session) -> set[str]:
    out: set[str] = set()
    for exchange in session.exchanges:
        if exchange.journaled:
            assert exchange.request_sha256 and exchange.response_sha256
            out |= {exchange.request_sha256, exchange.response_sha256}
    return out


def _names(data: bytes) -> list[str]:
    return [name for name, *_ in member_offsets(data)]


# ---- lawful ------------------------------------------------------------------------------------


def test_a_proxied_run_exports_and_verifies_with_its_journal(
    tmp_path: Path, live: Session, journal: Path
) -> None:
    data = _export(tmp_path, live, journal)
    report = _verify(data)
    assert report.status.value == "verified", report.failure
    names = _names(data)
    blobs = [name for name in names if journal_digest(name)]
    assert {journal_digest(name) for name in blobs} == _referenced(live)
    assert names[-len(blobs) :] == sorted(blobs), "journal members come last, sorted"
    semantics = next(c for c in report.checks if c.name == "semantics")
    keys = sum(e.journaled for e in live.exchanges)
    assert f"{len(blobs)} journal blobs match, {keys} keys recompute" in semantics.detail
    again = export_bundle(_state(tmp_path / "again", live, journal), tmp_path / "b2.tar", KEYS)
    assert again.path.read_bytes() == data, "deterministic"


def test_a_replayed_run_verifies(tmp_path: Path, replayed: Session, journal: Path) -> None:
    assert {e.source for e in replayed.exchanges if e.outcome == "answered"} == {"journal"}
    report = _verify(_export(tmp_path, replayed, journal))
    assert report.status.value == "verified", report.failure


# ---- export ------------------------------------------------------------------------------------


def test_export_names_a_missing_or_altered_blob(
    tmp_path: Path, live: Session, journal: Path
) -> None:
    state = _state(tmp_path, live, journal)
    digest = sorted(_referenced(live))[0]
    blob = state / "journals" / RUN / "blobs" / digest
    original = blob.read_bytes()
    blob.write_bytes(original + b" ")
    with pytest.raises(ExportError, match=f"{digest}: journal blob was altered"):
        export_bundle(state, tmp_path / "x.tar", KEYS)
    blob.unlink()
    with pytest.raises(
        ExportError, match=f"replay.jsonl record .*journal blob {digest} is missing"
    ):
        export_bundle(state, tmp_path / "x.tar", KEYS)
    other = state / "journals" / "older-run" / "blobs"  # a replay may read another run's journal
    other.mkdir(parents=True)
    (other / digest).write_bytes(original)
    assert _verify(export_bundle(state, tmp_path / "x.tar", KEYS).path.read_bytes()).exit_code == 0


# ---- tampering ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lawful_bundle(tmp_path_factory: pytest.TempPathFactory, live: Session, journal: Path) -> Bundle:
    data = _export(tmp_path_factory.mktemp("lawful"), live, journal)
    return Bundle.from_tar(data, KEYS)


def _request_digest(live: Session) -> str:
    exchange = next(e for e in live.exchanges if e.journaled)
    assert exchange.request_sha256 is not None
    return exchange.request_sha256


def test_a_blob_that_does_not_match_its_name_is_refused(lawful_bundle: Bundle) -> None:
    bundle = lawful_bundle.copy()
    name = sorted(n for n in bundle.members if journal_digest(n))[0]
    bundle.members[name] = bundle.members[name].replace(b"e", b"E", 1)
    _refused(_verify(bundle.resign()), "semantics", name, "hash to", "not to its name")


def test_an_unreferenced_member_is_refused(lawful_bundle: Bundle) -> None:
    bundle = lawful_bundle.copy()
    extra = b'{"smuggled": true}'
    name = journal_member(hashlib.sha256(extra).hexdigest())
    bundle.members[name] = extra
    _refused(_verify(bundle.resign()), "semantics", name, "no journaled model.exchange names")


def test_a_missing_member_is_refused(lawful_bundle: Bundle, live: Session) -> None:
    name = journal_member(_request_digest(live))
    bundle = lawful_bundle.copy()
    del bundle.members[name]
    _refused(_verify(bundle.resign()), "semantics", name, "request blob of", "not in the bundle")
    # listed in the signed manifest, absent from the archive: the members check
    members = dict(Bundle.from_tar(lawful_bundle.resign(), KEYS).members)
    del members[name]
    _refused(
        _verify(write_tar([(n, members[n]) for n in canonical_member_order(list(members))])),
        "members",
        name,
    )


def test_members_out_of_order_are_refused(lawful_bundle: Bundle) -> None:
    data = lawful_bundle.resign()
    members = Bundle.from_tar(data, KEYS).members
    head = ["manifest.json", "manifest.sig"]
    rest = sorted(n for n in members if n not in head)  # journal/ before keys/ and runs/
    report = _verify(write_tar([(n, members[n]) for n in head + rest]))
    assert report.status.value == "unreadable"
    assert report.failure is not None and "journal/ members last" in report.failure.reason


def _exchange(change: Callable[[Body], Body], which: Callable[[Body], bool]) -> Change:
    def apply(records: list[tuple[str, str, Body]]) -> list[tuple[str, str, Body]]:
        out, done = [], False
        for store, kind, body in records:
            if kind == "model.exchange" and not done and which(body):
                body, done = change(dict(body)), True
            out.append((store, kind, body))
        assert done
        return out

    return apply


def test_a_key_that_does_not_recompute_is_refused(
    tmp_path: Path, live: Session, journal: Path
) -> None:
    wrong = _exchange(lambda b: {**b, "key": "0" * 64}, lambda b: b["journaled"])
    report = _verify(_export(tmp_path / "a", live, journal, wrong))
    _refused(report, "semantics", "journal/", "replay.jsonl line", "does not recompute")
    headers = _exchange(
        lambda b: {**b, "parameters": {**b["parameters"], "headers": {"anthropic-beta": "x"}}},
        lambda b: b["journaled"] and b["family"] == "anthropic",
    )
    report = _verify(_export(tmp_path / "b", live, journal, headers))
    _refused(report, "semantics", "does not recompute")  # headers are inputs of the key
    stream = _exchange(
        lambda b: {**b, "stream": True, "parameters": {**b["parameters"], "stream": True}},
        lambda b: b["journaled"] and not b["stream"],
    )
    report = _verify(_export(tmp_path / "d", live, journal, stream))
    _refused(report, "semantics", "recorded parameters do not match the request body")
    model = _exchange(lambda b: {**b, "model": "other-model"}, lambda b: b["journaled"])
    _refused(_verify(_export(tmp_path / "c", live, journal, model)), "semantics", "model/stream")


def test_a_journal_source_without_a_blob_is_refused(
    tmp_path: Path, live: Session, journal: Path
) -> None:
    unjournaled = next(e for e in live.exchanges if e.outcome == "answered" and not e.journaled)

    def journal_source(records: list[tuple[str, str, Body]]) -> list[tuple[str, str, Body]]:
        return [
            (s, k, {**b, "source": "journal"} if k == "model.source" and b["seq"] == unjournaled.seq
             else b)
            for s, k, b in records
        ]  # fmt: skip

    report = _verify(_export(tmp_path, live, journal, journal_source))
    _refused(report, "semantics", "source 'journal'", "which has no journaled answer (no blob)")


# ---- every flipped byte of a journal member ------------------------------------------------


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory, fake: FakeModelServer) -> bytes:
    folder = tmp_path_factory.mktemp("small")
    journal = folder / "journal"
    with make_proxy(fake.base, journal) as proxy:
        assert call(proxy.port, "/openai/v1/responses", body_of("responses", False))[0] == 200
    session = Session("b0001", allow_list(fake.base).describe(), list(proxy.exchanges()))
    return _export(folder, session, journal)


def test_every_byte_of_the_journal_members_is_bound(small: bytes) -> None:
    assert _verify(small).exit_code == 0
    spans = [
        (header, data + size + (-size % tarfile.BLOCKSIZE), data, size)
        for name, header, data, size in member_offsets(small)
        if journal_digest(name)
    ]
    assert len(spans) == 2
    buffer = bytearray(small)
    problems = []
    for start, end, data, size in spans:
        for offset in range(start, end):
            masks = (0x01, 0x80) if data <= offset < data + size else (0x01,)
            for mask in masks:
                buffer[offset] ^= mask
                try:
                    report = _verify(bytes(buffer))
                    if report.exit_code == 0 or report.failure is None:
                        problems.append(f"{offset} ^ {mask:#x}: accepted")
                except Exception as exc:  # never raises for bad input
                    problems.append(f"{offset}: raised {exc!r}")
                finally:
                    buffer[offset] ^= mask
    assert not problems, problems[:20]


def test_journal_members_are_not_bundled_without_references(tmp_path: Path) -> None:
    """A run with no proxied batch has no journal member, whatever lies in its journal."""
    state = tmp_path / "state"
    with RunRecorder(state, RUN, KEYS, clock=LogicalClock()) as recorder:
        document = plan_bytes(PLAN)
        recorder.write_plan(document)
        for store, kind, body in with_control(lawful(), document):
            recorder.record(store, kind, body)
        recorder.checkpoint_all()
    blobs = state / "journals" / RUN / "blobs"
    blobs.mkdir(parents=True)
    (blobs / ("0" * 64)).write_bytes(b"stray")
    data = export_bundle(state, tmp_path / "b.tar", KEYS).path.read_bytes()
    assert not [n for n in _names(data) if journal_digest(n)]
    assert _verify(data).exit_code == 0


# ---- bounds on request blobs -------------------------------------------------------------------


def _crafted(request: bytes, response: bytes = b'{"type":"message"}') -> Session:
    """A session of one journaled Anthropic answer with these exact blobs (no proxy needed:
    the bounds are the verifier's, whatever the proxy accepted)."""
    found = exchange_key("anthropic", request, "POST", "/v1/messages", {})
    exchange = Exchange(
        seq=1, route="anthropic", method="POST", path="/v1/messages", outcome="answered",
        status=200, source="live", family="anthropic", api="anthropic-messages",
        upstream="https://api.anthropic.com:443", key=found.key, model=found.model,
        stream=found.stream, parameters=found.parameters,
        request_sha256=hashlib.sha256(request).hexdigest(),
        response_sha256=hashlib.sha256(response).hexdigest(), journaled=True,
        response_bytes=len(response),
    )  # fmt: skip
    egress: list[dict[str, object]] = [
        {"credential": True, "family": "anthropic", "host": "api.anthropic.com",
         "path_prefix": "/v1/", "port": 443, "route": "anthropic", "scheme": "https"},
    ]  # fmt: skip
    return Session("b0001", egress, [exchange])


def _blob_folder(tmp: Path, *blobs: bytes) -> Path:
    folder = tmp / "journal"
    (folder / "blobs").mkdir(parents=True)
    for blob in blobs:
        (folder / "blobs" / hashlib.sha256(blob).hexdigest()).write_bytes(blob)
    return folder


def test_a_tool_heavy_request_passes_and_a_container_bomb_does_not(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(8)}}
    tools = [{"name": f"tool{i}", "description": "d", "input_schema": schema} for i in range(80)]
    real = json.dumps({"model": "claude-x", "max_tokens": 64, "tools": tools,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()  # fmt: skip
    response = b'{"type":"message"}'
    report = _verify(_export(tmp_path / "a", _crafted(real), _blob_folder(tmp_path / "a", real,
                                                                          response)))  # fmt: skip
    assert report.status.value == "verified", report.failure
    bomb = b'{"model":"m","x":[' + b",".join([b"[]"] * 30000) + b"]}"
    report = _verify(_export(tmp_path / "b", _crafted(bomb), _blob_folder(tmp_path / "b", bomb,
                                                                          response)))  # fmt: skip
    _refused(report, "semantics", journal_member(hashlib.sha256(bomb).hexdigest()), "too dense")


def test_a_request_blob_over_the_limit_is_refused_unread(tmp_path: Path) -> None:
    big = b'{"model":"m","text":"' + b"x" * (JOURNAL_REQUEST_MAX_BYTES + 1) + b'"}'
    response = b'{"type":"message"}'
    data = _export(tmp_path, _crafted(big), _blob_folder(tmp_path, big, response))
    report = _verify(data)
    assert report.status.value == "unreadable", report.failure
    assert report.failure is not None
    assert "over the 16777216-byte limit" in report.failure.reason
