"""Garmin's pushes and pings behind the `MakerWebhooks` port
(domain/connections/maker_notices.py; docs/makers/garmin.md#pushes-and-pings).

- Garmin has no handshake: the endpoints are set in its developer portal, one URL for
  every summary type (ours, `/makers/garmin/webhook`); GET and HEAD are no handshake.
- A POST is `{"<summary type>": [item, ...], ...}`, one or more types. An item of a push
  is the summary itself, naming its person by `userId`; an item of a ping names the
  person and a `callbackURL` to fetch the summaries from. `deregistrations` (the person
  removed our access at Garmin) and a `userPermissionsChange` that leaves no permission
  end the connection; one that leaves some narrows the grant to them. Types we do not
  read are acknowledged and dropped.
- What verifies a POST. Garmin does not sign its notifications. It sends our consumer
  key in `garmin-client-id`: a POST without ours is refused (401, nothing stored). A ping
  is then safe whoever sent it: the reader fetches only callback URLs under Garmin's
  Health API, with the person's own token. A push carries records: one is taken only for
  an account id (Garmin's API user id, opaque, known to Garmin and to us) of a live
  connection; an unknown one is acknowledged and dropped.
- Exactly once. A push's records exist nowhere else (Garmin does not send again what it
  got a 200 for), so each (type, person) of a POST is one notice carrying them (its
  `delivery`), sealed with the person's key into the receipt before the 200. Its key is a
  digest of the type, the person and the items: Garmin's retry of a POST is the same
  notice, recorded once; the worker stores the records and announces what changed once.

Nothing from a body is logged or put in an error: messages are fixed texts.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any

from healthledger.adapters.providers.garmin import PERMISSIONS, TYPES
from healthledger.domain.connections.maker_notices import (
    ChallengeAnswer,
    MakerNotice,
    NoticeMalformed,
    NoticeRefused,
)

PROVIDER = "garmin"
CLIENT_ID = "garmin-client-id"
DEREGISTRATIONS = "deregistrations"
PERMISSIONS_CHANGED = "userPermissionsChange"
# What an item's person is named by, and what of an item is not the summary.
_ACCOUNT = "userId"
_NOT_RECORD = frozenset({_ACCOUNT, "userAccessToken"})


class GarminWebhooks:
    """The MakerWebhooks of Garmin, for the application whose consumer key is `client_id`."""

    provider = PROVIDER

    def __init__(self, client_id: str) -> None:
        self._client_id = client_id

    def challenge(
        self, method: str, query: Mapping[str, str], headers: Mapping[str, str]
    ) -> ChallengeAnswer | None:
        return None  # Garmin has no handshake

    def notices(self, headers: Mapping[str, str], body: bytes, now: datetime) -> list[MakerNotice]:
        sent = headers.get(CLIENT_ID, "")
        if not sent or not hmac.compare_digest(sent.encode(), self._client_id.encode()):
            raise NoticeRefused()
        try:
            parsed = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise NoticeMalformed() from exc
        if not isinstance(parsed, dict):
            raise NoticeMalformed()
        found: list[MakerNotice] = []
        today = now.astimezone(UTC).date()
        for kind, items in sorted(parsed.items()):
            if not isinstance(items, list):
                raise NoticeMalformed()
            if kind in (DEREGISTRATIONS, PERMISSIONS_CHANGED):
                found.extend(_ended(kind, items, today))
            elif kind in TYPES:
                found.extend(_deliveries(kind, items, today))
        return found


def _account(item: Any) -> str:
    if not isinstance(item, dict):
        raise NoticeMalformed()
    account = item.get(_ACCOUNT)
    if not isinstance(account, str) or not account:
        raise NoticeMalformed()
    return account


def _digest(*parts: Any) -> str:
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _ended(kind: str, items: list[Any], today: date) -> list[MakerNotice]:
    """The person removed our access (a deregistration), or withdrew every permission:
    the connection ends. A change that leaves some permission narrows the grant: a
    notice that delivers the permissions left (the reader keeps them as the grant's
    scope, and asks Garmin only what they cover)."""
    found = []
    for item in items:
        account = _account(item)
        left = item.get("permissions") if kind == PERMISSIONS_CHANGED else None
        if left:
            if not isinstance(left, list) or not all(isinstance(p, str) for p in left):
                raise NoticeMalformed()
            found.append(
                MakerNotice(
                    PROVIDER,
                    account,
                    frozenset(),
                    today,
                    today,
                    _digest(kind, item),
                    delivery={"type": PERMISSIONS, "permissions": sorted(left)},
                )
            )
            continue
        found.append(
            MakerNotice(
                PROVIDER,
                account,
                frozenset(),
                today,
                today,
                _digest(kind, item),
                deauthorized=True,
            )
        )
    return found


def _deliveries(kind: str, items: list[Any], today: date) -> list[MakerNotice]:
    """One notice per person of the type's items: its pushed records, or its pings'
    callback URLs."""
    records: dict[str, list[dict[str, Any]]] = {}
    callbacks: dict[str, list[str]] = {}
    for item in items:
        account = _account(item)
        url = item.get("callbackURL")
        if url is not None:
            if not isinstance(url, str):
                raise NoticeMalformed()
            callbacks.setdefault(account, []).append(url)
        else:
            record = {k: v for k, v in item.items() if k not in _NOT_RECORD}
            records.setdefault(account, []).append(record)
    resources = TYPES[kind][1]
    found = []
    for account, pushed in records.items():
        first, last = _days(pushed, today)
        found.append(
            MakerNotice(
                PROVIDER,
                account,
                resources,
                first,
                last,
                _digest(kind, account, pushed),
                delivery={"type": kind, "records": pushed},
            )
        )
    for account, urls in callbacks.items():
        found.append(
            MakerNotice(
                PROVIDER,
                account,
                resources,
                today,
                today,
                _digest(kind, account, "ping", urls),
                delivery={"type": kind, "callbacks": urls},
            )
        )
    return found


def _days(records: list[dict[str, Any]], today: date) -> tuple[date, date]:
    """The UTC days the records start on, a day either side (the receipt's window: what
    the delivery is about, for the audit; the records themselves say where they go)."""
    found = []
    for record in records:
        for field in ("startTimeInSeconds", "measurementTimeInSeconds"):
            seconds = record.get(field)
            if isinstance(seconds, int) and not isinstance(seconds, bool):
                try:
                    found.append(datetime.fromtimestamp(seconds, UTC).date())
                except (OverflowError, OSError, ValueError):
                    raise NoticeMalformed() from None
                break
    if not found:
        return today, today
    return min(found) - timedelta(days=1), max(found) + timedelta(days=1)
