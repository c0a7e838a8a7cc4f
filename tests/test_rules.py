"""The pure decision rules in verify/rules/: purity, and each rule's behaviour by table."""

from __future__ import annotations

import ast
import random
from datetime import datetime
from pathlib import Path

import pytest

from harness.orchestrate.capabilities import DEFAULT_MATRIX
from harness.orchestrate.model import CapsuleSpec, TaskSpec
from harness.verify.rules import capsule, integrity, schedule, scope, trifecta

RULES = Path(__file__).resolve().parents[1] / "verify" / "rules"
# Only pure modules: no I/O, clock or randomness. hashlib digests canonical bytes (the
# configuration chain); posixpath, shlex and urllib.parse split strings (the review rule's
# paths, shell words and URLs), touching no file system or network.
ALLOWED_IMPORTS = {
    "__future__",
    "collections.abc",
    "dataclasses",
    "enum",
    "functools",
    "re",
    "typing",
    "hashlib",
    "posixpath",
    "shlex",
    "urllib.parse",
}


@pytest.mark.parametrize("path", sorted(RULES.glob("*.py")), ids=lambda p: p.name)
def test_rules_are_pure(path: Path) -> None:
    """No I/O, clock, randomness or outside code: only these stdlib modules, and each other."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [] if node.level else [node.module or ""]
        else:
            if isinstance(node, ast.Constant):
                assert type(node.value) is not float, f"{path.name}: float literal"
            if isinstance(node, ast.Name):
                assert node.id not in {"open", "print", "input", "float"}, node.id
            continue
        assert set(names) <= ALLOWED_IMPORTS, f"{path.name} imports {names}"


def test_check_time_agrees_with_the_calendar() -> None:
    rng = random.Random(7)
    samples = ["2024-02-29T23:59:59.999999Z", "2023-02-29T00:00:00.000000Z",
               "1900-02-29T00:00:00.000000Z", "2000-02-29T00:00:00.000000Z",
               "2026-13-01T00:00:00.000000Z", "2026-04-31T00:00:00.000000Z",
               "0000-01-01T00:00:00.000000Z", "2026-01-01T24:00:00.000000Z"]  # fmt: skip
    for _ in range(2000):
        samples.append(
            f"{rng.randrange(1, 10000):04d}-{rng.randrange(0, 14):02d}-{rng.randrange(0, 33):02d}"
            f"T{rng.randrange(0, 25):02d}:{rng.randrange(0, 61):02d}:{rng.randrange(0, 60):02d}"
            f".{rng.randrange(0, 10**6):06d}Z"
        )
    for value in samples:
        try:
            datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ")
            valid = True
        except ValueError:
            valid = False
        assert (scope.check_time(value) is None) is valid, value
    assert scope.check_time("2026-01-01T00:00:00Z") is not None  # six digits, always


CAP = CapsuleSpec(
    goal="g",
    actions=("edit", "gate"),
    scope=("src/**",),
    adapters=("scripted",),
    egress=("PyPI.org.",),
    expires="2026-06-01T00:00:00.000000Z",
)
TASK = TaskSpec(id="t1", role="r", prompt="p", scope=("src/a/**",))
NOW = "2026-01-01T00:00:00.000000Z"


def test_capsule_conformance_covers_every_action_class() -> None:
    actions = [
        ("edit", "src/a/x.py"),
        ("delete", "src/a/y.py"),
        ("gate", "tests"),
        ("merge", "harness/r/b1"),
        ("egress", "pypi.org"),
        ("egress", "evil.example"),
        ("edit", "src/b.py"),
        ("edit", "docs/x.md"),
        ("edit", "src/../x"),
        ("teleport", "x"),
    ]
    assert capsule.conformance(CAP, now=NOW, task=TASK, actions=actions) == [
        "action: delete 'src/a/y.py': action class 'delete' not allowed by the capsule "
        "(allowed: edit, gate)",
        "action: merge 'harness/r/b1': action class 'merge' not allowed by the capsule "
        "(allowed: edit, gate)",
        "egress: host 'evil.example' not allowed by the capsule (allowed: PyPI.org.)",
        "task-scope: edit 'src/b.py' is outside the scope of task t1 (src/a/**)",
        "scope: edit 'docs/x.md' is outside the capsule scope (src/**)",
        "task-scope: edit 'docs/x.md' is outside the scope of task t1 (src/a/**)",
        "path: edit 'src/../x': path has a '..' segment",
        "action: teleport 'x': unknown action class",
    ]
    late = "2026-06-01T00:00:00.000001Z"
    other = TaskSpec(id="t2", role="r", prompt="p", adapter="claude")
    assert capsule.conformance(CAP, now=late, task=other, actions=[]) == [
        f"expired: capsule expired at {CAP.expires} (now {late})",
        "adapter: task t2 uses adapter 'claude', not allowed by the capsule (allowed: scripted)",
    ]
    assert capsule.conformance(CAP, now=CAP.expires, task=TASK, actions=[]) == []
    with pytest.raises(ValueError, match="now"):
        capsule.conformance(CAP, now="yesterday", task=TASK, actions=[])


def test_capsule_document_round_trip() -> None:
    document = capsule.capsule_document(CAP)
    assert capsule.capsule_from_document(document) == capsule.Capsule(
        "g", ("edit", "gate"), ("src/**",), ("scripted",), ("PyPI.org.",), CAP.expires
    )
    for broken in ({**document, "extra": 1}, {**document, "scope": "src/**"}, [], None):
        with pytest.raises(trifecta.RuleInputError):
            capsule.capsule_from_document(broken)


def test_matrix_object_round_trip_and_strictness() -> None:
    recorded = trifecta.matrix_object(DEFAULT_MATRIX)
    assert recorded["adapters"]["claude"] == sorted(trifecta.RISKS)
    matrix = trifecta.matrix_from_object(recorded)
    for adapter, tools in [
        ("claude", ()),
        ("scripted", ("web",)),
        ("scripted", ("web", "secrets")),
    ]:
        assert trifecta.decide(matrix, adapter, tools, None) == trifecta.decide(
            DEFAULT_MATRIX, adapter, tools, None
        )
    for broken in (
        {"adapters": {}, "tools": {}},
        {"adapters": {"x": ["private_data", "private_data"]}, "mcp": {}, "tools": {}},
        {"adapters": {"x": ["untrusted_input", "private_data"]}, "mcp": {}, "tools": {}},
        {"adapters": {"x": ["PRIVATE_DATA"]}, "mcp": {}, "tools": {}},
        {"adapters": [], "mcp": {}, "tools": {}},
    ):
        with pytest.raises(trifecta.RuleInputError):
            trifecta.matrix_from_object(broken)


def test_batch_choice() -> None:
    specs = [
        TaskSpec(id="a", role="r", prompt="p", priority=1, order=2, scope=("a/**",)),
        TaskSpec(id="b", role="r", prompt="p", priority=5, order=1, scope=("b/**",)),
        TaskSpec(id="c", role="r", prompt="p", priority=5, order=0, adapter="x", scope=("c",)),
        TaskSpec(id="d", role="q", prompt="p", order=3),
        TaskSpec(id="e", role="q", prompt="p", order=4),
    ]
    chosen = schedule.choose_batches(
        specs, max_batch=2, limits={"r": 2}, in_flight={"q": 1}, next_batch_number=9999
    )
    assert chosen == [
        schedule.BatchChoice("b9999", "r", "x", ("c",), ("c",)),
        schedule.BatchChoice("b10000", "r", "scripted", ("b", "a"), ("a/**", "b/**")),
    ]
    with pytest.raises(ValueError):
        schedule.choose_batches(specs, max_batch=4, limits={}, in_flight={}, next_batch_number=1)


def test_gate_integrity_rule() -> None:
    ok = integrity.WorktreeState("c1", "t1", True)
    assert integrity.violation(ok, ok) is None
    for before, after, reason in [
        (integrity.WorktreeState("c1", "t1", False), ok, "not clean before"),
        (ok, integrity.WorktreeState("c2", "t1", True), "HEAD moved from c1 to c2"),
        (ok, integrity.WorktreeState("c1", "t2", True), "tree changed"),
        (ok, integrity.WorktreeState("c1", "t1", False), "left modified or untracked"),
    ]:
        problem = integrity.violation(before, after)
        assert problem is not None and reason in problem
