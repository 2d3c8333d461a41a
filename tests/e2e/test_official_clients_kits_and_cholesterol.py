"""The last client methods served (issues 33/34): the cholesterol fractions
(`vitals.cholesterol_total`, `_ldl`, `_hdl`, `_triglycerides`: `vital` 2.1.569 has them,
`junction-api-sdk` 2.0.0 does not) and the test kits (`testkit.create_order` and
`testkit.register`, both clients), against the team API under uvicorn with only the
clients' base_url changed, each answer parsed by the client's own models. On both
databases."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import UUID

import junction
import junction.types as junction_types
import pytest
import vital
import vital.types as vital_types
from healthledger.adapters.composition import Service
from healthledger.domain.context import CommandContext
from junction.core.api_error import ApiError as JunctionApiError
from vital.core.api_error import ApiError as VitalApiError

from tests.conftest import CLIENTS_PARSE_ANSWERS, Team
from tests.e2e.official_client import upsert_info
from tests.e2e.test_official_client_orders import ADDRESS, PATIENT

pytestmark = CLIENTS_PARSE_ANSWERS

THYROID_KIT = "0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a03"  # ZRT, test kit
SHIPPING = {
    "receiver_name": "Ada Lovelace",
    "first_line": "12 Analytical Row",
    "city": "Austin",
    "state": "TX",
    "zip": "78701",
    "country": "US",
    "phone_number": "+1 555 010 1815",
}


@pytest.fixture(params=["vital", "junction"])
def client(request: pytest.FixtureRequest, base_url: str, team: Team, service: Service) -> Any:
    """Each official client as customers construct it: the key and our base_url."""
    service.teams.set_feature(CommandContext.system("test"), team.team_id, "demographics", True)
    if request.param == "vital":
        return vital.Vital(api_key=team.key, base_url=base_url, timeout=60)
    return junction.Junction(api_key=team.key, base_url=base_url, timeout=60)


def panel(day: date, hour: int, shift: float) -> list[dict[str, Any]]:
    moment = datetime.combine(day, datetime.min.time(), UTC) + timedelta(hours=hour)
    values = {"total": 5.1, "ldl": 3.0, "hdl": 1.4, "triglycerides": 1.2}
    return [
        {"timestamp": moment.isoformat(), "value": round(v + shift, 2), "unit": "mmol/L", "type": k}
        for k, v in values.items()
    ]


def test_cholesterol_fractions_through_the_client(
    base_url: str, team: Team, service: Service
) -> None:
    api = vital.Vital(api_key=team.key, base_url=base_url, timeout=60)
    user = api.user.create(client_user_id="cholesterol-e2e").user_id
    day = datetime.now(UTC).date() - timedelta(days=1)
    service.health_data.store(UUID(user), "withings", {"cholesterol": {day: panel(day, 8, 0)}})
    service.health_data.store(
        UUID(user), "apple_health_kit", {"cholesterol": {day: panel(day, 9, 0.2)}}
    )
    reads = {
        "total": api.vitals.cholesterol_total,
        "ldl": api.vitals.cholesterol_ldl,
        "hdl": api.vitals.cholesterol_hdl,
        "triglycerides": api.vitals.cholesterol_triglycerides,
    }
    base = {"total": 5.1, "ldl": 3.0, "hdl": 1.4, "triglycerides": 1.2}
    for fraction, read in reads.items():
        found = read(user, start_date=str(day), end_date=str(day))
        assert all(isinstance(s, vital_types.ClientFacingCholesterolTimeseries) for s in found)
        assert [(s.type, s.value, s.unit) for s in found] == [
            (fraction, base[fraction], "mmol/L"),
            (fraction, round(base[fraction] + 0.2, 2), "mmol/L"),
        ]
        (one,) = read(user, start_date=str(day), provider="apple_health_kit")
        assert one.value == round(base[fraction] + 0.2, 2)
    with pytest.raises(VitalApiError) as refused:
        api.vitals.cholesterol_hdl(str(UUID(int=1)), start_date=str(day))
    assert refused.value.status_code == 404


def test_a_test_kit_ordered_and_registered_through_the_client(client: Any) -> None:
    types = vital_types if isinstance(client, vital.Vital) else junction_types
    user = client.user.create(client_user_id=f"kit-{type(client).__name__}").user_id
    upsert_info(client, user)
    ordered = client.testkit.create_order(
        user_id=user, lab_test_id=THYROID_KIT, shipping_details=SHIPPING, passthrough="crm-kit-1"
    )
    assert isinstance(ordered, types.PostOrderResponse)
    kit = ordered.order
    assert kit.status.value == "received" and kit.details.type == "testkit"
    assert kit.passthrough == "crm-kit-1"
    assert (
        kit.patient_address is not None and kit.patient_address.first_line == SHIPPING["first_line"]
    )
    # The kit ships with its sample id once its requisition is made.
    client.lab_tests.simulate_order_process(kit.id)
    sample_id = client.lab_tests.get_order(kit.id).sample_id
    assert sample_id

    registered = client.testkit.register(
        sample_id=sample_id,
        patient_details=PATIENT.model_dump(),
        patient_address=ADDRESS.model_dump(),
        user_id=user,
    )
    assert isinstance(registered, types.PostOrderResponse)
    assert registered.order.id == kit.id
    assert registered.order.patient_details is not None
    assert registered.order.patient_details.last_name == "Hopper"
    assert client.lab_tests.get_order(kit.id).patient_details.first_name == "Grace"

    for call, status in [
        # Registered already.
        (
            lambda: client.testkit.register(
                sample_id=sample_id,
                patient_details=PATIENT.model_dump(),
                patient_address=ADDRESS.model_dump(),
            ),
            409,
        ),
        # No kit of the team has this sample id.
        (
            lambda: client.testkit.register(
                sample_id="0000000000",
                patient_details=PATIENT.model_dump(),
                patient_address=ADDRESS.model_dump(),
            ),
            404,
        ),
    ]:
        with pytest.raises((VitalApiError, JunctionApiError)) as raised:
            call()
        error = raised.value
        assert isinstance(error, (VitalApiError, JunctionApiError))
        assert error.status_code == status
