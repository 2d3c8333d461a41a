"""Team API routes of unmatched lab results (issue 33; junction-api-sdk 2.0.0's
`lab_tests.*unmatched_result*` methods): the sandbox's test harness that makes them
(`/v3/unmatched_result_test`: its cases, a run, a run's state), the team's listing and
one result (now, or as of an instant), and the team's decisions: accept into an order,
reject, or unsure.

Writes go through `UnmatchedResults` and `ResultTestHarness` (domain/labs/); the listing
reads the `unmatched_results` read model, one result its stream. A result's contents
are opened with its own key (ADR 0040): once accepted or rejected, they are gone from
its answer. Another team's result or run is a 404, as everywhere."""

from __future__ import annotations

import hashlib
from datetime import UTC, date, datetime, time
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Header, Query
from healthledger.adapters.compliance.time_travel import (
    PlaceholderVault,
    aggregate_as_of,
    reads_as_of,
)
from healthledger.adapters.composition import Service
from healthledger.adapters.http.as_of import TEAM_READ_REFUSES_AS_OF, TeamAsOf
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.order_schemas import OrderAnswer
from healthledger.adapters.http.orders import stored_order
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService, Cursors
from healthledger.adapters.persistence.queries.unmatched_results import UnmatchedFilters
from healthledger.domain.errors import InvalidRequest
from healthledger.domain.free_text import FreeText
from healthledger.domain.labs.result_matching import REASONS, Patient
from healthledger.domain.labs.result_test_harness import (
    CASES,
    ResultTestRequest,
    UnmatchedResultTestRun,
)
from healthledger.domain.labs.unmatched_results import (
    REJECT,
    UNSURE,
    UnmatchedResult,
    UnmatchedResultNotFound,
)
from healthledger.domain.personal_data import PersonalDataVault
from pydantic import BaseModel, ConfigDict, Field

router = APIRouter(tags=["lab testing"], route_class=LedgerRoute)

_RESULT_NOT_FOUND = {404: "Unknown unmatched result, or another team's."}
_RUN_NOT_FOUND = {404: "Unknown test run, or another team's."}
_PAGES = "unmatched-results-v1"
DEFAULT_LIMIT = 50
MAX_LIMIT = 100

DecisionCode = Literal[
    "match_sample_id",
    "match_completed",
    "match_cancelled",
    "wrong_collection",
    "wrong_lab",
    "multiple_demo_match",
    "match_sample_id_mismatch_demo",
    "match_demo",
    "no_match",
]
Case = Literal[
    "match_completed",
    "match_cancelled",
    "wrong_collection",
    "wrong_lab",
    "multiple_demo_match",
    "match_sample_id_mismatch_demo",
    "match_demo",
    "no_match",
]
Note = Annotated[FreeText, Field(min_length=1, max_length=2000)]

_EXAMPLE_ID = "5b0c7d1e-8a2f-4c3b-9d4e-6f7a8b9c0d1e"
_EXAMPLE_AT = "2026-11-29T10:00:00Z"


# -- the answers -----------------------------------------------------------------------


