"""The browser's side of an OAuth sign-in: the callback's address, and the cookie that binds
a flow to the browser that started it (ADR 0022).

The link page sets the cookie when it sends the browser to the maker; the callback on the
team API reads it. It holds the flow's binding secret, is named after the flow (two tabs
can sign in at once), and is sent only to the provider's callback path. HttpOnly (no
script reads it), SameSite=Lax (a top-level navigation back from the maker carries it; a
request another site makes in the background does not), Secure when the link page is
served over https. Cookies ignore ports: the link page and the team API on one host share
it; on sibling hosts HEALTHLEDGER_OAUTH_COOKIE_DOMAIN names their parent domain.
"""

from __future__ import annotations

from datetime import datetime
from urllib.parse import urlsplit
from uuid import UUID

from healthledger.adapters.settings import Settings
from starlette.requests import Request
from starlette.responses import Response

CALLBACK_PATH = "/v2/link/oauth/callback/{provider}"
_COOKIE = "hl_oauth_{flow}"


def oauth_redirect_uri(public_base_url: str, provider: str) -> str:
    """The callback's absolute URL for `provider`: the redirect_uri of every authorization
    and exchange, the same text the management API hands out with custom credentials."""
    return public_base_url.rstrip("/") + CALLBACK_PATH.format(provider=provider)


def _secure(settings: Settings) -> bool:
    return urlsplit(settings.link_url).scheme == "https"


def bind_browser(
    response: Response,
    settings: Settings,
    provider: str,
    flow_id: UUID,
    binding: str,
    expires_at: datetime,
    now: datetime,
) -> None:
    """Give the browser the flow's binding secret, until the flow (or its link) expires."""
    response.set_cookie(
        _COOKIE.format(flow=flow_id.hex),
        binding,
        max_age=max(1, int((expires_at - now).total_seconds())),
        path=CALLBACK_PATH.format(provider=provider),
        domain=settings.oauth_cookie_domain,
        secure=_secure(settings),
        httponly=True,
        samesite="lax",
    )


def unbind_browser(response: Response, settings: Settings, provider: str, flow_id: UUID) -> None:
    """Take the flow's cookie back: a flow is used once."""
    response.delete_cookie(
        _COOKIE.format(flow=flow_id.hex),
        path=CALLBACK_PATH.format(provider=provider),
        domain=settings.oauth_cookie_domain,
        secure=_secure(settings),
        httponly=True,
        samesite="lax",
    )


def binding_of(request: Request, flow_id: UUID) -> str | None:
    """The binding secret the browser sent for the flow, if any."""
    return request.cookies.get(_COOKIE.format(flow=flow_id.hex))
