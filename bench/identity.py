"""Sigstore benchmark: what identity-based trust costs (docs/spec/sigstore.md).

Prints one JSON line. Run: ``python bench/identity.py --records 100000``. (Not named
``sigstore.py``: a script of that name in bench/ would shadow the ``sigstore`` package.)

* ``import_s``: a fresh interpreter importing ``harness.verify.sigstore_check`` (sigstore,
  pydantic models, rfc3161): the start-up the ``sigstore`` command and ``--sigstore-bundle``
  pay, and nothing else pays;
* ``verify_v1_ms`` / ``verify_v2_ms``: one offline verification, in process, of the recorded
  staging bundles ``bundle_v3.txt.sigstore`` (Rekor v1: SET, ECDSA checkpoint) and
  ``staging-rekor-v2.txt.sigstore.json`` (Rekor v2: RFC 3161 timestamp, Ed25519 checkpoint),
  our RFC 6962 re-check included (median of ``--rounds``);
* ``bundle_s`` / ``witnessed_s``: ``verify_bundle`` of a ``--records`` lineage-record bundle
  pinned by key, and the same through the Sigstore witness (head read, hashing reader, the
  drain, one Sigstore verification with a test instance's root): ``witness_overhead`` is
  their ratio (median of ``--rounds``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.sigstore_helpers: the throw-away Sigstore instance

from bundle import build  # noqa: E402  (bench/bundle.py: scripts run from bench/)

from harness.verify.archive import Limits  # noqa: E402
from harness.verify.bundle import verify_bundle  # noqa: E402
from harness.verify.policy import EMPTY_POLICY, TrustPolicy  # noqa: E402
from harness.verify.report import Report, Status  # noqa: E402

VECTORS = ROOT / "tests" / "vectors" / "third_party" / "sigstore-python"
IDENTITY = "https://github.com/acme/calc/.github/workflows/harness.yml@refs/heads/main"
ISSUER = "https://token.actions.githubusercontent.com"


def _median(fn: Any, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def import_seconds() -> float:
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import harness.verify.sigstore_check"], check=True, cwd=ROOT
    )
    return time.perf_counter() - t0


def vector_ms(rounds: int) -> tuple[float, float]:
    from harness.verify.sigstore_check import load_trusted_root, verify_sigstore_bundle
    from harness.verify.sigstore_identity import identity_pin

    root_data = (VECTORS / "trusted_root.staging.json").read_bytes()
    root = load_trusted_root(root_data, "staging")
    results = []
    for name, bundle, who in (
        ("bundle_v3.txt", "bundle_v3.txt.sigstore", "william@yossarian.net"),
        ("staging-rekor-v2.txt", "staging-rekor-v2.txt.sigstore.json", "jku@goto.fi"),
    ):
        digest = hashlib.sha256((VECTORS / name).read_bytes()).digest()
        data = (VECTORS / bundle).read_bytes()
        pins = [identity_pin(who, "https://github.com/login/oauth")]

        def once(data: bytes = data, digest: bytes = digest, pins: Any = pins) -> None:
            outcome = verify_sigstore_bundle(data, "b", digest, "f", root, pins)
            assert outcome.status is Status.VERIFIED, outcome.failure

        results.append(_median(once, rounds) * 1000)
    return results[0], results[1]


def witness(records: int, rounds: int) -> dict[str, float]:
    from harness.verify.sigstore_bind import prepare_witness
    from harness.verify.sigstore_identity import SigstoreTrust, identity_pin
    from tests.sigstore_helpers import FakeSigstore

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        bundle, keys = build(folder, records, max(1000, records // 4))
        instance = FakeSigstore(name="bench")
        sigstore = folder / "bundle.tar.sigstore.json"
        sigstore.write_text(json.dumps(instance.sign(bundle.read_bytes(), IDENTITY, ISSUER)))
        root = json.dumps(instance.trusted_root()).encode()
        trust = SigstoreTrust((identity_pin(IDENTITY, ISSUER),), root, "root", "bench")
        witnessed = prepare_witness(trust, sigstore)
        pinned = TrustPolicy(frozenset({keys.key_id}), "--trusted-key")

        def plain() -> None:
            assert verify_bundle(bundle, pins=pinned).status is Status.VERIFIED

        def run(stream: Any, pins: TrustPolicy) -> Report:
            return verify_bundle(stream, pins=pins)

        def through_witness() -> None:
            report, refusal = witnessed.run(bundle, EMPTY_POLICY, Limits(), run)
            assert refusal is None and report.status is Status.VERIFIED, refusal

        plain()  # warm: the first verification also pays one-time imports and caches
        through_witness()
        plain_s = _median(plain, rounds)
        witnessed_s = _median(through_witness, rounds)
        return {
            "bundle_mib": round(bundle.stat().st_size / (1 << 20), 2),
            "bundle_s": round(plain_s, 4),
            "witnessed_s": round(witnessed_s, 4),
            "witness_overhead": round(witnessed_s / plain_s, 3),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    try:
        import sigstore  # noqa: F401
    except ImportError:  # the extra is optional: say so in the one line, as a figure would be
        print(json.dumps({"benchmark": "sigstore", "skipped": "pip install '.[sigstore]'"}))
        return
    v1, v2 = vector_ms(args.rounds)
    result = {
        "benchmark": "sigstore",
        "records": args.records,
        "import_s": round(import_seconds(), 3),
        "verify_v1_ms": round(v1, 2),
        "verify_v2_ms": round(v2, 2),
        **witness(args.records, args.rounds),
    }
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
