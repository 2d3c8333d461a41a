"""Event destinations: a team's event stream published into its own broker (spec 6 rule 5,
"event routing to an external event-hub destination by event-type prefix"; issue 35).

A destination belongs to one team and environment, like a webhook endpoint, and receives
the same messages from the same outbox (`adapters/webhooks/dispatcher.py`): each message
is a `WebhookDelivery` whose `endpoint_id` is the destination's id. What differs is the
transport (a RabbitMQ exchange or a NATS JetStream subject, `adapters/brokers/`) and the
routing: a table of event-type prefixes, each to a routing key or subject.

created -> updated / secret rotated / paused / resumed / disabled ... -> deleted. The
connection's secret (a password or token) is write-only and held only sealed with the
team's data key (ADR 0007's scheme).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

from eventsourcing.domain import Aggregate
from healthledger.domain.audited import Audited
from healthledger.domain.context import CommandContext

RABBITMQ = "rabbitmq"
NATS = "nats"
KINDS = (RABBITMQ, NATS)

# Why a destination publishes nothing: paused by a caller, or disabled by the publisher
# after failing for the disable period (the webhooks' 5 days). Resuming clears either.
PAUSED_BY_CALLER = "management_request"
FAILING_TOO_LONG = "failing_for_5_days"

# The connection fields each kind takes (none of them secret); the secret is apart.
CONNECTION_FIELDS: dict[str, tuple[str, ...]] = {
    RABBITMQ: ("host", "port", "tls", "username", "virtual_host", "exchange"),
    NATS: ("host", "port", "tls", "username", "stream"),
}
DEFAULT_PORTS = {(RABBITMQ, False): 5672, (RABBITMQ, True): 5671, (NATS, False): 4222}

# An AMQP 0-9-1 exchange name and a routing key are short strings (at most 255 bytes);
# a NATS subject is dot-separated tokens without wildcards or white space.
_EXCHANGE = re.compile(r"[A-Za-z0-9_.:\-]{1,255}")
_ROUTING_KEY = re.compile(r"[A-Za-z0-9_.:\-]{1,255}")
_SUBJECT = re.compile(r"[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*")
_STREAM = re.compile(r"[A-Za-z0-9_\-]{1,255}")
_HOST = re.compile(r"[A-Za-z0-9.\-:\[\]]{1,253}")
_NAME = re.compile(r"[^\s\x00-\x1f/]{1,128}")
MAX_ROUTES = 50


@dataclass(frozen=True)
class Route:
    """Events whose type starts with `prefix` go to `target`: a routing key on the
    destination's exchange (RabbitMQ) or a subject (NATS). An empty prefix matches
    every type."""

    prefix: str
    target: str


def route_for(routes: Iterable[Route], event_type: str) -> str | None:
    """The target of `event_type`: the route with the longest prefix that matches it
    (overlapping prefixes such as `daily.data.` and `daily.data.sleep.` send sleep to the
    second and every other daily type to the first); None when none matches (the event is
    not published to this destination). Prefixes are unique, so there is no tie."""
    best: Route | None = None
    for route in routes:
        if event_type.startswith(route.prefix) and (
            best is None or len(route.prefix) > len(best.prefix)
        ):
            best = route
    return None if best is None else best.target


def routes_of(raw: Iterable[dict[str, str]]) -> list[Route]:
    return [Route(r["prefix"], r["target"]) for r in raw]


def settings_problem(kind: str, connection: dict[str, Any]) -> tuple[str, str] | None:
    """What is wrong with a kind's connection settings (field, message), or None."""
    if kind not in KINDS:
        return "kind", f"kind must be one of {', '.join(KINDS)}."
    allowed = CONNECTION_FIELDS[kind]
    for name in connection:
        if name not in allowed:
            return "connection", f"{name} is not a {kind} setting (allowed: {', '.join(allowed)})."
    host = connection.get("host")
    if not isinstance(host, str) or not _HOST.fullmatch(host):
        return "connection", "host must be a host name or an IP address."
    port = connection.get("port")
    if port is not None and (not isinstance(port, int) or not 1 <= port <= 65535):
        return "connection", "port must be between 1 and 65535."
    username = connection.get("username")
    if username is not None and (not isinstance(username, str) or not _NAME.fullmatch(username)):
        return "connection", "username must be 1 to 128 printable characters without spaces."
    if kind == RABBITMQ:
        if not isinstance(connection.get("exchange"), str) or not _EXCHANGE.fullmatch(
            connection["exchange"]
        ):
            return "connection", "exchange is required: letters, digits, '_', '-', '.', ':'."
        vhost = connection.get("virtual_host", "/")
        if not isinstance(vhost, str) or not 1 <= len(vhost) <= 255 or not vhost.isprintable():
            return "connection", "virtual_host must be 1 to 255 printable characters."
    if kind == NATS:
        stream = connection.get("stream")
        if stream is not None and (not isinstance(stream, str) or not _STREAM.fullmatch(stream)):
            return "connection", "stream must be letters, digits, '_' or '-'."
        if connection.get("tls"):
            return "connection", "tls is not offered for nats yet; use a private link."
    return None


