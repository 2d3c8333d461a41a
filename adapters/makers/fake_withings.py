"""A fake Withings cloud: a real HTTP server on localhost that serves the Withings Public
API as documented (docs/makers/withings.md) for a few synthetic people, and its OAuth 2.0
endpoints.

- OAuth: `GET {base}/withings/authorize` (also `/oauth2_user/authorize2`) signs the
  person in at once (no consent screen: the person is `?fake_person=` or
  `default_person`) and sends the browser back with a code; `POST {base}/withings/token`
  (also `/v2/oauth2`) with `action=requesttoken` exchanges it and refreshes, answering as
  Withings does: `{"status": 0, "body": {"userid", "access_token", "refresh_token",
  "expires_in", "scope", "token_type"}}`, and a refusal as a non-zero status in an HTTP
  200 (refresh tokens are single use). With `HEALTHLEDGER_OAUTH_MAKER_URL={base}` the
  service's OAuth client uses these endpoints.
- Data: `GET` or `POST {base}/measure` (`getmeas`), `{base}/v2/measure` (`getactivity`,
  `getintradayactivity`, `getworkouts`), `{base}/v2/sleep` (`getsummary`, `get`), with
  Withings' parameters and answers (`more`/`offset` pages of `page_size` records; the
  intraday and sleep `get` services answer 24 hours from `startdate`, unpaged). With
  `HEALTHLEDGER_WITHINGS_API_URL={base}` the Withings reader reads here.
- Errors as Withings answers them: HTTP 200 with `status` 401 for an expired, revoked or
  unknown token, 601 for too many requests, and whatever `fail(status)` injects (a status
  of 500 or more that is also an HTTP error code, e.g. 503, answers that HTTP status).
- Notify: `{base}/notify` `subscribe` (the callback URL probed with a HEAD first, as
  Withings does: anything but a 200 is status 293), `list`, `revoke`; `notify(person,
  appli, startdate=, enddate=, date=, action=)` calls back every subscribed URL with
  Withings' form POST (through `callback_http`, which a test can mount its app on).
- Switches: `fail(status, times, action=)`, `slow(seconds, times)`, `revoke(person)`,
  `restore(person)`, `revise(person, day)` (the day's measure groups, activity, workouts
  and night sent again changed, under the same `grpid`/`id`), `denied_scopes`,
  `page_size`, `stuck_paging` (pages that never move on), `expires_in`.

The data is deterministic: a person's day is a function of (person, day) and of the
revisions asked for, so tests can compute what the service must answer.

Run it alone: `python -m healthledger.adapters.makers.fake_withings --port 8011`.
"""

from __future__ import annotations

import argparse
import hashlib
import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from urllib.parse import parse_qs, urlencode
from zoneinfo import ZoneInfo

import anyio
import anyio.to_thread
import httpx
from healthledger.adapters.makers.serving import days, seeded, served
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

# Records a page (Withings does not publish its page sizes: docs/makers/withings.md).
# Small enough that a week spans several pages of every paged service.
PAGE_SIZE = 3
INTRADAY_INTERVAL = timedelta(minutes=10)
# The scope each action needs (Withings' documented scopes).
SCOPE_OF = {
    "getmeas": "user.metrics",
    "getactivity": "user.activity",
    "getintradayactivity": "user.activity",
    "getworkouts": "user.activity",
    "getsummary": "user.sleepevents",
    "get": "user.sleepevents",
}
# The service each action is served at.
PATH_OF = {
    "getmeas": "/measure",
    "getactivity": "/v2/measure",
    "getintradayactivity": "/v2/measure",
    "getworkouts": "/v2/measure",
    "getsummary": "/v2/sleep",
    "get": "/v2/sleep",
}
_CATEGORIES = (1, 2, 6, 7, 16, 28)  # walking, running, cycling, swimming, weights, yoga


@dataclass(frozen=True)
class Person:
    """A synthetic Withings user."""

    key: str
    userid: int
    zone: str
    height: float  # m
    weight: float  # kg

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.zone)


PEOPLE: dict[str, Person] = {
    p.key: p
    for p in (
        Person("dana", 31_000_001, "Europe/Paris", 1.72, 68.0),
        Person("eli", 31_000_002, "America/New_York", 1.80, 84.0),
        Person("fumi", 31_000_003, "Asia/Tokyo", 1.58, 52.0),
    )
}


