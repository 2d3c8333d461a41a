"""Stream ownership: which streams belong to which user (the `stream_owners` table), so
that a user's audit finds its claim, connections, pulls, link tokens and the webhook
deliveries about it by one index lookup, with no id derived in Python.

Every stream a user owns is founded by an event that names the user: its `user_id`
field (the user's own stream: its id) and its team in `team_id`. A client_user_id claim
is held by one user after another: `Claimed` hands it to a further user, who owns it
from then on too. Erasure never deletes these rows (ids only, no personal value).

A new aggregate about a user (orders, issue 14) plugs in with one entry in
`OWNED_STREAMS`, provided its Created event names `user_id` and `team_id`; migration
0005 backfilled the streams stored before this table (topics listed there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, DomainEventProtocol
from healthledger.adapters.persistence.engine.schema import stream_owners
from healthledger.adapters.persistence.engine.statements import CompiledStatement, insert_of
from healthledger.domain.connections.connection import Connection as ProviderConnection
from healthledger.domain.connections.link_tokens import LinkToken
from healthledger.domain.connections.oauth_flows import OAuthFlow
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.labs.orders import Order
from healthledger.domain.users.user import ClientUserIdClaim, User
from healthledger.domain.webhooks.deliveries import WebhookDelivery
from sqlalchemy import Connection, and_, bindparam, exists, insert, literal, select

USER = "user"
CLAIM = "claim"
CONNECTION = "connection"
PULL = "pull"
LINK_TOKEN = "link_token"
WEBHOOK_DELIVERY = "webhook_delivery"
OAUTH_FLOW = "oauth_flow"
ORDER = "order"

# The aggregates whose streams belong to a user, and the kind each is listed as.
OWNED_STREAMS: dict[type[Aggregate], str] = {
    User: USER,
    ClientUserIdClaim: CLAIM,
    ProviderConnection: CONNECTION,
    ResourceFeed: PULL,
    LinkToken: LINK_TOKEN,
    WebhookDelivery: WEBHOOK_DELIVERY,
    # A sign-in at a maker started from the user's link (ADR 0022).
    OAuthFlow: OAUTH_FLOW,
    # A lab test order placed for the user (issue 14).
    Order: ORDER,
}
# Each one's founding event (a link token's is `Issued`, an OAuth flow's `Started`, which
# `Created` names too).
FOUNDING: dict[type, str] = {aggregate.Created: kind for aggregate, kind in OWNED_STREAMS.items()}

COLUMNS = ("user_id", "originator_id", "team_id", "kind", "first_seen_at")
INSERT_OWNERS = CompiledStatement(insert_of(stream_owners, COLUMNS))

_o = stream_owners.c
# A claim taken by a further user (a new user with a released client_user_id, an undo, a
# change of client_user_id): a row for that user unless it has one, in the claim's team,
# which its earlier owners' rows hold (the claim's founding save came before this one).
_EARLIER = stream_owners.alias("earlier")
CLAIM_TAKEN = CompiledStatement(
    insert(stream_owners).from_select(
        list(COLUMNS),
        select(
            bindparam("uid", type_=_o.user_id.type),
            _EARLIER.c.originator_id,
            _EARLIER.c.team_id,
            literal(CLAIM),
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
    """Whether events of this class found or hand over a stream a user owns."""
    return event_class in FOUNDING or event_class is ClientUserIdClaim.Claimed


def owner_of(founding: Any) -> UUID:
    """The user a founding event names: a user's own stream is the user."""
    return founding.originator_id if isinstance(founding, User.Created) else founding.user_id


def project(conn: Connection, events: Sequence[DomainEventProtocol[Any]]) -> None:
    """The owners of the streams these events found or hand over, in the transaction
    that stores them: the founding rows in one statement (a user's creation founds two
    streams, its own and its claim's)."""
    founded: list[dict[str, Any]] = []
    for event in events:
        kind = FOUNDING.get(type(event))
        if kind is not None:
            e: Any = event
            founded.append(
                {
                    "user_id": owner_of(e),
                    "originator_id": e.originator_id,
                    "team_id": e.team_id,
                    "kind": kind,
                    "first_seen_at": e.timestamp,
                }
            )
        elif type(event) is ClientUserIdClaim.Claimed:
            if founded:
                # The claim may have been founded among these events (a rebuild's page):
                # its row is where the taking reads the claim's team.
                INSERT_OWNERS.execute_many(conn, founded)
                founded = []
            e = event
            CLAIM_TAKEN.execute(conn, {"uid": e.user_id, "oid": e.originator_id, "at": e.timestamp})
    if founded:
        INSERT_OWNERS.execute_many(conn, founded)
