"""``harness-verify``: the standalone, offline verifier's command line.

``harness-verify BUNDLE`` is short for ``harness-verify bundle BUNDLE``. Exit codes (stable):
0 verified and trusted, 1 evidence invalid (tampered, empty, seal-only), 2 usage error,
3 verified but not trusted by policy, 4 unreadable or unsupported input; ``compare`` also
5: both bundles verified and trusted, but their runs differ.
"""

# No ``from __future__ import annotations`` here: typer reads the annotations of every command
# at each start; as strings, each would be compiled by eval first (~10 ms of every run, issue 14).
import dataclasses
import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Final

import typer

from . import textsafe
from .archive import Limits
from .report import ExitCode, Report
from .sigstore_cli import (
    CertIdentityOption,
    CertIdentityRegexOption,
    CertIssuerOption,
    SigstoreBundleOption,
    TrustedRootOption,
    gate_witnessed,
    sigstore_trust,
    verify_bundle_witnessed,
)

# The checks and renderers are imported by the command that uses them, not here: start-up
# (``--version``, ``--help``, usage errors) stays short, and each command loads only its own.

EXIT_CODES_HELP: Final = (
    "Exit codes: 0 verified and trusted; 1 evidence invalid (tampered, empty or seal-only); "
    "2 usage error; 3 verified but signer not trusted by policy; 4 unreadable or unsupported "
    "input."
)
SUBCOMMANDS: Final = frozenset({"bundle", "receipt", "gate", "pack", "compare", "sigstore"})
ROOT_OPTIONS: Final = frozenset({"--help", "-h", "--version", "-v"})

app = typer.Typer(
    name="harness-verify",
    help="Verify harness evidence offline, strictly. " + EXIT_CODES_HELP,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # click's plain help and usage errors: rich's formatting costs 0.16 s of imports on every
    # --help and every usage error, and the verifier's own errors are one plain line anyway
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class Format(StrEnum):
    TEXT = "text"
    JSON = "json"
    JUNIT = "junit"
    SARIF = "sarif"


class TextOrJson(StrEnum):
    """The formats of ``pack``: one document, no per-check results a JUnit or SARIF consumer
    could place, so --help offers only these and others are refused as a usage error (one
    stderr line, exit 2), like every other bad option value."""

    TEXT = "text"
    JSON = "json"


class ReceiptFormat(StrEnum):
    """The formats of ``receipt``: the per-file check a CI step runs, so also JUnit (its test
    report) and SARIF (code scanning, located at the file's repository path)."""

    TEXT = "text"
    JSON = "json"
    JUNIT = "junit"
    SARIF = "sarif"


RequireSandbox = Annotated[
    bool,
    typer.Option(
        "--require-sandbox",
        help="Trust only runs whose agents and gates all ran in a sandbox (as "
        "[require] sandbox = true in a policy file); otherwise exit 3.",
    ),
]


_COMPRESSION_MAGIC: Final = (
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"BZh", "bzip2"),
    (b"\x04\x22\x4d\x18", "lz4"),
)
_SIZE_LIMIT_REASONS: Final = ("members add up to more than", "expands beyond the size limit")
HMAC_KEY_FILE_NAME: Final = "hmac.key"
"""The HMAC master key's file name in a keys folder (``harness keys init``): a secret."""
SIGNING_KEY_FILE_NAME: Final = "signing.key"


