"""Schema migrations: a database written by main before migrations (tests/data/legacy_main)
is stamped, upgraded and served with every event, key and user it held; an empty database
is upgraded from nothing; the migrated schema is the metadata's; `refuse` refuses."""

from __future__ import annotations

import gzip
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import sqlalchemy as sa
from eventsourcing.persistence import StoredEvent
from fastapi.testclient import TestClient
from healthledger.adapters.cli import main
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.mirror.receiver import build_receiver
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.migrating import (
    MIRROR,
    SERVICE,
    MigrationError,
    PendingMigrations,
    schema_state,
    upgrade,
    version_files,
)
from healthledger.adapters.persistence.engine.mirror_schema import mirror_metadata
from healthledger.adapters.persistence.engine.schema import health_data, metadata, stored_events
from healthledger.adapters.persistence.eventstore.chain import CHANGED
from healthledger.adapters.persistence.eventstore.recorder import LedgerRecorder
from healthledger.adapters.persistence.health_data.store import open_block
from healthledger.adapters.persistence.integrity.read_model_check import check_read_models
from healthledger.adapters.persistence.keys.master_key import FileKeySource
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.personal_data import ERASED_PLACEHOLDER
from healthledger.domain.redaction import Redaction
from healthledger.domain.teams.teams import Team
from healthledger.domain.users.user import ClientUserIdClaim, User

from tests.conftest import (
    BACKENDS,
    create_postgres_database,
    drop_postgres_database,
    postgres_database_url,
    postgres_schema,
)
from tests.integration.databases import LEGACY, load_dump, schema_differences
from tests.integration.test_health_facts_sealed import holding
from tests.integration.test_old_client_user_ids_redacted import places

SECRET = "whsec_" + "A" * 32


