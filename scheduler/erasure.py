"""The grace-period sweep: erase every user whose grace period has ended.

Idempotent by construction: the pending-erasure table is the source of truth, an
erasure and the removal of its pending row commit together, and erasing an erased user
is a no-op. The due users are erased in batches (one transaction each, ADR 0021), each
batch claimed first, so that the sweeps of several processes share them instead of
racing for them. Should two sweepers pick the same user anyway (a claim that ran out),
the event store lets exactly one record its Erased event: the other's batch is rolled
back, and it erases its users one by one.

The pending-erasure table is a read model, which the database's holder can change without
touching the log (issue 30 §3). So the due list is cross-checked against the log: after
the claimed batches, the users whose grace period ended according to the log and that the
log does not show erased (`overdue_by_the_log`, which follows the log's deletion events
incrementally: see `OverdueByTheLog`) are erased too, their pending row gone or not; and
the log says so, as the tampering (or lost row) it is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from healthledger.domain.context import SCHEDULER, CommandContext
from healthledger.domain.errors import ConcurrentChange, ErasureNotVerified
from healthledger.domain.ledger import Clock
from healthledger.domain.teams.directory import TeamDirectory
from healthledger.domain.users.lifecycle import UserLifecycle

log = logging.getLogger("healthledger.scheduler.erasure")


@dataclass(frozen=True)
class ErasurePorts:
    """What the sweep reads and calls; the composition root wires them."""

    users: UserLifecycle
    teams: TeamDirectory
    clock: Clock
    # Deleted teams that still have live users (a crash cut their deletion short).
    deleted_teams_with_live_users: Callable[[], Iterable[UUID]]
    # Deleted teams that still have unmatched results waiting for a decision (recorded
    # after their deletion read them).
    deleted_teams_with_undecided_results: Callable[[], Iterable[UUID]]
    # Deleted or erased users that a racing connect left with a live connection.
    gone_users_with_live_connections: Callable[[], Iterable[UUID]]
    # Claims (for this sweep) users whose grace period ended by `now` and whom no other
    # sweep holds, at most `limit` of them; and gives claims back.
    claim_due_erasures: Callable[[datetime, int], Sequence[UUID]]
    release_claims: Callable[[Sequence[UUID]], None]
    # Leaves no old copy of the keys that erasures destroyed where the database can reach
    # (SQLite: checkpoints the WAL); False if it stayed busy (it said so in the log).
    vacuum_key_store: Callable[[], bool]
    batch_size: int
    # The users whose grace period ended by `now` according to the log itself (not a read
    # model), not erased in it, and not being erased by another sweeper now.
    overdue_by_the_log: Callable[[datetime], Sequence[UUID]] = lambda _now: ()
    # Drops what this process keeps in memory of these users' data (their health data
    # opened a moment ago for a read), once their erasure committed.
    forget_in_memory: Callable[[Sequence[UUID]], object] = lambda _user_ids: None
    # Leaves no old version of the rows the erasures deleted that hold a guessable id (the
    # session index's sleep and workout ids) where the database can reach; once a sweep.
    rewrite_erased_ids: Callable[[], object] = lambda: None


def sweep_erasures(ports: ErasurePorts) -> int:
    """Erase what is due now; returns how many users this call erased.

    It first finishes what a crash or a race cut short: live users of a deleted team are
    deleted (grace period, then erasure), its unmatched results still undecided are
    resolved, and live connections of a deleted user are deregistered.
    """
    ctx = CommandContext.system(SCHEDULER)
    for team_id in ports.deleted_teams_with_live_users():
        ports.teams.delete_team_users(ctx, team_id)
    for team_id in ports.deleted_teams_with_undecided_results():
        try:
            ports.teams.resolve_left_with_deleted_team(ctx, team_id)
        except ConcurrentChange:
            continue  # decided meanwhile: the next sweep looks again
    # A connect that raced a user's deletion can leave a live connection behind.
    for user_id in ports.gone_users_with_live_connections():
        ports.users.deregister_connections_of_gone_user(ctx, user_id)
    batch = ports.batch_size
    erased = 0
    # Every user due by then has a pending row due by then, unless the row was removed or
    # changed: the log is asked about them after the claimed batches.
    started = ports.clock()
    while True:
        due = ports.claim_due_erasures(ports.clock(), batch)
        erased_now = 0
        try:
            erased_now = _erase_batch(ports, ctx, due)
        finally:
            if erased_now < len(due):
                # What this sweep did not erase goes back to every sweep at once.
                ports.release_claims(due)
        erased += erased_now
        if erased_now:
            # After each batch: its destroyed keys' old pages leave the WAL.
            ports.vacuum_key_store()
        # Stop at a short batch, or when a batch changed nothing (so a row we cannot
        # erase, which would be a bug, never spins the sweep forever).
        if len(due) < batch or erased_now == 0:
            break
    erased += _erase_overdue_by_the_log(ports, ctx, started)
    if erased:
        ports.rewrite_erased_ids()
        log.info("erased %d user(s) whose grace period ended (sweep %s)", erased, ctx.request_id)
    return erased


def _erase_overdue_by_the_log(ports: ErasurePorts, ctx: CommandContext, now: datetime) -> int:
    """Erase the users whose grace period ended by `now` according to the log that the
    claimed batches left: their pending-erasure row was removed or changed (tampering, or
    a lost row). Said in the log (counts only); erased as the claimed ones are."""
    overdue = list(ports.overdue_by_the_log(now))
    if not overdue:
        return 0
    erased = 0
    for start in range(0, len(overdue), ports.batch_size):
        erased_now = _erase_batch(ports, ctx, overdue[start : start + ports.batch_size])
        if erased_now:
            ports.vacuum_key_store()
        erased += erased_now
    log.warning(
        "%d user(s) due for erasure by the log had no pending-erasure row due for it "
        "(removed or changed behind the log's back, or lost): %d erased from the log "
        "(sweep %s); `healthledger verify --read-models` names the rows",
        len(overdue),
        erased,
        ctx.request_id,
    )
    return erased


def _erase_batch(ports: ErasurePorts, ctx: CommandContext, due: Sequence[UUID]) -> int:
    """Erase a claimed batch in one transaction; if that is rolled back (another sweeper
    erased one of them, a count moved, a check failed), each user on its own."""
    if not due:
        return 0
    try:
        erased = ports.users.erase_users(ctx, due)
    except (ConcurrentChange, ErasureNotVerified) as exc:
        log.info(
            "a batch of %d erasure(s) was rolled back (%s): erased one by one (sweep %s)",
            len(due),
            type(exc).__name__,
            ctx.request_id,
        )
        erased = sum(_erase(ports, ctx, user_id) for user_id in due)
    if erased:
        # The users of the batch that were not erased only lose what a read kept a while.
        ports.forget_in_memory(due)
    return erased


def _erase(ports: ErasurePorts, ctx: CommandContext, user_id: UUID) -> bool:
    """Erase one user; an erasure whose check failed was rolled back (nothing recorded):
    said in the log, by place and counts only, and left for the next sweep."""
    try:
        return ports.users.erase_user(ctx, user_id)
    except ErasureNotVerified as exc:
        log.error("%s; rolled back, tried again at the next sweep (sweep %s)", exc, ctx.request_id)
        return False
