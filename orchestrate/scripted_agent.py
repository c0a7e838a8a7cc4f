"""The scripted agent: a deterministic, offline stand-in for an agent CLI.

A real program, run by the runtime as a subprocess in the batch's worktree (its working
directory)::

    python -P -m harness.orchestrate.scripted_agent --edits WORKFILE
        [--journal JOURNAL --mode live|replay [--allow-live-miss]] [--model M]
        [--sleep SECONDS] [--ignore-sigterm]

It applies the edits of the batch's tasks (create/overwrite a file, creating folders; delete
a file) in workfile order. Each file's content comes from a "model": ``fake_model``, a pure
function whose response to the request ``"<task prompt>\\n<path>"`` is the content the
workfile holds for that edit. With ``--journal`` every call goes through the replay journal
(``harness.orchestrate.replay``): in replay mode the journaled answer is written, and a miss
aborts the agent unless ``--allow-live-miss``. Deletions need no model call.

Output (stdout), one JSON object per line, then exit status 0 (ok) or 1 (failed)::

    {"type": "model_call", "adapter": "scripted", "model": M, "request": ..., "response": ...,
     "parameters": {...}, "key": "<call_key>", "source": "live"|"journal"|"fake"}
    {"type": "turn.completed", "usage": {"input_tokens": 0, "output_tokens": N}}
    {"type": "result", "ok": true, "summary": "...", "error": null}

(``turn.completed`` only when a task of the workfile has ``tokens``: the usage a model would
report, in Codex's shape, read by the scripted adapter's meter.)

Test options: ``--sleep`` waits before working; ``--ignore-sigterm`` ignores SIGTERM (so only
the runtime's SIGKILL escalation stops it).

Workfile (JSON, written by ``write_scripted_workfile``; ``content`` null deletes)::

    {"format": "harness.scripted-workfile/1", "batch": "b1", "model": "scripted-echo",
     "tasks": [{"id": "t1", "prompt": "...",
                "edits": [{"path": "docs/a.md", "content": "..."},
                          {"path": "old.txt", "content": null}]}]}

Paths are repository-relative POSIX paths; absolute paths, ``..``, ``.git`` and anything
resolving outside the working directory (through a symlink) are refused.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Final

from harness.verify.canonical import canonical_bytes

from .replay import Journal, ReplayError, call_key

if TYPE_CHECKING:
    from .adapters.base import AgentRequest

WORKFILE_FORMAT: Final = "harness.scripted-workfile/1"
DEFAULT_MODEL: Final = "scripted-echo"
ADAPTER: Final = "scripted"
FAKE_MODEL_PARAMETERS: Final[Mapping[str, object]] = {"fake_model": 1, "purpose": "file-content"}
"""Parameters of every fake-model call (folded into the replay key): bump ``fake_model`` if the
fake model's behaviour ever changes."""

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2


class WorkfileError(ValueError):
    """The workfile is malformed or asks for an edit the agent must refuse."""


@dataclass(frozen=True)
class WorkEdit:
    path: str
    content: str | None


@dataclass(frozen=True)
class WorkTask:
    id: str
    prompt: str
    edits: tuple[WorkEdit, ...]
    tokens: int | None = None
    """Output tokens the agent reports for this task (``usage_tokens`` in the plan)."""


@dataclass(frozen=True)
class Workfile:
    batch: str
    model: str
    tasks: tuple[WorkTask, ...]


# ---- workfile -----------------------------------------------------------------------------


def workfile_document(request: AgentRequest) -> dict[str, Any]:
    """The workfile of a request: its tasks' prompts and edits, in batch order."""
    return {
        "format": WORKFILE_FORMAT,
        "batch": request.batch.id,
        "model": request.model or DEFAULT_MODEL,
        "tasks": [
            {
                "id": task.id,
                "prompt": task.prompt,
                "edits": [{"path": edit.path, "content": edit.content} for edit in task.edits],
                "tokens": task.usage_tokens,
            }
            for task in request.tasks
        ],
    }


def write_scripted_workfile(request: AgentRequest, path: Path | None = None) -> Path:
    """Write the request's workfile (canonical JSON) to ``path`` (default ``request.workfile``).

    Written to a temporary file and renamed, so the agent never reads half a workfile.
    """
    target = path if path is not None else request.workfile
    if target is None:
        raise ValueError("no workfile path: pass one or set AgentRequest.workfile")
    document = workfile_document(request)
    load_workfile_document(document)  # refuse now what the agent would refuse later
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(target.name + ".tmp")
    temporary.write_bytes(canonical_bytes(document))
    os.replace(temporary, target)
    return target


