"""Adapters: argv shapes, fake CLIs run for real, parsing of good and bad output, and the
scripted agent applying edits through the replay journal."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.adapters import (
    ADAPTERS,
    AdapterConfigError,
    AgentRequest,
    AiderAdapter,
    ClaudeAdapter,
    CodexAdapter,
    CommandAdapter,
    GeminiAdapter,
    GooseAdapter,
    OpencodeAdapter,
    ScriptedAdapter,
    UnknownAdapterError,
    get_adapter,
    register_adapter,
)
from harness.orchestrate.adapters.base import SUMMARY_LIMIT, Adapter
from harness.orchestrate.model import Batch, Edit, ProcResult, TaskSpec
from harness.orchestrate.replay import Journal, call_key
from harness.orchestrate.scripted_agent import (
    FAKE_MODEL_PARAMETERS,
    WorkfileError,
    load_workfile,
    write_scripted_workfile,
)

FAKES = Path(__file__).parent / "fakes"
CLI_NAMES = ("claude", "codex", "gemini", "aider", "goose", "opencode")
NASTY_PROMPT = "--version; rm -rf / && echo $(whoami) `id` 'quoted' \"dq\"\nsecond line {prompt}"

try:
    from harness.orchestrate.proc import run_process
except ImportError:  # pragma: no cover - proc.py is written concurrently
    run_process = None  # type: ignore[assignment]


def run(
    argv: list[str],
    cwd: Path,
    *,
    timeout_s: float = 30.0,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
) -> ProcResult:
    """Run argv like the runtime does (harness.orchestrate.proc.run_process when present)."""
    environment = {**os.environ, **(env or {})}
    if run_process is not None:
        return run_process(
            argv, cwd=cwd, timeout_s=timeout_s, grace_s=0.5, env=environment, stdin=stdin
        )
    start = time.monotonic()
    try:
        done = subprocess.run(
            argv, cwd=cwd, env=environment, capture_output=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired as exc:
        return ProcResult(None, "SIGKILL", True, int(timeout_s * 1000), exc.stdout or b"", b"")
    return ProcResult(
        done.returncode if done.returncode >= 0 else None,
        None if done.returncode >= 0 else f"SIG{-done.returncode}",
        False,
        int((time.monotonic() - start) * 1000),
        done.stdout,
        done.stderr,
    )


@pytest.fixture(scope="module")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake CLIs, copied and made executable (git may not keep the mode bits)."""
    folder = tmp_path_factory.mktemp("fakes")
    for source in FAKES.iterdir():
        if source.is_file():
            target = folder / source.name
            shutil.copyfile(source, target)
            target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return folder


def make_request(
    tmp_path: Path,
    *,
    prompt: str = "Write the fake marker file.",
    model: str | None = None,
    adapter: str = "claude",
    tasks: tuple[TaskSpec, ...] | None = None,
    journal: Journal | None = None,
) -> AgentRequest:
    worktree = tmp_path / "worktree"
    scratch = tmp_path / "scratch"
    worktree.mkdir(parents=True, exist_ok=True)
    scratch.mkdir(parents=True, exist_ok=True)
    tasks = tasks or (TaskSpec(id="t1", role="dev", prompt=prompt, adapter=adapter),)
    request = AgentRequest(
        batch=Batch(id="b1", role="dev", adapter=adapter, tasks=tuple(t.id for t in tasks)),
        tasks=tasks,
        worktree=worktree,
        prompt=prompt,
        prompt_file=scratch / "prompt.txt",
        model=model,
        journal_file=journal.path if journal is not None else None,
        workfile=scratch / "work.json",
        journal_mode=journal.mode if journal is not None else "live",
        allow_live_miss=journal.allow_live_miss if journal is not None else False,
    )
    request.prompt_file.write_text(prompt, encoding="utf-8")
    return request


def fake_adapter(name: str, fakes: Path, **changes: Any) -> Adapter:
    adapter: Any = ADAPTERS[name]
    return dataclasses.replace(adapter, executable=str(fakes / name), **changes)  # type: ignore[no-any-return]


def proc(
    stdout: bytes | str = b"", stderr: bytes = b"", code: int | None = 0, **kw: Any
) -> ProcResult:
    data = stdout.encode() if isinstance(stdout, str) else stdout
    return ProcResult(code, kw.get("signal"), kw.get("timed_out", False), 10, data, stderr)


# ---- registry -------------------------------------------------------------------------------


