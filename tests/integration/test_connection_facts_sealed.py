"""Connections' and resource feeds' facts sealed in the log (issue 29 §1, ADR 0032), on the
database main wrote at 1809f39 (tests/data/main_1809f39), on SQLite and PostgreSQL.

1809f39 stored each connection's provider and resource availability, and each feed's
provider and resource, in clear in their Created (and Reconnected) events. `main-4` had a
demo freestyle_libre connection (its one resource: glucose) and was erased by 1809f39's
sweep: its read-model rows and health data are gone, but its events still say
"freestyle_libre" and "glucose". The first start of this code redacts those records into
their version 2 (ADR 0028's mechanism): the facts sealed with the user's key for the live
users, the placeholder for `main-4` (no key to seal with). Afterwards the chain and its
signed heads verify, the live users' connections read as before, and neither word is in
any page of the event log (SQLite's file and -wal; PostgreSQL's pages and files), nor in
any API or CLI answer about `main-4`.

1809f39 also announced main-4's pull to a webhook endpoint: the delivery's event type
(`historical.data.glucose.created`) was in clear in its `WebhookDelivery.Created` v1 and
in `webhook_deliveries`. The start redacts those records too (the type sealed, the
placeholder for main-4; ADR 0028) and the rows hold only the sealed value, so the same
searches find no delivery type either."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.cli import main
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.persistence.engine.schema import (
    chain_redactions,
    pending_redactions,
    stored_events,
    webhook_deliveries,
)
from healthledger.adapters.persistence.eventstore.chain import REDACTION_TOPIC
from healthledger.adapters.persistence.eventstore.sealed_facts import SEALED_FACTS_FIELD
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.context import CommandContext
from healthledger.domain.personal_data import ERASED_PLACEHOLDER, SEALED_PLACEHOLDER
from healthledger.domain.redaction import REMOVED, SEALED
from healthledger.domain.webhooks.deliveries import WebhookDelivery
from sqlalchemy import func, select

from tests.conftest import Team
from tests.integration.test_health_facts_sealed import (
    CONTROL,
    ZONES_REDACTED,
    holding,
    postgres_files,
    postgres_pages,
    printed_about,
    records_of,
)
from tests.integration.test_todays_main import (  # noqa: F401  (fixtures)
    DATA,
    SIGNED_HEADS,
    Written,
    started,
    verified,
    written,
)
from tests.receivers import http_receiver
from tests.stream_ids import stream_of_connection, stream_of_feed

# main-4's device and what it measured: nowhere after the start.
FACTS = (b"freestyle_libre", b"glucose")
OLD_TOPICS = (
    Connection.CreatedV1.TOPIC,
    Connection.ReconnectedV1.TOPIC,
    ResourceFeed.CreatedV1.TOPIC,
    WebhookDelivery.CreatedV1.TOPIC,
    ResourceFeed.PullScheduledV1.TOPIC,
    ResourceFeed.PullSucceededV1.TOPIC,
    ResourceFeed.DailySyncedV1.TOPIC,
)
# Every pull 1809f39 scheduled began on this instant (expected.json's `range_start`), the
# erased main-4's too: after the start, in clear nowhere (ISO, and as a SQLite column).
WINDOW = (b"2026-10-29T00:00:00", b"2026-10-29 00:00:00")
# The sealed versions of a feed's pulls and syncs, and the values they seal.
SEALED_WINDOWS = {
    ResourceFeed.PullScheduled.TOPIC: {"range_start", "range_end"},
    ResourceFeed.PullSucceeded.TOPIC: {"oldest_day", "newest_day"},
    ResourceFeed.DailySynced.TOPIC: {"created_days", "updated_days", "session"},
}


def pages(service: Service) -> dict[str, bytes]:
    """What this test can read of the database's storage, by place."""
    if service.db.is_sqlite:
        path = service.db.sqlite_file
        assert path is not None
        found = {
            f"file{suffix}": path.with_name(path.name + suffix).read_bytes()
            for suffix in ("", "-wal")
            if path.with_name(path.name + suffix).exists()
        }
    else:
        tables = (
            "stored_events",
            "connections",
            "resource_feeds",
            "health_data",
            "lab_tests",
            "webhook_deliveries",
        )
        found = {}
        for place in (postgres_pages(service, tables), postgres_files(service, tables)):
            found.update(place or {})
        if not found:
            pytest.skip("neither pageinspect nor the server's files are reachable")
    return found


