"""The WHOOP reader: WHOOP's API v2 (`/developer/v2/...`) behind the provider port.

The link flow and the tokens are the generic OAuth 2.0 adapter's (`OAuth2Maker`, ADR
0022; the catalog's `whoop_v2` entry, whose scopes include `offline` for a refresh token):
this class adds the reading. A pull asks for one resource over one chunk of days; the
reader asks WHOOP for the collections that resource comes from (`cycle`, `recovery`,
`activity/sleep`, `activity/workout`: `records` pages of up to 25, `nextToken` to the
last page) and maps them into our resources in the demo devices' shapes
(docs/makers/whoop.md has the table).

- Days. Every WHOOP record carries the person's `timezone_offset` ("-05:00") at the time:
  a cycle and a workout are stored under the local day they start, a sleep under the
  local day it ends (the morning the person wakes); samples (HRV, SpO2...) under the UTC
  day of their instant, as the demo's are. The reader asks for a day more on each side,
  so a day it returns is complete, and the resources of one chunk share what was read:
  each page is asked of WHOOP once per pull (100 requests a minute per application).
- Record ids. A workout keeps WHOOP's id (a UUID): a workout scored again replaces the
  one stored, never adds one. A day's summary is replaced whole.
- Failures: the shared MakerSession's (maker_api.py): 429 `provider_rate_limit_exceeded`
  (a short `Retry-After` waited out here), 5xx `provider_unavailable`, a timeout or a
  broken connection `transport_failure`, all retried by the engine; a 401 refreshes the
  grant once, and if WHOOP then still refuses, or refuses the refresh, the connection
  goes to `error` (token_refresh_failed).

Nothing WHOOP sends is logged or put in an error: messages are fixed texts. The
person's name and e-mail (`/v2/user/profile/basic`) are never read into a record: only
their WHOOP `user_id`, which WHOOP's webhooks name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta, timezone
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

# WHOOP's largest page (its `limit`): fewer requests against its 100 a minute.
PAGE_LIMIT = 25
KCAL_PER_KJ = 1 / 4.184
# WHOOP's answer to a revocation with a token it no longer knows: the grant is gone.
TOKEN_NOT_KNOWN = frozenset({401})

TEXTS = MakerTexts.of("WHOOP")
_NO_REVOCATION = "WHOOP could not be reached to revoke the grant; it will be tried again."

# The resource -> the WHOOP scope that covers it (docs/makers/whoop.md). Not here, so
# unavailable: heartrate (WHOOP's API gives no heart-rate series), calories_active (its
# kilojoules are the day's whole expenditure), sleep_cycle and hypnogram (stage totals
# only, no stage timeline).
SCOPES: dict[str, str] = {
    "sleep": "read:sleep",
    "respiratory_rate": "read:sleep",
    "workouts": "read:workout",
    "activity": "read:cycles",
    "hrv": "read:recovery",
    "blood_oxygen": "read:recovery",
    "body_temperature": "read:recovery",
    "profile": "read:body_measurement",
    "body": "read:body_measurement",
    "weight": "read:body_measurement",
}
# The collection of each scope, at {api}/developer/v2/...
COLLECTIONS = {
    "cycle": "/developer/v2/cycle",
    "recovery": "/developer/v2/recovery",
    "sleep": "/developer/v2/activity/sleep",
    "workout": "/developer/v2/activity/workout",
}
# Recovery's samples: resource -> (field of its score, unit).
_RECOVERY_SAMPLES = {
    "hrv": ("hrv_rmssd_milli", "ms"),
    "blood_oxygen": ("spo2_percentage", "%"),
    "body_temperature": ("skin_temp_celsius", "°C"),
}


class WhoopReader(MakerReader):
    """Implements the ProviderAdapter port for WHOOP: OAuth from the catalog, data from
    API v2 at `api_url`. Its `recent` reads are collections: the resources of one chunk
    share them (three come from `recovery`), so each page is asked of WHOOP once per pull."""

    def availability(
        self, resources: Sequence[str], grant: OAuthGrant | None = None
    ) -> dict[str, Any]:
        """What WHOOP offers of each resource, under the scope that covers it (SCOPES)."""
        return scope_availability(resources, SCOPES, grant)

    def exchange(
        self, code: str, redirect_uri: str, client: OAuthClient | None, code_verifier: str
    ) -> OAuthGrant:
        """The generic exchange, then the person's WHOOP `user_id` (profile/basic: WHOOP's
        token answer does not name the account, and its webhooks name it). Without the
        `read:profile` scope, or on a passing failure, it is left unset: the sign-in stands."""
        grant = super().exchange(code, redirect_uri, client, code_verifier)
        if grant.tokens is None or grant.external_user_id is not None:
            return grant
        granted = granted_scopes(grant.tokens.scope)
        if granted is not None and "read:profile" not in granted:
            return grant
        try:
            response = self.http.get(
                f"{self.api_url}/developer/v2/user/profile/basic",
                headers={
                    "Authorization": f"Bearer {grant.tokens.access_token}",
                    "Accept": "application/json",
                },
                timeout=self.api_timeout,
            )
            answer = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            answer = None
        account = answer.get("user_id") if isinstance(answer, dict) else None
        if not isinstance(account, int | str) or isinstance(account, bool) or account == "":
            return grant
        return OAuthGrant(
            external_user_id=str(account), client_id=grant.client_id, tokens=grant.tokens
        )

    # -- deregistration -------------------------------------------------------------------

    def revoke(self, team_id: UUID, client_id: str, tokens: ProviderTokens) -> None:
        """WHOOP's revocation: `DELETE {api}/developer/v2/user/access` as the person
        (their access token, refreshed first when expired) ends the application's access.
        Done on a 204, and on a 401 (the grant is gone already); 429, 5xx and WHOOP out of
        reach are retried later (revocation.py)."""
        access = self.live_access_token(team_id, client_id, tokens, _NO_REVOCATION)
        if access is None:
            return  # the grant is not WHOOP's to end any more
        try:
            response = self.http.delete(
                f"{self.api_url}/developer/v2/user/access",
                headers={"Authorization": f"Bearer {access}"},
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
            return {}  # not granted (or not in WHOOP's API): unavailable, nothing to read
        if resource == "sleep":
            return _sleeps(session.collection("sleep", start, end), start, end)
        if resource == "respiratory_rate":
            return _respiratory_rate(session.collection("sleep", start, end), start, end)
        if resource == "workouts":
            return _workouts(session.collection("workout", start, end), start, end)
        if resource == "activity":
            recoveries = (
                session.collection("recovery", start, end)
                if session.granted("read:recovery")
                else []
            )
            return _activity(session.collection("cycle", start, end), recoveries, start, end)
        if resource in _RECOVERY_SAMPLES:
            return _recovery(resource, session.collection("recovery", start, end), start, end)
        if resource in ("profile", "body", "weight"):
            return _body(resource, session, start, end, now)
        return {}  # not in WHOOP's API (availability says so)


class _Session(MakerSession):
    """One fetch's access to the data API (the shared MakerSession), and the collections
    read, page after page."""

    def __init__(self, reader: WhoopReader, connection_id: UUID, now: datetime) -> None:
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
        """Every record of a collection query: each page, to the last `next_token`."""
        url = f"{self.reader.api_url}{path}"

        def read(cursor: str | None) -> tuple[list[Any], str | None]:
            query = dict(params) if cursor is None else {**params, "nextToken": cursor}
            answer = self.get(url, query)
            records = answer.get("records") if isinstance(answer, dict) else None
            if not isinstance(records, list):
                raise TEXTS.broken()
            return records, answer.get("next_token")

        return cursor_pages(read, TEXTS)

    def collection(self, name: str, start: date, end: date) -> list[dict[str, Any]]:
        """A collection's records from the UTC day before `start` to the day after `end`
        (a local day reaches 14 hours either side of UTC), read once per pull."""
        first = datetime.combine(start - timedelta(days=1), time(0), UTC)
        last = datetime.combine(end + timedelta(days=2), time(0), UTC)
        params = {"start": _z(first), "end": _z(last), "limit": str(PAGE_LIMIT)}
        return self.reader.recent.shared(
            (self.connection_id, self.now, name, first, last),
            lambda: self.pages(COLLECTIONS[name], params),
        )

    def body_measurement(self) -> dict[str, Any]:
        answer = self.get(f"{self.reader.api_url}/developer/v2/user/measurement/body")
        if not isinstance(answer, dict):
            raise TEXTS.broken()
        return answer


# -- mapping ------------------------------------------------------------------------------


def _z(moment: datetime) -> str:
    """An instant as WHOOP's examples write it (UTC, milliseconds, `Z`)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def offset_of(record: Mapping[str, Any]) -> timezone | None:
    """A record's `timezone_offset` ("-05:00", "+05:30", "Z") as a zone; None when absent
    or not one."""
    text = record.get("timezone_offset")
    if not isinstance(text, str):
        return None
    if text in ("Z", "+00:00", "-00:00"):
        return UTC
    try:
        sign = -1 if text[0] == "-" else 1 if text[0] == "+" else 0
        hours, minutes = text[1:].split(":")
        delta = timedelta(hours=int(hours), minutes=int(minutes))
    except (ValueError, IndexError):
        return None
    if not sign or delta >= timedelta(hours=24):
        return None
    return timezone(sign * delta)


