"""The summary getters (`GET /v2/summary/<resource>/{user_id}`, docs/data.md): the
production service's shapes, the values the demo devices stored, one object per session,
the same objects the `daily.data.*` webhooks carry, the source context as of the request's
instant, and every refusal (ranges, another team's user, a deleted or erased user). On
both databases."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any
from unittest.mock import patch
from uuid import UUID

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.persistence.engine.schema import keyed_ids_cut_over, webhook_deliveries
from healthledger.adapters.persistence.keys import key_store as key_store_module
from healthledger.adapters.providers.demo import DemoProvider
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.providers import PullTarget
from healthledger.domain.connections.summary_ids import (
    SummaryIds,
    legacy_device_id,
    legacy_summary_id,
)
from healthledger.domain.context import CommandContext
from sqlalchemy import delete, insert, select

from tests.conftest import Team, create_user
from tests.delivery_rows import with_types
from tests.integration.api_calls import connect
from tests.receivers import Receiver, http_receiver

# A Tuesday after the 2024-07-31 cut-over of the source's name, logo and slug.
T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
DAY = T0.date() - timedelta(days=3)
CTX = CommandContext(actor="test:actor", request_id="req-summaries")
# resource -> the key of the production service's answer.
KEYS = {
    "sleep": "sleep",
    "activity": "activity",
    "workouts": "workouts",
    "body": "body",
    "meal": "meals",
    "sleep_cycle": "sleep_cycle",
    "menstrual_cycle": "menstrual_cycle",
    "electrocardiogram": "electrocardiogram",
}


def pulled_user(service: Service, client: TestClient, team: Team, *providers: str) -> str:
    with freeze_time(T0):
        user = create_user(client, team, f"s-{'-'.join(providers)}")["user_id"]
        for provider in providers:
            connect(client, team, user, provider)
        service.jobs.run_due_pulls()
    return str(user)


def demo(user: str, provider: str, resource: str, day: date) -> Any:
    """What the demo device has for the day: the test's own account of what was stored."""
    target = PullTarget(UUID(user), provider, resource, {})
    return DemoProvider().fetch(target, day, day, T0, 1).get(day)


def get(client: TestClient, team: Team, path: str, **params: Any) -> Any:
    with freeze_time(T0):
        response = client.get(path, params=params, headers=team.headers)
    assert response.status_code == 200, response.text
    return response.json()


def ids_of(service: Service, user: str) -> SummaryIds:
    """The user's summary ids, as its key derives them (keyed: ADR 0057)."""
    cipher = service.key_store.cipher(UUID(user))
    assert cipher is not None
    return cipher.summary_ids


@pytest.fixture
def oura(service: Service, client: TestClient, team: Team) -> str:
    return pulled_user(service, client, team, "oura")


def test_each_summary_getter_answers_the_production_shape_with_the_stored_values(
    service: Service, client: TestClient, team: Team, oura: str
) -> None:
    ids = ids_of(service, oura)
    assert ids.keyed  # a user created now
    for resource in ("sleep", "activity", "sleep_cycle"):
        found = get(client, team, f"/v2/summary/{resource}/{oura}", start_date=DAY.isoformat())
        assert list(found) == [KEYS[resource]]
        (summary,) = found[KEYS[resource]]
        stored = demo(oura, "oura", resource, DAY)
        assert summary["id"] == str(ids.summary("oura", resource, DAY, DAY.isoformat()))
        assert (summary["user_id"], summary["calendar_date"]) == (oura, DAY.isoformat())
        assert summary["provider"] == "oura"
        assert datetime.fromisoformat(summary["created_at"]) == T0
        assert summary["updated_at"] == summary["created_at"]
        if resource == "sleep_cycle":
            # The stages as the client codes them, and the night's sleep it belongs to.
            assert len(summary["stage_type"]) == len(stored["stage_type"])
            assert set(summary["stage_type"]) <= {1, 2, 3, 4}
            assert summary["sleep_id"] == str(ids.summary("oura", "sleep", DAY, str(DAY)))
            continue
        for field, value in stored.items():
            assert summary[field] == value, (resource, field)
    # The aggregate query's columns come from these values.
    (sleep,) = get(client, team, f"/v2/summary/sleep/{oura}", start_date=str(DAY))["sleep"]
    assert {"bedtime_start", "duration", "deep", "hr_average", "average_hrv"} <= set(sleep)
    assert {"efficiency", "score"} <= set(sleep)
    (activity,) = get(client, team, f"/v2/summary/activity/{oura}", start_date=str(DAY))["activity"]
    assert activity["heart_rate"]["resting_bpm"] > 0 and activity["steps"] > 0


