"""Exception hierarchy of the verifier.

Every failure the verifier can detect is a ``VerificationError``; callers (the CLI, CI gates,
other tools) catch that one class and get a message naming what failed and why. Sub-classes
let tests and callers tell the kinds apart without parsing messages.
"""

from __future__ import annotations


class VerificationError(Exception):
    """Evidence failed a check. The message says which check and why.

    ``member``, ``line`` and ``seq`` locate the failure when known, so reports (JSON, SARIF)
    can point at it without parsing the message.
    """

    def __init__(
        self,
        message: str = "",
        *,
        member: str | None = None,
        line: int | None = None,
        seq: int | None = None,
    ) -> None:
        super().__init__(message)
        self.member = member
        self.line = line
        self.seq = seq


class CanonicalEncodingError(VerificationError):
    """A JSON document is malformed or not in its RFC 8785 canonical form."""


class SchemaError(VerificationError):
    """A record does not have the fields, types or values its format requires."""


class ProofError(VerificationError):
    """A Merkle inclusion or consistency proof does not verify."""


class InclusionProofError(ProofError):
    """An RFC 6962 inclusion proof does not verify."""


class ConsistencyProofError(ProofError):
    """An RFC 6962 consistency proof does not verify."""


class NoteError(VerificationError):
    """A signed note is malformed or its signatures do not verify."""


class MalformedNoteError(NoteError):
    """A signed note, a signature line or a verifier key is not well-formed."""


class InvalidSignatureError(NoteError):
    """A signature by a known key does not verify."""


class UnverifiedNoteError(NoteError):
    """No known key signed the note."""


class CheckpointError(VerificationError):
    """A checkpoint body is malformed."""


class ChainError(VerificationError):
    """A store's keyed HMAC chain or record sequence is broken."""


class MacMismatchError(ChainError):
    """A record's HMAC does not chain from the previous one under the store key."""