def _number(*parts: object) -> int:
    """A stable positive id (Withings' ids are integers)."""
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=6).digest()
    return int.from_bytes(digest, "big")


def _epoch(moment: datetime) -> int:
    return int(moment.timestamp())


def measure(value: float, unit: int, kind: int) -> dict[str, Any]:
    """A measure as Withings sends it: an integer `value` and the exponent `unit`."""
    return {"value": round(value * 10**-unit), "type": kind, "unit": unit, "algo": 0, "fm": 3}


@dataclass
class _Failure:
    status: int
    times: int
    action: str | None


@dataclass
class _Grant:
    person: str
    client_id: str
    scope: str
    expires_at: datetime | None


@dataclass
class FakeWithings:
    base: str = ""
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    default_person: str = "dana"
    clients: dict[str, str] = field(default_factory=dict)
    expires_in: int = 10800  # Withings' access tokens last 3 hours
    page_size: int = PAGE_SIZE
    # A broken maker: every page says `more` and sends the offset it was asked with.
    stuck_paging: bool = False
    denied_scopes: set[str] = field(default_factory=set)
    history_days: int = 2 * 365
    # What the fake saw: (method, path, params, Withings status), in order.
    requests: list[tuple[str, str, dict[str, str], int]] = field(default_factory=list)
    issued: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _codes: dict[str, dict[str, str]] = field(default_factory=dict)
    _access: dict[str, _Grant] = field(default_factory=dict)
    _refresh: dict[str, _Grant] = field(default_factory=dict)
    _revoked: set[str] = field(default_factory=set)
    _failures: list[_Failure] = field(default_factory=list)
    _slow: list[float] = field(default_factory=list)
    _revisions: dict[tuple[str, date], int] = field(default_factory=dict)
    # Notify: (person, appli) -> the callback URLs subscribed; the client that probes and
    # calls them (a test mounts the service's app on it).
    subscriptions: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    callback_http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=5.0))

    # -- switches -----------------------------------------------------------------------

    def register(self, client_id: str, secret: str) -> None:
        self.clients[client_id] = secret

    def fail(self, status: int, times: int = 1, *, action: str | None = None) -> None:
        """The next `times` data requests (of `action`, if given: a data action, or
        Notify's `subscribe` or `revoke`) answer `status` (601, an "error occurred"
        status, 401, or an HTTP 5xx when `status` >= 500 is one)."""
        with self.lock:
            self._failures.append(_Failure(status, times, action))

    def slow(self, seconds: float, times: int = 1) -> None:
        """The next `times` data requests wait `seconds` before answering."""
        with self.lock:
            self._slow.extend([seconds] * times)

    def revoke(self, person: str) -> None:
        """The person unlinked the application at Withings: every token is refused."""
        with self.lock:
            self._revoked.add(person)

    def restore(self, person: str) -> None:
        """The person allows the application again (old tokens stay refused)."""
        with self.lock:
            self._revoked.discard(person)
            self._access = {k: g for k, g in self._access.items() if g.person != person}
            self._refresh = {k: g for k, g in self._refresh.items() if g.person != person}

    def revise(self, person: str, day: date) -> None:
        """The person's records of `day` are sent again changed, under the same ids."""
        with self.lock:
            self._revisions[(person, day)] = self._revisions.get((person, day), 0) + 1

    def notify(self, person: str, appli: int, **fields: str | int) -> list[int]:
        """Withings calls back: POST the notification form (`userid`, `appli` and
        `fields`: `startdate`/`enddate`, `date`, `action`) to every callback URL the
        person's subscriptions to `appli` name; the HTTP statuses answered."""
        form = {"userid": str(PEOPLE[person].userid), "appli": str(appli)}
        form |= {k: str(v) for k, v in fields.items()}
        with self.lock:
            urls = list(self.subscriptions.get((person, appli), []))
        return [self.callback_http.post(url, data=form).status_code for url in urls]

    def data_requests(self, action: str | None = None) -> list[dict[str, str]]:
        return [
            q
            for m, p, q, s in self.requests
            if p in PATH_OF.values() and s == 0 and (action is None or q.get("action") == action)
        ]

    # -- the synthetic data ---------------------------------------------------------------

    def today(self, person: Person) -> date:
        return self.clock().astimezone(person.tz).date()

    def first_day(self, person: Person) -> date:
        return self.today(person) - timedelta(days=self.history_days)

    def _revision(self, person: Person, day: date) -> int:
        return self._revisions.get((person.key, day), 0)

    def _kept(self, person: Person, day: date) -> bool:
        return self.first_day(person) <= day <= self.today(person)

    def measure_groups(self, person: Person, day: date) -> list[dict[str, Any]]:
        """The groups measured on the person's local `day`: a weighing most mornings
        (weight, fat ratio, fat-free and fat mass, pulse), a blood pressure some evenings,
        SpO2 and a temperature some days, the height on the first day of the history."""
        if not self._kept(person, day):
            return []
        revision = self._revision(person, day)
        rng = seeded(person.key, "measures", day)
        values = seeded(person.key, "measures", day, revision)
        tz, now = person.tz, self.clock()
        groups: list[tuple[datetime, str, list[dict[str, Any]]]] = []
        if day == self.first_day(person):
            groups.append(
                (datetime.combine(day, time(9), tz), "height", [measure(person.height, -2, 4)])
            )
        if rng.random() < 0.8:
            weight = round(values.gauss(person.weight, 0.7), 2)
            ratio = round(values.uniform(16, 28), 1)
            groups.append(
                (
                    datetime.combine(day, time(7), tz) + timedelta(minutes=rng.randint(0, 59)),
                    "weighing",
                    [
                        measure(weight, -3, 1),
                        measure(ratio, -3, 6),
                        measure(round(weight * (1 - ratio / 100), 3), -3, 5),
                        measure(round(weight * ratio / 100, 3), -3, 8),
                        measure(values.randint(55, 80), 0, 11),
                    ],
                )
            )
        if rng.random() < 0.4:
            groups.append(
                (
                    datetime.combine(day, time(20), tz) + timedelta(minutes=rng.randint(0, 59)),
                    "pressure",
                    [
                        measure(values.randint(65, 90), 0, 9),
                        measure(values.randint(105, 140), 0, 10),
                        measure(values.randint(58, 90), 0, 11),
                    ],
                )
            )
        if rng.random() < 0.3:
            groups.append(
                (
                    datetime.combine(day, time(12), tz) + timedelta(minutes=rng.randint(0, 59)),
                    "spo2",
                    [measure(round(values.uniform(94, 99.5), 1), -1, 54)],
                )
            )
        if rng.random() < 0.2:
            groups.append(
                (
                    datetime.combine(day, time(18), tz) + timedelta(minutes=rng.randint(0, 59)),
                    "temperature",
                    [measure(round(values.uniform(36.2, 37.3), 2), -3, 71)],
                )
            )
        found = []
        for taken, kind, measures in groups:
            if taken > now:
                continue
            modified = _epoch(taken) + 60 + revision * 3600
            found.append(
                {
                    "grpid": _number(person.key, "group", day, kind),
                    "attrib": 0,
                    "date": _epoch(taken),
                    "created": _epoch(taken) + 60,
                    "modified": modified,
                    "category": 1,
                    "deviceid": f"{_number(person.key, 'device', kind):x}",
                    "hash_deviceid": f"{_number(person.key, 'device', kind):x}",
                    "measures": measures,
                    "comment": None,
                    "timezone": person.zone,
                }
            )
        return found

    def activity(self, person: Person, day: date) -> list[dict[str, Any]]:
        if not self._kept(person, day):
            return []
        rng = seeded(person.key, "activity", day, self._revision(person, day))
        steps = rng.randint(2500, 16000)
        soft, moderate, intense = (
            60 * rng.randint(60, 240),
            60 * rng.randint(10, 80),
            60 * rng.randint(0, 40),
        )
        calories = round(steps * 0.04 + rng.uniform(0, 150), 2)
        return [
            {
                "date": day.isoformat(),
                "timezone": person.zone,
                "deviceid": None,
                "hash_deviceid": None,
                "brand": 18,
                "is_tracker": True,
                "steps": steps,
                "distance": round(steps * 0.76, 2),
                "elevation": rng.randint(0, 25),
                "soft": soft,
                "moderate": moderate,
                "intense": intense,
                "active": moderate + intense,
                "calories": calories,
                "totalcalories": round(calories + rng.uniform(1400, 1900), 2),
                "hr_average": rng.randint(62, 80),
                "hr_min": rng.randint(44, 56),
                "hr_max": rng.randint(120, 180),
                "hr_zone_0": rng.randint(20000, 40000),
                "hr_zone_1": rng.randint(1000, 8000),
                "hr_zone_2": rng.randint(0, 3000),
                "hr_zone_3": rng.randint(0, 900),
            }
        ]

    def workouts(self, person: Person, day: date) -> list[dict[str, Any]]:
        if not self._kept(person, day):
            return []
        rng = seeded(person.key, "workouts", day)
        values = seeded(person.key, "workouts", day, self._revision(person, day))
        found = []
        for number in range(rng.choice((0, 1, 1, 2))):
            start = datetime.combine(day, time(7 + 9 * number), person.tz) + timedelta(
                minutes=rng.randint(0, 180)
            )
            end = start + timedelta(minutes=rng.randint(20, 90))
            if end > self.clock():
                continue
            category = rng.choice(_CATEGORIES)
            found.append(
                {
                    "id": _number(person.key, "workout", day, number),
                    "category": category,
                    "timezone": person.zone,
                    "model": 1055,
                    "attrib": 7,
                    "startdate": _epoch(start),
                    "enddate": _epoch(end),
                    "date": day.isoformat(),
                    "modified": _epoch(end) + 300 + self._revision(person, day) * 3600,
                    "deviceid": None,
                    "data": {
                        "calories": round(values.uniform(90, 700), 1),
                        "hr_average": values.randint(95, 160),
                        "hr_min": values.randint(70, 95),
                        "hr_max": values.randint(150, 190),
                        "distance": None if category == 28 else round(values.uniform(800, 14000)),
                        "steps": values.randint(0, 12000),
                        "elevation": values.randint(0, 200),
                    },
                }
            )
        return found

    def _night(self, person: Person, day: date) -> tuple[datetime, list[tuple[int, int]]] | None:
        """The night that ends on the morning of `day`: its start and its states, as
        (state, minutes) runs (0 awake, 1 light, 2 deep, 3 REM)."""
        if not self._kept(person, day):
            return None
        rng = seeded(person.key, "night", day, self._revision(person, day))
        start = datetime.combine(day - timedelta(days=1), time(22), person.tz) + timedelta(
            minutes=5 * rng.randint(0, 30)
        )
        runs, total, length = [(0, rng.randint(5, 25))], 0, rng.randint(360, 480)
        while total < length:
            state = rng.choices((1, 2, 3, 0), weights=(50, 20, 22, 8))[0]
            minutes = 5 * rng.randint(2, 8)
            runs.append((state, minutes))
            total += minutes
        runs.append((0, rng.randint(5, 15)))
        end = start + timedelta(minutes=sum(m for _, m in runs))
        return (start, runs) if end <= self.clock() else None

    def sleep_summary(self, person: Person, day: date) -> list[dict[str, Any]]:
        night = self._night(person, day)
        if night is None:
            return []
        start, runs = night
        seconds = {s: 60 * sum(m for state, m in runs if state == s) for s in range(4)}
        in_bed = sum(seconds.values())
        asleep = in_bed - seconds[0]
        rng = seeded(person.key, "night-values", day, self._revision(person, day))
        return [
            {
                "id": _number(person.key, "sleep", day),
                "timezone": person.zone,
                "model": 32,
                "model_id": 63,
                "startdate": _epoch(start),
                "enddate": _epoch(start) + in_bed,
                "date": day.isoformat(),
                "created": _epoch(start) + in_bed + 600,
                "modified": _epoch(start) + in_bed + 600 + self._revision(person, day) * 3600,
                "data": {
                    "wakeupduration": seconds[0],
                    "lightsleepduration": seconds[1],
                    "deepsleepduration": seconds[2],
                    "remsleepduration": seconds[3],
                    "wakeupcount": sum(1 for s, _ in runs[1:-1] if s == 0),
                    "durationtosleep": 60 * runs[0][1],
                    "durationtowakeup": 60 * runs[-1][1],
                    "hr_average": rng.randint(52, 66),
                    "hr_min": rng.randint(42, 52),
                    "hr_max": rng.randint(70, 95),
                    "rr_average": rng.randint(12, 17),
                    "sleep_score": rng.randint(55, 95),
                    "sleep_efficiency": round(asleep / in_bed, 2),
                    "sleep_latency": 60 * runs[0][1],
                    "total_sleep_time": asleep,
                    "total_timeinbed": in_bed,
                },
            }
        ]

    def sleep_states(self, person: Person, start: datetime, end: datetime) -> list[dict[str, Any]]:
        """The sleep states (Sleep v2 `get`) of the nights overlapping [start, end]."""
        found = []
        last = end.astimezone(person.tz).date() + timedelta(days=1)
        for day in days(start.astimezone(person.tz).date(), last):
            night = self._night(person, day)  # the night that ends on `day`
            if night is None:
                continue
            moment, runs = night
            for state, minutes in runs:
                stop = moment + timedelta(minutes=minutes)
                if start <= moment and stop <= end:
                    found.append(
                        {
                            "startdate": _epoch(moment),
                            "enddate": _epoch(stop),
                            "state": state,
                            "model": "Sleep Analyzer",
                            "model_id": 63,
                        }
                    )
                moment = stop
        return found

    def intraday(self, person: Person, start: datetime, end: datetime) -> dict[str, Any]:
        """Every 10 minutes of [start, end] (at most 24 hours, as Withings answers): the
        heart rate while the watch is worn, steps and calories while awake."""
        end = min(end, start + timedelta(hours=24), self.clock())
        first = datetime.combine(self.first_day(person), time(0), person.tz)
        moment = datetime.fromtimestamp(
            (_epoch(start) // 600 + (1 if _epoch(start) % 600 else 0)) * 600, UTC
        )
        series: dict[str, Any] = {}
        while moment <= end:
            if moment >= first:
                rng = seeded(person.key, "intraday", _epoch(moment))
                local = moment.astimezone(person.tz).hour
                awake = 7 <= local < 23
                values: dict[str, Any] = {
                    "deviceid": None,
                    "model": "ScanWatch",
                    "model_id": 93,
                    "heart_rate": rng.randint(64, 110) if awake else rng.randint(46, 60),
                    "duration": 600,
                }
                if awake and rng.random() < 0.6:
                    steps = rng.randint(20, 900)
                    values |= {
                        "steps": steps,
                        "calories": round(steps * 0.04, 2),
                        "distance": round(steps * 0.76, 1),
                    }
                series[str(_epoch(moment))] = values
            moment += INTRADAY_INTERVAL
        return series

    # -- OAuth ------------------------------------------------------------------------------

    def _issue(self, grant: _Grant) -> dict[str, Any]:
        access, refresh = secrets.token_hex(20), secrets.token_hex(20)
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
            "userid": str(PEOPLE[grant.person].userid),
            "access_token": access,
            "refresh_token": refresh,
            "expires_in": self.expires_in,
            "scope": grant.scope,
            "csrf_token": secrets.token_hex(8),
            "token_type": "Bearer",
        }

    async def authorize(self, request: Request) -> Response:
        query = dict(request.query_params)
        self.requests.append(("GET", request.url.path, {}, 0))
        client_id, redirect_uri = query.get("client_id", ""), query.get("redirect_uri", "")
        if client_id not in self.clients or not redirect_uri:
            return JSONResponse({"status": 503, "error": "Invalid Params"})
        if query.get("response_type") != "code" or not query.get("state"):
            return JSONResponse({"status": 503, "error": "Invalid Params"})
        person = query.get("fake_person", self.default_person)
        if person not in PEOPLE:
            return JSONResponse({"status": 503, "error": "Invalid Params"})
        code = secrets.token_hex(20)
        asked = query.get("scope", "").split(",")
        with self.lock:
            self._codes[code] = {
                "person": person,
                "client_id": client_id,
                "redirect_uri": redirect_uri,
                "scope": ",".join(s for s in asked if s and s not in self.denied_scopes),
            }
        back = urlencode({"code": code, "state": query.get("state", "")})
        return RedirectResponse(f"{redirect_uri}?{back}", status_code=302)

    async def token(self, request: Request) -> Response:
        form = {k: v[0] for k, v in parse_qs((await request.body()).decode()).items()}
        grant_type = form.get("grant_type", "")

        def answer(status: int, body: dict[str, Any] | None = None) -> Response:
            self.requests.append(("POST", request.url.path, {"grant_type": grant_type}, status))
            if status:
                return JSONResponse({"status": status, "body": {}, "error": "Invalid Params"})
            return JSONResponse({"status": 0, "body": body})

        if form.get("action") != "requesttoken":
            return answer(2554)  # "wrong action"
        client_id = form.get("client_id", "")
        if self.clients.get(client_id) != form.get("client_secret"):
            return answer(503)
        with self.lock:
            if grant_type == "authorization_code":
                code = self._codes.pop(form.get("code", ""), None)  # used once
                if (
                    code is None
                    or code["client_id"] != client_id
                    or code["redirect_uri"] != form.get("redirect_uri")
                ):
                    return answer(503)
                return answer(
                    0, self._issue(_Grant(code["person"], client_id, code["scope"], None))
                )
            if grant_type == "refresh_token":
                held = self._refresh.pop(form.get("refresh_token", ""), None)  # single use
                if held is None or held.client_id != client_id or held.person in self._revoked:
                    return answer(503)
                return answer(0, self._issue(held))
        return answer(503)

    # -- the data API -----------------------------------------------------------------------

    def _injected(self, action: str, *, data: bool = True) -> tuple[_Failure | None, float]:
        """The failure and the delay injected for this request. Notify's requests
        (`data=False`) meet only failures named for their action, and no delay: the
        switches without an action are the data API's."""
        with self.lock:
            failure = None
            for candidate in self._failures:
                if (data and candidate.action is None) or candidate.action == action:
                    failure = candidate
                    candidate.times -= 1
                    if candidate.times <= 0:
                        self._failures.remove(candidate)
                    break
            delay = self._slow.pop(0) if self._slow and data else 0.0
        return failure, delay

    async def data(self, request: Request) -> Response:
        path = request.url.path
        params = dict(request.query_params)
        if request.method == "POST":
            params |= {k: v[0] for k, v in parse_qs((await request.body()).decode()).items()}
        action = params.get("action", "")

        def answer(status: int, body: Any = None, http_status: int = 200) -> Response:
            self.requests.append((request.method, path, params, status))
            if status:
                return JSONResponse({"status": status, "error": "fake"}, status_code=http_status)
            return JSONResponse({"status": 0, "body": body})

        failure, delay = self._injected(action)
        if delay:
            await anyio.sleep(delay)  # off the loop: other requests go on meanwhile
        if failure is not None:
            http = failure.status if 500 <= failure.status < 600 else 200
            return answer(failure.status, http_status=http)
        if PATH_OF.get(action) != path:
            return answer(2554)
        token = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        with self.lock:
            grant = self._access.get(token)
        if grant is None or grant.person in self._revoked:
            return answer(401)
        if grant.expires_at is not None and grant.expires_at <= self.clock():
            return answer(401)
        if SCOPE_OF[action] not in grant.scope.split(","):
            return answer(214)  # the application may not read this service
        person = PEOPLE[grant.person]
        try:
            return answer(0, self._serve(action, person, params))
        except (KeyError, ValueError):
            return answer(503)

    def _serve(self, action: str, person: Person, params: dict[str, str]) -> dict[str, Any]:
        offset = int(params.get("offset") or 0)
        if action in ("getintradayactivity", "get"):
            start = datetime.fromtimestamp(int(params["startdate"]), UTC)
            end = datetime.fromtimestamp(int(params["enddate"]), UTC)
            if action == "get":
                states = self.sleep_states(person, start, min(end, start + timedelta(hours=24)))
                return {"series": states, "model": 32}
            series = self.intraday(person, start, end)
            return {"series": series or []}
        if action == "getmeas":
            first = datetime.fromtimestamp(int(params["startdate"]), UTC)
            last = datetime.fromtimestamp(int(params["enddate"]), UTC)
            local = days(first.astimezone(person.tz).date(), last.astimezone(person.tz).date())
            wanted = {int(t) for t in params.get("meastypes", "").split(",") if t}
            records = []
            for day in local:
                for group in self.measure_groups(person, day):
                    if not _epoch(first) <= group["date"] <= _epoch(last):
                        continue
                    if wanted:
                        group = {
                            **group,
                            "measures": [m for m in group["measures"] if m["type"] in wanted],
                        }
                    if group["measures"]:
                        records.append(group)
            page = records[offset : offset + self.page_size]
            more = offset + self.page_size < len(records)
            return {
                "updatetime": _epoch(self.clock()),
                "timezone": person.zone,
                "measuregrps": page,
                "more": 1 if more else 0,
                "offset": offset + len(page) if more else 0,
            }
        first_day = date.fromisoformat(params["startdateymd"])
        last_day = date.fromisoformat(params["enddateymd"])
        build, key = {
            "getactivity": (self.activity, "activities"),
            "getworkouts": (self.workouts, "series"),
            "getsummary": (self.sleep_summary, "series"),
        }[action]
        records = [r for day in days(first_day, last_day) for r in build(person, day)]
        page = records[offset : offset + self.page_size]
        more = offset + self.page_size < len(records)
        if self.stuck_paging:
            return {key: page, "more": True, "offset": offset}
        return {key: page, "more": more, "offset": offset + len(page) if more else 0}


