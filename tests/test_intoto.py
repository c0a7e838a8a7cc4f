"""in-toto Statement v1: our builders, the strict parser, and the reference Python bindings.

The rules under test are documented in ``harness.verify.intoto`` (parser) and
``harness.receipts.intoto`` (builders).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.receipts.dsse import sign_envelope
from harness.receipts.intoto import (
    DEFAULT_BUILD_TYPE,
    lineage_predicate,
    run_summary_predicate,
    slsa_provenance_predicate,
    statement,
)
from harness.verify.canonical import parse_canonical
from harness.verify.dsse import verify_envelope
from harness.verify.intoto import (
    PAYLOAD_TYPE_IN_TOTO,
    PREDICATE_LINEAGE,
    PREDICATE_RUN_SUMMARY,
    PREDICATE_SLSA_PROVENANCE,
    STATEMENT_TYPE,
    DisallowedPredicateTypeError,
    Statement,
    StatementError,
    StatementTypeError,
    Subject,
    parse_statement,
)
from harness.verify.keyids import key_id

KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
KEY_ID = key_id(KEY.public_key().public_bytes_raw())
SHA_A = hashlib.sha256(b"a").hexdigest()
SHA_B = hashlib.sha256(b"b").hexdigest()
ROOT = hashlib.sha256(b"root").hexdigest()
T0 = "2026-01-02T03:04:05.000006Z"
T1 = "2026-01-02T03:04:06.000000Z"
OURS = frozenset({PREDICATE_RUN_SUMMARY, PREDICATE_LINEAGE, PREDICATE_SLSA_PROVENANCE})
SUBJECTS = [("src/a.py", SHA_A), ("docs/b.md", SHA_B)]


def summary(**overrides: Any) -> dict[str, object]:
    args: dict[str, Any] = {
        "run_id": "run-1",
        "producer": "harness-verify 0.1.0",
        "signer_key_id": KEY_ID,
        "started": T0,
        "finished": T1,
        "stores": {
            "lineage": {"records": 7, "root": ROOT, "checkpoints": [3, 7]},
            "audit": {"records": 0, "root": ROOT, "checkpoints": [0]},
        },
    }
    args.update(overrides)
    return run_summary_predicate(**args)


def artifact(**overrides: object) -> dict[str, object]:
    base: dict[str, object] = {
        "path": "src/a.py", "sha256": SHA_A, "seq": 4, "actor": "agent-1",
        "task": "t1", "step": 2, "model": "m-1",
    }  # fmt: skip
    base.update(overrides)
    return base


def provenance(**overrides: Any) -> dict[str, object]:
    args: dict[str, Any] = {
        "run_id": "run-1",
        "builder_id": "urn:harness-verify:builder:harness",
        "external_parameters": {"run": "run-1", "plan": {"tasks": 3}},
        "started": T0,
        "finished": T1,
    }
    args.update(overrides)
    return slsa_provenance_predicate(**args)


def all_statements() -> dict[str, bytes]:
    return {
        PREDICATE_RUN_SUMMARY: statement(SUBJECTS, PREDICATE_RUN_SUMMARY, summary()),
        PREDICATE_LINEAGE: statement(
            SUBJECTS,
            PREDICATE_LINEAGE,
            lineage_predicate(
                run_id="run-1",
                artifacts=[artifact(), artifact(path="docs/b.md", sha256=SHA_B, model=None)],
            ),
        ),
        PREDICATE_SLSA_PROVENANCE: statement(SUBJECTS, PREDICATE_SLSA_PROVENANCE, provenance()),
    }


def dump(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def parse(obj: Any, allowed: frozenset[str] = OURS) -> Statement:
    return parse_statement(dump(obj), allowed_predicate_types=allowed)


def good_obj() -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(all_statements()[PREDICATE_RUN_SUMMARY])
    return obj


# ---- builders: output shape --------------------------------------------------------------


def test_statement_shape_and_round_trip() -> None:
    data = all_statements()[PREDICATE_RUN_SUMMARY]
    obj = parse_canonical(data)  # canonical, integers only
    assert obj["_type"] == STATEMENT_TYPE
    assert obj["subject"] == [
        {"name": "src/a.py", "digest": {"sha256": SHA_A}},
        {"name": "docs/b.md", "digest": {"sha256": SHA_B}},
    ]
    parsed = parse_statement(data, allowed_predicate_types=OURS)
    assert parsed == Statement(
        subjects=(Subject("src/a.py", {"sha256": SHA_A}), Subject("docs/b.md", {"sha256": SHA_B})),
        predicate_type=PREDICATE_RUN_SUMMARY,
        predicate=summary(),
    )


def test_run_summary_predicate_members() -> None:
    assert summary() == {
        "run": "run-1",
        "producer": "harness-verify 0.1.0",
        "signer_key_id": KEY_ID,
        "started": T0,
        "finished": T1,
        "stores": {
            "lineage": {"records": 7, "root": ROOT, "checkpoints": [3, 7]},
            "audit": {"records": 0, "root": ROOT, "checkpoints": [0]},
        },
    }
    bare = summary(started=None, finished=None, stores={})
    assert "started" not in bare and "finished" not in bare and bare["stores"] == {}


def test_lineage_predicate_members() -> None:
    pred = lineage_predicate(run_id="r", artifacts=[artifact(model=None)])
    assert pred == {"run": "r", "artifacts": [artifact(model=None)]}
    assert lineage_predicate(run_id="r", artifacts=[]) == {"run": "r", "artifacts": []}


def test_slsa_predicate_members_and_optional_omission() -> None:
    assert provenance() == {
        "buildDefinition": {
            "buildType": DEFAULT_BUILD_TYPE,
            "externalParameters": {"run": "run-1", "plan": {"tasks": 3}},
        },
        "runDetails": {
            "builder": {"id": "urn:harness-verify:builder:harness"},
            "metadata": {"invocationId": "run-1", "startedOn": T0, "finishedOn": T1},
        },
    }
    bare = provenance(started=None, finished=None, external_parameters={})
    assert bare["runDetails"] == {
        "builder": {"id": "urn:harness-verify:builder:harness"},
        "metadata": {"invocationId": "run-1"},
    }
    full = provenance(
        internal_parameters={"adapter": "scripted"},
        resolved_dependencies=[
            {"uri": "git+https://example.com/repo", "digest": {"gitCommit": "ab" * 20}}
        ],
        build_type="urn:example:bt",
    )
    definition = full["buildDefinition"]
    assert isinstance(definition, dict)
    assert definition["buildType"] == "urn:example:bt"
    assert definition["internalParameters"] == {"adapter": "scripted"}
    assert definition["resolvedDependencies"] == [
        {"uri": "git+https://example.com/repo", "digest": {"gitCommit": "ab" * 20}}
    ]


def test_builders_accept_read_only_mappings_and_tuples() -> None:
    frozen = MappingProxyType({"run": "r", "list": (1, 2), "inner": MappingProxyType({"k": 1})})
    pred = provenance(external_parameters=frozen)
    data = statement(SUBJECTS, PREDICATE_SLSA_PROVENANCE, pred)
    params = parse_statement(data, allowed_predicate_types=OURS).predicate["buildDefinition"]
    assert params["externalParameters"] == {"run": "r", "list": [1, 2], "inner": {"k": 1}}


# ---- builders: refusals ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("subjects", "match"),
    [
        ([], "at least one subject"),
        ([("", SHA_A)], "name must be a non-empty string"),
        ([("a", SHA_A.upper())], "64 lowercase hex"),
        ([("a", SHA_A[:-1])], "64 lowercase hex"),
        ([("a", SHA_A), ("a", SHA_B)], "appears twice"),
    ],
)
def test_statement_refuses_bad_subjects(subjects: list[tuple[str, str]], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        statement(subjects, PREDICATE_RUN_SUMMARY, summary())


def test_statement_refuses_bad_predicates() -> None:
    with pytest.raises(ValueError, match="predicate_type"):
        statement(SUBJECTS, "", summary())
    with pytest.raises(ValueError, match="non-empty mapping"):
        statement(SUBJECTS, PREDICATE_RUN_SUMMARY, {})
    with pytest.raises(ValueError, match="integer-only"):
        statement(SUBJECTS, PREDICATE_RUN_SUMMARY, {"x": 1.5})
    with pytest.raises(ValueError, match="integer-only"):
        statement(SUBJECTS, PREDICATE_RUN_SUMMARY, {"x": 2**53})
    with pytest.raises(ValueError, match="integer-only"):
        statement(SUBJECTS, PREDICATE_RUN_SUMMARY, {"x": {1: "int key"}})


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"run_id": ""}, "run_id"),
        ({"producer": ""}, "producer"),
        ({"signer_key_id": "abc"}, "signer_key_id"),
        ({"started": "2026-01-02T03:04:05Z"}, "started must be RFC 3339"),
        ({"finished": "2026-01-02 03:04:06.000000Z"}, "finished must be RFC 3339"),
        ({"started": T1, "finished": T0}, "earlier than started"),
        ({"stores": {"lineage": {"records": 1, "root": ROOT}}}, "exactly"),
        ({"stores": {"lineage": {"records": -1, "root": ROOT, "checkpoints": []}}}, "records"),
        ({"stores": {"lineage": {"records": True, "root": ROOT, "checkpoints": []}}}, "records"),
        ({"stores": {"lineage": {"records": 1, "root": "00", "checkpoints": []}}}, "root"),
        (
            {"stores": {"lineage": {"records": 5, "root": ROOT, "checkpoints": [3, 3]}}},
            "increasing",
        ),
        ({"stores": {"lineage": {"records": 5, "root": ROOT, "checkpoints": [6]}}}, "beyond"),
        ({"stores": {"lineage": {"records": 5, "root": ROOT, "checkpoints": "5"}}}, "list"),
        ({"stores": {"": {"records": 5, "root": ROOT, "checkpoints": []}}}, "store name"),
    ],
)
def test_run_summary_refusals(overrides: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        summary(**overrides)


@pytest.mark.parametrize(
    ("item", "match"),
    [
        ({"path": "x"}, "exactly"),
        ({**artifact(), "extra": 1}, "exactly"),
        (artifact(path=""), "path"),
        (artifact(sha256="x"), "sha256"),
        (artifact(seq=-1), "seq"),
        (artifact(step="2"), "step"),
        (artifact(actor=None), "actor"),
        (artifact(model=""), "model"),
    ],
)
def test_lineage_refusals(item: Mapping[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        lineage_predicate(run_id="r", artifacts=[item])


def test_lineage_refuses_duplicate_paths() -> None:
    with pytest.raises(ValueError, match="appears twice"):
        lineage_predicate(run_id="r", artifacts=[artifact(), artifact(seq=9)])


def test_slsa_refusals() -> None:
    with pytest.raises(ValueError, match="builder_id"):
        provenance(builder_id="")
    with pytest.raises(ValueError, match="build_type"):
        provenance(build_type="")
    with pytest.raises(TypeError, match="external_parameters"):
        provenance(external_parameters=None)
    with pytest.raises(ValueError, match="integer-only"):
        provenance(external_parameters={"ratio": 0.5})
    with pytest.raises(ValueError, match="non-ResourceDescriptor"):
        provenance(resolved_dependencies=[{"uri": "u", "sha256": SHA_A}])
    with pytest.raises(ValueError, match="at least one of"):
        provenance(resolved_dependencies=[{"mediaType": "text/plain"}])
    with pytest.raises(ValueError, match="lowercase hex"):
        provenance(resolved_dependencies=[{"uri": "u", "digest": {"sha256": "XYZ"}}])
    with pytest.raises(ValueError, match="started"):
        provenance(started="yesterday")


# ---- interop: the in-toto-attestation Python bindings -------------------------------------


def test_our_statements_validate_with_in_toto_attestation() -> None:
    """Parsed with protobuf json_format (unknown fields refused) and ``Statement.validate()``."""
    from google.protobuf import json_format
    from in_toto_attestation.v1 import statement_pb2
    from in_toto_attestation.v1.statement import Statement as ReferenceStatement

    for predicate_type, data in all_statements().items():
        message = json_format.Parse(data.decode(), statement_pb2.Statement())
        ReferenceStatement.copy_from_pb(message).validate()
        assert message.predicate_type == predicate_type
        assert [s.name for s in message.subject] == ["src/a.py", "docs/b.md"]
        assert message.subject[0].digest["sha256"] == SHA_A


def test_our_slsa_predicate_parses_as_slsa_provenance_v1() -> None:
    """The reference Provenance v1 proto refuses unknown fields: our member names are SLSA's."""
    from google.protobuf import json_format
    from in_toto_attestation.predicates.provenance.v1 import provenance_pb2

    pred = provenance(
        internal_parameters={"adapter": "scripted"},
        resolved_dependencies=[
            {"name": "repo", "uri": "git+https://e.com/r", "digest": {"gitCommit": "ab" * 20}}
        ],
    )
    message = json_format.Parse(json.dumps(pred), provenance_pb2.Provenance())
    assert message.build_definition.build_type == DEFAULT_BUILD_TYPE
    assert message.run_details.builder.id == "urn:harness-verify:builder:harness"
    assert message.run_details.metadata.invocation_id == "run-1"
    assert message.run_details.metadata.started_on.ToJsonString() == "2026-01-02T03:04:05.000006Z"
    assert message.build_definition.resolved_dependencies[0].digest["gitCommit"] == "ab" * 20


