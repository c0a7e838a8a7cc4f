"""A fake model server on 127.0.0.1 speaking the real HTTP shapes, with deterministic answers.

Endpoints (each non-streaming and, with ``"stream": true``, server-sent events shaped and
named as the real APIs send them, ``usage`` where they put it):

* Anthropic Messages ``POST /v1/messages``: a ``message`` object; the stream is
  ``message_start`` (``message.usage.input_tokens``), ``content_block_start``, ``ping``,
  ``content_block_delta`` (``text_delta``) per word, ``content_block_stop``,
  ``message_delta`` (``usage.output_tokens``), ``message_stop``.
* OpenAI Chat Completions ``POST /v1/chat/completions``: a ``chat.completion``; the stream is
  ``chat.completion.chunk`` data lines, a last chunk with ``usage`` (and empty ``choices``)
  when ``stream_options.include_usage`` is set, then ``data: [DONE]``.
* OpenAI Responses ``POST /v1/responses``: a ``response``; the stream is ``response.created``,
  ``response.in_progress``, ``response.output_item.added``, ``response.content_part.added``,
  ``response.output_text.delta`` per word, ``response.output_text.done``,
  ``response.content_part.done``, ``response.output_item.done``, ``response.completed``
  (``response.usage``).
* Gemini API ``POST /v1beta/models/{model}:generateContent``: a ``GenerateContentResponse``
  (``candidates[0].content.parts[].text``, ``usageMetadata`` with ``promptTokenCount``,
  ``cachedContentTokenCount``, ``candidatesTokenCount``, ``thoughtsTokenCount``);
  ``:streamGenerateContent?alt=sse`` is one ``data:`` line per word, each a response whose
  ``usageMetadata`` holds the running figures, the last one the whole answer's (without
  ``alt=sse``: one JSON array of the same responses); ``:countTokens`` a ``totalTokens``.
  The model is the path's; the credential is ``x-goog-api-key``.

The answer and the token counts are functions of the request body only. ``seen`` keeps what
each request carried (path, headers, body) so tests can check what reached the upstream;
``gate``, when set to an unset ``threading.Event``, holds every stream after its first event
until the test sets it (the proof that the proxy passes bytes through as they arrive).
A model named ``status-<NNN>`` answers that HTTP status with an API-shaped error.

Run alone: ``python tests/fake_model_server.py`` prints ``PORT`` and serves until killed.
"""

from __future__ import annotations

import hashlib
import json
import socket
import sys
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Seen:
    path: str
    headers: dict[str, str]
    body: bytes


def answer_words(body: dict[str, Any]) -> list[str]:
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    return ["Answer", digest[:8], "for", str(body.get("model", "?")), "done."]


def input_tokens(body: dict[str, Any]) -> int:
    return max(1, len(json.dumps(body.get("messages", body.get("input", "")))) // 4)


def _sse(name: str | None, data: object) -> bytes:
    head = f"event: {name}\n" if name else ""
    return (head + "data: " + json.dumps(data, separators=(",", ":")) + "\n\n").encode()


def anthropic(body: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
    words = answer_words(body)
    model = body.get("model", "?")
    usage_in = input_tokens(body)
    text = " ".join(words)
    message = {
        "id": "msg_fake" + hashlib.sha256(text.encode()).hexdigest()[:12],
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage_in,
            "output_tokens": len(words),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 3,
        },
    }
    start = dict(message, content=[], stop_reason=None)
    start["usage"] = dict(message["usage"], output_tokens=1)
    events = [
        _sse("message_start", {"type": "message_start", "message": start}),
        _sse(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        _sse("ping", {"type": "ping"}),
    ]
    for index, word in enumerate(words):
        piece = word if index == 0 else " " + word
        events.append(
            _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": piece},
                },
            )
        )
    events += [
        _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": len(words)},
            },
        ),
        _sse("message_stop", {"type": "message_stop"}),
    ]
    return message, events


