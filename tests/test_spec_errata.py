"""Issue 19: the errata an independent implementation found in docs/spec, each pinned by a test.

Every test here states one rule the spec now writes as a MUST, so that the spec, the reference
and a second implementation cannot drift apart again: the byte facts of the worked examples
(errata 1, 2), what the `receipts` check compares in the attestations (3), the exact form of a
consistency-proof member (4), CBOR map-key equality (7) and where a failure is located (9).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cbor2
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.receipts.dsse import sign_envelope
from harness.receipts.keys import OperatorKeys
from harness.verify.bundle import verify_bundle
from harness.verify.canonical import canonical_bytes, parse_canonical
from harness.verify.cose import MalformedCoseError, verify_sign1
from harness.verify.errors import CanonicalEncodingError
from harness.verify.fsm import TRANSITIONS, is_legal
from harness.verify.layout import (
    attestation_member,
    checkpoint_member,
    consistency_member,
    key_member,
    quarantine_member,
    store_member,
    tar_header_bytes,
)
from harness.verify.policy import TrustPolicy
from harness.verify.report import Report

from .corpus import RUN_ID, Bundle, export_run, operator_keys
from .evidence_helpers import make_keys

SPEC = Path(__file__).resolve().parents[1] / "docs" / "spec"


def _verify(data: bytes, keys: OperatorKeys) -> Report:
    return verify_bundle(io.BytesIO(data), pins=TrustPolicy(frozenset({keys.key_id}), "test"))


# ---------------------------------------------------------------- erratum 1: canonical-json §5


def _spec_bytes(text: str) -> bytes:
    """The bytes a worked-example cell denotes: ``\\xNN`` is one raw byte, the rest UTF-8."""
    out = bytearray()
    for part in re.split(r"(\\x[0-9A-Fa-f]{2})", text):
        if re.fullmatch(r"\\x[0-9A-Fa-f]{2}", part):
            out.append(int(part[2:], 16))
        else:
            out += part.encode("utf-8")
    return bytes(out)


def _example_rows() -> dict[str, tuple[str, str]]:
    rows = {}
    for line in (SPEC / "canonical-json.md").read_text(encoding="utf-8").splitlines():
        match = re.fullmatch(r"\| (\d+) \| `([^`]*)`[^|]*\| (accepted|rejected) \|.*", line)
        if match:
            rows[match[1]] = (match[2], match[3])
    return rows


@pytest.mark.parametrize("row", ["35", "36", "37", "38"])
def test_key_order_examples_mean_what_they_say(row: str) -> None:
    """Rows 37/38 once held U+05D3 U+05BC (an editor's NFC of U+FB33): row 37 was rejected."""
    cell, outcome = _example_rows()[row]
    data = _spec_bytes(cell)
    if outcome == "accepted":
        parse_canonical(data)
    else:
        with pytest.raises(CanonicalEncodingError):
            parse_canonical(data)


def test_fb33_rows_are_written_as_bytes() -> None:
    cell, _ = _example_rows()["37"]
    assert _spec_bytes(cell) == b'{"\xf0\x9f\x98\x80":2,"\xef\xac\xb3":1}'
    text = (SPEC / "canonical-json.md").read_text(encoding="utf-8")
    assert "\u05d3\u05bc" not in text  # the normalised form that made the example wrong
    assert canonical_bytes({"\U0001f600": 1, "\ufb33": 2}) == (
        b'{"\xf0\x9f\x98\x80":1,"\xef\xac\xb3":2}'
    )
    assert canonical_bytes({"\U0001f600": 1, "\u05d3\u05bc": 2}) == (
        b'{"\xd7\x93\xd6\xbc":2,"\xf0\x9f\x98\x80":1}'
    )


# ---------------------------------------------------------------- erratum 2: bundle §2.2 step 2


@pytest.mark.parametrize(("length", "record"), [(101, 111), (125, 135), (989, 999), (990, 1001)])
def test_pax_record_length(length: int, record: int) -> None:
    """``<n>`` counts itself: the smallest n with n = len(name) + 7 + digits(n)."""
    name = ("a" * 127 + "/") * 8
    name = name[: length - 1] + "b"
    header = tar_header_bytes(name, 0)
    assert header[124:136] == f"{record:011o}\0".encode()  # size field of the pax header
    assert header[512 : 512 + record] == f"{record} path={name}\n".encode()
    end = 512 + -(-record // 512) * 512  # the record, then NUL up to a block boundary
    assert header[512 + record : end].count(0) == end - 512 - record
    assert len(header) == end + 512  # then the ustar block


def test_pax_example_in_the_spec() -> None:
    text = (SPEC / "bundle.md").read_text(encoding="utf-8")
    assert "`135 path=…\\n`, 135 bytes" in text
    assert "134 path=" not in text


# ---------------------------------------------------------------- a bundle with attestations


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, OperatorKeys]:
    """A run with records in every store, two final artifacts, receipts and attestations."""
    keys = operator_keys()
    _, path = export_run(tmp_path_factory.mktemp("full"), keys)
    data = path.read_bytes()
    report = _verify(data, keys)
    assert report.status.value == "verified", report.failure
    assert attestation_member(RUN_ID, "lineage.dsse.json") in Bundle.from_tar(data, keys).members
    return data, keys


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, OperatorKeys]:
    """Only an audit store of 4 records, checkpoints at 2 and 4, one consistency proof."""
    keys = operator_keys()
    _, path = export_run(tmp_path_factory.mktemp("small"), keys, small=True)
    data = path.read_bytes()
    assert _verify(data, keys).status.value == "verified"
    return data, keys


