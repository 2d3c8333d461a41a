"""Oura's webhooks in: its subscription handshake and its signed notifications, behind the
`MakerWebhooks` port (domain/connections/maker_notices.py; docs/makers/oura.md#webhooks).

- Handshake. Creating a subscription makes Oura GET our callback with
  `verification_token` (the one we gave it) and `challenge`: we answer 200
  `{"challenge": ...}` when the token is ours, 401 otherwise.
- Notifications. A POST of `{event_type, data_type, object_id, event_time, user_id}`,
  signed in `x-oura-signature`: HMAC-SHA256 under the app's client secret of the
  `x-oura-timestamp` header's text followed by the raw body, hex (Oura sends it upper
  case; compared without case). A timestamp more than `max_skew` away from our clock is
  refused too, so that a captured request cannot be played again later.
- What a notification names. `data_type` maps to our resources (`RESOURCES`); the days
  are the day of `event_time` and the day before (Oura names the document, not its day:
  a document of an older day changed later is found by the next daily sync). `user_id`
  is Oura's id of the person, the connection's external user id.
- Revocation. Oura documents no revocation notice; a notification with `event_type`
  `revoke` (what the fake Oura sends when a person revokes access) is taken as one.

Nothing from a body is logged or put in an error: messages are fixed texts.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any

from healthledger.domain.connections.maker_notices import (
    ChallengeAnswer,
    MakerNotice,
    NoticeMalformed,
    NoticeRefused,
)

PROVIDER = "oura"
SIGNATURE = "x-oura-signature"
TIMESTAMP = "x-oura-timestamp"
# Oura's event types; `revoke` is ours (see the module's docstring).
EVENT_TYPES = ("create", "update", "delete")
REVOKE = "revoke"

# Oura's data types (the subscriptions we make) -> our resources read from them
# (adapters/providers/oura.py reads each resource from these collections).
RESOURCES: dict[str, frozenset[str]] = {
    "sleep": frozenset(
        {"sleep", "sleep_cycle", "hypnogram", "sleep_stream", "hrv", "respiratory_rate"}
    ),
    "daily_sleep": frozenset({"sleep"}),
    "daily_activity": frozenset(
        {"activity", "steps", "calories_active", "calories_basal", "distance"}
    ),
    "workout": frozenset({"workouts"}),
    "daily_spo2": frozenset({"blood_oxygen"}),
    "daily_readiness": frozenset({"body_temperature_delta"}),
}
# How far a notification's timestamp may be from our clock.
MAX_SKEW = timedelta(minutes=5)
# A timestamp above this is in milliseconds, not seconds.
_MILLISECONDS = 10**11


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """Oura's signature of a notification (what the fake Oura sends, and we check)."""
    return hmac.new(secret.encode(), timestamp.encode() + body, hashlib.sha256).hexdigest().upper()


class OuraWebhooks:
    """The MakerWebhooks of Oura, for the app whose client secret signs the notifications
    and whose subscriptions carry `verification_token`."""

    provider = PROVIDER

    def __init__(
        self, client_secret: str, verification_token: str, max_skew: timedelta = MAX_SKEW
    ) -> None:
        self._secret = client_secret
        self._token = verification_token
        self.max_skew = max_skew

    def challenge(
        self, method: str, query: Mapping[str, str], headers: Mapping[str, str]
    ) -> ChallengeAnswer | None:
        if method != "GET" or "challenge" not in query:
            return None
        token = query.get("verification_token", "")
        if not hmac.compare_digest(token.encode(), self._token.encode()):
            return ChallengeAnswer(
                status=401,
                body=b'{"detail":"Unknown verification token."}',
                media_type="application/json",
            )
        answer = json.dumps({"challenge": query["challenge"]}).encode()
        return ChallengeAnswer(status=200, body=answer, media_type="application/json")

    def notices(self, headers: Mapping[str, str], body: bytes, now: datetime) -> list[MakerNotice]:
        self._verify(headers, body, now)
        try:
            parsed = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise NoticeMalformed() from exc
        items = parsed if isinstance(parsed, list) else [parsed]
        found = []
        for item in items:
            notice = _notice(item)
            if notice is not None:
                found.append(notice)
        return found

    def _verify(self, headers: Mapping[str, str], body: bytes, now: datetime) -> None:
        signature, timestamp = headers.get(SIGNATURE), headers.get(TIMESTAMP)
        if not signature or not timestamp:
            raise NoticeRefused()
        expected = sign(self._secret, timestamp, body)
        if not hmac.compare_digest(signature.upper().encode(), expected.encode()):
            raise NoticeRefused()
        try:
            seconds = float(timestamp)
        except ValueError as exc:
            raise NoticeRefused() from exc
        if seconds > _MILLISECONDS:
            seconds /= 1000
        if abs(now.timestamp() - seconds) > self.max_skew.total_seconds():
            raise NoticeRefused("The notification's timestamp is too far from now.")


def _notice(item: Any) -> MakerNotice | None:
    """One notification as our notice; None for a data type we do not read. Raises
    NoticeMalformed for what is not a notification."""
    if not isinstance(item, dict):
        raise NoticeMalformed()
    account, event_type, data_type = (
        item.get("user_id"),
        item.get("event_type"),
        item.get("data_type"),
    )
    if not isinstance(account, str) or not account or not isinstance(event_type, str):
        raise NoticeMalformed()
    key = hashlib.sha256(
        json.dumps(
            [account, event_type, data_type, item.get("object_id"), item.get("event_time")],
            separators=(",", ":"),
        ).encode()
    ).hexdigest()
    day = _day_of(item.get("event_time"))
    if event_type == REVOKE:
        return MakerNotice(PROVIDER, account, frozenset(), day, day, key, deauthorized=True)
    resources = RESOURCES.get(data_type) if isinstance(data_type, str) else None
    if event_type not in EVENT_TYPES or resources is None:
        return None  # signed, but nothing we read: acknowledged, not retried
    return MakerNotice(PROVIDER, account, resources, day - timedelta(days=1), day, key)


def _day_of(event_time: Any) -> date:
    if not isinstance(event_time, str):
        raise NoticeMalformed()
    try:
        moment = datetime.fromisoformat(event_time)
    except ValueError as exc:
        raise NoticeMalformed() from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.date()
