"""The hosted link page at {link_url} (gaps.md Provider connections, link): server-rendered
HTML, its own Starlette app, served by `healthledger serve` on HEALTHLEDGER_LINK_PORT.

    GET  /?token=...   the team's name and the providers the link offers (its
                       filter_on_providers, else every provider it can connect here), or
                       only the link's `provider` when it names one; a close button
    POST /connect      form `token`, `provider`: connect a demo device for the token's user
                       and consume the token, in one transaction (LinkTokens.connect_demo)
    POST /oauth/start  form `token`, `provider`: start a sign-in at the maker (an OAuth
                       provider with a client here: the team's custom credentials or the
                       service's own): 303 to the maker's authorization URL, with the
                       cookie that binds the sign-in to this browser (oauth_browser.py)
    POST /close        form `token`: the user gives up

Outcomes redirect (303) to the link's redirect_url with `state=success`, or with
`state=error&error_type=<type>&error=<message>`; a link without a redirect_url shows them
as a page instead. A page view with a dead token shows an error page (404 invalid_token,
410 token_expired or token_consumed) that leads back to the team's app when it can.

OAuth providers come back to the team API instead (adapters/http/oauth_callback.py, the
redirect_uri of custom credentials), which answers with these pages and redirects too. A
provider that is both a demo device and an OAuth maker with a client here offers the
sign-in, and in the sandbox also the simulated device.

Nothing personal is shown or put in a URL: the page knows the team and the providers,
never who the user is, and error messages are fixed texts. The page's own URL carries the
token, so every response forbids the Referer header (the token must not reach logo hosts
or the redirect target) and caching.

The pages are the templates under adapters/templates/link/ (branded_pages.py: every value
autoescaped). The routes are the module's, shared by every app `create_link_app` makes;
each asks its request for the app's service.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit, urlunsplit
from uuid import UUID

from healthledger.adapters.composition import Service
from healthledger.adapters.http.branded_pages import NO_BRAND, Brand, branded_page
from healthledger.adapters.http.oauth_browser import bind_browser, oauth_redirect_uri
from healthledger.adapters.http.portal_page import PORTAL_ROUTES
from healthledger.adapters.http.requests import BodyLimitMiddleware, RequestIdMiddleware
from healthledger.adapters.http.webhook_portal import WEBHOOK_PORTAL_ROUTES
from healthledger.adapters.persistence.queries.link_tokens import LinkTokenView
from healthledger.adapters.reference import ProviderEntry
from healthledger.domain.connections.connection import AlreadyConnected
from healthledger.domain.connections.link_tokens import (
    INVALID_TOKEN,
    REDIRECT,
    TOKEN_CONSUMED,
    TOKEN_EXPIRED,
    LinkTokenRejected,
    link_error_message,
)
from healthledger.domain.connections.providers import OAuthNotSupported
from healthledger.domain.errors import InvalidRequest
from healthledger.domain.teams.custom_credentials import SET
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

# Link error types of gaps.md that the page itself produces (besides the token's own).
USER_CANCELLED = "user_cancelled"
DUPLICATE_CONNECTION = "duplicate_connection"
# Ours (gaps.md's list is open-ended: "include"): the maker could not be asked, for want
# of an adapter or a client here, so a team's app can tell this deployment fault from the
# person's or the maker's.
OAUTH_UNAVAILABLE = "oauth_unavailable"
_CANCELLED_MESSAGE = "The user closed the link page."
_UNAVAILABLE = (
    "{name} cannot be connected here: the provider's OAuth sign-in is not available in "
    "this deployment. Nothing was connected."
)

# The status of a page that shows a link error (the OAuth callback's pages use it too).
LINK_ERROR_STATUS = {
    INVALID_TOKEN: 404,
    TOKEN_EXPIRED: 410,
    TOKEN_CONSUMED: 410,
    DUPLICATE_CONNECTION: 409,
    OAUTH_UNAVAILABLE: 501,
}

# Spec 2.5 on_error: only password and e-mail providers have errors the page handles
# itself (shown, the user may try again); every other provider's errors redirect.
_BUILT_IN_ERROR_HANDLING = frozenset({"password", "email"})

_HEADERS = {
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": (
        "default-src 'none'; img-src https: http:; style-src 'unsafe-inline'; base-uri 'none'"
    ),
}

_MAX_FORM_FIELDS = 10


def outcome_url(
    redirect_url: str, state: str, error_type: str | None = None, error: str | None = None
) -> str:
    """redirect_url with the outcome's parameters; the team's own parameters are kept,
    and any of ours it already carries are replaced (so a user cannot be told both)."""
    ours = {"state": state}
    if error_type is not None:
        ours |= {"error_type": error_type, "error": error or ""}
    parts = urlsplit(redirect_url)
    kept = [
        (k, v)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
        if k not in ("state", "error_type", "error")
    ]
    return urlunsplit(parts._replace(query=urlencode([*kept, *ours.items()])))


# -- what a link offers ---------------------------------------------------------------------


def _service(request: Request) -> Service:
    """The service the link app was made for (`create_link_app`)."""
    service: Service = request.app.state.service
    return service


def signs_in(service: Service, view: LinkTokenView) -> frozenset[str]:
    """The providers whose sign-in at the maker this link can start."""
    return team_signs_in(service, view.team_id)


def team_signs_in(service: Service, team_id: UUID) -> frozenset[str]:
    """The providers whose sign-in at the maker a link of this team can start: a maker
    adapter and a client, the service's own (offered to every team) or the team's custom
    credentials."""
    served = {slug for slug, maker in service.oauth_makers.items() if maker.service_client}
    custom = {
        c["provider"]
        for c in service.team_queries.credentials(team_id)
        if c["status"] == SET and c["provider"] in service.oauth_makers
    }
    return frozenset(served | custom)


def offered(
    service: Service, view: LinkTokenView | None, oauth: frozenset[str]
) -> list[ProviderEntry]:
    """The providers a link offers (None: a link of the team that names none)."""
    catalog = service.catalog
    if view is not None and view.provider is not None:
        slugs: Iterable[str] = [view.provider]
    elif view is not None and view.filter_on_providers is not None:
        slugs = view.filter_on_providers
    else:
        # Every provider as the catalog endpoint sorts them.
        by_name = sorted(catalog.values(), key=lambda e: (e.name.casefold(), e.slug))
        slugs = [e.slug for e in by_name if e.demo or e.slug in oauth]
    return [catalog[slug] for slug in slugs if slug in catalog]


def connects_demo(view: LinkTokenView, entry: ProviderEntry, oauth: frozenset[str]) -> bool:
    """A simulated device: for a demo provider, unless the person can sign in at the maker
    for real, outside the sandbox."""
    return entry.demo and (entry.slug not in oauth or view.environment == "sandbox")


async def _genuine(service: Service, token: str | None) -> LinkTokenView | None:
    if not token:
        return None
    return await run_in_threadpool(service.link_token_queries.genuine, token)


def _failed(
    view: LinkTokenView | None,
    error_type: str,
    message: str,
    *,
    redirect: bool = True,
    retry_token: str | None = None,
) -> Response:
    """An error outcome: back to the team's app when the link says where, else shown.
    Only a genuine token's redirect_url is ever followed."""
    if redirect and view is not None and view.redirect_url is not None:
        return redirect_response(outcome_url(view.redirect_url, "error", error_type, message))
    retry_href = back_href = None
    if retry_token is not None:
        retry_href = f"./?{urlencode({'token': retry_token})}"
    elif view is not None and view.redirect_url is not None:
        back_href = outcome_url(view.redirect_url, "error", error_type, message)
    return failure_page(
        LINK_ERROR_STATUS.get(error_type, 400),
        message,
        view,
        retry_href=retry_href,
        back_href=back_href,
    )


