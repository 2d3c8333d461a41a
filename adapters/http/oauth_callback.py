"""The OAuth callback of the link flow: `GET /v2/link/oauth/callback/{provider}` on the team
API ({base_url}, HEALTHLEDGER_PUBLIC_BASE_URL), the `redirect_uri` that custom credentials
hand out (management API, prepare) and that a team registers at the maker.

The maker sends the person's browser here with `code` and `state`, or with `error` when
the person declined. The state names the link token (LinkTokens.oauth_state); the code is
exchanged through the provider's adapter, the provider connected for the token's user and
the token consumed, in one transaction. This is a page for a browser, not an API call:
it answers HTML (or a redirect), needs no key, and is not in the OpenAPI document.

Outcomes go to the link's redirect_url as the link page's do (spec 2.5: OAuth providers
always redirect, whatever on_error says): `state=success`, or
`state=error&error_type=<type>&error=<message>`. A link without a redirect_url shows them
as a page, with a status that says what happened: 200 connected or declined, 400 a state
we did not make (nothing to redirect to: no link is trusted), 409 already connected, 501
no OAuth exchange for this provider in this deployment, 502 the maker refused the code.

Nothing personal is put in a URL or a page; the query carries a one-time code, so every
answer forbids caching and the Referer header, as the link page's do.
"""

from __future__ import annotations

from html import escape

from fastapi import APIRouter, Request
from healthledger.adapters.composition import Service
from healthledger.adapters.http.link_page import (
    DUPLICATE_CONNECTION,
    LINK_ERROR_STATUS,
    USER_CANCELLED,
    outcome_url,
    page_response,
    redirect_response,
)
from healthledger.domain.connections.connection import AlreadyConnected
from healthledger.domain.connections.link_tokens import (
    LinkToken,
    LinkTokenRejected,
)
from healthledger.domain.connections.linking import InvalidOAuthState
from healthledger.domain.connections.providers import OAuthExchangeFailed, OAuthNotSupported
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

CALLBACK_PATH = "/v2/link/oauth/callback/{provider}"

# Link error types of the callback's own outcomes (gaps.md's list is open-ended: "include").
# The maker could not be asked: no adapter for it here, so a team's app can tell this
# deployment fault from the person's or the maker's.
OAUTH_UNAVAILABLE = "oauth_unavailable"
PROVIDER_CREDENTIAL_ERROR = "provider_credential_error"

_DECLINED = "You declined to connect {name}. Nothing was connected."
_UNAVAILABLE = (
    "{name} cannot be connected here: the provider's OAuth exchange is not available in "
    "this deployment. Nothing was connected."
)
_MISSING_CODE = "The provider sent no authorization code. Start again from the link."

_STATUS = {
    **LINK_ERROR_STATUS,
    USER_CANCELLED: 200,
    OAUTH_UNAVAILABLE: 501,
    PROVIDER_CREDENTIAL_ERROR: 502,
}


def oauth_redirect_uri(public_base_url: str, provider: str) -> str:
    """The callback's absolute URL for `provider`: the redirect_uri of every authorization
    and exchange, the same text the management API hands out with custom credentials."""
    return public_base_url.rstrip("/") + CALLBACK_PATH.format(provider=provider)


def oauth_callback_router(service: Service) -> APIRouter:
    router = APIRouter()
    catalog = service.catalog
    link_tokens = service.link_tokens

    def failed(token: LinkToken | None, error_type: str, message: str) -> Response:
        """Back to the team's app when the link says where, else shown. Only the
        redirect_url of a token named by a state we made is ever followed."""
        if token is not None and token.redirect_url is not None:
            return redirect_response(outcome_url(token.redirect_url, "error", error_type, message))
        body = f"<h1>This did not work</h1><p>{escape(message)}</p>"
        title = "Not connected" if error_type == USER_CANCELLED else "Link error"
        return page_response(_STATUS.get(error_type, 400), title, body, None)

    @router.get(CALLBACK_PATH, include_in_schema=False)
    async def oauth_callback(request: Request) -> Response:
        # Parameters are read by hand: a malformed query must give this page, never the
        # API's JSON 422, to a person's browser.
        slug = request.path_params["provider"]
        entry = catalog.get(slug)
        if entry is None:
            return page_response(404, "Not here", "<p>Unknown provider.</p>", None)
        query = request.query_params
        state, code, error = query.get("state"), query.get("code"), query.get("error")
        if not state:
            return failed(None, "invalid_state", InvalidOAuthState().message)
        try:
            token = await run_in_threadpool(link_tokens.token_of_state, state, slug)
        except InvalidOAuthState as exc:
            return failed(None, "invalid_state", exc.message)
        if error is not None:
            # The maker's error text is not shown or passed on: it is the maker's, and
            # could carry anything. The person declined, or the maker could not ask them.
            return failed(token, USER_CANCELLED, _DECLINED.format(name=entry.name))
        if not code:
            return failed(token, PROVIDER_CREDENTIAL_ERROR, _MISSING_CODE)
        try:
            await run_in_threadpool(
                link_tokens.connect_oauth,
                state,
                slug,
                code,
                oauth_redirect_uri(service.settings.public_base_url, slug),
                request.state.request_id,
                entry.supported_resources,
            )
        except InvalidOAuthState as exc:
            return failed(None, "invalid_state", exc.message)
        except LinkTokenRejected as exc:
            return failed(token, exc.error_type, exc.message)
        except OAuthNotSupported:
            return failed(token, OAUTH_UNAVAILABLE, _UNAVAILABLE.format(name=entry.name))
        except OAuthExchangeFailed as exc:
            return failed(token, PROVIDER_CREDENTIAL_ERROR, exc.message)
        except AlreadyConnected as exc:
            return failed(token, DUPLICATE_CONNECTION, exc.message)
        if token.redirect_url is not None:
            return redirect_response(outcome_url(token.redirect_url, "success"))
        body = (
            f"<h1>Connected</h1><p>{escape(entry.name)} is connected. "
            "You can close this window.</p>"
        )
        return page_response(200, "Connected", body, None)

    return router
