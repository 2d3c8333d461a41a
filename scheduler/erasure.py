"""The grace-period sweep: erase every user whose grace period has ended.

Idempotent by construction: the pending-erasure table is the source of truth, an
erasure and the removal of its pending row commit together, and erasing an erased user
is a no-op. Two sweepers (two processes on one PostgreSQL) may pick the same user: the
event store lets exactly one record its Erased event, the other sees a conflict.
"""

from __future__ import annotations

import logging

from healthledger.adapters.composition import Service
from healthledger.domain.context import SCHEDULER, CommandContext

log = logging.getLogger("healthledger.scheduler.erasure")


def sweep_erasures(service: Service) -> int:
    """Erase what is due now; returns how many users this call erased.

    It first finishes what a crash or a race cut short: live users of a deleted team are
    deleted (grace period, then erasure), and live connections of a deleted user are
    deregistered.
    """
    ctx = CommandContext.system(SCHEDULER)
    for team_id in service.team_queries.deleted_teams_with_live_users():
        service.teams.delete_team_users(ctx, team_id)
    # A connect that raced a user's deletion can leave a live connection behind.
    for user_id in service.connection_queries.gone_users_with_live_connections():
        service.users.deregister_connections_of_gone_user(ctx, user_id)
    batch = service.settings.erasure_batch_size
    erased = 0
    while True:
        due = service.user_queries.due_for_erasure(service.clock(), batch)
        erased_now = sum(service.users.erase_user(ctx, user_id) for user_id in due)
        erased += erased_now
        # Stop at a short batch, or when a batch changed nothing (so a row we cannot
        # erase, which would be a bug, never spins the sweep forever).
        if len(due) < batch or erased_now == 0:
            break
    if erased:
        log.info("erased %d user(s) whose grace period ended (sweep %s)", erased, ctx.request_id)
        service.db.vacuum_key_store()
    return erased
