"""What an order's answer tells beside its statuses (ClientFacingOrder), on both
databases through the HTTP API: the days its results are expected by (the simulated
lab's estimate, as the order's tracking gives it, and at the latest with each step to
come a sweep late), its booked appointment, its bill type and its requisition's URL; null
where the service does not know (a production order's results, a cancelled order's, an
appointment not booked, what the order was placed without). `as_of` answers each as it was, and
every answer parses with both official clients."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from freezegun.api import FrozenDateTimeFactory
from healthledger.adapters.composition import Service
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from junction.types import ClientFacingOrder as JunctionOrder
from vital.types import ClientFacingOrder as VitalOrder

from tests.conftest import Team, create_user
from tests.integration import test_order_activation as activation
from tests.integration.test_order_activation import ADDRESS, DELAYS, PATIENT, T0, WELLNESS
from tests.integration.test_order_tracking import tracking

team = activation.team
frozen = activation.frozen

CTX = CommandContext(actor="test", request_id="order-answer")
BASE_URL = "https://ledger.example.org"
# The sweep's interval: long enough that its lag moves the latest day past midnight (T0
# is noon; the steps take 3 h 11 min in all).
SWEEP = timedelta(hours=3)
ALL_STEPS = timedelta(seconds=sum(DELAYS))
# What these orders are placed without (diagnoses, a passthrough string: see
# test_order_diagnoses.py) or what nothing gives an order (notes, insurance): null (and
# priority false).
UNKNOWN = {"icd_codes": None, "passthrough": None, "notes": None, "health_insurance_id": None}


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings(
        database_url=database_url,
        master_key_file=tmp_path / "master.key",
        grace_period=timedelta(days=7),
        lab_order_step_delays=list(DELAYS),
        lab_order_failure_rate=0,
        lab_order_cancellation_rate=0,
        lab_order_poll_interval=SWEEP,
        public_base_url=BASE_URL + "/",
    )


def read(client: TestClient, team: Team, order_id: str, **params: str) -> dict[str, Any]:
    response = client.get(f"/v3/order/{order_id}", params=params, headers=team.headers)
    assert response.status_code == 200, response.text
    body = dict(response.json())
    VitalOrder.model_validate(body)
    JunctionOrder.model_validate(body)
    return body


def placed(client: TestClient, team: Team, name: str) -> str:
    user_id = create_user(client, team, name)["user_id"]
    order = {
        "user_id": user_id,
        "lab_test_id": WELLNESS,
        "patient_details": PATIENT,
        "patient_address": ADDRESS,
    }
    response = client.post("/v3/order", json=order, headers=team.headers)
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


def day(at: datetime) -> str:
    return at.astimezone(UTC).date().isoformat()


def test_the_results_days_follow_the_orders_tracking_and_as_of_answers_them_as_then(
    client: TestClient, team: Team, service: Service, frozen: FrozenDateTimeFactory
) -> None:
    order_id = placed(client, team, "expected")
    body = read(client, team, order_id)
    # Four steps to come, each up to a sweep late: the latest day is the next one.
    assert body["expected_result_by_date"] == day(T0 + ALL_STEPS) == "2026-03-10"
    assert body["worst_case_result_by_date"] == day(T0 + ALL_STEPS + 4 * SWEEP) == "2026-03-11"
    assert body["billing_type"] == "client_bill" and body["priority"] is False
    assert {name: body[name] for name in UNKNOWN} == UNKNOWN
    assert body["requisition_form_url"] == f"{BASE_URL}/v3/order/{order_id}/requisition/pdf"
    assert body["details"]["data"]["appointment_id"] is None
    answers = [(T0, body)]
    # The third step (the sample reaching the lab) comes a day late: the days move with it.
    for index, delay in enumerate(DELAYS):
        frozen.tick(timedelta(seconds=delay) + (timedelta(days=1) if index == 2 else timedelta(0)))
        service.jobs.progress_lab_orders()
        now = read(client, team, order_id)
        current = tracking(client, team, order_id)["expected_at"]["final_results"]
        expected = datetime.fromisoformat(current["current_estimate"].replace("Z", "+00:00"))
        assert now["expected_result_by_date"] == day(expected), now["detailed_status"]
        answers.append((datetime.now(UTC), now))
    late = answers[3][1]
    assert late["detailed_status"] == "sample_with_lab.walk_in_test.partial_results"
    # One step to come (the results), a sweep late at most.
    results_at = T0 + ALL_STEPS + timedelta(days=1)
    assert late["expected_result_by_date"] == day(results_at) == "2026-03-11"
    assert late["worst_case_result_by_date"] == day(results_at + SWEEP)
    done = answers[-1][1]
    assert done["status"] == "completed"
    assert done["expected_result_by_date"] == done["worst_case_result_by_date"] == "2026-03-11"
    assert done["requisition_form_url"] is not None
    for instant, answer in answers:
        assert read(client, team, order_id, as_of=instant.isoformat()) == answer, instant


def test_a_cancelled_or_production_order_expects_no_results(
    client: TestClient, team: Team, service: Service, frozen: FrozenDateTimeFactory
) -> None:
    cancelled = placed(client, team, "cancelled")
    before = read(client, team, cancelled)
    frozen.tick(timedelta(minutes=5))
    assert client.post(f"/v3/order/{cancelled}/cancel", headers=team.headers).status_code == 200
    body = read(client, team, cancelled)
    assert body["expected_result_by_date"] is None and body["worst_case_result_by_date"] is None
    # A void order has no requisition to print.
    assert body["requisition_form_url"] is None
    assert body["billing_type"] == "client_bill"
    assert read(client, team, cancelled, as_of=T0.isoformat()) == before
    assert before["expected_result_by_date"] == day(T0 + ALL_STEPS)
    # A production lab's times are not told ahead: no estimate until its results come.
    key = service.teams.issue_team_api_key(CTX, team.team_id, environment="production")
    live = Team(team.team_id, key.plain)
    production = read(client, live, placed(client, live, "production"))
    assert production["expected_result_by_date"] is None
    assert production["worst_case_result_by_date"] is None
    assert production["requisition_form_url"] is not None
    assert {name: production[name] for name in UNKNOWN} == UNKNOWN


def test_the_booked_appointment_is_the_orders_from_its_booking_on(
    client: TestClient, team: Team, frozen: FrozenDateTimeFactory
) -> None:
    order_id = placed(client, team, "booked")
    assert client.post(f"/v3/order/{order_id}/test", headers=team.headers).status_code == 200
    frozen.tick(timedelta(minutes=1))
    unbooked_at = datetime.now(UTC)
    assert read(client, team, order_id)["details"]["data"]["appointment_id"] is None
    slots = client.post(
        "/v3/order/psc/appointment/availability",
        params={"site_codes": "quest-78701-1"},
        headers=team.headers,
    ).json()
    keys = {s["start"]: s["booking_key"] for d in slots["slots"] for s in d["slots"]}
    frozen.tick(timedelta(minutes=1))
    booked = client.post(
        f"/v3/order/{order_id}/psc/appointment/book",
        json={"booking_key": keys["2026-03-10T09:30:00-05:00"]},
        headers=team.headers,
    )
    assert booked.status_code == 200, booked.text
    appointment = client.get(f"/v3/order/{order_id}/psc/appointment", headers=team.headers)
    assert appointment.status_code == 200, appointment.text
    body = read(client, team, order_id)
    assert body["details"]["type"] == "walk_in_test"
    assert body["details"]["data"]["appointment_id"] == appointment.json()["id"]
    # The draw is due at the appointment: the results a step's delay after it.
    drawn_at = datetime(2026, 3, 10, 14, 30, tzinfo=UTC)
    assert body["expected_result_by_date"] == day(drawn_at + timedelta(seconds=DELAYS[3]))
    # Cancelled, it is still the order's appointment (its own answer says cancelled).
    frozen.tick(timedelta(minutes=1))
    cancelled = client.patch(
        f"/v3/order/{order_id}/psc/appointment/cancel",
        json={"cancellationReasonId": "patient_requested"},
        headers=team.headers,
    )
    assert cancelled.status_code == 200, cancelled.text
    after = read(client, team, order_id)
    assert after["details"]["data"]["appointment_id"] == appointment.json()["id"]
    # Waiting for a new booking, no step is due: no estimate.
    assert after["expected_result_by_date"] is None
    then = read(client, team, order_id, as_of=unbooked_at.isoformat())
    assert then["details"]["data"]["appointment_id"] is None
    assert then["expected_result_by_date"] is not None
