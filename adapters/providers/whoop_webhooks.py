"""WHOOP's webhooks in: its signed notifications behind the `MakerWebhooks` port
(domain/connections/maker_notices.py; docs/makers/whoop.md#webhooks-in).

- No handshake: WHOOP's developer dashboard takes the webhook URL as it is, so every GET
  or HEAD is no handshake of WHOOP's (the route answers 404).
- Notifications. A POST of `{"user_id": 10129, "id": "<the record's id>", "type":
  "sleep.updated", "trace_id": "..."}`, signed in `X-WHOOP-Signature`: base64 of
  HMAC-SHA256 of `X-WHOOP-Signature-Timestamp` (milliseconds since the epoch) followed
  by the raw body, under the application's client secret. A timestamp more than
  `MAX_SKEW` from our clock is refused like a bad signature: a replay of an old
  notification does not verify.
- What a notification names. `type` maps to our resources (`RESOURCES`; a type we do
  not read names nothing); `user_id` is the connection's external user id. WHOOP names
  the record, never its day, and the port cannot ask WHOOP (nothing here calls a maker):
  the window is the notice's UTC day and the `RECENT_DAYS` before it (a strap uploads
  late, a person edits a recent record), the local days of the person included. A
  record changed longer ago is read at the next scheduled sync.
- De-duplication: WHOOP's `trace_id` is its id of the delivery; the key is a digest of
  it with the account, type and record, so WHOOP's retries of one delivery are one
  notice.

Nothing from a body is logged or put in an error: messages are fixed texts.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from healthledger.domain.connections.maker_notices import (
    ChallengeAnswer,
    MakerNotice,
    NoticeMalformed,
    NoticeRefused,
)

PROVIDER = "whoop_v2"
SIGNATURE = "x-whoop-signature"
TIMESTAMP = "x-whoop-signature-timestamp"
# A signature's timestamp further than this from our clock is not WHOOP's now.
MAX_SKEW = timedelta(minutes=5)
# Days before the notice's synced with it: WHOOP does not say which day changed.
RECENT_DAYS = 2

_SLEEP = frozenset({"sleep", "respiratory_rate"})
_RECOVERY = frozenset({"hrv", "blood_oxygen", "body_temperature", "activity"})
_WORKOUT = frozenset({"workouts"})
# WHOOP's event types -> our resources read from the record (adapters/providers/whoop.py).
# A deletion syncs the same window: the day's summary is read again without it.
RESOURCES: dict[str, frozenset[str]] = {
    "sleep.updated": _SLEEP,
    "sleep.deleted": _SLEEP,
    "recovery.updated": _RECOVERY,
    "recovery.deleted": _RECOVERY,
    "workout.updated": _WORKOUT,
    "workout.deleted": _WORKOUT,
}


def sign(client_secret: str, timestamp: str, body: bytes) -> str:
    """WHOOP's signature of a notification (what the fake WHOOP sends, and we check)."""
    message = timestamp.encode() + body
    digest = hmac.new(client_secret.encode(), message, hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


class WhoopWebhooks:
    """The MakerWebhooks of WHOOP, for the application whose client secret signs the
    notifications."""

    provider = PROVIDER

    def __init__(self, client_secret: str) -> None:
        self._secret = client_secret

    def challenge(
        self, method: str, query: Mapping[str, str], headers: Mapping[str, str]
    ) -> ChallengeAnswer | None:
        return None  # WHOOP has no verification handshake

    def notices(self, headers: Mapping[str, str], body: bytes, now: datetime) -> list[MakerNotice]:
        signature, timestamp = headers.get(SIGNATURE), headers.get(TIMESTAMP)
        if not signature or not timestamp or not timestamp.isdigit():
            raise NoticeRefused()
        if not hmac.compare_digest(
            signature.encode(), sign(self._secret, timestamp, body).encode()
        ):
            raise NoticeRefused()
        signed_at = datetime.fromtimestamp(int(timestamp) / 1000, UTC)
        if abs(signed_at - now) > MAX_SKEW:
            raise NoticeRefused()
        try:
            parsed = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise NoticeMalformed() from exc
        notice = _notice(parsed, now)
        return [] if notice is None else [notice]


def _notice(item: Any, now: datetime) -> MakerNotice | None:
    """The notification as our notice; None for a type we do not read. Raises
    NoticeMalformed for what is not a notification."""
    if not isinstance(item, dict):
        raise NoticeMalformed()
    account, kind = item.get("user_id"), item.get("type")
    if isinstance(account, bool) or not isinstance(account, int | str) or account == "":
        raise NoticeMalformed()
    if not isinstance(kind, str):
        raise NoticeMalformed()
    resources = RESOURCES.get(kind)
    if resources is None:
        return None  # a type we do not read
    key = hashlib.sha256(
        json.dumps(
            [str(account), kind, str(item.get("id")), str(item.get("trace_id"))],
            separators=(",", ":"),
        ).encode()
    ).hexdigest()
    today = now.astimezone(UTC).date()
    # A local day reaches 14 hours either side of UTC: the day after too.
    first, last = today - timedelta(days=RECENT_DAYS), today + timedelta(days=1)
    return MakerNotice(PROVIDER, str(account), resources, first, last, key)
