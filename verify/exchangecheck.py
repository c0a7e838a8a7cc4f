"""Run check "exchanges": each observed model exchange agrees with itself, its batch, its source.

The recording proxy (docs/spec/proxy.md) is a proxied batch's only way out. The runtime
records each request it saw as a ``model.exchange`` (replay store, at the batch's retirement,
in ``seq`` order) and, for each answered one, where the answer came from as a ``model.source``
(audit store, before the batch's ``agent.exit``). Folding a run's audit records, then its
replay records, this check demands (docs/spec/proxy.md §9 lists the same rules, numbered):

* E1 ``run.start.sandbox.egress``, when present, is ``[]`` (the run's default profile is never
  proxied); every ``agent.spawn.sandbox.egress``, when present, is a list of allow-list entries
  ``{route, family, scheme, host, port, path_prefix, credential}`` sorted by distinct routes;
* E2 an exchange names a spawned batch whose profile has a non-empty ``egress``; its ``seq``
  starts at 1 (the proxy's first request number) and strictly increases within the batch;
* E3 ``route`` is ``-`` (only for a refusal that named no route, with no family, upstream or
  key) or a route of that egress; a non-null ``family`` and ``upstream`` are that route's;
  ``api`` is what the family and path say (``modelkey.api_of``);
* E4 the members agree: ``family``/``api``/``upstream`` are null together; ``key``/``model``/
  ``parameters`` are null together, and a key needs a family; ``parameters`` are exactly
  ``{method, path, stream, headers}`` with the record's method, path and stream, and headers
  among the family's key headers; a request digest needs a key; no response digest means no
  response bytes; ``journaled`` needs the key and both digests and status 200; usage needs
  status 200, a response digest and an API other than ``other``; for the Gemini API
  (``google``) a keyed exchange's ``model`` and ``stream`` are what its path says
  (``/models/{model}:streamGenerateContent`` streams), as its key was computed from them;
* E5 per outcome: ``answered`` has a key and both digests, and is journaled or says why not;
  ``refused`` is a 4xx with a reason and no key, digests, usage or response bytes, never
  journaled; ``replay-miss`` is a 502 with a key and request digest, no response, never
  journaled; ``error`` has a key and a reason and is a 200 cut short or a 5xx;
* E6 exactly one ``model.source`` per answered exchange (after its batch's spawn, not after its
  exit) and none for any other; a ``journal`` source is a journaled exchange; one batch's
  sources are of one journal mode: all ``live``, or ``journal``/``live-miss``; a batch with a
  ``replay-miss`` (strict replay) has only ``journal`` sources;
* E7 a proxied batch's ``agent.exit.usage`` input and output tokens are the sums over its
  answered exchanges' usage (Anthropic's cache tokens added to its input, as
  ``harness.orchestrate.usage`` counts them; OpenAI's and Google's input
  already includes the cached part), saturated at 2^53 - 1; a null usage only when
  both sums are 0.
* E8 no recorded path carries a credential in its query (``modelkey.url_credentials``: the
  Gemini API's ``?key=``): the proxy drops it before anything is keyed, forwarded or recorded.

The journaled exchanges are kept (``journal_refs``) for the bundle's journal members: the
bundle check proves each blob's digest and recomputes each key from the request blob.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .errors import VerificationError
from .modelkey import (
    FAMILIES,
    GOOGLE_STREAM_METHOD,
    KEY_HEADERS,
    PARAMETER_NAMES,
    api_of,
    google_call,
    url_credentials,
)
from .records import Record

EGRESS_MEMBERS: Final = ("credential", "family", "host", "path_prefix", "port", "route", "scheme")
_ROUTE: Final = re.compile(r"[a-z][a-z0-9-]{0,31}")
FIRST_SEQ: Final = 1
"""The proxy numbers a batch's requests 1, 2, ... (``ProxyServer.next_seq``)."""
NO_ROUTE: Final = "-"
MAX_FIGURE: Final = 2**53 - 1
"""Token sums saturate here (records carry integers up to 2^53 - 1)."""
"""The ``route`` of a request that named no allow-listed route."""


