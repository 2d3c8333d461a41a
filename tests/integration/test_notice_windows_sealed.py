"""A maker's notice's window (the days it names: on which days the person had data at the
maker) sealed with the user's key, and gone with the erasure (issue 29 §1, ADR 0032,
revision 0035).

`NoticeReceipt.Received` v3 seals `start` and `end` with the maker and the resources; a
database written before (revision 0034) holds v2 receipts with the window in clear, which
revision 0035 lists and the service's start redacts into v3: sealed for a live user, the
placeholder for one erased already, the chain verifying. Afterwards no page of the log
or of the notices' queue, and no answer of the API or the CLI, names an erased user's
days. (test_oura_webhooks.py shows a real maker's notice stored so.)
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from uuid import UUID, uuid4

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.persistence.engine import migrating
from healthledger.adapters.persistence.engine.schema import stored_events
from healthledger.adapters.persistence.eventstore.chain import REDACTION_TOPIC
from healthledger.adapters.persistence.eventstore.sealed_facts import SEALED_FACTS_FIELD
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.notice_intake import MAKER_ACTOR, NoticeReceipt
from healthledger.domain.context import CommandContext
from healthledger.domain.personal_data import ERASED_PLACEHOLDER, SEALED_PLACEHOLDER
from healthledger.domain.redaction import REMOVED, SEALED
from sqlalchemy import select

from tests.conftest import Team
from tests.integration.test_health_facts_sealed import (
    holding,
    postgres_files,
    postgres_pages,
    printed_about,
)

# Days no other record of the test names: each receipt's window, as the log writes a day.
LIVE_NEW = (date(2019, 3, 7), date(2019, 3, 8))
GONE_NEW = (date(2016, 2, 3), date(2016, 2, 4))
LIVE_OLD = (date(2018, 5, 11), date(2018, 5, 12))
GONE_OLD = (date(2017, 6, 13), date(2017, 6, 14))
OLD_TOPIC = NoticeReceipt.ReceivedV2.TOPIC


def words(window: tuple[date, date]) -> list[bytes]:
    return [day.isoformat().encode() for day in window]


def places(service: Service) -> dict[str, bytes]:
    """SQLite: the file and its -wal. PostgreSQL: the pages (and files) of the log and
    of the notices' queue."""
    if service.db.is_sqlite:
        path = service.db.sqlite_file
        assert path is not None
        return {
            f"file{suffix}": path.with_name(path.name + suffix).read_bytes()
            for suffix in ("", "-wal")
            if path.with_name(path.name + suffix).exists()
        }
    tables = ("stored_events", "maker_notices")
    found: dict[str, bytes] = {}
    for place in (postgres_pages(service, tables), postgres_files(service, tables)):
        found.update(place or {})
    if not found:
        pytest.skip("neither pageinspect nor the server's files are reachable")
    return found


def receipt(user_id: UUID, team_id: UUID, window: tuple[date, date]) -> NoticeReceipt:
    """A maker's notice about one of the user's days, as `MakerNotices.receive` records
    it (by an unnamed maker)."""
    return NoticeReceipt.new(
        CommandContext(actor=MAKER_ACTOR, request_id=f"req-{uuid4().hex[:8]}"),
        datetime.now(UTC),
        id=uuid4(),
        user_id=user_id,
        team_id=team_id,
        connection_id=uuid4(),
        provider="dexcom",
        resources=["glucose"],
        start=window[0],
        end=window[1],
        deauthorized=False,
    )


def as_v2(new: NoticeReceipt) -> NoticeReceipt.ReceivedV2:
    """The same receipt as the main before revision 0035 recorded it: version 2, the
    maker and resources sealed, the window in clear."""
    (event,) = new.collect_events()
    return NoticeReceipt.ReceivedV2(**vars(event))


def states(service: Service, topic: str) -> list[bytes]:
    with service.db.read() as conn:
        return [
            bytes(state)
            for (state,) in conn.execute(
                select(stored_events.c.state).where(stored_events.c.topic == topic)
            )
        ]


