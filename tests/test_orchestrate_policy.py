"""Capability matrix (trifecta denial) and intent capsules (digest, conformance, globs)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.capabilities import (
    ALL_TAGS,
    DEFAULT_MATRIX,
    NO_TAGS,
    CapabilityError,
    CapabilityMatrix,
    Denial,
    Tag,
    check_task,
    load_capabilities,
    parse_capabilities,
)
from harness.orchestrate.capsule import (
    capsule_digest,
    capsule_document,
    conformance,
    pre_spawn_violations,
)
from harness.orchestrate.model import CapsuleSpec, TaskSpec
from harness.verify.rules.scope import check_glob, glob_match, in_scope

ROOT = Path(__file__).resolve().parents[1]
NOW = "2026-06-01T12:00:00.000000Z"


def task(
    adapter: str = "scripted", tools: tuple[str, ...] = (), scope: tuple[str, ...] = ("**",)
) -> TaskSpec:
    return TaskSpec(id="t1", role="coder", prompt="p", adapter=adapter, tools=tools, scope=scope)


# --- capability matrix -----------------------------------------------------------------------


def test_unknown_names_get_all_three_tags() -> None:
    assert DEFAULT_MATRIX.tool_tags("teleport") == ALL_TAGS
    assert DEFAULT_MATRIX.adapter_tags("new-cli") == ALL_TAGS
    assert DEFAULT_MATRIX.tool_tags("mcp:github") == ALL_TAGS
    assert CapabilityMatrix().tool_tags("edit") == ALL_TAGS  # an empty matrix knows nothing


def test_defaults() -> None:
    assert DEFAULT_MATRIX.adapter_tags("scripted") == NO_TAGS
    assert DEFAULT_MATRIX.tool_tags("edit") == NO_TAGS
    assert DEFAULT_MATRIX.tool_tags("shell") == {Tag.UNTRUSTED_INPUT, Tag.EXTERNAL_COMM}
    assert DEFAULT_MATRIX.tool_tags("web") == {Tag.UNTRUSTED_INPUT, Tag.EXTERNAL_COMM}
    assert DEFAULT_MATRIX.tool_tags("fetch") == {Tag.UNTRUSTED_INPUT, Tag.EXTERNAL_COMM}
    assert DEFAULT_MATRIX.tool_tags("secrets") == {Tag.PRIVATE_DATA}
    for cli in ("claude", "codex", "gemini", "aider", "command"):
        assert DEFAULT_MATRIX.adapter_tags(cli) == ALL_TAGS


def test_trifecta_denied() -> None:
    denial = check_task(task(tools=("edit", "secrets", "web")), DEFAULT_MATRIX)
    assert denial == Denial(
        task="t1",
        tools=("secrets", "web"),
        tags=("external_comm", "private_data", "untrusted_input"),
        reason="lethal trifecta (private data, untrusted input, external communication): "
        "private_data via secrets; untrusted_input via web; external_comm via web",
    )


def test_two_tags_allowed() -> None:
    assert check_task(task(tools=("edit", "web", "shell")), DEFAULT_MATRIX) is None
    assert check_task(task(tools=("secrets", "edit")), DEFAULT_MATRIX) is None
    assert check_task(task(), DEFAULT_MATRIX) is None


def test_unknown_tool_alone_is_denied() -> None:
    denial = check_task(task(tools=("mcp:github",)), DEFAULT_MATRIX)
    assert denial is not None
    assert denial.tools == ("mcp:github",)


BWRAP_OFFLINE = {"kind": "bwrap", "network": False, "private_mounts": False, "opt_out": False}


def test_real_cli_adapter_denied_unless_its_sandbox_rules_risks_out() -> None:
    denial = check_task(task(adapter="claude"), DEFAULT_MATRIX)
    assert denial is not None and denial.tools == ("adapter:claude",)
    # configuration cannot talk the risks away (decision 0018) ...
    with pytest.raises(CapabilityError, match=r"adapters.claude.tags: cannot drop external_comm"):
        parse_capabilities({"adapters": {"claude": {"tags": ["untrusted_input"]}}})
    # ... only a sandbox that physically rules them out does
    assert check_task(task(adapter="claude", tools=("web",)), DEFAULT_MATRIX, BWRAP_OFFLINE) is None
    networked = {**BWRAP_OFFLINE, "network": True}
    assert check_task(task(adapter="claude", tools=("web",)), DEFAULT_MATRIX, networked) is None
    assert check_task(task(adapter="claude"), DEFAULT_MATRIX, networked) is None
    mounted = {**BWRAP_OFFLINE, "network": True, "private_mounts": True}
    assert check_task(task(adapter="claude"), DEFAULT_MATRIX, mounted) is not None
    opted_out = {"kind": "none", "network": False, "private_mounts": False, "opt_out": True}
    assert check_task(task(adapter="claude"), DEFAULT_MATRIX, opted_out) is not None
    secrets = task(adapter="claude", tools=("web", "secrets"))
    assert check_task(secrets, DEFAULT_MATRIX, BWRAP_OFFLINE) is not None  # tools keep theirs


def test_config_file(tmp_path: Path) -> None:
    path = tmp_path / "capabilities.toml"
    path.write_text(
        "[tools.shell]\ntags = []\n"
        '[mcp.github]\ntags = ["untrusted_input", "external_comm"]\n'
        '[adapters."my.cli"]\ntags = ["private_data", "untrusted_input", "external_comm"]\n'
        '[adapters.scripted]\ntags = ["untrusted_input"]\n'
    )
    matrix = load_capabilities(path)
    assert matrix.tool_tags("shell") == NO_TAGS  # replaces the built-in entry
    assert matrix.tool_tags("web") == DEFAULT_MATRIX.tool_tags("web")  # others kept
    assert matrix.tool_tags("mcp:github") == {Tag.UNTRUSTED_INPUT, Tag.EXTERNAL_COMM}
    assert matrix.tool_tags("github") == ALL_TAGS  # a plain tool is not the MCP server
    assert matrix.adapter_tags("my.cli") == ALL_TAGS
    assert matrix.adapter_tags("scripted") == {Tag.UNTRUSTED_INPUT}  # adapters: add only
    assert check_task(task(adapter="my.cli", tools=("mcp:github",)), matrix) is not None
    bare = parse_capabilities({"tools": {"edit": {"tags": []}}}, base=CapabilityMatrix())
    assert bare.tool_tags("edit") == NO_TAGS and bare.tool_tags("shell") == ALL_TAGS


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"tool": {}}, "tool: unknown key (allowed: tools, adapters, mcp)"),
        ({"tools": []}, "tools: must be a table"),
        ({"tools": {"shell": []}}, "tools.shell: must be a table with a tags array"),
        ({"tools": {"shell": {}}}, "tools.shell.tags: required key is missing"),
        (
            {"tools": {"shell": {"tags": [], "note": "x"}}},
            "tools.shell.note: unknown key (allowed: tags)",
        ),
        ({"tools": {"shell": {"tags": "private_data"}}}, "tools.shell.tags: must be an array"),
        (
            {"mcp": {"gh": {"tags": ["PRIVATE_DATA"]}}},
            "mcp.gh.tags[0]: unknown tag 'PRIVATE_DATA' (allowed: private_data, "
            "untrusted_input, external_comm)",
        ),
        (
            {"adapters": {"x": {"tags": ["private_data", "private_data"]}}},
            "adapters.x.tags[1]: tag 'private_data' repeats",
        ),
        ({"adapters": {"x": {"tags": [1]}}}, "adapters.x.tags[0]: unknown tag 1"),
        (
            {"adapters": {"x": {"tags": ["private_data", "untrusted_input"]}}},
            "adapters.x.tags: cannot drop external_comm from an adapter",
        ),
        ({"tools": {"a b": {"tags": []}}}, "tools.\"a b\": 'a b' is not a valid name"),
        ({"tools": {"mcp:x": {"tags": []}}}, "tools.\"mcp:x\": 'mcp:x' is not a valid name"),
    ],
)
def test_config_strictness(data: dict[str, Any], message: str) -> None:
    with pytest.raises(CapabilityError) as info:
        parse_capabilities(data)
    assert str(info.value).startswith(message), str(info.value)


def test_config_file_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "capabilities.toml"
    path.write_text("[tools.shell\n")
    with pytest.raises(CapabilityError, match=re.escape(str(path)) + ": invalid TOML"):
        load_capabilities(path)
    path.write_text('[tools.shell]\ntags = ["nope"]\n')
    with pytest.raises(CapabilityError) as info:
        load_capabilities(path)
    assert str(info.value).startswith(f"{path}: tools.shell.tags[0]: unknown tag 'nope'")


def test_spec_page_capabilities_example_parses() -> None:
    text = (ROOT / "docs" / "spec" / "plan.md").read_text()
    blocks = [
        b
        for b in re.findall(r"```toml\n(.*?)```", text, flags=re.DOTALL)
        if b.lstrip().startswith(("[tools", "[adapters", "[mcp", "#"))
    ]
    assert blocks, "docs/spec/plan.md has no capabilities.toml example"
    for block in blocks:
        parse_capabilities(tomllib.loads(block))


# --- capsule digest --------------------------------------------------------------------------

CAPSULE = CapsuleSpec(
    goal="Fix the greeting",
    actions=("edit", "delete", "gate", "merge"),
    scope=("src/**", "tests/**"),
    adapters=("scripted",),
    egress=("pypi.org",),
    expires="2027-01-01T00:00:00.000000Z",
)
CAPSULE_DIGEST = "c3479e6f58da4554a3b1661716f1d2258ff048b639d4ed0757634417fde230c7"


def test_digest_is_sha256_of_canonical_json() -> None:
    document = capsule_document(CAPSULE)
    assert sorted(document) == ["actions", "adapters", "egress", "expires", "goal", "scope"]
    # independent JCS for ASCII values: sorted keys, no whitespace
    expected = hashlib.sha256(
        json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    assert capsule_digest(CAPSULE) == expected
    assert capsule_digest(dataclasses.replace(CAPSULE)) == expected


def test_digest_pinned() -> None:
    assert capsule_digest(CAPSULE) == CAPSULE_DIGEST


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("goal", "Fix the greeting!"),
        ("actions", ("edit", "delete", "gate")),
        ("actions", ("delete", "edit", "gate", "merge")),
        ("scope", ("src/**",)),
        ("adapters", ()),
        ("egress", ("pypi.org", "files.pythonhosted.org")),
        ("expires", "2027-01-01T00:00:00.000001Z"),
    ],
)
def test_digest_changes_with_any_field(field: str, value: Any) -> None:
    assert capsule_digest(dataclasses.replace(CAPSULE, **{field: value})) != CAPSULE_DIGEST


def test_digest_non_ascii_goal() -> None:
    spec = dataclasses.replace(CAPSULE, goal="Grüße ✓")
    assert capsule_digest(spec) == capsule_digest(dataclasses.replace(CAPSULE, goal="Grüße ✓"))
    assert capsule_digest(spec) != CAPSULE_DIGEST


# --- conformance -----------------------------------------------------------------------------


def test_conforming_run_has_no_violations() -> None:
    actions = [
        ("edit", "src/app.py"),
        ("delete", "tests/old/test_x.py"),
        ("gate", "tests"),
        ("merge", "harness/b0001"),
        ("egress", "PyPI.org."),
    ]
    assert conformance(CAPSULE, now=NOW, task=task(), actions=actions) == []
    assert pre_spawn_violations(CAPSULE, NOW, task()) == []


def test_expired() -> None:
    at_expiry = CAPSULE.expires
    assert conformance(CAPSULE, now=at_expiry, task=task(), actions=[]) == []
    late = "2027-01-01T00:00:00.000001Z"
    assert conformance(CAPSULE, now=late, task=task(), actions=[]) == [
        f"expired: capsule expired at {CAPSULE.expires} (now {late})"
    ]
    assert pre_spawn_violations(CAPSULE, late, task()) == [
        f"expired: capsule expired at {CAPSULE.expires} (now {late})"
    ]


def test_malformed_times() -> None:
    with pytest.raises(ValueError, match="now '2026-06-01T12:00:00Z'"):
        conformance(CAPSULE, now="2026-06-01T12:00:00Z", task=task(), actions=[])
    bad = dataclasses.replace(CAPSULE, expires="tomorrow")
    (violation,) = pre_spawn_violations(bad, NOW, task())
    assert violation.startswith("bad-capsule: expires 'tomorrow'")


def test_adapter_not_allowed() -> None:
    expected = [
        "adapter: task t1 uses adapter 'claude', not allowed by the capsule (allowed: scripted)"
    ]
    assert pre_spawn_violations(CAPSULE, NOW, task(adapter="claude")) == expected
    assert conformance(CAPSULE, now=NOW, task=task(adapter="claude"), actions=[]) == expected
    anyone = dataclasses.replace(CAPSULE, adapters=())
    assert pre_spawn_violations(anyone, NOW, task(adapter="claude")) == []


def test_action_class_not_allowed() -> None:
    capsule = dataclasses.replace(CAPSULE, actions=("edit",))
    actions = [("delete", "src/a.py"), ("merge", "main"), ("gate", "lint"), ("push", "origin")]
    assert conformance(capsule, now=NOW, task=task(), actions=actions) == [
        "action: delete 'src/a.py': action class 'delete' not allowed by the capsule "
        "(allowed: edit)",
        "action: merge 'main': action class 'merge' not allowed by the capsule (allowed: edit)",
        "action: gate 'lint': action class 'gate' not allowed by the capsule (allowed: edit)",
        "action: push 'origin': unknown action class",
    ]


def test_path_outside_scopes() -> None:
    actions = [("edit", "docs/index.md"), ("edit", "tests/test_a.py"), ("delete", "README.md")]
    result = conformance(CAPSULE, now=NOW, task=task(scope=("src/**",)), actions=actions)
    assert result == [
        "scope: edit 'docs/index.md' is outside the capsule scope (src/**, tests/**)",
        "task-scope: edit 'docs/index.md' is outside the scope of task t1 (src/**)",
        "task-scope: edit 'tests/test_a.py' is outside the scope of task t1 (src/**)",
        "scope: delete 'README.md' is outside the capsule scope (src/**, tests/**)",
        "task-scope: delete 'README.md' is outside the scope of task t1 (src/**)",
    ]


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("src/../../etc/passwd", "path has a '..' segment"),
        ("/etc/passwd", "path is absolute (starts with '/')"),
        ("src/.git/config", "path is inside .git"),
        ("src//a.py", "path has an empty segment"),
        ("", "path is empty"),
    ],
)
def test_bad_paths(target: str, problem: str) -> None:
    result = conformance(CAPSULE, now=NOW, task=task(), actions=[("edit", target)])
    assert result == [f"path: edit {target!r}: {problem}"]


def test_egress() -> None:
    result = conformance(
        CAPSULE, now=NOW, task=task(), actions=[("egress", "evil.example"), ("egress", "pypi.org")]
    )
    assert result == ["egress: host 'evil.example' not allowed by the capsule (allowed: pypi.org)"]
    none = dataclasses.replace(CAPSULE, egress=())
    assert conformance(none, now=NOW, task=task(), actions=[("egress", "pypi.org")]) == [
        "egress: host 'pypi.org' not allowed by the capsule (allowed: none)"
    ]


def test_bad_capsule_scope_fails_closed() -> None:
    capsule = dataclasses.replace(CAPSULE, scope=("../**",))
    result = conformance(capsule, now=NOW, task=task(), actions=[("edit", "src/a.py")])
    assert result == ["bad-capsule: scope glob '../**': glob has a '..' segment"]


def test_violations_in_fixed_order() -> None:
    capsule = dataclasses.replace(CAPSULE, actions=("gate",))
    late = "2030-01-01T00:00:00.000000Z"
    result = conformance(
        capsule,
        now=late,
        task=task(adapter="claude"),
        actions=[("egress", "x.org"), ("edit", "docs/a.md")],
    )
    assert [v.split(":", 1)[0] for v in result] == [
        "expired",
        "adapter",
        "egress",
        "action",
        "scope",
    ]


# --- globs -----------------------------------------------------------------------------------

GLOB_TABLE = [
    ("src/**", "src/a/b.py", True),
    ("src/**", "src/a.py", True),
    ("src/**", "src", False),
    ("src/**", "srcx/a.py", False),
    ("src/**", "lib/src/a.py", False),
    ("*.md", "README.md", True),
    ("*.md", "docs/a.md", False),
    ("*.md", ".md", True),
    ("**/*.md", "a.md", True),
    ("**/*.md", "docs/x/a.md", True),
    ("**/*.md", "docs/a.py", False),
    ("docs/**/x.md", "docs/x.md", True),
    ("docs/**/x.md", "docs/a/b/x.md", True),
    ("docs/**/x.md", "docs/a/b/y.md", False),
    ("**", "a", True),
    ("**", "a/b/c", True),
    ("src/?.py", "src/a.py", True),
    ("src/?.py", "src/ab.py", False),
    ("src/?.py", "src//.py", False),
    ("src/*", "src/.hidden", True),
    ("src/*", "src/a/b", False),
    ("src/*.py", "src/a.py", True),
    ("src/[ab].py", "src/[ab].py", True),
    ("src/[ab].py", "src/a.py", False),
    ("a.b", "axb", False),
    ("a+b", "a+b", True),
    ("SRC/**", "src/a.py", False),
    ("src/a.py", "src/a.py", True),
    ("src/a.py", "src/a.pyc", False),
    ("src/*/test_*.py", "src/pkg/test_a.py", True),
    ("src/*/test_*.py", "src/pkg/sub/test_a.py", False),
    ("**/**", "a/b", True),
    ("a/**/**/b", "a/b", True),
]


@pytest.mark.parametrize(("glob", "path", "expected"), GLOB_TABLE)
def test_glob_semantics(glob: str, path: str, expected: bool) -> None:
    assert glob_match(glob, path) is expected


def test_in_scope() -> None:
    assert in_scope("src/a.py", ("docs/**", "src/**"))
    assert not in_scope("src/a.py", ())


@pytest.mark.parametrize("glob", ["", "/a", "a/../b", "./a", "a//b", "a/", "a**", "a\\b", "a\0"])
def test_bad_globs_refused(glob: str) -> None:
    assert check_glob(glob) is not None
    with pytest.raises(ValueError, match="bad glob"):
        glob_match(glob, "a")
