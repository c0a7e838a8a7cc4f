"""The layering rule (DESIGN §2): verify imports nothing of ours; receipts never orchestrate.

Checked three ways: statically over every module's imports (including relative ones and
imports inside functions), with import-linter's contracts from pyproject.toml, and at run time
by importing every verify module in a fresh interpreter and listing what got loaded.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "verify": ("harness.receipts", "harness.orchestrate", "harness.cli", "harness.demo"),
    "receipts": ("harness.orchestrate", "harness.cli", "harness.demo"),
}


def _imports(path: Path, package: str, root: Path = ROOT) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    module_parts = ["harness", package, *path.relative_to(root / package).with_suffix("").parts]
    if module_parts[-1] == "__init__":
        module_parts.pop()
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module_parts[: len(module_parts) - node.level + (path.stem == "__init__")]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.append((node.lineno, name))
            found.extend((node.lineno, f"{name}.{alias.name}") for alias in node.names)
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_static_imports_respect_layers(package: str) -> None:
    violations = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, name in _imports(path, package):
            if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN[package]):
                violations.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
            if package == "verify" and name in {"harness", "harness.__init__"}:
                violations.append(f"{path.relative_to(ROOT)}:{line} imports the umbrella")
    assert violations == []


def test_static_checker_catches_a_violation(tmp_path: Path) -> None:
    # The probe lives in a copy of the layout under tmp_path, never in verify/ itself: there it
    # would be seen by the other layering tests, the wheel test and lint-imports running at the
    # same time on another pytest-xdist worker (or by anyone's ruff/mypy in the tree).
    bad = tmp_path / "verify" / "_layering_probe.py"
    bad.parent.mkdir()
    bad.write_text("def f():\n    from ..receipts import store\n    return store\n")
    found = _imports(bad, "verify", root=tmp_path)
    assert (2, "harness.receipts") in found


def test_import_linter_contracts() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("import-linter is not installed (pip install -e .[dev])")
    # import-linter resolves packages through their files; .mypy-tree mirrors the installed
    # layout (harness/verify -> verify/ ...) so the real module names resolve.
    env = {**os.environ, "PYTHONPATH": str(ROOT / ".mypy-tree")}
    result = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, check=False, env=env)
    assert result.returncode == 0, result.stdout + result.stderr


def test_runtime_imports_of_verify_load_nothing_else() -> None:
    modules = sorted(
        f"harness.verify.{path.stem}"
        for path in (ROOT / "verify").glob("*.py")
        if path.stem != "__init__"
    )
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('harness'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    loaded = json.loads(out)
    assert [m for m in loaded if not (m == "harness" or m.startswith("harness.verify"))] == []


def test_mypy_tree_mirrors_the_umbrella_package() -> None:
    """mypy and import-linter read .mypy-tree; a module missing there would go unchecked."""
    tree = ROOT / ".mypy-tree" / "harness"
    expected = {path.name for path in (ROOT / "src" / "harness").iterdir()} - {"__pycache__"}
    expected |= {"verify", "receipts", "orchestrate", "schemas"}
    present = {path.name for path in tree.iterdir()}
    assert present == expected
    for path in tree.iterdir():
        assert path.is_symlink() and path.exists(), path
