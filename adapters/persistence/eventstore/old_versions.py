"""At the service's start: the records of old event versions whose successors seal their
health facts, redacted into those successors (ADR 0028).

Revision 0016 lists them in `pending_redactions` (it cannot seal: a migration has no
master key). The start takes them in batches: each record decoded, its successor built
with the health facts sealed with the user's data key (or, for a user erased already, the
erased placeholder in their place: no key is made for someone who is gone), and the batch
redacted in one transaction (`Redactor`), which also deletes their pending rows and gives
the read models the sealed values. Interrupted, it resumes with the rows left; run by
several processes at once, a record redacted by another one meanwhile is skipped.

Old versions handled: `Order.CreatedV1` (its lab test's id, name and markers in clear);
`Connection.CreatedV1`, `Connection.ReconnectedV1` and `ResourceFeed.CreatedV1` (the
provider, resource availability and resource in clear: revision 0022, ADR 0032);
`NoticeReceipt.ReceivedV1` (the maker and the resources a notice named, and the maker in
its actor: revision 0023), `NoticeReceipt.ReceivedV2` (a notice's window in clear:
revision 0035); `WebhookDelivery.CreatedV1` (the event type in clear: revision
0028); `ResourceFeed.PullScheduledV1`, `PullSucceededV1` and `DailySyncedV1` (a pull's
window, its oldest and newest day, a sync's days: revision 0034; they name no user, the
stream's owner is given); `LinkToken.IssuedV1` (its redirect_url in clear, which may name
the person: revision 0043), `LinkToken.IssuedV2` and `ConsumedV1` (the maker the user was
linking, or connected, in clear: revision 0044; a consumption names no user, the stream's
owner is given); `OAuthFlow.StartedV1` and `CredentialSignIn.ChallengedV1` (the maker an
OAuth flow was started for, or a password maker's sign-in asked a code of, in clear:
revision 0045; no read model holds either); `Connection.DemoFailuresConfiguredV1` (the
resources a demo device fails in clear: revision 0049; it names no user, the stream's
owner is given; no read model holds it).

Sealed in place (`SEALED_IN_PLACE`: the same topic, an older class version or an older
shape of its payload): `User.Created` before version 4 and `User.SettingsChanged` whose
changes name `fallback_time_zone`, the user's fallback time zone in clear (revision 0042),
redacted into the sealed `sealed_fallback_time_zone`; the users row gets the log's sealed
value in the same transaction, in the log's order (the last change is the row's).
`User.ClientUserIdChanged` v1 (both values in clear) and `ClientUserIdClaim.Created` v1 (the
value in clear), listed by revision 0046, redacted into their version 2: the new value
sealed with the user's key and the claim of its time named, the claim's value named by the
team's keyed digest (ADR 0054). A redacted change's or Created's sealed client_user_id goes
to the users row too, unless a later change gave the row its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Mapper, StoredEvent
from eventsourcing.utils import resolve_topic
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import (
    connections,
    link_tokens,
    orders,
    pending_redactions,
    resource_feeds,
    snapshots,
    stored_events,
    stream_owners,
    users,
    webhook_deliveries,
)
from healthledger.adapters.persistence.eventstore.redaction import (
    RedactionRaced,
    Redactor,
    Replacement,
)
from healthledger.adapters.persistence.eventstore.sealed_facts import (
    SEALED_FACTS_FIELD,
    sealed_facts_of,
)
from healthledger.domain.audited import Audited
from healthledger.domain.connections.connection import Connection as ProviderConnection
from healthledger.domain.connections.credential_links import CredentialSignIn
from healthledger.domain.connections.link_tokens import LinkToken
from healthledger.domain.connections.notice_intake import MAKER_ACTOR, NoticeReceipt
from healthledger.domain.connections.oauth_flows import OAuthFlow
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.context import CommandContext
from healthledger.domain.labs.orders import Order, OrderedTest
from healthledger.domain.personal_data import ERASED_PLACEHOLDER
from healthledger.domain.redaction import REMOVED, SEALED
from healthledger.domain.users.user import ClientUserIdClaim, User
from healthledger.domain.webhooks.deliveries import WebhookDelivery, lifecycle_type_of
from sqlalchemy import Connection, Table, delete, select, update

log = logging.getLogger(__name__)

# Who redacts: the service itself, at its start.
ACTOR = "system:redaction"
# Records per redaction (one transaction and one redaction record each).
BATCH = 200
# Attempts at a batch that another process's redaction raced.
ATTEMPTS = 5
# A user's sealer: seals a JSON value with the user's data key; None when the user has
# no key (erased). Never makes a key.
Sealer = Callable[[UUID], Callable[[Any], str] | None]
# A team's keyed digest of a client_user_id (ADR 0017, hex), recording the secret of a
# team created before digests; None for a deleted team (its secret went with its key).
Digest = Callable[[UUID, str], str | None]


@dataclass(frozen=True)
class RedactionKeys:
    """What the builders seal and digest with."""

    sealer: Sealer
    digest: Digest
    # A user's team, as its Created record names it (an erased user's too).
    team_of: Callable[[UUID], UUID]


@dataclass(frozen=True)
class Successor:
    """A record's redacted form, and what the read models get with it."""

    replacement: Replacement
    reason: str
    # Run in the redaction's transaction: the read models' sealed values (None: none).
    read_models: Callable[[Connection], None] | None = None


