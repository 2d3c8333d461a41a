"""Where webhooks may go (issue 30 §4): public addresses only by default, whatever the
spelling of an address; the operator's named hosts and ranges besides; checked on the
address a host resolves to when the sender connects, and connected to that address."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import httpcore
import pytest
from healthledger.adapters.settings import Settings
from healthledger.adapters.webhooks.destinations import DestinationRefused, GuardedBackend
from healthledger.domain.webhooks.management import (
    Destinations,
    address,
    host_ip,
    special_range,
    url_problem,
)
from pydantic import ValidationError

NONE = Destinations()

# (address, the range it is refused as): one or more per range.
REFUSED: list[tuple[str, str]] = [
    ("127.0.0.1", "loopback"),
    ("127.8.9.10", "loopback"),
    ("::1", "loopback"),
    ("::ffff:127.0.0.1", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.254", "private"),
    ("192.168.1.1", "private"),
    ("fd00::1", "private"),
    ("fc00::1", "private"),
    ("::ffff:10.0.0.1", "private"),
    ("::ffff:192.168.0.1", "private"),
    ("169.254.169.254", "link-local"),  # the cloud metadata service
    ("169.254.1.1", "link-local"),
    ("fe80::1", "link-local"),
    ("::ffff:169.254.169.254", "link-local"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"),
    ("::", "unspecified"),
    ("240.0.0.1", "private"),  # 240/4 is reserved (Python counts it private too)
    ("255.255.255.255", "private"),
    ("192.0.2.10", "private"),  # documentation ranges
    ("2001:db8::1", "private"),
    ("100.64.0.1", "not publicly routable"),  # carrier-grade NAT
    ("64:ff9b::7f00:1", "reserved"),
    ("2002:7f00:1::", "loopback"),  # 6to4 carrying 127.0.0.1
]
PUBLIC = ["8.8.8.8", "93.184.215.14", "2606:4700::1111", "::ffff:8.8.8.8", "2002:808:808::"]


@pytest.mark.parametrize(("ip", "kind"), REFUSED)
def test_each_special_range_is_refused(ip: str, kind: str) -> None:
    parsed = host_ip(ip)
    assert parsed is not None
    assert special_range(parsed) == kind
    assert NONE.refusal(parsed) == kind


@pytest.mark.parametrize("ip", PUBLIC)
def test_public_addresses_are_allowed(ip: str) -> None:
    parsed = host_ip(ip)
    assert parsed is not None and NONE.refusal(parsed) is None


@pytest.mark.parametrize(
    ("host", "meant"),
    [
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("0x7f.0.0.1", "127.0.0.1"),
        ("0x7F000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("10.1", "10.0.0.1"),
        ("[::ffff:127.0.0.1]", "::ffff:7f00:1"),
        ("127.0.0.1.", "127.0.0.1"),
        ("[fe80::1%25eth0]", "fe80::1"),
    ],
)
def test_every_spelling_of_an_address_is_read_as_resolvers_read_it(host: str, meant: str) -> None:
    assert str(host_ip(host)) == meant
    if ":" not in host:  # as the platform's own parser reads it
        assert str(ipaddress.IPv4Address(socket.inet_aton(host.rstrip(".")))) == meant


@pytest.mark.parametrize("host", ["example.com", "1e3", "999.1", "0x1g", "127.0.0.256", "a.1"])
def test_names_are_not_addresses(host: str) -> None:
    assert host_ip(host) is None


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9000/hook",
        "http://127.1:9000/hook",
        "http://0x7f.1:9000/hook",
        "http://2130706433:9000/hook",
        "http://[::ffff:127.0.0.1]:9000/hook",
        "http://[::1]:9000/hook",
        "http://localhost:9000/hook",
        "http://LOCALHOST.:9000/hook",
        "http://10.0.0.5/hook",
        "http://10.5/hook",
        "https://172.20.1.1/hook",
        "https://192.168.0.10/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/",
        "http://[fe80::1]/",
        "http://[fd00::1]/",
        "http://224.0.0.1/",
        "http://0.0.0.0:9000/",
        "http://[::]:9000/",
        "http://100.64.0.1/",
    ],
)
def test_registration_refuses_literal_special_addresses(url: str) -> None:
    problem = url_problem(url, set())
    assert problem is not None and "address; webhooks are sent to public addresses" in problem


@pytest.mark.parametrize(
    "url",
    ["https://hooks.example.com/h", "http://8.8.8.8/h", "http://[2606:4700::1111]/h"],
)
def test_registration_accepts_public_addresses_and_names(url: str) -> None:
    assert url_problem(url, set()) is None


def test_allowed_ranges_and_names_let_on_premises_receivers_register() -> None:
    allowed = Destinations.parse(["10.0.0.0/8", "hooks.internal", "::1", "LOCALHOST."])
    assert url_problem("http://10.20.30.40:8080/h", set(), allowed) is None
    assert url_problem("http://10.1:8080/h", set(), allowed) is None
    assert url_problem("http://[::ffff:10.0.0.1]/h", set(), allowed) is None
    assert url_problem("http://[::1]:9000/h", set(), allowed) is None
    assert url_problem("http://localhost:9000/h", set(), allowed) is None
    assert url_problem("http://hooks.internal/h", set(), allowed) is None
    # Not in the ranges allowed.
    assert url_problem("http://192.168.0.1/h", set(), allowed) is not None
    assert url_problem("http://169.254.169.254/", set(), allowed) is not None
    # Never the service itself, whatever is allowed.
    own = {address("127.0.0.1", 8000)}
    assert "itself" in (url_problem("http://localhost:8000/", own, allowed) or "")


@pytest.mark.parametrize("entry", ["bad host", "10.0.0.0/33", "http://x", "1.2.3.4.5/8", "127.1"])
def test_a_malformed_allowed_destination_stops_the_settings(entry: str) -> None:
    with pytest.raises(ValidationError, match="webhook_allowed_destinations"):
        Settings(webhook_allowed_destinations=[entry])


def test_the_setting_reads_a_comma_separated_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEALTHLEDGER_WEBHOOK_ALLOWED_DESTINATIONS", " hooks.internal, 10.0.0.0/8 ")
    assert Settings().webhook_allowed_destinations == ["hooks.internal", "10.0.0.0/8"]
    assert Settings(webhook_allowed_destinations=[]).webhook_allowed_destinations == []


# -- at send time ----------------------------------------------------------------------------


def _answers(*ips: str) -> Any:
    """A resolver answering `ips` for any name, recording what it was asked."""
    asked: list[str] = []

    def resolve(host: str, port: int) -> list[tuple[Any, ...]]:
        asked.append(host)
        return [
            (
                socket.AF_INET6 if ":" in ip else socket.AF_INET,
                socket.SOCK_STREAM,
                6,
                "",
                (ip, port),
            )
            for ip in ips
        ]

    resolve.asked = asked  # type: ignore[attr-defined]
    return resolve


@pytest.mark.parametrize(("ip", "kind"), REFUSED)
def test_a_name_that_resolves_to_a_special_address_is_refused_at_send(ip: str, kind: str) -> None:
    backend = GuardedBackend(NONE, set(), _answers(ip))
    with pytest.raises(
        DestinationRefused, match=rf"hooks.example resolves to .* \({kind}\), not a public address"
    ):
        backend.connect_tcp("hooks.example", 443, timeout=1)


def test_the_connection_goes_to_the_checked_address_not_a_second_resolution(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The name answers a private and a public address: only the public one is dialled,
    # as an address (no second look-up that could answer otherwise).
    dialled: list[tuple[str, int]] = []

    def create_connection(addr: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        dialled.append(addr)
        raise OSError("unreachable in a test")

    monkeypatch.setattr(socket, "create_connection", create_connection)
    resolve = _answers("10.0.0.1", "93.184.215.14")
    backend = GuardedBackend(NONE, set(), resolve)
    with pytest.raises(httpcore.ConnectError):
        backend.connect_tcp("hooks.example", 443, timeout=1)
    assert dialled == [("93.184.215.14", 443)]
    assert resolve.asked == ["hooks.example"]


def test_allowed_names_and_ranges_pass_at_send_but_never_the_service_itself() -> None:
    own = {address("127.0.0.1", 8000)}
    by_range = GuardedBackend(Destinations.parse(["10.0.0.0/8"]), own, _answers("10.1.2.3"))
    assert by_range.refusal("hooks.internal", "10.1.2.3", 443) is None
    assert by_range.refusal("hooks.internal", "192.168.1.1", 443) == "192.168.1.1 (private)"
    by_name = GuardedBackend(Destinations.parse(["hooks.internal"]), own)
    assert by_name.refusal("hooks.internal", "192.168.1.1", 443) is None
    assert by_name.refusal("other.internal", "192.168.1.1", 443) is not None
    everything = GuardedBackend(Destinations.parse(["0.0.0.0/0", "::/0", "hooks.internal"]), own)
    assert (
        everything.refusal("hooks.internal", "127.0.0.1", 8000)
        == "127.0.0.1 port 8000 (this service itself)"
    )
    assert everything.refusal("x", "::ffff:127.0.0.1", 8000) is not None
    assert everything.refusal("x", "127.0.0.1", 8001) is None