class ExchangeError(VerificationError):
    """A model exchange or model source that disagrees with itself, its batch or the proxy."""


def _refuse(where: str, detail: str) -> ExchangeError:
    return ExchangeError(f"{where}: breaks rule exchanges: {detail}")


@dataclass(frozen=True)
class JournalRef:
    """One journaled exchange: what its journal members must hold."""

    where: str
    batch: str
    seq: int
    family: str
    key: str
    model: str
    stream: bool
    parameters: dict[str, Any]
    request_sha256: str
    response_sha256: str
    response_bytes: int


@dataclass(eq=False, repr=False)
class _Batch:
    egress: dict[str, Mapping[str, Any]] | None
    """Route -> allow-list entry; None when the spawn's profile records no ``egress``."""
    exited: bool = False
    last_seq: int | None = None
    sources: dict[int, tuple[str, str]] = field(default_factory=dict)
    """seq -> (source, where) of the batch's model.source records."""
    exchanges: dict[int, tuple[str, bool, int, str]] = field(default_factory=dict)
    """seq -> (outcome, journaled, status, where) of its model.exchange records."""
    exit_usage: tuple[Any, str] | None = None
    """(``agent.exit.usage``, where) once the batch exited."""
    tokens: list[int] = field(default_factory=lambda: [0, 0])
    """Input and output tokens of its answered exchanges (E7)."""


def egress_routes(egress: Any, what: str) -> dict[str, Mapping[str, Any]]:
    """A recorded ``egress`` list by route; ``ExchangeError``-worthy problems as ValueError."""
    if type(egress) is not list:
        raise ValueError(f"{what} must be a list of allow-list entries")
    out: dict[str, Mapping[str, Any]] = {}
    previous = ""
    for index, item in enumerate(egress):
        at = f"{what}[{index}]"
        if type(item) is not dict or sorted(item) != list(EGRESS_MEMBERS):
            raise ValueError(f"{at} must have exactly the members {', '.join(EGRESS_MEMBERS)}")
        route, port, prefix = item["route"], item["port"], item["path_prefix"]
        if type(route) is not str or not _ROUTE.fullmatch(route):
            raise ValueError(f"{at}.route must match [a-z][a-z0-9-]{{0,31}}")
        if route <= previous:
            raise ValueError(f"{at}: routes must be sorted and distinct ({route!r})")
        previous = route
        if item["family"] not in FAMILIES or item["scheme"] not in ("http", "https"):
            raise ValueError(
                f"{at}: family must be one of {', '.join(FAMILIES)} and scheme http/https"
            )
        if type(item["host"]) is not str or not item["host"]:
            raise ValueError(f"{at}.host must be a non-empty string")
        if type(port) is not int or not 1 <= port <= 65535:
            raise ValueError(f"{at}.port must be an integer from 1 to 65535")
        if type(prefix) is not str or not prefix.startswith("/"):
            raise ValueError(f"{at}.path_prefix must be a path starting with '/'")
        if type(item["credential"]) is not bool:
            raise ValueError(f"{at}.credential must be true or false")
        out[route] = item
    return out


def upstream_of(entry: Mapping[str, Any]) -> str:
    """``scheme://host:port`` of an allow-list entry, as the proxy records it."""
    return f"{entry['scheme']}://{entry['host']}:{entry['port']}"


