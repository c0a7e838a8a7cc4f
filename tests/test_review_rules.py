"""The action review rule (verify/rules/review.py): targets, classes and decisions by table.

Every row is computed by hand from docs/spec/review.md; the decision table is exhaustive over
its boolean inputs for every class and strictness.
"""

from __future__ import annotations

import itertools

import pytest

from harness.verify.rules import review as rv
from harness.verify.rules.review import (
    CLIP,
    TARGET_LIMIT,
    classify,
    clip_target,
    decide,
    egress_host,
    needs_approval,
    strictness_of,
    target_of,
    url_host,
)

ROOT = "/work/t/b0001/tree"

# ---- targets --------------------------------------------------------------------------------

TARGETS = [
    ("Write", {"file_path": f"{ROOT}/src/a.py", "content": "x"}, "src/a.py"),
    ("Edit", {"file_path": f"{ROOT}/src/../src/./b.py"}, "src/b.py"),
    ("MultiEdit", {"file_path": "src/c.py"}, "src/c.py"),  # relative: to the worktree
    ("NotebookEdit", {"notebook_path": f"{ROOT}/n.ipynb"}, "n.ipynb"),
    ("Write", {"file_path": "/etc/passwd"}, "/etc/passwd"),
    ("Write", {"file_path": f"{ROOT}/../other/x"}, "/work/t/b0001/other/x"),
    ("Write", {"file_path": f"{ROOT}-evil/x"}, f"{ROOT}-evil/x"),  # a sibling, not inside
    ("Write", {"file_path": ROOT}, "."),
    ("Write", {"file_path": "../x"}, "/work/t/b0001/x"),  # relative: joined to the worktree
    ("Write", {"file_path": "a/../../y"}, "/work/t/b0001/y"),
    ("Write", {"file_path": "//Xdir/a"}, "/Xdir/a"),  # POSIX keeps "//": made one "/"
    ("Write", {"file_path": f"//{ROOT[1:]}/a"}, "a"),
    ("Write", {"file_path": 7}, ""),
    ("Write", {"file_path": ""}, ""),
    ("Write", {"file_path": "a\x00b"}, ""),
    ("Write", {}, ""),
    ("Bash", {"command": "git push", "timeout": 5}, "git push"),
    ("Bash", {"command": ["git"]}, ""),
    (
        "WebFetch",
        {"url": "https://User@Docs.Example.COM:8443/x?y", "prompt": "p"},
        "docs.example.com",
    ),
    ("WebFetch", {"url": "not a url"}, ""),
    ("WebFetch", {"url": "http://[::1"}, ""),  # urlsplit raises: no host
    ("WebFetch", {"url": 3}, ""),
    ("WebSearch", {"query": "rust borrow checker"}, "rust borrow checker"),
    ("WebSearch", {"query": None}, ""),
    ("Read", {"file_path": "/etc/hosts"}, "/etc/hosts"),
    ("Grep", {"pattern": "TODO", "path": "src"}, "TODO"),
    ("Glob", {"pattern": "**/*.py"}, "**/*.py"),
    ("LS", {"path": 1}, ""),
    ("TodoWrite", {"todos": []}, ""),
    ("mcp__github__create_issue", {"title": "t", "body": "b"}, "body,title"),
    ("Frobnicate", {}, ""),
]


@pytest.mark.parametrize(("tool", "tool_input", "expected"), TARGETS)
def test_target_of(tool: str, tool_input: dict[str, object], expected: str) -> None:
    assert target_of(tool, tool_input, ROOT) == expected


def test_target_of_odd_roots() -> None:
    assert target_of("Write", {"file_path": "/etc/passwd"}, "/") == "etc/passwd"
    assert target_of("Write", {"file_path": "/w/treeX/a"}, "/w/treeX") == "a"
    assert target_of("Write", {"file_path": "/w/tree/a"}, "/w/treeX") == "/w/tree/a"
    assert target_of("Write", {"file_path": "/w/tree /a"}, "/w/tree ") == "a"
    assert target_of("Write", {"file_path": "/w/tree/a"}, "/w/tree ") == "/w/tree/a"


