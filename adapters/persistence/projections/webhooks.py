"""The webhooks context's read models: endpoints, deliveries and the deprecation
cut-overs applied."""

from __future__ import annotations

from typing import Any

from healthledger.adapters.persistence.engine.schema import (
    deprecation_cut_overs,
    webhook_deliveries,
    webhook_endpoints,
)
from healthledger.adapters.persistence.engine.statements import (
    CompiledStatement,
    UpdatesByKey,
    insert_of,
)
from healthledger.adapters.persistence.eventstore.sealed_facts import sealed_facts_of
from healthledger.adapters.persistence.projections import handles
from healthledger.domain.webhooks.deliveries import DROPPED as DELIVERY_DROPPED
from healthledger.domain.webhooks.deliveries import FAILED as DELIVERY_FAILED
from healthledger.domain.webhooks.deliveries import PENDING as DELIVERY_PENDING
from healthledger.domain.webhooks.deliveries import SUCCEEDED as DELIVERY_SUCCEEDED
from healthledger.domain.webhooks.deliveries import WebhookDelivery, lifecycle_type_of
from healthledger.domain.webhooks.deprecation_calendar import DeprecationCalendar
from healthledger.domain.webhooks.endpoints import BY_CALLER, WebhookEndpoint
from sqlalchemy import (
    Connection,
    Update,
    bindparam,
    case,
    delete,
    func,
    insert,
    select,
    update,
)

# -- webhook deliveries ---------------------------------------------------------------


def delivery_attempt(*, succeeded: bool) -> Update:
    """UPDATE of a delivery's row after an attempt (a success, or a failure whose first
    failure time is kept). A failure on a delivery no longer pending (a late POST, ADR
    0019) keeps its status and next attempt, as `WebhookDelivery.AttemptMade` does."""
    d = webhook_deliveries.c
    values: dict[str, Any] = {
        "attempts": at_least_attempts(),
        "last_attempt_at": bindparam("at"),
        "last_status_code": bindparam("code"),
        "next_attempt_at": bindparam("next_at"),
        "status": bindparam("status"),
        "version": bindparam("version"),
    }
    if succeeded:
        values["succeeded_at"] = bindparam("at")
    else:
        values["first_failure_at"] = func.coalesce(d.first_failure_at, bindparam("at"))
        # Typed binds: in a CASE they take no type from the column they are assigned to.
        still_pending = d.status == DELIVERY_PENDING
        values["status"] = case(
            (still_pending, bindparam("status", type_=d.status.type)), else_=d.status
        )
        values["next_attempt_at"] = case(
            (still_pending, bindparam("next_at", type_=d.next_attempt_at.type)),
            else_=d.next_attempt_at,
        )
    return update(webhook_deliveries).where(d.delivery_id == bindparam("did")).values(values)


def at_least_attempts() -> Any:
    """The attempts column, raised to the event's attempt number and never lowered: a late
    outcome of an older attempt leaves the count a newer start set (as the aggregate's
    `max`)."""
    d = webhook_deliveries.c
    attempt = bindparam("attempts", type_=d.attempts.type)
    return case((d.attempts > attempt, d.attempts), else_=attempt)


def attempt_started() -> Update:
    """UPDATE of a delivery's row when an attempt is started (before its POST): it counts."""
    d = webhook_deliveries.c
    return (
        update(webhook_deliveries)
        .where(d.delivery_id == bindparam("did"))
        .values(attempts=at_least_attempts(), version=bindparam("version"))
    )


def attempt_withdrawn() -> Update:
    """UPDATE of a delivery's row when a started attempt was not posted after all."""
    d = webhook_deliveries.c
    attempt = bindparam("attempts", type_=d.attempts.type)
    return (
        update(webhook_deliveries)
        .where(d.delivery_id == bindparam("did"))
        .values(
            attempts=case((d.attempts == attempt, attempt - 1), else_=d.attempts),
            version=bindparam("version"),
        )
    )


# Compiled once: a fan-out writes a delivery per endpoint, each attempt updates one, and
# a rebuild runs them for every event, held and run together (ReadModels.rebuild).
DELIVERY_COLUMNS = (
    "delivery_id",
    "endpoint_id",
    "team_id",
    "user_id",
    "sealed_facts",
    "lifecycle_type",
    "message_id",
    "source_id",
    "source_version",
    "source_timestamp",
    "day",
    "log_position",
    "status",
    "attempts",
    "next_attempt_at",
    "created_at",
    "version",
)
INSERT_DELIVERY = CompiledStatement(insert_of(webhook_deliveries, DELIVERY_COLUMNS))
DELIVERY_SUCCEEDED_UPDATE = CompiledStatement(delivery_attempt(succeeded=True))
DELIVERY_FAILED_UPDATE = CompiledStatement(delivery_attempt(succeeded=False))
UPDATE_DELIVERY = UpdatesByKey(webhook_deliveries, "delivery_id")
ATTEMPT_STARTED_UPDATE = CompiledStatement(attempt_started())
ATTEMPT_WITHDRAWN_UPDATE = CompiledStatement(attempt_withdrawn())


