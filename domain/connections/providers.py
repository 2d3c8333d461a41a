"""The provider port: how the service learns what a provider offers a new connection, and
pulls a resource from it.

Each provider adapter (the built-in demo devices, a maker's cloud API behind a fake in the
tests) implements `ProviderAdapter`. The pull engine (`pulling.py`) splits a pull's range
into chunks and asks the adapter for one chunk at a time, so a provider's page limits and
rate limits stay inside its adapter.

A provider whose users sign in at the maker (OAuth) also says where to send the person's
browser (`authorization_url`) and exchanges the authorization code the maker sends it back
with (`exchange`; the link flow in docs/connections.md); an adapter without such a flow
says so with `OAuthNotSupported`.

Error codes are the ones gaps.md names for historical pulls; an adapter raises
`ProviderError` with one of them. A provider that reports the user's grant as broken
(expired token, revoked scopes) also names the connection error type, and the connection
enters `error`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

from healthledger.domain.connections.provider_tokens import ProviderTokens

# Pull error codes (gaps.md, historical pulls).
RETRIABLE_CODES = frozenset(
    {
        "provider_rate_limit_exceeded",
        "provider_unavailable",
        "transport_failure",
        "resource_contention",
    }
)
NON_RETRIABLE = "non_retriable_error"
UNEXPECTED = "unexpected_error"
RETRY_QUOTA_EXHAUSTED = "retry_quota_exhausted"
FINAL_CODES = frozenset({NON_RETRIABLE, UNEXPECTED, RETRY_QUOTA_EXHAUSTED})

# How the composition root picks the adapter of a connection: (provider slug, demo device).
AdapterFor = Callable[[str, bool], "ProviderAdapter"]

# Resources whose daily data is one summary (an object, or a list of sessions) rather than
# timeseries samples (how the pull engine stores them; what their webhooks carry is the
# payload builder's: adapters/webhooks/payloads.py).
SUMMARY_RESOURCES = frozenset(
    {
        "sleep",
        "sleep_cycle",
        "activity",
        "workouts",
        "body",
        "profile",
        "meal",
        "menstrual_cycle",
        "electrocardiogram",
        "blood_pressure",
    }
)

# Connection error types (gaps.md, connection status `error`).
CONNECTION_ERROR_TYPES = frozenset(
    {
        "token_refresh_failed",
        "webhook_registration_failed",
        "user_not_found",
        "deregistered_per_provider",
        "required_scopes_not_granted",
        "provider_credential_error",
        "provider_password_expired",
        "unknown",
    }
)


def offered_availability(resources: Sequence[str], offered: Collection[str]) -> dict[str, Any]:
    """Spec 2.2 `resource_availability` of a provider that asks for no scopes: what it
    offers available, the rest unavailable (Apple Health's export, a credential maker,
    a manual provider)."""
    none: dict[str, list[str]] = {"required": [], "optional": []}
    return {
        resource: {
            "status": "available" if resource in offered else "unavailable",
            "scope_requirements": {"user_granted": dict(none), "user_denied": dict(none)},
        }
        for resource in sorted(resources)
    }


class ProviderError(Exception):
    """A pull of one chunk failed. `code` is a pull error code; `connection_error` names
    the connection error type when the failure means the user's grant is broken."""

    def __init__(
        self,
        code: str,
        message: str,
        connection_error: str | None = None,
        *,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.connection_error = connection_error
        # Seconds the maker asked us to wait (a 429's Retry-After): a retry comes no sooner.
        self.retry_after = retry_after

    @property
    def retriable(self) -> bool:
        return self.code in RETRIABLE_CODES


@dataclass(frozen=True)
class PullTarget:
    """What an adapter needs to know to pull for one connection."""

    user_id: UUID
    provider: str
    resource: str
    # Our own knobs for demo devices (failure injection), from the connection's events.
    demo_failures: Mapping[str, Any]
    # The connection's stream id (keyed, issue 29: not derivable from the user and the
    # provider alone), under which its grant's tokens are kept. None only for an adapter
    # that keeps no tokens (the demo devices, the phone's providers).
    connection_id: UUID | None = None

    def grant_id(self) -> UUID:
        """The connection id a maker adapter reads its tokens under."""
        if self.connection_id is None:
            raise ValueError("a maker's pull needs its connection's id (PullTarget)")
        return self.connection_id


@dataclass(frozen=True)
class OAuthClient:
    """The OAuth client an exchange authenticates as: a team's custom credentials (their
    redirect_uri is our callback). None in `exchange` means the service's own client."""

    client_id: str
    # A secret: kept out of reprs, so that no log line or traceback shows it.
    client_secret: str = field(repr=False)


@dataclass(frozen=True)
class OAuthGrant:
    """What the maker answered for an authorization code: whose account was granted, and
    the tokens that reach it (stored sealed with the connection, provider_tokens.py)."""

    # The maker's id for the person: personal, sealed before it is recorded. None when
    # the maker's token answer does not name the account.
    external_user_id: str | None
    # The client that made the exchange (a refresh must authenticate as it), and what
    # the maker granted; None for an adapter that keeps no tokens.
    client_id: str | None = None
    tokens: ProviderTokens | None = None


class OAuthNotSupported(Exception):
    """This adapter has no OAuth code exchange (a demo device, or a provider whose maker
    adapter this deployment does not have)."""


class OAuthExchangeFailed(Exception):
    """The maker refused the code (expired, used, issued for another redirect_uri or
    client) or could not be reached. `message` is fixed text, safe to show the person."""

    def __init__(self, message: str = "The provider did not accept the sign-in.") -> None:
        super().__init__(message)
        self.message = message


@runtime_checkable
class KeptAfterStoring(Protocol):
    """An adapter whose maker serves data until told it is kept (Polar's transactions:
    data committed is gone from the maker): told once a pull's data is stored, never
    before, so that a crash in between means the maker serves it again (our store's
    record ids make a second store harmless). Raises ProviderError (retriable: the pull
    is tried again and stores the same records again)."""

    def stored(self, target: PullTarget, now: datetime) -> None: ...


@runtime_checkable
class DeliveredByMaker(Protocol):
    """An adapter whose maker delivers a person's records itself rather than being read
    (Garmin's pushes carry the records, its pings the URLs to fetch them from): the
    records of one notice's `delivery` (maker_notices.MakerNotice) mapped into the days
    of one resource. Only the days the delivery brings are answered, each with what the
    delivery holds of it: the engine merges them into the days stored
    (domain/connections/deliveries.py). Raises ProviderError (a ping's fetch failing)."""

    def delivered(self, target: PullTarget, delivery: Any, now: datetime) -> dict[date, Any]: ...


class ProviderAdapter(Protocol):
    # How far back a new connection's history reaches.
    history_days: int

    def availability(
        self, resources: Sequence[str], grant: OAuthGrant | None = None
    ) -> dict[str, Any]:
        """Spec 2.2 `resource_availability` as the provider reports it for a new
        connection: per resource its `status` and `scope_requirements` (the scopes the user
        granted and denied, each split into required and optional). `grant`: what the
        maker granted at the sign-in (its scopes), for an OAuth connection."""
        ...

    def fetch(
        self, target: PullTarget, start: date, end: date, now: datetime, attempt: int
    ) -> dict[date, Any]:
        """The resource's data for the days start..end (inclusive) as known at `now`:
        one payload per day that has data (a summary object or a list of samples).
        Raises ProviderError. `attempt` counts from 1 for the pull being run."""
        ...

    def authorization_url(
        self, redirect_uri: str, client: OAuthClient | None, state: str, code_challenge: str
    ) -> str:
        """Where to send the person's browser to sign in at the maker and grant access:
        the maker sends it back to `redirect_uri` with `state`. `code_challenge` is the
        PKCE S256 challenge of the verifier the exchange will present. Raises
        OAuthNotSupported (no OAuth flow, or no client to authenticate as)."""
        ...

    def exchange(
        self, code: str, redirect_uri: str, client: OAuthClient | None, code_verifier: str
    ) -> OAuthGrant:
        """Trade the authorization `code` the maker sent to `redirect_uri` (our callback,
        which the maker checks against the one the authorization used) for the person's
        grant, authenticating as `client` (None: the service's own client) and proving
        the authorization was ours with the PKCE `code_verifier`. Raises
        OAuthNotSupported or OAuthExchangeFailed."""
        ...

    def revoke(self, team_id: UUID, client_id: str, tokens: ProviderTokens) -> None:
        """End the person's grant at the maker, where the maker offers that (else nothing),
        authenticating as the client that obtained it (`client_id`: the team's custom
        client or the service's). Done once the maker says so, or says the grant is gone
        already. Raises ProviderError: a retriable code when the maker could not answer
        now (revocation.py tries again later)."""
        ...
