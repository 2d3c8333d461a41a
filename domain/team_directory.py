"""Use cases for organizations, teams and team API keys (minimal until the management API)."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from healthledger.domain.context import CommandContext
from healthledger.domain.errors import TeamNotFound
from healthledger.domain.ledger import Clock, Ledger
from healthledger.domain.teams import ENVIRONMENTS, Organization, Team, TeamApiKey


@dataclass(frozen=True)
class IssuedKey:
    key_id: UUID
    team_id: UUID
    plain: str  # shown once; never stored


@dataclass(frozen=True)
class Bootstrap:
    org_id: UUID
    team_id: UUID
    team_api_key: IssuedKey


# The first run's organization has a fixed id: two processes starting on an empty
# database both try to create it, and the event store lets exactly one succeed.
DEFAULT_ORG_ID = UUID("0f6c2d1e-8b0a-5e59-9d53-3c1f4a7b2e10")


class TeamDirectory:
    def __init__(self, ledger: Ledger, clock: Clock) -> None:
        self.ledger = ledger
        self.clock = clock

    def bootstrap(self, ctx: CommandContext) -> Bootstrap:
        """The default organization, team and team API key of a fresh database."""
        now = self.clock()
        org = Organization.found(ctx, now, "Default organization", DEFAULT_ORG_ID)
        team = Team.create(ctx, now, org.id, "Default team", "us")
        key, plain = TeamApiKey.issue(ctx, now, team.id, "sandbox", team.region)
        self.ledger.save(org, team, key)
        return Bootstrap(org.id, team.id, IssuedKey(key.id, team.id, plain))

    def create_organization(self, ctx: CommandContext, name: str) -> UUID:
        org = Organization.found(ctx, self.clock(), name)
        self.ledger.save(org)
        return org.id

    def create_team(self, ctx: CommandContext, org_id: UUID, name: str, region: str) -> UUID:
        if not isinstance(self.ledger.find(org_id), Organization):
            raise TeamNotFound()
        team = Team.create(ctx, self.clock(), org_id, name, region)
        self.ledger.save(team)
        return team.id

    def team(self, team_id: UUID) -> Team:
        team = self.ledger.find(team_id)
        if not isinstance(team, Team):
            raise TeamNotFound()
        return team

    def issue_team_api_key(
        self, ctx: CommandContext, team_id: UUID, environment: str = "sandbox"
    ) -> IssuedKey:
        if environment not in ENVIRONMENTS:
            raise ValueError(f"environment must be one of {', '.join(ENVIRONMENTS)}")
        team = self.team(team_id)
        key, plain = TeamApiKey.issue(ctx, self.clock(), team.id, environment, team.region)
        self.ledger.save(key)
        return IssuedKey(key.id, team.id, plain)

    def revoke_team_api_key(self, ctx: CommandContext, key_id: UUID) -> None:
        key = self.ledger.find(key_id)
        if not isinstance(key, TeamApiKey):
            raise TeamNotFound()
        key.revoke(ctx, self.clock())
        self.ledger.save(key)

    def set_feature(self, ctx: CommandContext, team_id: UUID, feature: str, enabled: bool) -> None:
        team = self.team(team_id)
        team.set_feature(ctx, self.clock(), feature, enabled)
        self.ledger.save(team)
