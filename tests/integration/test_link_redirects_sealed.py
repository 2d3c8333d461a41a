"""A link token's redirect_url sealed with the user's key (issue 29 §1, ADR 0032, revision
0043), on SQLite and PostgreSQL.

Teams put their own identifiers of the person in the URL the link flow ends at
(`https://app.example.com/done?user=ada@example.org`). `LinkToken.Issued` v2 holds it only
sealed, and the `link_tokens` row the log's sealed value; the link page and the link API
open it with the user's key. The v1 records (the URL in clear) are redacted at the start:
sealed for a live user, the placeholder for one erased already; the chain verifies, and
afterwards no page of the log or of the read model holds either URL in clear, nor does
any answer about the erased user. The database main wrote at 1809f39 holds such a record
(`main-6`'s token, which ended at the OAuth test's APP): after the start it is sealed too.

Since revision 0044 the token's maker is sealed the same way (a health fact:
`freestyle_libre`, a glucose monitor, says the person is diabetic): `provider` and
`filter_on_providers` in `LinkToken.Issued` v3's sealed facts, the maker connected in
`LinkToken.Consumed` v2's, and the row's `sealed_facts` and `sealed_consumption`. The v2
Issued and v1 Consumed records are redacted at the start alike (1809f39's `main-3` token
for `fitbit`, `main-6`'s consumed by `oura`).
"""

from __future__ import annotations

import gzip
import io
import json
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.compliance.chain_commands import verify_command
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.link_page import create_link_app, outcome_url
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.persistence.engine import migrating
from healthledger.adapters.persistence.engine.schema import link_tokens
from healthledger.adapters.persistence.eventstore.chain import REDACTION_TOPIC
from healthledger.adapters.persistence.eventstore.sealed_facts import SEALED_FACTS_FIELD
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.link_tokens import LinkToken
from healthledger.domain.context import CommandContext
from healthledger.domain.personal_data import ERASED_PLACEHOLDER, SEALED_PLACEHOLDER
from healthledger.domain.redaction import REMOVED, SEALED
from sqlalchemy import select

from tests.conftest import Team
from tests.integration.oauth_browser import APP
from tests.integration.test_health_facts_sealed import (
    holding,
    postgres_files,
    postgres_pages,
    printed_about,
    records_of,
)
from tests.integration.test_notice_windows_sealed import states
from tests.integration.test_todays_main import (  # noqa: F401  (fixtures)
    DATA,
    SIGNED_HEADS,
    Written,
    started,
    verified,
    written,
)

# URLs naming the person as teams make them; each needle is in no other value of a test.
LIVE_URL = "https://app.example.com/done?user=ada.q7x2@example.org"
GONE_URL = "https://app.example.com/done?user=bob.k9w4@example.org"
LIVE_NEEDLE, GONE_NEEDLE = b"ada.q7x2", b"bob.k9w4"


def places(service: Service) -> dict[str, bytes]:
    """SQLite: the file and its -wal. PostgreSQL: the pages (and files) of the log and of
    the link tokens' read model."""
    if service.db.is_sqlite:
        path = service.db.sqlite_file
        assert path is not None
        return {
            f"file{suffix}": path.with_name(path.name + suffix).read_bytes()
            for suffix in ("", "-wal")
            if path.with_name(path.name + suffix).exists()
        }
    tables = ("stored_events", "link_tokens")
    found: dict[str, bytes] = {}
    for place in (postgres_pages(service, tables), postgres_files(service, tables)):
        found.update(place or {})
    if not found:
        pytest.skip("neither pageinspect nor the server's files are reachable")
    return found


def issued_v1(user_id: UUID, team_id: UUID, redirect_url: str) -> tuple[LinkToken, str]:
    """A token as `Linking.issue` makes it, with its text."""
    return LinkToken.issue(
        CommandContext(actor="team_api_key:test", request_id=f"req-{uuid4().hex[:8]}"),
        datetime.now(UTC),
        team_id=team_id,
        user_id=user_id,
        environment="sandbox",
        provider=None,
        redirect_url=redirect_url,
        filter_on_providers=None,
        on_error=None,
        on_close=None,
    )


def as_v1(token: LinkToken) -> LinkToken.IssuedV1:
    """The same token as the main before revision 0043 recorded it: the URL in clear."""
    (event,) = token.collect_events()
    return LinkToken.IssuedV1(**vars(event))


