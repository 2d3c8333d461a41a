"""Fixtures shared by every test: the same tests run on a SQLite file and, when
HEALTHLEDGER_TEST_POSTGRES_URL is set (CI sets it), on PostgreSQL in a schema of their own.

Each test gets its own real database, already migrated to the head of both migration
lines (the service's and the webhook receiver's), so that `build_service` and
`build_receiver` find nothing to migrate: a version check. The migrations are not run
per test. SQLite: they run once per session into a template file, which each test copies.
PostgreSQL: their SQL is written once per session (Alembic's offline mode) and run into one
schema per worker, which its tests take in turn and which is emptied after each
(`ReusedSchema`). (A database per test, `CREATE DATABASE ... TEMPLATE`, was measured too and
cost more: see docs/adr/0012; so did a fresh schema per test, ~130 ms against ~1 ms.)"""

from __future__ import annotations

import gc
import io
import os
import shutil
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import freezegun
import pytest
import sqlalchemy as sa
from alembic import command
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.management_api import management_routes
from healthledger.adapters.http.team_api import team_routes
from healthledger.adapters.persistence.engine.migrating import (
    MIRROR,
    SERVICE,
    alembic_config,
    upgrade,
)
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

# freezegun scans every loaded module's attributes when it starts; the official clients'
# lazy `vital`/`vital.types` and `junction`/`junction.types` would import (and build
# pydantic models) during that scan, inside the frozen clock, and fail on freezegun's
# FakeDatetime.
# asyncio keeps real time: an event loop running in a thread (a local webhook receiver,
# the test client's portal) that read a frozen `monotonic` would schedule its next wake-up
# days away from the real clock, and never wake to shut down.
freezegun.configure(extend_ignore_list=["vital", "junction", "asyncio"])

# Webhooks go to public addresses only by default; the tests' receivers (tests/receivers.py)
# listen on this machine's loopback, which the tests therefore allow explicitly, as an
# operator allows a receiver on premises. Every Settings the tests build reads it, and so
# does every process they start (their environment is this one's). A test of the default
# refusal passes webhook_allowed_destinations=[] (a value given beats the environment).
TEST_WEBHOOK_DESTINATIONS = "127.0.0.0/8,::1,localhost"
os.environ["HEALTHLEDGER_WEBHOOK_ALLOWED_DESTINATIONS"] = TEST_WEBHOOK_DESTINATIONS

POSTGRES_URL = os.environ.get("HEALTHLEDGER_TEST_POSTGRES_URL")
BACKENDS = ["sqlite", *(["postgres"] if POSTGRES_URL else [])]
LINES = (SERVICE, MIRROR)


@pytest.fixture(scope="session", autouse=True)
def routes_built_before_any_clock_is_frozen() -> None:
    """Both APIs' routes are built once per process (ADR 0024), as `serve` builds them at
    start. FastAPI reads a route's annotations when it is built; built first inside a
    test's freeze_time, a module's `datetime` would be freezegun's class, which is no
    parameter type: the route would fail that test only when no earlier test in its
    worker had built it. Built here, every test sees what a served process sees."""
    team_routes()
    management_routes()


@pytest.fixture(scope="session")
def postgres_admin() -> Iterator[sa.Engine]:
    """Connections to HEALTHLEDGER_TEST_POSTGRES_URL outside a transaction (for CREATE
    DATABASE, and for scripts that hold their own BEGIN and COMMIT)."""
    assert POSTGRES_URL is not None
    admin = sa.create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    yield admin
    admin.dispose()


def postgres_database_url(name: str) -> str:
    """HEALTHLEDGER_TEST_POSTGRES_URL, pointed at another database of the same server."""
    assert POSTGRES_URL is not None
    return sa.make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)