def test_registry_holds_every_adapter() -> None:
    assert set(ADAPTERS) == {"scripted", *CLI_NAMES}
    for name, adapter in ADAPTERS.items():
        assert get_adapter(name) is adapter
        assert adapter.name == name
    assert ADAPTERS["claude"].executable == "claude"
    assert ADAPTERS["scripted"].executable == sys.executable


def test_unknown_adapter_is_refused() -> None:
    with pytest.raises(UnknownAdapterError, match="unknown adapter 'nope'"):
        get_adapter("nope")
    with pytest.raises(UnknownAdapterError, match="argv template"):
        get_adapter("command")
    with pytest.raises(LookupError):
        get_adapter("nope")


def test_register_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("harness.orchestrate.adapters.ADAPTERS", dict(ADAPTERS))
    from harness.orchestrate import adapters

    command = CommandAdapter(template=("true",))
    register_adapter(command)
    assert adapters.get_adapter("command") is command


# ---- argv shapes ----------------------------------------------------------------------------


def test_argv_shapes(tmp_path: Path) -> None:
    plain = make_request(tmp_path, prompt="P")
    model = make_request(tmp_path, prompt="P", model="M")
    scratch = tmp_path / "scratch"
    expected: dict[str, tuple[list[str], list[str]]] = {
        "claude": (
            ["claude", "-p", "--output-format", "json", "--permission-mode", "acceptEdits"],
            ["claude", "-p", "--output-format", "json", "--permission-mode", "acceptEdits",
             "--model", "M"],
        ),
        "codex": (
            ["codex", "exec", "--json", "--full-auto", "--skip-git-repo-check", "-"],
            ["codex", "exec", "--json", "--full-auto", "--skip-git-repo-check", "-m", "M", "-"],
        ),
        "gemini": (
            ["gemini", "--output-format", "json", "--approval-mode", "auto_edit"],
            ["gemini", "--output-format", "json", "--approval-mode", "auto_edit", "--model", "M"],
        ),
        "aider": (
            ["aider", f"--message-file={scratch / 'prompt.txt'}", "--yes-always",
             "--no-auto-commits", "--no-gitignore", "--no-pretty", "--no-stream",
             "--no-check-update", f"--chat-history-file={scratch / 'aider.chat.history.md'}",
             f"--input-history-file={scratch / 'aider.input.history'}"],
            ["aider", f"--message-file={scratch / 'prompt.txt'}", "--yes-always",
             "--no-auto-commits", "--no-gitignore", "--no-pretty", "--no-stream",
             "--no-check-update", f"--chat-history-file={scratch / 'aider.chat.history.md'}",
             f"--input-history-file={scratch / 'aider.input.history'}", "--model=M"],
        ),
        "goose": (
            ["goose", "run", "--no-session", "--with-builtin", "developer", "--instructions",
             "-"],
            ["goose", "run", "--no-session", "--with-builtin", "developer", "--model", "M",
             "--instructions", "-"],
        ),
        "opencode": (
            ["opencode", "run", "--format", "json"],
            ["opencode", "run", "--format", "json", "--model", "M"],
        ),
    }  # fmt: skip
    for name, (without_model, with_model) in expected.items():
        assert ADAPTERS[name].argv(plain) == without_model, name
        assert ADAPTERS[name].argv(model) == with_model, name


def test_claude_stream_json_needs_verbose(tmp_path: Path) -> None:
    argv = ClaudeAdapter(output_format="stream-json").argv(make_request(tmp_path, prompt="P"))
    assert argv[:5] == ["claude", "-p", "--output-format", "stream-json", "--verbose"]


def test_scripted_argv(tmp_path: Path) -> None:
    request = make_request(tmp_path, adapter="scripted", model="m1")
    argv = ScriptedAdapter().argv(request)
    assert argv == [
        sys.executable, "-P", "-m", "harness.orchestrate.scripted_agent",
        "--edits", str(request.workfile), "--model", "m1",
    ]  # fmt: skip
    journal = Journal(tmp_path / "journal", "replay", allow_live_miss=True)
    request = make_request(tmp_path, adapter="scripted", journal=journal)
    argv = ScriptedAdapter(sleep_s=1.5, ignore_sigterm=True).argv(request)
    assert argv[6:] == [
        "--journal", str(tmp_path / "journal"), "--mode", "replay", "--allow-live-miss",
        "--sleep", "1.5", "--ignore-sigterm",
    ]  # fmt: skip
    with pytest.raises(AdapterConfigError, match="workfile"):
        ScriptedAdapter().argv(dataclasses.replace(request, workfile=None))


