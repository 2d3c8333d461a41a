"""Apple Health imports (docs/makers/apple_health.md) on SQLite and PostgreSQL: an export
written as the Health app writes one (adapters/makers/fake_apple_health.py: a zip with
export.xml, thousands of records of each type, several sources, local times across a
daylight saving change, workouts with statistics, nights across midnight) uploaded through
the team API and the command line, read into the summaries and timeseries, imported again
without changing anything, changed in one record, refused in every bad form, and erased
with the user."""

from __future__ import annotations

import io
import json
import os
import threading
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from healthledger.adapters.cli import main
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.makers.fake_apple_health import (
    DIASTOLIC,
    PHONE,
    SLEEP,
    SYSTOLIC,
    WATCH,
    ZONE,
    ExportShape,
    Written,
    write_export,
)
from healthledger.adapters.reference import rules_at
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.imports import DataImport
from healthledger.domain.context import CommandContext
from healthledger.domain.webhooks.announcements import announcements

from tests.clocks import Clock
from tests.conftest import Team, create_user
from tests.stream_ids import stream_of_connection, stream_of_feed

PROVIDER = "apple_health_kit"
SHAPE = ExportShape()  # 14 days from 2024-03-25: Berlin moves to summer time on the 31st
FIRST, LAST = SHAPE.first_day, SHAPE.first_day + timedelta(days=SHAPE.days - 1)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Written]]:
    path = tmp_path_factory.mktemp("exports") / "export.zip"
    return path, write_export(path, SHAPE, keep=True)


@pytest.fixture
def svc(settings: Settings, tmp_path: Path, clock: Clock) -> Iterator[Service]:
    built = build_service(
        settings.model_copy(
            update={"import_dir": tmp_path / "imports", "apple_health_max_xml_bytes": 50_000_000}
        ),
        clock=clock,
    )
    yield built
    built.close()


@contextmanager
def served(
    settings: Settings, clock: Clock | None = None, **changed: Any
) -> Iterator[tuple[Service, Team, TestClient]]:
    """A service of its own (settings changed), its team and its team API: for the tests
    that need other limits or another clock than the module's `svc`."""
    built = build_service(settings.model_copy(update=changed), clock=clock or Clock())
    try:
        boot = built.bootstrap()
        assert boot is not None
        with TestClient(create_team_api(built), raise_server_exceptions=False) as api:
            yield built, Team(boot.team_id, boot.team_api_key.plain), api
    finally:
        built.close()


def upload(api: TestClient, team: Team, user_id: str, body: bytes, **headers: str) -> Any:
    return api.post(
        f"/v2/user/{user_id}/import/apple_health",
        content=body,
        headers={**team.headers, "content-type": "application/zip", **headers},
    )


def imported(svc: Service, api: TestClient, team: Team, user_id: str, body: bytes) -> Any:
    """Upload, run the import worker as the scheduler does, and read the import."""
    response = upload(api, team, user_id, body)
    assert response.status_code == 202, response.text
    accepted = response.json()
    assert accepted["status"] == "received"
    assert svc.jobs.run_due_imports() == 1
    status = api.get(
        f"/v2/user/{user_id}/import/apple_health/{accepted['import_id']}", headers=team.headers
    )
    assert status.status_code == 200, status.text
    return status.json()


def get(api: TestClient, team: Team, path: str, **params: Any) -> Any:
    response = api.get(path, params=params, headers=team.headers)
    assert response.status_code == 200, response.text
    return response.json()


def feed_events(svc: Service, user_id: str, resource: str) -> list[Any]:
    feed_id = stream_of_feed(svc, UUID(user_id), PROVIDER, resource)
    return list(svc.ledger.events.get(feed_id))


def announced(svc: Service, user_id: str, resource: str, since: int = 0) -> list[str]:
    """The webhook event types the feed's events from `since` on announce."""
    feed = svc.ledger.find(stream_of_feed(svc, UUID(user_id), PROVIDER, resource))
    return [
        a.event_type
        for event in feed_events(svc, user_id, resource)[since:]
        for a in announcements(event, feed, rules_at(event.timestamp))
    ]


def of(records: list[Written], kind: str, source: str | None = None) -> list[Written]:
    return [r for r in records if r.type == kind and (source is None or r.source == source)]


