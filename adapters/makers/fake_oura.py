"""A fake Oura cloud: a real HTTP server on localhost that serves Oura's API v2 as
documented (docs/makers/oura.md) for a few synthetic people, and its OAuth 2.0 endpoints.

- OAuth: `GET {base}/oura/authorize` (also `/oauth/authorize`) signs the person in at once
  (no consent screen: the person is `?fake_person=` or `default_person`) and sends the
  browser back with a code; `POST {base}/oura/token` (also `/oauth/token`) exchanges it
  (client secret in the body or Basic, redirect_uri and PKCE S256 checked, a code used
  once) and refreshes (refresh tokens are single use, as Oura's are). With
  `HEALTHLEDGER_OAUTH_MAKER_URL={base}` the service's OAuth client uses these endpoints.
  `GET {base}/oauth/revoke?access_token=` revokes a grant (`revoked` lists the tokens).
- Data: `GET {base}/v2/usercollection/<collection>` with `start_date`/`end_date` (days) or,
  for `heartrate`, `start_datetime`/`end_datetime`, answered as Oura answers:
  `{"data": [...], "next_token": ...}`, a page at a time; `personal_info` is one document.
  With `HEALTHLEDGER_OURA_API_URL={base}` the Oura reader reads here.
- Bearer tokens expire (`expires_in`, by the fake's clock); a revoked person's tokens and
  refresh tokens are refused (401).
- Switches to inject failures: `fail(status, times, retry_after=...)` (429 with or without
  Retry-After, 5xx), `slow(seconds, times)` (an answer that takes longer than the
  client's timeout), `revoke(person)`, `revise(person, day)` (a record re-sent changed,
  under the same id).
- Webhooks (`webhooks`, adapters/makers/fake_oura_webhooks.py): subscriptions at
  `{base}/v2/webhook/subscription` with the handshake, and signed notifications sent
  when a person's data is revised (`revise`) or access revoked (`revoke`).

The data is deterministic: a person's day is a function of (person, day) and of the
revisions asked for, so tests can compute what the service must answer.

Run it alone: `python -m healthledger.adapters.makers.fake_oura --port 8010`.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import random
import secrets
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, timezone
from typing import Any
from urllib.parse import parse_qs, unquote_plus, urlencode

import anyio
from healthledger.adapters.makers.fake_oura_webhooks import FakeOuraWebhooks
from healthledger.adapters.makers.serving import days as _days
from healthledger.adapters.makers.serving import seeded as _rng
from healthledger.adapters.makers.serving import served
from healthledger.adapters.providers.oura_webhooks import REVOKE
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

# Page sizes of the fake (Oura does not publish its own: docs/makers/oura.md). Small
# enough that a week's window spans several pages of every collection.
DAILY_PAGE_SIZE = 3
HEARTRATE_PAGE_SIZE = 500
# Heart rate: a sample every 5 minutes while the ring is worn.
HEARTRATE_INTERVAL = timedelta(minutes=5)

_COLLECTIONS = frozenset(
    {"sleep", "daily_sleep", "daily_activity", "daily_readiness", "daily_spo2", "workout"}
)
# The scope each collection needs (Oura's documented scopes).
SCOPE_OF = {
    "heartrate": "heartrate",
    "workout": "workout",
    "personal_info": "personal",
    "daily_spo2": "spo2Daily",
}
_NAMESPACE = uuid.UUID("0b7f6c2e-3c55-4c36-9d43-6d1f7f0a2b11")
_SPORTS = ("walking", "running", "cycling", "strengthTraining", "yoga")
# sleep_phase_5_min digits: 1 deep, 2 light, 3 REM, 4 awake.
_PHASES = "1234"


@dataclass(frozen=True)
class Person:
    """A synthetic Oura user."""

    key: str
    offset_hours: int
    age: int
    weight: float
    height: float  # metres, as personal_info gives it
    biological_sex: str

    @property
    def tz(self) -> timezone:
        return timezone(timedelta(hours=self.offset_hours))

    @property
    def user_id(self) -> str:
        return str(uuid.uuid5(_NAMESPACE, f"user/{self.key}"))


PEOPLE: dict[str, Person] = {
    p.key: p
    for p in (
        Person("ava", 2, 34, 61.5, 1.68, "female"),
        Person("ben", -5, 41, 82.0, 1.83, "male"),
        Person("chloe", 9, 27, 57.0, 1.61, "female"),
    )
}


def _doc_id(*parts: object) -> str:
    return str(uuid.uuid5(_NAMESPACE, "/".join(map(str, parts))))


@dataclass
class _Failure:
    status: int
    times: int
    retry_after: str | None
    path: str | None


@dataclass
class _Grant:
    person: str
    client_id: str
    scope: str
    expires_at: datetime | None


@dataclass
class FakeOura:
    base: str = ""
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    default_person: str = "ava"
    # client id -> secret: the API applications registered at Oura.
    clients: dict[str, str] = field(default_factory=dict)
    expires_in: int = 86400
    daily_page_size: int = DAILY_PAGE_SIZE
    heartrate_page_size: int = HEARTRATE_PAGE_SIZE
    # Scopes the person unticks on Oura's consent screen (granted: the others asked).
    denied_scopes: set[str] = field(default_factory=set)
    # How far back a person's ring has data, from the fake's today.
    history_days: int = 2 * 365
    # What the fake saw: (method, path, query, status), in order.
    requests: list[tuple[str, str, dict[str, str], int]] = field(default_factory=list)
    issued: list[str] = field(default_factory=list)
    # Access tokens revoked by the application (`GET /oauth/revoke`), in order: their
    # grant (its refresh token too) is refused from then on.
    revoked: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _codes: dict[str, dict[str, str]] = field(default_factory=dict)
    _access: dict[str, _Grant] = field(default_factory=dict)
    _refresh: dict[str, _Grant] = field(default_factory=dict)
    _revoked: set[str] = field(default_factory=set)
    _failures: list[_Failure] = field(default_factory=list)
    _slow: list[float] = field(default_factory=list)
    _revisions: dict[tuple[str, date], int] = field(default_factory=dict)
    # Webhook subscriptions and notifications (set up in __post_init__: shares the clients).
    webhooks: FakeOuraWebhooks = field(init=False)

    def __post_init__(self) -> None:
        self.webhooks = FakeOuraWebhooks(clock=self.clock, clients=self.clients)

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
        """The next `times` data requests (to `path`'s collection, if given) answer
        `status` (429 with `Retry-After: retry_after` when given, 5xx...)."""
        with self.lock:
            self._failures.append(_Failure(status, times, retry_after, path))

    def slow(self, seconds: float, times: int = 1) -> None:
        """The next `times` data requests wait `seconds` before answering."""
        with self.lock:
            self._slow.extend([seconds] * times)

    def revoke(self, person: str) -> None:
        """The person revoked the application's access at Oura: every token is refused."""
        with self.lock:
            self._revoked.add(person)
        self.webhooks.notify(PEOPLE[person].user_id, "user", REVOKE)

    def restore(self, person: str) -> None:
        """The person allows the application again: new sign-ins work (old tokens stay
        revoked: they were issued before)."""
        with self.lock:
            self._revoked.discard(person)
            self._access = {k: g for k, g in self._access.items() if g.person != person}
            self._refresh = {k: g for k, g in self._refresh.items() if g.person != person}

    def revise(self, person: str, day: date) -> None:
        """The person's records of `day` are sent again changed (same ids, new values)."""
        with self.lock:
            self._revisions[(person, day)] = self._revisions.get((person, day), 0) + 1
        if not self.webhooks.subscriptions:
            return
        # Oura tells the subscribers of each of the day's data types, as it changed.
        for data_type in sorted(_COLLECTIONS):
            documents = self.collection(data_type, PEOPLE[person], day)
            object_id = str(documents[0]["id"]) if documents and "id" in documents[0] else None
            self.webhooks.notify(PEOPLE[person].user_id, data_type, "update", object_id)

    def data_requests(self, collection: str | None = None) -> list[dict[str, str]]:
        prefix = "/v2/usercollection/" + (collection or "")
        return [q for m, p, q, s in self.requests if p.startswith(prefix) and s == 200]

    # -- the synthetic data ---------------------------------------------------------------

    def today(self, person: Person) -> date:
        return self.clock().astimezone(person.tz).date()

    def _first_day(self, person: Person) -> date:
        return self.today(person) - timedelta(days=self.history_days)

    def _revision(self, person: Person, day: date) -> int:
        return self._revisions.get((person.key, day), 0)

    def sleeps(self, person: Person, day: date) -> list[dict[str, Any]]:
        """The sleep periods whose `day` is `day` (the night that ends that morning; a nap
        on some days)."""
        if day < self._first_day(person):
            return []
        rng = _rng(person.key, "sleep", day, self._revision(person, day))
        tz = person.tz
        start = datetime.combine(day - timedelta(days=1), time(22, 0), tz) + timedelta(
            minutes=5 * rng.randint(0, 30)
        )
        slots = rng.randint(78, 108)  # 6.5 to 9 hours, in 5 minutes
        documents = [self._sleep(person, day, rng, start, slots, "long_sleep", 0)]
        if rng.random() < 0.3:
            nap = datetime.combine(day, time(14, 0), tz) + timedelta(minutes=5 * rng.randint(0, 24))
            documents.append(self._sleep(person, day, rng, nap, rng.randint(4, 12), "late_nap", 1))
        now = self.clock()
        return [d for d in documents if datetime.fromisoformat(d["bedtime_end"]) <= now]

    def _sleep(
        self,
        person: Person,
        day: date,
        rng: random.Random,
        start: datetime,
        slots: int,
        kind: str,
        period: int,
    ) -> dict[str, Any]:
        phases, phase = [], "4"
        for index in range(slots):
            if index % rng.randint(3, 7) == 0:
                phase = rng.choices(_PHASES, weights=(20, 50, 22, 8))[0]
            phases.append(phase)
        phases[0] = phases[-1] = "4"
        hypnogram = "".join(phases)
        seconds = {p: 300 * hypnogram.count(p) for p in _PHASES}
        in_bed = 300 * slots
        heart = [rng.randint(44, 62) if rng.random() > 0.05 else None for _ in range(slots)]
        hrv = [rng.randint(20, 95) if rng.random() > 0.05 else None for _ in range(slots)]
        beats = [b for b in heart if b is not None]
        variability = [v for v in hrv if v is not None]
        iso = start.isoformat(timespec="seconds")
        return {
            "id": _doc_id(person.key, "sleep", day, period),
            "average_breath": round(rng.uniform(12.0, 17.0), 3),
            "average_heart_rate": round(sum(beats) / len(beats), 3),
            "average_hrv": round(sum(variability) / len(variability)),
            "awake_time": seconds["4"],
            "bedtime_end": (start + timedelta(seconds=in_bed)).isoformat(timespec="seconds"),
            "bedtime_start": iso,
            "day": day.isoformat(),
            "deep_sleep_duration": seconds["1"],
            "efficiency": round(100 * (in_bed - seconds["4"]) / in_bed),
            "heart_rate": {"interval": 300.0, "items": heart, "timestamp": iso},
            "hrv": {"interval": 300.0, "items": hrv, "timestamp": iso},
            "latency": 300 * rng.randint(1, 6),
            "light_sleep_duration": seconds["2"],
            "low_battery_alert": False,
            "lowest_heart_rate": min(beats),
            "movement_30_sec": None,
            "period": period,
            "readiness": {
                "contributors": {"body_temperature": rng.randint(60, 100)},
                "score": rng.randint(55, 95),
                "temperature_deviation": round(rng.uniform(-0.6, 0.6), 2),
                "temperature_trend_deviation": round(rng.uniform(-0.3, 0.3), 2),
            }
            if kind == "long_sleep"
            else None,
            "readiness_score_delta": None,
            "rem_sleep_duration": seconds["3"],
            "restless_periods": rng.randint(80, 400),
            "sleep_phase_5_min": hypnogram,
            "sleep_score_delta": None,
            "time_in_bed": in_bed,
            "total_sleep_duration": in_bed - seconds["4"],
            "type": kind,
        }

    def _daily_done(self, person: Person, day: date) -> bool:
        """A daily document exists once its day has begun and is in the ring's history."""
        return self._first_day(person) <= day <= self.today(person)

    def daily_sleep(self, person: Person, day: date) -> list[dict[str, Any]]:
        if not self.sleeps(person, day):
            return []
        rng = _rng(person.key, "daily_sleep", day, self._revision(person, day))
        return [
            {
                "id": _doc_id(person.key, "daily_sleep", day),
                "contributors": {"deep_sleep": rng.randint(40, 100)},
                "day": day.isoformat(),
                "score": rng.randint(55, 95),
                "timestamp": datetime.combine(day, time(0), person.tz).isoformat(),
            }
        ]

    def daily_readiness(self, person: Person, day: date) -> list[dict[str, Any]]:
        long = [s for s in self.sleeps(person, day) if s["type"] == "long_sleep"]
        if not long:
            return []
        readiness = long[0]["readiness"]
        return [
            {
                "id": _doc_id(person.key, "daily_readiness", day),
                "contributors": readiness["contributors"],
                "day": day.isoformat(),
                "score": readiness["score"],
                "temperature_deviation": readiness["temperature_deviation"],
                "temperature_trend_deviation": readiness["temperature_trend_deviation"],
                "timestamp": datetime.combine(day, time(0), person.tz).isoformat(),
            }
        ]

    def daily_activity(self, person: Person, day: date) -> list[dict[str, Any]]:
        if not self._daily_done(person, day):
            return []
        rng = _rng(person.key, "activity", day, self._revision(person, day))
        steps = rng.randint(2500, 16000)
        active = round(steps * 0.04 + rng.randint(0, 150))
        return [
            {
                "id": _doc_id(person.key, "daily_activity", day),
                "active_calories": active,
                "average_met_minutes": round(rng.uniform(1.2, 2.2), 3),
                "contributors": {"meet_daily_targets": rng.randint(40, 100)},
                "equivalent_walking_distance": round(steps * 0.76),
                "high_activity_met_minutes": rng.randint(0, 90),
                "high_activity_time": 60 * rng.randint(0, 45),
                "inactivity_alerts": rng.randint(0, 3),
                "low_activity_met_minutes": rng.randint(60, 300),
                "low_activity_time": 60 * rng.randint(120, 300),
                "medium_activity_met_minutes": rng.randint(20, 150),
                "medium_activity_time": 60 * rng.randint(15, 90),
                "met": {"interval": 60.0, "items": [], "timestamp": f"{day}T04:00:00"},
                "meters_to_target": rng.randint(-2000, 6000),
                "non_wear_time": 60 * rng.randint(0, 90),
                "resting_time": 60 * rng.randint(300, 540),
                "score": rng.randint(50, 99),
                "sedentary_met_minutes": rng.randint(5, 20),
                "sedentary_time": 60 * rng.randint(300, 600),
                "steps": steps,
                "target_calories": 500,
                "target_meters": 10000,
                "total_calories": 1700 + active,
                "day": day.isoformat(),
                "timestamp": datetime.combine(day, time(4, 0), person.tz).isoformat(),
            }
        ]

    def workouts(self, person: Person, day: date) -> list[dict[str, Any]]:
        if not self._daily_done(person, day):
            return []
        rng = _rng(person.key, "workout", day, self._revision(person, day))
        found = []
        for number in range(rng.choice((0, 1, 1, 2))):
            start = datetime.combine(day, time(7 + 9 * number), person.tz) + timedelta(
                minutes=rng.randint(0, 180)
            )
            end = start + timedelta(minutes=rng.randint(20, 90))
            if end > self.clock():
                continue
            activity = rng.choice(_SPORTS)
            found.append(
                {
                    "id": _doc_id(person.key, "workout", day, number),
                    "activity": activity,
                    "calories": round(rng.uniform(90, 700), 1),
                    "day": day.isoformat(),
                    "distance": None if activity == "yoga" else round(rng.uniform(800, 14000), 1),
                    "end_datetime": end.isoformat(timespec="seconds"),
                    "intensity": rng.choice(("easy", "moderate", "hard")),
                    "label": None,
                    "source": rng.choice(("manual", "autodetected", "confirmed")),
                    "start_datetime": start.isoformat(timespec="seconds"),
                }
            )
        return found

    def daily_spo2(self, person: Person, day: date) -> list[dict[str, Any]]:
        if not self.sleeps(person, day):
            return []
        rng = _rng(person.key, "spo2", day, self._revision(person, day))
        return [
            {
                "id": _doc_id(person.key, "daily_spo2", day),
                "day": day.isoformat(),
                "spo2_percentage": {"average": round(rng.uniform(94.5, 99.0), 3)},
                "breathing_disturbance_index": rng.randint(0, 12),
            }
        ]

    def heartrate(self, person: Person, start: datetime, end: datetime) -> list[dict[str, Any]]:
        """Samples in [start, end), every 5 minutes (UTC days), the ring off to charge
        for an hour a day."""
        now = self.clock()
        first = max(start.astimezone(UTC).date(), self._first_day(person))
        samples: list[dict[str, Any]] = []
        for day in _days(first, end.astimezone(UTC).date()):
            rng = _rng(person.key, "heartrate", day, self._revision(person, day))
            charging = rng.randint(8, 20)
            moment = datetime.combine(day, time(0), UTC)
            drift = 0.0
            while moment.date() == day:
                drift = 0.85 * drift + rng.gauss(0, 2.5)
                local_hour = moment.astimezone(person.tz).hour
                asleep = local_hour >= 23 or local_hour < 7
                if start <= moment < end and moment <= now and moment.hour != charging:
                    samples.append(
                        {
                            "bpm": max(40, round((54 if asleep else 72) + drift)),
                            "source": "sleep" if asleep else "awake",
                            "timestamp": moment.isoformat(),
                        }
                    )
                moment += HEARTRATE_INTERVAL
        return samples

    def personal_info(self, person: Person) -> dict[str, Any]:
        return {
            "id": person.user_id,
            "age": person.age,
            "weight": person.weight,
            "height": person.height,
            "biological_sex": person.biological_sex,
            "email": f"{person.key}@example.com",
        }

    def collection(self, name: str, person: Person, day: date) -> list[dict[str, Any]]:
        builders: dict[str, Callable[[Person, date], list[dict[str, Any]]]] = {
            "sleep": self.sleeps,
            "daily_sleep": self.daily_sleep,
            "daily_activity": self.daily_activity,
            "daily_readiness": self.daily_readiness,
            "daily_spo2": self.daily_spo2,
            "workout": self.workouts,
        }
        return builders[name](person, day)

    # -- OAuth ------------------------------------------------------------------------------

    def _issue(self, grant: _Grant) -> dict[str, Any]:
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        self.issued += [access, refresh]
        live = _Grant(
            grant.person,
            grant.client_id,
            grant.scope,
            self.clock() + timedelta(seconds=self.expires_in),
        )
        self._access[access] = live
        self._refresh[refresh] = live
        return {
            "token_type": "bearer",
            "access_token": access,
            "expires_in": self.expires_in,
            "refresh_token": refresh,
            "scope": grant.scope,
        }

    async def authorize(self, request: Request) -> Response:
        query = dict(request.query_params)
        self.requests.append(("GET", request.url.path, {}, 302))
        client_id, redirect_uri = query.get("client_id", ""), query.get("redirect_uri", "")
        if client_id not in self.clients or not redirect_uri:
            return JSONResponse({"status": 400, "title": "Invalid client"}, status_code=400)
        if query.get("response_type") != "code":
            return JSONResponse({"status": 400, "title": "Unsupported response"}, 400)
        person = query.get("fake_person", self.default_person)
        if person not in PEOPLE:
            return JSONResponse({"status": 400, "title": "No such person"}, status_code=400)
        code = secrets.token_urlsafe(16)
        with self.lock:
            self._codes[code] = {
                "person": person,
                "client_id": client_id,
                "redirect_uri": redirect_uri,
                "challenge": query.get("code_challenge", ""),
                "scope": " ".join(
                    s for s in query.get("scope", "").split() if s not in self.denied_scopes
                ),
            }
        back = urlencode({"code": code, "state": query.get("state", "")})
        return RedirectResponse(f"{redirect_uri}?{back}", status_code=302)

    async def token(self, request: Request) -> Response:
        form = {k: v[0] for k, v in parse_qs((await request.body()).decode()).items()}
        client_id, secret = form.get("client_id"), form.get("client_secret")
        header = request.headers.get("authorization", "")
        if header.startswith("Basic "):
            pair = base64.b64decode(header.removeprefix("Basic ")).decode()
            client_id, _, secret = (unquote_plus(part) for part in pair.partition(":"))
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
                    or _challenge(form.get("code_verifier", "")) != code["challenge"]
                ):
                    return answer({"error": "invalid_grant"}, 400)
                return answer(self._issue(_Grant(code["person"], client_id, code["scope"], None)))
            if grant_type == "refresh_token":
                held = self._refresh.pop(form.get("refresh_token", ""), None)  # single use
                if held is None or held.client_id != client_id or held.person in self._revoked:
                    return answer({"error": "invalid_grant"}, 400)
                return answer(self._issue(held))
        return answer({"error": "unsupported_grant_type"}, 400)

    async def revoke_grant(self, request: Request) -> Response:
        """Oura's revocation: `GET /oauth/revoke?access_token=...` ends the grant the
        access token belongs to (its refresh token with it). A `fail(..., path="revoke")`
        answers it too (Oura down)."""
        failure, _ = self._injected(request.url.path)
        token = request.query_params.get("access_token", "")
        if failure is not None:
            status = failure.status
        else:
            with self.lock:
                grant = self._access.pop(token, None)
                if grant is not None:
                    self._refresh = {k: g for k, g in self._refresh.items() if g is not grant}
                    self.revoked.append(token)
            status = 200 if grant is not None else 401
        self.requests.append(("GET", request.url.path, {}, status))
        return JSONResponse({} if status == 200 else {"status": status}, status_code=status)

    # -- the data API -----------------------------------------------------------------------

    def _injected(self, path: str) -> tuple[_Failure | None, float]:
        with self.lock:
            failure = None
            for candidate in self._failures:
                if candidate.path is None or path.endswith("/" + candidate.path):
                    failure = candidate
                    candidate.times -= 1
                    if candidate.times <= 0:
                        self._failures.remove(candidate)
                    break
            delay = self._slow.pop(0) if self._slow else 0.0
        return failure, delay

    async def data(self, request: Request) -> Response:
        path = request.url.path
        query = dict(request.query_params)

        def answer(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
            self.requests.append(("GET", path, query, status))
            return JSONResponse(body, status_code=status, headers=headers)

        failure, delay = self._injected(path)
        if delay:
            # A slow answer: the client's timeout is what this tests (a thread of uvicorn's
            # loop would block every other request, so sleep off the loop).
            await anyio.sleep(delay)
        if failure is not None:
            headers = {"Retry-After": failure.retry_after} if failure.retry_after else None
            title = "Request Rate Limit Exceeded" if failure.status == 429 else "Server error"
            return answer({"status": failure.status, "title": title}, failure.status, headers)
        token = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        with self.lock:
            grant = self._access.get(token)
        if grant is None or grant.person in self._revoked:
            return answer({"status": 401, "title": "Invalid Access token"}, 401)
        if grant.expires_at is not None and grant.expires_at <= self.clock():
            return answer({"status": 401, "title": "Expired Token"}, 401)
        person = PEOPLE[grant.person]
        name = request.path_params["collection"]
        if SCOPE_OF.get(name, "daily") not in grant.scope.split():
            return answer({"status": 401, "title": "Missing Scopes"}, 401)
        if name == "personal_info":
            return answer(self.personal_info(person))
        try:
            if name == "heartrate":
                start = _instant(query["start_datetime"])
                end = _instant(query["end_datetime"])
                documents = self.heartrate(person, start, end)
                size = self.heartrate_page_size
            else:
                first = date.fromisoformat(query["start_date"])
                last = date.fromisoformat(query.get("end_date") or self.today(person).isoformat())
                if name not in _COLLECTIONS:
                    return answer({"status": 404, "title": "Not Found"}, 404)
                documents = [
                    d for day in _days(first, last) for d in self.collection(name, person, day)
                ]
                size = self.daily_page_size
        except (KeyError, ValueError):
            return answer({"detail": [{"msg": "invalid query"}]}, 400)
        offset = _offset(query.get("next_token"), query)
        if offset is None:
            return answer({"status": 400, "title": "Invalid next_token"}, 400)
        page = documents[offset : offset + size]
        following = offset + size if offset + size < len(documents) else None
        return answer({"data": page, "next_token": _token(following, query)})


def _instant(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _fingerprint(query: dict[str, str]) -> str:
    kept = {k: v for k, v in sorted(query.items()) if k != "next_token"}
    return hashlib.sha256(json.dumps(kept).encode()).hexdigest()[:16]


def _token(offset: int | None, query: dict[str, str]) -> str | None:
    """An opaque cursor, valid only with the same query (as a maker's is)."""
    if offset is None:
        return None
    raw = f"{offset}:{_fingerprint(query)}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _offset(token: str | None, query: dict[str, str]) -> int | None:
    if not token:
        return 0
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        offset, fingerprint = raw.split(":")
        return int(offset) if fingerprint == _fingerprint(query) else None
    except ValueError:
        return None


def _challenge(verifier: str) -> str:
    """RFC 7636 S256."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def create_app(fake: FakeOura) -> Starlette:
    return Starlette(
        routes=[
            Route("/oura/authorize", fake.authorize, methods=["GET"]),
            Route("/oauth/authorize", fake.authorize, methods=["GET"]),
            Route("/oura/token", fake.token, methods=["POST"]),
            Route("/oauth/token", fake.token, methods=["POST"]),
            Route("/oauth/revoke", fake.revoke_grant, methods=["GET"]),
            Route("/v2/usercollection/{collection}", fake.data, methods=["GET"]),
            Route("/v2/webhook/subscription", fake.webhooks.create, methods=["POST"]),
            Route("/v2/webhook/subscription", fake.webhooks.listing, methods=["GET"]),
            Route("/v2/webhook/subscription/renew/{id}", fake.webhooks.renew, methods=["PUT"]),
            Route("/v2/webhook/subscription/{id}", fake.webhooks.delete, methods=["DELETE"]),
        ]
    )


@contextmanager
def running_fake_oura(
    fake: FakeOura | None = None, *, host: str = "127.0.0.1", port: int = 0
) -> Iterator[FakeOura]:
    """Serve a fake Oura with uvicorn in a thread; yields it with its `base` URL set."""
    fake = fake or FakeOura()
    with served(create_app(fake), "the fake Oura", host, port) as base:
        fake.base = base
        yield fake


def main() -> None:  # pragma: no cover - a manual sandbox
    parser = argparse.ArgumentParser(description="A fake Oura cloud on localhost.")
    parser.add_argument("--port", type=int, default=8010)
    parser.add_argument("--client-id", default="sandbox-client")
    parser.add_argument("--client-secret", default="sandbox-secret")
    args = parser.parse_args()
    with running_fake_oura(port=args.port) as fake:
        fake.register(args.client_id, args.client_secret)
        print(f"fake Oura at {fake.base} (client {args.client_id}); Ctrl-C to stop")
        with suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":  # pragma: no cover
    main()