def order_successor(
    mapper: Mapper[UUID],
    record: StoredEvent,
    position: int,
    keys: RedactionKeys,
    owner: UUID | None,
) -> Successor:
    """An order's Created v1 as its v2: the test sealed (or the placeholder)."""
    old = mapper.to_domain_event(record)
    assert isinstance(old, Order.CreatedV1)
    seal = keys.sealer(old.user_id)
    test = OrderedTest(old.lab_test_id, old.lab_test_name, tuple(old.marker_ids))
    sealed = ERASED_PLACEHOLDER if seal is None else seal(test.sealable())
    # eventsourcing's events are dataclasses its metaclass makes: their fields, which the
    # type checker cannot see, are the constructor's.
    successor: Callable[..., Order.Created] = Order.Created
    new = successor(
        originator_id=old.originator_id,
        originator_version=old.originator_version,
        timestamp=old.timestamp,
        originator_topic=old.originator_topic,
        actor=old.actor,
        request_id=old.request_id,
        user_id=old.user_id,
        team_id=old.team_id,
        environment=old.environment,
        lab_id=old.lab_id,
        collection_method=old.collection_method,
        sealed_lab_test=sealed,
        sealed_patient_details=old.sealed_patient_details,
        sealed_patient_address=old.sealed_patient_address,
        sealed_request_digest=old.sealed_request_digest,
        status=old.status,
        next_step_at=old.next_step_at,
        activate_by=None,
        priority=False,
        sealed_icd_codes=None,
        sealed_passthrough=None,
    )
    stored = mapper.to_stored_event(new)

    def orders_row(conn: Connection) -> None:
        # The user erased: its row is gone, nothing to give.
        if seal is not None:
            conn.execute(
                update(orders)
                .where(orders.c.order_id == old.originator_id)
                .values(sealed_lab_test=sealed)
            )

    return Successor(
        Replacement(position, record.topic, record.state, stored.topic, stored.state),
        REMOVED if seal is None else SEALED,
        orders_row,
    )


