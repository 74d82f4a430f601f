"""Only this machine's pages drive the model: the Host allow-list, the Origin check, headers and API docs."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from app.main import create_app
from app.security import AllowList, HostGuard
from app.settings import ServerSettings
from tiny_models import tiny_engine

RUN = {"type": "run", "prompt": "hi", "policy": "talon", "params": {"budget": 8, "top_k": 3}, "max_new_tokens": 2}


@pytest.fixture(scope="module")
def engine():
    return tiny_engine(seed=0)


def make_client(engine, **settings) -> TestClient:
    return TestClient(create_app(ServerSettings(**settings), engine_factory=lambda _: engine))


@pytest.fixture(scope="module")
def client(engine):
    with make_client(engine, host="127.0.0.1", allowed_hosts=["specscope.lan"]) as client:
        yield client


def run_over(ws) -> dict:
    ws.send_json(RUN)
    while (message := ws.receive_json())["type"] not in ("run_finished", "error"):
        pass
    return message


@pytest.mark.parametrize("host", ["localhost", "localhost:8000", "127.0.0.1:8000", "[::1]:8000", "LOCALHOST.",
                                  "specscope.lan:8000"])
def test_loopback_names_and_allowed_hosts_are_served(client, host):
    assert client.get("/api/info", headers={"host": host}).status_code == 200


@pytest.mark.parametrize("host", ["evil.example:8000", "evil.example", "127.0.0.2:8000", "localhost.evil.example",
                                  "user@localhost", "", "[::2]:8000"])
def test_a_foreign_host_is_refused_with_a_message_naming_the_remedy(client, host):
    response = client.get("/api/info", headers={"host": host})
    assert response.status_code == 400
    assert "--allowed-hosts" in response.text


def test_dns_rebinding_a_socket_with_a_foreign_host_and_matching_origin_is_refused(client):
    with pytest.raises(WebSocketDisconnect) as refused:
        with client.websocket_connect("/ws", headers={"host": "evil.example:8000",
                                                      "origin": "http://evil.example:8000"}) as ws:
            ws.receive_json()
    assert refused.value.code == 1008 and "not served here" in refused.value.reason


@pytest.mark.parametrize("origin", ["https://evil.example", "null", "http://localhost:9999", "http://127.0.0.1:8000",
                                    "file://", "http://specscope.lan:8000"])
def test_a_socket_whose_origin_is_not_this_page_is_refused(client, origin):
    with pytest.raises(WebSocketDisconnect) as refused:
        with client.websocket_connect("/ws", headers={"host": "localhost:8000", "origin": origin}) as ws:
            ws.receive_json()
    assert refused.value.code == 1008 and "cross-origin" in refused.value.reason


@pytest.mark.parametrize("host, origin", [("localhost:8000", "http://localhost:8000"),
                                          ("[::1]:8000", "http://[::1]:8000"),
                                          ("specscope.lan", "http://specscope.lan"),
                                          ("localhost:8000", None)])
def test_this_servers_own_page_and_originless_scripts_drive_the_model(client, host, origin):
    headers = {"host": host} | ({"origin": origin} if origin else {})
    with client.websocket_connect("/ws", headers=headers) as ws:
        assert run_over(ws)["type"] == "run_finished"


def test_a_wildcard_bind_serves_loopback_names_only_unless_names_are_given():
    assert AllowList.build("0.0.0.0", []).names == {"localhost", "127.0.0.1", "::1"}
    assert AllowList.build("192.168.1.5", ["Lab.Example."]).names == {"localhost", "127.0.0.1", "::1",
                                                                      "192.168.1.5", "lab.example"}


def test_star_turns_the_host_check_off_but_never_the_origin_check():
    guard = HostGuard(app=None, allowed=AllowList.build("127.0.0.1", ["*"]))
    assert guard.problem("anything.example:80", None, "http", "http") is None
    assert guard.problem("proxy.example", "https://evil.example", "websocket", "wss") is not None
    assert guard.problem("proxy.example", "https://proxy.example", "websocket", "wss") is None


@pytest.mark.parametrize("path", ["/", "/api/info", "/api/policies", "/static/css/app.css", "/static/missing.js",
                                  "/nowhere"])
def test_every_response_carries_the_security_headers(client, path):
    response = client.get(path, headers={"host": "localhost:8000"})
    csp = response.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert "connect-src 'self' ws://localhost:8000 wss://localhost:8000" in csp
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert response.headers["x-frame-options"] == "DENY"


def test_a_refused_host_gets_the_headers_and_its_name_is_never_reflected_in_them(client):
    response = client.get("/", headers={"host": "evil.example"})
    assert response.status_code == 400
    assert "evil" not in response.headers["content-security-policy"]
    assert response.headers["x-content-type-options"] == "nosniff"


class _InlineFinder(HTMLParser):
    """Collects what a CSP without 'unsafe-inline' would block: inline scripts, style blocks and
    attributes, event handler attributes and javascript: URLs."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = dict(attrs)
        if tag == "script" and not names.get("src"):
            self.found.append("inline <script>")
        if tag == "style":
            self.found.append("<style> block")
        for name, value in attrs:
            if name == "style" or re.fullmatch(r"on[a-z]+", name):
                self.found.append(f"<{tag} {name}=...>")
            if value and value.strip().lower().startswith("javascript:"):
                self.found.append(f"<{tag} {name}=javascript:...>")


def test_the_page_needs_no_inline_script_or_style_under_its_policy(client):
    finder = _InlineFinder()
    finder.feed(client.get("/", headers={"host": "localhost"}).text)
    assert finder.found == []


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"])
def test_api_docs_are_off_by_default(client, path):
    assert client.get(path, headers={"host": "localhost"}).status_code == 404


def test_api_docs_when_asked_for_load_nothing_from_the_network(engine):
    with make_client(engine, api_docs=True) as client:
        headers = {"host": "localhost"}
        spec = client.get("/openapi.json", headers=headers).json()
        page = client.get("/docs", headers=headers)
        assert client.get("/redoc", headers=headers).status_code == 404
    assert "/api/info" in spec["paths"]
    assert page.status_code == 200 and "/api/info" in page.text
    finder = _InlineFinder()
    finder.feed(page.text)
    assert finder.found == []
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page.text), "the docs page must not load from a CDN"
