"""Issue 16 item 1: ``harness-verify sigstore FILE --bundle B --trusted-root R`` on the
recorded sigstore-python vectors and on mutations of a good bundle, through the CLI, offline.

Each vector verifies or fails as its name says (tests/vectors/third_party/SOURCES.md); each
mutation of a good bundle fails with the check it breaks named in the report, and the exit code
the verifier's table gives it (1 invalid, 3 identity not pinned, 4 unreadable).
"""

from __future__ import annotations

import base64
import copy
import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

pytest.importorskip("sigstore")  # the extra harness-verify[sigstore]; CI installs it

from tests.sigstore_helpers import (
    GITHUB_ISSUER,
    OAUTH_ISSUER,
    PRODUCTION,
    STAGING,
    VECTORS,
    verifier_offline,
)

GITHUB_IDENTITY = (
    "https://github.com/trailofbits/rfc8785.py/.github/workflows/release.yml@refs/tags/v0.1.2"
)
GITHUB_WHEEL = "sha256:c4e92e9ecc828bef2aa7dba1de8ac983511f7532a0df11c770d39099a25cf201"
DSSE_SUBJECT = "sha256:a0cfc71271d6e278e57cd332ff957c3f7043fdda354c4cbb190a30d56efa01bf"
DSSE_IDENTITY = (
    "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/.github/"
    "workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main"
)
SCHEMA = Draft202012Validator(
    json.loads((Path(__file__).parents[1] / "schemas" / "sigstore-report.schema.json").read_text())
)
IDENTITIES = {
    "bundle.txt": "a@tny.town",
    "bundle_v3.txt": "william@yossarian.net",
    "bundle_v3_alt.txt": "william@yossarian.net",
    "staging-rekor-v2.txt": "jku@goto.fi",
}


def _bundle_of(name: str) -> Path:
    plain = VECTORS / f"{name}.sigstore"
    return plain if plain.exists() else VECTORS / f"{name}.sigstore.json"


def sigstore(
    artifact: str | Path,
    bundle: Path,
    *,
    identity: str,
    issuer: str = OAUTH_ISSUER,
    root: Path = STAGING,
    fmt: str = "json",
    regex: bool = False,
) -> tuple[int, dict[str, Any] | str]:
    flag = "--cert-identity-regex" if regex else "--cert-identity"
    done = verifier_offline(
        "sigstore", artifact, "--bundle", bundle, "--trusted-root", root,
        flag, identity, "--cert-oidc-issuer", issuer, "--format", fmt,
    )  # fmt: skip
    if fmt == "json" and done.stdout:
        document = json.loads(done.stdout)
        assert not list(SCHEMA.iter_errors(document)), list(SCHEMA.iter_errors(document))
        assert document["exit_code"] == done.returncode
        return done.returncode, document
    return done.returncode, done.stdout + done.stderr


def failed(report: dict[str, Any] | str) -> tuple[str, str]:
    assert isinstance(report, dict), report
    failure = report["failure"]
    assert failure is not None, report
    return failure["check"], failure["reason"]


# ---- the vectors, as their names say ---------------------------------------------------------


@pytest.mark.parametrize("name", sorted(IDENTITIES))
def test_staging_vectors_verify(name: str) -> None:
    code, report = sigstore(VECTORS / name, _bundle_of(name), identity=IDENTITIES[name])
    assert code == 0, report
    assert isinstance(report, dict) and report["status"] == "verified"
    assert [check["outcome"] for check in report["checks"]] == ["passed"] * 8
    assert report["identities"] == [IDENTITIES[name]] and report["issuer"] == OAUTH_ISSUER


def test_the_media_types_and_rekor_versions_are_the_vectors() -> None:
    seen = {}
    for name in sorted(IDENTITIES):
        _, report = sigstore(VECTORS / name, _bundle_of(name), identity=IDENTITIES[name])
        assert isinstance(report, dict)
        seen[name] = (report["media_type"], report["log_entry"])
    assert seen == {
        "bundle.txt": (
            "application/vnd.dev.sigstore.bundle+json;version=0.1",
            "hashedrekord/0.0.1",
        ),
        "bundle_v3.txt": ("application/vnd.dev.sigstore.bundle.v0.3+json", "hashedrekord/0.0.1"),
        "bundle_v3_alt.txt": (
            "application/vnd.dev.sigstore.bundle+json;version=0.3",
            "hashedrekord/0.0.1",
        ),
        "staging-rekor-v2.txt": (
            "application/vnd.dev.sigstore.bundle.v0.3+json",
            "hashedrekord/0.0.2",
        ),
    }