@pytest.mark.parametrize("name", (*CLI_NAMES, "command"))
def test_prompt_never_on_the_command_line(tmp_path: Path, name: str) -> None:
    """A command line is readable by every local user (ps, /proc/PID/cmdline): the prompt goes
    to stdin or to the prompt file. (Fails on the old adapters, which put it on argv.)"""
    adapter = (
        CommandAdapter(template=("mycli", "--file", "{prompt_file}"))
        if name == "command"
        else ADAPTERS[name]
    )
    request = make_request(tmp_path, prompt=NASTY_PROMPT)
    argv = adapter.argv(request)
    for line in NASTY_PROMPT.splitlines():
        assert not any(line in arg for arg in argv), (name, argv)
    piped = adapter.stdin(request)
    if piped is not None:
        assert piped == NASTY_PROMPT.encode()
    else:  # the CLI reads the prompt file, whose path is on the command line
        assert any(str(request.prompt_file) in arg for arg in argv)


# ---- the fakes, run for real ----------------------------------------------------------------

EXPECTED_MODEL = {
    "claude": "claude-sonnet-4-5-20250929",
    "codex": "unspecified",
    "gemini": "gemini-2.5-pro",
    "aider": "anthropic/claude-sonnet-4-20250514",
    "goose": "claude-sonnet-4-20250514",
    "opencode": "unspecified",
}


@pytest.mark.parametrize("name", CLI_NAMES)
def test_fake_cli_round_trip(tmp_path: Path, fakes: Path, name: str) -> None:
    adapter = fake_adapter(name, fakes)
    request = make_request(tmp_path, prompt=NASTY_PROMPT, adapter=name)
    result = run(adapter.argv(request), request.worktree, stdin=adapter.stdin(request))
    assert result.exit_code == 0, result.stderr.decode()
    output = adapter.parse(request, result)
    assert output.ok, output.error
    assert output.error is None
    assert "FAKE_" in output.summary
    marker = request.worktree / f"FAKE_{name.upper()}.md"
    assert marker.read_text(encoding="utf-8") == f"# written by fake {name}\n\n{NASTY_PROMPT}\n"
    assert sorted(p.name for p in request.worktree.iterdir()) == [marker.name]  # nothing stray
    (call,) = output.model_calls
    assert call.adapter == name
    assert call.request == NASTY_PROMPT
    assert call.model == EXPECTED_MODEL[name]
    assert "FAKE_" in call.response
    flags = call.parameters["flags"]
    assert isinstance(flags, list)
    assert NASTY_PROMPT not in " ".join(flags)  # the prompt is the request, not a parameter
    assert str(tmp_path) not in " ".join(flags)  # host paths are not answer-changing


@pytest.mark.parametrize("name", CLI_NAMES)
def test_fake_cli_reports_requested_model(tmp_path: Path, fakes: Path, name: str) -> None:
    adapter = fake_adapter(name, fakes)
    request = make_request(tmp_path, model="my-model", adapter=name)
    output = adapter.parse(
        request, run(adapter.argv(request), request.worktree, stdin=adapter.stdin(request))
    )
    assert output.ok, output.error
    assert output.model_calls[0].model == "my-model"


def test_claude_stream_json_round_trip(tmp_path: Path, fakes: Path) -> None:
    adapter = fake_adapter("claude", fakes, output_format="stream-json")
    request = make_request(tmp_path, model="opus")
    output = adapter.parse(
        request, run(adapter.argv(request), request.worktree, stdin=adapter.stdin(request))
    )
    assert output.ok, output.error
    assert output.model_calls[0].model == "opus"  # from the init message
    assert (request.worktree / "FAKE_CLAUDE.md").exists()


FAIL_ERRORS = {
    "claude": "claude reported an error (success): API Error: 401",
    "codex": "codex error: stream error: unexpected status 401",
    "gemini": "gemini reported an error: [FatalAuthenticationError 41] API key not valid.",
    "aider": "aider reported an error: litellm.AuthenticationError",
    "goose": "goose exited with status 1: Error: Request failed: Authentication failed",
    "opencode": "opencode reported an error: ProviderAuthError: invalid api key",
}
GARBAGE_ERRORS = {
    "claude": "claude: ",
    "codex": "codex: line 3 is not JSON",
    "gemini": "gemini: output is not JSON",
    "aider": "aider: no output",
    "goose": "goose: no output",
    "opencode": "opencode: line 2 is not JSON",
}


