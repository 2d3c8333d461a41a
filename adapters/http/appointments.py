"""Team API routes of appointments (issue 33; docs/labs.md#appointments): patient service
centers near a zip code or an order, their open slots, and an order's appointment at a
center (walk-in orders) or at home (at-home phlebotomy orders): book, request,
reschedule, cancel (with the reasons), read (now, or `as_of`).

A slot is offered as a booking key: the place and the start, signed (a key cannot be
forged into another slot). Times on the wire carry the place's offset; the log holds UTC.
Writes go through `LabAppointments`; another team's order is a 404.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Query
from healthledger.adapters.answers.appointments import (
    appointment_answer,
    local_time,
    us_address,
)
from healthledger.adapters.compliance.time_travel import (
    PlaceholderVault,
    aggregate_as_of,
    reads_as_of,
)
from healthledger.adapters.composition import Service
from healthledger.adapters.http.appointment_schemas import (
    AppointmentAnswer,
    AvailabilitySlots,
    BookingRequest,
    CancellationReasonAnswer,
    PhlebotomyCancel,
    PhlebotomyRequest,
    PscCancel,
    PscInfo,
    RescheduleRequest,
    UsAddress,
)
from healthledger.adapters.http.as_of import TEAM_READ_REFUSES_AS_OF, TeamAsOf
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.http.signed_tokens import SignedTokens
from healthledger.adapters.reference.labs.appointment_places import Center
from healthledger.adapters.reference.labs.areas import ZIP_CODE, zip_centroids
from healthledger.domain.errors import InvalidRequest
from healthledger.domain.labs.appointments import (
    CANCELLATION_REASONS,
    PHLEBOTOMY,
    PSC,
    Appointment,
    AppointmentNotFound,
    appointment_id_of,
)
from healthledger.domain.labs.booking import LEAD_TIME, DayOpenings, Place
from healthledger.domain.labs.orders import Order, OrderNotFound
from pydantic import BaseModel, ConfigDict, Field

Radius = Literal["10", "20", "25", "50", "100"]
Capability = Literal[
    "stat", "appointment_scheduling_via_junction", "appointment_scheduling_with_lab"
]
# How far ahead availability may be asked for.
BOOKING_HORIZON = timedelta(days=180)
# How many centers one availability question by zip code looks at (the nearest).
AVAILABILITY_CENTERS = 5
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NOT_FOUND = {404: "Unknown order, another team's, or an order of a user erased since."}
_NO_APPOINTMENT = {404: "Unknown order, another team's, or the order has no such appointment."}
_CHANGE_REFUSED = (
    "The slot was booked by another order meanwhile; or the order or its appointment "
    "does not allow it (booked already, cancelled, sample drawn, another collection "
    "method)."
)


class _BookingClaims(BaseModel):
    model_config = ConfigDict(extra="forbid")
    c: str = Field(pattern=r"^[a-z0-9_:-]{1,80}$")  # the place's code
    s: int = Field(ge=0)  # the slot's start, seconds since the epoch


def _keys(service: Service) -> SignedTokens[_BookingClaims]:
    return SignedTokens(
        service.cursor_secret, b"healthledger booking keys v1", "booking-v1", _BookingClaims
    )


def _booking_key(service: Service, place: Place, start_at: datetime) -> str:
    return _keys(service).sign({"c": place.code, "s": int(start_at.timestamp())})


def _slot_of(service: Service, key: str) -> tuple[str, datetime]:
    claims = _keys(service).open(key)
    if claims is None:
        raise InvalidRequest("booking_key is not a key that availability gave.", "booking_key")
    return claims.c, datetime.fromtimestamp(claims.s, UTC)


def _hours(place: Place) -> dict[str, Any]:
    days = place.hours.days
    return {
        name: (
            None
            if index not in days
            else {
                "open": days[index][0].strftime("%H:%M"),
                "close": days[index][1].strftime("%H:%M"),
            }
        )
        for index, name in enumerate(_WEEKDAYS)
    }


def _location(center: Center, service: Service) -> dict[str, Any]:
    place = center.place
    details = service.lab_catalog.details(center.lab_id)
    return {
        "metadata": {
            "name": place.name,
            "state": place.address["state"],
            "city": place.address["city"],
            "zip_code": place.address["zip_code"],
            "first_line": place.address["first_line"],
            "second_line": None,
            "phone_number": None,
            "fax_number": None,
            "hours": _hours(place),
        },
        "distance": round(center.miles),
        "site_code": place.code,
        "supported_bill_types": [] if details is None else list(details.supported_bill_types),
        "location": {"lng": place.lon, "lat": place.lat},
        "capabilities": list(center.capabilities),
    }


def _psc_info(
    service: Service, zip_code: str, lab_id: int, radius: int, capabilities: list[str]
) -> dict[str, Any]:
    details = service.lab_catalog.details(lab_id)
    if details is None or not details.central_lab:
        raise InvalidRequest(
            "lab_id names no central lab (with service centers).", "lab_id", "query"
        )
    centers = service.appointment_places.centers_near(zip_code, radius, lab_id, capabilities)
    return {
        "lab_id": lab_id,
        "slug": details.lab.slug,
        "patient_service_centers": [_location(c, service) for c in centers],
    }


def _availability(service: Service, openings: list[DayOpenings], miles: dict[str, float]) -> Any:
    zones = {o.place.time_zone for o in openings}
    days = []
    for opening in openings:
        place = opening.place
        zone = place.time_zone
        days.append(
            {
                "location": {
                    "location": {"lng": place.lon, "lat": place.lat},
                    "distance": None if place.code not in miles else round(miles[place.code]),
                    "address": us_address(place.address),
                    "code": place.code,
                    "name": place.name,
                    "iana_timezone": zone,
                },
                "date": opening.day.isoformat(),
                "slots": [
                    {
                        "booking_key": _booking_key(service, place, slot.start_at),
                        "start": local_time(slot.start_at, zone),
                        "end": local_time(slot.end_at, zone),
                        "expires_at": local_time(slot.start_at - LEAD_TIME, zone),
                        "price": place.price,
                        "is_priority": False,
                        "num_appointments_available": 1,
                    }
                    for slot in opening.slots
                ],
            }
        )
    return {"slots": days, "timezone": zones.pop() if len(zones) == 1 else None}


def _start_date(service: Service, value: str | None) -> date | None:
    """The first day asked: a date, at most `BOOKING_HORIZON` ahead (slots further away
    are not offered; a day past is answered with no slots)."""
    if value is None:
        return None
    try:
        day = date.fromisoformat(value[:10])
    except ValueError:
        raise InvalidRequest(
            "start_date must be a date (YYYY-MM-DD).", "start_date", "query"
        ) from None
    if day > service.clock().date() + BOOKING_HORIZON:
        raise InvalidRequest(
            f"start_date may be at most {BOOKING_HORIZON.days} days ahead.", "start_date", "query"
        )
    return day


def _read(
    service: Service, caller: TeamApiCaller, order_id: UUID, kind: str, as_of: datetime | None
) -> Any:
    if as_of is None:
        order, appointment = service.appointments.load(caller.team_id, order_id, kind)
        return appointment_answer(appointment, order.history, service.key_store)
    reads_as_of(service, as_of)  # a future instant is refused
    order_then = aggregate_as_of(service, order_id, as_of)
    if not isinstance(order_then, Order) or order_then.team_id != caller.team_id:
        raise OrderNotFound()
    then = aggregate_as_of(service, appointment_id_of(order_id), as_of)
    if not isinstance(then, Appointment) or then.type != kind:
        raise AppointmentNotFound()
    return appointment_answer(then, order_then.history, PlaceholderVault(service.key_store))


def _changed(service: Service, caller: TeamApiCaller, appointment: Appointment) -> Any:
    order, fresh = service.appointments.load(caller.team_id, appointment.order_id, appointment.type)
    return appointment_answer(fresh, order.history, service.key_store)


router = APIRouter(tags=["lab appointments"], route_class=LedgerRoute)

ZipCode = Annotated[str, Query(max_length=10, pattern=ZIP_CODE, description="A US zip code.")]
Capabilities = Annotated[list[Capability] | None, Query(max_length=3)]


# -- patient service centers ------------------------------------------------------------------


@router.get(
    "/v3/order/psc/info",
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    response_model=PscInfo,
    responses=error_responses(401, 422),
)
def psc_info(
    service: CurrentService,
    caller: TeamApiCaller,
    zip_code: ZipCode,
    lab_id: Annotated[int, Query(ge=1)],
    radius: Radius = "25",
    capabilities: Capabilities = None,
    lab_account_id: UUID | None = None,
) -> Any:
    """The lab's patient service centers within the radius of the zip code, nearest first
    (at most 30), with their hours and capabilities."""
    if zip_code[:5] not in zip_centroids():
        raise InvalidRequest("zip_code is not an existing US zip code.", "zip_code", "query")
    if lab_account_id is not None:
        account = service.lab_catalog.account(lab_account_id)
        if account is None or lab_id not in account.lab_ids:
            raise InvalidRequest(
                "lab_account_id names no lab account of this lab.", "lab_account_id", "query"
            )
    return _psc_info(service, zip_code, lab_id, int(radius), list(capabilities or ()))


@router.get(
    "/v3/order/{order_id:uuid}/psc/info",
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    response_model=PscInfo,
    responses=error_responses(401, 404, 422, described=_NOT_FOUND),
)
def order_psc_info(
    service: CurrentService,
    caller: TeamApiCaller,
    order_id: UUID,
    radius: Radius = "25",
    capabilities: Capabilities = None,
) -> Any:
    """The centers of the order's lab near the patient's address."""
    order = service.lab_orders.load(caller.team_id, order_id)
    address = service.key_store.open(order.user_id, order.sealed_patient_address)
    zip_code = str(address.get("zip_code", "")) if isinstance(address, dict) else ""
    return _psc_info(service, zip_code, order.lab_id, int(radius), list(capabilities or ()))


@router.post(
    "/v3/order/psc/appointment/availability",
    response_model=AvailabilitySlots,
    responses=error_responses(401, 422),
)
def psc_availability(
    service: CurrentService,
    caller: TeamApiCaller,
    lab: Annotated[str, Query(pattern=r"^[a-z0-9_]{1,64}$")] = "quest",
    start_date: Annotated[str | None, Query(max_length=32)] = None,
    site_codes: Annotated[list[str] | None, Query(max_length=20)] = None,
    zip_code: Annotated[str | None, Query(max_length=10, pattern=ZIP_CODE)] = None,
    radius: Radius = "25",
    allow_stale: bool | None = None,
) -> Any:
    """Open slots per center and day, for a week from `start_date`: the centers named by
    `site_codes`, or the lab's five nearest to `zip_code` within the radius."""
    first_day = _start_date(service, start_date)
    places = service.appointment_places
    miles: dict[str, float] = {}
    if site_codes:
        found = [places.place(code) for code in dict.fromkeys(site_codes)]
        chosen = [p for p in found if p is not None and p.kind == PSC]
        if len(chosen) != len(found):
            raise InvalidRequest("site_codes names no center of ours.", "site_codes", "query")
    elif zip_code is not None:
        details = service.lab_catalog.lab_by_slug(lab)
        if details is None:
            raise InvalidRequest("lab names no lab.", "lab", "query")
        near = places.centers_near(zip_code, int(radius), details.id)[:AVAILABILITY_CENTERS]
        miles = {c.place.code: c.miles for c in near}
        chosen = [c.place for c in near]
    else:
        raise InvalidRequest("Name the centers (site_codes) or a zip_code.", "zip_code", "query")
    return _availability(service, service.appointments.availability(chosen, first_day), miles)


