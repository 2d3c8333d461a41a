"""The Polar reader: Polar AccessLink v3 behind the provider port (docs/makers/polar.md).

The link flow and the tokens are the generic OAuth 2.0 adapter's (through `MakerReader`,
ADR 0022): HTTP Basic client authentication, the person's Polar user id in the token answer's
`x_user_id` (the catalog's `user_id_field`). Polar's access tokens last for years and come
without a refresh token: a token Polar refuses is a grant gone (the connection's
`error`, token_refresh_failed).

- Registration. Polar serves nothing of a person until the partner registers them
  (`POST /v3/users` with our `member-id`): done at the sign-in, and again at a pull that
  finds the person unregistered (a sign-in whose registration Polar could not take then).
  A 409 (registered already) is done.
- Transactions. Exercises, daily activity and physical information come through
  transactions: `POST .../<kind>-transactions` opens one (201 with its id; 204: nothing
  new), its list names every record's URL, and `PUT` commits it: what is committed Polar
  never serves again, what is not it serves again in a later transaction. So a
  transaction is committed only once the pull engine says the data it gave is stored
  (`stored`, the port's KeptAfterStoring), and only when every resource that read it
  has been stored (activity and steps share the activity transaction). A crash in
  between leaves it uncommitted: Polar serves the records again and our store, keyed by
  Polar's ids (an exercise's `id`, a day's `date`), takes them as the same records.
- Sleep and nightly recharge are plain lists of the last 28 days (`/v3/users/sleep`,
  `/v3/users/nightly-recharge`), nothing to commit.
- History. What Polar holds for us is what is in uncommitted transactions (since the
  registration) and 28 days of sleep and recharge: `HISTORY_DAYS` is 28.
- Failures: 429, 5xx, timeouts, unreadable answers as the shared session maps them
  (adapters/providers/maker_api.py); 401 is the grant gone (no refresh to try); 403 (the
  person has not accepted Polar's consents) and other refusals: non_retriable_error.

Nothing Polar sends is logged or put in an error: messages are fixed texts.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta, timezone
from typing import Any
from uuid import UUID

import httpx
from healthledger.adapters.persistence.keys.provider_tokens import SqlProviderTokenStore
from healthledger.adapters.providers.maker_api import (
    MAX_PAGES,
    MakerReader,
    MakerSession,
    MakerTexts,
    by_utc_day,
    instant,
    offset_seconds,
    scope_availability,
    utc_iso,
)
from healthledger.adapters.providers.oauth2 import (
    TOKEN_REFRESH_FAILED,
    CustomClient,
    revocation_answer,
)
from healthledger.adapters.reference import ProviderEntry
from healthledger.domain.connections.provider_tokens import ProviderTokens
from healthledger.domain.connections.providers import (
    NON_RETRIABLE,
    OAuthClient,
    OAuthGrant,
    ProviderError,
    PullTarget,
)
from healthledger.domain.ledger import Clock

HISTORY_DAYS = 28  # sleep and nightly recharge: Polar's documented 28 days
TEXTS = MakerTexts.of("Polar")
SCOPE = "accesslink.read_all"
# AccessLink's answers that are no failure: 201 a transaction opened, 204 nothing new (or
# committed); the others as the shared session maps them (401: the grant gone, for
# Polar's tokens have no refresh).
ANSWERED = frozenset({200, 201, 204})
# Polar's answers to a deregistration of a person it no longer has for us: done already.
GONE = frozenset({401, 404})
_NO_DEREGISTRATION = "Polar could not be reached to deregister the person; it will be tried again."
# Open transactions kept for the pulls running now (a few kinds per connection).
OPEN_TRANSACTIONS = 256
# How long an open transaction is shared by the resources that read it: one round of
# pulls or syncs, which reads a connection's resources one after the other (a daily sync
# of activity, then of steps). Older, it is opened afresh (what was not committed, Polar
# serves again).
SHARED_FOR = timedelta(minutes=10)

# Transaction kinds: their path, the list's key in a transaction, and the resources read
# from them (the transaction is committed once all of these are stored).
KINDS: dict[str, tuple[str, str, frozenset[str]]] = {
    "exercise": ("exercise-transactions", "exercises", frozenset({"workouts"})),
    "activity": ("activity-transactions", "activity-log", frozenset({"activity", "steps"})),
    "physical": (
        "physical-information-transactions",
        "physical-informations",
        frozenset({"profile", "body", "weight"}),
    ),
}
KIND_OF = {resource: kind for kind, (_, _, readers) in KINDS.items() for resource in readers}
# What we read; the catalog's other Polar resources are unavailable.
SCOPES = {
    resource: SCOPE
    for resource in (
        "workouts",
        "activity",
        "steps",
        "profile",
        "body",
        "weight",
        "sleep",
        "hrv",
        "respiratory_rate",
    )
}
# Polar's sport names (exercise `sport`, `detailed-sport-info`) -> our sport slugs.
SPORTS = {
    "RUNNING": "running",
    "CYCLING": "cycling",
    "WALKING": "walking",
    "SWIMMING": "swimming",
    "STRENGTH_TRAINING": "weight_lifting",
    "YOGA": "yoga",
    "HIKING": "hiking",
    "ROWING": "rowing",
}


@dataclass
class _Transaction:
    """One open transaction: its id (None: Polar had nothing new), the records it gave,
    when it was opened, and the resources stored from it so far."""

    id: int | None
    records: list[dict[str, Any]]
    opened: datetime
    stored: set[str] = field(default_factory=set)
    # resource -> the windows (start, end) of days handed to the pull engine from it.
    handed: dict[str, list[tuple[date, date]]] = field(default_factory=dict)

    def handed_whole(self, kind: str, resource: str) -> bool:
        """Whether every record lies on a day of a window `resource` was handed."""
        windows = self.handed.get(resource, [])
        # A record without a day we can read is never stored: nothing to keep it for.
        return all(
            (day := _record_day(kind, record)) is None
            or any(start <= day <= end for start, end in windows)
            for record in self.records
        )


class PolarReader(MakerReader):
    """Implements the ProviderAdapter port (and KeptAfterStoring) for Polar: OAuth from
    the catalog, data from AccessLink v3 at `api_url`. `polar_user_of` answers a
    connection's Polar user id (the `x_user_id` recorded at its sign-in), which every
    transaction's path names."""

    def __init__(
        self,
        entry: ProviderEntry,
        *,
        service_client: OAuthClient | None,
        custom_client: CustomClient,
        tokens: SqlProviderTokenStore,
        http: httpx.Client,
        clock: Clock,
        api_url: str,
        polar_user_of: Callable[[UUID], str | None],
        api_timeout: float = 30.0,
        maker_url: str | None = None,
        history_days: int = HISTORY_DAYS,
    ) -> None:
        super().__init__(
            entry,
            service_client=service_client,
            custom_client=custom_client,
            tokens=tokens,
            http=http,
            clock=clock,
            api_url=api_url,
            history_days=history_days,
            api_timeout=api_timeout,
            maker_url=maker_url,
        )
        self.polar_user_of = polar_user_of
        # (connection, kind) -> its open transaction.
        self.open: OrderedDict[tuple[UUID, str], _Transaction] = OrderedDict()
        self.open_lock = threading.Lock()

    # -- the sign-in ----------------------------------------------------------------------

    def exchange(
        self, code: str, redirect_uri: str, client: OAuthClient | None, code_verifier: str
    ) -> OAuthGrant:
        """The generic exchange, then the person registered with Polar (their data is
        served to us only once registered). A registration Polar cannot take now leaves
        it to the first pull: the sign-in stands."""
        grant = super().exchange(code, redirect_uri, client, code_verifier)
        if grant.tokens is None:
            return grant
        self.register(grant.tokens.access_token)
        # The Polar user id stays with the grant: deregistering names it (`revoke`).
        return replace(grant, tokens=replace(grant.tokens, account=grant.external_user_id))

    def register(self, access_token: str) -> bool:
        """`POST /v3/users` with a member id of ours (random: Polar only needs it unique
        among our users, and it says nothing of the person); whether the person is
        registered now (200, or 409: registered already)."""
        try:
            response = self.http.post(
                f"{self.api_url}/v3/users",
                json={"member-id": secrets.token_hex(16)},
                headers={"Authorization": f"Bearer {access_token}", "Accept": "application/json"},
                timeout=self.api_timeout,
            )
        except httpx.HTTPError:
            return False
        return response.status_code in (200, 201, 409)

    def revoke(self, team_id: UUID, client_id: str, tokens: ProviderTokens) -> None:
        """Polar's deregistration (ADR 0030): `DELETE /v3/users/{user-id}` with the
        person's token ends our access to their data and the token. The user id is the
        one kept with the grant at the sign-in (a grant from before has none: nothing to
        name, nothing asked). Done on 204; a 401 or 404 is a person gone already; 429, 5xx
        and Polar out of reach are tried again later (revocation.py)."""
        if not tokens.account:
            return
        try:
            response = self.http.delete(
                f"{self.api_url}/v3/users/{tokens.account}",
                headers={"Authorization": f"Bearer {tokens.access_token}"},
                timeout=self.api_timeout,
            )
        except httpx.HTTPError:
            raise ProviderError("transport_failure", _NO_DEREGISTRATION) from None
        revocation_answer(response.status_code, gone=GONE)

    def availability(
        self, resources: Sequence[str], grant: OAuthGrant | None = None
    ) -> dict[str, Any]:
        """What we read of Polar (SCOPES, all under accesslink.read_all) is available;
        the catalog's other resources (sleep stages, workout streams) are not read yet."""
        return scope_availability(resources, SCOPES, grant)

    # -- pulls ----------------------------------------------------------------------------

    def fetch(
        self, target: PullTarget, start: date, end: date, now: datetime, attempt: int
    ) -> dict[date, Any]:
        connection_id = target.grant_id()
        resource = target.resource
        if resource not in SCOPES:
            return {}  # not read (availability says unavailable)
        session = _Session(self, connection_id, now)
        if resource == "sleep":
            return _sleep(session.nightly("sleep", "nights"), start, end)
        if resource in ("hrv", "respiratory_rate"):
            return _recharge(resource, session.nightly("nightly-recharge", "recharges"), start, end)
        transaction = self.transaction(session, KIND_OF[resource])
        with self.open_lock:
            transaction.handed.setdefault(resource, []).append((start, end))
        records = transaction.records
        if resource == "workouts":
            return _workouts(records, start, end)
        if resource == "activity":
            return _activity(records, start, end)
        if resource == "steps":
            return _steps(session, records, start, end)
        if resource in ("body", "weight"):
            return _weight(resource, records, start, end)
        return _profile(records, start, end)

    def transaction(self, session: _Session, kind: str) -> _Transaction:
        """The connection's open transaction of `kind`: opened and read once for a pull's
        chunks and for the resources that share it (until SHARED_FOR has passed)."""
        key = (session.connection_id, kind)
        with self.open_lock:
            found = self.open.get(key)
        if found is not None and session.now - found.opened <= SHARED_FOR:
            return found
        found = session.read_transaction(kind)
        with self.open_lock:
            self.open[key] = found
            while len(self.open) > OPEN_TRANSACTIONS:
                self.open.popitem(last=False)
        return found

    def stored(self, target: PullTarget, now: datetime) -> None:
        """The pull of `target` stored all it read: the transaction it read from is
        committed once every resource reading it is stored, and only when each of them
        was handed every record of it (a record on a day outside the windows read, e.g.
        uploaded late for a day before a sync's window, was not stored: the transaction
        is left uncommitted, and Polar serves it again; nothing is lost)."""
        kind = KIND_OF.get(target.resource)
        if kind is None:
            return  # sleep and recharge: nothing to commit
        connection_id = target.grant_id()
        key = (connection_id, kind)
        with self.open_lock:
            found = self.open.get(key)
            if found is None:
                return
            found.stored.add(target.resource)
            readers = KINDS[kind][2]
            if not readers <= found.stored:
                return  # another resource of the transaction is not stored yet
            del self.open[key]
            whole = all(found.handed_whole(kind, resource) for resource in readers)
        if found.id is not None and whole:
            _Session(self, connection_id, now).commit(kind, found.id)


