"""The Oura reader: Oura's API v2 (`/v2/usercollection/*`) behind the provider port.

The link flow and the tokens are the generic OAuth 2.0 adapter's (`OAuth2Maker`, ADR
0022): this class adds the reading. A pull asks for one resource over one chunk of days;
the reader asks Oura for the collections that resource comes from, follows `next_token`
to the last page, and maps Oura's documents into our resources in the shapes the demo
devices produce (docs/makers/oura.md has the table), so that summaries, timeseries and
webhooks read them unchanged.

- Days. Oura's daily documents carry the person's local `day`: summaries are stored
  under it. Samples are stored under the UTC day of their timestamp, as the demo's are;
  the reader asks for a day more on each side, so a day it returns is complete. The
  resources of one chunk share what was read (six come from `sleep`): each page is asked
  of Oura once per pull.
- Record ids. A workout keeps Oura's id (the session key): a workout sent again with new
  values replaces the one stored, never adds one. A day's summary is replaced whole.
- Failures. 429 is `provider_rate_limit_exceeded` (a short `Retry-After` is waited out
  here, up to `max_wait`; a longer one goes back to the pull engine, whose retry comes
  no sooner than it says; none, to the engine's backoff), 5xx `provider_unavailable`,
  a timeout or a broken connection `transport_failure`: all retried by the engine. A
  401 refreshes the grant once (a token revoked before its expiry); if Oura then still
  refuses, or refuses the refresh, the connection goes to `error` (token_refresh_failed).

Nothing Oura sends is logged or put in an error: messages are fixed texts.
"""

from __future__ import annotations

import threading
import time as time_module
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from uuid import UUID

import httpx
from healthledger.adapters.outbound import retry_after
from healthledger.adapters.persistence.keys.provider_tokens import SqlProviderTokenStore
from healthledger.adapters.providers.oauth2 import (
    RETRY_REFRESH_AFTER,
    TOKEN_REFRESH_FAILED,
    CustomClient,
    OAuth2Maker,
)
from healthledger.adapters.reference import ProviderEntry
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.providers import (
    NON_RETRIABLE,
    OAuthClient,
    OAuthGrant,
    ProviderError,
    PullTarget,
)
from healthledger.domain.ledger import Clock

HISTORY_DAYS = 2 * 365  # Oura keeps the ring's whole history; we take two years
# A Retry-After up to this long is waited out within the fetch; a longer one ends it.
MAX_WAIT = 5.0
# Rate-limited answers waited out in one fetch before it gives up to the engine.
MAX_WAITS = 3
# Collections kept for the resources of the same pull (a chunk's dozen, a few pulls').
RECENT_COLLECTIONS = 64
# A cursor chain longer than this is a maker that loops, not data.
MAX_PAGES = 10_000

_RATE_LIMITED = "Oura answered that too many requests were made; the pull will try again."
_UNAVAILABLE = "Oura's data API is unavailable; the pull will try again."
_UNREACHABLE = "Oura's data API could not be reached in time; the pull will try again."
_REFUSED = "Oura refused the request for this resource."
_MUST_RECONNECT = "Oura no longer accepts this connection's grant; connect again."

# The resource -> the Oura scope that covers it (docs/makers/oura.md).
SCOPES: dict[str, str] = {
    "sleep": "daily",
    "sleep_cycle": "daily",
    "hypnogram": "daily",
    "sleep_stream": "daily",
    "hrv": "daily",
    "respiratory_rate": "daily",
    "activity": "daily",
    "steps": "daily",
    "calories_active": "daily",
    "calories_basal": "daily",
    "distance": "daily",
    "body_temperature_delta": "daily",
    "workouts": "workout",
    "heartrate": "heartrate",
    "blood_oxygen": "spo2Daily",
    "profile": "personal",
    "body": "personal",
}
_STAGES = {"1": "deep", "2": "light", "3": "rem", "4": "awake"}
# Samples that are an amount over an interval carry start and end (as the demo's do).
_INTERVAL = frozenset({"steps", "calories_active", "distance", "body_temperature_delta"})
_DAILY_SAMPLES: dict[str, tuple[str, str, Callable[[Mapping[str, Any]], Any]]] = {
    # resource: (collection, unit, value of the document)
    "steps": ("daily_activity", "count", lambda d: d.get("steps")),
    "calories_active": ("daily_activity", "kcal", lambda d: d.get("active_calories")),
    "calories_basal": (
        "daily_activity",
        "kcal",
        lambda d: (
            None
            if d.get("total_calories") is None or d.get("active_calories") is None
            else d["total_calories"] - d["active_calories"]
        ),
    ),
    "distance": ("daily_activity", "m", lambda d: d.get("equivalent_walking_distance")),
    "blood_oxygen": (
        "daily_spo2",
        "%",
        lambda d: (d.get("spo2_percentage") or {}).get("average"),
    ),
    "body_temperature_delta": ("daily_readiness", "°C", lambda d: d.get("temperature_deviation")),
}

