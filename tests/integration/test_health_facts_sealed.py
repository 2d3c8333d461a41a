"""Health facts sealed in the log (issue 29 §1, ADR 0028), on a database written by main
at 1809f39 (tests/data/main_1809f39), on SQLite and PostgreSQL.

1809f39 stored each order's lab test in clear in its Created event (version 1) and in the
orders read model. The first start of this code redacts those events into version 2 (the
test sealed with the user's key), fills the read model's sealed value, and leaves no copy
in clear where the database reaches: the chain and its signed heads still verify, every
read still answers as 1809f39 answered it (test_todays_main.py), and after the erasure of
`main-2` (its order of the shared demo test "Annual Wellness (Quest, walk-in)") nothing
in the database's files names that test: SQLite's file and -wal byte for byte; on
PostgreSQL the pages of the event log and of the orders table (pageinspect) and their
relation files after a CHECKPOINT, when readable. The WAL and backups of before are out
of reach (ADR 0028).

1809f39 also kept `main-0`'s order's interpretation (`normal`) in clear in its orders row:
after the start it is only sealed and keyed-digested (revision 0019), and after `main-0`'s
erasure no answer of the API or the CLI, nor any page, says it."""

from __future__ import annotations

import contextlib
import gzip
import json
import re
import threading
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.cli import main
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.persistence.engine.migrating import SERVICE, upgrade
from healthledger.adapters.persistence.engine.schema import (
    chain_redactions,
    orders,
    pending_redactions,
    stored_events,
    user_data_keys,
)
from healthledger.adapters.persistence.eventstore.chain import REDACTION_TOPIC
from healthledger.adapters.persistence.eventstore.old_versions import BATCH, SUCCESSORS
from healthledger.domain.audited import audited_events, topic_of
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.credential_links import CredentialSignIn
from healthledger.domain.connections.link_tokens import LinkToken
from healthledger.domain.connections.notice_intake import NoticeReceipt
from healthledger.domain.connections.oauth_flows import OAuthFlow
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.labs.orders import Order, OrderedTest
from healthledger.domain.personal_data import ERASED_PLACEHOLDER
from healthledger.domain.redaction import REMOVED, SEALED
from healthledger.domain.webhooks.deliveries import WebhookDelivery
from sqlalchemy import delete, func, select, text

from tests.integration.test_client_user_id_at_rest import _pageinspect, sqlite_bytes
from tests.integration.test_todays_main import (  # noqa: F401  (fixtures)
    DATA,
    SIGNED_HEADS,
    Written,
    started,
    verified,
    written,
)

# The shared demo test main-2 ordered (reference data: in the database only in the order).
NEEDLE = "Annual Wellness (Quest, walk-in)"
NEEDLE_ID = UUID("0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a01")
# Only an order's Created v1 names a test this way (a lab test's own events say "name").
CLEAR_KEY = '"lab_test_name":'
# The team's own test (main-0's order): in clear in the team's catalog by design, which
# shows that the searches do read the rows.
CONTROL = "Metabolic"
# Records the start redacts on the fixture: 2 orders' Created, 4 connections' Created and
# their 54 feeds' Created (ADR 0032), every webhook delivery's Created (ADR 0028: 96
# on SQLite, 99 on PostgreSQL, whose fixture's run announced a little more), and every
# feed's pulls and syncs (revision 0034), its 2 link tokens' Issued (revision 0043) and
# the one Consumed (its maker in clear: revision 0044), main-6's one OAuth flow's
# Started (its maker in clear: revision 0045), and main-1's demo device's one
# DemoFailuresConfigured (the resource it fails in clear: revision 0049).
REDACTED = 2 + 4 + 54 + 2 + 1 + 1 + 1
# The users' records that held a time zone in clear (revision 0042): the Created of each
# of the fixture's 10 users (every one made with a zone) and main-1's change of zone.
ZONES_REDACTED = 10 + 1
PULLS_AND_SYNCS = (
    ResourceFeed.PullScheduled.TOPIC,
    ResourceFeed.PullSucceeded.TOPIC,
    ResourceFeed.DailySynced.TOPIC,
)


