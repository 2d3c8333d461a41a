"""`serve` binds its listening sockets before anything of its process takes a port the
system chooses (adapters/server.py `listening`): the database connections `build_service`
opens, and `serve --fake-makers`' eight fakes, each on port 0. Bound later, one of those
could take the very port the service was told to listen on (CI saw a fake take it), and
the service failed to start. Here the ports are the system's choice too (0), read back
from the bound sockets: the tests cannot lose them the way the servers could."""

from __future__ import annotations

import errno
import gc
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import pytest
from healthledger.adapters import cli, server
from healthledger.adapters.makers import sandbox
from healthledger.adapters.server import Listeners, ServeRefused, bind_sockets, serve
from healthledger.adapters.settings import Settings

LOCAL = {
    "host": "127.0.0.1",
    "public_base_url": "http://127.0.0.1:8000",
    "link_url": "http://127.0.0.1:8002",
    "team_api_port": 0,
    "management_api_port": 0,
    "link_port": 0,
}


class Stop(Exception):
    """Raised where the test has seen what it came for: `serve` goes no further."""


@pytest.fixture
def bound(monkeypatch: pytest.MonkeyPatch) -> list[socket.socket]:
    """Every socket `serve` binds, as it binds it."""
    sockets: list[socket.socket] = []

    def recording(host: str, port: int, what: str) -> list[socket.socket]:
        made = bind_sockets(host, port, what)
        sockets.extend(made)
        return made

    monkeypatch.setattr(server, "bind_sockets", recording)
    return sockets


def bound_ports(sockets: list[socket.socket]) -> list[int]:
    """The ports of `sockets` that are still open."""
    return [sock.getsockname()[1] for sock in sockets if sock.fileno() != -1]


def taken(port: int) -> bool:
    """Whether `port` is held: a socket binding it fails. (uvicorn listens on the sockets
    when it starts; until then they are bound, and the system hands a bound port to no
    one asking for port 0 or connecting out.)"""
    with socket.socket() as other:
        try:
            other.bind(("127.0.0.1", port))
        except OSError as exc:
            assert exc.errno == errno.EADDRINUSE, exc
            return True
        return False


def test_serve_binds_its_three_ports_before_it_connects_to_the_database(
    monkeypatch: pytest.MonkeyPatch, bound: list[socket.socket]
) -> None:
    seen: dict[int, bool] = {}

    def build_service(settings: Settings) -> Any:
        seen.update({port: taken(port) for port in bound_ports(bound)})
        raise Stop

    monkeypatch.setattr(server, "build_service", build_service)
    with pytest.raises(Stop):
        serve(Settings.model_validate(LOCAL))
    # The team API, the management API and the link page: bound.
    assert len(seen) == 3 and all(seen.values()), seen
    # ...and let go when the start failed.
    assert bound_ports(bound) == []


def test_the_fake_makers_cannot_take_the_ports_serve_listens_on(
    monkeypatch: pytest.MonkeyPatch, bound: list[socket.socket]
) -> None:
    at_start: dict[int, bool] = {}
    served: list[Listeners] = []

    @contextmanager
    def running_fake_makers(host: str, *args: Any, **kwargs: Any) -> Iterator[Any]:
        # Whatever port the system gives a fake, it is none that the service holds.
        for port in bound_ports(bound):
            at_start[port] = taken(port)
        raise Stop
        yield  # pragma: no cover

    monkeypatch.setattr(sandbox, "running_fake_makers", running_fake_makers)
    monkeypatch.setattr(server, "serve", lambda *a, listeners, **k: served.append(listeners))
    with pytest.raises(Stop):
        cli._serve_with_fake_makers(Settings.model_validate(LOCAL))
    assert len(at_start) == 3 and all(at_start.values()), at_start
    assert bound_ports(bound) == []


def test_serve_with_the_real_fakes_hands_serve_the_sockets_it_bound_first(
    monkeypatch: pytest.MonkeyPatch, bound: list[socket.socket]
) -> None:
    served: list[tuple[set[int], set[int]]] = []

    def serve_stub(settings: Settings, *, listeners: Listeners) -> None:
        ours = listeners.team_api + listeners.management_api + listeners.link
        fakes = {urlsplit(base).port for base in settings.oauth_maker_urls.values()}
        served.append((set(bound_ports(ours)), {p for p in fakes if p is not None}))

    monkeypatch.setattr(server, "serve", serve_stub)
    assert cli._serve_with_fake_makers(Settings.model_validate(LOCAL)) == 0
    [(ours, fakes)] = served
    # The service's three ports, held while the eight fakes ran on others.
    assert len(ours) == 3 and len(fakes) == 8 and not ours & fakes, (ours, fakes)
    assert bound_ports(bound) == []


def test_a_port_held_elsewhere_refuses_the_start_and_lets_go_of_the_others(
    bound: list[socket.socket],
) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        held = Settings.model_validate({**LOCAL, "management_api_port": port})
        with pytest.raises(ServeRefused) as refused:
            serve(held)
    assert str(refused.value) == (
        f"the management API cannot listen on 127.0.0.1:{port}: address already in use"
    )
    # The team API's socket, bound before, is closed again.
    assert len(bound) == 1 and bound_ports(bound) == []


def test_serve_freezes_its_heap_once_its_apps_are_built_and_before_it_serves(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """ADR 0056: what `serve` built at its start is out of the collector's passes while it
    serves; what it makes after is not."""
    steps: list[str] = []
    real_create_team_api = server.create_team_api

    def create_team_api(service: Any) -> Any:
        steps.append("apps built")  # the last of the three apps one process builds
        return real_create_team_api(service)

    def settle_heap() -> None:
        steps.append("heap frozen")

    async def serve_all(*_args: Any) -> None:
        steps.append("serving")
        raise Stop

    monkeypatch.setattr(server, "create_team_api", create_team_api)
    monkeypatch.setattr(server, "settle_heap", settle_heap)
    monkeypatch.setattr(server, "_serve_all", serve_all)
    settings = Settings.model_validate(
        {
            **LOCAL,
            "database_url": f"sqlite:///{tmp_path / 'serve.db'}",
            "master_key_file": tmp_path / "keys" / "master.key",
        }
    )
    with pytest.raises(Stop):
        serve(settings)
    assert steps == ["apps built", "heap frozen", "serving"]

    # What `settle_heap` does: a heap frozen (the suite's own freeze put aside meanwhile).
    monkeypatch.undo()
    frozen_by_the_suite = gc.get_freeze_count()
    gc.unfreeze()
    try:
        server.settle_heap()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        if frozen_by_the_suite:
            gc.freeze()
