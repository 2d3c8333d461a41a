"""Request and response models of the appointment routes (issue 33), in the official
clients' shapes (`vital` 2.1.569 and `junction-api-sdk` 2.0.0: `PscInfo`,
`AppointmentAvailabilitySlots`, `ClientFacingAppointment`,
`ClientFacingAppointmentCancellationReason`); times carry the place's offset."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from healthledger.adapters.reference.labs.areas import ZIP_CODE, zip_centroids
from pydantic import BaseModel, ConfigDict, Field, field_validator

# What the notes and free text of a request may hold: a few lines, no control characters
# (the service's text rule refuses those for every body).
_NOTES = Field(default=None, max_length=1000)


class UsAddress(BaseModel):
    """An address in the US (the client's UsAddress); the zip code an existing one."""

    model_config = ConfigDict(extra="forbid")
    first_line: str = Field(min_length=1, max_length=200)
    second_line: str | None = Field(default=None, max_length=200)
    city: str = Field(min_length=1, max_length=100)
    state: str = Field(pattern=r"^[A-Z]{2}$")
    zip_code: str = Field(max_length=10)
    unit: str | None = Field(default=None, max_length=50)
    access_notes: str | None = _NOTES

    @field_validator("zip_code")
    @classmethod
    def _us_zip_code(cls, value: str) -> str:
        if not re.fullmatch(ZIP_CODE, value, re.ASCII):
            raise ValueError("zip_code must be a US zip code: five digits, or ZIP+4.")
        if value[:5] not in zip_centroids():
            raise ValueError("zip_code is well-formed but is not an existing US zip code.")
        return value


class BookingRequest(BaseModel):
    """Book or reschedule: a booking key from the availability. The confirmation fields
    of the newer client are accepted: a booking here is confirmed at once."""

    model_config = ConfigDict(extra="forbid")
    booking_key: str = Field(min_length=1, max_length=512)
    appointment_notes: str | None = _NOTES
    async_confirmation: bool | None = None
    sync_confirmation_timeout_millisecond: int | None = Field(default=None, ge=0)
    async_confirmation_timeout_millisecond: int | None = Field(default=None, ge=0)


class RescheduleRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    booking_key: str = Field(min_length=1, max_length=512)
    appointment_notes: str | None = _NOTES


class PhlebotomyRequest(BaseModel):
    """Ask a network that arranges the time itself (the client's request method)."""

    model_config = ConfigDict(extra="forbid")
    address: UsAddress
    provider: str = Field(pattern=r"^[a-z0-9_]{1,64}$")
    appointment_notes: str | None = _NOTES


class PscCancel(BaseModel):
    """The client sends a center's cancellation in camelCase (`cancellationReasonId`)."""

    model_config = ConfigDict(extra="forbid")
    cancellationReasonId: str = Field(min_length=1, max_length=64)
    note: str | None = _NOTES


class PhlebotomyCancel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cancellation_reason_id: str = Field(min_length=1, max_length=64)
    notes: str | None = _NOTES


# -- answers ------------------------------------------------------------------------------

_HOURS_EXAMPLE: dict[str, Any] = {
    day: {"open": "07:00", "close": "15:00"}
    for day in ("monday", "tuesday", "wednesday", "thursday", "friday")
} | {"saturday": {"open": "08:00", "close": "12:00"}, "sunday": None}
_CENTER_ADDRESS: dict[str, Any] = {
    "first_line": "Quest Diagnostics Patient Service Center, Austin",
    "second_line": None,
    "city": "Austin",
    "state": "TX",
    "zip_code": "78701",
    "unit": None,
}
_SLOT_EXAMPLE: dict[str, Any] = {
    "booking_key": "eyJjIjoicXVlc3QtNzg3MDEtMSIsInMiOjE3NzMxNTMwMDB9.c2lnbmF0dXJl",
    "start": "2026-03-10T09:30:00-05:00",
    "end": "2026-03-10T09:45:00-05:00",
    "expires_at": "2026-03-10T08:30:00-05:00",
    "price": 0.0,
    "is_priority": False,
    "num_appointments_available": 1,
}
APPOINTMENT_EXAMPLE: dict[str, Any] = {
    "id": "1c9d5e0a-4b7f-5a2e-9c3d-8e1f2a3b4c5d",
    "user_id": "5f0c2d1e-8a7b-4c6d-9e0f-1a2b3c4d5e6f",
    "order_id": "7d1e9a52-3b4c-4e8f-9a1b-2c3d4e5f6a7b",
    "order_transaction_id": None,
    "address": _CENTER_ADDRESS,
    "location": {"lng": -97.7426, "lat": 30.2713},
    "start_at": "2026-03-10T09:30:00-05:00",
    "end_at": "2026-03-10T09:45:00-05:00",
    "iana_timezone": "America/Chicago",
    "type": "patient_service_center",
    "provider": "quest",
    "status": "confirmed",
    "provider_id": "quest-78701-1",
    "external_id": None,
    "can_reschedule": True,
    "appointment_notes": None,
    "event_status": "scheduled",
    "event_data": None,
    "events": [{"created_at": "2026-03-09T18:00:00+00:00", "status": "scheduled", "data": None}],
}


class LngLat(BaseModel):
    lng: float
    lat: float


class AnswerAddress(BaseModel):
    first_line: str
    second_line: str | None = None
    city: str
    state: str
    zip_code: str
    unit: str | None = None


class LabLocationMetadata(BaseModel):
    name: str
    state: str
    city: str
    zip_code: str
    first_line: str
    second_line: str | None = None
    phone_number: str | None = None
    fax_number: str | None = None
    hours: dict[str, Any] | None = Field(
        description="Per weekday, the opening and closing times (local), null if closed."
    )


class LabLocation(BaseModel):
    metadata: LabLocationMetadata
    distance: int = Field(description="Great-circle miles from the zip code, rounded.")
    site_code: str = Field(description="What availability's site_codes names.")
    supported_bill_types: list[str]
    location: LngLat
    capabilities: list[str]


class PscInfo(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "lab_id": 1,
                    "slug": "quest",
                    "patient_service_centers": [
                        {
                            "metadata": {
                                "name": _CENTER_ADDRESS["first_line"],
                                "state": "TX",
                                "city": "Austin",
                                "zip_code": "78701",
                                "first_line": _CENTER_ADDRESS["first_line"],
                                "second_line": None,
                                "phone_number": None,
                                "fax_number": None,
                                "hours": _HOURS_EXAMPLE,
                            },
                            "distance": 0,
                            "site_code": "quest-78701-1",
                            "supported_bill_types": ["client_bill"],
                            "location": {"lng": -97.7426, "lat": 30.2713},
                            "capabilities": ["appointment_scheduling_with_lab"],
                        }
                    ],
                }
            ]
        }
    )
    lab_id: int
    slug: str
    patient_service_centers: list[LabLocation]


