"""Use cases of event destinations (management API, per team and environment): create,
read, update (the connection's secret rotated by sending a new one), pause, resume,
delete; and, for the publisher, the destination's opened secret and its disabling."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.persistence import IntegrityError
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import ConcurrentChange, EventDestinationNotFound, InvalidRequest
from healthledger.domain.ledger import Clock, Ledger
from healthledger.domain.personal_data import PersonalDataVault
from healthledger.domain.teams.directory import TeamDirectory
from healthledger.domain.teams.teams import ENVIRONMENTS
from healthledger.domain.webhooks.event_destinations import (
    DEFAULT_PORTS,
    EventDestination,
    Route,
    routes_problem,
    settings_problem,
)
from healthledger.domain.webhooks.event_types import EventTypeCatalog
from healthledger.domain.webhooks.management import Destinations, address, host_ip

_SECRET_FIELD = "destination_secret"
SECRET_MAX = 1024


@dataclass(frozen=True)
class BrokerTarget:
    """What the publisher connects with: the settings, and the secret opened."""

    destination_id: UUID
    version: int
    kind: str
    connection: dict[str, Any]
    secret: str | None
    routes: list[Route]
    # Whose messages it publishes (ADR 0055: the publisher picks them from the log).
    team_id: UUID
    environment: str

    @property
    def port(self) -> int:
        port = self.connection.get("port")
        if port is not None:
            return int(port)
        return DEFAULT_PORTS[(self.kind, bool(self.connection.get("tls")))]


class EventDestinations:
    def __init__(
        self,
        ledger: Ledger,
        clock: Clock,
        vault: PersonalDataVault,
        teams: TeamDirectory,
        catalog: EventTypeCatalog,
        own_addresses: Iterable[tuple[str, int]],
        destinations: Destinations,
    ) -> None:
        self.ledger = ledger
        self.clock = clock
        self.vault = vault
        self.teams = teams
        self.catalog = catalog
        self.own_addresses = frozenset(own_addresses)
        # The webhooks' allowance for addresses that are not public (on-premises brokers):
        # one operator setting for everything the service sends out.
        self.allowed = destinations

    def create(
        self,
        ctx: CommandContext,
        team_id: UUID,
        environment: str,
        *,
        kind: str,
        connection: dict[str, Any],
        routes: list[Route],
        secret: str | None = None,
        description: str = "",
        paused: bool = False,
        org_id: UUID | None = None,
    ) -> EventDestination:
        self._check_environment(environment)
        self.teams.team(team_id, org_id)
        self._check(kind, connection, routes)
        destination = EventDestination.create(
            ctx,
            self.clock(),
            team_id=team_id,
            environment=environment,
            kind=kind,
            description=description,
            connection=connection,
            routes=[{"prefix": r.prefix, "target": r.target} for r in routes],
            paused=paused,
            sealed_secret=self._seal(team_id, secret),
        )
        self._save(destination)
        return destination

    def destination(
        self, team_id: UUID, environment: str, destination_id: UUID, org_id: UUID | None = None
    ) -> EventDestination:
        """A live destination of this team and environment; anything else does not exist."""
        self.teams.team(team_id, org_id)
        found = self.ledger.find(destination_id)
        if not is_destination_of(found, team_id, environment):
            raise EventDestinationNotFound()
        assert isinstance(found, EventDestination)
        return found

    def update(
        self,
        ctx: CommandContext,
        team_id: UUID,
        environment: str,
        destination_id: UUID,
        changes: dict[str, Any],
        org_id: UUID | None = None,
    ) -> EventDestination:
        """`changes` holds only the fields sent: description, connection, routes, secret
        (a new one rotates it at once; null removes it), paused. Every value is checked
        before anything is recorded."""
        destination = self.destination(team_id, environment, destination_id, org_id)
        fields = dict(changes)
        paused = fields.pop("paused", None)
        rotate = "secret" in fields
        secret = fields.pop("secret", None)
        routes = fields.get("routes")
        self._check(
            destination.kind,
            fields.get("connection", destination.connection),
            routes if routes is not None else [Route(**r) for r in destination.routes],
        )
        if routes is not None:
            fields["routes"] = [{"prefix": r.prefix, "target": r.target} for r in routes]
        now = self.clock()
        destination.update(ctx, now, **fields)
        if rotate:
            destination.rotate_secret(ctx, now, self._seal(team_id, secret))
        if paused is True:
            destination.pause(ctx, now)
        elif paused is False:
            destination.resume(ctx, now)
        self._save(destination)
        return destination

    def set_paused(
        self,
        ctx: CommandContext,
        team_id: UUID,
        environment: str,
        destination_id: UUID,
        paused: bool,
        org_id: UUID | None = None,
    ) -> EventDestination:
        return self.update(ctx, team_id, environment, destination_id, {"paused": paused}, org_id)

    def delete(
        self,
        ctx: CommandContext,
        team_id: UUID,
        environment: str,
        destination_id: UUID,
        org_id: UUID | None = None,
    ) -> None:
        destination = self.destination(team_id, environment, destination_id, org_id)
        destination.delete(ctx, self.clock())
        self._save(destination)

    # -- for the publisher -------------------------------------------------------------

    def target(self, destination_id: UUID) -> BrokerTarget | None:
        """The settings and opened secret to publish with; None for a deleted or unknown
        destination, or one whose secret cannot be opened (its team is gone)."""
        found = self.ledger.find(destination_id)
        if not isinstance(found, EventDestination) or found.deleted_at is not None:
            return None
        secret = None
        if found.sealed_secret is not None:
            opened = self.vault.open(found.team_id, found.sealed_secret)
            if opened is None:
                return None
            secret = opened[_SECRET_FIELD]
        return BrokerTarget(
            found.id,
            found.version,
            found.kind,
            dict(found.connection),
            secret,
            [Route(**r) for r in found.routes],
            found.team_id,
            found.environment,
        )

    def disable(
        self, ctx: CommandContext, destination_id: UUID, failing_since: datetime, error: str
    ) -> bool:
        """For the publisher (the system actor): stop publishing to a destination that has
        failed too long; its messages are kept for a resume, and the team's endpoints are
        told (`EventDestination.Disabled` announces it). Whether it was disabled now."""
        found = self.ledger.find(destination_id)
        if not isinstance(found, EventDestination) or found.deleted_at is not None:
            return False
        if found.paused:
            return False
        found.disable(ctx, self.clock(), failing_since, error)
        self._save(found)
        return True

    # -- helpers ------------------------------------------------------------------------

    def _check(self, kind: str, connection: dict[str, Any], routes: list[Route]) -> None:
        problem = settings_problem(kind, connection)
        if problem is not None:
            raise InvalidRequest(problem[1], problem[0])
        problem_text = routes_problem(kind, routes)
        if problem_text is not None:
            raise InvalidRequest(problem_text, "routes")
        for route in routes:
            if route.prefix and not any(n.startswith(route.prefix) for n in self.catalog.names):
                raise InvalidRequest(f"prefix {route.prefix!r} matches no event type.", "routes")
        self._check_host(kind, connection)

    def _check_host(self, kind: str, connection: dict[str, Any]) -> None:
        host = connection["host"]
        port = connection.get("port") or DEFAULT_PORTS[(kind, bool(connection.get("tls")))]
        if address(host, port) in self.own_addresses:
            raise InvalidRequest("host points at this service itself.", "connection")
        if self.allowed.allows_host(host):
            return
        ip = host_ip(host)
        if ip is None and host.rstrip(".").lower() == "localhost":
            ip = host_ip("127.0.0.1")
        refused = None if ip is None else self.allowed.refusal(ip)
        if refused is not None:
            raise InvalidRequest(
                f"host is a {refused} address; brokers are reached at public addresses "
                "only, unless the operator allows it.",
                "connection",
            )

    def _seal(self, team_id: UUID, secret: str | None) -> str | None:
        if secret is None:
            return None
        if not secret or len(secret) > SECRET_MAX:
            raise InvalidRequest(f"secret must be 1 to {SECRET_MAX} characters.", "secret")
        # The team's own data key, as the webhook secrets: never at rest in clear, and
        # gone with the team.
        return self.vault.seal(team_id, {_SECRET_FIELD: secret})

    def _check_environment(self, environment: str) -> None:
        if environment not in ENVIRONMENTS:
            raise InvalidRequest(
                f"environment must be one of {', '.join(ENVIRONMENTS)}.", "env", "path"
            )

    def _save(self, destination: EventDestination) -> None:
        try:
            self.ledger.save(destination)
        except IntegrityError as exc:
            raise ConcurrentChange() from exc


def is_destination_of(found: object, team_id: UUID, environment: str) -> bool:
    """Whether `found` is a live destination of this team and environment."""
    return (
        isinstance(found, EventDestination)
        and found.deleted_at is None
        and found.team_id == team_id
        and found.environment == environment
    )
