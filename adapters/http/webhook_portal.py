"""The webhook portal (issue 34; `team.get_svix_url` of the official clients): a hosted page
of our own where a team sees its webhook endpoints of one environment, their recent
deliveries, and each delivery's attempts. Served on the link page's app, at {link_url}:

    GET /webhooks?token=...                            the endpoints and their deliveries
    GET /webhooks/deliveries/{delivery_id}?token=...   one delivery: its attempts

`GET /v2/team/svix/url` (team API, `team_settings.py`) hands out the link: a signed,
expiring `WebhookPortalPass` for the key's team and environment, valid for an hour, a
`SignedTokens` kind of its own (signed_tokens.py): no cursor nor other token opens it.
Every view checks it afresh: signature, expiry, the team still live. A token that is not
ours is a 404 page, an expired one or one of a deleted team a 410.

The pages show what the team's endpoints were sent about, never what: event types,
message ids, user ids, times, statuses and status codes; no payload, no secret. They forbid
caching and the Referer header (the token must not leave with a click), and load nothing
from elsewhere but the team's logo.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from healthledger.adapters.composition import Service
from healthledger.adapters.http.branded_pages import NO_BRAND, Brand, branded_page
from healthledger.adapters.http.portal_page import PRIVATE_PAGE_HEADERS
from healthledger.adapters.http.signed_tokens import SignedTokens
from healthledger.domain.webhooks.deliveries import WebhookDelivery
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

WEBHOOK_PORTAL_PATH = "/webhooks"
# How long a portal link opens the portal: long enough to look into a failing endpoint,
# short enough that a link found in a chat later shows nothing.
LINK_LIFETIME = timedelta(hours=1)
# Deliveries listed per endpoint, newest first.
LISTED_DELIVERIES = 25

_ENVIRONMENT_CODES = {"sandbox": "s", "production": "p"}
_ENVIRONMENTS = {code: env for env, code in _ENVIRONMENT_CODES.items()}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LAST_SECOND = 253_402_300_799  # 9999-12-31T23:59:59Z

_NOT_VALID = (
    "This link is not valid",
    "Check that you opened the whole link, or ask the API for a new one.",
)
_EXPIRED = ("This link has expired", "Ask the API for a new link (GET /v2/team/svix/url).")
_GONE = ("This team no longer exists", "Its webhooks cannot be shown.")
_NO_DELIVERY = ("This delivery is not here", "It is not one of this portal's deliveries.")


@dataclass(frozen=True)
class WebhookPortalPass:
    team_id: UUID
    environment: str
    expires_at: datetime


class _Claims(BaseModel):
    """The signed payload, short keys to keep the URL short."""

    model_config = ConfigDict(extra="forbid")
    t: UUID  # team
    n: str = Field(pattern="^[sp]$")  # environment, by its first letter
    e: int = Field(ge=0, le=_LAST_SECOND)  # expires at, seconds since the epoch


class WebhookPortalTokens:
    def __init__(self, cursor_secret: bytes) -> None:
        self.tokens = SignedTokens(
            cursor_secret, b"healthledger webhook portal v1", "webhook-portal-v1", _Claims
        )

    def sign(self, grant: WebhookPortalPass) -> str:
        return self.tokens.sign(
            {
                "t": grant.team_id.hex,
                "n": _ENVIRONMENT_CODES[grant.environment],
                "e": int(grant.expires_at.timestamp()),
            }
        )

    def open(self, token: str | None) -> WebhookPortalPass | None:
        """The pass a token of ours carries; None for anything else."""
        claims = self.tokens.open(token)
        if claims is None:
            return None
        return WebhookPortalPass(
            team_id=claims.t,
            environment=_ENVIRONMENTS[claims.n],
            expires_at=datetime.fromtimestamp(claims.e, UTC),
        )


def portal_link(service: Service, team_id: UUID, environment: str) -> dict[str, Any]:
    """A new link to the portal of the team's environment: its URL and expiry."""
    expires_at = (service.clock() + LINK_LIFETIME).replace(microsecond=0)
    token = WebhookPortalTokens(service.cursor_secret).sign(
        WebhookPortalPass(team_id, environment, expires_at)
    )
    base = service.settings.link_url.rstrip("/")
    return {
        "url": f"{base}{WEBHOOK_PORTAL_PATH}?{urlencode({'token': token})}",
        "expires_at": expires_at,
    }


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def _admitted(
    service: Service, request: Request
) -> tuple[WebhookPortalPass, dict[str, Any], Brand] | Response:
    """The pass, its team and brand, or the error page that refuses the request."""
    grant = WebhookPortalTokens(service.cursor_secret).open(request.query_params.get("token"))
    if grant is None:
        return error_page(404, _NOT_VALID, NO_BRAND)
    team = service.team_queries.team(grant.team_id)
    if team is None:
        return error_page(410, _GONE, NO_BRAND)
    brand = Brand.of(team["settings"].get(grant.environment, {}), team["name"])
    if service.clock() >= grant.expires_at:
        return error_page(410, _EXPIRED, brand)
    return grant, team, brand


# Plain functions: Starlette runs them in its thread pool (they read the database).