def test_a_notices_window_is_sealed_and_an_old_ones_is_redacted_then_erased(
    service: Service,
    settings: Settings,
    team: Team,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    headers = team.headers
    start = datetime.now(UTC) + timedelta(hours=1)
    with freeze_time(start) as frozen, TestClient(create_team_api(service)) as client:
        made = [
            client.post("/v2/user", json={"client_user_id": name}, headers=headers)
            for name in ("notice-live", "notice-gone")
        ]
        live, gone = (UUID(m.json()["user_id"]) for m in made)
        # Recorded now: version 3, the window sealed with the maker and the resources.
        live_new, gone_new = (
            receipt(live, team.team_id, LIVE_NEW),
            receipt(gone, team.team_id, GONE_NEW),
        )
        service.ledger.save(live_new, gone_new)
        recorded = states(service, NoticeReceipt.Received.TOPIC)
        assert len(recorded) == 2
        for state in recorded:
            fields = json.loads(state)
            assert not {"start", "end", "provider", "resources"} & set(fields)
            assert fields[SEALED_FACTS_FIELD] != ERASED_PLACEHOLDER
        for day in (*words(LIVE_NEW), *words(GONE_NEW)):
            assert not [s for s in recorded if day in s], day
        found = service.ledger.find(live_new.id)
        assert isinstance(found, NoticeReceipt) and (found.start, found.end) == LIVE_NEW
        # Its user's audit shows the window as a sealed value.
        audit = client.get(f"/v2/audit/user/{live}", headers=headers).json()
        (shown,) = [e for e in audit["data"] if e["event"] == "NoticeReceipt.Received"]
        assert shown["changes"]["start"] == shown["changes"]["end"] == SEALED_PLACEHOLDER

        # Recorded as the main before revision 0035 did: the window in clear in the log.
        live_old = receipt(live, team.team_id, LIVE_OLD)
        gone_old = receipt(gone, team.team_id, GONE_OLD)
        service.ledger.save(as_v2(live_old), as_v2(gone_old))
        old = states(service, OLD_TOPIC)
        assert len(old) == 2
        for day in (*words(LIVE_OLD), *words(GONE_OLD)):
            assert [s for s in old if day in s], day

        # One of the two users erased with a v2 receipt in the log.
        frozen.tick(60)
        assert client.delete(f"/v2/user/{gone}", headers=headers).status_code == 200
        frozen.tick(service.settings.grace_period.total_seconds() + 60)
        assert service.jobs.sweep_erasures() == 1
        erased = service.ledger.find(gone_new.id)
        assert isinstance(erased, NoticeReceipt)
        assert (erased.start, erased.end, erased.provider) == (None, None, ERASED_PLACEHOLDER)

    # The database as the main before this revision leaves it: at 0034 (0035 changes no
    # table; the later revisions' downgrades take theirs away), the v2 receipts in the log.
    service.close()
    migrating.downgrade(settings.database_url, "0034")
    with freeze_time(start + timedelta(days=9)):
        started = build_service(settings)
    try:
        # The start redacted both into version 3, chained: one redaction record per
        # reason, sealed for the live user, removed for the erased one.
        with started.db.read() as conn:
            redactions = [
                json.loads(bytes(state))
                for (state,) in conn.execute(
                    select(stored_events.c.state).where(stored_events.c.topic == REDACTION_TOPIC)
                )
            ]
        assert sorted((r["reason"], len(r["records"])) for r in redactions) == [
            (REMOVED, 1),
            (SEALED, 1),
        ]
        # The live user's window opens; the erased one's reads None (the placeholder).
        live_found = started.ledger.find(live_old.id)
        assert isinstance(live_found, NoticeReceipt)
        assert (live_found.start, live_found.end, live_found.provider) == (*LIVE_OLD, "dexcom")
        gone_found = started.ledger.find(gone_old.id)
        assert isinstance(gone_found, NoticeReceipt)
        assert (gone_found.start, gone_found.end, gone_found.provider) == (
            None,
            None,
            ERASED_PLACEHOLDER,
        )
        assert started.chain.verify().ok
        # No page names the erased user's days, old or new; the live user's new ones are
        # sealed too (its old ones went with the redaction's rewrite).
        stored = places(started)
        for day in (*words(GONE_OLD), *words(GONE_NEW), *words(LIVE_OLD), *words(LIVE_NEW)):
            assert holding(stored, day) == [], day
        assert holding(stored, NoticeReceipt.Received.TOPIC.encode())  # the rows are read
        # Nor does any answer about the erased user, of the API or the CLI.
        with freeze_time(start + timedelta(days=9)), TestClient(create_team_api(started)) as client:
            answers = [
                client.get(f"/v2/audit/user/{gone}", headers=headers),
                client.get(f"/v2/audit/user/{gone}/deletion_report", headers=headers),
            ]
        assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
        received = [e for e in answers[0].json()["data"] if e["event"] == "NoticeReceipt.Received"]
        assert len(received) == 2
        assert {(e["changes"]["start"], e["changes"]["end"]) for e in received} == {
            (ERASED_PLACEHOLDER, ERASED_PLACEHOLDER)
        }
        printed = printed_about(
            str(gone),
            url=settings.database_url,
            master_key_file=settings.master_key_file,
            signing_key_file=None,
            monkeypatch=monkeypatch,
            capsys=capsys,
        )
        for answer in [a.text for a in answers] + printed:
            for day in (*words(GONE_OLD), *words(GONE_NEW)):
                assert day.decode() not in answer, (day, answer[:300])
    finally:
        started.close()
