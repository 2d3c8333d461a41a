"""The patient of `POST /v3/order` (issue 30 §4): the address's zip code is checked as
area info checks one (five digits or ZIP+4, an existing US zip code), and names, city,
state and lines must say something. A refusal is a 422 naming the field, with nothing
recorded. On both databases."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.engine.schema import orders
from sqlalchemy import func, select

from tests.conftest import Team
from tests.integration import test_orders
from tests.integration.test_orders import ADDRESS, PATIENT, place

# The order tests' fixtures: their settings, a team, a user with demographics.
settings = test_orders.settings
team = test_orders.team
user = test_orders.user

BAD_ZIP = "zip_code must be a US zip code: five digits, or ZIP+4."
UNKNOWN_ZIP = "zip_code is well-formed but is not an existing US zip code."
BLANK = "Value error, must not be blank"

# (the patient_address's changes, the field named, the message)
BAD_ADDRESSES: list[tuple[dict[str, Any], str, str]] = [
    ({"zip": "../../etc/passwd"}, "zip_code", BAD_ZIP),
    ({"zip": "' OR 1=1 --"}, "zip_code", BAD_ZIP),
    ({"zip": "2037"}, "zip_code", BAD_ZIP),
    ({"zip": "203745"}, "zip_code", BAD_ZIP),
    ({"zip": " 20374"}, "zip_code", BAD_ZIP),
    ({"zip": "20374-12"}, "zip_code", BAD_ZIP),
    ({"zip": "SW1Y 4JH"}, "zip_code", BAD_ZIP),
    ({"zip": "\uff12\uff10\uff13\uff17\uff14"}, "zip_code", BAD_ZIP),  # full-width digits
    ({"zip": " "}, "zip_code", BLANK),
    ({"zip": "00000"}, "zip_code", UNKNOWN_ZIP),
    ({"zip": "99999-0000"}, "zip_code", UNKNOWN_ZIP),
    ({"city": " "}, "city", BLANK),
    ({"city": "\u3000"}, "city", BLANK),
    ({"state": "  "}, "state", BLANK),
    ({"first_line": " "}, "first_line", BLANK),
    ({"receiver_name": " "}, "receiver_name", BLANK),
]
BAD_DETAILS: list[tuple[dict[str, Any], str]] = [
    ({"first_name": " "}, "first_name"),
    ({"last_name": "\u00a0"}, "last_name"),  # a no-break space
    ({"gender": "   "}, "gender"),
]


def _count(service: Service) -> int:
    with service.db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(orders)).scalar_one())


@pytest.mark.parametrize(("changes", "field", "message"), BAD_ADDRESSES)
def test_a_bad_patient_address_is_a_clear_422(
    client: TestClient,
    team: Team,
    user: str,
    service: Service,
    changes: dict[str, Any],
    field: str,
    message: str,
) -> None:
    address = {**ADDRESS, **changes}
    response = place(client, team, user, patient_details=PATIENT, patient_address=address)
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "patient_address", field]
    assert message in error["msg"]
    assert _count(service) == 0


@pytest.mark.parametrize(("changes", "field"), BAD_DETAILS)
def test_a_blank_name_is_a_clear_422(
    client: TestClient,
    team: Team,
    user: str,
    service: Service,
    changes: dict[str, Any],
    field: str,
) -> None:
    details = {**PATIENT, **changes}
    response = place(client, team, user, patient_details=details, patient_address=ADDRESS)
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "patient_details", field]
    assert BLANK in error["msg"]
    assert _count(service) == 0


@pytest.mark.parametrize("zip_code", ["20374", "20374-0001", "07094", "85281"])
def test_real_zip_codes_are_accepted(
    client: TestClient, team: Team, user: str, zip_code: str
) -> None:
    address = {**ADDRESS, "zip": zip_code}
    response = place(client, team, user, patient_details=PATIENT, patient_address=address)
    assert response.status_code == 200, response.text
    assert response.json()["order"]["patient_address"]["zip_code"] == zip_code