def _edited(data: bytes, keys: OperatorKeys, edit: Callable[[Bundle], None], **kw: Any) -> bytes:
    bundle = Bundle.from_tar(data, keys)
    edit(bundle)
    return bundle.resign(**kw)


def _statement(bundle: Bundle, name: str) -> dict[str, Any]:
    envelope = json.loads(bundle.members[attestation_member(RUN_ID, f"{name}.dsse.json")])
    statement: dict[str, Any] = json.loads(base64.b64decode(envelope["payload"]))
    return statement


def _resign(bundle: Bundle, name: str, change: Callable[[dict[str, Any]], None]) -> None:
    """Change an attestation's statement and sign it again with the operator's key."""
    statement = _statement(bundle, name)
    change(statement)
    bundle.members[attestation_member(RUN_ID, f"{name}.dsse.json")] = sign_envelope(
        "application/vnd.in-toto+json",
        canonical_bytes(statement),
        bundle.keys.signing_key,
        keyid=bundle.keys.key_id,
    )


def _refused(report: Report, check: str, member: str | None) -> None:
    assert report.status.value == "invalid", report.status
    assert report.failure is not None
    assert report.failure.check == check, report.failure
    assert report.failure.member == member, report.failure


# ---------------------------------------------------------------- erratum 3: what is compared


def _summary(change: Callable[[dict[str, Any]], None]) -> Callable[[Bundle], None]:
    return lambda b: _resign(b, "run-summary", lambda s: change(s["predicate"]))


def _lineage(change: Callable[[dict[str, Any]], None]) -> Callable[[Bundle], None]:
    return lambda b: _resign(b, "lineage", lambda s: change(s["predicate"]))


def _provenance(change: Callable[[dict[str, Any]], None]) -> Callable[[Bundle], None]:
    return lambda b: _resign(b, "provenance", lambda s: change(s["predicate"]))


def _later(time: str) -> str:
    return time[:-2] + ("1" if time[-2] != "1" else "2") + "Z"