@handles(WebhookDelivery.Created, WebhookDelivery.CreatedV1)
def delivery_created(
    conn: Connection, e: WebhookDelivery.Created | WebhookDelivery.CreatedV1
) -> None:
    # The type only as the log holds it (ADR 0028): sealed, and in clear when it says
    # nothing of a person's health (`lifecycle_type_of`). A version 1 met by a rebuild
    # before the start's redaction leaves the sealed value empty; the redaction gives it.
    # The event's own clear type (a rebuild reads a sealed type as the placeholder once
    # the key is gone: `user.erased` is recorded so).
    if isinstance(e, WebhookDelivery.Created):
        clear = e.lifecycle_type
    else:
        clear = lifecycle_type_of(e.event_type, e.user_id)
    INSERT_DELIVERY.execute(
        conn,
        {
            "delivery_id": e.originator_id,
            "endpoint_id": e.endpoint_id,
            "team_id": e.team_id,
            "user_id": e.user_id,
            "sealed_facts": sealed_facts_of(e),
            "lifecycle_type": clear,
            "message_id": e.message_id,
            "source_id": e.source_id,
            "source_version": e.source_version,
            "source_timestamp": e.source_timestamp,
            "day": e.day,
            "log_position": e.log_position,
            "status": DELIVERY_PENDING,
            "attempts": 0,
            "next_attempt_at": e.timestamp,
            "created_at": e.timestamp,
            "version": e.originator_version,
        },
    )


def update_delivery(conn: Connection, e: Any, **values: Any) -> None:
    UPDATE_DELIVERY.execute(conn, e.originator_id, {"version": e.originator_version, **values})


@handles(WebhookDelivery.AttemptStarted)
def delivery_attempt_started(conn: Connection, e: WebhookDelivery.AttemptStarted) -> None:
    ATTEMPT_STARTED_UPDATE.execute(
        conn, {"did": e.originator_id, "attempts": e.attempt, "version": e.originator_version}
    )


@handles(WebhookDelivery.AttemptWithdrawn)
def delivery_attempt_withdrawn(conn: Connection, e: WebhookDelivery.AttemptWithdrawn) -> None:
    ATTEMPT_WITHDRAWN_UPDATE.execute(
        conn, {"did": e.originator_id, "attempts": e.attempt, "version": e.originator_version}
    )


@handles(WebhookDelivery.AttemptMade)
def delivery_attempted(conn: Connection, e: WebhookDelivery.AttemptMade) -> None:
    success = e.outcome == "success"
    if success:
        status = DELIVERY_SUCCEEDED
    else:
        status = DELIVERY_PENDING if e.next_attempt_at is not None else DELIVERY_FAILED
    (DELIVERY_SUCCEEDED_UPDATE if success else DELIVERY_FAILED_UPDATE).execute(
        conn,
        {
            "did": e.originator_id,
            "attempts": e.attempt,
            "at": e.timestamp,
            "code": e.status_code,
            "next_at": e.next_attempt_at,
            "status": status,
            "version": e.originator_version,
        },
    )


@handles(WebhookDelivery.Dropped)
def delivery_dropped(conn: Connection, e: WebhookDelivery.Dropped) -> None:
    update_delivery(conn, e, status=DELIVERY_DROPPED, next_attempt_at=None)


@handles(WebhookDelivery.Replayed)
def delivery_replayed(conn: Connection, e: WebhookDelivery.Replayed) -> None:
    update_delivery(
        conn,
        e,
        status=DELIVERY_PENDING,
        attempts=0,
        next_attempt_at=e.timestamp,
        first_failure_at=None,
    )


# -- webhook endpoints ----------------------------------------------------------------


@handles(WebhookEndpoint.Created)
def webhook_endpoint_created(conn: Connection, e: WebhookEndpoint.Created) -> None:
    conn.execute(
        insert(webhook_endpoints).values(
            endpoint_id=e.originator_id,
            team_id=e.team_id,
            environment=e.environment,
            url=e.url,
            description=e.description,
            filter_types=list(e.filter_types),
            disabled_reason=BY_CALLER if e.disabled else None,
            sealed_secret=e.sealed_secret,
            created_on=e.timestamp,
            updated_at=e.timestamp,
        )
    )


@handles(WebhookEndpoint.Updated)
def webhook_endpoint_updated(conn: Connection, e: WebhookEndpoint.Updated) -> None:
    update_endpoint(conn, e, **e.changes)


@handles(WebhookEndpoint.Disabled)
def webhook_endpoint_disabled(conn: Connection, e: WebhookEndpoint.Disabled) -> None:
    update_endpoint(conn, e, disabled_reason=e.reason)


@handles(WebhookEndpoint.Enabled)
def webhook_endpoint_enabled(conn: Connection, e: WebhookEndpoint.Enabled) -> None:
    update_endpoint(conn, e, disabled_reason=None)


@handles(WebhookEndpoint.SecretRotated)
def webhook_secret_rotated(conn: Connection, e: WebhookEndpoint.SecretRotated) -> None:
    current = conn.execute(
        select(webhook_endpoints.c.sealed_secret).where(
            webhook_endpoints.c.endpoint_id == e.originator_id
        )
    ).scalar_one()
    update_endpoint(
        conn,
        e,
        sealed_secret=e.sealed_secret,
        sealed_previous_secret=current,
        previous_secret_expires_at=e.previous_expires_at,
    )


@handles(WebhookEndpoint.Deleted)
def webhook_endpoint_deleted(conn: Connection, e: WebhookEndpoint.Deleted) -> None:
    # Gone from every read, secrets included; its sealed copies stay only in the log.
    conn.execute(
        delete(webhook_endpoints).where(webhook_endpoints.c.endpoint_id == e.originator_id)
    )


def update_endpoint(conn: Connection, e: Any, **values: Any) -> None:
    conn.execute(
        update(webhook_endpoints)
        .where(webhook_endpoints.c.endpoint_id == e.originator_id)
        .values(updated_at=e.timestamp, **values)
    )


# -- the deprecation calendar ---------------------------------------------------------


@handles(DeprecationCalendar.CutOverApplied)
def cut_over_applied(conn: Connection, e: DeprecationCalendar.CutOverApplied) -> None:
    conn.execute(
        insert(deprecation_cut_overs).values(
            key=e.key,
            effective_on=e.effective_on,
            what=e.what,
            applied_at=e.timestamp,
            actor=e.actor,
        )
    )
