"""verify/gatecover.py, the merge gate's coverage rule, by table and by property (pure: no git,
no bundle). The same rule judged on real runs: tests/test_gate_binding.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.verify.gatecover import (
    BROKEN_HISTORY,
    CONTENT_DIFFERS,
    DELETION_NOT_ATTESTED,
    MODE_DIFFERS,
    NO_RECEIPT,
    PARENT_DIFFERS,
    SUBMODULE,
    Coverage,
    PathAction,
    State,
    judge_transition,
)

A, B, C = ("a" * 64, "100644"), ("b" * 64, "100644"), ("c" * 64, "100644")
AX = ("a" * 64, "100755")


def _act(parent: State, result: State, seq: int, run: str = "r") -> PathAction:
    kind = "artifact.delete" if result is None else "artifact.write"
    return PathAction(
        "p", kind, result, parent, run, "t", seq, f"2026-01-01T00:00:{seq:02d}.000000Z"
    )


@pytest.mark.parametrize(
    "base, head, actions, covered, reason",
    [
        (A, B, [_act(A, B, 1)], True, "sha256"),
        (None, B, [_act(None, B, 1)], True, "sha256"),
        (A, None, [_act(A, None, 1)], True, "deleted"),
        (A, C, [_act(A, B, 1), _act(B, C, 2)], True, "sha256"),
        (B, C, [_act(A, B, 1), _act(B, C, 2)], True, "sha256"),
        (A, C, [_act(B, C, 2), _act(A, B, 1)], True, "sha256"),  # order by time, not input
        (C, B, [_act(A, B, 1)], False, PARENT_DIFFERS),
        (A, B, [_act(None, B, 1)], False, PARENT_DIFFERS),
        (None, B, [_act(A, B, 1)], False, PARENT_DIFFERS),
        (AX, B, [_act(A, B, 1)], False, PARENT_DIFFERS),  # parent mode is bound too
        (A, C, [_act(A, B, 1), _act(A, C, 2)], True, "sha256"),  # the latest starts at base
        (C, A, [_act(A, B, 1), _act(C, A, 2)], True, "sha256"),
        (A, C, [_act(C, B, 1), _act(A, C, 2)], True, "sha256"),
        (B, C, [_act(A, B, 1), _act(A, C, 2)], False, BROKEN_HISTORY),
        (A, AX, [_act(A, A, 1)], False, MODE_DIFFERS),
        (A, None, [_act(A, B, 1)], False, "deletion not attested"),
        (A, B, [_act(A, None, 1)], False, "no receipt"),
        (A, B, [], False, "no receipt"),
        (A, None, [], False, "deletion not attested"),
    ],
)
def test_transition_table(
    base: State, head: State, actions: list[PathAction], covered: bool, reason: str
) -> None:
    coverage = judge_transition(base, head, actions)
    assert coverage.covered is covered, coverage.reason
    assert coverage.reason.startswith(reason), coverage.reason


def test_gitlinks_are_never_covered() -> None:
    assert judge_transition(A, B, [_act(A, B, 1)], gitlink=True).covered is False


_states = st.one_of(st.none(), st.sampled_from([A, B, C, AX]))


@given(base=_states, head=_states, chain=st.lists(_states, min_size=1, max_size=5))
def test_property_covered_iff_a_contiguous_chain_links_base_to_head(
    base: State, head: State, chain: list[State]
) -> None:
    """Actions s0->s1->...->sn (in time order) cover base->head iff head == sn and base is
    one of the s_i for i < n (the walk back reaches it through linked actions only)."""
    actions = [_act(chain[i - 1], chain[i], i) for i in range(1, len(chain))]
    coverage = judge_transition(base, head, actions)
    expected = bool(actions) and head == chain[-1] and base in chain[:-1]
    assert coverage.covered is expected, (base, head, chain, coverage.reason)


def test_reasons_and_evidence_are_exact() -> None:
    """The whole reason text and the vouching action, for every kind of verdict (the gate's
    report shows both: the run, task and seq of the evidence, and why)."""
    first, second = _act(A, B, 1, run="r1"), _act(B, C, 2, run="r2")
    covered = judge_transition(A, C, [second, first])
    assert covered.covered is True
    assert covered.evidence is second
    assert covered.reason == (
        f"sha256 {'c' * 12}… mode 100644 matches the final write of task t, "
        f"from the base's 100644 {'a' * 12}…"
    )
    new_file = judge_transition(None, B, [_act(None, B, 1)])
    assert new_file.reason.endswith("from the base's absent")
    deleted = _act(A, None, 3)
    assert judge_transition(A, None, [deleted]) == Coverage(
        True, "deleted by merged task t", deleted
    )
    write = _act(A, B, 1)
    cases = [
        (A, None, [write], "deletion not attested (the bundle's last attested action on this "
         "path is a write)"),
        (A, B, [deleted], "no receipt for this file (the bundle's last attested action on this "
         "path deletes it)"),
        (A, C, [write], CONTENT_DIFFERS),
        (A, ("b" * 64, "100755"), [write],
         "git mode differs from the attested write (100755 at head, 100644 attested)"),
        (C, B, [write], f"{PARENT_DIFFERS}: base 100644 {'c' * 12}…, attested parent "
         f"100644 {'a' * 12}…"),
        (None, B, [write], f"{PARENT_DIFFERS}: base absent, attested parent 100644 {'a' * 12}…"),
    ]  # fmt: skip
    for base, head, actions, reason in cases:
        coverage = judge_transition(base, head, actions)
        assert coverage == Coverage(False, reason, actions[-1]), (base, head)
    broken = [_act(A, B, 1), _act(A, C, 2)]
    assert judge_transition(B, C, broken) == Coverage(False, BROKEN_HISTORY, broken[-1])
    assert judge_transition(A, B, [write], gitlink=True) == Coverage(False, SUBMODULE, None)
    assert judge_transition(A, B, []) == Coverage(False, NO_RECEIPT, None)
    assert judge_transition(A, None, []) == Coverage(False, DELETION_NOT_ATTESTED, None)


def test_actions_from_records() -> None:
    """A verified lineage body becomes the transition it records."""
    from harness.verify.gatecover import action_from_record

    write = {"path": "p", "sha256": "b" * 64, "mode": "100755", "parents": ["a" * 64],
             "parent_mode": "100644", "task": "t"}  # fmt: skip
    assert action_from_record("r", "artifact.write", 4, "T", write) == PathAction(
        "p", "artifact.write", ("b" * 64, "100755"), ("a" * 64, "100644"), "r", "t", 4, "T"
    )
    new = {**write, "parents": [], "parent_mode": None}
    assert action_from_record("r", "artifact.write", 5, "T", new).parent is None
    # Half a parent (a digest without a mode, or a mode without a digest) is no parent state:
    # such a record covers no modification (fail closed), and never crashes the gate.
    for half in ({**write, "parent_mode": None}, {**write, "parents": []}):
        assert action_from_record("r", "artifact.write", 5, "T", half).parent is None
    delete = {"path": "p", "parents": ["b" * 64], "parent_mode": "100755", "task": "t"}
    assert action_from_record("r", "artifact.delete", 6, "T", delete) == PathAction(
        "p", "artifact.delete", None, ("b" * 64, "100755"), "r", "t", 6, "T"
    )
