"""The tests' `free_port` (tests/ports.py): a number the system hands to no one by
itself (below its ephemeral range), free when drawn, never drawn twice."""

from __future__ import annotations

import socket

import pytest

from tests import ports


def test_ports_are_drawn_below_the_ephemeral_range_and_never_twice() -> None:
    drawn = [ports.free_port() for _ in range(50)]
    assert len(set(drawn)) == len(drawn)
    assert all(ports.LOWEST <= port < ports.ephemeral_low() for port in drawn), drawn


def test_a_held_port_is_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", ports.free_port()))
        held = holder.getsockname()[1]
        other = ports.free_port()
        # Neither counts as given: the held one is refused because it is bound.
        ports._given.difference_update({held, other})
        draws = iter([held, other])
        monkeypatch.setattr(ports._draw, "randrange", lambda low, high: next(draws))
        assert ports.free_port() == other
