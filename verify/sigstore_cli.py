"""``harness-verify sigstore FILE --bundle F.sigstore.json ...``: one Sigstore bundle, offline.

Registered on the verifier's command line by ``cli.py``; this module is imported at start-up,
so it imports only typer and our light modules. ``sigstore`` (the optional extra) is imported
when the command runs; without it the command says how to install it and exits 2, and every
other command is unaffected.

Exit codes are the verifier's (docs/spec/verifier.md §1): 0 verified and the identity pinned,
1 invalid (any integrity check failed), 2 usage (flags, the trusted root, a missing extra),
3 integrity verified but the identity or issuer not the pinned one, 4 unreadable (not a
Sigstore bundle, an unknown media type, a file that cannot be read).
"""

from __future__ import annotations

import dataclasses
import re
from enum import StrEnum
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Final

import typer

from . import textsafe
from .archive import Limits
from .report import ExitCode

if TYPE_CHECKING:  # the command's own imports stay lazy (start-up time)
    from .bundle import Progress
    from .gate import GateReport
    from .policy import FileReader, TrustPolicy
    from .report import Report
    from .sigstore_bind import SigstoreWitness
    from .sigstore_identity import IdentityPin

SIGSTORE_EXIT_HELP: Final = (
    "Exit codes: 0 verified and the identity pinned; 1 invalid (signature, certificate, SCT, "
    "log entry, artifact); 2 usage error (flags, trusted root, the sigstore extra missing); "
    "3 verified but identity or issuer not pinned; 4 unreadable or unsupported bundle."
)
MAX_ARTIFACT_BYTES: Final = 1 << 40
_DIGEST = re.compile(r"sha256:([0-9a-fA-F]{64})")


class SigstoreFormat(StrEnum):
    TEXT = "text"
    JSON = "json"
    JUNIT = "junit"
    SARIF = "sarif"


def _fail(message: str, code: ExitCode = ExitCode.USAGE) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(int(code))


def _read(path: Path, limit: int, what: str) -> bytes:
    try:
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise _fail(f"cannot read {what} {textsafe.text(path)}: {exc.strerror}") from None
    if len(data) > limit:
        raise _fail(f"{what} {textsafe.text(path)} is larger than {limit} bytes")
    return data


def identity_pins(
    identity: str | None, identity_regex: str | None, issuer: str | None
) -> list[IdentityPin]:
    """The pins the identity flags give (none when no flag is given); exit 2 when they are
    incomplete or malformed. Shared by ``sigstore``, ``bundle`` and ``gate``."""
    if identity is None and identity_regex is None and issuer is None:
        return []
    from .sigstore_identity import IdentityError, identity_pin

    if identity is not None and identity_regex is not None:
        raise _fail("give --cert-identity or --cert-identity-regex, not both")
    if issuer is None or (identity is None and identity_regex is None):
        raise _fail(
            "an identity pin needs both --cert-identity (or --cert-identity-regex) and "
            "--cert-oidc-issuer"
        )
    try:
        if identity_regex is not None:
            return [identity_pin(identity_regex, issuer, regex=True)]
        return [identity_pin(identity, issuer)]
    except IdentityError as exc:
        raise _fail(textsafe.text(exc)) from None


def _digest_of(artifact: str) -> tuple[bytes, str]:
    """``sha256:<hex>`` names a digest (as the ``sigstore`` CLI accepts); anything else is a
    file, hashed as a stream."""
    match = _DIGEST.fullmatch(artifact)
    if match is not None:
        return bytes.fromhex(match.group(1)), artifact.lower()
    import hashlib  # 8 ms at start-up otherwise: only this command hashes a file

    path = Path(artifact)
    digest = hashlib.sha256()
    total = 0
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                total += len(chunk)
                if total > MAX_ARTIFACT_BYTES:
                    raise _fail(f"{textsafe.text(path)} is larger than 1 TiB", ExitCode.UNREADABLE)
                digest.update(chunk)
    except OSError as exc:
        raise _fail(
            f"cannot read {textsafe.text(path)}: {exc.strerror}", ExitCode.UNREADABLE
        ) from None
    return digest.digest(), artifact