def test_targets_are_clipped_to_the_limit_and_marked() -> None:
    assert clip_target("a" * TARGET_LIMIT) == "a" * TARGET_LIMIT
    cut = clip_target("a" * (TARGET_LIMIT + 1))
    assert len(cut) == TARGET_LIMIT and cut == "a" * (TARGET_LIMIT - 1) + CLIP
    long_command = "echo " + "x" * 600 + " && git push"
    target = target_of("Bash", {"command": long_command}, ROOT)
    assert len(target) == TARGET_LIMIT and target.endswith(CLIP)
    assert classify("Bash", target) == "irreversible"  # the cut part could push: fail closed
    cut_curl = clip_target("curl https://a.example/" + "x" * 600)
    assert egress_host("Bash", cut_curl) is None  # a cut line names no host the rule trusts
    path = target_of("Write", {"file_path": "d/" * 300 + "f"}, ROOT)
    assert path.endswith(CLIP) and classify("Write", path) == "irreversible"
    # a target of exactly the limit that merely ends in the mark, and a shorter one with it
    assert classify("Write", "a" * (TARGET_LIMIT - 1) + CLIP) == "irreversible"
    assert classify("Write", "src/" + CLIP) == "write"
    assert classify("Bash", "echo " + "b" * (TARGET_LIMIT - 5)) == "write"


def test_url_host() -> None:
    assert url_host(" https://A.B.example/p ") == "a.b.example"
    assert url_host("ftp://user:pw@h.example:21") == "h.example"
    assert url_host("/relative") == ""
    assert url_host("http://[::1") == ""


# ---- classes --------------------------------------------------------------------------------

CLASSES = [
    ("Read", "/etc/shadow", "read"),
    ("Glob", "", "read"),
    ("Grep", "x", "read"),
    ("LS", "", "read"),
    ("NotebookRead", "", "read"),
    ("TodoWrite", "", "read"),
    ("TodoRead", "", "read"),
    ("BashOutput", "", "read"),
    ("KillBash", "", "read"),
    ("KillShell", "", "read"),
    ("ListMcpResourcesTool", "", "read"),
    ("ReadMcpResourceTool", "", "read"),
    ("ExitPlanMode", "", "read"),
    ("Write", "src/a.py", "write"),
    ("Edit", "README.md", "write"),
    ("MultiEdit", "a/b/c", "write"),
    ("NotebookEdit", "n.ipynb", "write"),
    ("Write", "/etc/passwd", "irreversible"),
    ("Write", ".", "irreversible"),
    ("Write", "", "irreversible"),
    ("Edit", ".git/config", "irreversible"),
    ("Edit", "src/.GIT/x", "irreversible"),
    ("WebFetch", "example.com", "irreversible"),
    ("WebSearch", "q", "irreversible"),
    ("mcp__github__create_issue", "title", "irreversible"),
    ("Agent", "", "irreversible"),
    ("Task", "", "irreversible"),
    ("Frobnicate", "", "irreversible"),
]


@pytest.mark.parametrize(("tool", "target", "expected"), CLASSES)
def test_classify_tools(tool: str, target: str, expected: str) -> None:
    assert classify(tool, target) == expected


