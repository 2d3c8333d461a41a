"""A team's own OAuth credentials for a provider: prepared, then set, then maybe deleted.

The client id is kept in clear; the client secret is write-only and stored only sealed
(the team's own data key in the key store), never returned by any read.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from uuid import UUID

from eventsourcing.domain import Aggregate
from healthledger.domain.audited import Audited
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import CredentialsNotPrepared

PREPARED = "prepared"
SET = "set"
DELETED = "deleted"

_NAMESPACE = uuid.UUID("2d3c1b7e-9f0a-5c4d-8e6f-1a2b3c4d5e6f")


class CustomCredentials(Audited):
    TOPIC = "healthledger:CustomCredentials"
    USER_STREAM = None

    class Event(Audited.Event):
        pass

    class Created(Event, Aggregate.Created):
        """First prepared."""

        TOPIC = "healthledger:CustomCredentials.Created.v1"
        team_id: UUID
        provider: str

    class Reprepared(Event):
        TOPIC = "healthledger:CustomCredentials.Reprepared.v1"

        def apply(self, creds: CustomCredentials) -> None:
            creds.status = PREPARED
            creds.client_id = None
            creds.sealed_client_secret = None

    class Set(Event):
        TOPIC = "healthledger:CustomCredentials.Set.v1"
        PERSONAL_FIELDS = ("sealed_client_secret",)  # a secret: never printed either
        client_id: str
        sealed_client_secret: str

        def apply(self, creds: CustomCredentials) -> None:
            creds.status = SET
            creds.client_id = self.client_id
            creds.sealed_client_secret = self.sealed_client_secret

    class Deleted(Event):
        TOPIC = "healthledger:CustomCredentials.Deleted.v1"

        def apply(self, creds: CustomCredentials) -> None:
            creds.status = DELETED
            creds.client_id = None
            creds.sealed_client_secret = None

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        team_id: UUID,
        provider: str,
    ) -> None:
        """From the Created event's fields (eventsourcing passes them all), at
        `prepare_new` and on every replay."""
        self.team_id: UUID = team_id
        self.provider: str = provider
        self.status: str = PREPARED
        self.client_id: str | None = None
        self.sealed_client_secret: str | None = None

    @staticmethod
    def id_for(team_id: UUID, provider: str) -> UUID:
        return uuid.uuid5(_NAMESPACE, f"{team_id}\x1f{provider}")

    @classmethod
    def prepare_new(
        cls, ctx: CommandContext, now: datetime, team_id: UUID, provider: str
    ) -> CustomCredentials:
        return cls.new(
            ctx, now, id=cls.id_for(team_id, provider), team_id=team_id, provider=provider
        )

    def prepare_again(self, ctx: CommandContext, now: datetime) -> None:
        if self.status == DELETED:
            self.record(ctx, now, self.Reprepared)

    def set(self, ctx: CommandContext, now: datetime, client_id: str, sealed_secret: str) -> None:
        if self.status == DELETED:
            raise CredentialsNotPrepared()
        self.record(ctx, now, self.Set, client_id=client_id, sealed_client_secret=sealed_secret)

    def delete(self, ctx: CommandContext, now: datetime) -> None:
        if self.status != DELETED:
            self.record(ctx, now, self.Deleted)