# -- the whole export, read -------------------------------------------------------------------


def test_an_uploaded_export_is_read_into_the_summaries_and_timeseries(
    svc: Service, api: TestClient, home: Team, exported: tuple[Path, list[Written]]
) -> None:
    path, records = exported
    user = create_user(api, home, "ava", fallback_birth_date="1985-06-15")["user_id"]
    status = imported(svc, api, home, user, path.read_bytes())
    assert status["status"] == "success", status
    assert status["progress"] == 1.0
    assert status["counts"]["records_read"] == len(records)
    assert status["counts"]["records_skipped"] == 0
    assert status["counts"]["workouts"] == 7
    assert status["oldest_day"] <= str(FIRST) and status["newest_day"] >= str(LAST)

    # The user has an apple_health_kit connection, and each resource a pull that
    # succeeded: announced as historical.data.<resource>.created, once.
    [provider] = get(api, home, f"/v2/user/providers/{user}")["providers"]
    assert provider["slug"] == PROVIDER and provider["status"] == "connected"
    # What an export gives is available; what the catalog offers beyond it is not.
    availability = provider["resource_availability"]
    assert set(availability) == set(svc.catalog[PROVIDER].supported_resources)
    assert availability["heartrate"]["status"] == "available"
    assert availability["sleep_cycle"]["status"] == "available"
    assert availability["electrocardiogram"]["status"] == "unavailable"
    for resource in ("heartrate", "steps", "sleep", "workouts", "activity", "body"):
        assert announced(svc, user, resource) == [f"historical.data.{resource}.created"]

    # Heart rate: every watch sample of a UTC day, at its instant.
    day = date(2024, 3, 31)  # the day Berlin's clocks go forward
    start = datetime(2024, 3, 31, tzinfo=UTC)
    samples = get(api, home, f"/v2/timeseries/{user}/heartrate", start_date=str(day))
    written = [r for r in of(records, "HKQuantityTypeIdentifierHeartRate") if r.start.date() == day]
    assert len(written) == 24 * 30
    assert [(datetime.fromisoformat(s["timestamp"]), s["value"]) for s in samples] == [
        (r.start, int(r.value)) for r in sorted(written, key=lambda r: r.start)
    ]
    assert {s["unit"] for s in samples} == {"bpm"}

    # Steps: the watch counted more than the phone, so its samples are the day's; never
    # both (a step counted twice).
    steps = get(api, home, f"/v2/timeseries/{user}/steps", start_date=str(day))
    by_watch = [
        r
        for r in of(records, "HKQuantityTypeIdentifierStepCount", WATCH[0])
        if start <= r.start < start + timedelta(days=1)
    ]
    assert sum(s["value"] for s in steps) == sum(int(r.value) for r in by_watch)
    assert all("start" in s and "end" in s for s in steps)

    # Units: SpO2 fractions as %, glucose mg/dL as mmol/L, temperature °F as °C, kJ as kcal.
    spo2 = get(api, home, f"/v2/timeseries/{user}/blood_oxygen", start_date=str(day))
    assert spo2 and all(90 <= s["value"] <= 100 and s["unit"] == "%" for s in spo2)
    glucose = get(api, home, f"/v2/timeseries/{user}/glucose", start_date=str(day))
    first_glucose = next(
        r for r in of(records, "HKQuantityTypeIdentifierBloodGlucose") if r.start.date() == day
    )
    assert glucose[0]["value"] == round(int(first_glucose.value) / 18.0156, 1)
    temperature = get(api, home, f"/v2/timeseries/{user}/body_temperature", start_date=str(day))
    assert all(35 < s["value"] < 38 and s["unit"] == "°C" for s in temperature)
    basal = get(api, home, f"/v2/timeseries/{user}/calories_basal", start_date=str(day))
    assert basal and all(30 < s["value"] < 40 for s in basal)  # ~140 kJ a half hour

    # Blood pressure: a reading a morning, written inside its correlation and beside it,
    # kept once; mindful sessions as minutes.
    pressure = get(api, home, f"/v2/timeseries/{user}/blood_pressure", start_date=str(day))
    morning = next(r for r in of(records, SYSTOLIC) if r.start.date() == day)
    low = next(r for r in of(records, DIASTOLIC) if r.start == morning.start)
    assert [(p["systolic"], p["diastolic"], p["unit"]) for p in pressure] == [
        (int(morning.value), int(low.value), "mmHg")
    ]
    mindful = get(api, home, f"/v2/timeseries/{user}/mindfulness_minutes", start_date=str(day))
    assert [(m["value"], m["unit"]) for m in mindful] == [(10, "min")]

    # Sleep: the night to the morning of each day, across midnight, from the watch's
    # stages (not the phone's time in bed); the offset changes with summer time.
    sleeps = get(api, home, f"/v2/summary/sleep/{user}", start_date=str(FIRST), end_date=str(LAST))
    nights = {s["calendar_date"]: s for s in sleeps["sleep"]}
    assert len(nights) == SHAPE.days  # the first ends on the morning of the first day
    night = nights["2024-03-30"]
    assert night["bedtime_start"] == "2024-03-29T23:10:00+01:00"
    assert night["timezone_offset"] == 3600
    assert nights["2024-04-02"]["timezone_offset"] == 7200
    assert (night["deep"], night["rem"], night["awake"]) == (3600, 85 * 60, 15 * 60)
    assert night["light"] == (95 + 80 + 90) * 60
    assert night["total"] == night["light"] + night["deep"] + night["rem"]
    assert night["source"] == {
        "provider": PROVIDER,
        "type": "watch",
        "app_id": "com.apple.health",
    }
    # The phone's time in bed was in the file, and not taken for the night.
    assert of(records, SLEEP, PHONE[0])
    # Its stages, as the night's sleep cycle (the client's codes: 1 deep ... 4 awake).
    cycles = get(api, home, f"/v2/summary/sleep_cycle/{user}", start_date="2024-03-30")
    cycle = next(c for c in cycles["sleep_cycle"] if c["calendar_date"] == "2024-03-30")
    assert cycle["sleep_id"] == night["id"]
    assert cycle["stage_type"] == [4, 2, 1, 2, 3, 4, 2, 3]
    minutes = [10, 95, 60, 80, 45, 5, 90, 40]
    starts = [60 * sum(minutes[:n]) for n in range(len(minutes))]
    assert cycle["stage_start_offset_second"] == starts
    ends = [start + 60 * m for start, m in zip(starts, minutes, strict=True)]
    assert cycle["stage_end_offset_second"] == ends

    # Workouts: Apple's statistics, under a stable id of ours.
    workouts = get(
        api, home, f"/v2/summary/workouts/{user}", start_date=str(FIRST), end_date=str(LAST)
    )["workouts"]
    assert len(workouts) == 7
    workout = workouts[0]
    assert workout["sport"]["slug"] == "running"
    assert (workout["calories"], workout["distance"]) == (412, 7250.0)
    assert (workout["average_hr"], workout["max_hr"]) == (149, 171)
    assert workout["provider_id"].startswith("ahk-")

    # Activity per local day: the watch's steps (the larger source), the rings' energy.
    activity = get(
        api, home, f"/v2/summary/activity/{user}", start_date=str(FIRST), end_date=str(LAST)
    )["activity"]
    monday = next(a for a in activity if a["calendar_date"] == "2024-04-01")
    local_watch_steps = sum(
        int(r.value)
        for r in of(records, "HKQuantityTypeIdentifierStepCount", WATCH[0])
        if r.start.astimezone(ZONE).date() == date(2024, 4, 1)
    )
    assert monday["steps"] == local_watch_steps
    assert monday["heart_rate"]["resting_bpm"] == 56
    assert monday["high"] == 34.0

    # Body and profile (from <Me> and the height), the profile's birth date sealed.
    body = get(api, home, f"/v2/summary/body/{user}", start_date=str(FIRST), end_date=str(LAST))
    assert body["body"] and all(b["weight"] > 70 for b in body["body"])
    profile = get(api, home, f"/v2/summary/profile/{user}")
    assert (profile["height"], profile["birth_date"], profile["sex"]) == (
        172,
        "1985-06-15",
        "female",
    )
    # Nothing of the upload is left once its import has ended.
    assert list((svc.settings.import_dir or Path()).glob("*.zip")) == []