SHELL = [
    # plain work inside the worktree
    ("ls -la", "write"),
    ("python -m pytest -q", "write"),
    ("git status && git diff", "write"),
    ("git -C sub status", "write"),
    ("git", "write"),
    ("git --version", "write"),
    ("npm -v", "write"),
    ("git -C sub status push", "write"),  # 'push' is a pathspec of status here
    ("git commit -am 'x; git push'", "write"),  # quoted: one word, not a command
    ("rm -rf build dist", "write"),
    ("rm -f -- notes.txt", "write"),
    ("find . -name '*.pyc' -delete", "write"),
    ("kubectl get pods", "write"),
    ("terraform plan", "write"),
    ("helm template x", "write"),
    ("npm test", "write"),
    ("cd src && rm -f old.py", "write"),
    ("echo hi > out.txt", "write"),
    ("echo hi 2>&1 | tee log", "write"),
    ("cargo build", "write"),
    ("docker build .", "write"),
    ("sudo -u nobody ls", "write"),
    ("env A=1 B=2 make", "write"),
    ("timeout 5 make", "write"),
    ("python3 -m build", "write"),
    ("npx -y prettier --check .", "write"),
    ("pipx run black .", "write"),
    ("# git push", "write"),  # '#' is the program word: the shell runs nothing
    ("", "write"),
    ("   ", "write"),
    # push, publish, deploy
    ("git push origin main", "irreversible"),
    ("git -C sub push", "irreversible"),
    ("git -c user.name=x push", "irreversible"),
    ("git --git-dir=.git push", "irreversible"),
    ("/usr/bin/git push", "irreversible"),
    ("git send-email a.patch", "irreversible"),
    ("npm publish", "irreversible"),
    ("yarn publish", "irreversible"),
    ("pnpm publish --access public", "irreversible"),
    ("twine upload dist/*", "irreversible"),
    ("python -m twine upload dist/*", "irreversible"),
    ("python3.12 -m twine upload x", "irreversible"),
    ("cargo publish", "irreversible"),
    ("gh release create v1", "irreversible"),
    ("poetry publish", "irreversible"),
    ("docker push img", "irreversible"),
    ("kubectl apply -f k.yaml", "irreversible"),
    ("kubectl delete pod x", "irreversible"),
    ("terraform apply -auto-approve", "irreversible"),
    ("tofu destroy", "irreversible"),
    ("helm install r c", "irreversible"),
    ("helm upgrade r c", "irreversible"),
    ("pulumi up", "irreversible"),
    ("aws s3 ls", "irreversible"),
    ("gcloud app deploy", "irreversible"),
    ("npx vercel --prod", "irreversible"),
    ("pipx run twine upload x", "irreversible"),
    ("uvx twine upload x", "irreversible"),
    ("ansible-playbook site.yml", "irreversible"),
    ('eval "$X"', "irreversible"),
    # the same inside compound lines
    ("make && git push", "irreversible"),
    ("make; npm publish", "irreversible"),
    ("make || cargo publish", "irreversible"),
    ("make | twine upload -", "irreversible"),
    ("(cd a && git push)", "irreversible"),
    ("make &\ngit push", "irreversible"),
    ("echo `git push`", "irreversible"),
    ("x=$(git push)", "irreversible"),
    ("bash -c 'git push'", "irreversible"),
    ("sh -c \"sh -c 'npm publish'\"", "irreversible"),
    ("FOO=1 sudo -E npm publish", "irreversible"),
    ("nohup git push &", "irreversible"),
    ("xargs -n1 git push", "irreversible"),
    # deleting outside the worktree
    ("rm -rf /", "irreversible"),
    ("rm -rf ~/x", "irreversible"),
    ("rm ../sibling", "irreversible"),
    ("rm a/../../b", "irreversible"),
    ("rm -rf $HOME", "irreversible"),
    ("rmdir /tmp/x", "irreversible"),
    ("unlink /etc/x", "irreversible"),
    ("shred -u /etc/x", "irreversible"),
    ("find / -name x -delete", "irreversible"),
    ("cd /tmp && rm -rf x", "irreversible"),
    ("cd .. && rm x", "irreversible"),
    ("cd && rm x", "irreversible"),
    ("cd - && rm x", "irreversible"),
    ("pushd /tmp; rm x", "irreversible"),
    ("cd /tmp && find . -delete", "irreversible"),
    ("cd /tmp && ls", "write"),  # moved away, but deletes nothing
    ("cd /tmp && rm", "write"),  # rm without an argument deletes nothing
    ("cd /tmp && rm -f", "write"),  # options are not arguments
    ("make && rm -f old.py", "write"),  # only cd/pushd move away
    ("cd -P && rm x", "irreversible"),  # cd with options only: home
    ("echo 'a';git push", "irreversible"),  # punctuation splits words even next to quotes
    ("python", "write"),
    ("python -m", "write"),
    ("python -m aws", "irreversible"),
    ("python build.py twine upload", "write"),  # no -m: python runs build.py
    ("npx vercel", "irreversible"),
    ("npx -y vercel", "irreversible"),
    ("npx run vercel", "write"),  # for npx, 'run' is the package; only pipx has 'run'
    ("npx -y", "write"),
    ("ls 'a' && XDG=1 git push", "irreversible"),  # no comment characters (X, #)
    ("echo X git push", "write"),  # X is a word, not a separator
    ("nice -n 10 git push", "irreversible"),
    ("timeout 60 git push", "irreversible"),
    ("timeout -k 5 1.5m npm publish", "irreversible"),
    ("env A=1 git push", "irreversible"),
    ("env FOO", "write"),
    ("sudo ls", "write"),
    ("bash -c 'ls'; git push", "irreversible"),
    ("rm 'x' foo:/etc", "write"),  # one word (split at whitespace only): a file in the worktree
    # network egress
    ("curl https://example.com", "irreversible"),
    ("wget example.org/f", "irreversible"),
    ("ssh host.example uptime", "irreversible"),
    ("scp a host.example:b", "irreversible"),
    ("rsync -a . h.example:x", "irreversible"),
    ("nc h.example 80", "irreversible"),
    ("git clone https://github.com/a/b", "irreversible"),
    ("git fetch origin", "irreversible"),
    ("git pull", "irreversible"),
    ("git ls-remote origin", "irreversible"),
    # what the rule cannot read
    ("echo 'unbalanced", "irreversible"),
    ("$CMD arg", "irreversible"),
    ("${X}/bin/tool", "irreversible"),
    ("bash -c", "irreversible"),
    ("sh -c 'echo \"x'", "irreversible"),
    ('sh -c "sh -c \'sh -c \\"sh -c ls\\"\'"', "write"),  # depth 4: still parsed
]


