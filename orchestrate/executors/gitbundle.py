"""Git bundles: how a batch's base goes out to a remote worker and its branch comes back.

A remote worker shares no file system with the coordinator, so a batch travels as bytes:

* out: :func:`base_bundle` packs the base commit and its whole history (the worker has no
  objects to start from) under the single ref ``refs/heads/harness-base``;
* back: the worker's :func:`branch_bundle` packs ``refs/heads/<branch>`` minus what the base
  already has, and the coordinator's :func:`apply_branch_bundle` stores it as
  ``refs/heads/<branch>`` and returns the tip.

The returned bundle comes from a machine that ran an agent, so the coordinator treats it as
hostile input. It is refused (:class:`BundleError`, nothing changed in the repository) when it
is too large, is not a bundle, carries any ref other than ``refs/heads/<branch>`` (a second
branch, a tag, ``HEAD``), has a prerequisite that is not an ancestor of the base, points at
anything but a commit, does not descend from the base (unrelated history), is not the tip the
worker reported, or when the branch already exists here. The objects are first unpacked into a
*quarantine* repository that borrows the coordinator's objects through ``objects/info/
alternates``; only a bundle that passes every check is unpacked into the repository itself, so
a refused bundle leaves no object behind.

Why the base bundle is written here instead of by ``git bundle create``: git 2.39 (Debian 12)
bundles refs only, and naming a bare commit id needs a temporary ref in the coordinator's
repository, which other code could see (or a crash could leave behind). The bundle format
(``gitformat-bundle(5)``: a signature line, ``<oid> <refname>`` lines, a blank line, a pack)
is small and stable; the pack itself is git's own (``git pack-objects``), and every bundle we
write is readable by ``git bundle verify``/``unbundle`` (tested).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import Final

from .. import git
from ..git import _git

__all__ = [
    "BASE_REF",
    "MAX_BUNDLE_BYTES",
    "BundleError",
    "apply_branch_bundle",
    "base_bundle",
    "branch_bundle",
    "bundle_heads",
    "parse_header",
    "unpack_base",
]

BASE_REF: Final = "refs/heads/harness-base"
"""The one ref a base bundle carries."""
MAX_BUNDLE_BYTES: Final = 1 << 30
"""Default limit on a returned branch bundle (1 GiB): a worker cannot fill the disk."""
_OID = re.compile(r"(?:[0-9a-f]{40}|[0-9a-f]{64})")
_MAX_HEADER: Final = 1 << 20


class BundleError(Exception):
    """A bundle was refused or could not be made; the message says which ref or object and
    why."""


def _object_format(repo: Path) -> str:
    return _git(repo, "rev-parse", "--show-object-format").stdout.decode().strip() or "sha1"


def base_bundle(repo: Path, base: str) -> bytes:
    """A full bundle of commit ``base`` (its whole history) under :data:`BASE_REF`."""
    oid = git.head(repo, base)
    fmt = _object_format(repo)
    header = "# v2 git bundle\n" if fmt == "sha1" else f"# v3 git bundle\n@object-format={fmt}\n"
    pack = _git(repo, "pack-objects", "--revs", "--stdout", "-q", input=f"{oid}\n".encode()).stdout
    return f"{header}{oid} {BASE_REF}\n\n".encode("ascii") + pack


def _bundle_format(data: bytes) -> str:
    """The object format a bundle declares (v3 ``@object-format=``), sha1 without one."""
    end = data.find(b"\n\n", 0, _MAX_HEADER)
    if end < 0:
        raise BundleError("not a git bundle: no header end within the first 1 MiB")
    for line in data[:end].split(b"\n")[1:]:
        if line.startswith(b"@object-format="):
            value = line.split(b"=", 1)[1].decode("ascii", "replace")
            if value not in ("sha1", "sha256"):
                raise BundleError(f"bundle declares an unknown object format {value!r}")
            return value
    return "sha1"


def _write(folder: Path, data: bytes) -> Path:
    path = folder / "in.bundle"
    path.write_bytes(data)
    return path


def _heads(repo: Path, path: Path) -> list[tuple[str, str]]:
    try:
        out = _git(repo, "bundle", "list-heads", str(path)).stdout
    except git.GitError as exc:
        raise BundleError(f"not a readable git bundle: {exc}") from exc
    heads = []
    for line in out.decode("utf-8", "surrogateescape").splitlines():
        oid, _, name = line.partition(" ")
        heads.append((oid, name))
    return heads


def bundle_heads(repo: Path, data: bytes) -> list[tuple[str, str]]:
    """The ``(oid, refname)`` pairs a bundle carries, as git reads them (BundleError when it
    is not a bundle)."""
    with tempfile.TemporaryDirectory(prefix="harness-bundle-") as tmp:
        return _heads(repo, _write(Path(tmp), data))


def parse_header(data: bytes) -> tuple[list[str], list[tuple[str, str]]]:
    """The prerequisites and ``(oid, refname)`` references of a bundle's header, parsed
    strictly (``gitformat-bundle(5)``): a v2 or v3 signature, ``@capability`` lines (v3
    only), ``-<oid> [comment]`` prerequisites, ``<oid> <refname>`` references, a blank line.
    Anything else is refused."""
    end = data.find(b"\n\n", 0, _MAX_HEADER)
    if end < 0:
        raise BundleError("not a git bundle: no header end within the first 1 MiB")
    try:
        lines = data[:end].decode("utf-8").split("\n")
    except UnicodeDecodeError as exc:
        raise BundleError("not a git bundle: header is not UTF-8") from exc
    if lines[0] not in ("# v2 git bundle", "# v3 git bundle"):
        raise BundleError(f"not a git bundle: signature {lines[0][:40]!r}")
    prerequisites: list[str] = []
    refs: list[tuple[str, str]] = []
    for line in lines[1:]:
        if line.startswith("@") and lines[0] == "# v3 git bundle" and not prerequisites + refs:
            continue
        if line.startswith("-"):
            oid = line[1:].split(" ", 1)[0]
            if not _OID.fullmatch(oid):
                raise BundleError(f"bundle header: malformed prerequisite {line[:80]!r}")
            prerequisites.append(oid)
            continue
        oid, sep, name = line.partition(" ")
        if not sep or not _OID.fullmatch(oid) or not name:
            raise BundleError(f"bundle header: malformed line {line[:80]!r}")
        refs.append((oid, name))
    return prerequisites, refs


def unpack_base(data: bytes, dest: Path, base: str) -> Path:
    """On the worker: a bare repository at ``dest`` holding a base bundle; checks that the
    bundle is exactly :data:`BASE_REF` at ``base``. Returns ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    _git(dest, "init", "-q", "--bare", f"--object-format={_bundle_format(data)}", ".")
    heads = bundle_heads(dest, data)
    if heads != [(base, BASE_REF)]:
        raise BundleError(f"base bundle carries {heads!r}, expected [{base!r} {BASE_REF}]")
    with tempfile.TemporaryDirectory(prefix="harness-bundle-") as tmp:
        path = _write(Path(tmp), data)
        _git(dest, "bundle", "unbundle", str(path))
    _git(dest, "update-ref", BASE_REF, base, "")
    return dest


