"""Redactions of stored events (ADR 0028): a redacted log verifies (its signed heads and the
head file's heads too), a deletion report's span check passes over it and its links
recompute with the original digests; and every tampering with a redaction is caught:
the redacted payload changed, the redaction record changed or deleted, the index
(`chain_redactions`) changed or an entry deleted. On SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, date, datetime
from typing import Any

import pytest
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.engine.schema import chain_redactions, stored_events
from healthledger.adapters.persistence.eventstore.chain import (
    CHANGED,
    REDACTION_TOPIC,
    REMOVED,
    SHORTER,
    link_hash,
)
from healthledger.adapters.persistence.eventstore.redaction import (
    RedactionRaced,
    Redactor,
    Replacement,
)
from healthledger.adapters.persistence.keys.head_anchors import read_anchors
from healthledger.domain.context import CommandContext
from healthledger.domain.redaction import SEALED
from sqlalchemy import delete, select, update

from tests.conftest import Team

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CTX = CommandContext(actor="test:redaction", request_id="req-redaction")
# What the redacted records' actor becomes: a stand-in for a sealed form that decodes.
REDACTED_ACTOR = "redacted-by-test"


def write_users(service: Service, team: Team, count: int, prefix: str) -> None:
    for i in range(count):
        service.users.create_user(
            CTX,
            team.team_id,
            client_user_id=f"{prefix}-{i}",
            fallback_birth_date=date(1980, 1, 1 + i),
        )


def row_at(service: Service, position: int) -> dict[str, Any]:
    with service.db.read() as conn:
        found = conn.execute(
            select(stored_events).where(stored_events.c.chain_position == position)
        )
        return dict(found.mappings().one())


def write(service: Service, statement: Any) -> None:
    with service.db.write() as conn:
        conn.execute(statement)


def redactor(service: Service) -> Redactor:
    return Redactor(service.db, service.recorder, service.ledger.mapper, service.clock)


def replacement(service: Service, position: int) -> Replacement:
    """The record at `position` with its actor replaced (still an event of its class)."""
    row = row_at(service, position)
    fields = json.loads(row["state"])
    fields["actor"] = REDACTED_ACTOR
    state = json.dumps(fields, separators=(",", ":")).encode()
    return Replacement(position, row["topic"], bytes(row["state"]), row["topic"], state)


@pytest.fixture
def redacted(service: Service, team: Team) -> tuple[list[int], int]:
    """A log of users, a head signed over it, records 3 and 5 redacted, more users after:
    the redacted positions and the redaction record's."""
    with freeze_time(T0):
        write_users(service, team, 4, "before")
        service.chain.sign_head()
        positions = [3, 5]
        redaction = redactor(service).redact(
            CTX, SEALED, [replacement(service, p) for p in positions]
        )
        write_users(service, team, 2, "after")
        service.chain.sign_head()
    with service.db.read() as conn:
        at = conn.execute(
            select(stored_events.c.chain_position).where(
                stored_events.c.originator_id == redaction.id
            )
        ).scalar_one()
    return positions, int(at)


def verify_problem(service: Service) -> Any:
    anchors = service.chain.anchors
    assert anchors is not None
    result = service.chain.verify(anchored=read_anchors(anchors.path))
    return result.problem


def test_a_redacted_log_verifies_with_its_heads_and_anchors(
    service: Service, redacted: tuple[list[int], int]
) -> None:
    positions, at = redacted
    result = service.chain.verify(anchored=read_anchors(service.chain.anchors.path))  # type: ignore[union-attr]
    assert result.ok, result.problem
    assert result.signed_heads_checked == 2 and result.anchored_heads_checked == 2
    assert result.redacted_records_checked == len(positions)
    for position in positions:
        row = row_at(service, position)
        assert json.loads(row["state"])["actor"] == REDACTED_ACTOR
    # The redaction record names each record by its original and new digests.
    record = row_at(service, at)
    assert record["topic"] == REDACTION_TOPIC and at > max(positions)
    named = json.loads(record["state"])["records"]
    assert [r["position"] for r in named] == positions
    # A span check over the redacted records (the redaction record after it), as a
    # deletion report runs it, passes; and so does `verify --since` a redacted record.
    assert service.chain.check_span(1, positions[-1]) is None
    assert service.chain.check_span(positions[0], positions[0]) is None
    assert service.chain.verify(since=positions[1]).ok
    # The links cite the original digests: they recompute from the stored hashes.
    user = row_at(service, positions[0])["originator_id"]
    for link in service.chain.links([user]):
        assert (
            link_hash(
                link.prev_hash,
                link.position,
                link.originator_id,
                link.version,
                link.topic,
                link.timestamp,
                link.state_digest,
            )
            == link.hash
        )
    # The users' streams still load, their records as redacted.
    assert service.ledger.find(user) is not None


def test_a_changed_redacted_payload_is_caught(
    service: Service, redacted: tuple[list[int], int]
) -> None:
    positions, _ = redacted
    state = bytes(row_at(service, positions[1])["state"]).replace(b"redacted-by", b"REDACTED-BY")
    write(
        service,
        update(stored_events)
        .where(stored_events.c.chain_position == positions[1])
        .values(state=state),
    )
    problem = verify_problem(service)
    assert problem is not None and (problem.kind, problem.position) == (CHANGED, positions[1])
    span = service.chain.check_span(positions[1], positions[1])
    assert span is not None and span.position == positions[1]