@pytest.mark.parametrize(("command", "expected"), SHELL)
def test_classify_shell(command: str, expected: str) -> None:
    assert classify("Bash", command) == expected


@pytest.mark.parametrize(("command", "expected"), SHELL)
def test_classify_shell_through_shlex(command: str, expected: str) -> None:
    """The same table through the shlex path: an empty quoted word changes no command."""
    quoted = command + " ''"
    assert rv._QUOTING.search(quoted) is not None
    assert classify("Bash", quoted) == expected


def test_shell_nesting_deeper_than_four_levels_is_irreversible() -> None:
    command = "ls"
    for _ in range(5):
        command = "sh -c " + _quote(command)
    assert classify("Bash", command) == "irreversible"
    shallower = "ls"
    for _ in range(4):
        shallower = "sh -c " + _quote(shallower)
    assert classify("Bash", shallower) == "write"


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


EGRESS = [
    ("WebFetch", "docs.example.com", "docs.example.com"),
    ("WebFetch", "", ""),
    ("WebSearch", "anything", ""),
    ("Bash", "curl -sS https://API.example.com/v1", "api.example.com"),
    ("Bash", "curl -o out api.example.com/x", "api.example.com"),  # 'out' has no dot
    ("Bash", "wget example.org/f", "example.org"),
    ("Bash", "ssh deploy@host.example.net uptime", "host.example.net"),
    ("Bash", "make && curl https://b.example", "b.example"),
    ("Bash", "curl localhost", ""),  # no dot: not a host name the rule accepts
    ("Bash", "nc", ""),
    ("Bash", "python -m http.server", None),
    ("Bash", "git push", None),
    ("Bash", "echo 'x", None),
    ("Bash", "sudo curl https://c.example", "c.example"),
    ("Bash", "curl --proxy=http://p.example https://real.example", "real.example"),
    ("Read", "https://x.example", None),
    ("Write", "a", None),
]


@pytest.mark.parametrize(("tool", "target", "expected"), EGRESS)
def test_egress_host(tool: str, target: str, expected: str | None) -> None:
    assert egress_host(tool, target) == expected


# ---- decisions ------------------------------------------------------------------------------


def _expected(
    cls: str, in_scope: bool, locked: bool, strictness: str, approved: bool, known: bool
) -> tuple[str, str]:
    """The decision table of docs/spec/review.md §4, written out independently."""
    if cls == "read":
        return "allow", rv.R_READ
    if cls == "write":
        if locked:
            return "deny", rv.R_LOCKED
        if not in_scope and strictness == "loose":
            return "allow", rv.R_OUT_LOOSE
        if not in_scope:
            return "deny", rv.R_OUT
        return "allow", rv.R_WRITE
    if known and strictness in {"loose", "normal"}:
        return "allow", rv.R_KNOWN_HOST
    if strictness == "strictest":
        return "deny", rv.R_STRICTEST
    return ("allow", rv.R_APPROVED) if approved else ("deny", rv.R_UNAPPROVED)


@pytest.mark.parametrize("strictness", rv.STRICTNESS)
@pytest.mark.parametrize("cls", rv.CLASSES)
def test_decide_whole_table(cls: str, strictness: str) -> None:
    for in_scope, locked, approved, known in itertools.product((False, True), repeat=4):
        got = decide(
            cls, in_scope=in_scope, locked=locked, strictness=strictness, approved=approved,
            host_known=known,
        )  # fmt: skip
        assert got == _expected(cls, in_scope, locked, strictness, approved, known), (
            in_scope, locked, approved, known,
        )  # fmt: skip


