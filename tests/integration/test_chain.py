"""The hash chain over the event log (ADR 0015): a log written through the service
verifies; each kind of tampering with the real rows (SQL, as someone with database access
would do it) is caught, naming the first bad record, and `healthledger verify` exits 1;
erasure keeps the chain; signed heads prove the log up to them."""

from __future__ import annotations

import base64
import stat
import threading
import uuid
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from freezegun import freeze_time
from healthledger.adapters.cli import main
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.engine.schema import chain_heads, stored_events
from healthledger.adapters.persistence.eventstore.chain import (
    BAD_HEAD,
    CHANGED,
    GENESIS,
    INSERTED,
    REMOVED,
    REORDERED,
    ChainProblem,
    link_hash,
    state_digest,
    verify_signed_head,
)
from healthledger.adapters.persistence.keys.signing_key import SIGNING_KEY_NAME, SigningKeyError
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from sqlalchemy import func, insert, select, text, update

from tests.conftest import Team

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def cli_env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    # The CLI finds the same database and keys (the signing key sits beside the master key).
    monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY_FILE", str(settings.master_key_file))


def write_log(
    service: Service, team: Team, users: int = 6, prefix: str = "chain"
) -> list[uuid.UUID]:
    """Users created, changed and deleted through the service: a log of a few dozen events
    of several streams."""
    ctx = CommandContext(actor="test:chain", request_id="req-chain")
    made = []
    for i in range(users):
        user = service.users.create_user(
            ctx,
            team.team_id,
            client_user_id=f"{prefix}-{i}",
            fallback_birth_date=date(1980, 1, 1 + i),
        )
        made.append(user.id)
    for user_id in made[::2]:
        service.users.update_user(ctx, team.team_id, user_id, {"fallback_time_zone": "Europe/Rome"})
    service.users.delete_user(ctx, team.team_id, made[-1])
    return made


def row_at(service: Service, position: int) -> dict[str, Any]:
    with service.db.read() as conn:
        row = conn.execute(select(stored_events).where(stored_events.c.chain_position == position))
        return dict(row.mappings().one())


def execute(service: Service, statement: Any, **params: Any) -> None:
    with service.db.write() as conn:
        conn.execute(statement, params)


def event_count(service: Service) -> int:
    with service.db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(stored_events)).scalar_one())


def cli_verify(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["verify", *args])
    return code, capsys.readouterr().out


def assert_names(problem: ChainProblem | None, kind: str, row: dict[str, Any]) -> None:
    assert problem is not None
    assert problem.kind == kind, problem
    assert (problem.notification_id, problem.originator_id, problem.originator_version) == (
        row["notification_id"],
        row["originator_id"],
        row["originator_version"],
    ), problem


def assert_cli_names(
    capsys: pytest.CaptureFixture[str], kind: str, position: int, row: dict[str, Any]
) -> None:
    code, out = cli_verify(capsys)
    assert code == 1, out
    assert out.startswith(f"FAILED: {kind} at position {position} "), out
    assert (
        f"(notification id {row['notification_id']}, stream {row['originator_id']}, "
        f"version {row['originator_version']})" in out
    ), out


# -- a log as the service writes it --------------------------------------------------------


