"""The database unavailable under a running service: a 503 that says to retry, never a
500, nothing half written, and the service answers again once it is back.

A PostgreSQL connection lost under the service (the server restarted, a backend
terminated by an operator or a failover) is a 503 that says to retry, never a 500, and
nothing half written: found by stopping a server under a running `serve`, where the first
write after the stop answered 500 (the pipelined COMMIT's rollback on the dead connection
raised the driver's error in place of SQLAlchemy's) and so did the first read (the
rollback hook asked the invalidated connection for its batch: PendingRollbackError).

Here the backends of the service's own connections are terminated (`pg_terminate_backend`,
picked out by an `application_name` of the test's own), which the server answers as a
stop: the other tests' connections on the shared server are left alone.

A SQLite file whose disk is full (SQLITE_FULL, here by the writer connection's
`max_page_count`, as a full disk answers a write): found on a 4 MB tmpfs under `serve`,
where writes answered 503, and once the disk grew every acknowledged user was there, no
other, and `verify` passed; the log now says why (the driver's code)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.persistence.engine.schema import users
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from sqlalchemy.engine import make_url

from tests.conftest import POSTGRES_URL, Team

needs_postgres = pytest.mark.skipif(
    POSTGRES_URL is None, reason="needs HEALTHLEDGER_TEST_POSTGRES_URL"
)

# Attempts until the pool has replaced its dead connections (one 503 each at most).
ATTEMPTS = 20


@pytest.fixture
def named() -> str:
    return f"hl-lost-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def lost_service(settings: Settings, named: str) -> Iterator[Service]:
    if make_url(settings.database_url).get_backend_name() != "postgresql":
        pytest.skip("terminating a backend is PostgreSQL's")
    url = make_url(settings.database_url).update_query_dict({"application_name": named})
    built = build_service(
        settings.model_copy(update={"database_url": url.render_as_string(hide_password=False)})
    )
    yield built
    built.close()


def terminate(named: str) -> int:
    """End every backend of the service's connections, as a server stop would."""
    assert POSTGRES_URL is not None
    admin = sa.create_engine(POSTGRES_URL, poolclass=sa.NullPool)
    try:
        with admin.connect() as conn:
            ended = conn.execute(
                sa.text(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) "
                    "FROM pg_stat_activity WHERE application_name = :named"
                ),
                {"named": named},
            ).scalar_one()
    finally:
        admin.dispose()
    return int(ended)


def answered(client: TestClient, method: str, path: str, **kwargs: object) -> list[int]:
    """The statuses of the same request sent until it succeeds: each a 503 with its
    JSON detail or the success, never anything else."""
    statuses: list[int] = []
    for _ in range(ATTEMPTS):
        answer = client.request(method, path, **kwargs)  # type: ignore[arg-type]
        statuses.append(answer.status_code)
        if answer.status_code != 503:
            break
        assert answer.json() == {"detail": "The database is busy or unreachable; retry shortly."}
    assert statuses[-1] == 200, statuses
    return statuses


@needs_postgres
def test_a_lost_connection_is_a_503_then_the_service_answers_again(
    lost_service: Service, named: str
) -> None:
    created = lost_service.bootstrap()
    assert created is not None
    team = Team(created.team_id, created.team_api_key.plain)
    client = TestClient(create_team_api(lost_service), raise_server_exceptions=False)
    first = client.post("/v2/user", json={"client_user_id": "before"}, headers=team.headers)
    assert first.status_code == 200, first.text
    user_id = first.json()["user_id"]

    # A write: the command's pipelined transaction on a dead connection.
    assert terminate(named) >= 1
    writes = answered(
        client, "POST", "/v2/user", json={"client_user_id": "after"}, headers=team.headers
    )
    assert writes[0] == 503, writes  # the pool's connection was dead, and it said so

    # A read on a dead connection.
    assert terminate(named) >= 1
    reads = answered(client, "GET", f"/v2/user/{user_id}", headers=team.headers)
    assert reads[0] == 503, reads

    # Nothing half written: the two users, once each, and the log verifies.
    listed = client.get("/v2/user", headers=team.headers).json()["users"]
    assert sorted(u["client_user_id"] for u in listed) == ["after", "before"]
    verified = lost_service.chain.verify()
    assert verified.ok, verified.problem


@needs_postgres
def test_a_failed_statements_error_names_its_sql_not_its_values(
    lost_service: Service, named: str
) -> None:
    """What a log prints of a database error (a scheduler job's traceback) holds no value
    the statement carried: ids, digests, sealed values (`hide_parameters`)."""
    created = lost_service.bootstrap()
    assert created is not None
    ctx = CommandContext.system("test:connection-lost")
    by_team = sa.select(users.c.user_id).where(users.c.team_id == created.team_id)
    # A command's pipelined write names its statements only.
    lost_service.users.create_user(ctx, created.team_id, client_user_id="warm")
    assert terminate(named) >= 1
    with pytest.raises(sa.exc.OperationalError) as raised:
        lost_service.users.create_user(ctx, created.team_id, client_user_id="lost")
    assert str(created.team_id) not in str(raised.value)
    # A read names its values as hidden (the pool connects anew after a loss).
    with lost_service.db.read() as conn:
        assert len(conn.execute(by_team).all()) == 1
    assert terminate(named) >= 1
    with pytest.raises(sa.exc.OperationalError) as raised, lost_service.db.read() as conn:
        conn.execute(by_team).all()
    text = str(raised.value)
    assert "[SQL parameters hidden due to hide_parameters=True]" in text
    assert str(created.team_id) not in text and created.team_id.hex not in text


def test_a_full_disk_is_a_503_the_log_says_so_and_writes_resume_once_there_is_room(
    service: Service, team: Team, caplog: pytest.LogCaptureFixture
) -> None:
    if not service.db.is_sqlite:
        pytest.skip("SQLite's file (a full PostgreSQL disk is the server's to answer)")
    client = TestClient(create_team_api(service), raise_server_exceptions=False)
    before = client.post("/v2/user", json={"client_user_id": "before"}, headers=team.headers)
    assert before.status_code == 200, before.text
    writer = service.db.writer_connection
    assert writer is not None

    # On the driver's connection: a statement through SQLAlchemy would begin a
    # transaction of its own there. The writer connection is replaced after a failed
    # write (`Database._sqlite_write`), so each write is made full again.
    def full() -> None:
        driver = writer.get().connection.driver_connection
        assert driver is not None
        pages = driver.execute("PRAGMA page_count").fetchone()[0]
        driver.execute(f"PRAGMA max_page_count = {pages}")

    answers = []
    with caplog.at_level("WARNING", logger="healthledger.http"):
        for n in range(3):
            full()
            answers.append(
                client.post("/v2/user", json={"client_user_id": f"full-{n}"}, headers=team.headers)
            )
    assert [answer.status_code for answer in answers] == [503, 503, 503]
    assert caplog.messages.count("database unavailable: OperationalError (SQLITE_FULL)") == 3
    driver = writer.get().connection.driver_connection
    assert driver is not None
    driver.execute("PRAGMA max_page_count = 4294967294")  # room again
    after = client.post("/v2/user", json={"client_user_id": "after"}, headers=team.headers)
    assert after.status_code == 200, after.text
    # Every user acknowledged is there, and no other; the log verifies.
    acknowledged = {"before", "after"}
    listed = client.get("/v2/user", headers=team.headers, params={"limit": 100}).json()
    assert {u["client_user_id"] for u in listed["users"]} == acknowledged
    verified = service.chain.verify()
    assert verified.ok, verified.problem