def test_an_old_tokens_redirect_url_is_redacted_and_goes_with_its_user(
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
            for name in ("redirect-live", "redirect-gone")
        ]
        live, gone = (UUID(m.json()["user_id"]) for m in made)
        # Recorded as the main before revision 0043 did: the URL in clear in the log.
        (live_token, live_plain), (gone_token, _) = (
            issued_v1(live, team.team_id, LIVE_URL),
            issued_v1(gone, team.team_id, GONE_URL),
        )
        service.ledger.save(as_v1(live_token), as_v1(gone_token))
        old = states(service, LinkToken.IssuedV1.TOPIC)
        assert len(old) == 2
        for needle in (LIVE_NEEDLE, GONE_NEEDLE):
            assert [s for s in old if needle in s], needle

        # One of the two users erased with a v1 record in the log.
        frozen.tick(60)
        assert client.delete(f"/v2/user/{gone}", headers=headers).status_code == 200
        frozen.tick(service.settings.grace_period.total_seconds() + 60)
        assert service.jobs.sweep_erasures() == 1

    # The database as the main before this revision leaves it: at 0042, the v1 records in
    # the log and the live token's row holding its URL in clear (what its projection wrote).
    service.close()
    migrating.downgrade(settings.database_url, "0042")
    old_rows = sa.table("link_tokens", sa.column("token_id", sa.Uuid), sa.column("redirect_url"))
    engine = sa.create_engine(settings.database_url, poolclass=sa.NullPool)
    with engine.begin() as conn:
        conn.execute(
            sa.update(old_rows)
            .where(old_rows.c.token_id == live_token.id)
            .values(redirect_url=LIVE_URL)
        )
    engine.dispose()
    with freeze_time(start + timedelta(days=9)):
        started = build_service(settings)
    try:
        # The start redacted both into version 2, chained: one redaction record per
        # reason, sealed for the live user, removed for the erased one.
        assert sorted(
            (r["reason"], len(r["records"])) for r in records_of(started, REDACTION_TOPIC)
        ) == [(REMOVED, 1), (SEALED, 1)]
        redacted = records_of(started, LinkToken.Issued.TOPIC)
        assert len(redacted) == 2
        assert not [r for r in redacted if "redirect_url" in r]
        assert sorted(r[SEALED_FACTS_FIELD] == ERASED_PLACEHOLDER for r in redacted) == [
            False,
            True,
        ]
        assert started.chain.verify().ok
        out = io.StringIO()
        assert verify_command(started.chain, None, out) == 0, out.getvalue()
        # The live user's URL opens, from the log and from the row the start filled; the
        # erased one's reads None.
        live_found = started.ledger.find(live_token.id)
        assert isinstance(live_found, LinkToken) and live_found.redirect_url == LIVE_URL
        gone_found = started.ledger.find(gone_token.id)
        assert isinstance(gone_found, LinkToken) and gone_found.redirect_url is None
        with freeze_time(start + timedelta(days=9)):
            view = started.link_token_queries.genuine(live_plain)
        assert view is not None and view.redirect_url == LIVE_URL
        with started.db.read() as conn:
            (row,) = conn.execute(select(link_tokens)).mappings().all()
        assert "redirect_url" not in row and row["sealed_facts"] is not None
        # No page names either URL, the old records' nor the dropped column's.
        stored = places(started)
        assert holding(stored, LinkToken.Issued.TOPIC.encode())  # the rows are read
        for needle in (LIVE_NEEDLE, GONE_NEEDLE):
            assert holding(stored, needle) == [], needle
        # Nor does any answer about the erased user, of the API or the CLI; the live
        # user's audit shows its URL as a sealed value.
        with freeze_time(start + timedelta(days=9)), TestClient(create_team_api(started)) as client:
            answers = [
                client.get(f"/v2/audit/user/{gone}", headers=headers),
                client.get(f"/v2/audit/user/{gone}/deletion_report", headers=headers),
                client.get(f"/v2/audit/user/{live}", headers=headers),
            ]
        assert [a.status_code for a in answers] == [200] * 3, [a.text for a in answers]
        (shown,) = [e for e in answers[2].json()["data"] if e["event"] == "LinkToken.Issued"]
        assert shown["changes"]["redirect_url"] == SEALED_PLACEHOLDER
        (shown,) = [e for e in answers[0].json()["data"] if e["event"] == "LinkToken.Issued"]
        assert shown["changes"]["redirect_url"] == ERASED_PLACEHOLDER
        printed = printed_about(
            str(gone),
            url=settings.database_url,
            master_key_file=settings.master_key_file,
            signing_key_file=None,
            monkeypatch=monkeypatch,
            capsys=capsys,
        )
        for answer in [a.text for a in answers] + printed:
            for needle in (LIVE_NEEDLE, GONE_NEEDLE):
                assert needle.decode() not in answer, (needle, answer[:300])
    finally:
        started.close()