def test_a_log_written_through_the_service_verifies_and_its_links_recompute(
    service: Service, team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    made = write_log(service, team)
    total = event_count(service)
    result = service.chain.verify()
    assert result.ok and result.problem is None
    assert (result.records_checked, result.first_position, result.last_position) == (
        total,
        1,
        total,
    )
    code, out = cli_verify(capsys)
    assert code == 0, out
    assert f"ok: {total} record(s) checked from position 1, last position {total}" in out

    # From a position: the record before it is trusted, the rest walked.
    since = service.chain.verify(since=10)
    assert since.ok and (since.records_checked, since.first_position) == (total - 9, 10)
    code, out = cli_verify(capsys, "--since", "10")
    assert code == 0 and f"ok: {total - 9} record(s) checked from position 10" in out, out

    # Every link of a user's stream recomputes from its fields and the previous hash,
    # which is the stored hash of the record one position earlier.
    links = service.chain.links([made[0]])
    assert [link.version for link in links] == [1, 2]
    for link in links:
        assert link.hash == row_at(service, link.position)["chain_hash"]
        before = GENESIS if link.position == 1 else row_at(service, link.position - 1)["chain_hash"]
        assert link.prev_hash == before
        stored = row_at(service, link.position)
        assert link.state_digest == state_digest(stored["state"])
        assert link.hash == link_hash(
            link.prev_hash,
            link.position,
            link.originator_id,
            link.version,
            link.topic,
            link.timestamp,
            link.state_digest,
        )


def test_writers_of_two_services_at_once_keep_one_chain(
    service: Service, settings: Settings, team: Team
) -> None:
    # Two services on one database: on PostgreSQL two writers whose transactions the
    # table lock orders (the head is read under it), on SQLite two writer connections.
    other = build_service(settings)
    ctx = CommandContext(actor="test:chain", request_id="req-chain")
    errors: list[BaseException] = []

    def write(svc: Service, tag: str) -> None:
        try:
            for i in range(15):
                svc.users.create_user(ctx, team.team_id, client_user_id=f"{tag}-{i}")
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    try:
        threads = [
            threading.Thread(target=write, args=(svc, tag))
            for svc, tag in ((service, "a"), (other, "b"))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        other.close()
    assert errors == []
    result = service.chain.verify()
    assert result.ok, result.problem
    assert result.records_checked == event_count(service) >= 60


# -- tampering, each kind --------------------------------------------------------------------


def test_a_changed_state_byte_is_caught_at_its_record(
    service: Service, team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    write_log(service, team)
    row = row_at(service, 12)
    state = bytearray(row["state"])
    state[len(state) // 2] ^= 0x01
    execute(
        service,
        update(stored_events)
        .where(stored_events.c.chain_position == 12)
        .values(state=bytes(state)),
    )
    problem = service.chain.verify().problem
    assert_names(problem, CHANGED, row)
    assert problem is not None and problem.position == 12
    assert_cli_names(capsys, CHANGED, 12, row)


def test_a_changed_topic_is_caught_at_its_record(
    service: Service, team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    write_log(service, team)
    row = row_at(service, 7)
    execute(
        service,
        text("UPDATE stored_events SET topic = :topic WHERE notification_id = :id"),
        topic=row["topic"].replace(".v1", ".v2") + "x",
        id=row["notification_id"],
    )
    problem = service.chain.verify().problem
    assert_names(problem, CHANGED, row)
    assert problem is not None and problem.position == 7
    assert_cli_names(capsys, CHANGED, 7, row)


def test_a_deleted_record_is_caught_as_removed(
    service: Service, team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    write_log(service, team)
    after = row_at(service, 10)
    execute(service, text("DELETE FROM stored_events WHERE chain_position = 9"))
    problem = service.chain.verify().problem
    # The gap is position 9; the record named is the one found in its place.
    assert_names(problem, REMOVED, after)
    assert problem is not None and problem.position == 9
    assert "position 9 is missing" in problem.detail
    assert_cli_names(capsys, REMOVED, 9, after)


def test_a_forged_record_with_a_valid_hash_of_its_own_is_caught_as_inserted(
    service: Service, team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    ctx = CommandContext(actor="test:chain", request_id="req-chain")
    write_log(service, team, users=3)
    # A free notification id between two records: PostgreSQL's sequence skips numbers
    # (a rolled-back insert); on SQLite the forger moves AUTOINCREMENT's counter.
    if service.db.is_sqlite:
        execute(
            service, text("UPDATE sqlite_sequence SET seq = seq + 1 WHERE name = 'stored_events'")
        )
    else:
        execute(
            service,
            text("SELECT nextval(pg_get_serial_sequence('stored_events', 'notification_id'))"),
        )
    last_before = service.recorder.max_notification_id() or 0
    service.users.create_user(ctx, team.team_id, client_user_id="after-the-gap")
    with service.db.read() as conn:
        first_after = dict(
            conn.execute(
                select(stored_events)
                .where(stored_events.c.notification_id > last_before)
                .order_by(stored_events.c.notification_id)
                .limit(1)
            )
            .mappings()
            .one()
        )
    gap = first_after["notification_id"] - 1
    assert gap > last_before
    position = first_after["chain_position"]

    # The forger makes room for a record at that position (every later position one up),
    # and writes it with the hash it would have had there.
    execute(
        service,
        text(
            "UPDATE stored_events SET chain_position = -chain_position - 1 "
            "WHERE notification_id > :gap"
        ),
        gap=gap,
    )
    execute(
        service,
        text("UPDATE stored_events SET chain_position = -chain_position WHERE chain_position < 0"),
    )
    forged_id = uuid.uuid4()
    state = b'{"forged":true}'
    prev = row_at(service, position - 1)["chain_hash"]
    execute(
        service,
        insert(stored_events).values(
            notification_id=gap,
            originator_id=forged_id,
            originator_version=1,
            topic="healthledger:User.Created.v1",
            state=state,
            timestamp=T0,
            chain_position=position,
            chain_hash=link_hash(
                prev,
                position,
                forged_id,
                1,
                "healthledger:User.Created.v1",
                T0,
                state_digest(state),
            ),
        ),
    )
    forged = row_at(service, position)
    assert forged["notification_id"] == gap
    problem = service.chain.verify().problem
    assert_names(problem, INSERTED, forged)
    assert problem is not None and problem.position == position
    assert_cli_names(capsys, INSERTED, position, forged)


def test_a_record_without_a_position_is_caught_as_inserted(
    service: Service, team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    write_log(service, team, users=2)
    total = event_count(service)
    forged_id = uuid.uuid4()
    state = b'{"forged":true}'
    execute(
        service,
        insert(stored_events).values(
            originator_id=forged_id,
            originator_version=1,
            topic="healthledger:User.Created.v1",
            state=state,
            timestamp=T0,
            chain_hash=link_hash(
                GENESIS, 1, forged_id, 1, "healthledger:User.Created.v1", T0, state_digest(state)
            ),
        ),
    )
    row = {"notification_id": service.recorder.max_notification_id(), "originator_id": forged_id}
    row["originator_version"] = 1
    problem = service.chain.verify().problem
    assert_names(problem, INSERTED, row)
    assert problem is not None and problem.position == total + 1
    assert_cli_names(capsys, INSERTED, total + 1, row)


def test_two_records_swapped_are_caught_as_reordered(
    service: Service, team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    write_log(service, team)
    first, second = row_at(service, 8), row_at(service, 11)
    # Everything but the notification id trades places (the second is parked first, as
    # both the stream version and the position are unique).
    moved: tuple[str, ...] = ("originator_id", "originator_version", "topic", "state")
    moved += ("timestamp", "chain_position", "chain_hash")
    by_id = stored_events.c.notification_id
    execute(
        service,
        update(stored_events)
        .where(by_id == second["notification_id"])
        .values(originator_version=-1, chain_position=None),
    )
    execute(
        service,
        update(stored_events)
        .where(by_id == first["notification_id"])
        .values({name: second[name] for name in moved}),
    )
    execute(
        service,
        update(stored_events)
        .where(by_id == second["notification_id"])
        .values({name: first[name] for name in moved}),
    )
    named = {**second, "notification_id": first["notification_id"]}
    problem = service.chain.verify().problem
    assert_names(problem, REORDERED, named)
    assert problem is not None and problem.position == 8
    assert f"notification id {second['notification_id']}" in problem.detail
    assert_cli_names(capsys, REORDERED, 8, named)


def test_a_record_rewritten_with_its_hash_recomputed_is_caught_at_the_next(
    service: Service, team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    write_log(service, team)
    row = row_at(service, 14)
    # Trailing whitespace: the JSON still reads, to the same event.
    state = row["state"] + b" "
    prev = row_at(service, 13)["chain_hash"]
    rehashed = link_hash(
        prev,
        14,
        row["originator_id"],
        row["originator_version"],
        row["topic"],
        row["timestamp"],
        state_digest(state),
    )
    execute(
        service,
        update(stored_events)
        .where(stored_events.c.chain_position == 14)
        .values(state=state, chain_hash=rehashed),
    )
    next_row = row_at(service, 15)
    problem = service.chain.verify().problem
    assert_names(problem, CHANGED, next_row)
    assert problem is not None and problem.position == 15
    assert_cli_names(capsys, CHANGED, 15, next_row)


# -- signed heads --------------------------------------------------------------------------


def test_signed_heads_are_the_services_and_a_tampered_one_is_caught(
    service: Service, team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    write_log(service, team, users=3)
    head = service.chain.sign_head()
    assert head.position == event_count(service)
    assert verify_signed_head(service.chain.public_key(), head)
    assert service.chain.sign_head() == head  # already signed: the recorded one
    assert service.jobs.sign_chain_head() == 0  # the head did not move
    write_log(service, team, users=2, prefix="more")
    assert service.jobs.sign_chain_head() == 1
    assert service.chain.covering_head(1) == head
    later = service.chain.covering_head(head.position + 1)
    assert later is not None and later.position == event_count(service)
    assert service.chain.covering_head(later.position + 1) is None
    code, out = cli_verify(capsys)
    assert code == 0 and "2 signed head(s) checked" in out, out

    # The head's hash changed: its signature no longer verifies.
    execute(
        service,
        update(chain_heads)
        .where(chain_heads.c.position == head.position)
        .values(chain_hash=bytes(32)),
    )
    row = row_at(service, head.position)
    problem = service.chain.verify().problem
    assert_names(problem, BAD_HEAD, row)
    assert problem is not None and problem.position == head.position
    assert_cli_names(capsys, BAD_HEAD, head.position, row)


def test_a_rewrite_with_every_later_hash_recomputed_is_caught_by_the_signed_head(
    service: Service, team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    write_log(service, team)
    head = service.chain.sign_head()
    # The forger changes record 5 and recomputes every hash after it: the walk finds a
    # consistent chain, but its hash at the signed position is not the signed one.
    execute(
        service,
        text("UPDATE stored_events SET state = :state WHERE chain_position = 5"),
        state=b'{"rewritten":true}',
    )
    with service.db.read() as conn:
        rows = (
            conn.execute(
                select(stored_events)
                .where(stored_events.c.chain_position >= 5)
                .order_by(stored_events.c.chain_position)
            )
            .mappings()
            .all()
        )
    prev = row_at(service, 4)["chain_hash"]
    for row in rows:
        prev = link_hash(
            prev,
            row["chain_position"],
            row["originator_id"],
            row["originator_version"],
            row["topic"],
            row["timestamp"],
            state_digest(row["state"]),
        )
        execute(
            service,
            update(stored_events)
            .where(stored_events.c.notification_id == row["notification_id"])
            .values(chain_hash=prev),
        )
    result = service.chain.verify()
    assert result.records_checked == event_count(service)  # the walk itself passes
    named = row_at(service, head.position)
    assert_names(result.problem, CHANGED, named)
    assert result.problem is not None and result.problem.position == head.position
    assert "not the signed one" in result.problem.detail
    assert_cli_names(capsys, CHANGED, head.position, named)


def test_the_last_records_removed_are_caught_by_the_signed_head(
    service: Service, team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    write_log(service, team, users=2)
    head = service.chain.sign_head()
    execute(
        service,
        text("DELETE FROM stored_events WHERE chain_position >= :from_position"),
        from_position=head.position - 1,
    )
    problem = service.chain.verify().problem
    assert problem is not None and (problem.kind, problem.position) == (REMOVED, head.position)
    code, out = cli_verify(capsys)
    assert code == 1 and out.startswith(f"FAILED: removed at position {head.position}: "), out


def test_chain_sign_on_the_command_line(
    service: Service, team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    write_log(service, team, users=1)
    capsys.readouterr()
    assert main(["chain", "sign"]) == 0
    out = capsys.readouterr().out
    head = service.chain.covering_head(1)
    assert head is not None and head.position == event_count(service)
    assert f"signed head at position {head.position}: chain hash {head.chain_hash.hex()}" in out


# -- crypto-shredding keeps the chain -----------------------------------------------------------


def test_an_erased_user_leaves_the_chain_intact(
    service: Service, team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    ctx = CommandContext(actor="test:chain", request_id="req-chain")
    with freeze_time(T0):
        write_log(service, team, users=3)
        user = service.users.create_user(
            ctx, team.team_id, client_user_id="erase-me", fallback_birth_date=date(1970, 1, 2)
        )
        service.users.delete_user(ctx, team.team_id, user.id)
        service.chain.sign_head()
    assert service.key_store.has_key(user.id)
    with freeze_time(T0 + timedelta(days=8)):
        assert service.jobs.sweep_erasures() >= 1
    assert not service.key_store.has_key(user.id)
    result = service.chain.verify()
    assert result.ok, result.problem
    assert result.records_checked == event_count(service)
    assert result.signed_heads_checked == 1
    code, out = cli_verify(capsys)
    assert code == 0, out


# -- the signing key ------------------------------------------------------------------------


def test_the_signing_key_is_a_private_file_beside_the_master_key_and_never_replaced(
    service: Service, settings: Settings, team: Team
) -> None:
    key_file = settings.master_key_file.parent / SIGNING_KEY_NAME
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    raw = base64.b64decode(key_file.read_bytes())
    public = Ed25519PrivateKey.from_private_bytes(raw).public_key().public_bytes_raw()
    assert service.chain.public_key() == public

    # Before any head is signed, a lost file is replaced; after, it stops the service.
    write_log(service, team, users=1)
    service.chain.sign_head()
    key_file.unlink()
    with pytest.raises(SigningKeyError, match="HEALTHLEDGER_SIGNING_KEY_FILE"):
        build_service(settings)
