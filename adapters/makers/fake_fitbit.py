"""A fake Fitbit cloud: a real HTTP server on localhost that serves the Fitbit Web API as
documented (docs/makers/fitbit.md) for a few synthetic people, and its OAuth 2.0 endpoints.

- OAuth: `GET {base}/fitbit/authorize` (also `/oauth2/authorize`) signs the person in at
  once (no consent screen: the person is `?fake_person=` or `default_person`; the scopes
  in `denied_scopes` are unticked) and sends the browser back with a code;
  `POST {base}/fitbit/token` (also `/oauth2/token`) exchanges it (client authentication
  in the Basic header, as Fitbit wants it; redirect_uri and PKCE S256 checked, a code used
  once) and refreshes (refresh tokens are single use, as Fitbit's are). The answer names
  the person (`user_id`) and the scopes granted. `POST {base}/fitbit/revoke` (also
  `/oauth2/revoke`) ends a grant (RFC 7009, as Fitbit's). With `HEALTHLEDGER_OAUTH_MAKER_URL={base}`
  the service's OAuth client uses these endpoints.
- Data: the Web API's paths (`/1/user/-/...`, `/1.2/user/-/sleep/...`) with Fitbit's
  shapes: local times without offset (the profile's `timezone` says where), values of
  the activity time series as strings, metric units (no `Accept-Language`), the date
  ranges' documented maxima (a longer range is a 400), the activity log list paged with
  `pagination.next`, and the intraday heart rate only when `intraday` is on (a
  "Personal" application, or one Fitbit granted intraday access: otherwise the answer
  has no `activities-heart-intraday`, as Fitbit's). With `HEALTHLEDGER_FITBIT_API_URL={base}`
  the Fitbit reader reads here.
- Every answer carries `Fitbit-Rate-Limit-Limit/-Remaining/-Reset`; with `rate_limit`
  set, a person's requests over it in the clock's hour are a 429 (with `Retry-After`
  unless `retry_after_on_429` is off).
- Bearer tokens expire (`expires_in`, 8 hours by default, by the fake's clock); a revoked
  person's tokens and refresh tokens are refused (401 `invalid_token`); a scope not granted
  is a 403 `insufficient_scope`.
- Subscriptions: `POST /1/user/-/apiSubscriptions/{id}.json` subscribes the person
  (`subscriptions`); with `subscriber_url` set, `verify_subscriber(code)` makes Fitbit's two
  verification GETs, and `revise` and `revoke` POST signed notifications there
  for subscribed people (`X-Fitbit-Signature`, a wrong one with `bad_signature`);
  `notify` and `post` send one whoever it is about;
  `sent` keeps each body and the status it got.
- Switches to inject failures: `fail(status, times, retry_after=..., path=...)` (429 with
  or without Retry-After, 5xx), `slow(seconds, times)`, `revoke(person)`,
  `revise(person, day)` (the day's records re-sent changed under the same `logId`s).

The data is deterministic: a person's day is a function of (person, day) and of the
revisions asked for, so tests can compute what the service must answer.

Run it alone: `python -m healthledger.adapters.makers.fake_fitbit --port 8012`.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import random
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
from healthledger.adapters.makers.serving import days as _days
from healthledger.adapters.makers.serving import seeded as _rng
from healthledger.adapters.makers.serving import served
from healthledger.adapters.providers.fitbit_webhooks import REVOKED, sign
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

# Fitbit's documented limits: the activity log list's page size at most, and the
# longest date range of each ranged endpoint (days).
ACTIVITY_PAGE_SIZE = 100
MAX_RANGE = {
    "sleep": 100,
    "activities": 1095,
    "hrv": 30,
    "br": 30,
    "spo2": 30,
    "temp": 30,
    "weight": 31,
    "fat": 31,
}
# Fitbit's documented rate limit: requests per person and hour.
RATE_LIMIT = 150
# The activity time series the fake serves (`/1/user/-/activities/<name>/date/...`).
ACTIVITY_SERIES = (
    "steps",
    "distance",
    "calories",
    "activityCalories",
    "caloriesBMR",
    "floors",
    "minutesSedentary",
    "minutesLightlyActive",
    "minutesFairlyActive",
    "minutesVeryActive",
)
# The scope each data path needs (Fitbit's documented scopes).
SCOPE_OF = {
    "profile": "profile",
    "sleep": "sleep",
    "activities": "activity",
    "heart": "heartrate",
    "hrv": "heartrate",
    "br": "respiratory_rate",
    "spo2": "oxygen_saturation",
    "temp": "temperature",
    "weight": "weight",
    "fat": "weight",
}
_SPORTS = (
    (90013, "Walk"),
    (90009, "Run"),
    (90001, "Bike"),
    (3001, "Weights"),
    (52001, "Yoga"),
)
_STAGES = ("deep", "light", "rem", "wake")
_CLASSIC = ("asleep", "restless", "awake")


@dataclass(frozen=True)
class Person:
    """A synthetic Fitbit user."""

    key: str
    encoded_id: str
    timezone: str  # IANA, as the profile gives it
    age: int
    height: float  # cm
    weight: float  # kg
    gender: str

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


PEOPLE: dict[str, Person] = {
    p.key: p
    for p in (
        Person("eli", "7QK2LB", "Europe/Paris", 36, 176.0, 78.5, "MALE"),
        Person("fay", "9XH4TD", "America/Los_Angeles", 29, 164.0, 59.0, "FEMALE"),
        Person("gus", "3MB8RW", "Asia/Tokyo", 52, 171.5, 70.2, "MALE"),
    )
}


def _log_id(*parts: object) -> int:
    """A Fitbit-like numeric logId, stable for the same parts."""
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=6).digest()
    return 10_000_000_000 + int.from_bytes(digest, "big") % 90_000_000_000


def local_text(moment: datetime) -> str:
    """A local time as Fitbit writes it: no offset, milliseconds."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.000")


