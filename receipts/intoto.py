"""Building in-toto Statement v1 payloads and our predicates (verifier: ``harness.verify.intoto``).

Statements are plain dicts serialized with RFC 8785 (``canonical_bytes``), never built through
the in-toto-attestation protobuf bindings: protobuf ``Struct`` turns every number into a double
(``3`` -> ``3.0``), which would break our integer-only encoding (DESIGN §2). Every builder checks
its inputs and raises ``ValueError`` (or ``TypeError``) on anything the verifier would refuse:
what we cannot read back we must not write. ``statement`` even re-reads its own output with
``parse_statement``.

Our own predicates (run summary, lineage) name members in snake_case like every other format
of ours (records, receipts: ``run``, ``leaf_index``), not in the lowerCamelCase the in-toto
predicate guidelines suggest: ``harness.verify.runreceipts`` reads them by these names. The SLSA
predicate uses SLSA's own names. Values are integers, strings, lists, objects; times are
RFC 3339 UTC strings in the record profile ``YYYY-MM-DDTHH:MM:SS.ffffffZ``
(docs/decisions/0002), so a plain string compare orders them.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from harness.verify.canonical import canonical_bytes
from harness.verify.errors import CanonicalEncodingError, VerificationError
from harness.verify.intoto import BUILD_TYPE_AGENT_RUN, STATEMENT_TYPE, parse_statement
from harness.verify.records import HEX64_RE, TIME_RE

DEFAULT_BUILD_TYPE: Final = BUILD_TYPE_AGENT_RUN

_STORE_MEMBERS: Final = frozenset({"records", "root", "checkpoints"})
_ARTIFACT_MEMBERS: Final = frozenset({"path", "sha256", "seq", "actor", "task", "step", "model"})
_RESOURCE_DESCRIPTOR_MEMBERS: Final = frozenset(
    {"name", "uri", "digest", "content", "downloadLocation", "mediaType", "annotations"}
)
_LOWER_HEX: Final = re.compile(r"(?:[0-9a-f]{2})+")


def _plain(value: Any) -> Any:
    """A deep copy with every Mapping as a dict and every list/tuple as a list."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def _json_only(value: object, what: str) -> bytes:
    """Canonical bytes, or ``ValueError`` for floats, unsafe integers and non-JSON values."""
    try:
        return canonical_bytes(value)
    except CanonicalEncodingError as exc:
        raise ValueError(f"{what} is not integer-only JSON: {exc}") from None


def _text(value: object, what: str) -> str:
    if type(value) is not str or not value:
        raise ValueError(f"{what} must be a non-empty string")
    return value


def _nat(value: object, what: str) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"{what} must be a non-negative integer")
    return value


def _hex64(value: object, what: str) -> str:
    if type(value) is not str or not HEX64_RE.fullmatch(value):
        raise ValueError(f"{what} must be 64 lowercase hex digits")
    return value


def _times(started: str | None, finished: str | None) -> None:
    for what, value in (("started", started), ("finished", finished)):
        if value is not None and (type(value) is not str or not TIME_RE.fullmatch(value)):
            raise ValueError(f"{what} must be RFC 3339 UTC 'YYYY-MM-DDTHH:MM:SS.ffffffZ'")
    if started is not None and finished is not None and finished < started:
        raise ValueError("finished is earlier than started")


def statement(
    subjects: Sequence[tuple[str, str]], predicate_type: str, predicate: Mapping[str, object]
) -> bytes:
    """Canonical JSON of an in-toto Statement v1.

    ``subjects`` are ``(name, sha256 hex)`` pairs: non-empty, names non-empty and unique,
    digests 64 lowercase hex digits; each becomes ``{"name": name, "digest": {"sha256": hex}}``
    in the given order. ``predicate_type`` is a non-empty URI; ``predicate`` a non-empty,
    integer-only JSON object. Raises ``ValueError`` (``TypeError`` for wrong container types).
    """
    if not subjects:
        raise ValueError("a statement needs at least one subject (in-toto v1)")
    names: set[str] = set()
    subject_list = []
    for index, pair in enumerate(subjects):
        name, digest = pair
        _text(name, f"subjects[{index}] name")
        _hex64(digest, f"subjects[{index}] sha256")
        if name in names:
            raise ValueError(f"subject name {name!r} appears twice")
        names.add(name)
        subject_list.append({"digest": {"sha256": digest}, "name": name})
    _text(predicate_type, "predicate_type")
    if not isinstance(predicate, Mapping) or not predicate:
        raise ValueError("predicate must be a non-empty mapping")
    data = _json_only(
        {
            "_type": STATEMENT_TYPE,
            "predicate": _plain(predicate),
            "predicateType": predicate_type,
            "subject": subject_list,
        },
        "statement",
    )
    try:
        parse_statement(data, allowed_predicate_types=frozenset({predicate_type}))
    except VerificationError as exc:  # pragma: no cover - the checks above should catch it
        raise ValueError(f"statement would not verify: {exc}") from exc
    return data