def sealed_facts_successor(
    mapper: Mapper[UUID],
    record: StoredEvent,
    position: int,
    keys: RedactionKeys,
    owner: UUID | None,
) -> Successor:
    """An old version as the version that replaced it, its fields otherwise the same and
    the facts that version declares sealed with the owner's key by the mapper (ADR 0032),
    or the placeholder for an owner erased already. A reconnection, a pull's schedule or
    success and a sync of version 1 name no user: the stream's owner is given."""
    old = mapper.to_domain_event(record)
    assert isinstance(old, Audited.Event)
    successor = resolve_topic(type(old).SUPERSEDED_BY or "")
    state = dict(vars(old))
    # An old version that sealed some facts already (a notice's receipt of version 2):
    # its facts were opened above (the placeholder once the key is gone), and the
    # successor's mapper seals them again with the rest.
    state.pop(SEALED_FACTS_FIELD, None)
    if "user_id" not in state:
        # A reconnection (or a feed's pull or sync) of version 1 names no user: the
        # stream's owner.
        assert owner is not None, f"no owner of {record.originator_id}"
        state["user_id"] = owner
    # None: an event about no user (a team-level delivery), nothing personal to seal.
    user_id = state["user_id"]
    added = ADDED_FIELDS.get(successor)
    if added is not None:
        state.update(added(state))
    if str(state.get("actor", "")).startswith(f"{MAKER_ACTOR}:"):
        # A maker's notice named the maker in its actor too ("maker:oura"): the maker is
        # sealed with the rest, the actor says a maker (ADR 0032).
        state["actor"] = MAKER_ACTOR
    # The successor's fields are the old version's, and the user's id (a reconnection).
    new = successor(**state)
    stored = mapper.to_stored_event(new)
    # The read model's row takes the record's own sealed facts (the mapper left them on
    # the event), as the projection does for a new one: a rebuild makes the same row.
    row = FACTS_ROW.get(successor)
    sealed = sealed_facts_of(new)

    def facts_row(conn: Connection) -> None:
        if row is not None:
            table, key, column = row
            conn.execute(
                update(table).where(table.c[key] == old.originator_id).values({column: sealed})
            )

    return Successor(
        Replacement(position, record.topic, record.state, stored.topic, stored.state),
        REMOVED if user_id is not None and keys.sealer(user_id) is None else SEALED,
        facts_row,
    )


# Where each sealed version's facts go in the read models: (table, key, column); a
# notice's receipt has no row that holds them.
FACTS_ROW: dict[type, tuple[Table, str, str]] = {
    ProviderConnection.Created: (connections, "connection_id", "sealed_facts"),
    ProviderConnection.Reconnected: (connections, "connection_id", "sealed_availability"),
    ResourceFeed.Created: (resource_feeds, "feed_id", "sealed_facts"),
    # In the log's order: the last pull's window is the row's.
    ResourceFeed.PullScheduled: (resource_feeds, "feed_id", "sealed_window"),
    WebhookDelivery.Created: (webhook_deliveries, "delivery_id", "sealed_facts"),
    LinkToken.Issued: (link_tokens, "token_id", "sealed_facts"),
    LinkToken.Consumed: (link_tokens, "token_id", "sealed_consumption"),
}

# The fields a successor adds, from the old version's: a delivery's type in clear when
# it says nothing of a person's health (`lifecycle_type`; the read model's column was
# filled by revision 0028 already); a sync's count of created days.
ADDED_FIELDS: dict[type, Callable[[dict[str, Any]], dict[str, Any]]] = {
    WebhookDelivery.Created: lambda old: {
        "lifecycle_type": lifecycle_type_of(old["event_type"], old["user_id"])
    },
    # A sync's count of the days it created, in clear (the days themselves sealed).
    ResourceFeed.DailySynced: lambda old: {"days_created": len(old["created_days"])},
}


def _time_zone_row(user_id: UUID, sealed: str | None) -> Callable[[Connection], None]:
    """In the redaction's transaction: the users row's time zone, the log's own sealed
    value (a rebuild makes the same row)."""

    def row(conn: Connection) -> None:
        conn.execute(
            update(users).where(users.c.user_id == user_id).values(sealed_fallback_time_zone=sealed)
        )

    return row


def _client_user_id_row(user_id: UUID, version: int, sealed: str) -> Callable[[Connection], None]:
    """In the redaction's transaction: the users row's client_user_id, the log's own sealed
    value (a rebuild makes the same row; the row's own, sealed by a projection or revision
    0015's conversion, is the same value under another nonce), unless a later change of
    the user's client_user_id gave the row its value. The digest stays: the same value."""

    def row(conn: Connection) -> None:
        c = stored_events.c
        later = conn.execute(
            select(c.originator_version)
            .where(
                c.originator_id == user_id,
                c.topic == User.ClientUserIdChanged.TOPIC,
                c.originator_version > version,
            )
            .limit(1)
        ).first()
        if later is None:
            conn.execute(
                update(users).where(users.c.user_id == user_id).values(sealed_client_user_id=sealed)
            )

    return row


