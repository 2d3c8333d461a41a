"""Apple Health's export read into our resources (`apple_health_kit`), in bounded memory.

Apple's data never leaves the phone through a server API: the person exports it from the
Health app (`export.zip`, docs/makers/apple_health.md) and the team uploads it. The read
has two passes, so that nothing is stored from a file that turns out broken halfway:

1. `prepare` streams the XML (apple_health_export.py) and writes each sample of a mapped
   record type to a spill file (SQLite in a temporary folder), keeping in memory only what
   is small: per-day totals per source, the sleep records, the workouts, the daily
   activity summaries and `<Me>`.
2. `batches` reads the spill back in (resource, day, time) order and builds each day's
   payload in the shapes the demo devices produce (adapters/providers/demo.py), so that
   summaries, timeseries, the aggregate query and webhooks read them unchanged; a batch
   at a time, to the import (domain/connections/imports.py), which stores it as a pull's
   chunk.

Where several sources record the same amount (the phone and the watch both count steps),
a day keeps the samples of the source with the largest total that day, as the Health
app's own source priority would, rather than counting a step twice.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from uuid import UUID

from healthledger.adapters.providers.apple_health_export import stream_export
from healthledger.domain.connections.provider_tokens import ProviderTokens
from healthledger.domain.connections.providers import (
    OAuthClient,
    OAuthGrant,
    OAuthNotSupported,
    PullTarget,
    offered_availability,
)

PROVIDER = "apple_health_kit"
FILE_FORMAT = "apple_health_export"
# The share of an import's progress that reading the file takes (storing the rest).
READ_SHARE = 0.7
# A batch is stored once it holds this many samples or days (one transaction each): a
# sample is about 600 bytes in Python, so a batch stays near 6 MB.
BATCH_SAMPLES = 10_000
BATCH_DAYS = 120
# Spill rows written at a time.
SPILL_ROWS = 20_000
# The name a read's spill folder starts with (beside the uploads, see import_files.py).
SPILL_PREFIX = "apple-health-"

# -- units: Apple's unit strings -> (our unit's factor, offset) ------------------------------

_ENERGY = {"kcal": 1.0, "Cal": 1.0, "kJ": 1 / 4.184, "cal": 0.001}
_LENGTH_M = {"m": 1.0, "km": 1000.0, "mi": 1609.344, "ft": 0.3048, "yd": 0.9144, "cm": 0.01}
_MASS_KG = {"kg": 1.0, "g": 0.001, "lb": 0.45359237, "st": 6.35029318}
_PERCENT = {"%": 100.0}  # Apple's percentages are fractions (0.97)
_GLUCOSE = {"mmol<180.15588000005408>/L": 1.0, "mmol/L": 1.0, "mg/dL": 1 / 18.0156}
_MINUTES = {"min": 1.0, "s": 1 / 60, "hr": 60.0}
_VOLUME_ML = {"mL": 1.0, "L": 1000.0, "fl_oz_us": 29.5735, "cup_us": 236.588}
_ONE = {"count": 1.0, "count/min": 1.0, "ms": 1.0, "mL/min·kg": 1.0, "mg": 1.0}
_HEIGHT_CM = {"cm": 1.0, "m": 100.0, "in": 2.54, "ft": 30.48}


@dataclass(frozen=True)
class Series:
    """How a record type maps to one of our timeseries resources."""

    resource: str
    unit: str
    factors: Mapping[str, float]
    decimals: int
    # An amount over the record's interval (summed per day, one source a day).
    cumulative: bool = False


_SERIES: dict[str, Series] = {
    "HKQuantityTypeIdentifierHeartRate": Series("heartrate", "bpm", _ONE, 0),
    "HKQuantityTypeIdentifierHeartRateVariabilitySDNN": Series("hrv", "ms", _ONE, 1),
    "HKQuantityTypeIdentifierStepCount": Series("steps", "count", _ONE, 0, True),
    "HKQuantityTypeIdentifierActiveEnergyBurned": Series(
        "calories_active", "kcal", _ENERGY, 1, True
    ),
    "HKQuantityTypeIdentifierBasalEnergyBurned": Series("calories_basal", "kcal", _ENERGY, 1, True),
    "HKQuantityTypeIdentifierDistanceWalkingRunning": Series("distance", "m", _LENGTH_M, 0, True),
    "HKQuantityTypeIdentifierFlightsClimbed": Series("floors_climbed", "count", _ONE, 0, True),
    "HKQuantityTypeIdentifierOxygenSaturation": Series("blood_oxygen", "%", _PERCENT, 1),
    "HKQuantityTypeIdentifierRespiratoryRate": Series("respiratory_rate", "bpm", _ONE, 1),
    "HKQuantityTypeIdentifierBodyTemperature": Series("body_temperature", "°C", {}, 2),
    "HKQuantityTypeIdentifierBasalBodyTemperature": Series("basal_body_temperature", "°C", {}, 2),
    "HKQuantityTypeIdentifierBodyMass": Series("weight", "kg", _MASS_KG, 1),
    "HKQuantityTypeIdentifierBodyFatPercentage": Series("fat", "%", _PERCENT, 1),
    "HKQuantityTypeIdentifierBodyMassIndex": Series("body_mass_index", "index", _ONE, 1),
    "HKQuantityTypeIdentifierLeanBodyMass": Series("lean_body_mass", "kg", _MASS_KG, 1),
    "HKQuantityTypeIdentifierWaistCircumference": Series(
        "waist_circumference", "cm", {k: v * 100 for k, v in _LENGTH_M.items()}, 1
    ),
    "HKQuantityTypeIdentifierBloodGlucose": Series("glucose", "mmol/L", _GLUCOSE, 1),
    "HKQuantityTypeIdentifierVO2Max": Series("vo2_max", "mL/kg/min", _ONE, 1),
    "HKQuantityTypeIdentifierDietaryWater": Series("water", "mL", _VOLUME_ML, 0, True),
    "HKQuantityTypeIdentifierDietaryCaffeine": Series("caffeine", "mg", _ONE, 0, True),
    "HKQuantityTypeIdentifierAppleStandTime": Series("stand_duration", "min", _MINUTES, 0, True),
    "HKQuantityTypeIdentifierTimeInDaylight": Series("daylight_exposure", "min", _MINUTES, 0, True),
    # A category record: its amount is its length (see `_record`).
    "HKCategoryTypeIdentifierMindfulSession": Series(
        "mindfulness_minutes", "min", _MINUTES, 1, True
    ),
}
_RESOURCES = tuple(spec.resource for spec in _SERIES.values())
_RESOURCE_INDEX = {resource: index for index, resource in enumerate(_RESOURCES)}
# Samples that are an amount over an interval carry start and end, as the demo's do.
_INTERVAL = frozenset(
    {
        "steps",
        "calories_active",
        "distance",
        "body_temperature",
        "basal_body_temperature",
        "body_mass_index",
        "lean_body_mass",
        "waist_circumference",
        "vo2_max",
        "caffeine",
        "stand_duration",
        "daylight_exposure",
        "mindfulness_minutes",
    }
)
SUMMARIES = ("sleep", "sleep_cycle", "activity", "workouts", "body", "profile", "blood_pressure")
# Every resource an import can give: what an import's connection offers.
RESOURCES = tuple(sorted({*_RESOURCES, *SUMMARIES}))

_SLEEP = "HKCategoryTypeIdentifierSleepAnalysis"
_RESTING_HR = "HKQuantityTypeIdentifierRestingHeartRate"
_WALKING_HR = "HKQuantityTypeIdentifierWalkingHeartRateAverage"
_HEIGHT = "HKQuantityTypeIdentifierHeight"
# A reading's two records (inside a blood pressure correlation, and beside it).
_PRESSURE = {
    "HKQuantityTypeIdentifierBloodPressureSystolic": "systolic",
    "HKQuantityTypeIdentifierBloodPressureDiastolic": "diastolic",
}
# A mindful session is a category record: its length is its amount.
_MINDFUL = "HKCategoryTypeIdentifierMindfulSession"
_STAGES = {
    "HKCategoryValueSleepAnalysisInBed": "in_bed",
    "HKCategoryValueSleepAnalysisAsleepUnspecified": "asleep",
    "HKCategoryValueSleepAnalysisAsleep": "asleep",  # before iOS 16
    "HKCategoryValueSleepAnalysisAwake": "awake",
    "HKCategoryValueSleepAnalysisAsleepCore": "light",
    "HKCategoryValueSleepAnalysisAsleepDeep": "deep",
    "HKCategoryValueSleepAnalysisAsleepREM": "rem",
}
_ASLEEP = frozenset({"asleep", "light", "deep", "rem"})
_SEXES = {
    "HKBiologicalSexFemale": "female",
    "HKBiologicalSexMale": "male",
    "HKBiologicalSexOther": "other",
}
# A sleep record as kept: (source, start, end, our stage).
SleepRecord = tuple[int, datetime, datetime, str]
# A night is the sleep that ends from 18:00 the evening before to 18:00 on its day.
_NIGHT_SHIFT = timedelta(hours=6)

# The bundle ids of apps whose source names are well known (the export names the app,
# not its bundle id). The person's own devices are named after them ("Jane's Apple
# Watch"): personal, so never kept; they are the Health app's.
_APPS: dict[str, tuple[str, str]] = {
    "Health": ("phone", "com.apple.Health"),
    "Oura": ("ring", "com.ouraring.oura"),
    "Health Mate": ("scale", "com.withings.wiScaleNG"),
    "Withings": ("scale", "com.withings.wiScaleNG"),
    "MyFitnessPal": ("app", "com.myfitnesspal.mfp"),
    "Strava": ("app", "com.strava.stravaride"),
    "Sleep Cycle": ("app", "com.lexwarelabs.goodmorning"),
    "AutoSleep": ("app", "com.tantsissa.AutoSleep"),
    "Fitbit": ("watch", "com.fitbit.FitbitMobile"),
    "Garmin Connect": ("watch", "com.garmin.connect.mobile"),
    "Zwift": ("app", "com.zwift.Zwift"),
    "Dexcom G7": ("automatic", "com.dexcom.g7"),
    "Dexcom G6": ("automatic", "com.dexcom.G6"),
}
_APPLE = "com.apple.health"


@dataclass(frozen=True)
class Source:
    """What we keep of a record's source: the kind of device, and the app's bundle id
    where known (spec 2.13's `type` and `app_id`)."""

    type: str
    app_id: str | None

    def context(self) -> dict[str, Any]:
        return {"type": self.type, "app_id": self.app_id}


def source_of(name: str, device: str | None) -> Source:
    """From the record's `sourceName` and `device` (`<<HKDevice: ...>, name:Apple Watch,
    manufacturer:Apple Inc., model:Watch, ...>`)."""
    model = None
    if device:
        for part in device.split(","):
            key, _, value = part.strip().partition(":")
            if key == "model":
                model = value.strip()
                break
    if model == "Watch":
        return Source("watch", _APPLE)
    if model == "iPhone":
        return Source("phone", _APPLE)
    known = _APPS.get(name)
    if known is not None:
        return Source(*known)
    if "Apple Watch" in name:
        return Source("watch", _APPLE)
    if "iPhone" in name:
        return Source("phone", _APPLE)
    return Source("app" if device is None else "unknown", None)


# -- instants ------------------------------------------------------------------------------

_ZONES: dict[str, timezone] = {}


def instant(text: str) -> datetime | None:
    """Apple's `2024-01-02 07:03:00 +0100` (local time and its offset), or None."""
    if len(text) != 25 or text[19] != " ":
        return None
    suffix = text[20:]
    zone = _ZONES.get(suffix)
    try:
        if zone is None:
            sign = -1 if suffix[0] == "-" else 1
            offset = timedelta(hours=int(suffix[1:3]), minutes=int(suffix[3:5]))
            zone = _ZONES.setdefault(suffix, timezone(sign * offset))
        return datetime(
            int(text[0:4]),
            int(text[5:7]),
            int(text[8:10]),
            int(text[11:13]),
            int(text[14:16]),
            int(text[17:19]),
            tzinfo=zone,
        )
    except ValueError:
        return None


def _utc(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def _offset(moment: datetime) -> int:
    offset = moment.utcoffset()
    return 0 if offset is None else int(offset.total_seconds())


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


def _convert(spec: Series, value: float, unit: str | None) -> float | None:
    if spec.unit == "°C":
        if unit == "degF":
            return (value - 32) / 1.8
        return value if unit in ("degC", None) else None
    factor = spec.factors.get(unit or "")
    return None if factor is None else value * factor


def _rounded(value: float, decimals: int) -> float | int:
    return round(value) if decimals == 0 else round(value, decimals)


# -- the read --------------------------------------------------------------------------------


@dataclass
class _Workout:
    source: int
    key: str
    sport: str
    start: datetime
    end: datetime
    calories: float | None = None
    distance: float | None = None
    average_hr: float | None = None
    max_hr: float | None = None


@dataclass
class _DayTotals:
    """Small per-day figures kept in memory during the read."""

    # (resource, day, source) -> total, for a day's source of each amount.
    amounts: dict[tuple[int, date, int], float] = field(default_factory=dict)
    # Local day -> [sum, count, min, max] of heart rate.
    heart: dict[date, list[float]] = field(default_factory=dict)
    resting: dict[date, float] = field(default_factory=dict)
    walking: dict[date, float] = field(default_factory=dict)
    # Local day -> its UTC offset (the first record's of the day).
    offsets: dict[date, int] = field(default_factory=dict)
    # Local day -> (instant, weight kg) / (instant, fat %), the day's last.
    weight: dict[date, tuple[datetime, float]] = field(default_factory=dict)
    fat: dict[date, tuple[datetime, float]] = field(default_factory=dict)


class AppleHealthReading:
    """One read of an uploaded export (the domain's ExportReading)."""

    def __init__(
        self,
        path: Path,
        user_id: UUID,
        *,
        max_xml_bytes: int,
        spill_dir: Path | None = None,
    ) -> None:
        self.path = path
        self.user_id = user_id
        self.max_xml_bytes = max_xml_bytes
        self.progress = 0.0
        self.counts: dict[str, int] = {
            "records_read": 0,
            "records_mapped": 0,
            "records_skipped": 0,
            "workouts": 0,
        }
        self.workdir = Path(tempfile.mkdtemp(prefix=SPILL_PREFIX, dir=spill_dir))
        self.spill = sqlite3.connect(self.workdir / "spill.sqlite3")
        self.spill.executescript(
            "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-8000;"
            "CREATE TABLE sample (resource INTEGER, day TEXT, source INTEGER, ts TEXT,"
            " value REAL, start TEXT, end TEXT);"
        )
        self.rows: list[tuple[Any, ...]] = []
        self.spilled = 0
        self.sources: dict[str, int] = {}
        self.source_kinds: list[Source] = []
        self.totals = _DayTotals()
        self.sleep: list[SleepRecord] = []
        self.workouts: list[_Workout] = []
        self.workout: _Workout | None = None
        self.activity: dict[date, dict[str, float]] = {}
        self.heights: list[tuple[datetime, float]] = []
        self.pressure: dict[tuple[int, datetime], dict[str, float]] = {}
        self.me: dict[str, Any] = {}
        self.exported: datetime | None = None

    # -- pass 1: the file ---------------------------------------------------------------

    def prepare(self, progressed: Callable[[], None] | None = None) -> None:
        def on_read(read: int, total: int) -> None:
            self.progress = READ_SHARE * min(1.0, read / total) if total else 0.0
            if progressed is not None:
                progressed()

        stream_export(
            self.path, self._start, self._end, max_xml_bytes=self.max_xml_bytes, on_read=on_read
        )
        self._flush()
        self.progress = READ_SHARE

    def person(self) -> Mapping[str, Any]:
        return dict(self.me)

    def _source(self, attributes: Mapping[str, str]) -> int:
        name = attributes.get("sourceName", "")
        device = attributes.get("device")
        key = f"{name}\x1f{device or ''}"
        index = self.sources.get(key)
        if index is None:
            index = self.sources[key] = len(self.source_kinds)
            self.source_kinds.append(source_of(name, device))
        return index

    def _start(self, name: str, a: dict[str, str]) -> None:
        if name == "Record":
            self._record(a)
        elif name == "WorkoutStatistics" and self.workout is not None:
            self._statistics(self.workout, a)
        elif name == "Workout":
            self._start_workout(a)
        elif name == "ActivitySummary":
            self._activity_summary(a)
        elif name == "Me":
            born = a.get("HKCharacteristicTypeIdentifierDateOfBirth") or None
            self.me = {
                "birth_date": born,
                "sex": _SEXES.get(a.get("HKCharacteristicTypeIdentifierBiologicalSex", "")),
            }
        elif name == "ExportDate":
            self.exported = instant(a.get("value", ""))

    def _end(self, name: str) -> None:
        if name == "Workout" and self.workout is not None:
            self.workouts.append(self.workout)
            self.counts["workouts"] += 1
            self.workout = None

    def _record(self, a: dict[str, str]) -> None:
        counts = self.counts
        counts["records_read"] += 1
        kind = a.get("type", "")
        spec = _SERIES.get(kind)
        if spec is None:
            self._other_record(kind, a)
            return
        begin = instant(a.get("startDate", ""))
        raw, unit = _number(a.get("value")), a.get("unit")
        if kind == _MINDFUL:
            # A category record: its amount is its length.
            finish = instant(a.get("endDate", ""))
            raw, unit = None, "s"
            if begin is not None and finish is not None and finish >= begin:
                raw = (finish - begin).total_seconds()
        value = None if raw is None else _convert(spec, raw, unit)
        if begin is None or value is None:
            counts["records_skipped"] += 1
            return
        counts["records_mapped"] += 1
        resource = _RESOURCE_INDEX[spec.resource]
        source = self._source(a)
        utc_begin = begin.astimezone(UTC)
        day = utc_begin.date()
        local = begin.date()
        self.totals.offsets.setdefault(local, _offset(begin))
        start = end = None
        if spec.resource in _INTERVAL or spec.cumulative:
            finish = instant(a.get("endDate", "")) or begin
            start, end = utc_begin.isoformat(), _utc(finish)
        if spec.cumulative:
            amounts = self.totals.amounts
            for key in ((resource, day, source), (resource, local, -1 - source)):
                amounts[key] = amounts.get(key, 0.0) + value
        elif spec.resource == "heartrate":
            found = self.totals.heart.get(local)
            if found is None:
                self.totals.heart[local] = [value, 1, value, value]
            else:
                found[0] += value
                found[1] += 1
                found[2] = min(found[2], value)
                found[3] = max(found[3], value)
        elif spec.resource in ("weight", "fat"):
            kept = self.totals.weight if spec.resource == "weight" else self.totals.fat
            if local not in kept or kept[local][0] <= begin:
                kept[local] = (begin, value)
        self.rows.append(
            (resource, day.isoformat(), source, utc_begin.isoformat(), value, start, end)
        )
        if len(self.rows) >= SPILL_ROWS:
            self._flush()

    def _other_record(self, kind: str, a: dict[str, str]) -> None:
        counts = self.counts
        begin = instant(a.get("startDate", ""))
        if kind == _SLEEP:
            finish = instant(a.get("endDate", ""))
            stage = _STAGES.get(a.get("value", ""))
            if begin is None or finish is None or stage is None or finish < begin:
                counts["records_skipped"] += 1
                return
            counts["records_mapped"] += 1
            self.sleep.append((self._source(a), begin, finish, stage))
            return
        value = _number(a.get("value"))
        if begin is None or value is None:
            counts["records_skipped"] += 1
            return
        if kind in (_RESTING_HR, _WALKING_HR):
            counts["records_mapped"] += 1
            kept = self.totals.resting if kind == _RESTING_HR else self.totals.walking
            kept[begin.date()] = value
        elif kind in _PRESSURE:
            if a.get("unit") != "mmHg":
                counts["records_skipped"] += 1
                return
            counts["records_mapped"] += 1
            # Keyed by source and instant: the reading's records inside its correlation
            # and beside it are one reading.
            reading = self.pressure.setdefault((self._source(a), begin), {})
            reading[_PRESSURE[kind]] = value
        elif kind == _HEIGHT:
            height = _HEIGHT_CM.get(a.get("unit", ""))
            if height is None:
                counts["records_skipped"] += 1
                return
            counts["records_mapped"] += 1
            self.heights.append((begin, value * height))
        else:
            counts["records_skipped"] += 1

    def _start_workout(self, a: dict[str, str]) -> None:
        begin, finish = instant(a.get("startDate", "")), instant(a.get("endDate", ""))
        if begin is None or finish is None:
            self.counts["records_skipped"] += 1
            return
        kind = a.get("workoutActivityType", "HKWorkoutActivityTypeOther")
        # Apple gives workouts no id in the export: one of ours, stable for the same
        # workout of the same source (its start), keyed by the user so that it links
        # nothing across users. A workout edited since keeps it, and is replaced.
        key = hashlib.blake2b(
            f"{a.get('sourceName', '')}\x1f{kind}\x1f{_utc(begin)}".encode(),
            digest_size=10,
            key=self.user_id.bytes,
        ).hexdigest()
        workout = _Workout(self._source(a), f"ahk-{key}", _sport(kind), begin, finish)
        # Exports before iOS 16 carry the totals on the workout itself.
        energy = _number(a.get("totalEnergyBurned"))
        if energy is not None:
            workout.calories = energy * _ENERGY.get(a.get("totalEnergyBurnedUnit", "kcal"), 1.0)
        distance = _number(a.get("totalDistance"))
        if distance is not None:
            workout.distance = distance * _LENGTH_M.get(a.get("totalDistanceUnit", "km"), 1.0)
        self.workout = workout

    @staticmethod
    def _statistics(workout: _Workout, a: dict[str, str]) -> None:
        kind, unit = a.get("type", ""), a.get("unit", "")
        if kind == "HKQuantityTypeIdentifierActiveEnergyBurned":
            total = _number(a.get("sum"))
            if total is not None and unit in _ENERGY:
                workout.calories = total * _ENERGY[unit]
        elif kind.startswith("HKQuantityTypeIdentifierDistance"):
            total = _number(a.get("sum"))
            if total is not None and unit in _LENGTH_M:
                workout.distance = total * _LENGTH_M[unit]
        elif kind == "HKQuantityTypeIdentifierHeartRate":
            workout.average_hr = _number(a.get("average"))
            workout.max_hr = _number(a.get("maximum"))

    def _activity_summary(self, a: dict[str, str]) -> None:
        try:
            day = date.fromisoformat(a.get("dateComponents", ""))
        except ValueError:
            return
        energy = _number(a.get("activeEnergyBurned"))
        unit = _ENERGY.get(a.get("activeEnergyBurnedUnit", "kcal"))
        found: dict[str, float] = {}
        if energy is not None and unit is not None:
            found["calories_active"] = energy * unit
        for name, ours in (("appleExerciseTime", "exercise"), ("appleStandHours", "stand")):
            value = _number(a.get(name))
            if value is not None:
                found[ours] = value
        if found:
            self.activity[day] = found

    def _flush(self) -> None:
        if self.rows:
            self.spill.executemany("INSERT INTO sample VALUES (?, ?, ?, ?, ?, ?, ?)", self.rows)
            self.spilled += len(self.rows)
            self.rows = []

    # -- pass 2: the days ---------------------------------------------------------------

    def batches(self) -> Iterator[Mapping[str, Mapping[date, Any]]]:
        yield from self._series()
        sleeps, cycles = self._sleep()
        summaries: list[tuple[str, dict[date, Any]]] = [
            ("sleep", sleeps),
            ("sleep_cycle", cycles),
            ("activity", self._activity()),
            ("body", self._body()),
            ("workouts", self._workouts()),
            ("profile", self._profile()),
            ("blood_pressure", self._blood_pressure()),
        ]
        for resource, days in summaries:
            ordered = sorted(days)
            for first in range(0, len(ordered), BATCH_DAYS):
                yield {resource: {day: days[day] for day in ordered[first : first + BATCH_DAYS]}}
        self.progress = 1.0

    def _chosen(self, resource: int, day: date) -> int:
        """The source of an amount's day: the one with the largest total that day."""
        best, best_total = -1, -1.0
        for index in range(len(self.source_kinds)):
            total = self.totals.amounts.get((resource, day, index))
            if total is not None and total > best_total:
                best, best_total = index, total
        return best

    def _series(self) -> Iterator[dict[str, dict[date, Any]]]:
        self.spill.commit()
        rows = self.spill.execute(
            "SELECT resource, day, source, ts, value, start, end FROM sample"
            " ORDER BY resource, day, ts, source, value, start, end"
        )
        batch: dict[str, dict[date, Any]] = {}
        held = days_held = done = 0
        current: tuple[int, str] | None = None
        samples: list[dict[str, Any]] = []
        chosen = -1
        spec: Series = next(iter(_SERIES.values()))
        for resource, day, source, ts, value, start, end in rows:
            done += 1
            if (resource, day) != current:
                if current is not None and samples:
                    batch.setdefault(_RESOURCES[current[0]], {})[date.fromisoformat(current[1])] = (
                        samples
                    )
                    held += len(samples)
                    days_held += 1
                    if held >= BATCH_SAMPLES or days_held >= BATCH_DAYS:
                        self.progress = READ_SHARE + (1 - READ_SHARE) * 0.9 * done / max(
                            1, self.spilled
                        )
                        yield batch
                        batch, held, days_held = {}, 0, 0
                current, samples = (resource, day), []
                spec = _SERIES_BY_RESOURCE[_RESOURCES[resource]]
                chosen = self._chosen(resource, date.fromisoformat(day)) if spec.cumulative else -1
            if spec.cumulative and source != chosen:
                continue
            sample: dict[str, Any] = {
                "timestamp": ts,
                "value": _rounded(value, spec.decimals),
                "unit": spec.unit,
            }
            if start is not None and spec.resource in _INTERVAL:
                sample["start"] = start
                sample["end"] = end
            samples.append(sample)
        if current is not None and samples:
            batch.setdefault(_RESOURCES[current[0]], {})[date.fromisoformat(current[1])] = samples
        if batch:
            yield batch

    def _sleep(self) -> tuple[dict[date, Any], dict[date, Any]]:
        """Each night's sleep summary, and its sleep cycle where its source staged it."""
        nights: dict[date, list[tuple[int, datetime, datetime, str]]] = {}
        for record in self.sleep:
            nights.setdefault((record[2] + _NIGHT_SHIFT).date(), []).append(record)
        sleeps: dict[date, Any] = {}
        cycles: dict[date, Any] = {}
        for night, records in nights.items():
            kept = _night_source(records)
            summary = _night(night, kept, self.source_kinds)
            if summary is None:
                continue
            sleeps[night] = summary
            cycle = _cycle(kept)
            if cycle is not None:
                cycles[night] = cycle
        return sleeps, cycles

    def _activity(self) -> dict[date, Any]:
        amounts = self.totals.amounts
        local: dict[date, dict[int, dict[int, float]]] = {}
        for (resource, day, source), total in amounts.items():
            if source < 0:  # the local day's totals (see `_record`)
                local.setdefault(day, {}).setdefault(resource, {})[-1 - source] = total
        days = set(local) | set(self.activity) | set(self.totals.heart)
        found: dict[date, Any] = {}
        for day in sorted(days):
            totals = local.get(day, {})

            def amount(resource: str, totals: dict[int, dict[int, float]] = totals) -> float | None:
                by_source = totals.get(_RESOURCE_INDEX[resource])
                return max(by_source.values()) if by_source else None

            summary = self.activity.get(day, {})
            steps = amount("steps")
            active = summary.get("calories_active", amount("calories_active"))
            basal = amount("calories_basal")
            floors = amount("floors_climbed")
            distance = amount("distance")
            activity: dict[str, Any] = {
                "calendar_date": day.isoformat(),
                "steps": None if steps is None else round(steps),
                "distance": None if distance is None else round(distance, 1),
                "calories_active": None if active is None else round(active, 1),
                "calories_total": None
                if active is None or basal is None
                else round(active + basal, 1),
                "floors_climbed": None if floors is None else round(floors),
                "low": None,
                "medium": None,
                # Apple's exercise minutes: its brisk activity and workouts.
                "high": summary.get("exercise"),
                "timezone_offset": self.totals.offsets.get(day),
            }
            heart = self.totals.heart.get(day)
            if heart is not None:
                rate: dict[str, Any] = {
                    "avg_bpm": round(heart[0] / heart[1]),
                    "min_bpm": round(heart[2]),
                    "max_bpm": round(heart[3]),
                }
                if day in self.totals.resting:
                    rate["resting_bpm"] = round(self.totals.resting[day])
                if day in self.totals.walking:
                    rate["avg_walking_bpm"] = round(self.totals.walking[day])
                activity["heart_rate"] = rate
            found[day] = activity
        return found

    def _blood_pressure(self) -> dict[date, Any]:
        """A day's readings (under the UTC day of each, as samples are), in time order;
        a reading is stored once both its numbers are known."""
        found: dict[date, list[tuple[datetime, dict[str, Any]]]] = {}
        for (_, moment), reading in self.pressure.items():
            if "systolic" not in reading or "diastolic" not in reading:
                continue
            found.setdefault(moment.astimezone(UTC).date(), []).append(
                (
                    moment,
                    {
                        "timestamp": _utc(moment),
                        "systolic": round(reading["systolic"]),
                        "diastolic": round(reading["diastolic"]),
                        "unit": "mmHg",
                    },
                )
            )
        return {
            day: [item for _, item in sorted(items, key=lambda pair: pair[0])]
            for day, items in found.items()
        }

    def _body(self) -> dict[date, Any]:
        weight, fat = self.totals.weight, self.totals.fat
        return {
            day: {
                "calendar_date": day.isoformat(),
                "weight": round(weight[day][1], 1) if day in weight else None,
                "fat": round(fat[day][1], 1) if day in fat else None,
            }
            for day in sorted(set(weight) | set(fat))
        }

    def _workouts(self) -> dict[date, Any]:
        found: dict[date, list[dict[str, Any]]] = {}
        for workout in self.workouts:
            found.setdefault(workout.start.date(), []).append(
                {
                    "id": workout.key,
                    "sport": workout.sport,
                    "time_start": workout.start.isoformat(),
                    "time_end": workout.end.isoformat(),
                    "timezone_offset": _offset(workout.start),
                    "calories": None if workout.calories is None else round(workout.calories),
                    "average_hr": None if workout.average_hr is None else round(workout.average_hr),
                    "max_hr": None if workout.max_hr is None else round(workout.max_hr),
                    "distance": None if workout.distance is None else round(workout.distance, 1),
                    "source": self.source_kinds[workout.source].context(),
                }
            )
        return {
            day: sorted(
                {item["id"]: item for item in items}.values(),
                key=lambda w: (w["time_start"], w["id"]),
            )
            for day, items in found.items()
        }

    def _profile(self) -> dict[date, Any]:
        """The profile as of the export: its day is the export's (else the last height's)."""
        height = max(self.heights, key=lambda pair: pair[0], default=None)
        if height is None and not any(self.me.values()):
            return {}
        when = self.exported or (height[0] if height else None)
        if when is None:
            return {}
        day = when.date()
        return {
            day: {
                "height": None if height is None else round(height[1]),
                "birth_date": self.me.get("birth_date"),
                "sex": self.me.get("sex"),
                "calendar_date": day.isoformat(),
            }
        }

    def close(self) -> None:
        self.spill.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


_SERIES_BY_RESOURCE = {spec.resource: spec for spec in _SERIES.values()}


def _sport(kind: str) -> str:
    """`HKWorkoutActivityTypeTraditionalStrengthTraining` -> `traditional_strength_training`."""
    text = kind.removeprefix("HKWorkoutActivityType") or "Other"
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in text).lstrip("_")


# The stages a sleep cycle names (time in bed and unstaged sleep are not stages).
_CYCLE_STAGES = frozenset({"light", "deep", "rem", "awake"})


def _night_source(records: list[SleepRecord]) -> list[SleepRecord]:
    """The night's records of the source that recorded the most sleep (the watch's
    stages, rather than the phone's time in bed)."""
    by_source: dict[int, list[SleepRecord]] = {}
    for record in records:
        by_source.setdefault(record[0], []).append(record)

    def weight(items: list[SleepRecord]) -> tuple[float, float]:
        asleep = sum((e - s).total_seconds() for _, s, e, stage in items if stage in _ASLEEP)
        return asleep, sum((e - s).total_seconds() for _, s, e, _stage in items)

    _, kept = max(by_source.items(), key=lambda pair: (weight(pair[1]), -pair[0]))
    return kept


def _cycle(kept: list[SleepRecord]) -> dict[str, Any] | None:
    """The night's stages as the demo's sleep cycle: offsets from the night's start."""
    staged = sorted((s, e, stage) for _, s, e, stage in kept if stage in _CYCLE_STAGES)
    if not staged:
        return None
    begin = min(s for _, s, _e, _stage in kept)
    stop = max(e for _, _s, e, _stage in kept)
    return {
        "session_start": begin.isoformat(),
        "session_end": stop.isoformat(),
        "stage_start_offset_second": [int((s - begin).total_seconds()) for s, _, _ in staged],
        "stage_end_offset_second": [int((e - begin).total_seconds()) for _, e, _ in staged],
        "stage_type": [stage for _, _, stage in staged],
    }


def _night(
    night: date, kept: list[SleepRecord], sources: Sequence[Source]
) -> dict[str, Any] | None:
    """A night's summary from the records of its source (`_night_source`)."""
    source = kept[0][0]
    begin = min(s for _, s, _e, _stage in kept)
    stop = max(e for _, _s, e, _stage in kept)
    seconds = dict.fromkeys(("asleep", "light", "deep", "rem", "awake", "in_bed"), 0)
    for _, s, e, stage in kept:
        seconds[stage] += int((e - s).total_seconds())
    total = sum(seconds[stage] for stage in _ASLEEP)
    duration = int((stop - begin).total_seconds())
    if duration <= 0:
        return None
    staged = any(seconds[stage] for stage in ("light", "deep", "rem", "awake"))
    awake = seconds["awake"] if staged else max(0, duration - total)
    return {
        "calendar_date": night.isoformat(),
        "bedtime_start": begin.isoformat(),
        "bedtime_stop": stop.isoformat(),
        "timezone_offset": _offset(begin),
        "type": "long_sleep" if duration >= 3 * 3600 else "short_sleep",
        "duration": duration,
        "total": total,
        "awake": awake,
        "light": seconds["light"],
        "rem": seconds["rem"],
        "deep": seconds["deep"],
        "efficiency": round(100 * total / duration, 1),
        "latency": None,
        "score": None,
        "hr_lowest": None,
        "hr_average": None,
        "average_hrv": None,
        "respiratory_rate": None,
        "temperature_delta": None,
        "source": sources[source].context(),
    }


class AppleHealthKit:
    """The provider port for `apple_health_kit` connections made by an import: the data
    arrives only by upload, so a daily sync finds nothing new (and no pull fails)."""

    history_days = 0

    def availability(
        self, resources: Sequence[str], grant: OAuthGrant | None = None
    ) -> dict[str, Any]:
        return offered_availability(resources, set(RESOURCES))

    def fetch(
        self, target: PullTarget, start: date, end: date, now: datetime, attempt: int
    ) -> dict[date, Any]:
        return {}

    def authorization_url(
        self, redirect_uri: str, client: OAuthClient | None, state: str, code_challenge: str
    ) -> str:
        raise OAuthNotSupported("Apple Health is imported from the Health app's export.")

    def exchange(
        self, code: str, redirect_uri: str, client: OAuthClient | None, code_verifier: str
    ) -> OAuthGrant:
        raise OAuthNotSupported("Apple Health is imported from the Health app's export.")

    def revoke(self, team_id: UUID, client_id: str, tokens: ProviderTokens) -> None:
        """No grant at a maker to end: the data was uploaded."""


Reader = Callable[[Path, UUID], AppleHealthReading]
