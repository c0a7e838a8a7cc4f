"""harness.orchestrate.executors without Ray: the agent unit run on a "worker" folder, and the
git bundles that carry a batch out and back, hostile ones included. Real git, real
processes, real bubblewrap where it works here."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from harness.orchestrate import git
from harness.orchestrate.executors.gitbundle import (
    BASE_REF,
    BundleError,
    apply_branch_bundle,
    base_bundle,
    branch_bundle,
    parse_header,
    unpack_base,
)
from harness.orchestrate.executors.unit import AgentUnit, portable_unit, run_unit
from harness.orchestrate.sandbox import BatchDirs, Settings, probe, sandbox_env
from harness.orchestrate.supervise import Limits

DATE = "2024-01-02T03:04:05+00:00"
BRANCH = "harness/run1/b1"
BWRAP = probe("bwrap").available
needs_bwrap = pytest.mark.skipif(not BWRAP, reason="bubblewrap cannot build a sandbox here")

AGENT = r"""
import os, sys
from pathlib import Path
prompt = Path(sys.argv[1]).read_text()
Path("made.txt").write_text("made from: " + prompt)
Path("README.md").write_text("changed\n")
print("agent out:", sys.stdin.read())
print("agent err", file=sys.stderr)
print("env:", ",".join(sorted(os.environ)))
home = sys.argv[2]
print("home entries:", ",".join(sorted(os.listdir(home))) if os.path.isdir(home) else "-")
sys.exit(int(sys.argv[3]))
"""


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "coord"
    git.init_repo(path, date=DATE)
    (path / "README.md").write_text("hello\n")
    git.commit_all(path, "readme", date=DATE)
    return path


def _unit(repo: Path, code: int = 0, **kw: object) -> AgentUnit:
    base = git.head(repo)
    args: dict[str, object] = {
        "batch": "b1",
        "base": base,
        "branch": BRANCH,
        "base_bundle": base_bundle(repo, base),
        "argv": (sys.executable, "{io}/agent.py", "{io}/prompt.txt", str(Path.home()), str(code)),
        "env": {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "SECRET_TOKEN": "s3cret",
        },
        "stdin": b"on stdin",
        "scratch": {"agent.py": AGENT.encode(), "prompt.txt": b"the prompt"},
        "wall_s": 30.0,
        "grace_s": 0.5,
        "settings": Settings(opt_out=not BWRAP),
        "message": "b1: t1",
        "git_date": DATE,
    }
    args.update(kw)
    return AgentUnit(**args)  # type: ignore[arg-type]


# --- the base bundle ---------------------------------------------------------------------


def test_base_bundle_is_a_git_bundle_of_exactly_the_base(repo: Path, tmp_path: Path) -> None:
    base = git.head(repo)
    data = base_bundle(repo, base)
    path = tmp_path / "b.bundle"
    path.write_bytes(data)
    _git(repo, "bundle", "verify", "-q", str(path))  # git's own reader accepts it
    assert parse_header(data) == ([], [(base, BASE_REF)])
    clone = unpack_base(data, tmp_path / "w.git", base)
    assert git.head(clone, BASE_REF) == base
    assert _git(clone, "rev-list", "--count", base) == "2"  # the whole history came along


def test_a_sha256_repository_goes_out_and_comes_back(tmp_path: Path) -> None:
    repo = tmp_path / "coord256"
    repo.mkdir()
    _git(repo, "init", "-q", "--object-format=sha256", "-b", "main")
    (repo / "README.md").write_text("hello\n")
    git.commit_all(repo, "readme", date=DATE)
    base = git.head(repo)
    assert len(base) == 64
    data = base_bundle(repo, base)
    assert data.startswith(b"# v3 git bundle\n@object-format=sha256\n")
    out = run_unit(_unit(repo), tmp_path / "worker")
    assert out.result.exit_code == 0, out.result.stderr
    assert out.branch_bundle is not None and len(out.tip) == 64
    assert apply_branch_bundle(repo, out.branch_bundle, branch=BRANCH, base=base) == out.tip


def test_unpack_base_refuses_a_bundle_of_another_commit(repo: Path, tmp_path: Path) -> None:
    first = _git(repo, "rev-list", "--max-parents=0", "HEAD")
    with pytest.raises(BundleError, match="expected"):
        unpack_base(base_bundle(repo, git.head(repo)), tmp_path / "w.git", first)


# --- run_unit ----------------------------------------------------------------------------


def test_unit_is_picklable_and_names_no_coordinator_path(repo: Path) -> None:
    unit = _unit(repo)
    blob = pickle.dumps(unit)
    assert pickle.loads(blob) == unit
    assert str(repo).encode() not in blob


def test_run_unit_commits_the_agent_work_and_the_branch_comes_back(
    repo: Path, tmp_path: Path
) -> None:
    unit = _unit(repo)
    out = run_unit(unit, tmp_path / "worker")
    assert out.result.exit_code == 0, out.result.stderr
    assert out.anomaly is None
    assert b"agent out: on stdin" in out.result.stdout
    assert out.result.stderr == b"agent err\n"
    assert out.tip != unit.base and out.branch_bundle is not None
    # The worker commits exactly what a local run commits (same tree, parent, message, date).
    local = tmp_path / "local"
    git.add_worktree(repo, local, "local", unit.base)
    (local / "made.txt").write_text("made from: the prompt")
    (local / "README.md").write_text("changed\n")
    assert git.commit_all(local, "b1: t1", date=DATE) == out.tip
    tip = apply_branch_bundle(repo, out.branch_bundle, branch=BRANCH, base=unit.base, tip=out.tip)
    assert tip == out.tip == git.head(repo, f"refs/heads/{BRANCH}")
    assert [c.path for c in git.changed_files(repo, unit.base, tip)] == ["README.md", "made.txt"]


def test_run_unit_reports_exit_facts_of_a_failing_agent(repo: Path, tmp_path: Path) -> None:
    out = run_unit(_unit(repo, code=3), tmp_path / "worker")
    assert (out.result.exit_code, out.result.signal, out.result.timed_out) == (3, None, False)
    assert out.result.duration_ms >= 0


def test_run_unit_without_changes_brings_no_bundle(repo: Path, tmp_path: Path) -> None:
    unit = _unit(repo, argv=(sys.executable, "-c", "print('idle')"), scratch={})
    out = run_unit(unit, tmp_path / "worker")
    assert out.result.stdout == b"idle\n"
    assert (out.tip, out.branch_bundle) == (unit.base, None)


def test_run_unit_enforces_the_wall_clock_limit(repo: Path, tmp_path: Path) -> None:
    unit = _unit(repo, argv=(sys.executable, "-c", "import time; time.sleep(30)"),
                 scratch={}, wall_s=0.5, grace_s=0.2)  # fmt: skip
    out = run_unit(unit, tmp_path / "worker")
    assert out.anomaly == "timeout"
    # Killed by SIGTERM: a signal unsandboxed, 143 (128 + 15) through bubblewrap.
    assert out.result.timed_out and out.result.exit_code in (None, 143)
    assert out.result.duration_ms < 10_000


def test_run_unit_reaps_a_silent_agent_as_hung(repo: Path, tmp_path: Path) -> None:
    unit = _unit(repo, argv=(sys.executable, "-c", "import time; time.sleep(30)"),
                 scratch={}, wall_s=30.0, idle_s=0.5, grace_s=0.2)  # fmt: skip
    out = run_unit(unit, tmp_path / "worker")
    assert out.anomaly == "hung" and not out.result.timed_out
    assert out.idle_ms >= 500 and out.result.duration_ms < 10_000


def test_unit_refuses_limits_the_supervisor_refuses(repo: Path) -> None:
    with pytest.raises(ValueError, match="wall_s"):
        _unit(repo, wall_s=0)


def test_run_unit_applies_the_environment_allow_list(repo: Path, tmp_path: Path) -> None:
    out = run_unit(_unit(repo), tmp_path / "worker")
    env = next(line for line in out.result.stdout.decode().splitlines() if line.startswith("env:"))
    names = env.removeprefix("env: ").split(",")
    assert "SECRET_TOKEN" not in names  # not granted: no network egress
    assert {"HOME", "LANG", "PATH", "TMPDIR"} <= set(names)
    with_net = run_unit(_unit(repo, network=True), tmp_path / "worker2")
    assert "SECRET_TOKEN" in with_net.result.stdout.decode()


@needs_bwrap
def test_run_unit_sandboxes_the_agent_on_the_worker(repo: Path, tmp_path: Path) -> None:
    out = run_unit(_unit(repo), tmp_path / "worker")
    lines = out.result.stdout.decode().splitlines()
    seen = next(line for line in lines if line.startswith("home entries:")).split(": ", 1)[1]
    # Of the worker user's home only the path down to a mounted interpreter exists inside
    # (e.g. ~/.pyenv for a pyenv Python), never its other entries.
    home = Path.home()
    needed = {
        Path(m).relative_to(home).parts[0]
        for m in out.sandbox_profile["interpreters"]
        if Path(m).is_relative_to(home)
    }
    assert set(filter(None, seen.split(","))) - {"-"} <= needed
    profile = out.sandbox_profile
    assert profile["kind"] == "bwrap" and profile["role"] == "agent"
    assert profile["workdir"] == str(tmp_path / "worker" / "batch" / "tree")
    assert profile["network"] is False and profile["private_mounts"] is False
    git_mounts = [m for m in profile["mounts"] if m["purpose"] == "git"]
    assert [(m["how"], m["dest"]) for m in git_mounts] == [
        ("ro-bind", str(tmp_path / "worker" / "repo.git"))
    ]


@pytest.mark.parametrize("name", ["../x", "/etc/x", "a/../b", "", "./a"])
def test_unit_refuses_unsafe_scratch_names(repo: Path, name: str) -> None:
    with pytest.raises(ValueError, match="scratch file name"):
        _unit(repo, scratch={name: b"x"})


# --- a batch prepared on the coordinator, run on a worker, landed in its worktree --------


def _prepared(repo: Path, tmp_path: Path) -> tuple[BatchDirs, str, list[str]]:
    base = git.head(repo)
    dirs = BatchDirs(tmp_path / "work" / "b1")
    dirs.create()
    git.add_worktree(repo, dirs.tree, BRANCH, base)
    (dirs.io / "prompt.txt").write_text("the prompt")
    (dirs.io / "agent.py").write_text(AGENT)
    argv = [sys.executable, str(dirs.io / "agent.py"), str(dirs.io / "prompt.txt"),
            str(Path.home()), "0"]  # fmt: skip
    return dirs, base, argv


def _portable(repo: Path, dirs: BatchDirs, base: str, argv: list[str]) -> AgentUnit:
    return portable_unit(
        batch="b1", base=base, branch=BRANCH, repo=repo, dirs=dirs, argv=argv,
        env=sandbox_env(os.environ, home=dirs.home), stdin=b"in", limits=Limits(wall_s=30),
        settings=Settings(opt_out=not BWRAP), network=False, message="b1: t1", git_date=DATE,
    )  # fmt: skip


def test_a_locally_prepared_batch_runs_on_a_worker_and_lands_in_its_worktree(
    repo: Path, tmp_path: Path
) -> None:
    dirs, base, argv = _prepared(repo, tmp_path)
    unit = _portable(repo, dirs, base, argv)
    assert unit.argv[1:3] == ("{io}/agent.py", "{io}/prompt.txt")
    assert set(unit.scratch) == {"agent.py", "prompt.txt"} and "HOME" not in unit.env
    assert str(dirs.root).encode() not in pickle.dumps(unit)
    out = run_unit(unit, tmp_path / "worker")
    assert out.result.exit_code == 0, out.result.stderr
    assert out.branch_bundle is not None
    tip = apply_branch_bundle(repo, out.branch_bundle, branch=BRANCH, base=base, tip=out.tip,
                              worktree=dirs.tree)  # fmt: skip
    assert tip == out.tip == git.head(dirs.tree) == git.head(repo, BRANCH)
    assert (dirs.tree / "made.txt").read_text() == "made from: the prompt"
    assert git.is_clean(dirs.tree)


def test_landing_in_a_worktree_that_moved_is_refused(repo: Path, tmp_path: Path) -> None:
    dirs, base, argv = _prepared(repo, tmp_path)
    out = run_unit(_portable(repo, dirs, base, argv), tmp_path / "worker")
    assert out.branch_bundle is not None
    (dirs.tree / "local.txt").write_text("not from the worker")
    with pytest.raises(BundleError, match="not clean at the base"):
        apply_branch_bundle(repo, out.branch_bundle, branch=BRANCH, base=base,
                            worktree=dirs.tree)  # fmt: skip
    assert git.head(repo, BRANCH) == base
    with pytest.raises(BundleError, match="does not have branch"):
        apply_branch_bundle(repo, out.branch_bundle, branch=BRANCH, base=base, worktree=repo)


def test_a_unit_that_would_name_a_coordinator_folder_is_refused(repo: Path, tmp_path: Path) -> None:
    dirs, base, argv = _prepared(repo, tmp_path)
    with pytest.raises(ValueError, match="still names the batch folder"):
        _portable(repo, dirs, base, [*argv, str(dirs.gate_home)])
    (dirs.io / "link").symlink_to("/etc/passwd")
    with pytest.raises(ValueError, match="not a regular file"):
        _portable(repo, dirs, base, argv)


# --- hostile branch bundles ------------------------------------------------------------


def _worker_clone(repo: Path, tmp_path: Path) -> tuple[Path, str]:
    base = git.head(repo)
    clone = unpack_base(base_bundle(repo, base), tmp_path / "w.git", base)
    tree = tmp_path / "w-tree"
    git.add_worktree(clone, tree, BRANCH, base)
    return tree, base


def _no_object(repo: Path, oid: str) -> bool:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull}
    probe_ = subprocess.run(["git", "cat-file", "-e", oid], cwd=repo, env=env, check=False)
    return probe_.returncode != 0


def _refused(repo: Path, data: bytes, match: str, base: str, tip: str | None = None) -> None:
    before = _git(repo, "for-each-ref")
    with pytest.raises(BundleError, match=match):
        apply_branch_bundle(repo, data, branch=BRANCH, base=base, tip=tip)
    assert _git(repo, "for-each-ref") == before  # no ref written


def test_bundle_with_an_extra_ref_is_refused(repo: Path, tmp_path: Path) -> None:
    tree, base = _worker_clone(repo, tmp_path)
    (tree / "a.txt").write_text("a")
    tip = git.commit_all(tree, "a", date=DATE)
    assert tip is not None
    _git(tree, "tag", "extra")
    path = tmp_path / "x.bundle"
    _git(tree, "bundle", "create", "-q", str(path), f"refs/heads/{BRANCH}", "refs/tags/extra",
         f"^{base}")  # fmt: skip
    _refused(repo, path.read_bytes(), "exactly the ref", base)
    assert _no_object(repo, tip)  # the quarantine kept the refused objects out


def test_bundle_of_unrelated_history_is_refused(repo: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    git.init_repo(other, date=DATE)
    (other / "evil.txt").write_text("evil")
    git.commit_all(other, "evil", date=DATE)
    _git(other, "branch", BRANCH)
    path = tmp_path / "x.bundle"
    _git(other, "bundle", "create", "-q", str(path), f"refs/heads/{BRANCH}")
    evil = git.head(other)
    _refused(repo, path.read_bytes(), "does not descend from the base", git.head(repo))
    assert _no_object(repo, evil)


def test_bundle_under_another_branch_name_or_wrong_tip_is_refused(
    repo: Path, tmp_path: Path
) -> None:
    tree, base = _worker_clone(repo, tmp_path)
    (tree / "a.txt").write_text("a")
    tip = git.commit_all(tree, "a", date=DATE)
    assert tip is not None
    data = branch_bundle(tree, BRANCH, base)
    assert data is not None
    _refused(repo, data, "not the reported tip", base, tip=base)
    with pytest.raises(BundleError, match="exactly the ref refs/heads/harness/run1/b2"):
        apply_branch_bundle(repo, data, branch="harness/run1/b2", base=base)
    # The good bundle goes in once; a second time the branch exists and is not overwritten.
    assert apply_branch_bundle(repo, data, branch=BRANCH, base=base, tip=tip) == tip
    _refused(repo, data, "already exists", base)


def test_bundle_pointing_at_the_base_itself_is_refused(repo: Path) -> None:
    base = git.head(repo)
    data = base_bundle(repo, base).replace(BASE_REF.encode(), f"refs/heads/{BRANCH}".encode(), 1)
    _refused(repo, data, "does not descend from the base", base)


def test_bundle_whose_prerequisite_is_not_an_ancestor_of_the_base_is_refused(
    repo: Path, tmp_path: Path
) -> None:
    base = git.head(repo)
    side = tmp_path / "side"
    git.add_worktree(repo, side, "side", base)
    (side / "s.txt").write_text("s")
    side_tip = git.commit_all(side, "side", date=DATE)
    assert side_tip is not None
    tree = tmp_path / "t"
    git.add_worktree(repo, tree, BRANCH, base)
    _git(tree, "merge", "-q", "--no-ff", "-m", "m", "side")
    path = tmp_path / "x.bundle"
    _git(tree, "bundle", "create", "-q", str(path), f"refs/heads/{BRANCH}", f"^{base}",
         f"^{side_tip}")  # fmt: skip
    git.remove_worktree(repo, tree)
    git.delete_branch(repo, BRANCH)
    _refused(repo, path.read_bytes(), "not an ancestor of the base", base)


def _pack(repo: Path, *oids: str) -> bytes:
    """A pack of exactly these objects (what a hostile worker can put in a bundle)."""
    return subprocess.run(
        ["git", "pack-objects", "--stdout", "-q"],
        cwd=repo,
        input="".join(f"{oid}\n" for oid in oids).encode(),
        capture_output=True,
        check=True,
    ).stdout


def test_bundle_whose_branch_names_a_tag_object_is_refused(repo: Path, tmp_path: Path) -> None:
    """git itself will not point a branch at a tag; a handmade bundle can."""
    tree, base = _worker_clone(repo, tmp_path)
    _git(tree, "-c", "user.name=t", "-c", "user.email=t@t", "tag", "-a", "-m", "t", "annotated")
    tag = _git(tree, "rev-parse", "refs/tags/annotated")
    data = f"# v2 git bundle\n-{base} x\n{tag} refs/heads/{BRANCH}\n\n".encode()
    _refused(repo, data + _pack(tree, tag), "points at a tag, not a commit", base)


def test_bundle_with_incomplete_history_is_refused(repo: Path, tmp_path: Path) -> None:
    """A pack holding the tip commit but not its tree: index-pack accepts it, git does not
    check connectivity on unbundle; the rev-list walk does."""
    tree, base = _worker_clone(repo, tmp_path)
    (tree / "a.txt").write_text("a")
    tip = git.commit_all(tree, "a", date=DATE)
    assert tip is not None
    data = f"# v2 git bundle\n-{base} a\n{tip} refs/heads/{BRANCH}\n\n".encode()
    data += _pack(tree, tip)
    _refused(repo, data, "incomplete", base)
    assert _no_object(repo, tip)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "no header end"),
        (b"# v9 git bundle\n\nPACK", "signature"),
        (b"# v2 git bundle\nnot-an-oid refs/heads/x\n\nPACK", "malformed line"),
        (b"\x00" * 64, "no header end"),
    ],
)
def test_garbage_is_refused(repo: Path, data: bytes, match: str) -> None:
    _refused(repo, data, match, git.head(repo))


def test_oversized_bundle_is_refused_before_reading(repo: Path) -> None:
    with pytest.raises(BundleError, match="exceeds the limit"):
        apply_branch_bundle(repo, b"x" * 101, branch=BRANCH, base=git.head(repo), max_bytes=100)


# --- Ray stays optional ------------------------------------------------------------------


def test_orchestrate_imports_without_ray(tmp_path: Path) -> None:
    """With ``ray`` made unimportable, the runtime and the executors package still import."""
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "import harness.orchestrate, harness.orchestrate.runtime, harness.cli, harness.verify.cli\n"
        "from harness.orchestrate.executors import ray_executor, unit, gitbundle\n"
        "assert 'ray' in sys.modules and sys.modules['ray'] is None\n"
        "print(ray_executor.role_resources('coder'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "{'harness_role_coder': 1.0}"