def _fail(message: str, code: ExitCode) -> typer.Exit:
    """A usage or file error: one line on stderr (never a report on stdout), then ``code``.
    ``message`` is in display form already (callers pass paths through ``textsafe``)."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(int(code))


def _input_problem(path: Path) -> str | None:
    """What is wrong with the named file itself, before it is read as evidence (all exit 4,
    unreadable input): a missing path, a folder, or a compressed stream other than gzip. The
    message replaces the archive hint "not a bundle ... damaged or crafted", which is wrong for
    a typo in a path."""
    shown = textsafe.text(path)
    if not path.exists() and not path.is_symlink():
        return f"{shown}: no such file (check the path of the bundle)"
    if path.is_dir():
        return f"{shown} is a folder; give the path of the bundle file (bundle.tar[.gz])"
    try:
        with path.open("rb") as handle:
            head = handle.read(8) if path.is_file() else b""
    except OSError as exc:
        return f"cannot read {shown}: {exc.strerror}"
    for magic, name in _COMPRESSION_MAGIC:
        if head.startswith(magic):
            return (
                f"{shown} is {name}-compressed; bundles are tar or gzip-compressed tar only "
                f"(decompress it first, e.g. `{name} -d`, or re-export as .tar.gz)"
            )
    return None


def _trusted_keys(values: list[str] | None) -> list[str]:
    """``--trusted-key`` values as the policy parser takes them: ``sha256:<64 hex>`` is the
    usual spelling of a digest (the key id is the SHA-256 of the public key), so the prefix is
    dropped; the HMAC master key file is refused, as the signing key is: it is a secret that
    has the same 64-hex shape as a key id and would otherwise be pinned as one."""
    out: list[str] = []
    for value in values or []:
        text = value.strip()
        if text[:7].lower() == "sha256:" and len(text) == 71:
            text = text[7:]
        candidate = Path(text)
        try:
            is_file = candidate.is_file()
        except OSError:
            is_file = False
        beside_signing_key = (candidate.parent / SIGNING_KEY_FILE_NAME).exists()
        if is_file and (
            candidate.name == HMAC_KEY_FILE_NAME
            or (beside_signing_key and _is_hex_secret(candidate))
        ):
            raise _fail(
                f"--trusted-key {textsafe.text(text)}: this is the HMAC master key, a "
                "secret, not a public key: never hand it to a verifier as a pin; pin the "
                "signer's key id or its public key (signing.pub) instead",
                ExitCode.USAGE,
            )
        out.append(text)
    return out


def _is_hex_secret(path: Path) -> bool:
    """True for a file holding only hex (at least 64 digits): the HMAC master key's format."""
    try:
        with path.open("rb") as handle:
            data = handle.read(4097).strip()
    except OSError:
        return False
    return len(data) >= 64 and all(c in b"0123456789abcdefABCDEF" for c in data)


def _size_limit_hint(report: Report, max_bytes: int) -> None:
    """The user's own ``--max-bytes`` (or its default) stopped the read: say so, instead of
    the archive hint "not a bundle ... damaged or crafted"."""
    failure = report.failure
    if failure is None or failure.check != "archive":
        return
    if any(text in failure.reason for text in _SIZE_LIMIT_REASONS):
        report.failure = dataclasses.replace(
            failure,
            hint=f"The bundle is larger than the --max-bytes limit ({max_bytes} bytes). If "
            "you expect a bundle this large, raise --max-bytes; otherwise treat it as suspect.",
        )


