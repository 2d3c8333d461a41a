"""The stored days a read answered, kept per process until the user's data changes (ADR
0043): a read asked again is answered from memory, with no query of the days sent; a
change committed by this process is seen by its next read at once (on PostgreSQL the
notification of its own commit, heard on its pooled connection, not by the listener
thread; on SQLite the data version its writer moved); a change committed by another
process is seen as soon as its notification arrives (SQLite: at once); a deletion or
erasure makes the next read a 404; `as_of` reads are never kept. A second
`build_service` on the same database is the other process."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.health_data.known_reads import KnownReads
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from sqlalchemy import event

from tests.clocks import Clock
from tests.conftest import Team, create_user

DAY = date(2026, 3, 2)
CTX = CommandContext.system("test:known-reads")
# Generous for a loaded machine: a notification arrives in milliseconds.
WITHIN_SECONDS = 10.0


@pytest.fixture
def later() -> Clock:
    """The other process's clock, which the test moves past the grace period."""
    return Clock()


@pytest.fixture
def other_process(settings: Settings, service: Service, later: Clock) -> Iterator[Service]:
    built = build_service(settings, clock=later)
    yield built
    built.close()


def heart_rate(value: int) -> list[dict[str, Any]]:
    start = datetime.combine(DAY, datetime.min.time(), UTC)
    return [
        {"timestamp": (start + timedelta(minutes=m)).isoformat(), "value": value, "unit": "bpm"}
        for m in range(3)
    ]


def values(client: TestClient, team: Team, user_id: UUID) -> list[Any] | int:
    """The day's heart-rate values, or the status of a refusal."""
    response = client.get(
        f"/v2/timeseries/{user_id}/heartrate",
        params={"start_date": DAY.isoformat()},
        headers=team.headers,
    )
    if response.status_code != 200:
        return response.status_code
    return [s["value"] for s in response.json()]


def known(service: Service) -> KnownReads:
    kept = service.health_data_queries.known
    assert kept is not None
    return kept


def eventually(check: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + WITHIN_SECONDS
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def statements(service: Service) -> Callable[[], int]:
    """A counter of the statements this process sends from now on that read the days
    (the key's check is another matter: ADR 0042, and on SQLite a local read)."""
    sent = [0]

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "health_data" in statement:
            sent[0] += 1

    for engine in {service.db.writer, service.db.reader.engine}:
        event.listen(engine, "before_cursor_execute", count)
    return lambda: sent[0]


@pytest.fixture
def user_id(service: Service, client: TestClient, team: Team) -> UUID:
    made = UUID(create_user(client, team, "known-1")["user_id"])
    service.health_data.store(made, "oura", {"heartrate": {DAY: heart_rate(60)}})
    assert eventually(lambda: known(service).listening), "the change listener never listened"
    return made


def test_a_read_asked_again_is_answered_from_memory_without_a_statement(
    service: Service, client: TestClient, team: Team, user_id: UUID
) -> None:
    # The listener hears this process's own commits too (the fixture's), a moment after
    # them, and forgets what was read meanwhile (CI saw it on a loaded machine): once it
    # has caught up, a read asked again is answered from memory.
    def asked_twice_from_memory() -> bool:
        assert values(client, team, user_id) == [60, 60, 60]
        before = known(service).hits
        assert values(client, team, user_id) == [60, 60, 60]
        return known(service).hits == before + 1

    assert eventually(asked_twice_from_memory), "a read asked again was never from memory"
    hits, sent = known(service).hits, statements(service)
    assert values(client, team, user_id) == [60, 60, 60]
    assert known(service).hits == hits + 1
    assert sent() == 0, "the day and the user were read again"
    # Another range, provider or as_of is another read.
    as_of = datetime.now(UTC).isoformat()
    response = client.get(
        f"/v2/timeseries/{user_id}/heartrate",
        params={"start_date": DAY.isoformat(), "as_of": as_of},
        headers=team.headers,
    )
    assert response.status_code == 200 and sent() > 0
    assert known(service).hits == hits + 1


def test_this_processs_own_change_is_read_at_once_without_the_listener(
    service: Service, client: TestClient, team: Team, user_id: UUID
) -> None:
    kept = known(service)
    if not service.db.is_sqlite:
        # The listener stopped (what it would hear never comes): only the notification
        # of this process's own commit, on the connection that committed it, can tell.
        assert service.changes is not None
        service.changes.close()
        assert eventually(lambda: not kept.listening)
        kept.set_listening(True)
    assert values(client, team, user_id) == [60, 60, 60]
    assert values(client, team, user_id) == [60, 60, 60]
    hits = kept.hits
    service.health_data.store(user_id, "oura", {"heartrate": {DAY: heart_rate(61)}})
    assert values(client, team, user_id) == [61, 61, 61]
    assert kept.hits == hits  # read again, not from memory
    service.users.delete_user(CTX, team.team_id, user_id)
    assert values(client, team, user_id) == 404


def test_another_processs_changes_are_read_once_heard(
    service: Service,
    other_process: Service,
    later: Clock,
    client: TestClient,
    team: Team,
    user_id: UUID,
) -> None:
    assert values(client, team, user_id) == values(client, team, user_id) == [60, 60, 60]
    assert known(service).holds(user_id)
    other_process.health_data.store(user_id, "oura", {"heartrate": {DAY: heart_rate(62)}})
    assert eventually(lambda: values(client, team, user_id) == [62, 62, 62])
    # Deleted there: a 404 here (as a user scheduled for deletion reads).
    other_process.users.delete_user(CTX, team.team_id, user_id)
    assert eventually(lambda: values(client, team, user_id) == 404)
    other_process.users.undo_deletion(CTX, team.team_id, user_id)
    assert eventually(lambda: values(client, team, user_id) == [62, 62, 62])
    # Erased there: its key and rows are gone, and so is what this process kept.
    other_process.users.delete_user(CTX, team.team_id, user_id)
    later.advance(timedelta(days=8))
    assert other_process.users.erase_user(CTX, user_id)
    if service.db.is_sqlite:
        # Nothing to hear: the next read finds the data version moved and forgets every
        # answer kept.
        assert values(client, team, user_id) == 404
        assert not known(service).holds(user_id)
    else:
        assert eventually(lambda: not known(service).holds(user_id))
        assert values(client, team, user_id) == 404
