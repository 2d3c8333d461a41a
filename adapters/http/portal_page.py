"""The hosted portal (spec 2.4; docs/labs.md#portal): server-rendered pages where a user
sees their lab test orders, each order's progress and, once completed, its results. Served
on the link page's app, at {link_url}:

    GET /portal?token=...                       the user's orders, newest first
    GET /portal/orders/{order_id}?token=...     one order: its lab, its progress, its results

The token is a signed `PortalPass` (portal_tokens.py) for one user of one team; every
view checks it afresh: the signature, the expiry, that the user is still active in that
team and was not deleted since the token was issued (an undone deletion included), and
that the team still has the closed-beta feature on. Anything else gets an error page with
its status: 404 for a token that is not ours (missing, malformed, forged, or of another
team) and for an order that is not the user's, 410 for an expired token or a deleted (or
erased) user, 403 for a team that switched the portal off. Error pages name nothing personal.

The pages hold personal data (results): every response forbids caching (`no-store`) and
the Referer header (the token must not leave with a click), and loads nothing from
elsewhere but the team's logo. Links between the pages are relative and carry the token,
so the pages work under any prefix of {link_url} and need no cookie. Nothing here logs.

The pages are the templates under adapters/templates/portal/ (branded_pages.py: every value
autoescaped); `PORTAL_ROUTES` are module-level, and ask the request for the app's service.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from healthledger.adapters.answers.orders import OrderRow
from healthledger.adapters.composition import Service
from healthledger.adapters.http.branded_pages import NO_BRAND, Brand, branded_page
from healthledger.adapters.http.portal_tokens import PortalTokens
from healthledger.adapters.persistence.queries.portal import PortalHolder
from healthledger.domain.labs.orders import CANCELLED, COMPLETED, FAILED, low_level
from healthledger.domain.labs.portal import EXPIRED, PortalPass
from healthledger.domain.personal_data import ERASED_PLACEHOLDER
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

PORTAL_URL_FEATURE = "portal_url"
PORTAL_PATH = "/portal"
_ORDER_PATH = "/portal/orders/{order_id}"

# The headers of a page that holds what only its link's holder may see (this portal's, the
# webhook portal's): no caching, no Referer, nothing loaded from elsewhere but a logo.
PRIVATE_PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Pragma": "no-cache",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Robots-Tag": "noindex, nofollow",
    "Content-Security-Policy": (
        "default-src 'none'; img-src https: http:; style-src 'unsafe-inline'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
}

_TOP_LEVEL_LABELS = {
    "received": "Ordered",
    "collecting_sample": "Collecting the sample",
    "sample_with_lab": "Sample at the lab",
    COMPLETED: "Results ready",
    CANCELLED: "Cancelled",
    FAILED: "Could not be completed",
}
_METHOD_LABELS = {
    "testkit": "Test kit at home",
    "walk_in_test": "Walk-in at a patient service center",
    "at_home_phlebotomy": "At-home blood draw",
}
_INTERPRETATION_LABELS = {"normal": "Normal", "abnormal": "Abnormal", "critical": "Critical"}

_NOT_VALID = (
    "This portal link is not valid",
    "Check that you opened the whole link you were sent, or ask for a new one.",
)
_EXPIRED = ("This portal link has expired", "Ask for a new link to see your lab tests.")
_GONE = (
    "This portal link no longer works",
    "It was withdrawn. Ask for a new link if you need one.",
)
_DISABLED = ("The portal is not available", "The portal is not offered here at the moment.")
_NO_ORDER = ("This lab test is not here", "It is not one of the lab tests this link shows.")


def portal_url(link_url: str, token: str, order_id: UUID | None = None) -> str:
    """The portal page of a token at {link_url}; with `order_id`, that order's page."""
    path = PORTAL_PATH if order_id is None else _ORDER_PATH.format(order_id=order_id)
    return f"{link_url.rstrip('/')}{path}?{urlencode({'token': token})}"


def _service(request: Request) -> Service:
    """The service the link app was made for (link_page.create_link_app)."""
    service: Service = request.app.state.service
    return service


def admitted(service: Service, request: Request) -> tuple[PortalPass, PortalHolder] | Response:
    """The pass and its holder, or the error page that refuses the request."""
    grant = PortalTokens(service.cursor_secret).open(request.query_params.get("token"))
    if grant is None:
        return error_page(404, _NOT_VALID, None)
    holder = service.portal_queries.holder(grant.user_id, grant.issued_at)
    if holder is None:
        # A genuine pass of a user that is no more: erased.
        return error_page(410, _GONE, None)
    if holder.team_id != grant.team_id:
        return error_page(404, _NOT_VALID, None)
    problem = grant.problem(
        service.clock(),
        user_live=holder.live,
        deleted_since_issue=holder.deleted_since_issue,
    )
    if problem is not None:
        return error_page(410, _EXPIRED if problem == EXPIRED else _GONE, holder)
    if PORTAL_URL_FEATURE not in holder.features:
        return error_page(403, _DISABLED, holder)
    return grant, holder


# Plain functions: Starlette runs them in its thread pool, off the event loop (they read the
# database).


