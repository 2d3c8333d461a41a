"""What an appointment answers (issue 33): the official clients' `ClientFacingAppointment`,
for the routes (now, and `as_of`) and for the webhook of an appointment's event, which
carries the appointment as that event left it.

Its status and events are the appointment's, with what its order did since it was last
booked (`as_the_order_left_it`): the order's statuses are passed up to the instant the
answer is about. Times carry the place's offset; sealed values (where, the notes) are
opened with the vault given (the key store, or a `PlaceholderVault` for the past).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID
from zoneinfo import ZoneInfo

from healthledger.domain.labs.appointments import Appointment, as_the_order_left_it
from healthledger.domain.labs.orders import FINAL_STATUSES, top_level


class Opens(Protocol):
    def open(self, user_id: UUID, sealed: str) -> Any | None: ...


def local_time(at: datetime | None, zone: str | None) -> str | None:
    """An instant as the wire shows it: with the place's offset."""
    if at is None:
        return None
    return (at.astimezone(ZoneInfo(zone)) if zone else at).isoformat()


def us_address(value: Any) -> dict[str, Any]:
    """An address as answered (the client's UsAddress); an erased one (as_of) reads as
    its placeholder in every line."""
    if not isinstance(value, dict):
        text = str(value)
        return {"first_line": text, "city": text, "state": text, "zip_code": text}
    return {
        "first_line": value.get("first_line") or "",
        "second_line": value.get("second_line"),
        "city": value.get("city") or "",
        "state": value.get("state") or "",
        "zip_code": value.get("zip_code") or "",
        "unit": value.get("unit"),
    }


def appointment_answer(
    appointment: Appointment, order_history: Sequence[tuple[str, datetime]], vault: Opens
) -> dict[str, Any]:
    """The appointment, its order's statuses being `order_history` (up to the instant
    answered about)."""
    status, events = as_the_order_left_it(appointment, list(order_history))
    order_open = not order_history or top_level(order_history[-1][0]) not in FINAL_STATUSES
    slot = appointment.slot
    sealed = slot.sealed_location if slot else appointment.requested_location
    opened = None if sealed is None else vault.open(appointment.user_id, sealed)
    location = opened if isinstance(opened, dict) else {}
    zone = slot.iana_timezone if slot else appointment.requested_timezone
    notes = (
        None
        if appointment.sealed_notes is None
        else vault.open(appointment.user_id, appointment.sealed_notes)
    )
    return {
        "id": str(appointment.id),
        "user_id": str(appointment.user_id),
        "order_id": str(appointment.order_id),
        "order_transaction_id": None,
        "address": us_address(location.get("address", opened)),
        "location": {"lng": location.get("lng", 0.0), "lat": location.get("lat", 0.0)},
        "start_at": local_time(slot.start_at if slot else None, zone),
        "end_at": local_time(slot.end_at if slot else None, zone),
        "iana_timezone": zone,
        "type": appointment.type,
        "provider": appointment.provider,
        "status": status,
        "provider_id": slot.place_code if slot else appointment.provider,
        "external_id": None,
        "can_reschedule": status in ("confirmed", "pending") and order_open,
        "appointment_notes": None if notes is None else str(notes),
        "event_status": events[-1][0] if events else status,
        "event_data": None,
        "events": [
            {"created_at": at.isoformat(), "status": name, "data": None} for name, at in events
        ],
    }
