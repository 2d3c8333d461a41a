"""Appointments of lab test orders (issue 33): a draw at a patient service center (a
walk-in order) or at home by a phlebotomist (an at-home order), and the slots they hold.

One `Appointment` stream per order (its id derived from the order's): booked, requested
(at home, without a time), rescheduled, cancelled, and booked again after a cancellation.
Where the draw happens (the center's or the patient's address, and its coordinates) is
sealed with the user's key; the place's code, the times and the reasons stay in clear, so
the audit keeps that an appointment was made and moved after the user's erasure.

A slot is booked once: each slot is a `Slot` stream whose id is derived from the place and
the start (ADR 0039). Two bookings of the same slot both found it (or both take it at the
same version), and the event store's unique (stream, version) lets one of them commit; the
other is `SlotTaken` (409), in whatever process it runs.

The order's own history carries each change as a status (`appointment_scheduled`,
`appointment_cancelled`: the official client's names), recorded in the same transaction
(`booking.py`), which is what the order's webhook announces.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate
from healthledger.domain.audited import Audited, UserStream
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import LedgerError

# The two kinds (the official client's AppointmentType).
PSC = "patient_service_center"
PHLEBOTOMY = "phlebotomy"
# The collection method each kind serves.
METHOD_OF_KIND = {PSC: "walk_in_test", PHLEBOTOMY: "at_home_phlebotomy"}

# The appointment's status (AppointmentStatus) and its events' (AppointmentEventStatus).
CONFIRMED = "confirmed"
PENDING = "pending"
CANCELLED = "cancelled"
COMPLETED = "completed"
SCHEDULED = "scheduled"
NEW = "new"

# The order's statuses an appointment records (OrderLowLevelStatus).
ORDER_SCHEDULED = "appointment_scheduled"
ORDER_CANCELLED = "appointment_cancelled"
ORDER_PENDING = "appointment_pending"

_APPOINTMENT_NAMESPACE = uuid.UUID("2b0f6a34-1d7e-5c9a-8e3b-4f6a1c2d9e70")
_SLOT_NAMESPACE = uuid.UUID("9c4e2a71-6b3d-5f08-a1e9-7d2c5b8f0e13")


@dataclass(frozen=True)
class CancellationReason:
    id: str
    name: str
    # Whether the team may refund the patient (the official client's is_refundable).
    is_refundable: bool


# The reasons a team gives (both kinds share them); ours, as the official client lists
# them by id. New reasons are added at the end; an id is never reused.
CANCELLATION_REASONS = (
    CancellationReason("patient_schedule_conflict", "The patient cannot make it", True),
    CancellationReason("patient_requested", "The patient asked to cancel", True),
    CancellationReason("patient_not_fasting", "The patient was not fasting", True),
    CancellationReason("order_changed", "The order changed or was replaced", True),
    CancellationReason("no_show", "The patient did not come", False),
    CancellationReason("provider_unavailable", "The center or phlebotomist cannot serve it", True),
)
REASONS_BY_ID = {reason.id: reason for reason in CANCELLATION_REASONS}


class SlotTaken(LedgerError):
    def __init__(self) -> None:
        super().__init__(
            "This slot is already booked: ask for the availability again and book another."
        )


class AppointmentNotFound(LedgerError):
    def __init__(self) -> None:
        super().__init__("The order has no appointment of this kind.")


class AppointmentConflict(LedgerError):
    """A change the appointment's or the order's state does not allow (409)."""


def appointment_id_of(order_id: UUID) -> UUID:
    return uuid.uuid5(_APPOINTMENT_NAMESPACE, str(order_id))


def slot_id_of(place_code: str, start_at: datetime) -> UUID:
    """The stream of one slot: a place (a center's site code, or a phlebotomy provider's
    area) and a start instant (UTC)."""
    return uuid.uuid5(_SLOT_NAMESPACE, f"{place_code}\x1f{start_at.timestamp():.0f}")


@dataclass(frozen=True)
class BookedSlot:
    """What a booking holds: the place (its code), when, in which time zone, and where
    the draw happens (sealed: the address and coordinates)."""

    place_code: str
    start_at: datetime
    end_at: datetime
    iana_timezone: str
    sealed_location: str

    def fields(self) -> dict[str, Any]:
        return {
            "place_code": self.place_code,
            "start_at": self.start_at,
            "end_at": self.end_at,
            "iana_timezone": self.iana_timezone,
            "sealed_location": self.sealed_location,
        }


class Appointment(Audited, created_event_name="Created"):
    TOPIC = "healthledger:Appointment"
    USER_STREAM = UserStream("appointment")

    class Event(Audited.Event):
        pass

    class Created(Event, Aggregate.Created):
        """The order's first appointment of a kind: its provider (a lab's centers, or a
        phlebotomy network)."""

        TOPIC = "healthledger:Appointment.Created.v1"
        ANNOUNCES = ()
        user_id: UUID
        team_id: UUID
        order_id: UUID
        type: str
        provider: str

    class Booked(Event):
        """A slot booked (also after a cancellation, or a request)."""

        TOPIC = "healthledger:Appointment.Booked.v1"
        # The first booking or request of the order is created, every later change
        # updated (domain/webhooks/announcements.py).
        ANNOUNCES = ("labtest.appointment.created", "labtest.appointment.updated")
        PERSONAL_FIELDS = ("sealed_location", "sealed_notes")
        place_code: str
        start_at: datetime
        end_at: datetime
        iana_timezone: str
        sealed_location: str
        sealed_notes: str | None

        def apply(self, appointment: Appointment) -> None:
            appointment.slot = BookedSlot(
                self.place_code,
                self.start_at,
                self.end_at,
                self.iana_timezone,
                self.sealed_location,
            )
            appointment.status = CONFIRMED
            appointment.sealed_notes = self.sealed_notes
            appointment.history.append((SCHEDULED, self.timestamp))

    class Requested(Event):
        """An at-home draw asked of a network that books on its own (no time yet)."""

        TOPIC = "healthledger:Appointment.Requested.v1"
        ANNOUNCES = ("labtest.appointment.created", "labtest.appointment.updated")
        PERSONAL_FIELDS = ("sealed_location", "sealed_notes")
        provider: str
        iana_timezone: str
        sealed_location: str
        sealed_notes: str | None

        def apply(self, appointment: Appointment) -> None:
            appointment.provider = self.provider
            appointment.slot = None
            appointment.requested_location = self.sealed_location
            appointment.requested_timezone = self.iana_timezone
            appointment.status = PENDING
            appointment.sealed_notes = self.sealed_notes
            appointment.history.append((PENDING, self.timestamp))

    class Rescheduled(Booked):
        """Moved to another slot: the same fields as a booking, applied the same way."""

        TOPIC = "healthledger:Appointment.Rescheduled.v1"

    class Cancelled(Event):
        TOPIC = "healthledger:Appointment.Cancelled.v1"
        ANNOUNCES = ("labtest.appointment.updated",)
        PERSONAL_FIELDS = ("sealed_note",)
        reason_id: str
        sealed_note: str | None

        def apply(self, appointment: Appointment) -> None:
            appointment.status = CANCELLED
            appointment.cancel_reason = self.reason_id
            appointment.history.append((CANCELLED, self.timestamp))

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        user_id: UUID,
        team_id: UUID,
        order_id: UUID,
        type: str,
        provider: str,
    ) -> None:
        self.user_id = user_id
        self.team_id = team_id
        self.order_id = order_id
        self.type = type
        self.provider = provider
        # Nothing booked or requested yet (its first event, in the same save, says which).
        self.status = NEW
        self.slot: BookedSlot | None = None
        self.requested_location: str | None = None
        self.requested_timezone: str | None = None
        self.sealed_notes: str | None = None
        self.cancel_reason: str | None = None
        self.created_at = timestamp
        # (AppointmentEventStatus, when): the appointment's `events`.
        self.history: list[tuple[str, datetime]] = []

    @classmethod
    def open(
        cls, ctx: CommandContext, now: datetime, *, order: Any, type: str, provider: str
    ) -> Appointment:
        return cls.new(
            ctx,
            now,
            id=appointment_id_of(order.id),
            user_id=order.user_id,
            team_id=order.team_id,
            order_id=order.id,
            type=type,
            provider=provider,
        )

    @property
    def is_active(self) -> bool:
        return self.status in (CONFIRMED, PENDING)

    def book(
        self, ctx: CommandContext, now: datetime, slot: BookedSlot, sealed_notes: str | None
    ) -> None:
        if self.status == CONFIRMED:
            raise AppointmentConflict(
                "The order already has a booked appointment: reschedule it, or cancel it first."
            )
        self.record(ctx, now, self.Booked, **slot.fields(), sealed_notes=sealed_notes)

    def request(
        self,
        ctx: CommandContext,
        now: datetime,
        *,
        provider: str,
        iana_timezone: str,
        sealed_location: str,
        sealed_notes: str | None,
    ) -> None:
        if self.is_active:
            raise AppointmentConflict(
                "The order already has an appointment: cancel it before requesting another."
            )
        self.record(
            ctx,
            now,
            self.Requested,
            provider=provider,
            iana_timezone=iana_timezone,
            sealed_location=sealed_location,
            sealed_notes=sealed_notes,
        )

    def reschedule(
        self, ctx: CommandContext, now: datetime, slot: BookedSlot, sealed_notes: str | None
    ) -> None:
        if not self.is_active:
            raise AppointmentConflict("The appointment is cancelled: book a new one.")
        self.record(ctx, now, self.Rescheduled, **slot.fields(), sealed_notes=sealed_notes)

    def cancel(
        self, ctx: CommandContext, now: datetime, reason_id: str, sealed_note: str | None
    ) -> None:
        if not self.is_active:
            raise AppointmentConflict("The appointment is already cancelled.")
        self.record(ctx, now, self.Cancelled, reason_id=reason_id, sealed_note=sealed_note)


def as_the_order_left_it(
    appointment: Appointment, order_history: list[tuple[str, datetime]]
) -> tuple[str, list[tuple[str, datetime]]]:
    """The appointment's status and events, with what its order did since it was last
    booked: the sample drawn (the order past `appointment_scheduled`: completed), or the
    order cancelled or failed (cancelled). The draw is recorded on the order only (the
    simulated lab, or the lab, moves the order), so it is read from the order's history."""
    events = list(appointment.history)
    if appointment.status != CONFIRMED or not events:
        return appointment.status, events
    booked_at = events[-1][1]
    for status, at in order_history:
        if at < booked_at:
            continue
        top, low = status.split(".", 1)[0], status.rsplit(".", 1)[-1]
        if low == "draw_completed" or top in ("sample_with_lab", "completed"):
            return COMPLETED, [*events, (COMPLETED, at)]
        if top in ("cancelled", "failed"):
            return CANCELLED, [*events, (CANCELLED, at)]
    return appointment.status, events