def test_a_range_is_inclusive_in_day_order_and_end_defaults_to_start(
    client: TestClient, team: Team, oura: str
) -> None:
    start = DAY - timedelta(days=6)
    week = get(client, team, f"/v2/summary/activity/{oura}", start_date=str(start), end_date=DAY)
    days = [a["calendar_date"] for a in week["activity"]]
    assert days == [str(start + timedelta(days=n)) for n in range(7)]
    one = get(client, team, f"/v2/summary/activity/{oura}", start_date=str(start))
    assert [a["calendar_date"] for a in one["activity"]] == [str(start)]
    # A date-time names its day (the official client may send either).
    timed = get(client, team, f"/v2/summary/activity/{oura}", start_date=f"{start}T08:30:00+00:00")
    assert timed == one
    # Nothing stored in the range: an empty list, not an error.
    early = get(client, team, f"/v2/summary/activity/{oura}", start_date="2020-01-01")
    assert early == {"activity": []}


def test_workouts_and_meals_are_one_object_per_session(
    service: Service, client: TestClient, team: Team
) -> None:
    user = pulled_user(service, client, team, "apple_health_kit")
    ids = ids_of(service, user)
    start = T0.date() - timedelta(days=20)
    for resource in ("workouts", "meal"):
        found = get(
            client, team, f"/v2/summary/{resource}/{user}", start_date=start, end_date=T0.date()
        )[KEYS[resource]]
        expected = [
            item
            for n in range(21)
            for item in demo(user, "apple_health_kit", resource, start + timedelta(days=n)) or []
        ]
        assert len(found) == len(expected) >= 5
        assert len({s["id"] for s in found}) == len(found)
        for summary, item in zip(found, expected, strict=True):
            assert summary["provider_id"] == item["id"]
            day = date.fromisoformat(summary["calendar_date"])
            assert summary["id"] == str(ids.summary("apple_health_kit", resource, day, item["id"]))
    meal = found[0]
    assert meal["energy"]["unit"] == "kcal" and meal["macros"]["carbs"] > 0


def test_the_provider_filter_and_several_providers(
    service: Service, client: TestClient, team: Team
) -> None:
    user = pulled_user(service, client, team, "oura", "withings")
    both = get(client, team, f"/v2/summary/sleep/{user}", start_date=DAY)["sleep"]
    assert [s["provider"] for s in both] == ["oura", "withings"]
    only = get(client, team, f"/v2/summary/sleep/{user}", start_date=DAY, provider="withings")
    assert only["sleep"] == [both[1]]
    none = get(client, team, f"/v2/summary/sleep/{user}", start_date=DAY, provider="fitbit")
    assert none == {"sleep": []}


def test_the_source_is_as_of_the_requests_instant(
    service: Service, client: TestClient, team: Team, oura: str
) -> None:
    path = f"/v2/summary/body/{oura}"
    params = {"start_date": str(DAY - timedelta(days=20)), "end_date": str(DAY)}
    (now, *_) = get(client, team, path, **params)["body"]
    assert now["source"] == {"provider": "oura", "type": "ring", "app_id": None}
    # Before the 2024-07-31 cut-over the source also had the deprecated name, logo, slug.
    with freeze_time("2024-07-30T12:00:00Z"):
        response = client.get(path, params=params, headers=team.headers)
    (then, *_) = response.json()["body"]
    entry = service.catalog["oura"]
    assert then["source"] == {
        **now["source"],
        "name": entry.name,
        "slug": "oura",
        "logo": entry.logo,
    }


def test_the_profile_is_one_object_the_newest(
    service: Service, client: TestClient, team: Team, oura: str
) -> None:
    newest = get(client, team, f"/v2/summary/profile/{oura}")
    mondays = [d for d in (T0.date() - timedelta(days=n) for n in range(31)) if d.weekday() == 0]
    assert newest["calendar_date"] == str(max(mondays))
    assert newest["height"] == demo(oura, "oura", "profile", max(mondays))["height"]
    older = get(
        client,
        team,
        f"/v2/summary/profile/{oura}",
        start_date=str(min(mondays)),
        end_date=str(min(mondays)),
    )
    assert older["calendar_date"] == str(min(mondays))
    with freeze_time(T0):
        user = create_user(client, team, "no-profile")["user_id"]
        missing = client.get(f"/v2/summary/profile/{user}", headers=team.headers)
    assert missing.status_code == 404
    assert missing.json() == {"detail": "No profile stored for this user."}


# (params, field, words): each one problem naming the field, with the words.
BAD_RANGES_AND_FILTERS: list[tuple[dict[str, str], str, str]] = [
    ({"start_date": "2026-03-10", "end_date": "2026-03-09"}, "end_date", "before"),
    ({"start_date": "2025-03-01", "end_date": "2026-03-02"}, "end_date", "over a year"),
    ({"start_date": "yesterday"}, "start_date", "ISO 8601"),
    ({"start_date": "2026-03-01", "end_date": "2026-13-01"}, "end_date", "ISO 8601"),
    ({"start_date": "2026-03-01", "provider": "nope"}, "provider", "Unknown provider"),
]


