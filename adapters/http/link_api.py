"""The link API of a team's own link widget (issue 34, the official clients' `link.*`;
ADR 0038): what the hosted link page does, as JSON, for a widget running in the person's
browser or app with the link token alone.

The token is the credential of these routes (header `x-vital-link-token`, as the official
clients send it; `link/start` takes it in the body): a team key is neither needed nor
read, so none ever has to reach a browser. A token that cannot be used (invalid, expired,
consumed, its user deleted) is a 401 naming the link error type; a provider the link does
not offer, or that does not sign in that way, a 422. The makers' own answers (a wrong
password, a locked account, a wrong code, a duplicate connection) are outcomes, answered
200 as the clients' ProviderLinkResponse with `state: error` and the link error type.

Credentials (passwords, e-mail addresses, codes) are passed to the maker and dropped:
bodies are never logged, and validation errors redact what was sent (errors.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Request, Security
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader
from healthledger.adapters.composition import Service
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.reference import ProviderEntry
from healthledger.domain.connections.connection import AlreadyConnected
from healthledger.domain.connections.credential_links import Pending, SignInRefused
from healthledger.domain.connections.link_tokens import (
    INVALID_TOKEN,
    LinkTokenRejected,
    link_error_message,
)
from healthledger.domain.free_text import FreeText
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

LINK_TOKEN_HEADER = "x-vital-link-token"
DUPLICATE_CONNECTION = "duplicate_connection"

link_token_scheme = APIKeyHeader(
    name=LINK_TOKEN_HEADER,
    scheme_name="LinkToken",
    description="A link token (POST /v2/link/token): the credential of a team's own link "
    "widget for one user, 60 minutes, used up by the first connection.",
    auto_error=False,
)
LinkTokenHeader = Annotated[str | None, Security(link_token_scheme)]

_Slug = Annotated[FreeText, Field(max_length=64)]
# Generous bounds for what a person types; nothing longer is a credential.
_Secret = Annotated[str, Field(min_length=1, max_length=512)]
Region = Literal["us", "eu", "de", "fr", "ca", "br", "ar"]


class LinkError(Exception):
    """A link token that cannot be used: 401 with its link error type."""

    def __init__(self, error_type: str) -> None:
        self.error_type = error_type


def link_error_response(error_type: str) -> JSONResponse:
    return JSONResponse(
        status_code=401,
        content={
            "detail": {"error_type": error_type, "error_message": link_error_message(error_type)}
        },
    )


# -- answers -------------------------------------------------------------------------------


class MfaRequest(BaseModel):
    method: Literal["sms", "email"]
    hint: str = Field(description="Where the maker sent the code, masked by the maker.")


class ProviderLinkAnswer(BaseModel):
    """The official clients' ProviderLinkResponse."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "state": "pending_provider_mfa",
                    "provider": "freestyle_libre",
                    "connected": False,
                    "provider_mfa": {"method": "sms", "hint": "•••00"},
                    "redirect_url": None,
                    "error_type": None,
                    "error": None,
                }
            ]
        }
    )
    state: Literal["success", "error", "pending_provider_mfa"]
    provider: str
    connected: bool
    redirect_url: str | None = None
    error_type: str | None = None
    error: str | None = None
    provider_mfa: MfaRequest | None = None