def test_why_we_do_not_build_statements_with_the_bindings() -> None:
    """protobuf Struct makes every number a double: re-serializing would change our bytes."""
    from google.protobuf import json_format
    from in_toto_attestation.v1 import statement_pb2

    ours = all_statements()[PREDICATE_RUN_SUMMARY]
    message = json_format.Parse(ours.decode(), statement_pb2.Statement())
    records = json_format.MessageToDict(message)["predicate"]["stores"]["lineage"]["records"]
    assert records == 7.0 and type(records) is float
    # we never re-serialize: the verified bytes are the ones parsed, integers stay integers
    assert (
        type(
            parse_statement(ours, allowed_predicate_types=OURS).predicate["stores"]["lineage"][
                "records"
            ]
        )
        is int
    )


# ---- parse_statement refusals ------------------------------------------------------------


def test_wrong_type() -> None:
    for bad in (
        "https://in-toto.io/Statement/v0.1",
        "https://in-toto.io/Statement/v2",
        "",
        None,
        1,
        [],  # unhashable: must not crash the legacy-type lookup
        {},
    ):
        with pytest.raises(StatementTypeError):
            parse({**good_obj(), "_type": bad})
    obj = good_obj()
    del obj["_type"]
    with pytest.raises(StatementTypeError, match="missing or not a string"):
        parse(obj)


