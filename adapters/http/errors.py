"""Errors as gaps.md says: a top-level `detail`; never a stack trace, SQL, key or
personal value. Validation errors keep the pydantic shape, with body inputs redacted."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from healthledger.adapters.http.cursors import InvalidCursor
from healthledger.domain import errors
from healthledger.domain.connections.connection import AlreadyConnected, NotConnected
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("healthledger.http")

REDACTED = "[redacted]"

_STATUS: dict[type[errors.LedgerError], int] = {
    errors.UserNotFound: 404,
    errors.UserScheduledForDeletion: 404,
    errors.GracePeriodEnded: 404,
    errors.DemographicsNotFound: 404,
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
    AlreadyConnected: 409,
    NotConnected: 404,
}


class FeatureNotEnabled(Exception):
    def __init__(self, feature: str) -> None:
        self.feature = feature


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


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": validation_detail(exc.errors())})

    @app.exception_handler(errors.ClientUserIdTaken)
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

    @app.exception_handler(errors.InvalidRequest)
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

    @app.exception_handler(InvalidCursor)
    async def _cursor(request: Request, exc: InvalidCursor) -> JSONResponse:
        return JSONResponse(
            status_code=400,
            content={"detail": {"error_type": "INVALID_CURSOR", "error_message": exc.message}},
        )

    @app.exception_handler(errors.LedgerError)
    async def _ledger(request: Request, exc: errors.LedgerError) -> JSONResponse:
        return JSONResponse(
            status_code=_STATUS.get(type(exc), 400), content={"detail": exc.message}
        )

    @app.exception_handler(FeatureNotEnabled)
    async def _feature(request: Request, exc: FeatureNotEnabled) -> JSONResponse:
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

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(
            status_code=exc.status_code, content={"detail": exc.detail}, headers=exc.headers
        )

    @app.exception_handler(OperationalError)
    async def _database_busy(request: Request, exc: OperationalError) -> JSONResponse:
        log.warning("database unavailable: %s", type(exc.orig).__name__)
        return JSONResponse(
            status_code=503,
            content={"detail": "The database is busy or unreachable; retry shortly."},
            headers={"Retry-After": "1"},
        )
