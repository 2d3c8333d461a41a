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
"""

from __future__ import annotations

from datetime import datetime
from html import escape
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
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

PORTAL_URL_FEATURE = "portal_url"
PORTAL_PATH = "/portal"
_ORDER_PATH = "/portal/orders/{order_id}"

_HEADERS = {
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


def portal_routes(service: Service) -> list[Route]:
    """The portal's routes, for the link page's app."""
    tokens = PortalTokens(service.cursor_secret)
    answers = service.order_answers

    def admitted(request: Request) -> tuple[PortalPass, PortalHolder] | Response:
        """The pass and its holder, or the error page that refuses the request."""
        grant = tokens.open(request.query_params.get("token"))
        if grant is None:
            return _error(404, _NOT_VALID, None)
        holder = service.portal_queries.holder(grant.user_id, grant.issued_at)
        if holder is None:
            # A genuine pass of a user that is no more: erased.
            return _error(410, _GONE, None)
        if holder.team_id != grant.team_id:
            return _error(404, _NOT_VALID, None)
        problem = grant.problem(
            service.clock(),
            user_live=holder.live,
            deleted_since_issue=holder.deleted_since_issue,
        )
        if problem is not None:
            return _error(410, _EXPIRED if problem == EXPIRED else _GONE, holder)
        if PORTAL_URL_FEATURE not in holder.features:
            return _error(403, _DISABLED, holder)
        return grant, holder

    def orders(request: Request) -> Response:
        found = admitted(request)
        if isinstance(found, Response):
            return found
        grant, holder = found
        rows = service.order_queries.orders_of_user(grant.team_id, grant.user_id)
        token = request.query_params["token"]
        items = [_order_item(OrderRow.from_row(row), token) for row in rows]
        listing = (
            f'<ul class="orders">{"".join(items)}</ul>'
            if items
            else '<p class="muted" id="no-orders">No lab tests have been ordered for you yet.</p>'
        )
        body = f"<h1>Your lab tests</h1>{listing}"
        return _page(200, "Your lab tests", body, holder)

    def order(request: Request) -> Response:
        found = admitted(request)
        if isinstance(found, Response):
            return found
        grant, holder = found
        order_id: UUID = request.path_params["order_id"]
        stored = service.order_queries.order(grant.team_id, order_id)
        if stored is None or stored.user_id != grant.user_id:
            return _error(404, _NO_ORDER, holder, back=request.query_params["token"])
        row = OrderRow.from_row(stored)
        lab = answers.lab_test(row)["lab"]
        results = answers.results(row)["results"] if _has_results(row) else None
        body = _order_detail(row, lab, results, request.query_params["token"])
        return _page(200, row.lab_test_name, body, holder)

    # Plain functions: Starlette runs them in its thread pool, off the event loop (they
    # read the database).
    return [
        Route(PORTAL_PATH, orders, methods=["GET"]),
        Route("/portal/orders/{order_id:uuid}", order, methods=["GET"]),
    ]


# -- rendering -------------------------------------------------------------------------------


def _has_results(row: OrderRow) -> bool:
    return row.status == COMPLETED and row.sealed_results is not None


def _day(moment: datetime) -> str:
    return f"{moment.day} {moment:%b %Y}"


def _when(value: str | datetime) -> str:
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    return f"{_day(moment)}, {moment:%H:%M} UTC"


def _status_label(row: OrderRow) -> str:
    return _TOP_LEVEL_LABELS.get(row.status, row.status.replace("_", " ").capitalize())


def _interpretation(value: str | None) -> str:
    if value is None:
        return ""
    label = _INTERPRETATION_LABELS.get(value, value.capitalize())
    return f'<span class="flag flag-{escape(value)}">{escape(label)}</span>'


def _order_href(order_id: UUID, token: str) -> str:
    # Relative to /portal: the page works under any prefix of {link_url}.
    return f"portal/orders/{order_id}?{urlencode({'token': token})}"


def _order_item(row: OrderRow, token: str) -> str:
    return (
        f'<li><a class="order" id="order-{row.order_id}" '
        f'href="{escape(_order_href(row.order_id, token))}">'
        f'<span class="test">{escape(row.lab_test_name)}</span>'
        f'<span class="status status-{escape(row.status)}">{escape(_status_label(row))}</span>'
        f"{_interpretation(row.interpretation)}"
        f'<span class="muted">Ordered {_day(row.created_at)}</span></a></li>'
    )


def _order_detail(row: OrderRow, lab: dict[str, Any] | None, results: Any, token: str) -> str:
    back = f"../../portal?{urlencode({'token': token})}"
    facts = [
        ("Status", escape(_status_label(row))),
        ("Lab", escape(lab["name"]) if lab else "Not known"),
        (
            "Collection",
            escape(_METHOD_LABELS.get(row.collection_method, row.collection_method)),
        ),
        ("Ordered", _when(row.created_at)),
    ]
    if row.sample_id:
        facts.append(("Sample", escape(row.sample_id)))
    if row.interpretation:
        facts.append(("Results", _interpretation(row.interpretation)))
    timeline = "".join(
        f"<li><span>{escape(low_level(event['status']).replace('_', ' ').capitalize())}</span>"
        f'<span class="muted">{_when(event["created_at"])}</span></li>'
        for event in row.events
    )
    return (
        f'<p><a id="all-orders" href="{escape(back)}">&larr; All lab tests</a></p>'
        f'<h1 id="order-{row.order_id}">{escape(row.lab_test_name)}</h1>'
        f"<dl>{''.join(f'<dt>{name}</dt><dd>{value}</dd>' for name, value in facts)}</dl>"
        f'<h2>Progress</h2><ol class="timeline">{timeline}</ol>'
        f"<h2>Results</h2>{_results(row, results)}"
    )


def _results(row: OrderRow, results: Any) -> str:
    if results is None:
        if row.status == CANCELLED:
            return '<p class="muted">This lab test was cancelled: it has no results.</p>'
        if row.status == FAILED:
            return '<p class="muted">The lab could not complete this test: no results.</p>'
        return '<p class="muted">Your results are not ready yet.</p>'
    if not isinstance(results, list):
        return '<p class="muted">These results are no longer available.</p>'
    lines = "".join(
        "<tr>"
        f"<td>{escape(str(result['name']))}</td>"
        f'<td class="value">{escape(str(result["result"]))}</td>'
        f"<td>{escape(str(result['unit'] or ''))}</td>"
        f"<td>{escape(str(result['reference_range'] or ''))}</td>"
        f"<td>{_interpretation(result['interpretation'])}</td>"
        "</tr>"
        for result in results
    )
    return (
        '<table class="results"><thead><tr><th>Test</th><th>Result</th><th>Unit</th>'
        f"<th>Reference range</th><th></th></tr></thead><tbody>{lines}</tbody></table>"
    )


def _brand(holder: PortalHolder | None) -> Brand:
    """The team's brand (its company name, else the team's name)."""
    return NO_BRAND if holder is None else Brand.of(holder.team_settings, holder.team_name)


def _error(
    status: int,
    text: tuple[str, str],
    holder: PortalHolder | None,
    *,
    back: str | None = None,
) -> Response:
    title, message = text
    body = f'<h1 id="error">{escape(title)}</h1><p>{escape(message)}</p>'
    if back is not None:
        href = f"../../portal?{urlencode({'token': back})}"
        body += f'<p><a id="all-orders" href="{escape(href)}">&larr; All lab tests</a></p>'
    return _page(status, title, body, holder)


def _page(status: int, title: str, body: str, holder: PortalHolder | None) -> Response:
    brand = _brand(holder)
    team_line = f'<p class="team">{escape(brand.name)}</p>' if brand.name else ""
    return branded_page(
        status, title, team_line + body, brand, style=_STYLE, headers=_HEADERS, width="44rem"
    )


# The portal's own elements; `{color}` is the brand's.
_STYLE = """
h1 { margin: 0 0 1rem; }
h2 { font-size: 1.1rem; margin: 1.5rem 0 .5rem; }
a { color: {color}; }
.team { font-weight: 600; color: {color}; margin: 0 0 1rem; }
ul.orders { list-style: none; padding: 0; margin: 0; }
ul.orders a { display: flex; flex-wrap: wrap; gap: .5rem 1rem; align-items: baseline;
              padding: .8rem 0; border-bottom: 1px solid #eee; text-decoration: none;
              color: inherit; }
ul.orders .test { flex: 1 1 14rem; font-weight: 600; color: {color}; }
.status { font-size: .9rem; }
.flag { border-radius: 4px; padding: .1rem .4rem; font-size: .8rem; font-weight: 600; }
.flag-normal { background: #e6f4ea; color: #1e6b34; }
.flag-abnormal { background: #fff4e5; color: #8a4b00; }
.flag-critical { background: #fde8e8; color: #a11d1d; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .3rem 1rem; }
dt { color: #65676b; } dd { margin: 0; }
ol.timeline { padding-left: 1.2rem; }
ol.timeline li { display: flex; justify-content: space-between; gap: 1rem; padding: .2rem 0; }
table.results { border-collapse: collapse; width: 100%; font-size: .95rem; }
table.results th, table.results td { text-align: left; padding: .4rem .5rem;
                                     border-bottom: 1px solid #eee; }
td.value { font-weight: 600; }
"""
