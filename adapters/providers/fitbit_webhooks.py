"""Fitbit's webhooks in: the Subscriptions API's verification and its signed notifications,
behind the `MakerWebhooks` port (domain/connections/maker_notices.py;
docs/makers/fitbit.md#subscriptions-webhooks-in).

- Verification. When a subscriber URL is registered (or changed) in Fitbit's developer
  console, Fitbit GETs it twice with `?verify=`: once with the subscriber verification
  code the console shows (we answer 204) and once with a wrong one (we answer 404). The
  code is a setting (`HEALTHLEDGER_FITBIT_SUBSCRIBER_VERIFICATION_CODE`); unset, every
  code is wrong.
- Notifications. A POST of a JSON array of `{collectionType, date, ownerId, ownerType,
  subscriptionId}`, signed in `X-Fitbit-Signature`: HMAC-SHA1 of the raw body under the
  application's client secret followed by `&`, base64. Fitbit's signature carries no
  time, so a replayed notification verifies: it can only prompt a sync of days the
  connection reads anyway, with our own token.
- What a notification names. `collectionType` maps to our resources (`RESOURCES`:
  `foods` is not read, so names nothing); `date` is the person's local day, and the
  samples of a local day lie on the UTC days either side, so the window is the day and
  one day each side. `ownerId` is Fitbit's encoded user id, the connection's external
  user id. `userRevokedAccess` is the person revoking our access: the connection ends.
- De-duplication. Fitbit sends no notification id, and the same `(ownerId,
  collectionType, date)` again each time the person syncs that day; the key is a digest
  of those fields and of the 5-minute span the notice arrived in: Fitbit's retries of one
  delivery are one notice, a later sync of the same day a new one.

Nothing from a body is logged or put in an error: messages are fixed texts.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping
from datetime import date, datetime, timedelta
from typing import Any

from healthledger.domain.connections.maker_notices import (
    ChallengeAnswer,
    MakerNotice,
    NoticeMalformed,
    NoticeRefused,
)

PROVIDER = "fitbit"
SIGNATURE = "x-fitbit-signature"
REVOKED = "userRevokedAccess"
# Notices of one (person, collection, day) within this span are one.
DEDUPLICATION_SPAN = timedelta(minutes=5)

# Fitbit's collection types -> our resources read from them (adapters/providers/fitbit.py).
# The nightly values (HRV, breathing rate, SpO2, skin temperature) are computed from the
# night's sleep: they change with the `sleep` collection.
RESOURCES: dict[str, frozenset[str]] = {
    "activities": frozenset(
        {
            "activity",
            "steps",
            "distance",
            "calories_active",
            "calories_basal",
            "floors_climbed",
            "workouts",
            "heartrate",
        }
    ),
    "sleep": frozenset(
        {
            "sleep",
            "sleep_cycle",
            "hypnogram",
            "hrv",
            "respiratory_rate",
            "blood_oxygen",
            "body_temperature_delta",
        }
    ),
    "body": frozenset({"body", "weight", "fat"}),
}


def sign(client_secret: str, body: bytes) -> str:
    """Fitbit's signature of a notification body (what the fake Fitbit sends, and we
    check)."""
    digest = hmac.new(f"{client_secret}&".encode(), body, hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


class FitbitWebhooks:
    """The MakerWebhooks of Fitbit, for the application whose client secret signs the
    notifications and whose subscriber verification code Fitbit's console shows."""

    provider = PROVIDER

    def __init__(self, client_secret: str, verification_code: str | None) -> None:
        self._secret = client_secret
        self._code = verification_code

    def challenge(
        self, method: str, query: Mapping[str, str], headers: Mapping[str, str]
    ) -> ChallengeAnswer | None:
        if method != "GET" or "verify" not in query:
            return None
        code = query["verify"]
        if self._code and hmac.compare_digest(code.encode(), self._code.encode()):
            return ChallengeAnswer(status=204)
        # Fitbit sends a wrong code on purpose and expects this.
        return ChallengeAnswer(
            status=404,
            body=b'{"detail":"Unknown verification code."}',
            media_type="application/json",
        )

    def notices(self, headers: Mapping[str, str], body: bytes, now: datetime) -> list[MakerNotice]:
        signature = headers.get(SIGNATURE)
        if not signature or not hmac.compare_digest(
            signature.encode(), sign(self._secret, body).encode()
        ):
            raise NoticeRefused()
        try:
            parsed = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise NoticeMalformed() from exc
        if not isinstance(parsed, list):
            raise NoticeMalformed()
        span = int(now.timestamp() // DEDUPLICATION_SPAN.total_seconds())
        found = []
        for item in parsed:
            notice = _notice(item, span)
            if notice is not None:
                found.append(notice)
        return found


def _notice(item: Any, span: int) -> MakerNotice | None:
    """One notification as our notice; None for a collection we do not read. Raises
    NoticeMalformed for what is not a notification."""
    if not isinstance(item, dict):
        raise NoticeMalformed()
    account, collection = item.get("ownerId"), item.get("collectionType")
    if not isinstance(account, str) or not account or not isinstance(collection, str):
        raise NoticeMalformed()
    try:
        day = date.fromisoformat(str(item.get("date")))
    except ValueError as exc:
        raise NoticeMalformed() from exc
    key = hashlib.sha256(
        json.dumps(
            [account, collection, day.isoformat(), item.get("subscriptionId"), span],
            separators=(",", ":"),
        ).encode()
    ).hexdigest()
    if collection == REVOKED:
        return MakerNotice(PROVIDER, account, frozenset(), day, day, key, deauthorized=True)
    resources = RESOURCES.get(collection)
    if resources is None:
        return None  # foods: not read here
    first, last = day - timedelta(days=1), day + timedelta(days=1)
    return MakerNotice(PROVIDER, account, resources, first, last, key)
