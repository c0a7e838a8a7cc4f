"""verify/basepolicy.py on a plain git repository (no runs): which files are "inside the
checkout", that those are read from the base commit only, and the base ref's policy. The same
rules through the CLI, against a genuine attacker's bundle: tests/test_gate_trust.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from harness.verify.basepolicy import BaseRefReader, base_ref_policy, resolve_gate_policy
from harness.verify.policy import EMPTY_POLICY, MAX_KEY_FILE_SIZE, PolicyError, TrustPolicy

BASE_KEY = "1" * 64
HEAD_KEY = "2" * 64
DISK_KEY = "3" * 64


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str]:
    """A repository whose base commit pins BASE_KEY (policy and key file); the working tree
    (the change) re-pins HEAD_KEY in every one of them and adds files of its own."""
    repo = tmp_path / "checkout"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "keys").mkdir()
    (repo / "keys" / "signing.vkey").write_text(BASE_KEY + "\n")
    (repo / "harness-verify.toml").write_text(f'[trust]\nkeys = ["{BASE_KEY}"]\n')
    (repo / "conf").mkdir()
    (repo / "conf" / "trust.toml").write_text('[trust]\nkeys = ["keys/../../keys/signing.vkey"]\n')
    os.symlink("signing.vkey", repo / "keys" / "link.vkey")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "keys" / "signing.vkey").write_text(HEAD_KEY + "\n")
    (repo / "harness-verify.toml").write_text(f'[trust]\nkeys = ["{HEAD_KEY}"]\n')
    (repo / "keys" / "new.vkey").write_text(HEAD_KEY + "\n")
    _git(repo, "commit", "-q", "-am", "the change")
    return repo, base


def test_inside_is_lexical_or_after_links(repo: tuple[Path, str], tmp_path: Path) -> None:
    checkout, base = repo
    reader = BaseRefReader(checkout, base)
    assert reader.relative(checkout / "keys" / "signing.vkey") == "keys/signing.vkey"
    assert reader.relative(checkout / "sub" / ".." / "keys" / "x") == "keys/x"
    assert reader.relative(checkout) == ""
    assert reader.relative(tmp_path / "elsewhere.vkey") is None
    assert reader.relative(tmp_path / "checkout2" / "x") is None  # a name prefix is not inside
    link = tmp_path / "outside.vkey"
    link.symlink_to(checkout / "keys" / "signing.vkey")
    assert reader.relative(link) == "keys/signing.vkey"
    # From a subfolder of the work tree, the top is found the same.
    assert BaseRefReader(checkout / "keys", base).relative(checkout / "a") == "a"


def test_files_of_the_checkout_are_read_from_the_base(repo: tuple[Path, str]) -> None:
    checkout, base = repo
    reader = BaseRefReader(checkout, base)
    data = reader.read(checkout / "keys" / "signing.vkey", MAX_KEY_FILE_SIZE, "key file")
    assert data == (BASE_KEY + "\n").encode()
    assert reader.name(checkout / "keys" / "signing.vkey") == f"{base[:12]}:keys/signing.vkey"
    assert reader.in_base(checkout / "harness-verify.toml")
    assert not reader.in_base(checkout / "keys" / "new.vkey")
    assert reader.exists(checkout / "keys" / "new.vkey")  # so reading it names the reason
    with pytest.raises(PolicyError, match=r"the base commit has no keys/new\.vkey"):
        reader.read(checkout / "keys" / "new.vkey", MAX_KEY_FILE_SIZE, "key file")
    with pytest.raises(PolicyError, match="is not a regular file in the base commit"):
        reader.read(checkout / "keys" / "link.vkey", MAX_KEY_FILE_SIZE, "key file")
    with pytest.raises(PolicyError, match="is not a regular file in the base commit"):
        reader.read(checkout / "keys", MAX_KEY_FILE_SIZE, "key file")
    with pytest.raises(PolicyError, match=r"too large \(65 bytes, limit 10\)"):
        reader.read(checkout / "keys" / "signing.vkey", 10, "key file")
    assert not reader.exists(checkout / "nothing")


def test_files_outside_are_read_from_disk(repo: tuple[Path, str], tmp_path: Path) -> None:
    checkout, base = repo
    outside = tmp_path / "pinned.vkey"
    outside.write_text(DISK_KEY + "\n")
    reader = BaseRefReader(checkout, base)
    assert reader.read(outside, MAX_KEY_FILE_SIZE, "key file") == (DISK_KEY + "\n").encode()
    assert reader.name(outside) == str(outside)
    assert reader.exists(outside) and not reader.exists(tmp_path / "missing")


def test_gate_pins(repo: tuple[Path, str], tmp_path: Path) -> None:
    checkout, base = repo
    assert base_ref_policy(BaseRefReader(checkout, base)) == TrustPolicy(
        frozenset({BASE_KEY}), f"{base[:12]}:harness-verify.toml"
    )
    by_path = resolve_gate_policy(["keys/signing.vkey"], None, checkout, base, checkout)
    assert by_path.key_ids == {BASE_KEY}
    # A policy of the checkout, and the key files it names, all from the base.
    explicit = resolve_gate_policy([], Path("conf/trust.toml"), checkout, base, checkout)
    assert explicit.key_ids == {BASE_KEY}
    assert explicit.source == f"{base[:12]}:conf/trust.toml"
    outside = tmp_path / "policy.toml"
    outside.write_text(f'[trust]\nkeys = ["{DISK_KEY}"]\n')
    assert resolve_gate_policy([], outside, checkout, base, checkout).key_ids == {DISK_KEY}
    assert resolve_gate_policy([HEAD_KEY], None, checkout, base, checkout).key_ids == {HEAD_KEY}


def test_no_policy_on_the_base_pins_nothing(tmp_path: Path) -> None:
    repo = tmp_path / "bare-policy"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "pyproject.toml").write_text('[project]\nname = "x"\n')
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "harness-verify.toml").write_text(f'[trust]\nkeys = ["{HEAD_KEY}"]\n')
    (repo / "pyproject.toml").write_text(f'[tool.harness-verify.trust]\nkeys = ["{HEAD_KEY}"]\n')
    assert resolve_gate_policy([], None, repo, base, repo) == EMPTY_POLICY
    _git(repo, "commit", "-q", "-am", "pyproject pins on the base")
    base = _git(repo, "rev-parse", "HEAD")
    pinned = resolve_gate_policy([], None, repo, base, repo)
    assert pinned == TrustPolicy(frozenset({HEAD_KEY}), f"{base[:12]}:pyproject.toml")


def test_not_a_work_tree_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="not inside a git work tree"):
        BaseRefReader(tmp_path, "0" * 40)
