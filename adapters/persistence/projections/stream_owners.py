"""Stream ownership: which streams belong to which user (the `stream_owners` table), so
that a user's audit finds its claim, connections, pulls, link tokens and the webhook
deliveries about it by one index lookup, with no id derived in Python.

Every stream a user owns is founded by an event that names the user: its `user_id`
field (the user's own stream: its id) and its team in `team_id`. A client_user_id claim
is held by one user after another: `Claimed` hands it to a further user, who owns it
from then on too. Erasure never deletes these rows (ids only, no personal value).

Each aggregate declares whether its stream is a user's (`USER_STREAM` in the domain: the
kind, and the founding event's field naming the user), and an event that hands a stream
to a further user names the field (`HANDS_STREAM_TO`); `OWNED_STREAMS` and the handing
events are derived from them. Migration 0005 backfilled the streams stored before this
table (topics listed there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, DomainEventProtocol
from healthledger.adapters.persistence.engine.schema import stream_owners
from healthledger.adapters.persistence.engine.statements import CompiledStatement, insert_of
from healthledger.domain.audited import Audited, audited_aggregates, events_of
from healthledger.domain.connections.connection import Connection as ProviderConnection
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.users.user import User
from healthledger.domain.webhooks.deliveries import WebhookDelivery
from healthledger.domain.webhooks.publish_rounds import PublishRound
from sqlalchemy import Connection, and_, bindparam, exists, insert, select

# The aggregates whose streams belong to a user, and the kind each is listed as (a
# concrete aggregate that declared no USER_STREAM would not have been defined).
OWNED_STREAMS: dict[type[Audited], str] = {
    aggregate: aggregate.USER_STREAM.kind
    for aggregate in audited_aggregates()
    if aggregate.USER_STREAM is not None
}
# Each one's founding event, by the kind (a link token's is `Issued`, an OAuth flow's
# `Started`, which `Created` names too), and the field of it that names the user.
# An old version of a founding event (`Connection.CreatedV1`, recorded no more and
# redacted at the start: ADR 0028) founds its stream too when a rebuild meets it first.
FOUNDING: dict[type, str] = {
    founding: kind
    for aggregate, kind in OWNED_STREAMS.items()
    for founding in events_of(aggregate)
    if issubclass(founding, Aggregate.Created)
}
_OWNER_FIELD: dict[type, str] = {
    founding: aggregate.USER_STREAM.owner
    for aggregate in OWNED_STREAMS
    for founding in events_of(aggregate)
    if issubclass(founding, Aggregate.Created) and aggregate.USER_STREAM is not None
}
# The events that hand a stream to a further user, by the field that names them.
HANDING: dict[type, str] = {
    event: event.HANDS_STREAM_TO
    for aggregate in OWNED_STREAMS
    for event in events_of(aggregate)
    if event.HANDS_STREAM_TO is not None
}
# The kinds other modules select by.
USER = OWNED_STREAMS[User]
CONNECTION = OWNED_STREAMS[ProviderConnection]
PULL = OWNED_STREAMS[ResourceFeed]
WEBHOOK_DELIVERY = OWNED_STREAMS[WebhookDelivery]
# An event destination's round (ADR 0055) belongs to no one user: it is listed for each
# user whose messages it was to publish, so that the user's audit and deletion report
# find it (as recipients), and it stays after the erasure as every row here does.
PUBLISH_ROUND = "publish_round"

COLUMNS = ("user_id", "originator_id", "team_id", "kind", "first_seen_at")
INSERT_OWNERS = CompiledStatement(insert_of(stream_owners, COLUMNS))

_o = stream_owners.c
# A stream handed to a further user (a claim of a client_user_id taken by a new user, an
# undo, a change of client_user_id): a row for that user unless it has one, in the
# stream's team and of its kind, which its earlier owners' rows hold (the stream's
# founding save came before this one).
_EARLIER = stream_owners.alias("earlier")
STREAM_HANDED = CompiledStatement(
    insert(stream_owners).from_select(
        list(COLUMNS),
        select(
            bindparam("uid", type_=_o.user_id.type),
            _EARLIER.c.originator_id,
            _EARLIER.c.team_id,
            _EARLIER.c.kind,
            bindparam("at", type_=_o.first_seen_at.type),
        )
        .where(
            _EARLIER.c.originator_id == bindparam("oid", type_=_o.originator_id.type),
            ~exists().where(
                and_(_o.user_id == bindparam("uid"), _o.originator_id == bindparam("oid"))
            ),
        )
        .limit(1),
    )
)


def names_owners(event_class: type) -> bool:
    """Whether events of this class found or hand over a stream a user owns (or list a
    round for the users it names)."""
    return event_class in FOUNDING or event_class in HANDING or event_class is PublishRound.Started


def owner_of(founding: Any) -> UUID | None:
    """The user a founding event names: a user's own stream is the user. None for a
    delivery of a team-level webhook event type (no user)."""
    owner: UUID | None = getattr(founding, _OWNER_FIELD[type(founding)])
    return owner


def project(conn: Connection, events: Sequence[DomainEventProtocol[Any]]) -> None:
    """The owners of the streams these events found or hand over, in the transaction
    that stores them: the founding rows in one statement (a user's creation founds two
    streams, its own and its claim's)."""
    founded: list[dict[str, Any]] = []
    for event in events:
        if isinstance(event, PublishRound.Started):
            founded.extend(
                {
                    "user_id": UUID(user_id),
                    "originator_id": event.originator_id,
                    "team_id": event.team_id,
                    "kind": PUBLISH_ROUND,
                    "first_seen_at": event.timestamp,
                }
                for user_id in event.users
            )
            continue
        kind = FOUNDING.get(type(event))
        if kind is not None:
            e: Any = event
            if owner_of(e) is None:
                continue  # a team-level webhook delivery: no user owns it
            founded.append(
                {
                    "user_id": owner_of(e),
                    "originator_id": e.originator_id,
                    "team_id": e.team_id,
                    "kind": kind,
                    "first_seen_at": e.timestamp,
                }
            )
        elif type(event) in HANDING:
            if founded:
                # The stream may have been founded among these events (a rebuild's page):
                # its row is where the handing reads the stream's team and kind.
                INSERT_OWNERS.execute_many(conn, founded)
                founded = []
            e = event
            new_owner = getattr(e, HANDING[type(e)])
            STREAM_HANDED.execute(
                conn, {"uid": new_owner, "oid": e.originator_id, "at": e.timestamp}
            )
    if founded:
        INSERT_OWNERS.execute_many(conn, founded)
