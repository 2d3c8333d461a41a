"""A user's devices and insurance (issue 34; `user.get_devices`, `user.get_device`,
`user.create_insurance`, `user.get_latest_insurance`) on both databases: a device per live
connection with a stable id (keyed by the user's key, ADR 0057), gone when its connection
is deregistered and present as of an instant before; an erased user's, as of before its
erasure, with no id one could test a maker against; another team's user is a 404, a
malformed id a 422; insurance is a 400 saying it is not billed here, after the user is
checked."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from uuid import UUID

from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.domain.connections.summary_ids import ERASED_ID, legacy_device_id
from healthledger.domain.personal_data import ERASED_PLACEHOLDER

from tests.conftest import Team, create_user
from tests.integration.api_calls import connect


def test_a_device_per_connection_with_a_stable_id(
    service: Service, client: TestClient, team: Team, other_team: Team
) -> None:
    user = create_user(client, team, "devices-1")["user_id"]
    assert client.get(f"/v2/user/{user}/device", headers=team.headers).json() == []
    connect(client, team, user, "oura")
    connect(client, team, user, "withings")
    devices = client.get(f"/v2/user/{user}/device", headers=team.headers).json()
    assert sorted((d["provider"], d["source_type"], d["device_manufacturer"]) for d in devices) == [
        ("oura", "ring", "Oura"),
        ("withings", "multiple_sources", "Withings"),
    ]
    assert {d["user_id"] for d in devices} == {user}
    assert all(d["device_model"] is None and d["device_id"] is None for d in devices)
    again = client.get(f"/v2/user/{user}/device", headers=team.headers).json()
    assert sorted(d["id"] for d in again) == sorted(d["id"] for d in devices)
    # Keyed by the user's key: not the uuid5 of the user and the maker.
    cipher = service.key_store.cipher(UUID(user))
    assert cipher is not None
    for device in devices:
        assert device["id"] == str(cipher.summary_ids.device(device["provider"]))
        assert device["id"] != str(legacy_device_id(UUID(user), device["provider"]))
    oura = next(d for d in devices if d["provider"] == "oura")
    one = client.get(f"/v2/user/{user}/device/{oura['id']}", headers=team.headers)
    assert (one.status_code, one.json()) == (200, oura)

    before = datetime.now(UTC)
    time.sleep(0.01)
    gone = client.delete(f"/v2/user/{user}/oura", headers=team.headers)
    assert gone.status_code == 200, gone.text
    left = client.get(f"/v2/user/{user}/device", headers=team.headers).json()
    assert [d["provider"] for d in left] == ["withings"]
    missing = client.get(f"/v2/user/{user}/device/{oura['id']}", headers=team.headers)
    assert missing.status_code == 404 and missing.json() == {"detail": "Device not found."}
    then = client.get(
        f"/v2/user/{user}/device", params={"as_of": before.isoformat()}, headers=team.headers
    )
    assert sorted(d["id"] for d in then.json()) == sorted(d["id"] for d in devices)

    # Another team's user, or its device: 404; malformed ids: 422 naming the parameter.
    for path in (f"/v2/user/{user}/device", f"/v2/user/{user}/device/{oura['id']}"):
        assert client.get(path, headers=other_team.headers).status_code == 404
    bad = client.get(f"/v2/user/{user}/device/not-a-device", headers=team.headers)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["path", "device_id"]
    assert client.get(f"/v2/user/{user}/device").status_code == 401


def test_an_erased_users_devices_as_of_before_have_no_id_to_test_a_maker_against(
    service: Service, client: TestClient, team: Team
) -> None:
    start = datetime.now(UTC) + timedelta(hours=1)
    with freeze_time(start) as frozen:
        user = create_user(client, team, "devices-erased")["user_id"]
        connect(client, team, user, "freestyle_libre")
        frozen.tick(60)
        before = datetime.now(UTC)
        (device,) = client.get(f"/v2/user/{user}/device", headers=team.headers).json()
        assert device["provider"] == "freestyle_libre" and UUID(device["id"]) != ERASED_ID
        frozen.tick(60)
        assert client.delete(f"/v2/user/{user}", headers=team.headers).status_code == 200
        frozen.tick(service.settings.grace_period.total_seconds() + 60)
        assert service.jobs.sweep_erasures() == 1
        then = client.get(
            f"/v2/user/{user}/device", params={"as_of": before.isoformat()}, headers=team.headers
        )
    # The device it had then, its maker erased, and its id none that can be derived (the
    # key is gone): not one of a placeholder's, nor a guessable one.
    assert then.status_code == 200, then.text
    (erased,) = then.json()
    assert (erased["provider"], erased["id"]) == (ERASED_PLACEHOLDER, str(ERASED_ID))


def test_insurance_is_not_billed_here_and_another_teams_user_is_not_found(
    client: TestClient, team: Team, other_team: Team
) -> None:
    user = create_user(client, team, "insurance-1")["user_id"]
    body = {"payor_code": "AETNA", "member_id": "M-1", "relationship": "Self"}
    created = client.post(f"/v2/user/{user}/insurance", json=body, headers=team.headers)
    latest = client.get(f"/v2/user/{user}/insurance/latest", headers=team.headers)
    for answer in (created, latest):
        assert answer.status_code == 400, answer.text
        assert "does not bill insurance" in answer.json()["detail"]
        assert "M-1" not in answer.text
    theirs = client.post(f"/v2/user/{user}/insurance", json=body, headers=other_team.headers)
    assert theirs.status_code == 404
    assert (
        client.get(f"/v2/user/{user}/insurance/latest", headers=other_team.headers).status_code
        == 404
    )