class _Session(MakerSession):
    """One fetch's access to AccessLink as the connection's person."""

    def __init__(self, reader: PolarReader, connection_id: UUID, now: datetime) -> None:
        super().__init__(reader, connection_id, now, texts=TEXTS, timeout=reader.api_timeout)
        self.reader = reader

    def user_path(self) -> str:
        account = self.reader.polar_user_of(self.connection_id)
        if account is None:
            # A connection without Polar's user id: nothing to read it by.
            raise ProviderError(NON_RETRIABLE, TEXTS.must_reconnect, TOKEN_REFRESH_FAILED)
        return f"{self.reader.api_url}/v3/users/{account}"

    def open_transaction(self, kind: str) -> httpx.Response:
        """POST the transaction; a person Polar does not know (404: not registered, a
        sign-in whose registration failed) is registered, then asked again."""
        url = f"{self.user_path()}/{KINDS[kind][0]}"
        try:
            return self.send("POST", url, done=ANSWERED)
        except ProviderError as exc:
            if exc.message != TEXTS.refused or not self.reader.register(self.token()):
                raise
        return self.send("POST", url, done=ANSWERED)

    def read_transaction(self, kind: str) -> _Transaction:
        """Open a transaction and read every record it lists (Polar lists them all at
        once; MAX_PAGES bounds what one transaction may name)."""
        response = self.open_transaction(kind)
        if response.status_code == 204:
            return _Transaction(None, [], self.now)
        answer = _json(response)
        transaction_id = answer.get("transaction-id")
        if not isinstance(transaction_id, int):
            raise TEXTS.broken()
        path, key, _ = KINDS[kind]
        listing = self.get(f"{self.user_path()}/{path}/{transaction_id}")
        urls = listing.get(key) if isinstance(listing, dict) else None
        if not isinstance(urls, list) or len(urls) > MAX_PAGES:
            raise TEXTS.broken()
        records = []
        for url in urls:
            if not isinstance(url, str) or not url.startswith(self.reader.api_url):
                raise TEXTS.broken()  # only ever asked of the API we were given
            record = self.get(url)
            if isinstance(record, dict):
                if kind == "activity":  # the day's step samples come with its summary
                    samples = self.get(f"{url}/step-samples")
                    record = {**record, "_step_samples": samples}
                records.append(record)
        return _Transaction(transaction_id, records, self.now)

    def commit(self, kind: str, transaction_id: int) -> None:
        """PUT the transaction. One Polar no longer has (expired, replaced by a newer one)
        is nothing to commit: its records come again in the next transaction."""
        try:
            self.send("PUT", f"{self.user_path()}/{KINDS[kind][0]}/{transaction_id}", done=ANSWERED)
        except ProviderError as exc:
            if exc.message != TEXTS.refused:
                raise

    def nightly(self, path: str, key: str) -> list[dict[str, Any]]:
        """The last 28 nights of `/v3/users/<path>` (no transaction: nothing to commit)."""
        response = self.send("GET", f"{self.reader.api_url}/v3/users/{path}", done=ANSWERED)
        if response.status_code == 204:
            return []
        found = _json(response).get(key)
        if not isinstance(found, list):
            raise TEXTS.broken()
        return [n for n in found if isinstance(n, dict)]


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        answer = response.json()
    except ValueError:
        raise TEXTS.broken() from None
    if not isinstance(answer, dict):
        raise TEXTS.broken()
    return answer