def orders(request: Request) -> Response:
    service = _service(request)
    found = admitted(service, request)
    if isinstance(found, Response):
        return found
    grant, holder = found
    rows = service.order_queries.orders_of_user(grant.team_id, grant.user_id)
    token = request.query_params["token"]
    listed = [service.order_answers.row_of(row) for row in rows]
    named = [(row, _test_name(service, row)) for row in listed]
    return orders_page(named, token, holder)


def order(request: Request) -> Response:
    service = _service(request)
    found = admitted(service, request)
    if isinstance(found, Response):
        return found
    grant, holder = found
    token = request.query_params["token"]
    order_id: UUID = request.path_params["order_id"]
    stored = service.order_queries.order(grant.team_id, order_id)
    if stored is None or stored.user_id != grant.user_id:
        return error_page(404, _NO_ORDER, holder, back=token)
    row = service.order_answers.row_of(stored)
    lab = service.order_answers.lab_test(row)["lab"]
    results = service.order_answers.results(row)["results"] if _has_results(row) else None
    return order_page(row, _test_name(service, row), lab, results, token, holder)


PORTAL_ROUTES = [
    Route(PORTAL_PATH, orders, methods=["GET"]),
    Route("/portal/orders/{order_id:uuid}", order, methods=["GET"]),
]


# -- rendering -------------------------------------------------------------------------------


def _test_name(service: Service, row: OrderRow) -> str:
    """The name of the test ordered, opened with the user's key (sealed: issue 29)."""
    test = service.order_answers.ordered_test(row)
    return ERASED_PLACEHOLDER if test is None else test.name


def _has_results(row: OrderRow) -> bool:
    return row.status == COMPLETED and row.sealed_results is not None


def _day(moment: datetime) -> str:
    return f"{moment.day} {moment:%b %Y}"


def _when(value: str | datetime) -> str:
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    return f"{_day(moment)}, {moment:%H:%M} UTC"


def _status_label(row: OrderRow) -> str:
    return _TOP_LEVEL_LABELS.get(row.status, row.status.replace("_", " ").capitalize())


def _step_label(status: str) -> str:
    """A line of the order's progress: the lab's own (low-level) status, in words."""
    return low_level(status).replace("_", " ").capitalize()


def _method_label(method: str) -> str:
    return _METHOD_LABELS.get(method, method)


def _interpretation_label(value: str) -> str:
    return _INTERPRETATION_LABELS.get(value, value.capitalize())


# The portal's words and dates, for its templates.
_WORDS = {
    "day": _day,
    "when": _when,
    "status_label": _status_label,
    "step_label": _step_label,
    "method_label": _method_label,
    "interpretation_label": _interpretation_label,
}


def _order_href(order_id: UUID, token: str) -> str:
    # Relative to /portal: the page works under any prefix of {link_url}.
    return f"portal/orders/{order_id}?{urlencode({'token': token})}"


def _list_href(token: str) -> str:
    # Relative to /portal/orders/{order_id}.
    return f"../../portal?{urlencode({'token': token})}"


def _results_state(row: OrderRow, results: Any) -> str:
    """What stands under an order's Results: its results ("shown"), results it had that
    can no longer be opened ("lost"), or why it has none."""
    if results is None:
        if row.status in (CANCELLED, FAILED):
            return row.status
        return "pending"
    return "shown" if isinstance(results, list) else "lost"


def orders_page(
    rows: list[tuple[OrderRow, str]], token: str, holder: PortalHolder | None
) -> Response:
    """The user's orders (newest first, as given), each with its test's name, linking to
    its page."""
    listed = [(row, name, _order_href(row.order_id, token)) for row, name in rows]
    return _page(200, "portal/orders.html", holder, orders=listed)


def order_page(
    row: OrderRow,
    test_name: str,
    lab: dict[str, Any] | None,
    results: Any,
    token: str,
    holder: PortalHolder | None,
) -> Response:
    """One order: the name of its test, `lab` as the order's answer names it, `results`
    its results' answer (None when it has none to show)."""
    return _page(
        200,
        "portal/order.html",
        holder,
        row=row,
        test_name=test_name,
        lab=lab,
        results=results,
        results_state=_results_state(row, results),
        back_href=_list_href(token),
    )


def _brand(holder: PortalHolder | None) -> Brand:
    """The team's brand (its company name, else the team's name)."""
    return NO_BRAND if holder is None else Brand.of(holder.team_settings, holder.team_name)


def error_page(
    status: int,
    text: tuple[str, str],
    holder: PortalHolder | None,
    *,
    back: str | None = None,
) -> Response:
    """A refused view: `text` (title, message); with `back`, the token of a link back to
    the list."""
    title, message = text
    return _page(
        status,
        "portal/error.html",
        holder,
        title=title,
        message=message,
        back_href=None if back is None else _list_href(back),
    )


def _page(status: int, template: str, holder: PortalHolder | None, **context: Any) -> Response:
    return branded_page(
        status, template, _brand(holder), headers=PRIVATE_PAGE_HEADERS, **_WORDS, **context
    )
