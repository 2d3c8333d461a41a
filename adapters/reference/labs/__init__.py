"""The lab catalog as reference data: labs, lab accounts, analytes (the LOINC-coded results
with their reference ranges), each lab's markers, the shared demo lab tests, patient
service centers and at-home phlebotomy service areas. All of it is JSON in this folder,
editable without code (docs/labs.md says how).

Each file is validated with pydantic when first read, then checked against the others (a
marker's results name analytes, a demo test's markers exist at its lab...). A broken file
stops the service at start-up (the composition builds the catalog) with a message naming
the file and the entry, instead of surfacing later as a 500 or a marker that silently
lacks a result.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any, Literal
from uuid import UUID

from healthledger.adapters.reference import ReferenceDataError
from healthledger.domain.labs.catalog import (
    CollectionMethod,
    ExpectedResult,
    Lab,
    LabTestView,
    Loinc,
    Marker,
    ReferenceRange,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

LABS_FILE = "labs.json"
ANALYTES_FILE = "analytes.json"
MARKERS_FOLDER = "markers"
DEMO_LAB_TESTS_FILE = "demo_lab_tests.json"
SERVICE_CENTERS_FILE = "patient_service_centers.json"
PHLEBOTOMY_FILE = "phlebotomy.json"

# Spec 2.9 (non-exhaustive for clients; our own files are held to the known values so
# that a typo is caught instead of served).
SampleType = Literal["dried_blood_spot", "arm_collector", "serum", "saliva", "urine", "stool"]
BillType = Literal[
    "client_bill", "commercial_insurance", "patient_bill_passthrough", "patient_bill"
]
# The official client's LabLocationCapability and AppointmentServiceType values.
Capability = Literal[
    "stat", "appointment_scheduling_via_junction", "appointment_scheduling_with_lab"
]
ServiceType = Literal["appointment-ready", "appointment-request"]

_SLUG = r"^[a-z0-9_]+$"
# A lab's own code: what `name` matches and what add-ons name. Letters, digits and a few
# separators, so that an error naming unknown codes never echoes anything else.
PROVIDER_ID = r"^[A-Za-z0-9._-]{1,32}$"
_PRICE = r"^\d{1,6}\.\d{2}$"
# The states (and DC and Puerto Rico) that service areas and price estimates may name.
US_STATES = frozenset((
    "AL", "AK", "AZ", "AR", "CA", "CO", "CT", "DE", "DC", "FL", "GA", "HI", "ID", "IL", "IN",
    "IA", "KS", "KY", "LA", "ME", "MD", "MA", "MI", "MN", "MS", "MO", "MT", "NE", "NV", "NH",
    "NJ", "NM", "NY", "NC", "ND", "OH", "OK", "OR", "PA", "RI", "SC", "SD", "TN", "TX", "UT",
    "VT", "VA", "WA", "WV", "WI", "WY", "PR",
))  # fmt: skip


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LabEntry(_Entry):
    """A lab (spec 2.9), with what area info and lab tests need besides."""

    id: int = Field(ge=1)
    slug: str = Field(pattern=_SLUG)
    name: str = Field(min_length=1)
    first_line_address: str = Field(min_length=1)
    city: str = Field(min_length=1)
    state: str = Field(pattern=r"^[A-Z]{2}$")
    zipcode: str = Field(pattern=r"^\d{5}$")
    collection_methods: tuple[CollectionMethod, ...] = Field(min_length=1)
    sample_types: tuple[SampleType, ...] = Field(min_length=1)
    # A central lab has patient service centers (area info lists it).
    central_lab: bool
    supported_bill_types: tuple[BillType, ...] = Field(min_length=1)
    # Whether appointments at its service centers are booked through this service.
    appointment_with_service: bool
    common_tat_days: int = Field(ge=1)
    worst_case_tat_days: int = Field(ge=1)


class LabAccountEntry(_Entry):
    """A lab account: the labs it may order from (the `lab_account_id` filters)."""

    id: UUID
    name: str = Field(min_length=1)
    labs: tuple[str, ...] = Field(min_length=1)


class _LabsFile(_Entry):
    labs: list[LabEntry]
    lab_accounts: list[LabAccountEntry]


class _LoincEntry(_Entry):
    code: str = Field(pattern=r"^\d{1,7}-\d$")
    name: str = Field(min_length=1)


class _RangeEntry(_Entry):
    low: float | None
    high: float | None
    critical_low: float | None = None
    critical_high: float | None = None

    @model_validator(mode="after")
    def _ordered(self) -> _RangeEntry:
        bounds = [self.critical_low, self.low, self.high, self.critical_high]
        known = [b for b in bounds if b is not None]
        if known != sorted(known):
            raise ValueError("bounds must be ordered: critical_low <= low <= high <= critical_high")
        return self


class AnalyteEntry(_Entry):
    """One LOINC-coded result, shared by every lab that reports it."""

    id: int = Field(ge=1)
    slug: str = Field(pattern=_SLUG)
    name: str = Field(min_length=1)
    description: str = Field(min_length=1)
    loinc: _LoincEntry
    unit: str | None
    reference_range: _RangeEntry


class _AnalytesFile(_Entry):
    analytes: list[AnalyteEntry]


class MarkerEntry(_Entry):
    """A lab's marker: a biomarker (one result) or a panel (its results are its members)."""

    id: int = Field(ge=1)
    provider_id: str = Field(pattern=PROVIDER_ID)
    name: str = Field(min_length=1)
    slug: str | None = Field(default=None, pattern=_SLUG)
    type: Literal["biomarker", "panel"]
    description: str | None = None
    results: tuple[str, ...] = Field(min_length=1)
    price: str = Field(pattern=_PRICE)
    a_la_carte_enabled: bool
    # The lab's own code of a result, where it is not the code of its biomarker marker.
    result_codes: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_result_per_biomarker(self) -> MarkerEntry:
        if self.type == "biomarker" and len(self.results) != 1:
            raise ValueError(f"marker {self.id}: a biomarker has exactly one result")
        if len(set(self.results)) != len(self.results):
            raise ValueError(f"marker {self.id}: a result is listed twice")
        return self


