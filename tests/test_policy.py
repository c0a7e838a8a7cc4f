"""Trust policy: --trusted-key forms, policy files, discovery and precedence."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.verify import policy as policy_module
from harness.verify.keyids import key_id, note_key_name
from harness.verify.note import VerifierKey
from harness.verify.policy import (
    MAX_KEY_FILE_SIZE,
    MAX_POLICY_FILE_SIZE,
    PolicyError,
    TrustPolicy,
    load_policy_file,
    parse_trusted_key,
    pyproject_policy_table,
    resolve_policy,
)

PRIVATE = Ed25519PrivateKey.from_private_bytes(b"\x01" * 32)
PUBLIC_RAW = PRIVATE.public_key().public_bytes(
    serialization.Encoding.Raw, serialization.PublicFormat.Raw
)
KEY_ID = key_id(PUBLIC_RAW)
VKEY = VerifierKey.from_ed25519(note_key_name(KEY_ID), PUBLIC_RAW).text
PEM = PRIVATE.public_key().public_bytes(
    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
)

OTHER_RAW = (
    Ed25519PrivateKey.from_private_bytes(b"\x02" * 32)
    .public_key()
    .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
)
OTHER_ID = key_id(OTHER_RAW)

needs_non_root = pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0,
    reason="running as root: file permissions are not enforced, so the test is meaningless "
    "(its twin in test_permissions_unprivileged.py runs as nobody)",
)


def _write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------- parse_trusted_key


def test_key_id_is_sha256_of_raw_key() -> None:
    assert len(KEY_ID) == 64
    assert KEY_ID.lower() == KEY_ID


def test_every_form_gives_the_same_key_id(tmp_path: Path) -> None:
    vkey_file = _write(tmp_path / "signing.vkey", VKEY + "\n")
    id_file = _write(tmp_path / "signing.keyid", f"  {KEY_ID.upper()}  \n")
    pem_file = _write(tmp_path / "signing.pub", PEM)
    forms = [
        KEY_ID,
        KEY_ID.upper(),
        f"  {KEY_ID}\n",
        VKEY,
        str(vkey_file),
        str(id_file),
        str(pem_file),
    ]
    assert {parse_trusted_key(form) for form in forms} == {KEY_ID}


def test_relative_paths_resolve_against_base(tmp_path: Path) -> None:
    _write(tmp_path / "keys" / "signing.pub", PEM)
    assert parse_trusted_key("keys/signing.pub", base=tmp_path) == KEY_ID
    with pytest.raises(PolicyError, match="not found"):
        parse_trusted_key("keys/signing.pub", base=tmp_path / "elsewhere")


def test_pem_with_crlf_and_bom(tmp_path: Path) -> None:
    pem_file = _write(tmp_path / "k.pub", PEM.replace(b"\n", b"\r\n"))
    assert parse_trusted_key(str(pem_file)) == KEY_ID
    vkey_file = _write(tmp_path / "k.vkey", "\ufeff" + VKEY + "\r\n")
    assert parse_trusted_key(str(vkey_file)) == KEY_ID


@pytest.mark.parametrize(
    "key",
    [
        rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key(),
        ec.generate_private_key(ec.SECP256R1()).public_key(),
    ],
    ids=["rsa", "p256"],
)
def test_non_ed25519_pem_rejected(tmp_path: Path, key: rsa.RSAPublicKey) -> None:
    pem = key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    path = _write(tmp_path / "k.pub", pem)
    with pytest.raises(PolicyError, match="only Ed25519"):
        parse_trusted_key(str(path))


def test_private_key_pem_rejected(tmp_path: Path) -> None:
    pem = PRIVATE.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path = _write(tmp_path / "signing.key", pem)
    with pytest.raises(PolicyError, match="private key"):
        parse_trusted_key(str(path))


@pytest.mark.parametrize(
    "value",
    [
        "",
        "   ",
        "not-a-key",
        KEY_ID[:-1],
        KEY_ID + "0",
        "g" * 64,
        "sha256:" + KEY_ID,
        VKEY[:-4] + "AAA=",  # key changed: hash no longer matches
        VKEY.replace("+", "+0", 1),  # key hash not 8 hex digits
        "name+00000000+AQ==",
        "nul\x00byte",
    ],
)
def test_garbage_rejected(value: str, tmp_path: Path) -> None:
    with pytest.raises(PolicyError):
        parse_trusted_key(value, base=tmp_path)


def test_bad_verifier_key_message_is_specific() -> None:
    with pytest.raises(PolicyError, match="invalid verifier key"):
        parse_trusted_key(VKEY[:-4] + "AAA=")


def test_file_name_with_plus_signs_is_a_file(tmp_path: Path) -> None:
    _write(tmp_path / "a+b+c.pub", PEM)
    assert parse_trusted_key("a+b+c.pub", base=tmp_path) == KEY_ID


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\n\n",
        b"hello\n",
        f"{KEY_ID}\n{KEY_ID}\n".encode(),
        b"\xff\xfe\x00garbage",
        b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
        b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    ],
)
def test_garbage_files_rejected(tmp_path: Path, content: bytes) -> None:
    path = _write(tmp_path / "key", content)
    with pytest.raises(PolicyError):
        parse_trusted_key(str(path))


def test_key_file_size_limit(tmp_path: Path) -> None:
    path = _write(tmp_path / "big.pub", KEY_ID + " " * MAX_KEY_FILE_SIZE)
    with pytest.raises(PolicyError, match="too large"):
        parse_trusted_key(str(path))


def test_key_path_must_be_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    with pytest.raises(PolicyError, match="not a regular file"):
        parse_trusted_key(str(tmp_path / "folder"))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_key_path_fifo_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(PolicyError, match="not a regular file"):
        parse_trusted_key(str(fifo))


# ------------------------------------------------------------------------- policy files


def test_harness_verify_toml(tmp_path: Path) -> None:
    _write(tmp_path / "keys" / "signing.pub", PEM)
    path = _write(
        tmp_path / "harness-verify.toml",
        f'[trust]\nkeys = [\n  "{KEY_ID}",\n  "{VKEY}",\n  "keys/signing.pub",\n'
        f'  "{OTHER_ID.upper()}",\n]\n',
    )
    policy = load_policy_file(path)
    assert policy == TrustPolicy(frozenset({KEY_ID, OTHER_ID}), str(path))
    assert policy.pins(KEY_ID)
    assert policy.pins(KEY_ID.upper())
    assert not policy.pins(None)
    assert not policy.pins("00" * 32)


def test_pyproject_toml(tmp_path: Path) -> None:
    _write(tmp_path / "keys" / "signing.vkey", VKEY + "\n")
    path = _write(
        tmp_path / "pyproject.toml",
        '[project]\nname = "x"\n\n[tool.ruff]\nline-length = 100\n\n'
        '[tool.harness-verify.trust]\nkeys = ["keys/signing.vkey"]\n',
    )
    assert load_policy_file(path) == TrustPolicy(frozenset({KEY_ID}), str(path))


def test_pyproject_without_table(tmp_path: Path) -> None:
    path = _write(tmp_path / "pyproject.toml", '[project]\nname = "x"\n[tool.ruff]\nx = 1\n')
    assert pyproject_policy_table(path) is None
    with pytest.raises(PolicyError, match=r"no \[tool.harness-verify\]"):
        load_policy_file(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f'[trust]\nkeys = ["{KEY_ID}"]\nextra = 1\n', "trust.extra"),
        (f'[trust]\nkeys = ["{KEY_ID}"]\n[other]\nx = 1\n', "other"),
        (f'mode = "strict"\n[trust]\nkeys = ["{KEY_ID}"]\n', "mode"),
        ("[trust]\nkeys = []\n", "non-empty list"),
        (f'[trust]\nkeys = "{KEY_ID}"\n', "non-empty list"),
        ("[trust]\nkeys = [1]\n", r"keys\[0\] must be a string"),
        (f'[trust]\nkeys = ["{KEY_ID}", "nope"]\n', r"keys\[1\]"),
        ("[trust]\n", "no keys"),
        ("", r"no \[trust\]"),
        ("trust = 1\n", "must be a table"),
        ('[trust]\nkeys = ["a"\n', "not valid TOML"),
        ("[trust\n", "line 1"),
        (f'[trust]\nkeys = ["{KEY_ID}"]\nkeys = ["{KEY_ID}"]\n', "not valid TOML"),
    ],
)
def test_bad_policy_files(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path / "harness-verify.toml", text)
    with pytest.raises(PolicyError, match=message) as info:
        load_policy_file(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[tool.harness-verify]\nmode = "x"\n', "tool.harness-verify.mode"),
        (f'[tool.harness-verify.trust]\nkeys = ["{KEY_ID}"]\nextra = 1\n', "trust.extra"),
        ("[tool.harness-verify.trust]\nkeys = []\n", "non-empty list"),
        ('[tool]\nharness-verify = "x"\n', "must be a table"),
        ("tool = 3\n", "must be a table"),
    ],
)
def test_bad_pyproject_policies(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path / "pyproject.toml", text)
    with pytest.raises(PolicyError, match=message):
        load_policy_file(path)


def test_policy_file_errors_are_clean(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy_file(tmp_path / "missing.toml")
    bad_utf8 = _write(tmp_path / "harness-verify.toml", b"[trust]\nkeys = ['\xff']\n")
    with pytest.raises(PolicyError, match="UTF-8"):
        load_policy_file(bad_utf8)
    big = _write(tmp_path / "big" / "harness-verify.toml", "#" * (MAX_POLICY_FILE_SIZE + 1))
    with pytest.raises(PolicyError, match="too large"):
        load_policy_file(big)


# ------------------------------------------------------------------- no discovery (0016)


@pytest.mark.parametrize(
    "name, text",
    [
        ("harness-verify.toml", f'[trust]\nkeys = ["{KEY_ID}"]\n'),
        ("pyproject.toml", f'[tool.harness-verify.trust]\nkeys = ["{KEY_ID}"]\n'),
    ],
)
def test_nothing_is_discovered_from_the_working_directory_or_above(
    tmp_path: Path, name: str, text: str
) -> None:
    """A policy file next to the verifier or in any parent folder (the change's checkout, a
    download folder, /tmp) pins nothing: trust is explicit (decision 0016)."""
    _write(tmp_path / name, text)
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    for cwd in (tmp_path, deep):
        assert resolve_policy([], None, cwd) == TrustPolicy(frozenset(), "")
    assert not hasattr(policy_module, "discover_policy")


def test_resolving_reads_no_file_without_explicit_trust(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path / "harness-verify.toml", "garbage [")
    _write(tmp_path / "pyproject.toml", "[tool.harness-verify\n")

    def no_open(*args: object, **kwargs: object) -> object:
        raise AssertionError(f"opened {args[0]!r}")

    monkeypatch.setattr("builtins.open", no_open)
    assert resolve_policy([], None, tmp_path) == TrustPolicy(frozenset(), "")


@needs_non_root
def test_unreadable_key_file_is_a_policy_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "signing.pub", PEM)
    path.chmod(0o000)
    try:
        with pytest.raises(PolicyError, match="cannot read"):
            parse_trusted_key(str(path))
    finally:
        path.chmod(0o644)


# --------------------------------------------------------------------------- precedence


def test_trusted_key_beats_policy_file(tmp_path: Path) -> None:
    _write(tmp_path / "harness-verify.toml", f'[trust]\nkeys = ["{OTHER_ID}"]\n')
    explicit = _write(tmp_path / "other" / "policy.toml", f'[trust]\nkeys = ["{OTHER_ID}"]\n')
    policy = resolve_policy([KEY_ID], explicit, tmp_path)
    assert policy == TrustPolicy(frozenset({KEY_ID}), "--trusted-key")
    assert resolve_policy([KEY_ID, VKEY], None, tmp_path).key_ids == {KEY_ID}
    assert resolve_policy([], explicit, tmp_path) == TrustPolicy(
        frozenset({OTHER_ID}), str(explicit)
    )
    assert resolve_policy([], None, tmp_path) == TrustPolicy(frozenset(), "")


def test_explicit_policy_relative_to_cwd(tmp_path: Path) -> None:
    _write(tmp_path / "harness-verify.toml", "this is [not toml")
    explicit = _write(tmp_path / "conf" / "trust.toml", f'[trust]\nkeys = ["{KEY_ID}"]\n')
    policy = resolve_policy([], Path("conf/trust.toml"), tmp_path)
    assert policy.key_ids == {KEY_ID}
    assert policy.source == str(explicit)


def test_relative_trusted_key_path_resolves_against_cwd(tmp_path: Path) -> None:
    _write(tmp_path / "keys" / "signing.pub", PEM)
    assert resolve_policy(["keys/signing.pub"], None, tmp_path).key_ids == {KEY_ID}


def test_bad_trusted_key_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError):
        resolve_policy([KEY_ID, "garbage"], None, tmp_path)


def test_trusted_keys_must_be_a_sequence(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        resolve_policy(KEY_ID, None, tmp_path)


def test_no_policy_is_empty(tmp_path: Path) -> None:
    policy = resolve_policy([], None, tmp_path)
    assert policy == TrustPolicy(frozenset(), "")
    assert not policy.pins(KEY_ID)
