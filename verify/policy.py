"""Trust policy: which signer keys are pinned (DESIGN §6, §8).

A bundle's own keys prove nothing about who made it. A signer is trusted only if its key id
(hex SHA-256 of the raw 32-byte Ed25519 public key, :func:`harness.verify.keyids.key_id`) is
pinned, in this order of precedence:

1. ``--trusted-key`` values on the command line;
2. an explicit ``--policy FILE``;
3. the first policy file found from the working directory up to the repository root (the
   first folder holding ``.git``; outside a repository, up to the filesystem root), where in
   each folder ``harness-verify.toml`` wins over a ``pyproject.toml`` that has a
   ``[tool.harness-verify]`` table;
4. nothing: the policy is empty and no signer is trusted (fail closed).

Policy file (``harness-verify.toml``; in ``pyproject.toml`` the same under
``[tool.harness-verify]``)::

    [trust]
    keys = [
        "3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29",  # a key id
        "harness-3b6a27bcceb6a42d+1f2e3d4c+AT...",                          # a verifier key
        "keys/signing.pub",                        # a file, relative to the policy file
    ]

Nothing but the two documented file names is ever looked at, nothing is executed, and the
files are parsed strictly: unknown tables or keys are errors, not silently ignored. Every
problem is a :class:`PolicyError` with a message naming the file and the entry.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .errors import MalformedNoteError
from .keyids import key_id
from .note import parse_verifier_key

__all__ = [
    "EMPTY_POLICY",
    "MAX_KEY_FILE_SIZE",
    "MAX_POLICY_FILE_SIZE",
    "POLICY_FILE_NAME",
    "PYPROJECT_FILE_NAME",
    "PolicyError",
    "TrustPolicy",
    "discover_policy",
    "load_policy_file",
    "parse_trusted_key",
    "pyproject_policy_table",
    "resolve_policy",
]

POLICY_FILE_NAME: Final = "harness-verify.toml"
PYPROJECT_FILE_NAME: Final = "pyproject.toml"
TOOL_TABLE: Final = "harness-verify"
TRUSTED_KEY_SOURCE: Final = "--trusted-key"

MAX_KEY_FILE_SIZE: Final = 64 * 1024
MAX_POLICY_FILE_SIZE: Final = 1024 * 1024

_KEY_ID = re.compile(r"[0-9a-fA-F]{64}")
_PEM_BEGIN = "-----BEGIN "


class PolicyError(Exception):
    """The trust policy (a --trusted-key value or a policy file) is wrong.

    The message names the file or value and what is wrong; the CLI maps it to exit code 2.
    """


@dataclass(frozen=True)
class TrustPolicy:
    """The pinned signer key ids and where they came from.

    ``source`` is ``"--trusted-key"``, the policy file path, or ``""`` when there is no policy
    (then nothing is trusted).
    """

    key_ids: frozenset[str]
    source: str

    def pins(self, key_id_hex: str | None) -> bool:
        """Whether ``key_id_hex`` (any letter case) is pinned by this policy."""
        return key_id_hex is not None and key_id_hex.lower() in self.key_ids


EMPTY_POLICY: Final = TrustPolicy(frozenset(), "")


def _shown(value: str, limit: int = 80) -> str:
    """``value`` quoted and shortened for an error message."""
    text = value if len(value) <= limit else value[:limit] + "..."
    return repr(text)


class _UnreadableError(PolicyError):
    """A file could not be opened or read; ``errno`` says why."""

    def __init__(self, message: str, code: int | None) -> None:
        super().__init__(message)
        self.errno = code


def _read_limited(path: Path, limit: int, what: str) -> bytes:
    """Read a regular file of at most ``limit`` bytes, or raise :class:`PolicyError`."""
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
    except OSError as exc:
        raise _UnreadableError(
            f"cannot read {what} {path}: {exc.strerror or exc}", exc.errno
        ) from None
    if len(data) > limit:
        raise PolicyError(f"{what} {path} is too large (limit {limit} bytes)")
    return data


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


def _key_id_from_pem(data: bytes, path: Path) -> str:
    if b"PRIVATE KEY-----" in data:
        raise PolicyError(
            f"{path} holds a private key: pin the public key (signing.pub), never the secret"
        )
    try:
        public = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise PolicyError(f"{path} is not a valid PEM public key") from None
    if not isinstance(public, Ed25519PublicKey):
        kind = type(public).__name__.removeprefix("_").replace("PublicKey", "") or "unknown"
        raise PolicyError(f"{path} holds a {kind} public key; only Ed25519 keys can be pinned")
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return key_id(raw)


def _key_id_from_file(path: Path) -> str:
    data = _read_limited(path, MAX_KEY_FILE_SIZE, "key file")
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        raise PolicyError(f"key file {path} is not UTF-8 text") from None
    if _PEM_BEGIN in text:
        return _key_id_from_pem(data, path)
    line = text.strip()
    if not line or "\n" in line or "\r" in line:
        raise PolicyError(
            f"key file {path} must hold one line (a key id or a verifier key) "
            "or a PEM Ed25519 public key"
        )
    try:
        found = _key_id_from_text(line)
    except PolicyError as exc:
        raise PolicyError(f"key file {path}: {exc}") from None
    if found is None:
        raise PolicyError(
            f"key file {path} holds neither a key id (64 hex digits), a verifier key "
            "(name+hash+base64) nor a PEM Ed25519 public key"
        )
    return found


def parse_trusted_key(value: str, *, base: Path | None = None) -> str:
    """The key id (64 lowercase hex) that ``value`` pins.

    ``value`` is a key id (64 hex digits, any case), a signed-note verifier key
    ``name+hash+base64(0x01 || key)``, or a path to a file holding either of those on one line
    or a PEM Ed25519 public key. A relative path resolves against ``base`` when given (the
    policy file's folder), else against the current directory. Raises :class:`PolicyError`.
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
    try:
        exists = path.exists()
    except (OSError, ValueError):
        exists = False
    if not exists:
        if not_a_key is not None:
            raise not_a_key
        raise PolicyError(
            f"trusted key {_shown(text)} is not a key id (64 hex digits), a verifier key "
            f"(name+hash+base64) or an existing key file ({path} not found)"
        )
    return _key_id_from_file(path)


def _parse_toml(path: Path) -> dict[str, Any]:
    data = _read_limited(path, MAX_POLICY_FILE_SIZE, "policy file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise PolicyError(f"policy file {path} is not UTF-8 text") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"policy file {path} is not valid TOML: {exc}") from None


def _is_pyproject(path: Path) -> bool:
    return path.name == PYPROJECT_FILE_NAME


def pyproject_policy_table(path: Path) -> dict[str, Any] | None:
    """The ``[tool.harness-verify]`` table of a ``pyproject.toml``, or ``None`` if it has none.

    Raises :class:`PolicyError` if the file cannot be read or parsed (then it cannot be told
    whether it holds a policy), or if ``tool`` / ``tool.harness-verify`` is not a table.
    """
    document = _parse_toml(path)
    tool = document.get("tool")
    if tool is None:
        return None
    if not isinstance(tool, dict):
        raise PolicyError(f"{path}: 'tool' must be a table")
    table = tool.get(TOOL_TABLE)
    if table is None:
        return None
    if not isinstance(table, dict):
        raise PolicyError(f"{path}: [tool.{TOOL_TABLE}] must be a table")
    return table


def _policy_from_table(table: dict[str, Any], path: Path, prefix: str) -> TrustPolicy:
    unknown = sorted(set(table) - {"trust"})
    if unknown:
        names = ", ".join(f"{prefix}{name}" for name in unknown)
        raise PolicyError(
            f"{path}: unknown policy entries: {names} (expected only [{prefix}trust])"
        )
    trust = table.get("trust")
    if trust is None:
        raise PolicyError(f"{path}: no [{prefix}trust] table with keys = [...]")
    if not isinstance(trust, dict):
        raise PolicyError(f"{path}: {prefix}trust must be a table")
    unknown = sorted(set(trust) - {"keys"})
    if unknown:
        names = ", ".join(f"{prefix}trust.{name}" for name in unknown)
        raise PolicyError(f"{path}: unknown policy entries: {names} (expected only keys)")
    keys = trust.get("keys")
    if keys is None:
        raise PolicyError(f"{path}: [{prefix}trust] has no keys = [...]")
    if not isinstance(keys, list) or not keys:
        raise PolicyError(f"{path}: {prefix}trust.keys must be a non-empty list of strings")
    base = path.parent
    found: set[str] = set()
    for index, item in enumerate(keys):
        if not isinstance(item, str):
            raise PolicyError(
                f"{path}: {prefix}trust.keys[{index}] must be a string, not {type(item).__name__}"
            )
        try:
            found.add(parse_trusted_key(item, base=base))
        except PolicyError as exc:
            raise PolicyError(f"{path}: {prefix}trust.keys[{index}]: {exc}") from None
    return TrustPolicy(frozenset(found), str(path))


def load_policy_file(path: Path) -> TrustPolicy:
    """Load a policy file: ``pyproject.toml`` (``[tool.harness-verify]``) or, by any other
    name, the ``harness-verify.toml`` format. Key paths resolve against the file's folder.

    Raises :class:`PolicyError` on anything wrong, including a ``pyproject.toml`` without a
    ``[tool.harness-verify]`` table (given explicitly, it must hold a policy).
    """
    path = Path(path)
    if _is_pyproject(path):
        table = pyproject_policy_table(path)
        if table is None:
            raise PolicyError(f"{path} has no [tool.{TOOL_TABLE}] table")
        return _policy_from_table(table, path, f"tool.{TOOL_TABLE}.")
    return _policy_from_table(_parse_toml(path), path, "")


def _entry_exists(path: Path) -> bool:
    """Whether ``path`` exists. Raises ``PermissionError`` when its folder cannot be searched."""
    try:
        os.stat(path)
    except PermissionError:
        raise
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        # ELOOP, ENAMETOOLONG, ...: not something we can use as a policy file.
        return False
    return True


def discover_policy(start: Path) -> Path | None:
    """The policy file that applies in ``start``: walk up towards the filesystem root, and in
    each folder take ``harness-verify.toml``, else a ``pyproject.toml`` with a
    ``[tool.harness-verify]`` table. ``None`` if there is none.

    The walk ends at the root of the repository ``start`` is in (the first folder holding a
    ``.git`` entry): a file planted in a shared parent such as ``/tmp`` must not be able to pin
    an attacker's key for every checkout below it.

    Only those two names are ever looked at and nothing is executed. The walk stops (returns
    ``None``) at a folder that cannot be searched. A ``pyproject.toml`` that cannot be parsed
    raises :class:`PolicyError`: it might hold the policy, so it is not silently skipped.
    """
    folder = Path(os.path.abspath(start))
    for candidate in (folder, *folder.parents):
        try:
            policy = candidate / POLICY_FILE_NAME
            if _entry_exists(policy):
                return policy
            pyproject = candidate / PYPROJECT_FILE_NAME
            if not _entry_exists(pyproject):
                if _entry_exists(candidate / ".git"):
                    return None  # repository root: never look above it
                continue
        except PermissionError:
            return None
        try:
            table = pyproject_policy_table(pyproject)
        except _UnreadableError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM):
                return None
            raise
        if table is not None:
            return pyproject
        if _entry_exists(candidate / ".git"):
            return None  # repository root: never look above it
    return None


def resolve_policy(trusted_keys: Sequence[str], policy_file: Path | None, cwd: Path) -> TrustPolicy:
    """The policy in force: ``--trusted-key`` values, else ``--policy FILE``, else the policy
    file discovered from ``cwd``, else the empty policy (nothing trusted).

    Relative ``--trusted-key`` paths and a relative ``--policy`` resolve against ``cwd``.
    """
    if isinstance(trusted_keys, str):
        raise TypeError("trusted_keys must be a sequence of strings, not a single string")
    if trusted_keys:
        found = {parse_trusted_key(value, base=cwd) for value in trusted_keys}
        return TrustPolicy(frozenset(found), TRUSTED_KEY_SOURCE)
    if policy_file is not None:
        path = Path(policy_file)
        if not path.is_absolute():
            path = cwd / path
        return load_policy_file(path)
    discovered = discover_policy(cwd)
    if discovered is not None:
        return load_policy_file(discovered)
    return EMPTY_POLICY
