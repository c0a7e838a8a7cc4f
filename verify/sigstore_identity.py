"""Sigstore identities as trust: the pins, parsed without the ``sigstore`` package.

A Sigstore signature says "the holder of an OIDC identity ``ID``, vouched for by the issuer
``ISS``, signed these bytes", and a trusted root (``trusted_root.json``: Fulcio CAs, Rekor and
CT log keys, TSAs) says whom to believe about that. An :class:`IdentityPin` is one expected
``(identity, issuer)`` pair; a :class:`SigstoreTrust` is the pins plus the trusted root's bytes
and where they came from. Both are read from the operator's side (flags, an explicit policy
file, the gate's base-ref policy: docs/spec/sigstore.md §4), never from the evidence.

This module is imported by the trust policy on every command, so it must stay light: it
imports neither ``sigstore`` nor ``cryptography``. The checks that need them live in
``sigstore_check`` and are imported only when a command verifies a Sigstore bundle.

Identities match **exactly** (the certificate's SAN: an e-mail address, a URI such as
``https://github.com/OWNER/REPO/.github/workflows/ci.yml@refs/heads/main``, or Sigstore's
``otherName``) unless a pin is written explicitly as a regular expression
(``identity_regex`` / ``--cert-identity-regex``), which must then match the whole SAN. The
issuer always matches exactly: a regex over issuers is a way to trust every OIDC provider.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

__all__ = [
    "EXTRA_MISSING",
    "MAX_IDENTITY_LENGTH",
    "MAX_TRUSTED_ROOT_SIZE",
    "TRUSTED_ROOT_MEDIA_TYPE",
    "IdentityError",
    "IdentityPin",
    "SigstoreTrust",
    "check_trusted_root_bytes",
    "identity_pin",
]

MAX_IDENTITY_LENGTH: Final = 1024
"""A SAN or issuer URL longer than this is refused as a pin (and a regex longer than it)."""
MAX_TRUSTED_ROOT_SIZE: Final = 1 << 20
"""Sigstore's production trusted root is ~7 KiB; 1 MiB is generous and bounds the parse."""
TRUSTED_ROOT_MEDIA_TYPE: Final = "application/vnd.dev.sigstore.trustedroot+json;version=0.1"
EXTRA_MISSING: Final = (
    "this needs the optional 'sigstore' package: pip install 'harness-verify[sigstore]' "
    "(or pip install 'sigstore>=4.5,<5')"
)


class IdentityError(ValueError):
    """An identity pin or a trusted root is malformed (the CLI maps it to exit 2)."""


@dataclass(frozen=True)
class IdentityPin:
    """One expected signer: the certificate's SAN and its OIDC issuer (extension
    1.3.6.1.4.1.57264.1.1, or .8 in DER form), both exact unless ``regex`` is true."""

    identity: str
    issuer: str
    regex: bool = False

    def matches_identity(self, sans: Sequence[str]) -> bool:
        if self.regex:
            pattern = re.compile(self.identity)
            return any(pattern.fullmatch(san) is not None for san in sans)
        return self.identity in sans

    def describe(self) -> str:
        form = "identity matching " if self.regex else "identity "
        return f"{form}{self.identity} (issuer {self.issuer})"


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise IdentityError(f"{what} must be a string, not {type(value).__name__}")
    if not value or value != value.strip():
        raise IdentityError(f"{what} must be non-empty, without surrounding spaces")
    if len(value) > MAX_IDENTITY_LENGTH:
        raise IdentityError(f"{what} is longer than {MAX_IDENTITY_LENGTH} characters")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise IdentityError(f"{what} holds a control character")
    return value


def identity_pin(identity: object, issuer: object, *, regex: bool = False) -> IdentityPin:
    """A validated pin; raises :class:`IdentityError` naming what is wrong."""
    text = _text(identity, "identity_regex" if regex else "identity")
    if regex:
        try:
            re.compile(text)
        except re.error as exc:
            raise IdentityError(
                f"identity_regex {text!r} is not a regular expression: {exc}"
            ) from None
    return IdentityPin(text, _text(issuer, "issuer"), regex)


def check_trusted_root_bytes(data: bytes, name: str) -> None:
    """Refuse, early and cheaply, a file that is not a Sigstore trusted root (the full parse
    is ``sigstore``'s, when the check runs). Raises :class:`IdentityError`."""
    if len(data) > MAX_TRUSTED_ROOT_SIZE:
        raise IdentityError(f"trusted root {name} is larger than {MAX_TRUSTED_ROOT_SIZE} bytes")
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        raise IdentityError(f"trusted root {name} is not JSON") from None
    media = document.get("mediaType") if isinstance(document, dict) else None
    if media != TRUSTED_ROOT_MEDIA_TYPE:
        raise IdentityError(
            f"trusted root {name} has mediaType {media!r}, expected {TRUSTED_ROOT_MEDIA_TYPE!r}"
            " (a trusted_root.json, e.g. from `sigstore trust-instance` or the TUF repository)"
        )


@dataclass(frozen=True)
class SigstoreTrust:
    """The identities a Sigstore bundle over ``bundle.tar`` may be signed by, and the root of
    trust to verify it with. ``source`` names where they came from (flags or a policy file)."""

    identities: tuple[IdentityPin, ...]
    trusted_root: bytes
    trusted_root_name: str
    source: str

    def describe(self) -> str:
        return "; ".join(pin.describe() for pin in self.identities)
