"""A fake Dexcom cloud: a real HTTP server on localhost that serves the Dexcom API v3 as
documented (docs/makers/dexcom.md) for a few synthetic people, and its OAuth 2.0
endpoints.

- OAuth: `GET {base}/dexcom/authorize` (also `/dexcom_v3/authorize` and Dexcom's own
  `/v2/oauth2/login`) signs the person in at once (no consent screen: the person is
  `?fake_person=` or `default_person`) and sends the browser back with a code; `POST
  {base}/dexcom/token` (also `/dexcom_v3/token`, `/v2/oauth2/token`) exchanges it and
  refreshes as RFC 6749 says (client_secret_post; refresh tokens single use; a refusal is
  a 400 `invalid_grant`). With `HEALTHLEDGER_OAUTH_MAKER_URL={base}` the service's OAuth
  client uses these endpoints.
- Data: `GET {base}/v3/users/self/egvs` (`startDate`/`endDate` in UTC without an offset,
  at most 30 days apart: a longer, reversed or unreadable window is Dexcom's 400),
  `/v3/users/self/dataRange`, `/v3/users/self/devices`. With
  `HEALTHLEDGER_DEXCOM_API_URL={base}` the Dexcom reader reads here.
- Errors as Dexcom answers them: 401 for an expired, revoked or unknown token, and
  whatever `fail(status, times, retry_after=)` injects (429, 500, 503...).
- Switches: `fail`, `slow(seconds, times)`, `revoke(person)`, `restore(person)`,
  `revise(person, day)` (the day's EGVs sent again changed, under the same `recordId`),
  `expires_in`.

A person's sensor readings come every 5 minutes from the start of their sensor history
(`worn_days` before today, or the whole `history_days`) to now; a day is a function of
(person, day, revision), so tests can compute what the service must answer.

Run it alone: `python -m healthledger.adapters.makers.fake_dexcom --port 8015`.
"""

from __future__ import annotations

import argparse
import secrets
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from urllib.parse import parse_qs, urlencode

import anyio
from healthledger.adapters.makers.serving import days, seeded, served
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

INTERVAL = timedelta(minutes=5)
# Dexcom's documented limit of one request's window.
MAX_WINDOW = timedelta(days=30)
MG_DL_PER_MMOL_L = 18.0156
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"


@dataclass(frozen=True)
class Person:
    """A synthetic Dexcom user: the unit their app shows, and how long they have worn a
    sensor (None: the whole history)."""

    key: str
    unit: str
    worn_days: int | None
    device: str  # displayDevice: a phone's records carry an offset, a receiver's none
    offset: timedelta


PEOPLE: dict[str, Person] = {
    p.key: p
    for p in (
        Person("gail", "mg/dL", None, "iOS", timedelta(hours=-5)),
        Person("hugo", "mmol/L", None, "android", timedelta(hours=1)),
        Person("ines", "mg/dL", 20, "receiver", timedelta(hours=2)),
    )
}


@dataclass
class _Failure:
    status: int
    times: int
    retry_after: int | None


@dataclass
class _Grant:
    person: str
    client_id: str
    expires_at: datetime | None