def test_the_fixture_holds_the_erased_users_device_in_clear(written: Written) -> None:  # noqa: F811
    # What this file shows gone was there: main-4's connection and feed, in clear in
    # their events' states (bytea, so hex, in the PostgreSQL dump).
    stated = [
        b'"provider":"freestyle_libre"',
        b'"resource":"glucose"',
        b'"event_type":"historical.data.glucose.created"',
        b'"range_start":{"_type_":"datetime_iso","_data_":"2026-10-29T00:00:00+00:00"}',
        b'"created_days":[{"_type_":"date_iso"',
    ]
    if written.url.startswith("sqlite"):
        with open(written.url.removeprefix("sqlite:///"), "rb") as stored:
            content = stored.read()
    else:
        content = gzip.decompress((DATA / "postgres-dump.sql.gz").read_bytes())
        stated = [fragment.hex().encode() for fragment in stated]
    for fragment in stated:
        assert fragment in content, fragment
    assert Connection.CreatedV1.TOPIC.encode() in content


def test_the_start_seals_connections_and_feeds_and_the_chain_verifies(
    written: Written,  # noqa: F811
    started: Service,  # noqa: F811
) -> None:
    service = started
    report = verified(service, SIGNED_HEADS)
    assert report.startswith("ok: ")
    with service.db.read() as conn:
        topics: dict[str, int] = dict(
            conn.execute(
                select(stored_events.c.topic, func.count()).group_by(stored_events.c.topic)
            ).all()
        )
        redacted = conn.execute(select(func.count()).select_from(chain_redactions)).scalar()
        pending = conn.execute(select(func.count()).select_from(pending_redactions)).scalar()
    assert not set(OLD_TOPICS) & set(topics)
    assert pending == 0
    # Three connections and their feeds of live users sealed, main-4's removed; the two
    # orders of ADR 0028's first redaction as before.
    assert topics[Connection.Created.TOPIC] == 4
    deliveries = topics[WebhookDelivery.Created.TOPIC]
    windows = sum(topics.get(topic, 0) for topic in SEALED_WINDOWS)
    assert topics[ResourceFeed.PullScheduled.TOPIC] and topics[ResourceFeed.DailySynced.TOPIC]
    # ... and the two link tokens' Issued (revision 0043) and the one Consumed (revision
    # 0044: test_link_redirects_sealed.py), main-6's OAuth flow's Started (revision
    # 0045: test_oauth_makers_sealed.py) and main-1's DemoFailuresConfigured (revision
    # 0049: test_demo_failures_sealed.py).
    assert redacted == (
        2
        + topics[Connection.Created.TOPIC]
        + topics[ResourceFeed.Created.TOPIC]
        + deliveries
        + windows
        # The users' time zones (revision 0042), the link tokens' Issued (revision 0043)
        # and Consumed (revision 0044), the OAuth flow's Started (revision 0045), the
        # demo failures (revision 0049).
        + ZONES_REDACTED
        + 2
        + 1
        + 1
        + 1
    )
    main_4 = UUID(written.user("main-4"))
    # The pulls' windows, their spans and the syncs' days: sealed with the owner's key
    # (the feeds' stream owner: version 1 named no user), main-4's the placeholder; the
    # count of days stays in clear.
    for topic, sealed_fields in SEALED_WINDOWS.items():
        for record in records_of(service, topic):
            assert not sealed_fields & set(record), record
            erased = UUID(record["user_id"]["_data_"]) == main_4
            assert (record[SEALED_FACTS_FIELD] == ERASED_PLACEHOLDER) == erased
    assert all(isinstance(r["days_created"], int) for r in records_of(service, topic))
    for topic in (Connection.Created.TOPIC, ResourceFeed.Created.TOPIC):
        for record in records_of(service, topic):
            # No fact in clear: only the sealed value (the placeholder for main-4).
            assert not {"provider", "resource", "resource_availability"} & set(record)
            erased = UUID(record["user_id"]["_data_"]) == main_4
            assert (record[SEALED_FACTS_FIELD] == ERASED_PLACEHOLDER) == erased
    # A delivery's type: sealed, and in clear only for a user's lifecycle (`user.*`).
    kept = set()
    for record in records_of(service, WebhookDelivery.Created.TOPIC):
        assert "event_type" not in record
        erased = UUID(record["user_id"]["_data_"]) == main_4
        assert (record[SEALED_FACTS_FIELD] == ERASED_PLACEHOLDER) == erased
        kept.add(record["lifecycle_type"])
    assert kept == {None, "user.deleted", "user.deletion_undone", "user.erased"}
    with service.db.read() as conn:
        rows = conn.execute(select(webhook_deliveries)).all()
    assert len(rows) == deliveries
    types = service.dispatcher.payloads.event_types(rows)
    # main-4's went with its key; the live users' open (the sender routes by them).
    assert {t for row, t in zip(rows, types, strict=True) if row.user_id == main_4} <= {
        None,
        "user.deleted",
        "user.erased",
    }
    assert "historical.data.sleep.created" in types
    reasons = {r["reason"] for r in records_of(service, REDACTION_TOPIC)}
    assert reasons == {SEALED, REMOVED}
    # The live users' connections read as they were (the domain opens the facts).
    main_0 = UUID(written.user("main-0"))
    oura = service.ledger.find(stream_of_connection(service, main_0, "oura"))
    assert isinstance(oura, Connection) and oura.provider == "oura"
    assert "sleep" in oura.resource_availability
    feed = service.ledger.find(stream_of_feed(service, main_0, "oura", "sleep"))
    assert isinstance(feed, ResourceFeed) and (feed.provider, feed.resource) == ("oura", "sleep")
    assert feed.window[0] == datetime(2026, 10, 29, tzinfo=UTC)
    assert feed.oldest_day is not None and feed.newest_day is not None
    libre_feed = service.ledger.find(stream_of_feed(service, main_4, "freestyle_libre", "glucose"))
    assert isinstance(libre_feed, ResourceFeed)
    assert (libre_feed.range_start, libre_feed.oldest_day) == (None, None)
    # main-4's reads as erased: nothing to open.
    libre = service.ledger.find(stream_of_connection(service, main_4, "freestyle_libre"))
    assert isinstance(libre, Connection)
    assert (libre.provider, libre.resource_availability) == (ERASED_PLACEHOLDER, {})
    # A second start finds nothing to redact.
    with freeze_time(written.now):
        again = build_service(written.settings())
    try:
        assert verified(again, SIGNED_HEADS) == report
    finally:
        again.close()


