"""The Garmin reader: Garmin's Health API behind the provider port (docs/makers/garmin.md).

Garmin is not read the way the other makers are: it delivers. When a person's device
syncs, Garmin POSTs each summary to our webhook (garmin_webhooks.py), either the records
themselves (a push) or a `callbackURL` to fetch them from within a day (a ping). So:

- The link flow is the generic OAuth 2.0 adapter's (`MakerReader`, ADR 0022) with PKCE,
  as Garmin's Connect Developer Program documents it today (OAuth 1.0a is retired).
  Garmin's grant names neither the person nor what they allowed: after the exchange the
  reader asks `GET /wellness-api/rest/user/id` (the account id its notifications name)
  and `/user/permissions` (`HEALTH_EXPORT`, `ACTIVITY_EXPORT`...), kept as the grant's
  scope, from which `availability` and every fetch tell what may be read.
- A delivery (`delivered`, the DeliveredByMaker port) is what one notice brought: a
  push's records, or a ping's callback URLs, fetched here with the person's token (only
  URLs under the Health API we were given: a ping cannot send our token elsewhere).
  Mapped into our resources (`TYPES`) and handed to the pull engine, which merges them
  into the days stored.
- History (`fetch`): Garmin serves no history on request; it is asked for with backfill
  requests (`GET /wellness-api/rest/backfill/<type>` over at most `BACKFILL_DAYS` a
  request, answered 202; 409 is a range asked already), and arrives later by push or
  ping. The first fetch of a pull asks, per summary type, from its first day (the
  oldest, as a pull goes) to today, and the pull stores nothing: the notices do. A
  daily sync so asks again for its last days (a delivery Garmin missed comes again;
  one stored already changes nothing).
- Deregistration (`revoke`): `DELETE /wellness-api/rest/user/registration` as the person
  ends Garmin's deliveries and the grant (ADR 0030).
- Failures: the shared MakerSession's (maker_api.py): 429 `provider_rate_limit_exceeded`,
  5xx `provider_unavailable`, timeouts `transport_failure`, a 401 refreshed once then
  the connection's `error` (token_refresh_failed).

Nothing Garmin sends is logged or put in an error: messages are fixed texts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta, timezone
from typing import Any
from uuid import UUID

import httpx
from healthledger.adapters.providers.maker_api import (
    MakerReader,
    MakerSession,
    MakerTexts,
    by_utc_day,
    scope_availability,
    utc_iso,
)
from healthledger.adapters.providers.oauth2 import revocation_answer
from healthledger.domain.connections.provider_tokens import ProviderTokens
from healthledger.domain.connections.providers import (
    OAuthClient,
    OAuthExchangeFailed,
    OAuthGrant,
    ProviderError,
    PullTarget,
)

API = "/wellness-api/rest"
TEXTS = MakerTexts.of("Garmin")
_NO_REVOCATION = "Garmin could not be reached to end the registration; it will be tried again."
# Garmin's documented longest range of one backfill request.
BACKFILL_DAYS = 90
# Garmin's answer to a deregistration with a token it no longer knows: the grant is gone.
TOKEN_NOT_KNOWN = frozenset({401})
HEALTH, ACTIVITY = "HEALTH_EXPORT", "ACTIVITY_EXPORT"
# A delivery of the permissions the person left us (Garmin's userPermissionsChange).
PERMISSIONS = "permissions"

# Garmin's summary types we read (a push's or ping's key, the backfill path) -> the
# permission they need and our resources read from them (docs/makers/garmin.md).
TYPES: dict[str, tuple[str, frozenset[str]]] = {
    "dailies": (HEALTH, frozenset({"activity", "heartrate"})),
    "epochs": (HEALTH, frozenset({"steps", "calories_active"})),
    "sleeps": (HEALTH, frozenset({"sleep"})),
    "activities": (ACTIVITY, frozenset({"workouts"})),
    "bodyComps": (HEALTH, frozenset({"body", "weight", "fat"})),
    "hrv": (HEALTH, frozenset({"hrv"})),
}
TYPE_OF = {resource: kind for kind, (_, read) in TYPES.items() for resource in read}
SCOPES = {resource: TYPES[kind][0] for resource, kind in TYPE_OF.items()}
# Garmin's activity types -> our sport slugs.
SPORTS = {
    "RUNNING": "running",
    "STREET_RUNNING": "running",
    "TRAIL_RUNNING": "running",
    "CYCLING": "cycling",
    "ROAD_BIKING": "cycling",
    "WALKING": "walking",
    "HIKING": "hiking",
    "LAP_SWIMMING": "swimming",
    "OPEN_WATER_SWIMMING": "swimming",
    "STRENGTH_TRAINING": "weight_lifting",
    "YOGA": "yoga",
    "ROWING": "rowing",
}


class GarminReader(MakerReader):
    """Implements the ProviderAdapter port (and DeliveredByMaker) for Garmin: OAuth from
    the catalog, the Health API at `api_url`. Its `recent` reads are the backfills asked
    by the pulls running now (one per summary type, whichever resource asks first)."""

    def availability(
        self, resources: Sequence[str], grant: OAuthGrant | None = None
    ) -> dict[str, Any]:
        """What Garmin offers of each resource, under the permission that covers it."""
        return scope_availability(resources, SCOPES, grant)

    def exchange(
        self, code: str, redirect_uri: str, client: OAuthClient | None, code_verifier: str
    ) -> OAuthGrant:
        """The generic exchange, then the person's Garmin API user id and permissions
        (Garmin's token answer names neither). Without the id the sign-in fails: every
        notification names the person by it."""
        grant = super().exchange(code, redirect_uri, client, code_verifier)
        if grant.tokens is None:
            return grant
        headers = {
            "Authorization": f"Bearer {grant.tokens.access_token}",
            "Accept": "application/json",
        }
        try:
            found = self.http.get(
                f"{self.api_url}{API}/user/id", headers=headers, timeout=self.api_timeout
            )
            account = found.json().get("userId") if found.status_code == 200 else None
            allowed = self.http.get(
                f"{self.api_url}{API}/user/permissions", headers=headers, timeout=self.api_timeout
            )
            permissions = allowed.json() if allowed.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            account, permissions = None, None
        if not isinstance(account, str) or not account:
            raise OAuthExchangeFailed()
        scope = grant.tokens.scope
        if isinstance(permissions, list):
            scope = " ".join(sorted(p for p in permissions if isinstance(p, str)))
        tokens = ProviderTokens(
            access_token=grant.tokens.access_token,
            token_type=grant.tokens.token_type,
            refresh_token=grant.tokens.refresh_token,
            expires_at=grant.tokens.expires_at,
            scope=scope,
        )
        return OAuthGrant(external_user_id=account, client_id=grant.client_id, tokens=tokens)

    # -- deregistration -------------------------------------------------------------------

    def revoke(self, team_id: UUID, client_id: str, tokens: ProviderTokens) -> None:
        """`DELETE /wellness-api/rest/user/registration` as the person: Garmin stops its
        deliveries and ends the grant. Done on 204 (and on a 401: gone already)."""
        access = self.live_access_token(team_id, client_id, tokens, _NO_REVOCATION)
        if access is None:
            return
        try:
            response = self.http.delete(
                f"{self.api_url}{API}/user/registration",
                headers={"Authorization": f"Bearer {access}"},
                timeout=self.api_timeout,
            )
        except httpx.HTTPError:
            raise ProviderError("transport_failure", _NO_REVOCATION) from None
        revocation_answer(response.status_code, gone=TOKEN_NOT_KNOWN)

    # -- history: backfill requests -------------------------------------------------------

    def fetch(
        self, target: PullTarget, start: date, end: date, now: datetime, attempt: int
    ) -> dict[date, Any]:
        """Ask Garmin to deliver the resource's summaries from `start` to today (once per
        pull and summary type); nothing is read here: the deliveries are stored as they
        come (`delivered`)."""
        kind = TYPE_OF.get(target.resource)
        session = MakerSession(
            self,
            target.grant_id(),
            now,
            texts=TEXTS,
            timeout=self.api_timeout,
            max_wait=self.max_wait,
            sleep=self.sleep,
        )
        if kind is None or not session.granted(TYPES[kind][0]):
            return {}
        self.recent.shared(
            (session.connection_id, now, kind),
            lambda: self._backfill(session, kind, start, now),
        )
        return {}

    def _backfill(self, session: MakerSession, kind: str, start: date, now: datetime) -> bool:
        first = datetime.combine(start, time(0), UTC)
        while first < now:
            last = min(first + timedelta(days=BACKFILL_DAYS), now)
            session.send(
                "GET",
                f"{self.api_url}{API}/backfill/{kind}",
                {
                    "summaryStartTimeInSeconds": str(int(first.timestamp())),
                    "summaryEndTimeInSeconds": str(int(last.timestamp())),
                },
                done=frozenset({202, 409}),  # accepted; or asked already: it comes
            )
            first = last
        return True

    # -- deliveries -----------------------------------------------------------------------

    def delivered(self, target: PullTarget, delivery: Any, now: datetime) -> dict[date, Any]:
        """The days of `target.resource` one notice brought: a push's `records`, or the
        records at a ping's `callbacks` (fetched now as the person)."""
        if not isinstance(delivery, Mapping):
            return {}
        kind = delivery.get("type")
        if kind == PERMISSIONS:
            self._narrow(target, delivery.get("permissions"), now)
            return {}
        if kind not in TYPES or target.resource not in TYPES[kind][1]:
            return {}
        records = delivery.get("records")
        if records is None:
            session = MakerSession(
                self,
                target.grant_id(),
                now,
                texts=TEXTS,
                timeout=self.api_timeout,
                max_wait=self.max_wait,
                sleep=self.sleep,
            )
            records = self.recent.shared(
                (session.connection_id, "ping", tuple(delivery.get("callbacks") or ())),
                lambda: self._callbacks(session, delivery.get("callbacks")),
            )
        if not isinstance(records, list):
            return {}
        return mapped(target.resource, [r for r in records if isinstance(r, Mapping)])

    def _narrow(self, target: PullTarget, permissions: Any, now: datetime) -> None:
        """The person changed what they allow us at Garmin: the grant's scope is what is
        left (read by every fetch: a permission withdrawn is asked no backfill)."""
        if not isinstance(permissions, list):
            return
        stored = self.tokens.current(target.grant_id())
        scope = " ".join(sorted(p for p in permissions if isinstance(p, str)))
        if stored is not None and stored.tokens.scope != scope:
            self.tokens.replace(stored, replace(stored.tokens, scope=scope), now)

    def _callbacks(self, session: MakerSession, urls: Any) -> list[Any]:
        found: list[Any] = []
        for url in urls if isinstance(urls, list) else []:
            if not isinstance(url, str) or not url.startswith(f"{self.api_url}{API}/"):
                continue  # never our token to a URL outside Garmin's API
            answer = session.get(url)
            if not isinstance(answer, list):
                raise TEXTS.broken()
            found.extend(answer)
        return found


