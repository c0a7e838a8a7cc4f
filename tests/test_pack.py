"""``harness-verify pack``: an Art. 12 pack verifies itself, offline, with the verifier it carries.

Through the CLIs only (``harness export --eu-ai-act`` and ``harness-verify pack``, real
subprocesses): a good pack verifies (0), as a folder and as a tar; each tampering (a file edited,
a file added, the signature, report.json changed even when re-listed and re-signed, the wheel
swapped) fails (1) naming the file; without a pin it is 3; re-exporting over a pack is refused
without ``--force``; and the README's offline install works: the carried wheel installs into a
fresh venv from the pack's wheelhouse with ``pip install --no-index`` and checks its own pack.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from harness import __version__
from harness.orchestrate.demo import DemoResult, run_demo
from harness.receipts.keys import OperatorKeys, load_keys
from harness.verify.canonical import canonical_bytes, parse_canonical
from harness.verify.layout import tar_member_info
from harness.verify.packcheck import PACK_MANIFEST, PACK_SIG, pack_note_text

from .test_pack_wheel import verifier_wheel

ROOT = Path(__file__).resolve().parents[1]
WHEEL = f"harness_verify-{__version__}-py3-none-any.whl"


def _run(*args: str | Path, cwd: Path | None = None, timeout: int = 300) -> Any:
    return subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
    )


def _verify(*args: str | Path) -> Any:
    return _run(sys.executable, "-c", "from harness.verify.cli import main; main()", *args)


def _export(demo: DemoResult, out: Path, *extra: str | Path) -> Any:
    return _run(
        *(sys.executable, "-m", "harness.cli", "export", out, "--eu-ai-act"),
        *("--state", demo.repo / ".harness", "--keys", demo.keys_dir),
        *("--controller", "Example Ltd", "--wheel", verifier_wheel()),
        *extra,
    )


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    return run_demo(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def keys(demo: DemoResult) -> OperatorKeys:
    return load_keys(demo.keys_dir)


@pytest.fixture(scope="module")
def good(demo: DemoResult, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("good") / "pack"
    done = _export(demo, out)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture
def pack(good: Path, tmp_path: Path) -> Path:
    """A fresh copy of the good pack, to tamper with."""
    copy = tmp_path / "pack"
    shutil.copytree(good, copy)
    return copy


def _failure(done: Any) -> str:
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "invalid" and report["exit_code"] == 1
    failure: str = report["failure"]
    return failure


def _resign(pack: Path, keys: OperatorKeys) -> None:
    """What an insider holding the signing key could do: re-list every file and re-sign."""
    manifest = parse_canonical((pack / PACK_MANIFEST).read_bytes())
    for entry in manifest["files"]:
        data = (pack / entry["name"]).read_bytes()
        entry["sha256"] = hashlib.sha256(data).hexdigest()
        entry["size"] = len(data)
    data = canonical_bytes(manifest)
    (pack / PACK_MANIFEST).write_bytes(data)
    note = keys.note_signer().sign(pack_note_text(hashlib.sha256(data).hexdigest()))
    (pack / PACK_SIG).write_bytes(note)


def test_good_pack_verifies(good: Path, keys: OperatorKeys) -> None:
    done = _verify("pack", good, "--trusted-key", keys.key_id, "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "verified"
    assert report["signer_key_id"] == keys.key_id
    assert [c["outcome"] for c in report["checks"]] == ["passed"] * 5
    text = _verify("pack", good, "--trusted-key", keys.key_id)
    assert text.returncode == 0 and "VERIFIED" in text.stdout


def test_tar_pack_verifies(demo: DemoResult, keys: OperatorKeys, tmp_path: Path) -> None:
    out = tmp_path / "pack.tar"
    done = _export(demo, out)
    assert done.returncode == 0, done.stderr
    checked = _verify("pack", out, "--trusted-key", keys.key_id)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_unpinned_is_3(good: Path) -> None:
    done = _verify("pack", good, "--format", "json")
    assert done.returncode == 3, done.stdout + done.stderr
    assert json.loads(done.stdout)["status"] == "verified-untrusted"


def test_wrong_pin_is_3(good: Path) -> None:
    done = _verify("pack", good, "--trusted-key", "0" * 64)
    assert done.returncode == 3, done.stdout + done.stderr


def test_edited_file_fails(pack: Path, keys: OperatorKeys) -> None:
    html = pack / "report.html"
    html.write_bytes(html.read_bytes().replace(b"</body>", b"<p>all fine</p></body>"))
    failure = _failure(_verify("pack", pack, "--trusted-key", keys.key_id, "--format", "json"))
    assert failure.startswith("report.html: SHA-256")


def test_added_file_fails(pack: Path, keys: OperatorKeys) -> None:
    (pack / "extra.txt").write_text("unlisted\n")
    failure = _failure(_verify("pack", pack, "--trusted-key", keys.key_id, "--format", "json"))
    assert failure.startswith("extra.txt: not listed in pack-manifest.json")


def test_removed_file_fails(pack: Path, keys: OperatorKeys) -> None:
    (pack / "verification.json").unlink()
    failure = _failure(_verify("pack", pack, "--trusted-key", keys.key_id, "--format", "json"))
    assert failure.startswith("verification.json: listed in pack-manifest.json but missing")


def test_signature_fails(pack: Path, keys: OperatorKeys) -> None:
    sig = pack / PACK_SIG
    lines = sig.read_text("utf-8").splitlines(keepends=True)
    body = lines[-1]
    index = len(body) - 10
    lines[-1] = body[:index] + ("A" if body[index] != "A" else "B") + body[index + 1 :]
    sig.write_text("".join(lines), "utf-8")
    failure = _failure(_verify("pack", pack, "--trusted-key", keys.key_id, "--format", "json"))
    assert failure.startswith(PACK_SIG)


def test_unsigned_pack_fails(pack: Path, keys: OperatorKeys) -> None:
    (pack / PACK_SIG).unlink()
    failure = _failure(_verify("pack", pack, "--trusted-key", keys.key_id, "--format", "json"))
    assert failure.startswith(f"{PACK_SIG}: missing")


def test_manifest_relisted_without_key_fails(pack: Path, keys: OperatorKeys) -> None:
    """Editing a file and fixing its digest in the manifest breaks the signature."""
    html = pack / "report.html"
    html.write_bytes(html.read_bytes().replace(b"</body>", b"<p>x</p></body>"))
    manifest = parse_canonical((pack / PACK_MANIFEST).read_bytes())
    for entry in manifest["files"]:
        if entry["name"] == "report.html":
            entry["sha256"] = hashlib.sha256(html.read_bytes()).hexdigest()
            entry["size"] = html.stat().st_size
    (pack / PACK_MANIFEST).write_bytes(canonical_bytes(manifest))
    failure = _failure(_verify("pack", pack, "--trusted-key", keys.key_id, "--format", "json"))
    assert failure.startswith(f"{PACK_SIG}: signs a different digest")


def test_report_digest_changed_fails(pack: Path, keys: OperatorKeys) -> None:
    report = pack / "report.json"
    report.write_bytes(report.read_bytes().replace(b'"Example Ltd"', b'"Other Ltd"'))
    failure = _failure(_verify("pack", pack, "--trusted-key", keys.key_id, "--format", "json"))
    assert failure.startswith("report.json: SHA-256")


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        ("events", "report.json: events:"),
        ("integrity", "report.json: integrity.stores differs"),
        ("evidence", "which is no record of bundle.tar"),
        ("kind", "but the record it cites"),
        ("canonical", "report.json: not canonical JSON"),
    ],
)
def test_report_resigned_still_fails(
    pack: Path, keys: OperatorKeys, edit: str, expected: str
) -> None:
    """Even re-listed and re-signed, report.json must agree with the verified bundle."""
    path = pack / "report.json"
    doc = parse_canonical(path.read_bytes())
    if edit == "events":
        doc["events"][0]["count"] += 1
    elif edit == "integrity":
        doc["integrity"]["stores"][0]["records"] += 1
    elif edit == "evidence":
        doc["risks"][0]["evidence"][0]["seq"] = 10**6
    elif edit == "kind":
        doc["risks"][0]["kind"] = "run.end"
    data = canonical_bytes(doc)
    if edit == "canonical":
        data = json.dumps(doc, indent=1).encode()
    path.write_bytes(data)
    _resign(pack, keys)
    failure = _failure(_verify("pack", pack, "--trusted-key", keys.key_id, "--format", "json"))
    assert expected in failure, failure


def test_wheel_swapped_fails(pack: Path, keys: OperatorKeys) -> None:
    wheel = next(pack.glob("harness_verify-*.whl"))
    wheel.write_bytes(wheel.read_bytes() + b"\0")  # another wheel under the same name
    failure = _failure(_verify("pack", pack, "--trusted-key", keys.key_id, "--format", "json"))
    assert failure.startswith(f"{wheel.name}: SHA-256")


def test_symlink_in_pack_is_4(pack: Path, keys: OperatorKeys) -> None:
    (pack / "link").symlink_to("/etc/passwd")
    done = _verify("pack", pack, "--trusted-key", keys.key_id)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "link: not a regular file" in done.stdout


def test_reexport_refused_without_force(
    demo: DemoResult, keys: OperatorKeys, tmp_path: Path
) -> None:
    out = tmp_path / "pack"
    assert _export(demo, out).returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    again = _export(demo, out)
    assert again.returncode == 2, again.stdout + again.stderr
    assert "--force" in again.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    (out / "stale.txt").write_text("left from before\n")
    forced = _export(demo, out, "--force")
    assert forced.returncode == 0, forced.stderr
    assert not (out / "stale.txt").exists()
    assert _verify("pack", out, "--trusted-key", keys.key_id).returncode == 0
    tar = tmp_path / "pack.tar"
    assert _export(demo, tar).returncode == 0
    assert _export(demo, tar).returncode == 2
    assert _export(demo, tar, "--force").returncode == 0


def test_readme_never_installs_from_an_index(good: Path) -> None:
    readme = (good / "README.txt").read_text("utf-8")
    wheel = next(good.glob("harness_verify-*.whl")).name
    assert f"pipx run --spec ./{wheel} harness-verify pack . --trusted-key" in readme
    assert "pipx run harness-verify" not in readme
    assert "pipx run harness-verify" not in (good / "report.json").read_text("utf-8")


def _listed_files(readme: str) -> list[str]:
    """The first word of each line of the README's "Files:" section."""
    section = readme.split("\nFiles:\n", 1)[1].split("\n\n", 1)[0]
    return [line.split()[0] for line in section.splitlines()]