def create_postgres_database(admin: sa.Engine) -> str:
    """A new, empty, uniquely named database on the test server; its name."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    return name


def drop_postgres_database(admin: sa.Engine, name: str) -> None:
    # FORCE: a connection a test leaked (a pool not disposed) must not keep it alive.
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "ledger.db"
    for line in LINES:
        upgrade(f"sqlite:///{path}", line)
    return path


@pytest.fixture(scope="session")
def postgres_migrations_sql() -> str:
    """What migrating an empty PostgreSQL schema to the head of both lines runs."""
    script = io.StringIO()
    for line in LINES:
        config = alembic_config(line, POSTGRES_URL)
        config.output_buffer = script
        command.upgrade(config, "head", sql=True)
    return script.getvalue()


def create_postgres_schema(admin: sa.Engine, sql: str = "") -> tuple[str, str]:
    """A new schema in HEALTHLEDGER_TEST_POSTGRES_URL's database, `sql` run in it: its
    name, and the URL of the database with that schema first on the search path."""
    assert POSTGRES_URL is not None
    schema = f"t_{uuid.uuid4().hex[:16]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(
            f'CREATE SCHEMA "{schema}"; SET search_path TO "{schema}";\n{sql}\nRESET search_path'
        )
    separator = "&" if "?" in POSTGRES_URL else "?"
    return schema, f"{POSTGRES_URL}{separator}options={quote(f'-csearch_path={schema}')}"


def drop_postgres_schema(admin: sa.Engine, schema: str) -> None:
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')


@contextmanager
def postgres_schema(admin: sa.Engine, sql: str = "") -> Iterator[str]:
    """A new schema (`create_postgres_schema`), dropped afterwards; its URL."""
    schema, url = create_postgres_schema(admin, sql)
    try:
        yield url
    finally:
        drop_postgres_schema(admin, schema)


class ReusedSchema:
    """One migrated PostgreSQL schema that a worker's tests take in turn, emptied after
    each: a fresh schema costs ~130 ms to create and drop (the migrations' DDL), emptying
    one ~1 ms. A test that changed the schema's shape (a migration test, a table dropped)
    or left a lock behind gets it replaced, so the next test still starts from the
    migrated, empty schema and never sees another test's rows."""

    def __init__(self, admin: sa.Engine, sql: str) -> None:
        self.admin, self.sql = admin, sql
        self.schema: str | None = None
        self.left: list[str] = []
        self.url, self.empty_sql, self.shape = "", "", ""

    def take(self) -> str:
        if self.schema is None:
            self.schema, self.url = create_postgres_schema(self.admin, self.sql)
            self.empty_sql, self.shape = self._describe(self.schema)
        return self.url

    def give_back(self) -> None:
        assert self.schema is not None
        try:
            with self.admin.connect() as conn:
                conn.exec_driver_sql(self.empty_sql)
        except sa.exc.OperationalError:
            # A lock a test left behind outlasted lock_timeout: a DROP would wait on it too.
            # The schema is left for the session's end, when that test's connections are gone.
            self.left.append(self.schema)
            self.schema = None
            return
        if self._describe(self.schema)[1] != self.shape:
            self.close()

    def close(self) -> None:
        for schema in (self.schema, *self.left):
            if schema is not None:
                drop_postgres_schema(self.admin, schema)
        self.schema, self.left = None, []

    def _describe(self, schema: str) -> tuple[str, str]:
        """The SQL that empties the schema's tables (all but the migration lines' version
        tables) and restarts its sequences; and the schema's shape: its relations with
        their column counts, and the versions the lines are at."""
        with self.admin.connect() as conn:
            relations = conn.exec_driver_sql(
                "SELECT c.relname, c.relkind, c.relnatts FROM pg_class c"
                " JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = %s ORDER BY c.relname",
                (schema,),
            ).all()
            versions = [
                conn.exec_driver_sql(f'SELECT version_num FROM "{schema}"."{name}"').all()
                for name, kind, _ in relations
                if kind == "r" and name.endswith("alembic_version")
            ]
        statements = ["SET LOCAL lock_timeout = '5s'"]
        for name, kind, _ in relations:
            if kind == "r" and not name.endswith("alembic_version"):
                statements.append(f'DELETE FROM "{schema}"."{name}"')
            elif kind == "S":
                statements.append(f'SELECT setval(\'"{schema}"."{name}"\', 1, false)')
        # One round trip: psycopg sends parameterless statements as one simple query, which
        # PostgreSQL runs as one transaction (so SET LOCAL holds for the DELETEs).
        return ";\n".join(statements), repr((relations, versions))


@pytest.fixture(scope="session")
def reused_schema(
    postgres_admin: sa.Engine, postgres_migrations_sql: str
) -> Iterator[ReusedSchema]:
    schema = ReusedSchema(postgres_admin, postgres_migrations_sql)
    yield schema
    schema.close()


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        # In a directory of its own: the master key file (`settings`) may not sit in the
        # database's directory.
        path = tmp_path / "database" / "ledger.db"
        path.parent.mkdir()
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        yield f"sqlite:///{path}"
        return
    schema: ReusedSchema = request.getfixturevalue("reused_schema")
    yield schema.take()
    schema.give_back()


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings(
        database_url=database_url,
        master_key_file=tmp_path / "master.key",
        grace_period=timedelta(days=7),
    )


@pytest.fixture
def service(settings: Settings) -> Iterator[Service]:
    built = build_service(settings)
    yield built
    built.close()


@dataclass
class Team:
    team_id: uuid.UUID
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"x-service-api-key": self.key}


