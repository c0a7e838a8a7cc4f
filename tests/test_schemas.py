"""The JSON Schemas in schemas/ against the documents they describe.

Every schema is a valid draft 2020-12 schema; every golden vector (tests/vectors) validates
against its schema; the JSON report of ``harness-verify receipt`` validates in each status;
and documents broken in one place are rejected (by the schema, and for receipts by the
verifier too, so the two cannot drift apart on these cases).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from harness.receipts.bundle import receipt_for_path
from harness.receipts.run import RunRecorder
from harness.verify.canonical import canonical_bytes
from harness.verify.errors import VerificationError
from harness.verify.receipt import verify_receipt

from .evidence_helpers import make_keys

VECTORS = Path(__file__).resolve().parent / "vectors"
NEW_SCHEMAS = (
    "artifact-receipt",
    "receipt-report",
    "dsse-envelope",
    "statement-run-summary",
    "statement-lineage",
)
ENVELOPES = ("run-summary", "lineage", "provenance")
GOLDEN_RECEIPTS = sorted(VECTORS.glob("receipt-*.json"))
KEYS = make_keys()

Doc = dict[str, Any]


def _schema_names() -> list[str]:
    folder = resources.files("harness.schemas")
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".schema.json"))


def _schema(name: str) -> Doc:
    text = resources.files("harness.schemas").joinpath(f"{name}.schema.json").read_text("utf-8")
    value: Doc = json.loads(text)
    return value


def _validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(_schema(name))


def _errors(name: str, document: object) -> list[str]:
    return [error.message for error in _validator(name).iter_errors(document)]


def _load(name: str) -> Doc:
    value: Doc = json.loads((VECTORS / name).read_bytes())
    return value


def _statement(envelope: str) -> Doc:
    value: Doc = json.loads(base64.b64decode(_load(f"{envelope}.dsse.json")["payload"]))
    return value


# ---- the schemas themselves ------------------------------------------------------------------


def test_new_schemas_are_shipped() -> None:
    names = _schema_names()
    for name in (*NEW_SCHEMAS, "manifest"):
        assert f"{name}.schema.json" in names


@pytest.mark.parametrize("name", _schema_names())
def test_schema_is_valid_draft_2020_12(name: str) -> None:
    schema = json.loads(resources.files("harness.schemas").joinpath(name).read_text("utf-8"))
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].endswith(f"/schemas/{name}")


@pytest.mark.parametrize("name", NEW_SCHEMAS)
def test_new_schemas_are_closed(name: str) -> None:
    """Every object in the new schemas lists its members: nothing unknown slips through."""

    def walk(node: object, where: str) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object":
                assert node.get("additionalProperties") is False, f"{name}: {where}"
            for key, value in node.items():
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{where}/{index}")

    walk(_schema(name), "#")


# ---- golden vectors validate ------------------------------------------------------------------


def test_golden_vectors_exist() -> None:
    assert [p.name for p in GOLDEN_RECEIPTS] == ["receipt-0.json", "receipt-1.json"]


@pytest.mark.parametrize("path", GOLDEN_RECEIPTS, ids=lambda p: p.name)
def test_golden_receipts_validate(path: Path) -> None:
    assert _errors("artifact-receipt", json.loads(path.read_bytes())) == []


@pytest.mark.parametrize("envelope", ENVELOPES)
def test_golden_envelopes_validate(envelope: str) -> None:
    assert _errors("dsse-envelope", _load(f"{envelope}.dsse.json")) == []


def test_golden_statements_validate() -> None:
    assert _errors("statement-run-summary", _statement("run-summary")) == []
    assert _errors("statement-lineage", _statement("lineage")) == []


def test_cose_statement_payload_is_the_run_summary_statement() -> None:
    import cbor2

    message = cbor2.loads((VECTORS / "run-summary.cose").read_bytes())
    payload = message.value[2]
    assert payload == base64.b64decode(_load("run-summary.dsse.json")["payload"])
    assert _errors("statement-run-summary", json.loads(payload)) == []


def test_golden_manifest_validates() -> None:
    manifest = _load("manifest.json")
    assert manifest["runs"][0]["receipts"] == [0, 1]
    assert _errors("manifest", manifest) == []


def test_golden_bundle_members_validate() -> None:
    """The receipts and envelopes inside bundle.tar (not only their copies) validate too."""
    import tarfile

    with tarfile.open(VECTORS / "bundle.tar") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]
    receipts = [name for name in members if "/receipts/" in name]
    envelopes = [name for name in members if name.endswith(".dsse.json")]
    assert len(receipts) == 2 and len(envelopes) == 3
    for name in receipts:
        assert _errors("artifact-receipt", json.loads(members[name])) == [], name
    for name in envelopes:
        assert _errors("dsse-envelope", json.loads(members[name])) == [], name
    assert _errors("manifest", json.loads(members["manifest.json"])) == []


# ---- the receipt report of the CLI -------------------------------------------------------------

CONTENT = b"def answer():\n    return 42\n"


def _record_state(state: Path) -> None:
    """A run whose lineage store writes src/answer.py with CONTENT (and the audit records)."""
    with RunRecorder(state, "run-7", KEYS) as run:
        run.record("audit", "event", {"name": "run.begin", "data": {"plan": "plan.yaml"}})
        run.record(
            "lineage",
            "artifact.write",
            {
                "actor": "agent",
                "model": "m",
                "mode": "100644",
                "parents": [],
                "parent_mode": None,
                "path": "src/answer.py",
                "sha256": hashlib.sha256(CONTENT).hexdigest(),
                "step": 0,
                "task": "t1",
            },
        )
        run.record("audit", "run.end", {"outcome": "succeeded"})


def _receipt_cli(cwd: Path, *args: str | Path) -> tuple[int, Doc]:
    command = [sys.executable, "-m", "harness.verify.cli", "receipt", *map(str, args)]
    done = subprocess.run(
        [*command, "--format", "json"],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.stdout.endswith("\n") and done.stdout.isascii(), done.stderr
    report: Doc = json.loads(done.stdout)
    assert report["exit_code"] == done.returncode
    return done.returncode, report


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repo folder with src/answer.py and a fresh receipt for it (receipt_for_path)."""
    root = tmp_path_factory.mktemp("fresh")
    _record_state(root / "state")
    run_id, receipt = receipt_for_path(root / "state", KEYS, "src/answer.py")
    assert run_id == "run-7"
    repo = root / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "answer.py").write_bytes(CONTENT)
    (repo / "answer.receipt.json").write_bytes(receipt)
    return repo