@dataclass(eq=False, repr=False)
class ExchangeCheck:
    """The fold; ``journal_refs`` after ``finish`` are the run's journaled exchanges."""

    run: str
    batches: dict[str, _Batch] = field(default_factory=dict)
    journal_refs: list[JournalRef] = field(default_factory=list)
    exchanges: int = 0

    # ---- audit --------------------------------------------------------------------------------
    def audit(self, record: Record, where: str) -> None:
        kind, body = record.kind, record.body
        if kind == "run.start":
            sandbox = body.get("sandbox")
            if isinstance(sandbox, Mapping) and "egress" in sandbox and sandbox["egress"] != []:
                raise _refuse(where, "run.start.sandbox.egress must be [] (never proxied)")
        elif kind == "agent.spawn":
            sandbox = body.get("sandbox")
            egress = None
            if isinstance(sandbox, Mapping) and "egress" in sandbox:
                try:
                    egress = egress_routes(sandbox["egress"], "sandbox.egress")
                except ValueError as exc:
                    raise _refuse(where, f"batch {body['batch']!r}: {exc}") from None
            self.batches.setdefault(body["batch"], _Batch(egress))
        elif kind == "model.source":
            batch = self.batches.get(body["batch"])
            if batch is None:
                raise _refuse(where, f"model.source of batch {body['batch']!r}, never spawned")
            if batch.exited:
                raise _refuse(where, f"model.source after batch {body['batch']!r} exited")
            if body["seq"] in batch.sources:
                raise _refuse(
                    where, f"a second model.source for batch {body['batch']!r} seq {body['seq']}"
                )
            batch.sources[body["seq"]] = (body["source"], where)
        elif kind == "agent.exit":
            batch = self.batches.get(body["batch"])
            if batch is not None:
                batch.exited = True
                batch.exit_usage = (body.get("usage"), where)

    def control(self, record: Record, where: str) -> None:
        """Not read."""

    def lineage(self, record: Record, where: str) -> None:
        """Not read."""

    # ---- replay -------------------------------------------------------------------------------
    def replay(self, record: Record, where: str) -> None:
        if record.kind != "model.exchange":
            return
        body = record.body
        name, seq = body["batch"], body["seq"]
        batch = self.batches.get(name)
        if batch is None:
            raise _refuse(where, f"exchange of batch {name!r}, which was never spawned")
        if not batch.egress:
            state = "records no egress" if batch.egress is None else "has an empty egress"
            raise _refuse(where, f"exchange of batch {name!r}, whose profile {state}: not proxied")
        expected = FIRST_SEQ if batch.last_seq is None else batch.last_seq + 1
        if seq < expected or (batch.last_seq is None and seq != FIRST_SEQ):
            after = (
                f"start at {FIRST_SEQ}" if batch.last_seq is None else f"follow {batch.last_seq}"
            )
            raise _refuse(where, f"batch {name!r} exchange seq {seq} must {after} and increase")
        batch.last_seq = seq
        detail = exchange_problem(body, batch.egress)
        if detail is not None:
            raise _refuse(where, f"batch {name!r} exchange {seq}: {detail}")
        batch.exchanges[seq] = (body["outcome"], body["journaled"], body["status"], where)
        self.exchanges += 1
        usage = body["usage"]
        if body["outcome"] == "answered" and usage is not None:
            batch.tokens[0] += input_tokens(body["family"], usage)
            batch.tokens[1] += usage["output_tokens"] or 0
        if body["journaled"]:
            self.journal_refs.append(
                JournalRef(
                    where=where,
                    batch=name,
                    seq=seq,
                    family=body["family"],
                    key=body["key"],
                    model=body["model"],
                    stream=body["stream"],
                    parameters=body["parameters"],
                    request_sha256=body["request_sha256"],
                    response_sha256=body["response_sha256"],
                    response_bytes=body["response_bytes"],
                )
            )

    # ---- the end ------------------------------------------------------------------------------
    def finish(self) -> None:
        for name, batch in self.batches.items():
            for seq, (outcome, journaled, status, where) in batch.exchanges.items():
                found = batch.sources.get(seq)
                if outcome == "answered" and found is None:
                    raise _refuse(where, f"answered exchange {seq} of batch {name!r} has no "
                                  "model.source")  # fmt: skip
                if found is None:
                    continue
                source, at = found
                if outcome != "answered":
                    raise _refuse(at, f"model.source for exchange {seq} of batch {name!r}, "
                                  f"which is {outcome!r}, not answered")  # fmt: skip
                if source == "journal" and not (journaled and status == 200):
                    raise _refuse(at, f"source 'journal' for exchange {seq} of batch {name!r}, "
                                  "which has no journaled answer (no blob)")  # fmt: skip
            for seq, (_, at) in batch.sources.items():
                if seq not in batch.exchanges:
                    raise _refuse(at, f"model.source for exchange {seq} of batch {name!r}, "
                                  "which has no model.exchange")  # fmt: skip
            _one_mode(name, batch)
            if batch.egress:
                _usage_is_the_exchanges(name, batch)


