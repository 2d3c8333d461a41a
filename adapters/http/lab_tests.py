"""Team API routes of the lab catalog (spec 2.7 to 2.9, endpoints 5, 8 and 12; gaps.md lab
testing) and of a team's lab tests (the issue's `GET|POST /v3/lab_tests`).

Answers are a superset of the spec's fields and of what the official client's models
(`ClientFacingLab`, `ClientFacingMarkerComplete`, `GetMarkersResponse`,
`ClientFacingLabTest`) require. The catalog never changes while the service runs, so each
lab and marker is rendered to JSON once per catalog, at the first question that reads
it; a page of markers is those pieces joined (docs/performance.md, Labs).
"""

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal, Self
from uuid import UUID

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response
from healthledger.adapters.compliance.time_travel import reads_as_of
from healthledger.adapters.composition import Service
from healthledger.adapters.http.as_of import TEAM_READ_REFUSES_AS_OF, TeamAsOf
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.persistence.queries.lab_tests import LabTestRow
from healthledger.adapters.reference.labs import PROVIDER_ID, slugify
from healthledger.adapters.reference.labs.catalog import ReferenceLabCatalog, page_of
from healthledger.domain.errors import InvalidRequest
from healthledger.domain.free_text import FreeText, MultilineText
from healthledger.domain.labs.catalog import Lab, LabTestView, Marker
from healthledger.domain.labs.lab_tests import (
    MAX_MARKERS,
    SharedLabTestUnchangeable,
    UnknownLabTests,
)
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

LABS_PATH = "/v3/lab_tests/labs"
MARKERS_PATH = "/v3/lab_tests/markers"
ORDER_SET_PATH = "/v3/lab_tests/list_order_set_markers"
LAB_TESTS_PATH = "/v3/lab_tests"

# Paging of both marker lists (spec section 8).
DEFAULT_SIZE = 50
MAX_SIZE = 100
# Far beyond any page there is: bounds the number a client can make us parse.
MAX_PAGE = 1_000_000
# Lab tests in one order set request, and filter values on one query.
MAX_IDS = 100

_ProviderId = Annotated[str, Field(pattern=PROVIDER_ID)]
_LabSlug = Annotated[str, Field(pattern=r"^[a-z0-9_]{1,64}$")]

# -- response models (the OpenAPI document; answers are rendered once, below) ----------

_LAB_EXAMPLE: dict[str, Any] = {
    "id": 1,
    "slug": "quest",
    "name": "Quest Diagnostics",
    "first_line_address": "500 Plaza Drive",
    "city": "Secaucus",
    "state": "NJ",
    "zipcode": "07094",
    "collection_methods": ["walk_in_test", "at_home_phlebotomy"],
    "sample_types": ["serum", "urine"],
}
_MARKER_EXAMPLE: dict[str, Any] = {
    "id": 1046,
    "name": "Hemoglobin A1c",
    "slug": "hemoglobin_a1c",
    "description": "Average blood sugar over about three months.",
    "lab_id": 1,
    "provider_id": "496",
    "type": "biomarker",
    "unit": "%",
    "price": "34.00",
    "a_la_carte_enabled": True,
    "is_orderable": True,
    "common_tat_days": 2,
    "worst_case_tat_days": 7,
    "expected_results": [
        {
            "id": 10071,
            "name": "Hemoglobin A1c",
            "slug": "hba1c",
            "lab_id": 1,
            "provider_id": "496",
            "required": True,
            "loinc": {
                "id": 71,
                "name": "Hemoglobin A1c/Hemoglobin.total in Blood",
                "slug": "hba1c",
                "code": "4548-4",
                "unit": "%",
            },
            "unit": "%",
            "reference_range": {
                "low": None,
                "high": 5.6,
                "critical_low": None,
                "critical_high": None,
            },
        }
    ],
}


class LabResponse(BaseModel):
    """Spec 2.9, plus the lab's state. Methods and sample types are non-exhaustive."""

    model_config = ConfigDict(json_schema_extra={"examples": [_LAB_EXAMPLE]})
    id: int
    slug: str
    name: str
    first_line_address: str
    city: str
    state: str
    zipcode: str
    collection_methods: list[str] = Field(
        description="testkit, walk_in_test, at_home_phlebotomy, on_site_collection "
        "(non-exhaustive)."
    )
    sample_types: list[str] = Field(
        description="dried_blood_spot, arm_collector, serum, saliva, urine, stool (non-exhaustive)."
    )


