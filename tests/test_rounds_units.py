"""Unit folds of the rounds runtime: the tree digest, the texts, the state rebuild, the command
desk's decisions and the scripted roles (each rule once, and what breaks it)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.bus import Command
from harness.orchestrate.model import RoundsSpec, TaskSpec
from harness.orchestrate.rounds import scripted_roles
from harness.orchestrate.rounds.rebuild import rebuild_state
from harness.orchestrate.rounds.texts import MAX_TEXT_BYTES, clip_text, load_text, save_text
from harness.orchestrate.rounds.treedigest import tree_digest
from harness.orchestrate.runner.commands import CommandDesk
from harness.verify.fsm import TaskState
from harness.verify.rules.header import parse_header, parse_next

# -- tree digest ---------------------------------------------------------------------------


def _tree(tmp: Path) -> Path:
    root = tmp / "tree"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("a = 1\n")
    (root / "README.md").write_text("hi\n")
    (root / ".git").write_text("gitdir: elsewhere\n")
    return root


@pytest.mark.parametrize(
    "change",
    ["modify", "create", "delete", "chmod", "mkdir", "symlink", "retarget", "rename"],
)
def test_the_tree_digest_sees_every_kind_of_change(tmp_path: Path, change: str) -> None:
    root = _tree(tmp_path)
    (root / "link").symlink_to("README.md")
    before = tree_digest(root)
    assert tree_digest(root) == before  # deterministic
    if change == "modify":
        (root / "src" / "a.py").write_text("a = 2\n")
    elif change == "create":
        (root / "new.txt").write_text("")
    elif change == "delete":
        (root / "README.md").unlink()
    elif change == "chmod":
        os.chmod(root / "src" / "a.py", 0o755)
    elif change == "mkdir":
        (root / "empty").mkdir()
    elif change == "symlink":
        (root / "other").symlink_to("src")
    elif change == "retarget":
        (root / "link").unlink()
        (root / "link").symlink_to("src/a.py")
    else:
        (root / "src" / "a.py").rename(root / "src" / "b.py")
    assert tree_digest(root) != before


def test_the_tree_digest_ignores_only_the_top_level_git_file(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    before = tree_digest(root)
    (root / ".git").write_text("gitdir: moved\n")
    assert tree_digest(root) == before
    (root / "src" / ".git").write_text("x")  # a nested .git is an ordinary entry
    assert tree_digest(root) != before


def test_the_tree_digest_does_not_follow_links_out(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("1")
    (root / "out").symlink_to(outside)
    before = tree_digest(root)
    outside.write_text("2")  # the link's target is not the tree's content
    assert tree_digest(root) == before


def test_the_tree_digest_does_not_hang_on_a_fifo(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    before = tree_digest(root)
    os.mkfifo(root / "pipe")
    assert tree_digest(root) != before


# -- texts ---------------------------------------------------------------------------------


def test_texts_are_saved_once_by_digest_and_read_back(tmp_path: Path) -> None:
    digest = save_text(tmp_path, "Status: complete\n")
    assert digest == hashlib.sha256(b"Status: complete\n").hexdigest()
    assert save_text(tmp_path, "Status: complete\n") == digest
    assert load_text(tmp_path, digest) == "Status: complete\n"
    path = tmp_path / "rounds" / f"{digest}.txt"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rounds"]


def test_a_text_whose_bytes_changed_is_refused(tmp_path: Path) -> None:
    digest = save_text(tmp_path, "plan")
    (tmp_path / "rounds" / f"{digest}.txt").write_text("other")
    with pytest.raises(ValueError, match="does not match its digest"):
        load_text(tmp_path, digest)


def test_long_texts_are_clipped_on_a_character_boundary() -> None:
    text = "é" * MAX_TEXT_BYTES  # two bytes each
    clipped = clip_text(text)
    assert len(clipped.encode()) <= MAX_TEXT_BYTES and clipped == "é" * (MAX_TEXT_BYTES // 2)
    assert clip_text("short") == "short"
    exact = "a" * MAX_TEXT_BYTES
    assert clip_text(exact) == exact


# -- rebuild -------------------------------------------------------------------------------


def _rec(record_kind: str, **body: Any) -> dict[str, Any]:
    return {"kind": record_kind, "body": {"task": "t", **body}}


def test_rebuild_counts_only_rounds_that_ended(tmp_path: Path) -> None:
    plan1 = save_text(tmp_path, "Step 1 of 2: a\nNext: cli")
    report1 = save_text(tmp_path, "Status: complete\nIntegrity: clean\nContract audit: aligned")
    plan2 = save_text(tmp_path, "bad plan")
    answer = save_text(tmp_path, "use tabs")
    records = [
        _rec("round.plan", round=1, text=plan1, valid=True, reason="valid"),
        _rec("round.audit", round=1, text=report1, repair=None, status="complete",
             integrity="clean", contract="aligned", effective="complete"),
        _rec("round.end", round=1, failing=0, checkpoint="a" * 40),
        _rec("round.plan", round=2, text=plan2, valid=False, reason="no Next line"),
        _rec("round.end", round=2, failing=3, checkpoint="b" * 40),
        _rec("round.gate", round=2, reason="3 failing rounds in a row", question=None),
        _rec("round.input", round=2, kind="approve", command="c1", text=answer),
        _rec("round.plan", round=3, text=plan1, valid=True, reason="valid"),  # cut by a crash
        {"kind": "round.end", "body": {"task": "other", "round": 9, "failing": 2,
                                       "checkpoint": "c" * 40}},
    ]  # fmt: skip
    state = rebuild_state(tmp_path, "t", records)
    assert state.round == 2 and state.checkpoint == "b" * 40
    assert state.failing == 0  # the approve reset the streak
    assert state.feedback == "no Next line"
    assert state.inputs == [("approve", "use tabs")]
    assert state.latest_effective == "complete" and state.latest is not None
    assert [h["round"] for h in state.history] == [1, 2]
    assert state.history[0]["report"].startswith("Status: complete")
    assert state.history[1]["report"] is None


def test_rebuild_reads_the_repaired_report(tmp_path: Path) -> None:
    plan = save_text(tmp_path, "Step 1 of 1: a\nNext: cli")
    raw = save_text(tmp_path, "Status = complete")
    fixed = save_text(tmp_path, "Status: complete\nIntegrity: clean\nContract audit: aligned")
    records = [
        _rec("round.plan", round=1, text=plan, valid=True, reason="valid"),
        _rec("round.audit", round=1, text=raw, repair=fixed, status="complete",
             integrity="clean", contract="aligned", effective="complete"),
        _rec("round.end", round=1, failing=0, checkpoint="a" * 40),
    ]  # fmt: skip
    state = rebuild_state(tmp_path, "t", records)
    assert state.history[0]["report"].startswith("Status: complete")
    assert state.feedback is None and state.inputs == []


def test_inputs_seen_by_a_round_are_not_shown_again(tmp_path: Path) -> None:
    plan = save_text(tmp_path, "Step 1 of 1: a\nNext: cli")
    note = save_text(tmp_path, "be brief")
    records = [
        _rec("round.input", round=1, kind="instruct", command="i1", text=note),
        _rec("round.plan", round=1, text=plan, valid=True, reason="valid"),
        _rec("round.end", round=1, failing=1, checkpoint="a" * 40),
    ]
    assert rebuild_state(tmp_path, "t", records).inputs == []
    assert rebuild_state(tmp_path, "t", records[:1]).inputs == [("instruct", "be brief")]


# -- the command desk ----------------------------------------------------------------------


@dataclass
class _Run:
    """The parts of RunCore the desk uses (its real collaborator is the audit store)."""

    folder: Path
    run_id: str = "r1"
    epoch: int = 0
    open_gate: tuple[str, int, str] | None = None
    records: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    statuses: list[tuple[str, str | None]] = field(default_factory=list)
    specs: dict[str, TaskSpec] = field(default_factory=dict)
    states: dict[str, TaskState] = field(default_factory=dict)

    @property
    def keys(self) -> Any:
        return type("K", (), {"hmac_master": b"k" * 32})()

    def audit(self, kind: str, body: dict[str, Any]) -> None:
        self.records.append((kind, body))

    def flush(self) -> None:
        pass

    def set_status(self, status: str, reason: str, *, command: str | None = None) -> None:
        self.statuses.append((status, command))


def _command(name: str, seq: int = 0, revision: int = 0, **args: Any) -> Command:
    return Command(seq, f"c{seq}", name, args, "op", revision, "2026-01-01T00:00:00.000000Z")


def _desk(tmp: Path, **run: Any) -> tuple[CommandDesk, _Run]:
    fake = _Run(tmp, **run)
    fake.specs = {
        "lh": TaskSpec(id="lh", role="r", prompt="p", rounds=RoundsSpec()),
        "plain": TaskSpec(id="plain", role="q", prompt="p"),
    }
    fake.states = {"lh": TaskState.IN_PROGRESS, "plain": TaskState.OPEN}
    return CommandDesk(fake), fake  # type: ignore[arg-type]


def _receipts(fake: _Run) -> list[tuple[str, str, str]]:
    return [(b["id"], b["outcome"], b["reason"]) for kind, b in fake.records]


def test_a_stop_is_applied_once_and_a_second_is_rejected(tmp_path: Path) -> None:
    desk, fake = _desk(tmp_path)
    desk.decide(_command("stop", 0))
    desk.decide(_command("stop", 1))
    desk.decide(_command("abort", 2))
    assert [r[1] for r in _receipts(fake)] == ["applied", "rejected", "rejected"]
    assert desk.stop_command == "c0" and desk.abort_command is None
    assert fake.statuses == [("stopping", "c0")]  # the effect names its command


def test_an_abort_records_no_stopping_status(tmp_path: Path) -> None:
    desk, fake = _desk(tmp_path)
    desk.decide(_command("abort", 0, reason="x"))
    assert desk.abort_command == "c0" and fake.statuses == []


def test_a_stale_revision_is_rejected_whatever_the_command(tmp_path: Path) -> None:
    desk, fake = _desk(tmp_path, epoch=2)
    for seq, name in enumerate(("stop", "approve", "instruct", "resume")):
        desk.decide(_command(name, seq, revision=1))
    assert {r[2] for r in _receipts(fake)} == {"stale revision"}
    assert desk.stop_command is None


def test_gate_commands_need_an_open_gate_of_their_kind(tmp_path: Path) -> None:
    desk, fake = _desk(tmp_path)
    desk.decide(_command("approve", 0))
    fake.open_gate = ("lh", 3, "answer")
    desk.decide(_command("approve", 1))
    desk.decide(_command("answer", 2, text="yes"))
    assert _receipts(fake) == [
        ("c0", "rejected", "no open gate"),
        ("c1", "rejected", "the open gate needs answer"),
        ("c2", "applied", "closes the gate of round 3"),
    ]
    taken = desk.take_gate_input()
    assert taken is not None and taken.id == "c2" and desk.take_gate_input() is None


def test_instructions_go_only_to_live_rounds_tasks(tmp_path: Path) -> None:
    desk, fake = _desk(tmp_path)
    desk.decide(_command("instruct", 0, task="plain", text="x"))
    desk.decide(_command("instruct", 1, task="missing", text="x"))
    desk.decide(_command("instruct", 2, task="lh"))
    desk.decide(_command("instruct", 3, task="lh", text="go"))
    fake.states["lh"] = TaskState.DONE
    desk.decide(_command("instruct", 4, task="lh", text="late"))
    assert [r[1] for r in _receipts(fake)] == [
        "rejected", "rejected", "rejected", "applied", "rejected"
    ]  # fmt: skip
    assert [c.id for c in desk.take_instructions("lh")] == ["c3"]
    assert desk.take_instructions("lh") == []


def test_resume_is_applied_only_while_a_continue_reads_the_bus(tmp_path: Path) -> None:
    desk, fake = _desk(tmp_path)
    desk.decide(_command("resume", 0))
    desk.accept_resume = True
    desk.decide(_command("resume", 1))
    desk.decide(_command("resume", 2))  # one continue, one resume
    assert [r[1] for r in _receipts(fake)] == ["rejected", "applied", "rejected"]
    assert desk.resume_command == "c1"


def test_abandon_is_left_to_the_command_that_applies_it(tmp_path: Path) -> None:
    desk, fake = _desk(tmp_path)
    desk.decide(_command("abandon", 0, batch="b0001"))
    desk.decide(_command("dance", 1))
    assert _receipts(fake) == [("c1", "rejected", "unknown command 'dance'")]


# -- scripted roles ------------------------------------------------------------------------


def _steps() -> list[dict[str, Any]]:
    return [
        {"say": "one", "edits": [{"path": "a.txt", "content": "A"}]},
        {"say": "two", "edits": [{"path": "b.txt", "content": "B"}]},
    ]


def test_the_scripted_manager_plans_the_first_step_not_audited_complete() -> None:
    history = [{"round": 1, "plan": "Step 1 of 2: one\nNext: cli", "effective": "complete"}]
    text = scripted_roles.manager({"steps": _steps(), "history": history})
    assert text.startswith("Step 2 of 2: two") and "Cites: 1" in text
    assert parse_next(text).action == "cli"
    failed = [{"round": 1, "plan": "Step 1 of 2: one\nNext: cli", "effective": "incomplete"}]
    assert scripted_roles.manager({"steps": _steps(), "history": failed}).startswith("Step 1")
    done = [*history, {"round": 2, "plan": "Step 2 of 2: two\nNext: cli", "effective": "complete"}]
    assert parse_next(scripted_roles.manager({"steps": _steps(), "history": done})).action == "done"
    assert parse_next(scripted_roles.manager({"steps": [], "history": []})).action == "blocked"


def test_the_scripted_auditor_checks_the_worktree_not_the_claim(tmp_path: Path) -> None:
    work = {"steps": _steps(), "plan": "Step 1 of 2: one\nNext: cli"}
    missing = parse_header(scripted_roles.auditor(work, tmp_path)).header
    assert missing is not None and missing.status == "incomplete"
    scripted_roles.executor(work, tmp_path)
    assert (tmp_path / "a.txt").read_text() == "A"
    present = parse_header(scripted_roles.auditor(work, tmp_path)).header
    assert present is not None and present.status == "complete"
    bad = scripted_roles.auditor({**work, "bad_header": True}, tmp_path)
    assert parse_header(bad).header is None
    assert parse_header(scripted_roles.repair({"report": bad})).header == present


def test_the_scripted_ghost_changes_nothing_and_paths_stay_inside(tmp_path: Path) -> None:
    work = {"steps": _steps(), "plan": "Step 1 of 2: one\nNext: cli", "ghost": True}
    assert "done" in scripted_roles.executor(work, tmp_path)
    assert list(tmp_path.iterdir()) == []
    escape = {"steps": [{"say": "x", "edits": [{"path": "../x", "content": "1"}]}],
              "plan": "Step 1 of 1: x"}  # fmt: skip
    with pytest.raises(ValueError, match="refusing path"):
        scripted_roles.executor(escape, tmp_path)


def test_the_scripted_roles_program_exits_2_on_a_bad_workfile(tmp_path: Path) -> None:
    work = tmp_path / "w.json"
    work.write_text(json.dumps({"steps": []}))
    assert scripted_roles.main(["--role", "auditor", "--workfile", str(work)]) == 2
    assert scripted_roles.main(["--role", "manager", "--workfile", str(tmp_path / "no")]) == 2


# -- known answers and exact outputs (the survivors of the first mutation run) ---------------


def test_the_tree_digest_known_answer(tmp_path: Path) -> None:
    root = tmp_path / "t"
    (root / "d").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"x")
    (root / "d" / "b").write_bytes(b"")
    os.symlink("a.txt", root / "l")
    os.mkfifo(root / "p")
    os.chmod(root / "a.txt", 0o644)
    os.chmod(root / "d", 0o755)
    os.chmod(root / "d" / "b", 0o600)
    os.chmod(root / "p", 0o640)

    def sha(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    link_mode = f"{os.lstat(root / 'l').st_mode & 0o7777:o}"
    lines = [
        f"f 644 a.txt {sha(b'x')}\n",
        "d 755 d \n",
        f"f 600 d/b {sha(b'')}\n",
        f"l {link_mode} l {sha(b'a.txt')}\n",
        "o 640 p \n",
    ]
    assert tree_digest(root) == sha("".join(lines).encode())


def test_the_tree_digest_skips_a_git_folder_and_never_walks_a_linked_folder(
    tmp_path: Path,
) -> None:
    root = _tree(tmp_path)
    (root / ".git").unlink()
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "linked").symlink_to(outside, target_is_directory=True)
    before = tree_digest(root)
    (root / ".git" / "HEAD").write_text("other\n")
    (outside / "new.txt").write_text("1")
    assert tree_digest(root) == before


def test_texts_repair_a_damaged_copy_and_keep_their_folder_private(tmp_path: Path) -> None:
    digest = save_text(tmp_path, "report")
    target = tmp_path / "rounds" / f"{digest}.txt"
    target.write_bytes(b"damaged")
    assert save_text(tmp_path, "report") == digest and target.read_bytes() == b"report"
    assert (tmp_path / "rounds").stat().st_mode & 0o777 == 0o700
    odd = "a" + "é" * MAX_TEXT_BYTES  # the cut falls inside a character
    clipped = clip_text(odd)
    assert clipped == "a" + "é" * ((MAX_TEXT_BYTES - 1) // 2)
    assert load_text(tmp_path, save_text(tmp_path, odd)) == clipped


def test_every_receipt_is_exact(tmp_path: Path) -> None:
    desk, fake = _desk(tmp_path, epoch=1)
    fake.open_gate = ("lh", 4, "approve")
    desk.accept_resume = True
    cases = [
        (_command("stop", 3, revision=1), "applied", "the run stops"),
        (_command("stop", 4, revision=1), "rejected", "the run is already stopping"),
        (_command("approve", 5, revision=1), "applied", "closes the gate of round 4"),
        (_command("instruct", 6, revision=1, task="plain", text="x"), "rejected",
         "args.task names no rounds task"),
        (_command("instruct", 7, revision=1, task="lh", text=""), "rejected",
         "args.text is missing"),
        (_command("instruct", 8, revision=1, task="lh", text="go"), "applied",
         "for the next round of lh"),
        (_command("resume", 9, revision=1), "applied", "continue as epoch 2"),
        (_command("resume", 10, revision=1), "rejected", "the run is running or cannot continue"),
        (_command("stop", 11, revision=0), "rejected", "stale revision"),
    ]  # fmt: skip
    for command, _, _ in cases:
        desk.decide(command)
    assert fake.records == [
        (
            "command.receipt",
            {
                "id": command.id,
                "command": command.command,
                "control_seq": command.seq,
                "outcome": outcome,
                "reason": reason,
            },
        )
        for command, outcome, reason in cases
    ]
    assert fake.statuses == [("stopping", "c3")]
    fake.states["lh"] = TaskState.FAILED
    desk.decide(_command("instruct", 12, revision=1, task="lh", text="go"))
    assert fake.records[-1][1]["reason"] == "task lh has ended"
    abort_desk, _ = _desk(tmp_path)
    abort_desk.decide(_command("abort", 0))
    assert abort_desk.abort_command == "c0"


def test_the_scripted_roles_say_exactly_this() -> None:
    steps = _steps()
    assert scripted_roles.manager({"steps": steps, "history": []}) == "Step 1 of 2: one\nNext: cli"
    assert scripted_roles.manager({"steps": [], "history": []}) == (
        "There is no step I can plan for this goal.\nNext: blocked"
    )
    history = [
        {"round": r, "plan": "Step 1 of 2: one\nNext: cli", "effective": "complete"}
        for r in (1, 2, 3, 4)
    ]
    planned = scripted_roles.manager({"steps": steps, "history": history, "feedback": "bad"})
    assert planned == (
        "Step 2 of 2: two\nFeedback on the last plan: bad\nCites: 2, 3, 4\nNext: cli"
    )
    both = [*history, {"round": 5, "plan": "Step 2 of 2: two", "effective": "complete"}]
    assert scripted_roles.manager({"steps": steps, "history": both}) == (
        "Every step is audited complete.\nNext: done"
    )
    redo = [*both, {"round": 6, "plan": "Step 2 of 2: two", "effective": "incomplete"}]
    # every step was complete once, the latest audit is not: redo the last step, not done
    assert scripted_roles.manager({"steps": steps, "history": redo}) == (
        "Step 2 of 2: two\nCites: 3, 4, 5\nNext: cli"
    )
    assert scripted_roles.repair({"report": "Status = a = b\nx = y\nz = 1\nw = 2"}) == (
        "Status: a = b\nx: y\nz: 1\nw = 2"
    )


def test_the_scripted_executor_and_auditor_in_detail(tmp_path: Path) -> None:
    steps = [
        {"say": "s", "edits": [
            {"path": "deep/er/a.txt", "content": "A"},
            {"path": "gone.txt", "content": None},
        ]},
    ]  # fmt: skip
    plan = "Step 1 of 1: s"
    work = {"steps": steps, "plan": plan}
    (tmp_path / "gone.txt").write_text("old")
    assert scripted_roles.executor({"steps": steps, "plan": "nothing"}, tmp_path) == (
        "I could not tell which step to do."
    )
    assert scripted_roles.executor({"steps": steps, "plan": "Step 2 of 1: s"}, tmp_path) == (
        "I could not tell which step to do."
    )
    assert scripted_roles.executor({**work, "ghost": True}, tmp_path) == (
        "Step 1 is done: every edit is in place."
    )
    assert scripted_roles.executor(work, tmp_path) == (
        "Step 1 is done: wrote deep/er/a.txt, gone.txt."
    )
    assert (tmp_path / "deep" / "er" / "a.txt").read_text(encoding="utf-8") == "A"
    assert not (tmp_path / "gone.txt").exists()
    assert scripted_roles.executor(work, tmp_path).endswith("gone.txt.")  # deleting twice is fine
    empty = {"steps": [{"say": "s", "edits": []}], "plan": plan}
    assert scripted_roles.executor(empty, tmp_path) == "Step 1 is done: wrote nothing."
    assert scripted_roles.auditor(work, tmp_path) == (
        "Status: complete\nIntegrity: clean\nContract audit: aligned\n\n"
        "Every edit of the step is in the worktree."
    )
    (tmp_path / "gone.txt").write_text("back")
    (tmp_path / "deep" / "er" / "a.txt").write_text("B")
    assert scripted_roles.auditor(work, tmp_path) == (
        "Status: incomplete\nIntegrity: clean\nContract audit: aligned\n\n"
        "deep/er/a.txt is not as the step asks; gone.txt still exists"
    )
    assert scripted_roles.auditor({"steps": steps, "plan": "?"}, tmp_path).endswith(
        "the plan names no step of the script"
    )
    writes = scripted_roles.auditor({**work, "auditor_writes": "note.md"}, tmp_path)
    assert writes.startswith("Status: complete\n") and writes.endswith("left a note in the tree.")
    assert (tmp_path / "note.md").read_text() == "audited\n"
    for bad in ("/abs", "a/../b", ".git/config"):
        with pytest.raises(ValueError, match="refusing path"):
            scripted_roles.executor(
                {"steps": [{"say": "s", "edits": [{"path": bad, "content": "x"}]}], "plan": plan},
                tmp_path,
            )


@pytest.mark.parametrize("role", ["manager", "executor", "auditor", "repair"])
def test_the_scripted_roles_program_prints_its_answer(
    tmp_path: Path, role: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    work = {"steps": _steps(), "history": [], "plan": "Step 1 of 2: one", "report": "Status = x"}
    path = tmp_path / "w.json"
    path.write_text(json.dumps(work), encoding="utf-8")
    assert scripted_roles.main(["--role", role, "--workfile", str(path)]) == 0
    expected = {
        "manager": lambda: scripted_roles.manager(work),
        "executor": lambda: "Step 1 is done: wrote a.txt.",
        "auditor": lambda: scripted_roles.auditor(work, tmp_path),
        "repair": lambda: "Status: x",
    }[role]()
    assert capsys.readouterr().out == expected + "\n"


def test_rebuild_in_detail(tmp_path: Path) -> None:
    plan = save_text(tmp_path, "Step 1 of 1: a\nNext: cli")
    report = save_text(tmp_path, "Status: incomplete\nIntegrity: suspect\nContract audit: unknown")
    records = [
        {"kind": "round.end", "body": {"task": "t", "round": 7, "failing": 9,
                                       "checkpoint": "f" * 40}},  # no plan before it: skipped
        {"kind": "round.step", "body": {"task": "t"}},
        {"kind": "round.plan"},  # no body: not this task's
        _rec("round.plan", round=1, text=plan, valid=True, reason="valid"),
        _rec("round.audit", round=1, text=report, repair=None, status="incomplete",
             integrity="suspect", contract="unknown", effective="incomplete"),
        _rec("round.end", round=1, failing=1, checkpoint="a" * 40),
    ]  # fmt: skip
    state = rebuild_state(tmp_path, "t", records)
    assert state.history == [
        {
            "round": 1,
            "plan": "Step 1 of 1: a\nNext: cli",
            "report": "Status: incomplete\nIntegrity: suspect\nContract audit: unknown",
            "effective": "incomplete",
        }
    ]
    assert (state.round, state.failing, state.checkpoint) == (1, 1, "a" * 40)
    assert state.latest is not None
    assert (state.latest.status, state.latest.integrity, state.latest.contract) == (
        "incomplete", "suspect", "unknown"
    )  # fmt: skip
    assert state.latest_effective == "incomplete" and state.feedback is None
    fresh = rebuild_state(tmp_path, "t", [])
    assert (fresh.round, fresh.failing, fresh.checkpoint, fresh.history) == (0, 0, None, [])