def input_tokens(family: str, usage: Mapping[str, Any]) -> int:
    """An exchange's input tokens as a budget counts them: Anthropic's ``input_tokens``
    excludes its cache traffic, so ``cache_read`` and ``cache_write`` are added; OpenAI's and
    Google's (``promptTokenCount``) include their cached part (``harness.orchestrate.usage``
    treats a CLI's report the same)."""
    figure: int = usage["input_tokens"] or 0
    if family == "anthropic":
        figure += (usage["cache_read"] or 0) + (usage["cache_write"] or 0)
    return figure


def _usage_is_the_exchanges(name: str, batch: _Batch) -> None:
    """E7: a proxied batch's ``agent.exit.usage`` tokens are its answered exchanges' sums
    (saturated at 2^53 - 1), never the agent's own claim; null only when they are 0."""
    if batch.exit_usage is None:
        return
    usage, where = batch.exit_usage
    expected = [min(figure, MAX_FIGURE) for figure in batch.tokens]
    if usage is None:
        if expected != [0, 0]:
            raise _refuse(where, f"batch {name!r} reports no usage, its exchanges {expected}")
        return
    found = [usage.get("input_tokens"), usage.get("output_tokens")] if type(usage) is dict else []
    if found != expected:
        raise _refuse(where, f"batch {name!r} usage tokens (input, output) are {found}, "
                      f"its answered exchanges sum to {expected}")  # fmt: skip


def _one_mode(name: str, batch: _Batch) -> None:
    """E6: one proxy, one journal mode: live, replay, or replay with live misses."""
    kinds = {source for source, _ in batch.sources.values()}
    if "live" in kinds and kinds != {"live"}:
        where = next(at for source, at in batch.sources.values() if source != "live")
        raise _refuse(where, f"batch {name!r} mixes live answers with replayed ones")
    strict = [at for outcome, _, _, at in batch.exchanges.values() if outcome == "replay-miss"]
    if strict and kinds - {"journal"}:
        raise _refuse(strict[0], f"batch {name!r} has a strict replay miss but answers that "
                      "are not from the journal")  # fmt: skip


def exchange_problem(
    body: Mapping[str, Any], egress: Mapping[str, Mapping[str, Any]]
) -> str | None:
    """The first of rules E3-E5 and E8 an exchange body breaks, or None."""
    outcome, status, route = body["outcome"], body["status"], body["route"]
    family, key = body["family"], body["key"]
    if type(body["path"]) is str and url_credentials(body["path"]):
        return "its path carries a credential in the query (?key=): the proxy drops it (E8)"
    if route == NO_ROUTE:
        if outcome != "refused" or family is not None or key is not None:
            return "route '-' is only for a refusal with no family, upstream or key"
    elif route not in egress:
        return f"route {route!r} is not on the batch's egress ({', '.join(sorted(egress))})"
    if (family is None) != (body["api"] is None) or (family is None) != (body["upstream"] is None):
        return "family, api and upstream must be null together"
    if family is not None:
        entry = egress.get(route)
        if entry is None or entry["family"] != family:
            return f"family {family!r} is not that of route {route!r}"
        if body["upstream"] != upstream_of(entry):
            return f"upstream {body['upstream']!r} is not {upstream_of(entry)} (route {route!r})"
        if body["api"] != api_of(family, body["path"]):
            return f"api {body['api']!r} is not what {family} says of {body['path']!r}"
    problem = _keyed_problem(body) or _digest_problem(body)
    if problem is not None:
        return problem
    return _outcome_problem(body, outcome, status)


