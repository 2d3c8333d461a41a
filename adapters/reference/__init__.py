"""Reference data that ships with the service as data files, editable without code.

The data is checked when first read: a broken file must stop the service at start-up
(the composition reads the slugs) with a message naming the file and the entry, not
surface later as a 500 or as a catalog that silently lacks a provider.
"""

from __future__ import annotations

import functools
import json
from datetime import date, datetime
from importlib import resources
from typing import Any, Literal, get_args

from healthledger.domain.webhooks.deprecation_calendar import (
    CUT_OVER_KEYS,
    CutOver,
    Rules,
    rules_from,
)
from healthledger.domain.webhooks.event_types import EventType, EventTypeCatalog
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

PROVIDERS_FILE = "providers.json"
DEPRECATIONS_FILE = "deprecations.json"
WEBHOOK_EVENT_TYPES_FILE = "webhook_event_types.json"

# gaps.md, Provider catalog: the kinds of source that `GET /v2/providers` filters on.
# `lab` is a known kind with no provider of the catalog in it today.
SourceType = Literal["app", "ble", "device", "lab", "provider"]

# Spec 2.6. The enumeration is non-exhaustive for clients, but our own data file is held
# to the known values so that a typo is caught instead of being served.
AuthType = Literal["oauth", "team_oauth", "sdk", "password", "email", "app"]

# Spec 2.6, supported_resources values (same caveat as AuthType).
Resource = Literal[
    "profile", "activity", "sleep", "body", "workouts", "workout_stream", "connection",
    "order", "result", "match_review", "appointment", "glucose", "heartrate", "hrv", "ige",
    "igg", "blood_oxygen", "blood_pressure", "cholesterol", "device", "device_legacy",
    "weight", "fat", "body_temperature", "body_temperature_delta", "meal", "water",
    "caffeine", "mindfulness_minutes", "steps", "calories_active", "distance",
    "floors_climbed", "respiratory_rate", "vo2_max", "calories_basal", "stress_level",
    "menstrual_cycle", "sleep_cycle", "electrocardiogram", "electrocardiogram_voltage",
    "afib_burden", "heart_rate_alert", "stand_hour", "stand_duration", "sleep_apnea_alert",
    "sleep_breathing_disturbance", "wheelchair_push", "forced_expiratory_volume_1",
    "forced_vital_capacity", "peak_expiratory_flow_rate", "inhaler_usage", "fall",
    "uv_exposure", "daylight_exposure", "handwashing", "basal_body_temperature",
    "heart_rate_recovery_one_minute", "body_mass_index", "lean_body_mass",
    "waist_circumference", "workout_distance", "workout_swimming_stroke", "workout_duration",
    "insulin_injection", "carbohydrates", "note", "sleep_stream", "hypnogram",
]  # fmt: skip


class OAuthEndpoints(BaseModel):
    """A maker's OAuth 2.0 authorization-code endpoints, as its documentation gives them
    (`documentation`), for the generic adapter (adapters/providers/oauth2.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    authorize_url: str = Field(pattern=r"^https://")
    token_url: str = Field(pattern=r"^https://")
    documentation: str = Field(pattern=r"^https://")
    scopes: tuple[str, ...] = ()
    # Most makers separate scopes with a space (RFC 6749 3.3); a few with a comma.
    scope_separator: Literal[" ", ","] = " "
    # How the client authenticates at the token endpoint (RFC 6749 2.3.1).
    token_auth: Literal["client_secret_basic", "client_secret_post"] = "client_secret_post"
    # Parameters the maker needs on the authorization URL besides RFC 6749's (Google's
    # `access_type=offline`, without which it grants no refresh token).
    authorize_params: dict[str, str] = Field(default_factory=dict)
    # Parameters the maker needs on every token request besides RFC 6749's (Withings'
    # `action=requesttoken`).
    token_params: dict[str, str] = Field(default_factory=dict)
    # Where the token answer names the person's account at the maker, as a dotted path
    # (`athlete.id`); None when it does not.
    user_id_field: str | None = None
    # The maker's documented revocation endpoint (RFC 7009: POST `token`, the client
    # authenticated as at the token endpoint), where a deregistration ends the grant;
    # None when the maker documents none.
    revoke_url: str | None = Field(default=None, pattern=r"^https://")


class ProviderEntry(BaseModel):
    """One provider of the catalog as the data file holds it: the spec 2.6 fields plus
    our own `source_type` (the filter), `demo` (a demo adapter can simulate it) and
    `oauth` (the maker's documented OAuth endpoints, for providers whose users sign in
    at the maker)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    slug: str = Field(pattern=r"^[a-z0-9_]+$")
    name: str = Field(min_length=1)
    description: str = Field(min_length=1)
    logo: str | None = Field(pattern=r"^https://")
    auth_type: AuthType | None = None
    source_type: SourceType
    supported_resources: tuple[Resource, ...] = ()
    demo: bool = False
    oauth: OAuthEndpoints | None = None

    @model_validator(mode="after")
    def _oauth_only_for_oauth_providers(self) -> ProviderEntry:
        if self.oauth is not None and self.auth_type not in ("oauth", "team_oauth"):
            raise ValueError(f"{self.slug}: OAuth endpoints on a provider of another auth_type")
        return self


