"""The Abbott LibreView reader: a maker whose people sign in with their e-mail and password
(and a second factor), or an e-mail code, not at an OAuth page (docs/makers/
abbott_libreview.md). It implements both ports: `CredentialMaker` (the sign-in of a link,
domain/connections/credential_links.py) and `ProviderAdapter` (the pulls).

- Sign-in. The credentials go to the maker in a POST body, once, and are dropped: never
  logged, never in a URL or an error. The maker's access token is kept sealed with the
  connection (provider_tokens.py), as the OAuth makers' are; LibreView grants no refresh
  token, so when it stops accepting one the connection is in `error` with
  `provider_credential_error` and the person connects again.
- Glucose: `GET /glucose?start=&end=` (at most 31 days a request), mg/dL turned into
  mmol/L as the other glucose makers' (dexcom.py's factor), stored under the UTC day of
  each reading.
- Failures: 429 `provider_rate_limit_exceeded`, 5xx and unreadable answers
  `provider_unavailable`, timeouts `transport_failure`, 401 the connection in `error`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any
from uuid import UUID

import httpx
from healthledger.adapters.persistence.keys.provider_tokens import SqlProviderTokenStore
from healthledger.adapters.providers.dexcom import MG_DL_PER_MMOL_L
from healthledger.adapters.providers.maker_api import MakerTexts, by_utc_day, instant, utc_iso
from healthledger.domain.connections.credential_links import (
    EMAIL,
    INCORRECT_MFA_CODE,
    PASSWORD,
    PROVIDER_API_ERROR,
    PROVIDER_CREDENTIAL_ERROR,
    PROVIDER_PASSWORD_EXPIRED,
    MakerChallenge,
    MakerGrant,
    SignInRefused,
)
from healthledger.domain.connections.provider_tokens import ProviderTokens
from healthledger.domain.connections.providers import (
    NON_RETRIABLE,
    OAuthClient,
    OAuthGrant,
    OAuthNotSupported,
    ProviderError,
    PullTarget,
    offered_availability,
)
from healthledger.domain.ledger import Clock

TEXTS = MakerTexts.of("LibreView")
WINDOW_DAYS = 31
RESOURCES = frozenset({"glucose"})
# The client our grants are recorded under (LibreView knows no OAuth client).
CLIENT_ID = "libreview-credentials"

# The maker's refusals of a sign-in, as link error types.
_REFUSALS = {
    401: PROVIDER_CREDENTIAL_ERROR,
    403: PROVIDER_PASSWORD_EXPIRED,
    423: PROVIDER_PASSWORD_EXPIRED,
}


@dataclass
class LibreViewReader:
    api_url: str
    http: httpx.Client
    tokens: SqlProviderTokenStore
    clock: Clock
    history_days: int = 90
    api_timeout: float = 30.0
    # LibreView's people sign in with a password (and a second factor) or an e-mail code.
    sign_ins: frozenset[str] = frozenset({PASSWORD, EMAIL})

    # -- CredentialMaker ---------------------------------------------------------------------

    def sign_in(
        self, username: str, password: str, region: str | None
    ) -> MakerGrant | MakerChallenge:
        return self._signed_in(
            self._post("/auth/login", {"username": username, "password": password})
        )

    def send_email_code(self, email: str, region: str | None) -> MakerChallenge:
        found = self._signed_in(self._post("/auth/email_code", {"email": email}))
        if not isinstance(found, MakerChallenge):
            raise SignInRefused(PROVIDER_API_ERROR)
        return found

    def complete(self, challenge: str, code: str) -> MakerGrant:
        try:
            answer = self._post("/auth/verify", {"challenge": challenge, "code": code})
        except SignInRefused as exc:
            if exc.error_type == PROVIDER_CREDENTIAL_ERROR:
                raise SignInRefused(INCORRECT_MFA_CODE) from None
            raise
        found = self._signed_in(answer)
        if not isinstance(found, MakerGrant):
            raise SignInRefused(PROVIDER_API_ERROR)
        return found

    def _post(self, path: str, body: dict[str, str]) -> dict[str, Any]:
        try:
            response = self.http.post(f"{self.api_url}{path}", json=body, timeout=self.api_timeout)
        except httpx.HTTPError:
            raise SignInRefused(PROVIDER_API_ERROR) from None
        if response.status_code in _REFUSALS:
            raise SignInRefused(_REFUSALS[response.status_code])
        try:
            answer = response.json() if response.status_code == 200 else None
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise SignInRefused(PROVIDER_API_ERROR)
        return answer

    def _signed_in(self, answer: dict[str, Any]) -> MakerGrant | MakerChallenge:
        grant = answer.get("grant")
        if answer.get("status") == "ok" and isinstance(grant, dict):
            token, account = grant.get("access_token"), grant.get("account_id")
            lifetime = grant.get("expires_in")
            if isinstance(token, str) and isinstance(account, str):
                expires = (
                    self.clock() + timedelta(seconds=lifetime)
                    if isinstance(lifetime, int) and not isinstance(lifetime, bool)
                    else None
                )
                return MakerGrant(account, ProviderTokens(token, expires_at=expires), CLIENT_ID)
        challenge, method = answer.get("challenge"), answer.get("method")
        if (
            answer.get("status") in ("mfa_required", "code_sent")
            and isinstance(challenge, str)
            and method in ("sms", "email")
        ):
            hint = answer.get("hint")
            return MakerChallenge(challenge, method, hint if isinstance(hint, str) else "")
        raise SignInRefused(PROVIDER_API_ERROR)

    # -- ProviderAdapter ----------------------------------------------------------------------

    def availability(
        self, resources: Sequence[str], grant: OAuthGrant | None = None
    ) -> dict[str, Any]:
        return offered_availability(resources, RESOURCES)

    def fetch(
        self, target: PullTarget, start: date, end: date, now: datetime, attempt: int
    ) -> dict[date, Any]:
        if target.resource not in RESOURCES:
            return {}
        stored = self.tokens.current(target.grant_id())
        if stored is None:
            raise ProviderError(NON_RETRIABLE, TEXTS.must_reconnect, PROVIDER_CREDENTIAL_ERROR)
        records: list[dict[str, Any]] = []
        begin = start
        while begin <= end:
            stop = min(begin + timedelta(days=WINDOW_DAYS - 1), end)
            records.extend(self._readings(stored.tokens.access_token, begin, stop))
            begin = stop + timedelta(days=1)
        return by_utc_day(_samples(records), start, end)

    def _readings(self, token: str, start: date, end: date) -> list[dict[str, Any]]:
        try:
            response = self.http.get(
                f"{self.api_url}/glucose",
                params={"start": start.isoformat(), "end": end.isoformat()},
                headers={"Authorization": f"Bearer {token}"},
                timeout=self.api_timeout,
            )
        except httpx.HTTPError:
            raise ProviderError("transport_failure", TEXTS.unreachable) from None
        status = response.status_code
        if status == 429:
            raise ProviderError("provider_rate_limit_exceeded", TEXTS.rate_limited)
        if status >= 500:
            raise TEXTS.broken()
        if status == 401:
            raise ProviderError(NON_RETRIABLE, TEXTS.must_reconnect, PROVIDER_CREDENTIAL_ERROR)
        if status != 200:
            raise ProviderError(NON_RETRIABLE, TEXTS.refused)
        try:
            data = response.json().get("data")
        except (ValueError, AttributeError):
            raise TEXTS.broken() from None
        if not isinstance(data, list):
            raise TEXTS.broken()
        return [r for r in data if isinstance(r, dict)]

    def authorization_url(
        self, redirect_uri: str, client: OAuthClient | None, state: str, code_challenge: str
    ) -> str:
        raise OAuthNotSupported("LibreView's people sign in with credentials, not OAuth.")

    def exchange(
        self, code: str, redirect_uri: str, client: OAuthClient | None, code_verifier: str
    ) -> OAuthGrant:
        raise OAuthNotSupported("LibreView's people sign in with credentials, not OAuth.")

    def revoke(self, team_id: UUID, client_id: str, tokens: ProviderTokens) -> None:
        """Sign the grant out at the maker; a refusal means it is gone already."""
        try:
            response = self.http.post(
                f"{self.api_url}/auth/logout",
                headers={"Authorization": f"Bearer {tokens.access_token}"},
                timeout=self.api_timeout,
            )
        except httpx.HTTPError:
            raise ProviderError("transport_failure", TEXTS.unreachable) from None
        if response.status_code == 429 or response.status_code >= 500:
            raise ProviderError("provider_unavailable", TEXTS.unavailable)


def _samples(records: list[dict[str, Any]]) -> list[tuple[datetime, dict[str, Any]]]:
    """Each reading once (its `id`, the last listed), in mmol/L at its instant."""
    by_id: dict[Any, tuple[datetime, dict[str, Any]]] = {}
    for record in records:
        moment, value = instant(record.get("timestamp")), record.get("value")
        if moment is None or not isinstance(value, int | float) or isinstance(value, bool):
            continue
        if record.get("unit") == "mg/dL":
            value = round(value / MG_DL_PER_MMOL_L, 1)
        elif record.get("unit") != "mmol/L":
            continue
        by_id[record.get("id") or moment] = (
            moment,
            {"timestamp": utc_iso(moment), "value": value, "unit": "mmol/L"},
        )
    return sorted(by_id.values(), key=lambda pair: pair[0])
