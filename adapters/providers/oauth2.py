"""The generic OAuth 2.0 authorization-code adapter (RFC 6749 4.1, with PKCE, RFC 7636):
one per maker whose documented endpoints the provider catalog holds (`oauth` in
adapters/reference/providers.json), behind the provider port.

- `authorization_url`: the maker's authorization endpoint with our client id, the
  callback as redirect_uri, the maker's scopes, the flow's state and its S256 challenge.
- `exchange`: the code, with the PKCE verifier, at the maker's token endpoint; the
  answer's tokens go back in the grant (stored sealed with the connection by the caller).
- `fetch`: a pull needs a live access token first: an expired one is refreshed at the
  token endpoint (the new tokens replace the stored ones). Reading the maker's data API
  is not built: every maker has its own data formats, and none is invented here, so the
  pull then fails with a clear non-retriable error.

The client is the team's custom credentials for the maker when set, else the service's
own (HEALTHLEDGER_OAUTH_CLIENTS); a refresh authenticates as the client that obtained
the grant. Nothing the maker sends is logged or shown: its error texts are reduced to
fixed messages, and the tokens only ever leave this module sealed.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import date, datetime, timedelta
from typing import Any
from urllib.parse import quote_plus, urlencode
from uuid import UUID

import httpx
from healthledger.adapters.persistence.keys.provider_tokens import (
    SqlProviderTokenStore,
    StoredGrant,
)
from healthledger.adapters.reference import OAuthEndpoints, ProviderEntry
from healthledger.domain.connections.provider_tokens import ProviderTokens
from healthledger.domain.connections.providers import (
    NON_RETRIABLE,
    OAuthClient,
    OAuthExchangeFailed,
    OAuthGrant,
    OAuthNotSupported,
    ProviderError,
    PullTarget,
)
from healthledger.domain.ledger import Clock

HISTORY_DAYS = 30
TOKEN_REFRESH_FAILED = "token_refresh_failed"
# A pull asks for a token once per resource and chunk: a refresh that failed is not
# asked again of the maker for that grant (refused: never; unreachable: for a while).
RETRY_REFRESH_AFTER = timedelta(seconds=60)
# A refresh refused because another process refreshed first (single-use refresh tokens):
# how long to wait for that process to store the new grant before taking the refusal.
REFRESH_SETTLE_SECONDS = 2.0
# Refreshes are serialised per connection within a process on this many locks (striped
# by connection id: bounded, however many connections refresh over the process's life).
REFRESH_LOCK_STRIPES = 64

# The person's account at the maker is theirs to connect again: these end the grant.
_MUST_RECONNECT = "The provider no longer accepts this connection's grant; connect again."
_UNREACHABLE = "The provider could not be reached. Try again later."
_NO_CLIENT = "The OAuth client that obtained this grant is not configured any more."
_REVOCATION_REFUSED = "The provider refused to revoke this grant."
_NO_READER = (
    "{name}'s data API cannot be read by this deployment (no reader of its data formats); "
    "nothing was pulled."
)

# The maker's custom credentials lookup: (team id, provider slug) -> the team's client.
CustomClient = Callable[[UUID, str], OAuthClient | None]


class TokenEndpointError(Exception):
    """The token endpoint did not grant: `kind` says why, in our words (never the
    maker's text): unreachable, rate_limited, unavailable, refused, malformed."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class OAuth2Maker:
    """Implements the ProviderAdapter port for one maker's OAuth 2.0 API."""

    history_days = HISTORY_DAYS

    def __init__(
        self,
        entry: ProviderEntry,
        endpoints: OAuthEndpoints,
        *,
        service_client: OAuthClient | None,
        custom_client: CustomClient,
        tokens: SqlProviderTokenStore,
        http: httpx.Client,
        clock: Clock,
        maker_url: str | None = None,
    ) -> None:
        self.slug = entry.slug
        self.name = entry.name
        self.endpoints = endpoints
        self.service_client = service_client
        self.custom_client = custom_client
        self.tokens = tokens
        self.http = http
        self.clock = clock
        # (connection id, grant version) -> the failure of its refresh and when.
        self.failed_refreshes: dict[tuple[UUID, int], tuple[ProviderError, datetime]] = {}
        self.failed_lock = threading.Lock()
        # One refresh at a time per connection in this process: the others wait for it and
        # take its grant, instead of spending the refresh token again.
        self.refresh_locks = [threading.Lock() for _ in range(REFRESH_LOCK_STRIPES)]
        self.revoke_url = endpoints.revoke_url
        if maker_url is None:
            self.authorize_url, self.token_url = endpoints.authorize_url, endpoints.token_url
        else:  # one stand-in server for every maker (tests, staging)
            base = f"{maker_url.rstrip('/')}/{entry.slug}"
            self.authorize_url, self.token_url = f"{base}/authorize", f"{base}/token"
            if self.revoke_url is not None:
                self.revoke_url = f"{base}/revoke"

    # -- the link flow ------------------------------------------------------------------

    def client(self, custom: OAuthClient | None) -> OAuthClient:
        """The client to authenticate as: the team's, else the service's."""
        chosen = custom or self.service_client
        if chosen is None:
            raise OAuthNotSupported(f"No OAuth client for {self.slug} in this deployment.")
        return chosen

    def authorization_url(
        self, redirect_uri: str, client: OAuthClient | None, state: str, code_challenge: str
    ) -> str:
        params = {
            "response_type": "code",
            "client_id": self.client(client).client_id,
            "redirect_uri": redirect_uri,
            "state": state,
            "code_challenge": code_challenge,
            "code_challenge_method": "S256",
        }
        if self.endpoints.scopes:
            params["scope"] = self.endpoints.scope_separator.join(self.endpoints.scopes)
        params.update(self.endpoints.authorize_params)
        separator = "&" if "?" in self.authorize_url else "?"
        return f"{self.authorize_url}{separator}{urlencode(params)}"

    def exchange(
        self, code: str, redirect_uri: str, client: OAuthClient | None, code_verifier: str
    ) -> OAuthGrant:
        chosen = self.client(client)
        now = self.clock()
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": code_verifier,
        }
        try:
            answer = self.token_request(chosen, form)
            tokens = tokens_of(answer, now, None)
        except TokenEndpointError as exc:
            if exc.kind in ("refused", "malformed"):
                raise OAuthExchangeFailed() from None
            raise OAuthExchangeFailed(_UNREACHABLE) from None
        return OAuthGrant(
            external_user_id=self.account_of(answer),
            client_id=chosen.client_id,
            tokens=tokens,
        )

    def availability(
        self, resources: Sequence[str], grant: OAuthGrant | None = None
    ) -> dict[str, Any]:
        """Every resource the catalog lists, under the scopes the authorization asked for
        (the maker's consent screen is where the person grants them)."""
        return {
            resource: {
                "status": "available",
                "scope_requirements": {
                    "user_granted": {"required": list(self.endpoints.scopes), "optional": []},
                    "user_denied": {"required": [], "optional": []},
                },
            }
            for resource in sorted(resources)
        }

    # -- pulls ----------------------------------------------------------------------------

    def fetch(
        self, target: PullTarget, start: date, end: date, now: datetime, attempt: int
    ) -> dict[date, Any]:
        # What a reader of the maker's data API would send with its requests.
        self.access_token(target.grant_id(), now)
        raise ProviderError(NON_RETRIABLE, _NO_READER.format(name=self.name))

    def access_token(self, connection_id: UUID, now: datetime) -> str:
        """The connection's access token, refreshed at the token endpoint first when it
        has expired (or is about to). Raises ProviderError: a grant the maker no longer
        accepts puts the connection in error (token_refresh_failed); a maker that cannot
        be reached is a passing failure."""
        stored = self.tokens.current(connection_id)
        if stored is None:
            raise ProviderError(NON_RETRIABLE, _MUST_RECONNECT, TOKEN_REFRESH_FAILED)
        if not stored.tokens.expired(now):
            return stored.tokens.access_token
        with self.refresh_locks[connection_id.int % REFRESH_LOCK_STRIPES]:
            return self._refresh_expired(connection_id, now)

    def _refresh_expired(self, connection_id: UUID, now: datetime) -> str:
        # Read again under the lock: another worker of this process may have refreshed.
        stored = self.tokens.current(connection_id)
        if stored is None:
            raise ProviderError(NON_RETRIABLE, _MUST_RECONNECT, TOKEN_REFRESH_FAILED)
        if not stored.tokens.expired(now):
            return stored.tokens.access_token
        key = (stored.connection_id, stored.version)
        with self.failed_lock:
            failed = self.failed_refreshes.get(key)
        if failed is not None:
            error, at = failed
            if not error.retriable or now < at + RETRY_REFRESH_AFTER:
                raise ProviderError(error.code, error.message, error.connection_error)
        try:
            return self.refresh(stored, now)
        except ProviderError as exc:
            with self.failed_lock:
                self.failed_refreshes[key] = (exc, now)
            raise

    def refresh(self, stored: StoredGrant, now: datetime) -> str:
        refresh_token = stored.tokens.refresh_token
        if refresh_token is None:
            raise ProviderError(NON_RETRIABLE, _MUST_RECONNECT, TOKEN_REFRESH_FAILED)
        form = {"grant_type": "refresh_token", "refresh_token": refresh_token}
        try:
            answered = tokens_of(
                self.token_request(self.refresh_client(stored), form), now, refresh_token
            )
            # A refresh answer without a scope grants the one asked (RFC 6749 6): the
            # stored grant's; and the maker's id of the person stays with the grant.
            fresh = replace(
                answered,
                scope=stored.tokens.scope if answered.scope is None else answered.scope,
                account=stored.tokens.account,
            )
        except TokenEndpointError as exc:
            if exc.kind in ("refused", "malformed"):
                # Refused because another worker refreshed first (a maker that rotates
                # refresh tokens refuses the old one)? Then its grant is the one to use.
                return self.refreshed_meanwhile(stored, now)
            raise ProviderError(_PASSING[exc.kind], _UNREACHABLE) from None
        if self.tokens.replace(stored, fresh, now):
            return fresh.access_token
        return self.refreshed_meanwhile(stored, now)

    def refreshed_meanwhile(self, stored: StoredGrant, now: datetime) -> str:
        """The grant another worker stored after refreshing first. A maker that refused
        our refresh because another process spent the refresh token a moment ago is
        given a few seconds for that process to store its grant."""
        deadline = time.monotonic() + REFRESH_SETTLE_SECONDS
        while True:
            again = self.tokens.current(stored.connection_id)
            if again is not None and again.version != stored.version:
                if not again.tokens.expired(now):
                    return again.tokens.access_token
                break
            if again is None or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        raise ProviderError(NON_RETRIABLE, _MUST_RECONNECT, TOKEN_REFRESH_FAILED)

    def refresh_client(self, stored: StoredGrant) -> OAuthClient:
        """The client that obtained the grant: the team's custom one, or the service's;
        gone (credentials changed or deleted) means the grant cannot be refreshed."""
        found = self.grant_client(stored.team_id, stored.client_id)
        if found is None:
            raise ProviderError(NON_RETRIABLE, _MUST_RECONNECT, TOKEN_REFRESH_FAILED)
        return found

    def grant_client(self, team_id: UUID, client_id: str) -> OAuthClient | None:
        """The team's custom client or the service's, whichever is `client_id`."""
        for candidate in (self.custom_client(team_id, self.slug), self.service_client):
            if candidate is not None and candidate.client_id == client_id:
                return candidate
        return None

    # -- deregistration -------------------------------------------------------------------

    def revoke(self, team_id: UUID, client_id: str, tokens: ProviderTokens) -> None:
        """RFC 7009 at the maker's documented revocation endpoint (none: nothing to do):
        the refresh token (which ends the access tokens made with it) or else the access
        token, the client authenticated as at the token endpoint. A 200 is done (also for
        a token already invalid, RFC 7009 2.2); 429, 5xx and a maker out of reach are
        retried later; any other answer is a refusal (given up, revocation.py)."""
        if self.revoke_url is None:
            return
        client = self.grant_client(team_id, client_id)
        if client is None:  # the credentials that obtained it are gone: cannot ask
            raise ProviderError(NON_RETRIABLE, _NO_CLIENT)
        token, hint = (
            (tokens.refresh_token, "refresh_token")
            if tokens.refresh_token
            else (tokens.access_token, "access_token")
        )
        data, headers = self.client_authentication(
            client, {"token": token, "token_type_hint": hint}
        )
        try:
            response = self.http.post(self.revoke_url, data=data, headers=headers)
        except httpx.HTTPError:
            raise ProviderError("transport_failure", _UNREACHABLE) from None
        revocation_answer(response.status_code)

    def live_access_token(
        self, team_id: UUID, client_id: str, tokens: ProviderTokens, unreachable: str
    ) -> str | None:
        """The access token to end a grant with, at a maker that revokes by a live one
        (Oura, WHOOP): `tokens`' own, refreshed first when it expired. None when the
        maker refuses the refresh (the grant is not the maker's to end any more). Raises
        ProviderError: not retriable without the client that obtained the grant,
        `provider_unavailable` (`unreachable`) when the token endpoint could not answer."""
        if not tokens.expired(self.clock()) or not tokens.refresh_token:
            return tokens.access_token
        client = self.grant_client(team_id, client_id)
        if client is None:
            raise ProviderError(NON_RETRIABLE, _NO_CLIENT)
        form = {"grant_type": "refresh_token", "refresh_token": tokens.refresh_token}
        try:
            return tokens_of(self.token_request(client, form), self.clock(), None).access_token
        except TokenEndpointError as exc:
            if exc.kind in ("refused", "malformed"):
                return None
            raise ProviderError("provider_unavailable", unreachable) from None

    # -- the token endpoint -------------------------------------------------------------

    def client_authentication(
        self, client: OAuthClient, form: Mapping[str, str]
    ) -> tuple[dict[str, str], dict[str, str]]:
        """`form` and the headers of a request to the maker's OAuth server authenticated as
        `client` the way the catalog says (RFC 6749 2.3.1)."""
        data = dict(form)
        headers = {"Accept": "application/json"}
        if self.endpoints.token_auth == "client_secret_basic":
            # Each part form-encoded before the Basic scheme's base64.
            pair = f"{quote_plus(client.client_id)}:{quote_plus(client.client_secret)}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        else:
            data |= {"client_id": client.client_id, "client_secret": client.client_secret}
        return data, headers

    def token_request(self, client: OAuthClient, form: Mapping[str, str]) -> dict[str, Any]:
        """POST a grant request to the token endpoint, authenticated as `client`; its JSON
        answer. Raises TokenEndpointError."""
        # Parameters the maker wants besides RFC 6749's (Withings' `action=requesttoken`).
        data, headers = self.client_authentication(client, {**self.endpoints.token_params, **form})
        try:
            response = self.http.post(self.token_url, data=data, headers=headers)
        except httpx.HTTPError:
            raise TokenEndpointError("unreachable") from None
        return self.token_answer(response)

    def token_answer(self, response: httpx.Response) -> dict[str, Any]:
        """The token endpoint's answer as RFC 6749 5.1 gives it (a JSON object with
        `access_token`...). Raises TokenEndpointError. The hook for a maker whose answer
        differs (Withings wraps it in `{"status": 0, "body": {...}}` and says no with a
        non-zero status in an HTTP 200): the exchange and refresh above stay the same."""
        if response.status_code == 429:
            raise TokenEndpointError("rate_limited")
        if response.status_code >= 500:
            raise TokenEndpointError("unavailable")
        if response.status_code != 200:
            raise TokenEndpointError("refused")
        try:
            answer = response.json()
        except ValueError:
            raise TokenEndpointError("malformed") from None
        if not isinstance(answer, dict):
            raise TokenEndpointError("malformed")
        return answer

    def account_of(self, answer: Mapping[str, Any]) -> str | None:
        """The person's account id at the maker, where the catalog says the token answer
        names it (`athlete.id`)."""
        path = self.endpoints.user_id_field
        if path is None:
            return None
        value: Any = answer
        for part in path.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        return str(value) if isinstance(value, str | int) and value != "" else None


