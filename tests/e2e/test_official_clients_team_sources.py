"""Source priorities, physicians, devices and insurance through both official clients
(issue 34), `vital` 2.1.569 and `junction-api-sdk` 2.0.0, against the team API under
uvicorn with only their base_url changed, on both databases."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import junction
import pytest
import vital
from junction.core.api_error import ApiError as JunctionApiError
from vital.core.api_error import ApiError as VitalApiError

from tests.conftest import CLIENTS_PARSE_ANSWERS, Team

pytestmark = CLIENTS_PARSE_ANSWERS

INSURED = {
    "first_name": "Ada",
    "last_name": "Lane",
    "gender": "female",
    "address": {
        "first_line": "1 Main St",
        "country": "US",
        "zip": "10001",
        "city": "New York",
        "state": "NY",
    },
    "dob": "1990-01-01",
    "email": "ada@example.com",
    "phone_number": "+12125550100",
}


def refusal(call: Callable[[], Any]) -> tuple[int | None, Any]:
    """The status and body of the client's error for the call (which must fail)."""
    try:
        call()
    except (VitalApiError, JunctionApiError) as error:
        return error.status_code, error.body
    raise AssertionError("the call succeeded")


@pytest.fixture(params=["vital", "junction"])
def client(request: pytest.FixtureRequest, base_url: str, team: Team) -> Any:
    """Each official client as customers construct it: the key and our base_url."""
    if request.param == "vital":
        return vital.Vital(api_key=team.key, base_url=base_url, timeout=60)
    return junction.Junction(api_key=team.key, base_url=base_url, timeout=60)


def test_source_priorities_through_the_client(client: Any) -> None:
    assert client.team.get_source_priorities() == []
    # The clients send no body of their own: ours goes as additional body parameters.
    answer = client.team.update_source_priorities(
        request_options={"additional_body_parameters": {"sleep": ["withings", "oura"]}}
    )
    assert [(a["data_type"], a["priority"], a["provider"]) for a in answer] == [
        ("sleep", 1, "withings"),
        ("sleep", 2, "oura"),
    ]
    assert client.team.get_source_priorities(data_type="sleep") == answer
    assert client.team.get_source_priorities(data_type="workouts") == []
    assert refusal(lambda: client.team.update_source_priorities())[0] == 422


def test_physicians_devices_and_insurance_through_the_client(client: Any, team: Team) -> None:
    assert client.team.get_physicians(str(team.team_id)) == []
    assert refusal(lambda: client.team.get_physicians(str(uuid.uuid4())))[0] == 404

    user = client.user.create(client_user_id="sources-devices-1").user_id
    client.link.connect_demo_provider(user_id=user, provider="oura")
    (device,) = client.user.get_devices(user)
    assert (device.provider, device.source_type, device.user_id) == ("oura", "ring", user)
    assert client.user.get_device(user, device.id) == device
    assert refusal(lambda: client.user.get_device(user, str(uuid.uuid4())))[0] == 404

    status, body = refusal(
        lambda: client.user.create_insurance(
            user, payor_code="AETNA", member_id="M-1", relationship="Self", insured=INSURED
        )
    )
    assert status == 400 and "does not bill insurance" in body["detail"]
    assert refusal(lambda: client.user.get_latest_insurance(user))[0] == 400
