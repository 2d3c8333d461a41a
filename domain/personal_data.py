"""Personal data: what it is, how it is validated, and the vault port that seals it.

Personal values are sealed with a data key that belongs to one user (crypto-shredding):
destroying that key at erasure makes every sealed copy, in the event log, snapshots or
backups, unreadable for good. The vault is a port; adapters implement it with AES-GCM.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from enum import StrEnum
from typing import Annotated, Any, Protocol, runtime_checkable
from uuid import UUID

from healthledger.domain.free_text import FreeText
from pydantic import BaseModel, ConfigDict, EmailStr, Field, field_validator, model_validator

# How a personal value is shown where it is never printed (the audit trail): whether its
# key still exists (sealed) or was destroyed at erasure (erased).
SEALED_PLACEHOLDER = "<personal data: sealed>"
ERASED_PLACEHOLDER = "<personal data: erased>"


class PersonalDataVault(Protocol):
    """Seals and opens one user's personal values with that user's own data key."""

    def seal(self, user_id: UUID, value: Any) -> str:
        """JSON-serialisable `value` sealed for `user_id` (creates the key on first use)."""
        ...

    def open(self, user_id: UUID, sealed: str) -> Any | None:
        """The value, or None when the user's key has been destroyed (erased)."""
        ...

    def has_key(self, user_id: UUID) -> bool: ...

    def discard(self, user_id: UUID) -> None:
        """Drop the key of a user that was never recorded (a create that failed)."""
        ...


@runtime_checkable
class KeepsNewKeys(Protocol):
    """A vault that can hold the key of a user being created until the transaction that
    records the user's first events stores it, so that a create commits once (a key
    stored on its own would be a durable commit of its own before the events'). Every
    user has personal data (its client_user_id, sealed), so every create makes a key."""

    def new_key(self, user_id: UUID) -> None:
        """Make the key of a user being created, for an id nobody else knows yet."""
        ...


class Race(StrEnum):
    african_american_or_black = "african_american_or_black"
    asian = "asian"
    indigenous_native_american_alaska_native = "indigenous_native_american_alaska_native"
    other = "other"
    pacific_islander_or_hawaiian = "pacific_islander_or_hawaiian"
    white_caucasian = "white_caucasian"


class Ethnicity(StrEnum):
    hispanic = "hispanic"
    non_hispanic = "non_hispanic"
    ashkenazi_jewish = "ashkenazi_jewish"
    other = "other"


class SexualOrientation(StrEnum):
    lesbian_gay_or_homosexual = "lesbian_gay_or_homosexual"
    heterosexual_or_straight = "heterosexual_or_straight"
    bisexual = "bisexual"
    dont_know = "dont_know"
    other = "other"


class GenderIdentity(StrEnum):
    male = "male"
    female = "female"
    female_to_male_ftm_transgender_male_trans_man = "female_to_male_ftm_transgender_male_trans_man"
    male_to_female_mtf_transgender_female_trans_woman = (
        "male_to_female_mtf_transgender_female_trans_woman"
    )
    genderqueer = "genderqueer"
    other = "other"


_Text = Field(min_length=1, max_length=255)


class Address(BaseModel):
    """The spec's UserAddress, plus what the official client sends (docs/compatibility.md):
    the postal code may come as `zip` instead of `zip_code`, and a `country` may come.
    Stored with one spelling, `zip_code`; answers carry both (see `address_answer`)."""

    model_config = ConfigDict(extra="forbid")
    first_line: FreeText = _Text
    second_line: FreeText | None = Field(default=None, max_length=255)
    zip_code: FreeText = Field(min_length=1, max_length=20)
    state: FreeText = _Text
    city: FreeText = _Text
    # Not in the spec: the client requires it. Optional here so that spec-shaped requests
    # stay valid; free text because the client sends names and codes alike.
    country: Annotated[FreeText, Field(min_length=1, max_length=64)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _client_spellings(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        # "" is how an answer says "no country recorded" (address_answer): a client that
        # sends back what it read means the same, not an invalid country.
        if data.get("country") == "":
            data["country"] = None
        # `zip` is the client's spelling of `zip_code`. Both may come (a client that
        # echoes what it read back); they must then agree, or which one is meant is a guess.
        if "zip" in data:
            spelled = data.pop("zip")
            if "zip_code" in data and data["zip_code"] != spelled:
                raise ValueError("zip and zip_code are two spellings of one field; they differ")
            data["zip_code"] = spelled
        return data


class Guarantor(BaseModel):
    """GuarantorDetails: the spec does not show its members; ours (see gaps ADR)."""

    model_config = ConfigDict(extra="forbid")
    first_name: FreeText = _Text
    last_name: FreeText = _Text
    address: Address | None = None
    phone_number: FreeText | None = Field(default=None, max_length=40)
    email: EmailStr | None = None
    # The client's GuarantorDetails carries these two; accepted so its requests are not 422.
    household_income: int | None = Field(default=None, ge=0, le=10**9)
    household_size: int | None = Field(default=None, ge=1, le=100)


class Demographics(BaseModel):
    """Spec 2.1: all of it is personal data."""

    model_config = ConfigDict(extra="forbid")
    first_name: FreeText = _Text
    last_name: FreeText = _Text
    email: EmailStr
    phone_number: str = Field(min_length=3, max_length=40, pattern=r"^\+?[0-9 ()./\-]+$")
    gender: FreeText = Field(min_length=1, max_length=64)
    dob: date
    address: Address
    medical_proxy: Guarantor | None = None
    race: Race | None = None
    ethnicity: Ethnicity | None = None
    sexual_orientation: SexualOrientation | None = None
    gender_identity: GenderIdentity | None = None

    @field_validator("dob")
    @classmethod
    def _dob_in_the_past(cls, value: date) -> date:
        if value > date.today() or value.year < 1900:
            raise ValueError("dob must be a real date of birth, not in the future")
        return value


def address_answer(stored: Mapping[str, Any]) -> dict[str, Any]:
    """A stored address as answered: the spec's `zip_code`, and `zip` and `country` that
    the official client requires (docs/compatibility.md). A country never recorded (spec
    requests have none) is answered as the empty string: not guessed from the team's
    region or the postal code, and still a string for the client."""
    answer = dict(stored)
    answer["zip"] = stored.get("zip_code")
    answer["country"] = stored.get("country") or ""
    return answer


def demographics_answer(stored: Mapping[str, Any]) -> dict[str, Any]:
    """Recorded demographics as answered: their addresses (the user's and the medical
    proxy's) with both spellings; the rest as recorded."""
    answer = dict(stored)
    if isinstance(stored.get("address"), Mapping):
        answer["address"] = address_answer(stored["address"])
    proxy = stored.get("medical_proxy")
    if isinstance(proxy, Mapping) and isinstance(proxy.get("address"), Mapping):
        answer["medical_proxy"] = {**proxy, "address": address_answer(proxy["address"])}
    return answer
