"""Operator keys: the Ed25519 signing key and the HMAC master key.

Both are secrets: they are created with mode 0600 in a 0700 folder that git does not track,
loaded only if nobody else can read them, and never copied into evidence. The key id used
everywhere is the hex SHA-256 of the raw 32-byte Ed25519 public key.

Where they live by default: outside the repository, in
``${XDG_CONFIG_HOME:-~/.config}/harness/keys/<repo id>`` (``default_keys_dir``), so that no
agent working in the repository or one of its worktrees can reach them by walking the tree,
sandboxed or not. ``<repo id>`` is ``<folder name>-<first 12 hex of SHA-256(real path)>``.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.verify.keyids import key_id, note_key_name

from .note import NoteSigner

SIGNING_KEY_FILE: Final = "signing.key"
HMAC_KEY_FILE: Final = "hmac.key"
PUBLIC_KEY_FILE: Final = "signing.pub"
VERIFIER_KEY_FILE: Final = "signing.vkey"
HMAC_MASTER_BYTES: Final = 32


class KeyFileError(Exception):
    """A key file is missing, malformed, exposed, or would land in the git-tracked tree."""


@dataclass(frozen=True)
class OperatorKeys:
    """Loaded operator keys (secrets; never serialize this object into evidence)."""

    signing_key: Ed25519PrivateKey
    hmac_master: bytes

    @property
    def public_raw(self) -> bytes:
        return self.signing_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )

    @property
    def key_id(self) -> str:
        return key_id(self.public_raw)

    def note_signer(self) -> NoteSigner:
        return NoteSigner(self.signing_key, note_key_name(self.key_id))


def repo_id(repo: Path) -> str:
    """A stable, readable folder name for a repository: ``<name>-<12 hex of its real path>``."""
    real = os.path.realpath(repo)
    digest = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return f"{os.path.basename(real) or 'repo'}-{digest}"


def default_keys_dir(repo: Path, env: Mapping[str, str] | None = None) -> Path:
    """``${XDG_CONFIG_HOME:-~/.config}/harness/keys/<repo id>`` (outside every repository)."""
    env = os.environ if env is None else env
    config = env.get("XDG_CONFIG_HOME")
    base = Path(config) if config and os.path.isabs(config) else Path.home() / ".config"
    return base / "harness" / "keys" / repo_id(repo)


def _inside_git_tracked_tree(path: Path) -> bool:
    """True when ``path`` lies in a git work tree and git would not ignore it."""
    folder = path if path.is_dir() else path.parent
    while not folder.exists():
        folder = folder.parent
    try:
        inside = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "--is-inside-work-tree"],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return False
    ignored = subprocess.run(
        ["git", "-C", str(folder), "check-ignore", "-q", "--no-index", str(path)],
        capture_output=True,
        check=False,
        timeout=10,
    )
    return ignored.returncode != 0


def _write_secret(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_public(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def init_keys(folder: Path, *, allow_tracked: bool = False) -> OperatorKeys:
    """Create a new key pair and HMAC master key in ``folder`` (refuses to overwrite)."""
    folder = folder.absolute()
    if not allow_tracked and _inside_git_tracked_tree(folder / SIGNING_KEY_FILE):
        raise KeyFileError(
            f"{folder} is inside a git work tree and not ignored: keys must never be committed "
            "(add it to .gitignore or choose another folder)"
        )
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)
    for name in (SIGNING_KEY_FILE, HMAC_KEY_FILE):
        if (folder / name).exists():
            raise KeyFileError(f"{folder / name} already exists; refusing to overwrite a key")
    signing_key = Ed25519PrivateKey.generate()
    hmac_master = secrets.token_bytes(HMAC_MASTER_BYTES)
    pem = signing_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _write_secret(folder / SIGNING_KEY_FILE, pem)
    _write_secret(folder / HMAC_KEY_FILE, hmac_master.hex().encode() + b"\n")
    keys = OperatorKeys(signing_key, hmac_master)
    public_pem = signing_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    _write_public(folder / PUBLIC_KEY_FILE, public_pem)
    _write_public(folder / VERIFIER_KEY_FILE, keys.note_signer().verifier_key().encode() + b"\n")
    return keys


def _read_secret(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise KeyFileError(f"cannot open key file {path}: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise KeyFileError(f"{path} is not a regular file")
        if mode & 0o077:
            raise KeyFileError(
                f"{path} is readable by others (mode {stat.S_IMODE(mode):o}); chmod 600 it"
            )
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(1 << 16)
    finally:
        os.close(fd)


def load_hmac_master(path: Path) -> bytes:
    """Read a hex HMAC master key file (mode must not let others read it)."""
    text = _read_secret(path).strip()
    try:
        master = bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise KeyFileError(f"{path}: not a hex HMAC key") from None
    if len(master) < HMAC_MASTER_BYTES:
        raise KeyFileError(f"{path}: HMAC key is {len(master)} bytes, need {HMAC_MASTER_BYTES}")
    return master


def load_keys(folder: Path) -> OperatorKeys:
    """Load the operator keys created by ``init_keys``."""
    pem = _read_secret(folder / SIGNING_KEY_FILE)
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except ValueError:
        raise KeyFileError(f"{folder / SIGNING_KEY_FILE}: not a PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{folder / SIGNING_KEY_FILE}: not an Ed25519 key")
    return OperatorKeys(key, load_hmac_master(folder / HMAC_KEY_FILE))