@dataclass(frozen=True)
class Sent:
    """A notification the fake sent: its raw body and the status our route answered."""

    body: bytes
    status: int


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
class FakeFitbit:
    base: str = ""
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    default_person: str = "eli"
    # client id -> secret: the applications registered at Fitbit.
    clients: dict[str, str] = field(default_factory=dict)
    expires_in: int = 28800  # Fitbit's access tokens last 8 hours
    activity_page_size: int = ACTIVITY_PAGE_SIZE
    # Scopes the person unticks on Fitbit's consent screen (granted: the others asked).
    denied_scopes: set[str] = field(default_factory=set)
    # Whether the application may read intraday data ("Personal" type, or granted).
    intraday: bool = True
    # Requests a person may make in an hour (None: unlimited, the tests' default).
    rate_limit: int | None = None
    retry_after_on_429: bool = True
    # How far back a person's tracker has data, from the fake's today.
    history_days: int = 2 * 365
    # The Subscriptions API: where notifications go (unset: none are sent), signed with
    # the secret of `subscriber_client` (the first registered client when unset), or with
    # a wrong secret when `bad_signature` is on; what was sent.
    subscriber_url: str | None = None
    subscriber_client: str | None = None
    bad_signature: bool = False
    sent: list[Sent] = field(default_factory=list)
    # person -> the id of the application's subscription to their collections.
    subscriptions: dict[str, str] = field(default_factory=dict)
    # What the fake saw: (method, path, query, status), in order.
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
    _hourly: dict[tuple[str, datetime], int] = field(default_factory=dict)

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
        """The next `times` data requests (whose path contains `path`, if given) answer
        `status` (429 with `Retry-After: retry_after` when given, 5xx...)."""
        with self.lock:
            self._failures.append(_Failure(status, times, retry_after, path))

    def slow(self, seconds: float, times: int = 1) -> None:
        """The next `times` data requests wait `seconds` before answering."""
        with self.lock:
            self._slow.extend([seconds] * times)

    def revoke(self, person: str) -> None:
        """The person revoked the application's access at Fitbit: every token is refused,
        and the subscriber is told (`userRevokedAccess`)."""
        with self.lock:
            self._revoked.add(person)
        if self.subscriber_url and person in self.subscriptions:
            self.notify(person, REVOKED, self.today(PEOPLE[person]))

    def restore(self, person: str) -> None:
        """The person allows the application again: new sign-ins work (old tokens stay
        revoked)."""
        with self.lock:
            self._revoked.discard(person)
            self._access = {k: g for k, g in self._access.items() if g.person != person}
            self._refresh = {k: g for k, g in self._refresh.items() if g.person != person}

    def revise(self, person: str, day: date) -> None:
        """The person's records of `day` are sent again changed (same logIds, new values);
        the subscriber is told, a notification per collection that changed."""
        with self.lock:
            self._revisions[(person, day)] = self._revisions.get((person, day), 0) + 1
        if self.subscriber_url and person in self.subscriptions:
            for collection in ("activities", "sleep", "body"):
                self.notify(person, collection, day)

    # -- the Subscriptions API ----------------------------------------------------------

    def verify_subscriber(self, code: str) -> tuple[int, int]:
        """Fitbit's check of a subscriber URL: a GET with the right code (204 expected),
        then one with a wrong code (404 expected); the two statuses answered."""
        assert self.subscriber_url is not None
        with httpx.Client(timeout=10) as http:
            right = http.get(self.subscriber_url, params={"verify": code})
            wrong = http.get(self.subscriber_url, params={"verify": secrets.token_hex(16)})
        return right.status_code, wrong.status_code

    def notify(self, person: str, collection: str, day: date) -> Sent:
        """POST one notification (a one-element array, as Fitbit sends them) about the
        person's `collection` of `day`, signed."""
        body = json.dumps(
            [
                {
                    "collectionType": collection,
                    "date": day.isoformat(),
                    "ownerId": PEOPLE[person].encoded_id,
                    "ownerType": "user",
                    "subscriptionId": f"{person}-all",
                }
            ]
        ).encode()
        return self.post(body)

    def post(self, body: bytes) -> Sent:
        """POST a notification body to the subscriber, signed as Fitbit signs it (with a
        wrong secret when `bad_signature` is on)."""
        assert self.subscriber_url is not None
        client = self.subscriber_client or next(iter(self.clients))
        secret = self.clients[client] + ("-forged" if self.bad_signature else "")
        headers = {"Content-Type": "application/json", "X-Fitbit-Signature": sign(secret, body)}
        with httpx.Client(timeout=10) as http:
            status = http.post(self.subscriber_url, content=body, headers=headers).status_code
        sent = Sent(body, status)
        self.sent.append(sent)
        return sent

    def data_requests(self, part: str = "") -> list[tuple[str, dict[str, str]]]:
        """The data requests answered 200 whose path contains `part`: (path, query)."""
        return [(p, q) for m, p, q, s in self.requests if "/user/" in p and part in p and s == 200]

    # -- the synthetic data ---------------------------------------------------------------

    def today(self, person: Person) -> date:
        return self.clock().astimezone(person.zone).date()

    def _first_day(self, person: Person) -> date:
        return self.today(person) - timedelta(days=self.history_days)

    def _kept(self, person: Person, day: date) -> bool:
        return self._first_day(person) <= day <= self.today(person)

    def _revision(self, person: Person, day: date) -> int:
        return self._revisions.get((person.key, day), 0)

    def _local(self, person: Person, day: date, at: time) -> datetime:
        return datetime.combine(day, at, person.zone)

    def sleeps(self, person: Person, day: date) -> list[dict[str, Any]]:
        """The sleep logs whose `dateOfSleep` is `day` (the night that ends that morning;
        a nap on some days), over by the fake's now."""
        if not self._kept(person, day):
            return []
        rng = _rng(person.key, "sleep", day, self._revision(person, day))
        start = self._local(person, day - timedelta(days=1), time(22, 0)) + timedelta(
            minutes=rng.randint(0, 150)
        )
        logs = [self._sleep(person, day, rng, start, rng.randint(390, 540), True, 0)]
        if rng.random() < 0.2:
            nap = self._local(person, day, time(14, 0)) + timedelta(minutes=rng.randint(0, 90))
            logs.append(self._sleep(person, day, rng, nap, rng.randint(20, 60), False, 1))
        now = self.clock()
        return [{k: v for k, v in log.items() if k != "_end"} for log in logs if log["_end"] <= now]

    def _sleep(
        self,
        person: Person,
        day: date,
        rng: random.Random,
        start: datetime,
        minutes: int,
        main: bool,
        number: int,
    ) -> dict[str, Any]:
        # A night of stages, except a few nights the tracker only tells asleep from awake
        # (Fitbit's "classic" logs); naps are classic.
        classic = not main or rng.random() < 0.1
        names = _CLASSIC if classic else _STAGES
        weights = (80, 12, 8) if classic else (18, 52, 22, 8)
        levels: list[tuple[str, int, int]] = []
        elapsed = 0
        while elapsed < minutes:
            length = min(rng.randint(4, 40), minutes - elapsed)
            level = rng.choices(names, weights=weights)[0]
            if levels and levels[-1][0] == level:
                levels[-1] = (level, levels[-1][1], levels[-1][2] + length)
            else:
                levels.append((level, elapsed, length))
            elapsed += length
        data = [
            {
                "dateTime": local_text(start + timedelta(minutes=offset)),
                "level": level,
                "seconds": 60 * length,
            }
            for level, offset, length in levels
        ]
        summary: dict[str, dict[str, int]] = {}
        for name in names:
            runs = [length for level, _, length in levels if level == name]
            summary[name] = {"count": len(runs), "minutes": sum(runs)}
        awake = sum(summary[n]["minutes"] for n in ("wake", "awake", "restless") if n in summary)
        end = start + timedelta(minutes=minutes)
        return {
            "_end": end,  # not Fitbit's: `sleeps` strips it
            "dateOfSleep": day.isoformat(),
            "duration": minutes * 60_000,
            "efficiency": round(100 * (minutes - awake) / minutes),
            "endTime": local_text(end),
            "infoCode": 0,
            "isMainSleep": main,
            "levels": {"data": data, "shortData": [], "summary": summary},
            "logId": _log_id(person.key, "sleep", day, number),
            "logType": "auto_detected",
            "minutesAfterWakeup": 0,
            "minutesAsleep": minutes - awake,
            "minutesAwake": awake,
            "minutesToFallAsleep": 0,
            "startTime": local_text(start),
            "timeInBed": minutes,
            "type": "classic" if classic else "stages",
        }

    def activity(self, person: Person, day: date) -> dict[str, Any] | None:
        """The day's activity summary, as the activity time series give it (numbers)."""
        if not self._kept(person, day):
            return None
        rng = _rng(person.key, "activity", day, self._revision(person, day))
        steps = rng.randint(2500, 17000)
        active = round(steps * 0.045 + rng.randint(0, 200))
        bmr = rng.randint(1550, 1750)
        light, fair, very = rng.randint(120, 300), rng.randint(10, 60), rng.randint(0, 50)
        return {
            "steps": steps,
            "distance": round(steps * 0.00076, 2),  # km
            "calories": bmr + active,
            "activityCalories": active,
            "caloriesBMR": bmr,
            "floors": rng.randint(0, 25),
            "minutesSedentary": 1440 - light - fair - very - rng.randint(360, 480),
            "minutesLightlyActive": light,
            "minutesFairlyActive": fair,
            "minutesVeryActive": very,
        }

    def workouts(self, person: Person, day: date) -> list[dict[str, Any]]:
        """The day's activity logs (exercises), over by the fake's now."""
        if not self._kept(person, day):
            return []
        rng = _rng(person.key, "workout", day, self._revision(person, day))
        found = []
        for number in range(rng.choice((0, 1, 1, 2))):
            start = self._local(person, day, time(7 + 9 * number)) + timedelta(
                minutes=rng.randint(0, 180)
            )
            minutes = rng.randint(20, 90)
            if start + timedelta(minutes=minutes) > self.clock():
                continue
            type_id, name = rng.choice(_SPORTS)
            moving = name not in ("Weights", "Yoga")
            found.append(
                {
                    "activeDuration": minutes * 60_000,
                    "activityName": name,
                    "activityTypeId": type_id,
                    "averageHeartRate": rng.randint(95, 160),
                    "calories": rng.randint(90, 750),
                    "distance": round(rng.uniform(0.8, 14.0), 3) if moving else None,
                    "distanceUnit": "Kilometer" if moving else None,
                    "duration": minutes * 60_000,
                    "lastModified": start.astimezone(UTC).isoformat(timespec="milliseconds"),
                    "logId": _log_id(person.key, "workout", day, number),
                    "logType": rng.choice(("auto_detected", "manual", "tracker")),
                    "originalDuration": minutes * 60_000,
                    "originalStartTime": start.isoformat(timespec="milliseconds"),
                    "startTime": start.isoformat(timespec="milliseconds"),
                    "steps": rng.randint(1500, 9000) if moving else 0,
                }
            )
        return [{k: v for k, v in w.items() if v is not None} for w in found]

    def heart_minutes(self, person: Person, day: date) -> list[tuple[datetime, int]]:
        """The day's intraday heart rate: a sample a minute while the tracker is worn
        (off an hour a day to charge), local times."""
        midnight = self._local(person, day, time(0))
        # Wall-clock arithmetic (one tzinfo): the local day's minutes, as the tracker's.
        return [(midnight + timedelta(minutes=m), v) for m, v in self._heart(person, day)]

    def _heart(self, person: Person, day: date) -> list[tuple[int, int]]:
        """(minute of the local day, bpm): what heart_minutes gives, cheap to serve."""
        if not self._kept(person, day):
            return []
        rng = _rng(person.key, "heart", day, self._revision(person, day))
        charging, drift = rng.randint(9, 20), 0.0
        # Today's minutes after now are not measured yet.
        until = 1440
        if day == self.today(person):
            now = self.clock().astimezone(person.zone)
            until = now.hour * 60 + now.minute + 1
        found = []
        for minute in range(until):
            drift = 0.9 * drift + rng.gauss(0, 2.0)
            hour = minute // 60
            if hour != charging:
                asleep = hour >= 23 or hour < 7
                found.append((minute, max(40, round((55 if asleep else 74) + drift))))
        return found

    def resting_heart_rate(self, person: Person, day: date) -> int:
        return _rng(person.key, "resting", day, self._revision(person, day)).randint(52, 66)

    def _night(self, person: Person, day: date, what: str) -> random.Random | None:
        """The randomness of a value measured during the main sleep ending on `day`."""
        if not any(s["isMainSleep"] for s in self.sleeps(person, day)):
            return None
        return _rng(person.key, what, day, self._revision(person, day))

    def hrv(self, person: Person, day: date) -> dict[str, Any] | None:
        rng = self._night(person, day, "hrv")
        if rng is None:
            return None
        daily = round(rng.uniform(20, 80), 3)
        return {"dailyRmssd": daily, "deepRmssd": round(daily * rng.uniform(0.9, 1.2), 3)}

    def breathing_rate(self, person: Person, day: date) -> dict[str, Any] | None:
        rng = self._night(person, day, "br")
        return None if rng is None else {"breathingRate": round(rng.uniform(12.0, 18.0), 1)}

    def spo2(self, person: Person, day: date) -> dict[str, Any] | None:
        rng = self._night(person, day, "spo2")
        if rng is None:
            return None
        average = round(rng.uniform(94.0, 98.5), 1)
        return {"avg": average, "min": round(average - 2.5, 1), "max": round(average + 1.2, 1)}

    def skin_temperature(self, person: Person, day: date) -> dict[str, Any] | None:
        rng = self._night(person, day, "temp")
        return None if rng is None else {"nightlyRelative": round(rng.uniform(-0.8, 0.8), 2)}

    def weighings(self, person: Person, day: date) -> list[dict[str, Any]]:
        """The day's weight logs (on about half the mornings; fat when the scale reads
        it), over by the fake's now."""
        if not self._kept(person, day):
            return []
        rng = _rng(person.key, "weight", day, self._revision(person, day))
        if rng.random() > 0.5:
            return []
        moment = self._local(person, day, time(7, rng.randint(0, 59), rng.randint(0, 59)))
        if moment > self.clock():
            return []
        weight = round(person.weight + rng.uniform(-1.5, 1.5), 1)
        log: dict[str, Any] = {
            "bmi": round(weight / (person.height / 100) ** 2, 2),
            "date": day.isoformat(),
            "logId": _log_id(person.key, "weight", day),
            "source": "Aria",
            "time": moment.strftime("%H:%M:%S"),
            "weight": weight,
        }
        if rng.random() < 0.8:
            log["fat"] = round(rng.uniform(14, 28), 1)
        return [log]

    def fat_logs(self, person: Person, day: date) -> list[dict[str, Any]]:
        return [
            {k: w[k] for k in ("date", "fat", "logId", "source", "time")}
            for w in self.weighings(person, day)
            if "fat" in w
        ]

    def profile(self, person: Person) -> dict[str, Any]:
        now = self.clock()
        offset = now.astimezone(person.zone).utcoffset() or timedelta(0)
        born = self.today(person).replace(year=self.today(person).year - person.age, day=1)
        return {
            "user": {
                "age": person.age,
                "dateOfBirth": born.isoformat(),
                "displayName": person.key.title(),
                "encodedId": person.encoded_id,
                "fullName": f"{person.key.title()} Example",
                "gender": person.gender,
                "height": person.height,
                "heightUnit": "METRIC",
                "locale": "en_US",
                "memberSince": "2019-03-02",
                "offsetFromUTCMillis": int(offset.total_seconds() * 1000),
                "timezone": person.timezone,
                "weight": person.weight,
                "weightUnit": "METRIC",
            }
        }

    # -- OAuth ------------------------------------------------------------------------------

    def _issue(self, grant: _Grant) -> dict[str, Any]:
        access, refresh = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
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
            "access_token": access,
            "expires_in": self.expires_in,
            "refresh_token": refresh,
            "scope": grant.scope,
            "token_type": "Bearer",
            "user_id": PEOPLE[grant.person].encoded_id,
        }

    async def authorize(self, request: Request) -> Response:
        query = dict(request.query_params)
        self.requests.append(("GET", request.url.path, {}, 302))
        client_id, redirect_uri = query.get("client_id", ""), query.get("redirect_uri", "")
        if client_id not in self.clients or not redirect_uri:
            return _errors(400, "invalid_request", "Invalid client_id or redirect_uri.")
        if query.get("response_type") != "code":
            return _errors(400, "unsupported_response_type", "Use response_type=code.")
        person = query.get("fake_person", self.default_person)
        if person not in PEOPLE:
            return _errors(400, "invalid_request", "No such person.")
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
        client_id, secret = None, None
        header = request.headers.get("authorization", "")
        if header.startswith("Basic "):  # Fitbit wants the client in the Basic header
            pair = base64.b64decode(header.removeprefix("Basic ")).decode()
            client_id, _, secret = (unquote_plus(part) for part in pair.partition(":"))
        grant_type = form.get("grant_type", "")

        def answer(body: dict[str, Any], status: int = 200) -> Response:
            self.requests.append(("POST", request.url.path, {"grant_type": grant_type}, status))
            return JSONResponse(body, status_code=status)

        def refused(kind: str, status: int) -> Response:
            message = "The grant was refused."
            body = {"errors": [{"errorType": kind, "message": message}], "success": False}
            return answer(body, status)

        if client_id is None or self.clients.get(client_id) != secret:
            return refused("invalid_client", 401)
        with self.lock:
            if grant_type == "authorization_code":
                code = self._codes.pop(form.get("code", ""), None)  # used once
                if (
                    code is None
                    or code["client_id"] != client_id
                    or code["redirect_uri"] != form.get("redirect_uri")
                    or _challenge(form.get("code_verifier", "")) != code["challenge"]
                ):
                    return refused("invalid_grant", 400)
                return answer(self._issue(_Grant(code["person"], client_id, code["scope"], None)))
            if grant_type == "refresh_token":
                held = self._refresh.pop(form.get("refresh_token", ""), None)  # single use
                if held is None or held.client_id != client_id or held.person in self._revoked:
                    return refused("invalid_grant", 400)
                return answer(self._issue(held))
        return refused("unsupported_grant_type", 400)

    async def revoke_token(self, request: Request) -> Response:
        """RFC 7009 revocation, as Fitbit's `POST /oauth2/revoke`: the client in the Basic
        header, `token` an access or refresh token of its grant; every token of that
        grant stops working. 200 also for a token unknown (RFC 7009 2.2)."""
        form = {k: v[0] for k, v in parse_qs((await request.body()).decode()).items()}
        client_id, secret = None, None
        header = request.headers.get("authorization", "")
        if header.startswith("Basic "):
            pair = base64.b64decode(header.removeprefix("Basic ")).decode()
            client_id, _, secret = (unquote_plus(part) for part in pair.partition(":"))
        status = 200
        if client_id is None or self.clients.get(client_id) != secret:
            status = 401
        else:
            with self.lock:
                token = form.get("token", "")
                grant = self._access.get(token) or self._refresh.get(token)
                if grant is not None and grant.client_id == client_id:
                    # The whole grant: every token the application holds for the person.
                    def kept(g: _Grant) -> bool:
                        return (g.person, g.client_id) != (grant.person, client_id)

                    self._access = {k: g for k, g in self._access.items() if kept(g)}
                    self._refresh = {k: g for k, g in self._refresh.items() if kept(g)}
        self.requests.append(("POST", request.url.path, {}, status))
        if status != 200:
            return _errors(status, "invalid_client", "Invalid client.")
        return JSONResponse({})

    # -- the data API -----------------------------------------------------------------------

    def _injected(self, path: str) -> tuple[_Failure | None, float]:
        with self.lock:
            failure = None
            for candidate in self._failures:
                if candidate.path is None or candidate.path in path:
                    failure = candidate
                    candidate.times -= 1
                    if candidate.times <= 0:
                        self._failures.remove(candidate)
                    break
            delay = self._slow.pop(0) if self._slow else 0.0
        return failure, delay

    def _metered(self, person: str) -> tuple[int, int, int]:
        """The person's request counted in this hour: (count, limit, seconds to the top
        of the hour)."""
        now = self.clock()
        hour = now.replace(minute=0, second=0, microsecond=0)
        with self.lock:
            count = self._hourly.get((person, hour), 0) + 1
            self._hourly[(person, hour)] = count
        left = int((hour + timedelta(hours=1) - now).total_seconds())
        return count, self.rate_limit or RATE_LIMIT, left

    async def data(self, request: Request) -> Response:
        path = request.url.path
        query = dict(request.query_params)
        headers: dict[str, str] = {}

        def answer(body: Any, status: int = 200) -> Response:
            self.requests.append((request.method, path, query, status))
            return JSONResponse(body, status_code=status, headers=headers)

        failure, delay = self._injected(path)
        if delay:
            # A slow answer: the client's timeout is what this tests (sleep off the loop,
            # which serves the other requests meanwhile).
            await anyio.sleep(delay)
        if failure is not None:
            if failure.retry_after:
                headers["Retry-After"] = failure.retry_after
            kind = "system" if failure.status == 429 else "request"
            return answer(_error_body(kind, "Injected failure."), failure.status)
        token = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        with self.lock:
            grant = self._access.get(token)
        if grant is None or grant.person in self._revoked:
            return answer(_error_body("invalid_token", "Access token invalid."), 401)
        if grant.expires_at is not None and grant.expires_at <= self.clock():
            return answer(_error_body("expired_token", "Access token expired."), 401)
        count, limit, reset = self._metered(grant.person)
        headers |= {
            "Fitbit-Rate-Limit-Limit": str(limit),
            "Fitbit-Rate-Limit-Remaining": str(max(0, limit - count)),
            "Fitbit-Rate-Limit-Reset": str(reset),
        }
        if self.rate_limit is not None and count > limit:
            if self.retry_after_on_429:
                headers["Retry-After"] = str(reset)
            return answer(_error_body("system", "Too Many Requests"), 429)
        person = PEOPLE[grant.person]
        if request.method == "POST":
            return self._subscribe(person, path, answer)
        try:
            route = _route(path)
        except ValueError:
            return answer(
                _error_body("not_found", "The API you are requesting could not be found."), 404
            )
        kind = route[0]
        if SCOPE_OF[kind] not in grant.scope.split():
            return answer(_error_body("insufficient_scope", "Missing scope."), 403)
        try:
            body = self._answer(person, route, query)
        except _Invalid as exc:
            return answer(_error_body("validation", str(exc)), 400)
        return answer(body)

    def _subscribe(
        self, person: Person, path: str, answer: Callable[[Any, int], Response]
    ) -> Response:
        """`POST /1/user/-/apiSubscriptions/{id}.json`: the person's every collection
        (201; 200 for the same again; 409 for an id another person's subscription has)."""
        prefix, suffix = "/1/user/-/apiSubscriptions/", ".json"
        if not path.startswith(prefix) or not path.endswith(suffix):
            return answer(_error_body("not_found", "No such resource."), 404)
        subscription = path.removeprefix(prefix).removesuffix(suffix)
        body = {
            "collectionType": "user",
            "ownerId": person.encoded_id,
            "ownerType": "user",
            "subscriberId": "1",
            "subscriptionId": subscription,
        }
        with self.lock:
            taken = {s: p for p, s in self.subscriptions.items()}
            if taken.get(subscription, person.key) != person.key:
                return answer(_error_body("conflict", "Subscription id in use."), 409)
            status = 200 if self.subscriptions.get(person.key) == subscription else 201
            self.subscriptions[person.key] = subscription
        return answer(body, status)

    def _range(self, kind: str, first: str, last: str) -> tuple[date, date]:
        try:
            start, end = date.fromisoformat(first), date.fromisoformat(last)
        except ValueError:
            raise _Invalid("Invalid date.") from None
        if end < start or (end - start).days + 1 > MAX_RANGE[kind]:
            raise _Invalid("The date range is not valid.")
        return start, end

    def _answer(self, person: Person, route: tuple[str, ...], query: dict[str, str]) -> Any:
        kind = route[0]
        if kind == "profile":
            return self.profile(person)
        if kind == "activities" and route[1] == "list":
            return self._activity_list(person, query)
        if kind == "heart":
            return self._heart_day(person, route[1])
        start, end = self._range(kind, route[-2], route[-1])
        days = list(_days(start, end))
        if kind == "sleep":
            logs = [s for d in days for s in self.sleeps(person, d)]
            return {"sleep": logs}
        if kind == "activities":
            name = route[1]
            if name not in ACTIVITY_SERIES:
                raise _Invalid("Invalid resource.")
            found = []
            for day in days:
                values = self.activity(person, day)
                if values is not None:
                    found.append({"dateTime": day.isoformat(), "value": str(values[name])})
            return {f"activities-{name}": found}
        if kind == "weight":
            return {"weight": [w for d in days for w in self.weighings(person, d)]}
        if kind == "fat":
            return {"fat": [f for d in days for f in self.fat_logs(person, d)]}
        builders: dict[str, Callable[[Person, date], dict[str, Any] | None]] = {
            "hrv": self.hrv,
            "br": self.breathing_rate,
            "spo2": self.spo2,
            "temp": self.skin_temperature,
        }
        nightly = [(d, builders[kind](person, d)) for d in days]
        documents = [{"dateTime": d.isoformat(), "value": v} for d, v in nightly if v]
        if kind == "spo2":
            return documents  # the SpO2 range is a bare list
        if kind == "temp":
            for document in documents:
                document["logType"] = "dedicated_temp_sensor"
            return {"tempSkin": documents}
        return {kind: documents}

    def _heart_day(self, person: Person, day_text: str) -> dict[str, Any]:
        try:
            day = date.fromisoformat(day_text)
        except ValueError:
            raise _Invalid("Invalid date.") from None
        samples = self._heart(person, day)
        summary = {
            "dateTime": day.isoformat(),
            "value": {
                "customHeartRateZones": [],
                "heartRateZones": [],
                "restingHeartRate": self.resting_heart_rate(person, day),
            },
        }
        body: dict[str, Any] = {"activities-heart": [summary] if samples else []}
        if self.intraday:  # else Fitbit answers the summary alone
            body["activities-heart-intraday"] = {
                "dataset": [
                    {"time": f"{m // 60:02d}:{m % 60:02d}:00", "value": v} for m, v in samples
                ],
                "datasetInterval": 1,
                "datasetType": "minute",
            }
        return body

    def _activity_list(self, person: Person, query: dict[str, str]) -> dict[str, Any]:
        after = query.get("afterDate")
        if not after or query.get("sort") != "asc":
            raise _Invalid("afterDate with sort=asc is required.")
        try:
            limit, offset = int(query.get("limit", "")), int(query.get("offset", ""))
            first = date.fromisoformat(after[:10])
        except ValueError:
            raise _Invalid("Invalid limit, offset or afterDate.") from None
        if not 1 <= limit <= ACTIVITY_PAGE_SIZE or offset < 0:
            raise _Invalid("Invalid limit or offset.")
        # Fitbit pages by the cursor in `next`; this fake's cursor is the offset.
        size = min(limit, self.activity_page_size)
        logs = [
            w
            for d in _days(max(first, self._first_day(person)), self.today(person))
            for w in self.workouts(person, d)
        ]
        page = logs[offset : offset + size]
        following = ""
        if offset + size < len(logs):
            following = f"{self.base}/1/user/-/activities/list.json?" + urlencode(
                {"afterDate": after, "sort": "asc", "limit": limit, "offset": offset + size}
            )
        return {
            "activities": page,
            "pagination": {
                "afterDate": after,
                "limit": limit,
                "next": following,
                "offset": offset,
                "previous": "",
                "sort": "asc",
            },
        }


