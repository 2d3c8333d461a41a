"""A fake Abbott LibreView cloud: a real HTTP server on localhost whose people sign in with
an e-mail address and password (with a second factor when their account has one turned
on), or with a one-time code sent to their e-mail, and whose FreeStyle Libre sensors' glucose
it serves (docs/makers/abbott_libreview.md says what is modelled on LibreView and what is
ours).

- `POST {base}/auth/login` `{username, password}`: 200 `{"status": "ok", "grant": {...}}`,
  or 200 `{"status": "mfa_required", "challenge", "method", "hint"}` for an account with
  a second factor (the code goes to the fake's `outbox`); 401 `invalid_credentials`,
  403 `password_expired`, 423 `account_locked` (and after `LOCK_AFTER` wrong passwords).
- `POST {base}/auth/email_code` `{email}`: 200 `{"status": "code_sent", ...}`, for any
  address (no account enumeration); the code is in the `outbox` when the account exists.
- `POST {base}/auth/verify` `{challenge, code}`: 200 the grant; 401 `invalid_code` (a
  challenge is used once, right or wrong, and lives 10 minutes).
- `GET {base}/glucose?start=YYYY-MM-DD&end=YYYY-MM-DD` (Bearer): `{"data": [{"id",
  "timestamp", "value", "unit"}]}`, a reading every 15 minutes (mg/dL); 401 for a token
  it did not grant or revoked. `POST {base}/auth/logout` (Bearer) ends a grant.
- Switches: `fail(status, times, path=)`, `slow(seconds)`, `lock(person)`,
  `expire_password(person)`, `require_mfa(person, method)`, `revoke(person)`.

A day's readings are a function of (person, day), so tests compute what the service must
answer. Run it alone: `python -m healthledger.adapters.makers.fake_libreview --port 8018`.
"""

from __future__ import annotations

import argparse
import secrets
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import anyio
from healthledger.adapters.makers.serving import FailureSwitches, days, seeded, served
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

INTERVAL = timedelta(minutes=15)
CODE_LIFETIME = timedelta(minutes=10)
# Wrong passwords in a row that lock an account, as LibreView's sign-in does.
LOCK_AFTER = 5
ACCESS_LIFETIME = timedelta(days=180)
CLIENT_ID = "fake-libreview"


@dataclass
class Person:
    key: str
    email: str
    password: str
    mfa: str | None = None  # "sms" or "email": the second factor the account has on
    phone: str = "+15550100"
    locked: bool = False
    password_expired: bool = False
    wrong_passwords: int = 0

    @property
    def account_id(self) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"fake-libreview:{self.key}"))


def _people() -> dict[str, Person]:
    return {
        p.key: p
        for p in (
            Person("lena", "lena@example.com", "correct horse battery"),
            Person("omar", "omar@example.com", "staple 42", mfa="sms"),
            Person("ruth", "ruth@example.com", "tr0ub4dor&3", mfa="email"),
        )
    }


@dataclass
class _Challenge:
    person: str
    code: str
    issued_at: datetime