def run_summary_predicate(
    *,
    run_id: str,
    producer: str,
    signer_key_id: str,
    started: str | None,
    finished: str | None,
    stores: Mapping[str, Mapping[str, object]],
) -> dict[str, object]:
    """The run-summary predicate (``PREDICATE_RUN_SUMMARY``): what a sealed run holds.

    Members:

    * ``run`` (string): the run id.
    * ``producer`` (string): the software that wrote the evidence, e.g. ``harness-verify 0.1.0``.
    * ``signer_key_id`` (string): hex SHA-256 of the raw Ed25519 public key that signed the
      checkpoints and this attestation (64 lowercase hex digits).
    * ``started``, ``finished`` (strings, each omitted when ``None``): times of the first and
      last record of the run, RFC 3339 ``YYYY-MM-DDTHH:MM:SS.ffffffZ``; finished >= started.
    * ``stores`` (object, may be empty): store name -> ``{"records": int >= 0, "root": <64 hex
      RFC 6962 Merkle root over all records>, "checkpoints": [tree size, ...]}``, checkpoint
      sizes strictly increasing and each <= records. No other members.
    """
    _text(run_id, "run_id")
    _text(producer, "producer")
    _hex64(signer_key_id, "signer_key_id")
    _times(started, finished)
    if not isinstance(stores, Mapping):
        raise TypeError("stores must be a mapping")
    store_out: dict[str, object] = {}
    for name, facts in stores.items():
        _text(name, "store name")
        if not isinstance(facts, Mapping) or set(facts) != _STORE_MEMBERS:
            raise ValueError(f"stores[{name!r}] must have exactly {sorted(_STORE_MEMBERS)}")
        records = _nat(facts["records"], f"stores[{name!r}].records")
        root = _hex64(facts["root"], f"stores[{name!r}].root")
        sizes = facts["checkpoints"]
        if not isinstance(sizes, list | tuple):
            raise ValueError(f"stores[{name!r}].checkpoints must be a list of tree sizes")
        checked = [_nat(size, f"stores[{name!r}].checkpoints[]") for size in sizes]
        if any(a >= b for a, b in itertools.pairwise(checked)):
            raise ValueError(f"stores[{name!r}].checkpoints must be strictly increasing")
        if checked and checked[-1] > records:
            raise ValueError(f"stores[{name!r}] has a checkpoint beyond its {records} records")
        store_out[name] = {"checkpoints": checked, "records": records, "root": root}
    predicate: dict[str, object] = {
        "producer": producer,
        "run": run_id,
        "signer_key_id": signer_key_id,
        "stores": store_out,
    }
    if started is not None:
        predicate["started"] = started
    if finished is not None:
        predicate["finished"] = finished
    return predicate


def lineage_predicate(
    *, run_id: str, artifacts: Sequence[Mapping[str, object]]
) -> dict[str, object]:
    """The lineage predicate (``PREDICATE_LINEAGE``): who wrote each final artifact, when.

    Members:

    * ``run`` (string): the run id.
    * ``artifacts`` (list, in the given order, may be empty): one object per final artifact
      with exactly

      - ``path`` (non-empty string, unique in the list): the artifact's path in the repo;
      - ``sha256`` (64 lowercase hex): digest of its final content;
      - ``seq`` (int >= 0): seq of its last ``artifact.write`` record in the lineage store;
      - ``actor``, ``task`` (non-empty strings): who wrote it, for which task;
      - ``step`` (int >= 0): the step of that task;
      - ``model`` (string or null): the model behind the write, null for non-model writes.
    """
    _text(run_id, "run_id")
    out: list[dict[str, object]] = []
    paths: set[str] = set()
    for index, artifact in enumerate(artifacts):
        where = f"artifacts[{index}]"
        if not isinstance(artifact, Mapping) or set(artifact) != _ARTIFACT_MEMBERS:
            raise ValueError(f"{where} must have exactly {sorted(_ARTIFACT_MEMBERS)}")
        path = _text(artifact["path"], f"{where}.path")
        if path in paths:
            raise ValueError(f"{where}.path {path!r} appears twice")
        paths.add(path)
        model = artifact["model"]
        if model is not None:
            _text(model, f"{where}.model")
        out.append(
            {
                "actor": _text(artifact["actor"], f"{where}.actor"),
                "model": model,
                "path": path,
                "seq": _nat(artifact["seq"], f"{where}.seq"),
                "sha256": _hex64(artifact["sha256"], f"{where}.sha256"),
                "step": _nat(artifact["step"], f"{where}.step"),
                "task": _text(artifact["task"], f"{where}.task"),
            }
        )
    return {"artifacts": out, "run": run_id}