class _Invalid(ValueError):
    pass


def _route(path: str) -> tuple[str, ...]:
    """The data path's kind and arguments; ValueError for a path Fitbit does not serve."""
    parts = path.removesuffix(".json").strip("/").split("/")
    if len(parts) < 4 or parts[1] != "user" or parts[2] != "-":
        raise ValueError(path)
    version, rest = parts[0], parts[3:]
    if version == "1.2" and rest[:2] == ["sleep", "date"] and len(rest) == 4:
        return ("sleep", rest[2], rest[3])
    if version != "1":
        raise ValueError(path)
    if rest == ["profile"]:
        return ("profile",)
    if rest == ["activities", "list"]:
        return ("activities", "list")
    if (
        rest[:3] == ["activities", "heart", "date"]
        and len(rest) == 6
        and rest[4:] == ["1d", "1min"]
    ):
        return ("heart", rest[3])
    if rest[0] == "activities" and len(rest) == 5 and rest[2] == "date":
        return ("activities", rest[1], rest[3], rest[4])
    if rest[0] in ("hrv", "br", "spo2") and len(rest) == 4 and rest[1] == "date":
        return (rest[0], rest[2], rest[3])
    if rest[:3] == ["temp", "skin", "date"] and len(rest) == 5:
        return ("temp", rest[3], rest[4])
    if rest[:3] == ["body", "log", "weight"] and len(rest) == 6 and rest[3] == "date":
        return ("weight", rest[4], rest[5])
    if rest[:3] == ["body", "log", "fat"] and len(rest) == 6 and rest[3] == "date":
        return ("fat", rest[4], rest[5])
    raise ValueError(path)