class LinkSource(BaseModel):
    """The official clients' Source / SourceLink: a provider as a link offers it."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": 1,
                    "name": "Oura",
                    "slug": "oura",
                    "description": "Smart ring that tracks sleep, readiness and activity.",
                    "logo": "https://storage.healthledger.dev/providers/oura.png",
                    "auth_type": "oauth",
                    "source_type": "device",
                    "is_active": True,
                    "oauth_url": "https://link.example.com/?token=hll_...&provider=oura",
                }
            ]
        }
    )

    id: int = Field(description="The provider's place in the catalog (stable per release).")
    name: str
    slug: str
    description: str
    logo: str
    auth_type: str | None
    source_type: str | None
    is_active: bool
    oauth_url: str | None = Field(
        default=None,
        description="For an OAuth provider: the hosted link page, narrowed to this "
        "provider, where the person's browser signs in at the maker.",
    )


class LinkState(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "state": "pending",
                    "expires_at": "2026-03-01T13:00:00+00:00",
                    "provider": None,
                    "redirect_url": "https://app.example.com/linked",
                    "filter_on_providers": ["oura", "freestyle_libre"],
                    "on_error": None,
                    "on_close": None,
                }
            ]
        }
    )
    state: Literal["pending", "consumed", "expired", "invalid"]
    expires_at: str | None
    provider: str | None
    redirect_url: str | None
    filter_on_providers: list[str] | None
    on_error: str | None
    on_close: str | None


# -- requests ------------------------------------------------------------------------------


class LinkStart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    link_token: str = Field(max_length=512)
    provider: _Slug


class PasswordSignIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    username: _Secret
    password: _Secret
    region: Region | None = None


class LegacyPasswordSignIn(PasswordSignIn):
    provider: _Slug
    auth_type: Literal["password"] = "password"


class MfaCode(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mfa_code: str = Field(min_length=1, max_length=16)


class EmailSignIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    email: _Secret
    # The official clients' path names one e-mail provider and let the body name another.
    provider: _Slug | None = None
    region: Region | None = None


class LegacyEmailSignIn(EmailSignIn):
    auth_type: Literal["email"] = "email"


router = APIRouter(tags=["link"], route_class=LedgerRoute)

_LINK_ERRORS = error_responses(
    401, 422, described={401: "The link token is invalid, expired or used up."}
)
# A route with a provider in its path (an unknown one is a 422 naming it, as in a body).
_PROVIDER_LINK_ERRORS = error_responses(
    401, 404, 422, described={401: "The link token is invalid, expired or used up."}
)


def _plain(token: str | None) -> str:
    if not token:
        raise LinkTokenRejected(INVALID_TOKEN)
    return token


async def _answered(
    service: Service, provider: str, call: Any, token: str | None, *args: Any
) -> Any:
    """Run a credential use case with the token's text and `args`; its outcome as a
    ProviderLinkAnswer, a token problem as a 401."""
    try:
        outcome = await run_in_threadpool(call, _plain(token), *args)
    except LinkTokenRejected as exc:
        return link_error_response(exc.error_type)
    except SignInRefused as exc:
        return _error(provider, exc.error_type, exc.message)
    except AlreadyConnected as exc:
        return _error(provider, DUPLICATE_CONNECTION, exc.message)
    if isinstance(outcome, Pending):
        return {
            "state": "pending_provider_mfa",
            "provider": provider,
            "connected": False,
            "provider_mfa": {"method": outcome.method, "hint": outcome.hint},
        }
    return {
        "state": "success",
        "provider": provider,
        "connected": True,
        "redirect_url": outcome.redirect_url,
    }


def _error(provider: str, error_type: str, message: str) -> dict[str, Any]:
    return {
        "state": "error",
        "provider": provider,
        "connected": False,
        "error_type": error_type,
        "error": message,
    }


# -- the token's own state and what it offers ------------------------------------------------


@router.get("/v2/link/state", response_model=LinkState, responses=_LINK_ERRORS)
async def token_state(service: CurrentService, token: LinkTokenHeader) -> Any:
    """What a link token allows now: its options, and whether it is still usable."""
    view = None if not token else await run_in_threadpool(service.link_token_queries.genuine, token)
    if view is None or not view.usable_owner:
        return link_error_response(INVALID_TOKEN)
    problem = view.problem(service.clock())
    state = {None: "pending", "token_consumed": "consumed", "token_expired": "expired"}
    return {
        "state": state.get(problem, "invalid"),
        "expires_at": view.expires_at.isoformat(),
        "provider": view.provider,
        "redirect_url": view.redirect_url,
        "filter_on_providers": view.filter_on_providers,
        "on_error": view.on_error,
        "on_close": view.on_close,
    }


def _source(service: Service, entry: ProviderEntry, token: str) -> dict[str, Any]:
    ids = {slug: index + 1 for index, slug in enumerate(service.catalog)}
    oauth = entry.auth_type in ("oauth", "team_oauth")
    link_url = service.settings.link_url.rstrip("/")
    return {
        "id": ids[entry.slug],
        "name": entry.name,
        "slug": entry.slug,
        "description": entry.description,
        "logo": entry.logo or "",
        "auth_type": entry.auth_type,
        "source_type": entry.source_type,
        "is_active": True,
        "oauth_url": (
            f"{link_url}/?{urlencode({'token': token, 'provider': entry.slug})}" if oauth else None
        ),
    }


def _offered(service: Service, token: str) -> tuple[Any, list[ProviderEntry]]:
    """The token's view and the providers it offers, in the catalog's order; raises
    LinkTokenRejected for a token that cannot be used."""
    view = service.link_token_queries.genuine(token)
    problem = INVALID_TOKEN if view is None else view.problem(service.clock())
    if problem is not None:
        raise LinkTokenRejected(problem)
    assert view is not None
    if view.provider is not None:
        slugs = [view.provider]
    else:
        slugs = view.filter_on_providers or list(service.catalog)
    return view, [service.catalog[s] for s in slugs if s in service.catalog]


@router.get("/v2/link/providers", response_model=list[LinkSource], responses=_LINK_ERRORS)
async def link_providers(service: CurrentService, token: LinkTokenHeader) -> Any:
    """The providers this link offers (its `provider`, or `filter_on_providers`, or the
    whole catalog)."""
    try:
        plain = _plain(token)
        _, entries = await run_in_threadpool(_offered, service, plain)
    except LinkTokenRejected as exc:
        return link_error_response(exc.error_type)
    return [_source(service, entry, plain) for entry in entries]


@router.get(
    "/v2/link/provider/oauth/{oauth_provider}",
    response_model=LinkSource,
    responses=_PROVIDER_LINK_ERRORS,
)
async def oauth_link(service: CurrentService, oauth_provider: str, token: LinkTokenHeader) -> Any:
    """Where the person's browser signs in at an OAuth provider: `oauth_url` is the
    hosted link page narrowed to it, which binds the sign-in to that browser (ADR 0022)
    before it sends it to the maker."""
    try:
        plain = _plain(token)
        _, entries = await run_in_threadpool(_offered, service, plain)
    except LinkTokenRejected as exc:
        return link_error_response(exc.error_type)
    entry = next((e for e in entries if e.slug == oauth_provider), None)
    if entry is None or entry.auth_type not in ("oauth", "team_oauth"):
        return _not_offered("oauth_provider", "path")
    return _source(service, entry, plain)


def _not_offered(field: str, location: str) -> JSONResponse:
    return JSONResponse(
        status_code=422,
        content={
            "detail": [
                {
                    "type": "value_error",
                    "loc": [location, field],
                    "msg": "This link does not offer this provider that way.",
                    "input": None,
                }
            ]
        },
    )


class LinkStarted(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"provider": "freestyle_libre", "auth_type": "password", "oauth_url": None}
            ]
        }
    )
    provider: str
    auth_type: str | None = Field(description="How the provider signs in next.")
    oauth_url: str | None = Field(description="For an OAuth provider: the page to open.")


@router.post("/v2/link/start", response_model=LinkStarted, responses=_LINK_ERRORS)
async def start(service: CurrentService, body: LinkStart) -> Any:
    """The widget's first step with a provider the person picked: how it signs in next
    (`auth_type`), and for an OAuth provider the `oauth_url` to open. Records nothing."""
    try:
        _, entries = await run_in_threadpool(_offered, service, body.link_token)
    except LinkTokenRejected as exc:
        return link_error_response(exc.error_type)
    entry = next((e for e in entries if e.slug == body.provider), None)
    if entry is None:
        return _not_offered("provider", "body")
    source = _source(service, entry, body.link_token)
    return {"provider": entry.slug, "auth_type": entry.auth_type, "oauth_url": source["oauth_url"]}


# -- credential providers ------------------------------------------------------------------


@router.post(
    "/v2/link/provider/password/{provider}",
    response_model=ProviderLinkAnswer,
    responses=_PROVIDER_LINK_ERRORS,
)
async def password_provider(
    service: CurrentService,
    request: Request,
    provider: str,
    body: PasswordSignIn,
    token: LinkTokenHeader,
) -> Any:
    """Sign in at a password provider with the person's credentials: connected, or
    pending the code the maker sent (complete it with `.../complete_mfa`)."""
    return await _answered(
        service,
        provider,
        service.credential_links.sign_in,
        token,
        request.state.request_id,
        provider,
        body.username,
        body.password,
        body.region,
    )


@router.post("/v2/link/auth", response_model=ProviderLinkAnswer, responses=_LINK_ERRORS)
async def password_auth(
    service: CurrentService, request: Request, body: LegacyPasswordSignIn, token: LinkTokenHeader
) -> Any:
    """The same as `/v2/link/provider/password/{provider}`, the provider in the body."""
    return await _answered(
        service,
        body.provider,
        service.credential_links.sign_in,
        token,
        request.state.request_id,
        body.provider,
        body.username,
        body.password,
        body.region,
    )


@router.post(
    "/v2/link/provider/password/{provider}/complete_mfa",
    response_model=ProviderLinkAnswer,
    responses=_PROVIDER_LINK_ERRORS,
)
async def complete_mfa(
    service: CurrentService,
    request: Request,
    provider: str,
    body: MfaCode,
    token: LinkTokenHeader,
) -> Any:
    """The code the maker sent for the pending sign-in (its second factor, or an e-mail
    provider's code): used once, right or wrong."""
    return await _answered(
        service,
        provider,
        service.credential_links.complete,
        token,
        request.state.request_id,
        provider,
        body.mfa_code,
    )


@router.post(
    "/v2/link/provider/email/{provider}",
    response_model=ProviderLinkAnswer,
    responses=_PROVIDER_LINK_ERRORS,
)
async def email_provider(
    service: CurrentService,
    request: Request,
    provider: str,
    body: EmailSignIn,
    token: LinkTokenHeader,
) -> Any:
    """Ask an e-mail provider's maker to send the person a code (the body's `provider`
    wins over the path's); complete with `/v2/link/provider/password/{provider}/
    complete_mfa`."""
    chosen = body.provider or provider
    return await _answered(
        service,
        chosen,
        service.credential_links.send_email_code,
        token,
        request.state.request_id,
        chosen,
        body.email,
        body.region,
    )


@router.post("/v2/link/auth/email", response_model=ProviderLinkAnswer, responses=_LINK_ERRORS)
async def email_auth(
    service: CurrentService, request: Request, body: LegacyEmailSignIn, token: LinkTokenHeader
) -> Any:
    """The same as `/v2/link/provider/email/{provider}`, the provider in the body."""
    if body.provider is None:
        return _not_offered("provider", "body")
    return await _answered(
        service,
        body.provider,
        service.credential_links.send_email_code,
        token,
        request.state.request_id,
        body.provider,
        body.email,
        body.region,
    )
