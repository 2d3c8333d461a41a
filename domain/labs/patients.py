"""Who an order is for and where: the patient's details and address (the requisition
data). Both are personal data, sealed with the user's key in the order's events.

An order that names neither takes them from the user's demographics (spec 2.1), which
hold both; the shapes are the official client's (`PatientDetailsWithValidation`,
`PatientAddressWithValidation`), which a team's order request sends.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from typing import Annotated, Any

from healthledger.domain.free_text import FreeText
from healthledger.domain.personal_data import (
    Address,
    Demographics,
    Ethnicity,
    GenderIdentity,
    Guarantor,
    Race,
    SexualOrientation,
)
from pydantic import BaseModel, ConfigDict, EmailStr, Field, field_validator

# Text that must say something: a name, a city... (a single space is not one).
_NOT_BLANK = "must not be blank"


def _not_blank(value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise ValueError(_NOT_BLANK)
    return value


# The demographics fields that are the patient's details (all but the address).
_DETAIL_FIELDS = tuple(name for name in Demographics.model_fields if name != "address")
_Text = Field(min_length=1, max_length=255)
_PHONE = r"^\+?[0-9 ()./\-]+$"


class PatientDetails(BaseModel):
    """The demographics without the address (spec 2.1's fields and rules), plus what the
    client's patient details carry beside them (household income and size). Names and
    gender must say something (not blank)."""

    model_config = ConfigDict(extra="forbid")
    first_name: FreeText = _Text
    last_name: FreeText = _Text
    email: EmailStr
    phone_number: str = Field(min_length=3, max_length=40, pattern=_PHONE)
    gender: FreeText = Field(min_length=1, max_length=64)
    dob: date
    medical_proxy: Guarantor | None = None
    race: Race | None = None
    ethnicity: Ethnicity | None = None
    sexual_orientation: SexualOrientation | None = None
    gender_identity: GenderIdentity | None = None
    household_income: int | None = Field(default=None, ge=0, le=10**9)
    household_size: int | None = Field(default=None, ge=1, le=100)

    _names_not_blank = field_validator("first_name", "last_name", "gender")(_not_blank)

    @field_validator("dob")
    @classmethod
    def _dob_in_the_past(cls, value: date) -> date:
        if value > date.today() or value.year < 1900:
            raise ValueError("dob must be a real date of birth, not in the future")
        return value


class PatientAddress(Address):
    """A postal address (the client's spelling `zip` accepted), plus the client's
    optional receiver name and phone number. Its lines, city and state must say
    something (not blank). The order request checks the zip code against the US zip
    codes too (`adapters/http/order_schemas.py`)."""

    model_config = ConfigDict(extra="forbid")
    receiver_name: Annotated[FreeText, Field(min_length=1, max_length=255)] | None = None
    phone_number: str | None = Field(default=None, min_length=3, max_length=40, pattern=_PHONE)

    _text_not_blank = field_validator(
        "first_line", "city", "state", "zip_code", "country", "receiver_name"
    )(_not_blank)


def details_from_demographics(demographics: Mapping[str, Any]) -> dict[str, Any]:
    """The patient details a user's recorded demographics make (their stored form)."""
    return {name: demographics.get(name) for name in _DETAIL_FIELDS}


def stored_details(details: PatientDetails) -> dict[str, Any]:
    return details.model_dump(mode="json", exclude={"address"})


def stored_address(address: PatientAddress) -> dict[str, Any]:
    return address.model_dump(mode="json")
