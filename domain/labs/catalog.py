"""The lab catalog port: the labs and markers that ship with the service as reference data.

This module is the contract between the catalog (reference data, the catalog endpoints and
area info) and the lab tests and orders built on it: both sides read the catalog only
through `LabCatalog`, and a lab test only through `LabTestLookup`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol
from uuid import UUID

CollectionMethod = Literal["testkit", "walk_in_test", "at_home_phlebotomy", "on_site_collection"]
MarkerType = Literal["biomarker", "panel"]


@dataclass(frozen=True)
class Loinc:
    id: int
    name: str
    slug: str
    code: str
    unit: str | None


@dataclass(frozen=True)
class ReferenceRange:
    """What a result is read against: outside low..high is abnormal, outside
    critical_low..critical_high is critical. A bound that does not apply is None."""

    low: float | None
    high: float | None
    critical_low: float | None = None
    critical_high: float | None = None


@dataclass(frozen=True)
class ExpectedResult:
    """One value a marker's test reports (spec 2.7, `expected_results`)."""

    id: int
    name: str
    slug: str
    lab_id: int
    provider_id: str
    loinc: Loinc
    unit: str | None
    reference_range: ReferenceRange


@dataclass(frozen=True)
class Marker:
    """Spec 2.7: a biomarker, or a panel of several expected results."""

    id: int
    name: str
    slug: str
    description: str
    lab_id: int
    provider_id: str
    type: MarkerType
    unit: str | None
    price: str
    a_la_carte_enabled: bool
    expected_results: tuple[ExpectedResult, ...]


@dataclass(frozen=True)
class Lab:
    """Spec 2.9, plus the state (area info and at-home service areas use it)."""

    id: int
    slug: str
    name: str
    first_line_address: str
    city: str
    state: str
    zipcode: str
    collection_methods: tuple[CollectionMethod, ...]
    sample_types: tuple[str, ...]


class LabCatalog(Protocol):
    def labs(self) -> Sequence[Lab]: ...

    def lab(self, lab_id: int) -> Lab | None: ...

    def lab_by_slug(self, slug: str) -> Lab | None: ...

    def marker(self, marker_id: int) -> Marker | None: ...

    def markers_by_provider_id(self, lab_id: int, provider_ids: Sequence[str]) -> list[Marker]:
        """The lab's markers with these lab codes, in the order asked (unknown codes are
        left out: the caller names them in its error)."""
        ...


@dataclass(frozen=True)
class LabTestView:
    """A lab test as orders see it: the team's own (team_id set) or a shared demo test
    (team_id None, usable by every team)."""

    id: UUID
    team_id: UUID | None
    name: str
    method: CollectionMethod
    lab_id: int
    marker_ids: tuple[int, ...]
    # Whether it takes new orders: its team may take it out of use (a shared demo test is
    # always in use).
    active: bool = True


class LabTestLookup(Protocol):
    def lab_test(self, team_id: UUID, lab_test_id: UUID) -> LabTestView | None:
        """The team's lab test or a shared demo one; None for another team's or an unknown
        id (a 404 either way)."""
        ...