def test_an_export_imported_again_changes_nothing_and_one_changed_record_updates_its_day(
    svc: Service, api: TestClient, home: Team, exported: tuple[Path, list[Written]], tmp_path: Path
) -> None:
    path, records = exported
    user = create_user(api, home, "ben")["user_id"]
    assert imported(svc, api, home, user, path.read_bytes())["status"] == "success"
    stored = svc.health_data.count(UUID(user))
    marks = {r: len(feed_events(svc, user, r)) for r in ("heartrate", "workouts", "sleep")}

    again = imported(svc, api, home, user, path.read_bytes())
    assert again["status"] == "success"
    assert (again["counts"]["days_created"], again["counts"]["days_updated"]) == (0, 0)
    assert svc.health_data.count(UUID(user)) == stored
    assert {r: len(feed_events(svc, user, r)) for r in marks} == marks  # nothing announced

    # The same export with one heart rate changed and one workout edited (its energy).
    heart = of(records, "HKQuantityTypeIdentifierHeartRate")
    changed_at = heart[1000].start
    edited = tmp_path / "edited.zip"
    write_export(
        edited,
        ExportShape(changed={("HKQuantityTypeIdentifierHeartRate", 1000): "190"}),
    )
    rewritten = zipfile.ZipFile(edited).read("apple_health_export/export.xml")
    rewritten = rewritten.replace(b'sum="412.5" unit="kcal"', b'sum="500" unit="kcal"', 1)
    edited.write_bytes(_zipped(rewritten))
    changed = imported(svc, api, home, user, edited.read_bytes())
    assert changed["status"] == "success"
    assert changed["counts"]["days_created"] == 0
    assert svc.health_data.count(UUID(user)) == stored
    day = changed_at.astimezone(UTC).date()
    assert announced(svc, user, "heartrate", marks["heartrate"]) == ["daily.data.heartrate.updated"]
    [synced] = feed_events(svc, user, "heartrate")[marks["heartrate"] :]
    assert synced.updated_days == [day] and synced.created_days == []
    assert len(feed_events(svc, user, "sleep")) == marks["sleep"]
    # The workout is updated under its id, never added again.
    assert announced(svc, user, "workouts", marks["workouts"]) == ["daily.data.workouts.updated"]
    workouts = get(
        api, home, f"/v2/summary/workouts/{user}", start_date=str(FIRST), end_date=str(LAST)
    )["workouts"]
    assert len(workouts) == 7
    assert sorted(w["calories"] for w in workouts) == [412] * 6 + [500]
    samples = get(api, home, f"/v2/timeseries/{user}/heartrate", start_date=str(day))
    assert [s["value"] for s in samples if s["timestamp"] == changed_at.isoformat()] == [190]
    # The webhook the dispatcher sends for it carries the day as stored now.
    body = svc.dispatcher.payloads.build(
        event_type="daily.data.heartrate.updated",
        user_id=UUID(user),
        team_id=home.team_id,
        source_id=synced.originator_id,
        source_version=synced.originator_version,
        day=day,
    )
    assert body is not None
    sent = json.loads(body)
    assert sent["event_type"] == "daily.data.heartrate.updated"
    assert {"timestamp": changed_at.isoformat(), "value": 190, "unit": "bpm"} in (
        sent["data"]["data"]
    )


