"""The read side of lab test orders: what the simulated lab must do next, a user's open
orders (a deletion cancels them), one order, the team's order listings, and a user's
orders for the portal. All from the `orders` read model (and `users` for who is gone)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import orders, users
from healthledger.domain.labs.orders import FINAL_STATUSES, TESTKIT
from healthledger.domain.users.user import ACTIVE
from sqlalchemy import ColumnElement, Select, and_, bindparam, func, or_, select

# The ids of a user's orders in no final status (the parameter `user_id`; a deletion
# cancels them). One `!=` per status, not an IN list: an IN of many values is rendered
# anew at each execution, and the deletion's statement is compiled once.
OPEN_ORDERS_OF_USER = select(orders.c.order_id).where(
    orders.c.user_id == bindparam("user_id"),
    *(orders.c.status != status for status in sorted(FINAL_STATUSES)),
)


@dataclass(frozen=True)
class OrderFilters:
    """`GET /v3/orders`'s filters: each one given narrows the listing (None: any)."""

    user_id: UUID | None = None
    # Top-level (`completed`) or low-level (`requisition_created`) statuses: any of them.
    statuses: Sequence[str] = ()
    interpretation: str | None = None
    # Created in [created_from, created_until], updated in [updated_from, updated_until].
    created_from: datetime | None = None
    created_until: datetime | None = None
    updated_from: datetime | None = None
    updated_until: datetime | None = None
    methods: Sequence[str] = ()
    order_ids: Sequence[UUID] = ()


@dataclass(frozen=True)
class OrderPage:
    rows: list[Any]
    total: int


# The service's keyed digest of (team, interpretation): what the rows are filtered by.
InterpretationDigest = Callable[[UUID, str], str]


class OrderQueries:
    def __init__(self, db: Database, interpretation_digest: InterpretationDigest) -> None:
        self.db = db
        self.interpretation_digest = interpretation_digest

    # -- for the simulated lab and the user lifecycle -----------------------------------

    def due_orders(self, now: datetime, limit: int) -> dict[UUID, bool]:
        """Orders the simulated lab should look at, each with whether its user is gone: a
        sandbox order whose next step is due, and an open order whose user is no longer
        active (deleted while it was placed: it is cancelled)."""
        o, u = orders.c, users.c
        user_gone = or_(u.user_id.is_(None), u.status != ACTIVE)
        due = (
            select(o.order_id, user_gone)
            .outerjoin(users, u.user_id == o.user_id)
            .where(o.due_at <= now)
            .order_by(o.due_at, o.order_id)
            .limit(limit)
        )
        gone = (
            select(o.order_id)
            .outerjoin(users, u.user_id == o.user_id)
            .where(o.status.not_in(FINAL_STATUSES), user_gone)
            .limit(limit)
        )
        with self.db.read() as conn:
            found = {order_id: bool(is_gone) for order_id, is_gone in conn.execute(due)}
            if len(found) < limit:
                for order_id in conn.execute(gone).scalars():
                    found.setdefault(order_id, True)
        return dict(list(found.items())[:limit])

    def pending_count(self) -> int:
        """Sandbox orders with a step still to come."""
        with self.db.read() as conn:
            query = select(func.count()).where(orders.c.due_at.is_not(None))
            return int(conn.execute(query).scalar_one())

    # -- for the API and the portal ------------------------------------------------------

    def order(self, team_id: UUID, order_id: UUID) -> Any | None:
        """The team's order (another team's: None); gone with its user's erasure."""
        o = orders.c
        query = select(orders).where(o.order_id == order_id, o.team_id == team_id)
        with self.db.read() as conn:
            return conn.execute(query).first()

    def kit_order(self, team_id: UUID, sample_id: str) -> UUID | None:
        """The team's testkit order whose kit carries the sample id (`KitOrder`); a
        sample id is ten digits drawn from its order's id, so one order holds it."""
        with self.db.read() as conn:
            return conn.execute(kit_order_query(team_id, sample_id)).scalar()

    def page(self, team_id: UUID, filters: OrderFilters, page: int, size: int) -> OrderPage:
        """The team's orders that pass the filters, newest first, and how many there are."""
        o = orders.c
        where = [o.team_id == team_id, *_conditions(filters)]
        if filters.interpretation is not None:
            # The row holds the interpretation sealed, and its team's digest of it.
            digest = self.interpretation_digest(team_id, filters.interpretation)
            where.append(o.interpretation_digest == digest)
        listing = (
            select(orders)
            .where(*where)
            .order_by(o.created_at.desc(), o.order_id.desc())
            .limit(size)
            .offset((page - 1) * size)
        )
        count = select(func.count()).select_from(orders).where(*where)
        with self.db.read() as conn:
            total = int(conn.execute(count).scalar_one())
            rows = list(conn.execute(listing).all()) if total > (page - 1) * size else []
        return OrderPage(rows, total)

    def orders_of_user(self, team_id: UUID, user_id: UUID) -> list[Any]:
        """A user's orders in a team, newest first (the portal's list)."""
        o = orders.c
        query = (
            select(orders)
            .where(o.team_id == team_id, o.user_id == user_id)
            .order_by(o.created_at.desc(), o.order_id.desc())
        )
        with self.db.read() as conn:
            return list(conn.execute(query).all())


def _conditions(filters: OrderFilters) -> list[ColumnElement[bool]]:
    o = orders.c
    found: list[ColumnElement[bool]] = []
    if filters.user_id is not None:
        found.append(o.user_id == filters.user_id)
    if filters.statuses:
        statuses = list(filters.statuses)
        # A low-level status is the last part of the detailed one (received.testkit.ordered).
        low = [o.detailed_status.like(f"%.{status}") for status in statuses]
        found.append(or_(o.status.in_(statuses), *low))
    for column, start, end in (
        (o.created_at, filters.created_from, filters.created_until),
        (o.updated_at, filters.updated_from, filters.updated_until),
    ):
        if start is not None:
            found.append(column >= start)
        if end is not None:
            found.append(column <= end)
    if filters.methods:
        found.append(o.collection_method.in_(list(filters.methods)))
    if filters.order_ids:
        found.append(o.order_id.in_(list(filters.order_ids)))
    return [and_(*found)] if found else []


def kit_order_query(team_id: UUID, sample_id: str) -> Select[Any]:
    """`kit_order`'s query: by the index on (team_id, sample_id), not a scan of the
    team's orders."""
    o = orders.c
    return select(o.order_id).where(
        o.team_id == team_id, o.sample_id == sample_id, o.collection_method == TESTKIT
    )
