"""Recording-proxy benchmark: overhead per exchange and journal bytes per exchange.

Prints one JSON line. Run: ``python bench/proxy.py --calls 300``.

Against the fake model server (tests/fake_model_server.py) on 127.0.0.1, for a non-streaming
and a streaming Anthropic Messages exchange: the median wall time of a request sent straight
to the fake (``direct_ms``), through the proxy in live mode (``live_ms``: forwarded, then
journaled with fsync once the answer's last byte is sent; the next request waits until that
write is done), and through the proxy in replay mode (``replay_ms``: served from the
journal, no upstream); ``overhead_ms`` is the median of the paired differences live - direct
(the target is <= 2 ms plus the upstream time). Each request goes on a fresh connection;
``live_keepalive_ms`` sends them on one kept-alive connection, so each waits for the previous
answer's durable journal write (blobs and index, each fsynced): the journal's cost per
exchange. Every request is distinct, so every exchange writes its own blobs:
``journal_bytes_per_exchange`` is the journal folder's size over the exchanges.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.orchestrate.proxy import AllowList, ProxyServer, Upstream  # noqa: E402
from harness.orchestrate.replay import Journal  # noqa: E402
from tests.fake_model_server import FakeModelServer  # noqa: E402


def timed(connection: http.client.HTTPConnection, path: str, body: bytes) -> float:
    start = time.perf_counter()
    connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    response.read()
    elapsed = time.perf_counter() - start
    assert response.status == 200, response.status
    return elapsed * 1000


def bodies(count: int, stream: bool) -> list[bytes]:
    out = []
    for index in range(count):
        body: dict[str, object] = {
            "model": "claude-bench", "max_tokens": 100 + index,
            "messages": [{"role": "user", "content": f"question {index} " + "x" * 400}],
        }  # fmt: skip
        if stream:
            body["stream"] = True
        out.append(json.dumps(body).encode())
    return out


def series(port: int, path: str, requests: list[bytes], *, keep_alive: bool = False) -> list[float]:
    """Times of ``requests`` sent one after another (each on a fresh connection, or one)."""
    times = []
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for body in requests:
        if not keep_alive:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        times.append(timed(connection, path, body))
        if not keep_alive:
            connection.close()
    connection.close()
    return times


def size_of(folder: Path) -> int:
    return sum(item.stat().st_size for item in folder.rglob("*") if item.is_file())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    fake = FakeModelServer().start()
    result: dict[str, object] = {"calls": args.calls}
    with tempfile.TemporaryDirectory() as scratch:
        journal_dir = Path(scratch) / "journal"
        allow = AllowList([Upstream("anthropic", "anthropic", fake.base, credential="sk-bench")])
        for label, stream in (("plain", False), ("stream", True)):
            requests = bodies(args.calls, stream)
            direct: list[float] = []
            live: list[float] = []
            with ProxyServer(allow, Journal(journal_dir, "live")) as proxy:
                for body in requests:  # paired, so machine load hits both alike
                    direct += series(fake.port, "/v1/messages", [body])
                    live += series(proxy.port, "/anthropic/v1/messages", [body])
                    proxy.wait_idle()  # the previous answer's journal write is done
            again = bodies(args.calls // 4 or 1, stream)
            kept_dir = Path(scratch) / f"keep-alive-{label}"
            with ProxyServer(allow, Journal(kept_dir, "live")) as proxy:
                keep = series(proxy.port, "/anthropic/v1/messages", again, keep_alive=True)
            result[f"{label}_live_keepalive_ms"] = round(statistics.median(keep), 3)
            with ProxyServer(allow, Journal(journal_dir, "replay")) as proxy:
                replay = series(proxy.port, "/anthropic/v1/messages", requests)
            result[f"{label}_direct_ms"] = round(statistics.median(direct), 3)
            result[f"{label}_live_ms"] = round(statistics.median(live), 3)
            result[f"{label}_replay_ms"] = round(statistics.median(replay), 3)
            result[f"{label}_overhead_ms"] = round(
                statistics.median(b - a for a, b in zip(direct, live, strict=True)), 3
            )
        result["journal_bytes_per_exchange"] = size_of(journal_dir) // (2 * args.calls)
    fake.stop()
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