ATTESTATION_CHANGES: dict[str, tuple[Callable[[Bundle], None], str]] = {
    "started changed": (_summary(lambda p: p.update(started=_later(p["started"]))), "run-summary"),
    "started removed": (_summary(lambda p: p.pop("started")), "run-summary"),
    "finished changed": (
        _summary(lambda p: p.update(finished=_later(p["finished"]))),
        "run-summary",
    ),
    "finished removed": (_summary(lambda p: p.pop("finished")), "run-summary"),
    "producer changed": (_summary(lambda p: p.update(producer="other 9.9")), "run-summary"),
    "summary extra member": (_summary(lambda p: p.update(note="x")), "run-summary"),
    "store extra member": (_summary(lambda p: p["stores"]["audit"].update(x=1)), "run-summary"),
    "records true for 1": (
        _summary(lambda p: p["stores"]["replay"].update(records=True)),
        "run-summary",
    ),
    "lineage model changed": (
        _lineage(lambda p: p["artifacts"][0].update(model="other")),
        "lineage",
    ),
    "lineage extra member": (_lineage(lambda p: p.update(extra=[])), "lineage"),
    "lineage artifact extra member": (
        _lineage(lambda p: p["artifacts"][0].update(parents=[])),
        "lineage",
    ),
    "lineage artifacts reordered": (_lineage(lambda p: p["artifacts"].reverse()), "lineage"),
    "provenance startedOn changed": (
        _provenance(
            lambda p: p["runDetails"]["metadata"].update(
                startedOn=_later(p["runDetails"]["metadata"]["startedOn"])
            )
        ),
        "provenance",
    ),
    "provenance internalParameters": (
        _provenance(lambda p: p["buildDefinition"].update(internalParameters={})),
        "provenance",
    ),
    "provenance extra member": (_provenance(lambda p: p.update(extra=1)), "provenance"),
}


@pytest.mark.parametrize("case", sorted(ATTESTATION_CHANGES))
def test_attestation_predicate_is_compared_in_full(
    full: tuple[bytes, OperatorKeys], case: str
) -> None:
    """receipts.md §7.2 step 5: the whole predicate equals the one re-derived from the records."""
    data, keys = full
    edit, name = ATTESTATION_CHANGES[case]
    report = _verify(_edited(data, keys, edit), keys)
    _refused(report, "receipts", attestation_member(RUN_ID, f"{name}.dsse.json"))
    assert "predicate does not state exactly" in report.failure.reason  # type: ignore[union-attr]


def test_run_summary_producer_must_equal_the_manifest_producer(
    full: tuple[bytes, OperatorKeys],
) -> None:
    """The rule no page stated: run-summary `producer` = manifest `producer`, byte for byte."""
    data, keys = full
    forged = _edited(
        data, keys, lambda b: None, update=lambda m: m.update(producer="harness-verify 9.9")
    )
    _refused(_verify(forged, keys), "receipts", attestation_member(RUN_ID, "run-summary.dsse.json"))


def test_both_producers_changed_together_verify(full: tuple[bytes, OperatorKeys]) -> None:
    """`producer` is free text: only the equality of the two is a rule, not its value."""
    data, keys = full
    bundle = Bundle.from_tar(data, keys)
    _resign(bundle, "run-summary", lambda s: s["predicate"].update(producer="other 1"))
    statement = canonical_bytes(_statement(bundle, "run-summary"))
    cose = attestation_member(RUN_ID, "run-summary.cose")
    bundle.members[cose] = _cose_statement(bundle.keys, bundle.members[cose], statement)
    report = _verify(bundle.resign(update=lambda m: m.update(producer="other 1")), keys)
    assert report.status.value == "verified", report.failure


def _cose_statement(keys: OperatorKeys, old: bytes, payload: bytes) -> bytes:
    """The run-summary COSE_Sign1 again, with the same protected header, over ``payload``."""
    tag = cbor2.loads(old)
    protected = tag.value[0]
    to_sign = cbor2.dumps(["Signature1", protected, b"", payload])
    signature = keys.signing_key.sign(to_sign)
    return cbor2.dumps(cbor2.CBORTag(18, [protected, {}, payload, signature]))


def test_subject_order_is_not_compared(full: tuple[bytes, OperatorKeys]) -> None:
    """A MUST-accept: subjects are a set (receipts.md §7.2 step 5)."""
    data, keys = full
    edit = lambda b: _resign(b, "lineage", lambda s: s["subject"].reverse())  # noqa: E731
    bundle = Bundle.from_tar(data, keys)
    assert len(_statement(bundle, "lineage")["subject"]) == 2
    assert _verify(_edited(data, keys, edit), keys).status.value == "verified"


