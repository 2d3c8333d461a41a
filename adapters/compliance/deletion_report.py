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

Format 2 adds what the data was and where it went: `categories` (demographics,
identifiers, health data by resource, lab orders and results: what was held, and each
one's erasure checks) and `recipients` (every webhook endpoint that received data about
the user, GDPR art. 19); a deletion's reason and ticket reference; the horizon's
condition; and `webhooks.user_erased_acknowledged` in place of format 1's `mirror_told`
(it only ever meant that an endpoint answered 2xx to `user.erased`).

Nothing is signed over a log that does not verify: before the report is signed, the
chain is walked from the first record it cites to the signed head that covers the last
(`Chain.check_span`), every signed head there checked; a problem is `LogNotSound`,
naming the first bad record, and no head and no report is signed.

The report is signed with the service's Ed25519 key: a detached signature over the
canonical JSON of the report without its `signature` field, which
`report_verification.py` (and the script in docs/compliance-verify.md) checks offline.

No personal value is ever in it: ids, times, event names, counts, hashes. The
client_user_id shows only as the team's keyed digest of it, which a team holding the
value can check.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit
from uuid import UUID

from healthledger.adapters.persistence.engine.schema import health_data, webhook_endpoints
from healthledger.adapters.persistence.eventstore.chain import (
    REMOVED,
    ChainLink,
    ChainProblem,
    SignedHead,
)
from healthledger.adapters.persistence.health_data.places import Places
from healthledger.adapters.persistence.keys.key_store import canonical_json
from healthledger.adapters.persistence.projections.erasure import ErasurePlaces
from healthledger.adapters.persistence.projections.stream_owners import WEBHOOK_DELIVERY
from healthledger.adapters.persistence.queries.audit import AuditQueries, OwnedEvent
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.link_tokens import LinkToken
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.context import CommandContext, attributed
from healthledger.domain.errors import UserNotFound
from healthledger.domain.labs.orders import BY_USER_DELETION as ORDER_BY_USER_DELETION
from healthledger.domain.labs.orders import Order
from healthledger.domain.personal_data import ERASED_PLACEHOLDER
from healthledger.domain.users.lifecycle import ERASURE_REMOVES, QUEUED_DELIVERIES
from healthledger.domain.users.user import ERASED, User
from healthledger.domain.webhooks.announcements import USER_ERASED
from healthledger.domain.webhooks.deliveries import PENDING, SUCCEEDED, WebhookDelivery
from healthledger.domain.webhooks.event_destinations import EventDestination
from healthledger.domain.webhooks.publish_rounds import PublishRound
from sqlalchemy import func, select

if TYPE_CHECKING:
    from healthledger.adapters.composition import Service

log = logging.getLogger("healthledger.compliance")

REPORT_KIND = "healthledger.deletion_report"
# Format 1: before categories, recipients, the deletion's reason, the horizon's condition
# and user_erased_acknowledged (which was mirror_told). verify-report reads both.
REPORT_FORMAT = 2
FORMATS = (1, 2)
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
    "session_index": "the index of the user's sleeps and workouts by their ids",
    "raw_payloads": "the makers' payloads as received, kept per pull",
    "provider_tokens": "the maker's tokens of the user's OAuth connections",
    "continuous_queries": "the team's continuous queries of the user and their latest "
    "results (sealed)",
    "continuous_query_tasks": "the runs of those queries",
    "lab_report_uploads": "lab reports uploaded to the parser and not parsed yet (sealed)",
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
_CONNECTION_FACTS = frozenset(
    {Connection.Created.TOPIC, Connection.Reconnected.TOPIC, Connection.Deregistered.TOPIC}
)
_ORDER_FACTS = frozenset({Order.Cancelled.TOPIC})
# Decoded for the categories and the recipients.
_DATA_FACTS = frozenset(
    event.TOPIC
    for event in (
        User.SettingsChanged,
        ResourceFeed.Created,
        ResourceFeed.PullSucceeded,
        ResourceFeed.DailySynced,
        WebhookDelivery.Created,
        WebhookDelivery.CreatedV1,
        WebhookDelivery.AttemptStarted,
        WebhookDelivery.AttemptWithdrawn,
        WebhookDelivery.AttemptMade,
        PublishRound.Started,
        PublishRound.Finished,
    )
)
_DECODED = _USER_FACTS | _CONNECTION_FACTS | _ORDER_FACTS | _DATA_FACTS

