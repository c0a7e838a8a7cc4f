"""The dashboard's routes on real run stores: the demo run (real runtime, worktrees, gates,
rounds, control) and a run recorded with hostile names, through Starlette's TestClient.

Every value a page shows is checked against an independent reading of the stores (the
runtime's own ``task_states``, line counts, ``git show``), so a fold that drifts fails here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.demo import run_demo
from harness.orchestrate.runner.resume import task_states

from .dashboard_helpers import parse_html

pytest.importorskip("starlette")
from starlette.testclient import TestClient

from harness.orchestrate.dashboard import create_app

BASE = "http://127.0.0.1:8799"
RUN = "demo-run"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return run_demo(tmp_path_factory.mktemp("dash") / "demo")


@pytest.fixture(scope="module")
def client(demo: Any) -> Iterator[TestClient]:
    app = create_app(
        demo.repo, allow_control=False, token=None, host="127.0.0.1", port=8799,
        keys_dir=demo.keys_dir,
    )  # fmt: skip
    with TestClient(app, base_url=BASE) as test_client:
        yield test_client


def _audit(demo: Any) -> list[dict[str, Any]]:
    path = demo.repo / ".harness" / "runs" / RUN / "audit.jsonl"
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def test_runs_page_lists_each_run_with_its_cells(client: TestClient, demo: Any) -> None:
    response = client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    doc = parse_html(response.text)
    table = doc.find("table", id="runs")
    rows = table.find_all("tr", **{"data-run": RUN})
    assert len(rows) == 1
    row = rows[0]
    for cell in ("state", "epoch", "outcomes", "seal", "verification"):
        row.by_class("td", cell)
    assert row.find("a").attrs["href"] == f"/runs/{RUN}"
    records = _audit(demo)
    assert row.by_class("td", "epoch").full_text() == "0"
    assert (
        f"{len(records)} of {len(records)} audit records" in row.by_class("td", "seal").full_text()
    )
    states = task_states(demo.repo / ".harness", RUN)
    done = sum(1 for s in states.values() if s == "done")
    assert f"done {done}" in row.by_class("td", "outcomes").full_text()
    assert "ended completed" in row.by_class("td", "state").full_text()


def test_api_runs_is_the_same_data(client: TestClient, demo: Any) -> None:
    data = client.get("/api/runs").json()
    (run,) = data["runs"]
    states = task_states(demo.repo / ".harness", RUN)
    counts: dict[str, int] = {}
    for state in states.values():
        counts[state] = counts.get(state, 0) + 1
    assert run["run"] == RUN
    assert run["outcomes"] == counts
    assert run["records"] == len(_audit(demo))
    assert run["ended"] is True and run["outcome"] == "completed"


def test_run_page_tasks_timeline_control_evidence(client: TestClient, demo: Any) -> None:
    dash = client.app.state.dashboard  # type: ignore[attr-defined]
    assert dash.evidence.wait(RUN, 60)["status"] == "verified"
    response = client.get(f"/runs/{RUN}")
    assert response.status_code == 200
    doc = parse_html(response.text)
    states = task_states(demo.repo / ".harness", RUN)
    tasks = doc.find("table", id="tasks")
    shown = {
        row.attrs["data-task"]: row.by_class("td", "state").full_text()
        for row in tasks.find_all("tr")
        if "data-task" in row.attrs
    }
    assert shown == states
    timeline = doc.find("section", id="timeline")
    bars = timeline.find_all("g")
    spawns = [r for r in _audit(demo) if r["kind"] == "agent.spawn"]
    assert {b.attrs["data-batch"] for b in bars} == {r["body"]["batch"] for r in spawns}
    control = doc.find("section", id="control")
    assert control.find_all("svg"), "the demo records control steps: a trend is drawn"
    assert control.find_all("polyline")
    evidence = doc.find("section", id="evidence")
    folder = demo.repo / ".harness" / "runs" / RUN
    for store in ("audit", "lineage", "replay", "control", "events"):
        row = evidence.find("tr", **{"data-store": store})
        lines = len((folder / f"{store}.jsonl").read_bytes().splitlines())
        assert row.by_class("td", "records").full_text() == str(lines)
        notes = sorted((folder / "checkpoints" / store).glob("*.note"))
        sealed = int(notes[-1].stem) if notes else 0
        assert row.by_class("td", "sealed").full_text() == str(sealed)
        assert row.by_class("td", "unsealed").full_text() == str(lines - sealed)
    verdict = evidence.by_class("span", "verification")
    assert verdict.attrs["data-status"] == "verified"
    body = doc.find("body")
    assert body.attrs["data-cursor"] == str(len(_audit(demo)))
    # read-only: no control form, but the receipts list is there
    assert not doc.find_all("form", id="control-form")
    doc.find("ul", id="receipts")


def test_api_run_matches_the_page(client: TestClient, demo: Any) -> None:
    data = client.get(f"/api/runs/{RUN}").json()
    assert {t["task"]: t["state"] for t in data["tasks"]} == task_states(
        demo.repo / ".harness", RUN
    )
    assert data["control"]["steps"] == sum(1 for r in _audit(demo) if r["kind"] == "control.sensor")
    assert data["evidence"]["stores"]["audit"]["records"] == len(_audit(demo))


def _git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True).stdout


def test_task_page_attempts_gates_rounds_and_diffs(client: TestClient, demo: Any) -> None:
    response = client.get(f"/runs/{RUN}/tasks/add-mul")
    assert response.status_code == 200
    doc = parse_html(response.text)
    assert doc.by_class("strong", "state").full_text() == "done"
    attempts = doc.find("section", id="attempts").find("table")
    assert "b0001" in attempts.full_text()
    gates = doc.find("section", id="gates").full_text()
    assert "unit-tests" in gates and "True" in gates
    write = doc.find("div", **{"data-path": "calc.py"})
    diff = write.by_class("pre", "diff").full_text()
    merge = next(
        r["body"] for r in _audit(demo)
        if r["kind"] == "merge.result" and r["body"]["task"] == "add-mul"
    )  # fmt: skip
    old = _git(demo.repo, "show", f"{merge['commit']}^:calc.py").decode()
    new = _git(demo.repo, "show", f"{merge['commit']}:calc.py").decode()
    assert old != new
    added = [line for line in new.splitlines() if line not in old.splitlines()]
    assert added and all(f"+{line}" in diff.splitlines() for line in added)
    assert merge["commit"] in write.full_text()
    # a new file: diffed against nothing
    created = doc.find("div", **{"data-path": "tests/test_mul.py"})
    assert "--- /dev/null" in created.full_text()


def test_task_page_rounds_with_parsed_headers(client: TestClient, demo: Any) -> None:
    doc = parse_html(client.get(f"/runs/{RUN}/tasks/guide").text)
    rounds = doc.find("section", id="rounds")
    audits = rounds.find_all("div", **{"data-kind": "round.audit"})
    plans = rounds.find_all("div", **{"data-kind": "round.plan"})
    assert audits and plans
    header = audits[0].by_class("p", "header").full_text()
    assert "Status complete" in header and "Integrity clean" in header
    assert "Next " in plans[0].by_class("p", "header").full_text()
    text = audits[0].find("pre").full_text()
    assert text.startswith("Status: complete")
    data = client.get(f"/api/runs/{RUN}/tasks/guide").json()
    assert [r["kind"] for r in data["rounds"]].count("round.audit") == len(audits)


def test_unknown_run_and_task_are_404(client: TestClient) -> None:
    for path in (
        "/runs/nope",
        "/api/runs/nope",
        f"/runs/{RUN}/tasks/nope",
        "/runs/..%2F..%2Fetc",
        f"/api/runs/{RUN}/tasks/nope",
        "/runs/nope/events",
    ):
        assert client.get(path).status_code == 404, path  # fmt: skip


def test_static_assets_are_served(client: TestClient) -> None:
    script = client.get("/static/dashboard.js")
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")
    assert "innerHTML" not in script.text  # data enters the page as text only
    assert client.get("/static/dashboard.css").headers["content-type"].startswith("text/css")


@pytest.mark.parametrize("tamper", ["record", "plan"])
def test_tampered_evidence_fails_the_fresh_export_check(
    demo: Any, tmp_path: Path, tamper: str
) -> None:
    """The evidence check is the verifier's: a record changed after the fact (its MAC no
    longer chains: the stores refuse to export) or a plan document that is not the one
    ``run.start`` recorded (the verifier's digest check) gives ``invalid``."""
    repo = tmp_path / "repo"
    shutil.copytree(demo.repo, repo, symlinks=True)
    folder = repo / ".harness" / "runs" / RUN
    if tamper == "record":
        audit = folder / "audit.jsonl"
        data = audit.read_bytes()
        assert b'"reason":"no dependencies"' in data
        audit.write_bytes(data.replace(b'"no dependencies"', b'"no dependencieS"', 1))
    else:
        plan = folder / "plan.json"
        plan.write_bytes(plan.read_bytes().replace(b'"demo"', b'"dEmo"', 1))
    app = create_app(repo, allow_control=False, token=None, host="127.0.0.1", port=8799,
                     keys_dir=demo.keys_dir)  # fmt: skip
    with TestClient(app, base_url=BASE) as test_client:
        dash = app.state.dashboard
        result = dash.evidence.wait(RUN, 60)
        assert result["status"] == "invalid", result
        page = parse_html(test_client.get(f"/runs/{RUN}").text)
        verdict = page.find("section", id="evidence").by_class("span", "verification")
        assert verdict.attrs["data-status"] == "invalid"


def test_without_keys_the_check_is_unavailable(demo: Any, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "nokeys"))
    app = create_app(demo.repo, allow_control=False, token=None, host="127.0.0.1", port=8799)
    with TestClient(app, base_url=BASE) as test_client:
        (run,) = test_client.get("/api/runs").json()["runs"]
        assert run["verification"]["status"] == "unavailable"