def test_legacy_type_message() -> None:
    with pytest.raises(StatementTypeError, match="legacy"):
        parse({**good_obj(), "_type": "https://in-toto.io/Statement/v0.1"})


def test_predicate_type_not_allowed() -> None:
    data = all_statements()[PREDICATE_LINEAGE]
    with pytest.raises(DisallowedPredicateTypeError, match="not allowed"):
        parse_statement(data, allowed_predicate_types=frozenset({PREDICATE_RUN_SUMMARY}))
    with pytest.raises(DisallowedPredicateTypeError, match="allowed: none"):
        parse_statement(data, allowed_predicate_types=frozenset())
    with pytest.raises(StatementError, match="non-empty string"):
        parse({**good_obj(), "predicateType": ""})


def test_predicate_type_is_checked_before_subjects_and_predicate() -> None:
    obj = {**good_obj(), "predicateType": "urn:other", "subject": [], "predicate": 5}
    with pytest.raises(DisallowedPredicateTypeError):
        parse(obj)


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda o: o.update(extra=1), "unknown extra"),
        (lambda o: o.pop("predicate"), "missing predicate"),
        (lambda o: o.pop("subject"), "missing subject"),
        (lambda o: o.update(subject={}), "subject must be a list"),
        (lambda o: o.update(subject=[]), "at least one subject required"),
        (lambda o: o.update(subject=["x"]), r"subject\[0\] must be an object"),
        (lambda o: o["subject"][1].pop("digest"), r"subject\[1\]: at least one digest required"),
        (lambda o: o["subject"][0].update(digest={}), "digest is empty"),
        (lambda o: o["subject"][0].update(digest=[SHA_A]), "digest must be an object"),
        (lambda o: o["subject"][0].update(uri="https://x"), "unsupported member"),
        (lambda o: o["subject"][0].pop("name"), "non-empty string name"),
        (lambda o: o["subject"][0].update(name=""), "non-empty string name"),
        (lambda o: o["subject"][1].update(name="src/a.py"), "appears twice"),
        (lambda o: o["subject"][0]["digest"].update(sha256=SHA_A.upper()), "lowercase hex"),
        (lambda o: o["subject"][0]["digest"].update(sha256=SHA_A + "00"), "expected 64"),
        (lambda o: o["subject"][0]["digest"].update(sha512=SHA_A), "expected 128"),
        (lambda o: o["subject"][0]["digest"].update(sha256=5), "lowercase hex"),
        (lambda o: o["subject"][0]["digest"].update({"": "ab"}), "empty algorithm"),
        (lambda o: o.update(predicate=[]), "predicate must be an object"),
        (lambda o: o.update(predicate={}), "predicate is empty"),
        (lambda o: o.update(predicate={"x": 0.5}), "not an integer"),
    ],
)
def test_statement_refusals(mutate: Any, match: str) -> None:
    obj = good_obj()
    mutate(obj)
    with pytest.raises(StatementError, match=match):
        parse(obj)


