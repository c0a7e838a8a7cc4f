"""report.html of the EU AI Act pack, as a compliance officer reads and prints it (issue 15.2).

Static checks on the HTML (verdict box first, human labels, tool version and generation time
from the records, inline SVG timeline, evidence in ``<details>``, print CSS, the placeholder
controller flagged, wording that says what the tool checked) and real headless-Chromium checks:
a 1280 px screenshot, PDFs printed on A4 and on Letter (pages, paper size, and with poppler's
pdftotext: every hash and section title on paper, whole), and a DOM measurement: a wrapper page
made here (the report itself has no script) loads the report into iframes 1280, 794 and 703 px
wide (screen, A4 paper, A4 printable area), measures every table's scrollWidth against its
container's clientWidth with every ``<details>`` open, lists the section ids, and writes the
result into its own DOM, which ``--dump-dom`` returns. Skipped where chromium is not installed.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.demo import DemoResult, run_demo
from harness.receipts.euaiact import export_pack
from harness.receipts.euaiact_html import PLACEHOLDER_CONTROLLER, SECTION_IDS, render_html
from harness.receipts.keys import OperatorKeys, load_keys

from .test_euaiact import HOSTILE, _hostile_state

TIME = re.compile(r"\d{4}-\d{2}-\d{2}(?:<wbr>)?T\d{2}:\d{2}:\d{2}(?:<wbr>)?\.\d{6}Z")
WIDTHS = (1280, 794, 703)
"""Screen; A4 paper at 96 dpi (210 mm); A4 less the report's 12 mm side margins (186 mm)."""


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    return run_demo(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def keys(demo: DemoResult) -> OperatorKeys:
    return load_keys(demo.keys_dir)


def _pack(demo: DemoResult, keys: OperatorKeys, out: Path, controller: str) -> Path:
    export_pack(demo.repo / ".harness", out, keys, since=None, until=None, controller=controller)
    return out


@pytest.fixture(scope="module")
def pack(demo: DemoResult, keys: OperatorKeys, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _pack(demo, keys, tmp_path_factory.mktemp("pack") / "pack", "Example Ltd")


@pytest.fixture(scope="module")
def report(pack: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((pack / "report.json").read_bytes())
    return value


@pytest.fixture(scope="module")
def page(pack: Path) -> str:
    return (pack / "report.html").read_text("utf-8")


def _section(page: str, key: str) -> str:
    match = re.search(rf'<section id="{key}">(.*?)</section>', page, re.DOTALL)
    assert match, key
    return match.group(1)


# ---- static -----------------------------------------------------------------------------------


def test_verdict_box_comes_first(page: str, report: dict[str, Any], keys: OperatorKeys) -> None:
    body = page.split("<body>", 1)[1]
    assert body.index('<section id="verdict">') < body.index("<nav>")
    assert body.index('<section id="verdict">') < min(
        body.index(f'<section id="{k}">') for k in SECTION_IDS if k != "verdict"
    )
    verdict = _section(page, "verdict")
    start = min(p["start"] for p in report["periods"])
    end = max(p["end"] for p in report["periods"])
    for expected in (
        "Bundle VERIFIED by harness-verify",
        keys.key_id,
        f"{start} to {end}",
        "1: demo-run",
        "10 task(s): Blocked: 2, Denied: 1, Done: 6, Failed: 1 (4 did not complete)",
        "Human interventions</th><td>0: none",
        "4: Capability denied: 1, Gate failed: 3",
        "183 days, controller Example Ltd",
        "not a conformity assessment",
    ):
        assert expected in verdict, expected


def test_tasks_in_report_json(report: dict[str, Any]) -> None:
    states = {t["task"]: t["state"] for t in report["tasks"]}
    assert states == {
        "add-mul": "done",
        "break-add": "failed",
        "changelog": "done",
        "docs": "done",
        "exfiltrate": "denied",
        "guide": "done",
        "ghost": "blocked",
        "audited": "blocked",
        "stats": "done",
        "release-notes": "done",
    }
    for task in report["tasks"]:
        assert task["evidence_count"] == task["transitions"] + 1  # task.planned + transitions
        assert all(ref["member"].endswith("/audit.jsonl") for ref in task["evidence"])


def test_human_labels_and_what_was_checked(page: str, report: dict[str, Any]) -> None:
    version = report["system"]["version"]
    headers = re.findall(r"<th[^>]*>(.*?)</th>", page)
    assert headers
    for header in headers:
        assert "_" not in header, header  # no raw field name such as verification_status
    assert "verification_status" not in page and "signer_key_id" not in page
    assert "evidence (member#seq)" not in page
    # no self-assessed legal status next to "not a conformity assessment"
    assert not re.search(r">\s*(met|supports)\s*<", page)
    assert "status" not in _section(page, "provisions").lower()
    provisions = _section(page, "provisions")
    assert f"Checked by harness-verify {version}" in provisions
    assert "not checked: applies only to remote biometric identification" in provisions
    assert "not checkable by the tool: the controller states 183 days" in provisions
    assert "Not checked at export: the HMAC chain" in _section(page, "verdict")


def test_generation_time_and_version_come_from_the_report(
    page: str, pack: Path, report: dict[str, Any]
) -> None:
    version = report["system"]["version"]
    end = max(p["end"] for p in report["periods"])
    assert f"Generated by harness-verify {version} from the signed records" in page
    assert f"from the signed records up to {end}" in page
    # every time printed is a record time: no wall clock in the export
    record_times = {end} | {p["start"] for p in report["periods"]}
    for key in ("tasks", "risks", "interventions"):
        record_times |= {item["time"] for item in report[key]}
    record_times |= {op["time"] for op in report["changes"]["operations"]}
    for found in TIME.findall(page):
        assert found.replace("<wbr>", "") in record_times, found
    assert render_html(report).encode("utf-8") == (pack / "report.html").read_bytes()


def test_timeline_is_inline_svg(page: str, report: dict[str, Any]) -> None:
    timeline = _section(page, "timeline")
    assert timeline.count("<svg ") == 1 and "</svg>" in timeline
    marks = len(report["tasks"]) + len(report["risks"]) + len(report["interventions"])
    assert timeline.count("<circle ") + timeline.count("<polygon ") == marks
    assert "<circle " in timeline and "<polygon " in timeline
    assert "task exfiltrate: denied at" in timeline
    assert "capability-denied at" in timeline
    lowered = page.lower()
    assert "<script" not in lowered and "http" not in lowered and "url(" not in lowered
    assert "<image" not in lowered and "href" not in timeline


def test_control_section_shows_the_recomputed_decisions(page: str, report: dict[str, Any]) -> None:
    control = _section(page, "control")
    assert control.count("<svg ") == 1 and control.count("<polyline ") == 2 * len(
        report["control"]["trends"]
    )
    actions = [(d["key"], d["action"]) for d in report["control"]["decisions"]]
    assert ("agent:tuner", "template") in actions
    assert ("agent:writer:pace_tokens", "warn") in actions
    assert "step 5: I bucket: template" in control  # the decision marker's title
    assert "<td>agent:writer:pace_tokens</td>" in control


def test_evidence_is_folded(page: str) -> None:
    for cell in re.findall(r"<td>(.*?)</td>", page):
        if "#" in cell and ".jsonl" in cell:
            assert cell.startswith("<details><summary>"), cell[:80]
    assert page.count("<details>") >= 20
    assert re.search(r"runs/demo-run/stores/audit\.jsonl#\d+(, #\d+)+", page)


def test_print_css(page: str) -> None:
    css = re.search(r"<style>(.*?)</style>", page, re.DOTALL)
    assert css
    style = css.group(1)
    assert "@media print{" in style and "@page{" in style
    assert "overflow-wrap:anywhere" in style and "word-break:break-all" in style
    assert "thead{display:table-header-group}" in style
    # hashes are in <code>, which breaks anywhere
    for digest in re.findall(r"[0-9a-f]{64}", page):
        assert f"<code>{digest}</code>" in page or f"key id <code>{digest}" in page, digest


def test_placeholder_controller_flagged(
    demo: DemoResult, keys: OperatorKeys, tmp_path: Path, page: str
) -> None:
    assert "placeholder" not in page.lower()
    out = _pack(demo, keys, tmp_path / "p", PLACEHOLDER_CONTROLLER)
    flagged = (out / "report.html").read_text("utf-8")
    body = flagged.split("<body>", 1)[1]
    assert body.index('<p class="warn">Controller not named') < body.index('id="verdict"')
    assert "PLACEHOLDER: no controller was named with --controller" in _section(flagged, "verdict")
    assert 'class="warn">No controller named' in _section(flagged, "retention")
    assert '<td class="flag">' in _section(flagged, "retention")
    readme = (out / "README.txt").read_text("utf-8")
    assert "PLACEHOLDER: no controller was named with --controller" in readme
    # spacing and case do not hide it
    out2 = _pack(demo, keys, tmp_path / "q", "  The operator of  this HARNESS ")
    assert "Controller not named" in (out2 / "report.html").read_text("utf-8")


def test_hostile_names_escaped_in_timeline_and_tables(tmp_path: Path) -> None:
    state, keys = _hostile_state(tmp_path)
    out = tmp_path / "pack"
    export_pack(state, out, keys, since=None, until=None, controller="x")
    text = (out / "report.html").read_text("utf-8")
    assert "<script" not in text.lower() and "<img" not in text.lower()
    timeline = _section(text, "timeline")
    assert "task &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in timeline
    assert html.escape(HOSTILE, quote=True) in _section(text, "tasks")
    assert html.escape(HOSTILE, quote=True) in _section(text, "interventions")


# ---- headless Chromium ------------------------------------------------------------------------


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium not installed: apt-get install chromium")
    return found


def _run(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
    ]
    done = subprocess.run(
        [browser, *flags, *args], capture_output=True, text=True, timeout=90, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def test_screenshot_1280(pack: Path, tmp_path: Path) -> None:
    browser = _chromium()
    shot = tmp_path / "shot.png"
    url = (pack / "report.html").resolve().as_uri()
    _run(browser, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,2400", url)
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 2400)
    assert len(data) > 50_000


def _pdf_pages(data: bytes) -> list[tuple[float, float]]:
    boxes = re.findall(rb"/MediaBox\s*\[\s*0 0 ([\d.]+) ([\d.]+)\s*\]", data)
    return [(float(w), float(h)) for w, h in boxes]


@pytest.mark.parametrize(("paper", "size"), [("A4", (595.0, 842.0)), ("Letter", (612.0, 792.0))])
def test_printed_pdf(
    pack: Path, report: dict[str, Any], tmp_path: Path, paper: str, size: tuple[float, float]
) -> None:
    """Printed on A4 and on Letter: pages of that size; with pdftotext, nothing cut off."""
    browser = _chromium()
    source = (pack / "report.html").read_text("utf-8")
    # the report leaves the paper size to the printer; choose it as a print dialog would
    sized = tmp_path / "report.html"
    sized.write_text(source.replace("</head>", f"<style>@page{{size:{paper}}}</style></head>"))
    pdf = tmp_path / "report.pdf"
    _run(
        browser,
        tmp_path / "profile",
        f"--print-to-pdf={pdf}",
        "--no-pdf-header-footer",
        sized.resolve().as_uri(),
    )
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF-")
    pages = _pdf_pages(data)
    assert len(pages) >= 3
    for width, height in pages:
        assert abs(width - size[0]) < 1.5 and abs(height - size[1]) < 1.5, (width, height)
    if shutil.which("pdftotext") is None:
        return  # poppler-utils absent: page count and size only
    text = subprocess.run(
        ["pdftotext", "-raw", str(pdf), "-"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    flat = re.sub(r"\s+", "", text)
    digests = {a["sha256"] for a in report["changes"]["final_artifacts"]}
    digests |= {s["root"] for s in report["integrity"]["stores"]}
    digests |= {report["integrity"]["bundle_sha256"], report["system"]["signer_key_id"]}
    for digest in digests:
        assert digest in flat, f"{digest} is cut off or missing on {paper}"
    for title in ("Summary of what was checked", "Timeline of the period", "Retention statement"):
        assert re.sub(r"\s+", "", title) in flat
    for risk in report["risks"]:
        assert re.sub(r"\s+", "", risk["detail"]) in flat


_WRAPPER_SCRIPT = """
var pending = %d, results = {};
function measure(frame) {
  var doc = frame.contentDocument, root = doc.documentElement;
  doc.querySelectorAll('details').forEach(function (d) { d.open = true; });
  var out = {frame: frame.clientWidth, page: [root.scrollWidth, root.clientWidth], tables: [],
             sections: [], svg: doc.querySelectorAll('#timeline svg').length,
             scripts: doc.querySelectorAll('script').length};
  doc.querySelectorAll('section[id]').forEach(function (s) { out.sections.push(s.id); });
  doc.querySelectorAll('table').forEach(function (t) {
    var box = t.parentElement;
    out.tables.push([t.closest('section') ? t.closest('section').id : '', t.scrollWidth,
                     box.clientWidth, Math.ceil(t.getBoundingClientRect().right),
                     root.clientWidth]);
  });
  results[frame.id] = out;
  if (--pending === 0) {
    var pre = document.createElement('pre');
    pre.id = 'result';
    pre.textContent = JSON.stringify(results);
    document.body.appendChild(pre);
  }
}
"""


def _measure(browser: str, report_html: str, tmp_path: Path) -> dict[str, Any]:
    frames = "".join(
        f'<iframe id="w{w}" style="width:{w}px;height:900px;border:0" onload="measure(this)" '
        f'srcdoc="{html.escape(report_html, quote=True)}"></iframe>'
        for w in WIDTHS
    )
    wrapper = tmp_path / "wrapper.html"
    wrapper.write_text(
        f"<!DOCTYPE html><html><head><script>{_WRAPPER_SCRIPT % len(WIDTHS)}</script></head>"
        f"<body>{frames}</body></html>",
        "utf-8",
    )
    done = _run(
        browser,
        tmp_path / "profile",
        "--window-size=1400,1000",
        "--virtual-time-budget=15000",
        "--dump-dom",
        wrapper.resolve().as_uri(),
    )
    match = re.search(r'<pre id="result">(.*?)</pre>', done.stdout, re.DOTALL)
    assert match, done.stdout[-2000:]
    value: dict[str, Any] = json.loads(html.unescape(match.group(1)))
    return value


def _assert_fits(results: dict[str, Any]) -> None:
    for width in WIDTHS:
        result = results[f"w{width}"]
        assert result["frame"] == width
        assert result["sections"] == list(SECTION_IDS), width
        assert result["svg"] == 1 and result["scripts"] == 0
        scroll, client = result["page"]
        assert scroll <= client, f"page overflows at {width} px: {scroll} > {client}"
        assert len(result["tables"]) >= 10
        for section, table_scroll, box, right, viewport in result["tables"]:
            assert table_scroll <= box, f"{section} table overflows at {width} px"
            assert right <= viewport, f"{section} table crosses the page edge at {width} px"


def test_no_table_overflows_and_every_section_present(pack: Path, tmp_path: Path) -> None:
    browser = _chromium()
    _assert_fits(_measure(browser, (pack / "report.html").read_text("utf-8"), tmp_path))


def test_long_unbroken_values_still_fit(report: dict[str, Any], tmp_path: Path) -> None:
    """A 300-character path, task, model or word of prose without a break point cannot widen
    a column or the page."""
    browser = _chromium()
    long = json.loads(json.dumps(report))
    word = "x" * 300
    for artifact in long["changes"]["final_artifacts"]:
        artifact["path"] = word
        artifact["model"] = word
    for task in long["tasks"]:
        task["task"] = word
    for risk in long["risks"]:
        risk["detail"] = word
    # prose too: the key id the auditor compares is one unbroken word in a list item
    long["verification"]["compare"] = [f"the signer key id printed equals {word}"]
    _assert_fits(_measure(browser, render_html(long), tmp_path))