class LoincResponse(BaseModel):
    id: int
    name: str = Field(description="The LOINC long common name.")
    slug: str
    code: str
    unit: str | None


class ReferenceRangeResponse(BaseModel):
    """Outside low..high is abnormal, outside critical_low..critical_high critical; a
    bound that does not apply is null (a qualitative result has none)."""

    low: float | None
    high: float | None
    critical_low: float | None
    critical_high: float | None


class ExpectedResultResponse(BaseModel):
    id: int
    name: str
    slug: str
    lab_id: int
    provider_id: str = Field(description="The lab's own code of the result.")
    required: bool
    loinc: LoincResponse
    unit: str | None
    reference_range: ReferenceRangeResponse


class MarkerResponse(BaseModel):
    """Spec 2.7 (a biomarker, or a panel whose expected results are its members)."""

    model_config = ConfigDict(json_schema_extra={"examples": [_MARKER_EXAMPLE]})
    id: int
    name: str
    slug: str
    description: str
    lab_id: int
    provider_id: str = Field(description="The lab's own code of the marker.")
    type: str = Field(description="biomarker or panel (non-exhaustive).")
    unit: str | None
    price: str
    a_la_carte_enabled: bool
    is_orderable: bool
    common_tat_days: int
    worst_case_tat_days: int
    expected_results: list[ExpectedResultResponse]


class MarkersPage(BaseModel):
    """Spec 2.7's list envelope (both marker lists)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"markers": [_MARKER_EXAMPLE], "total": 1, "page": 1, "size": 50, "pages": 1}
            ]
        }
    )
    markers: list[MarkerResponse]
    total: int = Field(ge=0)
    page: int = Field(ge=0)
    size: int = Field(ge=0)
    pages: int = Field(ge=0)


class LabTestResponse(BaseModel):
    """A lab test: a team's own (`team_id` set), or a shared demo test (`team_id` null,
    `auto_generated` true)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a01",
                    "slug": "annual_wellness",
                    "name": "Annual Wellness",
                    "description": "HbA1c from a walk-in draw.",
                    "sample_type": "serum",
                    "method": "walk_in_test",
                    "price": 34.0,
                    "is_active": True,
                    "status": "active",
                    "fasting": False,
                    "lab": _LAB_EXAMPLE,
                    "markers": [_MARKER_EXAMPLE],
                    "is_delegated": False,
                    "auto_generated": False,
                    "has_collection_instructions": False,
                    "common_tat_days": 2,
                    "worst_case_tat_days": 7,
                    "team_id": "25ed130b-4507-4370-9e13-9a240e828535",
                    "created_at": "2026-03-01T12:00:00Z",
                }
            ]
        }
    )
    id: UUID
    slug: str
    name: str
    description: str | None
    sample_type: str
    method: str
    price: float = Field(description="The sum of its markers' prices.")
    is_active: bool
    status: str
    fasting: bool
    lab: LabResponse
    markers: list[MarkerResponse]
    is_delegated: bool
    auto_generated: bool
    has_collection_instructions: bool
    common_tat_days: int
    worst_case_tat_days: int
    team_id: UUID | None
    created_at: datetime | None


# -- request models ---------------------------------------------------------------------


class AddOn(BaseModel):
    """Spec 2.8: markers added to an order set, by the lab's codes (`provider_ids`) or
    by id (`marker_ids`, the official client's other member)."""

    model_config = ConfigDict(extra="forbid")
    provider_ids: list[_ProviderId] | None = Field(default=None, max_length=MAX_IDS)
    marker_ids: list[int] | None = Field(default=None, max_length=MAX_IDS)


class OrderSetRequest(BaseModel):
    """Endpoint 8's body."""

    model_config = ConfigDict(extra="forbid")
    lab_test_ids: list[UUID] | None = Field(default=None, max_length=MAX_IDS)
    add_on: AddOn | None = None
    lab_account_id: UUID | None = None


