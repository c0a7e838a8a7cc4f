"""Bounded mutation testing of ``verify/`` with mutmut 3 (docs/testing.md). Not run by CI.

    python -m tests.mutation [--minutes 15] [--jobs 2] [MODULE ...]

MODULE is a file under verify/ (default: the core modules in ``CORE``). The run mutates only
those files and runs only the test files listed for them in ``TESTS`` (mutmut first runs them
all once to learn which test covers which function, then runs, per mutant, the tests that
cover the mutated function). It stops after ``--minutes`` and prints one JSON line: the counts,
the score (killed / (killed + survived + timeout-free survivors)) and the surviving mutants.

Why a staging copy: our packages are mapped with setuptools ``package-dir`` (folder verify/ is
the module ``harness.verify``), and mutmut names mutants, and matches test coverage to them, by
the module path it derives from a file's path. So the run copies the packages into a src
layout (``<work>/src/harness/verify/...``) where file path and module name agree, with the
repository's ``[tool.mutmut]`` settings plus the module and test selection of this run. The
work tree is never touched (safe in a shared checkout); results stay in ``<work>/mutants``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"verify": "verify", "receipts": "receipts", "orchestrate": "orchestrate"}
ALSO_COPY = ["schemas", "docs"]
CORE = ["verify/chain.py", "verify/merkle.py", "verify/note.py", "verify/canonical.py"]
# Per module, the test files that exercise it directly (fast ones; no demo runs).
CONTROL_RULE_TESTS: list[str] = [
    "tests/test_rules_control.py",
    "tests/test_rules_control_machine.py",
    "tests/test_rules_control_survivors.py",
    "tests/test_control_verdicts.py",
]
TESTS: dict[str, list[str]] = {
    "verify/chain.py": ["tests/test_chain.py", "tests/test_storecheck.py"],
    "verify/merkle.py": [
        "tests/test_merkle_properties.py",
        "tests/test_merkle_vectors.py",
        "tests/test_cose.py",
        "tests/test_mutation_survivors.py",
    ],
    "verify/note.py": [
        "tests/test_note.py",
        "tests/test_note_vectors.py",
        "tests/test_note_messages.py",
        "tests/test_mutation_survivors.py",
    ],
    "verify/canonical.py": [
        "tests/test_canonical.py",
        "tests/test_records.py",
        "tests/test_mutation_survivors.py",
    ],
    "verify/checkpoint.py": ["tests/test_note.py", "tests/test_note_vectors.py"],
    "verify/cose.py": ["tests/test_cose.py", "tests/test_cose_vectors.py"],
    "verify/dsse.py": ["tests/test_dsse.py", "tests/test_dsse_vectors.py"],
    "verify/intoto.py": ["tests/test_intoto.py", "tests/test_dsse_vectors.py"],
    "verify/records.py": ["tests/test_records.py", "tests/test_store.py"],
    "verify/storecheck.py": ["tests/test_storecheck.py", "tests/test_store.py"],
    # not test_chunkcore.py: its demo-run fixture does not finish under mutmut's in-process
    # stats run (test_chunkcore_paths.py holds the same equivalence on stores it writes)
    "verify/storechunk.py": [
        "tests/test_storechunk.py",
        "tests/test_storecheck.py",
        "tests/test_chunkcore_paths.py",
    ],
    "verify/grammardfa.py": ["tests/test_grammardfa.py"],
    "verify/receiptprefetch.py": [
        "tests/test_parallel_verify.py",
        "tests/test_storepool_submit.py",
    ],
    "verify/chunkcore.py": ["tests/test_storechunk.py", "tests/test_chunkcore_paths.py"],
    "verify/gatecover.py": ["tests/test_gatecover.py"],
    "verify/basepolicy.py": ["tests/test_basepolicy.py", "tests/test_policy_edges.py"],
    "verify/policy.py": [
        "tests/test_policy.py",
        "tests/test_basepolicy.py",
        "tests/test_policy_edges.py",
    ],
    "verify/ed25519.py": ["tests/test_ed25519_memo.py", "tests/test_note.py"],
    "verify/rules/attempts.py": [
        "tests/test_attempt_evidence.py",
        "tests/test_run_checks_units.py",
    ],
    "verify/attemptcheck.py": ["tests/test_attempt_evidence.py", "tests/test_run_checks_units.py"],
    "verify/supervisecheck.py": [
        "tests/test_supervision_evidence.py",
        "tests/test_run_checks_units.py",
    ],
    "verify/rules/budget.py": ["tests/test_rules_budget.py"],
    "verify/budgetcheck.py": ["tests/test_budget_evidence.py"],
    "verify/rules/locks.py": ["tests/test_rules_locks.py"],
    "verify/lockcheck.py": ["tests/test_lock_evidence.py"],
    "verify/rules/header.py": ["tests/test_rules_header.py"],
    "verify/rules/rounds.py": ["tests/test_rules_rounds.py"],
    "verify/rules/lifecycle.py": ["tests/test_rules_lifecycle.py"],
    "verify/rules/roles.py": ["tests/test_adapter_roles.py"],
    "orchestrate/adapters/roles.py": ["tests/test_adapter_roles.py"],
    "receipts/safeopen.py": ["tests/test_bus_safeopen.py", "tests/test_bus_reader.py"],
    "receipts/commands.py": ["tests/test_commands.py", "tests/test_bus_reader.py"],
    "orchestrate/bus/reader.py": ["tests/test_bus_reader.py", "tests/test_commands.py"],
    "verify/roundcheck.py": ["tests/test_round_checks_units.py"],
    "verify/commandcheck.py": ["tests/test_round_checks_units.py"],
    "verify/lifecyclecheck.py": ["tests/test_round_checks_units.py"],
    "orchestrate/rounds/treedigest.py": ["tests/test_rounds_units.py"],
    "orchestrate/rounds/texts.py": ["tests/test_rounds_units.py"],
    "orchestrate/rounds/rebuild.py": ["tests/test_rounds_units.py"],
    "orchestrate/rounds/scripted_roles.py": ["tests/test_rounds_units.py"],
    "orchestrate/runner/commands.py": ["tests/test_rounds_units.py"],
    "verify/rules/review.py": ["tests/test_review_rules.py"],
    "verify/reviewcheck.py": ["tests/test_review_evidence.py"],
    "verify/controlcheck.py": ["tests/test_control_check_units.py"],
    "verify/controlfacts.py": ["tests/test_control_check_units.py"],
    "verify/rules/bucket.py": CONTROL_RULE_TESTS,
    "verify/rules/cusum.py": CONTROL_RULE_TESTS,
    "verify/rules/phases.py": CONTROL_RULE_TESTS,
    "verify/rules/sensors.py": CONTROL_RULE_TESTS,
    "verify/rules/strategy.py": CONTROL_RULE_TESTS,
    "verify/rules/configchain.py": CONTROL_RULE_TESTS,
    "verify/rules/controller.py": CONTROL_RULE_TESTS,
    "verify/rules/controlmodel.py": CONTROL_RULE_TESTS,
    "verify/rules/keywindows.py": CONTROL_RULE_TESTS,
    "verify/rules/readings.py": CONTROL_RULE_TESTS,
    "verify/rules/meta.py": ["tests/test_rules_meta.py", "tests/test_rules_control_survivors.py"],
    "receipts/euaiact_control.py": ["tests/test_control_runtime.py"],
    "verify/modelkey.py": ["tests/test_modelkey.py", "tests/test_journal_bundle.py"],
    "verify/exchangecheck.py": ["tests/test_exchange_check.py"],
    "verify/journalcheck.py": ["tests/test_journal_bundle.py"],
    # the runtime runs of test_compare.py do not run in the staging copy: its pure parts
    "verify/compare.py": ["tests/test_compare_unit.py"],
    "verify/progress.py": ["tests/test_progress.py"],
}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def _pyproject(settings: dict[str, Any]) -> str:
    """The repository's pyproject.toml with its [tool.mutmut] table replaced by ``settings``."""
    lines = (ROOT / "pyproject.toml").read_text(encoding="utf-8").splitlines()
    kept: list[str] = []
    skipping = False
    for line in lines:
        if line.startswith("["):
            skipping = line.strip() == "[tool.mutmut]"
        if not skipping:
            kept.append(line)
    table = ["[tool.mutmut]", *(f"{k} = {_toml_value(v)}" for k, v in settings.items())]
    return "\n".join([*kept, "", *table, ""])