# -- mapping ------------------------------------------------------------------------------


def _day(text: Any) -> date | None:
    try:
        return date.fromisoformat(str(text))
    except ValueError:
        return None


def _seconds(duration: Any) -> int | None:
    """An ISO 8601 duration of hours, minutes and seconds (`PT1H2M3.5S`) in seconds."""
    if not isinstance(duration, str) or not duration.startswith("PT"):
        return None
    total, number = 0.0, ""
    for char in duration[2:]:
        if char.isdigit() or char == ".":
            number += char
            continue
        scale = {"H": 3600, "M": 60, "S": 1}.get(char)
        if scale is None or not number:
            return None
        try:
            total += float(number) * scale
        except ValueError:
            return None
        number = ""
    return None if number else int(total)


def _record_day(kind: str, record: Mapping[str, Any]) -> date | None:
    """The day a transaction's record is stored under (as the mapping below files it)."""
    if kind == "exercise":
        begin = _start(record)
        return None if begin is None else begin.date()
    if kind == "activity":
        return _day(record.get("date"))
    created = instant(record.get("created"))
    return None if created is None else created.date()


def _start(exercise: Mapping[str, Any]) -> datetime | None:
    """An exercise's start: Polar's local `start-time` with its `start-time-utc-offset`
    (minutes)."""
    local, offset = exercise.get("start-time"), exercise.get("start-time-utc-offset")
    moment = instant(local) if isinstance(local, str) else None
    if moment is None:
        return None
    if isinstance(offset, int) and not isinstance(offset, bool):
        moment = moment.replace(tzinfo=timezone(timedelta(minutes=offset)))
    return moment