def _resource_descriptor(index: int, value: Mapping[str, object]) -> dict[str, object]:
    where = f"resolved_dependencies[{index}]"
    if not isinstance(value, Mapping):
        raise TypeError(f"{where} must be a mapping (an in-toto ResourceDescriptor)")
    extra = sorted(set(value) - _RESOURCE_DESCRIPTOR_MEMBERS)
    if extra:
        raise ValueError(f"{where} has non-ResourceDescriptor member(s) {extra}")
    if not any(key in value for key in ("name", "uri", "digest")):
        raise ValueError(f"{where} needs at least one of name, uri, digest")
    digest = value.get("digest")
    if digest is not None:
        if not isinstance(digest, Mapping) or not digest:
            raise ValueError(f"{where}.digest must be a non-empty mapping")
        for alg, hex_value in digest.items():
            _text(alg, f"{where}.digest algorithm")
            if type(hex_value) is not str or not _LOWER_HEX.fullmatch(hex_value):
                raise ValueError(f"{where}.digest.{alg} must be lowercase hex")
    plain: dict[str, object] = _plain(value)
    return plain


def slsa_provenance_predicate(
    *,
    run_id: str,
    builder_id: str,
    build_type: str = DEFAULT_BUILD_TYPE,
    external_parameters: Mapping[str, object],
    started: str | None,
    finished: str | None,
    resolved_dependencies: Sequence[Mapping[str, object]] = (),
    internal_parameters: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """A SLSA Provenance v1 predicate (``PREDICATE_SLSA_PROVENANCE``, slsa.dev/provenance/v1).

    Members (optional ones are omitted when ``None`` or, for lists, empty)::

        {"buildDefinition": {
             "buildType": build_type,                       # URI of our build type
             "externalParameters": {...},                   # the run's inputs (non-empty)
             "internalParameters": {...},                   # optional
             "resolvedDependencies": [ResourceDescriptor]}, # optional
         "runDetails": {
             "builder": {"id": builder_id},
             "metadata": {"invocationId": run_id,
                          "startedOn": started,             # optional, RFC 3339
                          "finishedOn": finished}}}         # optional, RFC 3339

    ``external_parameters`` may be empty but is always present (SLSA requires it).
    ``resolved_dependencies`` entries are in-toto ResourceDescriptors (members ``name``,
    ``uri``, ``digest``, ``content``, ``downloadLocation``, ``mediaType``, ``annotations``;
    at least one of name/uri/digest; digests lowercase hex). All values integer-only JSON.
    """
    _text(run_id, "run_id")
    _text(builder_id, "builder_id")
    _text(build_type, "build_type")
    _times(started, finished)
    if not isinstance(external_parameters, Mapping):
        raise TypeError("external_parameters must be a mapping (SLSA requires the member)")
    definition: dict[str, object] = {
        "buildType": build_type,
        "externalParameters": _plain(external_parameters),
    }
    if internal_parameters is not None:
        if not isinstance(internal_parameters, Mapping):
            raise TypeError("internal_parameters must be a mapping")
        definition["internalParameters"] = _plain(internal_parameters)
    if resolved_dependencies:
        definition["resolvedDependencies"] = [
            _resource_descriptor(index, dep) for index, dep in enumerate(resolved_dependencies)
        ]
    metadata: dict[str, object] = {"invocationId": run_id}
    if started is not None:
        metadata["startedOn"] = started
    if finished is not None:
        metadata["finishedOn"] = finished
    predicate: dict[str, object] = {
        "buildDefinition": definition,
        "runDetails": {"builder": {"id": builder_id}, "metadata": metadata},
    }
    _json_only(predicate, "predicate")
    return predicate