def test_a_new_tokens_redirect_url_is_held_only_sealed_and_still_ends_the_flow(
    service: Service, team: Team
) -> None:
    with (
        TestClient(create_team_api(service)) as client,
        TestClient(create_link_app(service), follow_redirects=False) as page,
    ):
        made = client.post(
            "/v2/user", json={"client_user_id": "redirect-new"}, headers=team.headers
        )
        user_id = made.json()["user_id"]
        issued = client.post(
            "/v2/link/token",
            json={"user_id": user_id, "redirect_url": LIVE_URL},
            headers=team.headers,
        )
        assert issued.status_code == 200, issued.text
        token = issued.json()["link_token"]
        # Neither the record nor the row holds it in clear (their bytes)...
        (state,) = states(service, LinkToken.Issued.TOPIC)
        assert LIVE_NEEDLE not in state and b"redirect_url" not in state
        with service.db.read() as conn:
            (row,) = conn.execute(select(link_tokens)).mappings().all()
        assert not [column for column, value in row.items() if LIVE_NEEDLE.decode() in str(value)]
        assert row["sealed_facts"] == json.loads(state)[SEALED_FACTS_FIELD]
        # ... and the link API and the link page open it.
        shown = client.get("/v2/link/state", headers={"x-vital-link-token": token})
        assert shown.json()["redirect_url"] == LIVE_URL
        connected = page.post("/connect", data={"token": token, "provider": "oura"})
        assert connected.status_code == 303, connected.text
        assert connected.headers["location"] == outcome_url(LIVE_URL, "success")


# -- the token's maker (revision 0044) ---------------------------------------------------

# A maker that says the person is diabetic (a glucose monitor), and one the link connects.
MAKER, CONNECTED = "freestyle_libre", "withings"


def test_a_new_tokens_maker_is_held_only_sealed_and_the_link_still_offers_it(
    service: Service, team: Team
) -> None:
    with (
        TestClient(create_team_api(service)) as client,
        TestClient(create_link_app(service), follow_redirects=False) as page,
    ):
        made = client.post("/v2/user", json={"client_user_id": "maker-new"}, headers=team.headers)
        user_id = made.json()["user_id"]
        chosen = client.post(
            "/v2/link/token",
            json={"user_id": user_id, "provider": MAKER},
            headers=team.headers,
        )
        filtered = client.post(
            "/v2/link/token",
            json={"user_id": user_id, "filter_on_providers": [MAKER, CONNECTED]},
            headers=team.headers,
        )
        assert chosen.status_code == filtered.status_code == 200, (chosen.text, filtered.text)
        chosen_token = {"x-vital-link-token": chosen.json()["link_token"]}
        token = filtered.json()["link_token"]
        # The link API and the link page open the makers with the user's key...
        shown = client.get("/v2/link/state", headers=chosen_token).json()
        assert (shown["provider"], shown["filter_on_providers"]) == (MAKER, None)
        offered = client.get("/v2/link/providers", headers=chosen_token).json()
        assert [p["slug"] for p in offered] == [MAKER]
        shown = client.get("/v2/link/state", headers={"x-vital-link-token": token}).json()
        assert (shown["provider"], shown["filter_on_providers"]) == (None, [MAKER, CONNECTED])
        text = page.get("/", params={"token": token}).text
        assert f'name="provider" value="{CONNECTED}"' in text
        # ... which refuses a maker the token does not offer, and connects one it does.
        refused = page.post("/connect", data={"token": token, "provider": "oura"})
        assert refused.status_code == 400, refused.text
        connected = page.post("/connect", data={"token": token, "provider": CONNECTED})
        assert connected.status_code == 200, connected.text
        assert (
            client.get("/v2/link/state", headers={"x-vital-link-token": token}).json()["state"]
            == "consumed"
        )
    # Neither the records nor the rows hold a maker in clear (their bytes).
    issued = states(service, LinkToken.Issued.TOPIC)
    (consumed,) = states(service, LinkToken.Consumed.TOPIC)
    assert len(issued) == 2
    for state in (*issued, consumed):
        assert MAKER.encode() not in state and CONNECTED.encode() not in state, state
        assert b'"provider"' not in state and b"filter_on_providers" not in state, state
    with service.db.read() as conn:
        rows = conn.execute(select(link_tokens)).mappings().all()
    assert len(rows) == 2
    for row in rows:
        assert not [c for c, v in row.items() if MAKER in str(v) or CONNECTED in str(v)], row
    # The row keeps the log's sealed values; the domain reads them in clear.
    (used,) = [row for row in rows if row["consumed_at"] is not None]
    assert used["sealed_consumption"] == json.loads(consumed)[SEALED_FACTS_FIELD]
    found = service.ledger.find(used["token_id"])
    assert isinstance(found, LinkToken)
    assert found.filter_on_providers == [MAKER, CONNECTED] and found.consumed_provider == CONNECTED
    assert service.key_store.open(UUID(user_id), used["sealed_consumption"]) == {
        "provider": CONNECTED
    }