def _workouts(records: Iterable[dict[str, Any]], start: date, end: date) -> dict[date, Any]:
    found: dict[date, dict[str, dict[str, Any]]] = {}
    for exercise in records:
        begin = _start(exercise)
        lasted = _seconds(exercise.get("duration"))
        if begin is None or lasted is None or exercise.get("id") is None:
            continue
        day = begin.date()  # the person's local day
        if not start <= day <= end:
            continue
        heart = exercise.get("heart-rate")
        heart = heart if isinstance(heart, Mapping) else {}
        sport = exercise.get("detailed-sport-info") or exercise.get("sport")
        # Polar's exercise id: the session's key, so an exercise served again (its
        # transaction not committed) replaces its own.
        key = str(exercise["id"])
        found.setdefault(day, {})[key] = {
            "id": key,
            "sport": SPORTS.get(str(sport), "other"),
            "time_start": begin.isoformat(),
            "time_end": (begin + timedelta(seconds=lasted)).isoformat(),
            "timezone_offset": offset_seconds(begin),
            "calories": exercise.get("calories"),
            "average_hr": heart.get("average"),
            "max_hr": heart.get("maximum"),
            "distance": exercise.get("distance"),
        }
    return {
        day: sorted(kept.values(), key=lambda w: (w["time_start"], w["id"]))
        for day, kept in sorted(found.items())
    }