@pytest.mark.parametrize("name", CLI_NAMES)
@pytest.mark.parametrize("mode", ["fail", "garbage"])
def test_fake_cli_error_modes(tmp_path: Path, fakes: Path, name: str, mode: str) -> None:
    adapter = fake_adapter(name, fakes)
    request = make_request(tmp_path, adapter=name)
    result = run(
        adapter.argv(request),
        request.worktree,
        stdin=adapter.stdin(request),
        env={"FAKE_MODE": mode},
    )
    output = adapter.parse(request, result)
    assert not output.ok
    assert output.model_calls == ()
    expected = (FAIL_ERRORS if mode == "fail" else GARBAGE_ERRORS)[name]
    assert output.error is not None
    assert output.error.startswith(expected), output.error


@pytest.mark.parametrize("name", CLI_NAMES)
def test_fake_cli_slow_is_timed_out(tmp_path: Path, fakes: Path, name: str) -> None:
    adapter = fake_adapter(name, fakes)
    request = make_request(tmp_path, adapter=name)
    result = run(
        adapter.argv(request),
        request.worktree,
        stdin=adapter.stdin(request),
        timeout_s=0.5,
        env={"FAKE_MODE": "slow"},
    )
    assert result.timed_out
    output = adapter.parse(request, result)
    assert not output.ok
    assert output.error is not None
    assert output.error.startswith(f"{name} timed out after")


@pytest.mark.parametrize("name", CLI_NAMES)
def test_fakes_refuse_unknown_flags(tmp_path: Path, fakes: Path, name: str) -> None:
    adapter = fake_adapter(name, fakes)
    request = make_request(tmp_path, adapter=name)
    argv = adapter.argv(request)
    argv.insert(2 if argv[1] in {"exec", "run"} else 1, "--no-such-flag")
    result = run(argv, request.worktree, stdin=adapter.stdin(request))
    assert result.exit_code == 2
    assert b"--no-such-flag" in result.stderr
    output = adapter.parse(request, result)
    assert not output.ok
    assert output.error is not None
    assert f"{name} exited with status 2" in output.error


@pytest.mark.parametrize(
    ("name", "drop"),
    [
        ("claude", ["--permission-mode", "acceptEdits"]),
        ("codex", ["--full-auto"]),
        ("gemini", ["--approval-mode", "auto_edit"]),
        ("aider", ["--yes-always"]),
        ("goose", ["--with-builtin", "developer"]),
    ],
)
def test_fakes_need_the_flags_that_allow_edits(
    tmp_path: Path, fakes: Path, name: str, drop: list[str]
) -> None:
    """The non-interactive permission flags are what lets the real CLIs edit files."""
    adapter = fake_adapter(name, fakes)
    request = make_request(tmp_path, adapter=name)
    argv = adapter.argv(request)
    start = argv.index(drop[0])
    assert argv[start : start + len(drop)] == drop
    del argv[start : start + len(drop)]
    result = run(argv, request.worktree, stdin=adapter.stdin(request))
    assert result.exit_code == 0
    assert not (request.worktree / f"FAKE_{name.upper()}.md").exists()


def test_aider_keeps_its_files_out_of_the_worktree(tmp_path: Path, fakes: Path) -> None:
    adapter = fake_adapter("aider", fakes)
    request = make_request(tmp_path, adapter="aider")
    assert adapter.parse(
        request, run(adapter.argv(request), request.worktree, stdin=adapter.stdin(request))
    ).ok
    assert sorted(p.name for p in request.worktree.iterdir()) == ["FAKE_AIDER.md"]
    assert (request.prompt_file.parent / "aider.chat.history.md").exists()


# ---- parsing edge cases (no process) -------------------------------------------------------


