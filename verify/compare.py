"""Two bundles, an original run and its replay: are they the same run? (docs/spec/compare.md)

A replay (``harness run --replay RUN --logical-clock`` in a second state folder holding the
same keys and a copy of the journal) promises byte-identical ``lineage`` and ``replay`` stores
and the same decisions. This module checks that promise from the two bundles alone: both are
verified in full first (a comparison of unverified evidence would prove nothing), then, run by
run, the two stores' Merkle roots and record counts, and the *decision sequence* of the audit
store: the runtime's decisions with the members that are decisions (states, verdicts, denials,
outcomes), without what is measured (durations, times, absolute paths), since the audit store
legitimately differs in those. The first difference is reported exactly: the store, the record
(its seq), the member and both values.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from .archive import Limits
from .errors import VerificationError
from .layout import store_member
from .policy import TrustPolicy
from .records import Record, parse_record_line
from .report import ExitCode, Report, Status

COMPARED_STORES: Final = ("lineage", "replay")
"""The stores a replay reproduces byte for byte (runtime.md §8)."""

DECISION_MEMBERS: Final[Mapping[str, tuple[str, ...]]] = {
    "task.planned": ("task", "adapter", "role", "priority", "depends", "tools"),
    "task.refused": ("task", "from", "to", "reason"),
    "task.transition": ("task", "from", "to"),
    "capability.denied": ("task", "tools", "tags", "reason"),
    "capsule.check": ("task", "capsule", "actions", "conforms", "violations"),
    "gate.result": ("task", "gate", "passed", "exit_code"),
    "gate.integrity": ("batch", "tasks", "intact"),
    "merge.fork": ("task", "batch", "paths"),
    "merge.result": ("task", "merged", "commit"),
    "attempt.failed": ("task", "batch", "attempt", "anomaly", "retry"),
    "budget.exceeded": ("batch", "scope", "name", "resource", "decision"),
    "control.decision": ("layer", "rule", "key", "class", "action"),
    "round.end": ("task", "epoch", "round", "outcome"),
    "run.end": ("outcome",),
}
"""Per audit kind, the members that make up a decision. A transition's ``reason`` is left out:
it may quote a measured figure (a time-out, a duration) that a replay does not reproduce."""


class CompareError(Exception):
    """A bundle that cannot be compared: not verified, or no run to pair."""

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Difference:
    """The first place where the two runs part: ``where`` is a store or ``decisions``."""

    where: str
    index: int
    """The record's position in its store (its seq), or the decision's position in the sequence."""
    member: str
    original: Any
    replay: Any
    original_seq: int | None = None
    replay_seq: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "where": self.where,
            "index": self.index,
            "member": self.member,
            "original": self.original,
            "replay": self.replay,
            "original_seq": self.original_seq,
            "replay_seq": self.replay_seq,
        }

    def line(self) -> str:
        seqs = ""
        if self.where == "decisions":
            seqs = f" (audit seq {self.original_seq} / {self.replay_seq})"
        return (
            f"first difference: {self.where} #{self.index}{seqs}, {self.member}: "
            f"{_show(self.original)} != {_show(self.replay)}"
        )


@dataclass(frozen=True)
class StoreComparison:
    store: str
    original_root: str | None
    replay_root: str | None
    original_records: int
    replay_records: int

    @property
    def same(self) -> bool:
        return (
            self.original_root == self.replay_root and self.original_records == self.replay_records
        )


@dataclass(frozen=True)
class RunComparison:
    original_run: str
    replay_run: str
    stores: tuple[StoreComparison, ...]
    decisions: tuple[int, int]
    difference: Difference | None

    @property
    def same(self) -> bool:
        return self.difference is None and all(store.same for store in self.stores)


@dataclass
class Comparison:
    original: Report
    replay: Report
    runs: list[RunComparison] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return all(run.same for run in self.runs)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.VERIFIED if self.same else ExitCode.DIFFERENT

    def to_json(self) -> dict[str, Any]:
        return {
            "same": self.same,
            "original": {"bundle": self.original.bundle, "signer": self.original.signer_key_id},
            "replay": {"bundle": self.replay.bundle, "signer": self.replay.signer_key_id},
            "runs": [
                {
                    "original_run": run.original_run,
                    "replay_run": run.replay_run,
                    "same": run.same,
                    "stores": {
                        store.store: {
                            "same": store.same,
                            "original_root": store.original_root,
                            "replay_root": store.replay_root,
                            "original_records": store.original_records,
                            "replay_records": store.replay_records,
                        }
                        for store in run.stores
                    },
                    "decisions": {"original": run.decisions[0], "replay": run.decisions[1]},
                    "first_difference": run.difference.to_json() if run.difference else None,
                }
                for run in self.runs
            ],
        }

    def to_text(self) -> str:
        lines = [f"original: {self.original.bundle}", f"replay:   {self.replay.bundle}"]
        for run in self.runs:
            name = (
                run.original_run
                if run.original_run == run.replay_run
                else f"{run.original_run} / {run.replay_run}"
            )
            lines.append(f"run {name}: {'same' if run.same else 'DIFFERENT'}")
            for store in run.stores:
                verdict = "same root" if store.same else "different"
                lines.append(
                    f"  {store.store}: {verdict} ({store.original_records} / "
                    f"{store.replay_records} records, root {_short(store.original_root)} / "
                    f"{_short(store.replay_root)})"
                )
            lines.append(f"  decisions: {run.decisions[0]} / {run.decisions[1]}")
            if run.difference is not None:
                lines.append("  " + run.difference.line())
        lines.append("same run" if self.same else "the runs differ")
        return "\n".join(lines) + "\n"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _short(root: str | None) -> str:
    return "-" if root is None else root[:16]


def _kept(name: str) -> bool:
    return name.startswith("runs/") and name.endswith(
        tuple(f"/stores/{store}.jsonl" for store in ("audit", *COMPARED_STORES))
    )


def _records(members: Mapping[str, bytes], run: str, store: str) -> list[Record]:
    """The store's records, parsed again (the bytes verified; cannot fail on a verified one)."""
    data = members.get(store_member(run, store), b"")
    return [parse_record_line(line, store, run) for line in data.splitlines()]