# -- mapping ------------------------------------------------------------------------------


def mapped(resource: str, records: Sequence[Mapping[str, Any]]) -> dict[date, Any]:
    """Garmin's summaries of one type as the days of `resource` (the demo's shapes)."""
    if resource == "activity":
        return _activity(records)
    if resource == "heartrate":
        return _heart_rate(records)
    if resource in ("steps", "calories_active"):
        return _epochs(resource, records)
    if resource == "sleep":
        return _sleep(records)
    if resource == "workouts":
        return _workouts(records)
    if resource in ("body", "weight", "fat"):
        return _body(resource, records)
    if resource == "hrv":
        return _hrv(records)
    return {}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _int(value: Any) -> int | None:
    number = _number(value)
    return None if number is None else round(number)


def _zone(record: Mapping[str, Any], field: str = "startTimeOffsetInSeconds") -> timezone:
    offset = _int(record.get(field))
    if offset is None or abs(offset) >= 86_400:
        return UTC
    return timezone(timedelta(seconds=offset))


def _moment(
    record: Mapping[str, Any],
    field: str = "startTimeInSeconds",
    offset: str = "startTimeOffsetInSeconds",
) -> datetime | None:
    """A summary's instant (Garmin's epoch seconds) in the person's offset at the time."""
    seconds = _int(record.get(field))
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).astimezone(_zone(record, offset))


