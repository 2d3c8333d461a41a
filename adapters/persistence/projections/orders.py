"""The labs context's read model of orders: one row per lab test order (`orders`).

The row keeps the order's statuses (`events`: one line per status, `<instant>\\t<status>`,
each appended by SQL, so a step is one UPDATE and no read), what its answers render, and
`due_at`, when the simulated lab takes a sandbox order's next step. Sealed values are kept
sealed (the test ordered too: an order recorded before it was sealed, `Order.CreatedV1`,
is redacted into `Order.Created` at the start, which fills its row's `sealed_lab_test`).
So are the diagnosis codes and the team's passthrough string it was placed with (its
priority is in clear). The results' interpretation is kept sealed too, and as the
service's keyed digest of (team, value), which listings filter on: the projection opens
it with the user's key only to digest it (a rebuild that meets a destroyed key leaves the
digest null; the row goes with the user's erasure anyway). Issue 29, keys/order_interpretations.py.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import orders
from healthledger.adapters.persistence.engine.statements import (
    CompiledStatement,
    UpdatesByKey,
    insert_of,
)
from healthledger.adapters.persistence.projections import handles
from healthledger.adapters.persistence.projections.users import OpenSealed
from healthledger.domain.labs.orders import INTERPRETATIONS, Order, top_level
from sqlalchemy import Connection, bindparam, select, update

# The service's keyed digest of an interpretation: (team_id, value) -> hex.
InterpretationDigest = Callable[[UUID, str], str]

# Compiled once (per set of columns an update sets): a rebuild runs them for every event.
_o = orders.c
INSERT_ORDER = CompiledStatement(
    insert_of(
        orders,
        (
            "order_id",
            "team_id",
            "user_id",
            "environment",
            "sealed_lab_test",
            "lab_id",
            "collection_method",
            "status",
            "detailed_status",
            "sealed_patient_details",
            "sealed_patient_address",
            "events",
            "due_at",
            "activate_by",
            "priority",
            "sealed_icd_codes",
            "sealed_passthrough",
            "created_at",
            "updated_at",
            "version",
        ),
    )
)
# A status appends its line to the row's statuses.
UPDATE_ORDER = UpdatesByKey(orders, "order_id", {"events": lambda line: _o.events + line})
OWNER = CompiledStatement(
    select(_o.user_id, _o.team_id).where(
        _o.order_id == bindparam("order_id", type_=_o.order_id.type)
    )
)


def status_line(status: str, at: datetime) -> str:
    """One status of the row's `events`."""
    return f"{at.isoformat()}\t{status}\n"


def statuses_of(events: str) -> list[dict[str, Any]]:
    """The row's statuses, oldest first: [{status, created_at}]."""
    found = []
    for line in events.splitlines():
        at, status = line.split("\t", 1)
        found.append({"status": status, "created_at": at})
    return found


@handles(Order.Created)
def order_created(conn: Connection, e: Order.Created) -> None:
    INSERT_ORDER.execute(
        conn,
        {
            "order_id": e.originator_id,
            "team_id": e.team_id,
            "user_id": e.user_id,
            "environment": e.environment,
            "sealed_lab_test": e.sealed_lab_test,
            "lab_id": e.lab_id,
            "collection_method": e.collection_method,
            "status": top_level(e.status),
            "detailed_status": e.status,
            "sealed_patient_details": e.sealed_patient_details,
            "sealed_patient_address": e.sealed_patient_address,
            "events": status_line(e.status, e.timestamp),
            "due_at": e.next_step_at,
            "activate_by": e.activate_by,
            "priority": e.priority,
            "sealed_icd_codes": e.sealed_icd_codes,
            "sealed_passthrough": e.sealed_passthrough,
            "created_at": e.timestamp,
            "updated_at": e.timestamp,
            "version": e.originator_version,
        },
    )


def _moved(conn: Connection, e: Any, **values: Any) -> None:
    """A new status: appended to the row's statuses, with what else it changes."""
    UPDATE_ORDER.execute(
        conn,
        e.originator_id,
        {
            "status": top_level(e.status),
            "detailed_status": e.status,
            "events": status_line(e.status, e.timestamp),
            "updated_at": e.timestamp,
            "version": e.originator_version,
            **values,
        },
    )


