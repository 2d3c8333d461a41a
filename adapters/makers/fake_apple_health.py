"""A synthetic Apple Health export, written as the Health app writes one (`export.zip`
holding `apple_health_export/export.xml`): the sandbox's stand-in for a person's phone,
for the tests, the benchmark and a try of the import by hand.

    .venv/bin/python -m healthledger.adapters.makers.fake_apple_health export.zip --days 30

The export is of one synthetic person in Europe/Berlin (so its local times cross daylight
saving changes), with the sources a real one has: the watch (heart rate, energy, steps,
sleep stages, workouts), the phone (steps, distance, time in bed), a scale's app (weight,
body fat) and a glucose sensor's app (glucose in mg/dL). Values are a function of the
instant only, so the same arguments write the same file. The XML is written as it is
generated, and zipped as it is written: a 500 MB export needs no more memory than a small
one. `keep=True` also returns every record written, for the tests' own sums.
"""

from __future__ import annotations

import argparse
import math
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import IO
from xml.sax.saxutils import quoteattr
from zoneinfo import ZoneInfo

ZONE = ZoneInfo("Europe/Berlin")
MEMBER = "apple_health_export/export.xml"
WATCH = (
    "Jane's Apple Watch",
    "<<HKDevice: 0x283ff2c10>, name:Apple Watch, manufacturer:Apple Inc., model:Watch, "
    "hardware:Watch6,1, software:10.1>",
)
PHONE = (
    "Jane's iPhone",
    "<<HKDevice: 0x283ff2d00>, name:iPhone, manufacturer:Apple Inc., model:iPhone, "
    "hardware:iPhone14,2, software:17.1>",
)
SCALE = ("Health Mate", None)
SENSOR = ("Dexcom G7", None)
CUFF = ("OMRON connect", None)
MINDFUL = "HKCategoryTypeIdentifierMindfulSession"
SYSTOLIC = "HKQuantityTypeIdentifierBloodPressureSystolic"
DIASTOLIC = "HKQuantityTypeIdentifierBloodPressureDiastolic"
BIRTH_DATE = "1985-06-15"

