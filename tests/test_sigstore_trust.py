"""Issue 16 item 2: a Sigstore identity as trust for ``harness-verify BUNDLE`` and ``gate``.

End to end, offline, with a Sigstore instance made in the test (tests/sigstore_helpers.py: a
CA, a transparency log and a CT log of our own; a certificate for a test workflow identity with
an embedded SCT; our own log entry, inclusion proof, checkpoint and inclusion promise): a real
harness run's bundle.tar is signed into a Sigstore bundle, and the gate passes with that
identity pinned and fails with another identity, another issuer, the production root, a
tampered bundle.tar, or a genuine bundle.tar the Sigstore bundle is not for. Trust comes from
the operator's side only: a policy naming identities is read from the base ref like one naming
keys, so a pull request cannot re-pin the identity it is judged by.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sigstore")  # the extra harness-verify[sigstore]; CI installs it

from harness.orchestrate import git as hgit
from harness.orchestrate.capabilities import DEFAULT_MATRIX
from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.demo import _gate, make_repo
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.runtime import Runtime
from harness.receipts.bundle import export_bundle
from harness.receipts.keys import OperatorKeys, init_keys
from tests.sigstore_helpers import GITHUB_ISSUER, PRODUCTION, FakeSigstore, verifier_offline

CI = "https://github.com/acme/calc/.github/workflows/harness.yml@refs/heads/main"
OTHER = "https://github.com/mallory/calc/.github/workflows/harness.yml@refs/heads/main"
EDIT = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"


@dataclass(frozen=True)
class Signed:
    repo: Path
    base: str
    bundle: Path
    sigstore: Path
    root: Path
    keys: OperatorKeys
    instance: FakeSigstore
    folder: Path


def _run(folder: Path, repo: Path, keys: OperatorKeys, name: str, content: str) -> Path:
    plan = {
        "plan": {"name": name, "max_batch": 1, "settle_ticks": 2},
        "task": [
            {
                "id": "mul",
                "role": "coder",
                "prompt": "Add calc.mul.",
                "scope": ["calc.py"],
                "tools": ["edit"],
                "gates": [_gate()],
                "edits": [{"path": "calc.py", "content": content}],
            }
        ],
    }
    state = folder / f"state-{name}"
    Runtime(
        repo=repo,
        plan=parse_plan(plan),
        state_dir=state,
        keys=keys,
        run_id=f"{name}-run",
        clock=LogicalClock(),
        capabilities=DEFAULT_MATRIX,
        git_date="2026-01-01T00:00:00+00:00",
    ).run()
    return export_bundle(state, folder / f"{name}.tar", keys).path


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Signed:
    folder = tmp_path_factory.mktemp("sigstore-trust")
    repo = folder / "repo"
    make_repo(repo)
    base = hgit.head(repo)
    keys = init_keys(folder / "keys")
    bundle = _run(folder, repo, keys, "ci", EDIT)
    instance = FakeSigstore()
    ops = folder / "operator"  # the operator's side: outside the checkout
    ops.mkdir()
    root = instance.write_trusted_root(ops / "trusted_root.json")
    sigstore = folder / "bundle.tar.sigstore.json"
    sigstore.write_text(json.dumps(instance.sign(bundle.read_bytes(), CI, GITHUB_ISSUER)))
    return Signed(repo, base, bundle, sigstore, root, keys, instance, folder)


def _identity(
    signed: Signed, identity: str = CI, issuer: str = GITHUB_ISSUER, root: Path | None = None
) -> list[str]:
    return [
        "--sigstore-bundle", str(signed.sigstore), "--cert-identity", identity,
        "--cert-oidc-issuer", issuer, "--trusted-root", str(root or signed.root),
    ]  # fmt: skip


def gate(signed: Signed, *args: str, bundle: Path | None = None) -> tuple[int, dict[str, Any]]:
    done = verifier_offline(
        "gate", "--base", signed.base, "--head", "HEAD", "--format", "json", *args,
        bundle or signed.bundle, cwd=signed.repo,
    )  # fmt: skip
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_the_gate_passes_with_the_identity_pinned(signed: Signed) -> None:
    code, report = gate(signed, *_identity(signed))
    assert code == 0, report
    assert report["passed"] is True and "sigstore identity " + CI in report["trusted_by"]
    assert report["signer_key_id"] == signed.keys.key_id
    # control: with no pin at all the same bundle is not trusted
    code, report = gate(signed)
    assert code == 3, report


@pytest.mark.parametrize(
    ("identity", "issuer", "what"),
    [
        (OTHER, GITHUB_ISSUER, "identity: the certificate's identity is " + CI),
        (CI, "https://accounts.google.com", "issuer: the certificate's OIDC issuer is"),
    ],
)
def test_another_identity_or_issuer_fails(
    signed: Signed, identity: str, issuer: str, what: str
) -> None:
    code, report = gate(signed, *_identity(signed, identity, issuer))
    assert code == 3 and report["passed"] is False, report
    assert what in report["reason"], report["reason"]
    assert all(entry["verdict"] == "uncovered" for entry in report["files"])


def test_the_production_root_does_not_vouch_for_a_test_certificate(signed: Signed) -> None:
    code, report = gate(signed, *_identity(signed, root=PRODUCTION))
    assert code == 3, report
    assert "certificate: signing certificate" in report["reason"], report["reason"]


def test_a_tampered_bundle_fails(signed: Signed, tmp_path: Path) -> None:
    tampered = tmp_path / "bundle.tar"
    data = bytearray(signed.bundle.read_bytes())
    at = data.index(b'"kind":"') + 9  # inside a store record
    data[at] ^= 0x01
    tampered.write_bytes(bytes(data))
    code, report = gate(signed, *_identity(signed), bundle=tampered)
    assert code == 1 and report["passed"] is False, report


@pytest.fixture(scope="module")
def again(signed: Signed) -> Path:
    """Another genuine bundle of the same operator key (a second run in another clone)."""
    other = signed.folder / "other-repo"
    make_repo(other)
    return _run(signed.folder, other, signed.keys, "again", EDIT)


def test_a_genuine_bundle_the_sigstore_bundle_is_not_for_fails(signed: Signed, again: Path) -> None:
    # same operator key, same change, another genuine run: the Sigstore bundle signs the
    # first bundle.tar's bytes, not these
    code, report = gate(signed, "--trusted-key", signed.keys.key_id, bundle=again)
    assert report["bundle_status"] == "verified", report  # control: the bundle is genuine
    code, report = gate(signed, *_identity(signed), bundle=again)
    assert code == 3, report
    assert "artifact: the artifact's SHA-256 is not the digest" in report["reason"]


def test_the_witness_checks_the_bytes_the_verification_read(
    signed: Signed, again: Path, tmp_path: Path
) -> None:
    """The Sigstore bundle is checked against the digest of what the verification pass read,
    not of the file as it was (or is) elsewhere: a file rewritten under the open handle
    between the head read and the pass is verified as the new bytes, and refused."""
    from harness.verify.archive import Limits
    from harness.verify.bundle import verify_bundle
    from harness.verify.policy import EMPTY_POLICY, TrustPolicy
    from harness.verify.report import Report, Status
    from harness.verify.sigstore_bind import prepare_witness
    from harness.verify.sigstore_identity import SigstoreTrust, identity_pin

    trust = SigstoreTrust(
        (identity_pin(CI, GITHUB_ISSUER),), signed.root.read_bytes(), "root", "test"
    )
    witness = prepare_witness(trust, signed.sigstore)
    target = tmp_path / "bundle.tar"
    shutil.copy(signed.bundle, target)

    def honest(stream: Any, pins: TrustPolicy) -> Report:
        return verify_bundle(stream, pins=pins)

    report, refusal = witness.run(target, EMPTY_POLICY, Limits(), honest)
    assert refusal is None and report.status is Status.VERIFIED, (refusal, report.failure)

    def swapped(stream: Any, pins: TrustPolicy) -> Report:
        target.write_bytes(again.read_bytes())  # in place: the open handle reads these bytes
        return verify_bundle(stream, pins=pins)

    report, refusal = witness.run(target, EMPTY_POLICY, Limits(), swapped)
    assert report.status is Status.VERIFIED  # the other bundle is genuine, same key...
    assert refusal is not None and "artifact" in refusal, refusal  # ...but not what was signed


def test_bundle_mode_with_the_identity_flags(signed: Signed) -> None:
    done = verifier_offline("bundle", signed.bundle, "--format", "json", *_identity(signed))
    report = json.loads(done.stdout)
    assert done.returncode == 0 and report["trusted_by"].startswith("sigstore identity "), report
    done = verifier_offline("bundle", signed.bundle, "--format", "json", *_identity(signed, OTHER))
    report = json.loads(done.stdout)
    assert done.returncode == 3 and report["failure"]["check"] == "trust", report
    assert "identity: the certificate's identity is" in report["failure"]["reason"]


def _policy(folder: Path, identities: str, root: str = "trusted_root.json") -> Path:
    policy = folder / "harness-verify.toml"
    policy.write_text(f'[trust]\nidentities = [{identities}]\ntrusted_root = "{root}"\n')
    return policy


def test_the_policy_file_pins_identities_exactly_unless_a_regex_is_written(
    signed: Signed,
) -> None:
    ops = signed.root.parent
    sig = ["--sigstore-bundle", str(signed.sigstore)]
    exact = _policy(ops, f'{{ identity = "{CI}", issuer = "{GITHUB_ISSUER}" }}')
    done = verifier_offline("bundle", signed.bundle, "--policy", exact, *sig)
    assert done.returncode == 0, done.stdout + done.stderr
    prefix = CI.split("/.github/", maxsplit=1)[0]
    loose = _policy(ops, f'{{ identity = "{prefix}.*", issuer = "{GITHUB_ISSUER}" }}')
    done = verifier_offline("bundle", signed.bundle, "--policy", loose, *sig)
    assert done.returncode == 3, done.stdout  # written as identity: compared exactly
    regex = _policy(ops, f'{{ identity_regex = "{prefix}/.*", issuer = "{GITHUB_ISSUER}" }}')
    done = verifier_offline("bundle", signed.bundle, "--policy", regex, *sig)
    assert done.returncode == 0, done.stdout + done.stderr
    # identities alone pin nothing without the Sigstore bundle, and the verifier says so
    done = verifier_offline("bundle", signed.bundle, "--policy", regex)
    assert done.returncode == 3 and "without --sigstore-bundle nothing is pinned" in done.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[trust]\nidentities = [{ identity = "x" }]\ntrusted_root = "trusted_root.json"\n',
         "exactly identity (or identity_regex) and issuer"),
        ('[trust]\nidentities = [{ identity = "x", issuer = "y" }]\n', "go together"),
        ('[trust]\nidentities = []\ntrusted_root = "trusted_root.json"\n', "non-empty list"),
        ('[trust]\nidentities = [{ identity_regex = "(", issuer = "y" }]\n'
         'trusted_root = "trusted_root.json"\n', "not a regular expression"),
        ('[trust]\nidentities = [{ identity = "x", issuer = "y" }]\ntrusted_root = "nope.json"\n',
         "cannot read trusted root"),
    ],
)  # fmt: skip
def test_policy_errors_are_usage_errors(signed: Signed, text: str, message: str) -> None:
    policy = signed.root.parent / "bad.toml"
    policy.write_text(text)
    done = verifier_offline(
        "bundle", signed.bundle, "--policy", policy, "--sigstore-bundle", signed.sigstore
    )
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_usage_errors_of_the_flags(signed: Signed) -> None:
    for args, message in (
        (["--sigstore-bundle", str(signed.sigstore)], "needs a pinned identity"),
        (["--cert-identity", CI, "--cert-oidc-issuer", GITHUB_ISSUER], "need --trusted-root"),
        (_identity(signed)[2:], "give that bundle"),
        (["--trusted-root", str(signed.root)], "goes with --cert-identity"),
    ):
        done = verifier_offline("bundle", signed.bundle, *args)
        assert done.returncode == 2 and message in done.stderr, (args, done.stderr)


def test_the_gate_reads_identities_from_the_base_ref_never_the_head(
    signed: Signed, tmp_path: Path
) -> None:
    """The operator commits the identity policy and the trusted root on the base branch; a
    pull request that re-pins its own identity (and brings its own root) changes nothing."""
    repo = tmp_path / "repo"
    shutil.copytree(signed.repo, repo)
    ci = f'{{ identity = "{CI}", issuer = "{GITHUB_ISSUER}" }}'
    shutil.copy(signed.root, repo / "trusted_root.json")
    _policy(repo, ci)
    hgit.commit_all(repo, "operator: pin the CI identity", date="2026-01-01T00:00:00+00:00")
    base = hgit.head(repo)
    # the change under test: rebase the agent's edit on top, and re-pin a stranger's identity
    (repo / "calc.py").write_text(EDIT)
    hgit.commit_all(repo, "the change", date="2026-01-01T00:00:00+00:00")
    moved = Signed(repo, base, signed.bundle, signed.sigstore, signed.root, signed.keys,
                   signed.instance, signed.folder)  # fmt: skip
    sig = ["--sigstore-bundle", str(signed.sigstore)]
    code, report = gate(moved, *sig)
    assert code == 0, report
    assert report["trusted_by"].endswith(f"({base[:12]}:harness-verify.toml)"), report
    # the head pins the stranger and brings a root of its own: the base's policy still rules
    stranger = FakeSigstore(name="stranger")
    stranger.write_trusted_root(repo / "trusted_root.json")
    _policy(repo, f'{{ identity = "{OTHER}", issuer = "{GITHUB_ISSUER}" }}')
    hgit.commit_all(repo, "re-pin", date="2026-01-01T00:00:00+00:00")
    forged = tmp_path / "forged.sigstore.json"
    forged.write_text(json.dumps(stranger.sign(signed.bundle.read_bytes(), OTHER, GITHUB_ISSUER)))
    code, report = gate(moved, "--sigstore-bundle", str(forged))
    assert code == 3, report
    # and a --trusted-root path inside the checkout is read from the base as well
    code, report = gate(
        moved, "--sigstore-bundle", str(forged), "--cert-identity", OTHER,
        "--cert-oidc-issuer", GITHUB_ISSUER, "--trusted-root", str(repo / "trusted_root.json"),
    )  # fmt: skip
    assert code == 3 and "certificate" in report["reason"], report


def test_a_gzipped_bundle_is_witnessed_over_its_compressed_bytes(
    signed: Signed, tmp_path: Path
) -> None:
    import gzip

    packed = tmp_path / "bundle.tar.gz"
    packed.write_bytes(gzip.compress(signed.bundle.read_bytes(), mtime=0))
    sigstore = tmp_path / "bundle.tar.gz.sigstore.json"
    sigstore.write_text(json.dumps(signed.instance.sign(packed.read_bytes(), CI, GITHUB_ISSUER)))
    flags = ["--sigstore-bundle", str(sigstore), *_identity(signed)[2:]]
    done = verifier_offline("bundle", packed, "--format", "json", *flags)
    assert done.returncode == 0, done.stdout + done.stderr
    # the signature over the .tar does not vouch for the .tar.gz
    done = verifier_offline("bundle", packed, "--format", "json", *_identity(signed))
    assert done.returncode == 3 and "artifact" in json.loads(done.stdout)["failure"]["reason"]


def test_an_attestation_naming_bundle_tar_is_a_witness_too(signed: Signed, tmp_path: Path) -> None:
    """``actions/attest`` writes a DSSE in-toto attestation whose subject is the file: the
    gate accepts it when the statement names bundle.tar's SHA-256, and refuses one that names
    other bytes."""
    attestation = tmp_path / "bundle.tar.intoto.sigstore.json"
    attestation.write_text(
        json.dumps(signed.instance.sign_dsse(signed.bundle.read_bytes(), CI, GITHUB_ISSUER))
    )
    flags = ["--sigstore-bundle", str(attestation), *_identity(signed)[2:]]
    code, report = gate(signed, *flags)
    assert code == 0, report
    elsewhere = tmp_path / "other.intoto.sigstore.json"
    elsewhere.write_text(json.dumps(signed.instance.sign_dsse(b"other bytes", CI, GITHUB_ISSUER)))
    flags = ["--sigstore-bundle", str(elsewhere), *_identity(signed)[2:]]
    code, report = gate(signed, *flags)
    assert code == 3 and "statement has no subject" in report["reason"], report
