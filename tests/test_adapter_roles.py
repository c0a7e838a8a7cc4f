"""Role tool policies (issue 12 §3, docs/spec/runtime.md §22): the rule's table, every CLI
adapter's flags per role, run for real through the fake CLIs (which derive the usable tool
classes from their command line as the real CLIs document it and report them), the recorded
policy object, and role ``agent`` left exactly as before."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from harness.orchestrate.adapters import (
    ADAPTERS,
    AdapterConfigError,
    AgentRequest,
    ClaudeAdapter,
    CommandAdapter,
)
from harness.orchestrate.adapters.base import enforces, policy_flags, role_denied
from harness.orchestrate.adapters.roles import SANDBOX_COVERS, role_policy, uncovered
from harness.orchestrate.model import Batch, ProcResult, TaskSpec
from harness.verify.rules.roles import CLASSES, ROLES, check_classes, denied

FAKES = Path(__file__).parent / "fakes"
SCHEMA = json.loads(
    (Path(__file__).parents[1] / "schemas" / "role-policy.schema.json").read_text("utf-8")
)
CLI_NAMES = ("claude", "codex", "gemini", "aider", "opencode")
ROUND_ROLES = ("manager", "executor", "auditor")


@pytest.fixture(scope="module")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fakes")
    for source in FAKES.iterdir():
        if source.is_file():
            target = folder / source.name
            shutil.copyfile(source, target)
            target.chmod(target.stat().st_mode | stat.S_IXUSR)
    return folder


def request(tmp_path: Path, role: str = "agent", model: str | None = None) -> AgentRequest:
    worktree, scratch = tmp_path / "worktree", tmp_path / "scratch"
    worktree.mkdir(parents=True, exist_ok=True)
    scratch.mkdir(parents=True, exist_ok=True)
    task = TaskSpec(id="t1", role="dev", prompt="Write the marker.", adapter="claude")
    made = AgentRequest(
        batch=Batch(id="b1", role="dev", adapter="claude", tasks=("t1",)),
        tasks=(task,),
        worktree=worktree,
        prompt="Write the marker.",
        prompt_file=scratch / "prompt.txt",
        model=model,
        workfile=scratch / "work.json",
        role=role,
    )
    made.prompt_file.write_text(made.prompt, encoding="utf-8")
    return made


# ---- the rule -------------------------------------------------------------------------------


def test_denied_table() -> None:
    assert ROLES == ("agent", "manager", "executor", "auditor")
    assert CLASSES == ("mcp", "shell", "subagents", "write")
    assert denied("agent") == ()
    assert denied("manager") == ("mcp", "shell", "subagents", "write")
    assert denied("executor") == ("subagents",)
    assert denied("auditor") == ("subagents", "write")
    for role in ROLES:
        assert list(denied(role)) == sorted(set(denied(role)))
        assert set(denied(role)) <= set(CLASSES)


@pytest.mark.parametrize("role", ["Manager", "", "judge", " auditor", None, 1, ("manager",)])
def test_unknown_role_is_refused_by_the_rule(role: Any) -> None:
    with pytest.raises(ValueError, match="unknown role") as caught:
        denied(role)
    assert str(caught.value).endswith("; known roles: agent, manager, executor, auditor")


def test_check_classes() -> None:
    assert check_classes(["shell", "write"]) == ("shell", "write")
    assert check_classes(()) == ()
    with pytest.raises(ValueError, match=r"^tool classes must be a list, not str$"):
        check_classes("shell")
    with pytest.raises(ValueError, match=r"^tool classes must be a list, not NoneType$"):
        check_classes(None)
    with pytest.raises(
        ValueError, match=r"^unknown tool class 'network'; known: mcp, shell, subagents, write$"
    ):
        check_classes(["network"])
    with pytest.raises(ValueError, match="unknown tool class 1"):
        check_classes([1])
    with pytest.raises(ValueError, match="sorted and unique"):
        check_classes(["write", "shell"])
    with pytest.raises(ValueError, match="sorted and unique"):
        check_classes(["shell", "shell"])


# ---- role "agent" is today's command line ---------------------------------------------------

TODAY = {
    "claude": ["claude", "-p", "--output-format", "json", "--permission-mode", "acceptEdits",
               "--model", "M"],
    "codex": ["codex", "exec", "--json", "--full-auto", "--skip-git-repo-check", "-m", "M", "-"],
    "gemini": ["gemini", "--output-format", "json", "--approval-mode", "auto_edit", "--model",
               "M"],
    "goose": ["goose", "run", "--no-session", "--with-builtin", "developer", "--model", "M",
              "--instructions", "-"],
    "opencode": ["opencode", "run", "--format", "json", "--model", "M"],
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_agent_role_adds_nothing(tmp_path: Path, name: str) -> None:
    adapter = ADAPTERS[name]
    plain = request(tmp_path, model="M")
    assert plain.role == "agent"
    assert policy_flags(adapter, plain) == []
    assert enforces(adapter, "agent") == ()
    if name in TODAY:
        assert adapter.argv(plain) == TODAY[name]
    if name == "aider":
        assert not any(
            a in adapter.argv(plain) for a in ("--dry-run", "--no-suggest-shell-commands")
        )


# ---- the flags per CLI and role -------------------------------------------------------------

CLAUDE_MANAGER = (
    "Agent,Bash,BashOutput,Edit,KillBash,KillShell,ListMcpResourcesTool,MultiEdit,NotebookEdit,"
    "PowerShell,ReadMcpResourceTool,Task,Write"
)
NO_SUBAGENTS = ["-c", "features.multi_agent=false", "-c", "features.multi_agent_v2=false",
                "-c", "agents.enabled=false"]  # fmt: skip
EXPECTED: dict[tuple[str, str], list[str]] = {
    ("claude", "manager"): ["--disallowedTools", CLAUDE_MANAGER, "--tools", "Glob,Grep,Read",
                            "--strict-mcp-config", "--mcp-config", '{"mcpServers":{}}'],
    ("claude", "executor"): ["--disallowedTools", "Agent,Task"],
    ("claude", "auditor"): ["--disallowedTools", "Agent,Edit,MultiEdit,NotebookEdit,Task,Write"],
    ("codex", "manager"): ["--sandbox", "read-only", "--ignore-user-config", "-c",
                           "features.shell_tool=false", "-c", "features.unified_exec=false",
                           *NO_SUBAGENTS],
    ("codex", "executor"): NO_SUBAGENTS,
    ("codex", "auditor"): ["--sandbox", "read-only", *NO_SUBAGENTS],
    ("gemini", "manager"): ["--approval-mode", "default", "--allowed-mcp-server-names",
                            "harness-no-mcp-server"],
    ("gemini", "executor"): [],
    ("gemini", "auditor"): ["--approval-mode", "default"],
    ("aider", "manager"): ["--dry-run", "--no-suggest-shell-commands"],
    ("aider", "executor"): [],
    ("aider", "auditor"): ["--dry-run"],
    ("opencode", "manager"): ["--agent", "plan"],
    ("opencode", "executor"): [],
    ("opencode", "auditor"): ["--agent", "plan"],
    ("goose", "manager"): [],
    ("scripted", "manager"): [],
}  # fmt: skip


@pytest.mark.parametrize(("name", "role"), sorted(EXPECTED))
def test_policy_flags_per_cli(tmp_path: Path, name: str, role: str) -> None:
    adapter = ADAPTERS[name]
    made = request(tmp_path, role, model="M")
    flags = policy_flags(adapter, made)
    assert flags == EXPECTED[name, role]
    argv = adapter.argv(made)
    assert role_policy(adapter, made)["flags"] == flags
    # The non-policy part of the command line is today's, minus what the policy replaces.
    replaced = {"codex": ["--full-auto"], "gemini": ["--approval-mode", "auto_edit"]}
    if name in TODAY:
        rest = [a for a in argv if a not in flags]
        today = TODAY[name]
        if "--sandbox" in flags or "--approval-mode" in flags:
            today = [a for a in today if a not in replaced.get(name, [])]
        assert rest == [a for a in today if a not in flags]


def test_codex_keeps_the_prompt_dash_last(tmp_path: Path) -> None:
    for role in ROLES:
        assert ADAPTERS["codex"].argv(request(tmp_path, role))[-1] == "-"
        assert ADAPTERS["goose"].argv(request(tmp_path, role))[-2:] == ["--instructions", "-"]


@pytest.mark.parametrize("name", [*sorted(ADAPTERS), "command"])
def test_unknown_role_is_refused_by_every_adapter(tmp_path: Path, name: str) -> None:
    adapter = CommandAdapter(template=("mycli",)) if name == "command" else ADAPTERS[name]
    bad = request(tmp_path, "judge")
    with pytest.raises(AdapterConfigError, match="unknown role 'judge'"):
        policy_flags(adapter, bad)
    with pytest.raises(AdapterConfigError, match="unknown role 'judge'"):
        role_policy(adapter, bad)
    with pytest.raises(AdapterConfigError, match="unknown role"):
        uncovered(adapter, "judge", read_only_mount=True)
    with pytest.raises(AdapterConfigError, match="unknown role"):
        adapter.enforces("judge")  # type: ignore[attr-defined]
    if name not in {"scripted", "command", "goose"}:  # their argv carries no role flags
        with pytest.raises(AdapterConfigError, match="unknown role"):
            adapter.argv(bad)


# ---- run for real through the fakes ---------------------------------------------------------


def run_fake(adapter: Any, made: AgentRequest, report: Path) -> ProcResult:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(made.worktree.parent),
        "FAKE_MODE": "",
        "FAKE_REPORT": str(report),
        "FAKE_MCP_SERVERS": "github,postgres",
    }
    done = subprocess.run(
        adapter.argv(made),
        cwd=made.worktree,
        env=env,
        input=adapter.stdin(made),
        capture_output=True,
        timeout=30,
        check=False,
    )
    return ProcResult(done.returncode, None, False, 1, done.stdout, done.stderr)


def usable(report: dict[str, Any], name: str) -> bool:
    value = report[name]
    return bool(value)


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("name", CLI_NAMES)
def test_fake_cli_honours_the_role(tmp_path: Path, fakes: Path, name: str, role: str) -> None:
    """The fake derives the usable classes from argv as the real CLI documents it: exactly
    the denied classes ``enforces`` claims are unusable (no over-claim, no under-claim)."""
    adapter = dataclasses.replace(ADAPTERS[name], executable=str(fakes / name))  # type: ignore[type-var]
    made = request(tmp_path, role)
    report_file = tmp_path / "report.json"
    result = run_fake(adapter, made, report_file)
    assert result.exit_code == 0, result.stderr.decode()
    output = adapter.parse(made, result)
    assert output.ok, output.error
    report = json.loads(report_file.read_text(encoding="utf-8"))
    blocked = {c for c in denied(role) if not usable(report, c)}
    assert blocked == set(enforces(adapter, role)), report
    if role == "agent":
        assert (made.worktree / f"FAKE_{name.upper()}.md").exists()
    if "write" in enforces(adapter, role):
        assert sorted(p.name for p in made.worktree.iterdir()) == []  # nothing written
    # The role flags select behaviour: they are part of the replay key's parameters.
    if output.model_calls:
        recorded = output.model_calls[0].parameters["flags"]
        assert isinstance(recorded, list)
        flags = policy_flags(adapter, made)
        assert all(flag in recorded for flag in flags)


def test_claude_manager_init_lists_no_shell_subagent_or_mcp(tmp_path: Path, fakes: Path) -> None:
    adapter = ClaudeAdapter(executable=str(fakes / "claude"), output_format="stream-json")
    made = request(tmp_path, "manager")
    result = run_fake(adapter, made, tmp_path / "report.json")
    assert result.exit_code == 0, result.stderr.decode()
    init = json.loads(result.stdout.decode().splitlines()[0])
    assert init["subtype"] == "init"
    assert init["mcp_servers"] == []
    assert init["tools"] == ["Glob", "Grep", "Read"]
    plain = run_fake(adapter, request(tmp_path / "plain"), tmp_path / "plain.json")
    init = json.loads(plain.stdout.decode().splitlines()[0])
    assert [s["name"] for s in init["mcp_servers"]] == ["github", "postgres"]
    assert {"Bash", "Agent", "Write"} <= set(init["tools"])


def test_codex_multi_agent_feature_alone_would_not_deny_subagents(
    tmp_path: Path, fakes: Path
) -> None:
    """Why ``agents.enabled=false`` is in the flags: without it the model catalog keeps
    sub-agents on (codex >= 0.145), and the fake says so."""
    adapter = dataclasses.replace(ADAPTERS["codex"], executable=str(fakes / "codex"))  # type: ignore[type-var]
    made = request(tmp_path, "executor")
    argv = adapter.argv(made)
    cut = argv.index("agents.enabled=false")
    weaker = argv[: cut - 1] + argv[cut + 1 :]
    env = {"PATH": os.environ.get("PATH", ""), "FAKE_REPORT": str(tmp_path / "r.json")}
    subprocess.run(weaker, cwd=made.worktree, env=env, input=b"p", check=True, capture_output=True)
    assert json.loads((tmp_path / "r.json").read_text())["subagents"] is True


# ---- the recorded policy --------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_role_policy_records_the_rule(tmp_path: Path, name: str, role: str) -> None:
    adapter = ADAPTERS[name]
    made = request(tmp_path, role, model="m-1")
    policy = role_policy(adapter, made)
    assert set(policy) == {"adapter", "model", "denied", "enforced_by_flags", "flags"}
    assert policy["adapter"] == name
    assert policy["model"] == "m-1"
    assert policy["denied"] == list(denied(role))  # denied(role) is what is recorded
    assert check_classes(policy["denied"]) == denied(role)
    assert set(check_classes(policy["enforced_by_flags"])) <= set(denied(role))
    assert policy["enforced_by_flags"] == list(enforces(adapter, role))
    if (name, role) in {("claude", "manager"), ("codex", "auditor")}:
        assert policy["enforced_by_flags"] == list(denied(role)) != []
    assert all(isinstance(flag, str) for flag in policy["flags"])
    assert str(tmp_path) not in " ".join(policy["flags"])  # no host paths, no prompt
    assert "Write the marker." not in " ".join(policy["flags"])
    assert list(Draft202012Validator(SCHEMA).iter_errors(policy)) == []
    assert role_policy(adapter, dataclasses.replace(made, model=None))["model"] is None


def test_schema_refuses_malformed_policies() -> None:
    good = {"adapter": "codex", "model": None, "denied": ["write"], "enforced_by_flags": [],
            "flags": []}  # fmt: skip
    validator = Draft202012Validator(SCHEMA)
    assert list(validator.iter_errors(good)) == []
    for bad in (
        {**good, "denied": ["network"]},
        {**good, "denied": ["write", "write"]},
        {**good, "model": 3},
        {**good, "extra": True},
        {key: value for key, value in good.items() if key != "flags"},
        {**good, "flags": [1]},
    ):
        assert list(validator.iter_errors(bad)), bad


def test_uncovered(tmp_path: Path) -> None:
    claude, gemini, opencode = ADAPTERS["claude"], ADAPTERS["gemini"], ADAPTERS["opencode"]
    assert SANDBOX_COVERS == ("write",)
    for role in ROLES:
        assert uncovered(ADAPTERS["codex"], role, read_only_mount=False) == ()
    assert uncovered(claude, "manager", read_only_mount=False) == ()
    assert uncovered(claude, "auditor", read_only_mount=False) == ("write",)
    assert uncovered(claude, "auditor", read_only_mount=True) == ()
    assert uncovered(gemini, "executor", read_only_mount=True) == ("subagents",)
    assert uncovered(opencode, "manager", read_only_mount=True) == ("mcp", "shell", "subagents")
    assert uncovered(opencode, "agent", read_only_mount=False) == ()
    assert uncovered(ADAPTERS["scripted"], "manager", read_only_mount=True) == ()
    assert uncovered(ADAPTERS["scripted"], "manager", read_only_mount=False) == ("write",)


@dataclasses.dataclass(frozen=True)
class Liar:
    """An adapter that claims more than the role is denied and puts its flags elsewhere."""

    name: str = "liar"
    executable: str = "liar"
    env_names: tuple[str, ...] = ()

    def argv(self, request: AgentRequest) -> list[str]:
        return ["liar", "--other"]

    def stdin(self, request: AgentRequest) -> None:
        return None

    def parse(self, request: AgentRequest, result: ProcResult) -> Any:
        raise NotImplementedError

    def policy_flags(self, request: AgentRequest) -> list[str]:
        return ["--deny", "everything"]

    def enforces(self, role: str) -> tuple[str, ...]:
        return ("write", "mcp", "shell", "subagents")


@dataclasses.dataclass(frozen=True)
class Unaware:
    """An adapter written before roles: no policy methods at all."""

    name: str = "old"
    executable: str = "old"
    env_names: tuple[str, ...] = ()

    def argv(self, request: AgentRequest) -> list[str]:
        return ["old"]

    def stdin(self, request: AgentRequest) -> None:
        return None

    def parse(self, request: AgentRequest, result: ProcResult) -> Any:
        raise NotImplementedError


def test_enforces_is_clipped_and_flags_must_be_on_argv(tmp_path: Path) -> None:
    assert enforces(Liar(), "auditor") == ("subagents", "write")  # sorted, within denied
    assert enforces(Liar(), "agent") == ()
    with pytest.raises(AdapterConfigError, match="not on its command line"):
        role_policy(Liar(), request(tmp_path, "manager"))
    assert policy_flags(Unaware(), request(tmp_path, "manager")) == []
    assert enforces(Unaware(), "manager") == ()
    assert role_policy(Unaware(), request(tmp_path, "auditor"))["enforced_by_flags"] == []
    assert uncovered(Unaware(), "auditor", read_only_mount=True) == ("subagents",)
    with pytest.raises(AdapterConfigError, match="unknown role"):
        enforces(Unaware(), "boss")
    with pytest.raises(AdapterConfigError, match="unknown role"):
        role_denied("boss")
    assert role_denied("executor") == ("subagents",)