@dataclass
class ScratchDatabase:
    """A database of the test's own, left as the test makes it (not the migrated copy of
    the `database_url` fixture)."""

    url: str
    is_sqlite: bool

    def execute(self, sql: str) -> list[Any]:
        engine = sa.create_engine(self.url, poolclass=sa.NullPool)
        try:
            with engine.begin() as conn:
                result = conn.exec_driver_sql(sql)
                return list(result) if result.returns_rows else []
        finally:
            engine.dispose()

    def tables(self) -> set[str]:
        engine = sa.create_engine(self.url, poolclass=sa.NullPool)
        try:
            with engine.connect() as conn:
                return set(sa.inspect(conn).get_table_names())
        finally:
            engine.dispose()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def empty_database(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[ScratchDatabase]:
    if backend == "sqlite":
        yield ScratchDatabase(f"sqlite:///{tmp_path / 'empty.db'}", is_sqlite=True)
        return
    with postgres_schema(request.getfixturevalue("postgres_admin")) as url:
        yield ScratchDatabase(url, is_sqlite=False)


@dataclass
class Legacy:
    database: ScratchDatabase
    master_key_file: Path


@pytest.fixture
def legacy(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Legacy]:
    """The database main wrote before migrations, with the master key it was written under."""
    # Kept as the service wants a key file: private, not in the database's directory.
    key = tmp_path / "keys" / "master.key"
    key.parent.mkdir(mode=0o700)
    key.touch(mode=0o600)
    if backend == "sqlite":
        shutil.copyfile(LEGACY / "sqlite-master.key", key)
        path = tmp_path / "ledger.db"
        with gzip.open(LEGACY / "sqlite-ledger.db.gz") as packed, path.open("wb") as out:
            shutil.copyfileobj(packed, out)
        yield Legacy(ScratchDatabase(f"sqlite:///{path}", is_sqlite=True), key)
        return
    shutil.copyfile(LEGACY / "postgres-master.key", key)
    admin: sa.Engine = request.getfixturevalue("postgres_admin")
    name = create_postgres_database(admin)
    # The dump creates and fills the schema `legacy_main`: in a database of its own, it
    # cannot meet another test's.
    load_dump(postgres_database_url(name), LEGACY / "postgres-dump.sql.gz")
    url = sa.make_url(postgres_database_url(name)).update_query_dict(
        {"options": "-csearch_path=legacy_main"}
    )
    yield Legacy(ScratchDatabase(url.render_as_string(hide_password=False), is_sqlite=False), key)
    drop_postgres_database(admin, name)


def settings_for(url: str, master_key_file: Path, **overrides: Any) -> Settings:
    return Settings(
        database_url=url,
        master_key_file=master_key_file,
        grace_period=timedelta(days=7),
        **overrides,
    )


# -- the database main wrote before migrations ---------------------------------------------


def test_a_database_written_before_migrations_is_stamped_and_keeps_every_event_key_and_user(
    legacy: Legacy,
) -> None:
    db = legacy.database
    events_before = db.execute("SELECT count(*) FROM stored_events")[0][0]
    keys_before = {UUID(str(row[0])) for row in db.execute("SELECT user_id FROM user_data_keys")}
    health_before = db.execute("SELECT count(*) FROM health_data")[0][0]
    assert events_before > 300 and len(keys_before) == 6 and health_before > 1000

    # The legacy team's one key made every legacy user; made a production key here, its
    # users must come out of migration 0002 as production users.
    db.execute("UPDATE team_api_keys SET environment = 'production'")

    state = schema_state(db.url)
    assert state.current is None and state.before_migrations and not state.up_to_date
    done = upgrade(db.url)
    assert (done.before, done.stamped, done.after) == (None, "0001", "0051")
    assert [r.revision for r in done.applied] == [
        "0002",
        "0003",
        "0004",
        "0005",
        "0013",
        "0010",
        "0007",
        "0012",
        "0006",
        "0014",
        "0015",
        "0016",
        "0017",
        "0018",
        "0019",
        "0020",
        "0021",
        "0022",
        "0023",
        "0024",
        "0025",
        "0026",
        "0027",
        "0028",
        "0029",
        "0030",
        "0031",
        "0032",
        "0033",
        "0034",
        "0035",
        "0036",
        "0037",
        "0038",
        "0039",
        "0040",
        "0041",
        "0042",
        "0043",
        "0044",
        "0045",
        "0046",
        "0047",
        "0048",
        "0049",
        "0050",
        "0051",
    ]
    environments = db.execute("SELECT environment, count(*) FROM users GROUP BY environment")
    assert [tuple(row) for row in environments] == [("production", 5)]
    assert schema_state(db.url).up_to_date
    assert schema_differences(db.url, SERVICE, metadata) == []

    service = build_service(settings_for(db.url, legacy.master_key_file))
    try:
        # Every stored event: counted, and each one decodes through the ledger's mapper.
        notifications = service.recorder.select_notifications(start=1, limit=events_before + 10)
        # And three more: the start gave the legacy team its client_user_id secret, to
        # digest its users' values in the users rows (revision 0015 dropped them in clear),
        # and redacted its connections' and feeds' Created v1 (their facts in clear), and
        # its feeds' pulls and syncs v1 (their windows and days, revision 0034), into
        # their sealed versions, with its users' Created and SettingsChanged that hold a
        # time zone in clear (revision 0042): three redaction records, one per batch of
        # old_versions.BATCH records (ADR 0032).
        assert len(notifications) == events_before + 4
        events = [service.ledger.mapper.to_domain_event(n) for n in notifications]
        assert isinstance(events[-4], Team.ClientUserIdSecretCreated)
        assert all(isinstance(event, Redaction.Created) for event in events[-3:])
        # Their Created held the client_user_id in clear (before ADR 0017); the start's
        # redaction sealed it with the user's key, and removed it for the user erased
        # before (legacy-4): none is left in clear (ADR 0052). Made in order, legacy-0 first.
        users_created = [event for event in events if isinstance(event, User.Created)]
        assert [event.client_user_id for event in users_created] == [None] * 6
        vault = service.lab_orders.vault
        opened = [
            event.sealed_client_user_id
            if event.sealed_client_user_id == ERASED_PLACEHOLDER
            else vault.open(event.originator_id, str(event.sealed_client_user_id))
            for event in users_created
        ]
        assert opened == [f"legacy-{i}" if i != 4 else ERASED_PLACEHOLDER for i in range(6)]
        created = {f"legacy-{i}": event.originator_id for i, event in enumerate(users_created)}
        stored = db.execute(
            "SELECT state FROM stored_events WHERE topic = 'healthledger:User.Created.v1'"
        )
        assert len(stored) == 6 and not any(b"legacy-" in bytes(row[0]) for row in stored)
        # Their claims' Created held it in clear too: the start named it by the team's
        # digest, the erased user's (legacy-4) too, the claim keeping its id, derived from
        # the clear value (ADR 0054).
        team_id = users_created[0].team_id
        claims = [event for event in events if isinstance(event, ClientUserIdClaim.Created)]
        assert [(c.originator_id, c.client_user_id, c.digest) for c in claims] == [
            (
                ClientUserIdClaim.id_for(team_id, f"legacy-{i}"),
                None,
                service.client_user_id_digest(team_id, f"legacy-{i}"),
            )
            for i in range(6)
        ]
        stored = db.execute(
            "SELECT state FROM stored_events"
            " WHERE topic = 'healthledger:ClientUserIdClaim.Created.v1'"
        )
        assert len(stored) == 6 and not any(b"legacy-" in bytes(row[0]) for row in stored)
        # Nor does any page of the database (the log, the users rows, the snapshots: the
        # start rewrote what it redacted and what revision 0015 dropped), where reachable.
        assert holding(places(service, required=False), b"legacy-") == []
        # The users rows hold the log's sealed values: rebuilt from the log, they are the
        # same (the start sealed them anew first, for revision 0015's conversion). Their
        # environment differs: this test made the key a production key after the fact.
        rebuilt = check_read_models(service.read_models, service.recorder, service.ledger.mapper)
        assert [d for d in rebuilt.differences if "sealed_client_user_id" in d.columns] == []

        # Every key unwraps under the master key that came with the database, and the
        # health data sealed under them opens: each stored day converted into its block
        # at the start (ADR 0033), none left in the old form.
        for owner in keys_before:
            assert service.key_store.cipher(owner) is not None
        assert db.execute("SELECT count(*) FROM health_data_days")[0][0] == 0
        with service.db.read() as conn:
            blocks = conn.execute(sa.select(health_data)).all()
        assert sum(block.days for block in blocks) == health_before
        for block in blocks:
            cipher = service.key_store.cipher(block.user_id)
            assert cipher is not None and open_block(cipher, block).days.num_rows == block.days

        check_users_through_the_team_api(service, created)
    finally:
        service.close()


def check_users_through_the_team_api(service: Service, created: dict[str, UUID]) -> None:
    # The legacy team's key was stored hashed only: issue it a new one.
    default_team = next(
        UUID(str(row[0]))
        for row in ScratchDatabase(service.settings.database_url, service.db.is_sqlite).execute(
            "SELECT team_id FROM teams WHERE name = 'Default team'"
        )
    )
    issued = service.teams.issue_team_api_key(CommandContext.system("test:setup"), default_team)
    headers = {"x-service-api-key": issued.plain}
    with TestClient(create_team_api(service), raise_server_exceptions=False) as client:
        for client_user_id in ("legacy-0", "legacy-1", "legacy-3", "legacy-5"):
            response = client.get(f"/v2/user/{created[client_user_id]}", headers=headers)
            assert response.status_code == 200, response.text
            assert response.json()["client_user_id"] == client_user_id
            # Found by the team's digest of the value, which the start computed.
            resolved = client.get(f"/v2/user/resolve/{client_user_id}", headers=headers)
            assert resolved.json()["user_id"] == str(created[client_user_id])
            # Its claim, made before digests, still holds the value: no one else takes it.
            taken = client.post(
                "/v2/user", json={"client_user_id": client_user_id}, headers=headers
            )
            assert taken.status_code == 400, taken.text
            assert taken.json()["detail"]["user_id"] == str(created[client_user_id])
        assert (
            client.get(f"/v2/user/{created['legacy-1']}", headers=headers)
            .json()["ingestion_start"]
            .startswith("2026-01-01")
        )

        pending = client.get(f"/v2/user/{created['legacy-2']}", headers=headers)
        assert pending.status_code == 404
        assert "scheduled for deletion" in pending.text
        erased = client.get(f"/v2/user/{created['legacy-4']}", headers=headers)
        assert erased.status_code == 404
        assert "scheduled for deletion" not in erased.text

        info = client.get(f"/v2/user/{created['legacy-0']}/info/latest", headers=headers)
        assert info.status_code == 200, info.text
        assert info.json()["first_name"] == "Ada"

        # And it serves: a new user is created and deleted.
        made = client.post("/v2/user", json={"client_user_id": "after-migration"}, headers=headers)
        assert made.status_code == 200, made.text
        gone = client.delete(f"/v2/user/{made.json()['user_id']}", headers=headers)
        assert gone.status_code == 200, gone.text


def test_migration_0003_chains_the_stored_events_as_the_recorder_writes_them(
    legacy: Legacy, empty_database: ScratchDatabase
) -> None:
    upgrade(legacy.database.url)
    upgrade(empty_database.url)
    c = stored_events.c
    chained = (c.notification_id, c.chain_position, c.chain_hash)
    columns = (c.originator_id, c.originator_version, c.topic, c.state, c.timestamp)
    legacy_db, fresh_db = Database(legacy.database.url), Database(empty_database.url)
    try:
        with legacy_db.read() as conn:
            rows = conn.execute(sa.select(*columns).order_by(c.notification_id)).all()
            backfilled = conn.execute(sa.select(*chained).order_by(chained[0])).all()
        assert len(rows) > 300
        # The same rows written afresh by the recorder, a few per transaction as commands
        # write them: the chain is the migration's, position for position.
        recorder = LedgerRecorder(fresh_db)
        for start in range(0, len(rows), 7):
            batch = rows[start : start + 7]
            stored = [StoredEvent(r[0], r[1], r[2], r[3]) for r in batch]
            stamps: list[Any] = [Stamped(r.timestamp) for r in batch]
            recorder.insert_events(stored, aggregate_events=stamps)
        with fresh_db.read() as conn:
            written = conn.execute(sa.select(*chained).order_by(chained[0])).all()
    finally:
        legacy_db.dispose()
        fresh_db.dispose()
    assert [tuple(row) for row in written] == [tuple(row) for row in backfilled]
    assert [row[1] for row in backfilled] == list(range(1, len(rows) + 1))

    # The service verifies the backfilled chain, links its new events onto it, and a
    # change to a backfilled record is caught.
    service = build_service(settings_for(legacy.database.url, legacy.master_key_file))
    try:
        assert service.chain.verify().ok
        teams = ScratchDatabase(legacy.database.url, legacy.database.is_sqlite).execute(
            "SELECT team_id FROM teams WHERE name = 'Default team'"
        )
        team_id = UUID(str(teams[0][0]))
        ctx = CommandContext.system("test:setup")
        service.users.create_user(ctx, team_id, client_user_id="after-chain")
        result = service.chain.verify()
        total = legacy.database.execute("SELECT count(*) FROM stored_events")[0][0]
        assert result.ok and result.records_checked == total > len(rows)
        legacy.database.execute("UPDATE stored_events SET topic = 'x' WHERE chain_position = 42")
        problem = service.chain.verify().problem
        assert problem is not None and (problem.kind, problem.position) == (CHANGED, 42)
    finally:
        service.close()


@dataclass(frozen=True)
class Stamped:
    """What the recorder reads of an event's domain form: its time."""

    timestamp: Any


def test_migrate_on_the_command_line_stamps_a_database_written_before_migrations(
    legacy: Legacy, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", legacy.database.url)
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY_FILE", str(legacy.master_key_file))

    assert main(["migrate", "--status"]) == 0
    status = capsys.readouterr().out
    assert "written before migrations" in status and "head      0051" in status
    assert schema_state(legacy.database.url).before_migrations  # --status changed nothing

    assert main(["migrate"]) == 0
    assert "stamped   0001" in capsys.readouterr().out
    assert main(["migrate"]) == 0
    assert "nothing to apply: already at 0051" in capsys.readouterr().out
    assert main(["migrate", "--status"]) == 0
    assert "pending   none" in capsys.readouterr().out


# -- an empty database ---------------------------------------------------------------------


def test_an_empty_database_is_migrated_from_nothing_to_the_metadata(
    empty_database: ScratchDatabase,
) -> None:
    state = schema_state(empty_database.url)
    assert (state.current, state.before_migrations) == (None, False)
    assert [r.revision for r in state.pending] == [
        "0001",
        "0002",
        "0003",
        "0004",
        "0005",
        "0013",
        "0010",
        "0007",
        "0012",
        "0006",
        "0014",
        "0015",
        "0016",
        "0017",
        "0018",
        "0019",
        "0020",
        "0021",
        "0022",
        "0023",
        "0024",
        "0025",
        "0026",
        "0027",
        "0028",
        "0029",
        "0030",
        "0031",
        "0032",
        "0033",
        "0034",
        "0035",
        "0036",
        "0037",
        "0038",
        "0039",
        "0040",
        "0041",
        "0042",
        "0043",
        "0044",
        "0045",
        "0046",
        "0047",
        "0048",
        "0049",
        "0050",
        "0051",
    ]

    done = upgrade(empty_database.url)
    assert (done.stamped, [r.revision for r in done.applied], done.after) == (
        None,
        [
            *("0001", "0002", "0003", "0004", "0005", "0013", "0010", "0007", "0012", "0006"),
            *("0014", "0015", "0016", "0017", "0018", "0019", "0020", "0021", "0022"),
            "0023",
            "0024",
            "0025",
            "0026",
            "0027",
            "0028",
            "0029",
            "0030",
            "0031",
            "0032",
            "0033",
            "0034",
            "0035",
            "0036",
            "0037",
            "0038",
            "0039",
            "0040",
            "0041",
            "0042",
            "0043",
            "0044",
            "0045",
            "0046",
            "0047",
            "0048",
            "0049",
            "0050",
            "0051",
        ],
        "0051",
    )
    assert schema_differences(empty_database.url, SERVICE, metadata) == []
    assert {t.name for t in metadata.sorted_tables} | {"alembic_version"} == (
        empty_database.tables()
    )
    assert upgrade(empty_database.url).applied == ()


def test_build_service_applies_pending_migrations_by_default(
    empty_database: ScratchDatabase, tmp_path: Path
) -> None:
    service = build_service(settings_for(empty_database.url, tmp_path / "keys" / "master.key"))
    try:
        assert schema_state(empty_database.url).up_to_date
        assert service.bootstrap() is not None
    finally:
        service.close()


def test_refuse_keeps_the_service_from_starting_with_pending_migrations(
    empty_database: ScratchDatabase,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = settings_for(
        empty_database.url, tmp_path / "keys" / "master.key", migrate_on_start="refuse"
    )
    with pytest.raises(PendingMigrations, match="healthledger migrate"):
        build_service(settings)
    assert schema_state(empty_database.url).current is None  # nothing was applied

    monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", empty_database.url)
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY_FILE", str(tmp_path / "keys" / "master.key"))
    monkeypatch.setenv("HEALTHLEDGER_MIGRATE_ON_START", "refuse")
    assert main(["serve"]) == 1
    refused = capsys.readouterr().err
    pending = (
        "0001, 0002, 0003, 0004, 0005, 0013, 0010, 0007, 0012, 0006, 0014, 0015, 0016, 0017, 0018,"
        " 0019, 0020, 0021, 0022, 0023, 0024, 0025, 0026, 0027, 0028, 0029, 0030, 0031,"
        " 0032, 0033, 0034, 0035, 0036, 0037, 0038, 0039, 0040, 0041, 0042, 0043, 0044, 0045, 0046,"
        " 0047, 0048, 0049, 0050, 0051"
    )
    assert f"pending migrations ({pending})" in refused
    assert "`healthledger migrate`" in refused
    assert main(["erase-due"]) == 1
    capsys.readouterr()

    assert main(["migrate"]) == 0
    assert "applied   0001" in capsys.readouterr().out
    assert main(["erase-due"]) == 0  # the same setting, nothing pending: it starts
    assert "erased 0 user(s)" in capsys.readouterr().out


def test_refuse_also_refuses_a_database_written_before_migrations(legacy: Legacy) -> None:
    settings = settings_for(legacy.database.url, legacy.master_key_file, migrate_on_start="refuse")
    with pytest.raises(PendingMigrations, match="written before migrations"):
        build_service(settings)
    assert schema_state(legacy.database.url).before_migrations


def test_processes_starting_together_migrate_once(empty_database: ScratchDatabase) -> None:
    # Without the lock (SQLite's write lock, PostgreSQL's advisory lock) the second
    # CREATE TABLE of a table would fail.
    starters = 4
    barrier = threading.Barrier(starters)
    results: list[Any] = []
    errors: list[BaseException] = []

    def start() -> None:
        barrier.wait()
        try:
            results.append(upgrade(empty_database.url))
        except BaseException as exc:  # reported below, with the others
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(starters)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    # One starter applies every revision file; the others find nothing to do.
    every = len(version_files(SERVICE))
    assert sorted(len(done.applied) for done in results) == [0] * (starters - 1) + [every]
    assert schema_state(empty_database.url).up_to_date


def test_a_partial_schema_is_refused_and_left_as_it_is(empty_database: ScratchDatabase) -> None:
    upgrade(empty_database.url)
    empty_database.execute("DROP TABLE alembic_version")
    empty_database.execute("DROP TABLE health_data")
    with pytest.raises(MigrationError, match="missing: health_data"):
        upgrade(empty_database.url)
    assert "alembic_version" not in empty_database.tables()


def test_a_database_migrated_by_a_newer_version_is_refused(empty_database: ScratchDatabase) -> None:
    upgrade(empty_database.url)
    empty_database.execute("UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(MigrationError, match="9999, which this version of healthledger"):
        upgrade(empty_database.url)


# -- the webhook receiver's own line -------------------------------------------------------

# What the receiver's `create_all` wrote before migrations (main at bccbead), per dialect.
LEGACY_MIRROR_DDL = {
    "sqlite": """
CREATE TABLE mirror_snapshots (
    originator_id CHAR(32) NOT NULL, originator_version INTEGER NOT NULL,
    topic TEXT NOT NULL, state BLOB NOT NULL,
    PRIMARY KEY (originator_id, originator_version));
CREATE TABLE mirror_stored_events (
    notification_id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    originator_id CHAR(32) NOT NULL, originator_version INTEGER NOT NULL,
    topic TEXT NOT NULL, state BLOB NOT NULL, timestamp DATETIME NOT NULL,
    CONSTRAINT uq_mirror_stored_events_version UNIQUE (originator_id, originator_version));
CREATE INDEX ix_mirror_stored_events_originator_time
    ON mirror_stored_events (originator_id, timestamp);
CREATE TABLE mirror_tracking (
    application_name VARCHAR(64) NOT NULL, notification_id BIGINT NOT NULL,
    PRIMARY KEY (application_name, notification_id));
CREATE TABLE received_webhooks (
    message_id VARCHAR(255) NOT NULL, event_type VARCHAR(255) NOT NULL,
    user_id CHAR(32) NOT NULL, outcome VARCHAR(16) NOT NULL, received_at DATETIME NOT NULL,
    PRIMARY KEY (message_id));
CREATE INDEX ix_received_webhooks_user ON received_webhooks (user_id, received_at);
""",
    "postgresql": """
CREATE TABLE mirror_snapshots (
    originator_id UUID NOT NULL, originator_version INTEGER NOT NULL,
    topic TEXT NOT NULL, state BYTEA NOT NULL,
    PRIMARY KEY (originator_id, originator_version));
CREATE TABLE mirror_stored_events (
    notification_id BIGSERIAL NOT NULL, originator_id UUID NOT NULL,
    originator_version INTEGER NOT NULL, topic TEXT NOT NULL, state BYTEA NOT NULL,
    timestamp TIMESTAMP WITH TIME ZONE NOT NULL, PRIMARY KEY (notification_id),
    CONSTRAINT uq_mirror_stored_events_version UNIQUE (originator_id, originator_version));
CREATE INDEX ix_mirror_stored_events_originator_time
    ON mirror_stored_events (originator_id, timestamp);
CREATE TABLE mirror_tracking (
    application_name VARCHAR(64) NOT NULL, notification_id BIGINT NOT NULL,
    PRIMARY KEY (application_name, notification_id));
CREATE TABLE received_webhooks (
    message_id VARCHAR(255) NOT NULL, event_type VARCHAR(255) NOT NULL,
    user_id UUID NOT NULL, outcome VARCHAR(16) NOT NULL,
    received_at TIMESTAMP WITH TIME ZONE NOT NULL, PRIMARY KEY (message_id));
CREATE INDEX ix_received_webhooks_user ON received_webhooks (user_id, received_at);
""",
}


def mirror_key(directory: Path) -> FileKeySource:
    # The receiver's master key, in a directory of its own.
    return FileKeySource(directory / "receiver-keys" / "mirror.key")


def test_the_receiver_migrates_its_own_tables_beside_other_tables(
    empty_database: ScratchDatabase, tmp_path: Path
) -> None:
    empty_database.execute("CREATE TABLE customer_orders (order_id INTEGER PRIMARY KEY)")
    receiver = build_receiver(empty_database.url, [SECRET], master_key=mirror_key(tmp_path))
    receiver.close()

    state = schema_state(empty_database.url, MIRROR)
    assert (state.current, state.up_to_date) == ("m0002", True)
    # Only the customer's own table is not the mirror's.
    differences = schema_differences(empty_database.url, MIRROR, mirror_metadata)
    assert [(kind, table.name) for kind, table in differences] == [
        ("remove_table", "customer_orders")
    ]
    # The receiver's versions are apart from the service's (which it left alone).
    assert "alembic_version" not in empty_database.tables()
    assert schema_state(empty_database.url, SERVICE).current is None


def test_receiver_tables_written_before_migrations_are_stamped(
    empty_database: ScratchDatabase, tmp_path: Path
) -> None:
    dialect = "sqlite" if empty_database.is_sqlite else "postgresql"
    for statement in LEGACY_MIRROR_DDL[dialect].split(";"):
        if statement.strip():
            empty_database.execute(statement)

    assert schema_state(empty_database.url, MIRROR).before_migrations
    receiver = build_receiver(empty_database.url, [SECRET], master_key=mirror_key(tmp_path))
    receiver.close()
    done = upgrade(empty_database.url, MIRROR)
    # Stamped at the baseline, then upgraded by the receiver to the head.
    assert (done.before, done.applied) == ("m0002", ())
    assert schema_differences(empty_database.url, MIRROR, mirror_metadata) == []