ORDERS_NOTE = (
    "The user's open lab test orders, cancelled by its deletion in the deletion's own "
    "transaction (reason user_deleted); an undo restores none. Orders completed, failed or "
    "cancelled before it stay as they were. Each names its event in the proof."
)
HORIZON_MEANING = (
    "Until the first master key rotation after the erasure, a copy of the user's wrapped "
    "data key left in a database WAL, replica or backup can be opened with the master key "
    "of the time. The rotation rewraps the live keys under a new master key and destroys "
    "the service's copy of the old one."
)
HORIZON_CONDITION = (
    "The horizon holds only if every older copy of the master key is destroyed too. The "
    "rotation destroys the service's own copy; copies outside it (earlier versions kept "
    "by a secrets manager, backups of the key file) must be purged by the operator, and "
    "the service cannot see them. Database backups made before the rotation still hold "
    "the user's wrapped data key: they are out of the service's reach, and open with an "
    "older master key only."
)
ACKNOWLEDGED_MEANS = (
    "An endpoint of the team answered 2xx to a user.erased delivery about this user: the "
    "message was received. What the receiver did with it (a mirror forgetting the user) "
    "is the team's to show."
)
REASON_NOTE = (
    "A deletion's reason is the caller's free text, sealed with the user's key (it may "
    "name the person): shown while the key exists, erased with it. Its ticket is a "
    "reference into the caller's own records, kept in clear."
)
CATEGORIES_NOTE = (
    "What the service held about the user, by category, as its log and tables record it, "
    "and for an erased user the checks of the places each category was held in (found "
    "0 expected). Personal values are sealed with the user's data key, so the data key's "
    "check covers every sealed copy, in the log and in backups (see the horizon)."
)
HEALTH_NAMES_ERASED = (
    "After the erasure no resource or provider is named: which resources a person's data "
    "came from is itself health data. Each is named by its pull stream, among the proof's "
    "events."
)
RECIPIENTS_NOTE = (
    "Every webhook endpoint that was sent data about the user (GDPR art. 19), from the "
    "deliveries' own histories: POSTs made, how many the endpoint acknowledged (2xx), the "
    "first and the last. An attempt recorded as started (before its POST) whose outcome "
    "was never recorded (its sender stopped) is counted as outcome unknown: the data was "
    "possibly sent, and the endpoint is listed as a possible recipient (possibly_received). "
    "An endpoint is named by its id and the origin of its URL (no path or query: they may "
    "hold a secret of the team's)."
)
EVENT_DESTINATIONS_NOTE = (
    "Every event destination (the team's RabbitMQ or NATS JetStream) that was sent data "
    "about the user, from the destination's publishing rounds that named the user: the "
    "user's messages they were to publish (deliveries), those of rounds that finished "
    "(publishes), how many the broker acknowledged, the first and the last; a round "
    "started with no recorded outcome counts its messages as outcome unknown (possibly "
    "received). A destination is named by its id, kind and broker (host and port; none "
    "once deleted). Webhooks and event destinations are the only ways data about a user "
    "leaves the service, besides the API's answers to the team."
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


class LogNotSound(Exception):
    """The chain does not verify over the records a report would cite: no report is
    made. `message` names the first bad record (its stream only when it is one of the
    user's: a record of another stream is named by its position); `record` is the same
    as data, for the API's 409."""

    def __init__(self, problem: ChainProblem, own_streams: Collection[UUID]) -> None:
        self.problem = problem
        own = problem.originator_id is not None and problem.originator_id in own_streams
        self.record: dict[str, Any] = {"position": problem.position, "problem": problem.kind}
        where = f"{problem.kind} at position {problem.position}"
        if own:
            self.record.update(
                stream_id=str(problem.originator_id), version=problem.originator_version
            )
            where += f" (stream {problem.originator_id}, version {problem.originator_version})"
        elif problem.originator_id is not None:
            where += " (a record of another stream)"
        self.message = (
            "no report was made: the event log does not verify over the records the report "
            f"would cite and the signed heads covering them. {where}: {problem.detail}. Run "
            "`healthledger verify` and restore the log before asking again."
        )
        super().__init__(self.message)


def deletion_report(
    service: Service, user_id: UUID, ctx: CommandContext, *, team_id: UUID | None = None
) -> dict[str, Any]:
    """The signed report of `user_id`; with `team_id`, only of a user of that team (the
    team API): another team's user, like an unknown one, is UserNotFound. LogNotSound,
    and nothing signed, when the chain over what it cites does not verify."""
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
    links = sorted(service.chain.links(list(kinds)), key=lambda link: link.position)
    # Before anything is read from the events or signed: the chain over every record the
    # report cites, up to the signed head that covers them.
    head = _sound_head(service, links, kinds)
    user = service.ledger.find(user_id, version=last)
    assert isinstance(user, User)
    # Only the events the report's facts come from are decoded (a long-lived user's
    # settings changes and pulls' steps are not).
    to_event = service.ledger.mapper.to_domain_event
    wanted = [r for r in owned if r.stored.topic in _DECODED]
    decoded = [attributed(to_event(r.stored)) for r in wanted]
    events = [e for e, r in zip(decoded, wanted, strict=True) if r.stored.topic in _USER_FACTS]
    topics = Counter(r.stored.topic for r in owned)
    erased = user.status == ERASED
    checks = (
        _checks_now(service, user.id, [i for i, kind in kinds.items() if kind == WEBHOOK_DELIVERY])
        if erased
        else None
    )
    report: dict[str, Any] = {
        "kind": REPORT_KIND,
        "format": REPORT_FORMAT,
        "generated_at": instant(service.clock()),
        "generated_by": {"actor": ctx.actor, "request_id": ctx.request_id},
        "user": _user_section(service, user, events),
        "request": _request_section(
            events, decoded, decoded, reason_of=_reason_opener(service, user.id), erased=erased
        ),
        "categories": _categories(service, user, decoded, topics, checks),
        "recipients": _recipients(service, user.id, decoded),
        "erasure": (
            _erasure_section(
                service,
                user,
                events,
                [i for i, kind in kinds.items() if kind == WEBHOOK_DELIVERY],
                checks or [],
            )
            if erased
            else None
        ),
        "proof": _proof_section(service, links, kinds, head),
    }
    return sign_report(service, report)


def _sound_head(service: Service, links: Sequence[ChainLink], kinds: dict[UUID, str]) -> SignedHead:
    """The signed head that covers the report's events, after checking the chain from
    the first of them to it (and every signed head in between); when no head covers them
    yet, the chain to its current head is checked and that head signed. LogNotSound, and
    nothing signed, on the first bad record."""
    chain = service.chain
    if not links:
        raise LogNotSound(
            ChainProblem(REMOVED, 1, "none of the user's events holds a place in the chain"),
            kinds,
        )
    first, last = links[0].position, links[-1].position
    covering = chain.covering_head(last)
    if covering is not None:
        end = covering.position
    else:
        with service.db.read() as conn:
            end, _ = chain.writer.head(conn)
        end = max(end, last)
    problem = chain.check_span(first, end)
    if problem is not None:
        log.warning(
            "deletion report refused: the chain does not verify (%s at position %s)",
            problem.kind,
            problem.position,
        )
        raise LogNotSound(problem, kinds)
    return covering if covering is not None else chain.sign_head(at=end)


def _reason_opener(service: Service, user_id: UUID) -> Callable[[str], str]:
    """A deletion's sealed reason, opened with the user's key, or the placeholder that
    says the key is gone."""

    def reason(sealed: str) -> str:
        opened = service.key_store.open(user_id, sealed)
        return ERASED_PLACEHOLDER if opened is None else str(opened)

    return reason


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
    events: Sequence[Any],
    connection_events: Sequence[Any],
    order_events: Sequence[Any] = (),
    *,
    reason_of: Callable[[str], str],
    erased: bool,
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
                    "reason": (
                        None if event.sealed_reason is None else reason_of(event.sealed_reason)
                    ),
                    "ticket": event.ticket,
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
        "reason_note": REASON_NOTE,
        "connections_deregistered": _deregistrations(connection_events, named=not erased),
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


def _deregistrations(events: Sequence[Any], *, named: bool = True) -> list[dict[str, Any]]:
    """Each deregistration of one of the user's connections (events in time order); the
    provider only while the user is not erased (it can say what the person lives with)."""
    providers: dict[UUID, str] = {}
    found: list[dict[str, Any]] = []
    for event in events:
        if isinstance(event, Connection.Created):
            providers[event.originator_id] = event.provider
        elif isinstance(event, Connection.Deregistered):
            found.append(
                {
                    "connection_id": str(event.originator_id),
                    "provider": providers.get(event.originator_id) if named else None,
                    "at": instant(event.timestamp),
                    "reason": event.reason,
                    **_by(event),
                }
            )
    return found


def _erasure_section(
    service: Service,
    user: User,
    events: Sequence[Any],
    delivery_ids: Sequence[UUID],
    checks: list[dict[str, Any]],
) -> dict[str, Any]:
    erased = next(e for e in reversed(events) if isinstance(e, User.Erased))
    deliveries = service.webhook_queries.deliveries(delivery_ids)
    return {
        "erased_at": instant(erased.timestamp),
        **_by(erased),
        "removed": list(erased.removed),
        # Empty for an erasure recorded before erasures counted what they found.
        "checked_at_erasure": dict(erased.checked),
        "checks_now": checks,
        "horizon": _horizon(service, erased.timestamp),
        "webhooks": _webhooks(deliveries),
    }


def _checks_now(
    service: Service, user_id: UUID, delivery_ids: Sequence[UUID]
) -> list[dict[str, Any]]:
    """Every place an erasure empties, looked at again: the rows found (0 expected). The
    `user.erased` deliveries are left out of the queued ones: they are the message that
    tells a mirror, sent after the erasure."""
    deliveries = service.webhook_queries.deliveries(delivery_ids)
    found = ErasurePlaces(service.db).inventory(user_id)
    found[QUEUED_DELIVERIES] = sum(
        1 for row in deliveries if row.status == PENDING and row.lifecycle_type != USER_ERASED
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
    tells a team's mirror to forget the user) with its outcome; whether an endpoint
    acknowledged one (format 1 called it `mirror_told`)."""
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
        if row.lifecycle_type == USER_ERASED
    ]
    return {
        "deliveries_by_status": dict(sorted(by_status.items())),
        "user_erased": erased,
        "user_erased_acknowledged": any(d["status"] == SUCCEEDED for d in erased),
        "user_erased_acknowledged_means": ACKNOWLEDGED_MEANS,
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
        "condition": HORIZON_CONDITION,
    }


def _proof_section(
    service: Service, links: Sequence[Any], kinds: dict[UUID, str], head: SignedHead
) -> dict[str, Any]:
    chain = service.chain
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


# -- what was held, and where it went (format 2) ---------------------------------------------


def _category(
    name: str,
    what: str,
    held: int | None,
    items: dict[str, int] | None,
    places: Sequence[str],
    checks: Sequence[dict[str, Any]] | None,
    counted: dict[str, int] | None,
) -> dict[str, Any]:
    """One category: what it is, how much was held (`items` by kind), where it was held
    (`places`, the erasure's names), and for an erased user what the erasure counted
    there and the checks run again now."""
    chosen = [c for c in checks or () if c["check"] in places]
    return {
        "category": name,
        "what": what,
        "held": held,
        "items": items,
        "places": list(places),
        "counted_at_erasure": (
            None if counted is None else {p: counted[p] for p in places if p in counted}
        ),
        "erasure_check": (
            None
            if checks is None
            else {
                "checks": [c["check"] for c in chosen],
                "found": sum(c["found"] for c in chosen),
                "passed": all(c["passed"] for c in chosen),
            }
        ),
    }


def _categories(
    service: Service,
    user: User,
    decoded: Sequence[Any],
    topics: Counter[str],
    checks: Sequence[dict[str, Any]] | None,
) -> dict[str, Any]:
    """The data categories held about the user, each with its count and, once the user
    is erased, its erasure checks (`checks`: the checks run now; None before erasure)."""
    erased = next((e for e in reversed(decoded) if isinstance(e, User.Erased)), None)
    counted = None if erased is None else dict(erased.checked)
    birth_dates = sum(
        1
        for e in decoded
        if (isinstance(e, User.Created) and e.sealed_birth_date is not None)
        or (isinstance(e, User.SettingsChanged) and e.changes.get("sealed_birth_date") is not None)
    )
    provider_ids = sum(
        1
        for e in decoded
        if isinstance(e, Connection.Created | Connection.Reconnected)
        and e.sealed_external_user_id is not None
    )
    identifiers = {
        "client_user_id": topics[User.Created.TOPIC] + topics[User.ClientUserIdChanged.TOPIC],
        "birth_date": birth_dates,
        "provider_user_ids": provider_ids,
        "link_tokens": topics[LinkToken.Issued.TOPIC],
    }
    health = _health_data(service, user.id, decoded, named=erased is None)
    rows_now = sum(r["rows_now"] for r in health)
    health_held = (
        rows_now if erased is None else (counted or {}).get("health_data")
    )  # None: an erasure recorded before erasures counted
    orders = {"orders": topics[Order.Created.TOPIC], "results": topics[Order.Completed.TOPIC]}
    categories = [
        _category(
            "demographics",
            "name, contact details, address, birth date, gender (spec 2.1): the versions "
            "recorded, sealed",
            topics[User.DemographicsRecorded.TOPIC],
            None,
            ("user_data_key", "read_model:users", "snapshots"),
            checks,
            counted,
        ),
        _category(
            "identifiers",
            "the client_user_id values, fallback birth dates and the providers' account ids "
            "(sealed), and the link tokens issued for the user",
            sum(identifiers.values()),
            identifiers,
            (
                "user_data_key",
                "read_model:users",
                "read_model:connections",
                "read_model:link_tokens",
                "provider_tokens",
            ),
            checks,
            counted,
        ),
        {
            **_category(
                "health_data",
                "the pulled health data: rows of one day of one resource, sealed",
                health_held,
                None,
                (
                    "health_data",
                    "session_index",
                    "raw_payloads",
                    "read_model:resource_feeds",
                    "continuous_queries",
                    "continuous_query_tasks",
                    "user_data_key",
                ),
                checks,
                counted,
            ),
            "by_resource": health,
            "by_resource_note": None if erased is None else HEALTH_NAMES_ERASED,
        },
        _category(
            "lab_orders_and_results",
            "lab test orders (the test ordered with its markers, the patient's details and "
            "address, sealed; orders recorded before the test was sealed were redacted into "
            "that form, the chain kept: ADR 0028) and their results and interpretation "
            "(sealed), and lab reports uploaded to the parser",
            orders["orders"],
            orders,
            ("read_model:orders", "lab_report_uploads", "user_data_key"),
            checks,
            counted,
        ),
    ]
    return {"note": CATEGORIES_NOTE, "held": categories}


def _health_data(
    service: Service, user_id: UUID, decoded: Sequence[Any], *, named: bool
) -> list[dict[str, Any]]:
    """Per resource pulled (one pull stream each): the days with data its pulls and
    syncs recorded in the log, and the rows of it found now. Provider and resource are
    named only while the user is not erased."""
    feeds: dict[UUID, dict[str, Any]] = {}
    for e in decoded:
        if isinstance(e, ResourceFeed.Created):
            feeds[e.originator_id] = {
                "provider": getattr(e, "provider", None),
                "resource": getattr(e, "resource", None),
                "pulled": 0,
                "synced": 0,
            }
        elif isinstance(e, ResourceFeed.PullSucceeded) and e.originator_id in feeds:
            feeds[e.originator_id]["pulled"] = e.days_with_data
        elif isinstance(e, ResourceFeed.DailySynced) and e.originator_id in feeds:
            # The days themselves are sealed (gone with the erasure): their count is not.
            feeds[e.originator_id]["synced"] += e.days_created
    h = health_data.c
    with service.db.read() as conn:
        rows = {
            (provider, resource): count
            # The days the current blocks hold (ADR 0033): a row is a month's block, its
            # provider and resource keyed digests under the user's key (ADR 0047).
            for provider, resource, count in conn.execute(
                select(h.provider, h.resource, func.sum(h.days))
                .where(h.user_id == user_id, h.replaced_at.is_(None))
                .group_by(h.provider, h.resource)
            )
        }
    # No key (erased): no row is left to count, nor a digest to find one by.
    digest = service.key_store.users_digest(user_id) if rows else None
    places = None if digest is None else Places(digest)

    def rows_now(provider: Any, resource: Any) -> int:
        if places is None or not isinstance(provider, str) or not isinstance(resource, str):
            return 0
        return rows.get((places.provider(provider), places.resource(resource)), 0)

    return [
        {
            "pull_id": str(feed_id),
            "provider": feed["provider"] if named else None,
            "resource": feed["resource"] if named else None,
            "days_with_data_recorded": feed["pulled"] + feed["synced"],
            "rows_now": rows_now(feed["provider"], feed["resource"]),
        }
        for feed_id, feed in feeds.items()
    ]


def _recipients(service: Service, user_id: UUID, decoded: Sequence[Any]) -> dict[str, Any]:
    """Every webhook endpoint sent data about the user, from the deliveries' histories:
    deliveries, POSTs made, acknowledged (2xx), first and last of each, and the attempts
    started whose outcome is unknown (possibly sent). Every event destination, from its
    rounds that were to publish about the user (ADR 0055), counted alike."""
    endpoint_of: dict[UUID, UUID] = {}
    found: dict[UUID, dict[str, Any]] = {}
    # Per delivery, its attempts started and not completed (nor withdrawn), with the time.
    open_attempts: dict[UUID, dict[int, str]] = {}
    for e in decoded:
        if isinstance(e, WebhookDelivery.Created | WebhookDelivery.CreatedV1):
            endpoint_of[e.originator_id] = e.endpoint_id
            entry = found.setdefault(e.endpoint_id, _new_recipient(e.endpoint_id))
            entry["deliveries"] += 1
        elif isinstance(e, WebhookDelivery.AttemptStarted) and e.originator_id in endpoint_of:
            open_attempts.setdefault(e.originator_id, {})[e.attempt] = instant(e.timestamp)
        elif isinstance(e, WebhookDelivery.AttemptWithdrawn):
            open_attempts.get(e.originator_id, {}).pop(e.attempt, None)
        elif isinstance(e, WebhookDelivery.AttemptMade) and e.originator_id in endpoint_of:
            open_attempts.get(e.originator_id, {}).pop(e.attempt, None)
            acknowledged = 1 if e.outcome == "success" else 0
            _sent(found[endpoint_of[e.originator_id]], 1, acknowledged, instant(e.timestamp))
    # An event destination's rounds (ADR 0055): a round finished published what the
    # broker acknowledged of the user's messages; one never finished, all of them possibly.
    by_round = _rounds_about(str(user_id), decoded)
    for destination_id, rounds in by_round.items():
        found[destination_id] = _round_entry(destination_id, str(user_id), rounds)
    # Deliveries to an event destination (issue 35) are its messages to a broker.
    destinations = service.event_destination_queries.among(list(found))
    if found:
        w = webhook_endpoints.c
        with service.db.read() as conn:
            urls = dict(
                conn.execute(select(w.endpoint_id, w.url).where(w.endpoint_id.in_(list(found))))
                .tuples()
                .all()
            )
        for endpoint_id, entry in found.items():
            entry["origin"] = _origin(urls.get(endpoint_id))
            entry["received"] = entry["posts"] > 0
        for delivery_id, started in open_attempts.items():
            for at in started.values():
                _possibly_sent(found[endpoint_of[delivery_id]], 1, at)
        for entry in found.values():
            entry["possibly_received"] = entry["received"] or entry["outcome_unknown"] > 0
    endpoints = [e for i, e in found.items() if i not in destinations]
    brokers = [
        _as_destination(e, destinations[i], service) for i, e in found.items() if i in destinations
    ]
    return {
        "note": RECIPIENTS_NOTE,
        "webhook_endpoints": sorted(endpoints, key=_first_sent),
        "event_destinations": {
            "supported": True,
            "note": EVENT_DESTINATIONS_NOTE,
            "destinations": sorted(brokers, key=_first_sent),
        },
    }


def _new_recipient(recipient_id: UUID) -> dict[str, Any]:
    """A recipient's entry before anything is counted (an endpoint's or a destination's
    id under `endpoint_id`)."""
    return {
        "endpoint_id": str(recipient_id),
        "origin": None,
        "deliveries": 0,
        "posts": 0,
        "acknowledged": 0,
        "first_sent_at": None,
        "last_sent_at": None,
        "first_acknowledged_at": None,
        "last_acknowledged_at": None,
        "outcome_unknown": 0,
        "first_possibly_sent_at": None,
    }


def _sent(entry: dict[str, Any], posts: int, acknowledged: int, at: str) -> None:
    """Count `posts` messages sent at `at` (in time order), `acknowledged` of them."""
    entry["posts"] += posts
    entry["first_sent_at"] = entry["first_sent_at"] or at
    entry["last_sent_at"] = at
    if acknowledged:
        entry["acknowledged"] += acknowledged
        entry["first_acknowledged_at"] = entry["first_acknowledged_at"] or at
        entry["last_acknowledged_at"] = at


def _possibly_sent(entry: dict[str, Any], count: int, at: str) -> None:
    """Count `count` messages started at `at` with no recorded outcome."""
    entry["outcome_unknown"] += count
    first = entry["first_possibly_sent_at"]
    entry["first_possibly_sent_at"] = at if first is None else min(first, at)


def _rounds_about(user: str, decoded: Sequence[Any]) -> dict[UUID, list[tuple[Any, Any | None]]]:
    """Per event destination, its rounds that were to publish about the user: each
    round's `Started` with its `Finished` (None: never finished, outcome unknown)."""
    started: dict[UUID, Any] = {}
    finished: dict[UUID, Any] = {}
    for e in decoded:
        if isinstance(e, PublishRound.Started) and user in e.users:
            started[e.originator_id] = e
        elif isinstance(e, PublishRound.Finished):
            finished[e.originator_id] = e
    by_destination: dict[UUID, list[tuple[Any, Any | None]]] = {}
    for round_id, start in started.items():
        by_destination.setdefault(start.destination_id, []).append((start, finished.get(round_id)))
    return by_destination


def _round_entry(
    destination_id: UUID, user: str, rounds: Sequence[tuple[Any, Any | None]]
) -> dict[str, Any]:
    """A recipient entry of an event destination from its rounds about the user: the
    messages the rounds were to publish (deliveries), those of finished rounds
    (publishes, `posts`), those the broker acknowledged, the first and last of each; a
    round never finished counts its messages as outcome unknown (possibly sent)."""
    entry = _new_recipient(destination_id)
    for start, end in sorted(rounds, key=lambda r: r[0].timestamp):
        planned = start.users[user]
        entry["deliveries"] += planned
        if end is None:
            _possibly_sent(entry, planned, instant(start.timestamp))
            continue
        _sent(entry, planned, end.users.get(user, 0), instant(end.timestamp))
    return entry


def _first_sent(entry: dict[str, Any]) -> tuple[bool, str]:
    return (entry["first_sent_at"] is None, entry["first_sent_at"] or "")


def _as_destination(
    entry: dict[str, Any], destination: dict[str, Any], service: Service
) -> dict[str, Any]:
    """A recipient entry of an event destination: its id, kind and broker (host and port:
    its connection's secret is never read), publishes for POSTs."""
    found = service.ledger.find(UUID(entry["endpoint_id"]))
    connection = getattr(found, "connection", None) or {}
    target = None
    if isinstance(found, EventDestination) and connection:
        target = f"{found.kind}://{connection['host']}" + (
            f":{connection['port']}" if connection.get("port") else ""
        )
    renamed = {k: v for k, v in entry.items() if k not in ("endpoint_id", "origin", "posts")}
    return {
        "destination_id": entry["endpoint_id"],
        "kind": destination["kind"],
        "broker": None if destination["deleted"] else target,
        "publishes": entry["posts"],
        **renamed,
    }


def _origin(url: str | None) -> str | None:
    """scheme://host[:port] of an endpoint's URL (None: the endpoint is deleted)."""
    if url is None:
        return None
    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")
