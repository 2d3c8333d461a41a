"""Organizations, teams and team API keys: just enough to authenticate the team API.

The management API issue completes them (management keys, settings, brand information).
Key text is shown once at creation; only its SHA-256 is stored (the secret part has 256
bits of entropy, so a fast hash is enough) and comparisons are constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import uuid
from datetime import datetime
from uuid import UUID

from eventsourcing.domain import Aggregate
from healthledger.domain.context import CommandContext
from healthledger.domain.users import CheapCopy

REGIONS = ("us", "eu")
ENVIRONMENTS = ("sandbox", "production")
CLOSED_BETA_FEATURES = ("demographics", "portal_url", "aggregate_query")

_TEAM_API_KEY = re.compile(r"^hlk_([0-9a-f]{32})_[A-Za-z0-9_-]{43}$")


def hash_key(plain: str) -> str:
    return hashlib.sha256(plain.encode()).hexdigest()


def key_matches(plain: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_key(plain), stored_hash)


def new_team_api_key() -> tuple[UUID, str]:
    """A fresh key id and the plain key text that embeds it."""
    key_id = uuid.uuid4()
    return key_id, f"hlk_{key_id.hex}_{secrets.token_urlsafe(32)}"


def team_api_key_id(plain: str) -> UUID | None:
    """The key id inside a well-formed team API key, or None for anything else."""
    match = _TEAM_API_KEY.match(plain)
    return UUID(match.group(1)) if match else None


class Organization(CheapCopy, Aggregate):
    TOPIC = "healthledger:Organization"

    class Event(Aggregate.Event):
        actor: str
        request_id: str

    class Created(Event, Aggregate.Created):
        TOPIC = "healthledger:Organization.Created.v1"
        name: str

        def apply(self, org: Organization) -> None:
            org.name = self.name

    @classmethod
    def found(
        cls, ctx: CommandContext, now: datetime, name: str, org_id: UUID | None = None
    ) -> Organization:
        return cls._create(
            cls.Created,
            id=org_id or uuid.uuid4(),
            timestamp=now,
            actor=ctx.actor,
            request_id=ctx.request_id,
            name=name,
        )


class Team(CheapCopy, Aggregate):
    TOPIC = "healthledger:Team"

    class Event(Aggregate.Event):
        actor: str
        request_id: str

    class Created(Event, Aggregate.Created):
        TOPIC = "healthledger:Team.Created.v1"
        org_id: UUID
        name: str
        region: str

        def apply(self, team: Team) -> None:
            team.org_id = self.org_id
            team.name = self.name
            team.region = self.region
            team.features = ()

    class FeatureEnabled(Event):
        TOPIC = "healthledger:Team.FeatureEnabled.v1"
        feature: str

        def apply(self, team: Team) -> None:
            team.features = tuple(sorted({*team.features, self.feature}))

    class FeatureDisabled(Event):
        TOPIC = "healthledger:Team.FeatureDisabled.v1"
        feature: str

        def apply(self, team: Team) -> None:
            team.features = tuple(f for f in team.features if f != self.feature)

    @classmethod
    def create(
        cls, ctx: CommandContext, now: datetime, org_id: UUID, name: str, region: str
    ) -> Team:
        if region not in REGIONS:
            raise ValueError(f"region must be one of {', '.join(REGIONS)}")
        return cls._create(
            cls.Created,
            id=uuid.uuid4(),
            timestamp=now,
            actor=ctx.actor,
            request_id=ctx.request_id,
            org_id=org_id,
            name=name,
            region=region,
        )

    def set_feature(self, ctx: CommandContext, now: datetime, feature: str, enabled: bool) -> None:
        if feature not in CLOSED_BETA_FEATURES:
            raise ValueError(f"unknown feature {feature!r}")
        if (feature in self.features) == enabled:
            return
        event_class = self.FeatureEnabled if enabled else self.FeatureDisabled
        self.trigger_event(
            event_class, timestamp=now, actor=ctx.actor, request_id=ctx.request_id, feature=feature
        )


class TeamApiKey(CheapCopy, Aggregate):
    TOPIC = "healthledger:TeamApiKey"

    class Event(Aggregate.Event):
        actor: str
        request_id: str

    class Created(Event, Aggregate.Created):
        TOPIC = "healthledger:TeamApiKey.Created.v1"
        team_id: UUID
        environment: str
        region: str
        key_hash: str

        def apply(self, key: TeamApiKey) -> None:
            key.team_id = self.team_id
            key.environment = self.environment
            key.region = self.region
            key.key_hash = self.key_hash
            key.revoked_at = None

    class Revoked(Event):
        TOPIC = "healthledger:TeamApiKey.Revoked.v1"

        def apply(self, key: TeamApiKey) -> None:
            key.revoked_at = self.timestamp

    @classmethod
    def issue(
        cls,
        ctx: CommandContext,
        now: datetime,
        team_id: UUID,
        environment: str,
        region: str,
    ) -> tuple[TeamApiKey, str]:
        """The new key and its plain text, which is never stored."""
        key_id, plain = new_team_api_key()
        key = cls._create(
            cls.Created,
            id=key_id,
            timestamp=now,
            actor=ctx.actor,
            request_id=ctx.request_id,
            team_id=team_id,
            environment=environment,
            region=region,
            key_hash=hash_key(plain),
        )
        return key, plain

    def revoke(self, ctx: CommandContext, now: datetime) -> None:
        if self.revoked_at is not None:
            return
        self.trigger_event(self.Revoked, timestamp=now, actor=ctx.actor, request_id=ctx.request_id)