def test_readme_lists_every_file_of_the_pack(good: Path) -> None:
    # it listed five: the verifier wheel and the manifest's signature were not named
    listed = _listed_files((good / "README.txt").read_text("utf-8"))
    assert sorted(listed) == sorted(p.name for p in good.iterdir() if p.name != "README.txt")


@pytest.fixture(scope="module")
def dependency_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The verifier's dependency wheels for this platform, fetched once from the package index
    (the pack itself is then installed with no index at all)."""
    folder = tmp_path_factory.mktemp("wheelhouse")
    try:
        done = _run(
            *(sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:"),
            *("-d", folder, verifier_wheel()),
            timeout=240,
        )
    except subprocess.TimeoutExpired:
        pytest.skip("pip download of the dependency wheels took over 240 s (slow or no index)")
    if done.returncode != 0:
        pytest.skip(f"dependency wheels not downloadable here: {done.stderr.strip()[-200:]}")
    (folder / verifier_wheel().name).unlink(missing_ok=True)
    return folder


def test_readme_offline_install_works(
    demo: DemoResult, keys: OperatorKeys, tmp_path: Path, dependency_wheels: Path
) -> None:
    out = tmp_path / "pack"
    done = _export(demo, out, "--wheelhouse", dependency_wheels)
    assert done.returncode == 0, done.stderr
    readme = (out / "README.txt").read_text("utf-8")
    assert "wheelhouse/" in _listed_files(readme)
    commands = [
        line.strip().split()
        for line in readme.splitlines()
        if line.strip().startswith(("python3 -m venv ", "../harness-verify-env/"))
    ]
    assert [c[:2] for c in commands] == [
        ["python3", "-m"],
        ["../harness-verify-env/bin/pip", "install"],
        ["../harness-verify-env/bin/harness-verify", "pack"],
    ]
    assert commands[1][2:6] == ["--no-index", "--find-links", "wheelhouse", f"./{WHEEL}"]
    commands[0][0] = sys.executable  # the README's python3, at least the version we run on
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    for command in commands:  # exactly the README's lines, in the pack folder, no index
        done = subprocess.run(
            command,
            cwd=out,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={**env, "PIP_NO_INDEX": "1"},
        )
        assert done.returncode == 0, (command, done.stdout, done.stderr)
    assert "VERIFIED" in done.stdout
    assert not (out / "harness-verify-env").exists()


def test_policy_pins_the_pack(good: Path, keys: OperatorKeys, tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(f'[trust]\nkeys = ["{keys.key_id}"]\n')
    assert _verify("pack", good, "--policy", policy).returncode == 0
    policy.write_text(f'[trust]\nkeys = ["{"0" * 64}"]\n')
    assert _verify("pack", good, "--policy", policy).returncode == 3
    policy.write_text("[trust]\nkeys = 1\n")
    assert _verify("pack", good, "--policy", policy).returncode == 2


def _tar_of(folder: Path, out: Path, change: dict[str, bytes]) -> None:
    """A pack tar with the exporter's headers, from ``folder`` with ``change`` applied."""
    files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    files.update(change)
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
        for name in sorted(files):
            tar.addfile(tar_member_info(name, len(files[name])), io.BytesIO(files[name]))


