"""A user's devices and insurance (issue 34; `user.get_devices`, `user.get_device`,
`user.create_insurance`, `user.get_latest_insurance`) on both databases: a device per live
connection with a stable id, gone when its connection is deregistered and present as of
an instant before; another team's user is a 404, a malformed id a 422; insurance is a 400
saying it is not billed here, after the user is checked."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from fastapi.testclient import TestClient

from tests.conftest import Team, create_user
from tests.integration.api_calls import connect


def test_a_device_per_connection_with_a_stable_id(
    client: TestClient, team: Team, other_team: Team
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