class LabTestRequest(BaseModel):
    """A new lab test: markers of one lab (the test's lab), and a method the lab offers.
    `provider_ids` (the lab's codes) add markers of the same lab as `marker_ids`."""

    model_config = ConfigDict(extra="forbid")
    name: Annotated[FreeText, Field(min_length=1, max_length=255)]
    method: Literal["testkit", "walk_in_test", "at_home_phlebotomy"]
    marker_ids: list[int] | None = Field(default=None, max_length=MAX_MARKERS)
    provider_ids: list[_ProviderId] | None = Field(default=None, max_length=MAX_MARKERS)
    description: Annotated[MultilineText, Field(max_length=2000)] | None = None
    fasting: bool = False


class LabTestUpdate(BaseModel):
    """The official client's `update_lab_test` body: a new name, whether the test takes
    new orders, or both (null or left out: unchanged)."""

    model_config = ConfigDict(extra="forbid")
    name: Annotated[FreeText, Field(min_length=1, max_length=255)] | None = None
    active: bool | None = None

    @field_validator("name")
    @classmethod
    def _name_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be blank")
        return value

    @model_validator(mode="after")
    def _changes_something(self) -> Self:
        if self.name is None and self.active is None:
            raise ValueError("send name, active or both: there is nothing to change")
        return self


# -- rendering ---------------------------------------------------------------------------


