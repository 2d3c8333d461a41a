"""Errors as gaps.md says: a top-level `detail`; never a stack trace, SQL, key or
personal value. Validation errors keep the pydantic shape, with body inputs redacted."""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from uuid import UUID

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from healthledger.adapters.http.cursors import InvalidCursor
from healthledger.adapters.persistence.engine.outages import unavailable
from healthledger.adapters.printing import PdfUnavailable
from healthledger.domain import errors
from healthledger.domain.connections.connection import AlreadyConnected, NotConnected
from healthledger.domain.connections.imports import ImportNotFound
from healthledger.domain.health_queries.continuous import (
    ContinuousQueryNotFound,
    ContinuousQuerySlugTaken,
    NoResultYet,
    TooManyContinuousQueries,
)
from healthledger.domain.labs.appointments import (
    AppointmentConflict,
    AppointmentNotFound,
    SlotTaken,
)
from healthledger.domain.labs.documents import DocumentNotAvailable
from healthledger.domain.labs.kits import KitNotFound
from healthledger.domain.labs.lab_tests import (
    LabTestInactive,
    SharedLabTestUnchangeable,
    UnknownLabTests,
    UnknownMarkers,
)
from healthledger.domain.labs.orders import (
    IdempotencyKeyReused,
    KitNotRegistrable,
    OrderNotAdvanceable,
    OrderNotCancellable,
    OrderNotFound,
    ResultsNotReady,
)
from healthledger.domain.labs.report_parsing import ParsingJobNotFound
from healthledger.domain.labs.result_test_harness import (
    HarnessNotInSandbox,
    ResultTestRunNotFound,
)
from healthledger.domain.labs.unmatched_results import (
    ResultNotAttachable,
    UnmatchedResultDecided,
    UnmatchedResultNotFound,
)
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match, Mount

log = logging.getLogger("healthledger.http")

REDACTED = "[redacted]"

_STATUS: dict[type[errors.LedgerError], int] = {
    errors.UserNotFound: 404,
    errors.UserScheduledForDeletion: 404,
    errors.GracePeriodEnded: 404,
    errors.DemographicsNotFound: 404,
    errors.SummaryNotFound: 404,
    errors.TeamNotFound: 404,
    errors.UserNotDeleted: 400,
    errors.NothingToUpdate: 400,
    errors.ClientUserIdInUse: 409,
    errors.ConcurrentChange: 409,
    errors.OrganizationNotFound: 404,
    errors.KeyNotFound: 404,
    errors.CredentialsNotFound: 404,
    errors.CredentialsNotPrepared: 409,
    errors.WebhookEndpointNotFound: 404,
    errors.EventDestinationNotFound: 404,
    AlreadyConnected: 409,
    NotConnected: 404,
    ImportNotFound: 404,
    UnknownMarkers: 404,
    UnknownLabTests: 404,
    LabTestInactive: 409,
    SharedLabTestUnchangeable: 403,
    OrderNotFound: 404,
    OrderNotCancellable: 409,
    OrderNotAdvanceable: 400,
    IdempotencyKeyReused: 409,
    KitNotFound: 404,
    KitNotRegistrable: 409,
    ResultsNotReady: 409,
    DocumentNotAvailable: 409,
    SlotTaken: 409,
    AppointmentConflict: 409,
    AppointmentNotFound: 404,
    UnmatchedResultNotFound: 404,
    UnmatchedResultDecided: 409,
    ResultNotAttachable: 409,
    ResultTestRunNotFound: 404,
    HarnessNotInSandbox: 400,
    ContinuousQueryNotFound: 404,
    ContinuousQuerySlugTaken: 409,
    TooManyContinuousQueries: 409,
    NoResultYet: 404,
    ParsingJobNotFound: 404,
}


# -- the error bodies, as the OpenAPI documents declare them ----------------------------


class ErrorDescription(BaseModel):
    """A typed error: what kind, and what to do about it."""

    # Some types carry more (INVALID_REQUEST: the user_id and created_on of the holder).
    model_config = ConfigDict(extra="allow")
    error_type: str = Field(examples=["INVALID_CURSOR"])
    error_message: str = Field(examples=["next_cursor is not a cursor this listing issued."])


class ErrorBody(BaseModel):
    """Every error but a validation error: a sentence, or a typed error."""

    detail: str | ErrorDescription = Field(examples=["User not found."])


class ValidationProblem(BaseModel):
    type: str = Field(examples=["value_error"])
    loc: list[str | int] = Field(examples=[["body", "name"]])
    msg: str = Field(examples=["Value error, must not contain control characters"])
    input: Any = Field(
        default=None,
        description=f"The value sent for a path or query parameter; `{REDACTED}` for a body "
        "or a header, which may hold personal data or a key.",
    )


