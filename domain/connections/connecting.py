"""Use cases of provider connections: connect (demo devices for now), deregister.

A connect records the connection and schedules its historical pulls in one transaction,
so a connection never exists without the pulls it owes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.persistence import IntegrityError
from healthledger.domain.connections.connection import (
    BY_TEAM,
    AlreadyConnected,
    Connection,
    NotConnected,
)
from healthledger.domain.connections.pulling import Pulls
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.context import CommandContext
from healthledger.domain.ledger import Clock, Ledger
from healthledger.domain.personal_data import PersonalDataVault
from healthledger.domain.users.lifecycle import UserLifecycle


@dataclass
class PreparedConnection:
    """A connect's pending events, unsaved: the connection and its scheduled pulls."""

    connection: Connection
    feeds: list[ResourceFeed]

    @property
    def aggregates(self) -> list[Any]:
        return [self.connection, *self.feeds]


class Connections:
    def __init__(
        self,
        ledger: Ledger,
        vault: PersonalDataVault,
        clock: Clock,
        users: UserLifecycle,
        pulls: Pulls,
    ) -> None:
        self.ledger = ledger
        self.vault = vault
        self.clock = clock
        self.users = users
        self.pulls = pulls

    def connect_demo(
        self,
        ctx: CommandContext,
        team_id: UUID,
        user_id: UUID,
        provider: str,
        resources: Sequence[str],
        demo_failures: Mapping[str, Any] | None = None,
    ) -> PreparedConnection:
        """Connect a simulated device of `provider` that offers `resources`, and schedule
        a historical pull of each. `demo_failures` (ours) makes the device fail pulls."""
        prepared = self.prepare_demo(ctx, team_id, user_id, provider, resources, demo_failures)
        try:
            self.ledger.save(*prepared.aggregates)
        except IntegrityError as exc:
            raise AlreadyConnected() from exc  # a concurrent connect won
        return prepared

    def prepare_demo(
        self,
        ctx: CommandContext,
        team_id: UUID,
        user_id: UUID,
        provider: str,
        resources: Sequence[str],
        demo_failures: Mapping[str, Any] | None = None,
    ) -> PreparedConnection:
        """The demo connection with its Created or Reconnected event pending and its pulls
        scheduled, unsaved: a use case that must record more in the same transaction (a
        link token consumed by this connection) saves them together."""
        user = self.users.load_live(team_id, user_id)
        # The provider's id for the user links to a person at the provider: sealed.
        sealed = self.vault.seal(user_id, f"demo-{provider}-{user_id.hex[:12]}")
        availability = self.pulls.adapter_for(provider, True).availability(resources)
        now = self.clock()
        connection = self.connected(
            ctx, now, team_id, user_id, provider, sealed, availability, demo=True
        )
        if demo_failures:
            connection.configure_demo_failures(ctx, now, dict(demo_failures))
        feeds = self.pulls.schedule(ctx, connection, user, resources, now)
        return PreparedConnection(connection, feeds)

    def connected(
        self,
        ctx: CommandContext,
        now: datetime,
        team_id: UUID,
        user_id: UUID,
        provider: str,
        sealed_external_user_id: str | None,
        availability: dict[str, Any],
        *,
        demo: bool,
    ) -> Connection:
        """The user's connection of `provider`, new or reconnected (its event pending,
        unsaved): how every way of connecting records it."""
        connection_id = self.pulls.streams.connection_id(user_id, provider)
        connection = self.ledger.find(connection_id)
        if connection is None:
            return Connection.connect_new(
                ctx,
                now,
                id=connection_id,
                user_id=user_id,
                team_id=team_id,
                provider=provider,
                sealed_external_user_id=sealed_external_user_id,
                resource_availability=availability,
                demo=demo,
            )
        assert isinstance(connection, Connection)
        connection.reconnect(
            ctx,
            now,
            sealed_external_user_id=sealed_external_user_id,
            resource_availability=availability,
            demo=demo,
        )
        return connection

    def connect_manual(
        self,
        ctx: CommandContext,
        team_id: UUID,
        user_id: UUID,
        provider: str,
        external_user_id: str | None,
        availability: dict[str, Any],
    ) -> Connection:
        """Connect a provider whose data the person's phone sends (an SDK or app
        provider: Apple Health, Health Connect, a Bluetooth device): nothing to pull, so
        no pulls are scheduled. `external_user_id`, the SDK's id for the person, is
        sealed. Raises UserNotFound or AlreadyConnected."""
        self.users.load_live(team_id, user_id)
        sealed = None if external_user_id is None else self.vault.seal(user_id, external_user_id)
        now = self.clock()
        connection = self.connected(
            ctx, now, team_id, user_id, provider, sealed, availability, demo=False
        )
        try:
            self.ledger.save(connection)
        except IntegrityError as exc:
            raise AlreadyConnected() from exc
        return connection

    def deregister(self, ctx: CommandContext, team_id: UUID, user_id: UUID, provider: str) -> None:
        self.users.load_live(team_id, user_id)
        connection = self.ledger.find(self.pulls.streams.connection_id(user_id, provider))
        if not isinstance(connection, Connection):
            raise NotConnected()
        connection.deregister(ctx, self.clock(), BY_TEAM)
        try:
            self.ledger.save(connection)
        except IntegrityError as exc:
            raise NotConnected() from exc  # deregistered concurrently
