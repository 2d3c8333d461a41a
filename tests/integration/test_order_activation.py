"""Orders placed to be dispatched on a later day (issue 33; the official client's
`activate_by` and `update_order`), on both databases: an order placed with `activate_by`
waits in `ordered` until that day (00:00 UTC) and the simulated lab's sweep dispatches it
then; `PATCH /v3/order/{id}` moves the day or clears it (dispatch now), each change an
`Order.ActivationRescheduled` in the order's history, the audit, `as_of` and one webhook;
and each refusal the client documents (400), another team's order (404), bad input (422)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory
from healthledger.adapters.compliance.audit import history
from healthledger.adapters.composition import Service
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.labs.orders import Order
from junction.types import PostOrderResponse
from vital.types import ClientFacingOrderChanged

from tests.conftest import Team, create_user
from tests.receivers import Receiver, http_receiver

WELLNESS = "0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a01"  # Quest, walk-in
T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
# The seconds each step takes after the one before: requisition, collection, lab, results.
DELAYS = (60, 600, 3600, 7200)
PATIENT = {
    "first_name": "Grace",
    "last_name": "Hopper",
    "email": "grace.hopper@example.org",
    "phone_number": "+1 555 010 1906",
    "gender": "female",
    "dob": "1956-12-09",
}
ADDRESS = {"first_line": "1 Navy Yard", "city": "Washington", "state": "DC", "zip": "20374"}
ORDERED = "received.walk_in_test.ordered"
REQUISITION = "received.walk_in_test.requisition_created"


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings(
        database_url=database_url,
        master_key_file=tmp_path / "master.key",
        grace_period=timedelta(days=7),
        lab_order_step_delays=list(DELAYS),
        lab_order_failure_rate=0,
        lab_order_cancellation_rate=0,
    )


@pytest.fixture
def team(service: Service) -> Team:
    # Made before the instants the tests travel to.
    with freeze_time(T0 - timedelta(days=1)):
        created = service.bootstrap()
    assert created is not None
    return Team(created.team_id, created.team_api_key.plain)


@pytest.fixture
def frozen() -> Iterator[FrozenDateTimeFactory]:
    with freeze_time(T0) as factory:
        assert isinstance(factory, FrozenDateTimeFactory)
        yield factory


def place(client: TestClient, team: Team, name: str, **body: Any) -> Any:
    user_id = create_user(client, team, name)["user_id"]
    order = {
        "user_id": user_id,
        "lab_test_id": WELLNESS,
        "patient_details": PATIENT,
        "patient_address": ADDRESS,
        **body,
    }
    return client.post("/v3/order", json=order, headers=team.headers)


def placed(client: TestClient, team: Team, name: str, **body: Any) -> dict[str, Any]:
    response = place(client, team, name, **body)
    assert response.status_code == 200, response.text
    PostOrderResponse.model_validate(response.json())
    return dict(response.json())


def patch(client: TestClient, team: Team, order_id: str, body: Any) -> Any:
    return client.patch(f"/v3/order/{order_id}", json=body, headers=team.headers)


def read(client: TestClient, team: Team, order_id: str, **params: str) -> dict[str, Any]:
    response = client.get(f"/v3/order/{order_id}", params=params, headers=team.headers)
    assert response.status_code == 200, response.text
    return dict(response.json())


def statuses(client: TestClient, team: Team, order_id: str) -> list[str]:
    return [event["status"] for event in read(client, team, order_id)["events"]]


def test_an_order_waits_for_its_day_and_is_dispatched_then(
    client: TestClient, team: Team, service: Service, frozen: FrozenDateTimeFactory
) -> None:
    body = placed(client, team, "scheduled", activate_by="2026-03-13")
    order_id = body["id"]
    assert body["activate_by"] == "2026-03-13" and body["detailed_status"] == ORDERED
    immediate = placed(client, team, "immediate")["id"]
    assert read(client, team, immediate)["activate_by"] is None
    # Days pass: the immediate order runs its course, the scheduled one waits.
    for delay in DELAYS:
        frozen.tick(timedelta(seconds=delay))
        service.jobs.progress_lab_orders()
    frozen.move_to(datetime(2026, 3, 12, 23, 59, 59, tzinfo=UTC))
    service.jobs.progress_lab_orders()
    assert statuses(client, team, immediate)[-1] == "completed.walk_in_test.completed"
    assert statuses(client, team, order_id) == [ORDERED]
    # The simulated lab is not stepped past the day by hand either.
    refused = client.post(f"/v3/order/{order_id}/test", headers=team.headers)
    assert refused.status_code == 400
    assert "activation date (2026-03-13)" in refused.json()["detail"]
    # Its day begins (UTC): the sweep dispatches it, as the lab's own step.
    frozen.move_to(datetime(2026, 3, 13, 0, 0, tzinfo=UTC))
    service.jobs.progress_lab_orders()
    assert statuses(client, team, order_id) == [ORDERED, REQUISITION]
    order = service.ledger.find(UUID(order_id))
    assert isinstance(order, Order) and order.history[-1][1] == datetime(2026, 3, 13, tzinfo=UTC)
    assert read(client, team, order_id)["activate_by"] == "2026-03-13"


def test_patch_moves_the_day_or_dispatches_now(
    client: TestClient, team: Team, service: Service, frozen: FrozenDateTimeFactory
) -> None:
    order_id = placed(client, team, "moved", activate_by="2026-03-12")["id"]
    frozen.tick(timedelta(hours=1))
    moved = patch(client, team, order_id, {"activate_by": "2026-03-20"})
    assert moved.status_code == 200, moved.text
    answer = PostOrderResponse.model_validate(moved.json())
    assert (
        answer.order.activate_by == "2026-03-20"
        and answer.message == "Order scheduled for 2026-03-20."
    )
    at_move = datetime.now(UTC)
    # The old day passes: nothing happens.
    frozen.move_to(datetime(2026, 3, 14, tzinfo=UTC))
    service.jobs.progress_lab_orders()
    assert statuses(client, team, order_id) == [ORDERED]
    # Cleared: dispatched now (after the lab's usual first delay).
    cleared = patch(client, team, order_id, {"activate_by": None})
    assert cleared.status_code == 200, cleared.text
    assert cleared.json()["activate_by"] is None
    assert cleared.json()["message"] == "Order dispatched now."
    frozen.tick(timedelta(seconds=DELAYS[0]))
    service.jobs.progress_lab_orders()
    assert statuses(client, team, order_id) == [ORDERED, REQUISITION]
    # Each change is an event of the order's stream, by its caller, in the user's audit.
    changes = [
        e
        for e in service.ledger.events.get(UUID(order_id))
        if isinstance(e, Order.ActivationRescheduled)
    ]
    assert [c.activate_by for c in changes] == [date(2026, 3, 20), None]
    user_id = read(client, team, order_id)["user_id"]
    entries = [
        e for e in history(service, UUID(user_id)) if e.event == "Order.ActivationRescheduled"
    ]
    assert [e.changes["activate_by"] for e in entries] == [date(2026, 3, 20), None]
    placing = next(e for e in history(service, UUID(user_id)) if e.event == "Order.Created")
    assert {e.actor for e in entries} == {placing.actor}
    audit = client.get(
        f"/v2/audit/user/{user_id}",
        params={"event_type": "Order.ActivationRescheduled"},
        headers=team.headers,
    )
    assert audit.status_code == 200, audit.text
    assert [e["changes"]["activate_by"] for e in audit.json()["data"]] == ["2026-03-20", None]
    # As of before each change, the order's answer said what it said then.
    before = read(client, team, order_id, as_of=(at_move - timedelta(seconds=1)).isoformat())
    assert before["activate_by"] == "2026-03-12"
    between = read(client, team, order_id, as_of=at_move.isoformat())
    assert between["activate_by"] == "2026-03-20"
    listed = client.get(
        "/v3/orders", params={"as_of": at_move.isoformat()}, headers=team.headers
    ).json()
    assert [o["activate_by"] for o in listed["orders"]] == ["2026-03-20"]


def test_patch_refuses_what_the_client_documents(
    client: TestClient, team: Team, service: Service, frozen: FrozenDateTimeFactory
) -> None:
    immediate = placed(client, team, "immediate")["id"]
    refused = patch(client, team, immediate, {"activate_by": "2026-03-20"})
    assert refused.status_code == 400
    assert "placed for immediate processing" in refused.json()["detail"]
    assert patch(client, team, immediate, {"activate_by": None}).status_code == 400
    scheduled = placed(client, team, "scheduled", activate_by="2026-03-11")["id"]
    past = patch(client, team, scheduled, {"activate_by": "2026-03-09"})
    assert past.status_code == 400 and "in the past" in past.json()["detail"]
    too_far = patch(client, team, scheduled, {"activate_by": "2027-03-11"})
    assert too_far.status_code == 400 and "365 days" in too_far.json()["detail"]
    # Today is allowed: the order goes with the lab's usual delay.
    today = patch(client, team, scheduled, {"activate_by": "2026-03-10"})
    assert today.status_code == 200, today.text
    frozen.tick(timedelta(seconds=DELAYS[0]))
    service.jobs.progress_lab_orders()
    assert statuses(client, team, scheduled)[-1] == REQUISITION
    # Dispatched: no longer modifiable.
    gone = patch(client, team, scheduled, {"activate_by": "2026-03-20"})
    assert gone.status_code == 400 and "not yet dispatched" in gone.json()["detail"]
    # Placing with a past or a too distant day is refused the same way, and records nothing.
    for day, words in (("2026-03-09", "in the past"), ("2027-03-12", "365 days")):
        response = place(client, team, f"refused-{day}", activate_by=day)
        assert response.status_code == 400 and words in response.json()["detail"], day
    cancelled = placed(client, team, "cancelled", activate_by="2026-03-15")["id"]
    assert client.post(f"/v3/order/{cancelled}/cancel", headers=team.headers).status_code == 200
    assert patch(client, team, cancelled, {"activate_by": "2026-03-16"}).status_code == 400
    # Nothing was changed by a refusal.
    assert read(client, team, cancelled)["activate_by"] == "2026-03-15"
    assert read(client, team, immediate)["activate_by"] is None


def test_other_teams_orders_and_bad_input(
    client: TestClient, team: Team, other_team: Team, frozen: FrozenDateTimeFactory
) -> None:
    order_id = placed(client, team, "mine", activate_by="2026-03-12")["id"]
    assert patch(client, other_team, order_id, {"activate_by": None}).status_code == 404
    unknown = "00000000-0000-4000-8000-000000000000"
    assert patch(client, team, unknown, {"activate_by": None}).status_code == 404
    bodies: tuple[Any, ...] = (
        {},  # activate_by is required: null dispatches now, it is never implied
        {"activate_by": "tomorrow"},
        {"activate_by": "2026-02-30"},
        {"activate_by": "2026-03-12", "extra": 1},
        {"activate_by": ["2026-03-12"]},
        [],
        "2026-03-12",
    )
    for body in bodies:
        response = patch(client, team, order_id, body)
        assert response.status_code == 422, (body, response.text)
        assert "detail" in response.json()
    raw = client.patch(
        f"/v3/order/{order_id}",
        content=b"{not json",
        headers={**team.headers, "content-type": "application/json"},
    )
    assert raw.status_code == 422
    assert place(client, team, "bad-day", activate_by="13/03/2026").status_code == 422
    assert read(client, team, order_id)["activate_by"] == "2026-03-12"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with http_receiver() as running:
        yield running


def test_each_change_is_announced_once_with_the_order_it_left(
    client: TestClient,
    team: Team,
    service: Service,
    receiver: Receiver,
    frozen: FrozenDateTimeFactory,
) -> None:
    ctx = CommandContext.system("test:activation")
    service.webhooks.create(ctx, team.team_id, "sandbox", url=receiver.url("ok"))
    order_id = placed(client, team, "announced", activate_by="2026-03-12")["id"]
    assert patch(client, team, order_id, {"activate_by": "2026-03-14"}).status_code == 200
    assert patch(client, team, order_id, {"activate_by": None}).status_code == 200
    service.jobs.dispatch_webhooks()
    assert set(service.webhook_queries.delivery_counts()) == {"succeeded"}
    seen: Counter[tuple[str, str | None]] = Counter()
    for received in receiver.on("ok"):
        body = json.loads(received.body)
        changed = ClientFacingOrderChanged.model_validate(body)
        assert changed.data.id == order_id
        seen[(changed.event_type.value, changed.data.activate_by)] += 1
    assert seen == Counter(
        {
            ("labtest.order.created", "2026-03-12"): 1,
            ("labtest.order.updated", "2026-03-14"): 1,
            ("labtest.order.updated", None): 1,
        }
    )
