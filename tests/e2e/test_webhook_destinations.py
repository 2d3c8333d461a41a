"""Webhooks go to public addresses only (issue 30 §4): a host name is checked, when the
sender connects, against what it resolves to then, and a refused send is a failed attempt
with its reason, never a crash; a name or a range the operator allows is posted to. DNS is
played by a resolver that answers this machine's loopback for `hooks.example`, where a
real receiver listens. On both databases."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import pytest
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.settings import Settings
from healthledger.domain.errors import InvalidRequest
from healthledger.domain.webhooks.deliveries import WebhookDelivery

from tests.clocks import Clock
from tests.e2e.test_webhook_delivery import rows
from tests.e2e.webhook_team import CTX, endpoint, the_team
from tests.receivers import Receiver, http_receiver

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
NAME = "hooks.example"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with http_receiver() as running:
        yield running


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> None:
    """`hooks.example` resolves to 127.0.0.1 (a name rebound to loopback); every other
    name as the system resolves it."""
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host == NAME else host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def service(settings: Settings, allowed: list[str]) -> Service:
    built = build_service(
        settings.model_copy(update={"webhook_allowed_destinations": allowed}), clock=Clock(T0)
    )
    built.bootstrap()
    return built


def named(receiver: Receiver, path: str) -> str:
    """The receiver's URL with its host written as `hooks.example`."""
    port = urlsplit(receiver.base).port
    return f"http://{NAME}:{port}/{path}"


def deleted_user(svc: Service) -> None:
    """A user created and deleted: a `user.deleted` delivery for each endpoint."""
    user = svc.users.create_user(CTX, the_team(svc), client_user_id="dest-0")
    svc.users.delete_user(CTX, the_team(svc), user.id)


def test_a_name_resolving_to_loopback_is_refused_at_send_and_recorded(
    settings: Settings, receiver: Receiver, dns: None
) -> None:
    svc = service(settings, [])  # the default: public addresses only
    try:
        # A name is accepted at registration: what it resolves to is checked at send.
        endpoint_id, _ = endpoint(svc, named(receiver, "ok"), filter_types=["user.*"])
        deleted_user(svc)
        svc.jobs.dispatch_webhooks()  # no crash
        assert receiver.received == []
        (row,) = rows(svc, endpoint_id)
        # Failed attempts (the first retry is immediate), retried on the schedule.
        assert row.status == "pending" and row.attempts >= 1
        attempts = [
            e
            for e in svc.ledger.events.get(row.delivery_id)
            if isinstance(e, WebhookDelivery.AttemptMade)
        ]
        assert len(attempts) == row.attempts
        for attempt in attempts:
            assert (attempt.outcome, attempt.status_code) == ("failure", None)
            assert attempt.error == (
                "address_refused: hooks.example resolves to 127.0.0.1 (loopback), "
                "not a public address"
            )
    finally:
        svc.close()


def test_an_allowed_name_or_range_is_posted_to(
    settings: Settings, receiver: Receiver, dns: None
) -> None:
    for allowed, url in (
        ([NAME], named(receiver, "by-name")),
        (["127.0.0.0/8"], named(receiver, "by-range")),
        (["127.0.0.1/32"], receiver.url("literal")),
    ):
        svc = service(settings, allowed)
        try:
            endpoint_id, _ = endpoint(svc, url, filter_types=["user.*"])
            deleted_user(svc)
            svc.jobs.dispatch_webhooks()
            (row,) = rows(svc, endpoint_id)
            assert row.status == "succeeded", allowed
        finally:
            svc.close()
    got = {r.path: r.headers["host"] for r in receiver.received}
    port = urlsplit(receiver.base).port
    # Connected to the checked address; the Host header is still the URL's.
    assert got == {
        "/by-name": f"{NAME}:{port}",
        "/by-range": f"{NAME}:{port}",
        "/literal": f"127.0.0.1:{port}",
    }


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://127.1:9000/hook",
        "http://[::ffff:127.0.0.1]:9000/hook",
        "http://10.0.0.8/hook",
        "http://localhost:9000/hook",
    ],
)
def test_registration_refuses_a_special_literal_address_by_default(
    settings: Settings, url: str
) -> None:
    svc = service(settings, [])
    try:
        with pytest.raises(InvalidRequest, match="address; webhooks are sent to public"):
            endpoint(svc, url)
    finally:
        svc.close()