# -- the routes ------------------------------------------------------------------------------


async def show(request: Request) -> Response:
    service = _service(request)
    token = request.query_params.get("token")
    view = await _genuine(service, token)
    problem = INVALID_TOKEN if view is None else view.problem(service.clock())
    if problem is not None:
        # Only shown: a page view is not an outcome, and the user should see why.
        return _failed(view, problem, link_error_message(problem), redirect=False)
    assert view is not None and token is not None
    oauth = await run_in_threadpool(signs_in, service, view)
    entries = offered(service, view, oauth)
    # The link API's oauth_url names the provider the widget's user picked (ADR 0038):
    # the page offers that one alone, when the link offers it.
    chosen = request.query_params.get("provider")
    if chosen is not None and chosen in {e.slug for e in entries}:
        entries = [e for e in entries if e.slug == chosen]
    listed = [(entry, connects_demo(view, entry, oauth), entry.slug in oauth) for entry in entries]
    return page_response(
        200,
        "link/providers.html",
        view,
        team=_team_name(view),
        token=token,
        providers=listed,
        sandbox=view.environment == "sandbox",
    )


async def connect(request: Request) -> Response:
    service = _service(request)
    form = await _form(request)
    token, slug = form.get("token"), form.get("provider")
    view = await _genuine(service, token)
    if view is None:
        return _failed(None, INVALID_TOKEN, link_error_message(INVALID_TOKEN))
    assert token is not None
    entry = service.catalog.get(slug or "")
    oauth = await run_in_threadpool(signs_in, service, view)
    if (
        entry is None
        or not connects_demo(view, entry, oauth)
        or entry.slug not in {e.slug for e in offered(service, view, oauth)}
    ):
        # Only a form the page did not render can ask for this: nothing to redirect.
        return page_response(400, "link/not_offered.html", view)
    try:
        await run_in_threadpool(
            service.link_tokens.connect_demo,
            token,
            request.state.request_id,
            entry.slug,
            entry.supported_resources,
        )
    except LinkTokenRejected as exc:
        return _failed(view, exc.error_type, exc.message)
    except AlreadyConnected as exc:
        # The token is not consumed: with the page's own error handling the user can pick
        # another provider.
        built_in = entry.auth_type in _BUILT_IN_ERROR_HANDLING and view.on_error != REDIRECT
        return _failed(
            view, DUPLICATE_CONNECTION, exc.message, redirect=not built_in, retry_token=token
        )
    if view.redirect_url is not None:
        return redirect_response(outcome_url(view.redirect_url, "success"))
    return connected_page(entry.name, view)


