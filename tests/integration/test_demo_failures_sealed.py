"""A demo device's injected failures sealed with the user's key (issue 29 §1, ADR 0032,
revision 0049), on SQLite and PostgreSQL.

`Connection.DemoFailuresConfigured` names the resources a demo device is to fail, and a
resource names health data (a demo glucose monitor's "glucose" says the person is
diabetic). Version 2 holds `failures` only sealed; the domain reads them opened, so the
demo device fails its pulls as before. The v1 records are redacted at the start: sealed
for a live user, the placeholder (no failures) for one erased already; the chain
verifies, and afterwards no page of the log holds their resources, nor does any answer
about the erased user. The database main wrote at 1809f39 holds one such record
(`main-1`'s withings device failing blood_pressure).
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.compliance.chain_commands import verify_command
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.persistence.engine import migrating
from healthledger.adapters.persistence.eventstore.chain import REDACTION_TOPIC
from healthledger.adapters.persistence.eventstore.sealed_facts import SEALED_FACTS_FIELD
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.connection import Connection
from healthledger.domain.context import CommandContext
from healthledger.domain.personal_data import ERASED_PLACEHOLDER, SEALED_PLACEHOLDER
from healthledger.domain.redaction import REMOVED, SEALED

from tests.conftest import Team, create_user
from tests.integration.api_calls import connect, pulls_of
from tests.integration.test_health_facts_sealed import holding, printed_about, records_of
from tests.integration.test_link_redirects_sealed import places
from tests.integration.test_notice_windows_sealed import states
from tests.integration.test_todays_main import (  # noqa: F401  (fixtures)
    DATA,
    SIGNED_HEADS,
    Written,
    verified,
    written,
)
from tests.stream_ids import stream_of_connection

# A demo glucose monitor, its one resource failing on every pull.
MAKER, RESOURCE = "freestyle_libre", "glucose"
FAILURES = {RESOURCE: {"code": "provider_unavailable", "times": None}}
# The v1 record's own bytes: the failures in clear.
IN_CLEAR = f'"failures":{{"{RESOURCE}":'.encode()


def connection_of(service: Service, user_id: UUID | str, provider: str = MAKER) -> Connection:
    found = service.ledger.find(stream_of_connection(service, user_id, provider))
    assert isinstance(found, Connection)
    return found


def no_failures_in(state: bytes) -> None:
    assert b'"failures"' not in state, state
    assert RESOURCE.encode() not in state, state


def test_new_failures_are_held_only_sealed_and_the_device_fails_as_before(
    service: Service, client: TestClient, team: Team
) -> None:
    start = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
    with freeze_time(start):
        user = create_user(client, team, "failing")["user_id"]
        connect(client, team, user, MAKER, demo_failures=FAILURES)
        # The record holds no resource in clear (its bytes); the domain reads it opened.
        (state,) = states(service, Connection.DemoFailuresConfigured.TOPIC)
        no_failures_in(state)
        assert states(service, Connection.DemoFailuresConfiguredV1.TOPIC) == []
        (record,) = records_of(service, Connection.DemoFailuresConfigured.TOPIC)
        assert record["user_id"]["_data_"] == UUID(user).hex
        assert connection_of(service, user).demo_failures == FAILURES
        # The demo device fails the pull as it was told to.
        service.jobs.run_due_pulls()
        glucose = pulls_of(client, team, user, MAKER)["pulled"][RESOURCE]
    assert (glucose["status"], glucose["error_details"]) == ("retrying", "provider_unavailable")


def record_old(service: Service, user_id: UUID) -> UUID:
    """Record the failures of `user_id`'s demo connection as the main before revision 0049
    did (in clear, naming no user), through the aggregate (the ledger's cache of it stays
    current); the connection's id."""
    connection = connection_of(service, user_id)
    ctx = CommandContext(actor="team_api_key:test", request_id=f"req-{uuid4().hex[:8]}")
    connection.record(
        ctx, datetime.now(UTC), Connection.DemoFailuresConfiguredV1, failures=FAILURES
    )
    service.ledger.save(connection)
    return connection.id