@pytest.fixture
def team(service: Service) -> Team:
    created = service.bootstrap()
    assert created is not None
    return Team(created.team_id, created.team_api_key.plain)


@pytest.fixture
def other_team(service: Service, team: Team) -> Team:
    ctx = CommandContext.system("test:setup")
    org_id = service.teams.create_organization(ctx, "Other org")
    team_id = service.teams.create_team(ctx, org_id, "Other team", "eu")
    issued = service.teams.issue_team_api_key(ctx, team_id)
    return Team(team_id, issued.plain)


@pytest.fixture
def client(service: Service) -> Iterator[TestClient]:
    from healthledger.adapters.http.team_api import create_team_api

    with TestClient(create_team_api(service), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def ctx() -> CommandContext:
    return CommandContext(actor="test:actor", request_id="req-test")


def create_user(client: TestClient, team: Team, client_user_id: str, **fields: Any) -> dict:
    response = client.post(
        "/v2/user", json={"client_user_id": client_user_id, **fields}, headers=team.headers
    )
    assert response.status_code == 200, response.text
    return response.json()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (addopts): a worker per core and one more. Over a full CI run on two
    cores, vmstat found the cores idle a sixth of the time while the tests waited on
    servers starting, brokers, receivers and lease expiries; a third worker fills it."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (cores or 1) + 1


def pytest_collection_finish(session: pytest.Session) -> None:
    # Everything loaded so far (the service's modules, the reference data, the official
    # client's models, the collected tests) lives until the end: moved out of the
    # collector's reach, so that its full collections, which every test's fresh service
    # and apps set off, stop walking it again and again (a third of a test's setup).
    gc.collect()
    gc.freeze()


# The reason of the official clients' e2e modules (`pytestmark = CLIENTS_PARSE_ANSWERS`):
# what they test is the clients parsing our answers, which the database does not shape.
CLIENTS_PARSE_ANSWERS = pytest.mark.sqlite_only(
    "the clients parsing our answers (integration tests hold the answers on both databases)"
)


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`@pytest.mark.sqlite_only(reason)`: the test (or, as `pytestmark`, the module) runs
    on the SQLite file alone. For e2e tests whose subject is what crosses the wire (an
    official client parsing our answers, a page drawn in a browser), which the database
    does not shape: the integration tests prove on both databases that the service gives
    the same answers from either. Persistence, concurrency, erasure and time travel are
    never marked so (the reason is required, and read in review)."""
    marker = metafunc.definition.get_closest_marker("sqlite_only")
    if marker is None or "database_url" not in metafunc.fixturenames:
        return
    if not (marker.args and str(marker.args[0]).strip()):
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: sqlite_only needs its reason")
    # As a parametrize mark, which pytest reads after this hook, in place of the fixture's
    # own params (a mark on the test beats them).
    metafunc.definition.add_marker(
        pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The folder is the scope: `pytest -m unit` runs the domain tests that need no database.
    for item in items:
        scope = item.path.parent.name
        if scope in ("unit", "integration", "e2e"):
            item.add_marker(getattr(pytest.mark, scope))
