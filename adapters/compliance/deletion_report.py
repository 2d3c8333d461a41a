"""The deletion report of one user: what was asked, what was destroyed, what is checked
again now, and the proof that the events it rests on are the log's own.

It answers an auditor's questions about a deletion for a user in any state (live,
pending erasure, erased). Three parts:

- the request: each deletion (when, by which key or actor, under which request id, its
  grace period), each undo and each refused undo, the connections deregistered, orders;
- the erasure: when and by which job, what its event says it destroyed (`removed`, and
  `checked`: the rows found and deleted per place, counted in the erasure's
  transaction), the same places looked at again now (`ErasurePlaces`), the erasure horizon (the
  first master key rotation after it), and the `user.erased` webhook deliveries;
- the proof: every event of the user and of its related streams with its place in the
  hash chain, the signed head that covers them, the service's public key.

The report is signed with the service's Ed25519 key: a detached signature over the
canonical JSON of the report without its `signature` field, which
`report_verification.py` (and the script in docs/compliance-verify.md) checks offline.

No personal value is ever in it: ids, times, event names, counts, hashes. The
client_user_id shows only as the team's keyed digest of it, which a team holding the
value can check.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from healthledger.adapters.persistence.keys.key_store import canonical_json
from healthledger.adapters.persistence.projections.erasure import ErasurePlaces
from healthledger.adapters.persistence.projections.stream_owners import WEBHOOK_DELIVERY
from healthledger.adapters.persistence.queries.audit import AuditQueries, OwnedEvent
from healthledger.domain.connections.connection import Connection
from healthledger.domain.context import CommandContext, attributed
from healthledger.domain.errors import UserNotFound
from healthledger.domain.labs.orders import BY_USER_DELETION as ORDER_BY_USER_DELETION
from healthledger.domain.labs.orders import Order
from healthledger.domain.users.lifecycle import ERASURE_REMOVES, QUEUED_DELIVERIES
from healthledger.domain.users.user import ERASED, User
from healthledger.domain.webhooks.announcements import USER_ERASED
from healthledger.domain.webhooks.deliveries import PENDING, SUCCEEDED

if TYPE_CHECKING:
    from healthledger.adapters.composition import Service

REPORT_KIND = "healthledger.deletion_report"
REPORT_FORMAT = 1
SIGNATURE_FIELD = "signature"
SIGNATURE_ALGORITHM = "Ed25519"
# What each check of an erased user looks at, by the erasure's own names for the places
# it empties (lifecycle.ERASURE_REMOVES).
LOOKED_AT = {
    "user_data_key": "the user's data key: without it no sealed copy of its data opens",
    "snapshots": "snapshots of the user",
    "read_model:users": "the user's row",
    "read_model:pending_erasures": "a pending erasure of the user",
    "read_model:connections": "the user's provider connections",
    "read_model:resource_feeds": "the user's pull states",
    "read_model:link_tokens": "link tokens issued for the user",
    "read_model:orders": "the user's lab test orders (requisition data, results)",
    "health_data": "rows of pulled health data",
    "provider_tokens": "the maker's tokens of the user's OAuth connections",
    QUEUED_DELIVERIES: f"webhook deliveries about the user still queued ({USER_ERASED} aside)",
}
# Events of the user's streams read per query.
_BATCH = 1000
# The events the request's and the erasure's facts come from, by topic.
_USER_FACTS = frozenset(
    event.TOPIC
    for event in (
        User.Created,
        User.Deleted,
        User.DeletionUndone,
        User.DeletionUndoRefused,
        User.Erased,
    )
)
_CONNECTION_FACTS = frozenset({Connection.Created.TOPIC, Connection.Deregistered.TOPIC})
_ORDER_FACTS = frozenset({Order.Cancelled.TOPIC})

ORDERS_NOTE = (
    "The user's open lab test orders, cancelled by its deletion in the deletion's own "
    "transaction (reason user_deleted); an undo restores none. Orders completed, failed or "
    "cancelled before it stay as they were. Each names its event in the proof."
)
HORIZON_MEANING = (
    "Until the first master key rotation after the erasure, a copy of the user's wrapped "
    "data key left in a database WAL, replica or backup could still be opened with the "
    "master key of the time; the rotation destroys that master key, and after it no copy "
    "anywhere can be opened."
)
PROOF_SCOPE = (
    "Each event's hash covers its stream, version, topic, time and the SHA-256 of its "
    "stored bytes (sealed values as ciphertext), and the hash of the record before it in "
    "the log. The report checks offline: each hash recomputes from its fields, events at "
    "consecutive positions link up, each stream's versions run without a gap, and the "
    "signed head is the service's. That the head's chain runs through these events is "
    "checked with the log itself (`healthledger verify`), since the records between them "
    "belong to other users."
)


def instant(value: datetime) -> str:
    """An instant as the report writes it: ISO 8601, UTC, to the microsecond (the
    resolution the chain hashes)."""
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def deletion_report(
    service: Service, user_id: UUID, ctx: CommandContext, *, team_id: UUID | None = None
) -> dict[str, Any]:
    """The signed report of `user_id`; with `team_id`, only of a user of that team (the
    team API): another team's user, like an unknown one, is UserNotFound."""
    queries = AuditQueries(service.db)
    owner = queries.user_team(user_id)
    if owner is None or (team_id is not None and owner != team_id):
        raise UserNotFound()
    owned = _owned_events(queries, user_id)
    kinds: dict[UUID, str] = {}
    for row in owned:
        stream = row.stored.originator_id
        assert isinstance(stream, UUID), "the recorder reads stream ids as UUIDs"
        kinds[stream] = row.kind
    # The user as of its last event read here, so that every section tells of the same
    # moment even if the user changes meanwhile.
    last = max(r.stored.originator_version for r in owned if r.stored.originator_id == user_id)
    user = service.ledger.find(user_id, version=last)
    assert isinstance(user, User)
    links = sorted(service.chain.links(list(kinds)), key=lambda link: link.position)
    # Only the events the request's facts come from are decoded (a long-lived user's
    # settings changes, its pulls and deliveries are not).
    to_event = service.ledger.mapper.to_domain_event
    events = [attributed(to_event(r.stored)) for r in owned if r.stored.topic in _USER_FACTS]
    connection_events = [
        attributed(to_event(r.stored)) for r in owned if r.stored.topic in _CONNECTION_FACTS
    ]
    order_events = [attributed(to_event(r.stored)) for r in owned if r.stored.topic in _ORDER_FACTS]
    report: dict[str, Any] = {
        "kind": REPORT_KIND,
        "format": REPORT_FORMAT,
        "generated_at": instant(service.clock()),
        "generated_by": {"actor": ctx.actor, "request_id": ctx.request_id},
        "user": _user_section(service, user, events),
        "request": _request_section(events, connection_events, order_events),
        "erasure": (
            _erasure_section(
                service, user, events, [i for i, kind in kinds.items() if kind == WEBHOOK_DELIVERY]
            )
            if user.status == ERASED
            else None
        ),
        "proof": _proof_section(service, links, kinds),
    }
    return sign_report(service, report)


