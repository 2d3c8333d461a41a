"""A fake WHOOP cloud: a real HTTP server on localhost that serves WHOOP's API v2 as
documented (docs/makers/whoop.md) for a few synthetic people, and its OAuth 2.0 endpoints.

- OAuth: `GET {base}/whoop_v2/authorize` (also `/oauth/oauth2/auth`) signs the person in
  at once (no consent screen: the person is `?fake_person=` or `default_person`) and sends
  the browser back with a code; `POST {base}/whoop_v2/token` (also `/oauth/oauth2/token`)
  exchanges it and refreshes (refresh tokens are single use), as RFC 6749 answers. With
  `HEALTHLEDGER_OAUTH_MAKER_URL={base}` the service's OAuth client uses these endpoints.
- Data: `GET {base}/developer/v2/cycle`, `/recovery`, `/activity/sleep`,
  `/activity/workout` (`start`, `end`, `limit` up to 25, `nextToken`; answers `records`,
  newest first, and `next_token` while more remain), `/developer/v2/user/profile/basic`,
  `/developer/v2/user/measurement/body`, and `DELETE /developer/v2/user/access` (the
  application's access revoked). With `HEALTHLEDGER_WHOOP_API_URL={base}` the WHOOP
  reader reads here.
- Errors as WHOOP answers them: 401 for an expired, revoked or unknown token and for a
  scope not granted, 400 for a bad query, and whatever `fail(status)` injects (429 with
  or without `Retry-After`, 5xx).
- Switches: `fail(status, times, retry_after=, path=)`, `slow(seconds, times)`,
  `revoke(person)`, `restore(person)`, `revise(person, day)` (the day's cycle, recovery,
  sleeps and workouts scored again, changed, under the same ids), `denied_scopes`,
  `page_size` (records a page at most, whatever `limit` asks), `stuck_paging` (pages
  that never move on), `expires_in`.
- Webhooks: with `webhook_url` set, `revise` POSTs WHOOP's signed webhooks of the day's
  records (`notify(person, type, id)` sends one; `bad_signature` signs with another
  secret), through `callback_http`, which a test can mount its app on.

The data is deterministic: a person's day is a function of (person, day) and of the
revisions asked for, so tests can compute what the service must answer.

Run it alone: `python -m healthledger.adapters.makers.fake_whoop --port 8013`.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
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
import httpx
from healthledger.adapters.makers.serving import days, seeded, served
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

MAX_LIMIT = 25  # WHOOP's largest page
DEFAULT_LIMIT = 10
API = "/developer/v2"
# Each collection's path under API and the scope it needs (WHOOP's documented scopes).
SCOPE_OF = {
    "cycle": "read:cycles",
    "recovery": "read:recovery",
    "activity/sleep": "read:sleep",
    "activity/workout": "read:workout",
    "user/profile/basic": "read:profile",
    "user/measurement/body": "read:body_measurement",
}
_SPORTS = ("running", "cycling", "functional-fitness", "weightlifting", "yoga", "swimming")


@dataclass(frozen=True)
class Person:
    """A synthetic WHOOP member, at a fixed UTC offset."""

    key: str
    user_id: int
    offset: str  # WHOOP's `timezone_offset`
    height: float  # m
    weight: float  # kg
    max_hr: int

    @property
    def tz(self) -> timezone:
        sign = -1 if self.offset.startswith("-") else 1
        hours, minutes = self.offset[1:].split(":")
        return timezone(sign * timedelta(hours=int(hours), minutes=int(minutes)))


PEOPLE: dict[str, Person] = {
    p.key: p
    for p in (
        Person("gabe", 10_129, "-05:00", 1.83, 81.5, 191),
        Person("hana", 10_130, "+09:00", 1.62, 55.2, 186),
        Person("ines", 10_131, "+02:00", 1.70, 63.0, 188),
    )
}


def _uuid(*parts: object) -> str:
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=16).digest()
    return str(uuid.UUID(bytes=digest))


def _number(*parts: object) -> int:
    """A stable positive id (WHOOP's cycle ids are integers)."""
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=5).digest()
    return int.from_bytes(digest, "big")


