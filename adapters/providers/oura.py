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

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from uuid import UUID

import httpx
from healthledger.adapters.providers.maker_api import (
    MakerReader,
    MakerSession,
    MakerTexts,
    by_utc_day,
    cursor_pages,
    granted_scopes,
    instant,
    offset_seconds,
    scope_availability,
    utc_iso,
)
from healthledger.adapters.providers.oauth2 import (
    revocation_answer,
)
from healthledger.domain.connections.provider_tokens import ProviderTokens
from healthledger.domain.connections.providers import (
    OAuthClient,
    OAuthGrant,
    ProviderError,
    PullTarget,
)

# Oura's answers to a revocation with a token it no longer knows: the grant is gone already.
TOKEN_NOT_KNOWN = frozenset({400, 401})
_NO_REVOCATION = "Oura could not be reached to revoke the grant; it will be tried again."


TEXTS = MakerTexts.of("Oura")

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


class OuraReader(MakerReader):
    """Implements the ProviderAdapter port for Oura: OAuth from the catalog, data from
    API v2 at `api_url`. Its `recent` reads are collections: the resources of one chunk
    share them (six come from `sleep`), so each page is asked of Oura once per pull."""

    def availability(
        self, resources: Sequence[str], grant: OAuthGrant | None = None
    ) -> dict[str, Any]:
        """What Oura offers of each resource, under the scope that covers it (SCOPES):
        unavailable when the person did not grant that scope or Oura does not give it."""
        return scope_availability(resources, SCOPES, grant)

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

    # -- deregistration -------------------------------------------------------------------

    def revoke(self, team_id: UUID, client_id: str, tokens: ProviderTokens) -> None:
        """Oura's documented revocation: `GET {api}/oauth/revoke?access_token=...` (its
        token in the query, as Oura asks: httpx's request log is kept off, server.py).
        An access token expired is refreshed first (Oura revokes by a live one). Done on
        a 200, and on a 400 or 401 (the grant is gone already); 429, 5xx and a maker out
        of reach are retried later (revocation.py)."""
        access = self.live_access_token(team_id, client_id, tokens, _NO_REVOCATION)
        if access is None:
            return  # the grant is not Oura's to end any more
        try:
            response = self.http.get(
                f"{self.api_url}/oauth/revoke",
                params={"access_token": access},
                timeout=self.api_timeout,
            )
        except httpx.HTTPError:
            raise ProviderError("transport_failure", _NO_REVOCATION) from None
        revocation_answer(response.status_code, gone=TOKEN_NOT_KNOWN)

    # -- pulls ----------------------------------------------------------------------------

    def fetch(
        self, target: PullTarget, start: date, end: date, now: datetime, attempt: int
    ) -> dict[date, Any]:
        session = _Session(self, target.grant_id(), now)
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


class _Session(MakerSession):
    """One fetch's access to the data API (the shared MakerSession: token, refresh on a
    401, failures as the engine's codes), and the collections read, page after page."""

    def __init__(self, reader: OuraReader, connection_id: UUID, now: datetime) -> None:
        super().__init__(
            reader,
            connection_id,
            now,
            texts=TEXTS,
            timeout=reader.api_timeout,
            max_wait=reader.max_wait,
            sleep=reader.sleep,
        )
        self.reader = reader

    def pages(self, path: str, params: Mapping[str, str]) -> list[dict[str, Any]]:
        """Every document of a collection query: each page, to the last `next_token`."""
        url = f"{self.reader.api_url}{path}"

        def read(cursor: str | None) -> tuple[list[Any], str | None]:
            query = dict(params) if cursor is None else {**params, "next_token": cursor}
            answer = self.get(url, query)
            data = answer.get("data") if isinstance(answer, dict) else None
            if not isinstance(data, list):
                raise TEXTS.broken()
            return data, answer.get("next_token")

        return cursor_pages(read, TEXTS)

    def collection(self, name: str, start: date, end: date) -> list[dict[str, Any]]:
        """A collection's documents of the local days start..end, and of the day before
        and after (a night's or a day's samples can fall on those UTC days): the same
        window for every resource of a chunk, read once per pull."""
        first, last = start - timedelta(days=1), end + timedelta(days=1)
        key = (self.connection_id, self.now, name, first, last)
        params = {"start_date": first.isoformat(), "end_date": last.isoformat()}
        return self.reader.recent.shared(
            key, lambda: self.pages(f"/v2/usercollection/{name}", params)
        )

    def heartrate(self, start: datetime, end: datetime) -> list[dict[str, Any]]:
        params = {"start_datetime": start.isoformat(), "end_datetime": end.isoformat()}
        return self.pages("/v2/usercollection/heartrate", params)

    def personal_info(self) -> dict[str, Any]:
        answer = self.get(f"{self.reader.api_url}/v2/usercollection/personal_info")
        if not isinstance(answer, dict):
            raise TEXTS.broken()
        return answer


