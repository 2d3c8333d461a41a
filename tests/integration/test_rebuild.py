"""`healthledger rebuild` (ADR 0021): the read models projected again from the log in
pages, beside the live ones, and swapped in; the same tables as the projection made them
as the log was written; resumable where it stopped after an interruption or a crash."""

from __future__ import annotations

import gc
from datetime import timedelta
from typing import Any

import pytest
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.engine.schema import stored_events
from healthledger.adapters.persistence.projections import rebuild
from healthledger.adapters.persistence.projections.rebuild import (
    rebuild_read_models,
    unfinished_rebuild,
)
from healthledger.domain.context import CommandContext
from sqlalchemy import select

from tests.conftest import Team
from tests.integration.populated import T0, events_after, read_models, write_a_log


def rebuild_of(service: Service, **options: Any) -> rebuild.Rebuilt:
    """`rebuild_read_models` of the service's read models, log and mapper."""
    return rebuild_read_models(
        service.read_models, service.recorder, service.ledger.mapper, **options
    )


def rebuild_crashing_in_page(service: Service, crash_in: int, **options: Any) -> None:
    """A rebuild (`rebuild_read_models` with `options`) killed once it has projected its
    `crash_in`-th page, before that page's transaction commits."""
    real_project = rebuild.PageProjector.project
    projected = {"pages": 0}

    def crashing(self: Any, conn: Any, page: Any) -> None:
        projected["pages"] += 1
        real_project(self, conn, page)
        if projected["pages"] == crash_in:
            raise RuntimeError("killed mid-transaction")

    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(rebuild.PageProjector, "project", crashing)
        with pytest.raises(RuntimeError, match="killed mid-transaction"):
            rebuild_of(service, **options)


def test_a_rebuild_makes_the_read_models_the_log_made(
    service: Service, team: Team, other_team: Team, ctx: CommandContext
) -> None:
    write_a_log(service, team, other_team, ctx)
    before = read_models(service)
    # The log filled these (the test would prove little otherwise).
    filled = {name for name, rows in before.items() if rows}
    assert filled >= {
        "users",
        "connections",
        "resource_feeds",
        "organizations",
        "teams",
        "team_api_keys",
        "management_keys",
        "link_tokens",
        "webhook_endpoints",
        "webhook_deliveries",
        "stream_owners",
    }
    events = events_after(service)
    # Pages of 7 events, two a transaction: every kind of event meets a page boundary
    # and a commit somewhere.
    rebuilt = rebuild_of(service, batch_events=7, commit_events=14)
    assert (rebuilt.events, rebuilt.resumed_from) == (events, 0)
    assert read_models(service) == before
    # In one page, through the read models' own entry point.
    assert service.read_models.rebuild(service.recorder, service.ledger.mapper) == events
    assert read_models(service) == before
    assert unfinished_rebuild(service.db) is None


def test_an_interrupted_rebuild_resumes_where_it_stopped(
    service: Service, team: Team, other_team: Team, ctx: CommandContext
) -> None:
    write_a_log(service, team, other_team, ctx)
    before = read_models(service)
    pages = {"done": 0}

    def interrupted_after_three_pages(count: int) -> None:
        pages["done"] += 1
        if pages["done"] == 3:
            raise KeyboardInterrupt  # Ctrl-C once the third page committed

    with pytest.raises(KeyboardInterrupt):
        rebuild_of(
            service,
            batch_events=10,
            commit_events=10,
            progress=interrupted_after_three_pages,
        )
    stopped_at = unfinished_rebuild(service.db)
    assert stopped_at is not None and stopped_at >= 30
    # The live read models were never touched, and keep following the log.
    assert read_models(service) == before
    with freeze_time(T0 + timedelta(days=9)):
        service.users.create_user(ctx, team.team_id, client_user_id="written-meanwhile")
    moved_on = read_models(service)

    # A crash in the middle of the next page: that page's transaction is rolled back.
    rebuild_crashing_in_page(service, 1, batch_events=10, commit_events=10)
    assert unfinished_rebuild(service.db) == stopped_at
    assert read_models(service) == moved_on

    resumed = rebuild_of(service, batch_events=10)
    assert resumed.resumed_from == stopped_at
    assert resumed.events == events_after(service, stopped_at)
    assert read_models(service) == moved_on
    assert unfinished_rebuild(service.db) is None


def test_a_crash_loses_only_the_pages_since_the_last_commit(
    service: Service, team: Team, other_team: Team, ctx: CommandContext
) -> None:
    """Pages go several to a transaction: a crash in the fifth page of ten events, with
    thirty events a transaction, leaves the shadow where the first transaction ended
    (the fourth page rolled back with the fifth), and the resumed rebuild projects the
    rest."""
    write_a_log(service, team, other_team, ctx)
    before = read_models(service)
    e = stored_events.c
    with service.db.read() as conn:
        first_commit = conn.execute(
            select(e.notification_id).order_by(e.notification_id).offset(29).limit(1)
        ).scalar_one()
    told: list[int] = []
    rebuild_crashing_in_page(service, 5, batch_events=10, commit_events=30, progress=told.append)
    # Told of what was committed only: the first transaction's thirty events.
    assert told == [30]
    assert unfinished_rebuild(service.db) == first_commit
    assert read_models(service) == before

    resumed = rebuild_of(service, batch_events=10, commit_events=30)
    assert resumed.resumed_from == first_commit
    assert resumed.events == events_after(service, first_commit)
    assert read_models(service) == before
    assert unfinished_rebuild(service.db) is None


def test_the_heap_is_frozen_while_a_rebuild_runs_and_given_back_after() -> None:
    """`frozen_heap` leaves what existed before out of the collector's passes, and gives
    it back; a heap frozen already (this suite freezes its own) is left as it was."""
    frozen_by_the_suite = gc.get_freeze_count()
    gc.unfreeze()
    try:
        assert gc.get_freeze_count() == 0
        with rebuild.frozen_heap():
            assert gc.get_freeze_count() > 0
        assert gc.get_freeze_count() == 0
        with pytest.raises(RuntimeError), rebuild.frozen_heap():
            raise RuntimeError("a rebuild that fails gives the heap back too")
        assert gc.get_freeze_count() == 0
        gc.freeze()
        frozen = gc.get_freeze_count()
        # A frozen object that another thread lets go of leaves the frozen generation,
        # so the count may only fall: a second freeze would raise it (the block's own
        # generator is younger than the first freeze), an unfreeze would empty it.
        with rebuild.frozen_heap():
            assert 0 < gc.get_freeze_count() <= frozen
        assert 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()
        if frozen_by_the_suite:
            gc.freeze()


def test_restart_drops_an_unfinished_rebuild_and_starts_over(
    service: Service, team: Team, other_team: Team, ctx: CommandContext
) -> None:
    write_a_log(service, team, other_team, ctx)
    before = read_models(service)

    def stop(count: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        rebuild_of(
            service,
            batch_events=10,
            progress=stop,
        )
    assert unfinished_rebuild(service.db) is not None
    rebuilt = rebuild_of(service, restart=True)
    assert (rebuilt.events, rebuilt.resumed_from) == (events_after(service), 0)
    assert read_models(service) == before
    assert unfinished_rebuild(service.db) is None