def test_non_canonical_statement_is_refused(full: tuple[bytes, OperatorKeys]) -> None:
    data, keys = full

    def spaced(bundle: Bundle) -> None:
        member = attestation_member(RUN_ID, "provenance.dsse.json")
        statement = _statement(bundle, "provenance")
        bundle.members[member] = sign_envelope(
            "application/vnd.in-toto+json",
            json.dumps(statement).encode(),  # not RFC 8785: spaces after separators
            bundle.keys.signing_key,
            keyid=bundle.keys.key_id,
        )

    report = _verify(_edited(data, keys, spaced), keys)
    _refused(report, "receipts", attestation_member(RUN_ID, "provenance.dsse.json"))


def test_non_canonical_envelope_is_refused(full: tuple[bytes, OperatorKeys]) -> None:
    data, keys = full
    member = attestation_member(RUN_ID, "lineage.dsse.json")

    def spaced(bundle: Bundle) -> None:
        bundle.members[member] = json.dumps(json.loads(bundle.members[member])).encode()

    _refused(_verify(_edited(data, keys, spaced), keys), "receipts", member)


# ---------------------------------------------------------------- erratum 4: proof member form


def _proof_member() -> str:
    return consistency_member(RUN_ID, "audit", 2, 4)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda d: d.update(v=True), id="v-true"),
        pytest.param(lambda d: d.update(proof=[h.upper() for h in d["proof"]]), id="uppercase"),
        pytest.param(
            lambda d: d.update(proof=[" ".join(re.findall("..", h)) for h in d["proof"]]),
            id="spaced",
        ),
        pytest.param(lambda d: d.update(proof=[h + "00" for h in d["proof"]]), id="long"),
        pytest.param(lambda d: d.update(size1="2"), id="size-string"),
    ],
)
def test_consistency_proof_accepts_only_the_writers_form(
    small: tuple[bytes, OperatorKeys], change: Callable[[dict[str, Any]], None]
) -> None:
    data, keys = small
    member = _proof_member()

    def edit(bundle: Bundle) -> None:
        doc = parse_canonical(bundle.members[member])
        assert doc["proof"], "the proof must have hashes for this test"
        change(doc)
        bundle.members[member] = canonical_bytes(doc)

    _refused(_verify(_edited(data, keys, edit), keys), "consistency-proofs", member)


def test_schema_description_states_the_one_accepted_form() -> None:
    schema = json.loads((SPEC.parents[1] / "schemas" / "consistency-proof.schema.json").read_text())
    assert "also accepts" not in schema["description"]
    assert "MUST accept exactly this form" in schema["description"]


# ---------------------------------------------------------------- erratum 7: CBOR map keys

PRIVATE = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"errata").digest())


def _message(protected: bytes, unprotected: bytes = b"\xa0") -> bytes:
    """A validly signed COSE_Sign1 with the given raw protected and unprotected headers."""
    payload = b"payload"
    signature = PRIVATE.sign(cbor2.dumps(["Signature1", protected, b"", payload]))
    body = cbor2.dumps(protected) + unprotected + cbor2.dumps(payload) + cbor2.dumps(signature)
    return b"\xd2\x84" + body  # tag 18, array of 4


@pytest.mark.parametrize(
    ("nested", "why"),
    [
        (b"\xa2\x01\x00\xf5\x00", "1 and true in one map"),
        (b"\xa2\x00\x00\xf4\x00", "0 and false in one map"),
        (b"\xa1\xf5\x00", "a lone true key"),
        (b"\xa1\xf6\x00", "a null key"),
        (b"\xa1\x81\x01\x00", "an array key"),
        (b"\xa2\xa2\x01\x00\x02\x00\x00\xa2\x02\x00\x01\x00\x00", "map keys in another order"),
        (b"\xa2\x01\x00\x01\x01", "the same key bytes twice"),
    ],
)
def test_map_keys_are_ints_or_strings_and_equal_by_bytes(nested: bytes, why: str) -> None:
    """receipts.md §4.2 rule 2: every map key is an int, byte or text string; two keys are
    duplicates exactly when their encoded bytes are equal."""
    unprotected = b"\xa1\x18\x21" + nested  # {33: <nested map>}
    with pytest.raises(MalformedCoseError):
        verify_sign1(_message(b"\xa1\x01\x27", unprotected), PRIVATE.public_key())


