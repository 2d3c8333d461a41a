"""A fake Polar cloud: a real HTTP server on localhost that serves Polar AccessLink v3 as
documented (docs/makers/polar.md) for a few synthetic people, and its OAuth 2.0 endpoints.

- OAuth: `GET {base}/polar/authorize` signs the person in at once (`?fake_person=` or
  `default_person`) and sends the browser back with a code; `POST {base}/polar/token`
  (HTTP Basic client authentication, as Polar's) answers `{"access_token", "token_type",
  "expires_in", "x_user_id"}`: tokens that last ten years, no refresh token.
- Registration: `POST /v3/users` (`member-id`): 200, 409 when registered already. An
  unregistered person's transactions answer 404.
- Transactions: `POST /v3/users/{user-id}/{exercise,activity,physical-information}-
  transactions` opens one holding every record not committed yet (201 with its
  `transaction-id`; 204 when there is none); a new one replaces an open one (Polar's
  expire). `GET` of the transaction lists its records' URLs, `GET` of each URL the
  record (an activity's `/step-samples` too), `PUT` commits: its records are never served
  again. `committed` counts each record committed (a test sees it committed once).
- Sleep and nightly recharge: `GET /v3/users/sleep`, `/v3/users/nightly-recharge`: the
  last 28 nights.
- Deregistration: `DELETE /v3/users/{user-id}` (204): the person no longer registered,
  their tokens refused; `deregistered` lists them.
- Switches: `fail(status, times, path=, method=)` (the next data requests whose path
  contains `path` answer `status`: 429, 5xx, 403...), `slow(seconds, times)`, `revoke(person)`
  (every token refused: 401), `unregister(person)`, `refuse_consent(person)` (403: the
  person has not accepted Polar's data sharing consents).
- Webhook: `GET /v3/webhooks` (`{"data": [...]}`, empty when none), `POST /v3/webhooks`
  (`{"events", "url"}`; Polar POSTs a signed PING to the URL first, which must answer
  200; 201 with `signature_secret_key`; 409 when the application has one already),
  `PATCH` and `DELETE /v3/webhooks/{id}`, `POST /v3/webhooks/activate|deactivate`, all
  with the client's HTTP Basic authentication (401 otherwise); `fail(...)` applies;
  `race(times)`: the next reads list none though one exists (a 409 then).
  `push(person, event, entity_id, timestamp, signed=)` POSTs a notification to
  `webhook_url`, signed with `webhook_secret` as Polar signs them (both set by the
  creation; `webhook_active` False sends nothing).

The data is deterministic: a person's day is a function of (person, day).

Run it alone: `python -m healthledger.adapters.makers.fake_polar --port 8016`.
"""

from __future__ import annotations

import argparse
import base64
import json
import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from urllib.parse import parse_qs, unquote_plus, urlencode
from zoneinfo import ZoneInfo

import anyio
import httpx
from healthledger.adapters.makers.serving import days, seeded, served
from healthledger.adapters.providers.polar_webhooks import sign
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

TEN_YEARS = 10 * 365 * 24 * 3600
NIGHTS = 28  # sleep and nightly recharge: Polar's 28 days
KINDS = {
    "exercise-transactions": ("exercises", "exercises"),
    "activity-transactions": ("activity-log", "activities"),
    "physical-information-transactions": ("physical-informations", "physical-information"),
}
SPORTS = ("RUNNING", "CYCLING", "WALKING", "SWIMMING", "STRENGTH_TRAINING")


@dataclass(frozen=True)
class Person:
    key: str
    user_id: int
    zone: str
    height: float  # cm
    weight: float  # kg

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.zone)


PEOPLE: dict[str, Person] = {
    p.key: p
    for p in (
        Person("pia", 41_000_001, "Europe/Helsinki", 168.0, 61.0),
        Person("ole", 41_000_002, "America/Denver", 183.0, 80.0),
    )
}


@dataclass
class _Failure:
    status: int
    times: int
    path: str | None
    method: str | None