def _subscribe(fake: FakeWithings, grant: _Grant, params: dict[str, str]) -> int:
    """notify?action=subscribe: Withings probes the callback URL with a HEAD first and
    refuses one that does not answer 200 (status 293)."""
    url, appli = params.get("callbackurl", ""), params.get("appli", "")
    if not url.startswith(("http://", "https://")) or not appli.isdigit():
        return 293 if appli.isdigit() else 503
    try:
        probed = fake.callback_http.head(url).status_code
    except httpx.HTTPError:
        probed = 0
    if probed != 200:
        return 293
    with fake.lock:
        urls = fake.subscriptions.setdefault((grant.person, int(appli)), [])
        if url not in urls:
            urls.append(url)
    return 0


async def _notify(fake: FakeWithings, request: Request) -> Response:
    """Notify v2: subscribe, list and revoke a person's subscriptions."""
    params = dict(request.query_params)
    if request.method == "POST":
        params |= {k: v[0] for k, v in parse_qs((await request.body()).decode()).items()}
    action = params.get("action", "")
    failure, _ = fake._injected(action, data=False)
    token = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
    with fake.lock:
        grant = fake._access.get(token)

    def answer(status: int, body: Any = None) -> Response:
        fake.requests.append((request.method, request.url.path, params, status))
        if status:
            return JSONResponse({"status": status, "error": "fake"})
        return JSONResponse({"status": 0, "body": body or {}})

    if failure is not None:
        return answer(failure.status)
    if grant is None or grant.person in fake._revoked:
        return answer(401)
    if grant.expires_at is not None and grant.expires_at <= fake.clock():
        return answer(401)
    if action == "subscribe":
        status = await anyio.to_thread.run_sync(_subscribe, fake, grant, params)
        return answer(status)
    if action == "list":
        with fake.lock:
            profiles = [
                {"appli": appli, "callbackurl": url, "comment": None, "expires": 2147483647}
                for (person, appli), urls in sorted(fake.subscriptions.items())
                if person == grant.person
                for url in urls
            ]
        return answer(0, {"profiles": profiles})
    if action == "revoke":
        appli = int(params.get("appli") or 0)
        with fake.lock:
            urls = fake.subscriptions.get((grant.person, appli), [])
            if params.get("callbackurl") not in urls:
                return answer(294)  # no such subscription
            urls.remove(params["callbackurl"])
            if not urls:
                del fake.subscriptions[(grant.person, appli)]
        return answer(0)
    return answer(2554)