@router.get(
    "/v3/order/psc/appointment/cancellation-reasons",
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    response_model=list[CancellationReasonAnswer],
    responses=error_responses(401, 422),
)
@router.get(
    "/v3/order/phlebotomy/appointment/cancellation-reasons",
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    response_model=list[CancellationReasonAnswer],
    responses=error_responses(401, 422),
)
def cancellation_reasons(caller: TeamApiCaller) -> Any:
    """The reasons a cancellation gives (one list for both kinds)."""
    return [
        {"id": r.id, "name": r.name, "is_refundable": r.is_refundable} for r in CANCELLATION_REASONS
    ]


def _book(
    service: Service, caller: TeamApiCaller, order_id: UUID, kind: str, body: BookingRequest
) -> Any:
    code, start_at = _slot_of(service, body.booking_key)
    booked = service.appointments.book(
        caller.ctx, caller.team_id, order_id, kind, code, start_at, body.appointment_notes
    )
    return _changed(service, caller, booked)


def _reschedule(
    service: Service, caller: TeamApiCaller, order_id: UUID, kind: str, body: RescheduleRequest
) -> Any:
    code, start_at = _slot_of(service, body.booking_key)
    moved = service.appointments.reschedule(
        caller.ctx, caller.team_id, order_id, kind, code, start_at, body.appointment_notes
    )
    return _changed(service, caller, moved)


