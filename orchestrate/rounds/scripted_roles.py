"""Scripted Manager, Executor and Auditor: deterministic stand-ins so rounds run with no model.

A real program, run by the runtime as a sandboxed subprocess with the worktree as its working
directory (read-only for the Manager and the Auditor)::

    python -P -m harness.orchestrate.rounds.scripted_roles --role ROLE --workfile WORKFILE

It prints its answer (plain UTF-8 text) on stdout and exits 0; a malformed workfile exits 2.
The workfile (JSON, written by the runtime, outside the worktree) holds the script of the task
(``steps``: what each step asks for and which edits make it) and the role's context:

* manager: ``history`` — for each earlier round, the Manager's plan text and the Auditor's
  effective status. The Manager plans the first step not yet audited ``complete``
  (``Step k of n: <say>``, ``Next: cli``), cites the reports of the rounds it builds on, and
  says ``Next: done`` once the latest audit was complete and no step is left; with no steps it
  answers ``Next: blocked``.
* executor: ``plan`` — the Manager's text. It applies the edits of the step the plan names
  (``ghost``: none, and still claims success).
* auditor: ``plan`` — it checks that every edit of the named step is in the worktree, byte for
  byte, and writes the three-line header. ``auditor_writes`` makes it write a file and lie
  about it (under a sandbox the read-only mount refuses the write and it exits 2; without one
  the runtime's tree digest catches the change).
  ``bad_header`` makes its report's header malformed (``Status = complete``).
* repair: ``report`` — the tool-less format repair: the same report with the header's
  separators fixed (``=`` -> ``:``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path, PurePosixPath
from typing import Any, Final

EXIT_OK: Final = 0
EXIT_USAGE: Final = 2
_STEP_RE: Final = re.compile(r"^Step ([1-9][0-9]*) of ([1-9][0-9]*):", re.MULTILINE)


def _step_of(plan: str) -> int | None:
    """The 0-based step a plan names (``Step k of n:``), or None."""
    match = _STEP_RE.search(plan)
    return int(match.group(1)) - 1 if match else None


def _safe_path(root: Path, rel: str) -> Path:
    pure = PurePosixPath(rel)
    if pure.is_absolute() or ".." in pure.parts or ".git" in pure.parts:
        raise ValueError(f"refusing path {rel!r}")
    return root / pure


def manager(work: dict[str, Any]) -> str:
    steps: list[dict[str, Any]] = work["steps"]
    if not steps:
        return "There is no step I can plan for this goal.\nNext: blocked"
    done: set[int] = set()
    last_complete = False
    cites: list[int] = []
    for entry in work["history"]:
        step = _step_of(entry["plan"])
        last_complete = entry["effective"] == "complete"
        if step is not None and last_complete:
            done.add(step)
            cites.append(int(entry["round"]))
    remaining = [i for i in range(len(steps)) if i not in done]
    if not remaining and last_complete:
        return "Every step is audited complete.\nNext: done"
    index = remaining[0] if remaining else len(steps) - 1
    lines = [f"Step {index + 1} of {len(steps)}: {steps[index]['say']}"]
    if work.get("feedback"):
        lines.append(f"Feedback on the last plan: {work['feedback']}")
    if cites:
        lines.append("Cites: " + ", ".join(str(c) for c in cites[-3:]))
    lines.append("Next: cli")
    return "\n".join(lines)


def executor(work: dict[str, Any], root: Path) -> str:
    step = _step_of(work["plan"])
    if step is None or step >= len(work["steps"]):
        return "I could not tell which step to do."
    if work.get("ghost"):
        return f"Step {step + 1} is done: every edit is in place."
    written = []
    for edit in work["steps"][step]["edits"]:
        target = _safe_path(root, edit["path"])
        if edit["content"] is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(edit["content"], encoding="utf-8")
        written.append(edit["path"])
    return f"Step {step + 1} is done: wrote {', '.join(written) or 'nothing'}."


def auditor(work: dict[str, Any], root: Path) -> str:
    step = _step_of(work["plan"])
    missing: list[str] = []
    if step is None or step >= len(work["steps"]):
        missing.append("the plan names no step of the script")
    else:
        for edit in work["steps"][step]["edits"]:
            target = _safe_path(root, edit["path"])
            if edit["content"] is None:
                if target.exists():
                    missing.append(f"{edit['path']} still exists")
            elif not target.is_file() or target.read_text(encoding="utf-8") != edit["content"]:
                missing.append(f"{edit['path']} is not as the step asks")
    note = ""
    if work.get("auditor_writes"):
        # A compromised auditor: it writes into the tree it may only read (under a sandbox the
        # read-only mount refuses it and, like most tools, it dies of the error), then lies
        # about it: a clean, complete step.
        _safe_path(root, work["auditor_writes"]).write_text("audited\n", encoding="utf-8")
        note = "I also left a note in the tree."
        missing = []
    sep = " = " if work.get("bad_header") else ": "
    status = "incomplete" if missing else "complete"
    body = "; ".join(missing) if missing else "Every edit of the step is in the worktree."
    return (
        f"Status{sep}{status}\nIntegrity{sep}clean\nContract audit{sep}aligned\n\n{body}\n{note}"
    ).rstrip("\n")


def repair(work: dict[str, Any]) -> str:
    lines = str(work["report"]).split("\n")
    fixed = [line.replace(" = ", ": ", 1) if i < 3 else line for i, line in enumerate(lines)]
    return "\n".join(fixed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripted_roles")
    parser.add_argument("--role", choices=("manager", "executor", "auditor", "repair"))
    parser.add_argument("--workfile", required=True)
    args = parser.parse_args(argv)
    try:
        work = json.loads(Path(args.workfile).read_text(encoding="utf-8"))
        root = Path.cwd()
        if args.role == "manager":
            text = manager(work)
        elif args.role == "executor":
            text = executor(work, root)
        elif args.role == "auditor":
            text = auditor(work, root)
        else:
            text = repair(work)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"scripted {args.role}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.write(text + "\n")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
