"""Organizations, teams, team API keys, management keys and custom credentials: their
commands, events, refused transitions and replay, without I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import CredentialsNotPrepared
from healthledger.domain.keys import (
    MANAGEMENT_KEY,
    TEAM_API_KEY,
    key_matches,
    parse_key,
    team_api_key_id,
)
from healthledger.domain.teams.custom_credentials import (
    DELETED,
    PREPARED,
    SET,
    CustomCredentials,
)
from healthledger.domain.teams.management_keys import ORG_ADMIN, TEAM_ADMIN, ManagementKey
from healthledger.domain.teams.teams import (
    BrandInformation,
    EnvironmentSettings,
    Organization,
    Team,
    TeamApiKey,
    default_settings,
)

from tests.unit.stored_form import assert_replays

CTX = CommandContext(actor="management_key:m", request_id="req-1")
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LATER = T0 + timedelta(hours=1)


def test_an_organization_is_renamed_only_to_another_name() -> None:
    given = uuid4()
    org = Organization.found(CTX, T0, "Acme", org_id=given)
    assert (org.id, org.name) == (given, "Acme")
    assert Organization.found(CTX, T0, "Other").id != given
    org.rename(CTX, LATER, "Acme")
    org.rename(CTX, LATER, "Acme Health")
    assert org.name == "Acme Health"
    events = assert_replays(org)
    assert [type(e).__name__ for e in events] == ["Created", "Renamed"]


def test_a_team_needs_a_known_region_and_starts_with_default_settings() -> None:
    with pytest.raises(ValueError, match="region"):
        Team.create(CTX, T0, uuid4(), "Team", "mars")
    team = Team.create(CTX, T0, uuid4(), "Team", "eu")
    assert (team.region, team.features, team.deleted_at) == ("eu", (), None)
    assert team.settings == default_settings()
    assert set(team.settings) == {"sandbox", "production"}
    assert_replays(team)


def test_team_settings_change_per_environment_and_repeat_as_no_ops() -> None:
    team = Team.create(CTX, T0, uuid4(), "Team", "us")
    earlier = team.collect_events()
    branded = EnvironmentSettings(
        logo_url="https://acme.example/logo.png",  # type: ignore[arg-type]
        brand_information=BrandInformation(company_name="Acme", brand_color="#00FF00"),
    )
    team.change_settings(CTX, LATER, "production", branded)
    team.change_settings(CTX, LATER, "production", branded)
    team.change_settings(CTX, LATER, "sandbox", EnvironmentSettings())
    assert team.settings["production"] == branded.model_dump(mode="json")
    assert team.settings["sandbox"] == default_settings()["sandbox"]
    events = assert_replays(team, earlier)
    assert [type(e).__name__ for e in events] == ["SettingsChanged"]


def test_a_logo_is_required_with_a_company_name() -> None:
    with pytest.raises(ValueError, match="logo_url is required"):
        EnvironmentSettings(brand_information=BrandInformation(company_name="Acme"))


def test_features_are_known_sorted_and_toggled_once() -> None:
    team = Team.create(CTX, T0, uuid4(), "Team", "eu")
    earlier = team.collect_events()
    with pytest.raises(ValueError, match="unknown feature"):
        team.set_feature(CTX, LATER, "teleportation", True)
    team.set_feature(CTX, LATER, "portal_url", True)
    team.set_feature(CTX, LATER, "demographics", True)
    team.set_feature(CTX, LATER, "demographics", True)
    assert team.features == ("demographics", "portal_url")
    team.set_feature(CTX, LATER, "portal_url", False)
    team.set_feature(CTX, LATER, "portal_url", False)
    assert team.features == ("demographics",)
    team.rename(CTX, LATER, "Team")
    team.rename(CTX, LATER, "Renamed")
    team.delete(CTX, LATER, deleted_users=2)
    assert (team.name, team.deleted_at) == ("Renamed", LATER)
    events = assert_replays(team, earlier)
    assert [type(e).__name__ for e in events] == [
        "FeatureEnabled",
        "FeatureEnabled",
        "FeatureDisabled",
        "Renamed",
        "Deleted",
    ]


def test_a_team_api_key_is_known_by_its_text_and_revoked_once() -> None:
    team_id = uuid4()
    key, plain = TeamApiKey.issue(CTX, T0, team_id, "sandbox", "eu")
    assert parse_key(plain) == (TEAM_API_KEY, key.id) and team_api_key_id(plain) == key.id
    assert key_matches(plain, key.key_hash) and plain not in key.key_hash
    assert (key.team_id, key.environment, key.region, key.revoked_at) == (
        team_id,
        "sandbox",
        "eu",
        None,
    )
    key.revoke(CTX, LATER)
    key.revoke(CTX, LATER + timedelta(hours=1))
    assert key.revoked_at == LATER
    events = assert_replays(key)
    assert [type(e).__name__ for e in events] == ["Created", "Revoked"]


def test_management_keys_have_a_role_and_only_team_keys_are_bound_to_teams() -> None:
    org_id, a = uuid4(), uuid4()
    with pytest.raises(ValueError, match="role"):
        ManagementKey.issue(CTX, T0, org_id=org_id, role="root", team_ids=[], label="x")
    with pytest.raises(ValueError, match="at least one team"):
        ManagementKey.issue(CTX, T0, org_id=org_id, role=TEAM_ADMIN, team_ids=[], label="x")
    with pytest.raises(ValueError, match="an org key to none"):
        ManagementKey.issue(CTX, T0, org_id=org_id, role=ORG_ADMIN, team_ids=[a], label="x")
    org_key, plain = ManagementKey.issue(
        CTX, T0, org_id=org_id, role=ORG_ADMIN, team_ids=[], label="root"
    )
    assert parse_key(plain) == (MANAGEMENT_KEY, org_key.id)
    with pytest.raises(ValueError, match="only a team_admin key"):
        org_key.bind_teams(CTX, LATER, [a])
    assert_replays(org_key)


def test_a_team_key_binds_a_new_set_of_teams_relabels_and_is_revoked_once() -> None:
    a, b = sorted([uuid4(), uuid4()])
    key, _ = ManagementKey.issue(
        CTX, T0, org_id=uuid4(), role=TEAM_ADMIN, team_ids=[b, a, b], label="ops"
    )
    assert key.team_ids == (a, b)
    with pytest.raises(ValueError, match="at least one team"):
        key.bind_teams(CTX, LATER, [])
    key.bind_teams(CTX, LATER, [b, a])  # the same set: nothing
    key.bind_teams(CTX, LATER, [b])
    assert key.team_ids == (b,)
    key.relabel(CTX, LATER, "ops")
    key.relabel(CTX, LATER, "support")
    key.revoke(CTX, LATER)
    key.revoke(CTX, LATER + timedelta(hours=1))
    assert (key.label, key.revoked_at) == ("support", LATER)
    events = assert_replays(key)
    assert [type(e).__name__ for e in events] == ["Created", "TeamsBound", "Relabeled", "Revoked"]


def test_custom_credentials_are_prepared_set_deleted_and_prepared_again() -> None:
    team_id = uuid4()
    creds = CustomCredentials.prepare_new(CTX, T0, team_id, "oura")
    assert creds.id == CustomCredentials.id_for(team_id, "oura")
    assert creds.id != CustomCredentials.id_for(team_id, "whoop")
    assert (creds.status, creds.client_id, creds.sealed_client_secret) == (PREPARED, None, None)
    creds.prepare_again(CTX, LATER)  # not deleted: nothing
    creds.set(CTX, LATER, "client-1", "v1.secret")
    assert (creds.status, creds.client_id, creds.sealed_client_secret) == (
        SET,
        "client-1",
        "v1.secret",
    )
    creds.delete(CTX, LATER)
    creds.delete(CTX, LATER)
    assert (creds.status, creds.client_id, creds.sealed_client_secret) == (DELETED, None, None)
    with pytest.raises(CredentialsNotPrepared):
        creds.set(CTX, LATER, "client-2", "v1.other")
    creds.prepare_again(CTX, LATER)
    assert creds.status == PREPARED
    events = assert_replays(creds)
    assert [type(e).__name__ for e in events] == ["Created", "Set", "Deleted", "Reprepared"]