def _local(record: Mapping[str, Any], field: str) -> datetime | None:
    """A record's instant `field` in the person's offset at the time (UTC if not given)."""
    moment = instant(record.get(field))
    return None if moment is None else moment.astimezone(offset_of(record) or UTC)


def _offset_seconds(record: Mapping[str, Any]) -> int:
    zone = offset_of(record) or UTC
    shift = zone.utcoffset(None)
    return int(shift.total_seconds())


def _scored(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A record's score, when WHOOP scored it (`score_state` SCORED; PENDING_SCORE and
    UNSCORABLE records carry none)."""
    score = record.get("score")
    if record.get("score_state") != "SCORED" or not isinstance(score, Mapping):
        return None
    return score


def _by_local_day(
    records: Iterable[dict[str, Any]], field: str, start: date, end: date
) -> dict[date, list[tuple[datetime, dict[str, Any]]]]:
    by_day: dict[date, list[tuple[datetime, dict[str, Any]]]] = {}
    for record in records:
        moment = _local(record, field)
        if moment is not None and start <= moment.date() <= end:
            by_day.setdefault(moment.date(), []).append((moment, record))
    return by_day


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _seconds(milli: Any) -> int:
    value = _number(milli)
    return 0 if value is None else round(value / 1000)


def _kcal(kilojoule: Any) -> float | None:
    value = _number(kilojoule)
    return None if value is None else round(value * KCAL_PER_KJ, 1)


def _sleeps(records: list[dict[str, Any]], start: date, end: date) -> dict[date, Any]:
    """The night of each local day (the day the person woke): its longest scored sleep
    that is not a nap."""
    found: dict[date, Any] = {}
    for day, nights in sorted(_by_local_day(records, "end", start, end).items()):
        kept = [(m, r) for m, r in nights if not r.get("nap") and _scored(r) is not None]
        if not kept:
            continue
        _, night = max(
            kept, key=lambda pair: _seconds(_stages(pair[1]).get("total_in_bed_time_milli"))
        )
        found[day] = _sleep(night, day)
    return found


def _stages(record: Mapping[str, Any]) -> Mapping[str, Any]:
    score = _scored(record) or {}
    stages = score.get("stage_summary")
    return stages if isinstance(stages, Mapping) else {}


def _sleep(record: Mapping[str, Any], day: date) -> dict[str, Any]:
    score = _scored(record) or {}
    stages = _stages(record)
    begin, stop = _local(record, "start"), _local(record, "end")
    assert begin is not None and stop is not None  # filtered by _by_local_day
    light = _seconds(stages.get("total_light_sleep_time_milli"))
    deep = _seconds(stages.get("total_slow_wave_sleep_time_milli"))
    rem = _seconds(stages.get("total_rem_sleep_time_milli"))
    in_bed = _seconds(stages.get("total_in_bed_time_milli"))
    return {
        "calendar_date": day.isoformat(),
        "bedtime_start": begin.isoformat(),
        "bedtime_stop": stop.isoformat(),
        "timezone_offset": _offset_seconds(record),
        "type": "long_sleep",
        "duration": in_bed or int((stop - begin).total_seconds()),
        "total": light + deep + rem,
        "awake": _seconds(stages.get("total_awake_time_milli")),
        "light": light,
        "rem": rem,
        "deep": deep,
        "efficiency": score.get("sleep_efficiency_percentage"),
        "latency": None,
        "score": score.get("sleep_performance_percentage"),
        "hr_lowest": None,
        "hr_average": None,
        "average_hrv": None,
        "respiratory_rate": score.get("respiratory_rate"),
        "temperature_delta": None,
    }


def _respiratory_rate(records: list[dict[str, Any]], start: date, end: date) -> dict[date, Any]:
    samples = []
    for record in records:
        score, begin = _scored(record), instant(record.get("start"))
        rate = None if score is None else _number(score.get("respiratory_rate"))
        if begin is not None and rate is not None:
            samples.append((begin, {"timestamp": utc_iso(begin), "value": rate, "unit": "bpm"}))
    return by_utc_day(samples, start, end)


def _sport(name: Any) -> str:
    """WHOOP's sport names ("functional-fitness", "Running"): our slugs snake_case."""
    text = str(name or "other").strip().lower()
    return "".join(c if c.isalnum() else "_" for c in text).strip("_") or "other"