def _dumps(value: Any) -> bytes:
    # What FastAPI's JSONResponse writes.
    return json.dumps(
        value, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode()


class CatalogRendering:
    """Every lab and marker as JSON, rendered once."""

    def __init__(self, catalog: ReferenceLabCatalog) -> None:
        self.catalog = catalog
        self.labs = {lab.id: self._lab(lab) for lab in catalog.labs()}
        self.labs_json = _dumps(list(self.labs.values()))
        self.markers = {
            m.id: self._marker(m) for lab in catalog.labs() for m in self._markers_of(lab)
        }
        self.marker_json = {marker_id: _dumps(m) for marker_id, m in self.markers.items()}

    def _markers_of(self, lab: Lab) -> list[Marker]:
        return self.catalog.find_markers(lab_ids=[lab.id])

    @staticmethod
    def _lab(lab: Lab) -> dict[str, Any]:
        return {
            "id": lab.id,
            "slug": lab.slug,
            "name": lab.name,
            "first_line_address": lab.first_line_address,
            "city": lab.city,
            "state": lab.state,
            "zipcode": lab.zipcode,
            "collection_methods": list(lab.collection_methods),
            "sample_types": list(lab.sample_types),
        }

    def _marker(self, m: Marker) -> dict[str, Any]:
        details = self.catalog.details(m.lab_id)
        assert details is not None  # the catalog's markers name its labs
        return {
            "id": m.id,
            "name": m.name,
            "slug": m.slug,
            "description": m.description,
            "lab_id": m.lab_id,
            "provider_id": m.provider_id,
            "type": m.type,
            "unit": m.unit,
            "price": m.price,
            "a_la_carte_enabled": m.a_la_carte_enabled,
            "is_orderable": True,
            "common_tat_days": details.common_tat_days,
            "worst_case_tat_days": details.worst_case_tat_days,
            "expected_results": [
                {
                    "id": r.id,
                    "name": r.name,
                    "slug": r.slug,
                    "lab_id": r.lab_id,
                    "provider_id": r.provider_id,
                    "required": True,
                    "loinc": {
                        "id": r.loinc.id,
                        "name": r.loinc.name,
                        "slug": r.loinc.slug,
                        "code": r.loinc.code,
                        "unit": r.loinc.unit,
                    },
                    "unit": r.unit,
                    "reference_range": {
                        "low": r.reference_range.low,
                        "high": r.reference_range.high,
                        "critical_low": r.reference_range.critical_low,
                        "critical_high": r.reference_range.critical_high,
                    },
                }
                for r in m.expected_results
            ],
        }

    def markers_page(self, markers: Sequence[Marker], page: int, size: int, where: str) -> bytes:
        """Spec 2.7's envelope of one page, joined from the rendered markers."""
        found = page_of(markers, page, size, where)
        pieces = b",".join(self.marker_json[m.id] for m in found.markers)
        return b'{"markers":[%s],"total":%d,"page":%d,"size":%d,"pages":%d}' % (
            pieces,
            found.total,
            found.page,
            found.size,
            found.pages,
        )

    def lab_test(self, row: LabTestRow) -> dict[str, Any]:
        view = row.view
        lab = self.catalog.lab(view.lab_id)
        details = self.catalog.details(view.lab_id)
        assert lab is not None and details is not None  # a lab test's lab is the catalog's
        markers = [self.markers[i] for i in view.marker_ids if i in self.markers]
        price = sum((Decimal(m["price"]) for m in markers), Decimal(0))
        return {
            "id": str(view.id),
            "slug": slugify(view.name),
            "name": view.name,
            "description": row.description,
            "sample_type": sample_type(lab, view.method),
            "method": view.method,
            "price": float(price),
            "is_active": view.active,
            "status": "active" if view.active else "inactive",
            "fasting": row.fasting,
            "lab": self.labs[lab.id],
            "markers": markers,
            "is_delegated": False,
            "auto_generated": row.auto_generated,
            "has_collection_instructions": False,
            "common_tat_days": details.common_tat_days,
            "worst_case_tat_days": details.worst_case_tat_days,
            "team_id": None if view.team_id is None else str(view.team_id),
            "created_at": None
            if row.created_at is None
            else row.created_at.isoformat().replace("+00:00", "Z"),
        }


def sample_type(lab: Lab, method: str) -> str:
    """A test kit's sample is the lab's kit sample (its first sample type); a draw is serum."""
    if method == "testkit":
        return lab.sample_types[0]
    return "serum"


@dataclass(frozen=True)
class LabTestFilters:
    """What a listing of lab tests keeps, and in what order (`GET /v3/lab_tests` and the
    paginated `GET /v3/lab_test`)."""

    generation_method: str = "all"
    lab_slug: str | None = None
    collection_method: str | None = None
    status: str | None = None
    marker_ids: Sequence[int] | None = None
    provider_ids: Sequence[str] | None = None
    name: str | None = None
    order_key: str | None = None
    order_direction: str = "asc"


def lab_test_answers(
    rendering: CatalogRendering,
    service: Service,
    team_id: UUID,
    filters: LabTestFilters,
    as_of: datetime | None,
) -> list[dict[str, Any]]:
    """The lab tests the team can order, filtered and ordered, as answered."""
    if as_of is None:
        rows = service.lab_tests.team_lab_tests(team_id)
    else:
        rows = reads_as_of(service, as_of).lab_tests(team_id)
    if filters.generation_method != "all":
        rows = [r for r in rows if r.auto_generated == (filters.generation_method == "auto")]
    if filters.lab_slug is not None:
        lab = service.lab_catalog.lab_by_slug(filters.lab_slug)
        rows = [] if lab is None else [r for r in rows if r.view.lab_id == lab.id]
    if filters.collection_method is not None:
        rows = [r for r in rows if r.view.method == filters.collection_method]
    if filters.status is not None:
        # A test is active or inactive (its team's choice); none awaits an approval here.
        rows = [r for r in rows if ("active" if r.view.active else "inactive") == filters.status]
    if filters.marker_ids:
        wanted = set(filters.marker_ids)
        rows = [r for r in rows if wanted & set(r.view.marker_ids)]
    if filters.provider_ids:
        codes = set(filters.provider_ids)
        rows = [r for r in rows if codes & _codes(service.lab_catalog, r.view)]
    if filters.name is not None:
        needle = filters.name.casefold()
        rows = [r for r in rows if needle in r.view.name.casefold()]
    answers = [rendering.lab_test(r) for r in rows]
    if filters.order_key is not None:
        if filters.order_key == "price":
            pairs = [(a["price"], a) for a in answers]
        else:  # created_at, or updated_at: the last rename or (de)activation
            created = filters.order_key == "created_at"
            times = [r.created_at if created else r.last_updated for r in rows]
            pairs = list(zip(times, answers, strict=True))
        # A shared demo test has no time: first, as the oldest (a stable sort keeps them
        # in their order).
        pairs.sort(
            key=lambda p: (p[0] is not None, p[0] or 0),
            reverse=filters.order_direction == "desc",
        )
        answers = [a for _, a in pairs]
    return answers


def json_response(body: bytes) -> Response:
    return Response(content=body, media_type="application/json")


# -- the routes --------------------------------------------------------------------------


@functools.cache
def catalog_rendering(catalog: ReferenceLabCatalog) -> CatalogRendering:
    """The catalog rendered once per catalog, not once per app built: the shipped catalog
    is one per process (`shipped_labs`), and rendering it costs about 90 ms."""
    return CatalogRendering(catalog)


def current_rendering(service: CurrentService) -> CatalogRendering:
    return catalog_rendering(service.lab_catalog)


Rendering = Annotated[CatalogRendering, Depends(current_rendering)]
# The paging of every list of markers.
Page = Annotated[int, Query(ge=1, le=MAX_PAGE, description="1-based page number.")]
Size = Annotated[int, Query(ge=1, le=MAX_SIZE, description="Markers per page.")]

router = APIRouter(tags=["lab testing"], route_class=LedgerRoute)


# The catalog's routes are `async`: they read only memory (a fraction of a
# millisecond), so they run on the event loop instead of a worker thread.
@router.get(
    LABS_PATH,
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    response_model=list[LabResponse],
    responses=error_responses(401, 422),
)
async def list_labs(rendering: Rendering, caller: TeamApiCaller) -> Any:
    """The labs (spec 2.9): central labs with patient service centers and at-home
    test-kit labs, by id."""
    return json_response(rendering.labs_json)


@router.get(
    MARKERS_PATH,
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    response_model=MarkersPage,
    responses=error_responses(
        401,
        422,
        described={
            422: "Invalid parameters, an unknown lab or lab account, or a page past the last."
        },
    ),
)
async def list_markers(
    rendering: Rendering,
    service: CurrentService,
    caller: TeamApiCaller,
    lab_id: Annotated[
        list[int] | None,
        Query(max_length=MAX_IDS, description="Only markers of these labs (repeatable)."),
    ] = None,
    lab_slug: Annotated[
        _LabSlug | None, Query(description="Only markers of this lab; wins over lab_id.")
    ] = None,
    name: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=100,
            description="Matches the marker's name or its lab code, case-insensitively.",
        ),
    ] = None,
    a_la_carte_enabled: Annotated[bool | None, Query()] = None,
    lab_account_id: Annotated[
        UUID | None, Query(description="Only markers of this lab account's labs.")
    ] = None,
    page: Page = 1,
    size: Size = DEFAULT_SIZE,
) -> Any:
    """The marker catalog (spec 2.7, endpoint 5), by id, one page at a time."""
    markers = service.lab_catalog.find_markers(
        lab_ids=lab_id,
        lab_slug=lab_slug,
        name=name,
        a_la_carte_enabled=a_la_carte_enabled,
        lab_account_id=lab_account_id,
    )
    return json_response(rendering.markers_page(markers, page, size, "query"))