def _in_turn(*steps: Callable[[Connection], None]) -> Callable[[Connection], None] | None:
    """The steps run one after the other in the redaction's transaction (None: none)."""
    if not steps:
        return None

    def run(conn: Connection) -> None:
        for step in steps:
            step(conn)

    return run


def user_created_sealed(
    mapper: Mapper[UUID],
    record: StoredEvent,
    position: int,
    keys: RedactionKeys,
    owner: UUID | None,
) -> Successor | None:
    """A user's Created of before version 4 holding personal values in clear, as version
    4: its time zone, and (before version 3) its client_user_id, sealed with the user's
    key, or the placeholder for a user erased already (None: nothing in clear, already
    redacted or never set). The claim of its time, derived from the clear client_user_id
    when read (`upcast_v2_v3`), is kept as the record's `claim_id`. A record is redacted
    once: both values go in the same redaction (ADR 0052). The users row gets the log's
    sealed values (`_time_zone_row`, `_client_user_id_row`: ADR 0054)."""
    old = mapper.to_domain_event(record)
    assert isinstance(old, User.Created)
    zone, client_user_id = old.fallback_time_zone, old.client_user_id
    if zone is None and client_user_id is None:
        return None
    seal = keys.sealer(old.originator_id)

    def sealed(value: str) -> str:
        return ERASED_PLACEHOLDER if seal is None else seal(value)

    state = dict(vars(old))
    if zone is not None:
        state.update(fallback_time_zone=None, sealed_fallback_time_zone=sealed(zone))
    if client_user_id is not None:
        state.update(client_user_id=None, sealed_client_user_id=sealed(client_user_id))
    stored = mapper.to_stored_event(User.Created(**state))
    rows = []
    # The user erased: its row is gone, nothing to give.
    if seal is not None and zone is not None:
        rows.append(_time_zone_row(old.originator_id, state["sealed_fallback_time_zone"]))
    if seal is not None and client_user_id is not None:
        user_id, version = old.originator_id, old.originator_version
        rows.append(_client_user_id_row(user_id, version, state["sealed_client_user_id"]))
    return Successor(
        Replacement(position, record.topic, record.state, stored.topic, stored.state),
        REMOVED if seal is None else SEALED,
        _in_turn(*rows),
    )


def user_settings_sealed(
    mapper: Mapper[UUID],
    record: StoredEvent,
    position: int,
    keys: RedactionKeys,
    owner: UUID | None,
) -> Successor | None:
    """A user's change of settings naming `fallback_time_zone` (in clear, or None: the
    zone removed), its changes naming `sealed_fallback_time_zone` instead; None for one
    that names no zone in clear. A removal is rewritten too, so that the users row takes
    every change of the zone in the log's order."""
    old = mapper.to_domain_event(record)
    assert isinstance(old, User.SettingsChanged)
    if "fallback_time_zone" not in old.changes:
        return None
    seal = keys.sealer(old.originator_id)
    changes = {
        ("sealed_fallback_time_zone" if key == "fallback_time_zone" else key): value
        for key, value in old.changes.items()
    }
    zone = old.changes["fallback_time_zone"]
    sealed = None
    if zone is not None:
        sealed = ERASED_PLACEHOLDER if seal is None else seal(zone)
    changes["sealed_fallback_time_zone"] = sealed
    stored = mapper.to_stored_event(User.SettingsChanged(**{**vars(old), "changes": changes}))
    return Successor(
        Replacement(position, record.topic, record.state, stored.topic, stored.state),
        REMOVED if seal is None else SEALED,
        None if seal is None else _time_zone_row(old.originator_id, sealed),
    )