def test_a_redacted_record_given_back_its_original_is_caught(
    service: Service, redacted: tuple[list[int], int]
) -> None:
    # Even the original payload is not accepted: the record holds what its redaction says.
    positions, _ = redacted
    state = json.loads(row_at(service, positions[0])["state"])
    state["actor"] = CTX.actor
    write(
        service,
        update(stored_events)
        .where(stored_events.c.chain_position == positions[0])
        .values(state=json.dumps(state, separators=(",", ":")).encode()),
    )
    problem = verify_problem(service)
    assert problem is not None and (problem.kind, problem.position) == (CHANGED, positions[0])


def test_a_changed_redaction_record_is_caught(
    service: Service, redacted: tuple[list[int], int]
) -> None:
    positions, at = redacted
    record = json.loads(row_at(service, at)["state"])
    record["records"][0]["original_digest"] = hashlib.sha256(b"forged").hexdigest()
    write(
        service,
        update(stored_events)
        .where(stored_events.c.chain_position == at)
        .values(state=json.dumps(record, separators=(",", ":")).encode()),
    )
    problem = verify_problem(service)
    assert problem is not None and (problem.kind, problem.position) == (CHANGED, at)
    # A deletion report's span over the redacted record checks the record explaining it.
    span = service.chain.check_span(1, positions[0])
    assert span is not None and span.position == at


def test_a_deleted_redaction_record_is_caught(
    service: Service, redacted: tuple[list[int], int]
) -> None:
    _, at = redacted
    write(service, delete(stored_events).where(stored_events.c.chain_position == at))
    problem = verify_problem(service)
    assert problem is not None and (problem.kind, problem.position) == (REMOVED, at)


def test_a_deleted_last_redaction_record_is_caught(service: Service, team: Team) -> None:
    # The redaction record is the last record, after the last signed head: the index
    # names a record no longer there. With it signed, the head file says the log is short.
    with freeze_time(T0):
        write_users(service, team, 3, "last")
        redaction = redactor(service).redact(CTX, SEALED, [replacement(service, 2)])
    assert service.chain.verify().ok
    write(
        service,
        delete(stored_events).where(stored_events.c.originator_id == redaction.id),
    )
    problem = service.chain.verify().problem
    assert problem is not None and (problem.kind, problem.position) == (CHANGED, 2)
    assert service.chain.check_span(2, 2) is not None


def test_a_deleted_signed_redaction_record_is_caught_by_the_head_file(
    service: Service, team: Team
) -> None:
    with freeze_time(T0):
        write_users(service, team, 3, "signed")
        redaction = redactor(service).redact(CTX, SEALED, [replacement(service, 2)])
        service.chain.sign_head()
    write(service, delete(stored_events).where(stored_events.c.originator_id == redaction.id))
    write(service, delete(chain_redactions))
    problem = verify_problem(service)
    # The redacted record no longer recomputes, and the log is shorter than its head.
    assert problem is not None and (problem.kind, problem.position) == (CHANGED, 2)
    anchors = service.chain.anchors
    assert anchors is not None
    shorter = service.chain.anchor_problem(read_anchors(anchors.path))
    assert shorter is not None and shorter.kind == SHORTER


@pytest.mark.parametrize("column", ["original_digest", "redacted_digest", "redaction_position"])
def test_a_changed_index_entry_is_caught(
    service: Service, redacted: tuple[list[int], int], column: str
) -> None:
    positions, at = redacted
    value: Any = at + 1 if column == "redaction_position" else hashlib.sha256(b"x").digest()
    write(
        service,
        update(chain_redactions)
        .where(chain_redactions.c.position == positions[0])
        .values({column: value}),
    )
    problem = verify_problem(service)
    assert problem is not None and (problem.kind, problem.position) == (CHANGED, positions[0])


def test_a_deleted_index_entry_is_caught(service: Service, redacted: tuple[list[int], int]) -> None:
    positions, _ = redacted
    write(service, delete(chain_redactions).where(chain_redactions.c.position == positions[1]))
    problem = verify_problem(service)
    assert problem is not None and (problem.kind, problem.position) == (CHANGED, positions[1])


def test_an_index_entry_added_by_hand_is_caught(
    service: Service, redacted: tuple[list[int], int]
) -> None:
    # A record "explained" by an entry no redaction record names: forged state and entry.
    _, at = redacted
    row = row_at(service, 2)
    forged = bytes(row["state"]).replace(b"req-redaction", b"req-forgeries")
    write(
        service,
        update(stored_events).where(stored_events.c.chain_position == 2).values(state=forged),
    )
    with service.db.write() as conn:
        conn.execute(
            chain_redactions.insert().values(
                position=2,
                original_topic=row["topic"],
                original_digest=hashlib.sha256(bytes(row["state"])).digest(),
                redacted_topic=row["topic"],
                redacted_digest=hashlib.sha256(forged).digest(),
                redaction_position=at,
            )
        )
    problem = verify_problem(service)
    assert problem is not None and (problem.kind, problem.position) == (CHANGED, 2)


def test_a_record_changed_meanwhile_is_not_redacted(service: Service, team: Team) -> None:
    with freeze_time(T0):
        write_users(service, team, 2, "raced")
        stale = replacement(service, 2)
        done = redactor(service).redact(CTX, SEALED, [replacement(service, 2)])
        with pytest.raises(RedactionRaced):
            redactor(service).redact(CTX, SEALED, [stale])
    with service.db.read() as conn:
        redactions = conn.execute(
            select(stored_events.c.originator_id).where(stored_events.c.topic == REDACTION_TOPIC)
        ).all()
    assert [r[0] for r in redactions] == [done.id]
    assert service.chain.verify().ok
    assert uuid.UUID(str(done.id)) == done.id
