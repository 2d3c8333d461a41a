"""A fake maker for the OAuth tests: a real local HTTP server (uvicorn, a loopback port)
with an OAuth 2.0 authorization endpoint and token endpoint per provider slug, as
`HEALTHLEDGER_OAUTH_MAKER_URL` points the service at them (`{base}/{slug}/authorize`,
`{base}/{slug}/token`). It stands in for the outside world the tests cannot reach.

Like a maker, it checks what RFC 6749 and RFC 7636 make it check: the client and its
secret (Basic or in the body), the redirect_uri of the authorization at the exchange, the
PKCE verifier against the S256 challenge, that a code is used once; it rotates refresh
tokens. Everything it received is kept for the tests to look at.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote_plus, urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from tests.receivers import serving


@dataclass
class Authorization:
    slug: str
    client_id: str
    redirect_uri: str
    state: str
    code_challenge: str
    scope: str | None
    query: dict[str, str]


@dataclass
class TokenRequest:
    slug: str
    grant_type: str
    client_id: str | None
    form: dict[str, str]
    # How the client authenticated: "basic" or "post" (None: it did not).
    auth: str | None


@dataclass
class FakeMaker:
    base: str = ""
    # client id -> secret: the clients registered at the maker.
    clients: dict[str, str] = field(default_factory=dict)
    # What the person does on the consent screen: "approve", or an RFC 6749 error code
    # ("access_denied", "server_error"...) sent back instead of a code.
    decision: str = "approve"
    expires_in: int = 3600
    # Extra members of every token answer (an account id, as some makers send).
    answer_extra: dict[str, Any] = field(default_factory=dict)
    # Refresh requests are refused (the person revoked access at the maker).
    revoked: bool = False
    authorizations: list[Authorization] = field(default_factory=list)
    token_requests: list[TokenRequest] = field(default_factory=list)
    # Every token the maker issued (access and refresh), to look for in the database.
    issued: list[str] = field(default_factory=list)
    codes: dict[str, Authorization] = field(default_factory=dict)
    refresh_tokens: dict[str, str] = field(default_factory=dict)
    # RFC 7009 revocations received (`{base}/{slug}/revoke`).
    revocations: list[TokenRequest] = field(default_factory=list)

    def register(self, client_id: str, secret: str) -> None:
        self.clients[client_id] = secret

    def grants(self, grant_type: str) -> list[TokenRequest]:
        return [r for r in self.token_requests if r.grant_type == grant_type]

    def _issue(self, client_id: str) -> dict[str, Any]:
        access, refresh = f"at-{secrets.token_hex(16)}", f"rt-{secrets.token_hex(16)}"
        self.issued += [access, refresh]
        self.refresh_tokens[refresh] = client_id
        return {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": self.expires_in,
            "refresh_token": refresh,
            "scope": "daily personal",
            **self.answer_extra,
        }

    # -- the endpoints ------------------------------------------------------------------

    async def authorize(self, request: Request) -> Response:
        query = dict(request.query_params)
        client_id = query.get("client_id", "")
        redirect_uri = query.get("redirect_uri", "")
        if client_id not in self.clients or not redirect_uri:
            # RFC 6749 4.1.2.1: never redirect to an unverified redirect_uri.
            return Response("unknown client", status_code=400)
        if query.get("response_type") != "code" or query.get("code_challenge_method") != "S256":
            return Response("unsupported request", status_code=400)
        authorization = Authorization(
            slug=request.path_params["slug"],
            client_id=client_id,
            redirect_uri=redirect_uri,
            state=query.get("state", ""),
            code_challenge=query.get("code_challenge", ""),
            scope=query.get("scope"),
            query=query,
        )
        self.authorizations.append(authorization)
        if self.decision != "approve":
            back = {"error": self.decision, "error_description": "<b>nope</b>"}
        else:
            code = f"code-{secrets.token_hex(8)}"
            self.codes[code] = authorization
            back = {"code": code}
        return RedirectResponse(
            f"{redirect_uri}?{urlencode({**back, 'state': authorization.state})}", 302
        )

    async def token(self, request: Request) -> Response:
        slug = request.path_params["slug"]
        form, client_id, secret, auth = await _client_form(request)
        grant_type = form.get("grant_type", "")
        self.token_requests.append(TokenRequest(slug, grant_type, client_id, form, auth))
        if client_id is None or self.clients.get(client_id) != secret:
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        if grant_type == "authorization_code":
            authorization = self.codes.pop(form.get("code", ""), None)  # used once
            if (
                authorization is None
                or authorization.client_id != client_id
                or authorization.slug != slug
                or authorization.redirect_uri != form.get("redirect_uri")
                or challenge(form.get("code_verifier", "")) != authorization.code_challenge
            ):
                return JSONResponse({"error": "invalid_grant"}, status_code=400)
            return JSONResponse(self._issue(client_id))
        if grant_type == "refresh_token":
            holder = self.refresh_tokens.pop(form.get("refresh_token", ""), None)  # rotated
            if self.revoked or holder != client_id:
                return JSONResponse({"error": "invalid_grant"}, status_code=400)
            return JSONResponse(self._issue(client_id))
        return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)

    async def revoke(self, request: Request) -> Response:
        """RFC 7009: the client authenticated as at the token endpoint; a 200 whatever the
        token (2.2: an invalid one too). The refresh token revoked is refused after."""
        form, client_id, secret, auth = await _client_form(request)
        self.revocations.append(
            TokenRequest(request.path_params["slug"], "revoke", client_id, form, auth)
        )
        if client_id is None or self.clients.get(client_id) != secret:
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        self.refresh_tokens.pop(form.get("token", ""), None)
        return Response(status_code=200)


async def _client_form(
    request: Request,
) -> tuple[dict[str, str], str | None, str | None, str | None]:
    """(the form, the client id and secret, how the client authenticated: "basic",
    "post" or None)."""
    form = {k: v[0] for k, v in parse_qs((await request.body()).decode()).items()}
    client_id, secret, auth = form.get("client_id"), form.get("client_secret"), None
    header = request.headers.get("authorization", "")
    if header.startswith("Basic "):
        pair = base64.b64decode(header.removeprefix("Basic ")).decode()
        client_id, _, secret = (unquote_plus(part) for part in pair.partition(":"))
        auth = "basic"
    elif secret is not None:
        auth = "post"
    return form, client_id, secret, auth


def challenge(verifier: str) -> str:
    """RFC 7636 S256, as a maker computes it."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


@contextmanager
def fake_maker() -> Iterator[FakeMaker]:
    maker = FakeMaker()
    app = Starlette(
        routes=[
            Route("/{slug}/authorize", maker.authorize, methods=["GET"]),
            Route("/{slug}/token", maker.token, methods=["POST"]),
            Route("/{slug}/revoke", maker.revoke, methods=["POST"]),
        ]
    )
    with serving(app) as base:
        maker.base = base
        yield maker
