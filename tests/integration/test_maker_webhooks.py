"""The makers' webhooks intake (domain/connections/notice_intake.py, the route in
adapters/http/maker_webhooks.py, ADR 0031), whatever the maker, on SQLite and PostgreSQL:
a signed body that is no notification is a 400 naming nothing of it; a notice is taken by
one worker of two processes; a notice of a deregistered connection syncs nothing; the
connections rows written before revision 0017 get their account digest at start; the
route is in the team API's OpenAPI document. The Oura-specific behaviour is in
test_oura_webhooks.py, whose fixtures these tests share."""

# The fixtures are imported from test_oura_webhooks and named as parameters.
# ruff: noqa: F401, F811

from __future__ import annotations

import json
import threading
import uuid
from datetime import timedelta
from typing import Any

import httpx
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.makers.fake_oura import FakeOura
from healthledger.adapters.persistence.engine.schema import connections
from healthledger.adapters.providers.oura_webhooks import sign
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.notice_intake import HANDLED, NoticeReceipt
from healthledger.domain.context import CommandContext
from sqlalchemy import select, update

from tests.clocks import Clock
from tests.conftest import Team
from tests.integration.oauth_browser import SERVICE_CLIENT, SERVICE_SECRET, Browser
from tests.integration.test_oura_webhooks import (
    AVA,
    api,
    callback,
    connected_user,
    home,
    log_length,
    notice_streams,
    oura,
    oura_service,
    served,
    subscribed,
    svc,
)
from tests.stream_ids import stream_of_connection

CTX = CommandContext(actor="test:actor", request_id="req-maker-webhooks")


def signed_post(url: str, body: bytes, clock: Clock) -> httpx.Response:
    timestamp = str(int(clock().timestamp()))
    headers = {
        "content-type": "application/json",
        "x-oura-timestamp": timestamp,
        "x-oura-signature": sign(SERVICE_SECRET, timestamp, body),
    }
    return httpx.post(url, content=body, headers=headers)


def test_a_signed_body_that_is_no_notification_is_a_400_and_an_old_signature_a_401(
    svc: Service, callback: str, clock: Clock
) -> None:
    before = log_length(svc)
    for body in (b"{not json", b"[1, 2]", b'{"event_type": "update"}'):
        answer = signed_post(callback, body, clock)
        assert answer.status_code == 400, body
        assert answer.json() == {"detail": "The notification could not be read."}
    # A data type we do not read: acknowledged, nothing recorded.
    other = json.dumps(
        {"event_type": "create", "data_type": "tag", "user_id": "u-1", "event_time": "2026-01-01"}
    ).encode()
    assert signed_post(callback, other, clock).json() == {
        "recorded": 0,
        "duplicates": 0,
        "unknown": 0,
    }
    # A captured request played again later: its timestamp is outside the window.
    timestamp = str(int((clock() - timedelta(minutes=10)).timestamp()))
    stale = httpx.post(
        callback,
        content=other,
        headers={
            "x-oura-timestamp": timestamp,
            "x-oura-signature": sign(SERVICE_SECRET, timestamp, other),
        },
    )
    assert stale.status_code == 401
    assert log_length(svc) == before


def test_the_route_is_documented_without_a_team_key(svc: Service) -> None:
    document = create_team_api(svc).openapi()
    path = document["paths"]["/makers/{provider}/webhook"]
    assert {"get", "post"} <= set(path)
    assert {"200", "400", "401", "404"} <= set(path["post"]["responses"])
    assert "security" not in path["post"]


