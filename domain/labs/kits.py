"""At-home test kits (the official client's `testkit.*`): a kit is an order whose collection
method is `testkit` (placed by `LabOrders.place`), shipped to an address; its sample id is
printed on the kit once the requisition is made. Whoever takes the sample registers the
kit by that sample id with the patient's details and address (`KitRegistrations.register`),
an `Order.KitRegistered` event on the order's stream, sealed with its user's key.
"""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

from healthledger.domain.context import CommandContext
from healthledger.domain.errors import InvalidRequest, LedgerError
from healthledger.domain.labs.ordering import LabOrders
from healthledger.domain.labs.orders import Order
from healthledger.domain.labs.patients import (
    PatientAddress,
    PatientDetails,
    stored_address,
    stored_details,
)
from healthledger.domain.ledger import command

# The team's testkit order whose kit carries the sample id (None: none of the team's).
KitOrder = Callable[[UUID, str], UUID | None]


class KitNotFound(LedgerError):
    def __init__(self) -> None:
        super().__init__("No test kit of the team has this sample id.")


class KitRegistrations:
    def __init__(self, orders: LabOrders, kit_order: KitOrder) -> None:
        self.orders = orders
        self.ledger = orders.ledger
        self.kit_order = kit_order

    @command
    def register(
        self,
        ctx: CommandContext,
        team_id: UUID,
        sample_id: str,
        details: PatientDetails,
        address: PatientAddress,
        user_id: UUID | None = None,
    ) -> Order:
        """Register the team's kit of `sample_id` to its patient. Another team's kit, an
        unknown sample id, or a kit whose user is gone: KitNotFound (404); `user_id`, when
        sent, must be the user the kit was ordered for."""
        order_id = self.kit_order(team_id, sample_id)
        if order_id is None:
            raise KitNotFound()
        order = self.orders.load(team_id, order_id)
        user = self.orders.users.load_live(team_id, order.user_id)
        if user_id is not None and user_id != user.id:
            raise InvalidRequest("user_id is not the user the kit was ordered for.", "user_id")
        vault = self.orders.vault
        order.register_kit(
            ctx,
            self.orders.clock(),
            sealed_patient_details=vault.seal(user.id, stored_details(details)),
            sealed_patient_address=vault.seal(user.id, stored_address(address)),
        )
        self.ledger.save(order)
        return order