def test_dsse_vector_verifies_for_its_statement_subject() -> None:
    bundle = _bundle_of("a.dsse.staging-rekor-v2.txt")
    code, report = sigstore(DSSE_SUBJECT, bundle, identity=DSSE_IDENTITY, issuer=GITHUB_ISSUER)
    assert code == 0, report
    # the .txt beside it is not the statement's subject (upstream verifies the envelope only):
    # a file the statement does not name is refused, naming the artifact
    code, report = sigstore(
        VECTORS / "a.dsse.staging-rekor-v2.txt", bundle, identity=DSSE_IDENTITY,
        issuer=GITHUB_ISSUER,
    )  # fmt: skip
    check, reason = failed(report)
    assert code == 1 and check == "artifact" and "no subject" in reason, report


def test_github_workflow_vector_verifies_against_production_by_digest() -> None:
    bundle = VECTORS / "bundle_v3_github.whl.sigstore"
    code, report = sigstore(
        GITHUB_WHEEL, bundle, identity=GITHUB_IDENTITY, issuer=GITHUB_ISSUER, root=PRODUCTION
    )
    assert code == 0, report
    # a regex pin only when asked for, and it must match the whole SAN
    regex = r"https://github\.com/trailofbits/rfc8785\.py/\.github/workflows/release\.yml@.*"
    code, _ = sigstore(
        GITHUB_WHEEL, bundle, identity=regex, issuer=GITHUB_ISSUER, root=PRODUCTION, regex=True
    )
    assert code == 0
    code, report = sigstore(
        GITHUB_WHEEL, bundle, identity="https://github.com/trailofbits/", regex=True,
        issuer=GITHUB_ISSUER, root=PRODUCTION,
    )  # fmt: skip
    assert code == 3 and failed(report)[0] == "identity"
    # the same regex text as an exact identity matches nothing
    code, _ = sigstore(GITHUB_WHEEL, bundle, identity=regex, issuer=GITHUB_ISSUER, root=PRODUCTION)
    assert code == 3


def test_github_vector_against_the_staging_root_fails_the_certificate() -> None:
    bundle = VECTORS / "bundle_v3_github.whl.sigstore"
    code, report = sigstore(GITHUB_WHEEL, bundle, identity=GITHUB_IDENTITY, issuer=GITHUB_ISSUER)
    check, reason = failed(report)
    assert code == 1 and check == "certificate" and "certificate chain" in reason, report


@pytest.mark.parametrize(
    ("name", "code", "check", "text"),
    [
        ("bundle_invalid_version.txt", 4, "bundle", "unsupported bundle format"),
        ("bundle_no_cert_v1.txt", 1, "bundle", "expected non-empty certificate chain"),
        ("bundle_no_log_entry.txt", 1, "bundle", "expected exactly one log entry"),
        ("bundle_no_checkpoint.txt", 1, "bundle", "inclusion proof, with checkpoint"),
    ],
)
def test_broken_vectors_fail_as_named(name: str, code: int, check: str, text: str) -> None:
    got, report = sigstore(VECTORS / name, _bundle_of(name), identity="a@tny.town")
    assert got == code, report
    assert failed(report)[0] == check and text in failed(report)[1], report


# ---- mutations of a good bundle --------------------------------------------------------------


def _flip_b64(value: str, at: int = -3) -> str:
    raw = bytearray(base64.b64decode(value))
    raw[at] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


