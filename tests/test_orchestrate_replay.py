"""The replay journal: keys, live/replay modes, strict misses, integrity, durability."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.orchestrate.replay import (
    Journal,
    JournalEntry,
    JournalIntegrityError,
    ReplayError,
    ReplayMissError,
    call_key,
    text_sha256,
)
from harness.verify.canonical import parse_canonical
from harness.verify.records import check_body

BASE = {
    "temperature": 0.2,
    "max_tokens": 512,
    "system": "You are terse.",
    "tools": [{"name": "edit", "schema": {"type": "object"}}],
    "seed": 7,
}


def answer(text: str) -> Callable[[], str]:
    calls: list[str] = []

    def live() -> str:
        calls.append(text)
        return text

    live.calls = calls  # type: ignore[attr-defined]
    return live


def never() -> str:
    pytest.fail("the live model must not be called")


# ---- keys -----------------------------------------------------------------------------------


def test_key_is_sha256_of_the_canonical_inputs() -> None:
    expected = hashlib.sha256(
        b'{"adapter":"a","model":"m","parameters":{"max_tokens":5},"request":"r"}'
    ).hexdigest()
    assert call_key("a", "m", "r", {"max_tokens": 5}) == expected


def test_key_changes_with_every_input() -> None:
    base = call_key("claude", "opus", "hello", BASE)
    variants = [
        call_key("codex", "opus", "hello", BASE),
        call_key("claude", "sonnet", "hello", BASE),
        call_key("claude", "opus", "hello!", BASE),
        call_key("claude", "opus", "hello", {}),
    ]
    for name, value in [
        ("temperature", 0.3),
        ("max_tokens", 513),
        ("system", "You are verbose."),
        ("tools", [{"name": "edit", "schema": {"type": "string"}}]),
        ("seed", 8),
        ("stop", ["\n"]),
    ]:
        variants.append(call_key("claude", "opus", "hello", {**BASE, name: value}))
    without = {k: v for k, v in BASE.items() if k != "seed"}
    variants.append(call_key("claude", "opus", "hello", without))
    assert base not in variants
    assert len(set(variants)) == len(variants)


def test_key_is_stable_across_ordering_and_container_types() -> None:
    reordered = dict(reversed(list(BASE.items())))
    reordered["tools"] = ({"schema": {"type": "object"}, "name": "edit"},)  # tuple, keys swapped
    assert call_key("a", "m", "r", BASE) == call_key("a", "m", "r", reordered)
    assert call_key("a", "m", "r", {"t": 1.0}) == call_key("a", "m", "r", {"t": 1})
    assert call_key("a", "m", "r", {"t": True}) != call_key("a", "m", "r", {"t": 1})
    assert call_key("a", "m", "r", {"t": None}) != call_key("a", "m", "r", {})


def test_key_refuses_what_is_not_json() -> None:
    for parameters in (
        {"t": float("nan")},
        {"t": float("inf")},
        {"t": {1: "x"}},
        {"t": {1, 2}},
        {"t": b"bytes"},
        {"n": 2**60},
    ):
        with pytest.raises(ValueError):
            call_key("a", "m", "r", parameters)  # type: ignore[arg-type]


# ---- live and replay ------------------------------------------------------------------------


def test_live_then_replay_returns_the_same_without_calling(tmp_path: Path) -> None:
    live = Journal(tmp_path / "j", "live")
    responses = {}
    for index in range(3):
        request = f"question {index} ✓"
        model = answer(f"answer {index}\r\n\x00 ✓ {'x' * index * 1000}")
        responses[request] = live.call("claude", "opus", request, BASE, model)
        assert model.calls  # type: ignore[attr-defined]
    replay = Journal(tmp_path / "j", "replay")
    for request, response in responses.items():
        assert replay.call("claude", "opus", request, BASE, never) == response
    assert len(replay) == 3


def test_live_mode_always_asks_the_model(tmp_path: Path) -> None:
    journal = Journal(tmp_path, "live")
    first = answer("one")
    second = answer("two")
    assert journal.call("a", "m", "q", {}, first) == "one"
    assert journal.call("a", "m", "q", {}, second) == "two"
    assert second.calls == ["two"]  # type: ignore[attr-defined]
    # the latest answer of a key wins
    assert Journal(tmp_path, "replay").call("a", "m", "q", {}, never) == "two"
    assert len(Journal(tmp_path, "replay").entries()) == 2


def test_same_answer_twice_is_recorded_once(tmp_path: Path) -> None:
    journal = Journal(tmp_path, "live")
    journal.call("a", "m", "q", {}, answer("same"))
    journal.call("a", "m", "q", {}, answer("same"))
    assert len((tmp_path / "journal.jsonl").read_bytes().splitlines()) == 1


def test_replay_miss_aborts_with_a_clear_message(tmp_path: Path) -> None:
    Journal(tmp_path, "live").call("a", "m", "known", {}, answer("x"))
    journal = Journal(tmp_path, "replay")
    request = "Refactor the parser.\n" + "y" * 58 + "Z-beyond-80" + "w" * 100
    parameters = {"temperature": 0}
    key = call_key("claude", "opus", request, parameters)
    with pytest.raises(ReplayMissError) as caught:
        journal.call("claude", "opus", request, parameters, never)
    message = str(caught.value)
    assert key in message
    assert "'claude'" in message
    assert "'opus'" in message
    assert repr(request[:80]) in message
    assert "Z-beyond-80" not in message
    assert (caught.value.key, caught.value.adapter, caught.value.model) == (key, "claude", "opus")
    assert isinstance(caught.value, ReplayError)
    # a different parameter is a miss too
    with pytest.raises(ReplayMissError):
        journal.call("a", "m", "known", {"temperature": 0}, never)


def test_replay_on_an_empty_journal_misses(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "nothing-here", "replay")
    assert journal.lookup("0" * 64) is None
    with pytest.raises(ReplayMissError):
        journal.call("a", "m", "q", {}, never)
    assert not (tmp_path / "nothing-here").exists()  # strict replay writes nothing


def test_allow_live_miss_calls_and_records(tmp_path: Path) -> None:
    journal = Journal(tmp_path, "replay", allow_live_miss=True)
    model = answer("fresh")
    assert journal.call("a", "m", "new", {"k": 1}, model) == "fresh"
    assert model.calls == ["fresh"]  # type: ignore[attr-defined]
    assert journal.call("a", "m", "new", {"k": 1}, never) == "fresh"  # now journaled
    assert Journal(tmp_path, "replay").call("a", "m", "new", {"k": 1}, never) == "fresh"


def test_modes_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mode"):
        Journal(tmp_path, "record")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="allow_live_miss"):
        Journal(tmp_path, "live", allow_live_miss=True)
    journal = Journal(tmp_path, "live")
    with pytest.raises(ValueError, match="non-empty"):
        journal.call("", "m", "q", {}, never)
    with pytest.raises(TypeError):
        journal.call("a", "m", "q", {}, lambda: 42)  # type: ignore[arg-type, return-value]


# ---- storage, integrity, durability ---------------------------------------------------------


def test_layout_and_index_lines_are_replay_records(tmp_path: Path) -> None:
    journal = Journal(tmp_path, "live")
    journal.call("scripted", "echo", "req", {}, answer("resp"))
    (line,) = (tmp_path / "journal.jsonl").read_bytes().splitlines()
    body = parse_canonical(line)  # canonical JSON
    check_body("replay", "model.call", body)  # exactly the replay store's model.call body
    assert body == {
        "adapter": "scripted",
        "key": call_key("scripted", "echo", "req", {}),
        "model": "echo",
        "request_sha256": text_sha256("req"),
        "response_sha256": text_sha256("resp"),
    }
    assert (tmp_path / "blobs" / text_sha256("resp")).read_bytes() == b"resp"
    assert (tmp_path / "blobs" / text_sha256("req")).read_bytes() == b"req"
    assert journal.entries() == [JournalEntry(**body)]
    assert journal.entries()[0].body() == body


def test_tampered_blob_is_detected(tmp_path: Path) -> None:
    live = Journal(tmp_path, "live")
    live.call("a", "m", "q", {}, answer("the truth"))
    blob = tmp_path / "blobs" / text_sha256("the truth")
    blob.write_bytes(b"a lie")
    replay = Journal(tmp_path, "replay")
    key = call_key("a", "m", "q", {})
    with pytest.raises(JournalIntegrityError, match="was altered"):
        replay.lookup(key)
    with pytest.raises(JournalIntegrityError, match="was altered"):
        replay.call("a", "m", "q", {}, never)
    with pytest.raises(JournalIntegrityError, match="was altered"):  # no building on it either
        live.call("a", "m", "other", {}, answer("the truth"))
    blob.unlink()
    with pytest.raises(JournalIntegrityError, match="missing"):
        replay.lookup(key)


def test_tampered_index_is_detected(tmp_path: Path) -> None:
    Journal(tmp_path, "live").call("a", "m", "q", {}, answer("r"))
    index = tmp_path / "journal.jsonl"
    original = index.read_bytes()
    value = json.loads(original)
    for change, match in [
        (original.replace(b'"adapter":"a"', b'"adapter": "a"'), "canonical"),
        (original.replace(b'"model":"m"', b'"model":""'), "non-empty"),
        (original.replace(b'"adapter":"a",', b""), "exactly"),
        (original[:-1] + b"\nnot json\n", "line 2"),
    ]:
        index.write_bytes(change)
        with pytest.raises(JournalIntegrityError, match=match):
            Journal(tmp_path, "replay")
    # an entry whose request digest does not match the request asked
    value["request_sha256"] = text_sha256("another question")
    index.write_bytes(json.dumps(value, separators=(",", ":"), sort_keys=True).encode() + b"\n")
    with pytest.raises(JournalIntegrityError, match="different request"):
        Journal(tmp_path, "replay").call("a", "m", "q", {}, never)


def test_journal_survives_reopen(tmp_path: Path) -> None:
    first = Journal(tmp_path / "j", "live")
    first.call("a", "m", "one", {}, answer("1"))
    del first
    second = Journal(tmp_path / "j", "live")
    assert second.lookup(call_key("a", "m", "one", {})) == "1"
    second.call("a", "m", "two", {}, answer("2"))
    third = Journal(tmp_path / "j" / "journal.jsonl", "replay")  # the index path works too
    assert third.directory == tmp_path / "j"
    assert third.path == tmp_path / "j" / "journal.jsonl"
    assert [third.call("a", "m", q, {}, never) for q in ("one", "two")] == ["1", "2"]


def test_a_torn_last_line_is_ignored_then_repaired(tmp_path: Path) -> None:
    Journal(tmp_path, "live").call("a", "m", "one", {}, answer("1"))
    index = tmp_path / "journal.jsonl"
    with index.open("ab") as handle:
        handle.write(b'{"adapter":"a","key":"00')  # a crash in the middle of an append
    reader = Journal(tmp_path, "replay")
    assert reader.call("a", "m", "one", {}, never) == "1"
    Journal(tmp_path, "live").call("a", "m", "two", {}, answer("2"))
    lines = index.read_bytes().splitlines()
    assert len(lines) == 2
    assert all(parse_canonical(line) for line in lines)
    assert reader.call("a", "m", "two", {}, never) == "2"  # picked up by an open reader


def test_open_journals_see_each_others_appends(tmp_path: Path) -> None:
    writer = Journal(tmp_path, "live")
    reader = Journal(tmp_path, "replay")
    with pytest.raises(ReplayMissError):
        reader.call("a", "m", "q", {}, never)
    writer.call("a", "m", "q", {}, answer("late"))
    assert reader.call("a", "m", "q", {}, never) == "late"


WRITER = """
import sys
from pathlib import Path
from harness.orchestrate.replay import Journal
journal = Journal(Path(sys.argv[1]), "live")
for index in range(int(sys.argv[3])):
    text = f"{sys.argv[2]}-{index}"
    journal.call("a", "m", text, {}, lambda text=text: text.upper() * 50)
"""


def test_concurrent_processes_append_whole_lines(tmp_path: Path) -> None:
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), f"w{n}", "30"])
        for n in range(4)
    ]
    assert [writer.wait(timeout=60) for writer in writers] == [0, 0, 0, 0]
    journal = Journal(tmp_path, "replay")
    assert len(journal) == 120
    for n in range(4):
        for index in range(30):
            text = f"w{n}-{index}"
            assert journal.call("a", "m", text, {}, never) == text.upper() * 50
    assert not [p for p in (tmp_path / "blobs").iterdir() if p.name.startswith(".tmp")]
