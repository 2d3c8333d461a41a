"""Personal data: what it is, how it is validated, and the vault port that seals it.

Personal values are sealed with a data key that belongs to one user (crypto-shredding):
destroying that key at erasure makes every sealed copy, in the event log, snapshots or
backups, unreadable for good. The vault is a port; adapters implement it with AES-GCM.
"""

from __future__ import annotations

from datetime import date
from enum import StrEnum
from typing import Any, Protocol
from uuid import UUID

from healthledger.domain.free_text import FreeText
from pydantic import BaseModel, ConfigDict, EmailStr, Field, field_validator

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
    model_config = ConfigDict(extra="forbid")
    first_line: FreeText = _Text
    second_line: FreeText | None = Field(default=None, max_length=255)
    zip_code: FreeText = Field(min_length=1, max_length=20)
    state: FreeText = _Text
    city: FreeText = _Text


class Guarantor(BaseModel):
    """GuarantorDetails: the spec does not show its members; ours (see gaps ADR)."""

    model_config = ConfigDict(extra="forbid")
    first_name: FreeText = _Text
    last_name: FreeText = _Text
    address: Address | None = None
    phone_number: FreeText | None = Field(default=None, max_length=40)
    email: EmailStr | None = None


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