Sleep = Callable[[float], None]


class OuraReader(OAuth2Maker):
    """Implements the ProviderAdapter port for Oura: OAuth from the catalog, data from
    API v2 at `api_url`."""

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
        api_timeout: float = 30.0,
        maker_url: str | None = None,
        history_days: int = HISTORY_DAYS,
        max_wait: float = MAX_WAIT,
        sleep: Sleep = time_module.sleep,
    ) -> None:
        assert entry.oauth is not None
        super().__init__(
            entry,
            entry.oauth,
            service_client=service_client,
            custom_client=custom_client,
            tokens=tokens,
            http=http,
            clock=clock,
            maker_url=maker_url,
        )
        self.api_url = api_url.rstrip("/")
        self.api_timeout = api_timeout
        self.history_days = history_days
        self.max_wait = max_wait
        self.sleep = sleep
        # Collections read by the pull running now: the resources of one chunk share a
        # collection (six come from `sleep`), so each page is asked of Oura once per pull
        # (keyed by the pull's `now`: a retry, or the next sync, reads afresh).
        self.recent: OrderedDict[tuple[Any, ...], list[dict[str, Any]]] = OrderedDict()
        self.recent_lock = threading.Lock()

    def availability(
        self, resources: Sequence[str], grant: OAuthGrant | None = None
    ) -> dict[str, Any]:
        """What Oura offers of each resource, under the scope that covers it: available
        when the person granted that scope (the token answer's `scope`; every scope asked
        when Oura did not say), unavailable when they did not, or when Oura's API does not
        give the resource (no pull fails for either)."""
        granted = granted_scopes(grant.tokens.scope if grant and grant.tokens else None)
        found: dict[str, Any] = {}
        for resource in sorted(resources):
            scope = SCOPES.get(resource)
            allowed = scope is not None and (granted is None or scope in granted)
            required = [scope] if scope else []
            found[resource] = {
                "status": "available" if allowed else "unavailable",
                "scope_requirements": {
                    "user_granted": {"required": required if allowed else [], "optional": []},
                    "user_denied": {
                        "required": [] if allowed or not scope else required,
                        "optional": [],
                    },
                },
            }
        return found

    def exchange(
        self, code: str, redirect_uri: str, client: OAuthClient | None, code_verifier: str
    ) -> OAuthGrant:
        """The generic exchange, then the person's Oura account id (`personal_info.id`:
        Oura's token answer does not name the account, and its webhooks name it). An
        account id Oura does not give (no `personal` scope, a passing failure) is left
        unset: the sign-in stands."""
        grant = super().exchange(code, redirect_uri, client, code_verifier)
        if grant.tokens is None or grant.external_user_id is not None:
            return grant
        granted = granted_scopes(grant.tokens.scope)
        if granted is not None and "personal" not in granted:
            return grant
        try:
            response = self.http.get(
                f"{self.api_url}/v2/usercollection/personal_info",
                headers={
                    "Authorization": f"Bearer {grant.tokens.access_token}",
                    "Accept": "application/json",
                },
                timeout=self.api_timeout,
            )
            answer = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            answer = None
        account = answer.get("id") if isinstance(answer, dict) else None
        if not isinstance(account, str) or not account:
            return grant
        return OAuthGrant(external_user_id=account, client_id=grant.client_id, tokens=grant.tokens)

    # -- pulls ----------------------------------------------------------------------------

    def fetch(
        self, target: PullTarget, start: date, end: date, now: datetime, attempt: int
    ) -> dict[date, Any]:
        session = _Session(self, Connection.id_for(target.user_id, target.provider), now)
        resource = target.resource
        if not session.granted(SCOPES.get(resource)):
            return {}  # not granted (or not in Oura's API): unavailable, nothing to read
        if resource in ("sleep", "sleep_cycle", "hypnogram", "sleep_stream"):
            return _by_sleep(resource, session, start, end)
        if resource in ("hrv", "respiratory_rate"):
            return _sleep_samples(resource, session, start, end)
        if resource == "activity":
            documents = session.collection("daily_activity", start, end)
            return {day: _activity(doc) for day, doc in _one_a_day(documents, start, end)}
        if resource == "workouts":
            return _workouts(session.collection("workout", start, end), start, end)
        if resource == "heartrate":
            return _heartrate(session, start, end)
        if resource in _DAILY_SAMPLES:
            return _daily_samples(resource, session, start, end)
        if resource in ("profile", "body"):
            return _personal(resource, session, start, end, now)
        return {}  # not in Oura's API (availability says so)

    # -- one request ----------------------------------------------------------------------

    def get(self, session: _Session, path: str, params: Mapping[str, str]) -> Any:
        """GET `path` of the data API as the connection's person; the JSON answer.
        Raises ProviderError."""
        waits = 0
        renewed = False
        while True:
            token = session.token()
            try:
                response = self.http.get(
                    f"{self.api_url}{path}",
                    params=dict(params),
                    timeout=self.api_timeout,
                    headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
                )
            except httpx.HTTPError:
                raise ProviderError("transport_failure", _UNREACHABLE) from None
            status = response.status_code
            if status == 200:
                try:
                    return response.json()
                except ValueError:
                    raise ProviderError("provider_unavailable", _UNAVAILABLE) from None
            if status == 429:
                asked = retry_after(response.headers.get("retry-after"), self.clock())
                wait = None if asked is None else asked.total_seconds()
                if wait is not None and wait <= self.max_wait and waits < MAX_WAITS:
                    waits += 1
                    self.sleep(wait)
                    continue
                raise ProviderError("provider_rate_limit_exceeded", _RATE_LIMITED, retry_after=wait)
            if status >= 500:
                raise ProviderError("provider_unavailable", _UNAVAILABLE)
            if status == 401 and not renewed:
                renewed = True
                session.renew(token)
                continue
            if status == 401:
                raise ProviderError(NON_RETRIABLE, _MUST_RECONNECT, TOKEN_REFRESH_FAILED)
            raise ProviderError(NON_RETRIABLE, _REFUSED)