def routes_problem(kind: str, routes: Sequence[Route]) -> str | None:
    """What is wrong with a routing table, or None: 1..MAX_ROUTES routes, unique
    prefixes, each target a valid routing key (RabbitMQ) or subject (NATS)."""
    if not routes:
        return "routes must hold at least one route."
    if len(routes) > MAX_ROUTES:
        return f"routes must hold at most {MAX_ROUTES} routes."
    prefixes = [r.prefix for r in routes]
    if len(set(prefixes)) != len(prefixes):
        return "each prefix may appear once: the longest matching prefix wins."
    for route in routes:
        if len(route.prefix) > 128 or not route.prefix.isprintable() or " " in route.prefix:
            return "a prefix is at most 128 printable characters without spaces."
        pattern = _SUBJECT if kind == NATS else _ROUTING_KEY
        if not pattern.fullmatch(route.target) or len(route.target) > 255:
            what = "subject" if kind == NATS else "routing key"
            return f"target {route.target!r} is not a valid {what}."
    return None


class EventDestination(Audited):
    TOPIC = "healthledger:EventDestination"
    USER_STREAM = None

    class Event(Audited.Event):
        pass

    class Created(Event, Aggregate.Created):
        TOPIC = "healthledger:EventDestination.Created.v1"
        # A secret, not personal data: listed so that the audit never prints it.
        PERSONAL_FIELDS = ("sealed_secret",)
        team_id: UUID
        environment: str
        kind: str
        description: str
        connection: dict[str, Any]
        routes: list[dict[str, str]]
        paused: bool
        sealed_secret: str | None

    class Updated(Event):
        """Only the fields that changed: description, connection, routes."""

        TOPIC = "healthledger:EventDestination.Updated.v1"
        changes: dict[str, Any]

        def apply(self, destination: EventDestination) -> None:
            for name, value in self.changes.items():
                setattr(destination, name, value)

    class SecretRotated(Event):
        """A new connection secret (or none): in force at once, the old one forgotten."""

        TOPIC = "healthledger:EventDestination.SecretRotated.v1"
        PERSONAL_FIELDS = ("sealed_secret",)
        sealed_secret: str | None

        def apply(self, destination: EventDestination) -> None:
            destination.sealed_secret = self.sealed_secret

    class Paused(Event):
        """Nothing is published (messages are kept, in order) until it is resumed."""

        TOPIC = "healthledger:EventDestination.Paused.v1"
        reason: str

        def apply(self, destination: EventDestination) -> None:
            destination.paused_reason = self.reason

    class Disabled(Event):
        """Paused by the publisher after failing for the disable period: the team's admins
        are told by the `event_destination.disabled` webhook (a team-level type, to the
        team environment's endpoints) that this event announces."""

        TOPIC = "healthledger:EventDestination.Disabled.v1"
        ANNOUNCES = ("event_destination.disabled",)
        reason: str
        # The first failure with no success since, and the last failure's short code
        # (never a secret: `adapters/brokers/clients.py`'s PublishFailed codes).
        failing_since: datetime
        error: str

        def apply(self, destination: EventDestination) -> None:
            destination.paused_reason = self.reason

    class Resumed(Event):
        TOPIC = "healthledger:EventDestination.Resumed.v1"
        reason: str

        def apply(self, destination: EventDestination) -> None:
            destination.paused_reason = None

    class Deleted(Event):
        TOPIC = "healthledger:EventDestination.Deleted.v1"

        def apply(self, destination: EventDestination) -> None:
            destination.deleted_at = self.timestamp

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        team_id: UUID,
        environment: str,
        kind: str,
        description: str,
        connection: dict[str, Any],
        routes: list[dict[str, str]],
        paused: bool,
        sealed_secret: str | None,
    ) -> None:
        """From the Created event's fields, at `create` and on every replay."""
        self.team_id: UUID = team_id
        self.environment: str = environment
        self.kind: str = kind
        self.description: str = description
        self.connection: dict[str, Any] = dict(connection)
        self.routes: list[dict[str, str]] = [dict(r) for r in routes]
        self.paused_reason: str | None = PAUSED_BY_CALLER if paused else None
        self.sealed_secret: str | None = sealed_secret
        self.deleted_at: datetime | None = None

    @classmethod
    def create(cls, ctx: CommandContext, now: datetime, **fields: Any) -> EventDestination:
        return cls.new(ctx, now, id=uuid4(), **fields)

    @property
    def paused(self) -> bool:
        return self.paused_reason is not None

    def update(self, ctx: CommandContext, now: datetime, **fields: Any) -> None:
        """Change description, connection or routes; equal values are no change."""
        changes = {}
        for name, value in fields.items():
            if name not in ("description", "connection", "routes"):
                raise ValueError(f"{name} is not an updatable field")
            if getattr(self, name) != value:
                changes[name] = value
        if changes:
            self.record(ctx, now, self.Updated, changes=changes)

    def rotate_secret(self, ctx: CommandContext, now: datetime, sealed_secret: str | None) -> None:
        self.record(ctx, now, self.SecretRotated, sealed_secret=sealed_secret)

    def pause(self, ctx: CommandContext, now: datetime, reason: str = PAUSED_BY_CALLER) -> None:
        if not self.paused:
            self.record(ctx, now, self.Paused, reason=reason)

    def disable(
        self, ctx: CommandContext, now: datetime, failing_since: datetime, error: str
    ) -> None:
        """Stop publishing to a destination failing since `failing_since` (its messages
        are kept for a resume)."""
        if not self.paused:
            self.record(
                ctx,
                now,
                self.Disabled,
                reason=FAILING_TOO_LONG,
                failing_since=failing_since,
                error=error,
            )

    def resume(self, ctx: CommandContext, now: datetime, reason: str = PAUSED_BY_CALLER) -> None:
        if self.paused:
            self.record(ctx, now, self.Resumed, reason=reason)

    def delete(self, ctx: CommandContext, now: datetime) -> None:
        if self.deleted_at is None:
            self.record(ctx, now, self.Deleted)

    def view(self) -> dict[str, Any]:
        """What the management API shows: never the secret, only whether one is set."""
        return {
            "id": self.id,
            "team_id": self.team_id,
            "environment": self.environment,
            "kind": self.kind,
            "description": self.description,
            "connection": dict(self.connection),
            "has_secret": self.sealed_secret is not None,
            "routes": [dict(r) for r in self.routes],
            "paused": self.paused,
            "paused_reason": self.paused_reason,
            "created_on": self.created_on,
            "updated_at": self.modified_on,
        }