def sigstore_command(
    artifact: Annotated[
        str,
        typer.Argument(
            help="The signed file, or sha256:<64 hex> for its digest", show_default=False
        ),
    ],
    bundle: Annotated[
        Path, typer.Option("--bundle", help="The Sigstore bundle (.sigstore.json) for FILE.")
    ],
    trusted_root: Annotated[
        Path,
        typer.Option(
            "--trusted-root",
            help="trusted_root.json of the Sigstore instance (no TUF, nothing fetched).",
        ),
    ],
    cert_identity: Annotated[
        str | None,
        typer.Option(
            "--cert-identity", help="Expected certificate identity (SAN), matched exactly."
        ),
    ] = None,
    cert_identity_regex: Annotated[
        str | None,
        typer.Option(
            "--cert-identity-regex",
            help="Expected identity as a regular expression over the whole SAN (explicit).",
        ),
    ] = None,
    cert_oidc_issuer: Annotated[
        str | None,
        typer.Option("--cert-oidc-issuer", help="Expected OIDC issuer, matched exactly."),
    ] = None,
    key: Annotated[
        Path | None,
        typer.Option(
            "--key",
            help="Instead of an identity: the signer's ECDSA public key (PEM), for a bundle "
            "signed with a key (verificationMaterial.publicKey).",
        ),
    ] = None,
    fmt: Annotated[
        SigstoreFormat, typer.Option("--format", help="Report format.")
    ] = SigstoreFormat.TEXT,
) -> None:
    """Verify a Sigstore bundle for FILE offline: certificate chain to the trusted root, SCT,
    transparency-log inclusion proof (re-checked with our own RFC 6962 code), checkpoint,
    inclusion promise or TSA timestamp, signature, artifact digest, then the identity."""
    pins = identity_pins(cert_identity, cert_identity_regex, cert_oidc_issuer)
    if pins and key is not None:
        raise _fail("pin the signer by identity or by --key, not both")
    if not pins and key is None:
        raise _fail(
            "pin the signer: --cert-identity ID (or --cert-identity-regex RE) and "
            "--cert-oidc-issuer ISSUER, or --key KEY.pem"
        )
    key_data = _read(key, 64 << 10, "key file") if key is not None else b""
    from .sigstore_identity import EXTRA_MISSING, IdentityError, check_trusted_root_bytes

    root_data = _read(trusted_root, 1 << 20, "trusted root")
    try:
        check_trusted_root_bytes(root_data, textsafe.text(trusted_root))
    except IdentityError as exc:
        raise _fail(textsafe.text(exc)) from None
    try:
        from .sigstore_check import MAX_BUNDLE_SIZE, SigstoreUsageError, load_trusted_root
        from .sigstore_check import verify_sigstore_bundle as verify
    except ImportError:
        raise _fail(EXTRA_MISSING) from None
    try:
        root = load_trusted_root(root_data, textsafe.text(trusted_root))
    except SigstoreUsageError as exc:
        raise _fail(textsafe.text(exc)) from None
    try:
        with bundle.open("rb") as handle:
            bundle_data = handle.read(MAX_BUNDLE_SIZE + 1)
    except OSError as exc:
        raise _fail(
            f"cannot read {textsafe.text(bundle)}: {exc.strerror}", ExitCode.UNREADABLE
        ) from None
    digest, shown = _digest_of(artifact)
    if key is not None:
        from .sigstore_key import KeyFileError, load_key, verify_key_bundle

        try:
            public = load_key(key_data, textsafe.text(key))
        except KeyFileError as exc:
            raise _fail(textsafe.text(exc)) from None
        outcome = verify_key_bundle(bundle_data, str(bundle), digest, shown, root, public)
    else:
        outcome = verify(bundle_data, str(bundle), digest, shown, root, pins)
    from .output import write_stdout
    from .sigstore_render import render

    write_stdout(render(outcome, fmt.value))
    raise typer.Exit(int(outcome.exit_code))


# ---- identity as trust for ``bundle`` and ``gate`` -----------------------------------------

SigstoreBundleOption = Annotated[
    Path | None,
    typer.Option(
        "--sigstore-bundle",
        help="A Sigstore bundle over this bundle file's exact bytes; if it verifies for a "
        "pinned identity, the manifest's signer counts as pinned (needs the sigstore extra).",
    ),
]
CertIdentityOption = Annotated[
    str | None,
    typer.Option("--cert-identity", help="With --sigstore-bundle: the signer's identity, exactly."),
]
CertIdentityRegexOption = Annotated[
    str | None,
    typer.Option(
        "--cert-identity-regex",
        help="With --sigstore-bundle: the signer's identity as a regex over the whole SAN.",
    ),
]
CertIssuerOption = Annotated[
    str | None,
    typer.Option("--cert-oidc-issuer", help="With --sigstore-bundle: the OIDC issuer, exactly."),
]
TrustedRootOption = Annotated[
    Path | None,
    typer.Option(
        "--trusted-root",
        help="With the identity flags: the Sigstore trusted_root.json (the gate reads a path "
        "inside the checkout from --base).",
    ),
]