class _CatalogFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    providers: list[ProviderEntry]


class ReferenceDataError(RuntimeError):
    """A shipped reference data file is unreadable or does not hold what it must."""


def source_types() -> tuple[str, ...]:
    """Every `source_type` value the catalog can be filtered on."""
    return get_args(SourceType)


def parse_provider_catalog(text: str, source: str) -> tuple[ProviderEntry, ...]:
    """The entries of a provider catalog file's text; `source` names the file in errors."""
    try:
        data = _CatalogFile.model_validate(json.loads(text))
    except json.JSONDecodeError as exc:
        raise ReferenceDataError(f"{source} is not valid JSON: {exc}") from exc
    except ValidationError as exc:
        raise ReferenceDataError(f"{source} is not a valid provider catalog:\n{exc}") from exc
    seen: set[str] = set()
    for entry in data.providers:
        if entry.slug in seen:
            raise ReferenceDataError(f"{source} lists the provider slug {entry.slug!r} twice.")
        seen.add(entry.slug)
    return tuple(data.providers)


def _read(name: str) -> tuple[str, str]:
    """(text, source name for errors) of one shipped data file."""
    source = f"{__package__}/{name}"
    try:
        return resources.files(__package__).joinpath(name).read_text("utf-8"), source
    except OSError as exc:
        raise ReferenceDataError(f"{source} cannot be read: {exc}") from exc


def _load(model: type[BaseModel], text: str, source: str, what: str) -> Any:
    try:
        return model.model_validate(json.loads(text))
    except json.JSONDecodeError as exc:
        raise ReferenceDataError(f"{source} is not valid JSON: {exc}") from exc
    except ValidationError as exc:
        raise ReferenceDataError(f"{source} is not a valid {what}:\n{exc}") from exc


@functools.cache
def provider_catalog() -> tuple[ProviderEntry, ...]:
    """Every provider of the catalog, in file order, validated once and then cached."""
    return parse_provider_catalog(*_read(PROVIDERS_FILE))


@functools.cache
def provider_slugs() -> frozenset[str]:
    """Every provider slug of the catalog (gaps.md, Provider catalog)."""
    return frozenset(entry.slug for entry in provider_catalog())


# -- the deprecation calendar (gaps.md, Deprecations and their dates) ---------------------


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _CutOverEntry(_Entry):
    key: str
    effective_on: date
    what: str = Field(min_length=1)
    before: str = Field(min_length=1)
    after: str = Field(min_length=1)
    withdrawn_event_types: dict[str, str] = Field(default_factory=dict)


class StillAccepted(_Entry):
    """A deprecated input with no removal date: accepted, answered with `Deprecation`."""

    key: str
    what: str = Field(min_length=1)
    answer: str = Field(min_length=1)


class _CalendarFile(_Entry):
    cut_overs: list[_CutOverEntry]
    still_accepted: list[StillAccepted]