# -- mapping ------------------------------------------------------------------------------


def _day_of(document: Mapping[str, Any]) -> date | None:
    try:
        return date.fromisoformat(str(document.get("day")))
    except ValueError:
        return None


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
    begin, stop = instant(doc.get("bedtime_start")), instant(doc.get("bedtime_end"))
    if begin is None or stop is None:
        return None
    readiness = doc.get("readiness") or {}
    in_bed = doc.get("time_in_bed")
    return {
        "calendar_date": day.isoformat(),
        "bedtime_start": begin.isoformat(),
        "bedtime_stop": stop.isoformat(),
        "timezone_offset": offset_seconds(begin),
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
    begin, hypnogram = instant(doc.get("bedtime_start")), doc.get("sleep_phase_5_min")
    if begin is None or not isinstance(hypnogram, str):
        return []
    return [
        (begin + timedelta(minutes=5 * index), _STAGES[digit])
        for index, digit in enumerate(hypnogram)
        if digit in _STAGES
    ]


def _sleep_cycle(doc: Mapping[str, Any], day: date, score: Any) -> dict[str, Any] | None:
    begin, stop = instant(doc.get("bedtime_start")), instant(doc.get("bedtime_end"))
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
    first, interval = instant(sample.get("timestamp")), sample.get("interval")
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


def _sleep_samples(resource: str, session: _Session, start: date, end: date) -> dict[date, Any]:
    # A night's samples can fall on the UTC day before or after its `day`.
    documents = session.collection("sleep", start, end)
    samples: list[tuple[datetime, dict[str, Any]]] = []
    for doc in documents:
        if doc.get("type") == "deleted":
            continue
        if resource == "hrv":
            samples += [
                (moment, {"timestamp": utc_iso(moment), "value": value, "unit": "ms"})
                for moment, value in _items(doc.get("hrv"))
            ]
        else:
            begin, breath = instant(doc.get("bedtime_start")), doc.get("average_breath")
            if begin is not None and breath is not None:
                samples.append(
                    (begin, {"timestamp": utc_iso(begin), "value": breath, "unit": "bpm"})
                )
    return by_utc_day(samples, start, end)


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
        "timezone_offset": offset_seconds(instant(doc.get("timestamp"))),
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
            begin, stop = instant(doc.get("start_datetime")), instant(doc.get("end_datetime"))
            if begin is None or stop is None or doc.get("id") is None:
                continue
            kept.append(
                {
                    # Oura's id: the session's key, so a re-sent workout replaces its own.
                    "id": str(doc["id"]),
                    "sport": _sport(doc.get("activity")),
                    "time_start": begin.isoformat(),
                    "time_end": stop.isoformat(),
                    "timezone_offset": offset_seconds(begin),
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
        moment, bpm = instant(doc.get("timestamp")), doc.get("bpm")
        if moment is not None and isinstance(bpm, int | float):
            samples.append((moment, {"timestamp": utc_iso(moment), "value": bpm, "unit": "bpm"}))
    return by_utc_day(samples, start, end)


def _daily_samples(resource: str, session: _Session, start: date, end: date) -> dict[date, Any]:
    collection, unit, value_of = _DAILY_SAMPLES[resource]
    documents = session.collection(collection, start, end)
    samples = []
    for doc in documents:
        day, value = _day_of(doc), value_of(doc)
        if day is None or value is None:
            continue
        # The person's local day: its midnight in the offset of the document's timestamp.
        stamp = instant(doc.get("timestamp"))
        zone = stamp.tzinfo if stamp is not None else UTC
        begin = datetime.combine(day, time(0), zone)
        sample: dict[str, Any] = {"timestamp": utc_iso(begin), "value": value, "unit": unit}
        if resource in _INTERVAL:
            sample["start"] = utc_iso(begin)
            sample["end"] = utc_iso(begin + timedelta(days=1))
        samples.append((begin, sample))
    return by_utc_day(samples, start, end)


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
