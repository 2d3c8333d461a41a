"""A round's records on its deliveries in one batch: the batch's deliveries are read at
once, and when another writer changed one of them meanwhile the batch's save loses to
the conflict and each is recorded one by one on a fresh copy, nothing lost; the facts a
round seals and opens use its users' keys read once (`StoredKeys.preloaded`), and a user
without a key (erased) still gets none. On both databases."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any
from uuid import UUID

import pytest
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.engine.schema import webhook_deliveries
from healthledger.adapters.persistence.eventstore.sealed_facts import StoredKeys
from healthledger.adapters.webhooks.dispatcher import PostResult, attempt_recorder
from healthledger.domain.context import CommandContext
from healthledger.domain.webhooks.deliveries import SUCCEEDED, WebhookDelivery
from sqlalchemy import select

from tests.conftest import Team
from tests.receivers import Receiver, http_receiver

CTX = CommandContext(actor="test:actor", request_id="req-record-batches")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with http_receiver() as running:
        yield running


def queued(service: Service, team: Team, receiver: Receiver, users: int) -> list[UUID]:
    """An endpoint and `users` users deleted and restored (two deliveries each), recorded
    by the outbox and not sent; the users' ids."""
    service.webhooks.create(CTX, team.team_id, "sandbox", url=receiver.url("ok"))
    people = []
    for number in range(users):
        user = service.users.create_user(CTX, team.team_id, client_user_id=f"batch-{number}")
        service.users.delete_user(CTX, team.team_id, user.id)
        service.users.undo_deletion(CTX, team.team_id, user.id)
        people.append(user.id)
    while service.dispatcher.follow():
        pass
    return people


def rows(service: Service) -> Sequence[Any]:
    with service.db.read() as conn:
        return conn.execute(
            select(webhook_deliveries).order_by(
                webhook_deliveries.c.log_position, webhook_deliveries.c.message_id
            )
        ).all()


def test_a_batch_that_meets_another_writer_is_recorded_one_by_one_on_fresh_copies(
    service: Service, team: Team, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    queued(service, team, receiver, users=3)
    found = rows(service)
    assert len(found) == 6
    attempts = service.dispatcher.start(CTX, found)
    assert set(attempts) == {row.delivery_id for row in found}
    # Another writer records on one of them between the batch's read and its save (a
    # late outcome of a sender whose lease ran out): the batch's copy of it is stale.
    late = found[0]
    now = service.clock()
    real_find_many = service.ledger.find_many

    def read_then_overtaken(ids: Sequence[UUID]) -> Any:
        copies = real_find_many(ids)
        monkeypatch.setattr(service.ledger, "find_many", real_find_many)
        assert service.dispatcher.record(
            [(late, attempt_recorder(CTX, now, PostResult(500, 1.0, "http_500")))]
        ) == {late.delivery_id}
        return copies

    monkeypatch.setattr(service.ledger, "find_many", read_then_overtaken)
    succeeded = PostResult(None, 1.0, None)
    recorded = service.dispatcher.record(
        [(row, attempt_recorder(CTX, now, succeeded, attempts[row.delivery_id])) for row in found]
    )
    # None lost: the stale copy's batch went one by one, the late outcome kept.
    assert recorded == {row.delivery_id for row in found}
    for row in found:
        events = list(service.ledger.events.get(row.delivery_id))
        made = [e for e in events if isinstance(e, WebhookDelivery.AttemptMade)]
        assert [e.outcome for e in made] == (
            ["failure", "success"] if row.delivery_id == late.delivery_id else ["success"]
        )
        delivery = service.ledger.find(row.delivery_id)
        assert isinstance(delivery, WebhookDelivery) and delivery.status == SUCCEEDED
        assert delivery.open_attempts == ()
    # The read model is what the log rebuilds.
    before = rows(service)
    assert {row.status for row in before} == {SUCCEEDED}
    service.read_models.rebuild(service.recorder, service.ledger.mapper)
    assert rows(service) == before


def test_a_rounds_facts_are_sealed_and_opened_with_keys_read_once(
    service: Service, team: Team, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    people = queued(service, team, receiver, users=3)
    facts = getattr(service.ledger.mapper, "facts", None)
    assert isinstance(facts, StoredKeys)
    kept, erased = people[0], people[1]
    sealed = facts.seal_fact(kept, {"event_type": "user.deleted"})
    assert sealed is not None
    with service.db.write() as conn:
        service.key_store.destroy(conn, erased)
    reads: list[UUID] = []
    real_cipher = service.key_store.cipher

    def counted(user_id: UUID) -> Any:
        reads.append(user_id)
        return real_cipher(user_id)

    monkeypatch.setattr(service.key_store, "cipher", counted)
    with facts.preloaded(people):
        assert facts.open_fact(kept, sealed) == {"event_type": "user.deleted"}
        again = facts.seal_fact(kept, {"event_type": "user.deletion_undone"})
        # A user without a key has none within the batch either: nothing sealed, nothing
        # opened.
        assert facts.seal_fact(erased, {"event_type": "user.deleted"}) is None
        assert facts.open_fact(erased, sealed) is None
        # The deliveries read in the batch open with the keys read for it.
        loaded = service.ledger.find_many([row.delivery_id for row in rows(service)])
    assert reads == [], "no key read per fact within the batch"
    assert again is not None and facts.open_fact(kept, again) == {
        "event_type": "user.deletion_undone"
    }
    assert reads == [kept], "outside it, read as before"
    types = {
        delivery.user_id: delivery.event_type
        for delivery in loaded.values()
        if isinstance(delivery, WebhookDelivery)
    }
    assert types[kept] in {"user.deleted", "user.deletion_undone"}
    # The erased user's lifecycle types are kept in clear (the deletion report reads them).
    assert types[erased] in {"user.deleted", "user.deletion_undone"}
