"""The fake Oura's webhooks (docs/makers/oura.md#webhooks): subscriptions made with an
application's credentials, Oura's verification handshake, and signed notifications.

- `POST {base}/v2/webhook/subscription` with `x-client-id`/`x-client-secret` and
  `{callback_url, verification_token, event_type, data_type}`: the fake first GETs the
  callback with `verification_token` and `challenge` and keeps the subscription only if
  it is answered 200 with `{"challenge": <the same>}` (else 400). `GET` lists the
  client's subscriptions, `PUT .../renew/{id}` renews one, `DELETE .../{id}` ends one.
- `notify(person, data_type, event_type)` POSTs a notification `{event_type, data_type,
  object_id, event_time, user_id}` to each matching subscription, signed as Oura signs
  (`x-oura-timestamp`, `x-oura-signature`: HMAC-SHA256 of timestamp + body under the
  client's secret, upper-case hex). The fake Oura calls it when a person's data is
  revised (`FakeOura.revise`), and `revoked` when a person revokes access.
- Switches: `bad_signature` signs with a wrong secret; `sent` keeps what was sent and
  the status each POST got.
"""

from __future__ import annotations

import json
import secrets
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import httpx
from healthledger.adapters.providers.oura_webhooks import REVOKE, sign
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

# Oura's subscriptions expire; the fake's last this long unless renewed.
SUBSCRIPTION_LIFETIME = timedelta(days=90)


@dataclass
class Sent:
    callback_url: str
    body: dict[str, Any]
    status: int


@dataclass
class FakeOuraWebhooks:
    clock: Callable[[], datetime]
    # client id -> secret (the fake Oura's registered applications).
    clients: dict[str, str]
    subscriptions: dict[str, dict[str, Any]] = field(default_factory=dict)
    sent: list[Sent] = field(default_factory=list)
    # Sign notifications with a wrong secret (a forger, or a rotated secret).
    bad_signature: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    # -- the subscription API -------------------------------------------------------------

    def _client(self, request: Request) -> str | None:
        client_id = request.headers.get("x-client-id", "")
        secret = request.headers.get("x-client-secret", "")
        known = self.clients.get(client_id)
        if known is None or not secrets.compare_digest(known, secret):
            return None
        return client_id

    async def create(self, request: Request) -> Response:
        client_id = self._client(request)
        if client_id is None:
            return JSONResponse({"status": 401, "title": "Unauthorized"}, status_code=401)
        try:
            asked = json.loads(await request.body())
            callback, token = asked["callback_url"], asked["verification_token"]
            event_type, data_type = asked["event_type"], asked["data_type"]
        except (ValueError, KeyError, TypeError):
            return JSONResponse({"status": 422, "title": "Invalid body"}, status_code=422)
        challenge = secrets.token_urlsafe(12)
        try:
            # Off the event loop: the callback may be served in this very process.
            answer = await _get(callback, {"verification_token": token, "challenge": challenge})
        except httpx.HTTPError:
            answer = None
        if answer is None or answer[0] != 200 or answer[1] != {"challenge": challenge}:
            return JSONResponse(
                {"status": 400, "title": "Callback verification failed"}, status_code=400
            )
        subscription = {
            "id": str(uuid.uuid4()),
            "callback_url": callback,
            "event_type": event_type,
            "data_type": data_type,
            "expiration_time": (self.clock() + SUBSCRIPTION_LIFETIME).isoformat(),
            "client_id": client_id,
            "verification_token": token,
        }
        with self.lock:
            self.subscriptions[subscription["id"]] = subscription
        return JSONResponse(_shown(subscription), status_code=201)

    async def listing(self, request: Request) -> Response:
        client_id = self._client(request)
        if client_id is None:
            return JSONResponse({"status": 401, "title": "Unauthorized"}, status_code=401)
        with self.lock:
            mine = [_shown(s) for s in self.subscriptions.values() if s["client_id"] == client_id]
        return JSONResponse(mine)

    def _owned(self, request: Request) -> dict[str, Any] | Response:
        """The client's subscription the path names (under the lock), or the refusal."""
        client_id = self._client(request)
        if client_id is None:
            return JSONResponse({"status": 401, "title": "Unauthorized"}, status_code=401)
        found = self.subscriptions.get(request.path_params["id"])
        if found is None or found["client_id"] != client_id:
            return JSONResponse({"status": 404, "title": "Not Found"}, status_code=404)
        return found

    async def renew(self, request: Request) -> Response:
        with self.lock:
            found = self._owned(request)
            if isinstance(found, Response):
                return found
            found["expiration_time"] = (self.clock() + SUBSCRIPTION_LIFETIME).isoformat()
            return JSONResponse(_shown(found))

    async def delete(self, request: Request) -> Response:
        with self.lock:
            found = self._owned(request)
            if isinstance(found, Response):
                return found
            del self.subscriptions[found["id"]]
        return Response(status_code=204)

    # -- notifications --------------------------------------------------------------------

    def notify(
        self,
        user_id: str,
        data_type: str,
        event_type: str = "update",
        object_id: str | None = None,
        event_time: datetime | None = None,
    ) -> list[Sent]:
        """Send a notification to every subscription of this data type and event type
        (any data type for a revocation); what was sent."""
        with self.lock:
            targets = [
                s
                for s in self.subscriptions.values()
                if event_type == REVOKE
                or (s["data_type"] == data_type and s["event_type"] == event_type)
            ]
        if event_type == REVOKE:  # once per application, not per subscription
            by_client = {s["client_id"]: s for s in targets}
            targets = list(by_client.values())
        body = {
            "event_type": event_type,
            "data_type": data_type,
            "object_id": object_id or str(uuid.uuid4()),
            "event_time": (event_time or self.clock()).isoformat(),
            "user_id": user_id,
        }
        return [self.post(s["callback_url"], s["client_id"], body) for s in targets]

    def post(self, callback_url: str, client_id: str, body: dict[str, Any]) -> Sent:
        """POST one signed notification; what was sent and the status it got."""
        raw = json.dumps(body).encode()
        timestamp = str(int(self.clock().timestamp()))
        secret = self.clients[client_id] + ("-forged" if self.bad_signature else "")
        headers = {
            "content-type": "application/json",
            "x-oura-timestamp": timestamp,
            "x-oura-signature": sign(secret, timestamp, raw),
        }
        try:
            status = httpx.post(callback_url, content=raw, headers=headers, timeout=10).status_code
        except httpx.HTTPError:
            status = 0
        sent = Sent(callback_url, body, status)
        with self.lock:
            self.sent.append(sent)
        return sent


async def _get(url: str, params: dict[str, str]) -> tuple[int, Any] | None:
    async with httpx.AsyncClient(timeout=10) as client:
        answer = await client.get(url, params=params)
    try:
        return answer.status_code, answer.json()
    except ValueError:
        return answer.status_code, None


def _shown(subscription: dict[str, Any]) -> dict[str, Any]:
    """A subscription as Oura lists it (not the client, not the token)."""
    return {
        k: subscription[k]
        for k in ("id", "callback_url", "event_type", "data_type", "expiration_time")
    }
