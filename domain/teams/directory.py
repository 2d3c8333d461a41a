"""Use cases for organizations, teams, their keys, switches and custom credentials."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import (
    ConcurrentChange,
    CredentialsNotFound,
    CredentialsNotPrepared,
    InvalidRequest,
    KeyNotFound,
    OrganizationNotFound,
    TeamNotFound,
    UserNotFound,
    UserScheduledForDeletion,
)
from healthledger.domain.ledger import Clock, Ledger
from healthledger.domain.personal_data import PersonalDataVault
from healthledger.domain.teams.client_user_id_secrets import sealed_new_secret
from healthledger.domain.teams.custom_credentials import DELETED, CustomCredentials
from healthledger.domain.teams.management_keys import ORG_ADMIN, TEAM_ADMIN, ManagementKey
from healthledger.domain.teams.source_priorities import checked_order
from healthledger.domain.teams.teams import (
    ENVIRONMENTS,
    REGIONS,
    EnvironmentSettings,
    Organization,
    Team,
    TeamApiKey,
)
from healthledger.domain.users.lifecycle import UserLifecycle

# The first run's organization has a fixed id: two processes starting on an empty
# database both try to create it, and the event store lets exactly one succeed.
DEFAULT_ORG_ID = UUID("0f6c2d1e-8b0a-5e59-9d53-3c1f4a7b2e10")
# The aggregates a team's deletion changes beside the team (ctx, now, team_id), recorded
# on and not saved: the deletion saves them with the team.
ChangedWithDeletion = Callable[[CommandContext, datetime, UUID], Sequence[Aggregate]]


@dataclass(frozen=True)
class IssuedKey:
    key_id: UUID
    team_id: UUID | None
    plain: str  # shown once; never stored


@dataclass(frozen=True)
class Bootstrap:
    org_id: UUID
    team_id: UUID
    team_api_key: IssuedKey
    management_key: IssuedKey


class TeamDirectory:
    def __init__(
        self,
        ledger: Ledger,
        clock: Clock,
        *,
        vault: PersonalDataVault | None = None,
        users: UserLifecycle | None = None,
        live_user_ids: Callable[[UUID], list[UUID]] | None = None,
        provider_slugs: Collection[str] = (),
    ) -> None:
        self.ledger = ledger
        self.clock = clock
        self.vault = vault
        self.users = users
        self.live_user_ids = live_user_ids
        self.provider_slugs = frozenset(provider_slugs)
        # What else a team's deletion changes, saved with its Team.Deleted in one
        # transaction: its unmatched lab results still waiting for a decision, resolved
        # (domain/labs/unmatched_results.py; set once the labs are built).
        self.changed_with_deletion: ChangedWithDeletion = lambda ctx, now, team_id: ()

    # -- first run ----------------------------------------------------------------------

    def bootstrap(self, ctx: CommandContext) -> Bootstrap:
        """The default organization, team, team API key and org management key."""
        now = self.clock()
        org = Organization.found(ctx, now, "Default organization", DEFAULT_ORG_ID)
        team = Team.create(ctx, now, org.id, "Default team", "us")
        self._give_client_user_id_secret(ctx, now, team)
        key, plain = TeamApiKey.issue(ctx, now, team.id, "sandbox", team.region)
        mkey, mplain = ManagementKey.issue(
            ctx, now, org_id=org.id, role=ORG_ADMIN, team_ids=[], label="first-run org key"
        )
        self.ledger.save(org, team, key, mkey)
        return Bootstrap(
            org.id,
            team.id,
            IssuedKey(key.id, team.id, plain),
            IssuedKey(mkey.id, None, mplain),
        )

    # -- organizations ------------------------------------------------------------------

    def create_organization(self, ctx: CommandContext, name: str) -> UUID:
        org = Organization.found(ctx, self.clock(), name)
        self.ledger.save(org)
        return org.id

    def organization(self, org_id: UUID) -> Organization:
        org = self.ledger.find(org_id)
        if not isinstance(org, Organization):
            raise OrganizationNotFound()
        return org

    def rename_organization(self, ctx: CommandContext, org_id: UUID, name: str) -> None:
        org = self.organization(org_id)
        org.rename(ctx, self.clock(), name)
        self._save(org)

    # -- teams --------------------------------------------------------------------------

    def create_team(
        self,
        ctx: CommandContext,
        org_id: UUID,
        name: str,
        region: str,
        settings: Mapping[str, EnvironmentSettings] | None = None,
    ) -> UUID:
        self.organization(org_id)
        if region not in REGIONS:
            raise InvalidRequest(f"region must be one of {', '.join(REGIONS)}.", "region")
        now = self.clock()
        team = Team.create(ctx, now, org_id, name, region)
        for environment, value in (settings or {}).items():
            team.change_settings(ctx, now, environment, value)
        self._give_client_user_id_secret(ctx, now, team)
        self._save(team)
        return team.id

    def team(self, team_id: UUID, org_id: UUID | None = None) -> Team:
        """A live team (of `org_id` when given); anything else does not exist."""
        team = self.ledger.find(team_id)
        if (
            not isinstance(team, Team)
            or team.deleted_at is not None
            or (org_id is not None and team.org_id != org_id)
        ):
            raise TeamNotFound()
        return team

    def update_team(
        self,
        ctx: CommandContext,
        org_id: UUID,
        team_id: UUID,
        *,
        name: str | None = None,
        settings: Mapping[str, EnvironmentSettings] | None = None,
    ) -> Team:
        team = self.team(team_id, org_id)
        now = self.clock()
        if name is not None:
            team.rename(ctx, now, name)
        for environment, value in (settings or {}).items():
            team.change_settings(ctx, now, environment, value)
        self._save(team)
        return team

    def change_source_priorities(
        self,
        ctx: CommandContext,
        team_id: UUID,
        orders: Mapping[str, Sequence[str]],
        known: Callable[[str], bool],
    ) -> Team:
        """Set the team's order of providers for each kind of data in `orders` (an empty
        order: back to the default), all in one save; a provider `known` refuses, or one
        listed twice, is an InvalidRequest naming the kind."""
        team = self.team(team_id)
        now = self.clock()
        for data_type, providers in orders.items():
            try:
                order = checked_order(providers, known)
            except ValueError as error:
                raise InvalidRequest(f"{data_type}: {error}.", data_type) from None
            team.change_source_priorities(ctx, now, data_type, order)
        self._save(team)
        return team

    def delete_team(self, ctx: CommandContext, org_id: UUID, team_id: UUID) -> int:
        """Delete the team: its users go through their own lifecycle (grace period, then
        erasure), its keys stop working. Returns how many users were deleted."""
        team = self.team(team_id, org_id)
        assert self.users is not None and self.live_user_ids is not None
        # The team goes first: its keys stop working at once, so no user can be added
        # while its users are being deleted. Users a crash leaves live in a deleted team
        # are deleted by the scheduler's sweep (`delete_team_users`), so none is missed.
        now = self.clock()
        team.delete(ctx, now, len(self.live_user_ids(team_id)))
        self._save(team, *self.changed_with_deletion(ctx, now, team_id))
        return self.delete_team_users(ctx, team_id)

    def resolve_left_with_deleted_team(self, ctx: CommandContext, team_id: UUID) -> int:
        """What a deleted team's deletion changes, for what was recorded after it read
        them (the scheduler's sweep): returns how many were changed."""
        changed = self.changed_with_deletion(ctx, self.clock(), team_id)
        if changed:
            self._save(*changed)
        return len(changed)

    def delete_team_users(self, ctx: CommandContext, team_id: UUID) -> int:
        """Delete (grace period, then erasure) every live user of a deleted team."""
        assert self.users is not None and self.live_user_ids is not None
        deleted = 0
        for user_id in self.live_user_ids(team_id):
            try:
                self.users.delete_user(ctx, team_id, user_id)
                deleted += 1
            except (UserNotFound, UserScheduledForDeletion):
                continue  # deleted meanwhile by another request
        return deleted

    def set_feature(
        self,
        ctx: CommandContext,
        team_id: UUID,
        feature: str,
        enabled: bool,
        org_id: UUID | None = None,
    ) -> None:
        team = self.team(team_id, org_id)
        team.set_feature(ctx, self.clock(), feature, enabled)
        self._save(team)

    # -- team API keys --------------------------------------------------------------------

    def issue_team_api_key(
        self,
        ctx: CommandContext,
        team_id: UUID,
        environment: str = "sandbox",
        region: str | None = None,
        org_id: UUID | None = None,
    ) -> IssuedKey:
        if environment not in ENVIRONMENTS:
            raise InvalidRequest(
                f"environment must be one of {', '.join(ENVIRONMENTS)}.", "env", "path"
            )
        team = self.team(team_id, org_id)
        if region is not None and region != team.region:
            raise InvalidRequest(f"the team's region is {team.region}.", "region", "path")
        key, plain = TeamApiKey.issue(ctx, self.clock(), team.id, environment, team.region)
        self.ledger.save(key)
        return IssuedKey(key.id, team.id, plain)

    def revoke_team_api_key(
        self,
        ctx: CommandContext,
        key_id: UUID,
        team_id: UUID | None = None,
        environment: str | None = None,
        region: str | None = None,
    ) -> None:
        key = self.ledger.find(key_id)
        if (
            not isinstance(key, TeamApiKey)
            or (team_id is not None and key.team_id != team_id)
            or (environment is not None and key.environment != environment)
            or (region is not None and key.region != region)
        ):
            raise KeyNotFound()
        key.revoke(ctx, self.clock())
        self._save(key)

    # -- management keys ------------------------------------------------------------------

    def issue_management_key(
        self,
        ctx: CommandContext,
        org_id: UUID,
        *,
        role: str,
        team_ids: list[UUID],
        label: str,
    ) -> IssuedKey:
        self.organization(org_id)
        self._check_teams_of(org_id, team_ids)
        try:
            key, plain = ManagementKey.issue(
                ctx, self.clock(), org_id=org_id, role=role, team_ids=team_ids, label=label
            )
        except ValueError as exc:
            raise InvalidRequest(str(exc), "team_role_bindings") from exc
        self.ledger.save(key)
        return IssuedKey(key.id, None, plain)

    def management_key(self, org_id: UUID, key_id: UUID) -> ManagementKey:
        """A live (unrevoked) management key of the organization."""
        key = self.ledger.find(key_id)
        if not isinstance(key, ManagementKey) or key.org_id != org_id or key.revoked_at:
            raise KeyNotFound()
        return key

    def update_management_key(
        self,
        ctx: CommandContext,
        org_id: UUID,
        key_id: UUID,
        *,
        label: str | None = None,
        team_ids: list[UUID] | None = None,
    ) -> ManagementKey:
        key = self.management_key(org_id, key_id)
        now = self.clock()
        if label is not None:
            key.relabel(ctx, now, label)
        if team_ids is not None:
            self._check_teams_of(org_id, team_ids)
            try:
                key.bind_teams(ctx, now, team_ids)
            except ValueError as exc:
                raise InvalidRequest(str(exc), "team_role_bindings") from exc
        self._save(key)
        return key

    def revoke_management_key(self, ctx: CommandContext, org_id: UUID, key_id: UUID) -> None:
        key = self.management_key(org_id, key_id)
        key.revoke(ctx, self.clock())
        self._save(key)

    # -- custom provider credentials ------------------------------------------------------

    def prepare_credentials(
        self, ctx: CommandContext, team_id: UUID, provider: str, org_id: UUID | None = None
    ) -> CustomCredentials:
        self.team(team_id, org_id)
        self._check_provider(provider)
        creds = self.ledger.find(CustomCredentials.id_for(team_id, provider))
        if isinstance(creds, CustomCredentials):
            creds.prepare_again(ctx, self.clock())
        else:
            creds = CustomCredentials.prepare_new(ctx, self.clock(), team_id, provider)
        self._save(creds)
        return creds

    def set_credentials(
        self,
        ctx: CommandContext,
        team_id: UUID,
        provider: str,
        client_id: str,
        client_secret: str,
        org_id: UUID | None = None,
    ) -> CustomCredentials:
        self.team(team_id, org_id)
        self._check_provider(provider)
        creds = self.ledger.find(CustomCredentials.id_for(team_id, provider))
        if not isinstance(creds, CustomCredentials):
            raise CredentialsNotPrepared()
        assert self.vault is not None
        # Sealed with the team's own data key: the secret never leaves in clear.
        sealed = self.vault.seal(team_id, {"client_secret": client_secret})
        creds.set(ctx, self.clock(), client_id, sealed)
        self._save(creds)
        return creds

    def delete_credentials(
        self, ctx: CommandContext, team_id: UUID, provider: str, org_id: UUID | None = None
    ) -> None:
        self.team(team_id, org_id)
        self._check_provider(provider)
        creds = self.ledger.find(CustomCredentials.id_for(team_id, provider))
        if not isinstance(creds, CustomCredentials) or creds.status == DELETED:
            raise CredentialsNotFound()
        creds.delete(ctx, self.clock())
        self._save(creds)

    # -- helpers --------------------------------------------------------------------------

    def _give_client_user_id_secret(self, ctx: CommandContext, now: datetime, team: Team) -> None:
        """A new team gets its client_user_id secret with its creation: it never holds a
        claim made before digests (domain/teams/client_user_id_secrets.py), so its creates
        never look for one. Without a vault, the secret is made on first need."""
        if self.vault is not None:
            sealed = sealed_new_secret(self.vault, team.id)
            team.create_client_user_id_secret(ctx, now, sealed, legacy_claims=False)

    def _check_provider(self, provider: str) -> None:
        if provider not in self.provider_slugs:
            raise InvalidRequest("Unknown provider slug.", "provider", "path")

    def _check_teams_of(self, org_id: UUID, team_ids: list[UUID]) -> None:
        for team_id in team_ids:
            try:
                self.team(team_id, org_id)
            except TeamNotFound:
                # Another organization's team is as unknown as a missing one.
                raise InvalidRequest(
                    "team_role_bindings names a team that is not in this organization.",
                    "team_role_bindings",
                ) from None

    def _save(self, *aggregates: Aggregate) -> None:
        try:
            self.ledger.save(*aggregates)
        except IntegrityError as exc:
            raise ConcurrentChange() from exc


__all__ = ["ORG_ADMIN", "TEAM_ADMIN", "Bootstrap", "IssuedKey", "TeamDirectory"]
