"""Request and response models of the team API (spec 2.1, 2.3 and gaps.md Users)."""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Annotated, Any
from uuid import UUID

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
from healthledger.domain.users.user import (
    CLIENT_USER_ID_MAX_LENGTH,
    birth_date_problem,
    client_user_id_problem,
    ingestion_bounds_problem,
    time_zone_problem,
)
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator


def _rule(problem_of: Any) -> Any:
    def check(value: Any) -> Any:
        problem = problem_of(value)
        if problem:
            raise ValueError(problem)
        return value

    return AfterValidator(check)


_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _iso_date_only(value: Any) -> Any:
    # pydantic would also take a Unix time or a midnight datetime; a date is YYYY-MM-DD.
    if isinstance(value, date) and not isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not _ISO_DATE.match(value):
        raise ValueError("a date must be a string in the form YYYY-MM-DD")
    return value


ClientUserId = Annotated[
    str,
    Field(min_length=1, max_length=CLIENT_USER_ID_MAX_LENGTH),
    _rule(client_user_id_problem),
]
TimeZoneId = Annotated[str, Field(max_length=64), _rule(time_zone_problem)]
IsoDate = Annotated[date, BeforeValidator(_iso_date_only)]


BirthDate = Annotated[IsoDate, _rule(lambda value: birth_date_problem(value, date.today()))]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _IngestionBounds(_Request):
    @model_validator(mode="after")
    def _bounds(self) -> Any:
        problem = ingestion_bounds_problem(
            getattr(self, "ingestion_start", None), getattr(self, "ingestion_end", None)
        )
        if problem:
            raise ValueError(problem)
        return self


class CreateUserRequest(_IngestionBounds):
    client_user_id: ClientUserId
    fallback_time_zone: TimeZoneId | None = None
    fallback_birth_date: BirthDate | None = None
    ingestion_start: IsoDate | None = None
    ingestion_end: IsoDate | None = None


class UpdateUserRequest(_IngestionBounds):
    """Every field optional; a field sent as null clears it (client_user_id excepted)."""

    client_user_id: ClientUserId | None = None
    fallback_time_zone: TimeZoneId | None = None
    fallback_birth_date: BirthDate | None = None
    ingestion_start: IsoDate | None = None
    ingestion_end: IsoDate | None = None

    @model_validator(mode="after")
    def _client_user_id_not_null(self) -> Any:
        if "client_user_id" in self.model_fields_set and self.client_user_id is None:
            raise ValueError("client_user_id cannot be removed, only changed.")
        return self


class DemographicsPatch(_Request):
    """PATCH /v2/user/{user_id}/info: any 2.1 fields; merged, the result must be complete."""

    first_name: FreeText | None = Field(default=None, min_length=1, max_length=255)
    last_name: FreeText | None = Field(default=None, min_length=1, max_length=255)
    email: FreeText | None = Field(default=None, max_length=320)
    phone_number: FreeText | None = Field(default=None, max_length=40)
    gender: FreeText | None = Field(default=None, max_length=64)
    dob: IsoDate | None = None
    address: Address | None = None
    medical_proxy: Guarantor | None = None
    race: Race | None = None
    ethnicity: Ethnicity | None = None
    sexual_orientation: SexualOrientation | None = None
    gender_identity: GenderIdentity | None = None


# -- responses -----------------------------------------------------------------------


class SourceRef(BaseModel):
    logo: str | None
    name: str
    slug: str


class ConnectedSource(BaseModel):
    created_on: datetime
    source: SourceRef


class FallbackTimeZone(BaseModel):
    id: str
    source_slug: str
    updated_at: datetime


class FallbackBirthDate(BaseModel):
    value: date
    source_slug: str
    updated_at: datetime


class ResolvedUser(BaseModel):
    """Spec 2.3."""

    user_id: UUID
    team_id: UUID
    client_user_id: str
    created_on: datetime
    connected_sources: list[ConnectedSource]
    fallback_time_zone: FallbackTimeZone | None
    fallback_birth_date: FallbackBirthDate | None = None
    ingestion_start: date | None = None
    ingestion_end: date | None = None


class UserList(BaseModel):
    users: list[ResolvedUser]
    total: int
    offset: int
    limit: int


class Success(BaseModel):
    success: bool


DemographicsResponse = Demographics