def test_distinct_keys_of_the_three_kinds_are_accepted() -> None:
    nested = b"\xa4\x01\x00\x20\x00\x41\x01\x00\x61\x01\x00"  # {1:0, -1:0, h'01':0, "\x01":0}
    unprotected = b"\xa1\x18\x21" + nested
    message = _message(b"\xa1\x01\x27", unprotected)
    assert verify_sign1(message, PRIVATE.public_key()) == b"payload"


# ---------------------------------------------------------------- erratum 9: failure location


def test_manifest_signature_failure_names_no_member(small: tuple[bytes, OperatorKeys]) -> None:
    data, keys = small
    other = make_keys(9)
    forged = Bundle.from_tar(data, keys).resign(sign_with=other, declare=keys)
    report = _verify(forged, keys)
    _refused(report, "manifest-signature", None)
    assert report.failure is not None
    assert (report.failure.line, report.failure.seq) == (None, None)


def test_manifest_parse_failure_names_no_member(small: tuple[bytes, OperatorKeys]) -> None:
    data, keys = small
    forged = Bundle.from_tar(data, keys).resign(update=lambda m: m.update(producer=""))
    _refused(_verify(forged, keys), "manifest-signature", None)


def test_root_mismatch_names_the_store_line_and_seq_of_the_checkpoint(
    small: tuple[bytes, OperatorKeys],
) -> None:
    """An edited record 0 shows at the first checkpoint (size 2): line 2, seq 1."""
    data, keys = small
    member = store_member(RUN_ID, "audit")

    def edit(bundle: Bundle) -> None:
        lines = bundle.store("audit")
        lines[0] = lines[0].replace(b'"name":"a"', b'"name":"z"')
        bundle.set_store("audit", lines)

    report = _verify(_edited(data, keys, edit), keys)
    _refused(report, "merkle-roots", member)
    assert report.failure is not None
    assert (report.failure.line, report.failure.seq) == (2, 1)


def test_record_failure_before_parsing_has_a_line_but_no_seq(
    small: tuple[bytes, OperatorKeys],
) -> None:
    data, keys = small

    def edit(bundle: Bundle) -> None:
        lines = bundle.store("audit")
        lines[2] = lines[2].replace(b'{"', b'{ "', 1)  # not canonical
        bundle.set_store("audit", lines)

    report = _verify(_edited(data, keys, edit), keys)
    _refused(report, "records", store_member(RUN_ID, "audit"))
    assert report.failure is not None
    assert (report.failure.line, report.failure.seq) == (3, None)


def test_seq_failure_reports_the_records_own_seq(small: tuple[bytes, OperatorKeys]) -> None:
    data, keys = small

    def edit(bundle: Bundle) -> None:
        lines = bundle.store("audit")
        lines[1] = lines[1].replace(b'"seq":1', b'"seq":7')
        bundle.set_store("audit", lines)

    report = _verify(_edited(data, keys, edit), keys)
    _refused(report, "records", store_member(RUN_ID, "audit"))
    assert report.failure is not None
    assert (report.failure.line, report.failure.seq) == (2, 7)


def test_hmac_failure_names_member_line_and_seq(small: tuple[bytes, OperatorKeys]) -> None:
    data, keys = small
    report = verify_bundle(
        io.BytesIO(data),
        pins=TrustPolicy(frozenset({keys.key_id}), "test"),
        hmac_master=bytes(range(1, 33)),
    )
    _refused(report, "hmac-chain", store_member(RUN_ID, "audit"))
    assert report.failure is not None
    assert (report.failure.line, report.failure.seq) == (1, 0)


def test_quarantine_claim_mismatch_names_the_quarantine_member(
    small: tuple[bytes, OperatorKeys],
) -> None:
    data, keys = small
    member = quarantine_member(RUN_ID, "audit")

    def edit(bundle: Bundle) -> None:
        bundle.members[member] = b""

    def claim(manifest: dict[str, Any]) -> None:
        manifest["runs"][0]["stores"]["audit"]["quarantine"] = True

    report = _verify(_edited(data, keys, edit, update=claim), keys)
    _refused(report, "records", member)
    assert report.failure is not None
    assert (report.failure.line, report.failure.seq) == (None, None)


