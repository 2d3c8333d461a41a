"""The provider port: how the service learns what a provider offers a new connection, and
pulls a resource from it.

Each provider adapter (the built-in demo devices, a maker's cloud API behind a fake in the
tests) implements `ProviderAdapter`. The pull engine (`pulling.py`) splits a pull's range
into chunks and asks the adapter for one chunk at a time, so a provider's page limits and
rate limits stay inside its adapter.

Error codes are the ones gaps.md names for historical pulls; an adapter raises
`ProviderError` with one of them. A provider that reports the user's grant as broken
(expired token, revoked scopes) also names the connection error type, and the connection
enters `error`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Protocol
from uuid import UUID

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
# timeseries samples: their daily events carry `summary`, the others `data` (gaps.md).
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


class ProviderError(Exception):
    """A pull of one chunk failed. `code` is a pull error code; `connection_error` names
    the connection error type when the failure means the user's grant is broken."""

    def __init__(self, code: str, message: str, connection_error: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.connection_error = connection_error

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


class ProviderAdapter(Protocol):
    # How far back a new connection's history reaches.
    history_days: int

    def availability(self, resources: Sequence[str]) -> dict[str, Any]:
        """Spec 2.2 `resource_availability` as the provider reports it for a new
        connection: per resource its `status` and `scope_requirements` (the scopes the user
        granted and denied, each split into required and optional)."""
        ...

    def fetch(
        self, target: PullTarget, start: date, end: date, now: datetime, attempt: int
    ) -> dict[date, Any]:
        """The resource's data for the days start..end (inclusive) as known at `now`:
        one payload per day that has data (a summary object or a list of samples).
        Raises ProviderError. `attempt` counts from 1 for the pull being run."""
        ...