def test_claude_parse_edge_cases(tmp_path: Path) -> None:
    adapter = ClaudeAdapter()
    request = make_request(tmp_path)
    good = {"type": "result", "subtype": "success", "is_error": False, "result": "done"}
    assert adapter.parse(request, proc(json.dumps(good))).ok
    # success JSON but a failing exit status
    out = adapter.parse(request, proc(json.dumps(good), b"boom", code=3))
    assert (out.ok, out.error) == (False, "claude exited with status 3: boom")
    # --verbose json prints an array of messages
    array = [{"type": "system", "subtype": "init", "model": "m-init"}, good]
    out = adapter.parse(request, proc(json.dumps(array)))
    assert out.ok
    assert out.model_calls[0].model == "m-init"
    for bad, error in [
        ("", "claude: no output"),
        ("[1, 2]", "claude: no result object in the output"),
        ("42", "claude: output is JSON but neither an object nor an array"),
        (json.dumps({**good, "result": 7}), "claude: result object has no text 'result'"),
        (json.dumps({**good, "subtype": "error_max_turns", "is_error": False}),
         "claude reported an error (error_max_turns)"),
        ("{\"type\": \"result\"\n{oops}\n", "claude: line 1 is not JSON"),
    ]:  # fmt: skip
        out = adapter.parse(request, proc(bad))
        assert not out.ok
        assert out.error is not None
        assert out.error.startswith(error), out.error


def test_codex_parse_edge_cases(tmp_path: Path) -> None:
    adapter = CodexAdapter()
    request = make_request(tmp_path)
    started = '{"type":"thread.started","thread_id":"x"}\n{"type":"turn.started"}\n'
    out = adapter.parse(request, proc(started))
    assert out.error == "codex: the stream ended without turn.completed"
    out = adapter.parse(request, proc(started + '{"type":"turn.completed","usage":{}}\n'))
    assert out.ok
    assert out.model_calls == ()  # no agent message, no model answer to record
    out = adapter.parse(request, proc(started + "[1]\n"))
    assert out.error == "codex: line 3 is not a JSON object: '[1]'"
    out = adapter.parse(request, proc(b"", b"fatal: not logged in", code=1))
    assert out.error == "codex exited with status 1: fatal: not logged in"


def test_gemini_parse_edge_cases(tmp_path: Path) -> None:
    adapter = GeminiAdapter()
    request = make_request(tmp_path)
    out = adapter.parse(request, proc('{"response": "hi"}'))
    assert out.ok
    assert out.model_calls[0].model == "unspecified"
    out = adapter.parse(request, proc('{"error": {"message": "quota"}}', code=1))
    assert out.error == "gemini reported an error: quota"
    out = adapter.parse(request, proc('{"stats": {}}'))
    assert out.error == "gemini: no text 'response' in the output"
    out = adapter.parse(request, proc("", b"not json either", code=42))
    assert out.error == "gemini exited with status 42: not json either"


def test_opencode_parse_takes_the_last_step_with_text(tmp_path: Path) -> None:
    adapter = OpencodeAdapter()
    request = make_request(tmp_path)
    lines = [
        {"type": "step_start"},
        {"type": "text", "part": {"text": "thinking "}},
        {"type": "text", "part": {"text": "aloud"}},
        {"type": "step_finish", "part": {"reason": "tool-calls"}},
        {"type": "step_start"},
        {"type": "text", "part": {"text": "final"}},
    ]  # the last step_finish is missing (seen with some versions)
    out = adapter.parse(request, proc("\n".join(json.dumps(line) for line in lines)))
    assert (out.ok, out.summary) == (True, "final")
    out = adapter.parse(request, proc('{"type":"text","part":{}}'))
    assert out.error == "opencode: text event without part.text"


def test_plaintext_parse_edge_cases(tmp_path: Path) -> None:
    request = make_request(tmp_path)
    out = AiderAdapter().parse(
        request, proc("Aider v0.50\nModel: gpt-4o with diff edit format\nok")
    )
    assert out.ok
    assert out.model_calls[0].model == "gpt-4o"
    out = GooseAdapter().parse(request, proc("just an answer"))
    assert out.ok
    assert out.model_calls[0].model == "unspecified"
    out = GooseAdapter().parse(request, proc(b"\n\n  \n"))
    assert out.error == "goose: no output"
    out = GooseAdapter().parse(request, proc(b"partial", code=None, signal="SIGKILL"))
    assert out.error == "goose was killed by signal SIGKILL"


def test_invalid_utf8_output_is_not_an_exception(tmp_path: Path) -> None:
    request = make_request(tmp_path)
    for name in CLI_NAMES:
        out = ADAPTERS[name].parse(request, proc(b"\xff\xfe\x00garbage\x80"))
        assert isinstance(out.ok, bool)
        assert out.ok == (name in {"aider", "goose"})  # plain text takes any text


# ---- the command adapter --------------------------------------------------------------------

ECHO_ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"