def test_members_failure_names_the_member(small: tuple[bytes, OperatorKeys]) -> None:
    data, keys = small
    bundle = Bundle.from_tar(data, keys)
    bundle.members["runs/run-1/extra.txt"] = b"x"
    report = _verify(bundle.tar(), keys)  # not re-signed: the manifest does not list it
    _refused(report, "members", "runs/run-1/extra.txt")


def test_consistency_failure_names_the_proof_member(small: tuple[bytes, OperatorKeys]) -> None:
    data, keys = small
    member = _proof_member()

    def edit(bundle: Bundle) -> None:
        doc = parse_canonical(bundle.members[member])
        doc["proof"][0] = "00" * 32
        bundle.members[member] = canonical_bytes(doc)

    report = _verify(_edited(data, keys, edit), keys)
    _refused(report, "consistency-proofs", member)
    assert report.failure is not None
    assert (report.failure.line, report.failure.seq) == (None, None)


def test_untrusted_names_no_member(small: tuple[bytes, OperatorKeys]) -> None:
    data, _ = small
    report = verify_bundle(io.BytesIO(data))
    assert report.status.value == "verified-untrusted"
    assert report.failure is not None and report.failure.check == "trust"
    assert (report.failure.member, report.failure.line, report.failure.seq) == (None, None, None)


def test_checkpoint_size_mismatch_names_the_checkpoint(small: tuple[bytes, OperatorKeys]) -> None:
    data, keys = small
    first = checkpoint_member(RUN_ID, "audit", 2)

    def edit(bundle: Bundle) -> None:
        bundle.members[first] = bundle.members[checkpoint_member(RUN_ID, "audit", 4)]

    _refused(_verify(_edited(data, keys, edit), keys), "merkle-roots", first)


def test_checkpoint_signature_failure_names_no_member(small: tuple[bytes, OperatorKeys]) -> None:
    data, keys = small
    member = checkpoint_member(RUN_ID, "audit", 2)

    def edit(bundle: Bundle) -> None:
        note = bundle.members[member]
        cut = note.rindex(b" ") + 10  # inside the base64 of the signature line
        bundle.members[member] = (
            note[:cut] + (b"A" if note[cut : cut + 1] != b"A" else b"B") + (note[cut + 1 :])
        )

    _refused(_verify(_edited(data, keys, edit), keys), "merkle-roots", None)


# ---------------------------------------------------------------- verifier §3.10: read errors


def _unreadable(report: Report, member: str) -> None:
    """A member over its kind's limit is an ``archive`` failure, *unreadable*, located at the
    member (verifier.md §3.0, §3.10); earlier drafts said *invalid* under the reading check."""
    assert report.status.value == "unreadable", (report.status, report.failure)
    assert report.failure is not None and report.failure.check == "archive", report.failure
    assert (report.failure.member, report.failure.line, report.failure.seq) == (member, None, None)


def test_oversized_proof_member_is_unreadable(small: tuple[bytes, OperatorKeys]) -> None:
    """Earlier drafts said *invalid* (the reader wrapped the read error)."""
    data, keys = small
    member = _proof_member()

    def edit(bundle: Bundle) -> None:
        bundle.members[member] = bundle.members[member] + b" " * (1 << 20)

    _unreadable(_verify(_edited(data, keys, edit), keys), member)


def test_oversized_receipt_member_is_unreadable(full: tuple[bytes, OperatorKeys]) -> None:
    data, keys = full
    bundle = Bundle.from_tar(data, keys)
    member = sorted(n for n in bundle.members if "/receipts/" in n)[0]
    bundle.members[member] = bundle.members[member] + b" " * (4 << 20)
    _unreadable(_verify(bundle.resign(), keys), member)


# ---------------------------------------------------------------- erratum 6: runtime.md §2