def _read_hmac_key(path: Path) -> bytes:
    try:
        with path.open("rb") as handle:
            text = handle.read(4097)
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {textsafe.text(path)}: {exc.strerror}") from None
    try:
        key = bytes.fromhex(text.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        raise typer.BadParameter(f"{textsafe.text(path)} does not hold a hex HMAC key") from None
    if len(key) < 32:
        raise typer.BadParameter(
            f"{textsafe.text(path)}: HMAC key is {len(key)} bytes, need at least 32"
        )
    return key


def _write_or_exit(path: Path, document: str, *, append: bool = False) -> None:
    """Write a report file (never through a link, regular files only) or exit 2 saying why."""
    from .output import OutputError, append_summary, write_report

    try:
        if append:
            append_summary(path, document)
        else:
            write_report(path, document)
    except OutputError as exc:  # its message shows the path in display form already
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(ExitCode.USAGE) from None


def _emit(report: Report, fmt: Format, output: Path | None, quiet: bool) -> None:
    from .output import write_stdout
    from .render import render, render_text

    document = render(report, fmt.value)
    if output is not None:
        _write_or_exit(output, document)
        if not quiet:
            typer.echo(render_text(report), err=True)
        return
    if quiet and fmt is Format.TEXT:
        return
    write_stdout(document)


@app.command(
    "bundle", epilog=EXIT_CODES_HELP, short_help="Verify a bundle (bundle.tar, .tar.gz) in full."
)
def bundle_command(
    bundle: Annotated[
        Path, typer.Argument(help="bundle.tar or bundle.tar.gz to verify", readable=False)
    ],
    trusted_key: Annotated[
        list[str] | None,
        typer.Option(
            "--trusted-key",
            help="Pinned signer: key id (hex SHA-256 of the public key), verifier key text, or "
            "a file holding either or a PEM public key. Repeatable. Overrides any policy.",
        ),
    ] = None,
    policy: Annotated[
        Path | None,
        typer.Option(
            help="Policy file ([trust] keys = [...]). Without --trusted-key or --policy nothing "
            "is pinned: nothing is read from the working directory (exit 3 if unpinned)."
        ),
    ] = None,
    hmac_key: Annotated[
        Path | None,
        typer.Option(help="HMAC master key file (hex) to also check the keyed chains."),
    ] = None,
    fmt: Annotated[Format, typer.Option("--format", help="Report format.")] = Format.TEXT,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the report here, not stdout.")
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress and no text summary.")
    ] = False,
    max_bytes: Annotated[
        int, typer.Option(min=1, help="Refuse bundles whose members add up to more bytes.")
    ] = Limits().max_total_bytes,
    require_sandbox: RequireSandbox = False,
    sigstore_bundle: SigstoreBundleOption = None,
    cert_identity: CertIdentityOption = None,
    cert_identity_regex: CertIdentityRegexOption = None,
    cert_oidc_issuer: CertIssuerOption = None,
    trusted_root: TrustedRootOption = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            help="Processes checking store records (default: one per usable core for bundles "
            "of 4 MiB or more; 1: this process only). The report is the same.",
        ),
    ] = None,
) -> None:
    """Verify a bundle: archive safety, manifest signature, members, records, Merkle roots,
    consistency proofs, HMAC chains (with --hmac-key), and whether the signer is pinned."""
    from .policy import DISK, PolicyError, resolve_policy

    try:
        pins = resolve_policy(_trusted_keys(trusted_key), policy, Path.cwd())
    except PolicyError as exc:
        typer.echo(f"error: {textsafe.text(exc)}", err=True)
        raise typer.Exit(ExitCode.USAGE) from None
    if require_sandbox:
        pins = dataclasses.replace(pins, require_sandbox=True)
    pins, witness = sigstore_trust(
        pins, sigstore_bundle, cert_identity, cert_identity_regex, cert_oidc_issuer,
        trusted_root, DISK,
    )  # fmt: skip
    try:
        master = _read_hmac_key(hmac_key) if hmac_key is not None else None
    except typer.BadParameter as exc:  # one line, not a usage box
        raise _fail(f"--hmac-key: {exc.message}", ExitCode.USAGE) from None
    problem = _input_problem(bundle)
    if problem is not None and fmt is Format.TEXT and output is None:
        raise _fail(problem, ExitCode.UNREADABLE)  # a person at a terminal: one stderr line
    from .progress import Progress

    progress = Progress(enabled=not quiet)
    from .bundle import verify_bundle

    if witness is not None and problem is None:
        report = verify_bundle_witnessed(
            witness, bundle, pins, hmac_master=master,
            limits=Limits(max_total_bytes=max_bytes), progress=progress,
        )  # fmt: skip
    else:
        report = verify_bundle(
            bundle,
            pins=pins,
            hmac_master=master,
            limits=Limits(max_total_bytes=max_bytes),
            progress=progress,
            jobs=jobs,
        )
    progress.end()
    _size_limit_hint(report, max_bytes)
    if problem is not None and report.failure is not None:  # machine formats keep the report
        report.failure = dataclasses.replace(report.failure, hint=problem)
    _emit(report, fmt, output, quiet)
    raise typer.Exit(int(report.exit_code))