def _z(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _instant(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


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
class FakeWhoop:
    base: str = ""
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    default_person: str = "gabe"
    clients: dict[str, str] = field(default_factory=dict)
    expires_in: int = 3600  # WHOOP's access tokens last an hour
    page_size: int = MAX_LIMIT
    # A broken maker: every page sends the cursor it was asked with, or the first's.
    stuck_paging: bool = False
    denied_scopes: set[str] = field(default_factory=set)
    history_days: int = 2 * 365
    # What the fake saw: (method, path, query, status), in order.
    requests: list[tuple[str, str, dict[str, str], int]] = field(default_factory=list)
    issued: list[str] = field(default_factory=list)
    # Access tokens whose access the application revoked (DELETE user/access), in order.
    revoked: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _codes: dict[str, dict[str, str]] = field(default_factory=dict)
    _access: dict[str, _Grant] = field(default_factory=dict)
    _refresh: dict[str, _Grant] = field(default_factory=dict)
    _revoked: set[str] = field(default_factory=set)
    _failures: list[_Failure] = field(default_factory=list)
    _slow: list[float] = field(default_factory=list)
    _revisions: dict[tuple[str, date], int] = field(default_factory=dict)
    # Webhooks: the URL set in WHOOP's developer dashboard (None: none sent), the client
    # that posts to it (a test may mount its app on it), what was sent and answered, and
    # a switch for signatures that are not the application's.
    webhook_url: str | None = None
    callback_http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=5.0))
    sent: list[tuple[bytes, dict[str, str], int]] = field(default_factory=list)
    bad_signature: bool = False

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
        """The next `times` data requests (to a path ending with `path`, if given, e.g.
        "activity/sleep") answer `status` (429 with `Retry-After: retry_after` when given,
        5xx...)."""
        with self.lock:
            self._failures.append(_Failure(status, times, retry_after, path))

    def slow(self, seconds: float, times: int = 1) -> None:
        """The next `times` data requests wait `seconds` before answering."""
        with self.lock:
            self._slow.extend([seconds] * times)

    def revoke(self, person: str) -> None:
        """The person removed the application at WHOOP: every token is refused."""
        with self.lock:
            self._revoked.add(person)

    def restore(self, person: str) -> None:
        """The person allows the application again (old tokens stay refused)."""
        with self.lock:
            self._revoked.discard(person)
            self._access = {k: g for k, g in self._access.items() if g.person != person}
            self._refresh = {k: g for k, g in self._refresh.items() if g.person != person}

    def revise(self, person: str, day: date) -> None:
        """The person's records of local `day` are scored again, changed, same ids; WHOOP
        tells the webhook URL, if one is set, of each (`sleep.updated`, `recovery.updated`
        naming the sleep's id as API v2 does, `workout.updated`)."""
        with self.lock:
            self._revisions[(person, day)] = self._revisions.get((person, day), 0) + 1
        if self.webhook_url is None:
            return
        member = PEOPLE[person]
        for sleep in self.sleeps(member, day):
            self.notify(person, "sleep.updated", sleep["id"])
        for recovery in self.recoveries(member, day):
            self.notify(person, "recovery.updated", recovery["sleep_id"])
        for workout in self.workouts(member, day):
            self.notify(person, "workout.updated", workout["id"])

    def notify(self, person: str, event_type: str, record_id: str | int) -> int:
        """POST WHOOP's webhook to `webhook_url`, signed with the first registered
        client's secret (`X-WHOOP-Signature`: base64 HMAC-SHA256 of the timestamp and the
        body); the HTTP status answered."""
        assert self.webhook_url is not None
        body = json.dumps(
            {
                "user_id": PEOPLE[person].user_id if person in PEOPLE else 99_999,
                "id": record_id,
                "type": event_type,
                "trace_id": secrets.token_hex(8),
            }
        ).encode()
        timestamp = str(int(self.clock().timestamp() * 1000))
        secret = next(iter(self.clients.values()), "")
        if self.bad_signature:
            secret = "not-" + secret
        digest = hmac.new(secret.encode(), timestamp.encode() + body, hashlib.sha256).digest()
        headers = {
            "Content-Type": "application/json",
            "X-WHOOP-Signature": base64.b64encode(digest).decode(),
            "X-WHOOP-Signature-Timestamp": timestamp,
        }
        return self.post(body, headers)

    def post(self, body: bytes, headers: dict[str, str]) -> int:
        """POST a webhook as it was sent (a retry of the same delivery)."""
        assert self.webhook_url is not None
        status = self.callback_http.post(
            self.webhook_url, content=body, headers=headers
        ).status_code
        self.sent.append((body, headers, status))
        return status

    def data_requests(self, collection: str | None = None) -> list[dict[str, str]]:
        """The queries of the data requests answered 200 (to `collection`, if given)."""
        prefix = f"{API}/" + (collection or "")
        return [q for m, p, q, s in self.requests if p.startswith(prefix) and s == 200]

    # -- the synthetic data ---------------------------------------------------------------

    def today(self, person: Person) -> date:
        return self.clock().astimezone(person.tz).date()

    def _kept(self, person: Person, day: date) -> bool:
        return self.today(person) - timedelta(days=self.history_days) <= day <= self.today(person)

    def _revision(self, person: Person, day: date) -> int:
        return self._revisions.get((person.key, day), 0)

    def _updated(self, person: Person, day: date, moment: datetime) -> str:
        return _z(moment + timedelta(minutes=5 + 60 * self._revision(person, day)))

    def _night(self, person: Person, day: date) -> tuple[datetime, datetime]:
        """The main sleep that ends on local `day`: from just after midnight (so that the
        night and the cycle it starts fall on `day`) for 6 to 9 hours."""
        rng = seeded(person.key, "night", day)
        begin = datetime.combine(day, time(0, 15), person.tz) + timedelta(
            minutes=rng.randint(0, 75)
        )
        return begin, begin + timedelta(minutes=rng.randint(360, 540))

    def cycles(self, person: Person, day: date) -> list[dict[str, Any]]:
        """The physiological cycle that starts on local `day` (at the night's onset, to the
        next night's: none yet while it runs)."""
        if not self._kept(person, day):
            return []
        begin, _ = self._night(person, day)
        now = self.clock()
        if begin > now:
            return []
        following, _ = self._night(person, day + timedelta(days=1))
        values = seeded(person.key, "cycle", day, self._revision(person, day))
        return [
            {
                "id": _number(person.key, "cycle", day),
                "user_id": person.user_id,
                "created_at": _z(begin),
                "updated_at": self._updated(person, day, begin),
                "start": _z(begin),
                "end": _z(following) if following <= now else None,
                "timezone_offset": person.offset,
                "score_state": "SCORED",
                "score": {
                    "strain": round(values.uniform(4, 19), 4),
                    "kilojoule": round(values.uniform(7000, 14000), 1),
                    "average_heart_rate": values.randint(58, 80),
                    "max_heart_rate": values.randint(130, person.max_hr),
                },
            }
        ]

    def sleeps(self, person: Person, day: date) -> list[dict[str, Any]]:
        """The sleeps that end on local `day`: the night, and a nap some afternoons."""
        if not self._kept(person, day):
            return []
        now = self.clock()
        rng = seeded(person.key, "sleeps", day)
        values = seeded(person.key, "sleep values", day, self._revision(person, day))
        night_start, night_end = self._night(person, day)
        periods: list[tuple[datetime, datetime, bool]] = [(night_start, night_end, False)]
        if rng.random() < 0.25:
            nap_start = datetime.combine(day, time(14), person.tz) + timedelta(
                minutes=rng.randint(0, 90)
            )
            periods.append((nap_start, nap_start + timedelta(minutes=rng.randint(20, 60)), True))
        found = []
        for begin, end, nap in periods:
            if end > now:
                continue
            in_bed = int((end - begin).total_seconds() * 1000)
            awake = values.randint(10, 50) * 60_000
            deep = values.randint(50, 110) * 60_000
            rem = values.randint(60, 120) * 60_000
            light = max(0, in_bed - awake - deep - rem)
            found.append(
                {
                    "id": _uuid(person.key, "sleep", day, nap),
                    "cycle_id": _number(person.key, "cycle", day),
                    "v1_id": _number(person.key, "sleep v1", day, nap),
                    "user_id": person.user_id,
                    "created_at": _z(end),
                    "updated_at": self._updated(person, day, end),
                    "start": _z(begin),
                    "end": _z(end),
                    "timezone_offset": person.offset,
                    "nap": nap,
                    "score_state": "SCORED",
                    "score": {
                        "stage_summary": {
                            "total_in_bed_time_milli": in_bed,
                            "total_awake_time_milli": awake,
                            "total_no_data_time_milli": 0,
                            "total_light_sleep_time_milli": light,
                            "total_slow_wave_sleep_time_milli": deep,
                            "total_rem_sleep_time_milli": rem,
                            "sleep_cycle_count": values.randint(3, 6),
                            "disturbance_count": values.randint(0, 15),
                        },
                        "sleep_needed": {
                            "baseline_milli": 27_000_000,
                            "need_from_sleep_debt_milli": values.randint(0, 3_600_000),
                            "need_from_recent_strain_milli": values.randint(0, 1_800_000),
                            "need_from_recent_nap_milli": 0,
                        },
                        "respiratory_rate": round(values.uniform(13, 18), 6),
                        "sleep_performance_percentage": values.randint(55, 100),
                        "sleep_consistency_percentage": values.randint(50, 99),
                        "sleep_efficiency_percentage": round(values.uniform(80, 98), 6),
                    },
                }
            )
        return found

    def recoveries(self, person: Person, day: date) -> list[dict[str, Any]]:
        """The recovery scored after the night that ends on local `day`."""
        night = [s for s in self.sleeps(person, day) if not s["nap"]]
        if not night:
            return []
        scored = _instant(night[0]["end"]) + timedelta(minutes=2)
        values = seeded(person.key, "recovery", day, self._revision(person, day))
        return [
            {
                "cycle_id": _number(person.key, "cycle", day),
                "sleep_id": night[0]["id"],
                "user_id": person.user_id,
                "created_at": _z(scored),
                "updated_at": self._updated(person, day, scored),
                "score_state": "SCORED",
                "score": {
                    "user_calibrating": False,
                    "recovery_score": values.randint(10, 99),
                    "resting_heart_rate": values.randint(44, 64),
                    "hrv_rmssd_milli": round(values.uniform(25, 120), 6),
                    "spo2_percentage": round(values.uniform(94, 99.5), 6),
                    "skin_temp_celsius": round(values.uniform(32.5, 35.5), 6),
                },
            }
        ]

    def workouts(self, person: Person, day: date) -> list[dict[str, Any]]:
        """The workouts that start on local `day` (none, one or two)."""
        if not self._kept(person, day):
            return []
        rng = seeded(person.key, "workouts", day)
        values = seeded(person.key, "workout values", day, self._revision(person, day))
        found = []
        for number in range(rng.choice((0, 0, 1, 1, 1, 2))):
            begin = datetime.combine(day, time(9 + 8 * number), person.tz) + timedelta(
                minutes=rng.randint(0, 180)
            )
            end = begin + timedelta(minutes=rng.randint(20, 95))
            if end > self.clock():
                continue
            found.append(
                {
                    "id": _uuid(person.key, "workout", day, number),
                    "v1_id": _number(person.key, "workout v1", day, number),
                    "user_id": person.user_id,
                    "created_at": _z(end),
                    "updated_at": self._updated(person, day, end),
                    "start": _z(begin),
                    "end": _z(end),
                    "timezone_offset": person.offset,
                    "sport_name": rng.choice(_SPORTS),
                    "sport_id": rng.randint(0, 100),
                    "score_state": "SCORED",
                    "score": {
                        "strain": round(values.uniform(2, 18), 4),
                        # Below the maximum's least (150): an average never tops the max.
                        "average_heart_rate": values.randint(100, 145),
                        "max_heart_rate": values.randint(150, person.max_hr),
                        "kilojoule": round(values.uniform(400, 3500), 1),
                        "percent_recorded": 100,
                        "distance_meter": round(values.uniform(1000, 20000), 1),
                        "altitude_gain_meter": round(values.uniform(0, 200), 1),
                        "altitude_change_meter": round(values.uniform(-20, 20), 1),
                        "zone_durations": {
                            f"zone_{name}_milli": values.randint(0, 1_200_000)
                            for name in ("zero", "one", "two", "three", "four", "five")
                        },
                    },
                }
            )
        return found

    def records(self, name: str, person: Person, day: date) -> list[dict[str, Any]]:
        maker = {
            "cycle": self.cycles,
            "recovery": self.recoveries,
            "activity/sleep": self.sleeps,
            "activity/workout": self.workouts,
        }[name]
        return maker(person, day)

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
        answer: dict[str, Any] = {
            "token_type": "bearer",
            "access_token": access,
            "expires_in": self.expires_in,
            "scope": grant.scope,
        }
        if "offline" in grant.scope.split():  # WHOOP grants a refresh token for `offline`
            self._refresh[refresh] = live
            answer["refresh_token"] = refresh
        return answer

    async def authorize(self, request: Request) -> Response:
        query = dict(request.query_params)
        self.requests.append(("GET", request.url.path, {}, 302))
        client_id, redirect_uri = query.get("client_id", ""), query.get("redirect_uri", "")
        if client_id not in self.clients or not redirect_uri:
            return JSONResponse({"error": "invalid_client"}, status_code=400)
        if query.get("response_type") != "code":
            return JSONResponse({"error": "unsupported_response_type"}, status_code=400)
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
                    or (
                        code["challenge"]
                        and _challenge(form.get("code_verifier", "")) != code["challenge"]
                    )
                ):
                    return answer({"error": "invalid_grant"}, 400)
                return answer(self._issue(_Grant(code["person"], client_id, code["scope"], None)))
            if grant_type == "refresh_token":
                held = self._refresh.pop(form.get("refresh_token", ""), None)  # single use
                if held is None or held.client_id != client_id or held.person in self._revoked:
                    return answer({"error": "invalid_grant"}, 400)
                return answer(self._issue(held))
        return answer({"error": "unsupported_grant_type"}, 400)

    # -- the data API -----------------------------------------------------------------------

    def _injected(self, path: str) -> tuple[_Failure | None, float]:
        with self.lock:
            failure = None
            for candidate in self._failures:
                if candidate.path is None or path.endswith(candidate.path):
                    failure = candidate
                    candidate.times -= 1
                    if candidate.times <= 0:
                        self._failures.remove(candidate)
                    break
            delay = self._slow.pop(0) if self._slow else 0.0
        return failure, delay

    def _grant_of(self, request: Request) -> _Grant | None:
        token = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        with self.lock:
            grant = self._access.get(token)
        if grant is None or grant.person in self._revoked:
            return None
        if grant.expires_at is not None and grant.expires_at <= self.clock():
            return None
        return grant

    async def data(self, request: Request) -> Response:
        path = request.url.path
        query = dict(request.query_params)

        def answer(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
            self.requests.append(("GET", path, query, status))
            return JSONResponse(body, status_code=status, headers=headers)

        failure, delay = self._injected(path)
        if delay:
            await anyio.sleep(delay)  # off uvicorn's loop thread: other requests go on
        if failure is not None:
            headers = {"Retry-After": failure.retry_after} if failure.retry_after else None
            return answer({"message": "error"}, failure.status, headers)
        grant = self._grant_of(request)
        if grant is None:
            return answer({"message": "Authorization was not valid"}, 401)
        name = path.removeprefix(f"{API}/")
        if name not in SCOPE_OF:
            return answer({"message": "Not Found"}, 404)
        if SCOPE_OF[name] not in grant.scope.split():
            return answer({"message": "Authorization was not valid"}, 401)
        person = PEOPLE[grant.person]
        if name == "user/profile/basic":
            return answer(
                {
                    "user_id": person.user_id,
                    "email": f"{person.key}@example.com",
                    "first_name": person.key.capitalize(),
                    "last_name": "Fake",
                }
            )
        if name == "user/measurement/body":
            return answer(
                {
                    "height_meter": person.height,
                    "weight_kilogram": person.weight,
                    "max_heart_rate": person.max_hr,
                }
            )
        try:
            limit = int(query.get("limit", DEFAULT_LIMIT))
            first = _instant(query["start"]) if "start" in query else None
            last = _instant(query["end"]) if "end" in query else self.clock()
        except (KeyError, ValueError):
            return answer({"message": "invalid query"}, 400)
        if not 1 <= limit <= MAX_LIMIT:
            return answer({"message": "limit must be between 1 and 25"}, 400)
        documents = self._window(name, person, first, last)
        offset = _offset(query.get("nextToken"), query)
        if offset is None:
            return answer({"message": "invalid nextToken"}, 400)
        size = min(limit, self.page_size)
        page = documents[offset : offset + size]
        following = offset + size if offset + size < len(documents) else None
        if self.stuck_paging:
            following = offset if offset else size
        body: dict[str, Any] = {"records": page}
        if following is not None:
            body["next_token"] = _token(following, query)
        return answer(body)

    def _window(
        self, name: str, person: Person, first: datetime | None, last: datetime
    ) -> list[dict[str, Any]]:
        """The collection's records whose start (a recovery: when it was scored) is in
        [first, last), newest first, as WHOOP lists them."""
        low = (first or last - timedelta(days=self.history_days + 2)).astimezone(person.tz)
        high = last.astimezone(person.tz)
        moment = "created_at" if name == "recovery" else "start"
        found = [
            record
            for day in days(low.date() - timedelta(days=1), high.date() + timedelta(days=1))
            for record in self.records(name, person, day)
            if (first is None or first <= _instant(record[moment]))
            and _instant(record[moment]) < last
        ]
        return sorted(found, key=lambda r: r[moment], reverse=True)

    async def revoke_access(self, request: Request) -> Response:
        """`DELETE /developer/v2/user/access`: the application's access ended (every
        token of the grant); a `fail(..., path="user/access")` answers it too."""
        failure, _ = self._injected(request.url.path)
        if failure is not None:
            status = failure.status
        else:
            token = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
            with self.lock:
                grant = self._access.pop(token, None)
                if grant is not None:  # every token of the person's grant to this client

                    def kept(other: _Grant) -> bool:
                        return (other.person, other.client_id) != (grant.person, grant.client_id)

                    self._access = {k: g for k, g in self._access.items() if kept(g)}
                    self._refresh = {k: g for k, g in self._refresh.items() if kept(g)}
                    self.revoked.append(token)
            status = 204 if grant is not None else 401
        self.requests.append(("DELETE", request.url.path, {}, status))
        return Response(status_code=status)


def _fingerprint(query: dict[str, str]) -> str:
    kept = {k: v for k, v in sorted(query.items()) if k != "nextToken"}
    return hashlib.sha256(json.dumps(kept).encode()).hexdigest()[:16]


def _token(offset: int, query: dict[str, str]) -> str:
    """An opaque cursor, valid only with the same query (as a maker's is)."""
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


def create_app(fake: FakeWhoop) -> Starlette:
    return Starlette(
        routes=[
            Route("/whoop_v2/authorize", fake.authorize, methods=["GET"]),
            Route("/oauth/oauth2/auth", fake.authorize, methods=["GET"]),
            Route("/whoop_v2/token", fake.token, methods=["POST"]),
            Route("/oauth/oauth2/token", fake.token, methods=["POST"]),
            Route(f"{API}/user/access", fake.revoke_access, methods=["DELETE"]),
            Route(f"{API}/{{name:path}}", fake.data, methods=["GET"]),
        ]
    )


@contextmanager
def running_fake_whoop(
    fake: FakeWhoop | None = None, *, host: str = "127.0.0.1", port: int = 0
) -> Iterator[FakeWhoop]:
    """Serve a fake WHOOP with uvicorn in a thread; yields it with its `base` URL set."""
    fake = fake or FakeWhoop()
    with served(create_app(fake), "the fake WHOOP", host, port) as base:
        fake.base = base
        yield fake


def main() -> None:  # pragma: no cover - a manual sandbox
    parser = argparse.ArgumentParser(description="A fake WHOOP cloud on localhost.")
    parser.add_argument("--port", type=int, default=8013)
    parser.add_argument("--client-id", default="sandbox-client")
    parser.add_argument("--client-secret", default="sandbox-secret")
    args = parser.parse_args()
    with running_fake_whoop(port=args.port) as fake:
        fake.register(args.client_id, args.client_secret)
        print(f"fake WHOOP at {fake.base} (client {args.client_id}); Ctrl-C to stop")
        with suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":  # pragma: no cover
    main()