def sign_report(service: Service, report: dict[str, Any]) -> dict[str, Any]:
    """The report with its detached signature (over everything but the signature)."""
    unsigned = {k: v for k, v in report.items() if k != SIGNATURE_FIELD}
    signature = service.chain.sign(canonical_json(unsigned))
    return {
        **unsigned,
        SIGNATURE_FIELD: {
            "algorithm": SIGNATURE_ALGORITHM,
            "public_key": service.chain.public_key().hex(),
            "value": signature.hex(),
        },
    }


# -- the sections ------------------------------------------------------------------------


def _by(event: Any) -> dict[str, str]:
    return {"actor": event.actor, "request_id": event.request_id}


def _user_section(service: Service, user: User, events: Sequence[Any]) -> dict[str, Any]:
    created = events[0]
    return {
        "user_id": str(user.id),
        "team_id": str(user.team_id),
        "status": user.status,
        "created_at": instant(created.timestamp),
        "created_by": _by(created),
        # The team's keyed digest (HMAC-SHA256 under the team's secret): a team holding
        # the value can check it, nobody else can tell it. None once a team deleted
        # before digests took its secret with it.
        "client_user_id_digest": {
            "algorithm": "HMAC-SHA256",
            "key": "the team's client_user_id secret",
            "value": service.client_user_id_digest_of(user),
        },
    }


def _owned_events(queries: AuditQueries, user_id: UUID) -> list[OwnedEvent]:
    """Every stored event of the streams the user owns (its own, its claim's, its
    connections', pulls', link tokens' and webhook deliveries'), in time order."""
    found: list[OwnedEvent] = []
    after = None
    while True:
        rows = queries.owned_events(user_id, after=after, limit=_BATCH)
        found += rows
        if len(rows) < _BATCH:
            return found
        after = rows[-1].position


def _request_section(
    events: Sequence[Any], connection_events: Sequence[Any], order_events: Sequence[Any] = ()
) -> dict[str, Any]:
    deletions: list[dict[str, Any]] = []
    undos: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    for event in events:
        if isinstance(event, User.Deleted):
            deletions.append(
                {
                    "requested_at": instant(event.timestamp),
                    **_by(event),
                    "grace_period_seconds": int(
                        (event.erasure_due_at - event.timestamp).total_seconds()
                    ),
                    "grace_period_ends_at": instant(event.erasure_due_at),
                    "outcome": "pending",
                }
            )
        elif isinstance(event, User.DeletionUndone):
            undos.append({"at": instant(event.timestamp), **_by(event)})
            deletions[-1]["outcome"] = "undone"
        elif isinstance(event, User.DeletionUndoRefused):
            refused.append({"at": instant(event.timestamp), **_by(event), "reason": event.reason})
        elif isinstance(event, User.Erased):
            deletions[-1]["outcome"] = "erased"
    return {
        "deletions": deletions,
        "undos": undos,
        "refused_undos": refused,
        "connections_deregistered": _deregistrations(connection_events),
        "orders": {
            "supported": True,
            "cancelled": _orders_cancelled(order_events),
            "note": ORDERS_NOTE,
        },
    }