def sigstore_trust(
    pins: TrustPolicy,
    sigstore_bundle: Path | None,
    identity: str | None,
    identity_regex: str | None,
    issuer: str | None,
    trusted_root: Path | None,
    reader: FileReader,
) -> tuple[TrustPolicy, SigstoreWitness | None]:
    """The pins with the Sigstore identities of the flags (which replace the policy's), and
    the witness to check the bundle with when ``--sigstore-bundle`` is given; exit 2 on any
    problem (incomplete flags, a trusted root that is not one, the extra missing)."""
    # the Sigstore modules only when a Sigstore flag or policy entry asks for them: without
    # one, ``bundle`` and ``gate`` load nothing of Sigstore (tests/test_startup_imports.py)
    flags = identity_pins(identity, identity_regex, issuer)
    if flags and trusted_root is None:
        raise _fail("the identity flags need --trusted-root ROOT.json (the Sigstore root of trust)")
    if trusted_root is not None and not flags:
        raise _fail("--trusted-root goes with --cert-identity and --cert-oidc-issuer")
    if flags and sigstore_bundle is None:
        raise _fail("--cert-identity pins the signer of a --sigstore-bundle: give that bundle")
    if flags:
        assert trusted_root is not None
        from .policy import PolicyError, read_trusted_root
        from .sigstore_identity import SigstoreTrust

        try:
            data, name = read_trusted_root(str(trusted_root), Path.cwd(), reader, "--trusted-root")
        except PolicyError as exc:
            raise _fail(textsafe.text(exc)) from None
        pins = dataclasses.replace(
            pins, sigstore=SigstoreTrust(tuple(flags), data, name, "the identity flags")
        )
    if sigstore_bundle is None:
        if pins.sigstore is not None and not pins.key_ids:
            typer.echo(
                f"warning: {textsafe.text(pins.source)} pins signers by Sigstore identity only: "
                "without --sigstore-bundle nothing is pinned",
                err=True,
            )
        return pins, None
    if pins.sigstore is None:
        raise _fail(
            "--sigstore-bundle needs a pinned identity: --cert-identity ID --cert-oidc-issuer "
            "ISS --trusted-root ROOT.json, or [trust] identities and trusted_root in the policy"
        )
    from .sigstore_bind import SigstoreSetupError, prepare_witness

    try:
        return pins, prepare_witness(pins.sigstore, sigstore_bundle)
    except SigstoreSetupError as exc:
        raise _fail(textsafe.text(exc)) from None


def verify_bundle_witnessed(
    witness: SigstoreWitness,
    bundle: Path,
    pins: TrustPolicy,
    *,
    hmac_master: bytes | None,
    limits: Limits,
    progress: Progress | None,
) -> Report:
    """``verify_bundle`` whose trust also rests on the Sigstore witness (sigstore_bind)."""
    from .bundle import verify_bundle
    from .sigstore_bind import downgrade_report

    def run(stream: IO[bytes], policy: TrustPolicy) -> Report:
        return verify_bundle(
            stream,  # type: ignore[arg-type]
            pins=policy,
            hmac_master=hmac_master,
            limits=limits,
            progress=progress,
            display_name=str(bundle),
        )

    try:
        report, refusal = witness.run(bundle, pins, limits, run)
    except OSError:  # vanished or unreadable since the check: the plain path reports it
        return verify_bundle(bundle, pins=pins, limits=limits, hmac_master=hmac_master)
    if refusal is not None:
        downgrade_report(report, refusal)
    return report


def gate_witnessed(
    witness: SigstoreWitness,
    repo: Path,
    base: str,
    head: str,
    bundle: Path,
    pins: TrustPolicy,
    progress: Progress | None = None,
) -> GateReport:
    """``run_gate`` over the bytes the Sigstore witness is checked against."""
    from .gate import run_gate
    from .sigstore_bind import downgrade_gate

    def run(stream: IO[bytes], policy: TrustPolicy) -> GateReport:
        return run_gate(repo, base, head, bundle, policy, source=stream, progress=progress)

    try:
        report, refusal = witness.run(bundle, pins, Limits(), run)
    except OSError:
        return run_gate(repo, base, head, bundle, pins, progress=progress)
    if refusal is not None:
        downgrade_gate(report, refusal)
    return report
