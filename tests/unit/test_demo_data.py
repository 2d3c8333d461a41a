"""Demo devices' data holds together as a body's does (issue 34: a demo night had its
lowest heart rate, 58, above its average, 53). A property test over many users' years:
every summary the demo provider makes is checked against the relations a real device's
data keeps."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from healthledger.adapters.providers.demo import DemoProvider
from healthledger.domain.connections.providers import PullTarget

USERS = [UUID(int=n) for n in range(1, 7)]
START, END = date(2025, 1, 1), date(2025, 12, 31)  # six people, a year each
NOW = datetime(2026, 1, 2, tzinfo=UTC)


def days(
    resource: str, provider: str = "oura", users: list[UUID] = USERS, end: date = END
) -> list[tuple[date, Any]]:
    found: list[tuple[date, Any]] = []
    for user in users:
        target = PullTarget(user_id=user, provider=provider, resource=resource, demo_failures={})
        found.extend(DemoProvider().fetch(target, START, end, NOW, attempt=1).items())
    assert len(found) >= 60, resource  # the check saw data
    return found


def test_a_night_holds_together() -> None:
    for day, night in days("sleep"):
        assert night["hr_lowest"] < night["hr_average"], (day, night)
        assert night["hr_lowest"] >= 35 and night["hr_average"] <= 90, (day, night)
        stages = night["awake"] + night["light"] + night["rem"] + night["deep"]
        assert abs(stages - night["duration"]) < 300, night  # 5-minute slots
        assert night["total"] == night["duration"] - night["awake"], night
        assert 0 < night["efficiency"] <= 100, night
        start = datetime.fromisoformat(night["bedtime_start"])
        stop = datetime.fromisoformat(night["bedtime_stop"])
        assert (stop - start).total_seconds() == night["duration"], night
        assert timedelta(hours=4) < stop - start < timedelta(hours=10), night


def test_a_days_heart_rates_hold_together() -> None:
    for day, activity in days("activity"):
        heart = activity["heart_rate"]
        assert (
            heart["min_bpm"]
            <= heart["resting_bpm"]
            < heart["avg_bpm"]
            < heart["avg_walking_bpm"]
            < heart["max_bpm"]
        ), (day, heart)
        assert activity["distance"] >= 0 and activity["steps"] >= 0, activity
        assert activity["calories_active"] <= activity["calories_total"], activity


def test_a_workouts_heart_rates_and_times_hold_together() -> None:
    for day, sessions in days("workouts"):
        for workout in sessions:
            assert workout["average_hr"] < workout["max_hr"] <= 220, (day, workout)
            start = datetime.fromisoformat(workout["time_start"])
            end = datetime.fromisoformat(workout["time_end"])
            assert start < end and end - start < timedelta(hours=3), workout


def test_blood_pressure_readings_hold_together() -> None:
    for day, readings in days("blood_pressure"):
        for reading in readings:
            assert reading["systolic"] > reading["diastolic"] + 15, (day, reading)


@pytest.mark.parametrize(("resource", "low", "high"), [("heartrate", 30, 220)])
def test_series_stay_in_a_bodys_range(resource: str, low: float, high: float) -> None:
    # Two months of one person's minute samples (a year of six is 3 million of them).
    checked = days(resource, users=USERS[:1], end=START + timedelta(days=59))
    assert len(checked) == 60
    for day, samples in checked:
        values = [sample["value"] for sample in samples]
        assert values and low <= min(values) and max(values) <= high, day