def _orders_cancelled(events: Sequence[Any]) -> list[dict[str, Any]]:
    """Each of the user's orders a deletion cancelled: the order, the event that did (its
    version, so that a verifier finds it in the proof), when and by whom."""
    return [
        {
            "order_id": str(event.originator_id),
            "version": event.originator_version,
            "at": instant(event.timestamp),
            "reason": event.reason,
            **_by(event),
        }
        for event in events
        if isinstance(event, Order.Cancelled) and event.reason == ORDER_BY_USER_DELETION
    ]


def _deregistrations(events: Sequence[Any]) -> list[dict[str, Any]]:
    """Each deregistration of one of the user's connections (events in time order)."""
    providers: dict[UUID, str] = {}
    found: list[dict[str, Any]] = []
    for event in events:
        if isinstance(event, Connection.Created):
            providers[event.originator_id] = event.provider
        elif isinstance(event, Connection.Deregistered):
            found.append(
                {
                    "connection_id": str(event.originator_id),
                    "provider": providers.get(event.originator_id),
                    "at": instant(event.timestamp),
                    "reason": event.reason,
                    **_by(event),
                }
            )
    return found


def _erasure_section(
    service: Service, user: User, events: Sequence[Any], delivery_ids: Sequence[UUID]
) -> dict[str, Any]:
    erased = next(e for e in reversed(events) if isinstance(e, User.Erased))
    deliveries = service.webhook_queries.deliveries(delivery_ids)
    return {
        "erased_at": instant(erased.timestamp),
        **_by(erased),
        "removed": list(erased.removed),
        # Empty for an erasure recorded before erasures counted what they found.
        "checked_at_erasure": dict(erased.checked),
        "checks_now": _checks_now(service, user.id, deliveries),
        "horizon": _horizon(service, erased.timestamp),
        "webhooks": _webhooks(deliveries),
    }


def _checks_now(service: Service, user_id: UUID, deliveries: Sequence[Any]) -> list[dict[str, Any]]:
    """Every place an erasure empties, looked at again: the rows found (0 expected). The
    `user.erased` deliveries are left out of the queued ones: they are the message that
    tells a mirror, sent after the erasure."""
    found = ErasurePlaces(service.db).inventory(user_id)
    found[QUEUED_DELIVERIES] = sum(
        1 for row in deliveries if row.status == PENDING and row.event_type != USER_ERASED
    )
    return [
        {
            "check": place,
            "looked_at": LOOKED_AT[place],
            "found": found[place],
            "expected": 0,
            "passed": found[place] == 0,
        }
        for place in ERASURE_REMOVES
    ]


def _webhooks(deliveries: Sequence[Any]) -> dict[str, Any]:
    """The user's deliveries by status, and each `user.erased` delivery (the message that
    tells a team's mirror to forget the user) with its outcome."""
    by_status: dict[str, int] = {}
    for row in deliveries:
        by_status[row.status] = by_status.get(row.status, 0) + 1
    erased = [
        {
            "delivery_id": str(row.delivery_id),
            "endpoint_id": str(row.endpoint_id),
            "status": row.status,
            "attempts": row.attempts,
            "last_status_code": row.last_status_code,
            "succeeded_at": None if row.succeeded_at is None else instant(row.succeeded_at),
        }
        for row in deliveries
        if row.event_type == USER_ERASED
    ]
    return {
        "deliveries_by_status": dict(sorted(by_status.items())),
        "user_erased": erased,
        "mirror_told": any(d["status"] == SUCCEEDED for d in erased),
    }


def _horizon(service: Service, erased_at: datetime) -> dict[str, Any]:
    after = [r for r in service.key_store.rotations() if r.rotated_at > erased_at]
    first = min(after, key=lambda r: r.rotated_at) if after else None
    return {
        "passed": first is not None,
        "rotated_at": None if first is None else instant(first.rotated_at),
        "master_key_id": None if first is None else str(first.master_key_id),
        "keys_rewrapped": None if first is None else first.keys_rewrapped,
        "meaning": HORIZON_MEANING,
    }


def _proof_section(
    service: Service, links: Sequence[Any], kinds: dict[UUID, str]
) -> dict[str, Any]:
    chain = service.chain
    last = links[-1].position
    head = chain.covering_head(last) or chain.sign_head()
    return {
        "algorithm": "hl-chain-v1: SHA-256 links, Ed25519 signed heads",
        "public_key": chain.public_key().hex(),
        "events": [
            {
                "position": link.position,
                "stream": kinds[link.originator_id],
                "originator_id": str(link.originator_id),
                "version": link.version,
                "topic": link.topic,
                "timestamp": instant(link.timestamp),
                "state_digest": link.state_digest.hex(),
                "prev_hash": link.prev_hash.hex(),
                "hash": link.hash.hex(),
            }
            for link in links
        ],
        "signed_head": {
            "position": head.position,
            "chain_hash": head.chain_hash.hex(),
            "signed_at": instant(head.signed_at),
            "key_id": str(head.key_id),
            "public_key": head.public_key.hex(),
            "signature": head.signature.hex(),
        },
        "scope": PROOF_SCOPE,
    }