def stage(work: Path, modules: list[str]) -> Path:
    """Lay out ``work`` as src/harness/{verify,receipts,orchestrate,...} + tests/ + pyproject."""
    if work.exists():
        shutil.rmtree(work)
    target = work / "src" / "harness"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "src" / "harness", target, ignore=ignore)
    for name, folder in PACKAGES.items():
        shutil.copytree(ROOT / folder, target / name, ignore=ignore)
    shutil.copytree(ROOT / "schemas", target / "schemas", ignore=ignore)
    shutil.copytree(ROOT / "tests", work / "tests", ignore=ignore)
    for extra in ALSO_COPY:  # read by tests through paths relative to the checkout
        shutil.copytree(ROOT / extra, work / extra, ignore=ignore)
    base = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    settings: dict[str, Any] = dict(base["tool"]["mutmut"])
    settings["only_mutate"] = [f"src/harness/{m}" for m in modules]
    settings["also_copy"] = [f"{extra}/" for extra in ALSO_COPY]
    tests = sorted({t for m in modules for t in TESTS.get(m, ["tests/"])})
    settings["pytest_add_cli_args_test_selection"] = tests
    (work / "pyproject.toml").write_text(_pyproject(settings), encoding="utf-8")
    return work


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run(work: Path, minutes: float, jobs: int) -> dict[str, Any]:
    mutmut = [sys.executable, "-m", "mutmut"]
    started = time.monotonic()
    with subprocess.Popen(
        [*mutmut, "run", "--max-children", str(jobs)],
        cwd=work,
        env=_env(),
        start_new_session=True,
    ) as proc:
        try:
            proc.wait(timeout=minutes * 60)
            finished = True
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
            finished = False
    elapsed = round(time.monotonic() - started)
    results = subprocess.run(
        [*mutmut, "results", "--all", "true"],
        cwd=work,
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    status: dict[str, list[str]] = {}
    for line in results.splitlines():
        name, sep, outcome = line.strip().rpartition(": ")
        if sep:
            status.setdefault(outcome.strip(), []).append(name)
    killed = len(status.get("killed", []))
    survived = status.get("survived", [])
    scored = killed + len(survived)
    return {
        "finished": finished,
        "seconds": elapsed,
        "counts": {k: len(v) for k, v in sorted(status.items())},
        "score": round(killed / scored, 4) if scored else None,
        "survived": sorted(survived),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "modules", nargs="*", default=CORE, help="files under verify/, receipts/, orchestrate/"
    )
    parser.add_argument("--minutes", type=float, default=15.0, help="stop after this long")
    parser.add_argument("--jobs", type=int, default=2, help="mutants run in parallel")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "mutation")
    args = parser.parse_args(argv)
    for module in args.modules:
        if not (ROOT / module).is_file() or module.split("/")[0] not in PACKAGES:
            parser.error(f"not a module under {', '.join(PACKAGES)}: {module}")
    work = stage(args.work.resolve(), args.modules)
    summary = run(work, args.minutes, args.jobs)
    summary["modules"] = args.modules
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