def _zipped(xml: bytes, name: str = "apple_health_export/export.xml") -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(name, xml)
    return out.getvalue()


# -- the command line -------------------------------------------------------------------------


def test_the_command_line_imports_in_the_foreground(
    svc: Service,
    api: TestClient,
    home: Team,
    exported: tuple[Path, list[Written]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, _ = exported
    user = create_user(api, home, "cli")["user_id"]
    settings = svc.settings
    monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY_FILE", str(settings.master_key_file))
    monkeypatch.setenv("HEALTHLEDGER_IMPORT_DIR", str(settings.import_dir))
    assert main(["import", "apple-health", "--user-id", user, str(path)]) == 0
    out = capsys.readouterr()
    assert '"status": "success"' in out.out
    assert "importing" in out.err  # the progress bar
    sleeps = get(api, home, f"/v2/summary/sleep/{user}", start_date=str(FIRST), end_date=str(LAST))
    assert len(sleeps["sleep"]) >= SHAPE.days - 1
    # A file that is not an export is refused at once, with nothing recorded.
    bad = path.with_name("bad.zip")
    bad.write_bytes(b"not a zip")
    assert main(["import", "apple-health", "--user-id", user, str(bad)]) == 1
    assert "not a zip archive" in capsys.readouterr().err


# -- bad input --------------------------------------------------------------------------------

_BOMB = b"""<?xml version="1.0"?>
<!DOCTYPE HealthData [
<!ENTITY a "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa">
<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">
]>
<HealthData locale="en_US"><Me HKCharacteristicTypeIdentifierDateOfBirth="&c;"/></HealthData>
"""


@pytest.mark.parametrize(
    ("body", "status", "error_type"),
    [
        (b"PK\x03\x04 this is no zip", 422, "not_a_zip"),
        (b"", 422, "not_a_zip"),
        (_zipped(b"<HealthData/>", "apple_health_export/export_cda.xml"), 422, "no_export_xml"),
    ],
)
def test_an_upload_that_is_no_export_is_refused_at_once_and_records_nothing(
    svc: Service, api: TestClient, home: Team, body: bytes, status: int, error_type: str
) -> None:
    user = create_user(api, home, "bad")["user_id"]
    response = upload(api, home, user, body)
    assert response.status_code == status, response.text
    # The documented 422 shape (ValidationErrors), the refusal's code as its type.
    [problem] = response.json()["detail"]
    assert problem["type"] == error_type and problem["loc"] == ["body"], problem
    assert svc.jobs.run_due_imports() == 0
    assert svc.ledger.find(stream_of_connection(svc, UUID(user), PROVIDER)) is None
    assert list((svc.settings.import_dir or Path()).glob("*.zip")) == []


def test_an_upload_of_another_type_or_over_the_limit_is_refused(
    settings: Settings, tmp_path: Path, exported: tuple[Path, list[Written]]
) -> None:
    with served(
        settings,
        import_dir=tmp_path / "imports",
        apple_health_max_upload_bytes=100_000,
        max_body_bytes=2048,  # the JSON body limit does not apply to an upload
    ) as (_, team, api):
        user = create_user(api, team, "big")["user_id"]
        body = exported[0].read_bytes()
        assert len(body) > 100_000
        too_big = upload(api, team, user, body)
        assert too_big.status_code == 413, too_big.text
        assert too_big.json()["detail"]["error_type"] == "TOO_LARGE"
        chunked = api.post(
            f"/v2/user/{user}/import/apple_health",
            content=iter([body[:60_000], body[60_000:]]),  # no Content-Length
            headers={**team.headers, "content-type": "application/zip"},
        )
        assert chunked.status_code == 413, chunked.text
        wrong = upload(api, team, user, b"{}", **{"content-type": "application/json"})
        assert wrong.status_code == 415, wrong.text
        fits = upload(api, team, user, _zipped(b"<HealthData locale='en'/>" + b" " * 5000))
        assert fits.status_code == 202, fits.text  # over max_body_bytes, under its own
        assert list((tmp_path / "imports").glob("*.part")) == []


@pytest.mark.parametrize(
    ("xml", "code"),
    [
        (b"<HealthData locale='en'><Record type='x'", "malformed_xml"),
        (_BOMB, "entities_refused"),
        (b"<Something/>", "not_an_export"),
        (b"<HealthData>" + b"<!-- padding -->" * 4000 + b"</HealthData>", "too_large"),
    ],
)
def test_a_broken_export_fails_its_import_with_a_fixed_reason_and_stores_nothing(
    settings: Settings, tmp_path: Path, xml: bytes, code: str
) -> None:
    with served(settings, import_dir=tmp_path / "imports", apple_health_max_xml_bytes=60_000) as (
        svc,
        team,
        api,
    ):
        user = create_user(api, team, "broken")["user_id"]
        status = imported(svc, api, team, user, _zipped(xml))
        assert status["status"] == "failure"
        assert status["failure_code"] == code
        assert "aaaa" not in (status["failure_reason"] or "")  # never the file's text
        assert svc.health_data.count(UUID(user)) == 0
        assert svc.ledger.find(stream_of_connection(svc, UUID(user), PROVIDER)) is None
        assert list((tmp_path / "imports").glob("*.zip")) == []


def test_an_export_of_another_person_is_refused_before_anything_is_stored(
    svc: Service, api: TestClient, home: Team, exported: tuple[Path, list[Written]]
) -> None:
    user = create_user(api, home, "cid", fallback_birth_date="1990-02-02")["user_id"]
    status = imported(svc, api, home, user, exported[0].read_bytes())
    assert (status["status"], status["failure_code"]) == ("failure", "export_of_another_person")
    assert "1985" not in status["failure_reason"] and "1990" not in status["failure_reason"]
    assert svc.health_data.count(UUID(user)) == 0


def test_another_teams_user_and_import_are_not_found(
    svc: Service, api: TestClient, home: Team, exported: tuple[Path, list[Written]]
) -> None:
    ctx = CommandContext.system("test:setup")
    org_id = svc.teams.create_organization(ctx, "Other org")
    team_id = svc.teams.create_team(ctx, org_id, "Other team", "eu")
    other = Team(team_id, svc.teams.issue_team_api_key(ctx, team_id).plain)
    user = create_user(api, home, "dee")["user_id"]
    response = upload(api, other, user, exported[0].read_bytes())
    assert response.status_code == 404, response.text
    accepted = upload(api, home, user, exported[0].read_bytes()).json()
    path = f"/v2/user/{user}/import/apple_health/{accepted['import_id']}"
    assert api.get(path, headers=other.headers).status_code == 404
    assert api.get(path, headers=home.headers).status_code == 200
    unknown = f"/v2/user/{user}/import/apple_health/{UUID(int=7)}"
    assert api.get(unknown, headers=home.headers).status_code == 404
    theirs = create_user(api, other, "eve")["user_id"]
    mixed = f"/v2/user/{theirs}/import/apple_health/{accepted['import_id']}"
    assert api.get(mixed, headers=other.headers).status_code == 404


def test_an_import_read_as_of_an_instant_is_as_it_stood_then(
    svc: Service, api: TestClient, home: Team, clock: Clock, exported: tuple[Path, list[Written]]
) -> None:
    user = create_user(api, home, "fay", fallback_birth_date="1985-06-15")["user_id"]
    clock.advance(timedelta(minutes=1))
    before = clock()
    clock.advance(timedelta(minutes=1))
    accepted = upload(api, home, user, exported[0].read_bytes()).json()
    received = clock()
    clock.advance(timedelta(minutes=1))
    assert svc.jobs.run_due_imports() == 1
    path = f"/v2/user/{user}/import/apple_health/{accepted['import_id']}"

    def as_of(instant: datetime, team: Team = home) -> Any:
        return api.get(path, params={"as_of": instant.isoformat()}, headers=team.headers)

    then = as_of(received)
    assert then.status_code == 200, then.text
    assert then.json()["status"] == "received" and then.json()["ended_at"] is None
    now = get(api, home, path)
    assert now["status"] == "success"
    assert as_of(clock()).json() == now
    # Not received yet at that instant: as unknown as an import that never was.
    assert as_of(before).status_code == 404
    # Another team's key finds nothing at any instant.
    ctx = CommandContext.system("test:setup")
    team_id = svc.teams.create_team(ctx, svc.teams.create_organization(ctx, "Other"), "T", "eu")
    other = Team(team_id, svc.teams.issue_team_api_key(ctx, team_id).plain)
    assert as_of(clock(), other).status_code == 404


# -- restarts, two workers, erasure -----------------------------------------------------------


def test_an_import_whose_worker_died_is_taken_over_after_its_lease_and_run_once(
    svc: Service, api: TestClient, home: Team, exported: tuple[Path, list[Written]], clock: Clock
) -> None:
    user = create_user(api, home, "fay")["user_id"]
    accepted = upload(api, home, user, exported[0].read_bytes()).json()
    import_id = UUID(accepted["import_id"])
    # A worker claimed it and died: the claim is recorded, nothing after it.
    job = svc.ledger.find(import_id)
    assert isinstance(job, DataImport)
    job.start(CommandContext.system("test:dead-worker"), clock())
    svc.ledger.save(job)
    assert svc.jobs.run_due_imports() == 0  # its lease runs
    clock.advance(timedelta(minutes=11))
    assert svc.jobs.run_due_imports() == 1
    assert svc.jobs.run_due_imports() == 0  # ended: never run again
    done = svc.ledger.find(import_id)
    assert isinstance(done, DataImport) and done.status == "success" and done.attempts == 2
    assert announced(svc, user, "heartrate") == ["historical.data.heartrate.created"]


def test_two_workers_on_one_import_run_it_once(
    svc: Service, api: TestClient, home: Team, exported: tuple[Path, list[Written]]
) -> None:
    user = create_user(api, home, "hal")["user_id"]
    import_id = UUID(upload(api, home, user, exported[0].read_bytes()).json()["import_id"])
    barrier = threading.Barrier(3)
    results: list[str | None] = []

    def work() -> None:
        barrier.wait()
        results.append(svc.imports.run(import_id, on_progress=None))

    threads = [threading.Thread(target=work) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    kinds = [type(e).__name__ for e in svc.ledger.events.get(import_id)]
    assert kinds.count("ImportStarted") == 1
    assert kinds.count("ImportSucceeded") == 1
    assert sorted(results, key=str) == [None, None, "success"]
    assert announced(svc, user, "sleep") == ["historical.data.sleep.created"]


class Ticking(Clock):
    """A clock that moves on half a minute each time it is read: a long import, compressed."""

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=30)
        return self.now


def test_a_long_import_reports_progress_while_it_reads_which_renews_its_lease(
    settings: Settings, tmp_path: Path, exported: tuple[Path, list[Written]]
) -> None:
    with served(settings, Ticking(), import_dir=tmp_path) as (svc, team, api):
        user = create_user(api, team, "ida")["user_id"]
        status = imported(svc, api, team, user, exported[0].read_bytes())
        assert status["status"] == "success"
        events = list(svc.ledger.events.get(UUID(status["import_id"])))
    progressed = [e for e in events if isinstance(e, DataImport.ImportProgressed)]
    # Some while the file is read (under 0.7), some while its days are stored.
    assert any(e.progress < 0.7 for e in progressed)
    assert any(e.progress > 0.7 for e in progressed)
    assert [e.progress for e in progressed] == sorted(e.progress for e in progressed)
    assert progressed[-1].counts["records_read"] == len(exported[1])


def test_what_a_crashed_process_left_is_swept_once_long_untouched(svc: Service) -> None:
    folder = svc.settings.import_dir
    assert folder is not None
    folder.mkdir(parents=True, exist_ok=True)
    old, fresh = time.time() - 2 * 86400, time.time()
    made: dict[str, tuple[Path, Path]] = {}
    for name, when in (("old", old), ("fresh", fresh)):
        cut_off = folder / f"{UUID(int=len(made) + 1)}.part"
        cut_off.write_bytes(b"PK")
        spill = folder / f"apple-health-{name}"
        spill.mkdir()
        (spill / "spill.sqlite3").write_bytes(b"")
        for path in (cut_off, spill / "spill.sqlite3", spill):
            os.utime(path, (when, when))
        made[name] = (cut_off, spill)
    assert svc.jobs.run_due_imports() == 0  # the worker's look sweeps them
    assert not any(path.exists() for path in made["old"])
    assert all(path.exists() for path in made["fresh"])


def test_erasure_removes_the_imported_data(
    svc: Service, api: TestClient, home: Team, exported: tuple[Path, list[Written]], clock: Clock
) -> None:
    user = create_user(api, home, "gus")["user_id"]
    assert imported(svc, api, home, user, exported[0].read_bytes())["status"] == "success"
    assert svc.health_data.count(UUID(user)) > 0
    assert api.delete(f"/v2/user/{user}", headers=home.headers).status_code == 200
    clock.advance(timedelta(days=8))
    assert svc.users.erase_user(CommandContext.system("test:erase"), UUID(user))
    assert svc.health_data.count(UUID(user)) == 0
    # An upload for the erased user is a 404, as any call about them.
    assert upload(api, home, user, exported[0].read_bytes()).status_code == 404
