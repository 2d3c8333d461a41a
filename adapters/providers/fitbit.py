"""The Fitbit reader: the Fitbit Web API (`/1/user/-/...`, `/1.2/user/-/sleep/...`) behind
the provider port.

The link flow and the tokens are the generic OAuth 2.0 adapter's (`OAuth2Maker`, ADR
0022; Fitbit wants the client in the Basic header, and names the person, `user_id`, in
its token answer). A pull asks for one resource over one chunk of days; the reader asks
Fitbit for the endpoints that resource comes from and maps Fitbit's records into our
resources in the shapes the demo devices produce (docs/makers/fitbit.md has the table).

- Requests. Fitbit allows 150 requests an hour per person, and most endpoints take a
  date range (sleep 100 days, the activity time series 1095, HRV, breathing rate, SpO2
  and skin temperature 30, weight and fat logs 31). So the reader asks for the longest
  range an endpoint allows from the chunk's first day, and keeps what it read for the
  pull's later chunks (the pulls of a connection run chunk after chunk with one `now`):
  a two-year history is a few dozen range requests, plus the intraday heart rate, a
  request a day. The activity log list is read from the chunk's first day to its end,
  following `pagination.next`.
- Days and zones. Fitbit answers local times without an offset: the profile's IANA
  `timezone` (read once per pull) places them; without the `profile` scope they are read
  as UTC (docs/makers/fitbit.md). Summaries are stored under Fitbit's own day
  (`dateOfSleep`, the series' `dateTime`, the log's local date); samples under the UTC
  day of their instant, as the demo's are; the reader reads a day more on each side, so
  a day it returns is complete.
- Units: metric (no `Accept-Language`: Fitbit's metric system): km become m.
- Record ids. A workout keeps Fitbit's `logId`: a log sent again changed replaces its own
  session, never adds one. A day's summary is replaced whole.
- Failures: the shared session's (adapters/providers/maker_api.py): 429 waits out a short
  `Retry-After` (or, without one, Fitbit's `Fitbit-Rate-Limit-Reset`) and hands a longer
  one to the pull engine; 5xx, timeouts retried; a 401 refreshes once, then the
  connection goes to `error`.

Nothing Fitbit sends is logged or put in an error: messages are fixed texts.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo
from typing import Any
from urllib.parse import parse_qsl, urlsplit
from uuid import UUID
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import httpx
from healthledger.adapters.providers.maker_api import (
    MakerReader,
    MakerSession,
    MakerTexts,
    by_utc_day,
    cursor_pages,
    offset_seconds,
    request_of,
    retry_after_header,
    scope_availability,
    utc_iso,
)
from healthledger.adapters.reference import ProviderEntry
from healthledger.domain.connections import raw_payloads
from healthledger.domain.connections.providers import OAuthClient, OAuthGrant, PullTarget

TEXTS = MakerTexts.of("Fitbit")
# Reads kept for the pull running now (per endpoint: its last few ranges).
RECENT_READS = 128
RANGES_KEPT = 8
# The activity log list's documented page size at most.
ACTIVITY_PAGE = 100
# The longest date range (days) each ranged endpoint takes (Fitbit's reference).
MAX_RANGE = {
    "sleep": 100,
    "activities": 1095,
    "hrv": 30,
    "br": 30,
    "spo2": 30,
    "temp": 30,
    "weight": 31,
    "fat": 31,
    "heart": 1,  # intraday: one day a request
}
_PATHS = {
    "sleep": "/1.2/user/-/sleep/date/{start}/{end}.json",
    "hrv": "/1/user/-/hrv/date/{start}/{end}.json",
    "br": "/1/user/-/br/date/{start}/{end}.json",
    "spo2": "/1/user/-/spo2/date/{start}/{end}.json",
    "temp": "/1/user/-/temp/skin/date/{start}/{end}.json",
    "weight": "/1/user/-/body/log/weight/date/{start}/{end}.json",
    "fat": "/1/user/-/body/log/fat/date/{start}/{end}.json",
    "heart": "/1/user/-/activities/heart/date/{start}/1d/1min.json",
}

# The resource -> the Fitbit scope that covers it (docs/makers/fitbit.md).
SCOPES: dict[str, str] = {
    "sleep": "sleep",
    "sleep_cycle": "sleep",
    "hypnogram": "sleep",
    "activity": "activity",
    "steps": "activity",
    "calories_active": "activity",
    "calories_basal": "activity",
    "distance": "activity",
    "floors_climbed": "activity",
    "workouts": "activity",
    "heartrate": "heartrate",
    "hrv": "heartrate",
    "respiratory_rate": "respiratory_rate",
    "blood_oxygen": "oxygen_saturation",
    "body_temperature_delta": "temperature",
    "body": "weight",
    "weight": "weight",
    "fat": "weight",
    "profile": "profile",
}
# Fitbit's sleep levels -> our stages (classic logs: asleep, restless, awake).
_STAGES = {
    "deep": "deep",
    "light": "light",
    "rem": "rem",
    "wake": "awake",
    "asleep": "light",
    "restless": "awake",
    "awake": "awake",
}
_STAGE_CODES = {"deep": 1, "light": 2, "rem": 3, "awake": 4}
# Activity time series -> (resource, unit, factor to our unit); interval samples a day.
_SERIES: dict[str, tuple[str, str, float]] = {
    "steps": ("steps", "count", 1),
    "distance": ("distance", "m", 1000),  # km
    "calories_active": ("activityCalories", "kcal", 1),
    "calories_basal": ("caloriesBMR", "kcal", 1),
    "floors_climbed": ("floors", "count", 1),
}
# The nightly values: resource -> (endpoint, answer key, value of the document, unit).
_NIGHTLY: dict[str, tuple[str, str, Callable[[Mapping[str, Any]], Any], str]] = {
    "hrv": ("hrv", "hrv", lambda v: v.get("dailyRmssd"), "ms"),
    "respiratory_rate": ("br", "br", lambda v: v.get("breathingRate"), "bpm"),
    "blood_oxygen": ("spo2", "", lambda v: v.get("avg"), "%"),
    "body_temperature_delta": ("temp", "tempSkin", lambda v: v.get("nightlyRelative"), "°C"),
}
_SPORTS = {
    "walk": "walking",
    "run": "running",
    "bike": "cycling",
    "outdoor bike": "cycling",
    "weights": "strength_training",
    "swim": "swimming",
    "hike": "hiking",
}
_MILE = 1609.344


class FitbitReader(MakerReader):
    """Implements the ProviderAdapter port for Fitbit: OAuth from the catalog, data from
    the Web API at `api_url`. Its `recent` reads: each endpoint's last ranges, the
    profile, the logs."""

    def __init__(self, entry: ProviderEntry, *, subscribe: bool = False, **reader: Any) -> None:
        super().__init__(entry, recent_reads=RECENT_READS, **reader)
        # Whether a new grant is subscribed to Fitbit's notifications (our subscriber is
        # configured: fitbit_webhooks.py).
        self.subscribe = subscribe

    def availability(
        self, resources: Sequence[str], grant: OAuthGrant | None = None
    ) -> dict[str, Any]:
        """What Fitbit offers of each resource, under the scope that covers it (SCOPES):
        unavailable when the person unticked that scope or Fitbit does not give it."""
        return scope_availability(resources, SCOPES, grant)

    def exchange(
        self, code: str, redirect_uri: str, client: OAuthClient | None, code_verifier: str
    ) -> OAuthGrant:
        """The generic exchange, then the person's subscription to Fitbit's notifications
        (when our subscriber is configured): `POST /1/user/-/apiSubscriptions/{id}.json`,
        every collection, the id a digest of the account (Fitbit wants ids unique across
        the application; the same person subscribed again is the same id: 409 from Fitbit
        for one already there, fine). A subscription Fitbit refuses or cannot take now
        leaves the sign-in standing: the daily sync reads the data all the same."""
        grant = super().exchange(code, redirect_uri, client, code_verifier)
        if not self.subscribe or grant.tokens is None or not grant.external_user_id:
            return grant
        subscription = subscription_id(grant.external_user_id)
        with contextlib.suppress(httpx.HTTPError):
            self.http.post(
                f"{self.api_url}/1/user/-/apiSubscriptions/{subscription}.json",
                headers={
                    "Authorization": f"Bearer {grant.tokens.access_token}",
                    "Accept": "application/json",
                },
                timeout=self.api_timeout,
            )
        return grant

    # -- pulls ----------------------------------------------------------------------------

    def fetch(
        self, target: PullTarget, start: date, end: date, now: datetime, attempt: int
    ) -> dict[date, Any]:
        session = _Session(self, target.grant_id(), now)
        resource = target.resource
        if not session.granted(SCOPES.get(resource)):
            return {}  # not granted (or not in Fitbit's API): unavailable, nothing to read
        if resource in ("sleep", "sleep_cycle", "hypnogram"):
            return _by_sleep(resource, session, start, end)
        if resource == "activity":
            return _activity(session, start, end)
        if resource in _SERIES:
            return _series(resource, session, start, end)
        if resource == "workouts":
            return _workouts(session, start, end)
        if resource == "heartrate":
            return _heartrate(session, start, end)
        if resource in _NIGHTLY:
            return _nightly(resource, session, start, end)
        if resource in ("body", "weight", "fat"):
            return _body(resource, session, start, end)
        if resource == "profile":
            return _profile(session, start, end, now)
        return {}  # not in Fitbit's API (availability says so)


def subscription_id(account: str) -> str:
    """Our id of a person's Fitbit subscription: a digest of their encoded id (stable, so
    that subscribing again names the same subscription; no account id in the URL)."""
    return "hl-" + hashlib.sha256(account.encode()).hexdigest()[:32]


def fitbit_wait(response: httpx.Response, now: datetime) -> timedelta | None:
    """How long a 429 asks us to wait: its Retry-After, else the seconds Fitbit's
    `Fitbit-Rate-Limit-Reset` says are left until the hourly quota resets."""
    asked = retry_after_header(response, now)
    if asked is not None:
        return asked
    reset = response.headers.get("fitbit-rate-limit-reset", "")
    return timedelta(seconds=int(reset)) if reset.isdigit() else None


class _Session(MakerSession):
    """One fetch's access to the Web API (the shared MakerSession: token, refresh on a
    401, failures as the engine's codes), and what the pull read, kept for its chunks."""

    def __init__(self, reader: FitbitReader, connection_id: UUID, now: datetime) -> None:
        super().__init__(
            reader,
            connection_id,
            now,
            texts=TEXTS,
            timeout=reader.api_timeout,
            max_wait=reader.max_wait,
            sleep=reader.sleep,
            wait_of=fitbit_wait,
        )
        self.reader = reader

    def read(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        return self.get(f"{self.reader.api_url}{path}", params)

    # -- the person's zone ------------------------------------------------------------

    def profile(self) -> dict[str, Any] | None:
        """The person's profile (`user`), once per pull; None without the profile scope."""
        if not self.granted("profile"):
            return None
        key = (self.connection_id, self.now, "profile")
        found = self.reader.recent.get(key)
        if found is None:
            with raw_payloads.answers_of() as read_from:
                answer = self.read("/1/user/-/profile.json")
            found = answer.get("user") if isinstance(answer, dict) else None
            if not isinstance(found, dict):
                raise TEXTS.broken()
            self.reader.recent.put(key, found, read_from)
        else:
            self.reader.recent.served_from(key)  # its answer is this resource's raw too
        return dict(found)

    def zone(self) -> tzinfo:
        """Where the person's local times are: the profile's IANA zone, else its current
        offset, else UTC (no profile scope)."""
        profile = self.profile() or {}
        name = profile.get("timezone")
        if isinstance(name, str) and name:
            try:
                return ZoneInfo(name)
            except (ZoneInfoNotFoundError, ValueError):
                pass
        millis = profile.get("offsetFromUTCMillis")
        if isinstance(millis, int) and abs(millis) < 86_400_000:
            return timezone(timedelta(milliseconds=millis))
        return UTC

    # -- ranged endpoints -------------------------------------------------------------

    def ranged(self, kind: str, path: str, first: date, last: date) -> Any:
        """The answers of `path` (a ranged endpoint, `{start}`/`{end}`) covering the local
        days first..last: a range read earlier in this pull when one covers them, else
        the longest range Fitbit allows from `first` (up to tomorrow), read now."""
        key = (self.connection_id, self.now, path)
        kept: list[tuple[date, date, Any]] = self.reader.recent.get(key) or []
        answers = []
        for begin, stop, answer in kept:
            if begin <= first and last <= stop:
                self._served(path, begin, stop, answer)
                return [answer]
            if begin <= first <= stop:
                self._served(path, begin, stop, answer)
                answers = [answer]
                first = stop + timedelta(days=1)
                break
        span = MAX_RANGE[kind]
        tomorrow = self.now.date() + timedelta(days=1)
        if not answers and span > 1:
            # From the day before: the resources of a chunk ask from its first day or the
            # day before it (samples), and one range serves them all.
            first -= timedelta(days=1)
        while first <= last:
            stop = min(first + timedelta(days=span - 1), max(last, tomorrow))
            answer = self.read(path.format(start=first.isoformat(), end=stop.isoformat()))
            kept = [*kept, (first, stop, answer)][-RANGES_KEPT:]
            self.reader.recent.put(key, kept)
            answers.append(answer)
            first = stop + timedelta(days=1)
        return answers

    def _served(self, path: str, begin: date, stop: date, answer: Any) -> None:
        """A range read earlier in this pull serves the resource fetched now: its answer
        is this resource's raw payload too (kept once per resource, by identity)."""
        url = f"{self.reader.api_url}{path.format(start=begin.isoformat(), end=stop.isoformat())}"
        raw_payloads.record(request_of(url, None), answer)

    def documents(self, kind: str, field: str, first: date, last: date) -> list[dict[str, Any]]:
        """The documents under `field` of a ranged endpoint's answers (a bare list when
        `field` is empty, as SpO2's range is)."""
        found: list[dict[str, Any]] = []
        for answer in self.ranged(kind, _PATHS[kind], first, last):
            listed = answer if not field and isinstance(answer, list) else None
            if field and isinstance(answer, dict):
                listed = answer.get(field)
            if not isinstance(listed, list):
                raise TEXTS.broken()
            found += [d for d in listed if isinstance(d, dict)]
        return found

    def series(self, name: str, first: date, last: date) -> dict[date, float]:
        """An activity time series (`activities-<name>`), its values as numbers by day."""
        path = f"/1/user/-/activities/{name}/date/{{start}}/{{end}}.json"
        values: dict[date, float] = {}
        for answer in self.ranged("activities", path, first, last):
            listed = answer.get(f"activities-{name}") if isinstance(answer, dict) else None
            if not isinstance(listed, list):
                raise TEXTS.broken()
            for entry in listed:
                day, value = _day(entry.get("dateTime")), _number(entry.get("value"))
                if day is not None and value is not None and first <= day <= last:
                    values[day] = value
        return values

    def heart_day(self, day: date) -> Any:
        """A day's heart rate at Fitbit's one-minute detail (intraday)."""
        [answer] = self.ranged("heart", _PATHS["heart"], day, day)
        return answer

    def activity_logs(self, first: date) -> list[dict[str, Any]]:
        """The activity logs after the day before `first`, to the last page; the list
        read earlier in this pull when it started before."""
        key = (self.connection_id, self.now, "activities/list")
        kept = self.reader.recent.get(key)
        if kept is not None and kept[0] <= first:
            self.reader.recent.served_from(key)  # its pages are this resource's raw too
            return list(kept[1])
        api = self.reader.api_url

        def read(cursor: str | None) -> tuple[list[Any], str | None]:
            if cursor is None:
                params = {
                    "afterDate": (first - timedelta(days=1)).isoformat(),
                    "sort": "asc",
                    "limit": str(ACTIVITY_PAGE),
                    "offset": "0",
                }
                answer = self.read("/1/user/-/activities/list.json", params)
            else:
                # `next` is a whole URL: followed only on the API's own origin and path,
                # so the person's token never goes anywhere else.
                link = urlsplit(cursor)
                if f"{link.scheme}://{link.netloc}{link.path}" != (
                    f"{api}/1/user/-/activities/list.json"
                ):
                    raise TEXTS.broken()
                answer = self.read("/1/user/-/activities/list.json", dict(parse_qsl(link.query)))
            listed = answer.get("activities") if isinstance(answer, dict) else None
            pagination = answer.get("pagination") if isinstance(answer, dict) else None
            if not isinstance(listed, list) or not isinstance(pagination, dict):
                raise TEXTS.broken()
            return listed, pagination.get("next") or None

        with raw_payloads.answers_of() as read_from:
            logs = cursor_pages(read, TEXTS)
        self.reader.recent.put(key, (first, logs), read_from)
        return logs


# -- mapping ------------------------------------------------------------------------------


def _day(text: Any) -> date | None:
    try:
        return date.fromisoformat(str(text)[:10])
    except ValueError:
        return None


def _number(value: Any) -> float | None:
    """A number Fitbit may send as a string (the activity time series' values)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    try:
        number = float(str(value))
    except ValueError:
        return None
    return int(number) if number.is_integer() else number


def _local(text: Any, zone: tzinfo) -> datetime | None:
    """A Fitbit time: local without an offset (placed in the person's zone), or with one."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=zone)


def _margins(start: date, end: date) -> tuple[date, date]:
    """The local days whose samples can fall on the UTC days start..end."""
    return start - timedelta(days=1), end + timedelta(days=1)


def _main_sleep(logs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The night's main sleep: the log Fitbit marks main, else the longest."""
    if not logs:
        return None
    return max(logs, key=lambda s: (bool(s.get("isMainSleep")), s.get("duration") or 0))


def _by_sleep(resource: str, session: _Session, start: date, end: date) -> dict[date, Any]:
    zone = session.zone()
    by_day: dict[date, list[dict[str, Any]]] = {}
    for log in session.documents("sleep", "sleep", start, end):
        day = _day(log.get("dateOfSleep"))
        if day is not None and start <= day <= end:
            by_day.setdefault(day, []).append(log)
    found: dict[date, Any] = {}
    for day, logs in sorted(by_day.items()):
        main = _main_sleep(logs)
        mapped = None if main is None else _SLEEP_MAPPERS[resource](main, day, zone)
        if mapped:
            found[day] = mapped
    return found


def _minutes(summary: Mapping[str, Any], *names: str) -> int:
    total = 0
    for name in names:
        level = summary.get(name)
        if isinstance(level, Mapping) and isinstance(level.get("minutes"), int | float):
            total += int(level["minutes"])
    return 60 * total


def _sleep(log: Mapping[str, Any], day: date, zone: tzinfo) -> dict[str, Any] | None:
    begin, stop = _local(log.get("startTime"), zone), _local(log.get("endTime"), zone)
    if begin is None or stop is None:
        return None
    levels = log.get("levels") or {}
    summary = levels.get("summary") or {}
    asleep = 60 * int(log.get("minutesAsleep") or 0)
    if log.get("type") == "classic":
        # Only asleep/restless/awake: asleep counts as light (no deep or REM measured).
        light, rem, deep = _minutes(summary, "asleep"), 0, 0
    else:
        light, rem, deep = (_minutes(summary, n) for n in ("light", "rem", "deep"))
    duration = log.get("duration")
    return {
        "calendar_date": day.isoformat(),
        "bedtime_start": begin.isoformat(),
        "bedtime_stop": stop.isoformat(),
        "timezone_offset": offset_seconds(begin),
        "type": "long_sleep" if log.get("isMainSleep") else "sleep",
        "duration": int(duration / 1000)
        if isinstance(duration, int | float)
        else int((stop - begin).total_seconds()),
        "total": asleep,
        "awake": 60 * int(log.get("minutesAwake") or 0),
        "light": light,
        "rem": rem,
        "deep": deep,
        "efficiency": log.get("efficiency"),
        "latency": 60 * int(log.get("minutesToFallAsleep") or 0),
        # Not in Fitbit's sleep log (the sleep score is not in the Web API).
        "score": None,
        "hr_lowest": None,
        "hr_average": None,
        "average_hrv": None,
        "respiratory_rate": None,
        "temperature_delta": None,
    }


def _levels(log: Mapping[str, Any], zone: tzinfo) -> list[tuple[datetime, int, str]]:
    """The log's levels (`levels.data`, Fitbit's runs): (start, seconds, our stage)."""
    data = (log.get("levels") or {}).get("data")
    found = []
    for entry in data if isinstance(data, list) else []:
        moment = _local(entry.get("dateTime"), zone)
        seconds, stage = entry.get("seconds"), _STAGES.get(str(entry.get("level")))
        if moment is not None and isinstance(seconds, int | float) and stage is not None:
            found.append((moment, int(seconds), stage))
    return sorted(found, key=lambda level: level[0])


def _sleep_cycle(log: Mapping[str, Any], day: date, zone: tzinfo) -> dict[str, Any] | None:
    begin, stop = _local(log.get("startTime"), zone), _local(log.get("endTime"), zone)
    levels = _levels(log, zone)
    if begin is None or stop is None or not levels:
        return None
    offsets = [int((moment - begin).total_seconds()) for moment, _, _ in levels]
    return {
        "session_start": begin.isoformat(),
        "session_end": stop.isoformat(),
        "stage_start_offset_second": offsets,
        "stage_end_offset_second": [o + s for o, (_, s, _) in zip(offsets, levels, strict=True)],
        "stage_type": [stage for _, _, stage in levels],
    }


def _hypnogram(log: Mapping[str, Any], day: date, zone: tzinfo) -> list[dict[str, Any]]:
    return [
        {
            "timestamp": moment.isoformat(),
            "start": moment.isoformat(),
            "end": (moment + timedelta(seconds=seconds)).isoformat(),
            "value": _STAGE_CODES[stage],
            "unit": "stage",
        }
        for moment, seconds, stage in _levels(log, zone)
    ]


_SLEEP_MAPPERS: dict[str, Callable[[Mapping[str, Any], date, tzinfo], Any]] = {
    "sleep": _sleep,
    "sleep_cycle": _sleep_cycle,
    "hypnogram": _hypnogram,
}


def _activity(session: _Session, start: date, end: date) -> dict[date, Any]:
    zone = session.zone()
    names = (
        "steps",
        "distance",
        "calories",
        "activityCalories",
        "floors",
        "minutesLightlyActive",
        "minutesFairlyActive",
        "minutesVeryActive",
    )
    series = {name: session.series(name, start, end) for name in names}
    found: dict[date, Any] = {}
    for day in sorted(series["steps"]):
        values = {name: series[name].get(day) for name in names}
        if not values["steps"] and not values["activityCalories"]:
            continue  # no tracker data that day (Fitbit answers zeros)
        distance = values["distance"]
        noon = datetime.combine(day, time(12), zone)
        found[day] = {
            "calendar_date": day.isoformat(),
            "steps": values["steps"],
            "distance": None if distance is None else round(distance * 1000, 1),
            "calories_active": values["activityCalories"],
            "calories_total": values["calories"],
            "floors_climbed": values["floors"],
            "low": values["minutesLightlyActive"],
            "medium": values["minutesFairlyActive"],
            "high": values["minutesVeryActive"],
            "timezone_offset": offset_seconds(noon),
        }
    return found


def _series(resource: str, session: _Session, start: date, end: date) -> dict[date, Any]:
    name, unit, factor = _SERIES[resource]
    zone = session.zone()
    first, last = _margins(start, end)
    samples = []
    for day, value in session.series(name, first, last).items():
        if not value:
            continue  # a day without data reads as zero at Fitbit
        begin = datetime.combine(day, time(0), zone)
        stop = datetime.combine(day + timedelta(days=1), time(0), zone)
        amount = round(value * factor, 1) if factor != 1 else value
        sample = {
            "timestamp": utc_iso(begin),
            "start": utc_iso(begin),
            "end": utc_iso(stop),
            "value": amount,
            "unit": unit,
        }
        samples.append((begin, sample))
    return by_utc_day(samples, start, end)


def _sport(name: Any) -> str:
    text = str(name or "other").strip().lower()
    return _SPORTS.get(text, "_".join(text.replace("-", " ").split()) or "other")


def _meters(distance: Any, unit: Any) -> float | None:
    value = _number(distance)
    if value is None:
        return None
    return round(value * (_MILE if unit == "Mile" else 1000), 1)


def _workouts(session: _Session, start: date, end: date) -> dict[date, Any]:
    found: dict[date, list[dict[str, Any]]] = {}
    zone = session.zone()
    for log in session.activity_logs(start):
        begin, duration = _local(log.get("startTime"), zone), log.get("duration")
        if begin is None or log.get("logId") is None or not isinstance(duration, int | float):
            continue
        day = begin.date()  # the log's local day
        if not start <= day <= end:
            continue
        heart = log.get("averageHeartRate")
        found.setdefault(day, []).append(
            {
                # Fitbit's logId: the session's key, so a re-sent log replaces its own.
                "id": str(log["logId"]),
                "sport": _sport(log.get("activityName")),
                "time_start": begin.isoformat(),
                "time_end": (begin + timedelta(milliseconds=duration)).isoformat(),
                "timezone_offset": offset_seconds(begin),
                "calories": log.get("calories"),
                "average_hr": heart if isinstance(heart, int | float) else None,
                "max_hr": None,
                "distance": _meters(log.get("distance"), log.get("distanceUnit")),
            }
        )
    return {
        day: sorted(kept, key=lambda w: (w["time_start"], w["id"]))
        for day, kept in sorted(found.items())
    }


def _heartrate(session: _Session, start: date, end: date) -> dict[date, Any]:
    zone = session.zone()
    first, last = _margins(start, end)
    samples = []
    day = first
    while day <= last:
        answer = session.heart_day(day)
        intraday = answer.get("activities-heart-intraday") if isinstance(answer, dict) else None
        if intraday is None:
            # The application has no intraday access (only "Personal" applications, or
            # those Fitbit granted it): Fitbit answers the day's summary alone.
            return {}
        dataset = intraday.get("dataset") if isinstance(intraday, dict) else None
        if not isinstance(dataset, list):
            raise TEXTS.broken()
        samples += _day_samples(day, dataset, zone)
        day += timedelta(days=1)
    # In time order already (day after day, each in order): grouped by UTC day as they come.
    found: dict[date, list[dict[str, Any]]] = {}
    for moment, sample in samples:
        if start <= moment.date() <= end:
            found.setdefault(moment.date(), []).append(sample)
    return found


def _day_samples(
    day: date, dataset: list[Any], zone: tzinfo
) -> list[tuple[datetime, dict[str, Any]]]:
    """A day's intraday dataset (`time` local "HH:MM:SS", `value` bpm) as UTC samples.
    Over a thousand a day: on a day whose offset does not change (all but two a year)
    each instant is the day's UTC start plus the time, without a zone conversion each."""
    midnight = datetime.combine(day, time(0), zone)
    offset = midnight.utcoffset()
    steady = offset == (midnight + timedelta(hours=23, minutes=59)).utcoffset()
    base = (midnight.replace(tzinfo=None) - (offset or timedelta(0))).replace(tzinfo=UTC)
    found = []
    for entry in dataset:
        value, clock = entry.get("value"), entry.get("time")
        if not isinstance(value, int | float) or not isinstance(clock, str) or len(clock) != 8:
            continue
        try:
            seconds = int(clock[:2]) * 3600 + int(clock[3:5]) * 60 + int(clock[6:])
        except ValueError:
            continue
        if steady:
            moment = base + timedelta(seconds=seconds)
        else:
            moment = (midnight + timedelta(seconds=seconds)).astimezone(UTC)
        found.append((moment, {"timestamp": moment.isoformat(), "value": value, "unit": "bpm"}))
    return found


def _nightly(resource: str, session: _Session, start: date, end: date) -> dict[date, Any]:
    kind, field, value_of, unit = _NIGHTLY[resource]
    zone = session.zone()
    first, last = _margins(start, end)
    samples = []
    for document in session.documents(kind, field, first, last):
        day, value = _day(document.get("dateTime")), document.get("value")
        measured = value_of(value) if isinstance(value, Mapping) else None
        if day is None or not isinstance(measured, int | float):
            continue
        # The night's value, at the local midnight of the day Fitbit files it under.
        begin = datetime.combine(day, time(0), zone)
        sample: dict[str, Any] = {"timestamp": utc_iso(begin), "value": measured, "unit": unit}
        if resource == "body_temperature_delta":
            sample["start"] = utc_iso(begin)
            sample["end"] = utc_iso(begin + timedelta(days=1))
        samples.append((begin, sample))
    return by_utc_day(samples, start, end)


def _logged_at(log: Mapping[str, Any], zone: tzinfo) -> datetime | None:
    return _local(f"{log.get('date')}T{log.get('time') or '00:00:00'}", zone)


def _body(resource: str, session: _Session, start: date, end: date) -> dict[date, Any]:
    zone = session.zone()
    if resource == "body":
        weighings = session.documents("weight", "weight", start, end)
        fats = {
            log.get("logId"): log.get("fat") for log in session.documents("fat", "fat", start, end)
        }
        by_day: dict[date, list[tuple[datetime, Mapping[str, Any]]]] = {}
        for log in weighings:
            moment, day = _logged_at(log, zone), _day(log.get("date"))
            if moment is not None and day is not None and start <= day <= end:
                by_day.setdefault(day, []).append((moment, log))
        found: dict[date, Any] = {}
        for day, logs in sorted(by_day.items()):
            _, last = max(logs, key=lambda pair: pair[0])  # the day's last weighing
            fat = last.get("fat", fats.get(last.get("logId")))
            found[day] = {
                "calendar_date": day.isoformat(),
                "weight": last.get("weight"),
                "fat": fat,
            }
        return found
    first, last_day = _margins(start, end)
    unit = "kg" if resource == "weight" else "%"
    samples = []
    for log in session.documents(resource, resource, first, last_day):
        moment, value = _logged_at(log, zone), log.get(resource)
        if moment is not None and isinstance(value, int | float):
            samples.append((moment, {"timestamp": utc_iso(moment), "value": value, "unit": unit}))
    return by_utc_day(samples, start, end)


def _profile(session: _Session, start: date, end: date, now: datetime) -> dict[date, Any]:
    """Fitbit keeps the person's current height only: today's value, in the chunk that
    holds today."""
    today = now.astimezone(UTC).date()
    if not start <= today <= end:
        return {}
    profile = session.profile() or {}
    height = _number(profile.get("height"))
    if height is None:
        return {}
    return {today: {"height": round(height), "calendar_date": today.isoformat()}}
