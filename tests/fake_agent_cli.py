"""A fake ``claude`` / ``codex`` / ``gemini`` CLI (stdlib only: it also runs inside the sandbox).

Installed by the tests as an executable named ``claude`` or ``codex`` (the name picks the
behaviour) on a PATH folder. Like the real CLIs it reads the prompt on stdin, finds its model
through ``ANTHROPIC_BASE_URL`` / ``OPENAI_BASE_URL`` with the key from ``ANTHROPIC_API_KEY``
/ ``OPENAI_API_KEY``, sends the request with ``urllib`` honouring the proxy variables
(``HTTP_PROXY``, ``NO_PROXY``), writes the answer into ``answer-<name>-<task>.txt`` in its
working directory (the worktree; ``<task>`` from the prompt's ``[<task id>]`` prefix), and
prints the output format the adapter parses (claude: one JSON result object; codex: JSONL
events) with **made-up usage figures** (999999 tokens), so a
test can tell the proxy's figures from the agent's claim.

Named ``gemini``, it speaks the Gemini API as the @google/genai SDK does: base URL
``GOOGLE_GEMINI_BASE_URL``, ``GEMINI_API_KEY`` sent as ``x-goog-api-key``, the model and the
stream in the path (``/v1beta/models/gemini-fake:streamGenerateContent?alt=sse``), and prints
the gemini adapter's one JSON object (``response``, ``stats``).

Words in the prompt switch on extra behaviour:

* ``OFFLIST``: also GET ``http://example.invalid/steal`` through the proxy variables (a client
  that honours them sends it to the proxy, which must refuse it), and POST to a route that is
  not on the allow-list;
* ``DIRECT host:port``: also try a direct TCP connection there (it must fail in the sandbox);
* ``STRANGER``: also POST a model request to the proxy with another key (as a local process
  that is not the agent would);
* ``TWICE``: ask the model two questions;
* ``STREAM``: ask for a stream.

What it saw goes to ``<HOME>/../io/agent.json``: its environment (names and values), the
statuses of the extra requests, whether the direct connection worked.

Given a rounds role's prompt (tests/test_proxy_rounds.py), it plays that role and writes no
file (a Manager's and an Auditor's sandbox is read-only, with no io folder): the Manager
(``Next: gui|cli`` in its prompt) answers the model's text and ``Next: cli``, or ``Next:
done`` once an Auditor report saying ``AUDIT-OK`` is in its prompt; the Auditor (the header
rules in its prompt) answers a complete, clean, aligned header, ``AUDIT-OK`` and the model's
text. Either adds a line ``Direct: ...`` (the ``DIRECT`` word) and a line ``Secrets: ...``
naming any variable whose value starts with ``sk-`` (the tests' operator keys do).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import urllib.error
import urllib.request
from pathlib import Path


def _post(url: str, body: dict[str, object], headers: dict[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", **headers},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # env proxies honoured
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError as exc:
        return 0, str(exc).encode()


def _text(name: str, stream: bool, data: bytes) -> str:
    if name == "gemini":  # GenerateContentResponse(s): candidates[0].content.parts[].text
        lines = [line[6:] for line in data.decode().splitlines() if line.startswith("data: ")]
        chunks = [json.loads(line) for line in lines] if stream else [json.loads(data)]
        return "".join(
            part.get("text", "") for chunk in chunks
            for part in chunk["candidates"][0]["content"]["parts"]
        )  # fmt: skip
    if not stream:
        document = json.loads(data)
        if name == "claude":
            return str(document["content"][0]["text"])
        return str(document["output"][0]["content"][0]["text"])
    parts = []
    for line in data.decode().splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        if name == "claude" and event.get("type") == "content_block_delta":
            parts.append(event["delta"]["text"])
        elif name == "codex" and event.get("type") == "response.output_text.delta":
            parts.append(event["delta"])
    return "".join(parts)


def ask(name: str, question: str, stream: bool) -> tuple[int, str]:
    if name == "claude":
        url = os.environ["ANTHROPIC_BASE_URL"].rstrip("/") + "/v1/messages"
        headers = {"x-api-key": os.environ.get("ANTHROPIC_API_KEY", ""),
                   "anthropic-version": "2023-06-01"}  # fmt: skip
        body: dict[str, object] = {
            "model": "claude-fake", "max_tokens": 100,
            "messages": [{"role": "user", "content": question}],
            "metadata": {"user_id": f"session-{os.getpid()}"},  # unkeyed: differs per run
        }  # fmt: skip
    elif name == "gemini":  # the model and the stream are the path's; no body member says so
        method = "streamGenerateContent?alt=sse" if stream else "generateContent"
        base = os.environ["GOOGLE_GEMINI_BASE_URL"].rstrip("/")
        url = f"{base}/v1beta/models/gemini-fake:{method}"
        headers = {"x-goog-api-key": os.environ.get("GEMINI_API_KEY", "")}
        body = {"contents": [{"role": "user", "parts": [{"text": question}]}]}
        stream = False  # no "stream" member
    else:
        url = os.environ["OPENAI_BASE_URL"].rstrip("/") + "/responses"
        headers = {"Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "")}
        body = {"model": "gpt-fake", "input": question, "user": f"u-{os.getpid()}"}
    if stream:
        body["stream"] = True
    status, data = _post(url, body, headers)
    stream = stream or url.endswith("alt=sse")
    if status != 200:
        try:
            return status, str(json.loads(data)["error"]["message"])
        except (ValueError, KeyError, TypeError):
            return status, data.decode("utf-8", "replace")
    return status, _text(name, stream, data)


def _base() -> str:
    for name in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL"):
        if os.environ.get(name):
            return os.environ[name]
    raise KeyError("no base URL")


def _direct(words: list[str]) -> str:
    host, _, port = words[words.index("DIRECT") + 1].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            return "connected"
    except OSError as exc:
        return f"refused: {exc}"


def _role(name: str, role: str, prompt: str) -> int:
    """A rounds role: one model question, the role's answer on stdout, no file written."""
    status, text = ask(name, f"{role}: {prompt}", False)
    if status != 200:
        return fail(name, {}, f"model call failed ({status}): {text}", dump=False)
    words = prompt.split()
    secrets = sorted(k for k, v in os.environ.items() if v.startswith("sk-"))
    extra = [f"Secrets: {', '.join(secrets) or 'none'}"]
    if "DIRECT" in words:
        extra.append(f"Direct: {_direct(words)}")
    if role == "manager":
        action = "done" if "AUDIT-OK" in prompt else "cli"
        answer = "\n".join([text, *extra, f"Next: {action}"])
    else:
        header = ["Status: complete", "Integrity: clean", "Contract audit: aligned"]
        answer = "\n".join([*header, f"AUDIT-OK {text}", *extra])
    _print(name, answer, {"input_tokens": 999999, "output_tokens": 999999})
    return 0