def _workouts(records: list[dict[str, Any]], start: date, end: date) -> dict[date, Any]:
    found: dict[date, Any] = {}
    for day, sessions in sorted(_by_local_day(records, "start", start, end).items()):
        kept = []
        for begin, record in sessions:
            stop = _local(record, "end")
            if stop is None or record.get("id") is None:
                continue
            score = _scored(record) or {}
            average, top = (
                _number(score.get("average_heart_rate")),
                _number(score.get("max_heart_rate")),
            )
            kept.append(
                {
                    # WHOOP's id: the session's key, so a re-scored workout replaces its own.
                    "id": str(record["id"]),
                    "sport": _sport(record.get("sport_name")),
                    "time_start": begin.isoformat(),
                    "time_end": stop.isoformat(),
                    "timezone_offset": _offset_seconds(record),
                    "calories": _kcal(score.get("kilojoule")),
                    "average_hr": None if average is None else round(average),
                    "max_hr": None if top is None else round(top),
                    "distance": score.get("distance_meter"),
                    "strain": score.get("strain"),
                }
            )
        if kept:
            found[day] = sorted(kept, key=lambda w: (w["time_start"], w["id"]))
    return found


def _activity(
    cycles: list[dict[str, Any]], recoveries: list[dict[str, Any]], start: date, end: date
) -> dict[date, Any]:
    """A physiological cycle (sleep onset to the next) under the local day it starts:
    its strain, energy (kilojoules -> kcal) and heart rate, with the resting heart rate
    of its recovery (when `read:recovery` was granted)."""
    resting: dict[Any, float] = {}
    for recovery in recoveries:
        score = _scored(recovery)
        rate = None if score is None else _number(score.get("resting_heart_rate"))
        if rate is not None:
            resting[recovery.get("cycle_id")] = rate
    found: dict[date, Any] = {}
    for day, found_cycles in sorted(_by_local_day(cycles, "start", start, end).items()):
        scored = [(m, c) for m, c in found_cycles if _scored(c) is not None]
        if not scored:
            continue
        _, cycle = max(scored, key=lambda pair: pair[0])  # the day's last cycle
        score = _scored(cycle) or {}
        average, top = (
            _number(score.get("average_heart_rate")),
            _number(score.get("max_heart_rate")),
        )
        rest = resting.get(cycle.get("id"))
        found[day] = {
            "calendar_date": day.isoformat(),
            "steps": None,
            "distance": None,
            "calories_active": None,
            "calories_total": _kcal(score.get("kilojoule")),
            "strain": score.get("strain"),
            "low": None,
            "medium": None,
            "high": None,
            "heart_rate": {
                "avg_bpm": None if average is None else round(average),
                "max_bpm": None if top is None else round(top),
                "resting_bpm": None if rest is None else round(rest),
            },
            "timezone_offset": _offset_seconds(cycle),
        }
    return found