def openai_chat(body: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
    words = answer_words(body)
    model = body.get("model", "?")
    usage = {
        "prompt_tokens": input_tokens(body),
        "completion_tokens": len(words),
        "total_tokens": input_tokens(body) + len(words),
        "prompt_tokens_details": {"cached_tokens": 2},
    }
    ident = "chatcmpl-fake" + hashlib.sha256(" ".join(words).encode()).hexdigest()[:10]
    completion = {
        "id": ident,
        "object": "chat.completion",
        "created": 1767225600,
        "model": model,
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": " ".join(words)},
            }
        ],
        "usage": usage,
    }

    def chunk(delta: dict[str, Any], finish: str | None) -> bytes:
        return _sse(
            None,
            {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": 1767225600,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            },
        )

    events = [chunk({"role": "assistant", "content": ""}, None)]
    for index, word in enumerate(words):
        events.append(chunk({"content": word if index == 0 else " " + word}, None))
    events.append(chunk({}, "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append(
            _sse(
                None,
                {
                    "id": ident,
                    "object": "chat.completion.chunk",
                    "created": 1767225600,
                    "model": model,
                    "choices": [],
                    "usage": usage,
                },
            )
        )
    events.append(b"data: [DONE]\n\n")
    return completion, events


def openai_responses(body: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
    words = answer_words(body)
    text = " ".join(words)
    ident = "resp_fake" + hashlib.sha256(text.encode()).hexdigest()[:10]
    item = "msg_fake" + ident[9:]
    usage = {
        "input_tokens": input_tokens(body),
        "input_tokens_details": {"cached_tokens": 1},
        "output_tokens": len(words),
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens(body) + len(words),
    }
    part = {"type": "output_text", "text": text, "annotations": []}
    message = {
        "id": item,
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [part],
    }
    done = {
        "id": ident,
        "object": "response",
        "created_at": 1767225600,
        "status": "completed",
        "model": body.get("model", "?"),
        "output": [message],
        "usage": usage,
    }
    pending = dict(done, status="in_progress", output=[], usage=None)
    seq = iter(range(1000))
    events = [
        _sse(
            "response.created",
            {"type": "response.created", "sequence_number": next(seq), "response": pending},
        ),
        _sse(
            "response.in_progress",
            {"type": "response.in_progress", "sequence_number": next(seq), "response": pending},
        ),
        _sse(
            "response.output_item.added",
            {
                "type": "response.output_item.added",
                "sequence_number": next(seq),
                "output_index": 0,
                "item": dict(message, status="in_progress", content=[]),
            },
        ),
        _sse(
            "response.content_part.added",
            {
                "type": "response.content_part.added",
                "sequence_number": next(seq),
                "item_id": item,
                "output_index": 0,
                "content_index": 0,
                "part": dict(part, text=""),
            },
        ),
    ]
    for index, word in enumerate(words):
        events.append(
            _sse(
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "sequence_number": next(seq),
                    "item_id": item,
                    "output_index": 0,
                    "content_index": 0,
                    "delta": word if index == 0 else " " + word,
                },
            )
        )
    events += [
        _sse(
            "response.output_text.done",
            {
                "type": "response.output_text.done",
                "sequence_number": next(seq),
                "item_id": item,
                "output_index": 0,
                "content_index": 0,
                "text": text,
            },
        ),
        _sse(
            "response.content_part.done",
            {
                "type": "response.content_part.done",
                "sequence_number": next(seq),
                "item_id": item,
                "output_index": 0,
                "content_index": 0,
                "part": part,
            },
        ),
        _sse(
            "response.output_item.done",
            {
                "type": "response.output_item.done",
                "sequence_number": next(seq),
                "output_index": 0,
                "item": message,
            },
        ),
        _sse(
            "response.completed",
            {
                "type": "response.completed",
                "sequence_number": next(seq),
                "response": done,
            },
        ),
    ]
    return done, events


def google(model: str, body: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A Gemini answer and its stream (each chunk a whole GenerateContentResponse)."""
    words = answer_words(dict(body, model=model))
    prompt = max(3, len(json.dumps(body.get("contents", ""))) // 4)

    def response(parts: list[str], done: bool, count: int) -> dict[str, Any]:
        usage = {"promptTokenCount": prompt, "cachedContentTokenCount": 2,
                 "candidatesTokenCount": count, "totalTokenCount": prompt + count}  # fmt: skip
        if done:
            usage["thoughtsTokenCount"] = 4
            usage["totalTokenCount"] += 4
        candidate: dict[str, Any] = {
            "content": {"parts": [{"text": "".join(parts)}], "role": "model"}, "index": 0,
        }  # fmt: skip
        if done:
            candidate["finishReason"] = "STOP"
        ident = "fake" + hashlib.sha256(" ".join(words).encode()).hexdigest()[:8]
        return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": model,
                "responseId": ident}  # fmt: skip

    pieces = [word if index == 0 else " " + word for index, word in enumerate(words)]
    chunks = [
        response([piece], index == len(pieces) - 1, index + 1) for index, piece in enumerate(pieces)
    ]
    return response(pieces, True, len(words)), chunks


ROUTES = {
    "/v1/messages": anthropic,
    "/v1/chat/completions": openai_chat,
    "/v1/responses": openai_responses,
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeModelServer

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        fake = self.server
        with fake.lock:
            fake.seen.append(Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, raw))
        if self.path.startswith("/v1beta/models/"):
            return self._google(raw)
        shape = ROUTES.get(self.path)
        if shape is None:
            return self._send(404, {"type": "error", "error": {"type": "not_found_error"}})
        try:
            body = json.loads(raw)
        except ValueError:
            return self._send(400, {"type": "error", "error": {"type": "invalid_request_error"}})
        model = str(body.get("model", ""))
        if model.startswith("status-"):
            code = int(model[7:])
            return self._send(code, {"type": "error", "error": {"type": "api_error"}})
        document, events = shape(body)
        if body.get("stream") is not True:
            return self._send(200, document)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("request-id", "req_fake")
        self.end_headers()
        for index, event in enumerate(events):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
            if index == 0 and fake.gate is not None:
                fake.gate.wait(timeout=30)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _google(self, raw: bytes) -> None:
        target, _, query = self.path.partition("?")
        model, _, method = target.removeprefix("/v1beta/models/").partition(":")
        try:
            body = json.loads(raw)
        except ValueError:
            return self._send(400, {"error": {"code": 400, "status": "INVALID_ARGUMENT"}})
        if model.startswith("status-"):
            code = int(model[7:])
            return self._send(code, {"error": {"code": code, "status": "UNAVAILABLE"}})
        document, chunks = google(model, body)
        if method == "countTokens":
            return self._send(200, {"totalTokens": document["usageMetadata"]["promptTokenCount"]})
        if method == "generateContent":
            return self._send(200, document)
        if method != "streamGenerateContent":
            return self._send(404, {"error": {"code": 404, "status": "NOT_FOUND"}})
        sse = "alt=sse" in query.split("&")
        self.send_response(200)
        kind = "text/event-stream" if sse else "application/json; charset=UTF-8"
        self.send_header("Content-Type", kind)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for index, chunk in enumerate(chunks):
            text = json.dumps(chunk, separators=(",", ":"))
            if sse:
                event = f"data: {text}\r\n\r\n".encode()
            else:
                event = (("[" if index == 0 else ",\r\n") + text).encode()
                if index == len(chunks) - 1:
                    event += b"]"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _send(self, status: int, document: object) -> None:
        data = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", "req_fake")
        self.end_headers()
        self.wfile.write(data)


class FakeModelServer(ThreadingHTTPServer):
    """The fake upstream; ``start()`` serves it in a thread, ``stop()`` closes it."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.lock = threading.Lock()
        self.seen: list[Seen] = []
        self.gate: threading.Event | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeModelServer:
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


if __name__ == "__main__":
    server = FakeModelServer(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    print(server.port, flush=True)
    server.serve_forever()