def test_bad_ranges_and_filters_are_a_clear_422(client: TestClient, team: Team, oura: str) -> None:
    # Read-only refusals: every case against the one pulled user.
    for params, field, words in BAD_RANGES_AND_FILTERS:
        case = params
        response = client.get(f"/v2/summary/sleep/{oura}", params=params, headers=team.headers)
        assert response.status_code == 422, (case, response.text)
        problems = response.json()["detail"]
        assert len(problems) == 1, (case, problems)
        (problem,) = problems
        assert problem["loc"] == ["query", field] and words in problem["msg"], (case, problem)


def test_a_full_year_is_allowed(client: TestClient, team: Team, oura: str) -> None:
    found = get(
        client, team, f"/v2/summary/sleep/{oura}", start_date="2025-03-11", end_date="2026-03-10"
    )
    assert len(found["sleep"]) >= 29
    missing = client.get(f"/v2/summary/sleep/{oura}", headers=team.headers)
    assert missing.status_code == 422  # start_date is required


def test_another_teams_deleted_and_erased_users_are_404(
    service: Service, client: TestClient, team: Team, other_team: Team, oura: str
) -> None:
    path = f"/v2/summary/sleep/{oura}"
    params = {"start_date": str(DAY)}
    assert client.get(path, params=params, headers=other_team.headers).status_code == 404
    unknown = client.get(
        "/v2/summary/sleep/00000000-0000-4000-8000-000000000000",
        params=params,
        headers=team.headers,
    )
    assert unknown.status_code == 404
    with freeze_time(T0):
        service.users.delete_user(CTX, team.team_id, UUID(oura))
        pending = client.get(path, params=params, headers=team.headers)
    assert pending.status_code == 404 and "scheduled for deletion" in pending.json()["detail"]
    with freeze_time(T0 + service.settings.grace_period):
        assert service.jobs.sweep_erasures() == 1
        erased = client.get(path, params=params, headers=team.headers)
    assert erased.status_code == 404 and erased.json() == {"detail": "User not found."}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with http_receiver() as running:
        yield running


def test_the_webhooks_carry_the_getters_objects_one_session_per_event(
    service: Service, client: TestClient, team: Team, receiver: Receiver
) -> None:
    service.webhooks.create(CTX, team.team_id, "sandbox", url=receiver.url("ok"))
    user = pulled_user(service, client, team, "apple_health_kit")
    # Three daily syncs: new days, and today's sessions that ended since.
    for n in (1, 2, 3):
        with freeze_time(T0 + timedelta(days=n)):
            service.pulls.sync_due()
            service.jobs.dispatch_webhooks()
    later = T0 + timedelta(days=3)
    bodies = [json.loads(r.body) for r in receiver.on("ok")]
    by_type: dict[str, list[dict[str, Any]]] = {}
    for body in bodies:
        if body["event_type"].startswith("daily.data."):
            by_type.setdefault(body["event_type"].split(".")[2], []).append(body["data"])
    first = T0.date()
    for resource in ("sleep", "activity", "workouts", "meal"):
        announced = by_type.get(resource, [])
        with freeze_time(later):
            response = client.get(
                f"/v2/summary/{resource}/{user}",
                params={"start_date": str(first), "end_date": str(later.date())},
                headers=team.headers,
            )
        read = {s["id"]: s for s in response.json()[KEYS[resource]]}
        assert all("sessions" not in data for data in announced)  # one session per event
        # Each object as last announced (a payload is the data as of its sending) is the
        # object read back; a session's `updated_at` is its day's, which moves when
        # another session of the day is added.
        last = {data["id"]: data for data in announced}
        # Sleep and activity every day; workouts on most (a demo day may have none).
        assert last or resource == "workouts", resource
        for i, data in last.items():
            if resource in ("workouts", "meal"):
                assert {**read[i], "updated_at": None} == {**data, "updated_at": None}
            else:
                assert read[i] == data, resource
        if resource in ("workouts", "meal"):
            # Every session the device added since the pull, each announced once: the
            # sessions of the new days, and those of the pull's day that ended after it.
            at_pull = {i["id"] for i in demo(user, "apple_health_kit", resource, first) or []}
            days = (first + timedelta(days=n) for n in range(4))
            added = {
                i["id"]
                for day in days
                for i in DemoProvider()
                .fetch(PullTarget(UUID(user), "apple_health_kit", resource, {}), day, day, later, 1)
                .get(day, [])
            } - at_pull
            ids = [d["provider_id"] for d in announced]
            assert sorted(ids) == sorted(added), resource