@app.command(
    "receipt", epilog=EXIT_CODES_HELP, short_help="Verify one artifact receipt against its file."
)
def receipt_command(
    receipt: Annotated[
        Path, typer.Argument(help="ARTIFACT.receipt.json to verify", readable=False)
    ],
    artifact: Annotated[Path, typer.Option(help="The artifact file the receipt is about.")],
    name: Annotated[
        str | None,
        typer.Option(help="Repository path the receipt must name (default: --artifact as given)."),
    ] = None,
    trusted_key: Annotated[
        list[str] | None,
        typer.Option("--trusted-key", help="Pinned signer (as for bundle). Repeatable."),
    ] = None,
    policy: Annotated[Path | None, typer.Option(help="Policy file (as for bundle).")] = None,
    fmt: Annotated[
        ReceiptFormat, typer.Option("--format", help="Report format.")
    ] = ReceiptFormat.TEXT,
) -> None:
    """Verify one artifact receipt against one file: digest, record, inclusion proof, signed
    checkpoint, COSE receipt, and whether the signer is pinned. What a CI step runs per file."""
    from .policy import PolicyError, resolve_policy

    try:
        pins = resolve_policy(_trusted_keys(trusted_key), policy, Path.cwd())
    except PolicyError as exc:
        typer.echo(f"error: {textsafe.text(exc)}", err=True)
        raise typer.Exit(ExitCode.USAGE) from None
    wanted = name if name is not None else artifact.as_posix().removeprefix("./")
    from .receiptcheck import check_receipt_file

    outcome = check_receipt_file(receipt, artifact, wanted, pins)
    from .output import write_stdout

    if fmt is ReceiptFormat.JSON:
        write_stdout(json.dumps(outcome.to_json(), indent=2, sort_keys=True) + "\n")
    elif fmt is ReceiptFormat.SARIF:
        from .receipt_render import render_receipt_sarif

        write_stdout(render_receipt_sarif(outcome))
    elif fmt is ReceiptFormat.JUNIT:
        from .receipt_render import render_receipt_junit

        write_stdout(render_receipt_junit(outcome))
    else:
        write_stdout(outcome.to_text() + "\n")
    raise typer.Exit(int(outcome.exit_code))


class GateFormat(StrEnum):
    TEXT = "text"
    JSON = "json"
    SARIF = "sarif"
    MARKDOWN = "markdown"


GATE_EXIT_HELP: Final = (
    "Exit codes: 0 every changed file covered and the bundle verified and trusted; 1 a file "
    "uncovered or the bundle invalid; 2 usage error (bad ref, not a git repository); 3 bundle "
    "verified but signer not pinned; 4 bundle unreadable."
)


