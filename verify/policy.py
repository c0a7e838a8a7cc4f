"""Trust policy: which signer keys are pinned (DESIGN §6, §8).

A bundle's own keys prove nothing about who made it. A signer is trusted only if its key id
(hex SHA-256 of the raw 32-byte Ed25519 public key, :func:`harness.verify.keyids.key_id`) is
pinned, in this order of precedence:

1. ``--trusted-key`` values on the command line;
2. an explicit ``--policy FILE``;
3. nothing: the policy is empty and no signer is trusted (fail closed).

Nothing is discovered from the working directory or its parents: a CI job's working directory
is the checkout of the change under test, and a policy file found there would let the change
pin its own key (decision 0016). The merge gate adds one more source, the policy **as committed
on the base ref** (``verify/basepolicy.py``), and reads every file path inside the repository
from that commit, never from the working tree. Both go through a :class:`FileReader`, so the
same strict parser serves the disk and a git commit.

Policy file (``harness-verify.toml``; in ``pyproject.toml`` the same under
``[tool.harness-verify]``)::

    [trust]
    keys = [
        "3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29",  # a key id
        "harness-3b6a27bcceb6a42d+1f2e3d4c+AT...",                          # a verifier key
        "keys/signing.pub",                        # a file, relative to the policy file
    ]

    # optional, instead of or beside keys: a Sigstore bundle over bundle.tar signed by one of
    # these identities (exact match; identity_regex only when written) pins its signer
    identities = [
        { identity = "https://github.com/OWNER/REPO/.github/workflows/ci.yml@refs/heads/main",
          issuer = "https://token.actions.githubusercontent.com" },
    ]
    trusted_root = "sigstore/trusted_root.json"    # relative to the policy file

    [require]
    sandbox = true    # optional: every agent and gate of every run ran in a sandbox

Nothing is executed, and the files are parsed strictly: unknown tables or keys are errors,
not silently ignored. Every problem is a :class:`PolicyError` with a message naming the file
and the entry.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from .errors import MalformedNoteError
from .keyids import key_id
from .note import parse_verifier_key

if TYPE_CHECKING:
    from .sigstore_identity import IdentityPin, SigstoreTrust

# TOML, PEM keys and Sigstore identities are imported where a policy file, a key file or an
# identity needs them: a bundle verified with --trusted-key KEYID loads none of them
# (tests/test_startup_imports.py).

__all__ = [
    "DISK",
    "EMPTY_POLICY",
    "MAX_KEY_FILE_SIZE",
    "MAX_POLICY_FILE_SIZE",
    "NOT_PINNED_HINT",
    "POLICY_FILE_NAME",
    "PYPROJECT_FILE_NAME",
    "DiskReader",
    "FileReader",
    "PolicyError",
    "TrustPolicy",
    "load_policy_file",
    "parse_trusted_key",
    "policy_from_document",
    "pyproject_policy_table",
    "resolve_policy",
]

POLICY_FILE_NAME: Final = "harness-verify.toml"
PYPROJECT_FILE_NAME: Final = "pyproject.toml"
TOOL_TABLE: Final = "harness-verify"
TRUSTED_KEY_SOURCE: Final = "--trusted-key"

MAX_KEY_FILE_SIZE: Final = 64 * 1024
MAX_POLICY_FILE_SIZE: Final = 1024 * 1024

NOT_PINNED_HINT: Final = (
    "pin the signer with --trusted-key KEY (a key id, a verifier key or a public key file "
    "outside the checkout) or --policy FILE"
)
"""How to pin, for every "signer not pinned" message."""

_KEY_ID = re.compile(r"[0-9a-fA-F]{64}")
_PEM_BEGIN = "-----BEGIN "


class PolicyError(Exception):
    """The trust policy (a --trusted-key value or a policy file) is wrong.

    The message names the file or value and what is wrong; the CLI maps it to exit code 2.
    """


@dataclass(frozen=True)
class TrustPolicy:
    """The pinned signer key ids and where they came from.

    ``source`` is ``"--trusted-key"``, the policy file path (for the gate's base-ref policy
    ``<commit>:<path>``), or ``""`` when there is no policy (then nothing is trusted).
    """

    key_ids: frozenset[str]
    source: str
    require_sandbox: bool = False
    """Refuse trust (exit 3) unless every agent of every runtime run ran in a sandbox
    (``[require] sandbox = true`` or ``--require-sandbox``)."""
    sigstore: SigstoreTrust | None = None
    """Identities whose Sigstore bundle over the bundle's bytes pins its signer
    (``[trust] identities`` + ``trusted_root``, or the identity flags; docs/spec/sigstore.md)."""

    def pins(self, key_id_hex: str | None) -> bool:
        """Whether ``key_id_hex`` (any letter case) is pinned by this policy."""
        return key_id_hex is not None and key_id_hex.lower() in self.key_ids


EMPTY_POLICY: Final = TrustPolicy(frozenset(), "")


class FileReader(Protocol):
    """Where policy and key files are read from: the disk, or (the gate) a git commit.

    ``read`` returns the bytes of a regular file of at most ``limit`` bytes or raises
    :class:`PolicyError` naming ``what`` and the file; ``exists`` says whether there is an
    entry to read; ``name`` is how the file is shown in messages and in ``TrustPolicy.source``.
    """

    def read(self, path: Path, limit: int, what: str) -> bytes: ...

    def exists(self, path: Path) -> bool: ...

    def name(self, path: Path) -> str: ...


def _shown(value: str, limit: int = 80) -> str:
    """``value`` quoted and shortened for an error message."""
    text = value if len(value) <= limit else value[:limit] + "..."
    return repr(text)


def read_regular_file(path: Path, limit: int, what: str) -> bytes:
    """Read a regular file of at most ``limit`` bytes from disk, or raise :class:`PolicyError`.

    The file is opened once (``O_NOFOLLOW`` is not used: a key file may be a link to a key
    kept elsewhere; the containment rules of the gate resolve links before reading).
    """
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise PolicyError(f"{what} {path} is not a regular file")
        if info.st_size > limit:
            raise PolicyError(f"{what} {path} is too large ({info.st_size} bytes, limit {limit})")
        with open(path, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise PolicyError(f"{what} {path} is not a regular file")
            data = handle.read(limit + 1)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise PolicyError(f"cannot read {what} {path}: {reason}") from None
    if len(data) > limit:
        raise PolicyError(f"{what} {path} is too large (limit {limit} bytes)")
    return data


class DiskReader:
    """Files as they are on disk (the ``bundle`` and ``receipt`` commands' explicit paths)."""

    def read(self, path: Path, limit: int, what: str) -> bytes:
        return read_regular_file(path, limit, what)

    def exists(self, path: Path) -> bool:
        try:
            return path.exists()
        except (OSError, ValueError):
            return False

    def name(self, path: Path) -> str:
        return str(path)


DISK: Final = DiskReader()


def _key_id_from_text(text: str) -> str | None:
    """The key id of a hex key id or verifier key text; ``None`` if it is neither.

    Raises :class:`PolicyError` for text shaped like a verifier key (``a+b+c``) that is not one.
    """
    if _KEY_ID.fullmatch(text):
        return text.lower()
    if text.count("+") >= 2:
        try:
            return key_id(parse_verifier_key(text).public_key)
        except MalformedNoteError as exc:
            raise PolicyError(f"invalid verifier key {_shown(text)}: {exc}") from None
    return None


def _key_id_from_pem(data: bytes, shown: str) -> str:
    if b"PRIVATE KEY-----" in data:
        raise PolicyError(
            f"{shown} holds a private key: pin the public key (signing.pub), never the secret"
        )
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        public = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise PolicyError(f"{shown} is not a valid PEM public key") from None
    if not isinstance(public, Ed25519PublicKey):
        kind = type(public).__name__.removeprefix("_").replace("PublicKey", "") or "unknown"
        raise PolicyError(f"{shown} holds a {kind} public key; only Ed25519 keys can be pinned")
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return key_id(raw)


def _key_id_from_file(path: Path, reader: FileReader) -> str:
    data = reader.read(path, MAX_KEY_FILE_SIZE, "key file")
    shown = reader.name(path)
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        raise PolicyError(f"key file {shown} is not UTF-8 text") from None
    if _PEM_BEGIN in text:
        return _key_id_from_pem(data, shown)
    line = text.strip()
    if not line or "\n" in line or "\r" in line:
        raise PolicyError(
            f"key file {shown} must hold one line (a key id or a verifier key) "
            "or a PEM Ed25519 public key"
        )
    try:
        found = _key_id_from_text(line)
    except PolicyError as exc:
        raise PolicyError(f"key file {shown}: {exc}") from None
    if found is None:
        raise PolicyError(
            f"key file {shown} holds neither a key id (64 hex digits), a verifier key "
            "(name+hash+base64) nor a PEM Ed25519 public key"
        )
    return found


def parse_trusted_key(value: str, *, base: Path | None = None, reader: FileReader = DISK) -> str:
    """The key id (64 lowercase hex) that ``value`` pins.

    ``value`` is a key id (64 hex digits, any case), a signed-note verifier key
    ``name+hash+base64(0x01 || key)``, or a path to a file holding either of those on one line
    or a PEM Ed25519 public key. A relative path resolves against ``base`` when given (the
    policy file's folder), else against the current directory; the file is read through
    ``reader``. Raises :class:`PolicyError`.
    """
    if not isinstance(value, str):
        raise PolicyError(f"a trusted key must be a string, not {type(value).__name__}")
    text = value.strip()
    if not text:
        raise PolicyError("empty trusted key")
    if "\x00" in text:
        raise PolicyError(f"invalid trusted key {_shown(text)}")
    try:
        found = _key_id_from_text(text)
    except PolicyError as exc:
        # Key names may hold '/' and file names '+': only an existing file beats the key form.
        not_a_key: PolicyError | None = exc
    else:
        if found is not None:
            return found
        not_a_key = None
    path = Path(text)
    if base is not None and not path.is_absolute():
        path = base / path
    if not path.is_absolute():
        path = Path(os.path.abspath(path))
    if not reader.exists(path):
        if not_a_key is not None:
            raise not_a_key
        raise PolicyError(
            f"trusted key {_shown(text)} is not a key id (64 hex digits), a verifier key "
            f"(name+hash+base64) or an existing key file ({reader.name(path)} not found)"
        )
    return _key_id_from_file(path, reader)


def _parse_toml(path: Path, reader: FileReader) -> dict[str, Any]:
    data = reader.read(path, MAX_POLICY_FILE_SIZE, "policy file")
    shown = reader.name(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise PolicyError(f"policy file {shown} is not UTF-8 text") from None
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"policy file {shown} is not valid TOML: {exc}") from None


def _is_pyproject(path: Path) -> bool:
    return path.name == PYPROJECT_FILE_NAME


def _pyproject_table(document: dict[str, Any], shown: str) -> dict[str, Any] | None:
    tool = document.get("tool")
    if tool is None:
        return None
    if not isinstance(tool, dict):
        raise PolicyError(f"{shown}: 'tool' must be a table")
    table = tool.get(TOOL_TABLE)
    if table is None:
        return None
    if not isinstance(table, dict):
        raise PolicyError(f"{shown}: [tool.{TOOL_TABLE}] must be a table")
    return table


def pyproject_policy_table(path: Path, reader: FileReader = DISK) -> dict[str, Any] | None:
    """The ``[tool.harness-verify]`` table of a ``pyproject.toml``, or ``None`` if it has none.

    Raises :class:`PolicyError` if the file cannot be read or parsed (then it cannot be told
    whether it holds a policy), or if ``tool`` / ``tool.harness-verify`` is not a table.
    """
    return _pyproject_table(_parse_toml(path, reader), reader.name(path))


def policy_from_document(
    table: dict[str, Any], path: Path, prefix: str, reader: FileReader = DISK
) -> TrustPolicy:
    """The policy of a parsed policy table (``prefix`` is ``""`` or ``"tool.harness-verify."``).

    Key file paths resolve against ``path``'s folder and are read through ``reader``.
    """
    shown = reader.name(path)
    unknown = sorted(set(table) - {"trust", "require"})
    if unknown:
        names = ", ".join(f"{prefix}{name}" for name in unknown)
        raise PolicyError(
            f"{shown}: unknown policy entries: {names} "
            f"(expected only [{prefix}trust] and [{prefix}require])"
        )
    require = table.get("require", {})
    if not isinstance(require, dict):
        raise PolicyError(f"{shown}: {prefix}require must be a table")
    unknown = sorted(set(require) - {"sandbox"})
    if unknown:
        names = ", ".join(f"{prefix}require.{name}" for name in unknown)
        raise PolicyError(f"{shown}: unknown policy entries: {names} (expected only sandbox)")
    require_sandbox = require.get("sandbox", False)
    if type(require_sandbox) is not bool:
        raise PolicyError(f"{shown}: {prefix}require.sandbox must be true or false")
    trust = table.get("trust")
    if trust is None:
        raise PolicyError(f"{shown}: no [{prefix}trust] table with keys = [...]")
    if not isinstance(trust, dict):
        raise PolicyError(f"{shown}: {prefix}trust must be a table")
    unknown = sorted(set(trust) - {"keys", "identities", "trusted_root"})
    if unknown:
        names = ", ".join(f"{prefix}trust.{name}" for name in unknown)
        raise PolicyError(
            f"{shown}: unknown policy entries: {names} "
            "(expected only keys, identities, trusted_root)"
        )
    sigstore = _sigstore_trust(trust, path, prefix, reader)
    keys = trust.get("keys")
    if keys is None and sigstore is not None:
        return TrustPolicy(frozenset(), shown, require_sandbox, sigstore)
    if keys is None:
        raise PolicyError(f"{shown}: [{prefix}trust] has no keys = [...]")
    if not isinstance(keys, list) or not keys:
        raise PolicyError(f"{shown}: {prefix}trust.keys must be a non-empty list of strings")
    base = path.parent
    found: set[str] = set()
    for index, item in enumerate(keys):
        if not isinstance(item, str):
            raise PolicyError(
                f"{shown}: {prefix}trust.keys[{index}] must be a string, not {type(item).__name__}"
            )
        try:
            found.add(parse_trusted_key(item, base=base, reader=reader))
        except PolicyError as exc:
            raise PolicyError(f"{shown}: {prefix}trust.keys[{index}]: {exc}") from None
    return TrustPolicy(frozenset(found), shown, require_sandbox, sigstore)


def _identity(item: object, where: str) -> IdentityPin:
    if not isinstance(item, dict):
        raise PolicyError(f"{where} must be a table {{ identity = ..., issuer = ... }}")
    names = set(item)
    if names not in ({"identity", "issuer"}, {"identity_regex", "issuer"}):
        raise PolicyError(
            f"{where} must hold exactly identity (or identity_regex) and issuer, not "
            f"{', '.join(sorted(names)) or 'nothing'}"
        )
    regex = "identity_regex" in item
    from .sigstore_identity import IdentityError, identity_pin

    try:
        return identity_pin(
            item["identity_regex" if regex else "identity"], item["issuer"], regex=regex
        )
    except IdentityError as exc:
        raise PolicyError(f"{where}: {exc}") from None


def read_trusted_root(
    value: object, base: Path, reader: FileReader, what: str
) -> tuple[bytes, str]:
    """The bytes of a trusted root file (relative to ``base``) read through ``reader``, checked
    to be a Sigstore trusted root; raises :class:`PolicyError`."""
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise PolicyError(f"{what} must be the path of a trusted_root.json")
    path = Path(value.strip())
    if not path.is_absolute():
        path = Path(os.path.abspath(base / path))
    from .sigstore_identity import MAX_TRUSTED_ROOT_SIZE, IdentityError, check_trusted_root_bytes

    data = reader.read(path, MAX_TRUSTED_ROOT_SIZE, "trusted root")
    try:
        check_trusted_root_bytes(data, reader.name(path))
    except IdentityError as exc:
        raise PolicyError(str(exc)) from None
    return data, reader.name(path)


def _sigstore_trust(
    trust: dict[str, Any], path: Path, prefix: str, reader: FileReader
) -> SigstoreTrust | None:
    """``[trust] identities`` and ``trusted_root``: both or neither."""
    shown = reader.name(path)
    identities, root = trust.get("identities"), trust.get("trusted_root")
    if identities is None and root is None:
        return None
    if identities is None or root is None:
        raise PolicyError(
            f"{shown}: {prefix}trust.identities and {prefix}trust.trusted_root go together "
            "(who may sign, and the Sigstore root of trust to check it with)"
        )
    if not isinstance(identities, list) or not identities:
        raise PolicyError(f"{shown}: {prefix}trust.identities must be a non-empty list of tables")
    pins = tuple(
        _identity(item, f"{shown}: {prefix}trust.identities[{index}]")
        for index, item in enumerate(identities)
    )
    data, name = read_trusted_root(
        root, path.parent, reader, f"{shown}: {prefix}trust.trusted_root"
    )
    from .sigstore_identity import SigstoreTrust

    return SigstoreTrust(pins, data, name, shown)


def load_policy_file(path: Path, reader: FileReader = DISK) -> TrustPolicy:
    """Load a policy file: ``pyproject.toml`` (``[tool.harness-verify]``) or, by any other
    name, the ``harness-verify.toml`` format. Key paths resolve against the file's folder.

    Raises :class:`PolicyError` on anything wrong, including a ``pyproject.toml`` without a
    ``[tool.harness-verify]`` table (given explicitly, it must hold a policy).
    """
    path = Path(path)
    if _is_pyproject(path):
        table = pyproject_policy_table(path, reader)
        if table is None:
            raise PolicyError(f"{reader.name(path)} has no [tool.{TOOL_TABLE}] table")
        return policy_from_document(table, path, f"tool.{TOOL_TABLE}.", reader)
    return policy_from_document(_parse_toml(path, reader), path, "", reader)


def resolve_policy(
    trusted_keys: Sequence[str],
    policy_file: Path | None,
    cwd: Path,
    reader: FileReader = DISK,
) -> TrustPolicy:
    """The policy in force: ``--trusted-key`` values, else ``--policy FILE``, else the empty
    policy (nothing trusted). Nothing is discovered (decision 0016).

    Relative ``--trusted-key`` paths and a relative ``--policy`` resolve against ``cwd``.
    """
    if isinstance(trusted_keys, str):
        raise TypeError("trusted_keys must be a sequence of strings, not a single string")
    if trusted_keys:
        found = {parse_trusted_key(value, base=cwd, reader=reader) for value in trusted_keys}
        return TrustPolicy(frozenset(found), TRUSTED_KEY_SOURCE)
    if policy_file is not None:
        path = Path(policy_file)
        if not path.is_absolute():
            path = cwd / path
        return load_policy_file(path, reader)
    return EMPTY_POLICY
