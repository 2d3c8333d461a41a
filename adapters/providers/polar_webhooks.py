"""Polar's webhooks in: AccessLink's signed notifications behind the `MakerWebhooks` port
(domain/connections/maker_notices.py; docs/makers/polar.md#webhooks-in).

- The webhook. Created once per application at Polar by `healthledger makers subscribe`
  (polar_subscriptions.py), which keeps the `signature_secret_key` Polar answers sealed
  (adapters/persistence/keys/maker_webhook_secrets.py). The key is read for each
  notification: the stored one, else the setting
  `HEALTHLEDGER_POLAR_WEBHOOK_SIGNATURE_SECRET` (a webhook made by hand); with neither,
  every notification is refused (401). Polar has no GET handshake: it POSTs a `PING`
  when the webhook is created, before it answers the key, which we acknowledge and which
  names nothing.
- Notifications. A POST of `{"event", "user_id", "entity_id", "timestamp", "url"}`,
  signed in `Polar-Webhook-Signature`: HMAC-SHA256 of the raw body under the signature
  secret, hex. Polar's signature carries no time, so a replayed notification verifies:
  it can only prompt a sync of days the connection reads anyway, with our own token.
- What a notification names. `event` maps to our resources (`RESOURCES`; events we do
  not read name nothing); `user_id` is the person's Polar user id, the connection's
  external user id; the window is the day of `timestamp` and one day each side (an
  exercise or a night uploaded then belongs to that day or the one before; the reader's
  transactions give every record not committed yet whatever the window, and keep
  uncommitted what falls outside it).
- De-duplication. The key is a digest of (user, event, entity, timestamp): Polar's
  retries of one delivery are one notice.

Nothing from a body is logged or put in an error: messages are fixed texts.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from healthledger.adapters.providers.maker_api import instant
from healthledger.domain.connections.maker_notices import (
    ChallengeAnswer,
    MakerNotice,
    NoticeMalformed,
    NoticeRefused,
)

PROVIDER = "polar"
SIGNATURE = "polar-webhook-signature"
PING = "PING"

# Polar's webhook events -> our resources read from what they announce
# (adapters/providers/polar.py). A night's recharge comes with its sleep.
RESOURCES: dict[str, frozenset[str]] = {
    "EXERCISE": frozenset({"workouts"}),
    "ACTIVITY_SUMMARY": frozenset({"activity", "steps"}),
    "SLEEP": frozenset({"sleep", "hrv", "respiratory_rate"}),
}


def sign(secret: str, body: bytes) -> str:
    """Polar's signature of a notification body (what the fake Polar sends, and we check)."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class PolarWebhooks:
    """The MakerWebhooks of Polar, for the webhook whose signature secret Polar gave:
    `signature_secret` is the key itself or what reads it at each notification."""

    provider = PROVIDER

    def __init__(self, signature_secret: str | Callable[[], str | None]) -> None:
        self._secret = signature_secret if callable(signature_secret) else lambda: signature_secret

    def challenge(
        self, method: str, query: Mapping[str, str], headers: Mapping[str, str]
    ) -> ChallengeAnswer | None:
        return None  # Polar has no handshake but its signed PING

    def notices(self, headers: Mapping[str, str], body: bytes, now: datetime) -> list[MakerNotice]:
        signature = headers.get(SIGNATURE, "").strip().lower()
        secret = self._secret()
        verified = (
            bool(signature)
            and secret is not None
            and hmac.compare_digest(signature.encode(), sign(secret, body).encode())
        )
        try:
            parsed = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            if not verified:
                raise NoticeRefused() from exc
            raise NoticeMalformed() from exc
        if not verified:
            # Polar PINGs the URL before it answers the webhook's key, and makes the
            # webhook only if we answer 200: a PING names nothing, so it is acknowledged
            # unverified. Anything else not signed with the key is refused.
            if isinstance(parsed, dict) and parsed.get("event") == PING:
                return []
            raise NoticeRefused()
        if not isinstance(parsed, dict) or not isinstance(parsed.get("event"), str):
            raise NoticeMalformed()
        event = parsed["event"]
        if event == PING:
            return []
        resources = RESOURCES.get(event)
        if resources is None:
            return []  # an event we do not read: acknowledged, nothing to sync
        account = parsed.get("user_id")
        moment = instant(parsed.get("timestamp"))
        if not isinstance(account, int | str) or isinstance(account, bool) or moment is None:
            raise NoticeMalformed()
        day = moment.date()
        key = hashlib.sha256(
            json.dumps(
                [str(account), event, str(parsed.get("entity_id")), moment.isoformat()],
                separators=(",", ":"),
            ).encode()
        ).hexdigest()
        return [
            MakerNotice(
                PROVIDER,
                str(account),
                resources,
                day - timedelta(days=1),
                day + timedelta(days=1),
                key,
            )
        ]