@app.command(
    "gate",
    epilog=GATE_EXIT_HELP,
    short_help="Merge gate: every changed file covered by a verified agent write.",
)
def gate_command(
    bundle: Annotated[
        Path,
        typer.Argument(help="bundle.tar or bundle.tar.gz holding the evidence", readable=False),
    ],
    base: Annotated[str, typer.Option(help="Base commit of the change (e.g. the PR base SHA).")],
    head: Annotated[str, typer.Option(help="Head commit of the change.")] = "HEAD",
    repo: Annotated[
        Path | None, typer.Option(help="Repository checkout (default: working directory).")
    ] = None,
    trusted_key: Annotated[
        list[str] | None,
        typer.Option("--trusted-key", help="Pinned signer (as for bundle). Repeatable."),
    ] = None,
    policy: Annotated[
        Path | None,
        typer.Option(
            help="Policy file (as for bundle). Default: harness-verify.toml or "
            "\\[tool.harness-verify] in pyproject.toml as committed on --base, never the "
            "working tree; paths inside the checkout are read from --base."
        ),
    ] = None,
    fmt: Annotated[GateFormat, typer.Option("--format", help="Report format.")] = GateFormat.TEXT,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the report here, not stdout.")
    ] = None,
    summary: Annotated[
        Path | None,
        typer.Option(help="Append a markdown table to this file (e.g. $GITHUB_STEP_SUMMARY)."),
    ] = None,
    json_report: Annotated[
        Path | None,
        typer.Option(
            "--json-report",
            help="Also write the JSON report (schemas/gate-report.schema.json) to this file, "
            "whatever --format is (the Action's report output).",
        ),
    ] = None,
    require_sandbox: RequireSandbox = False,
    sigstore_bundle: SigstoreBundleOption = None,
    cert_identity: CertIdentityOption = None,
    cert_identity_regex: CertIdentityRegexOption = None,
    cert_oidc_issuer: CertIssuerOption = None,
    trusted_root: TrustedRootOption = None,
) -> None:
    """Merge gate: pass only if every file changed between --base and --head is covered by a
    merged, attested agent write (or delete) in a verified bundle signed by a pinned key."""
    from .basepolicy import BaseRefReader, resolve_gate_policy
    from .gate import GateUsageError, resolve_commit, run_gate
    from .gate_render import render_gate, render_gate_text, render_markdown
    from .policy import DISK, PolicyError

    cwd = Path.cwd()
    where = cwd if repo is None else (repo if repo.is_absolute() else cwd / repo)
    try:
        # Pins come from outside the change: flags, an explicit policy, or the base ref's
        # policy; any file inside the checkout is read as committed on the base ref.
        base_commit = resolve_commit(where, base)
        pins = resolve_gate_policy(_trusted_keys(trusted_key), policy, where, base_commit, where)
        if require_sandbox:
            pins = dataclasses.replace(pins, require_sandbox=True)
        # identity pins: a --trusted-root inside the checkout is read from --base, as keys are
        root_reader = DISK if trusted_root is None else BaseRefReader(where, base_commit)
        pins, witness = sigstore_trust(
            pins, sigstore_bundle, cert_identity, cert_identity_regex, cert_oidc_issuer,
            trusted_root, root_reader,
        )  # fmt: skip
        from .progress import Progress

        progress = Progress(enabled=True)  # stderr: the report goes to stdout or its files
        try:
            if witness is not None and bundle.is_file():
                report = gate_witnessed(witness, where, base, head, bundle, pins, progress)
            else:
                report = run_gate(where, base, head, bundle, pins, progress=progress)
        finally:
            progress.end()
    except PolicyError as exc:
        typer.echo(f"error: {textsafe.text(exc)}", err=True)
        raise typer.Exit(ExitCode.USAGE) from None
    except GateUsageError as exc:
        typer.echo(f"error: {textsafe.text(exc)}", err=True)
        raise typer.Exit(ExitCode.USAGE) from None
    document = render_gate(report, fmt.value)
    if summary is not None:
        _write_or_exit(summary, render_markdown(report) + "\n", append=True)
    if json_report is not None:
        _write_or_exit(json_report, render_gate(report, "json"))
    if output is not None:
        _write_or_exit(output, document)
        typer.echo(render_gate_text(report), err=True, nl=False)
    else:
        from .output import write_stdout

        write_stdout(document)
    raise typer.Exit(int(report.exit_code))


# harness-verify sigstore FILE --bundle ...: the command lives in its own module (it needs the
# optional sigstore package, imported only when it runs)
from .sigstore_cli import SIGSTORE_EXIT_HELP, sigstore_command  # noqa: E402

app.command(
    "sigstore",
    epilog=SIGSTORE_EXIT_HELP,
    short_help="Verify a Sigstore bundle for a file, offline, against a trusted root.",
)(sigstore_command)


def _print_version(value: bool) -> None:
    """Eager, so ``harness-verify --version`` needs no bundle argument."""
    if value:
        from .version import verifier_version

        typer.echo(f"harness-verify {verifier_version()}")
        raise typer.Exit(0)


@app.command(
    "pack", epilog=EXIT_CODES_HELP, short_help="Verify an EU AI Act Art. 12 pack (folder or tar)."
)
def pack_command(
    pack: Annotated[
        Path,
        typer.Argument(help="EU AI Act pack folder or PACK.tar to verify", readable=False),
    ],
    trusted_key: Annotated[
        list[str] | None,
        typer.Option("--trusted-key", help="Pinned signer (as for bundle). Repeatable."),
    ] = None,
    policy: Annotated[Path | None, typer.Option(help="Policy file (as for bundle).")] = None,
    fmt: Annotated[TextOrJson, typer.Option("--format", help="text or json.")] = TextOrJson.TEXT,
) -> None:
    """Verify an EU AI Act Art. 12 pack: the signed pack manifest, every file's digest (and no
    unlisted file), the bundle in full, and that report.json agrees with the verified bundle."""
    from .output import write_stdout
    from .packcheck import check_pack
    from .policy import PolicyError, resolve_policy

    try:
        pins = resolve_policy(trusted_key or [], policy, Path.cwd())
    except PolicyError as exc:
        typer.echo(f"error: {textsafe.text(exc)}", err=True)
        raise typer.Exit(ExitCode.USAGE) from None
    if not pack.exists() and not pack.is_symlink():  # a typo in a path: one line, not a report
        typer.echo(f"error: {textsafe.text(pack)}: no such file or folder", err=True)
        raise typer.Exit(ExitCode.UNREADABLE)
    outcome = check_pack(pack, pins)
    if fmt is TextOrJson.JSON:
        write_stdout(json.dumps(outcome.to_json(), indent=2, sort_keys=True) + "\n")
    else:
        write_stdout(outcome.to_text())
    raise typer.Exit(int(outcome.exit_code))


