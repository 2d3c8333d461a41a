"""Revision 0051 and the start after it (ADR 0055), on SQLite and PostgreSQL: a destination
that had deliveries queued from before its cursor publishes their messages from the first
of them, under the same message ids, and the deliveries are recorded dropped, superseded;
what was published before them is not published again.

The deliveries of before are recorded as the outbox recorded them then (a
`WebhookDelivery` per message to the destination, two of them succeeded), the schema
taken down to 0050 (no cursor, no position) and up again."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any
from uuid import UUID

from healthledger.adapters.brokers.clients import Message, Outcome, Published
from healthledger.adapters.brokers.publisher import SUPERSEDED, EventPublisher
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.engine.migrating import downgrade, upgrade
from healthledger.adapters.persistence.engine.schema import stored_events, webhook_deliveries
from healthledger.adapters.persistence.leases.event_destinations import DestinationLeases
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.users.user import User
from healthledger.domain.webhooks.deliveries import DROPPED, SUCCEEDED, WebhookDelivery
from healthledger.domain.webhooks.event_destination_management import BrokerTarget
from healthledger.domain.webhooks.event_destinations import NATS, Route
from sqlalchemy import select

from tests.conftest import Team

CTX = CommandContext(actor="test:actor", request_id="req-cursor-revision")
TYPES: dict[type, str] = {User.Deleted: "user.deleted", User.DeletionUndone: "user.deletion_undone"}


class Broker:
    """A broker that acknowledges every message, in the order given."""

    def __init__(self) -> None:
        self.received: list[Message] = []

    def connector(self, target: BrokerTarget, connect_to: str, timeout: float) -> Any:
        broker = self

        class Client:
            def publish(self, messages: Sequence[Message], deadline: float) -> Published:
                broker.received.extend(messages)
                return [Outcome(1.0) for _ in messages]

            def close(self) -> None:
                pass

        return Client()


def legacy_deliveries(service: Service, team: Team, destination_id: UUID) -> list[str]:
    """Two users deleted and restored twice; a delivery per message to the destination as
    the outbox of before recorded them, the first two of them succeeded. Their message
    ids in log order."""
    people = []
    for number in range(2):
        user = service.users.create_user(CTX, team.team_id, client_user_id=f"rev-{number}")
        for _ in range(2):
            service.users.delete_user(CTX, team.team_id, user.id)
            service.users.undo_deletion(CTX, team.team_id, user.id)
        people.append(user.id)
    e = stored_events.c
    with service.db.read() as conn:
        logged = conn.execute(
            select(e.notification_id, e.originator_id, e.originator_version)
            .where(e.originator_id.in_(people))
            .order_by(e.notification_id)
        ).all()
    now = service.clock()
    deliveries: list[WebhookDelivery] = []
    for row in logged:
        (stored,) = service.ledger.events.get(
            row.originator_id, gt=row.originator_version - 1, lte=row.originator_version
        )
        event: Any = stored
        event_type = TYPES.get(type(event))
        if event_type is None:
            continue
        delivery = WebhookDelivery.create(
            CTX,
            now,
            endpoint_id=destination_id,
            team_id=team.team_id,
            user_id=row.originator_id,
            event_type=event_type,
            source_id=row.originator_id,
            source_version=row.originator_version,
            source_timestamp=event.timestamp,
            day=None,
            log_position=row.notification_id,
            users_digest=service.key_store.users_digest(row.originator_id),
        )
        if len(deliveries) < 2:
            attempt = delivery.start_attempt(CTX, now)
            delivery.record_attempt(
                CTX, now, attempt=attempt, status_code=None, latency_ms=1.0, error=None
            )
        deliveries.append(delivery)
    service.ledger.save(*deliveries)
    return [d.message_id for d in deliveries]


def test_queued_deliveries_of_before_are_published_by_the_cursor_and_dropped(
    settings: Settings, service: Service, team: Team
) -> None:
    made = service.event_destinations.create(
        CTX,
        team.team_id,
        "sandbox",
        kind=NATS,
        connection={"host": "127.0.0.1", "port": 4222, "stream": "S"},
        routes=[Route("user.", "users")],
        paused=True,
    )
    message_ids = legacy_deliveries(service, team, made.id)
    assert len(message_ids) == 8
    service.close()
    # The schema as it was before the cursors, then migrated again.
    downgrade(settings.database_url, "0050")
    upgrade(settings.database_url)
    restarted = build_service(settings)
    try:
        d = webhook_deliveries.c
        with restarted.db.read() as conn:
            rows = conn.execute(
                select(d.delivery_id, d.status)
                .where(d.endpoint_id == made.id)
                .order_by(d.log_position)
            ).all()
        # The start dropped the six still queued, superseded; the two sent stay so.
        assert [r.status for r in rows] == [SUCCEEDED] * 2 + [DROPPED] * 6
        reasons = [
            e.reason
            for r in rows[2:]
            for e in restarted.ledger.events.get(r.delivery_id)
            if isinstance(e, WebhookDelivery.Dropped)
        ]
        assert reasons == [SUPERSEDED] * 6
        # Resumed, the cursor publishes from the first queued message: the six, under
        # the same ids, in order, and nothing sent before them again.
        restarted.event_destinations.set_paused(CTX, team.team_id, "sandbox", made.id, False)
        broker = Broker()
        publisher = EventPublisher(
            restarted.dispatcher,
            restarted.event_destinations,
            DestinationLeases(restarted.db),
            restarted.clock,
            lease=timedelta(minutes=2),
            connector=broker.connector,
        )
        while publisher.publish_due():
            pass
        assert [m.message_id for m in broker.received] == message_ids[2:]
    finally:
        restarted.close()