def _snapshot(root: Path) -> dict[str, tuple[int, int, bytes]]:
    out = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        data = path.read_bytes() if path.is_file() else b""
        out[str(path.relative_to(root))] = (info.st_mode, info.st_mtime_ns, data)
    return out


def test_reading_never_writes_to_the_state_or_the_repository(demo: Any) -> None:
    """Every read route and the evidence check (a copy is exported, not the run) leave the
    state folder and git's refs and objects byte-identical, mtimes included."""
    state = demo.repo / ".harness"
    git_dir = demo.repo / ".git"
    before = (_snapshot(state), _snapshot(git_dir / "refs"), sorted(git_dir.iterdir()))
    app = create_app(demo.repo, allow_control=True, token=None, host="127.0.0.1", port=8799,
                     keys_dir=demo.keys_dir)  # fmt: skip
    with TestClient(app, base_url=BASE) as test_client:
        for path in ("/", "/api/runs", f"/runs/{RUN}", f"/api/runs/{RUN}"):
            assert test_client.get(path).status_code == 200
        for task in task_states(state, RUN):
            assert test_client.get(f"/runs/{RUN}/tasks/{task}").status_code == 200
        assert app.state.dashboard.evidence.wait(RUN, 60)["status"] == "verified"
    after = (_snapshot(state), _snapshot(git_dir / "refs"), sorted(git_dir.iterdir()))
    assert after == before
