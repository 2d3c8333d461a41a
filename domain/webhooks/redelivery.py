"""Redelivery: send an endpoint everything announced to it since an instant again, with
the original message ids (management API and `healthledger webhooks replay`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from uuid import UUID

from healthledger.domain.context import CommandContext
from healthledger.domain.errors import WebhookEndpointNotFound
from healthledger.domain.ledger import Clock, Ledger
from healthledger.domain.webhooks.deliveries import WebhookDelivery
from healthledger.domain.webhooks.endpoints import WebhookEndpoint

DeliveriesSince = Callable[[UUID, datetime], list[UUID]]
# Deliveries replayed per transaction.
_BATCH = 200


class Redeliveries:
    def __init__(self, ledger: Ledger, clock: Clock, deliveries_since: DeliveriesSince) -> None:
        self.ledger = ledger
        self.clock = clock
        self.deliveries_since = deliveries_since

    def replay(self, ctx: CommandContext, endpoint_id: UUID, since: datetime) -> int:
        """Queue again every delivery to the endpoint of an event recorded at or after
        `since`, whatever became of it (sent, failed, dropped); how many. The caller has
        checked who may ask; the endpoint must exist and not be deleted."""
        endpoint = self.ledger.find(endpoint_id)
        if not isinstance(endpoint, WebhookEndpoint) or endpoint.deleted_at is not None:
            raise WebhookEndpointNotFound()
        return self.replay_deliveries(ctx, self.deliveries_since(endpoint_id, since))

    def replay_deliveries(self, ctx: CommandContext, ids: Sequence[UUID]) -> int:
        """Queue these deliveries again (each a `WebhookDelivery.Replayed` event), in
        batches of one transaction each; how many."""
        now = self.clock()
        for start in range(0, len(ids), _BATCH):
            batch = []
            for delivery_id in ids[start : start + _BATCH]:
                delivery = self.ledger.find(delivery_id)
                assert isinstance(delivery, WebhookDelivery)
                delivery.replay(ctx, now)
                batch.append(delivery)
            self.ledger.save(*batch)
        return len(ids)