def test_two_processes_take_a_notice_once(
    settings: Settings,
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    oura: FakeOura,
    clock: Clock,
    subscribed: None,
) -> None:
    connected_user(svc, api, home, browser)
    oura.revise("ava", clock().date() - timedelta(days=1))
    notices = notice_streams(svc)
    assert len(notices) == 6
    with oura_service(settings, oura, clock) as other:
        outcomes: list[str | None] = []
        start = threading.Barrier(2)

        def work(service: Service) -> None:
            start.wait()
            for notice in notices:
                outcomes.append(service.maker_notices.run(notice.id))

        threads = [threading.Thread(target=work, args=(s,)) for s in (svc, other)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    # Each notice was taken by one of the two: six outcomes, six Nones. A take whose sync
    # failed for a passing reason (on a loaded machine, the fake's answer too late: CI
    # saw it once) leaves its notice taken and due again after the lease, not handled:
    # the next round handles it, and no notice is ever handled twice.
    def handled(notice_id: uuid.UUID) -> bool:
        found = svc.ledger.find(notice_id)
        return isinstance(found, NoticeReceipt) and found.status == HANDLED

    left = {notice.id for notice in notices if not handled(notice.id)}
    assert sorted(o for o in outcomes if o is not None) == ["synced"] * (6 - len(left))
    assert outcomes.count(None) == 6 + len(left)
    clock.advance(svc.maker_notices.lease + timedelta(seconds=1))
    assert [svc.maker_notices.run(notice_id) for notice_id in left] == ["synced"] * len(left)
    for notice in notices:
        events = [type(e).__name__ for e in svc.ledger.events.get(notice.id)]
        taken = 2 if notice.id in left else 1
        assert events == ["Received", *["Taken"] * taken, "Handled"]
        assert handled(notice.id)
    assert svc.maker_notice_queries.pending_count() == 0


def test_a_notice_of_a_deregistered_connection_syncs_nothing(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    oura: FakeOura,
    clock: Clock,
    subscribed: None,
) -> None:
    user_id = connected_user(svc, api, home, browser)
    oura.revise("ava", clock().date() - timedelta(days=1))
    svc.connections.deregister(CTX, home.team_id, user_id, "oura")
    oura.requests.clear()
    svc.jobs.run_due_pulls()
    assert {n.outcome for n in notice_streams(svc)} == {"connection_not_pulling"}
    assert oura.data_requests() == []
    # Deregistered, the account names no live connection: a later notice is dropped.
    before = log_length(svc)
    oura.revise("ava", clock().date())
    assert {s.status for s in oura.webhooks.sent} == {200}
    assert log_length(svc) == before


def test_connections_written_before_revision_0017_get_their_digest_at_start(
    settings: Settings,
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    oura: FakeOura,
    clock: Clock,
) -> None:
    user_id = connected_user(svc, api, home, browser)
    connection_id = stream_of_connection(svc, user_id, "oura")
    c = connections.c
    with svc.db.read() as conn:
        digest = conn.execute(
            select(c.account_digest).where(c.connection_id == connection_id)
        ).scalar_one()
    assert digest == svc.maker_notice_queries.digests.account("oura", AVA.user_id)
    # As a row of before the revision: no digest. The next start gives it again.
    with svc.db.write() as conn:
        conn.execute(update(connections).values(account_digest=None))
    assert svc.maker_notice_queries.connections_of("oura", AVA.user_id) == []
    with oura_service(settings, oura, clock) as again:
        assert again.maker_notice_queries.connections_of("oura", AVA.user_id) == [connection_id]
        # Nobody else's account finds it.
        assert again.maker_notice_queries.connections_of("oura", str(uuid.uuid4())) == []
        assert again.maker_notice_queries.connections_of("fitbit", AVA.user_id) == []


def test_the_notice_streams_name_no_account(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    oura: FakeOura,
    clock: Clock,
    subscribed: None,
) -> None:
    connected_user(svc, api, home, browser)
    oura.revise("ava", clock().date() - timedelta(days=1))
    for notice in notice_streams(svc):
        for event in svc.ledger.events.get(notice.id):
            assert AVA.user_id not in repr(vars(event))
    assert SERVICE_CLIENT  # the app whose secret signed them


def test_a_rebuild_of_the_read_models_keeps_the_account_digests(
    svc: Service, api: Any, home: Team, browser: Browser
) -> None:
    user_id = connected_user(svc, api, home, browser)
    found = svc.maker_notice_queries.connections_of("oura", AVA.user_id)
    assert found == [stream_of_connection(svc, user_id, "oura")]
    # Projected again from the log, a page's keys read at once: the same digest.
    svc.read_models.rebuild(svc.recorder, svc.ledger.mapper)
    assert svc.maker_notice_queries.connections_of("oura", AVA.user_id) == found
