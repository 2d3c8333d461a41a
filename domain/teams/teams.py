"""Organizations, teams and team API keys, event-sourced: every administrative act is in
the audit trail with the key that did it (its actor)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

from eventsourcing.domain import Aggregate
from healthledger.domain.audited import Audited
from healthledger.domain.context import CommandContext
from healthledger.domain.free_text import FreeText, MultilineText, WebUrl
from healthledger.domain.keys import TEAM_API_KEY, hash_key, new_key
from healthledger.domain.teams.source_priorities import PRIORITY_DATA_TYPES
from pydantic import BaseModel, ConfigDict, EmailStr, Field, model_validator

REGIONS = ("us", "eu")
ENVIRONMENTS = ("sandbox", "production")
CLOSED_BETA_FEATURES = ("demographics", "portal_url", "aggregate_query")


class BrandInformation(BaseModel):
    """Shown by the hosted link widget, lab-testing communications and booking pages."""

    model_config = ConfigDict(extra="forbid")
    company_name: FreeText | None = Field(default=None, min_length=1, max_length=255)
    company_website: WebUrl | None = None
    support_email: EmailStr | None = None
    support_contact: FreeText | None = Field(default=None, max_length=255)
    company_address: MultilineText | None = Field(default=None, max_length=1000)
    brand_color: str | None = Field(default=None, pattern=r"^#[0-9A-Fa-f]{6}$")


class EnvironmentSettings(BaseModel):
    """A team's settings for one environment (sandbox or production)."""

    model_config = ConfigDict(extra="forbid")
    logo_url: WebUrl | None = None
    brand_information: BrandInformation | None = None

    @model_validator(mode="after")
    def _logo_with_company(self) -> EnvironmentSettings:
        if self.brand_information and self.brand_information.company_name and not self.logo_url:
            raise ValueError("logo_url is required when brand_information.company_name is set")
        return self


def default_settings() -> dict[str, Any]:
    return {env: EnvironmentSettings().model_dump(mode="json") for env in ENVIRONMENTS}


class Organization(Audited):
    TOPIC = "healthledger:Organization"
    USER_STREAM = None

    class Event(Audited.Event):
        pass

    class Created(Event, Aggregate.Created):
        TOPIC = "healthledger:Organization.Created.v1"
        name: str

    class Renamed(Event):
        TOPIC = "healthledger:Organization.Renamed.v1"
        name: str

        def apply(self, org: Organization) -> None:
            org.name = self.name

    def __init__(
        self, *, id: UUID, timestamp: datetime, actor: str, request_id: str, name: str
    ) -> None:
        """From the Created event's fields (eventsourcing passes them all), at `found` and
        on every replay."""
        self.name: str = name

    @classmethod
    def found(
        cls, ctx: CommandContext, now: datetime, name: str, org_id: UUID | None = None
    ) -> Organization:
        return cls.new(ctx, now, id=org_id or uuid4(), name=name)

    def rename(self, ctx: CommandContext, now: datetime, name: str) -> None:
        if name != self.name:
            self.record(ctx, now, self.Renamed, name=name)


