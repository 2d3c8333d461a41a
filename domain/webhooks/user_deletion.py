"""The webhook deliveries about a user that are still queued end with its erasure: the
webhooks context's part of the user deletion cascade (`domain/users/deletion_cascade.py`).
A deletion and its undo are announced (public events), not cascaded: they change no
delivery."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from uuid import UUID

from healthledger.domain.context import CommandContext
from healthledger.domain.ledger import Ledger
from healthledger.domain.users.deletion_cascade import ErasedWithUser
from healthledger.domain.users.lifecycle import QUEUED_DELIVERIES
from healthledger.domain.webhooks.deliveries import PENDING, WebhookDelivery

# Why queued deliveries are dropped at an erasure (WebhookDelivery.Dropped's reason).
DROPPED_BY_ERASURE = "user erased"


class UserDeliveries:
    """Drops the deliveries about an erased user still queued, in the erasure's save: what
    they would post names a user that no longer exists. Their rows stay, as the delivery
    history, naming no value."""

    name = "webhook_deliveries"

    def __init__(
        self,
        ledger: Ledger,
        queued_deliveries: Callable[[Sequence[UUID]], Mapping[UUID, Sequence[UUID]]],
    ):
        self.ledger = ledger
        # Per user of a batch, the ids of the deliveries about it still queued, in one
        # query for the whole batch (a user with none is left out).
        self.queued_deliveries = queued_deliveries

    def end_with_deletion(
        self, ctx: CommandContext, now: datetime, targets: Sequence[UUID]
    ) -> list[WebhookDelivery]:
        # The deletion is itself announced: what is queued about the user is still sent.
        return []

    def end_left_behind(
        self, ctx: CommandContext, now: datetime, user_id: UUID
    ) -> list[WebhookDelivery]:
        # A delivery queued after the deletion announces what was recorded: it is sent,
        # or dropped at the erasure.
        return []

    def end_with_erasure(
        self, ctx: CommandContext, now: datetime, user_ids: Sequence[UUID]
    ) -> dict[UUID, ErasedWithUser]:
        queued = self.queued_deliveries(user_ids)
        # The batch's deliveries load in a few queries, however many there are.
        found = self.ledger.find_many([i for uid in user_ids for i in queued.get(uid, ())])
        ended: dict[UUID, ErasedWithUser] = {}
        for user_id in user_ids:
            # Queued as the read model says, pending as the stream says (a sender may have
            # recorded the outcome since): only those are dropped, and counted.
            deliveries = [
                d
                for d in (found.get(i) for i in queued.get(user_id, ()))
                if isinstance(d, WebhookDelivery) and d.status == PENDING
            ]
            for delivery in deliveries:
                delivery.drop(ctx, now, DROPPED_BY_ERASURE)
            # Counted even when none: the erasure's transaction checks that none is left.
            ended[user_id] = ErasedWithUser(deliveries, {QUEUED_DELIVERIES: len(deliveries)})
        return ended
