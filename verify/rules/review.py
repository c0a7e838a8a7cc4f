"""The action review gate (issue 13 §5): classify an agent's tool call, then decide it.

Every tool call an agent CLI is about to make is reviewed *before it runs* (for Claude Code
through its PreToolUse hook, docs/spec/review.md). Three pure steps, used twice — by the
runtime to answer the hook and by the verifier to re-decide every recorded review:

* ``target_of(tool, tool_input, root)`` (runtime side only: ``tool_input`` is not recorded,
  its SHA-256 is) -> the normalised **target** the rule classifies: for the path tools a
  path (relative to the worktree ``root`` when inside it, else absolute), for ``Bash`` the
  command, for ``WebFetch`` the URL's host, for ``WebSearch`` the query; at most
  ``TARGET_LIMIT`` characters (a longer one is cut and ends in ``CLIP``);
* ``classify(tool, target)`` -> ``read`` | ``write`` | ``irreversible``;
* ``decide(cls, in_scope=, locked=, strictness=, approved=, host_known=)`` ->
  ``(decision, reason)``, ``decision`` ``allow`` | ``deny``, ``reason`` one of the fixed texts
  below (the verifier compares it exactly).

The worktree is the undo boundary: whatever an agent does inside it is reviewed again at
retirement (scope check on the diff, gates, merge or not), so a write there is reversible.
Everything that escapes it is **irreversible**: pushing, publishing, deploying, deleting or
writing outside the worktree, network egress, and any tool whose effect the rule does not know
(an unknown tool, an MCP tool, a shell command it cannot parse, a cut target). Failing closed
means: when in doubt, irreversible — it then needs an operator's approval.

Strictness (by the run's phase, ``STRICTNESS_BY_PHASE``) changes exactly this:

=========== ==================================================================================
loose       read passes; a write passes unless its path is write-locked by another batch in
            flight (a write outside the task's scope passes: the retirement scope check still
            fails the batch); irreversible needs an approval, except egress to a host already
            approved for the task
normal      as loose, and a write outside the task's scope is denied
strict      as normal, and every network egress needs an approval (known hosts too)
strictest   as strict, and irreversible is denied even with an approval
=========== ==================================================================================

No I/O, no clock: integers and strings in, strings out.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from . import phases
from .scope import check_rel_path

CLASSES: Final = ("read", "write", "irreversible")
DECISIONS: Final = ("allow", "deny")
STRICTNESS: Final = phases.STRICTNESS
STRICTNESS_BY_PHASE: Final[Mapping[str, str]] = {
    name: profile.review for name, profile in phases.PROFILES.items()
}
"""Review strictness per phase: the ``review`` of ``rules.phases.PROFILES`` (issue 13 §7),
read from there so the phase table is the one definition."""
DEFAULT_PHASE: Final = "implement"
"""The phase of a run that records no ``control.phase``."""

TARGET_LIMIT: Final = 512
"""Characters (Unicode code points) of a target, at most."""
CLIP: Final = "\u2026"
"""Ends a cut target: ``target[:TARGET_LIMIT - 1] + CLIP``. A cut target is irreversible."""

PATH_TOOLS: Final[Mapping[str, str]] = {
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
}
"""Tools that change one file, and the ``tool_input`` member naming it."""
READ_TOOLS: Final[Mapping[str, str | None]] = {
    "Read": "file_path",
    "Glob": "pattern",
    "Grep": "pattern",
    "LS": "path",
    "NotebookRead": "notebook_path",
    "TodoWrite": None,
    "TodoRead": None,
    "BashOutput": "bash_id",
    "KillBash": "shell_id",
    "KillShell": "shell_id",
    "ListMcpResourcesTool": "server",
    "ReadMcpResourceTool": "uri",
    "ExitPlanMode": None,
}
"""Tools that change nothing outside the agent's own session (its todo list, its own
background shells), and the member shown as their target (None: the target is empty)."""
SHELL_TOOLS: Final = ("Bash",)
WEB_FETCH: Final = "WebFetch"
WEB_SEARCH: Final = "WebSearch"

# Shell commands. A command line is split into simple commands at ; & | && || ( ) < >,
# newlines and backquotes; each is classified by its program (the first word after
# assignments and wrappers, through ``sh -c``, ``python -m`` and launchers such as ``npx``)
# and, for some programs, its subcommand. A redirection's target becomes a word list of its
# own (classified as a write: the shell's writes are confined by the sandbox).
_WRAPPERS: Final = frozenset(
    {"sudo", "env", "command", "nohup", "time", "nice", "exec", "xargs", "builtin", "doas",
     "timeout", "setsid", "stdbuf", "ionice"}
)  # fmt: skip
_DURATION: Final = re.compile(r"[0-9]+(?:\.[0-9]+)?[smhd]?")
_SHELLS: Final = frozenset({"sh", "bash", "dash", "zsh", "ksh"})
_ASSIGNMENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.DOTALL)
_SUBCOMMANDS: Final[Mapping[str, frozenset[str]]] = {
    "git": frozenset({"push", "send-email"}),
    "npm": frozenset({"publish", "unpublish", "deprecate"}),
    "yarn": frozenset({"publish", "npm"}),
    "pnpm": frozenset({"publish"}),
    "bun": frozenset({"publish"}),
    "twine": frozenset({"upload", "register"}),
    "cargo": frozenset({"publish", "yank", "owner"}),
    "poetry": frozenset({"publish"}),
    "uv": frozenset({"publish"}),
    "hatch": frozenset({"publish"}),
    "flit": frozenset({"publish"}),
    "gem": frozenset({"push", "yank"}),
    "gh": frozenset({"release", "repo", "secret", "gist", "workflow", "pr", "issue", "api"}),
    "docker": frozenset({"push", "login"}),
    "podman": frozenset({"push", "login"}),
    "mvn": frozenset({"deploy"}),
    "kubectl": frozenset(
        {
            "apply",
            "create",
            "delete",
            "replace",
            "patch",
            "rollout",
            "scale",
            "set",
            "edit",
            "label",
            "annotate",
            "drain",
            "cordon",
            "uncordon",
            "taint",
            "expose",
            "run",
        }
    ),
    "terraform": frozenset({"apply", "destroy", "import", "taint", "untaint", "state"}),
    "tofu": frozenset({"apply", "destroy", "import", "taint", "untaint", "state"}),
    "helm": frozenset({"install", "upgrade", "uninstall", "delete", "rollback", "push"}),
    "pulumi": frozenset({"up", "destroy", "refresh", "import"}),
    "fly": frozenset({"deploy", "launch", "destroy"}),
    "flyctl": frozenset({"deploy", "launch", "destroy"}),
    "netlify": frozenset({"deploy"}),
    "firebase": frozenset({"deploy"}),
    "wrangler": frozenset({"deploy", "publish"}),
    "serverless": frozenset({"deploy", "remove"}),
    "sls": frozenset({"deploy", "remove"}),
}
"""Programs whose listed subcommands push, publish or deploy."""
_ALWAYS: Final = frozenset(
    {"aws", "gcloud", "az", "heroku", "vercel", "ansible-playbook", "eval", "crontab", "at",
     "systemctl", "shutdown", "reboot", "mount", "umount", "dd", "mkfs"}
)  # fmt: skip
"""Programs irreversible whatever their arguments (cloud CLIs act on remote state; ``eval``
runs text the rule cannot see)."""
_DELETERS: Final = frozenset({"rm", "rmdir", "unlink", "shred", "srm", "trash", "trash-put"})
_EGRESS: Final = frozenset(
    {"curl", "wget", "http", "https", "xh", "aria2c", "nc", "ncat", "netcat", "socat", "ssh",
     "scp", "sftp", "rsync", "ftp", "telnet", "git-remote-http"}
)  # fmt: skip
"""Programs whose purpose is network traffic."""
_QUOTING: Final = re.compile(r"['\"\\]")
_TOKEN: Final = re.compile(r"[;&|()<>]+|[^ \t\r\n;&|()<>]+")
_GIT_VALUE_OPTIONS: Final = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"})
_HOST_RE: Final = re.compile(r"(?:[A-Za-z0-9_.+-]+@)?([A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)")

# The reasons ``decide`` gives (exact texts: the verifier compares them).
R_READ: Final = "read: changes nothing"
R_LOCKED: Final = "write: the path is write-locked by another batch in flight"
R_OUT_LOOSE: Final = "write outside the task's scope: passes (loose review; retirement decides)"
R_OUT: Final = "write: the path is outside the task's scope"
R_WRITE: Final = "write: inside the task's scope"
R_KNOWN_HOST: Final = "egress to a host already approved for the task"
R_STRICTEST: Final = "irreversible: denied in strictest review, approved or not"
R_APPROVED: Final = "irreversible: approved by the operator"
R_UNAPPROVED: Final = "irreversible: no operator approval within the review wait"


def clip_target(text: str) -> str:
    """``text`` if it has at most ``TARGET_LIMIT`` characters, else its first
    ``TARGET_LIMIT - 1`` followed by ``CLIP``."""
    return text if len(text) <= TARGET_LIMIT else text[: TARGET_LIMIT - 1] + CLIP


def _clipped(target: str) -> bool:
    return len(target) == TARGET_LIMIT and target.endswith(CLIP)


def _path_target(value: Any, root: str) -> str:
    """The path ``value`` names, normalised lexically: relative to ``root`` when inside it
    (``root`` itself is ``.``), else absolute. A relative value is taken relative to
    ``root`` (the agent's working directory is its worktree). Not a string: empty."""
    if type(value) is not str or not value or "\x00" in value:
        return ""
    path = posixpath.normpath(posixpath.join(root, value))  # an absolute value stays itself
    if path.startswith("//"):
        path = "/" + path.lstrip("/")
    base = posixpath.normpath(root)
    if path == base:
        return "."
    if path.startswith(base.rstrip("/") + "/"):
        return path[len(base.rstrip("/")) + 1 :]
    return path


def url_host(url: str) -> str:
    """The host of ``url`` in lower case (no port, no user); empty when it has none."""
    try:
        host = urlsplit(url.strip()).hostname
    except ValueError:
        return ""
    return host or ""


def target_of(tool: str, tool_input: Mapping[str, Any], root: str) -> str:
    """The normalised target of one tool call (see the module docstring), clipped.

    ``root`` is the batch's worktree (absolute). Inputs of the wrong type give an empty
    target (which classifies as irreversible for the path tools and as the tool's class
    otherwise). Unknown tools: the sorted member names of their input, comma-separated.
    """
    if tool in PATH_TOOLS:
        return clip_target(_path_target(tool_input.get(PATH_TOOLS[tool]), root))
    if tool in SHELL_TOOLS:
        command = tool_input.get("command")
        return clip_target(command if type(command) is str else "")
    if tool == WEB_FETCH:
        url = tool_input.get("url")
        return clip_target(url_host(url) if type(url) is str else "")
    if tool == WEB_SEARCH:
        query = tool_input.get("query")
        return clip_target(query if type(query) is str else "")
    if tool in READ_TOOLS:
        member = READ_TOOLS[tool]
        value = tool_input.get(member) if member is not None else None
        return clip_target(value if type(value) is str else "")
    return clip_target(",".join(sorted(str(key) for key in tool_input)))


def _commands(text: str, depth: int = 0) -> list[list[str]] | None:
    """The simple commands of a shell command line as word lists; None when it cannot be
    parsed (unbalanced quotes, nesting deeper than 4 ``sh -c`` levels)."""
    if depth > 4:
        return None
    line = text.replace("`", " ; ").replace("\n", " ; ")
    if _QUOTING.search(line) is None:
        words = _TOKEN.findall(line)  # what shlex gives for a line without quotes or escapes
    else:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
        lexer.whitespace_split = True
        lexer.commenters = ""
        try:
            words = list(lexer)
        except ValueError:
            return None
    commands: list[list[str]] = [[]]
    for word in words:
        if word and all(ch in ";&|()<>\n" for ch in word):
            commands.append([])
        else:
            commands[-1].append(word)
    out: list[list[str]] = []
    for command in commands:
        words_left = [w for w in command if w != ""]
        while words_left and _ASSIGNMENT.fullmatch(words_left[0]):
            words_left.pop(0)
        while words_left and posixpath.basename(words_left[0]) in _WRAPPERS:
            words_left.pop(0)
            while words_left and (
                words_left[0].startswith("-")
                or _ASSIGNMENT.fullmatch(words_left[0])
                or _DURATION.fullmatch(words_left[0])
            ):
                words_left.pop(0)
        if not words_left:
            continue
        program = posixpath.basename(words_left[0])
        if program in _SHELLS and "-c" in words_left[1:]:
            index = words_left.index("-c")
            if index + 1 >= len(words_left):
                return None
            inner = _commands(words_left[index + 1], depth + 1)
            if inner is None:
                return None
            out.extend(inner)
            continue
        out.append(words_left)
    return out


def _subcommand(words: list[str]) -> str | None:
    """The first word after the program that is not an option (skipping the values of
    git's global options that take one)."""
    index = 1
    while index < len(words):
        word = words[index]
        if word in _GIT_VALUE_OPTIONS:
            index += 2
            continue
        if not word.startswith("-"):
            return word
        index += 1
    return None


def _outside(word: str) -> bool:
    """A path argument that may name something outside the working directory: absolute, in
    a home (``~``), with a ``..`` segment, or with an expansion the rule cannot evaluate."""
    return word.startswith(("/", "~")) or ".." in word.split("/") or "$" in word


def shell_egress_host(words: list[str]) -> str | None:
    """For a simple command of an egress program, the host it talks to ("" when none can be
    read from its words); None when the program is not an egress program."""
    if posixpath.basename(words[0]) not in _EGRESS:
        return None
    for word in words[1:]:
        if word.startswith("-"):
            continue
        if "://" in word:
            return url_host(word)
        match = _HOST_RE.match(word)
        if match is not None and "." in match.group(1):
            return match.group(1).lower()
    return ""


_LAUNCHERS: Final = frozenset({"npx", "uvx", "pipx", "bunx"})


def _program_words(words: list[str]) -> list[str]:
    """The words of the program that really runs: ``python -m twine upload`` is ``twine
    upload``, ``npx vercel`` is ``vercel`` (``pipx run X`` is ``X``)."""
    while len(words) > 1:
        program = posixpath.basename(words[0])
        if re.fullmatch(r"python[0-9.]*", program) and words[1] == "-m" and len(words) > 2:
            words = words[2:]
        elif program in _LAUNCHERS:
            rest = [w for w in words[1:] if not w.startswith("-")]
            if program == "pipx" and rest[:1] == ["run"]:
                rest = rest[1:]
            if not rest:
                break
            words = words[words.index(rest[0]) :]
        else:
            break
    return words


def _irreversible(words: list[str], moved: bool) -> bool:
    """Whether one simple command is irreversible; ``moved``: an earlier ``cd``/``pushd`` of
    the line left the working directory for somewhere the rule cannot place."""
    words = _program_words(words)
    program = posixpath.basename(words[0])
    if "$" in words[0] or program in _ALWAYS or program in _EGRESS:
        return True
    subcommands = _SUBCOMMANDS.get(program)
    if subcommands is not None and _subcommand(words) in subcommands:
        return True
    arguments = [w for w in words[1:] if not w.startswith("-")]
    if program in _DELETERS and (
        (moved and bool(arguments)) or any(_outside(w) for w in arguments)
    ):
        return True
    if program == "find" and "-delete" in words and (moved or any(_outside(w) for w in words)):
        return True
    # git talking to a remote
    return program == "git" and _subcommand(words) in ("clone", "fetch", "pull", "ls-remote")


def _moves_away(words: list[str]) -> bool:
    """A ``cd``/``pushd`` to a place outside the working directory (or to a home)."""
    if posixpath.basename(words[0]) not in ("cd", "pushd"):
        return False
    arguments = [w for w in words[1:] if not w.startswith("-")]
    return not arguments or any(_outside(w) for w in arguments)  # "cd -": no argument


def egress_host(tool: str, target: str) -> str | None:
    """The host a call sends to, when it is network egress: ``WebFetch``'s target, the host
    of a shell command's first egress program ("" if unreadable); for ``WebSearch`` "" (the
    search provider: never a known host). None when the call is not egress."""
    if tool == WEB_FETCH:
        return target
    if tool == WEB_SEARCH:
        return ""
    if tool in SHELL_TOOLS and not _clipped(target):
        commands = _commands(target)
        for words in commands or []:
            host = shell_egress_host(_program_words(words))
            if host is not None:
                return host
    return None


def classify(tool: str, target: str) -> str:
    """``read``, ``write`` or ``irreversible`` (see the module docstring).

    Path tools: a relative path the repository accepts (``scope.check_rel_path``) is a
    write; an absolute one (outside the worktree), ``.git``, ``.``, empty or cut, is
    irreversible. Shell: irreversible when any simple command pushes, publishes, deploys,
    talks to the network, deletes outside the working directory, or the line cannot be
    parsed or was cut; else write (the shell can change anything in the worktree). Web
    tools: irreversible (egress). Read tools: read. Any other tool (``mcp__*`` included):
    irreversible.
    """
    if tool in READ_TOOLS:
        return "read"
    if _clipped(target):
        return "irreversible"
    if tool in PATH_TOOLS:
        return "write" if check_rel_path(target) is None else "irreversible"
    if tool in SHELL_TOOLS:
        commands = _commands(target)
        if commands is None:
            return "irreversible"
        moved = False
        for words in commands:
            if _irreversible(words, moved):
                return "irreversible"
            moved = moved or _moves_away(words)
        return "write"
    return "irreversible"


def strictness_of(phase: str) -> str:
    """The review strictness of ``phase``; ValueError for an unknown phase."""
    try:
        return STRICTNESS_BY_PHASE[phase]
    except KeyError:
        raise ValueError(f"unknown phase {phase!r}") from None


def decide(
    cls: str,
    *,
    in_scope: bool,
    locked: bool,
    strictness: str,
    approved: bool,
    host_known: bool,
) -> tuple[str, str]:
    """``(decision, reason)`` for one classified call.

    ``in_scope``: the target is a path inside the batch's scope (the union of its tasks'
    scope globs); True for calls that are not path tools (their effect is checked at
    retirement). ``locked``: the path matches a glob of a lock another batch in flight
    holds. ``approved``: an operator's approval command was applied for this review.
    ``host_known``: the call is egress to a host already approved for the task (the plan's
    capsule egress list, or an earlier approved egress of the task to it). ValueError for
    an unknown class or strictness.
    """
    if strictness not in STRICTNESS:
        raise ValueError(f"unknown strictness {strictness!r}")
    if cls == "read":
        return "allow", R_READ
    if cls == "write":
        if locked:
            return "deny", R_LOCKED
        if not in_scope:
            return ("allow", R_OUT_LOOSE) if strictness == "loose" else ("deny", R_OUT)
        return "allow", R_WRITE
    if cls == "irreversible":
        if host_known and strictness in ("loose", "normal"):
            return "allow", R_KNOWN_HOST
        if strictness == "strictest":
            return "deny", R_STRICTEST
        if approved:
            return "allow", R_APPROVED
        return "deny", R_UNAPPROVED
    raise ValueError(f"unknown class {cls!r}")


def needs_approval(cls: str, *, strictness: str, host_known: bool) -> bool:
    """Whether a call of ``cls`` waits for an operator: exactly when ``decide`` with an
    approval would allow it and without one would deny it — an irreversible call, unless
    strictest (denied anyway) or an egress to a known host in loose or normal review (allowed
    anyway). ValueError for an unknown strictness."""
    if strictness not in STRICTNESS:
        raise ValueError(f"unknown strictness {strictness!r}")
    if cls != "irreversible" or strictness == "strictest":
        return False
    return not (host_known and strictness in ("loose", "normal"))