@handles(Order.StatusChanged)
def status_changed(conn: Connection, e: Order.StatusChanged) -> None:
    if e.sample_id is None:
        _moved(conn, e, due_at=e.next_step_at)
    else:
        _moved(conn, e, due_at=e.next_step_at, sample_id=e.sample_id)


@handles(Order.KitRegistered)
def kit_registered(conn: Connection, e: Order.KitRegistered) -> None:
    """The kit's patient, sealed, in place of the order's: no new status."""
    UPDATE_ORDER.execute(
        conn,
        e.originator_id,
        {
            "sealed_patient_details": e.sealed_patient_details,
            "sealed_patient_address": e.sealed_patient_address,
            "updated_at": e.timestamp,
            "version": e.originator_version,
        },
    )


@handles(Order.ActivationRescheduled)
def activation_rescheduled(conn: Connection, e: Order.ActivationRescheduled) -> None:
    """The day it is dispatched moved (or cleared): the simulated lab's first step with it;
    no new status."""
    UPDATE_ORDER.execute(
        conn,
        e.originator_id,
        {
            "activate_by": e.activate_by,
            "due_at": e.next_step_at,
            "updated_at": e.timestamp,
            "version": e.originator_version,
        },
    )


@handles(Order.Cancelled, Order.Failed)
def ended(conn: Connection, e: Any) -> None:
    """Cancelled or failed: no step follows."""
    _moved(conn, e, due_at=None)


def _no_key_store(conn: Connection, user_id: Any, sealed: str) -> Any:
    raise RuntimeError("projecting an order's results needs the key store (ReadModels)")


def _no_digest(team_id: UUID, value: str) -> str:
    raise RuntimeError("projecting an order's results needs the service's digest key")


@handles(Order.Completed)
def completed(
    conn: Connection,
    e: Order.Completed,
    open_sealed: OpenSealed = _no_key_store,
    digest: InterpretationDigest = _no_digest,
) -> None:
    ((user_id, team_id),) = OWNER.rows(conn, {"order_id": e.originator_id})
    opened = open_sealed(conn, user_id, e.sealed_interpretation)
    _moved(
        conn,
        e,
        due_at=None,
        sealed_results=e.sealed_results,
        sealed_interpretation=e.sealed_interpretation,
        # Null where the key is gone, or where it is not opened (a replay for debugging
        # shows the placeholder of a sealed value, which is no interpretation).
        interpretation_digest=digest(team_id, opened) if opened in INTERPRETATIONS else None,
    )


def opening_handlers(
    open_sealed: OpenSealed, digest: InterpretationDigest | None = None
) -> dict[type, Callable[[Connection, Any], None]]:
    """The handlers that open a sealed value as they project it, bound to the key store
    and the service's interpretation digest."""

    def completed_opening(conn: Connection, e: Order.Completed) -> None:
        completed(conn, e, open_sealed, digest or _no_digest)

    return {Order.Completed: completed_opening}


def fill_interpretations(
    db: Database,
    sealed_interpretation_of: Callable[[UUID], str | None],
    open_sealed: Callable[[UUID, str], Any],
    digest: InterpretationDigest,
) -> int:
    """Rows of completed orders written before revision 0019, which dropped their
    interpretation in clear: their sealed interpretation (`sealed_interpretation_of`, the
    order's from its Completed event) and its digest, as the projection writes them now.
    Returns the rows filled (none on an up-to-date database: one query)."""
    query = select(_o.order_id, _o.user_id, _o.team_id).where(
        _o.sealed_results.is_not(None), _o.sealed_interpretation.is_(None)
    )
    with db.read() as conn:
        rows = conn.execute(query).all()
    filled = 0
    for order_id, user_id, team_id in rows:
        sealed = sealed_interpretation_of(order_id)
        if sealed is None:
            continue
        opened = open_sealed(user_id, sealed)
        values = {
            "sealed_interpretation": sealed,
            "interpretation_digest": digest(team_id, opened) if opened in INTERPRETATIONS else None,
        }
        with db.write() as conn:
            conn.execute(update(orders).where(_o.order_id == order_id).values(**values))
        filled += 1
    return filled