def _runs(report: Report) -> list[str]:
    return sorted({summary.run for summary in report.stores})


def pair_runs(original: Report, replay: Report, run: str | None) -> list[tuple[str, str]]:
    """Which run of the original goes with which of the replay.

    ``run`` names one run present in both. Otherwise the run ids must be the same set, or each
    bundle must hold exactly one run (a replay may carry another id; its records then differ in
    their ``run`` member, which the comparison reports).
    """
    ours, theirs = _runs(original), _runs(replay)
    if run is not None:
        missing = [
            name for name, runs in (("original", ours), ("replay", theirs)) if run not in runs
        ]
        if missing:
            raise CompareError(
                f"run {run!r} is not in the {' and the '.join(missing)} bundle", ExitCode.USAGE
            )
        return [(run, run)]
    if ours == theirs and ours:
        return [(name, name) for name in ours]
    if len(ours) == 1 and len(theirs) == 1:
        return [(ours[0], theirs[0])]
    raise CompareError(
        f"cannot pair runs: the original holds {ours or 'none'}, the replay {theirs or 'none'}; "
        "name one with --run",
        ExitCode.USAGE,
    )


def _first_member(left: Any, right: Any, path: str) -> tuple[str, Any, Any] | None:
    """The first member (depth first, sorted keys) where two JSON values differ."""
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        for key in sorted(set(left) | set(right)):
            if key not in left or key not in right:
                return f"{path}.{key}", left.get(key, "<absent>"), right.get(key, "<absent>")
            found = _first_member(left[key], right[key], f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(left, list) and isinstance(right, list):
        for index, (a, b) in enumerate(zip(left, right, strict=False)):
            found = _first_member(a, b, f"{path}[{index}]")
            if found is not None:
                return found
        if len(left) != len(right):
            return f"{path}.length", len(left), len(right)
        return None
    if left != right or type(left) is not type(right):
        return path, left, right
    return None


def _record_value(record: Record) -> dict[str, Any]:
    return {
        "run": record.run,
        "time": record.time,
        "kind": record.kind,
        "body": record.body,
        "mac": record.mac,
    }


def _store_difference(
    store: str, ours: Sequence[Record], theirs: Sequence[Record]
) -> Difference | None:
    for index, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        # ``mac`` last: once a body differs every later MAC does, so name the cause first
        left, right = _record_value(a), _record_value(b)
        mac = (left.pop("mac"), right.pop("mac"))
        found = _first_member(left, right, "record")
        if found is None and mac[0] != mac[1]:
            found = ("record.mac", mac[0], mac[1])
        if found is not None:
            return Difference(store, index, found[0], found[1], found[2])
    if len(ours) != len(theirs):
        index = min(len(ours), len(theirs))
        return Difference(store, index, "records", len(ours), len(theirs))
    return None


def decisions(records: Sequence[Record]) -> Iterator[tuple[int, dict[str, Any]]]:
    """The audit store's decision sequence: (seq, {kind, members...}) in record order."""
    for record in records:
        members = DECISION_MEMBERS.get(record.kind)
        if members is not None:
            decision: dict[str, Any] = {"kind": record.kind}
            decision.update({name: record.body.get(name) for name in members})
            yield record.seq, decision


def _decision_difference(
    ours: Sequence[tuple[int, dict[str, Any]]], theirs: Sequence[tuple[int, dict[str, Any]]]
) -> Difference | None:
    for index, ((seq_a, a), (seq_b, b)) in enumerate(zip(ours, theirs, strict=False)):
        found = _first_member(a, b, "decision")
        if found is not None:
            return Difference("decisions", index, found[0], found[1], found[2], seq_a, seq_b)
    if len(ours) != len(theirs):
        index = min(len(ours), len(theirs))
        longer = ours if len(ours) > len(theirs) else theirs
        seq = longer[index][0]
        return Difference(
            "decisions",
            index,
            "decisions",
            len(ours),
            len(theirs),
            seq if longer is ours else None,
            seq if longer is theirs else None,
        )
    return None


def _root(report: Report, run: str, store: str) -> tuple[str | None, int]:
    for summary in report.stores:
        if summary.run == run and summary.store == store:
            return summary.root, summary.records
    return None, 0


def compare_members(
    original: Report,
    original_members: Mapping[str, bytes],
    replay: Report,
    replay_members: Mapping[str, bytes],
    run: str | None = None,
) -> Comparison:
    """Compare two verified bundles' runs (``members``: their kept store bytes)."""
    comparison = Comparison(original, replay)
    for ours, theirs in pair_runs(original, replay, run):
        stores = []
        difference: Difference | None = None
        for store in COMPARED_STORES:
            root_a, count_a = _root(original, ours, store)
            root_b, count_b = _root(replay, theirs, store)
            stores.append(StoreComparison(store, root_a, root_b, count_a, count_b))
            if difference is None and (root_a, count_a) != (root_b, count_b):
                difference = _store_difference(
                    store,
                    _records(original_members, ours, store),
                    _records(replay_members, theirs, store),
                )
                if difference is None:  # equal records, other roots: cannot be, but say so
                    difference = Difference(store, count_a, "root", root_a, root_b)
        decisions_a = list(decisions(_records(original_members, ours, "audit")))
        decisions_b = list(decisions(_records(replay_members, theirs, "audit")))
        if difference is None:
            difference = _decision_difference(decisions_a, decisions_b)
        comparison.runs.append(
            RunComparison(
                ours, theirs, tuple(stores), (len(decisions_a), len(decisions_b)), difference
            )
        )
    return comparison


def compare_bundles(
    original: Path,
    replay: Path,
    *,
    pins: TrustPolicy,
    hmac_master: bytes | None = None,
    limits: Limits | None = None,
    run: str | None = None,
) -> Comparison:
    """Verify both bundles in full, then compare them; raises ``CompareError`` when either is
    not verified and trusted (its exit code) or the runs cannot be paired (usage)."""
    from .bundle import verify_bundle_contents

    verified = []
    for role, path in (("original", original), ("replay", replay)):
        contents = verify_bundle_contents(
            path, keep=_kept, pins=pins, hmac_master=hmac_master, limits=limits
        )
        report = contents.report
        if report.status is not Status.VERIFIED:
            failure = report.failure
            where = f" ({failure.member})" if failure is not None and failure.member else ""
            reason = (
                f"{failure.check}: {failure.reason}{where}"
                if failure is not None
                else "the signer is not pinned"
            )
            raise CompareError(
                f"{role} bundle {path}: {report.status.value}: {reason}", report.exit_code
            )
        verified.append(contents)
    try:
        return compare_members(
            verified[0].report, verified[0].members, verified[1].report, verified[1].members, run
        )
    except VerificationError as exc:  # a verified store that does not parse again: a bug
        raise CompareError(f"cannot compare: {exc}", ExitCode.INVALID) from None