def _activity(records: Iterable[dict[str, Any]], start: date, end: date) -> dict[date, Any]:
    found: dict[date, Any] = {}
    for record in records:
        day = _day(record.get("date"))
        if day is None or not start <= day <= end:
            continue
        active = _seconds(record.get("duration"))
        found[day] = {
            "calendar_date": day.isoformat(),
            "steps": record.get("active-steps"),
            "calories_active": record.get("active-calories"),
            "calories_total": record.get("calories"),
            "medium": None if active is None else round(active / 60, 1),
        }
    return dict(sorted(found.items()))


def _steps(
    session: _Session, records: Iterable[dict[str, Any]], start: date, end: date
) -> dict[date, Any]:
    """The step samples of each day: Polar's `time` is the person's local time of the
    day, and gives no zone: read as UTC (docs/makers/polar.md says so)."""
    samples = []
    for record in records:
        day = _day(record.get("date"))
        answer = record.get("_step_samples")
        found = answer.get("samples") if isinstance(answer, Mapping) else None
        interval = answer.get("interval") if isinstance(answer, Mapping) else None
        if day is None or not isinstance(found, list):
            continue
        minutes = interval if isinstance(interval, int) and interval > 0 else 1
        for sample in found:
            steps = sample.get("steps") if isinstance(sample, Mapping) else None
            moment = instant(f"{day.isoformat()}T{sample.get('time')}") if steps else None
            if moment is None or not isinstance(steps, int | float):
                continue
            samples.append(
                (
                    moment,
                    {
                        "timestamp": utc_iso(moment),
                        "start": utc_iso(moment),
                        "end": utc_iso(moment + timedelta(minutes=minutes)),
                        "value": steps,
                        "unit": "count",
                    },
                )
            )
    return by_utc_day(samples, start, end)