@dataclass
class FakePolar:
    base: str = ""
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    default_person: str = "pia"
    clients: dict[str, str] = field(default_factory=dict)
    # How many days back the person's unsynced records reach (since their registration).
    history_days: int = 14
    # What the fake saw: (method, path, HTTP status), in order.
    requests: list[tuple[str, str, int]] = field(default_factory=list)
    issued: list[str] = field(default_factory=list)
    # record path (e.g. "exercises/123") -> how many times a PUT committed it.
    committed: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _codes: dict[str, dict[str, str]] = field(default_factory=dict)
    _access: dict[str, str] = field(default_factory=dict)  # token -> person
    # People we deregistered (DELETE /v3/users/{user-id}), in order.
    deregistered: list[str] = field(default_factory=list)
    _registered: set[str] = field(default_factory=set)
    _revoked: set[str] = field(default_factory=set)
    _no_consent: set[str] = field(default_factory=set)
    _failures: list[_Failure] = field(default_factory=list)
    _slow: list[float] = field(default_factory=list)
    # (person, kind) -> (transaction id, the record paths it holds)
    _open: dict[tuple[str, str], tuple[int, list[str]]] = field(default_factory=dict)
    _next_transaction: int = 1000
    # The webhook: where Polar POSTs its notifications, and the secret that signs them.
    webhook_url: str | None = None
    webhook_secret: str = "polar-webhook-secret"
    # The webhook made through the API (POST /v3/webhooks): its id, events and state.
    webhook_id: str | None = None
    webhook_events: list[str] = field(default_factory=list)
    webhook_active: bool = True
    # How many more webhook reads list none though one exists: another run's creation
    # landing between a run's read and its create (`race()`).
    _unseen_webhook_reads: int = 0
    callback_http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=5.0))

    # -- switches -----------------------------------------------------------------------

    def register(self, client_id: str, secret: str) -> None:
        self.clients[client_id] = secret

    def fail(
        self, status: int, times: int = 1, *, path: str | None = None, method: str | None = None
    ) -> None:
        """The next `times` data requests whose path contains `path` (and whose method is
        `method`, if given) answer `status`."""
        with self.lock:
            self._failures.append(_Failure(status, times, path, method))

    def slow(self, seconds: float, times: int = 1) -> None:
        with self.lock:
            self._slow.extend([seconds] * times)

    def race(self, times: int = 1) -> None:
        """The next `times` reads of the webhook list none, as if made just after."""
        with self.lock:
            self._unseen_webhook_reads += times

    def revoke(self, person: str) -> None:
        with self.lock:
            self._revoked.add(person)

    def unregister(self, person: str) -> None:
        with self.lock:
            self._registered.discard(person)

    def refuse_consent(self, person: str) -> None:
        with self.lock:
            self._no_consent.add(person)

    def push(
        self, person: str, event: str, entity_id: str, timestamp: datetime, *, signed: bool = True
    ) -> httpx.Response:
        """Polar notifies the webhook: `{event, user_id, entity_id, timestamp, url}`,
        signed in `Polar-Webhook-Signature` (HMAC-SHA256 hex of the body), or not."""
        assert self.webhook_url is not None and self.webhook_active
        user = PEOPLE[person].user_id
        body = json.dumps(
            {
                "event": event,
                "user_id": user,
                "entity_id": entity_id,
                "timestamp": timestamp.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                "url": f"{self.base}/v3/users/{user}",
            }
        ).encode()
        headers = {"Content-Type": "application/json", "Polar-Webhook-Event": event}
        if signed:
            headers["Polar-Webhook-Signature"] = sign(self.webhook_secret, body)
        return self.callback_http.post(self.webhook_url, content=body, headers=headers)

    def is_registered(self, person: str) -> bool:
        return person in self._registered

    def data_requests(self, contains: str = "") -> list[tuple[str, str, int]]:
        return [r for r in self.requests if r[1].startswith("/v3/") and contains in r[1]]

    # -- the synthetic data ---------------------------------------------------------------

    def today(self, person: Person) -> date:
        return self.clock().astimezone(person.tz).date()

    def exercise(self, person: Person, day: date) -> dict[str, Any]:
        rng = seeded("polar", person.key, day, "exercise")
        start = datetime.combine(day, time(7 + rng.randrange(10), rng.randrange(60)))
        offset = person.tz.utcoffset(start)
        minutes = 20 + rng.randrange(70)
        return {
            "id": 7_000_000 + person.user_id % 1000 * 10_000 + (day.toordinal() % 10_000),
            "upload-time": f"{day.isoformat()}T23:00:00.000Z",
            "device": "Polar Vantage V3",
            "start-time": start.isoformat(),
            "start-time-utc-offset": 0 if offset is None else int(offset.total_seconds() // 60),
            "duration": f"PT{minutes // 60}H{minutes % 60}M{rng.randrange(60)}S",
            "calories": 150 + rng.randrange(500),
            "distance": float(1000 + rng.randrange(12_000)),
            "heart-rate": {"average": 110 + rng.randrange(40), "maximum": 160 + rng.randrange(30)},
            "sport": "OTHER",
            "detailed-sport-info": SPORTS[rng.randrange(len(SPORTS))],
            "has-route": False,
        }

    def activity(self, person: Person, day: date) -> dict[str, Any]:
        rng = seeded("polar", person.key, day, "activity")
        return {
            "id": 8_000_000 + person.user_id % 1000 * 10_000 + (day.toordinal() % 10_000),
            "date": day.isoformat(),
            "created": f"{day.isoformat()}T23:59:00.000Z",
            "calories": 1800 + rng.randrange(900),
            "active-calories": 300 + rng.randrange(600),
            "duration": f"PT{1 + rng.randrange(3)}H{rng.randrange(60)}M",
            "active-steps": 3000 + rng.randrange(9000),
        }

    def step_samples(self, person: Person, day: date) -> dict[str, Any]:
        rng = seeded("polar", person.key, day, "steps")
        samples = [
            {"steps": rng.randrange(0, 900), "time": f"{hour:02d}:00:00.000"}
            for hour in range(7, 22)
        ]
        return {"interval": 60, "samples": samples}

    def physical(self, person: Person, day: date) -> dict[str, Any]:
        return {
            "id": 9_000_000 + person.user_id % 1000,
            "created": f"{day.isoformat()}T09:00:00.000Z",
            "weight": person.weight,
            "height": person.height,
            "resting-heart-rate": 55,
            "weight-source": "SOURCE_USER",
        }

    def night(self, person: Person, day: date) -> dict[str, Any]:
        rng = seeded("polar", person.key, day, "night")
        start = datetime.combine(day - timedelta(days=1), time(22, rng.randrange(60)), person.tz)
        light, deep, rem = 14_000 + rng.randrange(4000), 4000 + rng.randrange(2000), 5000
        awake = 600 + rng.randrange(900)
        stop = start + timedelta(seconds=light + deep + rem + awake)
        return {
            "polar_user": f"{self.base}/v3/users/{person.user_id}",
            "date": day.isoformat(),
            "sleep_start_time": start.isoformat(),
            "sleep_end_time": stop.isoformat(),
            "light_sleep": light,
            "deep_sleep": deep,
            "rem_sleep": rem,
            "total_interruption_duration": awake,
            "sleep_score": 60 + rng.randrange(35),
        }

    def recharge(self, person: Person, day: date) -> dict[str, Any]:
        rng = seeded("polar", person.key, day, "recharge")
        return {
            "polar_user": f"{self.base}/v3/users/{person.user_id}",
            "date": day.isoformat(),
            "heart_rate_avg": 50 + rng.randrange(15),
            "heart_rate_variability_avg": 25 + rng.randrange(50),
            "breathing_rate_avg": round(12 + rng.random() * 5, 1),
        }

    def unsynced_days(self, person: Person) -> list[date]:
        today = self.today(person)
        return list(days(today - timedelta(days=self.history_days), today - timedelta(days=1)))

    def _records(self, person: Person, kind: str) -> list[str]:
        """The record paths of `kind` not committed yet."""
        _, folder = KINDS[kind]
        unsynced = self.unsynced_days(person)
        if kind == "physical-information-transactions":
            found = [f"{folder}/{self.physical(person, unsynced[0])['id']}"]
        elif kind == "exercise-transactions":
            found = [f"{folder}/{self.exercise(person, d)['id']}" for d in unsynced]
        else:
            found = [f"{folder}/{self.activity(person, d)['id']}" for d in unsynced]
        return [path for path in found if path not in self.committed]

    def _record(self, person: Person, path: str) -> Any:
        """The record at `path` (`exercises/<id>`, `activities/<id>[/step-samples]`...)."""
        for day in self.unsynced_days(person):
            if path == f"exercises/{self.exercise(person, day)['id']}":
                return self.exercise(person, day)
            activity = self.activity(person, day)
            if path == f"activities/{activity['id']}":
                return activity
            if path == f"activities/{activity['id']}/step-samples":
                return self.step_samples(person, day)
        first = self.unsynced_days(person)[0]
        if path == f"physical-information/{self.physical(person, first)['id']}":
            return self.physical(person, first)
        return None

    # -- OAuth ----------------------------------------------------------------------------

    async def authorize(self, request: Request) -> Response:
        query = dict(request.query_params)
        client_id, redirect_uri = query.get("client_id", ""), query.get("redirect_uri", "")
        person = query.get("fake_person", self.default_person)
        if client_id not in self.clients or not redirect_uri or person not in PEOPLE:
            return JSONResponse({"error": "invalid_request"}, status_code=400)
        code = secrets.token_hex(20)
        with self.lock:
            self._codes[code] = {"person": person, "client_id": client_id, "redirect": redirect_uri}
        back = urlencode({"code": code, "state": query.get("state", "")})
        return RedirectResponse(f"{redirect_uri}?{back}", status_code=302)

    def _client(self, request: Request) -> str | None:
        """The client whose HTTP Basic credentials the request carries, if they are right."""
        auth = request.headers.get("authorization", "")
        try:
            pair = base64.b64decode(auth.removeprefix("Basic ")).decode()
            client_id, secret = (unquote_plus(part) for part in pair.split(":", 1))
        except ValueError:
            return None
        if not auth.startswith("Basic ") or self.clients.get(client_id) != secret:
            return None
        return client_id

    async def token(self, request: Request) -> Response:
        form = {k: v[0] for k, v in parse_qs((await request.body()).decode()).items()}
        self.requests.append(("POST", request.url.path, 0))
        client_id = self._client(request)
        if client_id is None:
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        if form.get("grant_type") != "authorization_code":
            return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)
        with self.lock:
            code = self._codes.pop(form.get("code", ""), None)
            if code is None or code["client_id"] != client_id:
                return JSONResponse({"error": "invalid_grant"}, status_code=400)
            if code["redirect"] != form.get("redirect_uri"):
                return JSONResponse({"error": "invalid_grant"}, status_code=400)
            access = secrets.token_hex(20)
            self.issued.append(access)
            self._access[access] = code["person"]
        answer = {
            "access_token": access,
            "token_type": "bearer",
            "expires_in": TEN_YEARS,
            "x_user_id": PEOPLE[code["person"]].user_id,
        }
        return JSONResponse(answer)

    # -- AccessLink -----------------------------------------------------------------------

    def _injected(self, method: str, path: str) -> tuple[_Failure | None, float]:
        with self.lock:
            failure = None
            for candidate in self._failures:
                if candidate.method not in (None, method):
                    continue
                if candidate.path is None or candidate.path in path:
                    failure = candidate
                    candidate.times -= 1
                    if candidate.times <= 0:
                        self._failures.remove(candidate)
                    break
            delay = self._slow.pop(0) if self._slow else 0.0
        return failure, delay

    def _answerer(self, request: Request) -> Callable[[int, Any], Response]:
        """What answers the request, noting it in `requests`."""
        path, method = request.url.path, request.method

        def answer(status: int, body: Any = None) -> Response:
            self.requests.append((method, path, status))
            if body is None:
                return Response(status_code=status)
            return JSONResponse(body, status_code=status)

        return answer

    async def _switched(
        self, request: Request, answer: Callable[[int, Any], Response]
    ) -> Response | None:
        """The answer `fail` injected for the request (after what `slow` asked), if any."""
        failure, delay = self._injected(request.method, request.url.path)
        if delay:
            await anyio.sleep(delay)
        return None if failure is None else answer(failure.status, {"error": "fake"})

    async def api(self, request: Request) -> Response:
        path, method = request.url.path, request.method
        answer = self._answerer(request)
        if (injected := await self._switched(request, answer)) is not None:
            return injected
        token = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        with self.lock:
            person_key = self._access.get(token)
        if person_key is None or person_key in self._revoked:
            return answer(401, {"error": "unauthorized"})
        if person_key in self._no_consent:
            return answer(403, {"error": "consents not accepted"})
        person = PEOPLE[person_key]
        parts = path.removeprefix("/v3/users").strip("/").split("/")
        if method == "POST" and parts == [""]:
            with self.lock:
                if person_key in self._registered:
                    return answer(409, {"error": "registered already"})
                self._registered.add(person_key)
            return answer(200, {"polar-user-id": person.user_id})
        if method == "DELETE" and parts == [str(person.user_id)]:
            # Deregistration: the person's data no longer ours, their tokens refused.
            with self.lock:
                self._registered.discard(person_key)
                self._access = {t: p for t, p in self._access.items() if p != person_key}
                self.deregistered.append(person_key)
            return answer(204, None)
        if parts in (["sleep"], ["nightly-recharge"]):
            today = self.today(person)
            nights = list(days(today - timedelta(days=NIGHTS - 1), today))
            if parts == ["sleep"]:
                return answer(200, {"nights": [self.night(person, d) for d in nights]})
            return answer(200, {"recharges": [self.recharge(person, d) for d in nights]})
        if parts[0] != str(person.user_id) or len(parts) < 2 or parts[1] not in KINDS:
            return answer(404, {"error": "not found"})
        if person_key not in self._registered:
            return answer(404, {"error": "user not registered"})
        return self._transactions(person, parts[1], parts[2:], method, answer)

    def _transactions(
        self,
        person: Person,
        kind: str,
        rest: list[str],
        method: str,
        answer: Callable[[int, Any], Response],
    ) -> Response:
        key = (person.key, kind)
        base = f"{self.base}/v3/users/{person.user_id}/{kind}"
        with self.lock:
            if method == "POST" and not rest:
                records = self._records(person, kind)
                if not records:
                    self._open.pop(key, None)
                    return answer(204, None)
                self._next_transaction += 1
                self._open[key] = (self._next_transaction, records)
                return answer(
                    201,
                    {
                        "transaction-id": self._next_transaction,
                        "resource-uri": f"{base}/{self._next_transaction}",
                    },
                )
            held = self._open.get(key)
            if held is None or not rest or rest[0] != str(held[0]):
                return answer(404, {"error": "no such transaction"})
            transaction_id, records = held
            if method == "PUT" and len(rest) == 1:
                for record in records:
                    self.committed[record] = self.committed.get(record, 0) + 1
                del self._open[key]
                return answer(200, None)
            if method == "GET" and len(rest) == 1:
                listing = KINDS[kind][0]
                return answer(200, {listing: [f"{base}/{transaction_id}/{r}" for r in records]})
            record_path = "/".join(rest[1:])
            if method == "GET" and record_path.split("/step-samples")[0] in records:
                found = self._record(person, record_path)
                if found is not None:
                    return answer(200, found)
        return answer(404, {"error": "not found"})

    # -- the webhook ----------------------------------------------------------------------

    async def webhooks(self, request: Request) -> Response:
        path, method = request.url.path, request.method
        answer = self._answerer(request)
        if (injected := await self._switched(request, answer)) is not None:
            return injected
        if self._client(request) is None:
            return answer(401, {"error": "unauthorized"})
        rest = path.removeprefix("/v3/webhooks").strip("/")
        if method == "GET" and not rest:
            with self.lock:
                unseen = self._unseen_webhook_reads > 0
                self._unseen_webhook_reads -= int(unseen)
            if self.webhook_id is None or unseen:
                return answer(200, {"data": []})
            return answer(200, {"data": [self._webhook_info()]})
        if method == "POST" and not rest:
            return await self._create_webhook(request, answer)
        if method == "POST" and rest in ("activate", "deactivate"):
            if self.webhook_id is None:
                return answer(404, {"error": "no webhook"})
            self.webhook_active = rest == "activate"
            return answer(200, None)
        if rest != self.webhook_id or self.webhook_id is None:
            return answer(404, {"error": "no such webhook"})
        if method == "DELETE":
            self.webhook_id, self.webhook_url, self.webhook_events = None, None, []
            return answer(204, None)
        if method == "PATCH":
            patch = json.loads(await request.body())
            self.webhook_url = patch.get("url", self.webhook_url)
            self.webhook_events = list(patch.get("events", self.webhook_events))
            return answer(200, {"data": self._webhook_info()})
        return answer(405, {"error": "method not allowed"})

    def _webhook_info(self) -> dict[str, Any]:
        return {
            "id": self.webhook_id,
            "events": self.webhook_events,
            "url": self.webhook_url,
            "active": self.webhook_active,
        }

    async def _create_webhook(
        self, request: Request, answer: Callable[[int, Any], Response]
    ) -> Response:
        if self.webhook_id is not None:
            return answer(409, {"error": "webhook already exists"})
        wanted = json.loads(await request.body())
        url, events = wanted.get("url"), wanted.get("events")
        if not isinstance(url, str) or not isinstance(events, list) or not events:
            return answer(400, {"error": "url and events are required"})
        # Polar PINGs the URL, signed with the new key, and creates the webhook only when
        # it answers 200.
        secret = secrets.token_hex(16)
        ping = json.dumps({"timestamp": self.clock().isoformat(), "event": "PING"}).encode()
        headers = {
            "Content-Type": "application/json",
            "Polar-Webhook-Event": "PING",
            "Polar-Webhook-Signature": sign(secret, ping),
        }
        try:
            async with httpx.AsyncClient(timeout=5.0) as client:
                pinged = await client.post(url, content=ping, headers=headers)
        except httpx.HTTPError:
            return answer(400, {"error": "webhook url did not answer the ping"})
        if pinged.status_code != 200:
            return answer(400, {"error": "webhook url did not answer the ping with 200"})
        self.webhook_id = secrets.token_hex(4)
        self.webhook_url, self.webhook_events = url, list(events)
        self.webhook_secret, self.webhook_active = secret, True
        return answer(
            201,
            {
                "data": {
                    "id": self.webhook_id,
                    "events": self.webhook_events,
                    "url": url,
                    "signature_secret_key": secret,
                }
            },
        )


