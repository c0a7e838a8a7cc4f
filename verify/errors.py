"""Exception hierarchy of the verifier.

Every failure the verifier can detect is a ``VerificationError``; callers (the CLI, CI gates,
other tools) catch that one class and get a message naming what failed and why. Sub-classes
let tests and callers tell the kinds apart without parsing messages.
"""

from __future__ import annotations


class VerificationError(Exception):
    """Evidence failed a check. The message says which check and why."""


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