@pytest.fixture
def service(started: Service) -> Service:  # noqa: F811
    return started


def redacted_on(service: Service) -> int:
    """The records the start redacted on the fixture: REDACTED, the deliveries' and the
    pulls' and syncs', and the users' time zones."""
    pulls = sum(len(records_of(service, topic)) for topic in PULLS_AND_SYNCS)
    deliveries = len(records_of(service, WebhookDelivery.Created.TOPIC))
    return REDACTED + deliveries + pulls + ZONES_REDACTED


def needles(service: Service) -> list[bytes]:
    found = [NEEDLE.encode(), CLEAR_KEY.encode()]
    if service.db.is_sqlite:
        found.append(NEEDLE_ID.hex.encode())
    return found


def postgres_pages(service: Service, tables: tuple[str, ...]) -> dict[str, bytes] | None:
    """Every page of the tables and their indexes (and TOAST tables) as the server holds
    them, by relation (None without pageinspect)."""
    pages: dict[str, bytes] = {}
    with service.db.write() as conn:
        if not _pageinspect(conn):
            return None
        relations: list[str] = []
        for table in tables:
            relations.append(table)
            relations += [
                str(name)
                for (name,) in conn.execute(
                    text(
                        "SELECT indexrelid::regclass::text FROM pg_index"
                        " WHERE indrelid = CAST(:t AS regclass)"
                    ),
                    {"t": table},
                )
            ]
            toast = conn.execute(
                text(
                    "SELECT reltoastrelid::regclass::text FROM pg_class"
                    " WHERE oid = CAST(:t AS regclass) AND reltoastrelid <> 0"
                ),
                {"t": table},
            ).scalar()
            if toast is not None:
                relations.append(str(toast))
        for relation in relations:
            # Every block of the relation in one query, in order.
            read = conn.execute(
                text(
                    "SELECT public.get_raw_page(CAST(:r AS text), CAST(block AS int))"
                    " FROM generate_series("
                    "0, pg_relation_size(CAST(:r AS regclass))"
                    " / current_setting('block_size')::int - 1) AS block ORDER BY block"
                ),
                {"r": relation},
            ).scalars()
            pages[relation] = b"".join(bytes(page) for page in read)
    return pages


def postgres_files(service: Service, tables: tuple[str, ...]) -> dict[str, bytes] | None:
    """The tables' relation files after a checkpoint, when this process can read the
    server's data directory (else None)."""
    with service.db.write() as conn:
        directory = Path(conn.execute(text("SHOW data_directory")).scalar_one())
        paths = [
            directory
            / str(conn.execute(text("SELECT pg_relation_filepath(:t)"), {"t": t}).scalar())
            for t in tables
        ]
        with contextlib.suppress(Exception):  # not allowed: read what is written
            conn.execute(text("CHECKPOINT"))
    try:
        return {f"file of {t}": path.read_bytes() for t, path in zip(tables, paths, strict=True)}
    except OSError:
        return None


def on_disk(service: Service) -> dict[str, bytes]:
    """What this test can read of the database's storage, by place."""
    if service.db.is_sqlite:
        return {"the database file and its -wal": sqlite_bytes(service)}
    tables = ("stored_events", "orders", "lab_tests")
    places: dict[str, bytes] = {}
    for found in (postgres_pages(service, tables), postgres_files(service, tables)):
        places.update(found or {})
    if not places:
        pytest.skip("neither pageinspect nor the server's files are reachable")
    return places


# A value sealed by the key store, as stored: its prefix, then base64
# (adapters/persistence/keys/key_store.py).
SEALED_VALUE = re.compile(rb"v1\.[A-Za-z0-9+/]+={0,2}")


def holding(places: dict[str, bytes], needle: bytes) -> list[str]:
    """The places whose bytes hold `needle` outside the sealed values. A sealed value is
    base64 text, in which a short word turns up by chance: b"oura" once in about 16.7 M
    characters, and an erased user's sealed events (kept, their key destroyed) are
    hundreds of KB of it, so about one run in 40 found one (CI failed on it). A clear
    value stored right after a sealed one with no padding would be read as its tail and
    missed; the live rows' SQL checks cover those."""
    return [place for place, content in places.items() if needle in SEALED_VALUE.sub(b"", content)]