def branch_bundle(repo: Path, branch: str, base: str) -> bytes | None:
    """On the worker: ``refs/heads/<branch>`` minus the base's history, or None when the
    branch is still at the base (git refuses an empty bundle, and there is nothing to bring)."""
    ref = f"refs/heads/{branch}"
    if git.head(repo, ref) == git.head(repo, base):
        return None
    with tempfile.TemporaryDirectory(prefix="harness-bundle-") as tmp:
        path = Path(tmp) / "out.bundle"
        _git(repo, "bundle", "create", "-q", str(path), ref, f"^{base}")
        return path.read_bytes()


def _common_dir(repo: Path) -> Path:
    out = _git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir").stdout
    return Path(out.decode("utf-8", "surrogateescape").strip())


def _check(repo: Path, path: Path, data: bytes, branch: str, base: str, tip: str | None) -> str:
    """Every refusal rule, evaluated in ``repo`` (the quarantine); returns the tip."""
    ref = f"refs/heads/{branch}"
    prerequisites, refs = parse_header(data)
    heads = _heads(repo, path)
    if heads != refs:
        raise BundleError("bundle header and git disagree on the refs it carries")
    if len(heads) != 1 or heads[0][1] != ref:
        names = ", ".join(name for _, name in heads) or "none"
        raise BundleError(f"bundle must carry exactly the ref {ref}; it carries: {names}")
    oid = heads[0][0]
    if tip is not None and oid != tip:
        raise BundleError(f"bundle tip {oid} is not the reported tip {tip}")
    try:  # verifies that every prerequisite is present, then indexes the pack
        _git(repo, "bundle", "unbundle", str(path))
    except git.GitError as exc:
        raise BundleError(f"bundle could not be unpacked: {exc}") from exc
    for prerequisite in prerequisites:
        try:
            below = git.is_ancestor(repo, prerequisite, base)
        except git.GitError as exc:
            raise BundleError(f"bundle prerequisite {prerequisite}: {exc}") from exc
        if not below:
            raise BundleError(
                f"bundle prerequisite {prerequisite} is not an ancestor of the base {base}"
            )
    kind = _git(repo, "cat-file", "-t", oid, ok=(0, 1, 128)).stdout.decode().strip()
    if kind != "commit":
        raise BundleError(f"bundle ref {ref} points at a {kind or 'missing object'}, not a commit")
    if oid == base or not git.is_ancestor(repo, base, oid):
        raise BundleError(f"bundle tip {oid} does not descend from the base {base}")
    # Every object the branch adds must be present (index-pack does not check connectivity).
    try:
        _git(repo, "rev-list", "--objects", "--quiet", oid, "--not", base)
    except git.GitError as exc:
        raise BundleError(f"bundle history of {oid} is incomplete: {exc}") from exc
    return oid