@dataclass
class FakeDexcom:
    base: str = ""
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    default_person: str = "gail"
    clients: dict[str, str] = field(default_factory=dict)
    expires_in: int = 7200  # Dexcom's access tokens last 2 hours
    history_days: int = 2 * 365
    # What the fake saw: (method, path, params, HTTP status), in order.
    requests: list[tuple[str, str, dict[str, str], int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _codes: dict[str, dict[str, str]] = field(default_factory=dict)
    _access: dict[str, _Grant] = field(default_factory=dict)
    _refresh: dict[str, _Grant] = field(default_factory=dict)
    _revoked: set[str] = field(default_factory=set)
    _failures: list[_Failure] = field(default_factory=list)
    _slow: list[float] = field(default_factory=list)
    _revisions: dict[tuple[str, date], int] = field(default_factory=dict)

    # -- switches -----------------------------------------------------------------------

    def register(self, client_id: str, secret: str) -> None:
        self.clients[client_id] = secret

    def fail(self, status: int, times: int = 1, *, retry_after: int | None = None) -> None:
        """The next `times` data requests answer HTTP `status` (429 with `Retry-After`
        when `retry_after` is given, 401, 5xx)."""
        with self.lock:
            self._failures.append(_Failure(status, times, retry_after))

    def slow(self, seconds: float, times: int = 1) -> None:
        """The next `times` data requests wait `seconds` before answering."""
        with self.lock:
            self._slow.extend([seconds] * times)

    def revoke(self, person: str) -> None:
        """The person removed the application's access at Dexcom: every token refused."""
        with self.lock:
            self._revoked.add(person)

    def restore(self, person: str) -> None:
        """The person allows the application again (old tokens stay refused)."""
        with self.lock:
            self._revoked.discard(person)
            self._access = {k: g for k, g in self._access.items() if g.person != person}
            self._refresh = {k: g for k, g in self._refresh.items() if g.person != person}

    def revise(self, person: str, day: date) -> None:
        """The person's EGVs of the UTC `day` are sent again changed, same recordIds."""
        with self.lock:
            self._revisions[(person, day)] = self._revisions.get((person, day), 0) + 1

    def data_requests(self, path: str = "/v3/users/self/egvs") -> list[dict[str, str]]:
        """The params of the data requests answered 200 at `path`."""
        return [q for _, p, q, s in self.requests if p == path and s == 200]

    # -- the synthetic data ---------------------------------------------------------------

    def first_moment(self, person: Person) -> datetime:
        today = self.clock().astimezone(UTC).date()
        worn = self.history_days if person.worn_days is None else person.worn_days
        return datetime.combine(today - timedelta(days=worn), time(0), UTC)

    def egvs(self, person: Person, day: date) -> list[dict[str, Any]]:
        """The EGV records of the UTC `day`, every 5 minutes, up to now."""
        start = datetime.combine(day, time(0), UTC)
        first, now = self.first_moment(person), self.clock()
        if start + timedelta(days=1) <= first or start > now:
            return []
        rng = seeded(person.key, "egvs", day)
        values = seeded(person.key, "egvs", day, self._revisions.get((person.key, day), 0))
        records = []
        moment = start + timedelta(seconds=rng.randint(0, 299))
        drift = 0.0
        while moment < start + timedelta(days=1) and moment <= now:
            drift = 0.9 * drift + values.gauss(0, 4)
            mg = max(40, min(400, round(110 + 30 * _meal(moment) + drift)))
            if moment >= first:
                records.append(self._record(person, moment, mg, drift))
            moment += INTERVAL
        return records

    def _record(self, person: Person, moment: datetime, mg: int, drift: float) -> dict[str, Any]:
        shown = (moment + person.offset).strftime(TIME_FORMAT)
        if person.device != "receiver":  # a phone's records carry its offset
            minutes = int(person.offset.total_seconds() // 60)
            shown += f"{'+' if minutes >= 0 else '-'}{abs(minutes) // 60:02}:{abs(minutes) % 60:02}"
        mmol = person.unit == "mmol/L"
        trend_rate = round(drift / 5, 1)
        return {
            "recordId": str(uuid.uuid5(uuid.NAMESPACE_URL, f"dexcom/{person.key}/{moment}")),
            "systemTime": moment.strftime(TIME_FORMAT),
            "displayTime": shown,
            "transmitterId": f"{person.key}-tx",
            "transmitterTicks": int(moment.timestamp()) % 10_000_000,
            "value": round(mg / MG_DL_PER_MMOL_L, 1) if mmol else mg,
            "status": None,
            "trend": "flat"
            if abs(trend_rate) < 1
            else ("singleUp" if trend_rate > 0 else "singleDown"),
            "trendRate": round(trend_rate / MG_DL_PER_MMOL_L, 2) if mmol else trend_rate,
            "unit": person.unit,
            "rateUnit": f"{person.unit}/min",
            "displayDevice": person.device,
            "transmitterGeneration": "g7",
        }

    def served_between(
        self, person: Person, begin: datetime, end: datetime
    ) -> list[dict[str, Any]]:
        """The records with begin <= systemTime < end, in time order."""
        found = []
        for day in days(begin.date(), (end - timedelta(microseconds=1)).date()):
            for record in self.egvs(person, day):
                moment = datetime.strptime(record["systemTime"], TIME_FORMAT).replace(tzinfo=UTC)
                if begin <= moment < end:
                    found.append(record)
        return found

    def data_range(self, person: Person) -> dict[str, Any] | None:
        now = self.clock()
        first = self.first_moment(person)
        if first > now:
            return None
        firsts = self.egvs(person, first.date())
        lasts = self.egvs(person, now.date()) or self.egvs(person, now.date() - timedelta(days=1))
        if not firsts or not lasts:
            return None
        edge = lambda r: {"systemTime": r["systemTime"], "displayTime": r["displayTime"]}  # noqa: E731
        return {"start": edge(firsts[0]), "end": edge(lasts[-1])}

    # -- OAuth ------------------------------------------------------------------------------

    def _issue(self, grant: _Grant) -> dict[str, Any]:
        access, refresh = secrets.token_hex(20), secrets.token_hex(20)
        live = _Grant(
            grant.person, grant.client_id, self.clock() + timedelta(seconds=self.expires_in)
        )
        self._access[access] = live
        self._refresh[refresh] = live
        return {
            "access_token": access,
            "refresh_token": refresh,
            "expires_in": self.expires_in,
            "token_type": "Bearer",
        }

    async def authorize(self, request: Request) -> Response:
        query = dict(request.query_params)
        self.requests.append(("GET", request.url.path, {}, 302))
        client_id, redirect_uri = query.get("client_id", ""), query.get("redirect_uri", "")
        person = query.get("fake_person", self.default_person)
        if client_id not in self.clients or not redirect_uri or person not in PEOPLE:
            return JSONResponse({"error": "invalid_request"}, status_code=400)
        if query.get("response_type") != "code" or not query.get("state"):
            return JSONResponse({"error": "invalid_request"}, status_code=400)
        code = secrets.token_hex(20)
        with self.lock:
            self._codes[code] = {
                "person": person,
                "client_id": client_id,
                "redirect_uri": redirect_uri,
            }
        back = urlencode({"code": code, "state": query.get("state", "")})
        return RedirectResponse(f"{redirect_uri}?{back}", status_code=302)

    async def token(self, request: Request) -> Response:
        form = {k: v[0] for k, v in parse_qs((await request.body()).decode()).items()}
        grant_type = form.get("grant_type", "")

        def answer(status: int, body: dict[str, Any]) -> Response:
            self.requests.append(("POST", request.url.path, {"grant_type": grant_type}, status))
            return JSONResponse(body, status_code=status)

        refused = {"error": "invalid_grant"}
        client_id = form.get("client_id", "")
        if self.clients.get(client_id) != form.get("client_secret"):
            return answer(401, {"error": "invalid_client"})
        with self.lock:
            if grant_type == "authorization_code":
                code = self._codes.pop(form.get("code", ""), None)  # used once
                if (
                    code is None
                    or code["client_id"] != client_id
                    or code["redirect_uri"] != form.get("redirect_uri")
                ):
                    return answer(400, refused)
                return answer(200, self._issue(_Grant(code["person"], client_id, None)))
            if grant_type == "refresh_token":
                held = self._refresh.pop(form.get("refresh_token", ""), None)  # single use
                if held is None or held.client_id != client_id or held.person in self._revoked:
                    return answer(400, refused)
                return answer(200, self._issue(held))
        return answer(400, {"error": "unsupported_grant_type"})

    # -- the data API -----------------------------------------------------------------------

    async def data(self, request: Request) -> Response:
        path = request.url.path
        params = dict(request.query_params)

        def answer(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
            self.requests.append(("GET", path, params, status))
            return JSONResponse(body, status_code=status, headers=headers)

        with self.lock:
            failure = self._failures[0] if self._failures else None
            if failure is not None:
                failure.times -= 1
                if failure.times <= 0:
                    self._failures.pop(0)
            delay = self._slow.pop(0) if self._slow else 0.0
        if delay:
            await anyio.sleep(delay)  # off the loop: other requests go on meanwhile
        if failure is not None:
            headers = (
                None if failure.retry_after is None else {"Retry-After": str(failure.retry_after)}
            )
            return answer(failure.status, {"error": "fake"}, headers)
        token = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        with self.lock:
            grant = self._access.get(token)
        if grant is None or grant.person in self._revoked:
            return answer(401, {"error": "invalid_token"})
        if grant.expires_at is not None and grant.expires_at <= self.clock():
            return answer(401, {"error": "invalid_token"})
        person = PEOPLE[grant.person]
        envelope = {"recordVersion": "3.0", "userId": f"fake-{person.key}"}
        if path.endswith("/dataRange"):
            return answer(
                200,
                {
                    "recordType": "dataRange",
                    **envelope,
                    "calibrations": None,
                    "events": None,
                    "egvs": self.data_range(person),
                },
            )
        if path.endswith("/devices"):
            device = {
                "transmitterGeneration": "g7",
                "displayDevice": person.device,
                "lastUploadDate": self.clock().strftime(TIME_FORMAT),
            }
            return answer(200, {"recordType": "device", **envelope, "records": [device]})
        window = _window(params)
        if window is None:
            # Dexcom's 400 for a window it does not answer (missing, unreadable, reversed,
            # or longer than 30 days).
            return answer(
                400,
                {
                    "error": "invalid_request",
                    "error_description": "startDate and endDate must span at most 30 days",
                },
            )
        records = self.served_between(person, *window)
        return answer(200, {"recordType": "egv", **envelope, "records": records})


def _meal(moment: datetime) -> float:
    """How far after a meal (breakfast, lunch, dinner, UTC) glucose has risen (0..1)."""
    hour = moment.hour + moment.minute / 60
    return sum(max(0.0, 1 - abs(hour - meal - 0.75) / 1.5) for meal in (7.5, 12.5, 19))


def _window(params: dict[str, str]) -> tuple[datetime, datetime] | None:
    try:
        begin = datetime.strptime(params["startDate"], TIME_FORMAT).replace(tzinfo=UTC)
        end = datetime.strptime(params["endDate"], TIME_FORMAT).replace(tzinfo=UTC)
    except (KeyError, ValueError):
        return None
    if end <= begin or end - begin > MAX_WINDOW:
        return None
    return begin, end


def create_app(fake: FakeDexcom) -> Starlette:
    return Starlette(
        routes=[
            *[
                Route(f"/{slug}/authorize", fake.authorize, methods=["GET"])
                for slug in ("dexcom", "dexcom_v3")
            ],
            Route("/v2/oauth2/login", fake.authorize, methods=["GET"]),
            *[
                Route(f"/{slug}/token", fake.token, methods=["POST"])
                for slug in ("dexcom", "dexcom_v3")
            ],
            Route("/v2/oauth2/token", fake.token, methods=["POST"]),
            Route("/v3/users/self/egvs", fake.data, methods=["GET"]),
            Route("/v3/users/self/dataRange", fake.data, methods=["GET"]),
            Route("/v3/users/self/devices", fake.data, methods=["GET"]),
        ]
    )


@contextmanager
def running_fake_dexcom(
    fake: FakeDexcom | None = None, *, host: str = "127.0.0.1", port: int = 0
) -> Iterator[FakeDexcom]:
    """Serve a fake Dexcom with uvicorn in a thread; yields it with its `base` URL set."""
    fake = fake or FakeDexcom()
    with served(create_app(fake), "the fake Dexcom", host, port) as base:
        fake.base = base
        yield fake


def main() -> None:  # pragma: no cover - a manual sandbox
    parser = argparse.ArgumentParser(description="A fake Dexcom cloud on localhost.")
    parser.add_argument("--port", type=int, default=8015)
    parser.add_argument("--client-id", default="sandbox-client")
    parser.add_argument("--client-secret", default="sandbox-secret")
    args = parser.parse_args()
    with running_fake_dexcom(port=args.port) as fake:
        fake.register(args.client_id, args.client_secret)
        print(f"fake Dexcom at {fake.base} (client {args.client_id}); Ctrl-C to stop")
        with suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":  # pragma: no cover
    main()
