"""GET /v2/audit/user/{user_id}/deletion_report: the signed deletion report of a user of
the caller's team, in any state (live, pending erasure, erased), as JSON (the signed
document, which `healthledger verify-report` checks offline) or as a printable HTML
page. Another team's user is a 404, as an unknown one is. Over a log whose chain does not
verify across the records the report would cite, no report is made or signed: a 409
naming the first bad record."""

from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse, JSONResponse, Response
from healthledger.adapters.compliance.deletion_report import LogNotSound, deletion_report
from healthledger.adapters.compliance.report_rendering import render_html
from healthledger.adapters.http.as_of import TEAM_READ_REFUSES_AS_OF
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService

_REPORT_DESCRIPTION = (
    "The signed deletion report (docs/compliance-verify.md describes its fields and how "
    "to verify it): the request, the erasure and the checks run again now, the proof."
)


# The error_type of a report refused over a log that does not verify.
LOG_NOT_VERIFIED = "LOG_NOT_VERIFIED"

# The HTML report is a page like the portal's: the same Content-Security-Policy (its one
# style sheet is inline; it loads nothing) and the same headers around it.
HTML_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": (
        "default-src 'none'; img-src https: http:; style-src 'unsafe-inline'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
}

router = APIRouter(tags=["audit"], route_class=LedgerRoute)


@router.get(
    "/v2/audit/user/{user_id}/deletion_report",
    # A report is made now, over the log as it is: it does not travel in time.
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    response_class=Response,
    responses={
        200: {
            "description": _REPORT_DESCRIPTION,
            "content": {
                "application/json": {"schema": {"type": "object"}},
                "text/html": {"schema": {"type": "string"}},
            },
        },
        **error_responses(
            401,
            404,
            409,
            422,
            described={
                404: "Unknown user, or another team's.",
                409: "No report was made: the event log's hash chain does not verify over "
                "the records the report would cite (error_type LOG_NOT_VERIFIED; `record` "
                "names the first bad one). Nothing was signed.",
            },
        ),
    },
)
def user_deletion_report(
    service: CurrentService,
    caller: TeamApiCaller,
    user_id: UUID,
    format: Annotated[
        Literal["json", "html"],
        Query(description="json (the signed report, the default) or html (printable)."),
    ] = "json",
) -> Any:
    """A user's deletion report: what was asked and by whom, what the erasure
    destroyed and what is found of the user now, and the hash-chain proof of the
    events it rests on, signed by the service. No personal value is in it."""
    try:
        report = deletion_report(service, user_id, caller.ctx, team_id=caller.team_id)
    except LogNotSound as refused:
        return JSONResponse(
            status_code=409,
            content={
                "detail": {
                    "error_type": LOG_NOT_VERIFIED,
                    "error_message": refused.message,
                    "record": refused.record,
                }
            },
        )
    if format == "html":
        return HTMLResponse(render_html(report), headers=HTML_HEADERS)
    return JSONResponse(report)