class _MarkersFile(_Entry):
    lab: str
    markers: list[MarkerEntry]


class DemoLabTestEntry(_Entry):
    id: UUID
    name: str = Field(min_length=1)
    description: str = Field(min_length=1)
    method: Literal["testkit", "walk_in_test", "at_home_phlebotomy"]
    lab: str
    # The lab's own codes: easier to read and edit than marker ids.
    markers: tuple[str, ...] = Field(min_length=1)


class _DemoLabTestsFile(_Entry):
    lab_tests: list[DemoLabTestEntry]


class ServiceCenterEntry(_Entry):
    """A patient service center of a central lab: placed at a real zip code's centroid
    (docs/labs.md), so distances from any zip are real great-circle distances."""

    lab: str
    city: str = Field(min_length=1)
    state: str = Field(pattern=r"^[A-Z]{2}$")
    zip_code: str = Field(pattern=r"^\d{5}$")
    lat: float = Field(ge=-90, le=90)
    lon: float = Field(ge=-180, le=180)
    capabilities: tuple[Capability, ...] = ()


class _ServiceCentersFile(_Entry):
    sites: list[ServiceCenterEntry]


class PhlebotomyProviderEntry(_Entry):
    """An at-home phlebotomy network and where it serves: whole states, or zip codes by
    their first three digits (a sectional center)."""

    name: str = Field(pattern=_SLUG)
    service_types: tuple[ServiceType, ...] = Field(min_length=1)
    states: tuple[str, ...] = ()
    zip_prefixes: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _serves_somewhere(self) -> PhlebotomyProviderEntry:
        unknown = [s for s in self.states if s not in US_STATES]
        if unknown:
            raise ValueError(f"{self.name}: unknown states {', '.join(unknown)}")
        if any(not re.fullmatch(r"\d{3}", p) for p in self.zip_prefixes):
            raise ValueError(f"{self.name}: a zip prefix is three digits")
        if not self.states and not self.zip_prefixes:
            raise ValueError(f"{self.name}: serves no state and no zip prefix")
        return self


class _PhlebotomyFile(_Entry):
    providers: list[PhlebotomyProviderEntry]


# -- reading -----------------------------------------------------------------------------


def _folder() -> Traversable:
    return resources.files(__package__)


def _source(path: str) -> str:
    return f"{__package__}/{path}"


