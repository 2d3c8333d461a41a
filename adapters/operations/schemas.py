"""Request and response models of the team API (spec 2.1, 2.2, 2.3, gaps.md Users,
connections and introspection). Responses are supersets of the spec's shapes where the
official client requires more (docs/compatibility.md)."""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from healthledger.domain.connections.providers import (
    CONNECTION_ERROR_TYPES,
    NON_RETRIABLE,
    RETRIABLE_CODES,
    UNEXPECTED,
)
from healthledger.domain.free_text import FreeText
from healthledger.domain.personal_data import (
    Address,
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
from pydantic.config import JsonDict


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

# Examples for the OpenAPI document only (tests/integration/test_openapi_documents.py wants
# one on every named response schema); they change no response. Fictional user and team.
_USER_ID = "82dac960-eabb-47ed-aa0c-3a093e6d1a68"
_TEAM_ID = "6c38d542-7c4b-444c-b12e-d3b00903bbef"
_OURA: JsonDict = {
    "logo": "https://storage.healthledger.dev/providers/oura.png",
    "name": "Oura",
    "slug": "oura",
}
_RESOLVED_USER_EXAMPLE: JsonDict = {
    "user_id": _USER_ID,
    "team_id": _TEAM_ID,
    "client_user_id": "study-participant-0042",
    "created_on": "2026-03-01T12:00:00Z",
    "connected_sources": [
        {"created_on": "2026-03-01T12:05:00Z", "provider": _OURA, "source": _OURA}
    ],
    "fallback_time_zone": {
        "id": "Europe/Berlin",
        "source_slug": "manual",
        "updated_at": "2026-03-01T12:00:00Z",
    },
    "fallback_birth_date": None,
    "ingestion_start": "2026-01-01",
    "ingestion_end": None,
}


class SourceRef(BaseModel):
    """The provider object (spec 2.13): name, slug, logo."""

    logo: str | None
    name: str
    slug: str


class ConnectedSource(BaseModel):
    """Spec 2.3 shows `created_on` and `source`; the client requires `provider` too, and
    `source` is its deprecated duplicate (as in provider.connection.created)."""

    created_on: datetime
    provider: SourceRef
    source: SourceRef


class FallbackTimeZone(BaseModel):
    id: str
    source_slug: str
    updated_at: datetime


# A personal value in an answer about the past (`as_of`) whose key was destroyed since
# (the user erased): the audit's placeholder, `ERASED_PLACEHOLDER`, in place of the value.
# The official client reads `value` as a string.
ErasedValue = Literal["<personal data: erased>"]


class FallbackBirthDate(BaseModel):
    value: date | ErasedValue
    source_slug: str
    updated_at: datetime


class ResolvedUser(BaseModel):
    """Spec 2.3."""

    model_config = ConfigDict(json_schema_extra={"examples": [_RESOLVED_USER_EXAMPLE]})

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
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"users": [_RESOLVED_USER_EXAMPLE], "total": 1, "offset": 0, "limit": 100}]
        }
    )

    users: list[ResolvedUser]
    total: int
    offset: int
    limit: int


class Success(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"success": True}]})

    success: bool


class AddressAnswer(BaseModel):
    """An address as answered: the spec's `zip_code`, and `zip` and `country`, which the
    client requires (`country` is "" when none was recorded)."""

    first_line: str
    second_line: str | None
    zip_code: str
    zip: str
    country: str
    state: str
    city: str


class GuarantorAnswer(BaseModel):
    first_name: str
    last_name: str
    address: AddressAnswer | None = None
    phone_number: str | None = None
    email: str | None = None
    household_income: int | None = None
    household_size: int | None = None