def create_app(fake: FakeWithings) -> Starlette:
    async def notify(request: Request) -> Response:
        return await _notify(fake, request)

    return Starlette(
        routes=[
            Route("/withings/authorize", fake.authorize, methods=["GET"]),
            Route("/oauth2_user/authorize2", fake.authorize, methods=["GET"]),
            Route("/withings/token", fake.token, methods=["POST"]),
            Route("/v2/oauth2", fake.token, methods=["POST"]),
            Route("/measure", fake.data, methods=["GET", "POST"]),
            Route("/v2/measure", fake.data, methods=["GET", "POST"]),
            Route("/v2/sleep", fake.data, methods=["GET", "POST"]),
            Route("/notify", notify, methods=["GET", "POST"]),
        ]
    )


@contextmanager
def running_fake_withings(
    fake: FakeWithings | None = None, *, host: str = "127.0.0.1", port: int = 0
) -> Iterator[FakeWithings]:
    """Serve a fake Withings with uvicorn in a thread; yields it with its `base` URL set."""
    fake = fake or FakeWithings()
    with served(create_app(fake), "the fake Withings", host, port) as base:
        fake.base = base
        yield fake


def main() -> None:  # pragma: no cover - a manual sandbox
    parser = argparse.ArgumentParser(description="A fake Withings cloud on localhost.")
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--client-id", default="sandbox-client")
    parser.add_argument("--client-secret", default="sandbox-secret")
    args = parser.parse_args()
    with running_fake_withings(port=args.port) as fake:
        fake.register(args.client_id, args.client_secret)
        print(f"fake Withings at {fake.base} (client {args.client_id}); Ctrl-C to stop")
        with suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":  # pragma: no cover
    main()