class _Session:
    """One fetch's access to the data API: the connection's token (refreshed when it
    expired, or when Oura refused it), and the collections read, page after page."""

    def __init__(self, reader: OuraReader, connection_id: UUID, now: datetime) -> None:
        self.reader = reader
        self.connection_id = connection_id
        self.now = now
        self.current: str | None = None

    def granted(self, scope: str | None) -> bool:
        """Whether the person granted `scope` (as the stored grant says; every scope when
        Oura's token answer did not say)."""
        if scope is None:
            return False
        stored = self.reader.tokens.current(self.connection_id)
        granted = granted_scopes(None if stored is None else stored.tokens.scope)
        return granted is None or scope in granted

    def token(self) -> str:
        if self.current is None:
            self.current = self.reader.access_token(self.connection_id, self.now)
        return self.current

    def renew(self, refused: str) -> None:
        """Oura refused `refused` before its expiry (revoked, or replaced): the grant as
        stored now if another worker refreshed it meanwhile, else a refresh."""
        stored = self.reader.tokens.current(self.connection_id)
        if stored is None:
            raise ProviderError(NON_RETRIABLE, _MUST_RECONNECT, TOKEN_REFRESH_FAILED)
        if stored.tokens.access_token != refused and not stored.tokens.expired(self.now):
            self.current = stored.tokens.access_token
            return
        key = (stored.connection_id, stored.version)
        with self.reader.failed_lock:
            failed = self.reader.failed_refreshes.get(key)
        if failed is not None:  # refused already: not asked of Oura again for this grant
            error, at = failed
            if not error.retriable or self.now < at + RETRY_REFRESH_AFTER:
                raise ProviderError(error.code, error.message, error.connection_error)
        try:
            self.current = self.reader.refresh(stored, self.now)
        except ProviderError as exc:
            with self.reader.failed_lock:
                self.reader.failed_refreshes[key] = (exc, self.now)
            raise

    def pages(self, path: str, params: Mapping[str, str]) -> list[dict[str, Any]]:
        """Every document of a collection query: each page, to the last `next_token`."""
        documents: list[dict[str, Any]] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            query = dict(params) if cursor is None else {**params, "next_token": cursor}
            answer = self.reader.get(self, path, query)
            data = answer.get("data") if isinstance(answer, dict) else None
            if not isinstance(data, list):
                raise ProviderError("provider_unavailable", _UNAVAILABLE)
            documents.extend(d for d in data if isinstance(d, dict))
            following = answer.get("next_token")
            if not following:
                return documents
            if not isinstance(following, str) or following in seen:
                raise ProviderError("provider_unavailable", _UNAVAILABLE)
            seen.add(following)
            cursor = following
        raise ProviderError("provider_unavailable", _UNAVAILABLE)

    def collection(self, name: str, start: date, end: date) -> list[dict[str, Any]]:
        """A collection's documents of the local days start..end, and of the day before
        and after (a night's or a day's samples can fall on those UTC days): the same
        window for every resource of a chunk, read once per pull."""
        first, last = start - timedelta(days=1), end + timedelta(days=1)
        key = (self.connection_id, self.now, name, first, last)
        with self.reader.recent_lock:
            found = self.reader.recent.get(key)
        if found is not None:
            return found
        params = {"start_date": first.isoformat(), "end_date": last.isoformat()}
        found = self.pages(f"/v2/usercollection/{name}", params)
        with self.reader.recent_lock:
            self.reader.recent[key] = found
            while len(self.reader.recent) > RECENT_COLLECTIONS:
                self.reader.recent.popitem(last=False)
        return found

    def heartrate(self, start: datetime, end: datetime) -> list[dict[str, Any]]:
        params = {"start_datetime": start.isoformat(), "end_datetime": end.isoformat()}
        return self.pages("/v2/usercollection/heartrate", params)

    def personal_info(self) -> dict[str, Any]:
        answer = self.reader.get(self, "/v2/usercollection/personal_info", {})
        if not isinstance(answer, dict):
            raise ProviderError("provider_unavailable", _UNAVAILABLE)
        return answer