def test_fresh_receipt_validates(fresh: Path) -> None:
    receipt = json.loads((fresh / "answer.receipt.json").read_bytes())
    assert _errors("artifact-receipt", receipt) == []
    assert verify_receipt((fresh / "answer.receipt.json").read_bytes()).path == "src/answer.py"


def test_receipt_report_verified_validates(fresh: Path) -> None:
    code, report = _receipt_cli(
        fresh, "answer.receipt.json", "--artifact", "src/answer.py", "--trusted-key", KEYS.key_id
    )
    assert (code, report["status"], report["trusted_by"]) == (0, "verified", "--trusted-key")
    assert report["sha256"] == hashlib.sha256(CONTENT).hexdigest()
    assert _errors("receipt-report", report) == []


def test_receipt_report_untrusted_validates(fresh: Path) -> None:
    code, report = _receipt_cli(fresh, "answer.receipt.json", "--artifact", "src/answer.py")
    assert (code, report["status"]) == (3, "verified-untrusted")
    assert _errors("receipt-report", report) == []


def test_receipt_report_invalid_validates(fresh: Path) -> None:
    edited = fresh / "edited.py"
    edited.write_bytes(CONTENT + b"# hand edit\n")
    code, report = _receipt_cli(
        fresh, "answer.receipt.json", "--artifact", edited, "--name", "src/answer.py"
    )
    assert (code, report["status"]) == (1, "invalid")
    assert "run" in report  # the receipt verified; the file did not match
    assert _errors("receipt-report", report) == []
    broken = json.loads((fresh / "answer.receipt.json").read_bytes())
    broken["tree_size"] += 1
    (fresh / "broken.receipt.json").write_bytes(canonical_bytes(broken))
    code, report = _receipt_cli(fresh, "broken.receipt.json", "--artifact", "src/answer.py")
    assert (code, report["status"], report["signer_key_id"]) == (1, "invalid", None)
    assert "run" not in report
    assert _errors("receipt-report", report) == []


