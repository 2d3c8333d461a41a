"""`team.*` of the official client (issue 34): the team, its link configuration and the
users search, through `vital.Vital` with only its base_url changed, on both databases.
Another team's id is a 404; the answers carry no secret."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest
import vital
from healthledger.adapters.composition import Service
from healthledger.domain.context import CommandContext
from vital.core.api_error import ApiError

from tests.conftest import CLIENTS_PARSE_ANSWERS, Team

pytestmark = CLIENTS_PARSE_ANSWERS


def test_the_team_through_the_official_client(
    api: vital.Vital, team: Team, service: Service, base_url: str
) -> None:
    found = api.team.get(str(team.team_id))
    assert found.id == str(team.team_id)
    assert found.name and found.org_id
    assert found.lab_tests_patient_communication_enabled is False
    service.teams.set_feature(CommandContext.system("test"), team.team_id, "portal_url", True)
    assert api.team.get(str(team.team_id)).lab_tests_patient_communication_enabled is True
    # No secret, key or hash in the answer.
    raw = httpx.get(
        f"{base_url}/v2/team/{team.team_id}", headers={"x-vital-api-key": team.key}
    ).json()
    assert not {"api_key", "api_keys", "webhook_secret", "client_secret"} & set(raw)
    assert team.key not in json.dumps(raw)
    with pytest.raises(ApiError) as other:
        api.team.get(str(uuid.uuid4()))
    assert other.value.status_code == 404


def test_users_search_finds_by_user_id_or_client_user_id(api: vital.Vital) -> None:
    created = api.user.create(client_user_id="team-search-1")
    by_id = api.team.get_user_by_id(query_id=created.user_id)
    assert [u.user_id for u in by_id] == [created.user_id]
    by_client_id = api.team.get_user_by_id(query_id="team-search-1")
    assert [u.client_user_id for u in by_client_id] == ["team-search-1"]
    assert api.team.get_user_by_id(query_id="nobody-here") == []
    assert api.team.get_user_by_id(query_id=str(uuid.uuid4())) == []
    assert api.team.get_user_by_id() == []
    api.user.delete(created.user_id)  # scheduled for deletion: not found any more
    assert api.team.get_user_by_id(query_id=created.user_id) == []


def test_link_config_with_and_without_a_link_token(
    api: vital.Vital, team: Team, base_url: str
) -> None:
    config = api.team.get_link_config()
    assert config["team_id"] == str(team.team_id)
    slugs = [p["slug"] for p in config["providers"]]
    assert "oura" in slugs and config["user_id"] is None
    user = api.user.create(client_user_id="team-link-1")
    token = api.link.token(user_id=user.user_id, provider="oura").link_token
    bound = api.team.get_link_config(vital_link_token=token)
    assert [p["slug"] for p in bound["providers"]] == ["oura"]
    assert bound["user_id"] == user.user_id and bound["expires_at"]
    with pytest.raises(ApiError) as forged:
        api.team.get_link_config(vital_link_token="not-a-token")
    assert forged.value.status_code == 404


def test_team_metrics_through_the_official_client(api: vital.Vital, team: Team) -> None:
    user = api.user.create(client_user_id="team-metrics-1")
    api.link.connect_demo_provider(user_id=user.user_id, provider="oura")
    metrics = api.user.get_team_metrics()
    assert metrics.team_id == str(team.team_id)
    assert (metrics.number_of_users, metrics.number_of_connected_sources) == (1, 1)
    assert metrics.number_of_connected_sources_by_week is not None
    assert metrics.number_of_connected_sources_by_week[-1].all_ == 1