def client_user_id_change_sealed(
    mapper: Mapper[UUID],
    record: StoredEvent,
    position: int,
    keys: RedactionKeys,
    owner: UUID | None,
) -> Successor | None:
    """A user's change of client_user_id of version 1 (its old and new values in clear),
    as version 2: the new value sealed with the user's key, or the placeholder for a user
    erased already, the old one gone (a version 2 change holds none: the user's earlier
    record holds it), and the claim of its time (derived from the team and the clear value
    when read) kept as `new_claim_id`. None for a version 2 change (nothing in clear). The
    users row gets the log's sealed value, unless a later change gave it its own (ADR
    0054)."""
    old = mapper.to_domain_event(record)
    assert isinstance(old, User.ClientUserIdChanged)
    value = old.new_client_user_id
    if value is None and old.old_client_user_id is None:
        return None
    assert value is not None, "a version 1 change holds its new value in clear"
    seal = keys.sealer(old.originator_id)
    sealed = ERASED_PLACEHOLDER if seal is None else seal(value)
    state = {
        **vars(old),
        "old_client_user_id": None,
        "new_client_user_id": None,
        "sealed_new_client_user_id": sealed,
        "new_claim_id": ClientUserIdClaim.id_for(keys.team_of(old.originator_id), value),
    }
    stored = mapper.to_stored_event(User.ClientUserIdChanged(**state))
    return Successor(
        Replacement(position, record.topic, record.state, stored.topic, stored.state),
        REMOVED if seal is None else SEALED,
        # The user erased: its row is gone, nothing to give.
        None
        if seal is None
        else _client_user_id_row(old.originator_id, old.originator_version, sealed),
    )


def claim_created_digested(
    mapper: Mapper[UUID],
    record: StoredEvent,
    position: int,
    keys: RedactionKeys,
    owner: UUID | None,
) -> Successor | None:
    """A claim's Created of version 1 (the client_user_id in clear), as version 2: the value
    named by the team's keyed digest, as a claim made since names it (its holder, erased or
    not, keeps it: ADR 0017), or by nothing in a deleted team, whose secret is gone (reason
    `removed`). None for a version 2 claim. Its stream id, derived from the team and the
    clear value, cannot change (a record's key): the claim is still found by it
    (`ClientUserIds.locate`), and a guess of the value can be checked against it (ADR
    0054)."""
    old = mapper.to_domain_event(record)
    assert isinstance(old, ClientUserIdClaim.Created)
    if old.client_user_id is None:
        return None
    digest = keys.digest(old.team_id, old.client_user_id)
    state = {**vars(old), "client_user_id": None, "digest": digest}
    stored = mapper.to_stored_event(ClientUserIdClaim.Created(**state))
    return Successor(
        Replacement(position, record.topic, record.state, stored.topic, stored.state),
        REMOVED if digest is None else SEALED,
    )


# Per old version's topic (each declares `SUPERSEDED_BY`): what builds its successor.
SUCCESSORS = {
    Order.CreatedV1.TOPIC: order_successor,
    ProviderConnection.CreatedV1.TOPIC: sealed_facts_successor,
    ProviderConnection.ReconnectedV1.TOPIC: sealed_facts_successor,
    ResourceFeed.CreatedV1.TOPIC: sealed_facts_successor,
    ResourceFeed.PullScheduledV1.TOPIC: sealed_facts_successor,
    ResourceFeed.PullSucceededV1.TOPIC: sealed_facts_successor,
    ResourceFeed.DailySyncedV1.TOPIC: sealed_facts_successor,
    NoticeReceipt.ReceivedV1.TOPIC: sealed_facts_successor,
    NoticeReceipt.ReceivedV2.TOPIC: sealed_facts_successor,
    WebhookDelivery.CreatedV1.TOPIC: sealed_facts_successor,
    LinkToken.IssuedV1.TOPIC: sealed_facts_successor,
    LinkToken.IssuedV2.TOPIC: sealed_facts_successor,
    LinkToken.ConsumedV1.TOPIC: sealed_facts_successor,
    OAuthFlow.StartedV1.TOPIC: sealed_facts_successor,
    CredentialSignIn.ChallengedV1.TOPIC: sealed_facts_successor,
    ProviderConnection.DemoFailuresConfiguredV1.TOPIC: sealed_facts_successor,
}