def load_workfile_document(document: Any) -> Workfile:
    if not isinstance(document, dict):
        raise WorkfileError("workfile: not a JSON object")
    if document.get("format") != WORKFILE_FORMAT:
        raise WorkfileError(f"workfile: format is not {WORKFILE_FORMAT!r}")
    batch, model, tasks = document.get("batch"), document.get("model"), document.get("tasks")
    if not isinstance(batch, str) or not isinstance(model, str) or not model:
        raise WorkfileError("workfile: 'batch' and 'model' must be strings")
    if not isinstance(tasks, list):
        raise WorkfileError("workfile: 'tasks' must be a list")
    loaded = []
    for number, task in enumerate(tasks):
        where = f"workfile: tasks[{number}]"
        if not isinstance(task, dict):
            raise WorkfileError(f"{where} is not an object")
        task_id, prompt, edits = task.get("id"), task.get("prompt"), task.get("edits")
        if not isinstance(task_id, str) or not isinstance(prompt, str):
            raise WorkfileError(f"{where}: 'id' and 'prompt' must be strings")
        if not isinstance(edits, list):
            raise WorkfileError(f"{where}: 'edits' must be a list")
        work_edits = []
        for index, edit in enumerate(edits):
            if not isinstance(edit, dict):
                raise WorkfileError(f"{where}.edits[{index}] is not an object")
            edit_path, content = edit.get("path"), edit.get("content")
            if not isinstance(edit_path, str) or not (content is None or isinstance(content, str)):
                raise WorkfileError(
                    f"{where}.edits[{index}]: 'path' must be a string, 'content' a string or null"
                )
            check_relative_path(edit_path)
            work_edits.append(WorkEdit(edit_path, content))
        tokens = task.get("tokens")
        if tokens is not None and (type(tokens) is not int or tokens < 0):
            raise WorkfileError(f"{where}: 'tokens' must be a non-negative integer or null")
        loaded.append(WorkTask(task_id, prompt, tuple(work_edits), tokens))
    return Workfile(batch, model, tuple(loaded))