def test_tar_pack_tampering_fails(good: Path, keys: OperatorKeys, tmp_path: Path) -> None:
    edited = tmp_path / "edited.tar"
    report = (good / "report.html").read_bytes().replace(b"</body>", b"<p>x</p></body>")
    _tar_of(good, edited, {"report.html": report})
    failure = _failure(_verify("pack", edited, "--trusted-key", keys.key_id, "--format", "json"))
    assert failure.startswith("report.html: SHA-256")
    added = tmp_path / "added.tar"
    _tar_of(good, added, {"zz-extra.txt": b"unlisted\n"})
    failure = _failure(_verify("pack", added, "--trusted-key", keys.key_id, "--format", "json"))
    assert failure.startswith("zz-extra.txt: not listed")
    linked = tmp_path / "linked.tar"
    with tarfile.open(linked, "w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("README.txt")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tar.addfile(info)
    assert _verify("pack", linked, "--trusted-key", keys.key_id).returncode == 4


@pytest.mark.parametrize(
    ("key", "value"), [("status", "verified-untrusted"), ("stores", []), ("exit_code", 3)]
)
def test_verification_json_resigned_still_fails(
    pack: Path, keys: OperatorKeys, key: str, value: Any
) -> None:
    """verification.json must be the verifier's output on this bundle, even when re-signed."""
    path = pack / "verification.json"
    doc = json.loads(path.read_bytes())
    doc[key] = value
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    _resign(pack, keys)
    failure = _failure(_verify("pack", pack, "--trusted-key", keys.key_id, "--format", "json"))
    assert failure.startswith(f"verification.json: {key} is not"), failure


def test_pack_manifest_matches_its_schema(good: Path) -> None:
    schema = json.loads((ROOT / "schemas" / "eu-ai-act-pack-manifest.schema.json").read_bytes())
    Draft202012Validator.check_schema(schema)
    manifest = json.loads((good / PACK_MANIFEST).read_bytes())
    Draft202012Validator(schema).validate(manifest)
    manifest["files"][0]["size"] = -1
    assert list(Draft202012Validator(schema).iter_errors(manifest))


def test_missing_pack_is_one_line_and_4(tmp_path: Path) -> None:
    done = _verify("pack", tmp_path / "nope")
    assert done.returncode == 4
    assert done.stdout == ""
    assert done.stderr.strip().endswith("nope: no such file or folder")
    assert done.stderr.count("\n") == 1