# Per topic whose current class seals what its older payloads held in clear (the same
# topic: a later class version, or a new key of a mapping): what builds the sealed form,
# or None for a record that holds nothing in clear (one already redacted, by another
# process meanwhile too).
SEALED_IN_PLACE: dict[str, Callable[..., Successor | None]] = {
    User.Created.TOPIC: user_created_sealed,
    User.SettingsChanged.TOPIC: user_settings_sealed,
    User.ClientUserIdChanged.TOPIC: client_user_id_change_sealed,
    ClientUserIdClaim.Created.TOPIC: claim_created_digested,
}


def redact_old_versions(
    db: Database, redactor: Redactor, mapper: Mapper[UUID], keys: RedactionKeys, batch: int = BATCH
) -> int:
    """Redact every record `pending_redactions` lists; the number redacted. On an
    up-to-date database, one query that finds none."""
    ctx = CommandContext.system(ACTOR)
    redacted = 0
    raced = 0
    while True:
        with db.read() as conn:
            positions = list(
                conn.execute(
                    select(pending_redactions.c.position)
                    .order_by(pending_redactions.c.position)
                    .limit(batch)
                ).scalars()
            )
            if not positions:
                break
            c = stored_events.c
            rows = conn.execute(
                select(
                    c.chain_position, c.originator_id, c.originator_version, c.topic, c.state
                ).where(c.chain_position.in_(positions))
            ).all()
            owners = _owners(conn, [row.originator_id for row in rows])
        successors: list[Successor] = []
        # In the log's order: a later reconnection's availability is the row's.
        for position, originator_id, version, topic, state in sorted(rows, key=lambda r: r[0]):
            build = SUCCESSORS.get(topic) or SEALED_IN_PLACE.get(topic)
            if build is None:
                continue  # redacted meanwhile by another process (or not an old version)
            record = StoredEvent(originator_id, version, topic, bytes(state))
            owner = owners.get(originator_id)
            successor = build(mapper, record, int(position), keys, owner)
            if successor is not None:
                successors.append(successor)
        try:
            for reason in (SEALED, REMOVED):
                chosen = [s for s in successors if s.reason == reason]
                if chosen:
                    redactor.redact(
                        ctx, reason, [s.replacement for s in chosen], also=_done(chosen)
                    )
                    redacted += len(chosen)
        except RedactionRaced:
            raced += 1
            if raced >= ATTEMPTS:
                raise
            continue
        # Rows whose record needed no redaction (done by another process): no longer due.
        left = set(positions) - {s.replacement.position for s in successors}
        if left:
            with db.write() as conn:
                conn.execute(
                    delete(pending_redactions).where(pending_redactions.c.position.in_(left))
                )
    if redacted:
        log.info("redacted %d record(s) of old event versions into their sealed form", redacted)
    return redacted


def _done(chosen: list[Successor]) -> Callable[[Connection], None]:
    """In the redaction's transaction: the records no longer pending, the read models'
    sealed values given."""

    def also(conn: Connection) -> None:
        conn.execute(
            delete(pending_redactions).where(
                pending_redactions.c.position.in_([s.replacement.position for s in chosen])
            )
        )
        for successor in chosen:
            if successor.read_models is not None:
                successor.read_models(conn)

    return also


def _owners(conn: Connection, stream_ids: list[UUID]) -> dict[UUID, UUID]:
    """The user owning each of these streams (stream_owners keeps them after the
    erasure); a stream handed over (a claim) keeps its first owner here, and a claim's
    redaction asks for none (its Created names its first holder)."""
    owned = stream_owners.c
    found = conn.execute(
        select(owned.originator_id, owned.user_id)
        .where(owned.originator_id.in_(stream_ids))
        .order_by(owned.first_seen_at.desc())
    )
    return {UUID(str(stream)): UUID(str(user)) for stream, user in found}


def leave_no_redacted_values(db: Database) -> None:
    """After redacting: no page this database reaches keeps the replaced payloads (nor
    the orders', connections', feeds', deliveries', users' and link tokens' rows' dropped
    clear columns, nor the snapshots that revisions 0042 and 0046 deleted): `Database.rewrite`
    of their tables."""
    tables = (stored_events, orders, connections, resource_feeds, webhook_deliveries, users)
    db.rewrite(*(t.name for t in (*tables, link_tokens, snapshots)))