class TimeSlot(BaseModel):
    booking_key: str | None
    start: datetime
    end: datetime
    expires_at: datetime | None
    price: float
    is_priority: bool
    num_appointments_available: int


class AppointmentLocation(BaseModel):
    location: LngLat
    distance: int | None
    address: AnswerAddress
    code: str
    name: str
    iana_timezone: str | None


class DaySlots(BaseModel):
    location: AppointmentLocation | None
    date: str
    slots: list[TimeSlot]


class AvailabilitySlots(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "slots": [
                        {
                            "location": {
                                "location": {"lng": -97.7426, "lat": 30.2713},
                                "distance": 0,
                                "address": _CENTER_ADDRESS,
                                "code": "quest-78701-1",
                                "name": _CENTER_ADDRESS["first_line"],
                                "iana_timezone": "America/Chicago",
                            },
                            "date": "2026-03-10",
                            "slots": [_SLOT_EXAMPLE],
                        }
                    ],
                    "timezone": "America/Chicago",
                }
            ]
        }
    )
    slots: list[DaySlots]
    timezone: str | None


class AppointmentEvent(BaseModel):
    created_at: datetime
    status: Literal["pending", "reserved", "scheduled", "completed", "cancelled", "in_progress"]
    data: dict[str, Any] | None = None


class AppointmentAnswer(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [APPOINTMENT_EXAMPLE]})
    id: str
    user_id: str
    order_id: str
    order_transaction_id: str | None = None
    address: AnswerAddress
    location: LngLat
    start_at: datetime | None
    end_at: datetime | None
    iana_timezone: str | None
    type: Literal["phlebotomy", "patient_service_center"]
    provider: str
    status: Literal["confirmed", "pending", "reserved", "in_progress", "completed", "cancelled"]
    provider_id: str
    external_id: str | None = None
    can_reschedule: bool
    appointment_notes: str | None
    event_status: str
    event_data: dict[str, Any] | None = None
    events: list[AppointmentEvent]


class CancellationReasonAnswer(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "patient_schedule_conflict",
                    "name": "The patient cannot make it",
                    "is_refundable": True,
                }
            ]
        }
    )
    id: str
    name: str
    is_refundable: bool
