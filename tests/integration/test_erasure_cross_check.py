"""The erasure sweep cross-checks its due list against the log (issue 30 §3): a user whose
grace period ended according to the log is erased even if its `pending_erasures` row was
removed (or its due date moved, or its claim pushed beyond any sweeper's), and the users
read model changed too. On both databases."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

import pytest
from freezegun import freeze_time
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.engine.schema import pending_erasures
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.users.user import ERASED, PENDING_ERASURE, User
from sqlalchemy import insert, text

from tests.conftest import Team
from tests.integration.test_chain import execute
from tests.integration.test_erasure_batches import DUE, T0, deleted_users, erased_events


def status(service: Service, user_id: UUID) -> str:
    user = service.ledger.find(user_id)
    assert isinstance(user, User)
    return user.status


def test_due_users_whose_pending_rows_were_deleted_are_still_erased(
    settings: Settings,
    service: Service,
    team: Team,
    ctx: CommandContext,
    caplog: pytest.LogCaptureFixture,
) -> None:
    users = deleted_users(service, team, ctx, 5)
    # Deleted, then undone: not due by the log.
    undone = deleted_users(service, team, ctx, 1)[0]
    with freeze_time(T0 + timedelta(days=1)):
        service.users.undo_deletion(ctx, team.team_id, undone)
    # Deleted later: not due yet at DUE.
    with freeze_time(DUE - timedelta(days=2)):
        later = service.users.create_user(ctx, team.team_id, client_user_id="later").id
        service.users.delete_user(ctx, team.team_id, later)

    # Behind the log's back: every pending row gone and the users look active again.
    execute(service, text("DELETE FROM pending_erasures"))
    execute(service, text("UPDATE users SET status = 'active', erasure_due_at = NULL"))
    with freeze_time(DUE), caplog.at_level("WARNING"):
        assert service.jobs.sweep_erasures() == 5
    assert all(status(service, u) == ERASED for u in users)
    assert status(service, undone) == "active" and status(service, later) == PENDING_ERASURE
    assert "5 user(s) due for erasure by the log had no pending-erasure row" in caplog.text
    # Exactly once each; the next sweep finds nothing more.
    assert erased_events(service) == {u: 1 for u in users}
    with freeze_time(DUE):
        assert service.jobs.sweep_erasures() == 0

    # A fresh process (it reads the log's deletions once, at its first sweep) erases the
    # later user once due, its row moved far off and claimed beyond any lease.
    far = DUE + timedelta(days=3650)
    execute(service, insert(pending_erasures).values(user_id=later, due_at=far, claimed_until=far))
    other = build_service(settings, clock=lambda: DUE + timedelta(days=6))
    try:
        assert other.jobs.sweep_erasures() == 1
    finally:
        other.close()
    assert status(service, later) == ERASED


def test_the_log_check_leaves_the_claimed_batches_alone(
    service: Service, team: Team, ctx: CommandContext, caplog: pytest.LogCaptureFixture
) -> None:
    users = deleted_users(service, team, ctx, 3)
    with freeze_time(DUE), caplog.at_level("WARNING"):
        assert service.jobs.sweep_erasures() == 3
        assert service.jobs.sweep_erasures() == 0
    assert "due for erasure by the log" not in caplog.text
    assert erased_events(service) == {u: 1 for u in users}
