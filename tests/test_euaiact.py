"""`harness export --eu-ai-act`: the EU AI Act Article 12 evidence pack (receipts/euaiact.py).

One demo run (module fixture) is exported as a pack; the tests check the files, that the bundle
verifies with harness-verify, that report.json validates and every evidence reference points at
a real record of the claimed kind, the provisions mapping, retention, determinism, that no
secret is in any file, that report.html is self-contained and escapes hostile text, and that a
real headless browser renders it (skipped where Debian's ``chromium`` is not installed).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from harness import __version__
from harness.orchestrate.demo import DemoResult, run_demo
from harness.receipts.euaiact import PackError, PackResult, select_runs
from harness.receipts.euaiact import export_pack as _export_pack
from harness.receipts.euaiact_text import PACK_FILES, PACK_MANIFEST
from harness.receipts.keys import OperatorKeys, init_keys, load_keys
from harness.receipts.run import RunRecorder
from harness.verify.canonical import canonical_bytes, parse_canonical
from harness.verify.chain import derive_store_key
from harness.verify.records import STORES, parse_record_line
from harness.verify.rules import trifecta
from harness.verify.rules.controller import Params

from .evidence_helpers import with_control
from .test_pack_wheel import verifier_wheel

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "schemas" / "eu-ai-act-report.schema.json"
WHEEL = f"harness_verify-{__version__}-py3-none-any.whl"
ALL_FILES = (*PACK_FILES, WHEEL, PACK_MANIFEST, "pack-manifest.sig")
EXTERNAL_REF = re.compile(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", re.IGNORECASE)
HOSTILE = '<script>alert("x")</script><img src="https://evil.invalid/x.png">'


def export_pack(*args: Any, **kwargs: Any) -> PackResult:
    """The exporter, carrying the session's verifier wheel (built once, not per pack)."""
    return _export_pack(*args, wheel=verifier_wheel(), **kwargs)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    return run_demo(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def keys(demo: DemoResult) -> OperatorKeys:
    return load_keys(demo.keys_dir)


@pytest.fixture(scope="module")
def pack(demo: DemoResult, keys: OperatorKeys, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pack") / "pack"
    result = export_pack(
        demo.repo / ".harness", out, keys, since=None, until=None, controller="Example Ltd"
    )
    assert result.runs == (demo.run_id,)
    assert result.status == "verified"
    return out


@pytest.fixture(scope="module")
def report(pack: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((pack / "report.json").read_bytes())
    return value


def _harness_verify(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    code = "from harness.verify.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
    )


def test_pack_files_present(pack: Path) -> None:
    assert sorted(p.name for p in pack.iterdir()) == sorted(ALL_FILES)
    manifest = parse_canonical((pack / PACK_MANIFEST).read_bytes())
    listed = {f["name"]: f for f in manifest["files"]}
    assert sorted(listed) == sorted((*PACK_FILES, WHEEL))
    for name, entry in listed.items():
        data = (pack / name).read_bytes()
        assert entry == {
            "name": name,
            "sha256": hashlib.sha256(data).hexdigest(),
            "size": len(data),
        }


def test_bundle_verifies_pinned(pack: Path, keys: OperatorKeys) -> None:
    done = _harness_verify(pack / "bundle.tar", "--trusted-key", keys.key_id)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "VERIFIED" in done.stdout


def test_verification_json_is_the_verifiers_output(pack: Path, keys: OperatorKeys) -> None:
    """The documented command, run in the pack folder, prints verification.json exactly."""
    done = _harness_verify("bundle.tar", "--trusted-key", keys.key_id, "--format", "json", cwd=pack)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (pack / "verification.json").read_text("ascii")
    elsewhere = _harness_verify(
        pack / "bundle.tar", "--trusted-key", keys.key_id, "--format", "json"
    )
    printed = json.loads(elsewhere.stdout)
    stored = json.loads((pack / "verification.json").read_text("ascii"))
    assert stored["bundle"] == "bundle.tar"
    assert stored["status"] == "verified"
    printed.pop("bundle")
    stored.pop("bundle")
    assert printed == stored


def test_report_validates_and_is_canonical(pack: Path, report: dict[str, Any]) -> None:
    data = (pack / "report.json").read_bytes()
    assert canonical_bytes(report) == data
    schema = json.loads(SCHEMA.read_text("utf-8"))
    Draft202012Validator.check_schema(schema)
    Draft202012Validator(schema).validate(report)


def _claims(node: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(node, dict):
        if "evidence" in node:
            found.append(node)
        for value in node.values():
            found.extend(_claims(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_claims(value))
    return found


def _bundle_records(pack: Path) -> dict[tuple[str, int], Any]:
    records = {}
    with tarfile.open(pack / "bundle.tar") as tar:
        for member in tar.getmembers():
            if not member.name.endswith(".jsonl") or "/stores/" not in member.name:
                continue
            handle = tar.extractfile(member)
            assert handle is not None
            run, store = member.name.split("/")[1], Path(member.name).stem
            for line in handle.read().splitlines():
                record = parse_record_line(line, store, run)
                records[(member.name, record.seq)] = record
    return records


def test_evidence_points_at_real_records(pack: Path, report: dict[str, Any]) -> None:
    records = _bundle_records(pack)
    claims = _claims(report)
    assert len(claims) > 20
    for claim in claims:
        if claim.get("records") == 0:  # an empty store (control, in the demo) has no record
            assert claim["evidence"] == []
            continue
        assert claim["evidence"], claim
        assert claim["evidence_count"] >= len(claim["evidence"])
        for ref in claim["evidence"]:
            record = records[(ref["member"], ref["seq"])]
            if "kind" in claim and "category" in claim:  # risks, interventions
                assert record.kind == claim["kind"]
                assert record.time == claim["time"]
    for event in report["events"]:
        assert event["count"] == event["evidence_count"]
        for ref in event["evidence"]:
            assert records[(ref["member"], ref["seq"])].kind == event["kind"]
    for op in report["changes"]["operations"]:
        record = records[(op["evidence"][0]["member"], op["evidence"][0]["seq"])]
        assert record.kind == "artifact." + op["operation"]
        assert record.body["path"] == op["path"]


def test_risks_list_denial_and_failed_gate(report: dict[str, Any]) -> None:
    risks = {(r["category"], r["task"]) for r in report["risks"]}
    assert ("capability-denied", "exfiltrate") in risks
    assert ("gate-failed", "break-add") in risks
    denial = next(r for r in report["risks"] if r["category"] == "capability-denied")
    assert "lethal trifecta" in denial["detail"]


def test_sections_have_content(report: dict[str, Any], keys: OperatorKeys) -> None:
    assert report["system"]["signer_key_id"] == keys.key_id
    assert report["system"]["name"] == "harness-verify"
    period = report["periods"][0]
    assert period["start"] <= period["end"]
    assert period["outcome"] == "completed"
    assert {a["model"] for a in report["actors"]} >= {"scripted-echo"}
    assert {e["kind"] for e in report["events"]} >= {"run.start", "agent.spawn", "model.call"}
    paths = {a["path"] for a in report["changes"]["final_artifacts"]}
    assert {"calc.py", "README.md", "CHANGELOG.md"} <= paths
    assert report["integrity"]["verification_status"] == "verified"
    assert {s["store"] for s in report["integrity"]["stores"]} == set(STORES)


def test_provisions_cited_exactly(report: dict[str, Any]) -> None:
    cites = {p["id"]: p for p in report["provisions"]}
    expected = {
        "art-12-1": "Regulation (EU) 2024/1689, Article 12(1)",
        "art-12-2-a": "Regulation (EU) 2024/1689, Article 12(2)(a)",
        "art-12-2-b": "Regulation (EU) 2024/1689, Article 12(2)(b)",
        "art-12-2-c": "Regulation (EU) 2024/1689, Article 12(2)(c)",
        "art-12-3": "Regulation (EU) 2024/1689, Article 12(3)(a)-(d)",
        "art-19-1": "Regulation (EU) 2024/1689, Article 19(1)",
        "art-26-6": "Regulation (EU) 2024/1689, Article 26(6)",
        "art-72": "Regulation (EU) 2024/1689, Article 72",
        "annex-iv-6": "Regulation (EU) 2024/1689, Annex IV (technical documentation), point 6",
    }
    for pid, citation in expected.items():
        assert cites[pid]["citation"] == citation
    not_applicable = cites["art-12-3"]
    assert not_applicable["status"] == "not-applicable"
    assert not_applicable["sections"] == []
    assert "applies only to remote biometric identification" in not_applicable["summary"].lower()
    assert "Annex III point 1(a)" in not_applicable["summary"]
    # retention is Art. 19(1)/26(6), never Art. 12
    assert report["section_provisions"]["retention"] == ["art-19-1", "art-26-6"]
    for section, ids in report["section_provisions"].items():
        assert "art-12-3" not in ids, section
    assert "art-12-2-a" in report["section_provisions"]["risks"]
    assert "annex-iv-6" in report["section_provisions"]["changes"]


def test_retention_statement(report: dict[str, Any]) -> None:
    retention = report["retention"]
    assert retention["period_days"] >= 183
    assert retention["controller"] == "Example Ltd"
    assert "six months" in retention["note"]
    assert "Article 19(1)" in retention["note"] and "Article 26(6)" in retention["note"]
    assert retention["deletion_policy"]


def test_retention_below_six_months_refused(
    demo: DemoResult, keys: OperatorKeys, tmp_path: Path
) -> None:
    with pytest.raises(PackError, match="183"):
        export_pack(
            demo.repo / ".harness",
            tmp_path / "p",
            keys,
            since=None,
            until=None,
            controller="x",
            retention_days=90,
        )


def test_verification_instructions(pack: Path, report: dict[str, Any], keys: OperatorKeys) -> None:
    command = f"pipx run --spec ./{WHEEL} harness-verify bundle.tar --trusted-key {keys.key_id}"
    assert command in report["verification"]["commands"]
    assert report["verification"]["expected_exit_code"] == 0
    readme = (pack / "README.txt").read_text("utf-8")
    assert command in readme
    assert "Expected exit code: 0" in readme


def test_window_selects_runs(demo: DemoResult) -> None:
    state = demo.repo / ".harness"
    assert select_runs(state, None, None) == [demo.run_id]
    assert select_runs(state, "2026-01-01T00:00:00.000000Z", None) == [demo.run_id]
    assert select_runs(state, None, "2025-12-31T23:59:59.000000Z") == []
    assert select_runs(state, "2026-01-02T00:00:00.000000Z", None) == []
    with pytest.raises(PackError, match="RFC 3339"):
        select_runs(state, "yesterday", None)


def test_empty_window_refused(demo: DemoResult, keys: OperatorKeys, tmp_path: Path) -> None:
    with pytest.raises(PackError, match="no run"):
        export_pack(
            demo.repo / ".harness",
            tmp_path / "p",
            keys,
            since="2030-01-01T00:00:00.000000Z",
            until=None,
            controller="x",
        )


def test_deterministic(demo: DemoResult, keys: OperatorKeys, pack: Path, tmp_path: Path) -> None:
    state = demo.repo / ".harness"
    again = tmp_path / "again"
    export_pack(state, again, keys, since=None, until=None, controller="Example Ltd")
    for name in ALL_FILES:
        assert (again / name).read_bytes() == (pack / name).read_bytes(), name
    tars = []
    for index in range(2):
        out = tmp_path / f"pack{index}.tar"
        export_pack(state, out, keys, since=None, until=None, controller="Example Ltd")
        tars.append(out.read_bytes())
    assert tars[0] == tars[1]
    with tarfile.open(fileobj=io.BytesIO(tars[0])) as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == sorted(ALL_FILES)
        for member in members:
            assert (member.mtime, member.uid, member.gid, member.mode) == (0, 0, 0, 0o644)
            handle = tar.extractfile(member)
            assert handle is not None
            assert handle.read() == (pack / member.name).read_bytes()


def _secret_forms(keys: OperatorKeys, run_id: str) -> dict[str, bytes]:
    secrets = {
        "seed": keys.signing_key.private_bytes_raw(),
        "hmac master": keys.hmac_master,
    }
    for store in STORES:
        secrets[f"hmac {store}"] = derive_store_key(keys.hmac_master, store, run_id)
    forms = {"signer key": keys.note_signer().signer_key().encode()}
    for name, secret in secrets.items():
        forms[f"{name} raw"] = secret
        forms[f"{name} hex"] = secret.hex().encode()
        forms[f"{name} HEX"] = secret.hex().upper().encode()
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            for shift in (0, 1, 2):
                text = encode(b"\x00" * shift + secret)
                forms[f"{name} b64 {encode.__name__} {shift}"] = text[4 if shift else 0 : -4]
    return forms


def test_no_secret_in_pack(
    pack: Path, keys: OperatorKeys, demo: DemoResult, tmp_path: Path
) -> None:
    forms = _secret_forms(keys, demo.run_id)
    out = tmp_path / "pack.tar"
    export_pack(demo.repo / ".harness", out, keys, since=None, until=None, controller="x")
    blobs = {name: (pack / name).read_bytes() for name in ALL_FILES}
    blobs["pack.tar"] = out.read_bytes()
    for name, data in blobs.items():
        found = [form_name for form_name, form in forms.items() if form in data]
        assert not found, f"{name} contains {found}"


def test_html_is_self_contained(pack: Path) -> None:
    text = (pack / "report.html").read_text("utf-8")
    lowered = text.lower()
    assert "<script" not in lowered
    assert "http://" not in lowered and "https://" not in lowered
    assert not EXTERNAL_REF.search(text)
    assert "<link" not in lowered and "@import" not in lowered and "url(" not in lowered
    assert "Situations that may present a risk" in text
    assert "exfiltrate" in text
    assert "runs/demo-run/stores/audit.jsonl#" in text


def _hostile_state(tmp_path: Path) -> tuple[Path, OperatorKeys]:
    """A runtime-shaped run (format 2: run.start binds a plan member) whose task id and
    operator name are hostile markup; its denial is the trifecta rule's own."""
    state = tmp_path / "state"
    keys = init_keys(state / "keys", allow_tracked=True)
    tools = ["secrets", "web"]
    plan = canonical_bytes(
        {
            "format": "harness-verify/plan",
            "version": 1,
            "name": "p",
            "capsule": None,
            "tasks": [
                {"id": HOSTILE, "role": "coder", "priority": 1, "depends": [],
                 "adapter": "scripted", "tools": tools, "scope": ["**"], "requirements": []}
            ],
            "control": Params().record(),
        }
    )  # fmt: skip
    denial = trifecta.decide(trifecta.matrix_from_object(MATRIX), "scripted", tools, None)
    start = {
        "plan": "p",
        "plan_sha256": hashlib.sha256(plan).hexdigest(),
        "producer": "test",
        "harness_version": "0",
        "base_commit": "1" * 40,
        "repository_roots": ["1" * 40],
        "capabilities": MATRIX,
        "capsule": None,
        "sandbox": {"kind": "none", "network": True, "private_mounts": True, "opt_out": True},
    }
    planned = {"role": "coder", "priority": 1, "depends": [], "adapter": "scripted"}
    rows = [
        ("audit", "run.start", start),
        ("audit", "task.planned", {**planned, "task": HOSTILE, "tools": tools}),
        ("audit", "capability.denied",
         {"task": HOSTILE, "tools": list(denial.chain), "tags": list(denial.tags),
          "reason": denial.reason, "sandbox": None}),
        ("audit", "task.transition",
         {"task": HOSTILE, "from": "planned", "to": "denied", "reason": "trifecta"}),
        ("control", "command",
         {"operator": HOSTILE, "command": "stop", "args": {}, "id": "c1", "revision": 0}),
        ("audit", "run.end", {"outcome": "completed"}),
    ]  # fmt: skip
    with RunRecorder(state, "hostile", keys) as run:
        run.write_plan(plan)
        for store, kind, body in with_control(rows, plan):  # the runtime's control records
            run.record(store, kind, body)
    return state, keys


MATRIX = {
    "adapters": {"scripted": []},
    "mcp": {},
    "tools": {"secrets": ["private_data"], "web": ["external_comm", "untrusted_input"]},
}


def test_html_escapes_hostile_task(tmp_path: Path) -> None:
    state, keys = _hostile_state(tmp_path)
    out = tmp_path / "pack"
    export_pack(state, out, keys, since=None, until=None, controller="x")
    text = (out / "report.html").read_text("utf-8")
    assert "<script" not in text.lower()
    assert "<img" not in text.lower()
    assert not EXTERNAL_REF.search(text)
    assert "&lt;script&gt;" in text
    assert "&lt;img src=&quot;https://evil.invalid/x.png&quot;&gt;" in text
    report = json.loads((out / "report.json").read_bytes())
    assert report["risks"][0]["task"] == HOSTILE
    assert report["interventions"][0]["category"] == "operator-command"


def test_cli_end_to_end(demo: DemoResult, keys: OperatorKeys, tmp_path: Path, pack: Path) -> None:
    out = tmp_path / "cli-pack.tar"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "export",
            str(out),
            "--eu-ai-act",
            "--state",
            str(demo.repo / ".harness"),
            "--keys",
            str(demo.keys_dir),
            "--controller",
            "Example Ltd",
            "--since",
            "2026-01-01T00:00:00.000000Z",
            "--retention-days",
            "365",
            "--wheel",
            str(verifier_wheel()),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "EU AI Act evidence pack" in done.stdout
    with tarfile.open(out) as tar:
        handle = tar.extractfile("report.json")
        assert handle is not None
        report = json.loads(handle.read())
    assert report["retention"]["period_days"] == 365
    assert report["window"]["since"] == "2026-01-01T00:00:00.000000Z"
    bad = subprocess.run(
        [
            *(sys.executable, "-m", "harness.cli", "export", str(tmp_path / "x"), "--eu-ai-act"),
            *("--state", str(demo.repo / ".harness"), "--keys", str(demo.keys_dir)),
            *("--retention-days", "30"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 1
    assert "183" in bad.stderr


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium not installed: apt-get install chromium")
    return found


def test_report_renders_in_headless_browser(pack: Path, tmp_path: Path) -> None:
    browser = _chromium()
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    url = (pack / "report.html").resolve().as_uri()
    dom = subprocess.run(
        [browser, *flags, "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert dom.returncode == 0, dom.stderr
    for heading in (
        "System identity and version",
        "Period of each use",
        "Situations that may present a risk",
        "Provisions mapping",
        "Retention statement",
        "Offline verification",
    ):
        assert heading in dom.stdout
    assert "exfiltrate" in dom.stdout
    assert "lethal trifecta" in dom.stdout
    shot = tmp_path / "shot.png"
    done = subprocess.run(
        [browser, *flags, f"--screenshot={shot}", "--window-size=1280,2000", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 10_000