@router.post(
    ORDER_SET_PATH,
    response_model=MarkersPage,
    responses=error_responses(
        401,
        404,
        422,
        described={
            404: "Lab tests, marker ids or lab codes that are unknown (named in the detail).",
            422: "Invalid body or parameters, markers of two labs, or a page past the last.",
        },
    ),
)
def list_order_set_markers(
    rendering: Rendering,
    service: CurrentService,
    body: OrderSetRequest,
    caller: TeamApiCaller,
    page: Page = 1,
    size: Size = DEFAULT_SIZE,
) -> Any:
    """The markers of an order set (endpoint 8): those of its lab tests, then its
    add-on's, each once, all of one lab."""
    markers = order_set_markers(service, caller.team_id, body)
    return json_response(rendering.markers_page(markers, page, size, "query"))


@router.get(
    LAB_TESTS_PATH,
    response_model=list[LabTestResponse],
    responses=error_responses(401, 422),
)
def list_lab_tests(
    rendering: Rendering,
    service: CurrentService,
    caller: TeamApiCaller,
    generation_method: Annotated[
        Literal["auto", "manual", "all"],
        Query(description="auto: the shared demo tests; manual: the team's own."),
    ] = "all",
    lab_slug: Annotated[_LabSlug | None, Query()] = None,
    collection_method: Annotated[
        Literal["testkit", "walk_in_test", "at_home_phlebotomy", "on_site_collection"] | None,
        Query(),
    ] = None,
    status: Annotated[Literal["active", "pending_approval", "inactive"] | None, Query()] = None,
    marker_ids: Annotated[
        list[int] | None,
        Query(max_length=MAX_IDS, description="Only tests holding any of these markers."),
    ] = None,
    provider_ids: Annotated[
        list[_ProviderId] | None,
        Query(max_length=MAX_IDS, description="Only tests holding any of these lab codes."),
    ] = None,
    name: Annotated[
        str | None,
        Query(min_length=1, max_length=100, description="Part of the name, any case."),
    ] = None,
    order_key: Annotated[Literal["price", "created_at", "updated_at"] | None, Query()] = None,
    order_direction: Annotated[Literal["asc", "desc"], Query()] = "asc",
    *,
    as_of: TeamAsOf,
) -> Any:
    """The lab tests the team can order: the shared demo tests and its own (with
    `as_of`: its own created by then, from the log; the demo tests are reference data,
    shipped with the service, and show as now)."""
    answers = lab_test_answers(
        rendering,
        service,
        caller.team_id,
        LabTestFilters(
            generation_method,
            lab_slug,
            collection_method,
            status,
            marker_ids,
            provider_ids,
            name,
            order_key,
            order_direction,
        ),
        as_of,
    )
    return json_response(_dumps(answers))


