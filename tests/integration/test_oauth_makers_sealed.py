"""The maker of an OAuth flow and of a credential sign-in sealed with the user's key (issue
29 §1, ADR 0032, revision 0045), on SQLite and PostgreSQL.

A maker is a health fact (`freestyle_libre`, a glucose monitor, says the person is
diabetic). `OAuthFlow.Started` v2 (the link page sent the browser to the maker) and
`CredentialSignIn.Challenged` v2 (a password maker asked for a code) hold it only sealed;
the domain reads it opened, so the link page, the OAuth callback, the sign-in and its code
work as before. A new sign-in's stream id is keyed by the user's key (ADR 0045), not the
uuid5 of the link token's id (in clear in the log) and the provider, which anyone could
test the catalog's slugs against. The v1 records are redacted at the start: sealed for a
live user, the placeholder for one erased already; the chain verifies, and afterwards no
page of the log holds their makers, nor does any answer about the erased user. The
database main wrote at 1809f39 holds one such record (`main-6`'s flow at oura).
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.compliance.chain_commands import verify_command
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.makers.fake_libreview import FakeLibreView, running_fake_libreview
from healthledger.adapters.persistence.engine import migrating
from healthledger.adapters.persistence.engine.schema import stored_events
from healthledger.adapters.persistence.eventstore.chain import REDACTION_TOPIC
from healthledger.adapters.persistence.eventstore.sealed_facts import SEALED_FACTS_FIELD
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.credential_links import CredentialSignIn
from healthledger.domain.connections.link_tokens import LinkToken
from healthledger.domain.connections.oauth_flows import OAuthFlow
from healthledger.domain.connections.stream_ids import keyed_sign_in_id, legacy_sign_in_id
from healthledger.domain.context import CommandContext
from healthledger.domain.personal_data import ERASED_PLACEHOLDER, SEALED_PLACEHOLDER
from healthledger.domain.redaction import REMOVED, SEALED
from sqlalchemy import select

from tests.clocks import Clock
from tests.conftest import Team
from tests.integration.oauth_browser import (
    API,
    APP,
    LINK,
    SERVICE,
    SERVICE_CLIENT,
    SERVICE_SECRET,
    a_browser,
    link,
    outcome,
)
from tests.integration.test_health_facts_sealed import holding, printed_about, records_of
from tests.integration.test_link_api import OMAR, complete, password
from tests.integration.test_link_redirects_sealed import places
from tests.integration.test_notice_windows_sealed import states
from tests.integration.test_todays_main import (  # noqa: F401  (fixtures)
    DATA,
    SIGNED_HEADS,
    Written,
    started,
    verified,
    written,
)
from tests.makers import FakeMaker, fake_maker

# A glucose monitor's maker (a flow's) and its password sign-in's (LibreView).
MAKER, SIGN_IN_MAKER = "freestyle_libre", "abbott_libreview"


@pytest.fixture
def maker() -> Iterator[FakeMaker]:
    with fake_maker() as running:
        running.register(SERVICE_CLIENT, SERVICE_SECRET)
        yield running


@pytest.fixture
def libreview(clock: Clock) -> Iterator[FakeLibreView]:
    with running_fake_libreview(clock=clock) as fake:
        yield fake


@pytest.fixture
def svc(
    settings: Settings, clock: Clock, maker: FakeMaker, libreview: FakeLibreView
) -> Iterator[Service]:
    """The service with the fake OAuth maker (a client of its own for oura) and the fake
    LibreView: both flows end to end."""
    configured = settings.model_copy(
        update={
            "link_url": LINK,
            "public_base_url": API,
            "oauth_maker_url": maker.base,
            "oauth_clients": {"oura": SERVICE},
            "libreview_api_url": libreview.base,
        }
    )
    built = build_service(configured, clock=clock)
    try:
        yield built
    finally:
        built.close()


def the_one_stream(service: Service, topic: str) -> UUID:
    """The stream of the one record of `topic`."""
    with service.db.read() as conn:
        (stream,) = conn.execute(
            select(stored_events.c.originator_id).where(stored_events.c.topic == topic)
        ).scalars()
    return UUID(str(stream))


def no_maker_in(state: bytes, *makers: str) -> None:
    assert b'"provider"' not in state, state
    for maker in makers:
        assert maker.encode() not in state, (maker, state)


def test_new_flows_and_sign_ins_hold_their_maker_only_sealed_and_work_as_before(
    svc: Service, clock: Clock, libreview: FakeLibreView
) -> None:
    boot = svc.bootstrap()
    assert boot is not None
    home = Team(boot.team_id, boot.team_api_key.plain)
    with TestClient(create_team_api(svc), raise_server_exceptions=False) as api:
        # The OAuth flow: the link page to the maker and back, connected as before.
        browser = a_browser(svc)
        oauth_user, oauth_token = link(api, home, redirect_url=APP)
        _, answer = browser.sign_in(oauth_token, "oura")
        assert outcome(answer) == {"state": "success"}
        browser.client.close()
        # A password sign-in the maker asks a code of, twice (the second replaces the
        # first), then the code: connected as before.
        user_id, token = link(api, home)
        first = password(api, token, OMAR).json()
        assert first["state"] == "pending_provider_mfa", first
        assert password(api, token, OMAR).json()["state"] == "pending_provider_mfa"
        done = complete(api, token, libreview.outbox["+15550100"])
        assert done.json()["state"] == "success", done.text

    # The records hold no maker in clear (their bytes); the domain reads them opened.
    (flow_started,) = states(svc, OAuthFlow.Started.TOPIC)
    no_maker_in(flow_started, "oura")
    (challenged,) = states(svc, CredentialSignIn.Challenged.TOPIC)
    no_maker_in(challenged, MAKER)
    assert states(svc, OAuthFlow.StartedV1.TOPIC) == []
    assert states(svc, CredentialSignIn.ChallengedV1.TOPIC) == []
    flow = svc.ledger.find(the_one_stream(svc, OAuthFlow.Started.TOPIC))
    assert isinstance(flow, OAuthFlow)
    assert flow.provider == "oura" and flow.user_id == UUID(oauth_user)
    assert flow.returned_at is not None
    view = svc.link_token_queries.genuine(token)
    assert view is not None
    user = UUID(user_id)
    # The sign-in's stream: keyed by the user's key, no uuid5 of (token, a catalog slug).
    sign_in_id = svc.link_tokens.connections.pulls.streams.sign_in_id(user, view.token_id, MAKER)
    digest = svc.key_store.users_digest(user)
    assert digest is not None
    assert sign_in_id == keyed_sign_in_id(digest, view.token_id, MAKER)
    guesses = {legacy_sign_in_id(view.token_id, slug) for slug in svc.catalog}
    assert sign_in_id not in guesses
    sign_in = svc.ledger.find(sign_in_id)
    assert isinstance(sign_in, CredentialSignIn)
    # Challenged, challenged again (the same stream), answered.
    assert sign_in.provider == MAKER and sign_in.version == 3
    assert the_one_stream(svc, CredentialSignIn.Challenged.TOPIC) == sign_in_id

    # Once the user is erased its sign-in's id can no longer be derived by anyone, the
    # service included (the key is gone): a lookup names a random id.
    with TestClient(create_team_api(svc)) as api:
        assert api.delete(f"/v2/user/{user}", headers=home.headers).status_code == 200
    clock.advance(svc.settings.grace_period + timedelta(minutes=1))
    assert svc.jobs.sweep_erasures() == 1
    assert svc.key_store.users_digest(user) is None
    streams = svc.link_tokens.connections.pulls.streams
    assert streams.sign_in_id(user, view.token_id, MAKER) not in {sign_in_id, *guesses}


def issued(user_id: UUID, team_id: UUID) -> LinkToken:
    """A link token as `Linking.issue` makes it (no maker of its own)."""
    token, _ = LinkToken.issue(
        CommandContext(actor="team_api_key:test", request_id=f"req-{uuid4().hex[:8]}"),
        datetime.now(UTC),
        team_id=team_id,
        user_id=user_id,
        environment="sandbox",
        provider=None,
        redirect_url=None,
        filter_on_providers=None,
        on_error=None,
        on_close=None,
    )
    return token


def old_records(service: Service, token: LinkToken) -> tuple[Any, Any]:
    """A flow and a sign-in of `token` as the main before revision 0045 recorded them:
    the maker in clear, the sign-in under its uuid5 id."""
    ctx = CommandContext(actor=f"link_token:{token.id}", request_id=f"req-{uuid4().hex[:8]}")
    now = datetime.now(UTC)
    flow = OAuthFlow.start(ctx, now, token, MAKER, "binding-secret")
    (flow_started,) = flow.collect_events()
    sealed_challenge = service.key_store.seal(token.user_id, "maker-challenge")
    sign_in = CredentialSignIn.challenge(
        ctx,
        now,
        None,
        legacy_sign_in_id(token.id, SIGN_IN_MAKER),
        token,
        SIGN_IN_MAKER,
        "password",
        "sms",
        sealed_challenge,
    )
    (challenged,) = sign_in.collect_events()
    return (
        OAuthFlow.StartedV1(**vars(flow_started)),
        CredentialSignIn.ChallengedV1(**vars(challenged)),
    )


def test_old_flows_and_sign_ins_are_redacted_and_their_makers_go_with_their_user(
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
            for name in ("flow-live", "flow-gone")
        ]
        live, gone = (UUID(m.json()["user_id"]) for m in made)
        live_token, gone_token = issued(live, team.team_id), issued(gone, team.team_id)
        service.ledger.save(live_token, gone_token)
        live_started, live_challenged = old_records(service, live_token)
        gone_started, gone_challenged = old_records(service, gone_token)
        service.ledger.save(live_started, live_challenged, gone_started, gone_challenged)
        old = [
            *states(service, OAuthFlow.StartedV1.TOPIC),
            *states(service, CredentialSignIn.ChallengedV1.TOPIC),
        ]
        assert len(old) == 4
        assert len([s for s in old if f'"provider":"{MAKER}"'.encode() in s]) == 2
        assert len([s for s in old if f'"provider":"{SIGN_IN_MAKER}"'.encode() in s]) == 2

        frozen.tick(60)
        assert client.delete(f"/v2/user/{gone}", headers=headers).status_code == 200
        frozen.tick(service.settings.grace_period.total_seconds() + 60)
        assert service.jobs.sweep_erasures() == 1

    # The database as the main before this revision leaves it: at 0044, the v1 records in
    # the log (no read model holds either aggregate).
    service.close()
    migrating.downgrade(settings.database_url, "0044")
    with freeze_time(start + timedelta(days=9)):
        started = build_service(settings)
    try:
        # Redacted, chained: the live user's two records sealed, the erased one's removed.
        assert sorted(
            (r["reason"], len(r["records"])) for r in records_of(started, REDACTION_TOPIC)
        ) == [(REMOVED, 2), (SEALED, 2)]
        assert records_of(started, OAuthFlow.StartedV1.TOPIC) == []
        assert records_of(started, CredentialSignIn.ChallengedV1.TOPIC) == []
        redacted = [
            *records_of(started, OAuthFlow.Started.TOPIC),
            *records_of(started, CredentialSignIn.Challenged.TOPIC),
        ]
        assert len(redacted) == 4
        assert not [r for r in redacted if "provider" in r]
        assert sorted(r[SEALED_FACTS_FIELD] == ERASED_PLACEHOLDER for r in redacted) == [
            False,
            False,
            True,
            True,
        ]
        assert started.chain.verify().ok
        out = io.StringIO()
        assert verify_command(started.chain, None, out) == 0, out.getvalue()
        # The live user's makers open; the erased one's read as erased.
        live_flow = started.ledger.find(live_started.originator_id)
        assert isinstance(live_flow, OAuthFlow) and live_flow.provider == MAKER
        gone_flow = started.ledger.find(gone_started.originator_id)
        assert isinstance(gone_flow, OAuthFlow) and gone_flow.provider == ERASED_PLACEHOLDER
        # A sign-in made before keeps its legacy stream id, and is still found by it (a
        # code that straddles the upgrade completes it).
        streams = started.link_tokens.connections.pulls.streams
        legacy = legacy_sign_in_id(live_token.id, SIGN_IN_MAKER)
        assert streams.sign_in_id(live, live_token.id, SIGN_IN_MAKER) == legacy
        live_sign_in = started.ledger.find(legacy)
        assert isinstance(live_sign_in, CredentialSignIn)
        assert live_sign_in.provider == SIGN_IN_MAKER
        gone_sign_in = started.ledger.find(legacy_sign_in_id(gone_token.id, SIGN_IN_MAKER))
        assert isinstance(gone_sign_in, CredentialSignIn)
        assert gone_sign_in.provider == ERASED_PLACEHOLDER
        # No page holds the makers of the old records. On PostgreSQL the test schema's
        # pages are shared with the worker's earlier tests, whose own events may name
        # these makers: the log is searched for these records' own bytes.
        stored = places(started)
        needles = [
            f'"provider":"{MAKER}","binding_digest"'.encode(),
            f'"provider":"{SIGN_IN_MAKER}","auth_type"'.encode(),
        ]
        if started.db.is_sqlite:
            needles += [MAKER.encode(), SIGN_IN_MAKER.encode()]  # the test's own file
        for needle in needles:
            assert holding(stored, needle) == [], needle
        # Nor does any answer about the erased user; the live user's audit shows its
        # makers as sealed values, the erased one's as erased.
        with freeze_time(start + timedelta(days=9)), TestClient(create_team_api(started)) as client:
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
            assert shown["OAuthFlow.Started"]["provider"] == placeholder
            assert shown["CredentialSignIn.Challenged"]["provider"] == placeholder
        printed = printed_about(
            str(gone),
            url=settings.database_url,
            master_key_file=settings.master_key_file,
            signing_key_file=None,
            monkeypatch=monkeypatch,
            capsys=capsys,
        )
        for text in [a.text for a in answers[:2]] + printed:
            assert MAKER not in text and SIGN_IN_MAKER not in text, text[:300]
    finally:
        started.close()


# -- the database main wrote at 1809f39 -------------------------------------------------------


def test_the_fixture_holds_an_oauth_flows_maker_in_clear(written: Written) -> None:  # noqa: F811
    # What the next test shows sealed was there: main-6's flow, at oura, in clear.
    if written.url.startswith("sqlite"):
        with open(written.url.removeprefix("sqlite:///"), "rb") as stored:
            content = stored.read()
        assert b'"provider":"oura","binding_digest"' in content
    else:
        content = gzip.decompress((DATA / "postgres-dump.sql.gz").read_bytes())
        assert b'"provider":"oura","binding_digest"'.hex().encode() in content
    assert OAuthFlow.StartedV1.TOPIC.encode() in content


def test_the_start_seals_1809f39s_oauth_flow_and_the_chain_verifies(
    written: Written,  # noqa: F811
    started: Service,  # noqa: F811
) -> None:
    service = started
    assert verified(service, SIGNED_HEADS).startswith("ok: ")
    assert records_of(service, OAuthFlow.StartedV1.TOPIC) == []
    (record,) = records_of(service, OAuthFlow.Started.TOPIC)
    assert "provider" not in record and record[SEALED_FACTS_FIELD] != ERASED_PLACEHOLDER
    main_6 = UUID(written.user("main-6"))
    assert record["user_id"]["_data_"] == main_6.hex
    (state,) = states(service, OAuthFlow.Started.TOPIC)
    no_maker_in(state, "oura")
    flow = service.ledger.find(the_one_stream(service, OAuthFlow.Started.TOPIC))
    assert isinstance(flow, OAuthFlow) and flow.provider == "oura"
    assert flow.returned_at is not None
    # The log's pages hold the old record's bytes no more.
    stored = places(service)
    assert holding(stored, OAuthFlow.Started.TOPIC.encode())
    assert holding(stored, b'"provider":"oura","binding_digest"') == []
