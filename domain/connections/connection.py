"""Provider connections: one stream per (user, provider).

connected -> deregistered (by the team, or because the user was deleted) -> connected
again: the same stream goes on, so the audit trail keeps every period of the connection.
connected -> error when the provider reports the user's grant broken (a pull finds it);
connecting again clears it. connected <-> paused as the user's ingestion_end passes or is
moved on (the daily sync decides). A connection in error or paused is still listed.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate
from healthledger.domain.audited import Audited, UserStream
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import LedgerError

CONNECTED = "connected"
ERROR = "error"
PAUSED = "paused"
DEREGISTERED = "deregistered"

# Why a connection ended.
BY_TEAM = "team_request"
BY_USER_DELETION = "user_deleted"

_NAMESPACE = uuid.UUID("9a7d5c3e-1b2f-5a4d-8c6e-0f1e2d3c4b5a")


class AlreadyConnected(LedgerError):
    def __init__(self) -> None:
        super().__init__("The user is already connected to this provider.")


class NotConnected(LedgerError):
    def __init__(self) -> None:
        super().__init__("The user has no connection to this provider.")


class Connection(Audited):
    TOPIC = "healthledger:Connection"
    USER_STREAM = UserStream("connection", read_models=("read_model:connections",))

    class Event(Audited.Event):
        pass

    class Created(Event, Aggregate.Created):
        """The first connection of this user to this provider."""

        TOPIC = "healthledger:Connection.Created.v1"
        ANNOUNCES = ("provider.connection.created",)
        PERSONAL_FIELDS = ("sealed_external_user_id",)
        user_id: UUID
        team_id: UUID
        provider: str
        sealed_external_user_id: str | None
        resource_availability: dict[str, Any]
        demo: bool

    class Reconnected(Event):
        """Connected again after a deregistration."""

        TOPIC = "healthledger:Connection.Reconnected.v1"
        ANNOUNCES = ("provider.connection.created",)
        PERSONAL_FIELDS = ("sealed_external_user_id",)
        sealed_external_user_id: str | None
        resource_availability: dict[str, Any]
        demo: bool

        def apply(self, connection: Connection) -> None:
            connection.demo = self.demo
            _connect(
                connection,
                self.timestamp,
                self.sealed_external_user_id,
                self.resource_availability,
            )

    class Deregistered(Event):
        TOPIC = "healthledger:Connection.Deregistered.v1"
        ANNOUNCES = ()
        reason: str

        def apply(self, connection: Connection) -> None:
            connection.status = DEREGISTERED
            connection.deregistered_at = self.timestamp
            connection.error_details = None

    class DemoFailuresConfigured(Event):
        """Ours: the demo device will fail these resources' pulls (see the demo adapter)."""

        TOPIC = "healthledger:Connection.DemoFailuresConfigured.v1"
        ANNOUNCES = ()
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

    class Resumed(Event):
        TOPIC = "healthledger:Connection.Resumed.v1"
        ANNOUNCES = ()

        def apply(self, connection: Connection) -> None:
            connection.status = CONNECTED

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

    @staticmethod
    def id_for(user_id: UUID, provider: str) -> UUID:
        return uuid.uuid5(_NAMESPACE, f"{user_id}\x1f{provider}")

    @classmethod
    def connect_new(
        cls,
        ctx: CommandContext,
        now: datetime,
        *,
        user_id: UUID,
        team_id: UUID,
        provider: str,
        sealed_external_user_id: str | None,
        resource_availability: dict[str, Any],
        demo: bool,
    ) -> Connection:
        return cls.new(
            ctx,
            now,
            id=cls.id_for(user_id, provider),
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
        # Connecting again is how a user repairs a connection in error.
        if self.status in (CONNECTED, PAUSED):
            raise AlreadyConnected()
        self.record(
            ctx,
            now,
            self.Reconnected,
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
        self.record(ctx, now, self.DemoFailuresConfigured, failures=failures)

    def error(self, ctx: CommandContext, now: datetime, error_type: str, message: str) -> None:
        if self.status == CONNECTED:
            self.record(ctx, now, self.Errored, error_type=error_type, error_message=message)

    def pause(self, ctx: CommandContext, now: datetime) -> None:
        if self.status == CONNECTED:
            self.record(ctx, now, self.Paused)

    def resume(self, ctx: CommandContext, now: datetime) -> None:
        if self.status == PAUSED:
            self.record(ctx, now, self.Resumed)


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
    # A new connection period starts without the previous period's injected failures.
    connection.demo_failures = {}