def _entry(doc: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = doc["verificationMaterial"]["tlogEntries"][0]
    return entry


def _signature(doc: dict[str, Any]) -> None:
    doc["messageSignature"]["signature"] = _flip_b64(doc["messageSignature"]["signature"], 10)


def _certificate(doc: dict[str, Any]) -> None:
    cert = doc["verificationMaterial"]["certificate"]
    cert["rawBytes"] = _flip_b64(cert["rawBytes"], -5)  # inside the CA's signature


def _proof(doc: dict[str, Any]) -> None:
    hashes = _entry(doc)["inclusionProof"]["hashes"]
    hashes[0] = _flip_b64(hashes[0], 0)


def _checkpoint(doc: dict[str, Any]) -> None:
    proof = _entry(doc)["inclusionProof"]
    note, _, signatures = proof["checkpoint"]["envelope"].partition("\n\n")
    name, _, sig = signatures.rstrip("\n").rpartition(" ")
    proof["checkpoint"]["envelope"] = f"{note}\n\n{name} {_flip_b64(sig, -2)}\n"


def _log_index(doc: dict[str, Any]) -> None:
    _entry(doc)["logIndex"] = str(int(_entry(doc)["logIndex"]) + 1)


MUTATIONS: dict[str, tuple[Callable[[dict[str, Any]], None], str, str]] = {
    "signature": (_signature, "signature", "Signature is invalid"),
    "certificate": (_certificate, "certificate", "certificate"),
    "inclusion-proof": (_proof, "log-entry", "inclusion proof"),
    "checkpoint": (_checkpoint, "log-entry", "checkpoint"),
    "log-index": (_log_index, "log-entry", "log index"),
}


@pytest.fixture(scope="module")
def good() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((VECTORS / "bundle_v3.txt.sigstore").read_bytes())
    return loaded


@pytest.mark.parametrize("what", sorted(MUTATIONS))
def test_each_mutation_fails_naming_what_failed(
    what: str, good: dict[str, Any], tmp_path: Path
) -> None:
    mutate, check, text = MUTATIONS[what]
    doc = copy.deepcopy(good)
    mutate(doc)
    bundle = tmp_path / "mutated.sigstore.json"
    bundle.write_text(json.dumps(doc), encoding="utf-8")
    code, report = sigstore(VECTORS / "bundle_v3.txt", bundle, identity="william@yossarian.net")
    assert code == 1, report
    got, reason = failed(report)
    assert got == check and text in reason, report


def test_log_index_of_a_rekor_v2_entry_is_checked_by_us(tmp_path: Path) -> None:
    # Rekor v2 entries carry no inclusion promise: nothing sigstore checks signs logIndex, so a
    # changed index passes sigstore; our re-check ties it to the proof's leaf index
    doc = json.loads(_bundle_of("staging-rekor-v2.txt").read_bytes())
    _log_index(doc)
    bundle = tmp_path / "v2.sigstore.json"
    bundle.write_text(json.dumps(doc), encoding="utf-8")
    code, report = sigstore(VECTORS / "staging-rekor-v2.txt", bundle, identity="jku@goto.fi")
    check, reason = failed(report)
    assert code == 1 and check == "log-entry" and reason.startswith("log index"), report


def test_identity_issuer_and_artifact(tmp_path: Path) -> None:
    artifact, bundle = VECTORS / "bundle_v3.txt", VECTORS / "bundle_v3.txt.sigstore"
    code, report = sigstore(artifact, bundle, identity="mallory@example.com")
    assert code == 3 and failed(report)[0] == "identity", report
    assert failed(report)[1].startswith("identity: the certificate's identity is william@")
    code, report = sigstore(
        artifact, bundle, identity="william@yossarian.net", issuer="https://accounts.google.com"
    )
    assert code == 3 and failed(report)[1].startswith("issuer: "), report
    other = tmp_path / "bundle_v3.txt"
    other.write_bytes(artifact.read_bytes() + b"!")
    code, report = sigstore(other, bundle, identity="william@yossarian.net")
    check, reason = failed(report)
    assert code == 1 and check == "artifact" and "SHA-256" in reason, report
    # sigstore compares the digest before the signature: the signature is not reported passed
    assert isinstance(report, dict)
    outcomes = {entry["name"]: entry["outcome"] for entry in report["checks"]}
    assert outcomes["signature"] == "not-run" and outcomes["log-entry"] == "passed", outcomes


def test_our_merkle_recheck_reports_a_disagreement(good: dict[str, Any], tmp_path: Path) -> None:
    # sigstore's own inclusion-proof check replaced by one that accepts everything: a broken
    # proof then passes sigstore, and our RFC 6962 re-check must say so (never silently)
    doc = copy.deepcopy(good)
    _proof(doc)
    bundle = tmp_path / "proof.sigstore.json"
    bundle.write_text(json.dumps(doc), encoding="utf-8")
    blind = "import sigstore.models as _m\n_m.verify_merkle_inclusion = lambda entry: None\n"
    done = verifier_offline(
        "sigstore", VECTORS / "bundle_v3.txt", "--bundle", bundle, "--trusted-root", STAGING,
        "--cert-identity", "william@yossarian.net", "--cert-oidc-issuer", OAUTH_ISSUER,
        "--format", "json", extra=blind,
    )  # fmt: skip
    report = json.loads(done.stdout)
    check, reason = failed(report)
    assert done.returncode == 1 and check == "log-entry", report
    assert reason.startswith("our RFC 6962 re-check refuses what sigstore accepted"), reason


# ---- formats, usage, the optional extra -----------------------------------------------------


def test_text_junit_and_sarif() -> None:
    artifact, bundle = VECTORS / "bundle_v3.txt", VECTORS / "bundle_v3.txt.sigstore"
    code, text = sigstore(artifact, bundle, identity="mallory@example.com", fmt="text")
    assert code == 3 and "VERIFIED BUT NOT TRUSTED" in str(text) and "[FAIL] identity" in str(text)
    code, junit = sigstore(artifact, bundle, identity="mallory@example.com", fmt="junit")
    suite = ET.fromstring(str(junit).split("\n", 1)[1].split("\nerror")[0])
    assert suite.get("failures") == "1" and suite.get("tests") == "8"
    code, sarif = sigstore(artifact, bundle, identity="mallory@example.com", fmt="sarif")
    results = json.loads(str(sarif))["runs"][0]["results"]
    assert [(r["ruleId"], r["level"]) for r in results] == [("identity", "warning")]
    code, sarif = sigstore(artifact, bundle, identity="william@yossarian.net", fmt="sarif")
    assert code == 0 and json.loads(str(sarif))["runs"][0]["results"] == []


@pytest.mark.parametrize(
    ("args", "text"),
    [
        ([], "pin the signer"),
        (["--cert-identity", "x@example.com"], "needs both"),
        (["--cert-oidc-issuer", OAUTH_ISSUER], "needs both"),
        (
            ["--cert-identity", "a", "--cert-identity-regex", "a", "--cert-oidc-issuer", "i"],
            "not both",
        ),
        (["--cert-identity-regex", "(", "--cert-oidc-issuer", "i"], "not a regular expression"),
    ],
)
def test_usage_errors_exit_2(args: list[str], text: str) -> None:
    done = verifier_offline(
        "sigstore", VECTORS / "bundle_v3.txt", "--bundle", VECTORS / "bundle_v3.txt.sigstore",
        "--trusted-root", STAGING, *args,
    )  # fmt: skip
    assert done.returncode == 2 and text in done.stderr and done.stdout == "", done.stderr


def test_a_trusted_root_that_is_not_one_is_a_usage_error(tmp_path: Path) -> None:
    for content in (b"{}", b"not json", (VECTORS / "bundle_v3.txt.sigstore").read_bytes()):
        root = tmp_path / "root.json"
        root.write_bytes(content)
        done = verifier_offline(
            "sigstore", VECTORS / "bundle_v3.txt", "--bundle", VECTORS / "bundle_v3.txt.sigstore",
            "--trusted-root", root, "--cert-identity", "a", "--cert-oidc-issuer", "b",
        )  # fmt: skip
        assert done.returncode == 2 and "trusted root" in done.stderr, done.stderr


def test_a_bundle_that_is_not_json_is_unreadable(tmp_path: Path) -> None:
    junk = tmp_path / "junk.sigstore.json"
    junk.write_bytes(b"\x00" * 100)
    code, report = sigstore(VECTORS / "bundle_v3.txt", junk, identity="a")
    assert code == 4 and failed(report)[0] == "bundle", report


def test_without_the_extra_the_command_says_how_to_install_it() -> None:
    hide = "sys.modules['sigstore'] = None\n"
    done = verifier_offline(
        "sigstore", VECTORS / "bundle_v3.txt", "--bundle", VECTORS / "bundle_v3.txt.sigstore",
        "--trusted-root", STAGING, "--cert-identity", "a", "--cert-oidc-issuer", "b", extra=hide,
    )  # fmt: skip
    assert done.returncode == 2 and "harness-verify[sigstore]" in done.stderr, done.stderr
    # and every other command still works without it
    done = verifier_offline("bundle", VECTORS / "bundle_v3.txt", extra=hide)
    assert done.returncode == 4, done.stderr


def test_help_imports_no_sigstore() -> None:
    probe = (
        "import sys\nfrom harness.verify.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('loaded:', *(m for m in ('sigstore', 'harness.verify.sigstore_check') "
        "if m in sys.modules))\n"
    )
    import subprocess

    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip().splitlines()[-1] == "loaded:", done.stdout + done.stderr
    assert "sigstore" in done.stdout  # the command is listed


# ---- --key: a bundle signed with a key, not a certificate ------------------------------------


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from tests.sigstore_helpers import FakeSigstore

    folder = tmp_path_factory.mktemp("keyed")
    instance = FakeSigstore(name="keyed")
    key = ec.generate_private_key(ec.SECP256R1())
    other = ec.generate_private_key(ec.SECP256R1())
    artifact = folder / "artifact.bin"
    artifact.write_bytes(b"signed with a key\n")
    paths = {
        "artifact": artifact,
        "root": instance.write_trusted_root(folder / "root.json"),
        "bundle": folder / "artifact.bin.sigstore.json",
        "key": folder / "key.pem",
        "other": folder / "other.pem",
    }
    paths["bundle"].write_text(json.dumps(instance.sign_with_key(artifact.read_bytes(), key)))
    for name, private in (("key", key), ("other", other)):
        paths[name].write_bytes(
            private.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
    return paths


def _keyed(
    paths: dict[str, Path], *, key: str = "key", bundle: Path | None = None
) -> tuple[int, dict[str, Any]]:
    done = verifier_offline(
        "sigstore", paths["artifact"], "--bundle", bundle or paths["bundle"],
        "--trusted-root", paths["root"], "--key", paths[key], "--format", "json",
    )  # fmt: skip
    document = json.loads(done.stdout)
    assert not list(SCHEMA.iter_errors(document)), list(SCHEMA.iter_errors(document))
    return done.returncode, document


def test_key_signed_bundle_verifies_with_its_key(keyed: dict[str, Path]) -> None:
    code, report = _keyed(keyed)
    assert code == 0, report
    outcomes = {check["name"]: check["outcome"] for check in report["checks"]}
    assert outcomes["certificate"] == outcomes["sct"] == outcomes["time"] == "skipped"
    assert outcomes["log-entry"] == outcomes["signature"] == outcomes["identity"] == "passed"
    code, report = _keyed(keyed, key="other")
    assert code == 3 and failed(report) == (
        "identity",
        "key: the log entry's signing key is not the pinned --key",
    ), report


@pytest.mark.parametrize("what", ["signature", "inclusion-proof", "checkpoint", "log-index"])
def test_key_signed_bundle_mutations(what: str, keyed: dict[str, Path], tmp_path: Path) -> None:
    mutate, check, text = MUTATIONS[what]
    doc = json.loads(keyed["bundle"].read_bytes())
    mutate(doc)
    bundle = tmp_path / "mutated.json"
    bundle.write_text(json.dumps(doc))
    code, report = _keyed(keyed, bundle=bundle)
    got, reason = failed(report)
    assert code == 1 and got == check, report
    if what != "log-index":
        assert text in reason, reason
    else:  # the inclusion promise (SET) signs the index
        assert "log index" in reason or "SET" in reason, reason


def test_key_signed_bundle_for_another_file(keyed: dict[str, Path], tmp_path: Path) -> None:
    other = dict(keyed, artifact=tmp_path / "other.bin")
    other["artifact"].write_bytes(b"not what was signed\n")
    code, report = _keyed(other)
    assert code == 1 and failed(report)[0] == "artifact", report
    outcomes = {entry["name"]: entry["outcome"] for entry in report["checks"]}
    assert outcomes["signature"] == "not-run" and outcomes["certificate"] == "skipped"


def test_key_and_identity_are_exclusive(keyed: dict[str, Path]) -> None:
    done = verifier_offline(
        "sigstore", keyed["artifact"], "--bundle", keyed["bundle"], "--trusted-root",
        keyed["root"], "--key", keyed["key"], "--cert-identity", "a", "--cert-oidc-issuer", "b",
    )  # fmt: skip
    assert done.returncode == 2 and "not both" in done.stderr
    done = verifier_offline(
        "sigstore", keyed["artifact"], "--bundle", keyed["bundle"], "--trusted-root",
        keyed["root"], "--key", keyed["artifact"],
    )  # fmt: skip
    assert done.returncode == 2 and "not a PEM public key" in done.stderr


def test_an_sct_from_a_ct_log_outside_the_trusted_root_fails_the_sct(tmp_path: Path) -> None:
    import hashlib

    from cryptography.hazmat.primitives.asymmetric import ec

    from tests.sigstore_helpers import FakeSigstore, _spki

    instance = FakeSigstore(name="sct")
    root = instance.write_trusted_root(tmp_path / "root.json")
    instance.ct_key = ec.generate_private_key(ec.SECP256R1())  # a CT log the root does not know
    instance.ct_id = hashlib.sha256(_spki(instance.ct_key.public_key())).digest()
    artifact = tmp_path / "a.txt"
    artifact.write_bytes(b"a\n")
    bundle = tmp_path / "a.txt.sigstore.json"
    bundle.write_text(
        json.dumps(instance.sign(artifact.read_bytes(), "ci@example.com", "https://i"))
    )
    code, report = sigstore(
        artifact, bundle, identity="ci@example.com", issuer="https://i", root=root
    )
    check, reason = failed(report)
    assert code == 1 and check == "sct" and "SCT" in reason, report


def test_a_timestamp_no_trusted_tsa_vouches_for_fails_the_time(tmp_path: Path) -> None:
    # the Rekor v2 vector's only source of time is its RFC 3161 timestamp
    document = json.loads(STAGING.read_bytes())
    document["timestampAuthorities"] = []
    root = tmp_path / "no-tsa.json"
    root.write_text(json.dumps(document))
    name = "staging-rekor-v2.txt"
    code, report = sigstore(VECTORS / name, _bundle_of(name), identity="jku@goto.fi", root=root)
    check, reason = failed(report)
    assert code == 1 and check == "time" and "Timestamp" in reason, report


HOSTILE = {
    "bundle_v3.txt.sigstore": ("bundle_v3.txt", "william@yossarian.net"),
    "bundle.txt.sigstore": ("bundle.txt", "a@tny.town"),
    "staging-rekor-v2.txt.sigstore.json": ("staging-rekor-v2.txt", "jku@goto.fi"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_bundles_get_a_verdict_never_a_crash(name: str) -> None:
    """Bytes flipped anywhere in a good bundle (JSON structure, base64, the certificate, the
    checkpoint) and JSON values replaced by other types: every one is a verdict (in process,
    so an exception would fail the test), and none verifies unless the document still means
    the same thing."""
    import hashlib
    import random

    from harness.verify.report import Status
    from harness.verify.sigstore_check import load_trusted_root, verify_sigstore_bundle
    from harness.verify.sigstore_identity import identity_pin

    root = load_trusted_root(STAGING.read_bytes(), "staging")
    artifact, who = HOSTILE[name]
    good = (VECTORS / name).read_bytes()
    digest = hashlib.sha256((VECTORS / artifact).read_bytes()).digest()
    pins = [identity_pin(who, OAUTH_ISSUER)]
    rng = random.Random(16)
    cases: list[bytes] = []
    for _ in range(150):
        data = bytearray(good)
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        cases.append(bytes(data))
    document = json.loads(good)

    def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        found = [prefix]
        items = node.items() if isinstance(node, dict) else enumerate(node)
        if isinstance(node, dict | list):
            for key, child in items:
                found += paths(child, (*prefix, key))
        return found

    for path in paths(document)[1:]:
        for replacement in (None, 7, "x", [], {}, [1] * 3):
            mutated = copy.deepcopy(document)
            node = mutated
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = replacement
            cases.append(json.dumps(mutated).encode())
    # the one change that keeps a bundle valid: messageDigest is an optional restatement of
    # the digest the signature is over (docs/spec/sigstore.md §2.1, check artifact)
    optional = copy.deepcopy(document)
    optional["messageSignature"]["messageDigest"] = None
    for data in cases:
        outcome = verify_sigstore_bundle(data, "b", digest, "f", root, pins)
        if outcome.status is Status.VERIFIED:
            assert json.loads(data) in (document, optional), data[:200]
        else:
            assert outcome.failure is not None and outcome.failure.reason


def test_the_checkpoint_signature_line_must_name_the_log(
    good: dict[str, Any], tmp_path: Path
) -> None:
    # found by the test above: the signer name is outside the signature and sigstore matches
    # the line by its key hint only, so "— rekor.sigstage.duv <sig>" verified; ours refuses it
    doc = copy.deepcopy(good)
    proof = _entry(doc)["inclusionProof"]
    proof["checkpoint"]["envelope"] = proof["checkpoint"]["envelope"].replace(
        "\u2014 rekor.sigstage.dev ", "\u2014 rekor.example.com "
    )
    assert proof["checkpoint"]["envelope"] != _entry(good)["inclusionProof"]["checkpoint"]
    bundle = tmp_path / "renamed.sigstore.json"
    bundle.write_text(json.dumps(doc), encoding="utf-8")
    code, report = sigstore(VECTORS / "bundle_v3.txt", bundle, identity="william@yossarian.net")
    check, reason = failed(report)
    assert code == 1 and check == "log-entry", report
    assert "signature line names 'rekor.example.com'" in reason, reason


def test_the_checkpoint_must_be_signed_by_the_log_the_entry_names(tmp_path: Path) -> None:
    """A Rekor v2 entry re-labelled as another log of the root (log id and the checkpoint
    line's unsigned key hint rewritten): sigstore, finding no key with that id, tries every
    log key and accepts; ours verifies with the named log's key and refuses."""
    root = json.loads(STAGING.read_bytes())
    other = next(t for t in root["tlogs"] if "alpha2" in t["baseUrl"])["logId"]["keyId"]
    doc = json.loads(_bundle_of("staging-rekor-v2.txt").read_bytes())
    entry = _entry(doc)
    entry["logId"]["keyId"] = other
    proof = entry["inclusionProof"]
    note, _, line = proof["checkpoint"]["envelope"].partition("\n\n")
    signer, _, signature = line.rstrip("\n").rpartition(" ")
    relabelled = base64.b64decode(other)[:4] + base64.b64decode(signature)[4:]
    proof["checkpoint"]["envelope"] = (
        f"{note}\n\n{signer} {base64.b64encode(relabelled).decode()}\n"
    )
    bundle = tmp_path / "relabelled.sigstore.json"
    bundle.write_text(json.dumps(doc), encoding="utf-8")
    code, report = sigstore(VECTORS / "staging-rekor-v2.txt", bundle, identity="jku@goto.fi")
    check, reason = failed(report)
    assert code == 1 and check == "log-entry", report
    assert reason.startswith("checkpoint: not signed by the key of the log the entry names"), reason
    # and a log id the trusted root does not have at all
    entry["logId"]["keyId"] = base64.b64encode(b"\x01" * 32).decode()
    bundle.write_text(json.dumps(doc), encoding="utf-8")
    code, report = sigstore(VECTORS / "staging-rekor-v2.txt", bundle, identity="jku@goto.fi")
    assert code == 1 and failed(report)[0] == "log-entry", report