class ValidationErrors(BaseModel):
    """Parameters or a body that do not fit the operation (malformed JSON included)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "detail": [
                        {
                            "type": "missing",
                            "loc": ["body", "user_id"],
                            "msg": "Field required",
                            "input": REDACTED,
                        }
                    ]
                }
            ]
        }
    )

    detail: list[ValidationProblem]


_RESPONSES: dict[int, tuple[str, type[BaseModel]]] = {
    400: ("Refused as asked: the detail says why (an empty patch, a bad cursor...).", ErrorBody),
    401: ("The key is missing, unknown, revoked, or of the other API.", ErrorBody),
    403: ("The key may not do this, or the team has not enabled the feature.", ErrorBody),
    404: ("Not found, or not reachable with this key.", ErrorBody),
    406: ("The Accept header allows none of the operation's media types.", ErrorBody),
    409: (
        "In conflict with the current state, or with a concurrent change: read, retry.",
        ErrorBody,
    ),
    422: ("Invalid parameters or body, or a body that is not well-formed JSON.", ValidationErrors),
    429: ("Too soon: retry after the seconds the Retry-After header says.", ErrorBody),
}


# The 404 of every route that names a user of the team.
USER_NOT_FOUND = {404: "Unknown user, another team's user, or scheduled for deletion."}


def error_responses(
    *statuses: int, described: Mapping[int, str] | None = None
) -> dict[int | str, dict[str, Any]]:
    """The `responses` of an operation that answers these error statuses; `described`
    replaces the general description of a status with the operation's own."""
    own = described or {}
    return {
        status: {
            "description": own.get(status, _RESPONSES[status][0]),
            "model": _RESPONSES[status][1],
        }
        for status in statuses
    }


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
_PARAMETER = re.compile(r"\{(\w+)\}")  # a {parameter} of an OpenAPI path template


@functools.cache
def _loosened(template: str) -> re.Pattern[str]:
    """An OpenAPI path template as a pattern taking any segment for each parameter, in a
    group of the parameter's name."""
    parts = _PARAMETER.split(template)  # literal, name, literal...
    return re.compile(
        "".join(f"(?P<{part}>[^/]+)" if i % 2 else re.escape(part) for i, part in enumerate(parts))
    )


def _paths(request: Request) -> dict[str, Any]:
    """The `paths` of the app's OpenAPI document, as its documented routes give them.

    Made from the routes, not asked of `app.openapi()`: that caches the document on the
    app, and the routes are built once per process and shared by every app made of them
    (ADR 0024), so one document serves them all instead of one per app. Keyed by the
    routes' identities (included routers do not hash); the entry holds the routes, so
    that an identity is not reused while it is a key."""
    # Without what each app adds for its own documents (its static files, the document's
    # own routes), which no OpenAPI document describes.
    routes = tuple(
        route
        for route in request.app.router.routes
        if getattr(route, "include_in_schema", True) and not isinstance(route, Mount)
    )
    key = tuple(map(id, routes))
    known = _DOCUMENTED.get(key)
    if known is None:
        paths = get_openapi(title="", version="", routes=list(routes)).get("paths", {})
        # A process has two sets (the team API's, the management API's): a bound, not an
        # eviction policy. One clear is atomic where popping the oldest from several
        # threads at once is not.
        if len(_DOCUMENTED) >= 8:
            _DOCUMENTED.clear()
        known = _DOCUMENTED[key] = (routes, paths)
    return known[1]


_DOCUMENTED: dict[tuple[int, ...], tuple[tuple[BaseRoute, ...], dict[str, Any]]] = {}


def allowed_methods(request: Request) -> str:
    """The methods of the resource at the request's path, for a 405's `Allow` (the router
    names only those of the first route whose path matched).

    Each method is asked of the app's routes as the router would. Where templates of
    different shapes match the path (`/v2/user/{user_id}/info` and, with "info" for the
    provider, `/v2/user/{user_id}/{provider}`), the resource is the one the OpenAPI
    document describes with the fewest parameters."""
    path = request.scope["path"]
    served = []
    for method in _METHODS:
        scope = {
            "type": "http",
            "method": method,
            "path": path,
            "root_path": request.scope.get("root_path", ""),
            "headers": [],
            "query_string": b"",
        }
        if any(route.matches(scope)[0] is Match.FULL for route in request.app.router.routes):
            served.append(method)
    documented: dict[int, set[str]] = {}
    for template, operations in _paths(request).items():
        if _loosened(template).fullmatch(path):
            methods = documented.setdefault(template.count("{"), set())
            methods.update(method.upper() for method in operations)
    if documented:
        served = [method for method in served if method in documented[min(documented)]]
    return ", ".join(served)


def validation_detail(errs: Any) -> list[dict[str, Any]]:
    """pydantic errors as {type, loc, msg, input}; inputs from bodies and headers are
    redacted because they may hold personal data (or a key)."""
    detail = []
    for err in errs:
        loc = list(err.get("loc", ()))
        keep_input = bool(loc) and loc[0] in ("path", "query")
        detail.append(
            {
                "type": err.get("type"),
                "loc": loc,
                "msg": err.get("msg"),
                "input": err.get("input") if keep_input else REDACTED,
            }
        )
    return detail


async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
    return JSONResponse(status_code=422, content={"detail": validation_detail(exc.errors())})