def test_not_json_or_not_object() -> None:
    for data in (b"", b"[]", b"\xff", b'{"_type": NaN}'):
        with pytest.raises(StatementError):
            parse_statement(data, allowed_predicate_types=OURS)
    data = all_statements()[PREDICATE_RUN_SUMMARY]
    dup = data.replace(b'{"_type":', b'{"_type":"x","_type":', 1)
    with pytest.raises(StatementError, match="duplicate key '_type'"):
        parse_statement(dup, allowed_predicate_types=OURS)


def test_unknown_digest_algorithms_accepted_if_lowercase_hex() -> None:
    obj = good_obj()
    obj["subject"][0]["digest"]["gitCommit"] = "ab" * 20
    obj["subject"][0]["digest"]["alg1"] = "abc123"
    assert parse(obj).subjects[0].digest == {
        "sha256": SHA_A,
        "gitCommit": "ab" * 20,
        "alg1": "abc123",
    }


def test_non_canonical_third_party_layout_is_accepted() -> None:
    """Statements from others are not canonical JSON; only their content is checked."""
    text = json.dumps(good_obj(), indent=2).encode()
    assert (
        parse_statement(text, allowed_predicate_types=OURS).predicate_type == PREDICATE_RUN_SUMMARY
    )


# ---- signed statements: the DSSE check and the digest binding are separate ---------------