class UnmatchedResultAnswer(BaseModel):
    """The client's UnmatchedResult. `patient`, `markers` (with their values, an
    addition: `results`) and `interpretation` are opened with the result's own key:
    null once it is accepted or rejected (the key destroyed)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": _EXAMPLE_ID,
                    "status": "pending_customer_review",
                    "decision_code": "match_completed",
                    "sub_reason_codes": [],
                    "reason": REASONS["match_completed"],
                    "patient": {
                        "first_name": "Ada",
                        "last_name": "Lovelace",
                        "dob": "1985-12-10T00:00:00Z",
                        "gender": "female",
                    },
                    "lab": {"id": 1, "name": "Quest Diagnostics", "slug": "quest"},
                    "markers": [{"provider_id": "7600", "name": "Lipid Panel", "results": []}],
                    "interpretation": "normal",
                    "result_status": "final",
                    "note": None,
                    "is_stale": False,
                    "resolution_action": None,
                    "resolved_user_id": None,
                    "resolved_order_id": None,
                    "allowed_actions": ["accept", "reject", "unsure"],
                    "candidate_groups": [],
                    "created_at": _EXAMPLE_AT,
                    "updated_at": _EXAMPLE_AT,
                    "reviewed_at": None,
                }
            ]
        }
    )
    id: str
    status: str
    decision_code: str
    sub_reason_codes: list[str]
    reason: str
    patient: dict[str, Any] | None
    lab: dict[str, Any]
    markers: list[dict[str, Any]] | None
    interpretation: str | None
    result_status: str | None
    note: str | None
    is_stale: bool
    resolution_action: str | None
    resolved_user_id: str | None
    resolved_order_id: str | None
    allowed_actions: list[str]
    candidate_groups: list[dict[str, Any]]
    created_at: datetime
    updated_at: datetime
    reviewed_at: datetime | None


class UnmatchedResultsPage(BaseModel):
    """The client's ListUnmatchedResultResponse."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"data": [], "next_cursor": None, "total": 0}]}
    )
    data: list[UnmatchedResultAnswer]
    next_cursor: str | None
    total: int


class CaseDefinitionAnswer(BaseModel):
    case: str
    order_roles: list[str]
    required_statuses: dict[str, str]
    lab_constraints: list[str]


class ResultTestCases(BaseModel):
    """The client's ListUnmatchedResultTestCasesResponse."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "data": [
                        {
                            "case": "match_completed",
                            "order_roles": ["order"],
                            "required_statuses": {"order": "completed"},
                            "lab_constraints": ["the result comes from the order's lab"],
                        }
                    ]
                }
            ]
        }
    )
    data: list[CaseDefinitionAnswer]


class ResultTestCreated(BaseModel):
    """The client's CreateUnmatchedResultTestResponse."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"run_id": _EXAMPLE_ID, "status": "succeeded"}]}
    )
    run_id: str
    status: str


class ResultTestRunAnswer(BaseModel):
    """The client's GetUnmatchedResultTestResponse."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "run_id": _EXAMPLE_ID,
                    "status": "succeeded",
                    "stage": "succeeded",
                    "case": "no_match",
                    "order_source": "managed",
                    "result_status": "final",
                    "orders": {},
                    "raw_result_id": _EXAMPLE_ID,
                    "error": None,
                    "created_at": _EXAMPLE_AT,
                    "updated_at": _EXAMPLE_AT,
                    "started_at": _EXAMPLE_AT,
                    "completed_at": _EXAMPLE_AT,
                }
            ]
        }
    )
    run_id: str
    status: str
    stage: str
    case: str
    order_source: str
    result_status: str
    orders: dict[str, dict[str, str]] | None
    raw_result_id: str | None
    error: dict[str, str] | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    completed_at: datetime | None


# -- the bodies -------------------------------------------------------------------------


class ResultTestCreate(BaseModel):
    """The client's `create_unmatched_result_test` body."""

    model_config = ConfigDict(extra="forbid")
    case: Case
    order_source: Literal["managed", "provided"]
    # Role -> the team's order (provided), as the case's definition names the roles.
    orders: dict[Annotated[str, Field(min_length=1, max_length=32)], UUID | None] | None = Field(
        default=None, max_length=4
    )
    result_status: Literal["final", "partial"] | None = None
    interpretation: Literal["normal", "abnormal", "critical"] | None = None
    lab_test_id: UUID | None = None
    wrong_lab_test_id: UUID | None = None


class ResultAccept(BaseModel):
    """The client's `accept_unmatched_result` body: the order, or the user whose new
    order it becomes (or both: the order must be that user's)."""

    model_config = ConfigDict(extra="forbid")
    user_id: UUID | None = None
    order_id: UUID | None = None
    note: Note | None = None


