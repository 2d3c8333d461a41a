"""The teams context's read models: organizations, teams, team API keys, management keys
and custom credentials."""

from __future__ import annotations

from typing import Any

from healthledger.adapters.persistence.engine.schema import (
    custom_credentials,
    management_keys,
    organizations,
    team_api_keys,
    teams,
    webhook_endpoints,
)
from healthledger.adapters.persistence.projections import event_destinations, handles
from healthledger.adapters.persistence.queries.verified_keys import announce_key_change
from healthledger.domain.teams.custom_credentials import DELETED, PREPARED, SET, CustomCredentials
from healthledger.domain.teams.management_keys import ManagementKey
from healthledger.domain.teams.teams import Organization, Team, TeamApiKey, default_settings
from sqlalchemy import Connection, delete, insert, select, update

# -- organizations and teams ----------------------------------------------------------


@handles(Organization.Created)
def organization_created(conn: Connection, e: Organization.Created) -> None:
    conn.execute(
        insert(organizations).values(org_id=e.originator_id, name=e.name, created_on=e.timestamp)
    )


@handles(Organization.Renamed)
def organization_renamed(conn: Connection, e: Organization.Renamed) -> None:
    conn.execute(
        update(organizations).where(organizations.c.org_id == e.originator_id).values(name=e.name)
    )


@handles(Team.Created)
def team_created(conn: Connection, e: Team.Created) -> None:
    conn.execute(
        insert(teams).values(
            team_id=e.originator_id,
            org_id=e.org_id,
            name=e.name,
            name_folded=e.name.casefold(),
            region=e.region,
            features=[],
            settings=default_settings(),
            created_on=e.timestamp,
        )
    )


@handles(Team.Renamed)
def team_renamed(conn: Connection, e: Team.Renamed) -> None:
    conn.execute(
        update(teams)
        .where(teams.c.team_id == e.originator_id)
        .values(name=e.name, name_folded=e.name.casefold())
    )


@handles(Team.SettingsChanged)
def team_settings_changed(conn: Connection, e: Team.SettingsChanged) -> None:
    current = conn.execute(
        select(teams.c.settings).where(teams.c.team_id == e.originator_id)
    ).scalar_one()
    conn.execute(
        update(teams)
        .where(teams.c.team_id == e.originator_id)
        .values(settings={**current, e.environment: e.settings})
    )


@handles(Team.SourcePrioritiesChanged)
def team_source_priorities_changed(conn: Connection, e: Team.SourcePrioritiesChanged) -> None:
    current = conn.execute(
        select(teams.c.source_priorities).where(teams.c.team_id == e.originator_id)
    ).scalar_one()
    conn.execute(
        update(teams)
        .where(teams.c.team_id == e.originator_id)
        .values(source_priorities={**(current or {}), e.data_type: e.providers})
    )


@handles(Team.FeatureEnabled, Team.FeatureDisabled)
def team_features_changed(conn: Connection, e: Any) -> None:
    current = conn.execute(
        select(teams.c.features).where(teams.c.team_id == e.originator_id)
    ).scalar_one()
    features = set(current)
    if isinstance(e, Team.FeatureEnabled):
        features.add(e.feature)
    else:
        features.discard(e.feature)
    conn.execute(
        update(teams).where(teams.c.team_id == e.originator_id).values(features=sorted(features))
    )


@handles(Team.Deleted)
def team_deleted(conn: Connection, e: Team.Deleted) -> None:
    conn.execute(
        update(teams).where(teams.c.team_id == e.originator_id).values(deleted_at=e.timestamp)
    )
    # Its keys stop working in every process when this commits (ADR 0042).
    announce_key_change(conn)
    # Its custom credentials go with it (their secrets' key is destroyed with it too).
    conn.execute(
        update(custom_credentials)
        .where(custom_credentials.c.team_id == e.originator_id)
        .values(status=DELETED, client_id=None, sealed_client_secret=None)
    )
    # So do its webhook endpoints: nothing is delivered for a deleted team.
    conn.execute(delete(webhook_endpoints).where(webhook_endpoints.c.team_id == e.originator_id))
    # And its event destinations (their secrets' key is destroyed with it).
    event_destinations.team_deleted(conn, e)


# -- team API keys --------------------------------------------------------------------


@handles(TeamApiKey.Created)
def team_api_key_created(conn: Connection, e: TeamApiKey.Created) -> None:
    conn.execute(
        insert(team_api_keys).values(
            key_id=e.originator_id,
            team_id=e.team_id,
            environment=e.environment,
            region=e.region,
            key_hash=e.key_hash,
            created_on=e.timestamp,
        )
    )


@handles(TeamApiKey.Revoked)
def team_api_key_revoked(conn: Connection, e: TeamApiKey.Revoked) -> None:
    conn.execute(
        update(team_api_keys)
        .where(team_api_keys.c.key_id == e.originator_id)
        .values(revoked_at=e.timestamp)
    )
    # Every process forgets the keys it verified when this commits (ADR 0042).
    announce_key_change(conn)


# -- management keys ------------------------------------------------------------------


@handles(ManagementKey.Created)
def management_key_created(conn: Connection, e: ManagementKey.Created) -> None:
    conn.execute(
        insert(management_keys).values(
            key_id=e.originator_id,
            org_id=e.org_id,
            role=e.role,
            team_ids=[str(t) for t in e.team_ids],
            label=e.label,
            key_hash=e.key_hash,
            created_on=e.timestamp,
        )
    )


def update_management_key(conn: Connection, e: Any, **values: Any) -> None:
    conn.execute(
        update(management_keys).where(management_keys.c.key_id == e.originator_id).values(**values)
    )


@handles(ManagementKey.Relabeled)
def management_key_relabeled(conn: Connection, e: ManagementKey.Relabeled) -> None:
    update_management_key(conn, e, label=e.label)


@handles(ManagementKey.TeamsBound)
def management_key_teams_bound(conn: Connection, e: ManagementKey.TeamsBound) -> None:
    update_management_key(conn, e, team_ids=[str(t) for t in e.team_ids])


@handles(ManagementKey.Revoked)
def management_key_revoked(conn: Connection, e: ManagementKey.Revoked) -> None:
    update_management_key(conn, e, revoked_at=e.timestamp)


# -- custom credentials ---------------------------------------------------------------


@handles(CustomCredentials.Created)
def credentials_prepared(conn: Connection, e: CustomCredentials.Created) -> None:
    conn.execute(
        insert(custom_credentials).values(
            credentials_id=e.originator_id,
            team_id=e.team_id,
            provider=e.provider,
            status=PREPARED,
            updated_at=e.timestamp,
        )
    )


@handles(CustomCredentials.Reprepared)
def credentials_reprepared(conn: Connection, e: Any) -> None:
    update_credentials(conn, e, status=PREPARED, client_id=None, sealed_client_secret=None)


@handles(CustomCredentials.Set)
def credentials_set(conn: Connection, e: CustomCredentials.Set) -> None:
    update_credentials(
        conn, e, status=SET, client_id=e.client_id, sealed_client_secret=e.sealed_client_secret
    )


@handles(CustomCredentials.Deleted)
def credentials_deleted(conn: Connection, e: Any) -> None:
    update_credentials(conn, e, status=DELETED, client_id=None, sealed_client_secret=None)


def update_credentials(conn: Connection, e: Any, **values: Any) -> None:
    conn.execute(
        update(custom_credentials)
        .where(custom_credentials.c.credentials_id == e.originator_id)
        .values(updated_at=e.timestamp, **values)
    )
