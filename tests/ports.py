"""Ports for the servers the tests start as processes (`healthledger serve`, RabbitMQ,
NATS), which must be given a number before they bind it.

A port found free by binding port 0 is one of the system's ephemeral ports: the very
range from which the system hands ports to every socket bound to port 0 and every
outgoing connection, on the whole machine (other xdist workers, the other tests run
on it, this process's own database connections). Between the test closing its probe
and the server binding the number, any of those could take it, and did under CI load.
So the number is taken from below that range, where the system hands out nothing by
itself: only a process that binds that very number can hold it, and the number is
drawn at random over some twenty thousand, checked free and never given twice here."""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

# Below this, well-known and registered services' ports (PostgreSQL's 5432, RabbitMQ's
# 5672, NATS's 4222...): not drawn.
LOWEST = 10000
_PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_given: set[int] = set()
_lock = threading.Lock()
_draw = random.SystemRandom()


def ephemeral_low() -> int:
    """The first port of the system's ephemeral range (Linux's default, if unreadable)."""
    try:
        return int(_PORT_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """A port no socket holds now, outside the ephemeral range (see above)."""
    high = ephemeral_low()
    with _lock:
        if high - LOWEST >= 1000:
            for _ in range(200):
                port = _draw.randrange(LOWEST, high)
                if port not in _given and _bindable(host, port):
                    _given.add(port)
                    return port
        # An ephemeral range that leaves no room below it: the system's choice, as before.
        with socket.socket() as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        _given.add(port)
        return port


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True
