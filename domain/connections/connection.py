"""Provider connections: one stream per (user, provider).

connected -> deregistered (by the team, or because the user was deleted) -> connected
again: the same stream goes on, so the audit trail keeps every period of the connection.
connected -> error when the provider reports the user's grant broken (a pull finds it);
connecting again clears it. connected <-> paused as the user's ingestion_end passes or is
moved on (the daily sync decides). A connection in error or paused is still listed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate
from healthledger.domain.audited import Audited, UserStream
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import LedgerError
from healthledger.domain.personal_data import ERASED_PLACEHOLDER

CONNECTED = "connected"
ERROR = "error"
PAUSED = "paused"
DEREGISTERED = "deregistered"

# Why a connection ended.
BY_TEAM = "team_request"
BY_USER_DELETION = "user_deleted"


class AlreadyConnected(LedgerError):
    def __init__(self) -> None:
        super().__init__("The user is already connected to this provider.")


class NotConnected(LedgerError):
    def __init__(self) -> None:
        super().__init__("The user has no connection to this provider.")


class Connection(Audited, created_event_name="Created"):
    TOPIC = "healthledger:Connection"
    USER_STREAM = UserStream("connection", read_models=("read_model:connections",))

    class Event(Audited.Event):
        pass

    class CreatedV1(Event, Aggregate.Created):
        """The first connection, as recorded before its facts were sealed: the provider
        and the resource availability in clear (they say which device the person uses,
        a glucose monitor: a health fact). Recorded no more; the service's start redacts
        those stored into `Created` (ADR 0028, ADR 0032)."""

        TOPIC = "healthledger:Connection.Created.v1"
        ANNOUNCES = ("provider.connection.created",)
        SUPERSEDED_BY = "healthledger:Connection.Created.v2"
        PERSONAL_FIELDS = ("sealed_external_user_id",)
        user_id: UUID
        team_id: UUID
        provider: str
        sealed_external_user_id: str | None
        resource_availability: dict[str, Any]
        demo: bool

    class Created(Event, Aggregate.Created):
        """The first connection of this user to this provider. The provider and the
        resource availability are stored sealed with the user's key (SEALED_FACTS)."""

        TOPIC = "healthledger:Connection.Created.v2"
        ANNOUNCES = ("provider.connection.created",)
        SEALED_FACTS = {"provider": ERASED_PLACEHOLDER, "resource_availability": {}}
        PERSONAL_FIELDS = ("sealed_external_user_id", *SEALED_FACTS)
        user_id: UUID
        team_id: UUID
        provider: str
        sealed_external_user_id: str | None
        resource_availability: dict[str, Any]
        demo: bool

    class ReconnectedV1(Event):
        """Connected again after a deregistration, as recorded before the resource
        availability was sealed. Recorded no more; redacted into `Reconnected`."""

        TOPIC = "healthledger:Connection.Reconnected.v1"
        ANNOUNCES = ("provider.connection.created",)
        SUPERSEDED_BY = "healthledger:Connection.Reconnected.v2"
        PERSONAL_FIELDS = ("sealed_external_user_id",)
        sealed_external_user_id: str | None
        resource_availability: dict[str, Any]
        demo: bool

        def apply(self, connection: Connection) -> None:
            _reconnect(connection, self)

    class Reconnected(Event):
        """Connected again after a deregistration; the resource availability stored
        sealed with the user's key, whom it names for that."""

        TOPIC = "healthledger:Connection.Reconnected.v2"
        ANNOUNCES = ("provider.connection.created",)
        SEALED_FACTS = {"resource_availability": {}}
        PERSONAL_FIELDS = ("sealed_external_user_id", *SEALED_FACTS)
        user_id: UUID
        sealed_external_user_id: str | None
        resource_availability: dict[str, Any]
        demo: bool

        def apply(self, connection: Connection) -> None:
            _reconnect(connection, self)

    class Deregistered(Event):
        TOPIC = "healthledger:Connection.Deregistered.v1"
        ANNOUNCES = ()
        reason: str

        def apply(self, connection: Connection) -> None:
            connection.status = DEREGISTERED
            connection.deregistered_at = self.timestamp
            connection.error_details = None

    class DemoFailuresConfiguredV1(Event):
        """Ours, as recorded before the failures were sealed: the resources the demo device
        fails in clear (a resource names health data: a demo glucose monitor's "glucose").
        Recorded no more; the service's start redacts those stored into
        `DemoFailuresConfigured` (revision 0049, ADR 0028, ADR 0032). It names no user:
        the stream's owner is given."""

        TOPIC = "healthledger:Connection.DemoFailuresConfigured.v1"
        ANNOUNCES = ()
        SUPERSEDED_BY = "healthledger:Connection.DemoFailuresConfigured.v2"
        failures: dict[str, Any]

        def apply(self, connection: Connection) -> None:
            connection.demo_failures = self.failures

    class DemoFailuresConfigured(Event):
        """Ours: the demo device will fail these resources' pulls (see the demo adapter).
        The failures are stored sealed with the user's key, whom it names for that
        (SEALED_FACTS, ADR 0032): the domain reads them in clear; once the key is gone
        they read as none (an erased user's connection pulls nothing anyway)."""

        TOPIC = "healthledger:Connection.DemoFailuresConfigured.v2"
        ANNOUNCES = ()
        SEALED_FACTS = {"failures": {}}
        PERSONAL_FIELDS = tuple(SEALED_FACTS)
        user_id: UUID
        failures: dict[str, Any]

        def apply(self, connection: Connection) -> None:
            connection.demo_failures = self.failures

    class Errored(Event):
        TOPIC = "healthledger:Connection.Errored.v1"
        ANNOUNCES = ("provider.connection.error",)
        error_type: str
        error_message: str

        def apply(self, connection: Connection) -> None:
            connection.status = ERROR
            connection.error_details = {
                "error_type": self.error_type,
                "error_message": self.error_message,
                "errored_at": self.timestamp,
            }

    class Paused(Event):
        """The user's ingestion_end passed: no more data is pulled."""

        TOPIC = "healthledger:Connection.Paused.v1"
        ANNOUNCES = ()

        def apply(self, connection: Connection) -> None:
            connection.status = PAUSED

    class PausedByTeam(Event):
        """The team paused the connection's ingestion (a bulk pause): it stays paused,
        whatever the user's ingestion bounds say, until the person connects again."""

        TOPIC = "healthledger:Connection.PausedByTeam.v1"
        ANNOUNCES = ()

        def apply(self, connection: Connection) -> None:
            connection.status = PAUSED
            connection.paused_by_team = True

    class Resumed(Event):
        TOPIC = "healthledger:Connection.Resumed.v1"
        ANNOUNCES = ()

        def apply(self, connection: Connection) -> None:
            connection.status = CONNECTED

    # Set by `_connect`; the default for a snapshot taken before a team could pause.
    paused_by_team = False

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        user_id: UUID,
        team_id: UUID,
        provider: str,
        sealed_external_user_id: str | None,
        resource_availability: dict[str, Any],
        demo: bool,
    ) -> None:
        """From the Created event's fields, at `connect_new` and on every replay."""
        self.user_id: UUID = user_id
        self.team_id: UUID = team_id
        self.provider: str = provider
        self.demo: bool = demo
        # The state of a connection period, set by `_connect` (and again on reconnection).
        self.status: str
        self.connected_at: datetime
        self.sealed_external_user_id: str | None
        self.resource_availability: dict[str, Any]
        # error_type, error_message and errored_at while in error.
        self.error_details: dict[str, Any] | None
        self.deregistered_at: datetime | None
        self.demo_failures: dict[str, Any]
        _connect(self, timestamp, sealed_external_user_id, resource_availability)

    @classmethod
    def connect_new(
        cls,
        ctx: CommandContext,
        now: datetime,
        *,
        id: UUID,
        user_id: UUID,
        team_id: UUID,
        provider: str,
        sealed_external_user_id: str | None,
        resource_availability: dict[str, Any],
        demo: bool,
    ) -> Connection:
        """`id` is `StreamIds.connection_id(user_id, provider)` (keyed by the user's key)."""
        return cls.new(
            ctx,
            now,
            id=id,
            user_id=user_id,
            team_id=team_id,
            provider=provider,
            sealed_external_user_id=sealed_external_user_id,
            resource_availability=resource_availability,
            demo=demo,
        )

    @property
    def is_live(self) -> bool:
        return self.status != DEREGISTERED

    @property
    def is_pulling(self) -> bool:
        """Data is pulled only while connected (not in error, paused or deregistered)."""
        return self.status == CONNECTED

    def reconnect(
        self,
        ctx: CommandContext,
        now: datetime,
        *,
        sealed_external_user_id: str | None,
        resource_availability: dict[str, Any],
        demo: bool,
    ) -> None:
        # Connecting again is how a user repairs a connection in error, or ends a team's
        # pause of it.
        if self.status == CONNECTED or (self.status == PAUSED and not self.paused_by_team):
            raise AlreadyConnected()
        self.record(
            ctx,
            now,
            self.Reconnected,
            user_id=self.user_id,
            sealed_external_user_id=sealed_external_user_id,
            resource_availability=resource_availability,
            demo=demo,
        )

    def deregister(self, ctx: CommandContext, now: datetime, reason: str) -> None:
        if not self.is_live:
            raise NotConnected()
        self.record(ctx, now, self.Deregistered, reason=reason)

    def configure_demo_failures(
        self, ctx: CommandContext, now: datetime, failures: dict[str, Any]
    ) -> None:
        self.record(ctx, now, self.DemoFailuresConfigured, user_id=self.user_id, failures=failures)

    def error(self, ctx: CommandContext, now: datetime, error_type: str, message: str) -> None:
        if self.status == CONNECTED:
            self.record(ctx, now, self.Errored, error_type=error_type, error_message=message)

    def pause(self, ctx: CommandContext, now: datetime) -> None:
        if self.status == CONNECTED:
            self.record(ctx, now, self.Paused)

    def resume(self, ctx: CommandContext, now: datetime) -> None:
        # A team's pause is not the ingestion bounds' to lift.
        if self.status == PAUSED and not self.paused_by_team:
            self.record(ctx, now, self.Resumed)

    def pause_by_team(self, ctx: CommandContext, now: datetime) -> None:
        if self.status in (CONNECTED, PAUSED) and not self.paused_by_team:
            self.record(ctx, now, self.PausedByTeam)


def _connect(
    connection: Connection,
    at: datetime,
    sealed_external_user_id: str | None,
    resource_availability: dict[str, Any],
) -> None:
    connection.status = CONNECTED
    connection.connected_at = at
    connection.sealed_external_user_id = sealed_external_user_id
    connection.resource_availability = resource_availability
    connection.error_details = None
    connection.deregistered_at = None
    connection.paused_by_team = False
    # A new connection period starts without the previous period's injected failures.
    connection.demo_failures = {}


def _reconnect(connection: Connection, event: Any) -> None:
    connection.demo = event.demo
    _connect(
        connection, event.timestamp, event.sealed_external_user_id, event.resource_availability
    )