def test_lifecycle_table_rows_are_exactly_the_legal_transitions() -> None:
    """Rows marked "not used" are legal too: the table is the legal set, no more, no less."""
    text = (SPEC / "runtime.md").read_text(encoding="utf-8")
    section = text[text.index("## 2. Task lifecycle") : text.index("\n## 3.")]
    rows = set(re.findall(r"^\| `([a-z_]+)` \| `([a-z_]+)` \|", section, flags=re.MULTILINE))
    legal = {(a.value, b.value) for a, targets in TRANSITIONS.items() for b in targets}
    assert rows == legal
    assert "not used" in section  # the rows the reference runtime never writes are still listed
    assert all(is_legal(a, b) for a, b in rows)


# ---------------------------------------------------------------- erratum 11: HMAC key files


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        (b"ab" * 32 + b"\n", True),
        (b"AB" * 32, True),
        (b"\t" + b"ab " * 32 + b"\r\n", True),
        (b"ab\x0b\x0c" * 32, True),
        (b"\x1c" + b"ab" * 32, True),  # verifier only: str.strip removes 1C-1F
        (b"a b" + b"ab" * 31 + b"b", False),  # whitespace inside a pair
        (b"ab\x1f" * 32, False),  # 1F between pairs
        (b"ab" * 31, False),  # 31 bytes
        (b"\xc2\xa0" + b"ab" * 32, False),  # not ASCII
    ],
)
def test_verifier_hmac_key_file_rule(tmp_path: Path, text: bytes, ok: bool) -> None:
    import typer

    from harness.verify.cli import _read_hmac_key

    path = tmp_path / "hmac.key"
    path.write_bytes(text)
    if ok:
        assert _read_hmac_key(path) == bytes.fromhex("ab" * 32)
    else:
        with pytest.raises(typer.BadParameter):
            _read_hmac_key(path)


def test_runtime_hmac_key_file_does_not_strip_1c(tmp_path: Path) -> None:
    from harness.receipts.keys import KeyFileError, load_hmac_master

    path = tmp_path / "hmac.key"
    path.write_bytes(b"\x1c" + b"ab" * 32)
    path.chmod(0o600)
    with pytest.raises(KeyFileError):
        load_hmac_master(path)
    path.write_bytes(b" " + b"ab " * 32 + b"\n")
    assert load_hmac_master(path) == bytes.fromhex("ab" * 32)


# ---------------------------------------------------------------- erratum 12: header byte rules


def _spec_ustar(
    name: bytes, size: int, *, typeflag: bytes = b"0", mode: bytes = b"0000644"
) -> bytes:
    """bundle.md §2.1, written from the table alone (no tarfile)."""
    fields = [
        name.ljust(100, b"\0")[:100],
        mode + b"\0",
        b"0000000\0",
        b"0000000\0",
        b"%011o\0" % size,
        b"00000000000\0",
        b" " * 8,  # chksum, counted as spaces
        typeflag,
        bytes(100),
        b"ustar\0",
        b"00",
        bytes(32),
        bytes(32),
        bytes(8),
        bytes(8),
        bytes(155),
        bytes(12),
    ]
    block = b"".join(fields)
    assert len(block) == 512
    checksum = b"%06o\0 " % sum(block)
    return block[:148] + checksum + block[156:]


