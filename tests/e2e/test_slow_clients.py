"""Slow clients against the real server (`healthledger serve`): connections that send half
a request are closed after the request deadlines, and normal requests answer meanwhile
(docs/adr/0013-slow-clients.md)."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from healthledger.adapters.settings import Settings

from tests.e2e.servers import running_server

HALF_HEAD = b"GET /v2/providers HTTP/1.1\r\nHost: ledger\r\n"
HALF_BODY = (
    b"POST /v2/link/token/isValid HTTP/1.1\r\nHost: ledger\r\n"
    b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    b'{"token": "hll_'
)
WHOLE_REQUEST = (
    b"POST /v2/link/token/isValid HTTP/1.1\r\nHost: ledger\r\n"
    b'Content-Type: application/json\r\nContent-Length: 16\r\n\r\n{"token": "abc"}'
)


@pytest.fixture
def sqlite_settings(tmp_path: Path) -> Settings:
    return Settings(
        database_url=f"sqlite:///{tmp_path / 'ledger.db'}",
        master_key_file=tmp_path / "keys" / "master.key",
    )


@pytest.fixture
def opened() -> Iterator[list[socket.socket]]:
    sockets: list[socket.socket] = []
    yield sockets
    for sock in sockets:
        sock.close()


def connect(base: str, opened: list[socket.socket], first_bytes: bytes = b"") -> socket.socket:
    host, port = base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    opened.append(sock)
    if first_bytes:
        sock.sendall(first_bytes)
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed the connection (what it sent before is skipped)."""
    sock.setblocking(False)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except BlockingIOError:
        return False
    except ConnectionError:
        return True
    finally:
        sock.setblocking(True)


def normal_requests_answer(base: str) -> None:
    with httpx.Client(base_url=base, timeout=10) as client:
        checked = client.post("/v2/link/token/isValid", json={"token": "hll_x"})
        assert checked.status_code == 200, checked.text
        assert checked.json()["reason"] == "invalid_token"
        assert client.get("/v2/providers").status_code == 401  # answered: no key sent


def test_half_sent_requests_are_closed_after_the_deadline_and_others_answer_meanwhile(
    sqlite_settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    opened: list[socket.socket],
) -> None:
    deadline = 3.0
    monkeypatch.setenv("HEALTHLEDGER_REQUEST_HEADER_TIMEOUT", str(deadline))
    monkeypatch.setenv("HEALTHLEDGER_REQUEST_BODY_TIMEOUT", str(deadline))
    monkeypatch.setenv("HEALTHLEDGER_CONNECTION_LIMIT", "600")
    with running_server(sqlite_settings, tmp_path) as (base, _management, _link, _output):
        started = time.monotonic()
        # 500 connections: silent, half a head, a head and half a body.
        slow = [connect(base, opened, (b"", HALF_HEAD, HALF_BODY)[i % 3]) for i in range(500)]
        # A head sent a byte at a time, and a second request begun after a whole first
        # one on a kept-alive connection: neither keeps its connection past the deadline.
        trickling = connect(base, opened, HALF_HEAD[:1])
        kept_alive = connect(base, opened, WHOLE_REQUEST)
        assert kept_alive.recv(65536).startswith(b"HTTP/1.1 200 ")
        kept_alive.sendall(HALF_HEAD)
        slow += [trickling, kept_alive]

        normal_requests_answer(base)
        answered = time.monotonic() - started
        assert answered < deadline, "the normal requests waited for the slow ones"
        assert not any(closed_by_server(sock) for sock in slow), "closed before the deadline"

        closed_at: dict[int, float] = {}
        sent = 1
        while len(closed_at) < len(slow) and time.monotonic() - started < deadline + 10:
            if sent < len(HALF_HEAD) and trickling.fileno() not in closed_at:
                try:
                    trickling.sendall(HALF_HEAD[sent : sent + 1])
                    sent += 1
                except OSError:
                    pass
            for sock in slow:
                if sock.fileno() not in closed_at and closed_by_server(sock):
                    closed_at[sock.fileno()] = time.monotonic() - started
            time.sleep(0.2)
        assert len(closed_at) == len(slow), f"{len(slow) - len(closed_at)} still open"
        assert min(closed_at.values()) >= deadline - 0.1
        assert sent > 5, "the trickling head was not kept up until its deadline"

        normal_requests_answer(base)


def test_an_upload_has_its_own_longer_deadline_for_its_body(
    sqlite_settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    opened: list[socket.socket],
) -> None:
    """An export upload over a slow link takes longer than a JSON body may: its path has
    HEALTHLEDGER_UPLOAD_BODY_TIMEOUT, still a deadline."""
    monkeypatch.setenv("HEALTHLEDGER_REQUEST_BODY_TIMEOUT", "1")
    monkeypatch.setenv("HEALTHLEDGER_UPLOAD_BODY_TIMEOUT", "4")
    upload = (
        f"POST /v2/user/{uuid.uuid4()}/import/apple_health HTTP/1.1\r\nHost: ledger\r\n"
        "Content-Type: application/zip\r\nContent-Length: 100\r\n\r\nPK"
    ).encode()
    with running_server(sqlite_settings, tmp_path) as (base, _management, _link, _output):
        started = time.monotonic()
        uploading = connect(base, opened, upload)
        json_body = connect(base, opened, HALF_BODY)
        time.sleep(2)
        assert closed_by_server(json_body), "a JSON body's deadline is its own"
        assert not closed_by_server(uploading), "the upload was held to the JSON deadline"
        while not closed_by_server(uploading):
            assert time.monotonic() - started < 10, "an upload's deadline never came"
            time.sleep(0.2)
        assert time.monotonic() - started >= 4 - 0.1


def test_beyond_the_connection_limit_requests_are_503_until_slow_ones_are_closed(
    sqlite_settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    opened: list[socket.socket],
) -> None:
    monkeypatch.setenv("HEALTHLEDGER_REQUEST_HEADER_TIMEOUT", "1")
    monkeypatch.setenv("HEALTHLEDGER_CONNECTION_LIMIT", "20")
    with running_server(sqlite_settings, tmp_path) as (base, _management, _link, _output):
        for _ in range(25):
            connect(base, opened)
        # uvicorn's limit: a request that comes while the port holds that many
        # connections is answered 503 (and costs nothing more).
        assert httpx.get(f"{base}/v2/providers", timeout=10).status_code == 503
        time.sleep(2)
        assert all(closed_by_server(sock) for sock in opened)
        normal_requests_answer(base)