def test_receipt_report_unreadable_validates(fresh: Path) -> None:
    code, report = _receipt_cli(fresh, "answer.receipt.json", "--artifact", "src/missing.py")
    assert (code, report["status"]) == (4, "unreadable")
    assert _errors("receipt-report", report) == []


def test_golden_receipt_report_validates(tmp_path: Path) -> None:
    """The golden vectors attest SHA-256 of the path text: that text is the artifact."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_bytes(b"src/a.py")
    code, report = _receipt_cli(
        tmp_path, VECTORS / "receipt-0.json", "--artifact", "src/a.py", "--trusted-key",
        KEYS.key_id,
    )  # fmt: skip
    assert (code, report["leaf_index"], report["tree_size"]) == (0, 0, 2)
    assert _errors("receipt-report", report) == []


# ---- mutated documents are rejected -----------------------------------------------------------


def _mutated(document: Doc, change: Callable[[Doc], object]) -> Doc:
    copied = copy.deepcopy(document)
    change(copied)
    return copied


def _changed_paths(
    old: object, new: object, at: tuple[object, ...] = ()
) -> list[tuple[object, ...]]:
    """JSON paths at which two documents differ (a member added, removed or changed)."""
    if isinstance(old, dict) and isinstance(new, dict):
        paths: list[tuple[object, ...]] = []
        for key in sorted(set(old) | set(new)):
            if key not in old or key not in new:
                paths.append((*at, key))
            else:
                paths.extend(_changed_paths(old[key], new[key], (*at, key)))
        return paths
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        pairs = enumerate(zip(old, new, strict=True))
        return [p for i, (a, b) in pairs for p in _changed_paths(a, b, (*at, i))]
    return [] if old == new else [at]


def _assert_rejected_for(
    name: str, original: Doc, mutated: Doc, keyword: str, at: tuple[object, ...] | None = None
) -> None:
    """The schema refuses ``mutated`` with ``keyword`` at (or above) a member the mutation touched
    (or at ``at``, for a rule that ties one member to another, e.g. status and reason).

    The unmutated document must validate first: otherwise any unrelated error (an outdated
    golden vector, a typo in the schema) would make every mutation look rejected.
    """
    assert _errors(name, original) == [], f"the unmutated {name} document must validate"
    changed = _changed_paths(original, mutated)
    assert changed, "the mutation changed nothing"
    if at is not None:
        changed = [at]
    errors = list(_validator(name).iter_errors(mutated))
    found = [(list(e.absolute_path), e.validator) for e in errors]
    assert any(
        e.validator == keyword
        and any(
            tuple(e.absolute_path) == p[: len(e.absolute_path)]
            or p == tuple(e.absolute_path)[: len(p)]
            for p in changed
        )
        for e in errors
    ), f"expected {keyword!r} at one of {changed}, got {found}"


RECEIPT_MUTATIONS: dict[str, Callable[[Doc], object]] = {
    "extra member": lambda d: d.update(extra=1),
    "missing cose": lambda d: d.pop("cose"),
    "format": lambda d: d.update(format="harness-verify/receipt"),
    "v 1": lambda d: d.update(v=1),
    "missing final": lambda d: d.pop("final"),
    "final of another log": lambda d: d.update(
        final=d["final"].replace("/final-artifact\n", "/lineage\n")
    ),
    "negative leaf_index": lambda d: d.update(leaf_index=-1),
    "leaf_index as text": lambda d: d.update(leaf_index="0"),
    "tree_size 0": lambda d: d.update(tree_size=0),
    "uppercase hash": lambda d: d["audit_path"].__setitem__(0, d["audit_path"][0].upper()),
    "short hash": lambda d: d["audit_path"].__setitem__(0, d["audit_path"][0][:62]),
    "bad run id": lambda d: d.update(run="../run-1"),
    "cose not base64": lambda d: d.update(cose=d["cose"].replace("+", "-")),
    "checkpoint of audit": lambda d: d.update(
        checkpoint=d["checkpoint"].replace("/lineage\n", "/audit\n")
    ),
}


# The JSON Schema keyword each mutation must trip (its location is derived from the mutation).
EXPECTED_KEYWORD: dict[str, str] = {
    "extra member": "additionalProperties",
    "missing cose": "required",
    "format": "const",
    "v 1": "const",
    "missing final": "required",
    "final of another log": "pattern",
    "negative leaf_index": "minimum",
    "leaf_index as text": "type",
    "tree_size 0": "minimum",
    "uppercase hash": "pattern",
    "short hash": "pattern",
    "bad run id": "pattern",
    "cose not base64": "pattern",
    "checkpoint of audit": "pattern",
    "run without receipts": "required",
    "negative receipt": "minimum",
    "receipt as text": "type",
    "repeated receipt": "uniqueItems",
    "receipts not a list": "type",
    "extra run member": "additionalProperties",
    "other payload type": "const",
    "no signatures": "minItems",
    "17 signatures": "maxItems",
    "signature without sig": "required",
    "signature extra member": "additionalProperties",
    "unpadded payload": "anyOf",
    "mixed alphabets": "anyOf",
    "whitespace in sig": "anyOf",
    "legacy type": "const",
    "no subjects": "minItems",
    "subject with uri": "additionalProperties",
    "subject sha512": "additionalProperties",
    "lineage type on summary": "const",
    "summary without replay": "required",
    "summary extra store": "additionalProperties",
    "summary bad time": "pattern",
    "summary extra member": "additionalProperties",
    "summary key id uppercase": "pattern",
    "store without checkpoints": "minItems",
    "lineage empty model": "anyOf",
    "lineage negative step": "minimum",
    "lineage missing seq": "required",
    "lineage no artifacts": "minItems",
}


@pytest.mark.parametrize("mutation", RECEIPT_MUTATIONS)
def test_mutated_receipts_are_rejected(mutation: str) -> None:
    original = _load("receipt-0.json")
    document = _mutated(original, RECEIPT_MUTATIONS[mutation])
    _assert_rejected_for("artifact-receipt", original, document, EXPECTED_KEYWORD[mutation])
    with pytest.raises(VerificationError):
        verify_receipt(canonical_bytes(document))


MANIFEST_MUTATIONS: dict[str, Callable[[Doc], object]] = {
    "run without receipts": lambda d: d["runs"][0].pop("receipts"),
    "negative receipt": lambda d: d["runs"][0].update(receipts=[-1, 1]),
    "receipt as text": lambda d: d["runs"][0].update(receipts=["0", 1]),
    "repeated receipt": lambda d: d["runs"][0].update(receipts=[1, 1]),
    "receipts not a list": lambda d: d["runs"][0].update(receipts=0),
    "extra run member": lambda d: d["runs"][0].update(attestations=[]),
}


@pytest.mark.parametrize("mutation", MANIFEST_MUTATIONS)
def test_mutated_manifests_are_rejected(mutation: str) -> None:
    original = _load("manifest.json")
    document = _mutated(original, MANIFEST_MUTATIONS[mutation])
    _assert_rejected_for("manifest", original, document, EXPECTED_KEYWORD[mutation])


ENVELOPE_MUTATIONS: dict[str, Callable[[Doc], object]] = {
    "extra member": lambda d: d.update(signed=True),
    "other payload type": lambda d: d.update(payloadType="application/json"),
    "no signatures": lambda d: d.update(signatures=[]),
    "17 signatures": lambda d: d.update(signatures=d["signatures"] * 17),
    "signature without sig": lambda d: d["signatures"][0].pop("sig"),
    "signature extra member": lambda d: d["signatures"][0].update(cert="x"),
    "unpadded payload": lambda d: d.update(payload=d["payload"].rstrip("=") + "A"),
    "mixed alphabets": lambda d: d.update(payload="ab+_" + d["payload"][4:]),
    "whitespace in sig": lambda d: d["signatures"][0].update(sig=" " + d["signatures"][0]["sig"]),
}


@pytest.mark.parametrize("mutation", ENVELOPE_MUTATIONS)
def test_mutated_envelopes_are_rejected(mutation: str) -> None:
    original = _load("lineage.dsse.json")
    document = _mutated(original, ENVELOPE_MUTATIONS[mutation])
    _assert_rejected_for("dsse-envelope", original, document, EXPECTED_KEYWORD[mutation])


STATEMENT_MUTATIONS: dict[str, tuple[str, Callable[[Doc], object]]] = {
    "legacy type": (
        "run-summary",
        lambda d: d.update(_type="https://in-toto.io/Statement/v0.1"),
    ),
    "no subjects": ("run-summary", lambda d: d.update(subject=[])),
    "subject with uri": ("run-summary", lambda d: d["subject"][0].update(uri="file:///x")),
    "subject sha512": ("lineage", lambda d: d["subject"][0]["digest"].update(sha512="ab" * 64)),
    "lineage type on summary": (
        "run-summary",
        lambda d: d.update(predicateType="urn:harness-verify:predicate:lineage:v1"),
    ),
    "summary without replay": ("run-summary", lambda d: d["predicate"]["stores"].pop("replay")),
    "summary extra store": (
        "run-summary",
        lambda d: d["predicate"]["stores"].update(other=d["predicate"]["stores"]["audit"]),
    ),
    "summary bad time": ("run-summary", lambda d: d["predicate"].update(started="2026-01-01")),
    "summary extra member": ("run-summary", lambda d: d["predicate"].update(note="x")),
    "summary key id uppercase": (
        "run-summary",
        lambda d: d["predicate"].update(signer_key_id=d["predicate"]["signer_key_id"].upper()),
    ),
    "store without checkpoints": (
        "run-summary",
        lambda d: d["predicate"]["stores"]["audit"].update(checkpoints=[]),
    ),
    "lineage empty model": ("lineage", lambda d: d["predicate"]["artifacts"][0].update(model="")),
    "lineage negative step": (
        "lineage",
        lambda d: d["predicate"]["artifacts"][0].update(step=-1),
    ),
    "lineage missing seq": ("lineage", lambda d: d["predicate"]["artifacts"][0].pop("seq")),
    "lineage no artifacts": ("lineage", lambda d: d["predicate"].update(artifacts=[])),
}


@pytest.mark.parametrize("mutation", STATEMENT_MUTATIONS)
def test_mutated_statements_are_rejected(mutation: str) -> None:
    envelope, change = STATEMENT_MUTATIONS[mutation]
    original = _statement(envelope)
    document = _mutated(original, change)
    _assert_rejected_for(f"statement-{envelope}", original, document, EXPECTED_KEYWORD[mutation])


def _report(**changes: object) -> Doc:
    report: Doc = {
        "artifact": "src/a.py",
        "certifies": "src/a.py is the final write of its path in run run-1",
        "exit_code": 0,
        "format": "harness-verify/receipt-report",
        "leaf_index": 0,
        "mode": "100644",
        "name": "src/a.py",
        "reason": "",
        "receipt": "r.json",
        "root": "94683d2d6d00255ab769750302161f25e4bcd9afea3206588b8a2479361b8789",
        "run": "run-1",
        "sha256": "4cb4854bf9d4ea6bf9cb31f4eda6b48b73b87992490f60aace407970d380db90",
        "signer_key_id": KEYS.key_id,
        "status": "verified",
        "tree_size": 2,
        "trusted_by": "--trusted-key",
        "version": 1,
    }
    report.update(changes)
    return {key: value for key, value in report.items() if value is not ...}


def test_report_template_is_valid() -> None:
    assert _errors("receipt-report", _report()) == []


@pytest.mark.parametrize(
    ("changes", "keyword"),
    [
        ({"exit_code": 1}, "const"),
        ({"status": "empty"}, "enum"),
        ({"extra": True}, "additionalProperties"),
        ({"trusted_by": None}, "type"),
        ({"root": ...}, "dependentRequired"),
        ({"status": "verified-untrusted", "exit_code": 3}, "type@trusted_by"),
        ({"status": "unreadable", "exit_code": 4, "reason": "x", "trusted_by": None}, "not"),
        (
            {"status": "invalid", "exit_code": 1, "reason": "", "trusted_by": None},
            "minLength@reason",
        ),
        ({"signer_key_id": None}, "type"),
        ({"version": 2}, "const"),
    ],
    ids=str,
)
def test_mutated_reports_are_rejected(changes: dict[str, object], keyword: str) -> None:
    keyword, _, member = keyword.partition("@")
    at = (member,) if member else None
    _assert_rejected_for("receipt-report", _report(), _report(**changes), keyword, at)
