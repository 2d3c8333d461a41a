"""Appointments of lab test orders through the team API (issue 33), on both databases:
centers near a zip code and an order (with hours), open slots per center and day less
what is booked, booking, rescheduling and cancelling at a center and at home, a slot
booked once, times in the place's time zone on the wire and UTC in the log, the order's
history (`appointment_scheduled`...), `as_of`, the simulated lab drawing a booked
sample at its time, and the bad input (forged keys, unknown reasons, other teams)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from healthledger.adapters.compliance.audit import history
from healthledger.adapters.compliance.deletion_report import deletion_report
from healthledger.adapters.compliance.report_verification import verify_report
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.settings import Settings
from healthledger.domain.labs.appointments import Appointment, Slot, appointment_id_of, slot_id_of
from healthledger.domain.labs.orders import Order
from healthledger.domain.personal_data import ERASED_PLACEHOLDER
from vital.types import (
    AppointmentAvailabilitySlots,
    ClientFacingAppointment,
    ClientFacingAppointmentCancellationReason,
    ClientFacingAppointmentChanged,
    ClientFacingOrder,
    ClientFacingOrderChanged,
    PscInfo,
)

from tests.clocks import Clock
from tests.conftest import Team, create_user
from tests.receivers import http_receiver

WELLNESS = "0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a01"  # Quest, walk-in
HEART = "0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a02"  # Labcorp, at-home phlebotomy
# A Tuesday, 07:00 in Austin (CDT, UTC-5).
T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
AUSTIN = {
    "first_line": "12 Analytical Row",
    "city": "Austin",
    "state": "TX",
    "zip_code": "78701",
}
DEMOGRAPHICS = {
    "first_name": "Ada",
    "last_name": "Lovelace",
    "email": "ada.lovelace@example.org",
    "phone_number": "+1 555 010 1815",
    "gender": "female",
    "dob": "1985-12-10",
    "address": AUSTIN,
}


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def service(settings: Settings, clock: Clock) -> Iterator[Service]:
    built = build_service(
        settings.model_copy(
            update={"lab_order_failure_rate": 0.0, "lab_order_cancellation_rate": 0.0}
        ),
        clock=clock,
    )
    yield built
    built.close()


@pytest.fixture
def client(service: Service) -> Iterator[TestClient]:
    with TestClient(create_team_api(service), raise_server_exceptions=False) as test_client:
        yield test_client


def user_of(client: TestClient, team: Team, service: Service, name: str) -> str:
    service.teams.set_feature(service_ctx(), team.team_id, "demographics", True)
    user_id: str = create_user(client, team, name)["user_id"]
    recorded = client.patch(f"/v2/user/{user_id}/info", json=DEMOGRAPHICS, headers=team.headers)
    assert recorded.status_code == 200, recorded.text
    return user_id


def service_ctx() -> Any:
    from healthledger.domain.context import CommandContext

    return CommandContext.system("test:appointments")


def order_of(client: TestClient, team: Team, user_id: str, lab_test: str = WELLNESS) -> str:
    """An order whose requisition is created (one sandbox step): ready for a booking."""
    placed = client.post(
        "/v3/order", json={"user_id": user_id, "lab_test_id": lab_test}, headers=team.headers
    )
    assert placed.status_code == 200, placed.text
    order_id: str = placed.json()["id"]
    stepped = client.post(f"/v3/order/{order_id}/test", headers=team.headers)
    assert stepped.json()["detailed_status"].endswith("requisition_created")
    return order_id


def availability(client: TestClient, team: Team, **params: Any) -> dict[str, Any]:
    got = client.post("/v3/order/psc/appointment/availability", params=params, headers=team.headers)
    assert got.status_code == 200, got.text
    AppointmentAvailabilitySlots.model_validate(got.json())
    body: dict[str, Any] = got.json()
    return body


def keys_of(body: dict[str, Any]) -> dict[str, str]:
    """start (as on the wire) -> booking key, over every day and place."""
    return {s["start"]: s["booking_key"] for day in body["slots"] for s in day["slots"]}


def order_statuses(client: TestClient, team: Team, order_id: str) -> list[str]:
    got = client.get(f"/v3/order/{order_id}", headers=team.headers)
    ClientFacingOrder.model_validate(got.json())
    return [e["status"] for e in got.json()["events"]]


# -- centers ------------------------------------------------------------------------------


def test_centers_near_a_zip_code_and_an_order_with_their_hours(
    client: TestClient, team: Team, service: Service
) -> None:
    got = client.get(
        "/v3/order/psc/info", params={"zip_code": "78701", "lab_id": 1}, headers=team.headers
    )
    assert got.status_code == 200, got.text
    info = PscInfo.model_validate(got.json())
    assert info.lab_id == 1 and got.json()["slug"] == "quest"
    centers = got.json()["patient_service_centers"]
    distances = [c["distance"] for c in centers]
    assert centers and distances == sorted(distances) and max(distances) <= 25
    assert centers[0]["site_code"] == "quest-78701-1"
    assert centers[0]["metadata"]["hours"]["monday"] == {"open": "07:00", "close": "15:00"}
    assert centers[0]["metadata"]["hours"]["sunday"] is None
    # Only centers with every capability asked; a smaller radius, fewer centers.
    stat = client.get(
        "/v3/order/psc/info",
        params={"zip_code": "78701", "lab_id": 1, "capabilities": "stat"},
        headers=team.headers,
    ).json()["patient_service_centers"]
    assert stat and all("stat" in c["capabilities"] for c in stat) and len(stat) < len(centers)
    near = client.get(
        "/v3/order/psc/info",
        params={"zip_code": "78701", "lab_id": 1, "radius": "10"},
        headers=team.headers,
    ).json()["patient_service_centers"]
    assert all(c["distance"] <= 10 for c in near)
    # The order's: its lab's centers near its patient's zip code.
    user_id = user_of(client, team, service, "psc-info")
    order_id = order_of(client, team, user_id)
    by_order = client.get(f"/v3/order/{order_id}/psc/info", headers=team.headers)
    assert by_order.status_code == 200
    assert by_order.json() == got.json()
    # Bad input: a clear 422, never a 500.
    for params in (
        {"zip_code": "00000", "lab_id": 1},
        {"zip_code": "7870", "lab_id": 1},
        {"zip_code": "78701", "lab_id": 5},  # a test kit lab: no centers
        {"zip_code": "78701", "lab_id": 1, "radius": "7"},
    ):
        refused = client.get("/v3/order/psc/info", params=params, headers=team.headers)
        assert refused.status_code == 422, (params, refused.text)


# -- a center's appointment ---------------------------------------------------------------------


def test_book_reschedule_and_cancel_at_a_center(
    client: TestClient, team: Team, service: Service
) -> None:
    user_id = user_of(client, team, service, "walk-in")
    order_id = order_of(client, team, user_id)
    open_slots = availability(client, team, site_codes="quest-78701-1")
    days = open_slots["slots"]
    assert open_slots["timezone"] == "America/Chicago" and len(days) == 7
    today = days[0]
    assert today["date"] == "2026-03-10" and today["location"]["code"] == "quest-78701-1"
    # Hours 07:00-15:00 in 15 minute slots, from an hour from now (08:00 local).
    starts = [s["start"] for s in today["slots"]]
    assert starts[0] == "2026-03-10T08:00:00-05:00" and starts[-1] == "2026-03-10T14:45:00-05:00"
    assert len(starts) == 28
    assert days[5]["date"] == "2026-03-15" and days[5]["slots"] == []  # a Sunday
    # Book 09:30 local.
    key = keys_of(open_slots)["2026-03-10T09:30:00-05:00"]
    booked = client.post(
        f"/v3/order/{order_id}/psc/appointment/book",
        json={"booking_key": key, "appointment_notes": "Wheelchair access"},
        headers=team.headers,
    )
    assert booked.status_code == 200, booked.text
    appointment = ClientFacingAppointment.model_validate(booked.json())
    body = booked.json()
    assert (body["type"], body["status"], body["provider"]) == (
        "patient_service_center",
        "confirmed",
        "quest",
    )
    assert body["start_at"] == "2026-03-10T09:30:00-05:00"
    assert body["end_at"] == "2026-03-10T09:45:00-05:00"
    assert body["iana_timezone"] == "America/Chicago" and body["provider_id"] == "quest-78701-1"
    assert (
        body["address"]["zip_code"] == "78701" and body["appointment_notes"] == "Wheelchair access"
    )
    assert [e["status"] for e in body["events"]] == ["scheduled"]
    assert appointment.order_id == order_id
    # Stored in UTC; the slot is gone from the availability; the order says so.
    stored = service.ledger.find(appointment_id_of(UUID(order_id)))
    assert isinstance(stored, Appointment) and stored.slot is not None
    assert stored.slot.start_at == datetime(2026, 3, 10, 14, 30, tzinfo=UTC)
    assert "2026-03-10T09:30:00-05:00" not in keys_of(
        availability(client, team, site_codes="quest-78701-1")
    )
    assert order_statuses(client, team, order_id)[-1] == (
        "collecting_sample.walk_in_test.appointment_scheduled"
    )
    got = client.get(f"/v3/order/{order_id}/psc/appointment", headers=team.headers)
    assert got.status_code == 200 and got.json() == body
    # Booking again is refused: reschedule it.
    again = client.post(
        f"/v3/order/{order_id}/psc/appointment/book",
        json={"booking_key": keys_of(open_slots)["2026-03-10T10:00:00-05:00"]},
        headers=team.headers,
    )
    assert again.status_code == 409
    # Reschedule to another center's slot: the first is free again.
    other = availability(client, team, site_codes="quest-78705-1")
    moved = client.patch(
        f"/v3/order/{order_id}/psc/appointment/reschedule",
        json={"booking_key": keys_of(other)["2026-03-11T11:00:00-05:00"]},
        headers=team.headers,
    )
    assert moved.status_code == 200, moved.text
    assert moved.json()["provider_id"] == "quest-78705-1"
    assert moved.json()["start_at"] == "2026-03-11T11:00:00-05:00"
    assert [e["status"] for e in moved.json()["events"]] == ["scheduled", "scheduled"]
    assert "2026-03-10T09:30:00-05:00" in keys_of(
        availability(client, team, site_codes="quest-78701-1")
    )
    # Cancel, with a reason from the list.
    reasons = client.get("/v3/order/psc/appointment/cancellation-reasons", headers=team.headers)
    listed = [ClientFacingAppointmentCancellationReason.model_validate(r) for r in reasons.json()]
    assert {r.id for r in listed} >= {"patient_schedule_conflict", "no_show"}
    unknown = client.patch(
        f"/v3/order/{order_id}/psc/appointment/cancel",
        json={"cancellationReasonId": "bored"},
        headers=team.headers,
    )
    assert unknown.status_code == 422
    cancelled = client.patch(
        f"/v3/order/{order_id}/psc/appointment/cancel",
        json={"cancellationReasonId": "patient_schedule_conflict", "note": "Travelling"},
        headers=team.headers,
    )
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled" and not cancelled.json()["can_reschedule"]
    assert "2026-03-11T11:00:00-05:00" in keys_of(
        availability(client, team, site_codes="quest-78705-1")
    )
    assert order_statuses(client, team, order_id)[-3:] == [
        "collecting_sample.walk_in_test.appointment_scheduled",
        "collecting_sample.walk_in_test.appointment_scheduled",
        "collecting_sample.walk_in_test.appointment_cancelled",
    ]
    # The log: the appointment's events, and the slots' (no personal value in clear).
    events = list(service.ledger.events.get(appointment_id_of(UUID(order_id))))
    assert [type(e).__name__ for e in events] == ["Created", "Booked", "Rescheduled", "Cancelled"]
    assert "Travelling" not in str([vars(e) for e in events])
    assert "Wheelchair" not in str([vars(e) for e in events])


def test_as_of_reads_the_appointment_as_it_was(
    client: TestClient, team: Team, service: Service, clock: Clock
) -> None:
    user_id = user_of(client, team, service, "as-of")
    order_id = order_of(client, team, user_id)
    slots = keys_of(availability(client, team, site_codes="quest-78701-1"))
    clock.now = T0 + timedelta(minutes=1)
    client.post(
        f"/v3/order/{order_id}/psc/appointment/book",
        json={"booking_key": slots["2026-03-10T12:00:00-05:00"]},
        headers=team.headers,
    )
    clock.now = T0 + timedelta(minutes=10)
    moved = client.patch(
        f"/v3/order/{order_id}/psc/appointment/reschedule",
        json={"booking_key": slots["2026-03-10T13:00:00-05:00"]},
        headers=team.headers,
    )
    assert moved.status_code == 200, moved.text
    clock.now = T0 + timedelta(minutes=20)
    then = client.get(
        f"/v3/order/{order_id}/psc/appointment",
        params={"as_of": (T0 + timedelta(minutes=5)).isoformat()},
        headers=team.headers,
    )
    assert then.status_code == 200, then.text
    assert then.json()["start_at"] == "2026-03-10T12:00:00-05:00"
    now = client.get(f"/v3/order/{order_id}/psc/appointment", headers=team.headers)
    assert now.json()["start_at"] == "2026-03-10T13:00:00-05:00"
    before = client.get(
        f"/v3/order/{order_id}/psc/appointment",
        params={"as_of": (T0 + timedelta(seconds=30)).isoformat()},
        headers=team.headers,
    )
    assert before.status_code == 404


def test_a_slot_is_booked_once(client: TestClient, team: Team, service: Service) -> None:
    user_id = user_of(client, team, service, "slot-once")
    first, second = order_of(client, team, user_id), order_of(client, team, user_id)
    key = keys_of(availability(client, team, site_codes="quest-78701-1"))[
        "2026-03-10T10:00:00-05:00"
    ]
    won = client.post(
        f"/v3/order/{first}/psc/appointment/book", json={"booking_key": key}, headers=team.headers
    )
    lost = client.post(
        f"/v3/order/{second}/psc/appointment/book", json={"booking_key": key}, headers=team.headers
    )
    assert won.status_code == 200 and lost.status_code == 409
    assert "already booked" in lost.json()["detail"]
    # The loser recorded nothing: no appointment, its order as it was.
    assert service.ledger.find(appointment_id_of(UUID(second))) is None
    assert order_statuses(client, team, second)[-1].endswith("requisition_created")
    slot = service.ledger.find(slot_id_of("quest-78701-1", datetime(2026, 3, 10, 15, tzinfo=UTC)))
    assert isinstance(slot, Slot) and slot.order_id == UUID(first)


def test_a_cancelled_orders_slot_is_free_again(
    client: TestClient, team: Team, service: Service
) -> None:
    user_id = user_of(client, team, service, "order-cancelled")
    first, second = order_of(client, team, user_id), order_of(client, team, user_id)
    at = "2026-03-10T11:00:00-05:00"
    key = keys_of(availability(client, team, site_codes="quest-78701-1"))[at]
    booked = client.post(
        f"/v3/order/{first}/psc/appointment/book", json={"booking_key": key}, headers=team.headers
    )
    assert booked.status_code == 200, booked.text
    assert at not in keys_of(availability(client, team, site_codes="quest-78701-1"))
    # The team cancels the order itself: its appointment ends with it, its slot is free.
    assert client.post(f"/v3/order/{first}/cancel", headers=team.headers).status_code == 200
    ended = client.get(f"/v3/order/{first}/psc/appointment", headers=team.headers).json()
    assert ended["status"] == "cancelled" and not ended["can_reschedule"]
    assert at in keys_of(availability(client, team, site_codes="quest-78701-1"))
    taken = client.post(
        f"/v3/order/{second}/psc/appointment/book", json={"booking_key": key}, headers=team.headers
    )
    assert taken.status_code == 200, taken.text
    slot = service.ledger.find(slot_id_of("quest-78701-1", datetime(2026, 3, 10, 16, tzinfo=UTC)))
    assert isinstance(slot, Slot) and slot.order_id == UUID(second)


def test_the_audit_keeps_the_appointment_and_erasure_destroys_where_it_was(
    client: TestClient, team: Team, service: Service, clock: Clock
) -> None:
    user_id = user_of(client, team, service, "erased")
    order_id = order_of(client, team, user_id, HEART)
    slots = client.post(
        "/v3/order/phlebotomy/appointment/availability", json=AUSTIN, headers=team.headers
    ).json()
    booked = client.post(
        f"/v3/order/{order_id}/phlebotomy/appointment/book",
        json={"booking_key": keys_of(slots)["2026-03-12T09:00:00-05:00"]},
        headers=team.headers,
    )
    assert booked.status_code == 200, booked.text
    entries = [e for e in history(service, UUID(user_id)) if e.stream_kind == "appointment"]
    assert [e.event for e in entries] == ["Appointment.Created", "Appointment.Booked"]
    # The user's deletion cancels the order: the appointment ends, its slot is free.
    assert client.delete(f"/v2/user/{user_id}", headers=team.headers).status_code == 200
    assert "2026-03-12T09:00:00-05:00" in keys_of(
        client.post(
            "/v3/order/phlebotomy/appointment/availability", json=AUSTIN, headers=team.headers
        ).json()
    )
    clock.advance(timedelta(days=8))
    assert service.jobs.sweep_erasures() == 1
    path = f"/v3/order/{order_id}/phlebotomy/appointment"
    assert client.get(path, headers=team.headers).status_code == 404
    # The audit keeps that it was booked; where, and the notes, are gone with the key.
    kept = [e for e in history(service, UUID(user_id)) if e.stream_kind == "appointment"]
    assert [e.event for e in kept] == ["Appointment.Created", "Appointment.Booked"]
    text = json.dumps([e.changes for e in kept], default=str)
    assert "Analytical Row" not in text and ERASED_PLACEHOLDER in text
    stored = service.ledger.find(appointment_id_of(UUID(order_id)))
    assert isinstance(stored, Appointment) and stored.slot is not None
    assert service.key_store.open(stored.user_id, stored.slot.sealed_location) is None
    # The deletion report holds the appointment's stream in its proof, and verifies.
    report = deletion_report(service, UUID(user_id), service_ctx(), team_id=team.team_id)
    assert verify_report(report) == []
    assert str(stored.id) in json.dumps(report) and "Analytical Row" not in json.dumps(report)


def test_each_change_is_announced_once_by_the_orders_webhook(
    client: TestClient, team: Team, service: Service
) -> None:
    with http_receiver() as receiver:
        service.webhooks.create(service_ctx(), team.team_id, "sandbox", url=receiver.url("ok"))
        user_id = user_of(client, team, service, "announced")
        order_id = order_of(client, team, user_id)
        slots = keys_of(availability(client, team, site_codes="quest-78701-1"))
        for method, action, body in (
            ("post", "book", {"booking_key": slots["2026-03-10T09:00:00-05:00"]}),
            ("patch", "reschedule", {"booking_key": slots["2026-03-10T10:00:00-05:00"]}),
            ("patch", "cancel", {"cancellationReasonId": "no_show"}),
        ):
            done = client.request(
                method.upper(),
                f"/v3/order/{order_id}/psc/appointment/{action}",
                json=body,
                headers=team.headers,
            )
            assert done.status_code == 200, done.text
        service.jobs.dispatch_webhooks()
        bodies = [json.loads(r.body) for r in receiver.on("ok")]
    orders = [b for b in bodies if b["event_type"].startswith("labtest.order.")]
    changed = [ClientFacingOrderChanged.model_validate(b) for b in orders]
    announced = [c.data.events[-1].status.value for c in changed if c.data.id == order_id]
    # And the appointment's own: made, then each change, as that change left it.
    appointments = [
        ClientFacingAppointmentChanged.model_validate(b)
        for b in bodies
        if b["event_type"].startswith("labtest.appointment.")
    ]
    assert [
        (a.event_type.value, a.data.status.value, len(a.data.events)) for a in appointments
    ] == [
        ("labtest.appointment.created", "confirmed", 1),
        ("labtest.appointment.updated", "confirmed", 2),
        ("labtest.appointment.updated", "cancelled", 3),
    ]
    assert appointments[0].data.start_at != appointments[1].data.start_at
    assert {a.data.order_id for a in appointments} == {order_id}
    # Placed, the requisition, then one message per appointment change, in order.
    assert announced == order_statuses(client, team, order_id)
    assert announced[-3:] == [
        "collecting_sample.walk_in_test.appointment_scheduled",
        "collecting_sample.walk_in_test.appointment_scheduled",
        "collecting_sample.walk_in_test.appointment_cancelled",
    ]


def test_bad_bookings_are_clear_errors(
    client: TestClient, team: Team, other_team: Team, service: Service
) -> None:
    user_id = user_of(client, team, service, "bad-input")
    order_id = order_of(client, team, user_id)
    key = keys_of(availability(client, team, site_codes="quest-78701-1"))[
        "2026-03-10T10:00:00-05:00"
    ]
    book = f"/v3/order/{order_id}/psc/appointment/book"
    forged = key[:-3] + ("AAA" if not key.endswith("AAA") else "BBB")
    for body in ({"booking_key": forged}, {"booking_key": "x"}, {}, {"booking_key": key, "x": 1}):
        refused = client.post(book, json=body, headers=team.headers)
        assert refused.status_code == 422, (body, refused.text)
    # Another team's order is a 404; so is an order without an appointment.
    assert (
        client.post(book, json={"booking_key": key}, headers=other_team.headers).status_code == 404
    )
    assert (
        client.get(f"/v3/order/{order_id}/psc/appointment", headers=team.headers).status_code == 404
    )
    # A walk-in order has no at-home appointment; an unknown center has no slots.
    home = client.post(
        f"/v3/order/{order_id}/phlebotomy/appointment/book",
        json={"booking_key": key},
        headers=team.headers,
    )
    assert home.status_code == 409
    past = client.post(
        "/v3/order/psc/appointment/availability",
        params={"site_codes": "nowhere-00000-1"},
        headers=team.headers,
    )
    assert past.status_code == 422
    assert (
        client.post("/v3/order/psc/appointment/availability", headers=team.headers).status_code
        == 422
    )
    # A start date too far ahead (or past the calendar's end) is a 422, not an overflow.
    for start_date in ("9999-12-31", "2027-03-10", "2026-13-01"):
        far = client.post(
            "/v3/order/psc/appointment/availability",
            params={"site_codes": "quest-78701-1", "start_date": start_date},
            headers=team.headers,
        )
        assert far.status_code == 422, (start_date, far.text)
    home_far = client.post(
        "/v3/order/phlebotomy/appointment/availability",
        params={"start_date": "9999-12-31"},
        json=AUSTIN,
        headers=team.headers,
    )
    assert home_far.status_code == 422


# -- at home ----------------------------------------------------------------------------------


def test_an_at_home_draw_is_booked_and_drawn_at_its_time(
    client: TestClient, team: Team, service: Service, clock: Clock
) -> None:
    user_id = user_of(client, team, service, "at-home")
    order_id = order_of(client, team, user_id, HEART)
    got = client.post(
        "/v3/order/phlebotomy/appointment/availability",
        json={**AUSTIN, "unit": None},
        headers=team.headers,
    )
    assert got.status_code == 200, got.text
    AppointmentAvailabilitySlots.model_validate(got.json())
    assert {d["location"]["code"] for d in got.json()["slots"]} == {"getlabs:78701"}
    key = keys_of(got.json())["2026-03-11T08:00:00-05:00"]
    booked = client.post(
        f"/v3/order/{order_id}/phlebotomy/appointment/book",
        json={"booking_key": key},
        headers=team.headers,
    )
    assert booked.status_code == 200, booked.text
    body = booked.json()
    assert (body["type"], body["provider"], body["status"]) == (
        "phlebotomy",
        "getlabs",
        "confirmed",
    )
    assert body["address"]["first_line"] == "12 Analytical Row"
    assert body["start_at"] == "2026-03-11T08:00:00-05:00"
    # The simulated lab draws it at its time, not before.
    clock.now = datetime(2026, 3, 11, 12, 59, tzinfo=UTC)
    service.jobs.progress_lab_orders()
    assert order_statuses(client, team, order_id)[-1].endswith("appointment_scheduled")
    clock.now = datetime(2026, 3, 11, 13, 0, tzinfo=UTC)
    service.jobs.progress_lab_orders()
    order = client.get(f"/v3/order/{order_id}", headers=team.headers).json()
    assert order["events"][-1]["status"] == "collecting_sample.at_home_phlebotomy.draw_completed"
    assert order["last_event"]["status"] == order["events"][-1]["status"]
    drawn = client.get(f"/v3/order/{order_id}/phlebotomy/appointment", headers=team.headers)
    assert drawn.json()["status"] == "completed"
    assert [e["status"] for e in drawn.json()["events"]] == ["scheduled", "completed"]
    # Cancelling a drawn appointment's order is no longer possible through it.
    late = client.patch(
        f"/v3/order/{order_id}/phlebotomy/appointment/reschedule",
        json={"booking_key": keys_of(got.json())["2026-03-12T08:00:00-05:00"]},
        headers=team.headers,
    )
    assert late.status_code == 409


def test_a_walk_in_is_drawn_at_its_appointment(
    client: TestClient, team: Team, service: Service, clock: Clock
) -> None:
    user_id = user_of(client, team, service, "walk-in-drawn")
    order_id = order_of(client, team, user_id)
    key = keys_of(availability(client, team, site_codes="quest-78701-1"))[
        "2026-03-10T10:30:00-05:00"
    ]
    booked = client.post(
        f"/v3/order/{order_id}/psc/appointment/book",
        json={"booking_key": key},
        headers=team.headers,
    )
    assert booked.status_code == 200, booked.text
    clock.now = datetime(2026, 3, 10, 15, 29, tzinfo=UTC)  # 10:29 in Austin
    service.jobs.progress_lab_orders()
    assert order_statuses(client, team, order_id)[-1].endswith("appointment_scheduled")
    clock.now = datetime(2026, 3, 10, 15, 30, tzinfo=UTC)
    service.jobs.progress_lab_orders()
    order = client.get(f"/v3/order/{order_id}", headers=team.headers).json()
    assert order["last_event"]["status"] == "sample_with_lab.walk_in_test.partial_results"
    drawn = client.get(f"/v3/order/{order_id}/psc/appointment", headers=team.headers).json()
    assert drawn["status"] == "completed" and not drawn["can_reschedule"]
    assert drawn["events"][-1]["status"] == "completed"


def test_an_at_home_draw_can_be_requested_then_booked(
    client: TestClient, team: Team, service: Service
) -> None:
    user_id = user_of(client, team, service, "requested")
    order_id = order_of(client, team, user_id, HEART)
    elsewhere = {
        "first_line": "3 Lake Street",
        "city": "Austin",
        "state": "TX",
        "zip_code": "78702",
    }
    refused = client.post(
        f"/v3/order/{order_id}/phlebotomy/appointment/request",
        json={"address": elsewhere, "provider": "phlebfinders"},
        headers=team.headers,
    )
    assert refused.status_code == 422  # phlebfinders does not serve Texas
    requested = client.post(
        f"/v3/order/{order_id}/phlebotomy/appointment/request",
        json={"address": elsewhere, "provider": "getlabs"},
        headers=team.headers,
    )
    assert requested.status_code == 200, requested.text
    body = ClientFacingAppointment.model_validate(requested.json())
    assert body.status.value == "pending" and requested.json()["start_at"] is None
    assert requested.json()["address"]["first_line"] == "3 Lake Street"
    slots = client.post(
        "/v3/order/phlebotomy/appointment/availability", json=elsewhere, headers=team.headers
    ).json()
    booked = client.post(
        f"/v3/order/{order_id}/phlebotomy/appointment/book",
        json={"booking_key": keys_of(slots)["2026-03-12T09:00:00-05:00"]},
        headers=team.headers,
    )
    assert booked.status_code == 200, booked.text
    assert booked.json()["address"]["first_line"] == "3 Lake Street"
    assert [e["status"] for e in booked.json()["events"]] == ["pending", "scheduled"]
    reasons = client.get(
        "/v3/order/phlebotomy/appointment/cancellation-reasons", headers=team.headers
    ).json()
    cancelled = client.patch(
        f"/v3/order/{order_id}/phlebotomy/appointment/cancel",
        json={"cancellation_reason_id": reasons[0]["id"], "notes": "Moved"},
        headers=team.headers,
    )
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    # Each change is a status of the order, announced once (the order's webhook).
    statuses = order_statuses(client, team, order_id)
    assert statuses[-3:] == [
        "collecting_sample.at_home_phlebotomy.appointment_pending",
        "collecting_sample.at_home_phlebotomy.appointment_scheduled",
        "collecting_sample.at_home_phlebotomy.appointment_cancelled",
    ]
    order = service.ledger.find(UUID(order_id))
    assert isinstance(order, Order) and order.status == statuses[-1]
    events = list(service.ledger.events.get(appointment_id_of(UUID(order_id))))
    assert [type(e).__name__ for e in events] == ["Created", "Requested", "Booked", "Cancelled"]