def test_after_the_start_no_page_nor_answer_names_the_erased_users_device(
    written: Written,  # noqa: F811
    started: Service,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    service = started
    places = pages(service)
    for fact in (*FACTS, *WINDOW):
        assert holding(places, fact) == [], fact
    assert holding(places, CONTROL.encode())  # the searches do read the rows
    main_4 = written.user("main-4")
    headers = written.headers("team")
    # Before main-4's erasure (it was connected on 2026-11-02 and erased 8 days later).
    before = {"as_of": "2026-11-03T00:00:00+00:00"}
    with (
        freeze_time(written.now),
        TestClient(create_team_api(service), raise_server_exceptions=False) as client,
    ):
        answers = [
            client.get(f"/v2/audit/user/{main_4}", headers=headers),
            client.get(f"/v2/audit/user/{main_4}/deletion_report", headers=headers),
            client.get(f"/v2/user/providers/{main_4}", headers=headers),
            client.get(f"/v2/user/providers/{main_4}", params=before, headers=headers),
            client.get("/v2/introspect/historical_pull", headers=headers),
            client.get("/v2/introspect/historical_pull", params=before, headers=headers),
            client.get("/v2/introspect/resources", headers=headers),
            client.get("/v2/introspect/resources", params=before, headers=headers),
            client.get("/v2/providers", headers=headers),
        ]
    assert [a.status_code < 500 for a in answers] == [True] * len(answers), [
        a.text for a in answers
    ]
    printed = printed_about(
        main_4,
        url=written.url,
        master_key_file=written.master_key_file,
        signing_key_file=written.signing_key_file,
        monkeypatch=monkeypatch,
        capsys=capsys,
    )
    # The audit does show main-4's connection and feed (that they were made, when and by
    # whom), not what they were of.
    assert str(stream_of_connection(service, UUID(main_4), "freestyle_libre")) in printed[0]
    # The catalog answer names every provider (reference data): left out of the search.
    about_main_4 = [a.text for a in answers[:-1]] + printed
    for answer in about_main_4:
        for fact in FACTS:
            assert fact not in answer.encode(), (fact, answer[:300])
    # Its window (the live users' pulls began on the same instant: the team's listings
    # show theirs): not in its audit, deletion report or connections, nor the CLI's.
    for answer in [a.text for a in answers[:4]] + printed:
        for fact in WINDOW:
            assert fact not in answer.encode(), (fact, answer[:300])
    assert b"freestyle_libre" in answers[-1].content
    # `healthledger verify` passes (the deletion report signed a head of its own).
    assert service.chain.verify().ok
    assert main(["verify"]) == 0
    places = pages(service)
    for fact in (*FACTS, *WINDOW):
        assert holding(places, fact) == [], fact


def test_the_audit_of_a_live_user_shows_its_connection_sealed(
    written: Written,  # noqa: F811
    started: Service,  # noqa: F811
) -> None:
    service = started
    # main-0's oura connection: its audit shows the facts as sealed values, as it shows
    # the demographics; the providers answer opens them.
    main_0 = written.user("main-0")
    headers = written.headers("team")
    with freeze_time(written.now), TestClient(create_team_api(service)) as client:
        audit = client.get(f"/v2/audit/user/{main_0}", headers=headers).json()
        providers = client.get(f"/v2/user/providers/{main_0}", headers=headers).json()
    created: list[dict[str, Any]] = [e for e in audit["data"] if e["event"] == "Connection.Created"]
    assert len(created) == 1, audit
    changes = created[0]["changes"]
    assert changes["provider"] == changes["resource_availability"] == SEALED_PLACEHOLDER
    assert "oura" not in json.dumps(audit)
    assert [p["slug"] for p in providers["providers"]] == ["oura"]


# -- a database written by this code -------------------------------------------------

# The device's words: the slug, its catalog name, the resource (and, on its own, the
# logo's path names the slug too).
DEVICE = (b"freestyle_libre", b"FreeStyle Libre", b"glucose")
# Where the user's link flow ended, naming the person as teams do (issue 29 §1): the
# redirect_url is sealed like the device (revision 0043). Its needle is in no other value.
REDIRECT_URL = "https://app.example.com/done?user=libre.r4z8@example.org"
REDIRECT_NEEDLE = b"libre.r4z8"
LINK_TOKENS = ("link_tokens",)
# The stored form of a feed's founding event: in the log and its pages in clear (the
# searches do read the rows).
FEED_TOPIC = ResourceFeed.Created.TOPIC.encode()


def fresh_pages(service: Service, also: tuple[str, ...] = ()) -> dict[str, bytes]:
    """SQLite: the file and its -wal. PostgreSQL: the pages and files of the log and of
    the connections', feeds' and webhook deliveries' read models (health_data's key holds
    the provider and resource in clear: not these tables', ADR 0032 says so), and of the
    tables `also` names."""
    if service.db.is_sqlite:
        path = service.db.sqlite_file
        assert path is not None
        return {
            f"file{suffix}": path.with_name(path.name + suffix).read_bytes()
            for suffix in ("", "-wal")
            if path.with_name(path.name + suffix).exists()
        }
    tables = ("stored_events", "connections", "resource_feeds", "webhook_deliveries", *also)
    found: dict[str, bytes] = {}
    for place in (postgres_pages(service, tables), postgres_files(service, tables)):
        found.update(place or {})
    if not found:
        pytest.skip("neither pageinspect nor the server's files are reachable")
    return found


def test_a_connection_is_never_in_clear_and_its_erasure_leaves_no_word_of_it(
    service: Service,
    team: Team,
    ctx: CommandContext,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    headers = team.headers
    # After the team's creation (the fixture's, now): the answers as of then travel.
    start = datetime.now(UTC) + timedelta(hours=1)
    with (
        http_receiver() as receiver,
        freeze_time(start) as frozen,
        TestClient(create_team_api(service)) as client,
    ):
        user = client.post("/v2/user", json={"client_user_id": "libre-1"}, headers=headers)
        user_id = user.json()["user_id"]
        # A link token for the device whose redirect_url names the person, opened for the
        # link API (the maker sealed like the URL: revision 0044).
        issued = client.post(
            "/v2/link/token",
            json={"user_id": user_id, "redirect_url": REDIRECT_URL, "provider": "freestyle_libre"},
            headers=headers,
        )
        assert issued.status_code == 200, issued.text
        link_token = {"x-vital-link-token": issued.json()["link_token"]}
        shown_link = client.get("/v2/link/state", headers=link_token).json()
        assert shown_link["redirect_url"] == REDIRECT_URL
        assert shown_link["provider"] == "freestyle_libre"
        # An endpoint of the user's environment hears of its device (its deliveries'
        # types name it: `historical.data.glucose.created`).
        environment = service.dispatcher.environment_of(UUID(user_id))
        assert environment is not None
        service.webhooks.create(ctx, team.team_id, environment, url=receiver.url("ok"))
        connected = client.post(
            "/v2/link/connect/demo",
            json={"user_id": user_id, "provider": "freestyle_libre"},
            headers=headers,
        )
        assert connected.status_code == 200, connected.text
        frozen.tick(60)
        assert service.jobs.run_due_pulls() >= 1
        # The team reads its user's device, opened with the user's key...
        providers = client.get(f"/v2/user/providers/{user_id}", headers=headers).json()
        assert [p["slug"] for p in providers["providers"]] == ["freestyle_libre"]
        assert "glucose" in providers["providers"][0]["resource_availability"]
        pulled = client.get(
            "/v2/introspect/historical_pull",
            params={"user_id": user_id, "provider": "freestyle_libre"},
            headers=headers,
        ).json()
        assert pulled["data"][0]["provider"]["freestyle_libre"]["pulled"]["glucose"]["status"]
        # The sender opens each delivery's sealed type to build and route it (ADR 0028).
        while service.jobs.dispatch_webhooks():
            pass
        sent = {json.loads(r.body)["event_type"] for r in receiver.on("ok")}
        assert {"provider.connection.created", "historical.data.glucose.created"} <= sent
        # The pull's window and the days it found (which days the person wore the
        # device, issue 29): read by the team, opened with the user's key...
        feed_id = stream_of_feed(service, UUID(user_id), "freestyle_libre", "glucose")
        feed = service.ledger.find(feed_id)
        assert isinstance(feed, ResourceFeed) and feed.oldest_day is not None
        start_of_window, _ = feed.window
        shown_pull = pulled["data"][0]["provider"]["freestyle_libre"]["pulled"]["glucose"]
        assert datetime.fromisoformat(shown_pull["range_start"]) == start_of_window
        resources = client.get(
            "/v2/introspect/resources", params={"user_id": user_id}, headers=headers
        ).json()
        shown_days = resources["data"][0]["provider"]["freestyle_libre"]["glucose"]
        assert shown_days["oldest_data"] == feed.oldest_day.isoformat()
        # Its first day: a date no event's own time names (the pull ran today).
        assert feed.oldest_day < start.date()
        window = window_words(start_of_window, feed.oldest_day)
        lived = datetime.now(UTC).isoformat()
        # ... which no page of the log or of the read models holds in clear, even now.
        places = fresh_pages(service)
        assert holding(places, FEED_TOPIC)
        if not service.db.is_sqlite:
            for word in (*DEVICE, *window):
                assert holding(places, word) == [], word
        # The redirect_url and the device: in no page of the log nor of the link tokens'
        # rows either (since revision 0044 no token's row holds its maker in clear, so the
        # reused test schema's pages of earlier tests' deleted tokens hold none either).
        with_tokens = fresh_pages(service, also=LINK_TOKENS)
        assert holding(with_tokens, REDIRECT_NEEDLE) == []
        if not service.db.is_sqlite:
            for word in DEVICE:
                assert holding(with_tokens, word) == [], word

        frozen.tick(60)
        assert client.delete(f"/v2/user/{user_id}", headers=headers).status_code == 200
        frozen.tick(service.settings.grace_period.total_seconds() + 60)
        assert service.jobs.sweep_erasures() == 1
        then = {"as_of": lived}
        answers = [
            client.get(f"/v2/audit/user/{user_id}", headers=headers),
            client.get(f"/v2/audit/user/{user_id}/deletion_report", headers=headers),
            client.get(f"/v2/user/providers/{user_id}", params=then, headers=headers),
            client.get(f"/v2/user/{user_id}", params=then, headers=headers),
            client.get("/v2/user", params=then, headers=headers),
            client.get("/v2/introspect/historical_pull", params=then, headers=headers),
            client.get("/v2/introspect/resources", params=then, headers=headers),
        ]
    assert [a.status_code for a in answers] == [200] * len(answers), [a.text for a in answers]
    # As of when it lived: the connection is there, its device is not.
    (shown,) = answers[2].json()["providers"]
    assert shown["slug"] == ERASED_PLACEHOLDER and shown["resource_availability"] == {}
    printed = printed_about(
        user_id,
        url=service.settings.database_url,
        master_key_file=service.settings.master_key_file,
        signing_key_file=None,
        monkeypatch=monkeypatch,
        capsys=capsys,
    )
    assert "Connection.Created" in printed[0] and "ResourceFeed.Created" in printed[0]
    for answer in [a.text for a in answers] + printed:
        for word in (*DEVICE, *window, REDIRECT_NEEDLE):
            assert word.decode() not in answer, (word, answer[:300])
    assert service.chain.verify().ok
    places = fresh_pages(service)
    assert holding(places, FEED_TOPIC)
    for word in (*DEVICE, *window):
        assert holding(places, word) == [], word
    with_tokens = fresh_pages(service, also=LINK_TOKENS)
    for word in (*DEVICE, REDIRECT_NEEDLE):
        assert holding(with_tokens, word) == [], word


def window_words(start_of_window: datetime, oldest_day: date) -> tuple[bytes, ...]:
    """How a pull's window start and a feed's first day with data would be written in
    clear: the log's ISO form, a SQLite column's, the bare day."""
    return (
        start_of_window.isoformat().encode(),
        str(start_of_window.replace(tzinfo=None)).encode(),
        oldest_day.isoformat().encode(),
    )
