"""The demo provider: simulated devices that need nothing outside the machine.

Data is realistic in shape and range, and deterministic: a day's data for a resource is a
function of (user, provider, resource, day) and of `now` only where the day is still
running (today's samples stop at `now`, so a later sync finds today changed and tomorrow
new, as a real device's would). The same user and device give the same history on every
machine, which is what makes the pull and sync tests exact.

Failure injection (ours): a connection's `demo_failures` maps a resource to
`{"code": <pull error code or connection error type>, "times": N | null}`. The pull's most
recent chunk fails with that code on attempts 1..N (or on every attempt when `times` is
null), after the older chunks were stored, so a retry and a failure are visible from
outside. A connection error type fails the pull as non-retriable and puts the connection
in `error`.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from uuid import UUID

from healthledger.domain.connections import raw_payloads
from healthledger.domain.connections.provider_tokens import ProviderTokens
from healthledger.domain.connections.providers import (
    CONNECTION_ERROR_TYPES,
    NON_RETRIABLE,
    OAuthClient,
    OAuthGrant,
    OAuthNotSupported,
    ProviderError,
    PullTarget,
)

HISTORY_DAYS = 30

# Timeseries resources: (sample interval in minutes, unit, base, spread, share of days
# with data, decimals, waking hours only). A resource not listed gets _DEFAULT_SERIES.
# Heart rate and glucose are not drawn from here but from a smooth daily course
# (`_course`): heart rate every minute while the device is worn, glucose at the sensor's
# own interval (`_CGM_INTERVAL`).
_SERIES: dict[str, tuple[int, str, float, float, float, int, bool]] = {
    "heartrate": (1, "bpm", 68, 14, 1.0, 0, False),
    "hrv": (60, "ms", 48, 12, 1.0, 1, False),
    "glucose": (15, "mmol/L", 5.6, 1.1, 1.0, 1, False),
    "steps": (60, "count", 420, 380, 1.0, 0, True),
    "calories_active": (60, "kcal", 22, 18, 1.0, 1, True),
    "calories_basal": (60, "kcal", 66, 6, 1.0, 1, False),
    "distance": (60, "m", 310, 280, 1.0, 0, True),
    "floors_climbed": (120, "count", 2, 2, 0.9, 0, True),
    "blood_oxygen": (60, "%", 97, 1.5, 1.0, 1, False),
    "respiratory_rate": (60, "bpm", 14.5, 2, 1.0, 1, False),
    "body_temperature": (240, "°C", 36.6, 0.3, 0.5, 2, True),
    "body_temperature_delta": (1440, "°C", 0.0, 0.4, 1.0, 2, False),
    "basal_body_temperature": (1440, "°C", 36.4, 0.2, 0.8, 2, False),
    "stress_level": (60, "count", 35, 20, 1.0, 0, True),
    "vo2_max": (1440, "mL/kg/min", 42, 2, 0.3, 1, False),
    "weight": (1440, "kg", 74, 1.2, 0.4, 1, False),
    "fat": (1440, "%", 21, 1.5, 0.4, 1, False),
    "lean_body_mass": (1440, "kg", 57, 1, 0.3, 1, False),
    "body_mass_index": (1440, "index", 23.4, 0.4, 0.3, 1, False),
    "waist_circumference": (1440, "cm", 82, 2, 0.1, 1, False),
    "water": (180, "mL", 300, 150, 0.9, 0, True),
    "caffeine": (240, "mg", 80, 40, 0.7, 0, True),
    "mindfulness_minutes": (1440, "min", 10, 8, 0.4, 0, True),
    "stand_hour": (60, "count", 1, 0, 1.0, 0, True),
    "stand_duration": (60, "min", 6, 4, 1.0, 0, True),
    "daylight_exposure": (120, "min", 18, 15, 0.9, 0, True),
    "uv_exposure": (120, "index", 3, 2, 0.8, 0, True),
    "afib_burden": (1440, "%", 1, 1, 0.5, 1, False),
    "insulin_injection": (360, "unit", 6, 3, 0.2, 1, True),
    "carbohydrates": (300, "g", 55, 25, 0.9, 0, True),
    # Beats recovered in the first minute; the client counts them (unit `count`).
    "heart_rate_recovery_one_minute": (1440, "count", 24, 6, 0.3, 0, False),
    "electrocardiogram_voltage": (1440, "mV", 0.6, 0.4, 0.1, 3, True),
    "forced_expiratory_volume_1": (1440, "L", 3.2, 0.4, 0.3, 2, True),
    "forced_vital_capacity": (1440, "L", 4.1, 0.4, 0.3, 2, True),
    "peak_expiratory_flow_rate": (1440, "L/min", 450, 50, 0.3, 0, True),
    "workout_distance": (720, "m", 4000, 3000, 0.5, 0, True),
    "workout_duration": (720, "min", 40, 25, 0.5, 0, True),
}
# Resources whose samples are an amount over the sampling interval: they carry the
# interval, `start` (inclusive) and `end` (exclusive), as the official client's samples of
# them require. Instantaneous readings (heart rate, glucose...) carry `timestamp` only.
_INTERVAL = frozenset(
    {
        "afib_burden",
        "basal_body_temperature",
        "body_mass_index",
        "body_temperature",
        "body_temperature_delta",
        "caffeine",
        "calories_active",
        "carbohydrates",
        "daylight_exposure",
        "distance",
        "fall",
        "forced_expiratory_volume_1",
        "forced_vital_capacity",
        "handwashing",
        "heart_rate_alert",
        "heart_rate_recovery_one_minute",
        "inhaler_usage",
        "insulin_injection",
        "lean_body_mass",
        "mindfulness_minutes",
        "note",
        "peak_expiratory_flow_rate",
        "sleep_apnea_alert",
        "sleep_breathing_disturbance",
        "stand_duration",
        "stand_hour",
        "steps",
        "uv_exposure",
        "vo2_max",
        "waist_circumference",
        "wheelchair_push",
        "workout_distance",
        "workout_duration",
        "workout_swimming_stroke",
    }
)
# Resources whose samples are classified (the client requires their `type`): the values.
_SAMPLE_TYPES: dict[str, tuple[str, ...]] = {
    "stand_hour": ("stood",),
    "insulin_injection": ("rapid_acting", "long_acting"),
    "heart_rate_alert": ("low_heart_rate", "high_heart_rate", "irregular_rhythm"),
    "electrocardiogram_voltage": ("I",),  # the lead of a single-lead ECG
}
_DEFAULT_SERIES = (720, "count", 3, 2, 0.2, 0, True)
# Continuous glucose monitors read every 5 minutes; other glucose sources (a phone app's
# imported readings) keep the table's interval.
_CGM_INTERVAL = 5
_CGM_PROVIDERS = frozenset(
    {"freestyle_libre", "freestyle_libre_ble", "abbott_libreview", "dexcom", "dexcom_v3"}
)

_STAGES = ("light", "deep", "rem", "awake")
_STAGE_CODES = {"deep": 1, "light": 2, "rem": 3, "awake": 4}


def _rng(*parts: object) -> random.Random:
    seed = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(seed, "big"))


def _iso(moment: datetime) -> str:
    return moment.isoformat()


class DemoProvider:
    """Implements the ProviderAdapter port for every demo-capable provider."""

    history_days = HISTORY_DAYS

    def availability(
        self, resources: Sequence[str], grant: OAuthGrant | None = None
    ) -> dict[str, Any]:
        """A demo device offers every resource and the user granted every scope."""
        return {
            resource: {
                "status": "available",
                "scope_requirements": {
                    "user_granted": {"required": [f"{resource}.read"], "optional": []},
                    "user_denied": {"required": [], "optional": []},
                },
            }
            for resource in sorted(resources)
        }

    def fetch(
        self, target: PullTarget, start: date, end: date, now: datetime, attempt: int
    ) -> dict[date, Any]:
        self._maybe_fail(target, end, now, attempt)
        build = _SUMMARIES.get(target.resource, _series)
        found: dict[date, Any] = {}
        day = start
        while day <= end:
            payload = build(target, day, now)
            if payload:
                found[day] = payload
                # A demo device has no maker API: its raw payload (`*.get_raw`) is the
                # record as the device generates it, one a day (docs/data.md#raw-payloads).
                raw_payloads.record(f"demo:{target.resource}/{day.isoformat()}", payload)
            day += timedelta(days=1)
        return found

    def authorization_url(
        self, redirect_uri: str, client: OAuthClient | None, state: str, code_challenge: str
    ) -> str:
        """A demo device is connected from the link page directly: no maker to sign in at."""
        raise OAuthNotSupported("A demo device is not an OAuth provider.")

    def exchange(
        self, code: str, redirect_uri: str, client: OAuthClient | None, code_verifier: str
    ) -> OAuthGrant:
        """No maker to sign in at, so no authorization code can be meant for a demo device."""
        raise OAuthNotSupported("A demo device is not an OAuth provider.")

    def revoke(self, team_id: UUID, client_id: str, tokens: ProviderTokens) -> None:
        """A simulated device holds no grant at a maker: nothing to revoke."""

    @staticmethod
    def _maybe_fail(target: PullTarget, end: date, now: datetime, attempt: int) -> None:
        failure = target.demo_failures.get(target.resource)
        if not failure or end < now.date():
            return  # only the most recent chunk fails: older chunks are stored first
        times = failure.get("times")
        if times is not None and attempt > times:
            return
        code = failure["code"]
        message = f"demo device: injected {code} on attempt {attempt}"
        if code in CONNECTION_ERROR_TYPES:
            raise ProviderError(NON_RETRIABLE, message, connection_error=code)
        raise ProviderError(code, message)


# -- summaries ---------------------------------------------------------------------------


def _sleep_session(target: PullTarget, day: date) -> tuple[datetime, datetime, random.Random]:
    """The night that ends on the morning of `day`."""
    rng = _rng(target.user_id, target.provider, "sleep", day)
    bedtime = datetime.combine(day - timedelta(days=1), time(21, 30), UTC) + timedelta(
        minutes=rng.randint(0, 180)
    )
    wake = bedtime + timedelta(minutes=rng.randint(330, 530))
    return bedtime, wake, rng


def _stages(rng: random.Random, bedtime: datetime, wake: datetime) -> list[tuple[datetime, str]]:
    """A stage per 5 minutes, in runs, as a hypnogram reads."""
    stages: list[tuple[datetime, str]] = []
    moment, stage, left = bedtime, "awake", 2
    while moment < wake:
        if left == 0:
            stage = rng.choices(_STAGES, weights=(50, 20, 22, 8))[0]
            left = rng.randint(2, 8)
        stages.append((moment, stage))
        moment += timedelta(minutes=5)
        left -= 1
    return stages


# Heart rates that hold together as a body's do (issue 34: a demo night's lowest was
# above its average): lowest <= average, min <= resting <= average <= walking <= max.
# Each function draws as many values as the independent draws it replaced, in the same
# order, so every other field of a demo day is as it was.


def _night_heart(rng: random.Random) -> dict[str, int]:
    lowest = rng.randint(44, 58)
    return {"hr_lowest": lowest, "hr_average": lowest + rng.randint(3, 12)}


def _day_heart(rng: random.Random) -> dict[str, int]:
    average = rng.randint(62, 78)
    below_resting = rng.randint(2, 8)
    maximum = rng.randint(130, 185)
    resting = min(average - 4, rng.randint(50, 64))
    walking = min(maximum - 10, average + rng.randint(15, 30))
    return {
        "avg_bpm": average,
        "min_bpm": resting - below_resting,
        "max_bpm": maximum,
        "resting_bpm": resting,
        "avg_walking_bpm": walking,
    }


def _workout_heart(rng: random.Random) -> dict[str, int]:
    average = rng.randint(95, 160)
    return {"average_hr": average, "max_hr": min(200, average + rng.randint(10, 35))}


def _sleep(target: PullTarget, day: date, now: datetime) -> dict[str, Any] | None:
    bedtime, wake, rng = _sleep_session(target, day)
    if wake > now:
        return None
    stages = _stages(rng, bedtime, wake)
    seconds = {s: 300 * sum(1 for _, x in stages if x == s) for s in _STAGES}
    total = int((wake - bedtime).total_seconds())
    return {
        "calendar_date": day.isoformat(),
        "bedtime_start": _iso(bedtime),
        "bedtime_stop": _iso(wake),
        "duration": total,
        "total": total - seconds["awake"],
        "awake": seconds["awake"],
        "light": seconds["light"],
        "rem": seconds["rem"],
        "deep": seconds["deep"],
        "efficiency": round(100 * (total - seconds["awake"]) / total, 1),
        "score": rng.randint(60, 95),
        # The night's lowest beat is below its average: drawn as the lowest, and the
        # average above it (one draw each, so the other fields are as before).
        **_night_heart(rng),
        "average_hrv": round(rng.uniform(30, 80), 1),
        "respiratory_rate": round(rng.uniform(12, 17), 1),
        "temperature_delta": round(rng.uniform(-0.5, 0.5), 2),
    }


def _sleep_cycle(target: PullTarget, day: date, now: datetime) -> dict[str, Any] | None:
    bedtime, wake, rng = _sleep_session(target, day)
    if wake > now:
        return None
    stages = _stages(rng, bedtime, wake)
    return {
        "session_start": _iso(bedtime),
        "session_end": _iso(wake),
        "stage_start_offset_second": [int((m - bedtime).total_seconds()) for m, _ in stages],
        "stage_end_offset_second": [int((m - bedtime).total_seconds()) + 300 for m, _ in stages],
        "stage_type": [s for _, s in stages],
    }


def _sleep_series(target: PullTarget, day: date, now: datetime) -> list[dict[str, Any]]:
    bedtime, wake, rng = _sleep_session(target, day)
    if wake > now:
        return []
    stages = _stages(rng, bedtime, wake)
    if target.resource == "hypnogram":
        # Each stage lasts its 5 minutes: the client's hypnogram samples are intervals.
        return [
            {
                "timestamp": _iso(m),
                "start": _iso(m),
                "end": _iso(m + timedelta(minutes=5)),
                "value": _STAGE_CODES[s],
                "unit": "stage",
            }
            for m, s in stages
        ]
    # sleep_stream: the heart during the night.
    return [
        {"timestamp": _iso(m), "hr": rng.randint(46, 64), "hrv": round(rng.uniform(25, 90), 1)}
        for m, _ in stages
    ]


def _day_fraction(day: date, now: datetime) -> float:
    """How much of `day` (UTC) has passed at `now`: 1 for past days."""
    elapsed = (now - datetime.combine(day, time(0), UTC)).total_seconds()
    return max(0.0, min(1.0, elapsed / 86400))


def _activity(target: PullTarget, day: date, now: datetime) -> dict[str, Any] | None:
    done = _day_fraction(day, now)
    if done == 0:
        return None
    rng = _rng(target.user_id, target.provider, "activity", day)
    steps = int(rng.randint(3500, 14000) * done)
    return {
        "calendar_date": day.isoformat(),
        "steps": steps,
        "distance": round(steps * 0.74, 1),
        "calories_active": round(steps * 0.045, 1),
        "calories_total": round(1650 * done + steps * 0.045, 1),
        "floors_climbed": int(rng.randint(0, 20) * done),
        "low": int(rng.randint(120, 300) * done),
        "medium": int(rng.randint(20, 90) * done),
        "high": int(rng.randint(0, 45) * done),
        # The day's heart rate, as the client's activity carries it (the aggregate
        # query's heart_rate_* columns of activity are computed from it).
        "heart_rate": _day_heart(rng),
    }


def _workouts(target: PullTarget, day: date, now: datetime) -> list[dict[str, Any]]:
    rng = _rng(target.user_id, target.provider, "workouts", day)
    found = []
    for number in range(rng.choice((0, 0, 1, 1, 1, 2))):
        start = datetime.combine(day, time(6 + 10 * number), UTC) + timedelta(
            minutes=rng.randint(0, 240)
        )
        end = start + timedelta(minutes=rng.randint(20, 95))
        if end > now:
            continue
        sport = rng.choice(("running", "cycling", "walking", "strength_training", "yoga"))
        found.append(
            {
                "id": f"{day.isoformat()}-{number}",
                "sport": sport,
                "time_start": _iso(start),
                "time_end": _iso(end),
                "calories": rng.randint(120, 800),
                **_workout_heart(rng),
                "distance": round(rng.uniform(0, 15000), 1) if sport != "yoga" else None,
            }
        )
    return found


def _body(target: PullTarget, day: date, now: datetime) -> dict[str, Any] | None:
    rng = _rng(target.user_id, target.provider, "body", day)
    if rng.random() > 0.5 or _day_fraction(day, now) < 0.3:
        return None  # weighed on about half the days, in the morning
    return {
        "calendar_date": day.isoformat(),
        "weight": round(rng.gauss(74, 0.8), 1),
        "fat": round(rng.gauss(21, 1), 1),
    }


def _profile(target: PullTarget, day: date, now: datetime) -> dict[str, Any] | None:
    if day.weekday() != 0 or _day_fraction(day, now) == 0:
        return None  # the device reports the profile once a week
    rng = _rng(target.user_id, target.provider, "profile")
    return {"height": rng.randint(155, 195), "calendar_date": day.isoformat()}


def _meal(target: PullTarget, day: date, now: datetime) -> list[dict[str, Any]]:
    rng = _rng(target.user_id, target.provider, "meal", day)
    meals = []
    for name, hour in (("breakfast", 7), ("lunch", 12), ("dinner", 19)):
        eaten = datetime.combine(day, time(hour), UTC) + timedelta(minutes=rng.randint(0, 90))
        if eaten > now or rng.random() < 0.15:
            continue
        # The client's meal: energy and macros (grams); the app's own id of the meal.
        meals.append(
            {
                "id": f"{day.isoformat()}-{name}",
                "name": name,
                "timestamp": _iso(eaten),
                "energy": {"unit": "kcal", "value": rng.randint(300, 900)},
                "macros": {
                    "carbs": rng.randint(20, 110),
                    "protein": rng.randint(10, 50),
                    "fats": {"total": rng.randint(5, 40)},
                },
            }
        )
    return meals


def _menstrual_cycle(target: PullTarget, day: date, now: datetime) -> dict[str, Any] | None:
    rng = _rng(target.user_id, target.provider, "menstrual_cycle")
    offset = rng.randint(0, 27)
    if (day.toordinal() + offset) % 28 != 0 or _day_fraction(day, now) == 0:
        return None
    return {"period_start": day.isoformat(), "cycle_length_days": 28}


def _electrocardiogram(target: PullTarget, day: date, now: datetime) -> dict[str, Any] | None:
    rng = _rng(target.user_id, target.provider, "electrocardiogram", day)
    taken = datetime.combine(day, time(9), UTC) + timedelta(minutes=rng.randint(0, 600))
    if rng.random() > 0.15 or taken > now:
        return None
    return {
        "session_start": _iso(taken),
        "session_end": _iso(taken + timedelta(seconds=30)),
        "voltage_sample_count": 15360,
        "heart_rate_mean": rng.randint(58, 90),
        "classification": rng.choice(("sinus_rhythm", "sinus_rhythm", "inconclusive")),
    }


def _blood_pressure(target: PullTarget, day: date, now: datetime) -> list[dict[str, Any]]:
    rng = _rng(target.user_id, target.provider, "blood_pressure", day)
    readings = []
    for hour in (8, 20):
        taken = datetime.combine(day, time(hour), UTC) + timedelta(minutes=rng.randint(0, 60))
        if taken <= now and rng.random() < 0.6:
            readings.append(
                {
                    "timestamp": _iso(taken),
                    "systolic": rng.randint(108, 138),
                    "diastolic": rng.randint(68, 88),
                    "unit": "mmHg",
                }
            )
    return readings


def _course(target: PullTarget, day: date, now: datetime) -> list[dict[str, Any]]:
    """Heart rate (every minute while worn) and glucose (every 5 minutes from a CGM): a
    value that drifts smoothly around a daily course (lower at night, higher by day and
    after meals), not independent draws, so that aggregates over them look real."""
    heart = target.resource == "heartrate"
    interval, unit, base, spread, _share, decimals, _waking = _SERIES[target.resource]
    if not heart and target.provider in _CGM_PROVIDERS:
        interval = _CGM_INTERVAL
    rng = _rng(target.user_id, target.provider, target.resource, day)
    # Off the wrist once a day to charge (30 to 90 minutes, heart rate only).
    charging = rng.randint(6 * 60, 20 * 60)
    charged = charging + rng.randint(30, 90) if heart else charging
    midnight = datetime.combine(day, time(0), UTC)
    samples: list[dict[str, Any]] = []
    drift = 0.0
    for minute in range(rng.randint(0, interval - 1), 24 * 60, interval):
        moment = midnight + timedelta(minutes=minute)
        if moment > now:
            break
        # The drift is drawn for every slot, worn or not: a sample's value does not depend
        # on whether earlier ones were dropped, so a day grows as a prefix.
        drift = 0.9 * drift + rng.gauss(0, spread / 6)
        if charging <= minute < charged:
            continue
        hour = minute / 60
        awake = 7 <= hour < 23
        course = (0.35 if awake else -0.45) * spread
        if not heart:
            # Glucose rises after breakfast, lunch and dinner.
            course = (
                sum(
                    0.9 * spread * max(0.0, 1 - abs(hour - meal - 0.75) / 1.5)
                    for meal in (7.5, 12.5, 19)
                )
                - 0.2 * spread
            )
        value = max(0.0, base + course + drift)
        samples.append(
            {
                "timestamp": _iso(moment),
                "value": round(value, decimals) if decimals else int(value),
                "unit": unit,
            }
        )
    return samples


def _series(target: PullTarget, day: date, now: datetime) -> list[dict[str, Any]]:
    if target.resource in ("heartrate", "glucose"):
        return _course(target, day, now)
    interval, unit, base, spread, share, decimals, waking = _SERIES.get(
        target.resource, _DEFAULT_SERIES
    )
    rng = _rng(target.user_id, target.provider, target.resource, day)
    if rng.random() > share:
        return []
    midnight = datetime.combine(day, time(0), UTC)
    first, last = (7 * 60, 23 * 60) if waking else (0, 24 * 60)
    samples = []
    for minute in range(first + rng.randint(0, interval - 1) % interval, last, interval):
        moment = midnight + timedelta(minutes=minute)
        value = max(0.0, base + rng.uniform(-spread, spread))
        if moment > now:
            break
        sample: dict[str, Any] = {
            "timestamp": _iso(moment),
            "value": round(value, decimals) if decimals else int(value),
            "unit": unit,
        }
        if target.resource in _INTERVAL:
            sample["start"] = _iso(moment)
            sample["end"] = _iso(moment + timedelta(minutes=interval))
        if target.resource in _SAMPLE_TYPES:
            sample["type"] = rng.choice(_SAMPLE_TYPES[target.resource])
        samples.append(sample)
    return samples


_SUMMARIES: dict[str, Callable[[PullTarget, date, datetime], Any]] = {
    "sleep": _sleep,
    "sleep_cycle": _sleep_cycle,
    "hypnogram": _sleep_series,
    "sleep_stream": _sleep_series,
    "activity": _activity,
    "workouts": _workouts,
    "body": _body,
    "profile": _profile,
    "meal": _meal,
    "menstrual_cycle": _menstrual_cycle,
    "electrocardiogram": _electrocardiogram,
    "blood_pressure": _blood_pressure,
}