def issued_v2(
    user_id: UUID,
    team_id: UUID,
    provider: str | None,
    filter_on_providers: list[str] | None,
) -> tuple[LinkToken, LinkToken.IssuedV2]:
    """A token as the main before revision 0044 recorded it: the redirect_url sealed, the
    makers in clear."""
    token, _ = LinkToken.issue(
        CommandContext(actor="team_api_key:test", request_id=f"req-{uuid4().hex[:8]}"),
        datetime.now(UTC),
        team_id=team_id,
        user_id=user_id,
        environment="sandbox",
        provider=provider,
        redirect_url=None,
        filter_on_providers=filter_on_providers,
        on_error=None,
        on_close=None,
    )
    (event,) = token.collect_events()
    return token, LinkToken.IssuedV2(**vars(event))


# Unique to the next test: its old consumption's request id, by which (with the maker
# after it) its record's bytes are found in pages other tests' rows share.
CONSUMED_REQUEST = "req-consumed-m4k8"


def test_old_tokens_makers_are_redacted_and_go_with_their_user(
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
            for name in ("maker-live", "maker-gone")
        ]
        live, gone = (UUID(m.json()["user_id"]) for m in made)
        # Recorded as the main before revision 0044 did: the makers in clear, the live
        # user's token consumed by its maker (a v1 consumption, naming no user).
        live_token, live_issued = issued_v2(live, team.team_id, MAKER, None)
        gone_token, gone_issued = issued_v2(gone, team.team_id, None, [MAKER, "dexcom"])
        consumed_v1 = LinkToken.ConsumedV1(  # type: ignore[call-arg]
            originator_id=live_token.id,
            originator_version=2,
            timestamp=datetime.now(UTC),
            actor=f"link_token:{live_token.id}",
            request_id=CONSUMED_REQUEST,
            provider=MAKER,
        )
        service.ledger.save(live_issued, gone_issued, consumed_v1)
        old = [
            *states(service, LinkToken.IssuedV2.TOPIC),
            *states(service, LinkToken.ConsumedV1.TOPIC),
        ]
        assert len(old) == 3 and all(MAKER.encode() in state for state in old)

        frozen.tick(60)
        assert client.delete(f"/v2/user/{gone}", headers=headers).status_code == 200
        frozen.tick(service.settings.grace_period.total_seconds() + 60)
        assert service.jobs.sweep_erasures() == 1

    # The database as the main before this revision leaves it: at 0043, the old records
    # in the log and the live token's row holding its makers in clear.
    service.close()
    migrating.downgrade(settings.database_url, "0043")
    old_rows = sa.table(
        "link_tokens",
        sa.column("token_id", sa.Uuid),
        sa.column("provider"),
        sa.column("consumed_provider"),
    )
    engine = sa.create_engine(settings.database_url, poolclass=sa.NullPool)
    with engine.begin() as conn:
        conn.execute(
            sa.update(old_rows)
            .where(old_rows.c.token_id == live_token.id)
            .values(provider=MAKER, consumed_provider=MAKER)
        )
    engine.dispose()
    with freeze_time(start + timedelta(days=9)):
        started = build_service(settings)
    try:
        # Redacted, chained: the live user's two records sealed, the erased one's removed.
        assert sorted(
            (r["reason"], len(r["records"])) for r in records_of(started, REDACTION_TOPIC)
        ) == [(REMOVED, 1), (SEALED, 2)]
        assert records_of(started, LinkToken.IssuedV2.TOPIC) == []
        assert records_of(started, LinkToken.ConsumedV1.TOPIC) == []
        issued = records_of(started, LinkToken.Issued.TOPIC)
        (consumed,) = records_of(started, LinkToken.Consumed.TOPIC)
        assert len(issued) == 2
        for record in (*issued, consumed):
            assert "provider" not in record and "filter_on_providers" not in record
        assert consumed["user_id"]["_data_"] == live.hex
        assert started.chain.verify().ok
        out = io.StringIO()
        assert verify_command(started.chain, None, out) == 0, out.getvalue()
        # The live user's makers open, from the log and from the row the start filled;
        # the erased one's read as erased.
        live_found = started.ledger.find(live_token.id)
        assert isinstance(live_found, LinkToken)
        assert (live_found.provider, live_found.consumed_provider) == (MAKER, MAKER)
        gone_found = started.ledger.find(gone_token.id)
        assert isinstance(gone_found, LinkToken)
        assert (gone_found.provider, gone_found.filter_on_providers) == (None, None)
        with started.db.read() as conn:
            (row,) = conn.execute(select(link_tokens)).mappings().all()
        assert not {"provider", "filter_on_providers", "consumed_provider"} & set(row)
        assert started.key_store.open(live, row["sealed_facts"]) == {
            "redirect_url": None,
            "provider": MAKER,
            "filter_on_providers": None,
        }
        assert started.key_store.open(live, row["sealed_consumption"]) == {"provider": MAKER}
        # No page holds the makers of the old records nor of the dropped columns. On
        # PostgreSQL the test schema's pages are shared with the worker's earlier tests,
        # whose other events may name the maker (a sign-in's): the log is searched for
        # these records' own bytes, the link tokens' rows (no other test's in clear) for
        # the maker itself.
        stored = places(started)
        needles = [
            f'"request_id":"{CONSUMED_REQUEST}","provider":"{MAKER}"'.encode(),
            f'"provider":"{MAKER}","filter_on_providers"'.encode(),
            f'"filter_on_providers":["{MAKER}","dexcom"]'.encode(),
        ]
        if started.db.is_sqlite:
            needles.append(MAKER.encode())  # the test's own file
        for needle in needles:
            assert holding(stored, needle) == [], needle
        if not started.db.is_sqlite:
            rows_only = {k: v for k, v in stored.items() if "link_tokens" in k}
            assert rows_only and holding(rows_only, MAKER.encode()) == []
        # Nor does any answer about the erased user; the live user's audit shows its
        # makers as sealed values.
        with freeze_time(start + timedelta(days=9)), TestClient(create_team_api(started)) as client:
            answers = [
                client.get(f"/v2/audit/user/{gone}", headers=headers),
                client.get(f"/v2/audit/user/{gone}/deletion_report", headers=headers),
                client.get(f"/v2/audit/user/{live}", headers=headers),
            ]
        assert [a.status_code for a in answers] == [200] * 3, [a.text for a in answers]
        shown = {e["event"]: e["changes"] for e in answers[2].json()["data"]}
        assert shown["LinkToken.Issued"]["provider"] == SEALED_PLACEHOLDER
        assert shown["LinkToken.Consumed"]["provider"] == SEALED_PLACEHOLDER
        printed = printed_about(
            str(gone),
            url=settings.database_url,
            master_key_file=settings.master_key_file,
            signing_key_file=None,
            monkeypatch=monkeypatch,
            capsys=capsys,
        )
        for answer in [a.text for a in answers] + printed:
            assert MAKER not in answer and "dexcom" not in answer, answer[:300]
    finally:
        started.close()