def test_decide_rows_by_hand() -> None:
    def d(cls: str, strictness: str, **kw: bool) -> tuple[str, str]:
        args = {"in_scope": True, "locked": False, "approved": False, "host_known": False} | kw
        return decide(cls, strictness=strictness, **args)

    assert d("read", "strictest", locked=True, in_scope=False) == ("allow", rv.R_READ)
    assert d("write", "loose") == ("allow", "write: inside the task's scope")
    assert d("write", "loose", in_scope=False)[0] == "allow"
    assert d("write", "normal", in_scope=False) == (
        "deny", "write: the path is outside the task's scope",
    )  # fmt: skip
    assert d("write", "loose", locked=True)[0] == "deny"
    assert d("irreversible", "loose") == (
        "deny", "irreversible: no operator approval within the review wait",
    )  # fmt: skip
    assert d("irreversible", "normal", approved=True) == (
        "allow", "irreversible: approved by the operator",
    )  # fmt: skip
    assert d("irreversible", "normal", host_known=True)[0] == "allow"
    assert d("irreversible", "strict", host_known=True)[0] == "deny"
    assert d("irreversible", "strict", host_known=True, approved=True)[0] == "allow"
    assert d("irreversible", "strictest", approved=True, host_known=True) == (
        "deny", "irreversible: denied in strictest review, approved or not",
    )  # fmt: skip


def test_decide_refuses_unknown_class_and_strictness() -> None:
    with pytest.raises(ValueError, match="unknown class 'delete'"):
        decide("delete", in_scope=True, locked=False, strictness="normal", approved=False,
               host_known=False)  # fmt: skip
    with pytest.raises(ValueError, match="unknown strictness 'lax'"):
        decide("read", in_scope=True, locked=False, strictness="lax", approved=False,
               host_known=False)  # fmt: skip


def test_needs_approval_is_what_decide_says() -> None:
    for cls, strictness, known in itertools.product(rv.CLASSES, rv.STRICTNESS, (False, True)):
        for in_scope, locked in itertools.product((False, True), repeat=2):
            with_approval = decide(
                cls,
                in_scope=in_scope,
                locked=locked,
                strictness=strictness,
                approved=True,
                host_known=known,
            )
            without = decide(cls, in_scope=in_scope, locked=locked, strictness=strictness,
                             approved=False, host_known=known)  # fmt: skip
            wanted = with_approval[0] == "allow" and without[0] == "deny"
            assert needs_approval(cls, strictness=strictness, host_known=known) is wanted
    with pytest.raises(ValueError, match="unknown strictness 'lax'"):
        needs_approval("irreversible", strictness="lax", host_known=False)


def test_needs_approval() -> None:
    assert needs_approval("irreversible", strictness="loose", host_known=False)
    assert not needs_approval("irreversible", strictness="loose", host_known=True)
    assert needs_approval("irreversible", strictness="strict", host_known=True)
    assert not needs_approval("irreversible", strictness="strictest", host_known=False)
    assert not needs_approval("write", strictness="normal", host_known=False)
    assert not needs_approval("read", strictness="strict", host_known=False)


def test_strictness_by_phase() -> None:
    assert [strictness_of(p) for p in ("explore", "implement", "integrate", "converge")] == [
        "loose", "normal", "strict", "strictest",
    ]  # fmt: skip
    assert rv.DEFAULT_PHASE == "implement"
    with pytest.raises(ValueError, match="unknown phase 'ship'"):
        strictness_of("ship")


def test_strictness_agrees_with_the_phase_profiles() -> None:
    """One table: the review strictness of each phase is the phase profile's ``review``."""
    phases = pytest.importorskip("harness.verify.rules.phases")
    for name, profile in phases.PROFILES.items():
        review = profile["review"] if isinstance(profile, dict) else profile.review
        assert strictness_of(name) == review


@pytest.mark.parametrize(
    "command",
    ["ls\ngit push", "make\r\nnpm publish", "echo a\n\ncargo publish", "x=1\ncurl https://e.x"],
)
def test_a_newline_ends_a_command(command: str) -> None:
    assert classify("Bash", command) == "irreversible"


def _shlex_words(text: str) -> list[str]:
    import shlex

    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = ""
    return list(lexer)


def test_the_fast_tokenizer_is_shlex_without_quotes() -> None:
    """Lines without quotes or backslashes are split by a regular expression; it must give
    exactly shlex's words (the spec defines the split by shlex)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    alphabet = st.sampled_from(list("ab -_./~*?=$#{}:@,+%!^[]\t;&|()<>\r\x0b\x0c\u00a0é0"))

    @settings(max_examples=3000, deadline=None)
    @given(st.lists(alphabet, max_size=40).map("".join))
    def same(text: str) -> None:
        assert rv._QUOTING.search(text) is None
        assert rv._TOKEN.findall(text) == _shlex_words(text)

    same()
    quoted = "git commit -m 'a; git push' && echo \"x|y\""
    assert rv._QUOTING.search(quoted) is not None  # this one goes through shlex
    assert classify("Bash", quoted) == "write"
