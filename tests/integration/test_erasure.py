"""Erasure at the end of the grace period: crypto-shredding, idempotence, crash safety,
and an audit trail that outlives the person's data."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from freezegun import freeze_time
from healthledger.adapters.compliance.audit import history
from healthledger.adapters.compliance.time_travel import state_as_of
from healthledger.adapters.composition import Service, build_service, start_scheduler
from healthledger.adapters.persistence.engine.schema import (
    health_data,
    pending_erasures,
    resource_feeds,
    snapshots,
    stored_events,
    user_data_keys,
    users,
)
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import UserNotFound
from healthledger.domain.users.lifecycle import ERASURE_REMOVES
from healthledger.domain.users.user import ERASED, User
from sqlalchemy import func, select

from tests.conftest import Team
from tests.integration.populated import (
    T0,
    make_user_with_everything,
    make_user_with_personal_data,
)

PERSONAL_STRINGS = [b"Lovelace", b"ada.lovelace", b"Analytical", b"1985-12-10", b"1970-01-02"]


def rows(service: Service, table: Any, **where: Any) -> int:
    query = select(func.count()).select_from(table)
    for column, value in where.items():
        query = query.where(table.c[column] == value)
    with service.db.read() as conn:
        return conn.execute(query).scalar_one()


def test_sweep_erases_only_what_is_due_and_everything_it_promises(
    settings: Settings, team: Team, ctx: CommandContext
) -> None:
    svc = build_service(settings.model_copy(update={"user_snapshot_interval": 2}))
    try:
        with freeze_time(T0):
            user = make_user_with_personal_data(svc, team, ctx)
            keeper = svc.users.create_user(ctx, team.team_id, client_user_id="keeper")
            svc.users.delete_user(ctx, team.team_id, user.id)
        assert rows(svc, snapshots, originator_id=user.id) >= 1
        assert rows(svc, user_data_keys, user_id=user.id) == 1

        with freeze_time(T0 + timedelta(days=7) - timedelta(seconds=1)):
            assert svc.jobs.sweep_erasures() == 0
            svc.users.load(team.team_id, user.id)  # still there, pending

        with freeze_time(T0 + timedelta(days=7)):
            assert svc.jobs.sweep_erasures() == 1

        # Each thing the Erased event says it removed is gone.
        assert set(ERASURE_REMOVES) == {
            "user_data_key",
            "snapshots",
            "read_model:users",
            "read_model:pending_erasures",
            "read_model:connections",
            "read_model:resource_feeds",
            "read_model:link_tokens",
            "read_model:orders",
            "health_data",
            "session_index",
            "raw_payloads",
            "provider_tokens",
            "continuous_queries",
            "continuous_query_tasks",
            "lab_report_uploads",
            "webhook_deliveries:queued",
        }
        assert rows(svc, user_data_keys, user_id=user.id) == 0
        assert rows(svc, snapshots, originator_id=user.id) == 0
        assert rows(svc, users, user_id=user.id) == 0
        assert rows(svc, pending_erasures, user_id=user.id) == 0
        assert rows(svc, resource_feeds, user_id=user.id) == 0
        assert rows(svc, health_data, user_id=user.id) == 0
        last = list(svc.ledger.events.get(user.id))[-1]
        assert isinstance(last, User.Erased)
        # It had a key, snapshots, its row and its pending erasure; nothing else.
        assert last.removed == [
            "user_data_key",
            "snapshots",
            "read_model:users",
            "read_model:pending_erasures",
        ]
        assert last.checked["read_model:users"] == 1 and last.checked["health_data"] == 0
        assert last.actor == "system:scheduler"

        # The erased user is 404 everywhere; the other user is untouched.
        with pytest.raises(UserNotFound):
            svc.user_queries.resolved_user(team.team_id, user.id)
        with pytest.raises(UserNotFound):
            svc.users.undo_deletion(ctx, team.team_id, user.id)
        assert svc.user_queries.resolved_user(team.team_id, keeper.id)["client_user_id"] == "keeper"

        # Personal data was never in clear in the log, and the key that sealed it is gone.
        with svc.db.read() as conn:
            raw = b"".join(
                bytes(s)
                for s in conn.execute(
                    select(stored_events.c.state).where(stored_events.c.originator_id == user.id)
                ).scalars()
            )
        for secret in PERSONAL_STRINGS:
            assert secret not in raw
        sealed = svc.ledger.find(user.id, version=3)
        assert isinstance(sealed, User) and sealed.sealed_demographics is not None
        assert svc.key_store.open(user.id, sealed.sealed_demographics) is None
    finally:
        svc.close()


def test_erasing_twice_is_a_no_op(service: Service, team: Team, ctx: CommandContext) -> None:
    with freeze_time(T0):
        user = make_user_with_personal_data(service, team, ctx)
        service.users.delete_user(ctx, team.team_id, user.id)
    with freeze_time(T0 + timedelta(days=8)):
        assert service.users.erase_user(ctx, user.id) is True
        events = service.recorder.max_notification_id()
        assert service.users.erase_user(ctx, user.id) is False
        assert service.jobs.sweep_erasures() == 0
        assert service.recorder.max_notification_id() == events


def test_an_undone_deletion_is_never_erased(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    with freeze_time(T0):
        user = make_user_with_personal_data(service, team, ctx)
        service.users.delete_user(ctx, team.team_id, user.id)
    with freeze_time(T0 + timedelta(days=6)):
        service.users.undo_deletion(ctx, team.team_id, user.id)
    with freeze_time(T0 + timedelta(days=30)):
        assert service.jobs.sweep_erasures() == 0
        assert service.user_queries.demographics(team.team_id, user.id)["last_name"] == "Lovelace"


def test_a_crash_mid_sweep_loses_nothing(
    settings: Settings, team: Team, ctx: CommandContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Batches of one user: the crash comes between two batches' transactions.
    service = build_service(settings.model_copy(update={"erasure_batch_size": 1}))
    try:
        with freeze_time(T0):
            ids = []
            for n in range(3):
                user = service.users.create_user(ctx, team.team_id, client_user_id=f"c{n}")
                service.users.delete_user(ctx, team.team_id, user.id)
                ids.append(user.id)
        real_erase = service.users.erase_users
        calls = {"n": 0}

        def crashing_erase(ctx_: CommandContext, user_ids: Any) -> int:
            calls["n"] += 1
            if calls["n"] == 2:
                raise RuntimeError("process killed mid-sweep")
            return real_erase(ctx_, user_ids)

        with freeze_time(T0 + timedelta(days=8)):
            monkeypatch.setattr(service.users, "erase_users", crashing_erase)
            with pytest.raises(RuntimeError):
                service.jobs.sweep_erasures()
            assert rows(service, pending_erasures) == 2  # one done, two still recorded as due
            monkeypatch.setattr(service.users, "erase_users", real_erase)
            # The crashed batch's claim was given back: the next sweep takes it at once.
            assert service.jobs.sweep_erasures() == 2
        assert rows(service, pending_erasures) == 0
        for user_id in ids:
            assert service.ledger.find(user_id).status == ERASED  # type: ignore[union-attr]
    finally:
        service.close()


def test_a_user_due_while_the_service_was_down_is_erased_on_start(
    settings: Settings, team: Team, ctx: CommandContext
) -> None:
    svc = build_service(settings)
    user = svc.users.create_user(ctx, team.team_id, client_user_id="offline")
    svc.users.delete_user(ctx, team.team_id, user.id)
    svc.close()
    # "Later": the service starts again after the grace period ended.
    later = datetime.now(UTC) + timedelta(days=7, minutes=1)
    restarted = build_service(settings, clock=lambda: later)
    scheduler = start_scheduler(restarted)
    try:
        deadline = datetime.now(UTC) + timedelta(seconds=10)
        while restarted.user_queries.status(user.id) is not None:
            assert datetime.now(UTC) < deadline, "the start-up sweep did not erase the user"
            scheduler.wakeup()
            import time

            time.sleep(0.05)
        erased = restarted.ledger.find(user.id)
        assert isinstance(erased, User) and erased.status == ERASED
    finally:
        scheduler.shutdown(wait=True)
        restarted.close()


def test_history_survives_erasure_without_personal_values(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    with freeze_time(T0):
        user = make_user_with_personal_data(service, team, ctx)
    with freeze_time(T0 + timedelta(hours=1)):
        service.users.delete_user(ctx, team.team_id, user.id)
    with freeze_time(T0 + timedelta(days=8)):
        service.jobs.sweep_erasures()
    entries = history(service, user.id)
    # The user's own events, and its claim's (the audit takes in every stream it owns).
    assert [e.event for e in entries if e.stream_kind == "user"] == [
        "User.Created",
        "User.DemographicsRecorded",
        "User.Deleted",
        "User.Erased",
    ]
    assert [e.event for e in entries if e.stream_kind == "claim"] == [
        "ClientUserIdClaim.Created",
        "ClientUserIdClaim.Released",
    ]
    text = "\n".join(e.line() for e in entries)
    assert "<personal data: erased>" in text
    for secret in PERSONAL_STRINGS:
        assert secret.decode() not in text
    assert "system:scheduler" in text and "test:actor" in text

    before_delete = state_as_of(service, user.id, T0 + timedelta(minutes=30))
    assert before_delete is not None
    assert before_delete["status"] == "active"
    assert before_delete["demographics"] == "<personal data: erased>"
    assert state_as_of(service, user.id, T0 - timedelta(seconds=1)) is None
    after = state_as_of(service, user.id, T0 + timedelta(days=9))
    assert after is not None and after["status"] == ERASED


def test_the_sweep_finishes_a_team_deletion_a_crash_cut_short(
    service: Service, team: Team, ctx: CommandContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    from healthledger.domain.teams.directory import DEFAULT_ORG_ID

    kept = [
        service.users.create_user(ctx, team.team_id, client_user_id=f"t{n}").id for n in range(3)
    ]
    # The process dies right after recording the team's deletion, before its users.
    monkeypatch.setattr(service.teams, "delete_team_users", lambda ctx_, team_id: 0)
    service.teams.delete_team(ctx, DEFAULT_ORG_ID, team.team_id)
    monkeypatch.undo()
    assert all(service.user_queries.status(u) == "active" for u in kept)
    service.jobs.sweep_erasures()
    assert all(service.user_queries.status(u) == "pending_erasure" for u in kept)
    assert service.team_queries.deleted_teams_with_live_users() == []


# -- what an erasure checks: every row that names the user, counted and gone ------------------


def places_of(service: Service, user_id: Any) -> dict[str, int]:
    """The rows that name the user in each place, counted here table by table (not by the
    erasure's own query), and the deliveries still queued about it."""
    from healthledger.adapters.persistence.engine.schema import (
        connections,
        continuous_queries,
        continuous_query_tasks,
        lab_report_uploads,
        link_tokens,
        orders,
        provider_tokens,
        raw_payloads,
        session_index,
        webhook_deliveries,
    )

    counts = {
        "user_data_key": rows(service, user_data_keys, user_id=user_id),
        "snapshots": rows(service, snapshots, originator_id=user_id),
        "read_model:users": rows(service, users, user_id=user_id),
        "read_model:pending_erasures": rows(service, pending_erasures, user_id=user_id),
        "read_model:connections": rows(service, connections, user_id=user_id),
        "read_model:resource_feeds": rows(service, resource_feeds, user_id=user_id),
        "read_model:link_tokens": rows(service, link_tokens, user_id=user_id),
        "read_model:orders": rows(service, orders, user_id=user_id),
        "health_data": rows(service, health_data, user_id=user_id),
        "session_index": rows(service, session_index, user_id=user_id),
        "raw_payloads": rows(service, raw_payloads, user_id=user_id),
        "provider_tokens": rows(service, provider_tokens, user_id=user_id),
        "continuous_queries": rows(service, continuous_queries, user_id=user_id),
        "continuous_query_tasks": rows(service, continuous_query_tasks, user_id=user_id),
        "lab_report_uploads": rows(service, lab_report_uploads, user_id=user_id),
        "webhook_deliveries:queued": rows(
            service, webhook_deliveries, user_id=user_id, status="pending"
        ),
    }
    assert list(counts) == ERASURE_REMOVES
    return counts


def test_an_erasure_empties_counts_and_checks_every_place_that_names_the_user(
    settings: Settings, team: Team, ctx: CommandContext
) -> None:
    from healthledger.domain.webhooks.deliveries import DROPPED, WebhookDelivery

    svc = build_service(settings.model_copy(update={"user_snapshot_interval": 2}))
    try:
        svc.webhooks.create(ctx, team.team_id, "sandbox", url="https://hooks.example/in")
        with freeze_time(T0):
            user = make_user_with_everything(svc, team, ctx, "erase-me")
            kept = make_user_with_everything(svc, team, ctx, "keeper")
            svc.users.delete_user(ctx, team.team_id, user.id)
            svc.dispatcher.follow()  # and the deletion's own announcement
        before = places_of(svc, user.id)
        # Every place holds something (the test would prove nothing otherwise) but the
        # pending erasure, which the deletion just wrote.
        assert all(count > 0 for count in before.values()), before
        kept_before = places_of(svc, kept.id)

        with freeze_time(T0 + timedelta(days=7)):
            assert svc.jobs.sweep_erasures() == 1

        erased = list(svc.ledger.events.get(user.id))[-1]
        assert isinstance(erased, User.Erased)
        assert erased.checked == before  # what was there, place by place, in order
        assert erased.removed == ERASURE_REMOVES  # every place had rows
        assert places_of(svc, user.id) == dict.fromkeys(ERASURE_REMOVES, 0)
        assert places_of(svc, kept.id) == kept_before

        # The queued deliveries were dropped in the erasure's transaction, each recorded.
        from healthledger.adapters.persistence.engine.schema import webhook_deliveries

        with svc.db.read() as conn:
            delivery_ids = (
                conn.execute(
                    select(webhook_deliveries.c.delivery_id).where(
                        webhook_deliveries.c.user_id == user.id
                    )
                )
                .scalars()
                .all()
            )
        assert len(delivery_ids) == before["webhook_deliveries:queued"]
        for delivery_id in delivery_ids:
            delivery = svc.ledger.find(delivery_id)
            assert isinstance(delivery, WebhookDelivery) and delivery.status == DROPPED
            dropped = list(svc.ledger.events.get(delivery_id))[-1]
            assert isinstance(dropped, WebhookDelivery.Dropped)
            assert dropped.reason == "user erased" and dropped.request_id == erased.request_id
    finally:
        svc.close()


def test_every_table_that_names_a_user_is_emptied_or_kept_for_a_reason() -> None:
    from healthledger.adapters.persistence.engine.schema import metadata
    from healthledger.adapters.persistence.projections.erasure import DELETED, KEPT

    emptied = {column.table.name for column in DELETED.values()}
    naming = {
        table.name
        for table in metadata.tables.values()
        if "user_id" in table.c or table.name == "snapshots"
    }
    assert naming - emptied == set(KEPT), "a new table names users: erase it, or keep it (KEPT)"


def test_an_erasure_whose_counts_do_not_hold_is_rolled_back_and_retried(
    service: Service,
    team: Team,
    ctx: CommandContext,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with freeze_time(T0):
        user = make_user_with_everything(service, team, ctx, "erase-me")
        service.users.delete_user(ctx, team.team_id, user.id)
    before = places_of(service, user.id)
    events = service.recorder.max_notification_id()
    real_inventory = service.users.erasure_inventory

    # The command's count is short of what the transaction deletes (as if a chunk of
    # health data were stored between the two): nothing may be recorded.
    def short_count(user_ids: Any) -> dict[Any, dict[str, int]]:
        found = {user_id: dict(places) for user_id, places in real_inventory(user_ids).items()}
        found[user.id]["health_data"] -= 1
        return found

    monkeypatch.setattr(service.users, "erasure_inventory", short_count)
    with freeze_time(T0 + timedelta(days=8)), caplog.at_level("ERROR"):
        assert service.jobs.sweep_erasures() == 0
    assert "health_data held" in caplog.text and "rolled back" in caplog.text
    assert "erase-me" not in caplog.text and "Lovelace" not in caplog.text
    assert service.recorder.max_notification_id() == events  # no Erased, no Dropped
    assert places_of(service, user.id) == before  # nothing deleted, the key included
    assert service.user_queries.status(user.id) == "pending_erasure"

    # Rows left after the erasure (here, a projection that writes one back) fail the
    # check that follows the projections: rolled back too.
    from healthledger.adapters.persistence.engine.schema import link_tokens

    real_project = service.read_models.project

    def project_and_leave_a_row(conn: Any, events_: Any) -> None:
        real_project(conn, events_)
        if any(isinstance(e, User.Erased) for e in events_):
            conn.execute(
                link_tokens.insert().values(
                    token_id=uuid.uuid4(),
                    team_id=team.team_id,
                    user_id=user.id,
                    environment="sandbox",
                    token_hash="0" * 64,
                    issued_at=T0,
                )
            )

    monkeypatch.setattr(service.users, "erasure_inventory", real_inventory)
    monkeypatch.setattr(service.read_models, "project", project_and_leave_a_row)
    with freeze_time(T0 + timedelta(days=8)), caplog.at_level("ERROR"):
        assert service.jobs.sweep_erasures() == 0
    assert "read_model:link_tokens held 1 row(s) after erasure" in caplog.text
    assert service.recorder.max_notification_id() == events
    assert places_of(service, user.id) == before

    # With the check passing again, the next sweep erases the user.
    monkeypatch.setattr(service.read_models, "project", real_project)
    with freeze_time(T0 + timedelta(days=8)):
        assert service.jobs.sweep_erasures() == 1
    assert places_of(service, user.id) == dict.fromkeys(ERASURE_REMOVES, 0)


def test_an_erased_event_stored_before_the_counts_loads_with_nothing_checked() -> None:
    from eventsourcing.persistence import StoredEvent

    from tests.unit.stored_form import MAPPER, stored

    # Version 1, as main stored it: no class_version, no `checked`.
    v1 = StoredEvent(
        originator_id=uuid.UUID("11111111-2222-4333-8444-000000000003"),
        originator_version=4,
        topic="healthledger:User.Erased.v1",
        state=(
            b'{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-08T12:00:00+00:00"},'
            b'"actor":"system:scheduler","request_id":"job-1",'
            b'"removed":["user_data_key","read_model:users"]}'
        ),
    )
    event = MAPPER.to_domain_event(v1)
    assert isinstance(event, User.Erased)
    assert event.removed == ["user_data_key", "read_model:users"] and event.checked == {}
    # Recorded now: version 2, with its counts.
    again = MAPPER.to_domain_event(stored(event))
    assert isinstance(again, User.Erased) and again.checked == {}
    assert b'"class_version":2' in stored(event).state
