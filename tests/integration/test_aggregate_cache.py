"""The ledger's aggregates known to be current (`KnownCurrentRepository`, ADR 0011, ADR
0020): in a unit of work, an aggregate this process saved is handed out without a query
of its events while no other writer has committed (SQLite's change counter; on
PostgreSQL the chain's head, read once per unit); anything another writer commits is
seen by the next command."""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from eventsourcing.persistence import IntegrityError
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.eventstore.recorder import LedgerRecorder
from healthledger.adapters.settings import Settings
from healthledger.domain.context import SCHEDULER, CommandContext
from healthledger.domain.errors import UserNotFound, UserScheduledForDeletion
from healthledger.domain.users.user import ACTIVE, PENDING_ERASURE, ClientUserIdClaim, User
from sqlalchemy import event
from sqlalchemy.engine import make_url

from tests.clocks import Clock
from tests.conftest import Team


@contextmanager
def event_reads(service: Service) -> Iterator[list[str]]:
    """The statements that read the event log meanwhile, on any of the database's
    connections."""
    seen: list[str] = []
    # On PostgreSQL the reader is a view of the writer engine (`execution_options`): a
    # read reaches the listeners of both, with one execution context (kept here, alive).
    contexts: list[Any] = []

    def before(
        _conn: Any, _cursor: Any, statement: str, _params: Any, context: Any, *_: Any
    ) -> None:
        if any(seen_context is context for seen_context in contexts):
            return
        contexts.append(context)
        if statement.lstrip().upper().startswith("SELECT") and "stored_events" in statement:
            seen.append(statement)

    engines = {service.db.reader, service.db.writer}
    for engine in engines:
        event.listen(engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", before)


def _sqlite_only(service: Service) -> None:
    if not service.db.is_sqlite:
        pytest.skip("SQLite's change counter (PostgreSQL's mark: test_command_path.py)")


def test_a_unit_of_work_hands_out_a_saved_aggregate_without_a_query(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    user = service.users.create_user(ctx, team.team_id, client_user_id="cached")
    with event_reads(service) as reads:
        with service.db.unit_of_work():
            found = service.ledger.find(user.id)
            again = service.ledger.find(user.id)
        assert reads == []
    assert isinstance(found, User) and isinstance(again, User)
    assert found is not again and found.version == again.version == user.version


def test_a_copy_handed_out_is_the_callers_own(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    user = service.users.create_user(ctx, team.team_id, client_user_id="copied")
    with service.db.unit_of_work():
        found = service.ledger.find(user.id)
        assert isinstance(found, User)
        # A command that changes its copy and then fails to save changes nothing cached.
        found.delete(ctx, service.clock(), service.clock())
        again = service.ledger.find(user.id)
    assert isinstance(again, User) and again.status == ACTIVE and again.version == user.version


def test_another_writers_commit_makes_the_next_get_read_the_log(
    service: Service, team: Team, ctx: CommandContext, settings: Settings
) -> None:
    _sqlite_only(service)
    user = service.users.create_user(ctx, team.team_id, client_user_id="moved")
    path = make_url(settings.database_url).database
    assert path is not None
    with event_reads(service) as reads:
        # Any commit by another connection (here one that changes no event) moves the
        # mark: the cached user is checked against the log once, then known current.
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("CREATE TABLE scratch (x)")
        other.close()
        with service.db.unit_of_work():
            service.ledger.find(user.id)
            service.ledger.find(user.id)
        assert len(reads) == 1


def test_a_command_sees_what_another_process_changed(
    settings: Settings, service: Service, team: Team, ctx: CommandContext
) -> None:
    # A second service on the same database stands in for a second server process.
    user = service.users.create_user(ctx, team.team_id, client_user_id="shared")
    service.users.delete_user(ctx, team.team_id, user.id)
    service.users.undo_deletion(ctx, team.team_id, user.id)  # known current here now
    other = build_service(settings)
    try:
        other.users.delete_user(ctx, team.team_id, user.id)
    finally:
        other.close()
    # The first service must not act on its copy from before the other's delete.
    with pytest.raises(UserScheduledForDeletion):
        service.users.delete_user(ctx, team.team_id, user.id)
    undone = service.users.undo_deletion(ctx, team.team_id, user.id)
    assert undone.status == ACTIVE and undone.version == user.version + 4
    claim = service.ledger.find(user.claim_id)
    assert isinstance(claim, ClientUserIdClaim) and claim.holder == user.id


def test_a_command_of_this_process_sees_every_save_of_this_process(
    service: Service, team: Team, other_team: Team, ctx: CommandContext
) -> None:
    user = service.users.create_user(ctx, team.team_id, client_user_id="mine")
    deleted = service.users.delete_user(ctx, team.team_id, user.id)
    assert deleted.status == PENDING_ERASURE
    with pytest.raises(UserScheduledForDeletion):
        service.users.delete_user(ctx, team.team_id, user.id)
    with pytest.raises(UserNotFound):
        service.users.delete_user(ctx, other_team.team_id, user.id)


def test_two_recorders_of_one_event_table_get_no_mark(service: Service) -> None:
    with service.db.unit_of_work():
        assert service.recorder.change_mark() is not None
    # A second recorder writing the same table on the same connection would not move
    # the mark: from then on there is none, and every get reads the log.
    LedgerRecorder(service.db)
    with service.db.unit_of_work():
        assert service.recorder.change_mark() is None


def test_a_unit_of_work_reads_once_and_a_save_takes_an_earlier_reading(
    service: Service, settings: Settings
) -> None:
    _sqlite_only(service)
    with service.db.unit_of_work():
        first = service.recorder.change_mark()
        assert first is not None
        assert service.recorder.change_mark() == first  # one reading per unit
    path = make_url(settings.database_url).database
    assert path is not None
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("CREATE TABLE scratch (x)")  # another connection commits
    other.close()
    with service.db.unit_of_work():
        # What a save asks for after its commit: no new reading (it would vouch for
        # what was committed before it), the last one taken, from before that commit.
        assert service.recorder.change_mark(existing=True) == first
        fresh = service.recorder.change_mark()
        assert fresh is not None and fresh != first
        assert service.recorder.change_mark(existing=True) == fresh


def test_a_user_created_after_another_writers_commit_is_checked_against_the_log(
    settings: Settings, service: Service, team: Team, ctx: CommandContext
) -> None:
    service.users.create_user(ctx, team.team_id, client_user_id="before")
    other = build_service(settings)
    try:
        # The create below reads no counter: its user is stored with the last reading,
        # from before this commit of the other service.
        other.users.create_user(ctx, team.team_id, client_user_id="elsewhere")
        user = service.users.create_user(ctx, team.team_id, client_user_id="created")
        other.users.delete_user(ctx, team.team_id, user.id)
    finally:
        other.close()
    with pytest.raises(UserScheduledForDeletion):
        service.users.delete_user(ctx, team.team_id, user.id)


def test_a_user_created_in_a_unit_of_work_is_known_current_to_the_next(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    # The create saves before any load and reads no counter: the user and its claim are
    # stored with the last reading (PostgreSQL: the epoch of the head its commit wrote),
    # and no other writer has committed since.
    user = service.users.create_user(ctx, team.team_id, client_user_id="fresh")
    with event_reads(service) as reads:
        deleted = service.users.delete_user(ctx, team.team_id, user.id)
        assert reads == []
    assert deleted.status == PENDING_ERASURE


def test_what_a_caller_does_to_its_aggregate_after_saving_it_is_never_handed_out(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    user = service.users.create_user(ctx, team.team_id, client_user_id="kept")
    # The caller goes on with its own object: a change it never saves.
    user.delete(ctx, service.clock(), service.clock())
    assert user.status == PENDING_ERASURE
    with event_reads(service) as reads, service.db.unit_of_work():
        found = service.ledger.find(user.id)
    # The kept object is no longer at the version it was saved at: the log decides.
    assert len(reads) == 1
    assert isinstance(found, User)
    assert found.status == ACTIVE and found.version == 1
    assert found.collect_events() == []


def test_a_save_that_fails_leaves_nothing_of_itself_kept(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    # What a save keeps is kept once it is committed; a failed one must leave nothing of
    # itself, and no earlier entry of what it changed. A second claim of a taken
    # client_user_id is refused by the event store: its claim (the same id, version 1,
    # another holder) must not be what the next get hands out.
    first = service.users.create_user(ctx, team.team_id, client_user_id="taken")
    claim_id = first.claim_id
    digest = service.client_user_id_digest(team.team_id, "taken")
    with service.db.unit_of_work():
        refused = User.register(
            ctx,
            service.clock(),
            user_id=uuid.uuid4(),
            team_id=team.team_id,
            sealed_client_user_id="v1.sealed-taken",
            claim_id=claim_id,
            sealed_fallback_time_zone=None,
            sealed_birth_date=None,
            ingestion_start=None,
            ingestion_end=None,
        )
        duplicate = ClientUserIdClaim.start(ctx, service.clock(), team.team_id, digest, refused.id)
        with pytest.raises(IntegrityError):
            service.ledger.save(duplicate, refused)
        claim = service.ledger.find(claim_id)
        assert service.ledger.find(refused.id) is None
    assert isinstance(claim, ClientUserIdClaim)
    assert claim.holder == first.id and claim.version == 1


def test_a_command_run_while_a_commit_of_this_process_is_being_kept_reads_the_commit(
    settings: Settings, ctx: CommandContext
) -> None:
    """A save of this process commits, then keeps what it saved as known current. On
    PostgreSQL another thread's command runs meanwhile (the units of work take no lock),
    and the chain's head it reads is the one this process's commit left: the same epoch
    as the copy kept before the commit, which it must not be handed (CI once saw an undo
    told GracePeriodEnded of a user that the read model already said was erased). Here
    the other command runs exactly there: from a commit listener of the erasure, which
    the recorder calls after the commit and before the save keeps its aggregates."""
    clock = Clock()
    service = build_service(settings, clock=clock)
    try:
        created = service.bootstrap()
        assert created is not None
        team_id = created.team_id
        user = service.users.create_user(ctx, team_id, client_user_id="erased-meanwhile")
        service.users.delete_user(ctx, team_id, user.id)  # kept: pending erasure
        clock.advance(timedelta(days=8))
        answers: list[BaseException | User] = []
        done = threading.Event()

        def undo() -> None:
            try:
                answers.append(service.users.undo_deletion(ctx, team_id, user.id))
            except BaseException as exc:  # the answer, whatever it is
                answers.append(exc)
            done.set()

        def on_commit(events: Sequence[Any]) -> None:
            if any(isinstance(e, User.Erased) and e.originator_id == user.id for e in events):
                threading.Thread(target=undo).start()
                # SQLite's units of work share one lock: the undo waits for this one.
                if not service.db.is_sqlite:
                    assert done.wait(30), "the other thread's command did not end"

        service.recorder.add_commit_listener(on_commit)
        assert service.users.erase_user(CommandContext.system(SCHEDULER), user.id)
        assert done.wait(30)
        [answer] = answers
        assert isinstance(answer, UserNotFound), answer
    finally:
        service.close()