def test_a_rounds_daily_messages_read_each_feeds_month_once_and_carry_what_each_read_would(
    service: Service, client: TestClient, team: Team, receiver: Receiver
) -> None:
    service.webhooks.create(CTX, team.team_id, "sandbox", url=receiver.url("ok"))
    user = pulled_user(service, client, team, "oura")
    with freeze_time(T0):
        service.jobs.dispatch_webhooks()  # the pull's own messages
    receiver.received.clear()
    later = T0 + timedelta(days=3)
    for n in (1, 2, 3):  # three daily syncs, announced in one round
        with freeze_time(T0 + timedelta(days=n)):
            service.pulls.sync_due()
    payloads = service.dispatcher.payloads
    store = payloads.health_data
    reads: list[tuple[Any, ...]] = []
    read_range = store.read_range

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append((*args, kwargs.get("resources"), kwargs.get("provider")))
        return read_range(*args, **kwargs)

    with freeze_time(later), patch.object(store, "read_range", counted):
        service.jobs.dispatch_webhooks()
    bodies = {
        json.loads(r.body)["data"].get("id") or r.body: r.body
        for r in receiver.on("ok")
        if json.loads(r.body)["event_type"].startswith("daily.data.")
    }
    # Days of each resource: many messages, one read of each feed's month.
    places = [(r[1].replace(day=1), tuple(r[3])) for r in reads]
    assert len(reads) == len(set(places)) and len(reads) * 2 < len(bodies), (reads, len(bodies))
    assert all(r[0] == UUID(user) for r in reads)
    # Each body is what a read of its own day (no round) builds now.
    with service.db.read() as conn:
        rows = conn.execute(select(webhook_deliveries)).all()
    daily = [row for row in with_types(service, rows) if row.day is not None]
    assert len(daily) >= len(bodies)
    sent = {r.body for r in receiver.on("ok")}
    with freeze_time(later):
        for row in daily:
            assert payloads.of_delivery(row, row.event_type) in sent, row.event_type


def test_an_older_users_days_from_the_cut_over_on_take_keyed_ids(
    settings: Settings, service: Service, team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ADR 0057: a user whose key predates keyed ids keeps the ids it was answered, and
    its days from the cut-over on (revision 0050) take keyed ones, wherever an id is made:
    the getters, the sleep a cycle names, the session index."""
    # A user of before: its key made as the code of before made every key (format 1).
    monkeypatch.setattr(
        key_store_module, "new_data_key", lambda keyed_ids: AESGCM.generate_key(bit_length=256)
    )
    # The cut-over (the revision writes a week after it ran) on a day of the pulls'
    # history, before anything of the user is stored (a test's emptied schema has none);
    # another process reads it.
    with service.db.write() as conn:
        conn.execute(delete(keyed_ids_cut_over))
        conn.execute(insert(keyed_ids_cut_over).values(id=1, keyed_from=DAY))
    fresh = build_service(settings)
    assert fresh.key_store.keyed_ids_from == DAY
    try:
        with TestClient(create_team_api(fresh)) as client:
            user = pulled_user(fresh, client, team, "oura")
            ids = ids_of(fresh, user)
            assert not ids.keyed
            window = {"start_date": DAY - timedelta(days=5), "end_date": T0.date()}
            answered: dict[str, list[dict[str, Any]]] = {}
            for resource in ("sleep", "sleep_cycle", "workouts"):
                found = get(client, team, f"/v2/summary/{resource}/{user}", **window)
                answered[resource] = found[KEYS[resource]]
                days = {date.fromisoformat(s["calendar_date"]) for s in answered[resource]}
                assert min(days) < DAY <= max(days), resource
                for summary in answered[resource]:
                    day = date.fromisoformat(summary["calendar_date"])
                    key = summary.get("provider_id") or summary["calendar_date"]
                    old = str(legacy_summary_id(UUID(user), "oura", resource, key))
                    # Up to the cut-over the id it would have had; from it on, keyed.
                    assert (summary["id"] == old) is (day < DAY), (resource, day)
                    assert summary["id"] == str(ids.summary("oura", resource, day, key))
            # A cycle names its night's sleep by the sleep's own id, on either side.
            sleeps = {s["calendar_date"]: s["id"] for s in answered["sleep"]}
            for cycle in answered["sleep_cycle"]:
                assert cycle["sleep_id"] == sleeps[cycle["calendar_date"]]
            # The session index leads from a keyed id to its night, as from an old one.
            for day in (DAY - timedelta(days=1), DAY):
                stream = get(client, team, f"/v2/timeseries/sleep/{sleeps[str(day)]}/stream")
                assert stream["heartrate"], day
            # Devices' ids are never stored: an older user's stay as they were.
            (device,) = get(client, team, f"/v2/user/{user}/device")
            assert device["id"] == str(legacy_device_id(UUID(user), "oura"))
    finally:
        fresh.close()