def apply_branch_bundle(
    repo: Path,
    data: bytes,
    *,
    branch: str,
    base: str,
    tip: str | None = None,
    max_bytes: int = MAX_BUNDLE_BYTES,
    worktree: Path | None = None,
) -> str:
    """On the coordinator: store a worker's branch bundle as ``refs/heads/<branch>``.

    ``tip``: the tip the worker reported (refused when the bundle's differs). Without
    ``worktree`` the branch must not exist yet. With ``worktree`` (the batch's own worktree,
    made at claim as for a local agent) the branch must be the one checked out there, still at
    ``base``, and the worktree clean; the branch is moved to the tip (only from ``base``) and
    the worktree's files follow, so gates run on exactly the worker's commit. Refusals (see
    the module docstring) raise :class:`BundleError` and leave the repository unchanged.
    Returns the branch's tip.
    """
    if len(data) > max_bytes:
        raise BundleError(f"bundle of {len(data)} bytes exceeds the limit of {max_bytes}")
    base = git.head(repo, base)
    ref = f"refs/heads/{branch}"
    if worktree is None:
        if git.branch_exists(repo, branch):
            raise BundleError(f"branch {branch} already exists in {repo}; it is not overwritten")
        old = ""  # update-ref: only if it does not exist
    else:
        if git.current_branch(worktree) != branch:
            raise BundleError(f"worktree {worktree} does not have branch {branch} checked out")
        if git.head(worktree) != base or not git.is_clean(worktree):
            raise BundleError(f"worktree {worktree} is not clean at the base {base}")
        old = base
    objects = _common_dir(repo) / "objects"
    with tempfile.TemporaryDirectory(prefix="harness-bundle-") as tmp:
        path = _write(Path(tmp), data)
        quarantine = Path(tmp) / "q.git"
        fmt = f"--object-format={_object_format(repo)}"
        _git(Path(tmp), "init", "-q", "--bare", fmt, str(quarantine))
        (quarantine / "objects" / "info" / "alternates").write_text(f"{objects}\n")
        oid = _check(quarantine, path, data, branch, base, tip)
        try:
            _git(repo, "bundle", "unbundle", str(path))
        finally:
            shutil.rmtree(quarantine, ignore_errors=True)
    _git(repo, "update-ref", ref, oid, old)
    if worktree is not None:
        _git(worktree, "reset", "-q", "--hard", oid)
    return oid
