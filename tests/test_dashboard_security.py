"""The dashboard's request checks, each with a request that passes only because of it:
Host (DNS rebinding), token (header, cookie set once from ``?token=``, constant-time
compare), JSON-only bodies of at most 1 MiB, CSRF on control, read-only by default, and the
response headers (CSP without inline script, nosniff, Referrer-Policy).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.demo import make_repo
from harness.receipts.keys import init_keys, load_keys
from harness.receipts.run import RunRecorder

from .dashboard_helpers import parse_html

pytest.importorskip("starlette")
from starlette.testclient import TestClient

from harness.orchestrate.dashboard import create_app, security

RUN = "r1"
TOKEN = "t0ken-abcdefghijklmnop"
BASE = "http://127.0.0.1:8799"


KEYS_DIR: list[Path] = []


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sec")
    repo = root / "repo"
    make_repo(repo)
    KEYS_DIR[:] = [root / "keys"]
    keys = init_keys(root / "keys")
    with RunRecorder(repo / ".harness", RUN, keys) as run:
        run.record("audit", "task.planned", {
            "task": "t1", "role": "coder", "priority": 1, "depends": [],
            "adapter": "scripted", "tools": ["edit"],
        })  # fmt: skip
    return repo


def _client(repo: Path, **kwargs: Any) -> TestClient:
    options: dict[str, Any] = {"allow_control": False, "token": None, "host": "127.0.0.1",
                               "port": 8799, "keys_dir": KEYS_DIR[0]}  # fmt: skip
    base = kwargs.pop("base_url", BASE)
    options.update(kwargs)
    return TestClient(create_app(repo, **options), base_url=base, follow_redirects=False)


@pytest.fixture
def client(repo: Path) -> Iterator[TestClient]:
    with _client(repo) as test_client:
        yield test_client


# ---- Host ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host", ["127.0.0.1:8799", "localhost:8799", "[::1]:8799", "LOCALHOST:8799", "127.0.0.1"]
)
def test_loopback_names_with_the_bound_port_are_served(client: TestClient, host: str) -> None:
    assert client.get("/", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("evil.example:8799", 421),  # a rebound name resolving to 127.0.0.1
        ("evil.example", 421),
        ("127.0.0.1:8800", 421),  # another port
        ("127.0.0.1.evil.example:8799", 421),
        ("", 400),
        ("127.0.0.1:8799/x", 400),
        ("user@127.0.0.1:8799", 400),
        ("[::1", 400),
    ],
)
def test_other_hosts_are_refused(client: TestClient, host: str, status: int) -> None:
    for path in ("/", f"/runs/{RUN}", f"/api/runs/{RUN}", "/static/dashboard.js"):
        response = client.get(path, headers={"Host": host})
        assert response.status_code == status, (path, host)
        assert "t1" not in response.text


def test_a_non_loopback_bind_answers_to_its_own_name(repo: Path) -> None:
    with _client(repo, host="10.1.2.3", token=TOKEN, base_url="http://10.1.2.3:8799") as c:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert c.get("/", headers=auth).status_code == 200
        assert c.get("/", headers={**auth, "Host": "evil.example:8799"}).status_code == 421


# ---- token ---------------------------------------------------------------------------------


def test_a_token_is_required_when_set(repo: Path) -> None:
    with _client(repo, token=TOKEN) as c:
        for path in ("/", f"/runs/{RUN}", f"/api/runs/{RUN}", f"/runs/{RUN}/events"):
            assert c.get(path).status_code == 401, path
        assert (
            c.get("/", headers={"Authorization": "Bearer wrong-token-xxxxxxxx"}).status_code == 401
        )
        assert c.get("/", headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401
        assert c.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        c.cookies.set("token", "nope")
        assert c.get("/").status_code == 401


def test_query_token_sets_a_cookie_once_and_leaves_the_url(repo: Path) -> None:
    with _client(repo, token=TOKEN) as c:
        assert c.get(f"/runs/{RUN}?token=wrong").status_code == 401
        response = c.get(f"/runs/{RUN}?token={TOKEN}&x=1")
        assert response.status_code == 303
        assert response.headers["location"] == f"/runs/{RUN}?x=1"
        cookie = response.headers["set-cookie"]
        assert cookie.startswith(f"token={TOKEN};")
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        followed = c.get(f"/runs/{RUN}?x=1")  # the client kept the cookie
        assert followed.status_code == 200
        assert TOKEN not in followed.text  # the token is never echoed into a page


def test_the_token_is_compared_in_constant_time(repo: Path, monkeypatch: Any) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((bytes(a), bytes(b)))
        return real(a, b)

    monkeypatch.setattr(security.hmac, "compare_digest", spy)
    with _client(repo, token=TOKEN) as c:
        assert c.get("/", headers={"Authorization": "Bearer guess"}).status_code == 401
    assert (b"guess", TOKEN.encode()) in calls


# ---- bodies, CSRF, read-only ---------------------------------------------------------------


def _csrf(c: TestClient) -> str:
    doc = parse_html(c.get(f"/runs/{RUN}").text)
    return next(
        m.attrs["content"] for m in doc.find_all("meta") if m.attrs.get("name") == "csrf-token"
    )


def test_control_is_refused_without_allow_control(repo: Path) -> None:
    control = repo / ".harness" / "runs" / RUN / "control.jsonl"
    before = control.read_bytes() if control.exists() else None
    with _client(repo) as c:
        csrf = _csrf(c)
        response = c.post(f"/runs/{RUN}/commands", json={"kind": "stop"},
                          headers={"X-CSRF-Token": csrf})  # fmt: skip
        assert response.status_code == 403
        assert "allow-control" in response.json()["error"]
        assert not parse_html(c.get(f"/runs/{RUN}").text).find_all("form", id="control-form")
    after = control.read_bytes() if control.exists() else None
    assert after == before  # nothing appended


def test_csrf_token_is_required_on_control(repo: Path) -> None:
    control = repo / ".harness" / "runs" / RUN / "control.jsonl"
    before = control.read_bytes() if control.exists() else b""
    with _client(repo, allow_control=True) as c:
        csrf = _csrf(c)
        url = f"/runs/{RUN}/commands"
        assert c.post(url, json={"kind": "stop"}).status_code == 403
        assert (
            c.post(url, json={"kind": "stop"}, headers={"X-CSRF-Token": "x" * 43}).status_code
            == 403
        )
        cross = {"X-CSRF-Token": csrf, "Origin": "http://evil.example:8799"}
        assert c.post(url, json={"kind": "stop"}, headers=cross).status_code == 403
    assert (control.read_bytes() if control.exists() else b"") == before


def test_bodies_are_json_and_at_most_one_mebibyte(repo: Path) -> None:
    with _client(repo, allow_control=True) as c:
        csrf = {"X-CSRF-Token": _csrf(c)}
        url = f"/runs/{RUN}/commands"
        big = b'{"kind":"answer","text":"' + b"a" * (1 << 20) + b'"}'
        response = c.post(url, content=big, headers={**csrf, "Content-Type": "application/json"})
        assert response.status_code == 413

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted while read
            yield b'{"kind":"answer","text":"'
            for _ in range(17):
                yield b"a" * 65536
            yield b'"}'

        response = c.post(
            url, content=chunks(), headers={**csrf, "Content-Type": "application/json"}
        )
        assert response.status_code == 413
        form = c.post(
            url,
            content=b"kind=stop",
            headers={**csrf, "Content-Type": "application/x-www-form-urlencoded"},
        )
        assert form.status_code == 415
        bad = c.post(url, content=b"{nope", headers={**csrf, "Content-Type": "application/json"})
        assert bad.status_code == 400
        for body in (
            [],
            {"kind": "delete"},
            {"kind": "stop", "extra": 1},
            {"kind": "answer"},
            {"kind": "instruct", "text": "x"},
            {"kind": "answer", "text": 3},
        ):
            assert c.post(url, json=body, headers=csrf).status_code == 400, body  # fmt: skip


def test_a_valid_command_is_appended_through_request_command(repo: Path) -> None:
    """With every check passed the command lands on the control bus (MAC-chained, by the
    operator key), and the run page lists it ``pending``: no runtime answers this run."""
    from harness.orchestrate.bus import ControlBus

    with _client(repo, allow_control=True) as c:
        csrf = {"X-CSRF-Token": _csrf(c)}
        response = c.post(f"/runs/{RUN}/commands", json={"kind": "instruct", "task": "t1",
                          "text": "go on", "id": "cmd-1"}, headers=csrf)  # fmt: skip
        assert response.status_code == 200, response.text
        assert response.json()["command"] == "cmd-1"
        again = c.post(f"/runs/{RUN}/commands", json={"kind": "stop", "id": "cmd-1"}, headers=csrf)
        assert again.status_code == 409  # another payload under a known id
        page = parse_html(c.get(f"/runs/{RUN}").text)
        item = page.find("ul", id="receipts").find("li", **{"data-command": "cmd-1"})
        assert item.attrs["data-kind"] == "instruct"
        assert item.by_class("span", "status").full_text() == "pending"
    master = load_keys(KEYS_DIR[0]).hmac_master
    commands = ControlBus(repo / ".harness" / "runs" / RUN, RUN, master).poll()
    assert [(x.id, x.command, dict(x.args), x.operator) for x in commands] == [
        ("cmd-1", "instruct", {"task": "t1", "text": "go on"}, "dashboard")
    ]


# ---- headers -------------------------------------------------------------------------------


def test_security_headers_on_every_response(client: TestClient) -> None:
    for path in ("/", f"/runs/{RUN}", f"/api/runs/{RUN}", "/static/dashboard.js", "/runs/none"):
        response = client.get(path)
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
    refused = client.get("/", headers={"Host": "evil.example"})
    assert refused.headers["x-content-type-options"] == "nosniff"


def test_pages_have_no_inline_script_or_style(client: TestClient) -> None:
    for path in ("/", f"/runs/{RUN}", f"/runs/{RUN}/tasks/t1"):
        doc = parse_html(client.get(path).text)
        for element in doc.iter()[1:]:
            assert "style" not in element.attrs or element.tag in ("svg",), element.tag
            if element.tag == "script":
                assert element.attrs.get("src") and not element.full_text().strip()
            assert element.tag != "style"


def test_websockets_are_refused(client: TestClient) -> None:
    from starlette.websockets import WebSocketDisconnect

    with pytest.raises(WebSocketDisconnect), client.websocket_connect("/"):
        pass


def test_an_oversized_body_is_refused_before_any_route(client: TestClient) -> None:
    """By its Content-Length, before routing (a route that takes no body would say 405)."""
    big = b"[" + b"0," * (1 << 19) + b"0]"
    response = client.post("/", content=big, headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert (
        client.post("/", content=b"[]", headers={"Content-Type": "application/json"}).status_code
        == 405
    )


def test_the_token_redirect_stays_on_this_site(repo: Path) -> None:
    with _client(repo, token=TOKEN) as c:
        response = c.get(f"{BASE}//evil.example/x?token={TOKEN}")
        assert response.status_code == 303
        location = response.headers["location"]
        assert location.startswith("/") and not location.startswith("//"), location
