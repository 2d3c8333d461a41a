"""Management keys: the keys of the management API.

An org key (`org_admin`) controls the whole organization. A team key (`team_admin`) is
bound to one or more teams of that organization and reaches only them, never
organization-level resources or actions.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from eventsourcing.domain import Aggregate
from healthledger.domain.audited import Audited
from healthledger.domain.context import CommandContext
from healthledger.domain.keys import MANAGEMENT_KEY, hash_key, new_key

ORG_ADMIN = "org_admin"
TEAM_ADMIN = "team_admin"
ROLES = (ORG_ADMIN, TEAM_ADMIN)


class ManagementKey(Audited):
    TOPIC = "healthledger:ManagementKey"
    USER_STREAM = None

    class Event(Audited.Event):
        pass

    class Created(Event, Aggregate.Created):
        TOPIC = "healthledger:ManagementKey.Created.v1"
        org_id: UUID
        role: str
        team_ids: list[UUID]
        label: str
        key_hash: str

    class Relabeled(Event):
        TOPIC = "healthledger:ManagementKey.Relabeled.v1"
        label: str

        def apply(self, key: ManagementKey) -> None:
            key.label = self.label

    class TeamsBound(Event):
        """The whole new set of bound teams (team keys only)."""

        TOPIC = "healthledger:ManagementKey.TeamsBound.v1"
        team_ids: list[UUID]

        def apply(self, key: ManagementKey) -> None:
            key.team_ids = tuple(self.team_ids)

    class Revoked(Event):
        TOPIC = "healthledger:ManagementKey.Revoked.v1"

        def apply(self, key: ManagementKey) -> None:
            key.revoked_at = self.timestamp

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        org_id: UUID,
        role: str,
        team_ids: list[UUID],
        label: str,
        key_hash: str,
    ) -> None:
        """From the Created event's fields (eventsourcing passes them all), at `issue` and
        on every replay."""
        self.org_id: UUID = org_id
        self.role: str = role
        # The bound teams, sorted (none for an org key).
        self.team_ids: tuple[UUID, ...] = tuple(team_ids)
        self.label: str = label
        self.key_hash: str = key_hash
        self.revoked_at: datetime | None = None

    @classmethod
    def issue(
        cls,
        ctx: CommandContext,
        now: datetime,
        *,
        org_id: UUID,
        role: str,
        team_ids: list[UUID],
        label: str,
    ) -> tuple[ManagementKey, str]:
        """The new key and its plain text, which is never stored."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}")
        if (role == TEAM_ADMIN) != bool(team_ids):
            raise ValueError("a team_admin key is bound to at least one team; an org key to none")
        key_id, plain = new_key(MANAGEMENT_KEY)
        key = cls.new(
            ctx,
            now,
            id=key_id,
            org_id=org_id,
            role=role,
            team_ids=sorted(set(team_ids)),
            label=label,
            key_hash=hash_key(plain),
        )
        return key, plain

    def relabel(self, ctx: CommandContext, now: datetime, label: str) -> None:
        if label != self.label:
            self.record(ctx, now, self.Relabeled, label=label)

    def bind_teams(self, ctx: CommandContext, now: datetime, team_ids: list[UUID]) -> None:
        if self.role != TEAM_ADMIN:
            raise ValueError("only a team_admin key is bound to teams")
        if not team_ids:
            raise ValueError("a team_admin key is bound to at least one team")
        wanted = sorted(set(team_ids))
        if tuple(wanted) != self.team_ids:
            self.record(ctx, now, self.TeamsBound, team_ids=wanted)

    def revoke(self, ctx: CommandContext, now: datetime) -> None:
        if self.revoked_at is None:
            self.record(ctx, now, self.Revoked)