def _load(model: type[BaseModel], file: Traversable, source: str, what: str) -> Any:
    try:
        return model.model_validate(json.loads(file.read_text("utf-8")))
    except OSError as exc:
        raise ReferenceDataError(f"{source} cannot be read: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ReferenceDataError(f"{source} is not valid JSON: {exc}") from exc
    except ValidationError as exc:
        raise ReferenceDataError(f"{source} is not a valid {what}:\n{exc}") from exc


def slugify(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.casefold()).strip("_") or "marker"


def _unique(values: Iterable[Any], source: str, what: str) -> None:
    seen: set[Any] = set()
    for value in values:
        if value in seen:
            raise ReferenceDataError(f"{source} lists the {what} {value!r} twice.")
        seen.add(value)


@dataclass(frozen=True)
class LabDetails:
    """What the catalog keeps of a lab beyond spec 2.9's `Lab`."""

    lab: Lab
    central_lab: bool
    supported_bill_types: tuple[str, ...]
    appointment_with_service: bool
    common_tat_days: int
    worst_case_tat_days: int


@dataclass(frozen=True)
class LabAccount:
    id: UUID
    name: str
    lab_ids: frozenset[int]


@dataclass(frozen=True)
class LabReference:
    """Every lab reference file, validated and checked against each other."""

    labs: tuple[LabDetails, ...]
    accounts: tuple[LabAccount, ...]
    markers: tuple[Marker, ...]
    demo_lab_tests: tuple[LabTestView, ...]
    demo_descriptions: dict[UUID, str]
    service_centers: tuple[ServiceCenterEntry, ...]
    phlebotomy: tuple[PhlebotomyProviderEntry, ...]


def _labs(folder: Traversable) -> tuple[list[LabEntry], list[LabAccountEntry]]:
    source = _source(LABS_FILE)
    data: _LabsFile = _load(_LabsFile, folder.joinpath(LABS_FILE), source, "lab list")
    _unique((lab.id for lab in data.labs), source, "lab id")
    _unique((lab.slug for lab in data.labs), source, "lab slug")
    _unique((account.id for account in data.lab_accounts), source, "lab account id")
    slugs = {lab.slug for lab in data.labs}
    for account in data.lab_accounts:
        unknown = [slug for slug in account.labs if slug not in slugs]
        if unknown:
            raise ReferenceDataError(
                f"{source}: lab account {account.id} names unknown labs {', '.join(unknown)}."
            )
    return data.labs, data.lab_accounts


def _analytes(folder: Traversable) -> dict[str, AnalyteEntry]:
    source = _source(ANALYTES_FILE)
    data: _AnalytesFile = _load(
        _AnalytesFile, folder.joinpath(ANALYTES_FILE), source, "analyte list"
    )
    _unique((a.id for a in data.analytes), source, "analyte id")
    _unique((a.slug for a in data.analytes), source, "analyte slug")
    return {a.slug: a for a in data.analytes}


def _expected_result(analyte: AnalyteEntry, lab_id: int, provider_id: str) -> ExpectedResult:
    r = analyte.reference_range
    return ExpectedResult(
        # One id per (lab, analyte): a lab reports an analyte under one result, whether
        # it was ordered alone or in a panel.
        id=lab_id * 10_000 + analyte.id,
        name=analyte.name,
        slug=analyte.slug,
        lab_id=lab_id,
        provider_id=provider_id,
        loinc=Loinc(
            id=analyte.id,
            name=analyte.loinc.name,
            slug=analyte.slug,
            code=analyte.loinc.code,
            unit=analyte.unit,
        ),
        unit=analyte.unit,
        reference_range=ReferenceRange(
            low=r.low, high=r.high, critical_low=r.critical_low, critical_high=r.critical_high
        ),
    )


def _lab_markers(
    entries: Sequence[MarkerEntry],
    lab: LabEntry,
    analytes: dict[str, AnalyteEntry],
    source: str,
) -> list[Marker]:
    _unique((m.provider_id for m in entries), source, "provider_id")
    # A result's code: the file's own, else the code of the lab's biomarker for it, else
    # the panel's code with the result's position (docs/labs.md).
    biomarker_codes = {m.results[0]: m.provider_id for m in entries if m.type == "biomarker"}
    markers = []
    for entry in entries:
        unknown = [slug for slug in (*entry.results, *entry.result_codes) if slug not in analytes]
        if unknown:
            raise ReferenceDataError(
                f"{source}: marker {entry.id} ({entry.name}) names unknown results "
                f"{', '.join(unknown)} (see {ANALYTES_FILE})."
            )
        results = tuple(
            _expected_result(
                analytes[slug],
                lab.id,
                entry.result_codes.get(slug)
                or (entry.provider_id if entry.type == "biomarker" else None)
                or biomarker_codes.get(slug)
                or f"{entry.provider_id}-{position}",
            )
            for position, slug in enumerate(entry.results, start=1)
        )
        first = analytes[entry.results[0]]
        markers.append(
            Marker(
                id=entry.id,
                name=entry.name,
                slug=entry.slug or slugify(entry.name),
                description=entry.description or first.description,
                lab_id=lab.id,
                provider_id=entry.provider_id,
                type=entry.type,
                unit=first.unit if entry.type == "biomarker" else None,
                price=entry.price,
                a_la_carte_enabled=entry.a_la_carte_enabled,
                expected_results=results,
            )
        )
    return markers


def _markers(
    folder: Traversable, labs: dict[str, LabEntry], analytes: dict[str, AnalyteEntry]
) -> list[Marker]:
    markers: list[Marker] = []
    seen_labs: set[str] = set()
    files = sorted(
        (f for f in folder.joinpath(MARKERS_FOLDER).iterdir() if f.name.endswith(".json")),
        key=lambda f: f.name,
    )
    for file in files:
        source = _source(f"{MARKERS_FOLDER}/{file.name}")
        data: _MarkersFile = _load(_MarkersFile, file, source, "marker list")
        lab = labs.get(data.lab)
        if lab is None:
            raise ReferenceDataError(f"{source} is for the unknown lab {data.lab!r}.")
        if data.lab in seen_labs:
            raise ReferenceDataError(f"{source}: the lab {data.lab!r} has another marker file.")
        seen_labs.add(data.lab)
        markers.extend(_lab_markers(data.markers, lab, analytes, source))
    _unique((m.id for m in markers), _source(MARKERS_FOLDER), "marker id")
    return sorted(markers, key=lambda m: m.id)


def _demo_lab_tests(
    folder: Traversable, labs: dict[str, LabEntry], markers: Sequence[Marker]
) -> tuple[list[LabTestView], dict[UUID, str]]:
    source = _source(DEMO_LAB_TESTS_FILE)
    data: _DemoLabTestsFile = _load(
        _DemoLabTestsFile, folder.joinpath(DEMO_LAB_TESTS_FILE), source, "demo lab test list"
    )
    _unique((t.id for t in data.lab_tests), source, "lab test id")
    by_code = {(m.lab_id, m.provider_id): m for m in markers}
    views = []
    for entry in data.lab_tests:
        lab = labs.get(entry.lab)
        if lab is None:
            raise ReferenceDataError(
                f"{source}: lab test {entry.id} names the unknown lab {entry.lab!r}."
            )
        if entry.method not in lab.collection_methods:
            raise ReferenceDataError(
                f"{source}: lab test {entry.id}: {lab.slug} does not offer {entry.method}."
            )
        unknown = [code for code in entry.markers if (lab.id, code) not in by_code]
        if unknown:
            raise ReferenceDataError(
                f"{source}: lab test {entry.id} names markers {', '.join(unknown)}, which "
                f"{lab.slug} does not have."
            )
        views.append(
            LabTestView(
                id=entry.id,
                team_id=None,
                name=entry.name,
                method=entry.method,
                lab_id=lab.id,
                marker_ids=tuple(by_code[(lab.id, code)].id for code in entry.markers),
            )
        )
    return views, {entry.id: entry.description for entry in data.lab_tests}


def _service_centers(folder: Traversable, labs: dict[str, LabEntry]) -> list[ServiceCenterEntry]:
    source = _source(SERVICE_CENTERS_FILE)
    data: _ServiceCentersFile = _load(
        _ServiceCentersFile, folder.joinpath(SERVICE_CENTERS_FILE), source, "service center list"
    )
    for index, site in enumerate(data.sites):
        lab = labs.get(site.lab)
        if lab is None or not lab.central_lab:
            raise ReferenceDataError(
                f"{source}: site {index} ({site.city}, {site.state}) is of {site.lab!r}, "
                "which is not a central lab."
            )
    return data.sites


def _phlebotomy(folder: Traversable) -> list[PhlebotomyProviderEntry]:
    source = _source(PHLEBOTOMY_FILE)
    data: _PhlebotomyFile = _load(
        _PhlebotomyFile, folder.joinpath(PHLEBOTOMY_FILE), source, "phlebotomy provider list"
    )
    _unique((p.name for p in data.providers), source, "phlebotomy provider")
    return data.providers


def read_lab_reference(folder: Traversable | None = None) -> LabReference:
    """Every lab reference file of `folder` (the shipped one by default), checked."""
    folder = folder or _folder()
    lab_entries, account_entries = _labs(folder)
    labs = {lab.slug: lab for lab in lab_entries}
    analytes = _analytes(folder)
    markers = _markers(folder, labs, analytes)
    demo, descriptions = _demo_lab_tests(folder, labs, markers)
    return LabReference(
        labs=tuple(
            LabDetails(
                lab=Lab(
                    id=e.id,
                    slug=e.slug,
                    name=e.name,
                    first_line_address=e.first_line_address,
                    city=e.city,
                    state=e.state,
                    zipcode=e.zipcode,
                    collection_methods=e.collection_methods,
                    sample_types=e.sample_types,
                ),
                central_lab=e.central_lab,
                supported_bill_types=e.supported_bill_types,
                appointment_with_service=e.appointment_with_service,
                common_tat_days=e.common_tat_days,
                worst_case_tat_days=e.worst_case_tat_days,
            )
            for e in sorted(lab_entries, key=lambda e: e.id)
        ),
        accounts=tuple(
            LabAccount(id=a.id, name=a.name, lab_ids=frozenset(labs[slug].id for slug in a.labs))
            for a in account_entries
        ),
        markers=tuple(markers),
        demo_lab_tests=tuple(demo),
        demo_descriptions=descriptions,
        service_centers=tuple(_service_centers(folder, labs)),
        phlebotomy=tuple(_phlebotomy(folder)),
    )


@functools.cache
def lab_reference() -> LabReference:
    """The shipped lab reference data, validated once per process and then cached."""
    return read_lab_reference()
