"""Every appointment method of the official clients' `lab_tests` (issue 33), through
`vital` 2.1.569 and `junction-api-sdk` 2.0.0 against a real server, only their base_url
changed: a walk-in order's centers (by order and by zip code), their availability, book,
get, reschedule, the cancellation reasons and cancel; an at-home order's availability for
an address, request, book, reschedule, reasons, cancel and get. Each answer parses with
the client's own models, and the order's `last_event` follows. On both databases."""

from __future__ import annotations

from typing import Any

import junction
import pytest
import vital
from healthledger.adapters.composition import Service
from healthledger.domain.labs.sandbox import SandboxPolicy

from tests.conftest import CLIENTS_PARSE_ANSWERS, Team

pytestmark = CLIENTS_PARSE_ANSWERS

WELLNESS = "0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a01"  # Quest, walk-in
HEART = "0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a02"  # Labcorp, at-home phlebotomy
PATIENT = {
    "first_name": "Grace",
    "last_name": "Hopper",
    "dob": "1956-12-09",
    "gender": "female",
    "email": "grace.hopper@example.org",
    "phone_number": "+1 555 010 1906",
}
HOME = {"first_line": "1 Congress Avenue", "city": "Austin", "state": "TX", "zip_code": "78701"}


def ready_order(client: Any, user_id: str, lab_test: str) -> str:
    """An order at Austin with its requisition created (one sandbox step)."""
    created = client.lab_tests.create_order(
        user_id=user_id,
        lab_test_id=lab_test,
        patient_details=PATIENT,
        patient_address={
            **{k: v for k, v in HOME.items() if k != "zip_code"},
            "zip": "78701",
            "country": "US",
        },
    )
    client.lab_tests.simulate_order_process(created.order.id)
    order_id: str = created.order.id
    return order_id


def keys(slots: Any) -> list[str]:
    return [s.booking_key for day in slots.slots for s in day.slots]


def status_of(client: Any, order_id: str) -> str:
    """The order's last status, as its events list it (and its last_event, where the
    client's model has one)."""
    order = client.lab_tests.get_order(order_id)
    answered = order.model_dump(mode="json")
    assert answered["last_event"]["status"] == answered["events"][-1]["status"]
    return str(answered["events"][-1]["status"])


@pytest.mark.parametrize("kind", ["vital", "junction"])
def test_every_appointment_method_through_the_official_clients(
    base_url: str, team: Team, service: Service, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.setattr(
        service.lab_orders, "policy", SandboxPolicy(failure_rate=0, cancellation_rate=0)
    )
    if kind == "vital":
        client: Any = vital.Vital(api_key=team.key, base_url=base_url, timeout=30)
        types: Any = vital
    else:
        client = junction.Junction(api_key=team.key, base_url=base_url, timeout=30)
        types = junction
    tests = client.lab_tests
    user_id = client.user.create(client_user_id=f"appointments-{kind}").user_id

    # -- at a patient service center ------------------------------------------------------
    walk_in = ready_order(client, user_id, WELLNESS)
    by_order = tests.get_order_psc_info(walk_in, radius="10")
    by_zip = tests.get_psc_info(zip_code="78701", lab_id=1, radius="10")
    assert isinstance(by_order, types.PscInfo) and by_order == by_zip
    site = by_order.patient_service_centers[0].site_code
    assert site == "quest-78701-1" and by_order.patient_service_centers[0].metadata.hours
    lab_arg = {"lab": "quest"} if kind == "junction" else {}
    offered = tests.get_psc_appointment_availability(site_codes=[site], **lab_arg)
    assert isinstance(offered, types.AppointmentAvailabilitySlots)
    assert offered.timezone == "America/Chicago"
    first, second = keys(offered)[:2]
    if kind == "vital":
        booked = tests.book_psc_appointment(
            walk_in, request=vital.AppointmentBookingRequest(booking_key=first)
        )
    else:
        booked = tests.book_psc_appointment(walk_in, booking_key=first)
    assert isinstance(booked, types.ClientFacingAppointment)
    assert (booked.status.value, booked.type.value, booked.provider_id) == (
        "confirmed",
        "patient_service_center",
        site,
    )
    assert booked.start_at is not None and booked.start_at.utcoffset() is not None
    assert status_of(client, walk_in).endswith("appointment_scheduled")
    got = tests.get_psc_appointment(walk_in)
    assert got.id == booked.id and got.start_at == booked.start_at
    if kind == "vital":
        moved = tests.reschedule_psc_appointment(
            walk_in, request=vital.AppointmentRescheduleRequest(booking_key=second)
        )
    else:
        moved = tests.reschedule_psc_appointment(walk_in, booking_key=second)
    assert moved.start_at is not None and booked.start_at < moved.start_at
    reasons = tests.get_psc_appointment_cancellation_reason()
    assert reasons and all(
        isinstance(r, types.ClientFacingAppointmentCancellationReason) for r in reasons
    )
    cancelled = tests.cancel_psc_appointment(
        walk_in, cancellation_reason_id=reasons[0].id, note="Travelling"
    )
    assert cancelled.status.value == "cancelled"
    assert [e.status.value for e in cancelled.events] == ["scheduled", "scheduled", "cancelled"]
    assert status_of(client, walk_in).endswith("appointment_cancelled")

    # -- at home ----------------------------------------------------------------------------
    at_home = ready_order(client, user_id, HEART)
    if kind == "vital":
        home_slots = tests.get_phlebotomy_appointment_availability(request=vital.UsAddress(**HOME))
    else:
        home_slots = tests.get_phlebotomy_appointment_availability(**HOME)
    assert isinstance(home_slots, types.AppointmentAvailabilitySlots)
    assert {d.location.code for d in home_slots.slots if d.location} == {"getlabs:78701"}
    requested = tests.request_phlebotomy_appointment(
        at_home, address=types.UsAddress(**HOME), provider="getlabs"
    )
    assert requested.status.value == "pending" and requested.start_at is None
    home_first, home_second = keys(home_slots)[:2]
    if kind == "vital":
        home = tests.book_phlebotomy_appointment(
            at_home, request=vital.AppointmentBookingRequest(booking_key=home_first)
        )
        home = tests.reschedule_phlebotomy_appointment(
            at_home, request=vital.AppointmentRescheduleRequest(booking_key=home_second)
        )
    else:
        home = tests.book_phlebotomy_appointment(at_home, booking_key=home_first)
        home = tests.reschedule_phlebotomy_appointment(at_home, booking_key=home_second)
    assert (home.type.value, home.provider.value, home.status.value) == (
        "phlebotomy",
        "getlabs",
        "confirmed",
    )
    assert home.address.first_line == HOME["first_line"]
    assert tests.get_phlebotomy_appointment(at_home).start_at == home.start_at
    home_reasons = tests.get_phlebotomy_appointment_cancellation_reason()
    assert [r.id for r in home_reasons] == [r.id for r in reasons]
    gone = tests.cancel_phlebotomy_appointment(
        at_home, cancellation_reason_id=home_reasons[1].id, notes="Moved"
    )
    assert gone.status.value == "cancelled"
    assert [e.status.value for e in tests.get_phlebotomy_appointment(at_home).events] == [
        "pending",
        "scheduled",
        "scheduled",
        "cancelled",
    ]
    assert status_of(client, at_home).endswith("appointment_cancelled")