_WRITE_ERRORS = error_responses(
    401, 404, 409, 422, described={**_NO_APPOINTMENT, 409: _CHANGE_REFUSED}
)


@router.post(
    "/v3/order/{order_id:uuid}/psc/appointment/book",
    response_model=AppointmentAnswer,
    responses=_WRITE_ERRORS,
)
def book_psc(
    service: CurrentService, caller: TeamApiCaller, order_id: UUID, body: BookingRequest
) -> Any:
    """Book a slot at a center for a walk-in order (the key from the availability)."""
    return _book(service, caller, order_id, PSC, body)


@router.patch(
    "/v3/order/{order_id:uuid}/psc/appointment/reschedule",
    response_model=AppointmentAnswer,
    responses=_WRITE_ERRORS,
)
def reschedule_psc(
    service: CurrentService, caller: TeamApiCaller, order_id: UUID, body: RescheduleRequest
) -> Any:
    """Move the order's appointment to another slot (the old one is free again)."""
    return _reschedule(service, caller, order_id, PSC, body)


@router.patch(
    "/v3/order/{order_id:uuid}/psc/appointment/cancel",
    response_model=AppointmentAnswer,
    responses=_WRITE_ERRORS,
)
def cancel_psc(
    service: CurrentService, caller: TeamApiCaller, order_id: UUID, body: PscCancel
) -> Any:
    """Cancel the order's appointment at a center, giving a reason."""
    cancelled = service.appointments.cancel(
        caller.ctx, caller.team_id, order_id, PSC, body.cancellationReasonId, body.note
    )
    return _changed(service, caller, cancelled)


