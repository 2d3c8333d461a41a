"""What every fake maker does the same way: serve its app on localhost in a thread, and
draw its synthetic people's data from seeds, so that a day is a function of its seed.

Every fake maker uses these (none keeps a copy of its own).
"""

from __future__ import annotations

import hashlib
import random
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, timedelta

import uvicorn
from starlette.types import ASGIApp


@contextmanager
def served(app: ASGIApp, name: str, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve `app` with uvicorn in a thread on `host:port` (0: a free port); yields its
    base URL. `name` is for the error when it does not start."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it: an answer's headers and body leave at once, instead
    # of the body waiting out the client's delayed ACK (40 ms a request on keep-alive).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not start")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def seeded(*parts: object) -> random.Random:
    """A generator seeded by `parts`, the same on every machine (not Python's salted hash)."""
    seed = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(seed, "big"))


def days(start: date, end: date) -> Iterator[date]:
    """The days start..end, inclusive."""
    day = start
    while day <= end:
        yield day
        day += timedelta(days=1)