def test_command_adapter_substitutes_without_a_shell(tmp_path: Path) -> None:
    adapter = CommandAdapter(
        template=(
            sys.executable, "-c", ECHO_ARGV, "{prompt_file}", "--model={model}",
            "{worktree}", "{unknown} {prompt}", "a;b", "$(touch pwned)",
        )
    )  # fmt: skip
    nasty = tmp_path / "dir; rm -rf / $(touch pwned) {model}"
    nasty.mkdir(parents=True)
    request = make_request(nasty, prompt=NASTY_PROMPT, model="m; touch pwned2 {worktree}")
    argv = adapter.argv(request)
    assert adapter.executable == sys.executable
    assert argv[3:] == [
        str(request.prompt_file),
        "--model=m; touch pwned2 {worktree}",  # a value is never expanded again
        str(request.worktree),
        "{unknown} {prompt}",
        "a;b",
        "$(touch pwned)",
    ]
    result = run(argv, request.worktree)
    output = adapter.parse(request, result)
    assert output.ok, output.error
    assert json.loads(output.summary) == argv[3:]
    assert not any(p.name.startswith("pwned") for p in request.worktree.rglob("*"))
    assert not (Path.cwd() / "pwned").exists()
    assert output.model_calls == ()


def test_command_adapter_model_defaults(tmp_path: Path) -> None:
    request = make_request(tmp_path)
    assert CommandAdapter(template=("x", "{model}")).argv(request) == ["x", ""]
    adapter = CommandAdapter.from_template(["x", "{model}"], default_model="dflt", name="mine")
    assert (adapter.name, adapter.argv(request)) == ("mine", ["x", "dflt"])
    with_model = make_request(tmp_path, model="asked")
    assert adapter.argv(with_model) == ["x", "asked"]


def test_command_adapter_rejects_bad_templates() -> None:
    with pytest.raises(AdapterConfigError):
        CommandAdapter(template=())
    with pytest.raises(AdapterConfigError):
        CommandAdapter(template="echo hi")  # type: ignore[arg-type]
    with pytest.raises(AdapterConfigError):
        CommandAdapter(template=("echo", 3))  # type: ignore[arg-type]


def test_command_adapter_summary_is_the_tail(tmp_path: Path) -> None:
    adapter = CommandAdapter(template=("x",))
    request = make_request(tmp_path)
    body = "".join(f"line {i:05d}\n" for i in range(1000))
    out = adapter.parse(request, proc(body))
    assert out.ok
    assert len(out.summary.encode()) <= SUMMARY_LIMIT
    assert body.rstrip().endswith(out.summary)
    out = adapter.parse(request, proc("tail", b"bad things", code=4))
    assert (out.ok, out.error) == (False, "command exited with status 4: bad things")
    out = adapter.parse(request, proc(b"", timed_out=True, code=None, signal="SIGKILL"))
    assert out.error == "command timed out after 10 ms (stopped with SIGKILL)"


def test_command_adapter_reads_the_prompt_file(tmp_path: Path) -> None:
    script = "import pathlib, sys; print(pathlib.Path(sys.argv[1]).read_text())"
    adapter = CommandAdapter(template=(sys.executable, "-c", script, "{prompt_file}"))
    request = make_request(tmp_path, prompt=NASTY_PROMPT)
    output = adapter.parse(
        request, run(adapter.argv(request), request.worktree, stdin=adapter.stdin(request))
    )
    assert output.ok
    assert output.summary == NASTY_PROMPT.strip()


# ---- the scripted agent ---------------------------------------------------------------------


def scripted_request(
    tmp_path: Path, edits: list[Edit], *, journal: Journal | None = None, prompt: str = "Do it"
) -> AgentRequest:
    task = TaskSpec(id="t1", role="dev", prompt=prompt, edits=tuple(edits))
    request = make_request(tmp_path, prompt=prompt, adapter="scripted", tasks=(task,),
                           journal=journal)  # fmt: skip
    write_scripted_workfile(request, request.workfile)
    return request


def run_scripted(request: AgentRequest, adapter: ScriptedAdapter | None = None) -> Any:
    adapter = adapter or ScriptedAdapter()
    result = run(adapter.argv(request), request.worktree, stdin=adapter.stdin(request))
    return result, adapter.parse(request, result)


def tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


EDITS = [
    Edit("README.md", "new readme\n"),
    Edit("deep/er/nested/file.txt", "nested ✓\r\nwith CRLF kept\r\n"),
    Edit("old.txt", None),
    Edit("missing.txt", None),
    Edit("twice.txt", "first"),
    Edit("twice.txt", "second"),
]