async def _taken(request: Request, exc: errors.ClientUserIdTaken) -> JSONResponse:
    return JSONResponse(
        status_code=400,
        content={
            "detail": {
                "error_type": "INVALID_REQUEST",
                "error_message": exc.message,
                "user_id": str(exc.user_id),
                # The same form pydantic gives every other timestamp in responses.
                "created_on": exc.created_on.isoformat().replace("+00:00", "Z"),
            }
        },
    )


async def _invalid(request: Request, exc: errors.InvalidRequest) -> JSONResponse:
    detail = [
        {
            "type": "value_error",
            "loc": [exc.location, exc.field],
            "msg": exc.message,
            "input": REDACTED,
        }
    ]
    return JSONResponse(status_code=422, content={"detail": detail})


async def _cursor(request: Request, exc: InvalidCursor) -> JSONResponse:
    return JSONResponse(
        status_code=400,
        content={"detail": {"error_type": "INVALID_CURSOR", "error_message": exc.message}},
    )


async def _ledger(request: Request, exc: errors.LedgerError) -> JSONResponse:
    return JSONResponse(status_code=_STATUS.get(type(exc), 400), content={"detail": exc.message})


async def _too_soon(request: Request, exc: errors.TooSoon) -> JSONResponse:
    return JSONResponse(
        status_code=429,
        content={"detail": exc.message},
        headers={"Retry-After": str(exc.retry_after)},
    )


async def _feature(request: Request, exc: errors.FeatureNotEnabled) -> JSONResponse:
    return JSONResponse(
        status_code=403,
        content={
            "detail": {
                "error_type": "FEATURE_NOT_ENABLED",
                "error_message": f"The closed-beta feature '{exc.feature}' is not "
                "enabled for this team.",
            }
        },
    )


_UUID = TypeAdapter(UUID)


def malformed_ids(request: Request) -> list[dict[str, Any]]:
    """Why no route took the request, when one would have but for an id: the path
    parameters the OpenAPI document types as uuids that are not, as pydantic's errors.

    A route's `{name:uuid}` convertor makes a path with a malformed id match no route at
    all, so the router can only say "Not Found"; this asks the documented operations of
    the request's method again with each parameter loosened to any segment. Empty:
    nothing but a wrong path."""
    path, method = request.scope["path"], request.scope["method"].lower()
    method = "get" if method == "head" else method
    for template, operations in _paths(request).items():
        found = _loosened(template).fullmatch(path)
        if found is None or method not in operations:
            continue
        problems: list[dict[str, Any]] = []
        for parameter in operations[method].get("parameters", ()):
            if parameter["in"] != "path" or parameter["schema"].get("format") != "uuid":
                continue
            name = parameter["name"]
            try:
                _UUID.validate_python(found[name])
            except ValidationError as invalid:
                problems.extend({**problem, "loc": ["path", name]} for problem in invalid.errors())
        if problems:
            return validation_detail(problems)
    return []


async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    headers = exc.headers
    if exc.status_code == 404:
        # Malformed ids are a 422 naming the parameter, as for a query parameter.
        problems = malformed_ids(request)
        if problems:
            return JSONResponse(status_code=422, content={"detail": problems})
    if exc.status_code == 405:
        headers = {**(headers or {}), "Allow": allowed_methods(request)}
    return JSONResponse(
        status_code=exc.status_code, content={"detail": exc.detail}, headers=headers
    )


async def _database_busy(request: Request, exc: OperationalError) -> JSONResponse:
    # The driver's code tells the operator why (SQLITE_BUSY, SQLITE_FULL: the disk is
    # full; 57P01: the server shut down); never its message, which may quote values.
    log.warning("database unavailable: %s", unavailable(exc))
    return JSONResponse(
        status_code=503,
        content={"detail": "The database is busy or unreachable; retry shortly."},
        headers={"Retry-After": "1"},
    )


async def _pdf_unavailable(request: Request, exc: PdfUnavailable) -> JSONResponse:
    # A lab document could not be printed (Chromium missing or failing): the service's
    # fault, said plainly; the reason is the operator's, in the log.
    log.error("a PDF could not be printed: %s", exc)
    return JSONResponse(
        status_code=503,
        content={"detail": "The document cannot be printed now; retry later."},
    )


# Each error's handler, installed on every app (team API, management API): Starlette picks
# the handler of the nearest class in an exception's MRO, whatever the order here.
_HANDLERS: tuple[tuple[type[Exception], Callable[..., Awaitable[JSONResponse]]], ...] = (
    (RequestValidationError, _validation),
    (errors.ClientUserIdTaken, _taken),
    (errors.InvalidRequest, _invalid),
    (InvalidCursor, _cursor),
    (errors.LedgerError, _ledger),
    (errors.FeatureNotEnabled, _feature),
    (errors.TooSoon, _too_soon),
    (StarletteHTTPException, _http),
    (OperationalError, _database_busy),
    (PdfUnavailable, _pdf_unavailable),
)


def install_error_handlers(app: FastAPI) -> None:
    for exc_class, handler in _HANDLERS:
        app.exception_handler(exc_class)(handler)