def _day(text: Any) -> date | None:
    try:
        return date.fromisoformat(str(text))
    except ValueError:
        return None


_ALL = (date.min, date.max)


def _latest(records: Iterable[Mapping[str, Any]]) -> dict[date, Mapping[str, Any]]:
    """A summary per `calendarDate`: the day's longest (Garmin sends a day's summary again
    as it grows; the last of a delivery is the fullest)."""
    found: dict[date, Mapping[str, Any]] = {}
    for record in records:
        day = _day(record.get("calendarDate"))
        if day is None:
            continue
        kept = found.get(day)
        if kept is None or (_int(record.get("durationInSeconds")) or 0) >= (
            _int(kept.get("durationInSeconds")) or 0
        ):
            found[day] = record
    return dict(sorted(found.items()))


def _activity(records: Sequence[Mapping[str, Any]]) -> dict[date, Any]:
    found: dict[date, Any] = {}
    for day, daily in _latest(records).items():
        moderate = _number(daily.get("moderateIntensityDurationInSeconds"))
        vigorous = _number(daily.get("vigorousIntensityDurationInSeconds"))
        active = _number(daily.get("activeKilocalories"))
        basal = _number(daily.get("bmrKilocalories"))
        found[day] = {
            "calendar_date": day.isoformat(),
            "steps": _int(daily.get("steps")),
            "distance": _number(daily.get("distanceInMeters")),
            "floors_climbed": _int(daily.get("floorsClimbed")),
            "calories_active": active,
            "calories_total": None if active is None or basal is None else active + basal,
            "low": None,
            "medium": None if moderate is None else round(moderate / 60, 1),
            "high": None if vigorous is None else round(vigorous / 60, 1),
            "heart_rate": {
                "avg_bpm": _int(daily.get("averageHeartRateInBeatsPerMinute")),
                "max_bpm": _int(daily.get("maxHeartRateInBeatsPerMinute")),
                "min_bpm": _int(daily.get("minHeartRateInBeatsPerMinute")),
                "resting_bpm": _int(daily.get("restingHeartRateInBeatsPerMinute")),
            },
            "stress_level": _int(daily.get("averageStressLevel")),
            "timezone_offset": _int(daily.get("startTimeOffsetInSeconds")),
        }
    return found