def seed(worktree: Path) -> None:
    (worktree / "README.md").write_text("old readme\n")
    (worktree / "old.txt").write_text("to delete\n")
    (worktree / "keep.txt").write_text("untouched\n")


def test_scripted_agent_applies_edits(tmp_path: Path) -> None:
    request = scripted_request(tmp_path, EDITS)
    seed(request.worktree)
    result, output = run_scripted(request)
    assert result.exit_code == 0, result.stderr.decode()
    assert output.ok, output.error
    assert tree(request.worktree) == {
        "README.md": b"new readme\n",
        "deep/er/nested/file.txt": "nested ✓\r\nwith CRLF kept\r\n".encode(),
        "keep.txt": b"untouched\n",
        "twice.txt": b"second",
    }
    assert output.summary == (
        "t1: wrote README.md, deep/er/nested/file.txt, twice.txt; deleted old.txt; "
        "already absent missing.txt"
    )
    requests = [call.request for call in output.model_calls]
    assert requests == ["Do it\nREADME.md", "Do it\ndeep/er/nested/file.txt", "Do it\ntwice.txt"]
    assert [call.response for call in output.model_calls] == [
        "new readme\n", "nested ✓\r\nwith CRLF kept\r\n", "second",
    ]  # fmt: skip
    assert {call.adapter for call in output.model_calls} == {"scripted"}
    assert {call.model for call in output.model_calls} == {"scripted-echo"}


def test_scripted_agent_is_deterministic(tmp_path: Path) -> None:
    runs = []
    for name in ("one", "two"):
        request = scripted_request(tmp_path / name, EDITS)
        seed(request.worktree)
        result, output = run_scripted(request)
        runs.append((tree(request.worktree), result.stdout, output))
    assert runs[0] == runs[1]


def test_scripted_agent_several_tasks_in_order(tmp_path: Path) -> None:
    tasks = (
        TaskSpec(id="a", role="dev", prompt="A", edits=(Edit("x.txt", "from a"),)),
        TaskSpec(id="b", role="dev", prompt="B", edits=(Edit("x.txt", "from b"), Edit("y", "y"))),
    )
    request = make_request(tmp_path, adapter="scripted", tasks=tasks, model="echo-2")
    write_scripted_workfile(request)
    _, output = run_scripted(request)
    assert output.ok, output.error
    assert tree(request.worktree) == {"x.txt": b"from b", "y": b"y"}
    assert output.summary == "a: wrote x.txt\nb: wrote x.txt, y"
    assert [c.model for c in output.model_calls] == ["echo-2"] * 3


def test_scripted_agent_through_the_journal(tmp_path: Path) -> None:
    journal_dir = tmp_path / "journal"
    live = scripted_request(tmp_path / "live", EDITS[:2], journal=Journal(journal_dir, "live"))
    _, output = run_scripted(live)
    assert output.ok, output.error
    assert len(Journal(journal_dir, "replay")) == 2

    # Replay: the journaled answers are written even though the workfile now says otherwise.
    changed = [Edit("README.md", "CHANGED"), EDITS[1]]
    replay = scripted_request(tmp_path / "replay", changed, journal=Journal(journal_dir, "replay"))
    result, replayed = run_scripted(replay)
    assert replayed.ok, replayed.error
    assert tree(replay.worktree) == tree(live.worktree)
    assert [c.response for c in replayed.model_calls] == [c.response for c in output.model_calls]
    sources = [json.loads(line)["source"] for line in result.stdout.splitlines()[:-1]]
    assert sources == ["journal", "journal"]
    assert replayed.model_calls == output.model_calls


def test_scripted_agent_replay_miss_aborts(tmp_path: Path) -> None:
    journal_dir = tmp_path / "journal"
    request = scripted_request(
        tmp_path, [Edit("new.txt", "never journaled")], journal=Journal(journal_dir, "replay")
    )
    result, output = run_scripted(request)
    assert result.exit_code == 1
    assert not output.ok
    assert output.error is not None
    assert output.error.startswith("scripted agent failed: replay miss: no journaled answer")
    assert "'Do it\\nnew.txt'" in output.error
    assert not (request.worktree / "new.txt").exists()

    allowed = scripted_request(
        tmp_path / "allowed",
        [Edit("new.txt", "now journaled")],
        journal=Journal(journal_dir, "replay", allow_live_miss=True),
    )
    _, output = run_scripted(allowed)
    assert output.ok, output.error
    key = call_key("scripted", "scripted-echo", "Do it\nnew.txt", FAKE_MODEL_PARAMETERS)
    assert Journal(journal_dir, "replay").lookup(key) == "now journaled"