def _recovery(
    resource: str, records: list[dict[str, Any]], start: date, end: date
) -> dict[date, Any]:
    """A recovery's value at the instant WHOOP scored it (its `created_at`: the morning
    after the night it is of)."""
    field, unit = _RECOVERY_SAMPLES[resource]
    samples = []
    for record in records:
        score, moment = _scored(record), instant(record.get("created_at"))
        value = None if score is None else _number(score.get(field))
        if moment is not None and value is not None:
            samples.append((moment, {"timestamp": utc_iso(moment), "value": value, "unit": unit}))
    return by_utc_day(samples, start, end)


def _body(
    resource: str, session: _Session, start: date, end: date, now: datetime
) -> dict[date, Any]:
    """WHOOP keeps the person's current height, weight and maximum heart rate only: they
    are today's values, in the chunk that holds today."""
    today = now.astimezone(UTC).date()
    if not start <= today <= end:
        return {}
    body = session.body_measurement()
    height, weight = _number(body.get("height_meter")), _number(body.get("weight_kilogram"))
    if resource == "profile":
        if height is None:
            return {}
        return {today: {"height": round(height * 100), "calendar_date": today.isoformat()}}
    if weight is None:
        return {}
    if resource == "weight":
        moment = datetime.combine(today, time(0), UTC)
        return {today: [{"timestamp": utc_iso(moment), "value": weight, "unit": "kg"}]}
    top = _number(body.get("max_heart_rate"))
    return {
        today: {
            "calendar_date": today.isoformat(),
            "weight": weight,
            "fat": None,
            "max_hr": None if top is None else round(top),
        }
    }
