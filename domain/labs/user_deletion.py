"""A user's open lab test orders end with the user: the labs context's part of the user
deletion cascade (`domain/users/deletion_cascade.py`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from uuid import UUID

from healthledger.domain.context import CommandContext
from healthledger.domain.labs.orders import BY_USER_DELETION, Order
from healthledger.domain.ledger import Ledger
from healthledger.domain.users.deletion_cascade import ErasedWithUser


class UserOrders:
    """Cancels a deleted user's open lab test orders, at once, in the deletion's save; an
    undo restores none of them."""

    name = "orders"

    def __init__(self, ledger: Ledger):
        self.ledger = ledger

    def end_with_deletion(
        self, ctx: CommandContext, now: datetime, targets: Sequence[UUID]
    ) -> list[Order]:
        found = (self.ledger.find(oid) for oid in targets)
        orders = [o for o in found if isinstance(o, Order) and o.is_open]
        for order in orders:
            order.cancel(ctx, now, BY_USER_DELETION)
        return orders

    def end_left_behind(self, ctx: CommandContext, now: datetime, user_id: UUID) -> list[Order]:
        # None looked for here: the simulated lab's sweep cancels an open order whose user
        # is gone (an order placed as its user was deleted), when it comes to it.
        return []

    def end_with_erasure(
        self, ctx: CommandContext, now: datetime, user_ids: Sequence[UUID]
    ) -> Mapping[UUID, ErasedWithUser]:
        # Nothing to change: the deletion ended the open orders, and the erasure's effects
        # delete the orders read model's rows (ERASURE_REMOVES).
        return {}
