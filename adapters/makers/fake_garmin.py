"""A fake Garmin cloud: a real HTTP server on localhost that serves Garmin's Health API as
documented (docs/makers/garmin.md) for a few synthetic people, its OAuth 2.0 PKCE
endpoints, and that delivers to our webhook as Garmin does, by push or by ping.

- OAuth: `GET {base}/garmin/authorize` (also `/oauth2Confirm`) signs the person in at
  once (`?fake_person=` or `default_person`) and sends the browser back with a code;
  `POST {base}/garmin/token` (also `/di-oauth2-service/oauth/token`) exchanges it (the
  PKCE verifier checked) and refreshes (refresh tokens single use). With
  `HEALTHLEDGER_OAUTH_MAKER_URL={base}` the service's OAuth client uses these.
- The Health API under `/wellness-api/rest/`: `user/id`, `user/permissions`, `DELETE
  user/registration` (the person deregistered: their tokens refused, nothing delivered
  again), `backfill/<type>` (`summaryStartTimeInSeconds`, `summaryEndTimeInSeconds`, at
  most 90 days: 202, 409 for a range asked already, 400 past 90 days), and `<type>`
  (`uploadStartTimeInSeconds`, `uploadEndTimeInSeconds`, at most a day: what a ping's
  `callbackURL` names; the fake's upload time of a summary is its start). With
  `HEALTHLEDGER_GARMIN_API_URL={base}` the Garmin reader uses these.
- Deliveries to `webhook_url` (a POST with `garmin-client-id`: the first registered
  client): `deliver()` sends what the backfills asked for, `synced(person, day)` a day's
  summaries as a device sync would, `deregister(person)` and `withdraw(person)` Garmin's
  deregistration and permission-change notifications. `mode` is "push" (the records) or
  "ping" (callback URLs); a push holds up to `max_post_bytes` of records. With
  `auto_deliver`, a backfill is delivered by a thread `deliver_after` seconds later (the
  sandbox and the benchmark).
- Failure switches: `fail(status, times, path=)` (429 with `Retry-After`, 5xx...),
  `slow(seconds, times)`, `revoke(person)`, `denied` permissions, `expires_in`.

The data is deterministic: a person's day is a function of (person, day), so tests can
compute what the service must answer. Heart rate samples are one a quarter hour (Garmin
sends one every 15 seconds: fewer keeps the fake light, the shape is the same).

Run it alone: `python -m healthledger.adapters.makers.fake_garmin --port 8017`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, timezone
from typing import Any
from urllib.parse import parse_qs, urlencode

import anyio
import httpx
from healthledger.adapters.makers.serving import (
    FailureSwitches,
    days,
    pkce_challenge,
    seeded,
    served,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

API = "/wellness-api/rest"
BACKFILL_DAYS = 90
TYPES = ("dailies", "epochs", "sleeps", "activities", "bodyComps", "hrv")
PERMISSIONS = ("ACTIVITY_EXPORT", "HEALTH_EXPORT", "WORKOUT_IMPORT")
_ACTIVITIES = ("RUNNING", "CYCLING", "WALKING", "LAP_SWIMMING", "STRENGTH_TRAINING", "YOGA")


@dataclass(frozen=True)
class Person:
    """A synthetic Garmin Connect user, at a fixed UTC offset."""

    key: str
    user_id: str  # Garmin's API user id
    offset: int  # seconds east of UTC
    weight: float  # kg

    @property
    def tz(self) -> timezone:
        return timezone(timedelta(seconds=self.offset))


PEOPLE: dict[str, Person] = {
    p.key: p
    for p in (
        Person("kai", "4aacafe8-2f5c-4f3c-9a43-07e1a0b2c001", -7 * 3600, 72.4),
        Person("lena", "4aacafe8-2f5c-4f3c-9a43-07e1a0b2c002", 9 * 3600, 58.1),
        Person("milo", "4aacafe8-2f5c-4f3c-9a43-07e1a0b2c003", 3600, 80.0),
    )
}


def _seconds(moment: datetime) -> int:
    return int(moment.timestamp())


@dataclass
class _Grant:
    person: str
    client_id: str
    expires_at: datetime


@dataclass
class FakeGarmin:
    base: str = ""
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    default_person: str = "kai"
    clients: dict[str, str] = field(default_factory=dict)
    expires_in: int = 86_400  # Garmin's access tokens last a day
    history_days: int = 2 * 365
    denied: set[str] = field(default_factory=set)  # permissions the person unticked
    mode: str = "push"
    # A push holds the records of a window up to this many bytes (under our webhook's
    # 1 MB body limit, HEALTHLEDGER_MAX_BODY_BYTES), as Garmin batches a backfill's.
    max_post_bytes: int = 500_000
    webhook_url: str | None = None
    callback_http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=30.0))
    auto_deliver: bool = False
    # Later than a history pull takes to ask its backfills: a delivery that comes while
    # the pull runs waits for it (a lease) before it is stored.
    deliver_after: float = 5.0
    # What the fake saw: (method, path, query, status), in order; what it POSTed (the
    # bodies kept only with `keep_sent`: a benchmark's two years would weigh on it).
    requests: list[tuple[str, str, dict[str, str], int]] = field(default_factory=list)
    sent: list[tuple[bytes, int]] = field(default_factory=list)
    keep_sent: bool = True
    issued: list[str] = field(default_factory=list)
    deregistered: list[str] = field(default_factory=list)
    # Backfills asked and not delivered yet: (person, type, first, last).
    backfills: list[tuple[str, str, datetime, datetime]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _asked: set[tuple[str, str, int, int]] = field(default_factory=set)
    _codes: dict[str, dict[str, str]] = field(default_factory=dict)
    _access: dict[str, _Grant] = field(default_factory=dict)
    _refresh: dict[str, _Grant] = field(default_factory=dict)
    _revoked: set[str] = field(default_factory=set)
    switches: FailureSwitches = field(default_factory=FailureSwitches)

    # -- switches -----------------------------------------------------------------------

    def register(self, client_id: str, secret: str) -> None:
        self.clients[client_id] = secret

    def fail(
        self,
        status: int,
        times: int = 1,
        *,
        retry_after: str | None = None,
        path: str | None = None,
    ) -> None:
        """The next `times` Health API requests (to a path ending with `path`, if given)
        answer `status`."""
        self.switches.fail(status, times, retry_after=retry_after, path=path)

    def slow(self, seconds: float, times: int = 1) -> None:
        self.switches.slow(seconds, times)

    def revoke(self, person: str) -> None:
        """The person removed the application at Garmin: every token is refused."""
        with self.lock:
            self._revoked.add(person)

    # -- the synthetic data ---------------------------------------------------------------

    def today(self, person: Person) -> date:
        return self.clock().astimezone(person.tz).date()

    def _midnight(self, person: Person, day: date) -> datetime:
        return datetime.combine(day, time(0), person.tz)

    def _summary_id(self, person: Person, kind: str, moment: datetime) -> str:
        return f"x{person.user_id[-4:]}-{kind}-{_seconds(moment):x}"

    def summaries(self, kind: str, person: Person, day: date) -> list[dict[str, Any]]:
        """The person's summaries of `kind` for local `day` (none outside their history)."""
        if not self.today(person) - timedelta(days=self.history_days) <= day <= self.today(person):
            return []
        return {
            "dailies": self.dailies,
            "epochs": self.epochs,
            "sleeps": self.sleeps,
            "activities": self.activities,
            "bodyComps": self.body_comps,
            "hrv": self.hrv,
        }[kind](person, day)

    def dailies(self, person: Person, day: date) -> list[dict[str, Any]]:
        rng = seeded("garmin", person.key, "daily", day)
        start = self._midnight(person, day)
        steps = rng.randint(2_000, 16_000)
        samples = {str(q * 900): rng.randint(52, 128) for q in range(96)}
        return [
            {
                "summaryId": self._summary_id(person, "d", start),
                "calendarDate": day.isoformat(),
                "activityType": "WALKING",
                "activeKilocalories": rng.randint(150, 900),
                "bmrKilocalories": rng.randint(1_400, 1_900),
                "steps": steps,
                "distanceInMeters": round(steps * 0.78, 1),
                "durationInSeconds": 86_400,
                "activeTimeInSeconds": rng.randint(2_000, 12_000),
                "startTimeInSeconds": _seconds(start),
                "startTimeOffsetInSeconds": person.offset,
                "moderateIntensityDurationInSeconds": rng.randint(600, 3_600),
                "vigorousIntensityDurationInSeconds": rng.randint(0, 2_400),
                "floorsClimbed": rng.randint(0, 20),
                "minHeartRateInBeatsPerMinute": min(samples.values()),
                "averageHeartRateInBeatsPerMinute": round(sum(samples.values()) / 96),
                "maxHeartRateInBeatsPerMinute": max(samples.values()),
                "restingHeartRateInBeatsPerMinute": rng.randint(48, 64),
                "timeOffsetHeartRateSamples": samples,
                "averageStressLevel": rng.randint(15, 60),
                "maxStressLevel": rng.randint(60, 99),
            }
        ]

    def epochs(self, person: Person, day: date) -> list[dict[str, Any]]:
        rng = seeded("garmin", person.key, "epochs", day)
        start = self._midnight(person, day)
        found = []
        for quarter in range(96):
            moment = start + timedelta(minutes=15 * quarter)
            awake = 28 <= quarter < 92
            steps = rng.randint(0, 1_400) if awake else 0
            found.append(
                {
                    "summaryId": self._summary_id(person, "e", moment),
                    "activityType": "WALKING" if steps else "SEDENTARY",
                    "activeKilocalories": round(steps * 0.04, 1),
                    "steps": steps,
                    "distanceInMeters": round(steps * 0.78, 1),
                    "durationInSeconds": 900,
                    "activeTimeInSeconds": min(900, steps // 2),
                    "startTimeInSeconds": _seconds(moment),
                    "startTimeOffsetInSeconds": person.offset,
                    "met": 1.0 + round(steps / 400, 2),
                    "intensity": "ACTIVE" if steps > 600 else "SEDENTARY",
                }
            )
        return found

    def _night(self, person: Person, day: date) -> tuple[datetime, int]:
        """The night that ends on the morning of `day`: its start and length asleep."""
        rng = seeded("garmin", person.key, "night", day)
        start = self._midnight(person, day) - timedelta(minutes=rng.randint(60, 180))
        return start, rng.randint(6 * 3600, 9 * 3600)

    def sleeps(self, person: Person, day: date) -> list[dict[str, Any]]:
        rng = seeded("garmin", person.key, "sleep", day)
        start, asleep = self._night(person, day)
        deep = asleep // 5
        rem = asleep // 4
        return [
            {
                "summaryId": self._summary_id(person, "s", start),
                "calendarDate": day.isoformat(),
                "durationInSeconds": asleep,
                "startTimeInSeconds": _seconds(start),
                "startTimeOffsetInSeconds": person.offset,
                "unmeasurableSleepInSeconds": 0,
                "deepSleepDurationInSeconds": deep,
                "lightSleepDurationInSeconds": asleep - deep - rem,
                "remSleepInSeconds": rem,
                "awakeDurationInSeconds": rng.randint(300, 2_400),
                "validation": "ENHANCED_TENTATIVE",
                "overallSleepScore": {"value": rng.randint(55, 95), "qualifierKey": "GOOD"},
            }
        ]

    def activities(self, person: Person, day: date) -> list[dict[str, Any]]:
        rng = seeded("garmin", person.key, "activity", day)
        if rng.random() < 0.35:
            return []
        start = self._midnight(person, day) + timedelta(hours=rng.randint(6, 19))
        lasted = rng.randint(20, 90) * 60
        kind = rng.choice(_ACTIVITIES)
        return [
            {
                "summaryId": str(_number(person.key, day)),
                "activityId": _number(person.key, day),
                "activityName": kind.replace("_", " ").title(),
                "activityType": kind,
                "durationInSeconds": lasted,
                "startTimeInSeconds": _seconds(start),
                "startTimeOffsetInSeconds": person.offset,
                "averageHeartRateInBeatsPerMinute": rng.randint(110, 160),
                "maxHeartRateInBeatsPerMinute": rng.randint(160, 190),
                "activeKilocalories": rng.randint(150, 900),
                "distanceInMeters": round(rng.uniform(0, 20_000), 1),
                "deviceName": "forerunner965",
            }
        ]

    def body_comps(self, person: Person, day: date) -> list[dict[str, Any]]:
        if day.toordinal() % 7:
            return []  # weighed once a week
        rng = seeded("garmin", person.key, "body", day)
        moment = self._midnight(person, day) + timedelta(hours=7, minutes=rng.randint(0, 59))
        return [
            {
                "summaryId": self._summary_id(person, "b", moment),
                "measurementTimeInSeconds": _seconds(moment),
                "measurementTimeOffsetInSeconds": person.offset,
                "weightInGrams": round((person.weight + rng.uniform(-1.5, 1.5)) * 1000),
                "bodyFatInPercent": round(rng.uniform(14, 26), 1),
                "bodyMassIndex": round(rng.uniform(20, 26), 1),
                "muscleMassInGrams": rng.randint(25_000, 35_000),
            }
        ]

    def hrv(self, person: Person, day: date) -> list[dict[str, Any]]:
        rng = seeded("garmin", person.key, "hrv", day)
        start, asleep = self._night(person, day)
        return [
            {
                "summaryId": self._summary_id(person, "h", start),
                "calendarDate": day.isoformat(),
                "lastNightAvg": rng.randint(25, 90),
                "lastNight5MinHigh": rng.randint(90, 140),
                "startTimeInSeconds": _seconds(start),
                "startTimeOffsetInSeconds": person.offset,
                "durationInSeconds": asleep,
            }
        ]

    def between(
        self, kind: str, person: Person, first: datetime, last: datetime
    ) -> list[dict[str, Any]]:
        """The summaries of `kind` starting in [first, last)."""
        low, high = first.astimezone(person.tz).date(), last.astimezone(person.tz).date()
        return [
            record
            for day in days(low - timedelta(days=1), high + timedelta(days=1))
            for record in self.summaries(kind, person, day)
            if first <= datetime.fromtimestamp(_start_of(record), UTC) < last
        ]

    # -- deliveries to our webhook --------------------------------------------------------

    def deliver(self, backfills: int | None = None) -> int:
        """Deliver the backfills asked and not delivered yet (the first `backfills` of
        them, if given); how many POSTs."""
        with self.lock:
            count = len(self.backfills) if backfills is None else backfills
            due, self.backfills = self.backfills[:count], self.backfills[count:]
        posts = 0
        for person, kind, first, last in due:
            if person not in self.deregistered:
                posts += self._send(kind, PEOPLE[person], first, last)
        return posts

    def synced(self, person: str, day: date) -> int:
        """The person's device synced `day`: each type of that day delivered; POSTs sent."""
        member = PEOPLE[person]
        first = self._midnight(member, day) - timedelta(hours=4)
        last = self._midnight(member, day + timedelta(days=1))
        return sum(self._send(kind, member, first, last) for kind in TYPES)

    def _send(self, kind: str, person: Person, first: datetime, last: datetime) -> int:
        if self.mode == "ping":  # a callback a day at most, as Garmin's pull allows
            items: list[dict[str, Any]] = []
            moment = first
            while moment < last:
                upto = min(moment + timedelta(days=1), last)
                times = {
                    "uploadStartTimeInSeconds": _seconds(moment),
                    "uploadEndTimeInSeconds": _seconds(upto),
                }
                items.append(
                    {
                        "userId": person.user_id,
                        **times,
                        "callbackURL": f"{self.base}{API}/{kind}?{urlencode(times)}",
                    }
                )
                moment = upto
            self.post({kind: items})
            return 1
        posts, size = 0, 0
        batch: list[dict[str, Any]] = []
        for record in self.between(kind, person, first, last):
            item = {"userId": person.user_id, **record}
            weight = len(json.dumps(item))
            if batch and size + weight > self.max_post_bytes:
                self.post({kind: batch})
                posts, batch, size = posts + 1, [], 0
            batch.append(item)
            size += weight
        if batch:
            self.post({kind: batch})
            posts += 1
        return posts

    def deregister(self, person: str) -> int:
        """The person removed the application at Garmin Connect: Garmin's notification."""
        self.revoke(person)
        return self.post({"deregistrations": [{"userId": PEOPLE[person].user_id}]})

    def withdraw(self, person: str) -> int:
        """The person unticked every permission: Garmin's permission-change notification."""
        self.denied.update(PERMISSIONS)
        return self.post(
            {
                "userPermissionsChange": [
                    {
                        "userId": PEOPLE[person].user_id,
                        "summaryId": secrets.token_hex(6),
                        "permissions": [],
                        "changeTimeInSeconds": _seconds(self.clock()),
                    }
                ]
            }
        )

    def post(self, body: dict[str, Any] | bytes) -> int:
        """POST a notification as Garmin does (our consumer key in `garmin-client-id`);
        the status answered."""
        assert self.webhook_url is not None
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        client_id = next(iter(self.clients), "")
        status = self.callback_http.post(
            self.webhook_url,
            content=raw,
            headers={"Content-Type": "application/json", "garmin-client-id": client_id},
        ).status_code
        with self.lock:
            self.sent.append((raw if self.keep_sent else b"", status))
        return status

    # -- OAuth ----------------------------------------------------------------------------

    def _issue(self, person: str, client_id: str) -> dict[str, Any]:
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        self.issued += [access, refresh]
        grant = _Grant(person, client_id, self.clock() + timedelta(seconds=self.expires_in))
        self._access[access] = grant
        self._refresh[refresh] = grant
        return {
            "access_token": access,
            "token_type": "bearer",
            "expires_in": self.expires_in,
            "refresh_token": refresh,
            "refresh_token_expires_in": 7_775_998,
        }

    async def authorize(self, request: Request) -> Response:
        query = dict(request.query_params)
        self.requests.append(("GET", request.url.path, {}, 302))
        client_id, redirect_uri = query.get("client_id", ""), query.get("redirect_uri", "")
        if client_id not in self.clients or not redirect_uri:
            return JSONResponse({"error": "invalid_client"}, status_code=400)
        if query.get("response_type") != "code" or query.get("code_challenge_method") != "S256":
            return JSONResponse({"error": "invalid_request"}, status_code=400)
        person = query.get("fake_person", self.default_person)
        if person not in PEOPLE:
            return JSONResponse({"error": "access_denied"}, status_code=400)
        code = secrets.token_urlsafe(16)
        with self.lock:
            self._codes[code] = {
                "person": person,
                "client_id": client_id,
                "redirect_uri": redirect_uri,
                "challenge": query.get("code_challenge", ""),
            }
            self._revoked.discard(person)
            if person in self.deregistered:
                self.deregistered.remove(person)
        back = urlencode({"code": code, "state": query.get("state", "")})
        return RedirectResponse(f"{redirect_uri}?{back}", status_code=302)

    async def token(self, request: Request) -> Response:
        form = {k: v[0] for k, v in parse_qs((await request.body()).decode()).items()}
        client_id, secret = form.get("client_id"), form.get("client_secret")
        grant_type = form.get("grant_type", "")

        def answer(body: dict[str, Any], status: int = 200) -> Response:
            self.requests.append(("POST", request.url.path, {"grant_type": grant_type}, status))
            return JSONResponse(body, status_code=status)

        if client_id is None or self.clients.get(client_id) != secret:
            return answer({"error": "invalid_client"}, 401)
        with self.lock:
            if grant_type == "authorization_code":
                code = self._codes.pop(form.get("code", ""), None)  # used once
                if (
                    code is None
                    or code["client_id"] != client_id
                    or code["redirect_uri"] != form.get("redirect_uri")
                    or pkce_challenge(form.get("code_verifier", "")) != code["challenge"]
                ):
                    return answer({"error": "invalid_grant"}, 400)
                return answer(self._issue(code["person"], client_id))
            if grant_type == "refresh_token":
                held = self._refresh.pop(form.get("refresh_token", ""), None)  # single use
                if held is None or held.client_id != client_id or held.person in self._revoked:
                    return answer({"error": "invalid_grant"}, 400)
                return answer(self._issue(held.person, client_id))
        return answer({"error": "unsupported_grant_type"}, 400)

    # -- the Health API -------------------------------------------------------------------

    def _grant_of(self, request: Request) -> tuple[str, _Grant] | None:
        token = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        with self.lock:
            grant = self._access.get(token)
        if grant is None or grant.person in self._revoked or grant.expires_at <= self.clock():
            return None
        return token, grant

    async def api(self, request: Request) -> Response:
        path, method = request.url.path, request.method
        query = dict(request.query_params)

        def answer(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
            self.requests.append((method, path, query, status))
            if body is None:
                return Response(status_code=status, headers=headers)
            return JSONResponse(body, status_code=status, headers=headers)

        failure, delay = self.switches.injected(path)
        if delay:
            await anyio.sleep(delay)
        if failure is not None:
            headers = {"Retry-After": failure.retry_after} if failure.retry_after else None
            return answer({"errorMessage": "error"}, failure.status, headers)
        found = self._grant_of(request)
        if found is None:
            return answer({"errorMessage": "Unauthorized"}, 401)
        _, grant = found
        person = PEOPLE[grant.person]
        name = path.removeprefix(f"{API}/")
        if name == "user/id":
            return answer({"userId": person.user_id})
        if name == "user/permissions":
            return answer([p for p in PERMISSIONS if p not in self.denied])
        if name == "user/registration" and method == "DELETE":
            with self.lock:
                self._access = {k: g for k, g in self._access.items() if g.person != grant.person}
                self._refresh = {k: g for k, g in self._refresh.items() if g.person != grant.person}
                self.deregistered.append(grant.person)
            return answer(None, 204)
        backfill = name.startswith("backfill/")
        kind = name.removeprefix("backfill/")
        if kind not in TYPES or method != "GET":
            return answer({"errorMessage": "Not Found"}, 404)
        prefix = "summary" if backfill else "upload"
        try:
            first = datetime.fromtimestamp(int(query[f"{prefix}StartTimeInSeconds"]), UTC)
            last = datetime.fromtimestamp(int(query[f"{prefix}EndTimeInSeconds"]), UTC)
        except (KeyError, ValueError, OverflowError, OSError):
            return answer({"errorMessage": "invalid time range"}, 400)
        longest = timedelta(days=BACKFILL_DAYS) if backfill else timedelta(days=1)
        if not first < last or last - first > longest:
            return answer({"errorMessage": "invalid time range"}, 400)
        if not backfill:
            return answer(self.between(kind, person, first, last))
        asked = (grant.person, kind, _seconds(first), _seconds(last))
        with self.lock:
            if asked in self._asked:
                return answer({"errorMessage": "Duplicate backfill"}, 409)
            self._asked.add(asked)
            self.backfills.append((grant.person, kind, first, last))
        if self.auto_deliver and self.webhook_url is not None:
            threading.Timer(self.deliver_after, self.deliver).start()
        return answer(None, 202)


def _number(*parts: object) -> int:
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=5).digest()
    return int.from_bytes(digest, "big")


def _start_of(record: dict[str, Any]) -> int:
    value = record.get("startTimeInSeconds", record.get("measurementTimeInSeconds"))
    assert isinstance(value, int)
    return value


def create_app(fake: FakeGarmin) -> Starlette:
    return Starlette(
        routes=[
            Route("/garmin/authorize", fake.authorize, methods=["GET"]),
            Route("/oauth2Confirm", fake.authorize, methods=["GET"]),
            Route("/garmin/token", fake.token, methods=["POST"]),
            Route("/di-oauth2-service/oauth/token", fake.token, methods=["POST"]),
            Route(f"{API}/{{name:path}}", fake.api, methods=["GET", "DELETE"]),
        ]
    )


@contextmanager
def running_fake_garmin(
    fake: FakeGarmin | None = None, *, host: str = "127.0.0.1", port: int = 0
) -> Iterator[FakeGarmin]:
    """Serve a fake Garmin with uvicorn in a thread; yields it with its `base` URL set."""
    fake = fake or FakeGarmin(auto_deliver=True)
    with served(create_app(fake), "the fake Garmin", host, port) as base:
        fake.base = base
        yield fake


def main() -> None:  # pragma: no cover - a manual sandbox
    parser = argparse.ArgumentParser(description="A fake Garmin cloud on localhost.")
    parser.add_argument("--port", type=int, default=8017)
    parser.add_argument("--client-id", default="sandbox-client")
    parser.add_argument("--client-secret", default="sandbox-secret")
    parser.add_argument("--webhook-url", default=None)
    args = parser.parse_args()
    with running_fake_garmin(
        FakeGarmin(auto_deliver=True, webhook_url=args.webhook_url), port=args.port
    ) as fake:
        fake.register(args.client_id, args.client_secret)
        print(f"fake Garmin at {fake.base} (client {args.client_id}); Ctrl-C to stop")
        with suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":  # pragma: no cover
    main()