def granted_scopes(scope: str | None) -> frozenset[str] | None:
    """The scopes of a token answer's `scope` (space-separated, RFC 6749 3.3); None when
    the answer did not say."""
    return None if scope is None else frozenset(scope.split())


# -- mapping ------------------------------------------------------------------------------


def _day_of(document: Mapping[str, Any]) -> date | None:
    try:
        return date.fromisoformat(str(document.get("day")))
    except ValueError:
        return None


def _instant(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _offset_seconds(moment: datetime | None) -> int | None:
    offset = None if moment is None else moment.utcoffset()
    return None if offset is None else int(offset.total_seconds())


def _within(documents: Iterable[dict[str, Any]], start: date, end: date) -> dict[date, list[Any]]:
    by_day: dict[date, list[Any]] = {}
    for document in documents:
        day = _day_of(document)
        if day is not None and start <= day <= end:
            by_day.setdefault(day, []).append(document)
    return by_day


def _one_a_day(
    documents: Iterable[dict[str, Any]], start: date, end: date
) -> Iterable[tuple[date, dict[str, Any]]]:
    """A daily collection's document of each day (the last one Oura lists, if several)."""
    for day, found in sorted(_within(documents, start, end).items()):
        yield day, found[-1]


def _main_sleep(periods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The night's main sleep: the long sleep, else the longest period (deleted ones are
    not sleep)."""
    kept = [p for p in periods if p.get("type") != "deleted"]
    if not kept:
        return None
    return max(kept, key=lambda p: (p.get("type") == "long_sleep", p.get("time_in_bed") or 0))


def _int(value: Any) -> int | None:
    return None if value is None else round(value)


def _by_sleep(resource: str, session: _Session, start: date, end: date) -> dict[date, Any]:
    periods = _within(session.collection("sleep", start, end), start, end)
    scores: dict[date, Any] = {}
    if resource == "sleep":
        daily = session.collection("daily_sleep", start, end)
        scores = {day: doc.get("score") for day, doc in _one_a_day(daily, start, end)}
    found: dict[date, Any] = {}
    for day, documents in sorted(periods.items()):
        main = _main_sleep(documents)
        if main is None:
            continue
        mapped = _SLEEP_MAPPERS[resource](main, day, scores.get(day))
        if mapped:
            found[day] = mapped
    return found


def _sleep(doc: Mapping[str, Any], day: date, score: Any) -> dict[str, Any] | None:
    begin, stop = _instant(doc.get("bedtime_start")), _instant(doc.get("bedtime_end"))
    if begin is None or stop is None:
        return None
    readiness = doc.get("readiness") or {}
    in_bed = doc.get("time_in_bed")
    return {
        "calendar_date": day.isoformat(),
        "bedtime_start": begin.isoformat(),
        "bedtime_stop": stop.isoformat(),
        "timezone_offset": _offset_seconds(begin),
        "type": doc.get("type") or "long_sleep",
        "duration": int(in_bed if in_bed is not None else (stop - begin).total_seconds()),
        "total": doc.get("total_sleep_duration") or 0,
        "awake": doc.get("awake_time") or 0,
        "light": doc.get("light_sleep_duration") or 0,
        "rem": doc.get("rem_sleep_duration") or 0,
        "deep": doc.get("deep_sleep_duration") or 0,
        "efficiency": doc.get("efficiency"),
        "latency": doc.get("latency"),
        "score": score,
        "hr_lowest": _int(doc.get("lowest_heart_rate")),
        "hr_average": _int(doc.get("average_heart_rate")),
        "average_hrv": doc.get("average_hrv"),
        "respiratory_rate": doc.get("average_breath"),
        "temperature_delta": readiness.get("temperature_deviation"),
    }


def _phases(doc: Mapping[str, Any]) -> list[tuple[datetime, str]]:
    begin, hypnogram = _instant(doc.get("bedtime_start")), doc.get("sleep_phase_5_min")
    if begin is None or not isinstance(hypnogram, str):
        return []
    return [
        (begin + timedelta(minutes=5 * index), _STAGES[digit])
        for index, digit in enumerate(hypnogram)
        if digit in _STAGES
    ]


def _sleep_cycle(doc: Mapping[str, Any], day: date, score: Any) -> dict[str, Any] | None:
    begin, stop = _instant(doc.get("bedtime_start")), _instant(doc.get("bedtime_end"))
    phases = _phases(doc)
    if begin is None or stop is None or not phases:
        return None
    offsets = [int((moment - begin).total_seconds()) for moment, _ in phases]
    return {
        "session_start": begin.isoformat(),
        "session_end": stop.isoformat(),
        "stage_start_offset_second": offsets,
        "stage_end_offset_second": [offset + 300 for offset in offsets],
        "stage_type": [stage for _, stage in phases],
    }


def _hypnogram(doc: Mapping[str, Any], day: date, score: Any) -> list[dict[str, Any]]:
    codes = {name: int(digit) for digit, name in _STAGES.items()}
    return [
        {
            "timestamp": moment.isoformat(),
            "start": moment.isoformat(),
            "end": (moment + timedelta(minutes=5)).isoformat(),
            "value": codes[stage],
            "unit": "stage",
        }
        for moment, stage in _phases(doc)
    ]


def _items(sample: Any) -> list[tuple[datetime, Any]]:
    """Oura's sample data ({interval, items, timestamp}) as (instant, value), nulls out."""
    if not isinstance(sample, Mapping):
        return []
    first, interval = _instant(sample.get("timestamp")), sample.get("interval")
    items = sample.get("items")
    if first is None or not isinstance(interval, int | float) or not isinstance(items, list):
        return []
    return [
        (first + timedelta(seconds=interval * index), value)
        for index, value in enumerate(items)
        if value is not None
    ]


def _sleep_stream(doc: Mapping[str, Any], day: date, score: Any) -> list[dict[str, Any]]:
    hrv = dict(_items(doc.get("hrv")))
    return [
        {"timestamp": moment.isoformat(), "hr": value, "hrv": hrv.get(moment)}
        for moment, value in _items(doc.get("heart_rate"))
    ]


_SLEEP_MAPPERS: dict[str, Callable[[Mapping[str, Any], date, Any], Any]] = {
    "sleep": _sleep,
    "sleep_cycle": _sleep_cycle,
    "hypnogram": _hypnogram,
    "sleep_stream": _sleep_stream,
}


def _bucket(
    samples: Iterable[tuple[datetime, dict[str, Any]]], start: date, end: date
) -> dict[date, list[dict[str, Any]]]:
    """Samples under the UTC day of their instant, in time order, days start..end only."""
    by_day: dict[date, list[tuple[datetime, dict[str, Any]]]] = {}
    for moment, sample in samples:
        day = moment.astimezone(UTC).date()
        if start <= day <= end:
            by_day.setdefault(day, []).append((moment, sample))
    return {
        day: [sample for _, sample in sorted(found, key=lambda pair: pair[0])]
        for day, found in sorted(by_day.items())
    }


def _sleep_samples(resource: str, session: _Session, start: date, end: date) -> dict[date, Any]:
    # A night's samples can fall on the UTC day before or after its `day`.
    documents = session.collection("sleep", start, end)
    samples: list[tuple[datetime, dict[str, Any]]] = []
    for doc in documents:
        if doc.get("type") == "deleted":
            continue
        if resource == "hrv":
            samples += [
                (moment, {"timestamp": _utc(moment), "value": value, "unit": "ms"})
                for moment, value in _items(doc.get("hrv"))
            ]
        else:
            begin, breath = _instant(doc.get("bedtime_start")), doc.get("average_breath")
            if begin is not None and breath is not None:
                samples.append((begin, {"timestamp": _utc(begin), "value": breath, "unit": "bpm"}))
    return _bucket(samples, start, end)


def _utc(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def _activity(doc: Mapping[str, Any]) -> dict[str, Any]:
    def minutes(field: str) -> float | None:
        value = doc.get(field)
        return None if value is None else round(value / 60, 1)

    return {
        "calendar_date": doc.get("day"),
        "steps": doc.get("steps"),
        "distance": doc.get("equivalent_walking_distance"),
        "calories_active": doc.get("active_calories"),
        "calories_total": doc.get("total_calories"),
        "low": minutes("low_activity_time"),
        "medium": minutes("medium_activity_time"),
        "high": minutes("high_activity_time"),
        "timezone_offset": _offset_seconds(_instant(doc.get("timestamp"))),
    }


def _sport(activity: Any) -> str:
    """Oura's activity names are camelCase ("strengthTraining"): our slugs snake_case."""
    text = str(activity or "other")
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in text).lstrip("_")


def _workouts(documents: list[dict[str, Any]], start: date, end: date) -> dict[date, Any]:
    found: dict[date, Any] = {}
    for day, sessions in sorted(_within(documents, start, end).items()):
        kept = []
        for doc in sessions:
            begin, stop = _instant(doc.get("start_datetime")), _instant(doc.get("end_datetime"))
            if begin is None or stop is None or doc.get("id") is None:
                continue
            kept.append(
                {
                    # Oura's id: the session's key, so a re-sent workout replaces its own.
                    "id": str(doc["id"]),
                    "sport": _sport(doc.get("activity")),
                    "time_start": begin.isoformat(),
                    "time_end": stop.isoformat(),
                    "timezone_offset": _offset_seconds(begin),
                    "calories": doc.get("calories"),
                    "average_hr": None,
                    "max_hr": None,
                    "distance": doc.get("distance"),
                }
            )
        if kept:
            found[day] = sorted(kept, key=lambda w: (w["time_start"], w["id"]))
    return found


def _heartrate(session: _Session, start: date, end: date) -> dict[date, Any]:
    first = datetime.combine(start, time(0), UTC)
    last = datetime.combine(end + timedelta(days=1), time(0), UTC)
    samples = []
    for doc in session.heartrate(first, last):
        moment, bpm = _instant(doc.get("timestamp")), doc.get("bpm")
        if moment is not None and isinstance(bpm, int | float):
            samples.append((moment, {"timestamp": _utc(moment), "value": bpm, "unit": "bpm"}))
    return _bucket(samples, start, end)


def _daily_samples(resource: str, session: _Session, start: date, end: date) -> dict[date, Any]:
    collection, unit, value_of = _DAILY_SAMPLES[resource]
    documents = session.collection(collection, start, end)
    samples = []
    for doc in documents:
        day, value = _day_of(doc), value_of(doc)
        if day is None or value is None:
            continue
        # The person's local day: its midnight in the offset of the document's timestamp.
        stamp = _instant(doc.get("timestamp"))
        zone = stamp.tzinfo if stamp is not None else UTC
        begin = datetime.combine(day, time(0), zone)
        sample: dict[str, Any] = {"timestamp": _utc(begin), "value": value, "unit": unit}
        if resource in _INTERVAL:
            sample["start"] = _utc(begin)
            sample["end"] = _utc(begin + timedelta(days=1))
        samples.append((begin, sample))
    return _bucket(samples, start, end)


def _personal(
    resource: str, session: _Session, start: date, end: date, now: datetime
) -> dict[date, Any]:
    """Oura keeps the person's current height and weight only (personal_info): they are
    today's values, in the chunk that holds today."""
    today = now.astimezone(UTC).date()
    if not start <= today <= end:
        return {}
    info = session.personal_info()
    if resource == "profile":
        height = info.get("height")
        if not isinstance(height, int | float):
            return {}
        return {today: {"height": round(height * 100), "calendar_date": today.isoformat()}}
    weight = info.get("weight")
    if not isinstance(weight, int | float):
        return {}
    return {today: {"calendar_date": today.isoformat(), "weight": weight, "fat": None}}