# -- the database main wrote at 1809f39 -------------------------------------------------------


def test_the_fixture_holds_a_redirect_url_in_clear(written: Written) -> None:  # noqa: F811
    # What the next test shows gone was there: main-6's token's URL in clear in its
    # Issued event and in its link_tokens row (bytea, so hex, in the PostgreSQL dump).
    if written.url.startswith("sqlite"):
        with open(written.url.removeprefix("sqlite:///"), "rb") as stored:
            content = stored.read()
        assert content.count(APP.encode()) >= 2
    else:
        content = gzip.decompress((DATA / "postgres-dump.sql.gz").read_bytes())
        assert f'"redirect_url":"{APP}"'.encode().hex().encode() in content
        assert APP.encode() in content  # the row's text column
    assert LinkToken.IssuedV1.TOPIC.encode() in content
    # ... and main-6's token's consumption, naming oura in clear (revision 0044 seals it).
    assert LinkToken.ConsumedV1.TOPIC.encode() in content


def test_the_start_seals_1809f39s_redirect_urls_and_the_chain_verifies(
    written: Written,  # noqa: F811
    started: Service,  # noqa: F811
) -> None:
    service = started
    assert verified(service, SIGNED_HEADS).startswith("ok: ")
    assert records_of(service, LinkToken.IssuedV1.TOPIC) == []
    redacted = records_of(service, LinkToken.Issued.TOPIC)
    # main-6's (ending at APP) and main-3's (no URL): both users live, both sealed.
    assert len(redacted) == 2
    for record in redacted:
        assert "redirect_url" not in record and record[SEALED_FACTS_FIELD] != ERASED_PLACEHOLDER
    main_6 = UUID(written.user("main-6"))
    with service.db.read() as conn:
        rows = conn.execute(select(link_tokens)).mappings().all()
    opened = {
        row["user_id"]: service.key_store.open(row["user_id"], row["sealed_facts"]) for row in rows
    }
    no_maker = {"provider": None, "filter_on_providers": None}
    assert opened[main_6] == {"redirect_url": APP, **no_maker}
    # main-3's token had no URL but a maker (fitbit): sealed all the same (the log holds
    # every Issued alike), the maker with it (revision 0044).
    assert sorted(json.dumps(value, sort_keys=True) for value in opened.values()) == sorted(
        json.dumps(value, sort_keys=True)
        for value in (
            {"redirect_url": None, "provider": "fitbit", "filter_on_providers": None},
            {"redirect_url": APP, **no_maker},
        )
    )
    (token_id,) = [row["token_id"] for row in rows if row["user_id"] == main_6]
    token = service.ledger.find(token_id)
    assert isinstance(token, LinkToken) and token.redirect_url == APP
    # main-6's token was consumed by oura: its Consumed redacted into version 2 (the
    # stream's owner named), the row's sealed consumption given by the start.
    assert records_of(service, LinkToken.ConsumedV1.TOPIC) == []
    (consumed,) = records_of(service, LinkToken.Consumed.TOPIC)
    assert "provider" not in consumed and consumed["user_id"]["_data_"] == main_6.hex
    assert token.consumed_provider == "oura"
    (row_6,) = [row for row in rows if row["user_id"] == main_6]
    assert service.key_store.open(main_6, row_6["sealed_consumption"]) == {"provider": "oura"}
    (main_3_id,) = [row["token_id"] for row in rows if row["user_id"] != main_6]
    main_3_token = service.ledger.find(main_3_id)
    assert isinstance(main_3_token, LinkToken) and main_3_token.provider == "fitbit"
    # No link token's record nor row holds a maker in clear (the makers are elsewhere in
    # 1809f39's pages, hence the records' and rows' own values).
    for topic in (LinkToken.Issued.TOPIC, LinkToken.Consumed.TOPIC):
        for state in states(service, topic):
            assert b"fitbit" not in state and b"oura" not in state, state
    for row in rows:
        assert "provider" not in row and "consumed_provider" not in row
        assert not [v for v in row.values() if any(m in str(v) for m in ("fitbit", "oura"))]
    # The log's and the read model's pages hold the URL only sealed.
    stored = places(service)
    assert holding(stored, LinkToken.Issued.TOPIC.encode())
    assert holding(stored, APP.encode()) == []