def test_resigned_statement_with_changed_digest() -> None:
    """Re-signing a changed digest yields a valid envelope; the binding is the caller's job."""
    obj = good_obj()
    obj["subject"][0]["digest"]["sha256"] = hashlib.sha256(b"evil").hexdigest()
    forged = statement(
        [(s["name"], s["digest"]["sha256"]) for s in obj["subject"]],
        obj["predicateType"],
        obj["predicate"],
    )
    env = sign_envelope(PAYLOAD_TYPE_IN_TOTO, forged, KEY, keyid=KEY_ID)
    _, payload = verify_envelope(env, [KEY.public_key()])
    parsed = parse_statement(payload, allowed_predicate_types=OURS)
    by_name = {s.name: s.digest["sha256"] for s in parsed.subjects}
    assert by_name["src/a.py"] != SHA_A  # what the artifact really hashes to
    assert by_name["docs/b.md"] == SHA_B


def test_envelopes_of_all_our_statements_verify_end_to_end() -> None:
    for predicate_type, data in all_statements().items():
        env = sign_envelope(PAYLOAD_TYPE_IN_TOTO, data, KEY, keyid=KEY_ID)
        payload_type, payload = verify_envelope(env, [KEY.public_key()])
        assert payload_type == PAYLOAD_TYPE_IN_TOTO and payload == data
        parsed = parse_statement(payload, allowed_predicate_types=frozenset({predicate_type}))
        assert parsed.predicate_type == predicate_type


# ---- fuzzing -------------------------------------------------------------------------------

_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=8),
                  st.sampled_from([STATEMENT_TYPE, SHA_A, PREDICATE_LINEAGE]))  # fmt: skip
_JSON = st.recursive(
    _LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(["_type", "name", "digest", "sha256", "x"]), inner, max_size=3
        ),
    ),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(
    kind=st.one_of(st.just(STATEMENT_TYPE), _JSON),
    subject=_JSON,
    predicate_type=st.one_of(st.just(PREDICATE_LINEAGE), _JSON),
    predicate=_JSON,
)
def test_structured_garbage_raises_only_statement_errors(
    kind: Any, subject: Any, predicate_type: Any, predicate: Any
) -> None:
    obj = {
        "_type": kind,
        "subject": subject,
        "predicateType": predicate_type,
        "predicate": predicate,
    }
    try:
        parsed = parse(obj)
    except StatementError:
        return
    assert parsed.subjects and parsed.predicate  # only a well-formed statement gets through


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_statement_errors(data: bytes) -> None:
    with pytest.raises(StatementError):
        parse_statement(data, allowed_predicate_types=OURS)
