"""The OAuth callback of the link flow: `GET /v2/link/oauth/callback/{provider}` on the team
API ({base_url}, HEALTHLEDGER_PUBLIC_BASE_URL), the `redirect_uri` that custom credentials
hand out (management API, prepare) and that a team registers at the maker.

The link page started the sign-in (a flow, LinkTokens.start_oauth) and sent the browser
to the maker with the flow's `state` and a cookie that binds the flow to that browser
(oauth_browser.py). The maker sends the browser back here with `code` and `state`, or
with `error`. Here, in order: the state must be one we made for this provider; the
browser must carry the flow's cookie; the link must still be usable; the flow is claimed
(once: a replay finds it used); only then is the maker's answer looked at, and the code
exchanged through the provider's adapter with the flow's PKCE verifier, the provider
connected for the token's user with the maker's tokens stored sealed, and the token
consumed, in one transaction. This is a page for a browser, not an API call: it answers
HTML (or a redirect), needs no key, and is not in the OpenAPI document.

Outcomes go to the link's redirect_url as the link page's do (spec 2.5: OAuth providers
always redirect, whatever on_error says): `state=success`, or
`state=error&error_type=<type>&error=<message>`. A link without a redirect_url shows them
as a page, with a status that says what happened (docs/connections.md). What cannot be
trusted to lead anywhere (a state we did not make, a browser without the flow's cookie,
a replayed or expired flow) is only ever shown, never redirected.

Nothing personal is put in a URL or a page; the query carries a one-time code, so every
answer forbids caching and the Referer header, as the link page's do. The pages are the
link page's (link_page.py: failure_page, connected_page, not_here_page).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from healthledger.adapters.composition import Service
from healthledger.adapters.http.link_page import (
    DUPLICATE_CONNECTION,
    LINK_ERROR_STATUS,
    OAUTH_UNAVAILABLE,
    USER_CANCELLED,
    connected_page,
    failure_page,
    not_here_page,
    outcome_url,
    redirect_response,
)
from healthledger.adapters.http.oauth_browser import (
    CALLBACK_PATH,
    binding_of,
    oauth_redirect_uri,
    unbind_browser,
)
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.domain.connections.connection import AlreadyConnected
from healthledger.domain.connections.link_tokens import LinkToken, LinkTokenRejected
from healthledger.domain.connections.oauth_flows import (
    InvalidOAuthState,
    OAuthFlow,
    OAuthFlowExpired,
    OAuthFlowUsed,
)
from healthledger.domain.connections.providers import OAuthExchangeFailed, OAuthNotSupported
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

__all__ = ["CALLBACK_PATH", "oauth_redirect_uri", "router"]

PROVIDER_CREDENTIAL_ERROR = "provider_credential_error"
# RFC 6749 4.1.2.1: the person (or the maker on their behalf) refused.
ACCESS_DENIED = "access_denied"

_DECLINED = "You declined to connect {name}. Nothing was connected."
_MAKER_ERROR = "{name} could not complete the sign-in. Nothing was connected."
_UNAVAILABLE = (
    "{name} cannot be connected here: the provider's OAuth exchange is not available in "
    "this deployment. Nothing was connected."
)
_MISSING_CODE = "The provider sent no authorization code. Start again from the link."
_UNBOUND = (
    "This sign-in was started in another browser, or its cookie is gone (cookies blocked, "
    "or a different browser opened the provider's page). Nothing was connected. Start again "
    "from the link you were sent, in this browser."
)

_STATUS = {
    **LINK_ERROR_STATUS,
    USER_CANCELLED: 200,
    PROVIDER_CREDENTIAL_ERROR: 502,
}


# Module-level, as the team API's other routers: built once per process and shared by
# every app (service_dependency.py).
router = APIRouter()


@router.get(CALLBACK_PATH, include_in_schema=False)
async def oauth_callback(service: CurrentService, request: Request) -> Response:
    # Parameters are read by hand: a malformed query must give this page, never the API's
    # JSON 422, to a person's browser.
    slug = request.path_params["provider"]
    entry = service.catalog.get(slug)
    if entry is None:
        return not_here_page(404, "Unknown provider.")
    query = request.query_params
    state = query.get("state")
    if not state:
        return _shown(400, InvalidOAuthState().message)
    try:
        token, flow = await run_in_threadpool(service.link_tokens.find_oauth_flow, state, slug)
    except InvalidOAuthState as exc:
        return _shown(400, exc.message)
    binding = binding_of(request, flow.id)
    if not flow.bound_to(binding):
        # Not the browser that started it (a forged link sent to someone, or a code
        # intercepted and replayed elsewhere): the flow stays as it was for its owner.
        return _shown(403, _UNBOUND)
    assert binding is not None
    # From here the answer is for the browser that started the flow, which is used once:
    # whatever the outcome, its cookie goes.
    response = await _returned(service, request, slug, entry.name, token, flow, binding)
    unbind_browser(response, service.settings, slug, flow.id)
    return response


async def _returned(
    service: Service,
    request: Request,
    slug: str,
    name: str,
    token: LinkToken,
    flow: OAuthFlow,
    binding: str,
) -> Response:
    query = request.query_params
    request_id = request.state.request_id
    try:
        await run_in_threadpool(service.link_tokens.claim_oauth_flow, token, flow, request_id)
    except LinkTokenRejected as exc:
        return _failed(token, exc.error_type, exc.message)
    except (OAuthFlowUsed, OAuthFlowExpired) as exc:
        return _shown(400, exc.message)
    error, code = query.get("error"), query.get("code")
    if error is not None:
        # The maker's error text is not shown or passed on: it is the maker's, and could
        # carry anything. Only its RFC 6749 code tells a refusal from a failure.
        if error == ACCESS_DENIED:
            return _failed(token, USER_CANCELLED, _DECLINED.format(name=name))
        return _failed(token, PROVIDER_CREDENTIAL_ERROR, _MAKER_ERROR.format(name=name))
    if not code:
        return _failed(token, PROVIDER_CREDENTIAL_ERROR, _MISSING_CODE)
    try:
        await run_in_threadpool(
            service.link_tokens.connect_oauth,
            token,
            flow,
            code,
            oauth_redirect_uri(service.settings.public_base_url, slug),
            binding,
            request_id,
            service.catalog[slug].supported_resources,
        )
    except LinkTokenRejected as exc:
        return _failed(token, exc.error_type, exc.message)
    except OAuthNotSupported:
        return _failed(token, OAUTH_UNAVAILABLE, _UNAVAILABLE.format(name=name))
    except OAuthExchangeFailed as exc:
        return _failed(token, PROVIDER_CREDENTIAL_ERROR, exc.message)
    except AlreadyConnected as exc:
        return _failed(token, DUPLICATE_CONNECTION, exc.message)
    if token.redirect_url is not None:
        return redirect_response(outcome_url(token.redirect_url, "success"))
    return connected_page(name, None)


def _failed(token: LinkToken | None, error_type: str, message: str) -> Response:
    """Back to the team's app when the link says where, else shown. Only the redirect_url
    of a token named by a state we made, in the browser that started the flow, is ever
    followed."""
    if token is not None and token.redirect_url is not None:
        return redirect_response(outcome_url(token.redirect_url, "error", error_type, message))
    return _shown(_STATUS.get(error_type, 400), message, error_type == USER_CANCELLED)


def _shown(status: int, message: str, declined: bool = False) -> Response:
    return failure_page(status, message, None, title="Not connected" if declined else "Link error")
