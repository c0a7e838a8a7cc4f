"""What each role is told: built from the goal, the contract and the evidence only.

* Manager: the original goal verbatim, the task contract (scope and gates), the verified task
  state (rounds done, the last effective status, the checkpoint), every earlier auditor report
  (each clipped to ``REPORT_CHARS``), the feedback on its last plan when that plan was invalid,
  and the operator's answers and instructions. Never an executor's transcript or claim.
* Executor: the goal, the Manager's plan for this round, and only the reports the plan cites.
* Auditor: the goal, the plan, the Executor's claim and the round's diff; it must open its
  report with the three-line control header.
* Repair: the report and what is wrong with its header; no tools, format only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from ..model import TaskSpec

REPORT_CHARS: Final = 2000
DIFF_CHARS: Final = 20000
HEADER_RULES: Final = (
    "Begin your report with exactly these three lines, then write your findings:\n"
    "Status: complete|incomplete|blocked\n"
    "Integrity: clean|suspect|violation\n"
    "Contract audit: aligned|unknown|needs_revision|invalid"
)
NEXT_RULES: Final = (
    "End your answer with exactly one line `Next: gui|cli|ask|done|blocked`. You may cite "
    "earlier reports with one line `Cites: <round numbers>`. Say `Next: done` only when the "
    "latest audit is complete, clean and aligned."
)


def contract(task: TaskSpec) -> str:
    gates = ", ".join(gate.name for gate in task.gates) or "none"
    return f"Scope (files you may change): {', '.join(task.scope)}\nQuality gates: {gates}"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "\n[clipped]"


def manager_prompt(
    task: TaskSpec,
    *,
    rounds_done: int,
    checkpoint: str,
    reports: Sequence[tuple[int, str, str]],
    feedback: str | None,
    inputs: Sequence[tuple[str, str]],
) -> str:
    """``reports``: (round, effective status, report text); ``inputs``: (kind, text)."""
    parts = [
        "You are the Manager. Plan the next single step towards the goal.",
        "Goal (verbatim):\n" + task.prompt,
        "Contract:\n" + contract(task),
        f"Verified state: {rounds_done} rounds done; the work is at commit {checkpoint}.",
    ]
    for number, effective, text in reports:
        parts.append(
            f"Auditor report of round {number} ({effective}):\n" + _clip(text, REPORT_CHARS)
        )
    if feedback:
        parts.append("Your last plan was refused: " + feedback)
    for kind, text in inputs:
        parts.append(f"Operator {kind}:\n{text}")
    parts.append(NEXT_RULES)
    return "\n\n".join(parts)


def executor_prompt(task: TaskSpec, plan: str, cited: Mapping[int, str]) -> str:
    parts = [
        "You are the Executor. Do exactly the step the Manager planned, then say what you did.",
        "Goal (verbatim):\n" + task.prompt,
        "Contract:\n" + contract(task),
        "The Manager's plan for this round:\n" + plan,
    ]
    for number, text in sorted(cited.items()):
        parts.append(f"Auditor report of round {number}:\n" + _clip(text, REPORT_CHARS))
    return "\n\n".join(parts)


def auditor_prompt(task: TaskSpec, plan: str, claim: str, diff: str) -> str:
    return "\n\n".join(
        [
            "You are the Auditor. Check the real workspace (read-only) against the step; do "
            "not trust the Executor's claim.",
            "Goal (verbatim):\n" + task.prompt,
            "Contract:\n" + contract(task),
            "The step:\n" + plan,
            "The Executor's claim:\n" + claim,
            "The round's diff:\n" + _clip(diff, DIFF_CHARS),
            HEADER_RULES,
        ]
    )


def repair_prompt(report: str, problem: str) -> str:
    return "\n\n".join(
        [
            "Your report's control header is malformed. Rewrite the report with a correct "
            "header; change nothing else. Do not use any tool.",
            "What is wrong: " + problem,
            HEADER_RULES,
            "Your report:\n" + report,
        ]
    )
