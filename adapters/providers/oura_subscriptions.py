"""Our webhook subscriptions at Oura (docs/makers/oura.md#webhooks): one per (data type we
read, event type), made with the application's credentials (`x-client-id`,
`x-client-secret`), pointing at `{public_base_url}/makers/oura/webhook`.

`ensure_subscriptions` lists what Oura has, creates what is missing (Oura verifies the
callback with its handshake before it answers: the service must be reachable there),
and renews what expires within `renew_within`. Run by `healthledger makers subscribe`;
safe to run again (it changes only what is missing or expiring).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
from healthledger.adapters.providers.maker_subscriptions import SubscriptionFailed, body, call
from healthledger.adapters.providers.oura_webhooks import RESOURCES

SUBSCRIPTION_PATH = "/v2/webhook/subscription"
# The events we subscribe to: a document made or changed (a deletion changes no data we
# keep: the day's other documents are read again at the next sync).
EVENT_TYPES = ("create", "update")
RENEW_WITHIN = timedelta(days=7)


@dataclass(frozen=True)
class SubscriptionChange:
    action: str  # "created", "renewed" or "kept"
    event_type: str
    data_type: str


def ensure_subscriptions(
    http: httpx.Client,
    api_url: str,
    client_id: str,
    client_secret: str,
    callback_url: str,
    verification_token: str,
    now: datetime,
    renew_within: timedelta = RENEW_WITHIN,
) -> list[SubscriptionChange]:
    """Make Oura's subscriptions what we need; what was done for each."""
    headers = {"x-client-id": client_id, "x-client-secret": client_secret}
    base = api_url.rstrip("/") + SUBSCRIPTION_PATH
    existing = _call(http, "GET", base, headers, "list")
    if not isinstance(existing, list):
        raise SubscriptionFailed("Oura's subscription list was not a list.")
    have = {
        (s.get("event_type"), s.get("data_type")): s
        for s in existing
        if isinstance(s, dict) and s.get("callback_url") == callback_url
    }
    changes = []
    for data_type in sorted(RESOURCES):
        for event_type in EVENT_TYPES:
            found = have.get((event_type, data_type))
            if found is None:
                body = {
                    "callback_url": callback_url,
                    "verification_token": verification_token,
                    "event_type": event_type,
                    "data_type": data_type,
                }
                _call(http, "POST", base, headers, "create", json=body)
                changes.append(SubscriptionChange("created", event_type, data_type))
            elif _expires_by(found, now + renew_within):
                _call(http, "PUT", f"{base}/renew/{found['id']}", headers, "renew")
                changes.append(SubscriptionChange("renewed", event_type, data_type))
            else:
                changes.append(SubscriptionChange("kept", event_type, data_type))
    return changes


def _expires_by(subscription: dict[str, Any], instant: datetime) -> bool:
    try:
        expires = datetime.fromisoformat(str(subscription.get("expiration_time")))
    except ValueError:
        return True  # unreadable: renewing is harmless
    if expires.tzinfo is None:
        expires = expires.replace(tzinfo=instant.tzinfo)
    return expires <= instant


def _call(
    http: httpx.Client,
    method: str,
    url: str,
    headers: dict[str, str],
    step: str,
    json: Any = None,
) -> Any:
    return body(call(http, "Oura", method, url, step, headers=headers, json=json), "Oura", step)
