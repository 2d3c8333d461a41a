"""An order's tracking (issue 33; the official client's `get_order_tracking`), on both
databases: the results' estimate from the simulated lab's steps (and how a late step or a
moved activation date revises it), the sample's collection (inferred from its arrival at
the lab, or from the appointment it was drawn at), each marker's state and the results
reported for it, one update per change with who made it; `as_of` as the order's GET;
another team's, unknown and erased users' orders are 404s. Every answer parses with
junction-api-sdk 2.0.0's `OrderTracking`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient
from freezegun.api import FrozenDateTimeFactory
from healthledger.adapters.composition import Service
from junction.types import OrderTracking

from tests.conftest import Team
from tests.integration import test_order_activation as activation
from tests.integration.test_order_activation import DELAYS, T0, placed, read

# The same settings (the lab's delays in seconds, no failure), team and frozen clock.
settings = activation.settings
team = activation.team
frozen = activation.frozen

ALL_STEPS = timedelta(seconds=sum(DELAYS))


def tracking(client: TestClient, team: Team, order_id: str, **params: str) -> dict[str, Any]:
    response = client.get(f"/v3/order/{order_id}/tracking", params=params, headers=team.headers)
    assert response.status_code == 200, response.text
    parsed = OrderTracking.model_validate(response.json())
    assert parsed.order_id == order_id
    return dict(response.json())


def at(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text.replace("Z", "+00:00"))


def final(body: dict[str, Any]) -> tuple[datetime | None, datetime | None]:
    estimate = body["expected_at"]["final_results"]
    return at(estimate["original_estimate"]), at(estimate["current_estimate"])


def test_tracking_follows_a_sandbox_order_step_by_step(
    client: TestClient, team: Team, service: Service, frozen: FrozenDateTimeFactory
) -> None:
    order = placed(client, team, "tracked")
    order_id = order["id"]
    body = tracking(client, team, order_id)
    expected = T0 + ALL_STEPS
    assert final(body) == (expected, expected)
    assert body["collected_at"] is None and body["updates"] == []
    ordered_markers = [m["id"] for m in order["lab_test"]["markers"]]
    assert [m["id"] for m in body["markers"]] == ordered_markers and len(ordered_markers) == 5
    for marker in body["markers"]:
        assert marker["status"] == "pending" and marker["results"] == []
        assert (at(marker["expected_at"]["current_estimate"])) == expected
    answers: list[tuple[datetime, dict[str, Any]]] = [(T0, body)]
    # The lab takes each step on time, but the third (the sample reaching the lab) half
    # an hour late: the estimate moves by as much from then on.
    late = timedelta(minutes=30)
    for index, delay in enumerate(DELAYS):
        frozen.tick(timedelta(seconds=delay) + (late if index == 2 else timedelta(0)))
        service.jobs.progress_lab_orders()
        answers.append((datetime.now(UTC), tracking(client, team, order_id)))
    statuses = [e["status"] for e in read(client, team, order_id)["events"]]
    done = answers[-1][1]
    assert [u["reason"] for u in done["updates"]] == [f"status: {s}" for s in statuses[1:]]
    assert {u["source"] for u in done["updates"]} == {"lab"}
    revised = [at(u["revised_estimate"]) for u in done["updates"]]
    completed_at = T0 + ALL_STEPS + late
    assert revised == [expected, expected, completed_at, completed_at]
    assert [at(u["created_at"]) for u in done["updates"]] == [a for a, _ in answers[1:]]
    assert final(done) == (expected, completed_at)
    for update in done["updates"]:
        assert [m["id"] for m in update["impacted_markers"]] == ordered_markers
        assert at(update["impacted_markers"][0]["estimates"]["current_estimate"]) == at(
            update["revised_estimate"]
        )
    # Collected: inferred from the sample's arrival at the lab (no draw reported).
    arrived = answers[3][0]
    assert answers[2][1]["collected_at"] is None
    for _, later in answers[3:]:
        assert at(later["collected_at"]["collected_at"]) == arrived
        assert later["collected_at"]["is_inferred"] is True
        assert later["collected_at"]["inferred_from"] == "lab_arrival"
    # Resulted: each marker lists the results reported for it (names, no values).
    results = client.get(f"/v3/order/{order_id}/result", headers=team.headers).json()["results"]
    for marker in done["markers"]:
        assert marker["status"] == "resulted"
        reported = [
            r["name"] for r in results if r["source_markers"][0]["marker_id"] == marker["id"]
        ]
        assert [r["name"] for r in marker["results"]] == reported and reported
        assert all(set(r) == {"id", "name", "slug", "provider_id"} for r in marker["results"])
    # As of each instant, the tracking answered what it answered then.
    for instant, answer in answers:
        assert tracking(client, team, order_id, as_of=instant.isoformat()) == answer, instant
    before = client.get(
        f"/v3/order/{order_id}/tracking",
        params={"as_of": (T0 - timedelta(seconds=1)).isoformat()},
        headers=team.headers,
    )
    assert before.status_code == 404


def test_a_booked_appointment_dates_the_collection(
    client: TestClient, team: Team, service: Service, frozen: FrozenDateTimeFactory
) -> None:
    order_id = placed(client, team, "booked")["id"]
    assert client.post(f"/v3/order/{order_id}/test", headers=team.headers).status_code == 200
    slots = client.post(
        "/v3/order/psc/appointment/availability",
        params={"site_codes": "quest-78701-1"},
        headers=team.headers,
    ).json()
    keys = {s["start"]: s["booking_key"] for day in slots["slots"] for s in day["slots"]}
    booked = client.post(
        f"/v3/order/{order_id}/psc/appointment/book",
        json={"booking_key": keys["2026-03-10T09:30:00-05:00"]},
        headers=team.headers,
    )
    assert booked.status_code == 200, booked.text
    drawn_at = datetime(2026, 3, 10, 14, 30, tzinfo=UTC)
    body = tracking(client, team, order_id)
    scheduled = body["updates"][-1]
    assert scheduled["reason"] == "status: collecting_sample.walk_in_test.appointment_scheduled"
    assert scheduled["source"] == "patient"  # the patient's appointment moved the estimate
    assert at(scheduled["revised_estimate"]) == drawn_at + timedelta(seconds=DELAYS[3])
    assert body["updates"][0]["source"] == "junction"  # /test: stepped through this API
    frozen.move_to(drawn_at)
    service.jobs.progress_lab_orders()
    collected = tracking(client, team, order_id)["collected_at"]
    assert collected == {
        "collected_at": "2026-03-10T14:30:00Z",
        "is_inferred": True,
        "inferred_from": "scheduled_appointment",
    }


def test_a_scheduled_order_is_expected_after_its_day_and_a_move_revises_it(
    client: TestClient, team: Team, frozen: FrozenDateTimeFactory
) -> None:
    order_id = placed(client, team, "scheduled", activate_by="2026-03-13")["id"]
    after_dispatch = timedelta(seconds=sum(DELAYS[1:]))
    first = datetime(2026, 3, 13, tzinfo=UTC) + after_dispatch
    assert final(tracking(client, team, order_id)) == (first, first)
    frozen.tick(timedelta(hours=2))
    moved = client.patch(
        f"/v3/order/{order_id}", json={"activate_by": "2026-03-16"}, headers=team.headers
    )
    assert moved.status_code == 200, moved.text
    body = tracking(client, team, order_id)
    later = datetime(2026, 3, 16, tzinfo=UTC) + after_dispatch
    assert final(body) == (first, later)
    (update,) = body["updates"]
    assert update["reason"] == "activate_by: 2026-03-16" and update["source"] == "junction"
    assert at(update["created_at"]) == T0 + timedelta(hours=2)
    assert at(update["revised_estimate"]) == later
    cleared = client.patch(
        f"/v3/order/{order_id}", json={"activate_by": None}, headers=team.headers
    )
    assert cleared.status_code == 200
    now = T0 + timedelta(hours=2)
    assert final(tracking(client, team, order_id)) == (first, now + ALL_STEPS)
    assert tracking(client, team, order_id)["updates"][-1]["reason"] == (
        "activate_by cleared: dispatched to the lab now"
    )


def test_a_cancelled_order_expects_no_results(
    client: TestClient, team: Team, frozen: FrozenDateTimeFactory
) -> None:
    order_id = placed(client, team, "cancelled")["id"]
    frozen.tick(timedelta(minutes=5))
    assert client.post(f"/v3/order/{order_id}/cancel", headers=team.headers).status_code == 200
    body = tracking(client, team, order_id)
    assert final(body) == (T0 + ALL_STEPS, None)
    assert {m["status"] for m in body["markers"]} == {"incomplete"}
    (update,) = body["updates"]
    assert update["revised_estimate"] is None and update["source"] == "junction"
    assert body["collected_at"] is None


def test_other_teams_unknown_and_erased_orders_are_not_found(
    client: TestClient,
    team: Team,
    other_team: Team,
    service: Service,
    frozen: FrozenDateTimeFactory,
) -> None:
    order = placed(client, team, "erased")
    order_id, user_id = order["id"], order["user_id"]
    frozen.tick(timedelta(seconds=DELAYS[0]))
    service.jobs.progress_lab_orders()
    path = f"/v3/order/{order_id}/tracking"
    assert client.get(path, headers=other_team.headers).status_code == 404
    unknown = "/v3/order/00000000-0000-4000-8000-000000000000/tracking"
    assert client.get(unknown, headers=team.headers).status_code == 404
    assert client.get(path, params={"as_of": "yesterday"}, headers=team.headers).status_code == 422
    assert client.get(path).status_code == 401
    frozen.tick(timedelta(minutes=1))
    lived = datetime.now(UTC)
    before = tracking(client, team, order_id)
    frozen.tick(timedelta(minutes=1))
    assert client.delete(f"/v2/user/{user_id}", headers=team.headers).status_code == 200
    # Deleted, not yet erased: readable as the order is (its cancellation is an update).
    assert tracking(client, team, order_id)["updates"][-1]["source"] == "junction"
    frozen.tick(timedelta(days=8))
    assert service.jobs.sweep_erasures() == 1
    assert client.get(path, headers=team.headers).status_code == 404
    assert client.get(f"/v3/order/{order_id}", headers=team.headers).status_code == 404
    # The past holds, without the test ordered, which was sealed with the erased key.
    past = tracking(client, team, order_id, as_of=lived.isoformat())
    assert past["markers"] == [] and before["markers"]
    assert [u.pop("impacted_markers") for u in past["updates"]] == [[]]
    for update in before["updates"]:
        del update["impacted_markers"]
    assert past["updates"] == before["updates"] and past["expected_at"] == before["expected_at"]
