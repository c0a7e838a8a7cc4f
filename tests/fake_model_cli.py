"""A fake agent CLI that finds its model the way the real ones do: through the environment.

``python fake_model_cli.py anthropic|chat|responses [--stream] PROMPT`` reads
``ANTHROPIC_BASE_URL`` (Claude Code, the Anthropic SDK: ``<base>/v1/messages``, key in
``x-api-key``, ``anthropic-version`` header) or ``OPENAI_BASE_URL`` (Codex, the OpenAI SDK:
``<base>/chat/completions`` or ``<base>/responses``, key as ``Authorization: Bearer``), with
the key from ``ANTHROPIC_API_KEY`` / ``OPENAI_API_KEY``, sends a JSON request, and prints the
assembled answer text (from the JSON body, or from the text deltas of the event stream).
Exit 1 with the API's error message on a non-200 answer, as a CLI surfaces it.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request


def main(argv: list[str]) -> int:
    shape, rest = argv[0], argv[1:]
    stream = "--stream" in rest
    prompt = [word for word in rest if word != "--stream"][-1]
    messages = [{"role": "user", "content": prompt}]
    if shape == "anthropic":
        url = os.environ["ANTHROPIC_BASE_URL"].rstrip("/") + "/v1/messages"
        headers = {
            "x-api-key": os.environ.get("ANTHROPIC_API_KEY", ""),
            "anthropic-version": "2023-06-01",
        }
        body: dict[str, object] = {
            "model": "claude-fake", "max_tokens": 100, "messages": messages,
            "metadata": {"user_id": f"session-{os.getpid()}"},
        }  # fmt: skip
    else:
        base = os.environ["OPENAI_BASE_URL"].rstrip("/")
        headers = {"Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "")}
        if shape == "chat":
            url = base + "/chat/completions"
            body = {"model": "gpt-fake", "messages": messages}
            if stream:
                body["stream_options"] = {"include_usage": True}
        else:
            url = base + "/responses"
            body = {"model": "gpt-fake", "input": prompt}
    if stream:
        body["stream"] = True
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", **headers},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            data = response.read()
    except urllib.error.HTTPError as exc:
        print("error: " + json.loads(exc.read())["error"]["message"], file=sys.stderr)
        return 1
    print(answer(shape, stream, data))
    return 0


def answer(shape: str, stream: bool, data: bytes) -> str:
    if not stream:
        document = json.loads(data)
        if shape == "anthropic":
            return str(document["content"][0]["text"])
        if shape == "chat":
            return str(document["choices"][0]["message"]["content"])
        return str(document["output"][0]["content"][0]["text"])
    text = []
    for line in data.decode().splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        if shape == "anthropic" and event.get("type") == "content_block_delta":
            text.append(event["delta"]["text"])
        elif shape == "chat" and event.get("choices"):
            text.append(event["choices"][0]["delta"].get("content", ""))
        elif shape == "responses" and event.get("type") == "response.output_text.delta":
            text.append(event["delta"])
    return "".join(text)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