def main() -> int:
    name = Path(sys.argv[0]).name
    prompt = sys.stdin.read()
    if "Next: gui|cli" in prompt:
        return _role(name, "manager", prompt)
    if "Begin your report with exactly these three lines" in prompt:
        return _role(name, "auditor", prompt)
    seen: dict[str, object] = {"argv": sys.argv[1:], "env": dict(os.environ)}
    stream = "STREAM" in prompt
    answers = []
    for question in ["first", "second"] if "TWICE" in prompt else ["only"]:
        status, text = ask(name, f"{question}: {prompt}", stream)
        if status != 200:
            return fail(name, seen, f"model call failed ({status}): {text}")
        answers.append(text)
    if "OFFLIST" in prompt:
        try:
            with urllib.request.urlopen("http://example.invalid/steal", timeout=10) as response:
                seen["offlist"] = response.status
        except urllib.error.HTTPError as exc:
            seen["offlist"] = exc.code
        except OSError as exc:
            seen["offlist"] = f"error: {exc}"
        base = _base()
        proxy = base.split("/", 3)
        other = f"{proxy[0]}//{proxy[2]}/nowhere/v1/messages"
        seen["offroute"] = _post(other, {"model": "m"}, {})[0]
    words = prompt.split()
    if "STRANGER" in words:  # what another local process, without the agent's key, gets
        base = _base()
        seen["stranger"] = _post(base + "/v1/messages", {"model": "m"}, {"x-api-key": "sk-x"})[0]
    if "DIRECT" in words:
        seen["direct"] = _direct(words)
    _dump(seen)
    text = "\n".join(answers)
    task = prompt[1 : prompt.index("]")] if prompt.startswith("[") else "x"
    Path(f"answer-{name}-{task}.txt").write_text(text + "\n", encoding="utf-8")
    _print(name, text, {"input_tokens": 999999, "output_tokens": 999999})
    return 0


def _print(name: str, text: str, claim: dict[str, int]) -> None:
    """The adapter's output format for a successful answer (usage: the made-up claim)."""
    if name == "claude":
        print(json.dumps({"type": "result", "subtype": "success", "is_error": False,
                          "result": text, "session_id": "s", "num_turns": 1,
                          "total_cost_usd": 0.5, "usage": claim}))  # fmt: skip
    elif name == "gemini":
        tokens = {"prompt": 999999, "candidates": 999999, "total": 1999998}
        print(json.dumps({"response": text,
                          "stats": {"models": {"gemini-fake": {"tokens": tokens}}}}))  # fmt: skip
    else:
        for event in (
            {"type": "thread.started", "thread_id": "t"},
            {"type": "turn.started"},
            {"type": "item.completed",
             "item": {"id": "item_0", "type": "agent_message", "text": text}},
            {"type": "turn.completed", "usage": {**claim, "cached_input_tokens": 0}},
        ):  # fmt: skip
            print(json.dumps(event))


def fail(name: str, seen: dict[str, object], message: str, *, dump: bool = True) -> int:
    if dump:
        _dump(seen)
    if name == "claude":
        print(json.dumps({"type": "result", "subtype": "error_during_execution",
                          "is_error": True, "result": message}))  # fmt: skip
    elif name == "gemini":
        print(json.dumps({"error": {"type": "ApiError", "message": message, "code": 1}}))
    else:
        print(json.dumps({"type": "turn.failed", "error": {"message": message}}))
    return 1


def _dump(seen: dict[str, object]) -> None:
    io = Path(os.environ["HOME"]).parent / "io"
    (io / "agent.json").write_text(json.dumps(seen, sort_keys=True), encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
