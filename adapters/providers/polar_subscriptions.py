"""Our webhook at Polar (AccessLink v3, docs/makers/polar.md#webhooks-in): one per
application, made with the client's credentials (HTTP Basic), pointing at
`{public_base_url}/makers/polar/webhook`, for the events we read (`RESOURCES`).

- `ensure_webhook` reads what Polar has (`GET /v3/webhooks`). None: it creates ours
  (`POST /v3/webhooks`; Polar first POSTs a PING to the URL, which must answer 200: the
  service must be reachable there) and returns the `signature_secret_key` Polar answers,
  which Polar never shows again: the caller keeps it (maker_webhook_secrets.py). One:
  its URL and events are set to ours if they differ (`PATCH /v3/webhooks/{id}`, the key
  stays), and it is activated if Polar deactivated it (`POST /v3/webhooks/activate`).
  Safe to run again: it changes only what differs.
  A 409 at the creation (another run made it since we read) is that one kept.
- `remove_webhook` deletes it (`DELETE /v3/webhooks/{id}`).

Polar's errors are `SubscriptionFailed` naming the step and the status, no secret.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
from healthledger.adapters.providers.maker_subscriptions import SubscriptionFailed, body, call
from healthledger.adapters.providers.polar_webhooks import RESOURCES

MAKER = "Polar"
WEBHOOKS_PATH = "/v3/webhooks"
EVENTS = tuple(sorted(RESOURCES))


@dataclass(frozen=True)
class WebhookChange:
    action: str  # "created", "updated" or "kept"
    webhook_id: str
    # Only when created: Polar's signing key, shown this once.
    signature_secret_key: str | None = None


def existing_webhook(
    http: httpx.Client, api_url: str, client: tuple[str, str]
) -> dict[str, Any] | None:
    """Polar's webhook of our application, if there is one."""
    answer = call(http, MAKER, "GET", _url(api_url), "read", auth=client)
    found = body(answer, MAKER, "read")
    if found is None:
        return None
    listed = found.get("data") if isinstance(found, dict) else None
    if not isinstance(listed, list):
        raise SubscriptionFailed("Polar's webhook answer was not a list.")
    hooks = [h for h in listed if isinstance(h, dict) and h.get("id") is not None]
    return hooks[0] if hooks else None


def ensure_webhook(
    http: httpx.Client, api_url: str, client: tuple[str, str], callback_url: str
) -> WebhookChange:
    """Make Polar's webhook ours; what was done."""
    found = existing_webhook(http, api_url, client)
    if found is None:
        wanted = {"events": list(EVENTS), "url": callback_url}
        try:
            answer = call(http, MAKER, "POST", _url(api_url), "create", auth=client, json=wanted)
        except SubscriptionFailed as exc:
            # 409: another run made it since we read (two deployments at once): that one
            # is kept, with the key its run stored.
            found = existing_webhook(http, api_url, client) if exc.status == 409 else None
            if found is None:
                raise
            return _kept_or_updated(http, api_url, client, callback_url, found)
        created = body(answer, MAKER, "create")
        data = created.get("data") if isinstance(created, dict) else None
        if not isinstance(data, dict) or not data.get("id") or not data.get("signature_secret_key"):
            raise SubscriptionFailed("Polar's created webhook had no id or key.")
        return WebhookChange("created", str(data["id"]), str(data["signature_secret_key"]))
    return _kept_or_updated(http, api_url, client, callback_url, found)


def _kept_or_updated(
    http: httpx.Client,
    api_url: str,
    client: tuple[str, str],
    callback_url: str,
    found: dict[str, Any],
) -> WebhookChange:
    webhook_id = str(found["id"])
    action = "kept"
    if found.get("url") != callback_url or sorted(found.get("events") or []) != list(EVENTS):
        patch = {"events": list(EVENTS), "url": callback_url}
        url = f"{_url(api_url)}/{webhook_id}"
        call(http, MAKER, "PATCH", url, "update", auth=client, json=patch)
        action = "updated"
    if found.get("active") is False:
        call(http, MAKER, "POST", f"{_url(api_url)}/activate", "activate", auth=client)
        action = "updated"
    return WebhookChange(action, webhook_id)


def remove_webhook(http: httpx.Client, api_url: str, client: tuple[str, str]) -> str | None:
    """Delete Polar's webhook of our application; its id, or None when there was none."""
    found = existing_webhook(http, api_url, client)
    if found is None:
        return None
    webhook_id = str(found["id"])
    call(http, MAKER, "DELETE", f"{_url(api_url)}/{webhook_id}", "delete", auth=client)
    return webhook_id


def _url(api_url: str) -> str:
    return api_url.rstrip("/") + WEBHOOKS_PATH
