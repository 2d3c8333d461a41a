"""The audit trail: a user's full history with everything that belongs to it (its
client_user_id claim, connections, pulls, link tokens and the webhook deliveries about
it, found in `stream_owners`) and one stream's history. A stream's state at an instant is
`time_travel.py`'s.

Personal values are never printed, before or after erasure: a sealed field shows as a
placeholder that says whether it can still be opened (its key exists) or was erased. The
key is the one that sealed it: the user's whose stream it is (or the user the event
names: a claim's), else the team's (custom credentials' and webhook endpoints' secrets),
else the stream's own. Never the stream's id for a stream that is not a user's own: a
connection's stream has no key of its own, and "erased" there would be false.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.eventstore.sealed_facts import SEALED_FACTS_FIELD
from healthledger.adapters.persistence.keys.key_store import KeyStore
from healthledger.adapters.persistence.projections.stream_owners import (
    FOUNDING,
    OWNED_STREAMS,
    owner_of,
)
from healthledger.adapters.persistence.queries.audit import AuditQueries, Position
from healthledger.domain.context import AttributedEvent, attributed
from healthledger.domain.personal_data import ERASED_PLACEHOLDER, SEALED_PLACEHOLDER
from healthledger.domain.webhooks.publish_rounds import PublishRound

_BASE_FIELDS = {
    "originator_id",
    "originator_version",
    "originator_topic",
    "timestamp",
    "actor",
    "request_id",
    # The stored form of the facts an event lists as sealed (ADR 0032): they are shown.
    SEALED_FACTS_FIELD,
}
# Events of a user's audit read from the log per query (a page asks for one more than it
# shows).
_BATCH = 500


def _event_types() -> dict[str, str]:
    """Every event a user's audit can hold, by name (`User.Deleted`), with its topic: its
    streams', and the event destinations' rounds that published about it (ADR 0055)."""
    found: dict[str, str] = {}
    for aggregate in (*OWNED_STREAMS, PublishRound):
        for value in vars(aggregate).values():
            topic = vars(value).get("TOPIC") if isinstance(value, type) else None
            if isinstance(topic, str):
                found[value.__qualname__] = topic
    return dict(sorted(found.items()))


# The names the audit's `event_type` filter takes.
USER_EVENT_TYPES: dict[str, str] = _event_types()


@dataclass(frozen=True)
class AuditEntry:
    # The stream the event is of: its kind (user, claim, connection, pull, link_token,
    # webhook_delivery; another aggregate's name in snake case) and id.
    stream_kind: str
    stream_id: UUID
    timestamp: datetime
    # The event's name, `<Aggregate>.<Event>` (what `event_type` filters on).
    event: str
    version: int
    actor: str
    request_id: str
    changes: dict[str, Any]

    def line(self) -> str:
        changed = ", ".join(f"{k}={_show(v)}" for k, v in self.changes.items())
        return (
            f"{self.timestamp.isoformat()}  v{self.version:<3} {self.event:<34} "
            f"{self.stream_kind}={self.stream_id} actor={self.actor} "
            f"request={self.request_id}" + (f"  {changed}" if changed else "")
        )


@dataclass(frozen=True)
class AuditPage:
    entries: list[AuditEntry]
    # The position the next page starts after, or None when this page is the last.
    next_after: Position | None


def _show(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={_show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value)


def _personal_placeholder(key_exists: bool) -> str:
    return SEALED_PLACEHOLDER if key_exists else ERASED_PLACEHOLDER


class _Keys:
    """Whether each data key exists, asked of the key store once per owner."""

    def __init__(self, key_store: KeyStore) -> None:
        self.key_store = key_store
        self.known: dict[UUID, bool] = {}

    def placeholder(self, owner: UUID) -> str:
        exists = self.known.get(owner)
        if exists is None:
            exists = self.known[owner] = self.key_store.has_key(owner)
        return _personal_placeholder(exists)


def _is_personal(name: str, personal: frozenset[str]) -> bool:
    # A `sealed_` field is sealed whether or not its event lists it.
    return name in personal or name.startswith("sealed_")


def _entry(event: AttributedEvent, kind: str, key_owner: UUID, keys: _Keys) -> AuditEntry:
    personal = frozenset(getattr(type(event), "PERSONAL_FIELDS", ()))
    # A sealed fact (ADR 0032) is sealed whatever its value: a pull's window or a sync's
    # session reads None once the key is gone (or a sync names no session), and shows
    # as sealed or erased all the same.
    sealed_facts = frozenset(getattr(type(event), "SEALED_FACTS", ()))
    # Fields a later version added as optional (an event's AUDIT_OMITS_NONE): left out
    # while None, so that an event stored before them reads as it always did.
    omitted = frozenset(getattr(type(event), "AUDIT_OMITS_NONE", ()))
    changes: dict[str, Any] = {}
    for name, value in vars(event).items():
        if name in _BASE_FIELDS or (value is None and name in omitted):
            continue
        if _is_personal(name, personal) and (value is not None or name in sealed_facts):
            changes[name] = keys.placeholder(key_owner)
        elif name == "changes" and isinstance(value, dict):
            changes.update(
                {
                    k: (keys.placeholder(key_owner) if _is_personal(k, personal) and v else v)
                    for k, v in value.items()
                }
            )
        else:
            changes[name] = value
    return AuditEntry(
        stream_kind=kind,
        stream_id=event.originator_id,
        timestamp=event.timestamp,
        event=type(event).__qualname__,
        version=event.originator_version,
        actor=event.actor,
        request_id=event.request_id,
        changes=changes,
    )


def _stream_key_owner(event: Any) -> UUID | None:
    """The event's stream, when its stream seals with a key of its own (its events'
    `SEALED_WITH_STREAM_KEY`: an unmatched lab result's, ADR 0040); else None."""
    sealed_by_stream = getattr(type(event), "SEALED_WITH_STREAM_KEY", False)
    return event.originator_id if sealed_by_stream else None


