"""The health data store's blocks (issue 32, ADR 0033) on SQLite and PostgreSQL: what a
store reports and keeps, the versions a changed day leaves and their bound, the block
sealed as bytes bound to its place, and an erasure that takes every version."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime, timedelta
from types import SimpleNamespace
from typing import Any
from uuid import UUID

import pytest
import sqlalchemy as sa
from cryptography.exceptions import InvalidTag
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.engine.schema import health_data
from healthledger.adapters.persistence.health_data.places import provider_digest, resource_digest
from healthledger.adapters.persistence.health_data.store import KEPT_VERSIONS, open_block
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext

from tests.conftest import Team, create_user

T0 = datetime(2026, 3, 10, 9, tzinfo=UTC)
DAY = date(2026, 3, 5)


def samples(value: float | int, n: int = 3) -> list[dict[str, object]]:
    start = datetime(2026, 3, 5, tzinfo=UTC)
    return [
        {"timestamp": (start + timedelta(minutes=m)).isoformat(), "value": value, "unit": "bpm"}
        for m in range(n)
    ]


def rows(service: Service, user: UUID) -> list[sa.Row[tuple[object, ...]]]:
    with service.db.read() as conn:
        return list(
            conn.execute(
                sa.select(health_data)
                .where(health_data.c.user_id == user)
                .order_by(health_data.c.period, health_data.c.version)
            )
        )


def test_a_changed_day_keeps_the_earlier_version_and_versions_stay_bounded(
    service: Service, client: TestClient, team: Team
) -> None:
    user = UUID(create_user(client, team, "blocks-1")["user_id"])
    store = service.health_data
    with freeze_time(T0):
        first = store.store(user, "oura", {"heartrate": {DAY: samples(60)}})
    assert first["heartrate"].created == [DAY] and not first["heartrate"].updated
    # Another day of the month, and the same day again unchanged: one version, in place.
    with freeze_time(T0 + timedelta(hours=1)):
        again = store.store(
            user, "oura", {"heartrate": {DAY: samples(60), DAY + timedelta(days=1): samples(61)}}
        )
    assert again["heartrate"].created == [DAY + timedelta(days=1)]
    assert not again["heartrate"].updated
    (only,) = rows(service, user)
    assert (only.period, only.version, only.days, only.replaced_at) == (
        date(2026, 3, 1),
        1,
        2,
        None,
    )
    # The day changed: a new version, the earlier one kept with the time it was replaced.
    replaced_at = T0 + timedelta(hours=2)
    with freeze_time(replaced_at):
        changed = store.store(user, "oura", {"heartrate": {DAY: samples(62.5)}})
    assert changed["heartrate"].updated == [DAY] and not changed["heartrate"].created
    earlier, current = rows(service, user)
    assert (earlier.version, earlier.replaced_at) == (1, replaced_at)
    assert (current.version, current.replaced_at, current.days) == (2, None, 2)
    cipher = service.key_store.cipher(user)
    assert cipher is not None
    # The earlier version holds the day as it was (and the day added before the change).
    (kept, _) = open_block(cipher, earlier).payloads()
    assert kept[1] == (
        b'[{"timestamp":"2026-03-05T00:00:00+00:00","unit":"bpm","value":60},'
        b'{"timestamp":"2026-03-05T00:01:00+00:00","unit":"bpm","value":60},'
        b'{"timestamp":"2026-03-05T00:02:00+00:00","unit":"bpm","value":60}]'
    )
    now = store.read(user, "oura", "heartrate", DAY, DAY + timedelta(days=1))
    assert now == {DAY: samples(62.5), DAY + timedelta(days=1): samples(61)}
    (day,) = store.read_range(user, DAY, DAY)
    assert day.stored_at == T0 and day.updated_at == replaced_at  # first stored kept
    assert store.count(user) == 2
    # Many changes: the earlier versions kept are bounded, the newest kept.
    for n in range(KEPT_VERSIONS + 3):
        with freeze_time(replaced_at + timedelta(minutes=n + 1)):
            store.store(user, "oura", {"heartrate": {DAY: samples(70 + n)}})
    versions = rows(service, user)
    assert len(versions) == KEPT_VERSIONS + 1
    assert [v.replaced_at is None for v in versions] == [False] * KEPT_VERSIONS + [True]
    assert [v.version for v in versions] == list(
        range(versions[-1].version - KEPT_VERSIONS, versions[-1].version + 1)
    )
    assert store.read(user, "oura", "heartrate", DAY, DAY) == {DAY: samples(70 + KEPT_VERSIONS + 2)}


def test_a_block_is_sealed_bytes_bound_to_its_place_and_erased_with_every_version(
    service: Service, client: TestClient, team: Team
) -> None:
    user = UUID(create_user(client, team, "blocks-2")["user_id"])
    store = service.health_data
    with freeze_time(T0):
        store.store(user, "oura", {"heartrate": {DAY: samples(60)}, "hrv": {DAY: samples(40.5)}})
    with freeze_time(T0 + timedelta(hours=1)):
        store.store(user, "oura", {"heartrate": {DAY: samples(65)}})
    blocks = rows(service, user)
    assert len(blocks) == 3  # heartrate twice (a changed day), hrv once
    for block in blocks:
        sealed = bytes(block.sealed)
        assert isinstance(block.sealed, bytes | memoryview)
        assert b"bpm" not in sealed and b"timestamp" not in sealed and b"HLB1" not in sealed
    cipher = service.key_store.cipher(user)
    assert cipher is not None
    # The rows name their resources by keyed digests under the user's key (ADR 0047).
    assert {b.provider for b in blocks} == {provider_digest(cipher.digest, "oura")}
    heart_rate = next(
        b for b in blocks if b.resource == resource_digest(cipher.digest, "heartrate")
    )
    hrv = next(b for b in blocks if b.resource == resource_digest(cipher.digest, "hrv"))
    # A block put in another's place does not open.
    moved = SimpleNamespace(**{**hrv._asdict(), "sealed": heart_rate.sealed})
    with pytest.raises(InvalidTag):
        open_block(cipher, moved)
    with freeze_time(T0 + timedelta(days=1)):
        assert client.delete(f"/v2/user/{user}", headers=team.headers).status_code == 200
    with freeze_time(T0 + timedelta(days=8)):
        assert service.users.erase_user(CommandContext.system("test:erase"), user)
    assert rows(service, user) == [] and store.count(user) == 0


def test_two_writers_of_a_users_new_month_at_once_both_store_it(
    service: Service, settings: Settings, client: TestClient, team: Team
) -> None:
    """Two processes syncing the same user's days at once (two makers' notices taken
    together): each month's block is new to both. On PostgreSQL both once found no block
    and inserted its version 1, and one failed on the primary key (CI saw it); a user's
    writes now follow one another. The second finds the first's block and the same days
    in it: nothing changed."""
    user = UUID(create_user(client, team, "two-writers")["user_id"])
    other = build_service(settings)

    def write(writer: Service, day: date, start: threading.Barrier, results: list[Any]) -> None:
        start.wait()
        try:
            stored = writer.health_data.store(user, "oura", {"heartrate": {day: samples(60)}})
            results.append(stored["heartrate"])
        except Exception as failed:  # the thread's failure, for the assertion below
            results.append(failed)

    try:
        for month in range(1, 13):
            start, results = threading.Barrier(2), list[Any]()
            threads = [
                threading.Thread(target=write, args=(w, date(2025, month, 10), start, results))
                for w in (service, other)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert not [r for r in results if isinstance(r, Exception)], results
            assert sorted(len(r.created) for r in results) == [0, 1], (month, results)
    finally:
        other.close()
    assert len(rows(service, user)) == 12