@router.post(
    LAB_TESTS_PATH,
    response_model=LabTestResponse,
    responses=error_responses(
        401,
        404,
        422,
        described={
            404: "Marker ids or lab codes that are unknown (named in the detail).",
            422: "Invalid body, markers of two labs, or a method the lab does not offer.",
        },
    ),
)
def create_lab_test(
    rendering: Rendering, service: CurrentService, body: LabTestRequest, caller: TeamApiCaller
) -> Any:
    """A lab test of the team (event-sourced): its markers, all of one lab, which
    becomes the test's lab, and a collection method that lab offers."""
    test = service.lab_test_commands.create(
        caller.ctx,
        caller.team_id,
        name=body.name,
        method=body.method,
        marker_ids=body.marker_ids or (),
        provider_ids=body.provider_ids or (),
        description=body.description,
        fasting=body.fasting,
    )
    return json_response(_dumps(rendering.lab_test(LabTestRow.of(test))))


@router.patch(
    LAB_TESTS_PATH + "/{lab_test_id:uuid}",
    response_model=LabTestResponse,
    responses=error_responses(
        401,
        403,
        404,
        409,
        422,
        described={
            403: "A shared demo test: the service's, not the team's to change.",
            404: "Unknown lab test (another team's too).",
            409: "The test was changed by another request at the same time: retry.",
            422: "Invalid body: nothing to change, a blank name, too long, control characters.",
        },
    ),
)
def update_lab_test(
    rendering: Rendering,
    service: CurrentService,
    lab_test_id: UUID,
    body: LabTestUpdate,
    caller: TeamApiCaller,
) -> Any:
    """Rename the team's lab test and/or take it out of use or back (event-sourced:
    `LabTest.Updated`). An inactive test takes no new orders (a 409); orders placed with
    it are unchanged. Its markers, lab and method do not change."""
    if service.lab_tests.is_shared(lab_test_id):
        raise SharedLabTestUnchangeable(lab_test_id)
    test = service.lab_test_commands.update(
        caller.ctx, caller.team_id, lab_test_id, name=body.name, active=body.active
    )
    return json_response(_dumps(rendering.lab_test(LabTestRow.of(test))))


def _lab_test(
    service: Service, team_id: UUID, lab_test_id: UUID, as_of: datetime | None
) -> LabTestRow:
    """The team's lab test or a shared demo one, now or as of `as_of` (a team's own not
    created yet then: as unknown as another team's, a 404)."""
    if as_of is None:
        row = service.lab_tests.row(team_id, lab_test_id)
    else:
        row = reads_as_of(service, as_of).lab_test(team_id, lab_test_id)
    if row is None:
        raise UnknownLabTests([lab_test_id])
    return row


