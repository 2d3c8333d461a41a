"""The Withings reader: the Withings Public API (`measure`, `v2/measure`, `v2/sleep`)
behind the provider port.

The link flow and the tokens are the generic OAuth 2.0 adapter's (`OAuth2Maker`, ADR
0022), with Withings' token endpoint read through its `token_answer` hook: Withings wants
`action=requesttoken` on every token request (the catalog's `token_params`) and answers
`{"status": 0, "body": {...}}`, saying no with a non-zero status in an HTTP 200. The
person's Withings `userid` comes in the token answer (the catalog's `user_id_field`).

A pull asks for one resource over one chunk of days; the reader asks Withings for the
service that resource comes from (docs/makers/withings.md has the table), follows
`more`/`offset` to the last page, and maps Withings' records into our resources in the
shapes the demo devices produce.

- Days and zones. Withings gives an IANA `timezone` with each record: a weighing or a
  day's activity belongs to the person's local day there, a night to the local day it
  ends (`date`). Samples are stored under the UTC day of their instant, as the demo's;
  the reader asks for a day more on each side, so a day it returns is complete. The
  resources of one chunk share what was read (one `getmeas` gives eight resources).
- Units. A measure is `value * 10^unit` (`unit` is the exponent Withings sends with it).
- Record ids. A measure group keeps Withings' `grpid`, a workout its `id`: a group or a
  workout sent again changed (a revised weighing) replaces its own, never adds one.
- Failures. Withings answers HTTP 200 with a `status`: 0 is the answer; the
  authentication statuses (100-102, 200, 401) refresh the grant once, then put the
  connection in `error` (token_refresh_failed); 601 (too many requests) is
  `provider_rate_limit_exceeded`; the "an error occurred", timeout (522) and bad state
  (524) statuses are `provider_unavailable`; the invalid-parameter and unauthorized
  statuses refuse the request (`non_retriable_error`). HTTP 429/5xx and timeouts are the
  shared session's (adapters/providers/maker_api.py), all retried by the engine.

Nothing Withings sends is logged or put in an error: messages are fixed texts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import httpx
from healthledger.adapters.providers.maker_api import (
    MAX_PAGES,
    MakerReader,
    MakerSession,
    MakerTexts,
    by_utc_day,
    scope_availability,
    utc_iso,
)
from healthledger.adapters.providers.oauth2 import (
    TOKEN_REFRESH_FAILED,
    TokenEndpointError,
    tokens_of,
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

TEXTS = MakerTexts.of("Withings")

# Withings' response statuses (developer.withings.com, api-reference "Response status").
STATUS_OK = 0
AUTH_FAILED = frozenset({100, 101, 102, 200, 401})
TOO_MANY_REQUESTS = 601
# "An error occurred", "Timeout" (522) and "Bad state" (524): passing, retried.
PASSING = frozenset(
    {215, 219, 222, 224, 226, 231, 233, 237, 253, 255, 256, 257, 258, 259, 268, 269, 270}
    | {273, 274, 278, 279, 280, 281, 282, 289, 291, 292, 296, 298, 305, 306, 308, 309}
    | set(range(310, 321))
    | {322, 370, 371, 372, 373, 374, 375, 383, 391, 402, 516, 517, 518, 519, 520, 521}
    | {522, 524, 525, 526, 527, 528, 529, 530, 531, 533, 602, 700, 1051, 1052, 1053, 1054}
    | {2551, 2552, 2556, 2557, 2558, 2559, 5000, 5001, 5005, 5006, 6000, 6010, 6011}
    | set(range(3000, 3017))
    | {3020, 3021, 3022, 3023, 3024, 9000, 10000}
)
# Every other non-zero status (invalid parameters, unauthorized action) refuses.

# Measure types (getmeas `meastypes`) and what we read them into.
WEIGHT, HEIGHT, FAT_FREE_MASS, FAT_RATIO, FAT_MASS = 1, 4, 5, 6, 8
DIASTOLIC, SYSTOLIC, HEART_PULSE, SPO2, BODY_TEMPERATURE = 9, 10, 11, 54, 71
MEASURE_TYPES = (
    WEIGHT,
    HEIGHT,
    FAT_FREE_MASS,
    FAT_RATIO,
    FAT_MASS,
    DIASTOLIC,
    SYSTOLIC,
    HEART_PULSE,
    SPO2,
    BODY_TEMPERATURE,
)
# Timeseries read from measure groups: resource -> (measure type, unit, an interval sample).
MEASURE_SAMPLES: dict[str, tuple[int, str, bool]] = {
    "weight": (WEIGHT, "kg", False),
    "fat": (FAT_RATIO, "%", False),
    "lean_body_mass": (FAT_FREE_MASS, "kg", True),
    "blood_oxygen": (SPO2, "%", False),
    "body_temperature": (BODY_TEMPERATURE, "°C", True),
}
# Withings' sleep states -> our stage codes (1 deep, 2 light, 3 REM, 4 awake).
SLEEP_STATES = {0: 4, 1: 2, 2: 1, 3: 3}
STAGE_NAMES = {1: "deep", 2: "light", 3: "rem", 4: "awake"}
# Withings' workout categories (api-reference, getworkouts `category`) -> our sport slugs.
WORKOUT_SPORTS = {
    1: "walking",
    2: "running",
    3: "hiking",
    4: "skating",
    5: "bmx",
    6: "cycling",
    7: "swimming",
    8: "surfing",
    9: "kitesurfing",
    10: "windsurfing",
    11: "bodyboard",
    12: "tennis",
    13: "table_tennis",
    14: "squash",
    15: "badminton",
    16: "weight_lifting",
    17: "calisthenics",
    18: "elliptical",
    19: "pilates",
    20: "basketball",
    21: "soccer",
    22: "football",
    23: "rugby",
    24: "volleyball",
    25: "water_polo",
    26: "horse_riding",
    27: "golf",
    28: "yoga",
    29: "dancing",
    30: "boxing",
    31: "fencing",
    32: "wrestling",
    33: "martial_arts",
    34: "skiing",
    35: "snowboarding",
    187: "rowing",
    188: "zumba",
    191: "baseball",
    192: "handball",
    193: "hockey",
    194: "ice_hockey",
    195: "climbing",
    196: "ice_skating",
    272: "multi_sport",
    306: "indoor_walking",
    307: "indoor_running",
    308: "indoor_cycling",
}

SLEEP_SUMMARY_FIELDS = (
    "wakeupduration,lightsleepduration,deepsleepduration,remsleepduration,wakeupcount,"
    "durationtosleep,durationtowakeup,hr_average,hr_min,hr_max,rr_average,sleep_score,"
    "sleep_efficiency,sleep_latency,total_sleep_time,total_timeinbed"
)
ACTIVITY_FIELDS = (
    "steps,distance,elevation,soft,moderate,intense,active,calories,totalcalories,"
    "hr_average,hr_min,hr_max"
)
WORKOUT_FIELDS = "calories,hr_average,hr_min,hr_max,distance,steps,elevation"
INTRADAY_FIELDS = "steps,heart_rate,calories,distance"

# The resource -> the Withings scope that covers it. Not read: electrocardiogram (Heart
# v2 signals) and body_mass_index (not a Withings measure): unavailable.
SCOPES: dict[str, str] = {
    "weight": "user.metrics",
    "fat": "user.metrics",
    "lean_body_mass": "user.metrics",
    "blood_pressure": "user.metrics",
    "blood_oxygen": "user.metrics",
    "body_temperature": "user.metrics",
    "body": "user.metrics",
    "profile": "user.metrics",
    "activity": "user.activity",
    "workouts": "user.activity",
    "steps": "user.activity",
    "heartrate": "user.activity",
    "sleep": "user.sleepevents",
    "sleep_cycle": "user.sleepevents",
    "hypnogram": "user.sleepevents",
}

# Notify categories (`appli`) we subscribe to, with the scope each needs (the ones that
# announce data we read: adapters/providers/withings_webhooks.py maps them).
NOTIFY_CATEGORIES: dict[int, str] = {
    1: "user.metrics",
    2: "user.metrics",
    4: "user.metrics",
    16: "user.activity",
    44: "user.sleepevents",
}


class WithingsReader(MakerReader):
    """Implements the ProviderAdapter port for Withings: OAuth from the catalog, data from
    the Public API at `api_url`. Its `recent` reads: one getmeas serves eight resources, a
    night's sleep three."""

    def __init__(
        self, entry: ProviderEntry, *, callback_url: str | None = None, **reader: Any
    ) -> None:
        super().__init__(entry, **reader)
        # Where Withings Notify calls us (`/makers/withings/webhook`); None: no subscription.
        self.callback_url = callback_url

    # -- the token endpoint's answer ----------------------------------------------------

    def token_answer(self, response: httpx.Response) -> dict[str, Any]:
        """Withings' `{"status", "body"}` answer as RFC 6749's: the body, its scopes
        space-separated (Withings lists them with commas)."""
        if response.status_code != 200:
            return super().token_answer(response)
        try:
            answer = response.json()
        except ValueError:
            raise TokenEndpointError("malformed") from None
        status = answer.get("status") if isinstance(answer, dict) else None
        if status == TOO_MANY_REQUESTS:
            raise TokenEndpointError("rate_limited")
        if status in PASSING:
            raise TokenEndpointError("unavailable")
        if status != STATUS_OK:
            raise TokenEndpointError("refused")
        body = answer.get("body")
        if not isinstance(body, dict):
            raise TokenEndpointError("malformed")
        scope = body.get("scope")
        if isinstance(scope, str):
            body = {**body, "scope": " ".join(s for s in scope.replace(",", " ").split())}
        return body

    def exchange(
        self, code: str, redirect_uri: str, client: OAuthClient | None, code_verifier: str
    ) -> OAuthGrant:
        """The generic exchange, then the person's Notify subscriptions: one per category
        we read whose scope was granted, pointing at our callback. A subscription Withings
        refuses (it probes the callback first) or cannot take now leaves the daily sync:
        the sign-in stands."""
        grant = super().exchange(code, redirect_uri, client, code_verifier)
        if self.callback_url is not None and grant.tokens is not None:
            self.subscribe(grant.tokens.access_token, grant.tokens.scope)
        return grant

    def subscribe(self, access_token: str, scope: str | None) -> list[int]:
        """Subscribe the person's categories (`notify?action=subscribe`); the status of
        each (0: subscribed; -1: not reached)."""
        granted = None if scope is None else frozenset(scope.split())
        found = []
        for appli, needed in NOTIFY_CATEGORIES.items():
            if granted is None or needed in granted:
                status = self.notify_request(access_token, "subscribe", appli)
                found.append(-1 if status is None else status)
        return found

    def revoke(self, team_id: UUID, client_id: str, tokens: ProviderTokens) -> None:
        """Withings documents no way for a partner to end a person's grant (the person
        unlinks the application in their Withings account): what ends here, at the
        connection's end, is our Notify subscriptions, each revoked with the person's token
        (refreshed first when expired), so that Withings stops calling us about them. A
        subscription gone already (294) is done, and so is a grant Withings no longer
        accepts (nothing left to end); 601, the passing statuses and a maker out of reach
        raise a retriable ProviderError (revocation.py tries again later)."""
        if self.callback_url is None:
            return
        access = tokens.access_token
        if tokens.expired(self.clock()) and tokens.refresh_token:
            client = self.grant_client(team_id, client_id)
            if client is None:
                return  # the credentials that obtained it are gone: nothing to ask with
            form = {"grant_type": "refresh_token", "refresh_token": tokens.refresh_token}
            try:
                access = tokens_of(
                    self.token_request(client, form), self.clock(), None
                ).access_token
            except TokenEndpointError as exc:
                if exc.kind in ("refused", "malformed"):
                    return  # the grant is not Withings' to end any more
                raise ProviderError("provider_unavailable", TEXTS.unavailable) from None
        for appli in NOTIFY_CATEGORIES:
            status = self.notify_request(access, "revoke", appli)
            if status in AUTH_FAILED:
                return  # the grant is gone: so are its subscriptions
            if status == TOO_MANY_REQUESTS:
                raise ProviderError("provider_rate_limit_exceeded", TEXTS.rate_limited)
            if status is None or status in PASSING:
                raise ProviderError("provider_unavailable", TEXTS.unavailable)
            # 0 (revoked), 294 (no such subscription) and any refusal: nothing left to do.

    def notify_request(self, access_token: str, action: str, appli: int) -> int | None:
        """One Notify request about our callback (`subscribe`, `revoke`) for `appli`; its
        Withings status, None when Withings could not be reached or answered nothing."""
        try:
            response = self.http.post(
                f"{self.api_url}/notify",
                data={"action": action, "callbackurl": str(self.callback_url), "appli": str(appli)},
                headers={"Authorization": f"Bearer {access_token}"},
                timeout=self.api_timeout,
            )
            answer = response.json()
        except (httpx.HTTPError, ValueError):
            return None
        status = answer.get("status") if isinstance(answer, dict) else None
        return status if isinstance(status, int) else None

    def availability(
        self, resources: Sequence[str], grant: OAuthGrant | None = None
    ) -> dict[str, Any]:
        """Each resource under the Withings scope that covers it (SCOPES): unavailable
        when the person did not grant that scope, or when Withings does not give it."""
        return scope_availability(resources, SCOPES, grant)

    # -- pulls ----------------------------------------------------------------------------

    def fetch(
        self, target: PullTarget, start: date, end: date, now: datetime, attempt: int
    ) -> dict[date, Any]:
        session = _Session(self, target.grant_id(), now)
        resource = target.resource
        if not session.granted(SCOPES.get(resource)):
            return {}  # not granted (or not in Withings' API): unavailable, nothing to read
        if resource in MEASURE_SAMPLES:
            return _measure_samples(resource, session.measures(start, end), start, end)
        if resource == "blood_pressure":
            return _blood_pressure(session.measures(start, end), start, end)
        if resource == "body":
            return _body(session.measures(start, end), start, end)
        if resource == "profile":
            return _profile(session.measures(start, end), start, end)
        if resource == "heartrate":
            return _heartrate(session, start, end)
        if resource == "steps":
            return _steps(session.intraday(start, end), start, end)
        if resource == "activity":
            return _activity(session.daily("activity", start, end), start, end)
        if resource == "workouts":
            return _workouts(session.daily("workouts", start, end), start, end)
        if resource == "sleep":
            return _sleep(session.daily("sleep", start, end), start, end)
        if resource in ("sleep_cycle", "hypnogram"):
            return _by_night(resource, session, start, end)
        return {}  # not in Withings' API (availability says so)