def _named_user(event: Any) -> UUID | None:
    named = getattr(event, "user_id", None)
    return named if isinstance(named, UUID) else None


def user_audit(
    service: Service,
    user_id: UUID,
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    event_types: Iterable[str] = (),
    after: Position | None = None,
    limit: int | None = None,
) -> AuditPage:
    """The user's history and its streams', merged in time order (then log order): events
    at or after `start` and before `end`, of `event_types` (names of USER_EVENT_TYPES;
    all when empty), after the position `after`, at most `limit` of them (all when None).
    A claim's events about another holder of it are left out. Empty for an unknown user."""
    topics = [USER_EVENT_TYPES[name] for name in event_types]
    queries = AuditQueries(service.db)
    keys = _Keys(service.key_store)
    mapper = service.ledger.mapper
    found: list[tuple[Position, AuditEntry]] = []
    batch = _BATCH if limit is None else limit + 1
    position = after
    while limit is None or len(found) <= limit:
        rows = queries.owned_events(
            user_id, start=start, end=end, topics=topics, after=position, limit=batch
        )
        for row in rows:
            position = row.position
            event = attributed(mapper.to_domain_event(row.stored))
            if _named_user(event) not in (None, user_id):
                continue
            # Every sealed value of a user's streams is sealed with the user's key, but
            # for a stream that seals with a key of its own.
            sealer = _stream_key_owner(event) or user_id
            found.append((row.position, _entry(event, row.kind, sealer, keys)))
        if len(rows) < batch:
            break
    _name_recipients(service, [entry for _, entry in found])
    _own_counts_only(user_id, [entry for _, entry in found])
    if limit is not None and len(found) > limit:
        return AuditPage([entry for _, entry in found[:limit]], found[limit - 1][0])
    return AuditPage([entry for _, entry in found], None)


def _name_recipients(service: Service, entries: Sequence[AuditEntry]) -> None:
    """The founding entry of a delivery to an event destination (issue 35: a broker)
    says so: `recipient` `event_destination` and its `recipient_kind` (rabbitmq, nats),
    beside its id in `endpoint_id`. A webhook endpoint's entries read as they always did."""
    created = [e for e in entries if e.event == "WebhookDelivery.Created"]
    ids = {e.changes["endpoint_id"] for e in created if "endpoint_id" in e.changes}
    brokers = service.event_destination_queries.among(ids)
    for entry in created:
        known = brokers.get(entry.changes.get("endpoint_id"))  # type: ignore[arg-type]
        if known is not None:
            entry.changes["recipient"] = "event_destination"
            entry.changes["recipient_kind"] = known["kind"]


def _own_counts_only(user_id: UUID, entries: Sequence[AuditEntry]) -> None:
    """An event destination's round (ADR 0055) counts the messages of every user it
    published about: the user's audit shows the user's own count only."""
    own = str(user_id)
    for entry in entries:
        users = entry.changes.get("users")
        if entry.event.startswith("PublishRound.") and isinstance(users, dict):
            entry.changes["users"] = {own: users[own]} if own in users else {}


def history(service: Service, user_id: UUID) -> list[AuditEntry]:
    """The user's whole audit (empty for an id that is not a user's)."""
    return user_audit(service, user_id).entries


def user_team(service: Service, user_id: UUID) -> UUID | None:
    """The team of a user in any state, live, pending or erased (None: no such user)."""
    return AuditQueries(service.db).user_team(user_id)


def _snake_case(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def stream_history(service: Service, stream_id: UUID) -> list[AuditEntry]:
    """One stream's history, of any aggregate (empty for an unknown id). Its sealed
    values show by the key that sealed them, found from its founding event: the stream's
    own key where its events say so (`SEALED_WITH_STREAM_KEY`), else the user it names,
    else its team, else the stream itself."""
    events = [attributed(event) for event in service.ledger.events.get(stream_id)]
    if not events:
        return []
    founding: Any = events[0]
    keys = _Keys(service.key_store)
    if _stream_key_owner(founding) is not None:
        own = _snake_case(type(founding).__qualname__.split(".")[0])
        return [_entry(event, own, stream_id, keys) for event in events]
    kind = FOUNDING.get(type(founding))
    owner = owner_of(founding) if kind is not None else None
    if kind is None or owner is None:  # a team-level delivery names no user: its team
        kind = _snake_case(type(founding).__qualname__.split(".")[0])
        team = getattr(founding, "team_id", None)
        owner = team if isinstance(team, UUID) else stream_id
    return [_entry(event, kind, _named_user(event) or owner, keys) for event in events]