def create_app(fake: FakePolar) -> Starlette:
    return Starlette(
        routes=[
            Route("/polar/authorize", fake.authorize, methods=["GET"]),
            Route("/polar/token", fake.token, methods=["POST"]),
            Route("/v3/webhooks", fake.webhooks, methods=["GET", "POST"]),
            Route("/v3/webhooks/{rest}", fake.webhooks, methods=["POST", "PATCH", "DELETE"]),
            Route("/v3/users", fake.api, methods=["POST"]),
            Route("/v3/users/{rest:path}", fake.api, methods=["GET", "POST", "PUT", "DELETE"]),
        ]
    )


@contextmanager
def running_fake_polar(
    fake: FakePolar | None = None, *, host: str = "127.0.0.1", port: int = 0
) -> Iterator[FakePolar]:
    """Serve a fake Polar with uvicorn in a thread; yields it with its `base` URL set."""
    fake = fake or FakePolar()
    with served(create_app(fake), "the fake Polar", host, port) as base:
        fake.base = base
        yield fake


def main() -> None:  # pragma: no cover - a manual sandbox
    parser = argparse.ArgumentParser(description="A fake Polar AccessLink on localhost.")
    parser.add_argument("--port", type=int, default=8016)
    parser.add_argument("--client-id", default="sandbox-client")
    parser.add_argument("--client-secret", default="sandbox-secret")
    args = parser.parse_args()
    with running_fake_polar(port=args.port) as fake:
        fake.register(args.client_id, args.client_secret)
        print(f"fake Polar at {fake.base} (client {args.client_id}); Ctrl-C to stop")
        with suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":  # pragma: no cover
    main()