class ResultResolve(BaseModel):
    """The client's `resolve_unmatched_result` body."""

    model_config = ConfigDict(extra="forbid")
    action: Literal["reject", "unsure"]
    note: Note | None = None


_IDEMPOTENCY_KEY = Header(
    alias="X-Idempotency-Key",
    min_length=1,
    max_length=255,
    pattern=r"^[\x20-\x7e]+$",
    description="The same key and body answer the run made first; the same key with another "
    "body is a 409. Printable ASCII, at most 255.",
)


# -- rendering --------------------------------------------------------------------------


def _markers(service: Service, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The values grouped by marker, each marker as the client's MatchReviewMarker."""
    markers: dict[int, dict[str, Any]] = {}
    for entry in results:
        marker = markers.setdefault(
            int(entry["marker_id"]),
            {
                "provider_id": entry["marker_provider_id"],
                "name": entry["marker_name"],
                "results": [],
            },
        )
        marker["results"].append(
            {
                key: entry[key]
                for key in (
                    "name",
                    "provider_id",
                    "loinc",
                    "value",
                    "result",
                    "type",
                    "unit",
                    "reference_range",
                    "interpretation",
                )
            }
        )
    return list(markers.values())


def result_answer(
    service: Service, result: UnmatchedResult, vault: PersonalDataVault | None = None
) -> dict[str, Any]:
    """The client's UnmatchedResult of `result`, its sealed values opened with `vault`
    (the key store; a placeholder vault as of an instant)."""
    opener = vault or service.key_store
    opened = opener.open(result.id, result.sealed_result)
    contents = opened if isinstance(opened, dict) else None
    patient = None if contents is None else Patient.of_stored(contents["patient"])
    note = None if result.sealed_note is None else opener.open(result.id, result.sealed_note)
    lab = service.lab_catalog.lab(result.lab_id)
    return {
        "id": str(result.id),
        "status": result.status,
        "decision_code": result.decision_code,
        "sub_reason_codes": [],
        "reason": result.reason,
        "patient": None
        if patient is None
        else {
            "first_name": patient.first_name,
            "last_name": patient.last_name,
            "dob": datetime.combine(patient.dob, time.min, UTC),
            "gender": patient.gender,
        },
        "lab": {
            "id": result.lab_id,
            "name": "" if lab is None else lab.name,
            "slug": "" if lab is None else lab.slug,
        },
        "markers": None if contents is None else _markers(service, contents["results"]),
        "interpretation": None if contents is None else contents["interpretation"],
        "result_status": result.result_status,
        "note": note if isinstance(note, str) and contents is not None else None,
        "is_stale": False,
        "resolution_action": result.resolution_action,
        "resolved_user_id": None
        if result.resolved_user_id is None
        else str(result.resolved_user_id),
        "resolved_order_id": None
        if result.resolved_order_id is None
        else str(result.resolved_order_id),
        "allowed_actions": list(result.allowed_actions),
        "candidate_groups": result.candidate_groups,
        "created_at": result.created_on,
        "updated_at": result.modified_on,
        "reviewed_at": result.reviewed_at,
    }


def run_answer(run: UnmatchedResultTestRun) -> dict[str, Any]:
    return {
        "run_id": str(run.id),
        "status": run.status,
        "stage": run.stage,
        "case": run.case,
        "order_source": run.order_source,
        "result_status": run.result_status,
        "orders": run.orders,
        "raw_result_id": None if run.raw_result_id is None else str(run.raw_result_id),
        "error": run.error,
        "created_at": run.created_on,
        "updated_at": run.modified_on,
        "started_at": run.created_on,
        "completed_at": run.completed_at,
    }


def _day(value: str | None, field: str, *, end: bool) -> datetime | None:
    if value is None:
        return None
    try:
        day = date.fromisoformat(value)
    except ValueError:
        raise InvalidRequest(f"{field} must be a date (YYYY-MM-DD).", field, "query") from None
    return datetime.combine(day, time.max if end else time.min, UTC)


# -- the harness -------------------------------------------------------------------------


@router.get(
    "/v3/unmatched_result_test/case",
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    response_model=ResultTestCases,
    responses=error_responses(401, 422),
)
def list_cases(caller: TeamApiCaller) -> Any:
    """The harness's cases: the orders each is built from (role -> the low-level status
    it must be in) and what it asks of the labs."""
    return {
        "data": [
            {
                "case": case.case,
                "order_roles": list(case.roles),
                "required_statuses": dict(case.roles),
                "lab_constraints": list(case.lab_constraints),
            }
            for case in CASES.values()
        ]
    }


@router.post(
    "/v3/unmatched_result_test",
    response_model=ResultTestCreated,
    responses=error_responses(
        400,
        401,
        404,
        409,
        422,
        described={
            400: "Not a sandbox key: the harness runs in the sandbox only.",
            404: "Unknown lab test (lab_test_id, wrong_lab_test_id).",
            409: "The idempotency key was used for another body.",
        },
    ),
)
def create_run(
    service: CurrentService,
    body: ResultTestCreate,
    caller: TeamApiCaller,
    idempotency_key: Annotated[str, _IDEMPOTENCY_KEY],
) -> Any:
    """Sandbox only: write a lab's report built from the team's orders as the case names
    them, matched as any report is; the run says whether it was decided as its case."""
    request = ResultTestRequest(
        case=body.case,
        order_source=body.order_source,
        orders=dict(body.orders or {}),
        result_status=body.result_status or "final",
        interpretation=body.interpretation,
        lab_test_id=body.lab_test_id,
        wrong_lab_test_id=body.wrong_lab_test_id,
    )
    run = service.result_test_harness.run(caller.ctx, caller.team_id, idempotency_key, request)
    return {"run_id": str(run.id), "status": run.status}


@router.get(
    "/v3/unmatched_result_test/{run_id:uuid}",
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    response_model=ResultTestRunAnswer,
    responses=error_responses(401, 404, 422, described=_RUN_NOT_FOUND),
)
def get_run(service: CurrentService, run_id: UUID, caller: TeamApiCaller) -> Any:
    """A run: its stage, the orders it was built from, the unmatched result it made, or
    why it failed."""
    return run_answer(service.result_test_harness.load(caller.team_id, run_id))


# -- the team's review -------------------------------------------------------------------


@router.get(
    "/v3/unmatched_result",
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    response_model=UnmatchedResultsPage,
    responses=error_responses(
        400, 401, 422, described={400: "A cursor this listing did not issue."}
    ),
)
def list_results(
    service: CurrentService,
    caller: TeamApiCaller,
    cursors: Cursors,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
    next_cursor: Annotated[str | None, Query(min_length=1, max_length=2000)] = None,
    decision_code: DecisionCode | None = None,
    lab_slug: Annotated[
        str | None, Query(min_length=1, max_length=64, pattern=r"^[a-z0-9_\-]+$")
    ] = None,
    status: Literal["pending_customer_review", "pending_ops_review", "resolved"] | None = None,
    created_at_start: Annotated[str | None, Query(min_length=10, max_length=10)] = None,
    created_at_end: Annotated[str | None, Query(min_length=10, max_length=10)] = None,
    search_input: Annotated[FreeText | None, Query(min_length=1, max_length=100)] = None,
) -> Any:
    """The team's unmatched results, newest first, filtered; `search_input` (a first
    name, last name or date of birth) is matched against each result's patient opened
    with its key, never a clear column. `next_cursor` (signed, bound to the filters)
    fetches the next page; `total` counts every result that passes the filters."""
    lab_id = None
    if lab_slug is not None:
        lab = service.lab_catalog.lab_by_slug(lab_slug)
        if lab is None:
            raise InvalidRequest(f"Unknown lab {lab_slug!r}.", "lab_slug", "query")
        lab_id = lab.id
    filters = UnmatchedFilters(
        status=status,
        decision_code=decision_code,
        lab_id=lab_id,
        created_from=_day(created_at_start, "created_at_start", end=False),
        created_until=_day(created_at_end, "created_at_end", end=True),
        search=search_input,
    )
    # A cursor is good for the team's listing with the same filters only (a digest of
    # them: the search's text is never in the cursor).
    digest = hashlib.sha256(f"{caller.team_id}:{filters!r}".encode()).hexdigest()[:32]
    scope = f"{_PAGES}:{digest}"
    after = None
    if next_cursor is not None:
        position = cursors.decode(next_cursor, scope)
        after = (datetime.fromisoformat(position["at"]), UUID(position["id"]))
    page = service.unmatched_result_queries.page(caller.team_id, filters, after, limit)
    found = service.ledger.find_many(page.result_ids)
    data = [
        result_answer(service, result)
        for result_id in page.result_ids
        if isinstance(result := found.get(result_id), UnmatchedResult)
    ]
    following = (
        None
        if page.last is None
        else cursors.encode({"at": page.last[0].isoformat(), "id": str(page.last[1])}, scope)
    )
    return {"data": data, "next_cursor": following, "total": page.total}


@router.get(
    "/v3/unmatched_result/{raw_result_id:uuid}",
    response_model=UnmatchedResultAnswer,
    responses=error_responses(401, 404, 422, described=_RESULT_NOT_FOUND),
)
def get_result(
    service: CurrentService, raw_result_id: UUID, caller: TeamApiCaller, as_of: TeamAsOf
) -> Any:
    """One unmatched result (with `as_of`: as it was at that instant, from the log; its
    values destroyed since show as the erased placeholder's absence: null)."""
    if as_of is None:
        result = service.unmatched_results.load(caller.team_id, raw_result_id)
        return result_answer(service, result)
    reads_as_of(service, as_of)  # a future instant is refused
    then = aggregate_as_of(service, raw_result_id, as_of)
    if not isinstance(then, UnmatchedResult) or then.team_id != caller.team_id:
        raise UnmatchedResultNotFound()
    return result_answer(service, then, PlaceholderVault(service.key_store))


@router.post(
    "/v3/unmatched_result/{raw_result_id:uuid}/accept",
    response_model=OrderAnswer,
    responses=error_responses(
        401,
        404,
        409,
        422,
        described={
            404: "Unknown unmatched result, order or user, or another team's.",
            409: "The result is resolved; or the order is final or of another lab.",
            422: "Invalid body; neither order_id nor user_id; an order of another user; "
            "a user without demographics for a new order.",
        },
    ),
)
def accept_result(
    service: CurrentService, raw_result_id: UUID, body: ResultAccept, caller: TeamApiCaller
) -> Any:
    """Attach the result to the team's open order (`order_id`), or to a new order of
    `user_id` (imported: its requisition made at the lab, with the result's sample id):
    the order completes with the result's values, announced by the order's webhook."""
    order = service.unmatched_results.accept(
        caller.ctx,
        caller.team_id,
        raw_result_id,
        user_id=body.user_id,
        order_id=body.order_id,
        note=body.note,
    )
    return service.order_answers.order(stored_order(service, caller, order.id))


@router.post(
    "/v3/unmatched_result/{raw_result_id:uuid}/resolve",
    response_model=UnmatchedResultAnswer,
    responses=error_responses(
        401,
        404,
        409,
        422,
        described={**_RESULT_NOT_FOUND, 409: "The result is resolved (or unsure already)."},
    ),
)
def resolve_result(
    service: CurrentService, raw_result_id: UUID, body: ResultResolve, caller: TeamApiCaller
) -> Any:
    """`reject`: not the team's; resolved, and its data destroyed with its key.
    `unsure`: our operations review it (`pending_ops_review`)."""
    action = REJECT if body.action == "reject" else UNSURE
    result = service.unmatched_results.resolve(
        caller.ctx, caller.team_id, raw_result_id, action, body.note
    )
    return result_answer(service, result)