def load_workfile(path: Path) -> Workfile:
    try:
        document = json.loads(path.read_bytes())
    except OSError as exc:
        raise WorkfileError(f"workfile {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise WorkfileError(f"workfile {path}: not JSON ({exc})") from None
    return load_workfile_document(document)


# ---- the fake model -------------------------------------------------------------------------


def model_request(task: WorkTask, path: str) -> str:
    """The request the agent sends the model for the content of ``path``."""
    return f"{task.prompt}\n{path}"


def fake_model(request: str, answers: Mapping[str, str]) -> str:
    """A deterministic model: the response to ``request`` is looked up in ``answers``."""
    try:
        return answers[request]
    except KeyError:
        raise WorkfileError(f"fake model has no answer for request {request[:80]!r}") from None


def answer_table(work: Workfile) -> dict[str, str]:
    """Request -> content for every non-deletion edit (a later edit of the same request wins)."""
    table: dict[str, str] = {}
    for task in work.tasks:
        for edit in task.edits:
            if edit.content is not None:
                table[model_request(task, edit.path)] = edit.content
    return table


def final_edits(task: WorkTask) -> list[WorkEdit]:
    """The task's edits with only the last edit of each path kept (same end state)."""
    last = {edit.path: edit for edit in task.edits}
    seen: set[str] = set()
    ordered = []
    for edit in task.edits:
        if edit.path not in seen:
            seen.add(edit.path)
            ordered.append(last[edit.path])
    return ordered


# ---- applying edits -----------------------------------------------------------------------


def check_relative_path(path: str) -> PurePosixPath:
    pure = PurePosixPath(path)
    if not path or pure.is_absolute() or "\\" in path or "\x00" in path:
        raise WorkfileError(f"refused path {path!r}: not a relative POSIX path")
    if any(part in ("..", ".git") for part in pure.parts) or pure == PurePosixPath("."):
        raise WorkfileError(f"refused path {path!r}: '..', '.git' or the root itself")
    return pure


def resolve_inside(root: Path, path: str) -> Path:
    """``root / path``, refused if it resolves outside ``root`` or is a symlink itself."""
    target = root / check_relative_path(path)
    if target.is_symlink():
        raise WorkfileError(f"refused path {path!r}: it is a symbolic link")
    resolved_root = root.resolve()
    if not target.resolve().is_relative_to(resolved_root):
        raise WorkfileError(f"refused path {path!r}: it resolves outside the worktree")
    return target


def write_file(root: Path, path: str, content: str) -> None:
    target = resolve_inside(root, path)
    if target.is_dir():
        raise WorkfileError(f"cannot write {path!r}: it is a directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    resolve_inside(root, path)  # folders just created cannot have moved it outside; re-check
    target.write_bytes(content.encode("utf-8"))


def delete_file(root: Path, path: str) -> bool:
    """Delete ``path``; False if there was nothing to delete."""
    target = resolve_inside(root, path)
    if target.is_dir():
        raise WorkfileError(f"cannot delete {path!r}: it is a directory")
    try:
        target.unlink()
    except FileNotFoundError:
        return False
    return True


# ---- the agent ----------------------------------------------------------------------------


def _emit(stream: Any, value: Mapping[str, Any]) -> None:
    stream.write(json.dumps(value, ensure_ascii=False, sort_keys=True) + "\n")
    stream.flush()


def _ask(
    journal: Journal | None,
    model: str,
    request: str,
    parameters: Mapping[str, object],
    answers: Mapping[str, str],
) -> tuple[str, str]:
    """One model call: (response, source) where source is fake, live or journal."""
    if journal is None:
        return fake_model(request, answers), "fake"
    called = []

    def live() -> str:
        called.append(True)
        return fake_model(request, answers)

    response = journal.call(ADAPTER, model, request, parameters, live)
    return response, "live" if called else "journal"


def run_agent(
    work: Workfile,
    root: Path,
    *,
    journal: Journal | None = None,
    model: str | None = None,
    out: Any = None,
) -> str:
    """Apply ``work`` under ``root``; returns the summary. Raises on the first failure.

    Without a ``journal`` the fake model is called directly.
    """
    stream = out if out is not None else sys.stdout
    model_name = model or work.model
    answers = answer_table(work)
    notes = []
    for task in work.tasks:
        written: list[str] = []
        deleted: list[str] = []
        absent: list[str] = []
        for edit in final_edits(task):
            if edit.content is None:
                (deleted if delete_file(root, edit.path) else absent).append(edit.path)
                continue
            request = model_request(task, edit.path)
            parameters = dict(FAKE_MODEL_PARAMETERS)
            response, source = _ask(journal, model_name, request, parameters, answers)
            _emit(
                stream,
                {
                    "type": "model_call",
                    "adapter": ADAPTER,
                    "model": model_name,
                    "request": request,
                    "response": response,
                    "parameters": parameters,
                    "key": call_key(ADAPTER, model_name, request, parameters),
                    "source": source,
                },
            )
            write_file(root, edit.path, response)
            written.append(edit.path)
        parts = []
        if written:
            parts.append("wrote " + ", ".join(written))
        if deleted:
            parts.append("deleted " + ", ".join(deleted))
        if absent:
            parts.append("already absent " + ", ".join(absent))
        notes.append(f"{task.id}: " + ("; ".join(parts) if parts else "no edits"))
    return "\n".join(notes)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m harness.orchestrate.scripted_agent",
        description="Deterministic scripted agent: applies a workfile's edits in the cwd.",
    )
    parser.add_argument("--edits", required=True, type=Path, help="workfile (JSON)")
    parser.add_argument("--journal", type=Path, help="replay journal (directory)")
    parser.add_argument("--mode", choices=("live", "replay"), help="journal mode")
    parser.add_argument("--allow-live-miss", action="store_true")
    parser.add_argument("--model", help="model name (default: the workfile's)")
    parser.add_argument("--sleep", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--ignore-sigterm", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if (args.journal is None) != (args.mode is None):
        parser.error("--journal and --mode go together")
    if args.allow_live_miss and args.mode != "replay":
        parser.error("--allow-live-miss needs --mode replay")
    if args.sleep < 0:
        parser.error("--sleep must not be negative")
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.sleep:
        time.sleep(args.sleep)
    try:
        work = load_workfile(args.edits)
        journal = (
            Journal(args.journal, args.mode, allow_live_miss=args.allow_live_miss)
            if args.journal is not None
            else None
        )
        summary = run_agent(work, Path.cwd(), journal=journal, model=args.model)
    except (WorkfileError, ReplayError, OSError) as exc:
        _emit(sys.stdout, {"type": "result", "ok": False, "summary": "", "error": str(exc)})
        return EXIT_FAILED
    tokens = [task.tokens for task in work.tasks if task.tokens is not None]
    if tokens:  # reported the way Codex reports a turn (the scripted adapter's meter)
        usage = {"input_tokens": 0, "output_tokens": sum(tokens)}
        _emit(sys.stdout, {"type": "turn.completed", "usage": usage})
    _emit(sys.stdout, {"type": "result", "ok": True, "summary": summary, "error": None})
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