def endpoints(request: Request) -> Response:
    service = _service(request)
    found = _admitted(service, request)
    if isinstance(found, Response):
        return found
    grant, _team, brand = found
    token = request.query_params["token"]
    listed = []
    for endpoint in service.webhook_queries.endpoints(grant.team_id, grant.environment):
        deliveries = service.webhook_queries.latest_deliveries(endpoint["id"], LISTED_DELIVERIES)
        counts = service.webhook_queries.delivery_counts(endpoint["id"])
        hrefs = {d.delivery_id: _delivery_href(d.delivery_id, token) for d in deliveries}
        listed.append((endpoint, counts, deliveries, hrefs))
    return endpoints_page(brand, grant.environment, listed, grant.expires_at)


def delivery(request: Request) -> Response:
    service = _service(request)
    found = _admitted(service, request)
    if isinstance(found, Response):
        return found
    grant, _team, brand = found
    token = request.query_params["token"]
    row = service.webhook_queries.delivery(request.path_params["delivery_id"])
    ours = {e["id"]: e for e in service.webhook_queries.endpoints(grant.team_id, grant.environment)}
    if row is None or row.team_id != grant.team_id or row.endpoint_id not in ours:
        return error_page(404, _NO_DELIVERY, brand, back=_list_href(token))
    attempts = _attempts(service, row.delivery_id)
    return delivery_page(brand, row, ours[row.endpoint_id], attempts, _list_href(token))


WEBHOOK_PORTAL_ROUTES = [
    Route(WEBHOOK_PORTAL_PATH, endpoints, methods=["GET"]),
    Route("/webhooks/deliveries/{delivery_id:uuid}", delivery, methods=["GET"]),
]


def _attempts(service: Service, delivery_id: UUID) -> list[dict[str, Any]]:
    """The delivery's history as its page lists it: each attempt with its answer (or that
    its outcome is unknown), the replays asked for and a drop, in order."""
    lines: list[dict[str, Any]] = []
    started: dict[int, dict[str, Any]] = {}
    for event in service.ledger.events.get(delivery_id):
        line: dict[str, Any] | None
        if isinstance(event, WebhookDelivery.AttemptStarted):
            line = {"kind": "attempt", "number": event.attempt, "at": event.timestamp}
            started[event.attempt] = line
            lines.append(line)
        elif isinstance(event, WebhookDelivery.AttemptWithdrawn):
            withdrawn = started.pop(event.attempt, None)
            if withdrawn is not None:
                lines.remove(withdrawn)
        elif isinstance(event, WebhookDelivery.AttemptMade):
            line = started.pop(event.attempt, None)
            if line is None:
                line = {"kind": "attempt", "number": event.attempt, "at": event.timestamp}
                lines.append(line)
            line.update(
                outcome=event.outcome,
                status_code=event.status_code,
                error=event.error,
                latency_ms=round(event.latency_ms),
                next_attempt_at=event.next_attempt_at,
            )
        elif isinstance(event, WebhookDelivery.Replayed):
            lines.append({"kind": "replayed", "at": event.timestamp})
        elif isinstance(event, WebhookDelivery.Dropped):
            lines.append({"kind": "dropped", "at": event.timestamp, "reason": event.reason})
    return lines


def _delivery_href(delivery_id: UUID, token: str) -> str:
    # Relative to /webhooks: the pages work under any prefix of {link_url}.
    return f"webhooks/deliveries/{delivery_id}?{urlencode({'token': token})}"


def _list_href(token: str) -> str:
    # Relative to /webhooks/deliveries/{delivery_id}.
    return f"../../webhooks?{urlencode({'token': token})}"


def _when(moment: datetime | None) -> str:
    return "" if moment is None else f"{moment:%Y-%m-%d %H:%M:%S} UTC"


# -- rendering -------------------------------------------------------------------------------


def endpoints_page(
    brand: Brand,
    environment: str,
    endpoints: list[tuple[dict[str, Any], dict[str, int], list[Any], dict[UUID, str]]],
    expires_at: datetime,
) -> Response:
    """The environment's endpoints: each with its deliveries counted by status, and its
    newest deliveries linking to their pages."""
    return _page(
        200,
        "webhook_portal/endpoints.html",
        brand,
        environment=environment,
        endpoints=endpoints,
        expires_at=expires_at,
    )


def delivery_page(
    brand: Brand, row: Any, endpoint: dict[str, Any], attempts: list[dict[str, Any]], back: str
) -> Response:
    """One delivery: its message and its history (`_attempts`)."""
    return _page(
        200,
        "webhook_portal/delivery.html",
        brand,
        row=row,
        endpoint=endpoint,
        attempts=attempts,
        back_href=back,
    )


def error_page(
    status: int, words: tuple[str, str], brand: Brand, back: str | None = None
) -> Response:
    title, message = words
    return _page(
        status, "webhook_portal/error.html", brand, title=title, message=message, back_href=back
    )


def _page(status: int, template: str, brand: Brand, **context: Any) -> Response:
    return branded_page(
        status, template, brand, headers=PRIVATE_PAGE_HEADERS, when=_when, **context
    )