class Slot(Audited, created_event_name="Taken"):
    """One slot of one place: which order holds it, if any. No user owns it (it names an
    order, a place and a time; nothing about the person)."""

    TOPIC = "healthledger:AppointmentSlot"
    USER_STREAM = None

    class Event(Audited.Event):
        pass

    class Taken(Event, Aggregate.Created):
        """Taken for the first time (the stream's founding): what makes two bookings of a
        free slot compete for version 1."""

        TOPIC = "healthledger:AppointmentSlot.Taken.v1"
        place_code: str
        start_at: datetime
        order_id: UUID

    # The founding event is called Taken; Created names it too (as LinkToken's Issued),
    # else eventsourcing would give the aggregate a Created without a pinned topic.
    Created = Taken

    class TakenAgain(Event):
        TOPIC = "healthledger:AppointmentSlot.TakenAgain.v1"
        order_id: UUID

        def apply(self, slot: Slot) -> None:
            slot.order_id = self.order_id

    class Released(Event):
        TOPIC = "healthledger:AppointmentSlot.Released.v1"

        def apply(self, slot: Slot) -> None:
            slot.order_id = None

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        place_code: str,
        start_at: datetime,
        order_id: UUID,
    ) -> None:
        self.place_code = place_code
        self.start_at = start_at
        self.order_id: UUID | None = order_id

    @classmethod
    def take_new(
        cls, ctx: CommandContext, now: datetime, place_code: str, start_at: datetime, order_id: UUID
    ) -> Slot:
        return cls.new(
            ctx,
            now,
            id=slot_id_of(place_code, start_at),
            place_code=place_code,
            start_at=start_at,
            order_id=order_id,
        )

    def take(
        self, ctx: CommandContext, now: datetime, order_id: UUID, *, holder_open: bool
    ) -> None:
        """Take the slot for `order_id`: free, or held by an order that has ended since
        (cancelled, failed: `holder_open` False), whose appointment ended with it."""
        if self.order_id is not None and self.order_id != order_id and holder_open:
            raise SlotTaken()
        self.record(ctx, now, self.TakenAgain, order_id=order_id)

    def release(self, ctx: CommandContext, now: datetime, order_id: UUID) -> None:
        """Let go of the slot if `order_id` holds it (a reschedule, a cancellation)."""
        if self.order_id == order_id:
            self.record(ctx, now, self.Released)