def _profile(records: Iterable[dict[str, Any]], start: date, end: date) -> dict[date, Any]:
    """The height and weight the person set in Polar Flow, on the day they set them."""
    found: dict[date, dict[str, Any]] = {}
    for record in records:
        created = instant(record.get("created"))
        if created is None:
            continue
        day = created.date()
        if start <= day <= end and record.get("height") is not None:
            found[day] = {"height": record.get("height"), "calendar_date": day.isoformat()}
    return dict(sorted(found.items()))


def _weight(
    resource: str, records: Iterable[dict[str, Any]], start: date, end: date
) -> dict[date, Any]:
    """The weight the person set in Polar Flow (or a scale synced to it), on the day it
    was set: a body summary, or a weight sample at that instant."""
    found: dict[date, Any] = {}
    for record in records:
        created = instant(record.get("created"))
        weight = record.get("weight")
        if created is None or not isinstance(weight, int | float):
            continue
        day = created.date()
        if not start <= day <= end:
            continue
        if resource == "weight":
            found[day] = [{"timestamp": utc_iso(created), "value": weight, "unit": "kg"}]
        else:
            found[day] = {"calendar_date": day.isoformat(), "weight": weight, "fat": None}
    return dict(sorted(found.items()))


def _sleep(nights: Iterable[dict[str, Any]], start: date, end: date) -> dict[date, Any]:
    found: dict[date, Any] = {}
    for night in nights:
        day = _day(night.get("date"))
        begin, stop = instant(night.get("sleep_start_time")), instant(night.get("sleep_end_time"))
        if day is None or begin is None or stop is None or not start <= day <= end:
            continue
        light, deep = night.get("light_sleep") or 0, night.get("deep_sleep") or 0
        rem = night.get("rem_sleep") or 0
        found[day] = {
            "calendar_date": day.isoformat(),
            "bedtime_start": begin.isoformat(),
            "bedtime_stop": stop.isoformat(),
            "timezone_offset": offset_seconds(begin),
            "type": "long_sleep",
            "duration": int((stop - begin).total_seconds()),
            "total": light + deep + rem,
            "awake": night.get("total_interruption_duration"),
            "light": light,
            "rem": rem,
            "deep": deep,
            "efficiency": None,
            "latency": None,
            "score": night.get("sleep_score"),
            "hr_lowest": None,
            "hr_average": None,
            "average_hrv": None,
            "respiratory_rate": None,
            "temperature_delta": None,
        }
    return dict(sorted(found.items()))


# Nightly recharge: resource -> (field, unit).
RECHARGE = {
    "hrv": ("heart_rate_variability_avg", "ms"),
    "respiratory_rate": ("breathing_rate_avg", "bpm"),
}


def _recharge(
    resource: str, recharges: Iterable[dict[str, Any]], start: date, end: date
) -> dict[date, Any]:
    """A night's average, at the UTC midnight of the day Polar files it under (Polar's
    recharge gives a date, no instant)."""
    name, unit = RECHARGE[resource]
    samples = []
    for recharge in recharges:
        day, value = _day(recharge.get("date")), recharge.get(name)
        if day is None or not isinstance(value, int | float) or isinstance(value, bool):
            continue
        moment = datetime.combine(day, time(0), UTC)
        samples.append((moment, {"timestamp": utc_iso(moment), "value": value, "unit": unit}))
    return by_utc_day(samples, start, end)