def _error_body(kind: str, message: str) -> dict[str, Any]:
    return {"errors": [{"errorType": kind, "message": message}], "success": False}


def _errors(status: int, kind: str, message: str) -> Response:
    return JSONResponse(_error_body(kind, message), status_code=status)


def _challenge(verifier: str) -> str:
    """RFC 7636 S256."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def create_app(fake: FakeFitbit) -> Starlette:
    return Starlette(
        routes=[
            Route("/fitbit/authorize", fake.authorize, methods=["GET"]),
            Route("/oauth2/authorize", fake.authorize, methods=["GET"]),
            Route("/fitbit/token", fake.token, methods=["POST"]),
            Route("/oauth2/token", fake.token, methods=["POST"]),
            Route("/fitbit/revoke", fake.revoke_token, methods=["POST"]),
            Route("/oauth2/revoke", fake.revoke_token, methods=["POST"]),
            Route("/{version}/user/{rest:path}", fake.data, methods=["GET", "POST"]),
        ]
    )


@contextmanager
def running_fake_fitbit(
    fake: FakeFitbit | None = None, *, host: str = "127.0.0.1", port: int = 0
) -> Iterator[FakeFitbit]:
    """Serve a fake Fitbit with uvicorn in a thread; yields it with its `base` URL set."""
    fake = fake or FakeFitbit()
    with served(create_app(fake), "the fake Fitbit", host, port) as base:
        fake.base = base
        yield fake


def main() -> None:  # pragma: no cover - a manual sandbox
    parser = argparse.ArgumentParser(description="A fake Fitbit cloud on localhost.")
    parser.add_argument("--port", type=int, default=8012)
    parser.add_argument("--client-id", default="sandbox-client")
    parser.add_argument("--client-secret", default="sandbox-secret")
    args = parser.parse_args()
    with running_fake_fitbit(port=args.port) as fake:
        fake.register(args.client_id, args.client_secret)
        print(f"fake Fitbit at {fake.base} (client {args.client_id}); Ctrl-C to stop")
        with suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":  # pragma: no cover
    main()