@dataclass
class FakeLibreView:
    base: str = ""
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    people: dict[str, Person] = field(default_factory=_people)
    history_days: int = 90
    switches: FailureSwitches = field(default_factory=FailureSwitches)
    # The codes "sent" (address or phone -> last code): what the person would read.
    outbox: dict[str, str] = field(default_factory=dict)
    # What the fake saw: (method, path, HTTP status); never a body (passwords).
    requests: list[tuple[str, str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _challenges: dict[str, _Challenge] = field(default_factory=dict)
    _access: dict[str, str] = field(default_factory=dict)

    # -- switches -------------------------------------------------------------------------

    def fail(self, status: int, times: int = 1, *, path: str | None = None) -> None:
        self.switches.fail(status, times, path=path)

    def slow(self, seconds: float, times: int = 1) -> None:
        self.switches.slow(seconds, times)

    def lock_account(self, person: str) -> None:
        self.people[person].locked = True

    def expire_password(self, person: str) -> None:
        self.people[person].password_expired = True

    def require_mfa(self, person: str, method: str | None) -> None:
        self.people[person].mfa = method

    def revoke(self, person: str) -> None:
        with self.lock:
            for token in [t for t, p in self._access.items() if p == person]:
                del self._access[token]

    def register(self, client_id: str, secret: str) -> None:
        """Nothing to register: a credential maker has no OAuth client (the sandbox's
        runner interface)."""

    # -- what a person's sensor read --------------------------------------------------------

    def readings(self, person: str, day: date) -> list[dict[str, Any]]:
        """The person's readings of one UTC day (mg/dL), a function of (person, day)."""
        today = self.clock().date()
        if day > today or day < today - timedelta(days=self.history_days):
            return []
        rng = seeded("libreview", person, day.isoformat())
        base = rng.uniform(95, 125)
        found = []
        moment = datetime.combine(day, time(0), UTC)
        end = min(moment + timedelta(days=1), self.clock())
        while moment < end:
            value = round(base + rng.uniform(-25, 45))
            found.append(
                {
                    "id": f"{person}-{moment:%Y%m%d%H%M}",
                    "timestamp": moment.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "value": value,
                    "unit": "mg/dL",
                }
            )
            moment += INTERVAL
        return found

    # -- the app ----------------------------------------------------------------------------

    def _grant(self, person: Person) -> dict[str, Any]:
        token = secrets.token_urlsafe(24)
        with self.lock:
            self._access[token] = person.key
        return {
            "access_token": token,
            "expires_in": int(ACCESS_LIFETIME.total_seconds()),
            "account_id": person.account_id,
        }

    def _challenge(self, person: Person | None, method: str) -> dict[str, Any]:
        challenge = secrets.token_urlsafe(18)
        code = f"{secrets.randbelow(1_000_000):06d}"
        if person is not None:
            with self.lock:
                self._challenges[challenge] = _Challenge(person.key, code, self.clock())
            self.outbox[person.phone if method == "sms" else person.email] = code
        hint = "•••" + (person.phone[-2:] if person and method == "sms" else "@example.com")
        return {"status": "mfa_required", "challenge": challenge, "method": method, "hint": hint}

    def app(self) -> Starlette:
        async def answered(request: Request, answer: Callable[[], Response]) -> Response:
            failure, delay = self.switches.injected(request.url.path)
            if delay:
                await anyio.sleep(delay)
            response = (
                JSONResponse({"error": "injected"}, status_code=failure.status)
                if failure is not None
                else answer()
            )
            self.requests.append((request.method, request.url.path, response.status_code))
            return response

        async def body(request: Request) -> dict[str, Any]:
            try:
                found = await request.json()
            except ValueError:
                return {}
            return found if isinstance(found, dict) else {}

        def refused(error: str, status: int) -> Response:
            return JSONResponse({"error": error}, status_code=status)

        async def login(request: Request) -> Response:
            sent = await body(request)

            def answer() -> Response:
                person = next(
                    (p for p in self.people.values() if p.email == sent.get("username")), None
                )
                if person is None:
                    return refused("invalid_credentials", 401)
                if person.locked:
                    return refused("account_locked", 423)
                if person.password != sent.get("password"):
                    person.wrong_passwords += 1
                    if person.wrong_passwords >= LOCK_AFTER:
                        person.locked = True
                    return refused("invalid_credentials", 401)
                person.wrong_passwords = 0
                if person.password_expired:
                    return refused("password_expired", 403)
                if person.mfa is not None:
                    return JSONResponse(self._challenge(person, person.mfa))
                return JSONResponse({"status": "ok", "grant": self._grant(person)})

            return await answered(request, answer)

        async def email_code(request: Request) -> Response:
            sent = await body(request)

            def answer() -> Response:
                person = next(
                    (p for p in self.people.values() if p.email == sent.get("email")), None
                )
                if person is not None and person.locked:
                    return refused("account_locked", 423)
                return JSONResponse({**self._challenge(person, "email"), "status": "code_sent"})

            return await answered(request, answer)

        async def verify(request: Request) -> Response:
            sent = await body(request)

            def answer() -> Response:
                with self.lock:
                    found = self._challenges.pop(str(sent.get("challenge")), None)
                if (
                    found is None
                    or self.clock() >= found.issued_at + CODE_LIFETIME
                    or not secrets.compare_digest(found.code, str(sent.get("code", "")))
                ):
                    return refused("invalid_code", 401)
                return JSONResponse(
                    {"status": "ok", "grant": self._grant(self.people[found.person])}
                )

            return await answered(request, answer)

        def person_of(request: Request) -> str | None:
            header = request.headers.get("authorization", "")
            token = header.removeprefix("Bearer ") if header.startswith("Bearer ") else ""
            with self.lock:
                return self._access.get(token)

        async def glucose(request: Request) -> Response:
            def answer() -> Response:
                person = person_of(request)
                if person is None:
                    return refused("invalid_token", 401)
                try:
                    start = date.fromisoformat(request.query_params["start"])
                    end = date.fromisoformat(request.query_params["end"])
                except (KeyError, ValueError):
                    return refused("invalid_range", 400)
                if end < start or (end - start).days > 31:
                    return refused("invalid_range", 400)
                data = [r for day in days(start, end) for r in self.readings(person, day)]
                return JSONResponse({"data": data})

            return await answered(request, answer)

        async def logout(request: Request) -> Response:
            def answer() -> Response:
                header = request.headers.get("authorization", "")
                with self.lock:
                    self._access.pop(header.removeprefix("Bearer "), None)
                return Response(status_code=204)

            return await answered(request, answer)

        return Starlette(
            routes=[
                Route("/auth/login", login, methods=["POST"]),
                Route("/auth/email_code", email_code, methods=["POST"]),
                Route("/auth/verify", verify, methods=["POST"]),
                Route("/auth/logout", logout, methods=["POST"]),
                Route("/glucose", glucose, methods=["GET"]),
            ]
        )


@contextmanager
def running_fake_libreview(
    host: str = "127.0.0.1", port: int = 0, **options: Any
) -> Iterator[FakeLibreView]:
    fake = FakeLibreView(**options)
    with served(fake.app(), "the fake LibreView", host, port) as base:
        fake.base = base
        yield fake


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8018)
    args = parser.parse_args()
    with running_fake_libreview(args.host, args.port) as fake:
        print(f"fake LibreView at {fake.base}", flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