@pytest.mark.parametrize(
    "path", ["../escape.txt", "/etc/passwd", "a/../../b", ".git/config", "sub/.git/x", "", "."]
)
def test_scripted_workfile_refuses_paths_outside(tmp_path: Path, path: str) -> None:
    with pytest.raises(WorkfileError, match="refused path"):
        scripted_request(tmp_path, [Edit(path, "x")])


def test_scripted_agent_refuses_symlink_escapes(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    request = scripted_request(tmp_path, [Edit("link/file.txt", "x")])
    (request.worktree / "link").symlink_to(outside)
    _, output = run_scripted(request)
    assert not output.ok
    assert output.error is not None
    assert "resolves outside the worktree" in output.error
    assert list(outside.iterdir()) == []


def test_scripted_agent_refuses_a_tampered_workfile(tmp_path: Path) -> None:
    request = scripted_request(tmp_path, [Edit("ok.txt", "x")])
    assert request.workfile is not None
    document = json.loads(request.workfile.read_bytes())
    document["tasks"][0]["edits"][0]["path"] = "../../evil"
    request.workfile.write_text(json.dumps(document))
    result, output = run_scripted(request)
    assert result.exit_code == 1
    assert output.error is not None
    assert "refused path '../../evil'" in output.error
    request.workfile.write_text("{not json")
    _, output = run_scripted(request)
    assert output.error is not None
    assert "not JSON" in output.error
    request.workfile.unlink()
    _, output = run_scripted(request)
    assert output.error is not None
    assert "No such file" in output.error


def test_scripted_workfile_round_trip(tmp_path: Path) -> None:
    request = scripted_request(tmp_path, EDITS)
    assert request.workfile is not None
    work = load_workfile(request.workfile)
    assert work.batch == "b1"
    assert work.model == "scripted-echo"
    assert [(e.path, e.content) for e in work.tasks[0].edits] == [
        (e.path, e.content) for e in EDITS
    ]


def test_scripted_agent_timeout_and_ignored_sigterm(tmp_path: Path) -> None:
    request = scripted_request(tmp_path, [Edit("late.txt", "x")])
    adapter = ScriptedAdapter(sleep_s=30, ignore_sigterm=True)
    result = run(
        adapter.argv(request), request.worktree, stdin=adapter.stdin(request), timeout_s=0.5
    )
    assert result.timed_out
    output = adapter.parse(request, result)
    assert not output.ok
    assert output.error is not None
    assert output.error.startswith("scripted timed out after")
    assert not (request.worktree / "late.txt").exists()


def test_scripted_parse_edge_cases(tmp_path: Path) -> None:
    adapter = ScriptedAdapter()
    request = make_request(tmp_path, adapter="scripted")
    out = adapter.parse(request, proc(""))
    assert out.error == "scripted agent: no result line"
    out = adapter.parse(request, proc('{"type":"hello"}\n'))
    assert out.error == "scripted agent: unknown event type 'hello' (#1)"
    out = adapter.parse(request, proc('{"type":"model_call","model":1}\n{"type":"result"}'))
    assert out.error == "scripted agent: malformed model_call event #1"
    out = adapter.parse(request, proc('{"type":"result","ok":true,"summary":"s"}', code=5))
    assert out.error == 'scripted exited with status 5: {"type":"result","ok":true,"summary":"s"}'
    out = adapter.parse(request, proc(b"", b"usage: ...", code=2))
    assert out.error == "scripted exited with status 2: usage: ..."
    good = '{"type":"result","ok":true,"summary":"s","error":null}'
    assert adapter.parse(request, proc(good)) == adapter.parse(request, proc(good + "\n\n"))


def test_scripted_agent_cli_usage_errors(tmp_path: Path) -> None:
    request = scripted_request(tmp_path, [Edit("a", "b")])
    base = ScriptedAdapter().argv(request)
    for extra in (["--mode", "live"], ["--journal", str(tmp_path / "j")], ["--sleep", "-1"]):
        result = run(base + extra, request.worktree)
        assert result.exit_code == 2, extra
        assert not ScriptedAdapter().parse(request, result).ok