class _Session(MakerSession):
    """One fetch's access to the Public API: Withings' status envelope read, and the
    services read page after page, once per pull."""

    def __init__(self, reader: WithingsReader, connection_id: UUID, now: datetime) -> None:
        super().__init__(reader, connection_id, now, texts=TEXTS, timeout=reader.api_timeout)
        self.reader = reader

    def call(self, path: str, params: Mapping[str, str]) -> dict[str, Any]:
        """One request to a service; its `body`. Raises ProviderError."""
        renewed = False
        while True:
            token = self.token()
            answer = self.get(f"{self.reader.api_url}{path}", params)
            status = answer.get("status") if isinstance(answer, dict) else None
            if status == STATUS_OK:
                body = answer.get("body")
                if not isinstance(body, dict):
                    raise TEXTS.broken()
                return body
            if status in AUTH_FAILED and not renewed:
                # An expired or revoked token: refreshed once, then asked again.
                renewed = True
                self.renew(token)
                continue
            if status in AUTH_FAILED:
                raise ProviderError(NON_RETRIABLE, TEXTS.must_reconnect, TOKEN_REFRESH_FAILED)
            if status == TOO_MANY_REQUESTS:
                # Withings says no more (120 a minute per application) without saying for
                # how long: the engine's backoff.
                raise ProviderError("provider_rate_limit_exceeded", TEXTS.rate_limited)
            if status in PASSING or not isinstance(status, int):
                raise TEXTS.broken()
            raise ProviderError(NON_RETRIABLE, TEXTS.refused)

    def pages(self, path: str, params: Mapping[str, str], key: str) -> list[dict[str, Any]]:
        """Every record of a paged service (`more` and `offset`), to the last page. An
        offset that does not move forward, or more than MAX_PAGES pages, is a broken
        answer, never a silent stop."""
        records: list[dict[str, Any]] = []
        offset: int | None = None
        for _ in range(MAX_PAGES):
            query = dict(params) if offset is None else {**params, "offset": str(offset)}
            body = self.call(path, query)
            found = body.get(key)
            if not isinstance(found, list):
                raise TEXTS.broken()
            records.extend(r for r in found if isinstance(r, dict))
            if not body.get("more"):
                return records
            following = body.get("offset")
            if not isinstance(following, int) or (offset is not None and following <= offset):
                raise TEXTS.broken()
            offset = following
        raise TEXTS.broken()

    def shared(self, key: tuple[Any, ...], read: Callable[[], Any]) -> Any:
        """What `read` answers, read once per pull for the resources that share it."""
        return self.reader.recent.shared((self.connection_id, self.now, *key), read)

    def measures(self, start: date, end: date) -> list[dict[str, Any]]:
        """The measure groups taken from the day before `start` to the day after `end`
        (UTC; a local day and a UTC day differ by less than one), real ones only."""
        first = _midnight(start - timedelta(days=1))
        last = _midnight(end + timedelta(days=2))
        params = {
            "action": "getmeas",
            "meastypes": ",".join(str(t) for t in MEASURE_TYPES),
            "category": "1",
            "startdate": str(int(first.timestamp())),
            "enddate": str(int(last.timestamp())),
        }
        groups: list[dict[str, Any]] = self.shared(
            ("getmeas", start, end), lambda: self.pages("/measure", params, "measuregrps")
        )
        return groups

    def daily(self, service: str, start: date, end: date) -> list[dict[str, Any]]:
        """A daily service's records of the local days start-1..end+1."""
        path, action, key, fields = _DAILY[service]
        params = {
            "action": action,
            "startdateymd": (start - timedelta(days=1)).isoformat(),
            "enddateymd": (end + timedelta(days=1)).isoformat(),
            "data_fields": fields,
        }
        records: list[dict[str, Any]] = self.shared(
            (service, start, end), lambda: self.pages(path, params, key)
        )
        return records

    def intraday(self, start: date, end: date) -> list[tuple[datetime, dict[str, Any]]]:
        """The high-frequency activity of the UTC days start..end, a day a request (the
        service answers at most 24 hours from `startdate`, unpaged), in time order."""

        def read() -> list[tuple[datetime, dict[str, Any]]]:
            found: list[tuple[datetime, dict[str, Any]]] = []
            day = start
            while day <= end:
                params = {
                    "action": "getintradayactivity",
                    "startdate": str(int(_midnight(day).timestamp())),
                    "enddate": str(int(_midnight(day + timedelta(days=1)).timestamp()) - 1),
                    "data_fields": INTRADAY_FIELDS,
                }
                series = self.call("/v2/measure", params).get("series")
                if isinstance(series, dict):
                    found += _timestamped(series.items())
                elif isinstance(series, list):  # an empty day answers []
                    found += _timestamped((s.get("timestamp"), s) for s in series)
                day += timedelta(days=1)
            return sorted(found, key=lambda pair: pair[0])

        found: list[tuple[datetime, dict[str, Any]]] = self.shared(("intraday", start, end), read)
        return found

    def night(self, summary: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The sleep states of one night (Sleep v2 `get`, within 24 hours, unpaged)."""
        begin, stop = summary.get("startdate"), summary.get("enddate")
        if not isinstance(begin, int) or not isinstance(stop, int):
            return []
        params = {"action": "get", "startdate": str(begin), "enddate": str(stop)}

        def read() -> list[dict[str, Any]]:
            series = self.call("/v2/sleep", params).get("series")
            if not isinstance(series, list):
                raise TEXTS.broken()
            return [s for s in series if isinstance(s, dict)]

        found: list[dict[str, Any]] = self.shared(("night", begin, stop), read)
        return found


_DAILY: dict[str, tuple[str, str, str, str]] = {
    # service: (path, action, the list's key in the body, data_fields)
    "activity": ("/v2/measure", "getactivity", "activities", ACTIVITY_FIELDS),
    "workouts": ("/v2/measure", "getworkouts", "series", WORKOUT_FIELDS),
    "sleep": ("/v2/sleep", "getsummary", "series", SLEEP_SUMMARY_FIELDS),
}


# -- mapping ------------------------------------------------------------------------------


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(0), UTC)


def _zone(name: Any) -> tzinfo:
    """Withings' IANA time zone of a record; UTC when it gives none we know."""
    if isinstance(name, str) and name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    return UTC


def _moment(epoch: Any, zone: tzinfo = UTC) -> datetime | None:
    if not isinstance(epoch, int | float) or isinstance(epoch, bool):
        return None
    try:
        return datetime.fromtimestamp(epoch, zone)
    except (OverflowError, OSError, ValueError):
        return None


def _day(text: Any) -> date | None:
    try:
        return date.fromisoformat(str(text))
    except ValueError:
        return None


def _offset(moment: datetime | None) -> int | None:
    offset = None if moment is None else moment.utcoffset()
    return None if offset is None else int(offset.total_seconds())


def _timestamped(
    items: Iterable[tuple[Any, Any]],
) -> list[tuple[datetime, dict[str, Any]]]:
    found = []
    for stamp, values in items:
        try:
            moment = _moment(int(stamp))
        except (TypeError, ValueError):
            moment = None
        if moment is not None and isinstance(values, dict):
            found.append((moment, values))
    return found


def _value(measure: Mapping[str, Any]) -> float | None:
    """A measure's value: `value * 10^unit`, rounded to the digits the exponent gives."""
    value, unit = measure.get("value"), measure.get("unit")
    if not isinstance(value, int | float) or not isinstance(unit, int):
        return None
    if unit >= 0:
        return float(value * 10**unit)
    return round(value * 10.0**unit, -unit)


def _measured(group: Mapping[str, Any]) -> dict[int, float]:
    found: dict[int, float] = {}
    for measure in group.get("measures") or []:
        if isinstance(measure, dict) and isinstance(measure.get("type"), int):
            value = _value(measure)
            if value is not None:
                found[measure["type"]] = value
    return found


def _groups(
    groups: Iterable[dict[str, Any]],
) -> list[tuple[datetime, dict[int, float], dict[str, Any]]]:
    """Each real measure group with its instant (in its time zone) and its values, in time
    order; a group Withings lists twice (same `grpid`) counts once, the last listed."""
    by_id: dict[Any, tuple[datetime, dict[int, float], dict[str, Any]]] = {}
    for group in groups:
        moment = _moment(group.get("date"), _zone(group.get("timezone")))
        if moment is None or group.get("category", 1) != 1:
            continue
        by_id[group.get("grpid")] = (moment, _measured(group), group)
    return sorted(by_id.values(), key=lambda found: (found[0], str(found[2].get("grpid"))))


def _measure_samples(
    resource: str, groups: list[dict[str, Any]], start: date, end: date
) -> dict[date, Any]:
    kind, unit, interval = MEASURE_SAMPLES[resource]
    samples = []
    for moment, values, _ in _groups(groups):
        if kind not in values:
            continue
        sample: dict[str, Any] = {"timestamp": utc_iso(moment), "value": values[kind], "unit": unit}
        if interval:  # a reading at an instant: its interval is that instant
            sample["start"] = sample["end"] = utc_iso(moment)
        samples.append((moment, sample))
    return by_utc_day(samples, start, end)


def _blood_pressure(groups: list[dict[str, Any]], start: date, end: date) -> dict[date, Any]:
    readings = []
    for moment, values, _ in _groups(groups):
        if SYSTOLIC in values and DIASTOLIC in values:
            reading = {
                "timestamp": utc_iso(moment),
                "systolic": values[SYSTOLIC],
                "diastolic": values[DIASTOLIC],
                "unit": "mmHg",
            }
            readings.append((moment, reading))
    return by_utc_day(readings, start, end)


def _body(groups: list[dict[str, Any]], start: date, end: date) -> dict[date, Any]:
    """The day's body: its last weighing (weight, fat ratio), on the person's local day."""
    found: dict[date, dict[str, Any]] = {}
    for moment, values, _ in _groups(groups):
        day = moment.date()
        if WEIGHT not in values or not start <= day <= end:
            continue
        found[day] = {
            "calendar_date": day.isoformat(),
            "weight": values[WEIGHT],
            "fat": values.get(FAT_RATIO),
            "timezone_offset": _offset(moment),
        }
    return dict(sorted(found.items()))


def _profile(groups: list[dict[str, Any]], start: date, end: date) -> dict[date, Any]:
    """The height the person entered (meastype 4, m), on the local day it was set."""
    found: dict[date, dict[str, Any]] = {}
    for moment, values, _ in _groups(groups):
        day = moment.date()
        if HEIGHT in values and start <= day <= end:
            height = round(values[HEIGHT] * 100)
            found[day] = {"height": height, "calendar_date": day.isoformat()}
    return dict(sorted(found.items()))


def _heartrate(session: _Session, start: date, end: date) -> dict[date, Any]:
    """The trackers' heart rate (intraday `heart_rate`), and the pulse measured with a
    weighing or a blood pressure (meastype 11) when the person granted user.metrics."""
    samples = [
        (moment, {"timestamp": utc_iso(moment), "value": values["heart_rate"], "unit": "bpm"})
        for moment, values in session.intraday(start, end)
        if isinstance(values.get("heart_rate"), int | float)
    ]
    if session.granted("user.metrics"):
        for moment, values, _ in _groups(session.measures(start, end)):
            if HEART_PULSE in values:
                pulse = {"timestamp": utc_iso(moment), "value": values[HEART_PULSE], "unit": "bpm"}
                samples.append((moment, pulse))
    return by_utc_day(samples, start, end)


def _steps(
    intraday: list[tuple[datetime, dict[str, Any]]], start: date, end: date
) -> dict[date, Any]:
    samples = []
    for moment, values in intraday:
        steps = values.get("steps")
        if not isinstance(steps, int | float) or not steps:
            continue
        lasted = values.get("duration")
        seconds = lasted if isinstance(lasted, int | float) and lasted > 0 else 60
        sample = {
            "timestamp": utc_iso(moment),
            "start": utc_iso(moment),
            "end": utc_iso(moment + timedelta(seconds=seconds)),
            "value": steps,
            "unit": "count",
        }
        samples.append((moment, sample))
    return by_utc_day(samples, start, end)


def _on_days(
    records: Iterable[dict[str, Any]], start: date, end: date
) -> Iterable[tuple[date, dict[str, Any]]]:
    """Records with a local `date` within start..end, in day order."""
    kept = [(day, r) for r in records if (day := _day(r.get("date"))) and start <= day <= end]
    return sorted(kept, key=lambda pair: pair[0])


def _data(record: Mapping[str, Any]) -> Mapping[str, Any]:
    data = record.get("data")
    return data if isinstance(data, Mapping) else {}


def _sport(category: Any) -> str:
    return WORKOUT_SPORTS.get(category, "other") if isinstance(category, int) else "other"


def _minutes(seconds: Any) -> float | None:
    return None if not isinstance(seconds, int | float) else round(seconds / 60, 1)


def _activity(records: list[dict[str, Any]], start: date, end: date) -> dict[date, Any]:
    found: dict[date, Any] = {}
    for day, record in _on_days(records, start, end):
        noon = datetime.combine(day, time(12), _zone(record.get("timezone")))
        heart = {
            "avg_bpm": record.get("hr_average"),
            "min_bpm": record.get("hr_min"),
            "max_bpm": record.get("hr_max"),
        }
        found[day] = {
            "calendar_date": day.isoformat(),
            "steps": record.get("steps"),
            "distance": record.get("distance"),
            "calories_active": record.get("calories"),
            "calories_total": record.get("totalcalories"),
            "floors_climbed": record.get("elevation"),
            "low": _minutes(record.get("soft")),
            "medium": _minutes(record.get("moderate")),
            "high": _minutes(record.get("intense")),
            "timezone_offset": _offset(noon),
            "heart_rate": heart if any(v is not None for v in heart.values()) else None,
        }
    return found


def _workouts(records: list[dict[str, Any]], start: date, end: date) -> dict[date, Any]:
    found: dict[date, list[dict[str, Any]]] = {}
    for day, record in _on_days(records, start, end):
        zone = _zone(record.get("timezone"))
        begin, stop = _moment(record.get("startdate"), zone), _moment(record.get("enddate"), zone)
        if begin is None or stop is None or record.get("id") is None:
            continue
        data = _data(record)
        found.setdefault(day, []).append(
            {
                # Withings' id: the session's key, so a re-sent workout replaces its own.
                "id": str(record["id"]),
                "sport": _sport(record.get("category")),
                "time_start": begin.isoformat(),
                "time_end": stop.isoformat(),
                "timezone_offset": _offset(begin),
                "calories": data.get("calories"),
                "average_hr": data.get("hr_average"),
                "max_hr": data.get("hr_max"),
                "distance": data.get("distance"),
            }
        )
    return {
        day: sorted(kept, key=lambda w: (w["time_start"], w["id"])) for day, kept in found.items()
    }


def _main_nights(records: list[dict[str, Any]], start: date, end: date) -> dict[date, Any]:
    """The night of each local day: the longest sleep ending on it (a nap is shorter)."""
    nights: dict[date, dict[str, Any]] = {}
    for day, record in _on_days(records, start, end):
        length = (record.get("enddate") or 0) - (record.get("startdate") or 0)
        held = nights.get(day)
        if held is None or length > (held.get("enddate") or 0) - (held.get("startdate") or 0):
            nights[day] = record
    return nights


def _sleep(records: list[dict[str, Any]], start: date, end: date) -> dict[date, Any]:
    found: dict[date, Any] = {}
    for day, record in sorted(_main_nights(records, start, end).items()):
        zone = _zone(record.get("timezone"))
        begin, stop = _moment(record.get("startdate"), zone), _moment(record.get("enddate"), zone)
        data = _data(record)
        if begin is None or stop is None:
            continue
        light, deep = data.get("lightsleepduration") or 0, data.get("deepsleepduration") or 0
        rem, awake = data.get("remsleepduration") or 0, data.get("wakeupduration") or 0
        in_bed = data.get("total_timeinbed")
        total = data.get("total_sleep_time")
        efficiency = data.get("sleep_efficiency")
        found[day] = {
            "calendar_date": day.isoformat(),
            "bedtime_start": begin.isoformat(),
            "bedtime_stop": stop.isoformat(),
            "timezone_offset": _offset(begin),
            "type": "long_sleep",
            "duration": int(in_bed if in_bed is not None else (stop - begin).total_seconds()),
            "total": total if total is not None else light + deep + rem,
            "awake": awake,
            "light": light,
            "rem": rem,
            "deep": deep,
            # Withings gives a ratio (0..1): ours is a percentage, as the demo's.
            "efficiency": None if efficiency is None else round(100 * efficiency, 1),
            "latency": data.get("sleep_latency", data.get("durationtosleep")),
            "score": data.get("sleep_score"),
            "hr_lowest": data.get("hr_min"),
            "hr_average": data.get("hr_average"),
            "average_hrv": None,
            "respiratory_rate": data.get("rr_average"),
            "temperature_delta": None,
        }
    return found


def _by_night(resource: str, session: _Session, start: date, end: date) -> dict[date, Any]:
    """The stages of each day's night (Sleep v2 `get` over the night's summary times), as
    a sleep cycle or as hypnogram samples, under the night's local day."""
    found: dict[date, Any] = {}
    for day, summary in sorted(
        _main_nights(session.daily("sleep", start, end), start, end).items()
    ):
        stages = []
        for segment in session.night(summary):
            begin, stop = _moment(segment.get("startdate")), _moment(segment.get("enddate"))
            code = SLEEP_STATES.get(segment.get("state", -1))
            if begin is not None and stop is not None and code is not None and stop > begin:
                stages.append((begin, stop, code))
        stages.sort()
        if not stages:
            continue
        if resource == "hypnogram":
            found[day] = [
                {
                    "timestamp": utc_iso(begin),
                    "start": utc_iso(begin),
                    "end": utc_iso(stop),
                    "value": code,
                    "unit": "stage",
                }
                for begin, stop, code in stages
            ]
            continue
        zone = _zone(summary.get("timezone"))
        first = stages[0][0]
        found[day] = {
            "session_start": first.astimezone(zone).isoformat(),
            "session_end": stages[-1][1].astimezone(zone).isoformat(),
            "stage_start_offset_second": [int((b - first).total_seconds()) for b, _, _ in stages],
            "stage_end_offset_second": [int((s - first).total_seconds()) for _, s, _ in stages],
            "stage_type": [STAGE_NAMES[code] for _, _, code in stages],
        }
    return found