COMPARE_EXIT_HELP: Final = (
    "Exit codes: 0 both verified and trusted, and the same run; 5 both verified and trusted, "
    "but they differ; 1, 3, 4 as for bundle (the first bundle that fails decides); 2 usage error."
)


@app.command(
    "compare",
    epilog=COMPARE_EXIT_HELP,
    short_help="Compare a run's bundle with its replay's: same roots, same decisions.",
)
def compare_command(
    original: Annotated[Path, typer.Argument(help="the original run's bundle", readable=False)],
    replay: Annotated[Path, typer.Argument(help="the replay's bundle", readable=False)],
    trusted_key: Annotated[
        list[str] | None,
        typer.Option("--trusted-key", help="Pinned signer (as for bundle), for both. Repeatable."),
    ] = None,
    policy: Annotated[Path | None, typer.Option(help="Policy file (as for bundle).")] = None,
    hmac_key: Annotated[
        Path | None,
        typer.Option(help="HMAC master key file (hex) to also check both keyed chains."),
    ] = None,
    run: Annotated[
        str | None,
        typer.Option(help="Compare this run (in both); default: every run, paired by id."),
    ] = None,
    fmt: Annotated[TextOrJson, typer.Option("--format", help="text or json.")] = TextOrJson.TEXT,
    max_bytes: Annotated[
        int, typer.Option(min=1, help="Refuse bundles whose members add up to more bytes.")
    ] = Limits().max_total_bytes,
) -> None:
    """Verify both bundles in full, then compare them run by run: the lineage and replay
    stores' roots and records (a replay reproduces them byte for byte) and the audit store's
    decision sequence; the first difference is named (store, record, member, both values)."""
    from .compare import CompareError, compare_bundles
    from .output import write_stdout
    from .policy import PolicyError, resolve_policy

    try:
        pins = resolve_policy(_trusted_keys(trusted_key), policy, Path.cwd())
    except PolicyError as exc:
        raise _fail(textsafe.text(exc), ExitCode.USAGE) from None
    try:
        master = _read_hmac_key(hmac_key) if hmac_key is not None else None
    except typer.BadParameter as exc:
        raise _fail(f"--hmac-key: {exc.message}", ExitCode.USAGE) from None
    for path in (original, replay):
        problem = _input_problem(path)
        if problem is not None:
            raise _fail(problem, ExitCode.UNREADABLE)
    try:
        comparison = compare_bundles(
            original,
            replay,
            pins=pins,
            hmac_master=master,
            limits=Limits(max_total_bytes=max_bytes),
            run=run,
        )
    except CompareError as exc:
        raise _fail(textsafe.text(str(exc)), exc.code) from None
    if fmt is TextOrJson.JSON:
        write_stdout(json.dumps(comparison.to_json(), indent=2, sort_keys=True) + "\n")
    else:
        # one display-safe line at a time: run ids, paths and member values come from the bundles
        lines = comparison.to_text().splitlines()
        write_stdout("".join(textsafe.text(line) + "\n" for line in lines))
    raise typer.Exit(int(comparison.exit_code))


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-v",
            help="Print the version and exit.",
            is_eager=True,
            callback=_print_version,
        ),
    ] = False,
) -> None:
    """Verify harness evidence offline, strictly."""


def main(argv: list[str] | None = None) -> None:
    """Console entry point: ``harness-verify BUNDLE`` means ``harness-verify bundle BUNDLE``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] not in SUBCOMMANDS and args[0] not in ROOT_OPTIONS:
        args.insert(0, "bundle")
    app(args=args, prog_name="harness-verify")


if __name__ == "__main__":
    main()