def printed_about(
    user_id: str,
    *,
    url: str,
    master_key_file: Path,
    signing_key_file: Path | None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    plain_audit: bool = False,
) -> list[str]:
    """What the command line prints about a user, each command succeeding: its audit as
    JSON (and as text first, if asked), its deletion report as JSON and as HTML."""
    monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", url)
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY_FILE", str(master_key_file))
    if signing_key_file is not None:
        monkeypatch.setenv("HEALTHLEDGER_SIGNING_KEY_FILE", str(signing_key_file))
    commands = [
        *([["audit", user_id]] if plain_audit else []),
        ["audit", user_id, "--json"],
        ["report", "deletion", user_id],
        ["report", "deletion", user_id, "--format", "html"],
    ]
    printed = []
    for command in commands:
        capsys.readouterr()
        assert main(command) == 0, command
        printed.append(capsys.readouterr().out)
    return printed


def test_every_old_version_is_redacted_into_the_version_that_replaced_it() -> None:
    superseded = {topic_of(e): e.SUPERSEDED_BY for e in audited_events() if e.SUPERSEDED_BY}
    assert (
        set(superseded)
        == set(SUCCESSORS)
        == {
            Order.CreatedV1.TOPIC,
            Connection.CreatedV1.TOPIC,
            Connection.ReconnectedV1.TOPIC,
            ResourceFeed.CreatedV1.TOPIC,
            NoticeReceipt.ReceivedV1.TOPIC,
            NoticeReceipt.ReceivedV2.TOPIC,
            WebhookDelivery.CreatedV1.TOPIC,
            ResourceFeed.PullScheduledV1.TOPIC,
            ResourceFeed.PullSucceededV1.TOPIC,
            ResourceFeed.DailySyncedV1.TOPIC,
            LinkToken.IssuedV1.TOPIC,
            LinkToken.IssuedV2.TOPIC,
            LinkToken.ConsumedV1.TOPIC,
            OAuthFlow.StartedV1.TOPIC,
            CredentialSignIn.ChallengedV1.TOPIC,
            Connection.DemoFailuresConfiguredV1.TOPIC,
        }
    )
    assert superseded[Order.CreatedV1.TOPIC] == Order.Created.TOPIC
    assert superseded[Connection.CreatedV1.TOPIC] == Connection.Created.TOPIC
    assert superseded[Connection.ReconnectedV1.TOPIC] == Connection.Reconnected.TOPIC
    assert superseded[ResourceFeed.CreatedV1.TOPIC] == ResourceFeed.Created.TOPIC
    assert superseded[NoticeReceipt.ReceivedV1.TOPIC] == NoticeReceipt.Received.TOPIC
    assert superseded[NoticeReceipt.ReceivedV2.TOPIC] == NoticeReceipt.Received.TOPIC
    assert superseded[WebhookDelivery.CreatedV1.TOPIC] == WebhookDelivery.Created.TOPIC
    assert superseded[ResourceFeed.PullScheduledV1.TOPIC] == ResourceFeed.PullScheduled.TOPIC
    assert superseded[ResourceFeed.PullSucceededV1.TOPIC] == ResourceFeed.PullSucceeded.TOPIC
    assert superseded[ResourceFeed.DailySyncedV1.TOPIC] == ResourceFeed.DailySynced.TOPIC
    assert superseded[LinkToken.IssuedV1.TOPIC] == LinkToken.Issued.TOPIC
    assert superseded[LinkToken.IssuedV2.TOPIC] == LinkToken.Issued.TOPIC
    assert superseded[LinkToken.ConsumedV1.TOPIC] == LinkToken.Consumed.TOPIC
    assert superseded[OAuthFlow.StartedV1.TOPIC] == OAuthFlow.Started.TOPIC
    assert superseded[CredentialSignIn.ChallengedV1.TOPIC] == CredentialSignIn.Challenged.TOPIC
    assert (
        superseded[Connection.DemoFailuresConfiguredV1.TOPIC]
        == Connection.DemoFailuresConfigured.TOPIC
    )


