"""A sender killed with SIGKILL mid-round, then the users erased (issue 30 §2): the
delivery record never claims less than what may have happened. A child process sends to a
slow real local receiver; it is killed once the receiver has received part of the round
(the round's outcomes are not recorded yet); the users are deleted and erased, which drops
their queued deliveries. Every delivery the receiver received is recorded with an attempt
(delivered, or of unknown outcome), none as never sent, and the deletion reports list the
endpoint as a possible recipient. On both databases."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from healthledger.adapters.compliance.deletion_report import deletion_report
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.engine.schema import teams, webhook_deliveries
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.webhooks.deliveries import POSSIBLY_SENT, WebhookDelivery
from sqlalchemy import select

from tests.receivers import Receiver, http_receiver

CTX = CommandContext(actor="test:actor", request_id="req-crash")
USERS = 30
# Each POST hangs this long at the receiver (received at once), so that a kill finds
# POSTs received and their outcomes not recorded.
RECEIVER_SECONDS = 0.4

SENDER = """
import sys, time
from pathlib import Path
from healthledger.adapters.composition import build_service
from healthledger.adapters.settings import Settings

svc = build_service(Settings(database_url=sys.argv[1], master_key_file=Path(sys.argv[2])))
print("ready", flush=True)
while True:
    if not svc.dispatcher.send_due():
        time.sleep(0.05)
"""


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(datetime.now(UTC))


@pytest.fixture
def svc(settings: Settings, clock: Clock) -> Iterator[Service]:
    built = build_service(settings, clock=clock)
    built.bootstrap()
    yield built
    built.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with http_receiver() as running:
        running.slow_seconds = RECEIVER_SECONDS
        yield running


def test_deliveries_posted_before_a_kill_are_never_recorded_as_never_sent(
    svc: Service, settings: Settings, receiver: Receiver, clock: Clock
) -> None:
    with svc.db.read() as conn:
        team = conn.execute(select(teams.c.team_id)).scalar_one()
    endpoint = svc.webhooks.create(CTX, team, "sandbox", url=receiver.url("slow"))
    users: list[UUID] = []
    for number in range(USERS):
        user = svc.users.create_user(CTX, team, client_user_id=f"crash-{number}")
        entry = svc.catalog["freestyle_libre"]
        svc.connections.connect_demo(CTX, team, user.id, entry.slug, entry.supported_resources)
        users.append(user.id)
    svc.jobs.run_due_pulls()
    while svc.dispatcher.follow():
        pass
    queued = len(delivery_rows(svc))
    assert queued == 2 * USERS  # a connection created and a glucose pull per user

    sender = subprocess.Popen(
        [sys.executable, "-c", SENDER, settings.database_url, str(settings.master_key_file)],
        env=os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # Killed once the receiver has part of the round: the first POST of each lane is
        # in, none of the round's outcomes is recorded yet.
        deadline = time.monotonic() + 60
        while len(receiver.received) < 8:
            assert sender.poll() is None, sender.stdout.read() if sender.stdout else ""
            assert time.monotonic() < deadline, "the sender posted nothing"
            time.sleep(0.01)
        sender.send_signal(signal.SIGKILL)
        sender.wait(timeout=10)
    finally:
        if sender.poll() is None:
            sender.kill()
            sender.wait(timeout=10)
    received = {r.headers["webhook-id"] for r in receiver.received}
    assert 0 < len(received) < queued

    for user_id in users:
        svc.users.delete_user(CTX, team, user_id)
    clock.now += timedelta(days=8)
    assert svc.users.erase_users(CTX, users) == USERS

    possibly_sent = 0
    for message_id in received:
        delivery_id = WebhookDelivery.id_for(endpoint.id, message_id)
        events = list(svc.ledger.events.get(delivery_id))
        started = [e for e in events if isinstance(e, WebhookDelivery.AttemptStarted)]
        made = [e for e in events if isinstance(e, WebhookDelivery.AttemptMade)]
        # Recorded before its POST: an attempt, delivered or of unknown outcome.
        assert started or made, message_id
        for dropped in (e for e in events if isinstance(e, WebhookDelivery.Dropped)):
            assert dropped.reason == f"user erased: {POSSIBLY_SENT}"
            possibly_sent += 1
        row = svc.ledger.find(delivery_id)
        assert isinstance(row, WebhookDelivery) and row.attempts >= 1
    # The crash this is about happened: received deliveries were dropped by the erasure.
    assert possibly_sent > 0
    # The read model counts the attempts as the log does; none received shows 0 attempts.
    by_id = {r.delivery_id: r for r in delivery_rows(svc)}
    for message_id in received:
        assert by_id[WebhookDelivery.id_for(endpoint.id, message_id)].attempts >= 1
    # Dropped with no attempt started: never sent (the receiver has none of them).
    for row in by_id.values():
        if row.status == "dropped" and row.attempts == 0:
            assert row.message_id not in received
    # A rebuild of the read models agrees.
    before = delivery_rows(svc)
    svc.read_models.rebuild(svc.recorder, svc.ledger.mapper)
    assert delivery_rows(svc) == before

    # The deletion report of a user whose message was received lists the endpoint as a
    # (possible) recipient.
    receiving = {
        r.user_id for r in by_id.values() if r.message_id in received and r.status == "dropped"
    }
    report = deletion_report(svc, next(iter(receiving)), CTX)
    [recipient] = report["recipients"]["webhook_endpoints"]
    assert recipient["endpoint_id"] == str(endpoint.id)
    assert recipient["outcome_unknown"] >= 1 and recipient["possibly_received"] is True
    assert recipient["first_possibly_sent_at"] is not None


def delivery_rows(svc: Service) -> list[Any]:
    with svc.db.read() as conn:
        return list(
            conn.execute(
                select(webhook_deliveries).order_by(webhook_deliveries.c.delivery_id)
            ).all()
        )