async def start_oauth(request: Request) -> Response:
    service = _service(request)
    form = await _form(request)
    token, slug = form.get("token"), form.get("provider")
    view = await _genuine(service, token)
    if view is None:
        return _failed(None, INVALID_TOKEN, link_error_message(INVALID_TOKEN))
    assert token is not None
    entry = service.catalog.get(slug or "")
    oauth = await run_in_threadpool(signs_in, service, view)
    if (
        entry is None
        or entry.slug not in oauth
        or entry.slug not in {e.slug for e in offered(service, view, oauth)}
    ):
        # Only a form the page did not render can ask for this: nothing to redirect.
        return page_response(400, "link/not_offered.html", view)
    try:
        started = await run_in_threadpool(
            service.link_tokens.start_oauth,
            token,
            entry.slug,
            oauth_redirect_uri(service.settings.public_base_url, entry.slug),
            request.state.request_id,
        )
    except LinkTokenRejected as exc:
        return _failed(view, exc.error_type, exc.message)
    except InvalidRequest:
        return page_response(400, "link/not_offered.html", view)
    except OAuthNotSupported:
        # Spec 2.5: OAuth providers always redirect with their outcome.
        return _failed(view, OAUTH_UNAVAILABLE, _UNAVAILABLE.format(name=entry.name))
    response = redirect_response(started.authorization_url)
    bind_browser(
        response,
        service.settings,
        entry.slug,
        started.flow_id,
        started.binding,
        started.expires_at,
        service.clock(),
    )
    return response


async def close(request: Request) -> Response:
    form = await _form(request)
    view = await _genuine(_service(request), form.get("token"))
    if view is None:
        return _failed(None, INVALID_TOKEN, link_error_message(INVALID_TOKEN))
    if view.on_close == REDIRECT and view.redirect_url is not None:
        return redirect_response(
            outcome_url(view.redirect_url, "error", USER_CANCELLED, _CANCELLED_MESSAGE)
        )
    return page_response(200, "link/closed.html", view)


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return not_here_page(exc.status_code, str(exc.detail))


ROUTES = [
    Route("/", show, methods=["GET"]),
    Route("/connect", connect, methods=["POST"]),
    Route("/oauth/start", start_oauth, methods=["POST"]),
    Route("/close", close, methods=["POST"]),
    # The hosted lab testing portal (portal_page.py) is served here too.
    *PORTAL_ROUTES,
    *WEBHOOK_PORTAL_ROUTES,
]


def create_link_app(service: Service) -> Starlette:
    """The link page's app for `service`: the routes are the module's, the service is the
    app's (its state, as the APIs' apps keep theirs)."""
    app = Starlette(
        routes=ROUTES,
        middleware=[
            Middleware(RequestIdMiddleware),
            Middleware(BodyLimitMiddleware, max_bytes=service.settings.max_body_bytes),
        ],
        exception_handlers={HTTPException: http_error},
    )
    app.state.service = service
    return app


async def _form(request: Request) -> dict[str, str]:
    """The urlencoded form fields (first value of each). Parsed here: it is two fields,
    and starlette's own form parser needs python-multipart for every content type."""
    body = (await request.body()).decode("utf-8", errors="replace")
    try:
        fields = parse_qs(body, max_num_fields=_MAX_FORM_FIELDS)
    except ValueError:
        raise HTTPException(400, "Too many form fields.") from None
    return {name: values[0] for name, values in fields.items()}


def _team_name(view: LinkTokenView) -> str:
    """The brand's company name for the token's environment when set, else the team's."""
    return Brand.of(view.team_settings, view.team_name).name


def redirect_response(url: str) -> Response:
    return RedirectResponse(url, status_code=303, headers=_HEADERS)


# -- the pages -------------------------------------------------------------------------------


def page_response(
    status: int, template: str, view: LinkTokenView | None, **context: Any
) -> Response:
    """A page of the link page (a template under link/) in the brand of the token's team."""
    brand = NO_BRAND if view is None else Brand.of(view.team_settings)
    return branded_page(status, template, brand, headers=_HEADERS, **context)


def failure_page(
    status: int,
    message: str,
    view: LinkTokenView | None,
    *,
    title: str = "Link error",
    retry_href: str | None = None,
    back_href: str | None = None,
) -> Response:
    """A link error shown: `message`, then a way to choose again or back to the team's app."""
    return page_response(
        status,
        "link/failed.html",
        view,
        title=title,
        message=message,
        retry_href=retry_href,
        back_href=back_href,
        team="" if view is None else _team_name(view),
    )


def connected_page(provider_name: str, view: LinkTokenView | None) -> Response:
    return page_response(200, "link/connected.html", view, provider_name=provider_name)


def not_here_page(status: int, detail: str) -> Response:
    return page_response(status, "link/not_here.html", None, detail=detail)
