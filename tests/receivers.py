"""Real local webhook receivers for the tests: a uvicorn server on a free loopback port
whose paths answer as told (200, 500, 410, 429, a redirect, a hang), and a raw socket
server that resets connections or answers garbage that is not HTTP."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    base: str
    received: list[Received] = field(default_factory=list)
    # How long /slow hangs before answering.
    slow_seconds: float = 2.0

    def url(self, path: str) -> str:
        return f"{self.base}/{path}"

    def on(self, path: str) -> list[Received]:
        return [r for r in self.received if r.path == f"/{path}"]


def _app(receiver: Receiver) -> Starlette:
    async def handle(request: Request) -> Response:
        body = await request.body()
        receiver.received.append(Received(request.url.path, dict(request.headers), body))
        name = request.path_params["name"]
        if name == "fail":
            return Response("boom", status_code=500)
        if name == "gone":
            return Response(status_code=410)
        if name == "busy":
            return Response(status_code=429, headers={"retry-after": "120"})
        if name == "moved":
            return Response(status_code=302, headers={"location": f"{receiver.base}/ok"})
        if name == "slow":
            await asyncio.sleep(receiver.slow_seconds)
        return Response("ok")

    return Starlette(routes=[Route("/{name}", handle, methods=["POST"])])


def free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it. asyncio sets it on a connection only when the
    # socket names its protocol (this one says 0), so without it an answer's body
    # waited out the client's delayed ACK: 40 ms a request on a kept-alive connection,
    # every webhook POST of the tests (adapters/makers/serving.py does the same).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextmanager
def serving(app: Any, sock: socket.socket | None = None) -> Iterator[str]:
    """Serve an ASGI app with uvicorn on a loopback port, in a thread; yields its base URL."""
    sock = sock or free_socket()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@contextmanager
def http_receiver() -> Iterator[Receiver]:
    sock = free_socket()
    receiver = Receiver(f"http://127.0.0.1:{sock.getsockname()[1]}")
    with serving(_app(receiver), sock):
        yield receiver


@contextmanager
def broken_receiver(mode: str) -> Iterator[str]:
    """A server that reads the request and then resets the connection (`reset`) or
    answers bytes that are not HTTP (`garbage`). Yields its URL."""
    sock = free_socket()
    sock.listen(16)
    sock.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                with suppress(OSError):
                    conn.recv(65536)
                if mode == "reset":
                    # SO_LINGER with a zero timeout: close() sends RST instead of FIN.
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                else:
                    conn.sendall(b"this is not HTTP at all\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/{mode}"
    finally:
        stop.set()
        thread.join(timeout=5)
        sock.close()
