"""What every fake maker does the same way: serve its app on localhost in a thread, and
draw its synthetic people's data from seeds, so that a day is a function of its seed;
its failure switches (`FailureSwitches`) and the PKCE check of its token endpoint
(`pkce_challenge`).

Every fake maker uses these (none keeps a copy of its own; the fakes written before the
switches and the PKCE check were shared keep theirs until they move here).
"""

from __future__ import annotations

import base64
import hashlib
import random
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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


def pkce_challenge(verifier: str) -> str:
    """RFC 7636's S256 challenge of `verifier`: what a fake's token endpoint compares with
    the challenge its authorization was given."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


@dataclass
class Failure:
    """An injected answer: `status` for the next `times` requests (to a path ending with
    `path`, if given), with `Retry-After: retry_after` when given."""

    status: int
    times: int
    retry_after: str | None = None
    path: str | None = None


class FailureSwitches:
    """A fake's failure switches: the next requests answer a status (429, 5xx...), or
    wait before answering (a timeout at the reader)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: list[Failure] = []
        self._slow: list[float] = []

    def fail(
        self,
        status: int,
        times: int = 1,
        *,
        retry_after: str | None = None,
        path: str | None = None,
    ) -> None:
        with self._lock:
            self._failures.append(Failure(status, times, retry_after, path))

    def slow(self, seconds: float, times: int = 1) -> None:
        with self._lock:
            self._slow.extend([seconds] * times)

    def injected(self, path: str) -> tuple[Failure | None, float]:
        """What the request to `path` meets: the first failure that matches it (spent
        once), and how long to wait before answering."""
        with self._lock:
            failure = next(
                (f for f in self._failures if f.path is None or path.endswith(f.path)), None
            )
            if failure is not None:
                failure.times -= 1
                if failure.times <= 0:
                    self._failures.remove(failure)
            delay = self._slow.pop(0) if self._slow else 0.0
        return failure, delay