class DemographicsAnswer(BaseModel):
    """Spec 2.1 as the API answers it: what was recorded, addresses in both spellings.
    Describes the answer only; the answer is not checked against it again (users.py)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "first_name": "Alex",
                    "last_name": "Example",
                    "email": "alex.example@example.org",
                    "phone_number": "+1 555 0100",
                    "gender": "non-binary",
                    "dob": "1990-04-12",
                    "address": {
                        "first_line": "1 Example Street",
                        "second_line": "Apt 2",
                        "zip_code": "12345",
                        "zip": "12345",
                        "country": "US",
                        "state": "CA",
                        "city": "Springfield",
                    },
                    "medical_proxy": None,
                    "race": "other",
                    "ethnicity": "non_hispanic",
                    "sexual_orientation": "dont_know",
                    "gender_identity": "genderqueer",
                }
            ]
        }
    )

    first_name: str
    last_name: str
    email: str
    phone_number: str
    gender: str
    dob: date
    address: AddressAnswer
    medical_proxy: GuarantorAnswer | None = None
    race: Race | None = None
    ethnicity: Ethnicity | None = None
    sexual_orientation: SexualOrientation | None = None
    gender_identity: GenderIdentity | None = None


# -- connections (spec 2.2, gaps.md Provider connections) --------------------------------


class _OpenAnswer(BaseModel):
    # Answers of data recorded by other parts (a provider adapter's error, a pull's
    # state) keep members this model does not name rather than drop them.
    model_config = ConfigDict(extra="allow")


class ScopeNames(_OpenAnswer):
    required: list[str]
    optional: list[str]


class ScopeRequirements(_OpenAnswer):
    user_granted: ScopeNames
    user_denied: ScopeNames


class ResourceAvailability(_OpenAnswer):
    status: str = Field(description="available or unavailable (non-exhaustive).")
    scope_requirements: ScopeRequirements | None = None


class ConnectionErrorDetails(_OpenAnswer):
    error_type: str
    error_message: str
    errored_at: datetime


class ProviderConnection(_OpenAnswer):
    """Spec 2.2 item."""

    name: str
    slug: str
    logo: str | None
    status: str = Field(description="connected, error or paused.")
    created_on: datetime
    resource_availability: dict[str, ResourceAvailability]
    error_details: ConnectionErrorDetails | None = None
    external_user_id: str | None = None


class UserProviders(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "providers": [
                        {
                            **_OURA,
                            "status": "connected",
                            "created_on": "2026-03-01T12:05:00Z",
                            "resource_availability": {
                                "activity": {"status": "available"},
                                "sleep": {"status": "available"},
                            },
                            "error_details": None,
                            "external_user_id": None,
                        }
                    ]
                }
            ]
        }
    )

    providers: list[ProviderConnection]


class DemoConnected(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"success": True, "detail": "Connected a demo Oura device."}]
        }
    )

    success: bool
    detail: str


# -- introspection (gaps.md historical pulls; resources as the client reads them) -------


class PullTimeline(_OpenAnswer):
    scheduled_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None


class HistoricalPullStatistics(_OpenAnswer):
    status: str
    range_start: datetime | None
    range_end: datetime | None
    timeline: PullTimeline
    days_with_data: int | None
    release: str | None
    trace_id: str | None
    error_details: str | None = Field(description="The bare error code, or null.")


class ProviderPulls(_OpenAnswer):
    pulled: dict[str, HistoricalPullStatistics]
    not_pulled: list[str]


class UserPulls(BaseModel):
    user_id: UUID
    provider: dict[str, ProviderPulls]


class HistoricalPullsPage(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "data": [
                        {
                            "user_id": _USER_ID,
                            "provider": {
                                "oura": {
                                    "pulled": {
                                        "sleep": {
                                            "status": "success",
                                            "range_start": "2026-01-01T00:00:00Z",
                                            "range_end": "2026-03-01T12:05:00Z",
                                            "timeline": {
                                                "scheduled_at": "2026-03-01T12:05:00Z",
                                                "started_at": "2026-03-01T12:05:02Z",
                                                "ended_at": "2026-03-01T12:05:41Z",
                                            },
                                            "days_with_data": 58,
                                            "release": "2025-05-09",
                                            "trace_id": "4b9f2c7e1d8a4e6f9a3b5c0d2e7f1a8b",
                                            "error_details": None,
                                        }
                                    },
                                    "not_pulled": ["activity"],
                                }
                            },
                        }
                    ],
                    "next_cursor": None,
                }
            ]
        }
    )

    data: list[UserPulls]
    next_cursor: str | None


class LastAttempt(_OpenAnswer):
    timestamp: datetime
    status: str


class ResourceStatistics(_OpenAnswer):
    """One resource of a connection: the client's four members, and two of ours."""

    last_attempt: LastAttempt | None
    oldest_data: date | None = Field(description="The oldest day with data held.")
    newest_data: date | None = Field(description="The newest day with data held.")
    sent_count: int | None = Field(description="Not counted yet: always null.")
    status: str = Field(description="Ours: active, error or paused (the connection's).")
    pull_status: str | None = Field(description="Ours: the historical pull's status.")


class UserResources(BaseModel):
    user_id: UUID
    provider: dict[str, dict[str, ResourceStatistics]] = Field(
        description="provider slug -> resource -> statistics."
    )


class UserResourcesPage(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "data": [
                        {
                            "user_id": _USER_ID,
                            "provider": {
                                "oura": {
                                    "sleep": {
                                        "last_attempt": {
                                            "timestamp": "2026-03-01T12:05:41Z",
                                            "status": "success",
                                        },
                                        "oldest_data": "2026-01-02",
                                        "newest_data": "2026-02-28",
                                        "sent_count": None,
                                        "status": "active",
                                        "pull_status": "success",
                                    }
                                }
                            },
                        }
                    ],
                    "next_cursor": None,
                }
            ]
        }
    )

    data: list[UserResources]
    next_cursor: str | None


# Codes a demo device can be asked to fail with: the pull error codes a provider can
# cause (retry_quota_exhausted is an outcome, not a cause) and the connection error types.
INJECTABLE_CODES = sorted(RETRIABLE_CODES | {NON_RETRIABLE, UNEXPECTED} | CONNECTION_ERROR_TYPES)


class DemoFailure(BaseModel):
    """Ours: fail the resource's pull with `code`, on the first `times` attempts (null:
    on every attempt)."""

    model_config = ConfigDict(extra="forbid")
    # The Literal is built from the catalog's codes at import (one list, not two), which
    # pydantic reads at run time and a static checker cannot.
    code: Literal[tuple(INJECTABLE_CODES)]  # type: ignore[valid-type]
    times: Annotated[int, Field(ge=1, le=100)] | None = None


class DemoConnectRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user_id: UUID
    provider: str
    # Ours: resource -> the failure its pulls should meet (see docs/connections.md).
    demo_failures: Annotated[dict[str, DemoFailure], Field(max_length=100)] | None = None