def parse_deprecation_calendar(text: str, source: str) -> tuple[CutOver, ...]:
    """The cut-overs of a calendar file; every key the domain knows, each exactly once."""
    data: _CalendarFile = _load(_CalendarFile, text, source, "deprecation calendar")
    keys = [entry.key for entry in data.cut_overs]
    if sorted(keys) != sorted(CUT_OVER_KEYS):
        raise ReferenceDataError(
            f"{source} must list each cut-over key once: {', '.join(sorted(CUT_OVER_KEYS))} "
            f"(it lists {', '.join(keys)})."
        )
    return tuple(
        CutOver(
            key=e.key,
            effective_on=e.effective_on,
            what=e.what,
            before=e.before,
            after=e.after,
            withdrawn_event_types=dict(e.withdrawn_event_types),
        )
        for e in sorted(data.cut_overs, key=lambda e: (e.effective_on, e.key))
    )


@functools.cache
def deprecation_calendar() -> tuple[CutOver, ...]:
    """The dated cut-overs, earliest first, validated once and then cached."""
    return parse_deprecation_calendar(*_read(DEPRECATIONS_FILE))


@functools.cache
def still_accepted_deprecations() -> tuple[StillAccepted, ...]:
    text, source = _read(DEPRECATIONS_FILE)
    return tuple(_load(_CalendarFile, text, source, "deprecation calendar").still_accepted)


def rules_at(instant: datetime) -> Rules:
    """Which deprecated fields and events are in force at `instant` (pure; payload builders
    pass an event's own timestamp)."""
    return rules_from(instant, deprecation_calendar())


# -- the webhook event type catalog (spec 6; gaps.md Webhooks) ----------------------------


class _EventTypeEntry(_Entry):
    type: str = Field(pattern=r"^[a-z0-9_]+(\.[a-z0-9_]+)+$")
    description: str = Field(min_length=1)
    # Ours: a type the production service's catalog does not have (EventType.extension).
    extension: bool = False


class _ResourceTemplate(_Entry):
    template: str = Field(pattern=r"^[a-z0-9_.]*\{resource\}[a-z0-9_.]*$")
    description: str = Field(min_length=1)


class _EventTypesFile(_Entry):
    event_types: list[_EventTypeEntry]
    resource_event_types: list[_ResourceTemplate]
    # Resources that get no data events from the templates, each with the reason.
    resources_without_data_events: dict[Resource, str] = Field(default_factory=dict)


def parse_event_type_catalog(
    text: str, source: str, calendar: tuple[CutOver, ...]
) -> EventTypeCatalog:
    """The event types of a catalog file: its plain types, its templates expanded over
    every spec 2.6 resource, then the types the calendar withdraws (as deprecated)."""
    data: _EventTypesFile = _load(_EventTypesFile, text, source, "webhook event type catalog")
    types = [EventType(e.type, e.description, extension=e.extension) for e in data.event_types]
    for template in data.resource_event_types:
        for resource in get_args(Resource):
            if resource not in data.resources_without_data_events:
                types.append(
                    EventType(
                        template.template.format(resource=resource),
                        template.description.format(resource=resource),
                    )
                )
    current = {t.name for t in types}
    for cut_over in calendar:
        for name, successor in cut_over.withdrawn_event_types.items():
            if successor not in current:
                raise ReferenceDataError(
                    f"{DEPRECATIONS_FILE}: {name} is replaced by {successor}, which is not "
                    f"an event type of {source}."
                )
            types.append(
                EventType(
                    name,
                    f"Deprecated: {cut_over.what} (not sent from {cut_over.effective_on}).",
                    removed_on=cut_over.effective_on,
                    replaced_by=successor,
                )
            )
    seen: set[str] = set()
    for event_type in types:
        if event_type.name in seen:
            raise ReferenceDataError(f"{source} yields the event type {event_type.name} twice.")
        seen.add(event_type.name)
    return EventTypeCatalog(types)


@functools.cache
def webhook_event_types() -> EventTypeCatalog:
    """Every public webhook event type, validated once and then cached."""
    text, source = _read(WEBHOOK_EVENT_TYPES_FILE)
    return parse_event_type_catalog(text, source, deprecation_calendar())