def revocation_answer(status: int, gone: frozenset[int] = frozenset()) -> None:
    """A revocation endpoint's answer: returns when the grant is ended (200, 204; RFC 7009
    2.2 answers 200 for a token already invalid too) or gone already (`gone`: a maker's own
    statuses for a token it does not know any more), raises ProviderError otherwise:
    retriable for 429 and 5xx, not for a refusal (a 401 is our client refused, RFC 7009
    2.2.1: asking again would not change it)."""
    if status in (200, 204) or status in gone:
        return
    if status == 429:
        raise ProviderError("provider_rate_limit_exceeded", _UNREACHABLE)
    if status >= 500:
        raise ProviderError("provider_unavailable", _UNREACHABLE)
    raise ProviderError(NON_RETRIABLE, _REVOCATION_REFUSED)


# A token endpoint that could not grant for a passing reason: the pull code to retry with.
_PASSING = {
    "unreachable": "transport_failure",
    "rate_limited": "provider_rate_limit_exceeded",
    "unavailable": "provider_unavailable",
}


def tokens_of(
    answer: Mapping[str, Any], now: datetime, refresh_token: str | None
) -> ProviderTokens:
    """The tokens of a token endpoint's answer (RFC 6749 5.1). A refresh answer without a
    refresh token keeps the one it was asked with (RFC 6749 6). Raises
    TokenEndpointError("malformed") for an answer without an access token."""
    access_token = answer.get("access_token")
    if not isinstance(access_token, str) or not access_token:
        raise TokenEndpointError("malformed")
    expires_in = answer.get("expires_in")
    expires_at = None
    if isinstance(expires_in, int | float) and not isinstance(expires_in, bool):
        expires_at = now + timedelta(seconds=expires_in)
    elif isinstance(expires_in, str) and expires_in.isdigit():
        expires_at = now + timedelta(seconds=int(expires_in))
    new_refresh = answer.get("refresh_token")
    token_type = answer.get("token_type")
    scope = answer.get("scope")
    return ProviderTokens(
        access_token=access_token,
        token_type=token_type if isinstance(token_type, str) and token_type else "Bearer",
        refresh_token=new_refresh
        if isinstance(new_refresh, str) and new_refresh
        else refresh_token,
        expires_at=expires_at,
        scope=scope if isinstance(scope, str) else None,
    )


def oauth_makers(
    catalog: Mapping[str, ProviderEntry],
    *,
    service_clients: Mapping[str, OAuthClient],
    custom_client: CustomClient,
    tokens: SqlProviderTokenStore,
    http: httpx.Client,
    clock: Clock,
    maker_url: str | None = None,
    maker_urls: Mapping[str, str] | None = None,
) -> dict[str, OAuth2Maker]:
    """An adapter for every provider of the catalog with documented OAuth endpoints
    (`maker_urls`: a stand-in server per maker, before the one for all, `maker_url`)."""
    return {
        slug: OAuth2Maker(
            entry,
            entry.oauth,
            service_client=service_clients.get(slug),
            custom_client=custom_client,
            tokens=tokens,
            http=http,
            clock=clock,
            maker_url=(maker_urls or {}).get(slug, maker_url),
        )
        for slug, entry in catalog.items()
        if entry.oauth is not None
    }