def test_the_fixture_holds_the_test_in_clear(written: Written) -> None:  # noqa: F811
    # What this file shows gone was there: the orders' tests in clear, as 1809f39 wrote.
    if not written.url.startswith("sqlite"):
        dump = gzip.decompress((DATA / "postgres-dump.sql.gz").read_bytes())
        assert NEEDLE.encode() in dump
        return
    path = Path(written.url.removeprefix("sqlite:///"))
    content = path.read_bytes()
    assert NEEDLE.encode() in content and CLEAR_KEY.encode() in content


def test_the_start_seals_the_orders_tests_and_the_chain_verifies(
    written: Written,  # noqa: F811
    service: Service,
) -> None:
    report = verified(service, SIGNED_HEADS)
    assert report.startswith("ok: ")
    # The orders' two, and the connections' and feeds' (test_connection_facts_sealed.py).
    assert f"{redacted_on(service)} redacted record(s) among them" in report
    with service.db.read() as conn:
        topics: dict[str, int] = dict(
            conn.execute(
                select(stored_events.c.topic, func.count()).group_by(stored_events.c.topic)
            ).all()
        )
        redacted = conn.execute(select(chain_redactions)).all()
        pending = conn.execute(select(func.count()).select_from(pending_redactions)).scalar()
        rows = conn.execute(select(orders.c.order_id, orders.c.sealed_lab_test)).all()
    assert Order.CreatedV1.TOPIC not in topics
    assert topics[Order.Created.TOPIC] == 2 and len(redacted) == redacted_on(service)
    assert topics[WebhookDelivery.Created.TOPIC] == (96 if service.db.is_sqlite else 99)
    # One redaction record per reason and batch of old_versions.BATCH records: main-4's
    # connection (erased) is removed; each redacted record is named by one of them.
    named = [r for x in records_of(service, REDACTION_TOPIC) for r in x["records"]]
    assert len(named) == redacted_on(service) and pending == 0
    assert {x["reason"] for x in records_of(service, REDACTION_TOPIC)} == {REMOVED, SEALED}
    assert topics[REDACTION_TOPIC] <= 2 * -(-redacted_on(service) // BATCH)
    # The redacted records, checked with the redaction that explains them (as a deletion
    # report's span check does).
    for entry in redacted:
        assert service.chain.check_span(entry.position, entry.position) is None
    # The read model holds the tests sealed, and they open with the users' keys.
    opened = {
        order_id: OrderedTest.of_opened(service.key_store.open(user_id, sealed))
        for order_id, sealed, user_id in [
            (r.order_id, r.sealed_lab_test, _owner(service, r.order_id)) for r in rows
        ]
    }
    cancelled = UUID(written.expected["ids"]["cancelled_order"])
    assert opened[cancelled] == OrderedTest(NEEDLE_ID, NEEDLE, (1077, 1079, 1080, 1046, 1038))
    # A second start finds nothing to redact: the log is as the first left it.
    with freeze_time(written.now):
        again = build_service(written.settings())
    try:
        assert verified(again, SIGNED_HEADS) == report
    finally:
        again.close()


def _owner(service: Service, order_id: UUID) -> UUID:
    with service.db.read() as conn:
        found = conn.execute(select(orders.c.user_id).where(orders.c.order_id == order_id))
        return UUID(str(found.scalar_one()))


def test_after_the_erasure_no_file_names_the_users_lab_test(
    written: Written,  # noqa: F811
    service: Service,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    places = on_disk(service)
    for needle in needles(service):
        assert holding(places, needle) == [], needle
    assert holding(places, CONTROL.encode())  # the searches read the rows
    main_2 = written.user("main-2")
    headers = written.headers("team")
    with (
        freeze_time(written.now) as frozen,
        TestClient(create_team_api(service), raise_server_exceptions=False) as client,
    ):
        frozen.tick(written.expected["grace_period_days"] * 86400 + 3600)
        assert service.jobs.sweep_erasures() == 1
        assert service.key_store.cipher(UUID(main_2)) is None
        order = written.expected["ids"]["cancelled_order"]
        then = {"as_of": written.now.isoformat()}
        answers = [
            client.get(f"/v2/audit/user/{main_2}", headers=headers),
            client.get(f"/v2/audit/user/{main_2}/deletion_report", headers=headers),
            client.get("/v3/orders", headers=headers),
            # As they were before the erasure: the order then, its test as erased now.
            client.get("/v3/orders", params=then, headers=headers),
            client.get(f"/v3/order/{order}", params=then, headers=headers),
            client.get(f"/v3/order/{order}", headers=headers),
        ]
    assert [a.status_code for a in answers[:5]] == [200] * 5, [a.text for a in answers]
    assert answers[4].json()["lab_test"]["name"] == ERASED_PLACEHOLDER
    # The command line's answers: the audit and the deletion report (HTML too).
    printed = printed_about(
        main_2,
        url=written.url,
        master_key_file=written.master_key_file,
        signing_key_file=written.signing_key_file,
        monkeypatch=monkeypatch,
        capsys=capsys,
        plain_audit=True,
    )
    # They do show the order (that it was placed and cancelled), not what it was of.
    assert all(order in answer for answer in printed), printed
    for text_answer in [a.text for a in answers] + printed:
        assert NEEDLE not in text_answer and NEEDLE_ID.hex not in text_answer
        assert str(NEEDLE_ID) not in text_answer
    assert service.chain.verify().ok
    places = on_disk(service)
    for needle in needles(service):
        assert holding(places, needle) == [], needle


def test_an_order_of_a_user_erased_before_the_start_loses_its_test(
    written: Written,  # noqa: F811
) -> None:
    # main-2's key destroyed before this code first starts (as its erasure does): its
    # order's test cannot be sealed, and is removed; the chain still verifies.
    main_2 = UUID(written.user("main-2"))
    engine = sa.create_engine(written.url)
    try:
        with engine.begin() as conn:
            conn.execute(delete(user_data_keys).where(user_data_keys.c.user_id == main_2))
    finally:
        engine.dispose()
    with freeze_time(written.now):
        service = build_service(written.settings())
    try:
        verified(service, SIGNED_HEADS)
        created = {
            UUID(record["user_id"]["_data_"]): record["sealed_lab_test"]
            for record in records_of(service, Order.Created.TOPIC)
        }
        assert created[main_2] == ERASED_PLACEHOLDER
        others = [sealed for user, sealed in created.items() if user != main_2]
        assert others and all(sealed != ERASED_PLACEHOLDER for sealed in others)
        reasons = {r["reason"] for r in records_of(service, REDACTION_TOPIC)}
        assert reasons == {REMOVED, SEALED}
        assert holding(on_disk(service), NEEDLE.encode()) == []
    finally:
        service.close()


def records_of(service: Service, topic: str) -> list[dict[str, Any]]:
    with service.db.read() as conn:
        found = conn.execute(select(stored_events.c.state).where(stored_events.c.topic == topic))
        return [json.loads(state) for (state,) in found]


# The interpretation of main-0's completed order, which 1809f39 kept in clear in the orders
# row (its only occurrence in the SQLite file: no other value of the fixture says so).
INTERPRETATION = b"normal"


def test_the_start_seals_the_orders_interpretation(
    written: Written,  # noqa: F811
    service: Service,
) -> None:
    # Revision 0019 dropped the clear column; the start filled the sealed value from the
    # Completed event and its keyed digest, then left no copy of the dropped value.
    order = UUID(written.expected["ids"]["order"])
    main_0 = UUID(written.user("main-0"))
    team = UUID(written.expected["team_id"])
    with service.db.read() as conn:
        row = conn.execute(select(orders).where(orders.c.order_id == order)).one()
    assert "interpretation" not in row._fields
    assert service.key_store.open(main_0, row.sealed_interpretation) == "normal"
    assert row.interpretation_digest == service.order_queries.interpretation_digest(team, "normal")
    # Another team's digest of the same value differs (no telling across teams).
    assert row.interpretation_digest != service.order_queries.interpretation_digest(
        UUID(int=1), "normal"
    )
    headers = written.headers("team")
    with freeze_time(written.now), TestClient(create_team_api(service)) as client:
        listed = {
            value: [
                o["id"]
                for o in client.get(
                    "/v3/orders", params={"interpretation": value}, headers=headers
                ).json()["orders"]
            ]
            for value in ("normal", "critical")
        }
        answer = client.get(f"/v3/order/{order}", headers=headers).json()
    assert listed == {"normal": [str(order)], "critical": []}
    assert answer["interpretation"] == "normal"
    assert holding(on_disk(service), INTERPRETATION) == []
    # A second start has nothing to fill: the row stays as the first left it.
    with freeze_time(written.now):
        again = build_service(written.settings())
    try:
        with again.db.read() as conn:
            kept = conn.execute(select(orders).where(orders.c.order_id == order)).one()
        assert kept.sealed_interpretation == row.sealed_interpretation
    finally:
        again.close()


def test_after_the_erasure_no_answer_nor_file_names_the_interpretation(
    written: Written,  # noqa: F811
    service: Service,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # main-0's completed order (normal): main-0 deleted, then erased after its grace
    # period; no answer about it, nor any page, says "normal" (no other value of the
    # fixture does), and the chain verifies with its signed heads.
    main_0 = written.user("main-0")
    order = written.expected["ids"]["order"]
    headers = written.headers("team")
    with (
        freeze_time(written.now) as frozen,
        TestClient(create_team_api(service), raise_server_exceptions=False) as client,
    ):
        assert client.delete(f"/v2/user/{main_0}", headers=headers).status_code == 200
        frozen.tick(written.expected["grace_period_days"] * 86400 + 3600)
        assert service.jobs.sweep_erasures() >= 1
        assert service.key_store.cipher(UUID(main_0)) is None
        then = {"as_of": written.now.isoformat()}
        answers = [
            client.get(f"/v2/audit/user/{main_0}", headers=headers),
            client.get(f"/v2/audit/user/{main_0}/deletion_report", headers=headers),
            client.get("/v3/orders", headers=headers),
            client.get("/v3/orders", params=then, headers=headers),
            client.get(f"/v3/order/{order}", params=then, headers=headers),
        ]
    assert [a.status_code for a in answers] == [200] * 5, [a.text for a in answers]
    assert answers[4].json()["interpretation"] == ERASED_PLACEHOLDER
    printed = printed_about(
        main_0,
        url=written.url,
        master_key_file=written.master_key_file,
        signing_key_file=written.signing_key_file,
        monkeypatch=monkeypatch,
        capsys=capsys,
    )
    assert all(order in answer for answer in printed[:2]), printed
    for text_answer in [a.text for a in answers] + printed:
        assert INTERPRETATION.decode() not in text_answer
    # `healthledger verify` passes (the deletion report signed a head of its own).
    assert service.chain.verify().ok
    assert main(["verify"]) == 0
    assert holding(on_disk(service), INTERPRETATION) == []


def test_two_processes_starting_at_once_redact_each_record_once(
    written: Written,  # noqa: F811
) -> None:
    # Two services of this code start together on the database of 1809f39: the start's
    # redactions race, one wins each batch, the other finds it done.
    upgrade(written.url, SERVICE)
    built: list[Service] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def start() -> None:
        try:
            barrier.wait()
            built.append(build_service(written.settings()))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(2)]
    with freeze_time(written.now):  # for both threads: freezegun's patching is global
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    try:
        assert errors == []
        service = built[0]
        verified(service, SIGNED_HEADS)
        with service.db.read() as conn:
            redacted = conn.execute(select(func.count()).select_from(chain_redactions)).scalar()
        assert redacted == redacted_on(service)
        named = [r["position"] for x in records_of(service, REDACTION_TOPIC) for r in x["records"]]
        assert sorted(named) == sorted(set(named)) and len(named) == redacted_on(service)
    finally:
        for service in built:
            service.close()