def _spec_header(name: str, size: int) -> bytes:
    """bundle.md §2.1 and §2.2 as byte rules."""
    raw = name.encode("ascii")
    if len(raw) <= 100:
        return _spec_ustar(raw, size)
    k = len(raw)
    n = next(k + 7 + d for d in range(1, 6) if len(str(k + 7 + d)) == d)
    record = b"%d path=%s\n" % (n, raw)
    assert len(record) == n
    pax = _spec_ustar(b"././@PaxHeader", n, typeflag=b"x", mode=b"0000000")
    return pax + record.ljust(-(-n // 512) * 512, b"\0") + _spec_ustar(raw[:100], size)


@pytest.mark.parametrize(
    ("name", "size"),
    [
        ("manifest.json", 2393),
        ("manifest.sig", 0),
        ("runs/run-1/stores/audit.jsonl", 8**11 - 1),
        ("x" * 100, 1),
        ("a/" + "b" * 123, 512),
        ("/".join(["s" * 128] * 8), 4 << 30),
    ],
)
def test_reference_header_bytes_are_the_spec_byte_rules(name: str, size: int) -> None:
    """A reader without CPython's tarfile computes §2's bytes and gets the reference's."""
    assert tar_header_bytes(name, size) == _spec_header(name, size)


def test_manifest_header_checksum_example() -> None:
    assert _spec_header("manifest.json", 2393)[148:156] == b"010451\0 "


def test_receipt_version_true_is_refused(full: tuple[bytes, OperatorKeys]) -> None:
    """Format 2 receipts: ``v`` is compared with 2, so ``true`` (== 1) no longer passes."""
    data, keys = full
    bundle = Bundle.from_tar(data, keys)
    member = sorted(n for n in bundle.members if "/receipts/" in n)[0]
    doc = parse_canonical(bundle.members[member])
    assert doc["v"] == 2
    doc["v"] = True
    bundle.members[member] = canonical_bytes(doc)
    _refused(_verify(bundle.resign(), keys), "receipts", member)


def test_truncated_member_data_names_the_member(small: tuple[bytes, OperatorKeys]) -> None:
    data, keys = small
    cut = data.index(b'{"body"') + 10  # inside the first store line
    report = _verify(data[:cut], keys)
    assert report.status.value == "unreadable"
    assert report.failure is not None and report.failure.check == "archive"
    assert report.failure.member == store_member(RUN_ID, "audit")


def test_other_archive_failures_name_no_member(small: tuple[bytes, OperatorKeys]) -> None:
    data, keys = small
    report = _verify(data + bytes(10240), keys)  # one record of zeros too many
    assert report.status.value == "unreadable"
    assert report.failure is not None and report.failure.check == "archive"
    assert (report.failure.member, report.failure.line, report.failure.seq) == (None, None, None)


def test_bad_key_file_names_the_key_member(small: tuple[bytes, OperatorKeys]) -> None:
    data, keys = small
    bundle = Bundle.from_tar(data, keys)
    member = key_member(keys.key_id)
    bundle.members[member] = make_keys(9).note_signer().verifier_key().encode() + b"\n"
    report = _verify(bundle.tar(), keys)  # manifest.sig verifies only under the real key
    _refused(report, "manifest-signature", member)


def test_manifest_signer_other_than_key_file_names_no_member(
    small: tuple[bytes, OperatorKeys],
) -> None:
    data, keys = small
    other = make_keys(9).note_signer().verifier_key()
    forged = Bundle.from_tar(data, keys).resign(update=lambda m: m.update(signer=other))
    _refused(_verify(forged, keys), "manifest-signature", None)


def test_two_broken_stores_report_the_first_in_archive_order(
    full: tuple[bytes, OperatorKeys],
) -> None:
    """verifier.md §2/§3.4: stores are checked in archive order (audit, control, lineage,
    replay), so with control and lineage both broken, control is the failure reported."""
    data, keys = full

    def edit(bundle: Bundle) -> None:
        for store in ("lineage", "control"):
            lines = bundle.store(store)
            lines[0] = lines[0].replace(b'{"', b'{ "', 1)
            bundle.set_store(store, lines)

    report = _verify(_edited(data, keys, edit), keys)
    _refused(report, "records", store_member(RUN_ID, "control"))


def test_manifest_density_rule_names_the_manifest(small: tuple[bytes, OperatorKeys]) -> None:
    """verifier.md §3.2 step 6: more than 256 + size/8 of ``,[{:`` bytes is refused (signed)."""
    data, keys = small
    padded = Bundle.from_tar(data, keys).resign(
        update=lambda m: m.update(producer="harness-verify " + ":" * 4000)
    )
    _refused(_verify(padded, keys), "manifest-signature", "manifest.json")
    fine = Bundle.from_tar(data, keys).resign(
        update=lambda m: m.update(producer="harness-verify " + ":" * 200)
    )
    report = _verify(fine, keys)  # within the rule: now only the run summaries disagree
    assert report.failure is None or report.failure.check != "manifest-signature"


def test_third_member_must_be_the_key_file(small: tuple[bytes, OperatorKeys]) -> None:
    """An extra member sorting before ``keys/`` is no longer a ``members`` failure."""
    data, keys = small
    bundle = Bundle.from_tar(data, keys)
    bundle.members["a.txt"] = b"x"
    _refused(_verify(bundle.resign(), keys), "manifest-signature", None)
