"""Bundle-controlled strings are text on every page: a run recorded (real stores, real
chain, real git commit) with a hostile task name, file name, file content, gate name,
reason and agent output. None of them may reach the markup as markup: the raw strings never
appear in an HTML response, each appears escaped, and the parsed pages hold no element or
attribute they could have injected. The same strings round-trip intact through ``data-``
attributes (the page's script finds rows by them) and the JSON API.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from harness.orchestrate import git
from harness.orchestrate.demo import make_repo
from harness.receipts.run import RunRecorder

from .dashboard_helpers import (
    HOSTILE_CONTENT,
    HOSTILE_FILE,
    HOSTILE_REASON,
    HOSTILE_TASK,
    HOSTILE_TEXT,
    parse_html,
)
from .evidence_helpers import make_keys

pytest.importorskip("starlette")
from starlette.testclient import TestClient

from harness.orchestrate.dashboard import create_app

RUN = "hostile"
KEYS = make_keys(21)
RAW = (HOSTILE_TASK, HOSTILE_FILE, HOSTILE_CONTENT.strip(), HOSTILE_TEXT, HOSTILE_REASON)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    repo = tmp_path_factory.mktemp("hostile") / "repo"
    make_repo(repo)
    base = git.head(repo)
    (repo / HOSTILE_FILE).write_text(HOSTILE_CONTENT)
    commit = git.commit_all(repo, "hostile", date="2026-01-01T00:00:00+00:00")
    assert commit is not None
    text = HOSTILE_TEXT.encode()
    digest = hashlib.sha256(text).hexdigest()
    state = repo / ".harness"
    with RunRecorder(state, RUN, KEYS) as run:
        run.record("audit", "task.planned", {
            "task": HOSTILE_TASK, "role": "coder", "priority": 1, "depends": [],
            "adapter": "scripted", "tools": ["edit"],
        })  # fmt: skip
        run.record("audit", "task.transition", {
            "task": HOSTILE_TASK, "from": "planned", "to": "open", "reason": HOSTILE_REASON,
        })  # fmt: skip
        run.record("audit", "gate.result", {
            "task": HOSTILE_TASK, "gate": HOSTILE_TASK, "passed": False, "exit_code": 1,
            "duration_ms": 5,
        })  # fmt: skip
        run.record("audit", "round.step", {
            "task": HOSTILE_TASK, "round": 1, "epoch": 0, "text": digest, "exit_code": 0,
            "claims_success": True, "commit_before": base, "commit_after": commit,
            "changed": True, "paths": [HOSTILE_FILE],
        })  # fmt: skip
        run.record("audit", "command.receipt", {
            "id": "c1", "command": "stop", "control_seq": 0, "outcome": "rejected",
            "reason": HOSTILE_REASON,
        })  # fmt: skip
        run.record("lineage", "artifact.write", {
            "path": HOSTILE_FILE, "sha256": hashlib.sha256(HOSTILE_CONTENT.encode()).hexdigest(),
            "mode": "100644", "parents": [], "parent_mode": None, "actor": "scripted",
            "task": HOSTILE_TASK, "step": 0, "model": None,
        })  # fmt: skip
    rounds = state / "runs" / RUN / "rounds"
    rounds.mkdir()
    (rounds / f"{digest}.txt").write_bytes(text)
    app = create_app(repo, allow_control=True, token=None, host="127.0.0.1", port=8799,
                     keys=KEYS)  # fmt: skip
    with TestClient(app, base_url="http://127.0.0.1:8799") as test_client:
        yield test_client


def _pages(client: TestClient) -> dict[str, str]:
    task = quote(HOSTILE_TASK, safe="")
    return {
        path: client.get(path).text for path in ("/", f"/runs/{RUN}", f"/runs/{RUN}/tasks/{task}")
    }


def _check_no_injection(page: str) -> None:
    for raw in RAW:
        assert raw not in page
    doc = parse_html(page)
    for element in doc.iter()[1:]:
        assert element.tag != "img"
        assert not any(name.startswith("on") for name in element.attrs), element.attrs
        if element.tag == "script":
            assert element.attrs.get("src") == "/static/dashboard.js"
            assert not element.full_text().strip()
    scripts = [e for e in doc.iter() if e.tag == "script"]
    assert len(scripts) == 1


def test_hostile_strings_are_escaped_on_every_page(client: TestClient) -> None:
    pages = _pages(client)
    for path, page in pages.items():
        assert client.get(path).status_code == 200, path
        _check_no_injection(page)
    run_page = pages[f"/runs/{RUN}"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in run_page
    assert "&#x27;&gt;&lt;svg onload=alert(5)&gt;" in run_page  # the receipt's reason
    task_page = pages[f"/runs/{RUN}/tasks/{quote(HOSTILE_TASK, safe='')}"]
    assert "&quot;&gt;&lt;img src=x onerror=alert(2)&gt;.txt" in task_page
    assert "&lt;script&gt;alert(&quot;content&quot;)&lt;/script&gt;" in task_page


def test_hostile_strings_round_trip_as_text(client: TestClient) -> None:
    pages = _pages(client)
    run_doc = parse_html(pages[f"/runs/{RUN}"])
    row = run_doc.find("table", id="tasks").find("tr", **{"data-task": HOSTILE_TASK})
    assert row.by_class("td", "state").full_text() == "open"
    assert row.by_class("td", "reason").full_text() == HOSTILE_REASON
    link = row.find("a").attrs["href"]
    assert link == f"/runs/{RUN}/tasks/{quote(HOSTILE_TASK, safe='')}"
    task_doc = parse_html(pages[f"/runs/{RUN}/tasks/{quote(HOSTILE_TASK, safe='')}"])
    write = task_doc.find("div", **{"data-path": HOSTILE_FILE})
    diff = write.by_class("pre", "diff").full_text()
    assert f"+{HOSTILE_CONTENT.strip()}" in diff.splitlines()
    assert f"+++ b/{HOSTILE_FILE}" in diff
    step = task_doc.find("div", **{"data-kind": "round.step"})
    assert step.find("pre").full_text() == HOSTILE_TEXT  # agent output: text in <pre>
    assert HOSTILE_TASK in task_doc.find("section", id="gates").full_text()


def test_json_api_carries_the_strings_as_json(client: TestClient) -> None:
    response = client.get(f"/api/runs/{RUN}")
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-content-type-options"] == "nosniff"
    data: dict[str, Any] = response.json()
    assert [t["task"] for t in data["tasks"]] == [HOSTILE_TASK]
    task = client.get(f"/api/runs/{RUN}/tasks/{quote(HOSTILE_TASK, safe='')}").json()
    assert task["writes"][0]["path"] == HOSTILE_FILE


def test_the_diff_is_checked_against_the_recorded_digest(client: TestClient) -> None:
    """The blob shown is the one whose bytes hash to the lineage record's digest."""
    task = client.get(f"/api/runs/{RUN}/tasks/{quote(HOSTILE_TASK, safe='')}").json()
    (write,) = task["writes"]
    repo = client.app.state.dashboard.repo  # type: ignore[attr-defined]
    blob = subprocess.run(
        ["git", "-C", str(repo), "show", f"{write['commit']}:{HOSTILE_FILE}"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    assert hashlib.sha256(blob).hexdigest() == write["sha256"]
    assert write["parent_commit"] is not None and write["note"] == ""