_HEADER = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE HealthData [
<!-- HealthKit Export Version: 14 -->
<!ELEMENT HealthData (ExportDate,Me,(Record|Correlation|Workout|ActivitySummary)*)>
<!ELEMENT Correlation ((MetadataEntry|Record)*)>
<!ATTLIST HealthData
  locale CDATA #REQUIRED
>
<!ELEMENT ExportDate EMPTY>
<!ATTLIST ExportDate
  value CDATA #REQUIRED
>
<!ELEMENT Me EMPTY>
<!ELEMENT Record ((MetadataEntry|HeartRateVariabilityMetadataList)*)>
<!ATTLIST Record
  type          CDATA #REQUIRED
  unit          CDATA #IMPLIED
  value         CDATA #IMPLIED
  sourceName    CDATA #REQUIRED
  sourceVersion CDATA #IMPLIED
  device        CDATA #IMPLIED
  creationDate  CDATA #IMPLIED
  startDate     CDATA #REQUIRED
  endDate       CDATA #REQUIRED
>
<!ELEMENT MetadataEntry EMPTY>
<!ELEMENT Workout ((MetadataEntry|WorkoutEvent|WorkoutStatistics|WorkoutRoute)*)>
<!ELEMENT WorkoutStatistics EMPTY>
<!ELEMENT ActivitySummary EMPTY>
]>
<HealthData locale="en_US">
"""


@dataclass(frozen=True)
class Written:
    """One record as written (for the tests): its type, source, instants and value."""

    type: str
    source: str
    start: datetime
    end: datetime
    value: str
    unit: str | None


@dataclass
class ExportShape:
    """What an export holds: how many days from `first_day`, and how often each kind of
    record is taken (minutes)."""

    first_day: date = date(2024, 3, 25)
    days: int = 14
    heart_every: int = 2
    amounts_every: int = 30
    vitals_every: int = 60
    birth_date: str = BIRTH_DATE
    # A workout every this many days (with its statistics).
    workout_every: int = 2
    # Changes a record's value: (type, index of that type's record) -> new value.
    changed: dict[tuple[str, int], str] = field(default_factory=dict)


def _stamp(moment: datetime) -> str:
    return moment.astimezone(ZONE).strftime("%Y-%m-%d %H:%M:%S %z")


def _minutes(day: date, every: int, offset: int = 0) -> Iterator[datetime]:
    """The instants of a local day, every `every` minutes (in UTC: a DST day is 23 or
    25 hours long, as the person lived it)."""
    start = datetime.combine(day, time(0), ZONE).astimezone(UTC)
    end = datetime.combine(day + timedelta(days=1), time(0), ZONE).astimezone(UTC)
    moment = start + timedelta(minutes=offset)
    while moment < end:
        yield moment
        moment += timedelta(minutes=every)


def _wave(moment: datetime, base: float, spread: float, period_h: float = 24.0) -> float:
    hours = moment.timestamp() / 3600
    return base + spread * math.sin(2 * math.pi * hours / period_h) + (hours * 7.3 % 1 - 0.5)


class _Writer:
    def __init__(self, out: IO[bytes], shape: ExportShape, keep: bool) -> None:
        self.out = out
        self.shape = shape
        self.kept: list[Written] | None = [] if keep else None
        self.index: dict[str, int] = {}
        self.pending: list[str] = []

    def write(self, text: str) -> None:
        self.pending.append(text)
        if len(self.pending) >= 4096:
            self.flush()

    def flush(self) -> None:
        self.out.write("".join(self.pending).encode())
        self.pending = []

    def record(
        self,
        kind: str,
        source: tuple[str, str | None],
        start: datetime,
        end: datetime,
        value: str,
        unit: str | None,
    ) -> None:
        number = self.index.get(kind, 0)
        self.index[kind] = number + 1
        value = self.shape.changed.get((kind, number), value)
        name, device = source
        attributes = [
            f"type={quoteattr(kind)}",
            f"sourceName={quoteattr(name)}",
            'sourceVersion="17.1"',
        ]
        if device is not None:
            attributes.append(f"device={quoteattr(device)}")
        if unit is not None:
            attributes.append(f"unit={quoteattr(unit)}")
        stamp = _stamp(start)
        attributes += [
            f'creationDate="{_stamp(end)}"',
            f'startDate="{stamp}"',
            f'endDate="{_stamp(end)}"',
            f"value={quoteattr(value)}",
        ]
        self.write(f" <Record {' '.join(attributes)}/>\n")
        if self.kept is not None:
            self.kept.append(Written(kind, name, start, end, value, unit))


Series = Callable[[datetime], str]


def _quantities(shape: ExportShape) -> list[tuple[str, tuple[str, str | None], int, str, Series]]:
    """(type, source, every, unit, value at an instant) of each quantity written."""
    return [
        (
            "HKQuantityTypeIdentifierHeartRate",
            WATCH,
            shape.heart_every,
            "count/min",
            lambda m: str(round(_wave(m, 68, 12))),
        ),
        (
            "HKQuantityTypeIdentifierStepCount",
            WATCH,
            shape.amounts_every,
            "count",
            lambda m: str(round(_wave(m, 300, 250) + 260)),
        ),
        (
            "HKQuantityTypeIdentifierStepCount",
            PHONE,
            shape.amounts_every,
            "count",
            lambda m: str(round(_wave(m, 120, 100) + 110)),
        ),
        (
            "HKQuantityTypeIdentifierDistanceWalkingRunning",
            PHONE,
            shape.amounts_every,
            "km",
            lambda m: f"{(_wave(m, 0.2, 0.15) + 0.16):.4f}",
        ),
        (
            "HKQuantityTypeIdentifierActiveEnergyBurned",
            WATCH,
            shape.amounts_every,
            "kcal",
            lambda m: f"{(_wave(m, 14, 12) + 13):.3f}",
        ),
        (
            "HKQuantityTypeIdentifierBasalEnergyBurned",
            WATCH,
            shape.amounts_every,
            "kJ",
            lambda m: f"{(_wave(m, 140, 6)):.2f}",
        ),
        (
            "HKQuantityTypeIdentifierFlightsClimbed",
            PHONE,
            shape.vitals_every,
            "count",
            lambda m: str(round(abs(_wave(m, 1, 1)))),
        ),
        (
            "HKQuantityTypeIdentifierHeartRateVariabilitySDNN",
            WATCH,
            shape.vitals_every,
            "ms",
            lambda m: f"{_wave(m, 48, 12):.3f}",
        ),
        (
            "HKQuantityTypeIdentifierOxygenSaturation",
            WATCH,
            shape.vitals_every,
            "%",
            lambda m: f"{min(1.0, _wave(m, 0.97, 0.01) / 100 + 0.965):.2f}",
        ),
        (
            "HKQuantityTypeIdentifierRespiratoryRate",
            WATCH,
            shape.vitals_every,
            "count/min",
            lambda m: f"{_wave(m, 14.5, 1.5):.1f}",
        ),
        (
            "HKQuantityTypeIdentifierBloodGlucose",
            SENSOR,
            max(5, shape.vitals_every // 4),
            "mg/dL",
            lambda m: str(round(_wave(m, 100, 20))),
        ),
        (
            "HKQuantityTypeIdentifierBodyTemperature",
            WATCH,
            shape.vitals_every * 6,
            "degF",
            lambda m: f"{_wave(m, 97.9, 0.5):.1f}",
        ),
    ]


def write_export(
    path: Path, shape: ExportShape | None = None, *, keep: bool = False
) -> list[Written]:
    """Write the export to `path` (a zip); the records written when `keep`."""
    shape = shape or ExportShape()
    with (
        zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive,
        archive.open(MEMBER, "w", force_zip64=True) as out,
    ):
        writer = _Writer(out, shape, keep)
        _write(writer, shape)
        writer.flush()
    return writer.kept or []


def _write(writer: _Writer, shape: ExportShape) -> None:
    last = shape.first_day + timedelta(days=shape.days - 1)
    exported = datetime.combine(last + timedelta(days=1), time(9), ZONE)
    writer.write(_HEADER)
    writer.write(f' <ExportDate value="{_stamp(exported)}"/>\n')
    writer.write(
        f' <Me HKCharacteristicTypeIdentifierDateOfBirth="{shape.birth_date}"'
        ' HKCharacteristicTypeIdentifierBiologicalSex="HKBiologicalSexFemale"'
        ' HKCharacteristicTypeIdentifierBloodType="HKBloodTypeNotSet"'
        ' HKCharacteristicTypeIdentifierFitzpatrickSkinType="HKFitzpatrickSkinTypeNotSet"'
        ' HKCharacteristicTypeIdentifierCardioFitnessMedicationsUse="None"/>\n'
    )
    days = [shape.first_day + timedelta(days=n) for n in range(shape.days)]
    # Records grouped by type, each type's in time order, as the Health app writes them.
    for kind, source, every, unit, value_at in _quantities(shape):
        for day in days:
            for moment in _minutes(day, every):
                cumulative = unit not in ("count/min", "ms", "%", "mg/dL", "degF")
                end = moment + timedelta(minutes=every if cumulative else 0)
                writer.record(kind, source, moment, end, value_at(moment), unit)
    for day in days:
        if day.toordinal() % 2 == 0:
            morning = datetime.combine(day, time(7, 5), ZONE)
            weight = f"{72 + (day.toordinal() % 7) / 10:.1f}"
            writer.record("HKQuantityTypeIdentifierBodyMass", SCALE, morning, morning, weight, "kg")
            fat = f"{0.21 + (day.toordinal() % 5) / 1000:.3f}"
            writer.record(
                "HKQuantityTypeIdentifierBodyFatPercentage", SCALE, morning, morning, fat, "%"
            )
    for day in days:
        noon = datetime.combine(day, time(12), ZONE)
        writer.record(
            "HKQuantityTypeIdentifierRestingHeartRate", WATCH, noon, noon, "56", "count/min"
        )
    for day in days:
        _pressure(writer, datetime.combine(day, time(8, 15), ZONE), day.toordinal())
        session = datetime.combine(day, time(12, 30), ZONE)
        writer.record(
            MINDFUL,
            WATCH,
            session,
            session + timedelta(minutes=10),
            "HKCategoryValueNotApplicable",
            None,
        )
    height = datetime.combine(shape.first_day, time(8), ZONE)
    writer.record("HKQuantityTypeIdentifierHeight", PHONE, height, height, "1.72", "m")
    for day in days:
        _night(writer, day)
    for number, day in enumerate(days):
        if number % shape.workout_every == 0:
            _workout(writer, day)
    for day in days:
        # The rings' own figure (the watch's, not a sum of the energy records).
        energy = round(_wave(datetime.combine(day, time(12), ZONE), 420, 60))
        writer.write(
            f' <ActivitySummary dateComponents="{day.isoformat()}"'
            f' activeEnergyBurned="{energy}" activeEnergyBurnedGoal="500"'
            ' activeEnergyBurnedUnit="kcal" appleMoveTime="0" appleMoveTimeGoal="0"'
            ' appleExerciseTime="34" appleExerciseTimeGoal="30" appleStandHours="11"'
            ' appleStandHoursGoal="12"/>\n'
        )
    writer.write("</HealthData>\n")


# The night that ends on the morning of a day: the watch's stages, the phone's time in bed.
_STAGES = (
    ("HKCategoryValueSleepAnalysisAwake", 10),
    ("HKCategoryValueSleepAnalysisAsleepCore", 95),
    ("HKCategoryValueSleepAnalysisAsleepDeep", 60),
    ("HKCategoryValueSleepAnalysisAsleepCore", 80),
    ("HKCategoryValueSleepAnalysisAsleepREM", 45),
    ("HKCategoryValueSleepAnalysisAwake", 5),
    ("HKCategoryValueSleepAnalysisAsleepCore", 90),
    ("HKCategoryValueSleepAnalysisAsleepREM", 40),
)
SLEEP = "HKCategoryTypeIdentifierSleepAnalysis"


def _night(writer: _Writer, day: date) -> None:
    bedtime = datetime.combine(day - timedelta(days=1), time(23, 10), ZONE)
    writer.record(
        SLEEP,
        PHONE,
        bedtime - timedelta(minutes=20),
        bedtime + timedelta(minutes=sum(m for _, m in _STAGES) + 15),
        "HKCategoryValueSleepAnalysisInBed",
        None,
    )
    moment = bedtime.astimezone(UTC)
    for stage, minutes in _STAGES:
        end = moment + timedelta(minutes=minutes)
        writer.record(SLEEP, WATCH, moment, end, stage, None)
        moment = end


def _pressure(writer: _Writer, taken: datetime, seed: int) -> None:
    """A cuff's reading: its two records inside the correlation, and beside it, as the
    Health app writes them."""
    systolic, diastolic = str(112 + seed % 17), str(70 + seed % 11)
    name, _ = CUFF
    writer.write(
        f' <Correlation type="HKCorrelationTypeIdentifierBloodPressure" sourceName="{name}"'
        f' creationDate="{_stamp(taken)}" startDate="{_stamp(taken)}"'
        f' endDate="{_stamp(taken)}">\n'
    )
    writer.record(DIASTOLIC, CUFF, taken, taken, diastolic, "mmHg")
    writer.record(SYSTOLIC, CUFF, taken, taken, systolic, "mmHg")
    writer.write(" </Correlation>\n")
    writer.record(SYSTOLIC, CUFF, taken, taken, systolic, "mmHg")
    writer.record(DIASTOLIC, CUFF, taken, taken, diastolic, "mmHg")


def _workout(writer: _Writer, day: date) -> None:
    start = datetime.combine(day, time(18, 30), ZONE)
    end = start + timedelta(minutes=42)
    name, device = WATCH
    writer.write(
        f' <Workout workoutActivityType="HKWorkoutActivityTypeRunning" duration="42"'
        f' durationUnit="min" sourceName={quoteattr(name)} sourceVersion="10.1"'
        f' device={quoteattr(device or "")} creationDate="{_stamp(end)}"'
        f' startDate="{_stamp(start)}" endDate="{_stamp(end)}">\n'
        '  <MetadataEntry key="HKIndoorWorkout" value="0"/>\n'
        f'  <WorkoutStatistics type="HKQuantityTypeIdentifierActiveEnergyBurned"'
        f' startDate="{_stamp(start)}" endDate="{_stamp(end)}" sum="412.5" unit="kcal"/>\n'
        f'  <WorkoutStatistics type="HKQuantityTypeIdentifierDistanceWalkingRunning"'
        f' startDate="{_stamp(start)}" endDate="{_stamp(end)}" sum="7.25" unit="km"/>\n'
        f'  <WorkoutStatistics type="HKQuantityTypeIdentifierHeartRate"'
        f' startDate="{_stamp(start)}" endDate="{_stamp(end)}" average="148.6"'
        ' minimum="98" maximum="171" unit="count/min"/>\n'
        " </Workout>\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="Write a synthetic Apple Health export.zip.")
    parser.add_argument("path", type=Path)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--first-day", type=date.fromisoformat, default=date(2024, 3, 1))
    args = parser.parse_args()
    write_export(args.path, ExportShape(first_day=args.first_day, days=args.days))
    print(f"wrote {args.path} ({args.path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
