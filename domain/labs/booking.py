"""Use cases of appointments (issue 33): the open slots of places, and booking,
requesting, rescheduling and cancelling an order's appointment.

A place is where a draw happens: a lab's patient service center, or a phlebotomy
network's area (the first three digits of a zip code) for draws at home (`Places`, the
reference data's). Its slots are its opening hours cut in slots, in its own time zone,
less the slots some order holds (`Slot` streams, read together). Everything is stored in
UTC; the wire shows the place's time zone (the routes).

A change records the appointment's event, the slots taken or let go, and the order's
status, in one transaction: a booking that loses its slot to another (`SlotTaken`) or
its order to a concurrent change leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any, Protocol
from uuid import UUID
from zoneinfo import ZoneInfo

from eventsourcing.persistence import IntegrityError
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import ConcurrentChange, InvalidRequest
from healthledger.domain.labs.appointments import (
    METHOD_OF_KIND,
    ORDER_CANCELLED,
    ORDER_PENDING,
    ORDER_SCHEDULED,
    PHLEBOTOMY,
    PSC,
    REASONS_BY_ID,
    Appointment,
    AppointmentConflict,
    AppointmentNotFound,
    BookedSlot,
    Slot,
    SlotTaken,
    appointment_id_of,
    slot_id_of,
)
from healthledger.domain.labs.ordering import SANDBOX, LabOrders
from healthledger.domain.labs.orders import (
    COLLECTING_SAMPLE,
    RECEIVED,
    Order,
    low_level,
    status_of,
    top_level,
)
from healthledger.domain.ledger import Clock, Ledger, command
from healthledger.domain.personal_data import PersonalDataVault

# How far ahead availability looks, and how soon a slot may start.
DAYS_SHOWN = 7
LEAD_TIME = timedelta(hours=1)
# The order's low-level statuses from which an appointment may be booked or changed:
# the requisition exists, the sample is not drawn yet.
_BOOKABLE_FROM = frozenset({"requisition_created", ORDER_PENDING, ORDER_SCHEDULED, ORDER_CANCELLED})


@dataclass(frozen=True)
class OpeningHours:
    """Per weekday (0: Monday), when the place opens and closes (local times), and how
    long one slot is."""

    days: Mapping[int, tuple[time, time]]
    slot_minutes: int


@dataclass(frozen=True)
class Place:
    code: str
    kind: str
    # The official client's AppointmentProvider: the lab's (quest) or the network's.
    provider: str
    name: str
    # A postal address (UsAddress's fields); an at-home place has only its area's city.
    address: Mapping[str, Any]
    lat: float
    lon: float
    time_zone: str
    hours: OpeningHours
    price: float
    # Whether its slots are booked through this service (else with the lab directly).
    bookable: bool


class Places(Protocol):
    def place(self, code: str) -> Place | None:
        """The place of a code (a center's site code, or `<network>:<zip3>`)."""

    def phlebotomy_places(self, zip_code: str) -> Sequence[Place]:
        """The at-home places (one per network that books) serving a zip code; empty for
        an unknown zip code."""

    def time_zone_of(self, zip_code: str) -> str | None:
        """The IANA time zone of a zip code (None: unknown)."""


@dataclass(frozen=True)
class OpenSlot:
    start_at: datetime
    end_at: datetime


@dataclass(frozen=True)
class DayOpenings:
    place: Place
    day: date
    slots: Sequence[OpenSlot]


def slots_of(place: Place, day: date) -> list[OpenSlot]:
    """The place's slots on a day (its local day), in UTC."""
    hours = place.hours.days.get(day.weekday())
    if hours is None:
        return []
    zone = ZoneInfo(place.time_zone)
    opens, closes = hours
    start = datetime.combine(day, opens, zone)
    end = datetime.combine(day, closes, zone)
    step = timedelta(minutes=place.hours.slot_minutes)
    found = []
    while start + step <= end:
        found.append(
            OpenSlot(start.astimezone(ZoneInfo("UTC")), (start + step).astimezone(ZoneInfo("UTC")))
        )
        start += step
    return found


class LabAppointments:
    def __init__(
        self,
        ledger: Ledger,
        vault: PersonalDataVault,
        clock: Clock,
        orders: LabOrders,
        places: Places,
    ) -> None:
        self.ledger = ledger
        self.vault = vault
        self.clock = clock
        self.orders = orders
        self.places = places

    # -- reads --------------------------------------------------------------------------

    def availability(self, places: Sequence[Place], first_day: date | None) -> list[DayOpenings]:
        """Each place's open slots per day, over `DAYS_SHOWN` days from `first_day` (the
        place's today by default): its hours less what is held, from an hour from now."""
        now = self.clock()
        earliest = now + LEAD_TIME
        # Each slot with its stream's id, derived once (a week of five centers: ~900).
        days: list[tuple[Place, date, list[tuple[UUID, OpenSlot]]]] = []
        for place in places:
            start = first_day or now.astimezone(ZoneInfo(place.time_zone)).date()
            for offset in range(DAYS_SHOWN):
                day = start + timedelta(days=offset)
                slots = [
                    (slot_id_of(place.code, s.start_at), s)
                    for s in slots_of(place, day)
                    if s.start_at >= earliest
                ]
                days.append((place, day, slots))
        ids = [slot_id for _p, _d, slots in days for slot_id, _s in slots]
        holds = {
            slot_id: slot.order_id
            for slot_id, slot in (self.ledger.find_many(ids) if ids else {}).items()
            if isinstance(slot, Slot) and slot.order_id is not None
        }
        # A slot of an order that has ended since (cancelled, failed) is free again.
        holders = self.ledger.find_many(list(set(holds.values()))) if holds else {}
        held = {
            slot_id for slot_id, order_id in holds.items() if _still_holds(holders.get(order_id))
        }
        return [
            DayOpenings(place, day, [s for slot_id, s in slots if slot_id not in held])
            for place, day, slots in days
        ]

    def load(self, team_id: UUID, order_id: UUID, kind: str) -> tuple[Order, Appointment]:
        """The team's order and its appointment of `kind` (none: AppointmentNotFound)."""
        order = self.orders.load(team_id, order_id)
        appointment = self.ledger.find(appointment_id_of(order.id))
        if not isinstance(appointment, Appointment) or appointment.type != kind:
            raise AppointmentNotFound()
        return order, appointment

    # -- commands -----------------------------------------------------------------------

    @command
    def book(
        self,
        ctx: CommandContext,
        team_id: UUID,
        order_id: UUID,
        kind: str,
        place_code: str,
        start_at: datetime,
        notes: str | None = None,
    ) -> Appointment:
        """Book the slot at `start_at` of a place for the order (one appointment at a
        time: a booked one is rescheduled, not booked again)."""
        order = self._bookable(team_id, order_id, kind)
        place, slot = self._slot(kind, place_code, start_at)
        now = self.clock()
        appointment = self._appointment_for(ctx, now, order, kind, place.provider)
        booked = self._booked_slot(order, appointment, place, slot)
        appointment.book(ctx, now, booked, self._seal(order, notes))
        # A cancelled appointment let its slot go when it was cancelled: nothing to free.
        taken = self._take(ctx, now, place.code, slot.start_at, order.id)
        self._scheduled(ctx, now, order, slot.start_at)
        self._save(order, appointment, taken)
        return appointment

    @command
    def reschedule(
        self,
        ctx: CommandContext,
        team_id: UUID,
        order_id: UUID,
        kind: str,
        place_code: str,
        start_at: datetime,
        notes: str | None = None,
    ) -> Appointment:
        """Move the order's appointment to another slot (of any place of its kind): the
        new slot is taken and the old one let go together."""
        order = self._bookable(team_id, order_id, kind)
        _order, appointment = self.load(team_id, order_id, kind)
        place, slot = self._slot(kind, place_code, start_at)
        now = self.clock()
        previous = appointment.slot
        if previous is not None and (previous.place_code, previous.start_at) == (
            place.code,
            slot.start_at,
        ):
            raise AppointmentConflict("The appointment is already at this slot.")
        booked = self._booked_slot(order, appointment, place, slot)
        freed = self._release_of(ctx, now, appointment, order.id, booked)
        appointment.reschedule(ctx, now, booked, self._seal(order, notes))
        taken = self._take(ctx, now, place.code, slot.start_at, order.id)
        self._scheduled(ctx, now, order, slot.start_at)
        self._save(order, appointment, taken, *freed)
        return appointment

    @command
    def cancel(
        self,
        ctx: CommandContext,
        team_id: UUID,
        order_id: UUID,
        kind: str,
        reason_id: str,
        note: str | None = None,
    ) -> Appointment:
        """Cancel the order's appointment, with one of `CANCELLATION_REASONS`: its slot is
        free again, and the order waits for a new booking."""
        if reason_id not in REASONS_BY_ID:
            raise InvalidRequest(
                "Unknown cancellation reason: one of the ids that /cancellation-reasons lists.",
                "cancellation_reason_id",
            )
        order, appointment = self.load(team_id, order_id, kind)
        if not order.is_open:
            raise AppointmentConflict(f"The order is {order.top_level_status}.")
        now = self.clock()
        freed = self._release_of(ctx, now, appointment, order.id, None)
        appointment.cancel(ctx, now, reason_id, self._seal(order, note))
        order.move_to(
            ctx,
            now,
            status_of(COLLECTING_SAMPLE, order.collection_method, ORDER_CANCELLED),
            next_step_at=None,
        )
        self._save(order, appointment, *freed)
        return appointment

    @command
    def request(
        self,
        ctx: CommandContext,
        team_id: UUID,
        order_id: UUID,
        address: Mapping[str, Any],
        provider: str,
        notes: str | None = None,
    ) -> Appointment:
        """Ask a phlebotomy network to arrange an at-home draw at `address` (it books the
        time itself: the appointment is pending until then)."""
        order = self._bookable(team_id, order_id, PHLEBOTOMY)
        zip_code = str(address["zip_code"])
        serving = {p.provider for p in self.places.phlebotomy_places(zip_code)}
        if provider not in serving:
            raise InvalidRequest(
                f"{provider} does not serve this address's zip code "
                f"(serving it: {', '.join(sorted(serving)) or 'none'}).",
                "provider",
            )
        zone = self.places.time_zone_of(zip_code)
        assert zone is not None  # a zip code some network serves is a known one
        now = self.clock()
        appointment = self._appointment_for(ctx, now, order, PHLEBOTOMY, provider)
        appointment.request(
            ctx,
            now,
            provider=provider,
            iana_timezone=zone,
            sealed_location=self.vault.seal(order.user_id, {"address": dict(address)}),
            sealed_notes=self._seal(order, notes),
        )
        if low_level(order.status) != ORDER_PENDING:
            order.move_to(
                ctx,
                now,
                status_of(COLLECTING_SAMPLE, order.collection_method, ORDER_PENDING),
                next_step_at=None,
            )
        self._save(order, appointment)
        return appointment

    # -- helpers ------------------------------------------------------------------------

    def _appointment_for(
        self, ctx: CommandContext, now: datetime, order: Order, kind: str, provider: str
    ) -> Appointment:
        """The order's appointment, opened now if it has none yet (an order's kind is
        its collection method's: `_bookable` checked it)."""
        found = self.ledger.find(appointment_id_of(order.id))
        if found is None:
            return Appointment.open(ctx, now, order=order, type=kind, provider=provider)
        assert isinstance(found, Appointment) and found.type == kind
        return found

    def _bookable(self, team_id: UUID, order_id: UUID, kind: str) -> Order:
        order = self.orders.load(team_id, order_id)
        if order.collection_method != METHOD_OF_KIND[kind]:
            raise AppointmentConflict(
                f"The order is collected by {order.collection_method}: a "
                f"{kind.replace('_', ' ')} appointment is for {METHOD_OF_KIND[kind]} orders."
            )
        if top_level(order.status) not in (RECEIVED, COLLECTING_SAMPLE) or (
            low_level(order.status) not in _BOOKABLE_FROM
        ):
            raise AppointmentConflict(
                f"The order is {order.status}: an appointment is made once its requisition "
                "is created and before the sample is drawn."
            )
        return order

    def _slot(self, kind: str, place_code: str, start_at: datetime) -> tuple[Place, OpenSlot]:
        place = self.places.place(place_code)
        if place is None or place.kind != kind:
            raise InvalidRequest("The booking key names no place of this kind.", "booking_key")
        if not place.bookable:
            raise AppointmentConflict(
                "Appointments at this lab's centers are made with the lab directly."
            )
        day = start_at.astimezone(ZoneInfo(place.time_zone)).date()
        slot = next((s for s in slots_of(place, day) if s.start_at == start_at), None)
        if slot is None:
            raise InvalidRequest("The booking key names no slot of the place.", "booking_key")
        if slot.start_at < self.clock() + LEAD_TIME:
            raise InvalidRequest(
                "The slot has passed (or starts within the hour): ask for the availability again.",
                "booking_key",
            )
        return place, slot

    def _booked_slot(
        self, order: Order, appointment: Appointment, place: Place, slot: OpenSlot
    ) -> BookedSlot:
        """Where the draw happens: the center, or the patient's address (the one the
        request gave, else the order's), which must lie in the place's area."""
        if place.kind == PSC:
            location: dict[str, Any] = {"address": dict(place.address)}
        else:
            address = self._home_address(order, appointment)
            if not str(address.get("zip_code", "")).startswith(place.code.rsplit(":", 1)[-1]):
                raise InvalidRequest(
                    "The booking key is for another area than the appointment's address.",
                    "booking_key",
                )
            location = {"address": address}
        location["lat"], location["lng"] = place.lat, place.lon
        return BookedSlot(
            place.code,
            slot.start_at,
            slot.end_at,
            place.time_zone,
            self.vault.seal(order.user_id, location),
        )

    def _home_address(self, order: Order, appointment: Appointment) -> dict[str, Any]:
        sealed = appointment.requested_location
        if sealed is not None:
            opened = self.vault.open(order.user_id, sealed)
            if isinstance(opened, dict):
                return dict(opened["address"])
        stored = self.vault.open(order.user_id, order.sealed_patient_address)
        if not isinstance(stored, dict):
            raise AppointmentNotFound()
        return {
            "first_line": stored.get("first_line"),
            "second_line": stored.get("second_line"),
            "city": stored.get("city"),
            "state": stored.get("state"),
            "zip_code": stored.get("zip_code"),
        }

    def _take(
        self,
        ctx: CommandContext,
        now: datetime,
        place_code: str,
        start_at: datetime,
        order_id: UUID,
    ) -> Slot:
        held = self.ledger.find(slot_id_of(place_code, start_at))
        if held is None:
            return Slot.take_new(ctx, now, place_code, start_at, order_id)
        assert isinstance(held, Slot)
        holder = None if held.order_id is None else self.ledger.find(held.order_id)
        held.take(ctx, now, order_id, holder_open=_still_holds(holder))
        return held

    def _release_of(
        self,
        ctx: CommandContext,
        now: datetime,
        appointment: Appointment,
        order_id: UUID,
        keeping: BookedSlot | None,
    ) -> list[Slot]:
        """The slot the appointment held, let go (none if it held none, or keeps it)."""
        previous = appointment.slot
        if previous is None or not appointment.is_active:
            return []
        if keeping is not None and (previous.place_code, previous.start_at) == (
            keeping.place_code,
            keeping.start_at,
        ):
            return []
        held = self.ledger.find(slot_id_of(previous.place_code, previous.start_at))
        if not isinstance(held, Slot):
            return []
        held.release(ctx, now, order_id)
        return [held]

    def _scheduled(
        self, ctx: CommandContext, now: datetime, order: Order, start_at: datetime
    ) -> None:
        """The order's status: scheduled; a sandbox order's draw is due at its time."""
        order.move_to(
            ctx,
            now,
            status_of(COLLECTING_SAMPLE, order.collection_method, ORDER_SCHEDULED),
            next_step_at=start_at if order.environment == SANDBOX else None,
        )

    def _seal(self, order: Order, text: str | None) -> str | None:
        return None if text is None else self.vault.seal(order.user_id, text)

    def _save(self, order: Order, appointment: Appointment, *slots: Slot) -> None:
        try:
            self.ledger.save(order, appointment, *slots)
        except IntegrityError as exc:
            # Another booking took one of the slots first (or changed the order).
            for slot in slots:
                stored = self.ledger.find(slot.id)
                if isinstance(stored, Slot) and stored.order_id not in (None, order.id):
                    raise SlotTaken() from exc
            raise ConcurrentChange() from exc


def _still_holds(holder: object) -> bool:
    """Whether a slot's holding order still holds it: while it is open (an order that
    cannot be read is taken to hold it: never two appointments in one slot)."""
    return not isinstance(holder, Order) or holder.is_open