def test_old_failures_are_redacted_and_their_resources_go_with_their_user(
    service: Service,
    settings: Settings,
    team: Team,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    headers = team.headers
    # Tomorrow at noon: the live user's pull below is made the same day as its connection
    # (a demo device fails only a pull's most recent day).
    start = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
    start += timedelta(days=1)
    with freeze_time(start) as frozen, TestClient(create_team_api(service)) as client:
        live, gone = (
            UUID(create_user(client, team, name)["user_id"]) for name in ("demo-live", "demo-gone")
        )
        connect(client, team, str(gone), MAKER)
        # The erased user's connection is found by its id only while its key exists.
        gone_stream = record_old(service, gone)
        frozen.tick(60)
        assert client.delete(f"/v2/user/{gone}", headers=headers).status_code == 200
        frozen.tick(service.settings.grace_period.total_seconds() + 60)
        assert service.jobs.sweep_erasures() == 1
        connect(client, team, str(live), MAKER)
        live_stream = record_old(service, live)
        old = states(service, Connection.DemoFailuresConfiguredV1.TOPIC)
        assert len(old) == 2 and all(IN_CLEAR in state for state in old)
        assert states(service, Connection.DemoFailuresConfigured.TOPIC) == []
        assert connection_of(service, live).demo_failures == FAILURES
        later = start + service.settings.grace_period + timedelta(minutes=3)

    # The database as the main before this revision leaves it: at 0047, the v1 records in
    # the log (no read model holds them).
    service.close()
    migrating.downgrade(settings.database_url, "0047")
    with freeze_time(later):
        started = build_service(settings)
    try:
        # Redacted, chained: the live user's record sealed, the erased one's removed.
        assert sorted(
            (r["reason"], len(r["records"])) for r in records_of(started, REDACTION_TOPIC)
        ) == [(REMOVED, 1), (SEALED, 1)]
        assert records_of(started, Connection.DemoFailuresConfiguredV1.TOPIC) == []
        redacted = records_of(started, Connection.DemoFailuresConfigured.TOPIC)
        assert len(redacted) == 2
        assert not [r for r in redacted if "failures" in r]
        assert {UUID(r["user_id"]["_data_"]) for r in redacted} == {live, gone}
        erased = {
            r["user_id"]["_data_"]: r[SEALED_FACTS_FIELD] == ERASED_PLACEHOLDER for r in redacted
        }
        assert erased == {live.hex: False, gone.hex: True}
        assert started.chain.verify().ok
        out = io.StringIO()
        assert verify_command(started.chain, None, out) == 0, out.getvalue()
        # The live user's failures open (its device fails as it was told); the erased
        # one's read as none.
        for stream, failures in ((live_stream, FAILURES), (gone_stream, {})):
            connection = started.ledger.find(stream)
            assert isinstance(connection, Connection)
            assert connection.demo_failures == failures
        # No page holds the resource of the old records. On PostgreSQL the test schema's
        # pages are shared with the worker's earlier tests, whose own events may hold
        # such failures as a main before wrote them: the log is searched for these
        # records' own bytes; on SQLite, the test's own file, for the resource at all.
        stored = places(started)
        needles = [IN_CLEAR, b'"failures":{"']
        if started.db.is_sqlite:
            needles.append(RESOURCE.encode())
        for needle in needles:
            assert holding(stored, needle) == [], needle
        # Nor does any answer about the erased user; the live user's audit shows its
        # failures as a sealed value, the erased one's as erased.
        with freeze_time(later), TestClient(create_team_api(started)) as client:
            answers = [
                client.get(f"/v2/audit/user/{gone}", headers=headers),
                client.get(f"/v2/audit/user/{gone}/deletion_report", headers=headers),
                client.get(f"/v2/audit/user/{live}", headers=headers),
            ]
        assert [a.status_code for a in answers] == [200] * 3, [a.text for a in answers]
        for answer, placeholder in (
            (answers[2], SEALED_PLACEHOLDER),
            (answers[0], ERASED_PLACEHOLDER),
        ):
            shown = {e["event"]: e["changes"] for e in answer.json()["data"]}
            assert shown["Connection.DemoFailuresConfigured"]["failures"] == placeholder
        printed = printed_about(
            str(gone),
            url=settings.database_url,
            master_key_file=settings.master_key_file,
            signing_key_file=None,
            monkeypatch=monkeypatch,
            capsys=capsys,
        )
        for text in [a.text for a in answers[:2]] + printed:
            assert RESOURCE not in text, text[:300]
        # The live user's device still fails its glucose pull, from the redacted record.
        with freeze_time(later), TestClient(create_team_api(started)) as client:
            started.jobs.run_due_pulls()
            glucose = pulls_of(client, team, str(live), MAKER)["pulled"][RESOURCE]
        assert (glucose["status"], glucose["error_details"]) == (
            "retrying",
            "provider_unavailable",
        ), glucose
    finally:
        started.close()


# -- the database main wrote at 1809f39 -------------------------------------------------------

# main-1's withings device, told to fail blood_pressure once (make.py.txt).
FIXTURE_FAILURES = {"blood_pressure": {"code": "provider_unavailable", "times": 1}}
FIXTURE_IN_CLEAR = b'"failures":{"blood_pressure":'


@pytest.fixture
def on_1809f39(written: Written) -> Iterator[Service]:  # noqa: F811
    """The service of this code started on the database 1809f39 wrote."""
    with freeze_time(written.now):
        built = build_service(written.settings())
    yield built
    built.close()


def test_the_fixture_holds_demo_failures_in_clear(written: Written) -> None:  # noqa: F811
    # What the next test shows sealed was there: main-1's failures, in clear.
    content: bytes
    if written.url.startswith("sqlite"):
        with open(written.url.removeprefix("sqlite:///"), "rb") as stored:
            content = stored.read()
        assert FIXTURE_IN_CLEAR in content
    else:
        content = gzip.decompress((DATA / "postgres-dump.sql.gz").read_bytes())
        assert FIXTURE_IN_CLEAR.hex().encode() in content
    assert Connection.DemoFailuresConfiguredV1.TOPIC.encode() in content


def test_the_start_seals_1809f39s_demo_failures_and_the_chain_verifies(
    written: Written,  # noqa: F811
    on_1809f39: Service,
) -> None:
    service = on_1809f39
    assert verified(service, SIGNED_HEADS).startswith("ok: ")
    assert records_of(service, Connection.DemoFailuresConfiguredV1.TOPIC) == []
    (record,) = records_of(service, Connection.DemoFailuresConfigured.TOPIC)
    assert "failures" not in record and record[SEALED_FACTS_FIELD] != ERASED_PLACEHOLDER
    main_1 = UUID(written.user("main-1"))
    assert record["user_id"]["_data_"] == main_1.hex
    (state,) = states(service, Connection.DemoFailuresConfigured.TOPIC)
    assert b"blood_pressure" not in state
    assert connection_of(service, main_1, "withings").demo_failures == FIXTURE_FAILURES
    # The log's pages hold the old record's bytes no more.
    stored = places(service)
    assert holding(stored, Connection.DemoFailuresConfigured.TOPIC.encode())
    assert holding(stored, FIXTURE_IN_CLEAR) == []