def _heart_rate(records: Sequence[Mapping[str, Any]]) -> dict[date, Any]:
    """A daily's `timeOffsetHeartRateSamples` (seconds after its start -> bpm) as samples
    under the UTC day of their instant."""
    samples = []
    for daily in _latest(records).values():
        begin = _moment(daily)
        offsets = daily.get("timeOffsetHeartRateSamples")
        if begin is None or not isinstance(offsets, Mapping):
            continue
        for offset, bpm in offsets.items():
            seconds, value = _int(_to_number(offset)), _number(bpm)
            if seconds is None or value is None:
                continue
            moment = begin + timedelta(seconds=seconds)
            samples.append((moment, {"timestamp": utc_iso(moment), "value": value, "unit": "bpm"}))
    return by_utc_day(samples, *_ALL)


def _to_number(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _epochs(resource: str, records: Sequence[Mapping[str, Any]]) -> dict[date, Any]:
    """Each epoch (a quarter hour) as a sample of its steps or active kilocalories."""
    field, unit = ("steps", "count") if resource == "steps" else ("activeKilocalories", "kcal")
    samples = []
    for epoch in records:
        begin, value = _moment(epoch), _number(epoch.get(field))
        lasted = _int(epoch.get("durationInSeconds")) or 900
        if begin is None or value is None:
            continue
        samples.append(
            (
                begin,
                {
                    "timestamp": utc_iso(begin),
                    "start": utc_iso(begin),
                    "end": utc_iso(begin + timedelta(seconds=lasted)),
                    "value": value,
                    "unit": unit,
                },
            )
        )
    return by_utc_day(samples, *_ALL)


def _sleep(records: Sequence[Mapping[str, Any]]) -> dict[date, Any]:
    """A night under its `calendarDate` (the morning the person wakes, as Garmin files it)."""
    found: dict[date, Any] = {}
    for day, night in _latest(records).items():
        begin = _moment(night)
        lasted = _int(night.get("durationInSeconds"))
        if begin is None or lasted is None:
            continue
        light = _int(night.get("lightSleepDurationInSeconds")) or 0
        deep = _int(night.get("deepSleepDurationInSeconds")) or 0
        rem = _int(night.get("remSleepInSeconds")) or 0
        awake = _int(night.get("awakeDurationInSeconds")) or 0
        score = night.get("overallSleepScore")
        found[day] = {
            "calendar_date": day.isoformat(),
            "bedtime_start": begin.isoformat(),
            "bedtime_stop": (begin + timedelta(seconds=lasted + awake)).isoformat(),
            "timezone_offset": _int(night.get("startTimeOffsetInSeconds")),
            "type": "long_sleep",
            "duration": lasted + awake,
            "total": light + deep + rem,
            "awake": awake,
            "light": light,
            "rem": rem,
            "deep": deep,
            "efficiency": None,
            "latency": None,
            "score": _int(score.get("value")) if isinstance(score, Mapping) else None,
            "hr_lowest": None,
            "hr_average": None,
            "average_hrv": None,
            "respiratory_rate": None,
            "temperature_delta": None,
        }
    return found


def _workouts(records: Sequence[Mapping[str, Any]]) -> dict[date, Any]:
    """An activity under the local day it starts, keyed by Garmin's `summaryId`: one
    delivered again replaces its own."""
    found: dict[date, dict[str, dict[str, Any]]] = {}
    for activity in records:
        begin, lasted = _moment(activity), _int(activity.get("durationInSeconds"))
        key = activity.get("summaryId")
        if begin is None or lasted is None or key is None:
            continue
        found.setdefault(begin.date(), {})[str(key)] = {
            "id": str(key),
            "sport": SPORTS.get(str(activity.get("activityType")), "other"),
            "time_start": begin.isoformat(),
            "time_end": (begin + timedelta(seconds=lasted)).isoformat(),
            "timezone_offset": _int(activity.get("startTimeOffsetInSeconds")),
            "calories": _number(activity.get("activeKilocalories")),
            "average_hr": _int(activity.get("averageHeartRateInBeatsPerMinute")),
            "max_hr": _int(activity.get("maxHeartRateInBeatsPerMinute")),
            "distance": _number(activity.get("distanceInMeters")),
        }
    return {
        day: sorted(kept.values(), key=lambda w: (w["time_start"], w["id"]))
        for day, kept in sorted(found.items())
    }


def _body(resource: str, records: Sequence[Mapping[str, Any]]) -> dict[date, Any]:
    """Body composition measurements: `body` a summary of the local day's last one,
    `weight` (kg) and `fat` (%) samples at their instants."""
    measured = []
    for record in records:
        moment = _moment(record, "measurementTimeInSeconds", "measurementTimeOffsetInSeconds")
        if moment is not None:
            measured.append((moment, record))
    measured.sort(key=lambda pair: pair[0])
    if resource == "body":
        found: dict[date, Any] = {}
        for moment, record in measured:
            grams = _number(record.get("weightInGrams"))
            found[moment.date()] = {
                "calendar_date": moment.date().isoformat(),
                "weight": None if grams is None else round(grams / 1000, 2),
                "fat": _number(record.get("bodyFatInPercent")),
                "max_hr": None,
            }
        return found
    samples = []
    for moment, record in measured:
        if resource == "weight":
            grams = _number(record.get("weightInGrams"))
            value, unit = (None if grams is None else round(grams / 1000, 2)), "kg"
        else:
            value, unit = _number(record.get("bodyFatInPercent")), "%"
        if value is not None:
            samples.append((moment, {"timestamp": utc_iso(moment), "value": value, "unit": unit}))
    return by_utc_day(samples, *_ALL)


def _hrv(records: Sequence[Mapping[str, Any]]) -> dict[date, Any]:
    """A night's HRV summary: its average (`lastNightAvg`, ms) at the night's start."""
    samples = []
    for summary in _latest(records).values():
        begin, value = _moment(summary), _number(summary.get("lastNightAvg"))
        if begin is not None and value is not None:
            samples.append((begin, {"timestamp": utc_iso(begin), "value": value, "unit": "ms"}))
    return by_utc_day(samples, *_ALL)