@router.get(
    "/v3/order/{order_id:uuid}/psc/appointment",
    response_model=AppointmentAnswer,
    responses=error_responses(401, 404, 422, described=_NO_APPOINTMENT),
)
def get_psc(service: CurrentService, caller: TeamApiCaller, order_id: UUID, as_of: TeamAsOf) -> Any:
    """The order's appointment at a center (with `as_of`: as it was then)."""
    return _read(service, caller, order_id, PSC, as_of)


# -- at-home phlebotomy -------------------------------------------------------------------------


@router.post(
    "/v3/order/phlebotomy/appointment/availability",
    response_model=AvailabilitySlots,
    responses=error_responses(401, 422),
)
def phlebotomy_availability(
    service: CurrentService,
    caller: TeamApiCaller,
    body: UsAddress,
    start_date: Annotated[str | None, Query(max_length=32)] = None,
) -> Any:
    """Open at-home slots for the address, per network that books slots and day."""
    places = service.appointment_places.phlebotomy_places(body.zip_code[:5])
    openings = service.appointments.availability(places, _start_date(service, start_date))
    return _availability(service, openings, {})


@router.post(
    "/v3/order/{order_id:uuid}/phlebotomy/appointment/book",
    response_model=AppointmentAnswer,
    responses=_WRITE_ERRORS,
)
def book_phlebotomy(
    service: CurrentService, caller: TeamApiCaller, order_id: UUID, body: BookingRequest
) -> Any:
    """Book an at-home draw for an at-home order, at its patient's address (or the one
    a request gave)."""
    return _book(service, caller, order_id, PHLEBOTOMY, body)


@router.post(
    "/v3/order/{order_id:uuid}/phlebotomy/appointment/request",
    response_model=AppointmentAnswer,
    responses=_WRITE_ERRORS,
)
def request_phlebotomy(
    service: CurrentService, caller: TeamApiCaller, order_id: UUID, body: PhlebotomyRequest
) -> Any:
    """Ask a network serving the address to arrange the draw: pending until booked."""
    address = body.address.model_dump(exclude={"access_notes"})
    requested = service.appointments.request(
        caller.ctx, caller.team_id, order_id, address, body.provider, body.appointment_notes
    )
    return _changed(service, caller, requested)


@router.patch(
    "/v3/order/{order_id:uuid}/phlebotomy/appointment/reschedule",
    response_model=AppointmentAnswer,
    responses=_WRITE_ERRORS,
)
def reschedule_phlebotomy(
    service: CurrentService, caller: TeamApiCaller, order_id: UUID, body: RescheduleRequest
) -> Any:
    return _reschedule(service, caller, order_id, PHLEBOTOMY, body)


@router.patch(
    "/v3/order/{order_id:uuid}/phlebotomy/appointment/cancel",
    response_model=AppointmentAnswer,
    responses=_WRITE_ERRORS,
)
def cancel_phlebotomy(
    service: CurrentService, caller: TeamApiCaller, order_id: UUID, body: PhlebotomyCancel
) -> Any:
    cancelled = service.appointments.cancel(
        caller.ctx, caller.team_id, order_id, PHLEBOTOMY, body.cancellation_reason_id, body.notes
    )
    return _changed(service, caller, cancelled)


@router.get(
    "/v3/order/{order_id:uuid}/phlebotomy/appointment",
    response_model=AppointmentAnswer,
    responses=error_responses(401, 404, 422, described=_NO_APPOINTMENT),
)
def get_phlebotomy(
    service: CurrentService, caller: TeamApiCaller, order_id: UUID, as_of: TeamAsOf
) -> Any:
    return _read(service, caller, order_id, PHLEBOTOMY, as_of)
