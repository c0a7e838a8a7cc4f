"""Edges of verify/policy.py and verify/basepolicy.py that mutation testing showed no test
held: size limits at their bounds, the [require] table, the display of long values, names
that are not UTF-8 or hold a tab, a gate run from a subfolder, and read failures."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from harness.verify.basepolicy import BaseRefReader, resolve_gate_policy
from harness.verify.policy import (
    DISK,
    MAX_KEY_FILE_SIZE,
    PolicyError,
    TrustPolicy,
    load_policy_file,
    parse_trusted_key,
    read_regular_file,
    resolve_policy,
)

KEY = "ab" * 32


def test_size_limits_are_inclusive(tmp_path: Path) -> None:
    exact = tmp_path / "exact"
    exact.write_bytes(b"x" * 10)
    assert read_regular_file(exact, 10, "key file") == b"x" * 10
    over = tmp_path / "over"
    over.write_bytes(b"x" * 11)
    with pytest.raises(PolicyError) as info:
        read_regular_file(over, 10, "key file")
    assert str(info.value) == f"key file {over} is too large (11 bytes, limit 10)"
    padded = tmp_path / "padded.vkey"
    padded.write_text(KEY + " " * (MAX_KEY_FILE_SIZE - len(KEY)))
    assert parse_trusted_key(str(padded)) == KEY  # exactly the limit is accepted


def test_read_failures_name_the_file_and_never_claim_existence(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as info:
        read_regular_file(tmp_path, 10, "policy file")
    assert str(info.value) == f"policy file {tmp_path} is not a regular file"
    missing = tmp_path / "missing"
    with pytest.raises(PolicyError) as info:
        read_regular_file(missing, 10, "key file")
    assert str(info.value) == f"cannot read key file {missing}: No such file or directory"
    assert DISK.exists(Path("bad\x00name")) is False  # ValueError from the OS layer: no entry
    with pytest.raises(PolicyError, match="cannot read key file"):
        read_regular_file(Path("bad\x00name"), 10, "key file")


def test_require_table(tmp_path: Path) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text(f'[trust]\nkeys = ["{KEY}"]\n[require]\nsandbox = true\n')
    assert load_policy_file(policy) == TrustPolicy(frozenset({KEY}), str(policy), True)
    policy.write_text(f'[trust]\nkeys = ["{KEY}"]\n[require]\n')
    assert load_policy_file(policy).require_sandbox is False
    policy.write_text(
        f'[trust]\nkeys = ["{KEY}"]\n[require]\nsandbox = true\nother = 1\nmore = 2\n'
    )
    with pytest.raises(PolicyError) as info:
        load_policy_file(policy)
    assert str(info.value) == (
        f"{policy}: unknown policy entries: require.more, require.other (expected only sandbox)"
    )
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        f'[tool.harness-verify.trust]\nkeys = ["{KEY}"]\n[tool.harness-verify.require]\n'
        "sandbox = true\n"
    )
    assert load_policy_file(pyproject).require_sandbox is True
    policy.write_text(f'[trust]\nkeys = ["{KEY}"]\nextra = 1\n[other]\n[more]\n')
    with pytest.raises(PolicyError, match=r"unknown policy entries: more, other \(expected"):
        load_policy_file(policy)


def test_values_are_shown_shortened(tmp_path: Path) -> None:
    long = "x" * 81
    with pytest.raises(PolicyError) as info:
        parse_trusted_key(long)
    assert f"trusted key {'x' * 80!r}..." not in str(info.value)
    assert f"trusted key '{'x' * 80}...'" in str(info.value)
    exact = "y" * 80
    with pytest.raises(PolicyError) as info:
        parse_trusted_key(exact)
    assert f"trusted key '{exact}' is not" in str(info.value)
    with pytest.raises(PolicyError) as info:
        parse_trusted_key("a\x00b")
    assert str(info.value) == "invalid trusted key 'a\\x00b'"
    for value, message in (
        ("  ", "empty trusted key"),
        (3, "a trusted key must be a string, not int"),
    ):
        with pytest.raises(PolicyError) as info:
            parse_trusted_key(value)  # type: ignore[arg-type]
        assert str(info.value) == message
    with pytest.raises(
        TypeError, match=r"^trusted_keys must be a sequence of strings, not a single"
    ):
        resolve_policy(KEY, None, tmp_path)


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo, env=env, capture_output=True, check=True,
    ).stdout.decode().strip()  # fmt: skip


@pytest.fixture
def odd_repo(tmp_path: Path) -> tuple[Path, str]:
    """A base commit with key files whose names hold a tab, a non-UTF-8 byte, and one in a
    folder next to a longer name that starts the same (ls-tree must match the exact path)."""
    repo = tmp_path / "r"
    (repo / "sub").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "tab\tname.vkey").write_text(KEY + "\n")
    (repo / os.fsdecode(b"caf\xe9.vkey")).write_text(KEY + "\n")
    (repo / "sub" / "k.vkey").write_text(KEY + "\n")
    (repo / "sub" / "k.vkey.bak").write_text("cd" * 32 + "\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    return repo, _git(repo, "rev-parse", "HEAD")


def test_base_reader_odd_names_and_subfolders(odd_repo: tuple[Path, str]) -> None:
    repo, base = odd_repo
    for name in ("tab\tname.vkey", os.fsdecode(b"caf\xe9.vkey"), "sub/k.vkey"):
        assert resolve_gate_policy([str(repo / name)], None, repo, base, repo).key_ids == {KEY}
    # The gate run from a subfolder: paths are still taken from the top of the tree.
    sub = repo / "sub"
    reader = BaseRefReader(sub, base)
    assert reader.read(repo / "sub" / "k.vkey", 100, "key file") == (KEY + "\n").encode()
    assert resolve_gate_policy(["k.vkey"], None, sub, base, sub).key_ids == {KEY}
    # A key exactly at the limit is read, one byte over is not.
    with pytest.raises(PolicyError) as info:
        reader.read(repo / "sub" / "k.vkey", 64, "key file")
    assert str(info.value) == f"key file {base[:12]}:sub/k.vkey is too large (65 bytes, limit 64)"
    assert reader.read(repo / "sub" / "k.vkey", 65, "key file") == (KEY + "\n").encode()


def test_base_reader_exists_is_false_for_unusable_paths(odd_repo: tuple[Path, str]) -> None:
    repo, base = odd_repo
    reader = BaseRefReader(repo, base)
    assert reader.exists(Path("/nonexistent\x00")) is False
    assert reader.exists(repo / "nothing-here") is False


def test_a_pyproject_policy_of_the_checkout_is_read_from_the_base(tmp_path: Path) -> None:
    """The table and the keys both come from the base commit, for the default lookup and for
    an explicit --policy pyproject.toml (the change's copy pins another key)."""
    repo = tmp_path / "py"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "pyproject.toml").write_text(f'[tool.harness-verify.trust]\nkeys = ["{KEY}"]\n')
    (repo / "-k.vkey").write_text(KEY + "\n")  # a name git could take for an option
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD")
    other = "cd" * 32
    (repo / "pyproject.toml").write_text(f'[tool.harness-verify.trust]\nkeys = ["{other}"]\n')
    for policy in (None, Path("pyproject.toml")):
        pins = resolve_gate_policy([], policy, repo, base, repo)
        assert pins.key_ids == {KEY}, policy
        assert pins.source == f"{base[:12]}:pyproject.toml"
    assert resolve_gate_policy(["-k.vkey"], None, repo, base, repo).key_ids == {KEY}


@pytest.mark.parametrize("text", [f"{KEY}\rother", f"{KEY}\nother", "\n\n"])
def test_a_key_file_holds_one_line(tmp_path: Path, text: str) -> None:
    path = tmp_path / "k.vkey"
    path.write_bytes(text.encode())
    with pytest.raises(PolicyError) as info:
        parse_trusted_key(str(path))
    assert str(info.value) == (
        f"key file {path} must hold one line (a key id or a verifier key) or a PEM Ed25519 "
        "public key"
    )