_UNKNOWN_LAB_TEST = "Unknown lab test (with `as_of`: or not created yet then)."


@router.get(
    LAB_TESTS_PATH + "/{lab_test_id:uuid}",
    response_model=LabTestResponse,
    responses=error_responses(401, 404, 422, described={404: _UNKNOWN_LAB_TEST}),
)
def get_lab_test(
    rendering: Rendering,
    service: CurrentService,
    lab_test_id: UUID,
    caller: TeamApiCaller,
    as_of: TeamAsOf,
) -> Any:
    """One lab test: the team's own or a shared demo one (another team's is a 404)."""
    row = _lab_test(service, caller.team_id, lab_test_id, as_of)
    return json_response(_dumps(rendering.lab_test(row)))


@router.get(
    LAB_TESTS_PATH + "/{lab_test_id:uuid}/markers",
    response_model=MarkersPage,
    responses=error_responses(
        401, 404, 422, described={404: _UNKNOWN_LAB_TEST, 422: "A page past the last."}
    ),
)
def list_lab_test_markers(
    rendering: Rendering,
    service: CurrentService,
    lab_test_id: UUID,
    caller: TeamApiCaller,
    as_of: TeamAsOf,
    page: Page = 1,
    size: Size = DEFAULT_SIZE,
) -> Any:
    """A lab test's markers, paged like the catalog (with `as_of`: the test's markers as
    then; the markers themselves are reference data, as now)."""
    row = _lab_test(service, caller.team_id, lab_test_id, as_of)
    markers = [m for m in map(service.lab_catalog.marker, row.view.marker_ids) if m is not None]
    return json_response(rendering.markers_page(markers, page, size, "query"))


def _codes(catalog: ReferenceLabCatalog, view: LabTestView) -> set[str]:
    return {m.provider_id for m in map(catalog.marker, view.marker_ids) if m is not None}


def order_set_markers(service: Service, team_id: UUID, body: OrderSetRequest) -> list[Marker]:
    """Endpoint 8: the markers of the lab tests, then the add-on's by id and by the lab's
    code, each once, in that order. Unknown lab tests, then unknown ids or codes, are a
    404 naming them; markers of two labs a 422. The add-on's codes are looked up at the set's lab
    (its lab tests', or its marker ids'), or at the lab account's only lab."""
    catalog = service.lab_catalog
    commands = service.lab_test_commands
    wanted = list(dict.fromkeys(body.lab_test_ids or ()))
    rows = service.lab_tests.rows(team_id, wanted)
    unknown = [i for i in wanted if i not in rows]
    if unknown:
        raise UnknownLabTests(unknown)
    markers = commands.markers_of([i for t in wanted for i in rows[t].view.marker_ids])
    add_on = body.add_on or AddOn()
    markers += commands.markers_of(add_on.marker_ids or ())
    labs = sorted({m.lab_id for m in markers})
    if body.lab_account_id is not None:
        account = catalog.account(body.lab_account_id)
        if account is None:
            raise InvalidRequest("lab_account_id names no lab account.", "lab_account_id")
        outside = [lab_id for lab_id in labs if lab_id not in account.lab_ids]
        if outside:
            raise InvalidRequest(
                "The lab account cannot order from the set's lab.", "lab_account_id"
            )
        if not labs and len(account.lab_ids) == 1:
            labs = sorted(account.lab_ids)
    if len(labs) > 1:
        raise InvalidRequest(
            f"The order set holds markers of {len(labs)} labs "
            f"({', '.join(map(str, labs))}): an order goes to one lab.",
            "lab_test_ids",
        )
    if add_on.provider_ids:
        if not labs:
            raise InvalidRequest(
                "add_on.provider_ids are a lab's own codes: give lab_test_ids or "
                "add_on.marker_ids too, so that the lab is known.",
                "add_on",
            )
        markers += commands.markers_of_lab(labs[0], add_on.provider_ids)
    return list({m.id: m for m in markers}.values())