class Team(Audited):
    TOPIC = "healthledger:Team"
    USER_STREAM = None

    class Event(Audited.Event):
        pass

    class Created(Event, Aggregate.Created):
        TOPIC = "healthledger:Team.Created.v1"
        org_id: UUID
        name: str
        region: str

    class Renamed(Event):
        TOPIC = "healthledger:Team.Renamed.v1"
        name: str

        def apply(self, team: Team) -> None:
            team.name = self.name

    class SettingsChanged(Event):
        """One environment's settings, whole (brand information included)."""

        TOPIC = "healthledger:Team.SettingsChanged.v1"
        environment: str
        settings: dict[str, Any]

        def apply(self, team: Team) -> None:
            team.settings = {**team.settings, self.environment: self.settings}

    class Deleted(Event):
        """The team is gone; its users were deleted through their own lifecycle."""

        TOPIC = "healthledger:Team.Deleted.v1"
        # Its data key sealed the team's custom credential secrets, webhook signing
        # secrets and client_user_id digest secret.
        SHREDS_KEY = True
        deleted_users: int

        def apply(self, team: Team) -> None:
            team.deleted_at = self.timestamp

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

    class ClientUserIdSecretCreated(Event):
        """The team's secret for the keyed digests of its client_user_ids (32 random
        bytes, sealed with the team's own data key; see domain/users/client_user_ids.py).
        Recorded once. `legacy_claims`: the team may hold claims made before digests,
        found by the clear value (false for a team that had its secret from creation)."""

        TOPIC = "healthledger:Team.ClientUserIdSecretCreated.v1"
        PERSONAL_FIELDS = ("sealed_secret",)  # a secret: never printed either
        sealed_secret: str
        legacy_claims: bool

        def apply(self, team: Team) -> None:
            team.sealed_client_user_id_secret = self.sealed_secret
            team.client_user_id_legacy_claims = self.legacy_claims

    class SourcePrioritiesChanged(Event):
        """The order in which providers win one kind of data (domain/teams/
        source_priorities.py), whole; an empty order goes back to the default."""

        TOPIC = "healthledger:Team.SourcePrioritiesChanged.v1"
        data_type: str
        providers: list[str]

        def apply(self, team: Team) -> None:
            team.source_orders = {**(team.source_orders or {}), self.data_type: self.providers}

    # Set by ClientUserIdSecretCreated only. Class-level defaults, so that the attribute
    # dict of a team without a secret (what a snapshot stores) keeps its form.
    sealed_client_user_id_secret: str | None = None
    client_user_id_legacy_claims: bool = True
    # Set by SourcePrioritiesChanged only (a class-level default for the same reason).
    source_orders: dict[str, list[str]] | None = None

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        org_id: UUID,
        name: str,
        region: str,
    ) -> None:
        """From the Created event's fields (eventsourcing passes them all), at `create`
        and on every replay."""
        self.org_id: UUID = org_id
        self.name: str = name
        self.region: str = region
        # The closed-beta features enabled, sorted.
        self.features: tuple[str, ...] = ()
        # Per environment, its EnvironmentSettings as JSON.
        self.settings: dict[str, Any] = default_settings()
        self.deleted_at: datetime | None = None

    @classmethod
    def create(
        cls, ctx: CommandContext, now: datetime, org_id: UUID, name: str, region: str
    ) -> Team:
        if region not in REGIONS:
            raise ValueError(f"region must be one of {', '.join(REGIONS)}")
        return cls.new(ctx, now, id=uuid4(), org_id=org_id, name=name, region=region)

    def rename(self, ctx: CommandContext, now: datetime, name: str) -> None:
        if name != self.name:
            self.record(ctx, now, self.Renamed, name=name)

    def change_settings(
        self, ctx: CommandContext, now: datetime, environment: str, settings: EnvironmentSettings
    ) -> None:
        value = settings.model_dump(mode="json")
        if self.settings.get(environment) != value:
            self.record(ctx, now, self.SettingsChanged, environment=environment, settings=value)

    def delete(self, ctx: CommandContext, now: datetime, deleted_users: int) -> None:
        self.record(ctx, now, self.Deleted, deleted_users=deleted_users)

    def set_feature(self, ctx: CommandContext, now: datetime, feature: str, enabled: bool) -> None:
        if feature not in CLOSED_BETA_FEATURES:
            raise ValueError(f"unknown feature {feature!r}")
        if (feature in self.features) == enabled:
            return
        event_class = self.FeatureEnabled if enabled else self.FeatureDisabled
        self.record(ctx, now, event_class, feature=feature)

    @property
    def source_priorities(self) -> Mapping[str, list[str]]:
        """Per kind of data, the order of providers the team has set (empty: none)."""
        return self.source_orders or {}

    def change_source_priorities(
        self, ctx: CommandContext, now: datetime, data_type: str, providers: list[str]
    ) -> None:
        if data_type not in PRIORITY_DATA_TYPES:
            raise ValueError(f"unknown data type {data_type!r}")
        if list(self.source_priorities.get(data_type, [])) != providers:
            self.record(
                ctx, now, self.SourcePrioritiesChanged, data_type=data_type, providers=providers
            )

    def create_client_user_id_secret(
        self, ctx: CommandContext, now: datetime, sealed_secret: str, *, legacy_claims: bool
    ) -> None:
        if self.sealed_client_user_id_secret is not None:
            raise ValueError("the team already has a client_user_id secret")
        self.record(
            ctx,
            now,
            self.ClientUserIdSecretCreated,
            sealed_secret=sealed_secret,
            legacy_claims=legacy_claims,
        )


class TeamApiKey(Audited):
    TOPIC = "healthledger:TeamApiKey"
    USER_STREAM = None

    class Event(Audited.Event):
        pass

    class Created(Event, Aggregate.Created):
        TOPIC = "healthledger:TeamApiKey.Created.v1"
        team_id: UUID
        environment: str
        region: str
        key_hash: str

    class Revoked(Event):
        TOPIC = "healthledger:TeamApiKey.Revoked.v1"

        def apply(self, key: TeamApiKey) -> None:
            key.revoked_at = self.timestamp

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        team_id: UUID,
        environment: str,
        region: str,
        key_hash: str,
    ) -> None:
        """From the Created event's fields (eventsourcing passes them all), at `issue` and
        on every replay."""
        self.team_id: UUID = team_id
        self.environment: str = environment
        self.region: str = region
        self.key_hash: str = key_hash
        self.revoked_at: datetime | None = None

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
        key_id, plain = new_key(TEAM_API_KEY)
        key = cls.new(
            ctx,
            now,
            id=key_id,
            team_id=team_id,
            environment=environment,
            region=region,
            key_hash=hash_key(plain),
        )
        return key, plain

    def revoke(self, ctx: CommandContext, now: datetime) -> None:
        if self.revoked_at is not None:
            return
        self.record(ctx, now, self.Revoked)
