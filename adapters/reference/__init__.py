"""Reference data that ships with the service as data files, editable without code.

The data is checked when first read: a broken file must stop the service at start-up
(the composition reads the slugs) with a message naming the file and the entry, not
surface later as a 500 or as a catalog that silently lacks a provider.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

PROVIDERS_FILE = "providers.json"

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


class ProviderEntry(BaseModel):
    """One provider of the catalog as the data file holds it: the spec 2.6 fields plus
    our own `source_type` (the filter) and `demo` (a demo adapter can simulate it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    slug: str = Field(pattern=r"^[a-z0-9_]+$")
    name: str = Field(min_length=1)
    description: str = Field(min_length=1)
    logo: str | None = Field(pattern=r"^https://")
    auth_type: AuthType | None = None
    source_type: SourceType
    supported_resources: tuple[Resource, ...] = ()
    demo: bool = False


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


@functools.cache
def provider_catalog() -> tuple[ProviderEntry, ...]:
    """Every provider of the catalog, in file order, validated once and then cached."""
    source = f"{__package__}/{PROVIDERS_FILE}"
    try:
        text = resources.files(__package__).joinpath(PROVIDERS_FILE).read_text("utf-8")
    except OSError as exc:
        raise ReferenceDataError(f"{source} cannot be read: {exc}") from exc
    return parse_provider_catalog(text, source)


@functools.cache
def provider_slugs() -> frozenset[str]:
    """Every provider slug of the catalog (gaps.md, Provider catalog)."""
    return frozenset(entry.slug for entry in provider_catalog())