def _keyed_problem(body: Mapping[str, Any]) -> str | None:
    key, parameters = body["key"], body["parameters"]
    if (key is None) != (body["model"] is None) or (key is None) != (parameters is None):
        return "key, model and parameters must be null together"
    if key is None:
        return "stream is true without a keyed request" if body["stream"] else None
    if body["family"] is None:
        return "a key needs a family"
    if sorted(parameters) != sorted(PARAMETER_NAMES):
        return f"parameters must have exactly the members {', '.join(PARAMETER_NAMES)}"
    if (parameters["method"], parameters["path"]) != (body["method"], body["path"]):
        return "parameters.method and .path must be the exchange's method and path"
    if parameters["stream"] is not body["stream"]:
        return "parameters.stream must be the exchange's stream"
    if body["family"] == "google":
        call = google_call(body["path"])
        model = call[0] if call is not None else "-"
        stream = call is not None and call[1] == GOOGLE_STREAM_METHOD
        if (body["model"], body["stream"]) != (model, stream):
            return (f"a Gemini API exchange's model and stream are its path's ({model!r}, "
                    f"{stream}), not ({body['model']!r}, {body['stream']})")  # fmt: skip
    headers = parameters["headers"]
    allowed = KEY_HEADERS[body["family"]]
    if type(headers) is not dict or any(
        name not in allowed or type(value) is not str for name, value in headers.items()
    ):
        return f"parameters.headers must be strings named among {', '.join(allowed)}"
    return None


def _digest_problem(body: Mapping[str, Any]) -> str | None:
    if body["request_sha256"] is not None and body["key"] is None:
        return "a request digest needs a key"
    if body["response_sha256"] is None and body["response_bytes"] != 0:
        return "response bytes without a response digest"
    if body["journaled"] and (
        body["request_sha256"] is None or body["response_sha256"] is None or body["status"] != 200
    ):
        return "journaled needs both digests and status 200"
    if body["usage"] is not None and (
        body["status"] != 200 or body["response_sha256"] is None or body["api"] in (None, "other")
    ):
        return "usage needs a 200 response of a known API"
    return None


def _outcome_problem(body: Mapping[str, Any], outcome: str, status: int) -> str | None:
    reason = body["reason"]
    if outcome == "answered":
        if body["key"] is None or body["request_sha256"] is None or body["response_sha256"] is None:
            return "answered needs a key and both digests"
        if not 200 <= status <= 599:
            return f"answered with status {status}"
        if not body["journaled"] and reason is None:
            return "an answer that was not journaled must say why (reason)"
        if status != 200 and (body["journaled"] or body["usage"] is not None):
            return "a non-200 answer is never journaled and has no usage"
    elif outcome == "refused":
        if not 400 <= status <= 499 or reason is None:
            return "refused needs a 4xx status and a reason"
        if (
            body["journaled"]
            or body["response_bytes"]
            or any(
                body[name] is not None
                for name in ("key", "request_sha256", "response_sha256", "usage")
            )
        ):
            return "refused has no key, digests, usage or response bytes and is never journaled"
    elif outcome == "replay-miss":
        if status != 502 or reason is None or body["key"] is None:
            return "replay-miss needs status 502, a key and a reason"
        if body["request_sha256"] is None or body["response_sha256"] is not None:
            return "replay-miss has a request digest and no response"
        if body["journaled"] or body["usage"] is not None:
            return "replay-miss is never journaled and has no usage"
    elif outcome == "error":
        if body["key"] is None or body["request_sha256"] is None or reason is None:
            return "error needs a key, a request digest and a reason"
        if status != 200 and not 500 <= status <= 599:
            return f"error with status {status} (an answer cut short is 200, else 5xx)"
    return None


def exchange_check(run: str, plan: bytes | None) -> ExchangeCheck:
    """The factory ``harness.verify.runchecks`` registers."""
    return ExchangeCheck(run)
