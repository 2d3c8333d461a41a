"""Events as the tests read them back: the ledger's event store and eventsourcing's mapper
give them as `DomainEventProtocol`, which names none of their fields. Every aggregate of
the ledger is `Audited` (its events carry the actor and the request id), and every event
the mapper loads can replay its aggregate: these say so once, checked, so that a test can
read those fields, and narrows further (`isinstance`) where it reads an event's own."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from uuid import UUID

from eventsourcing.domain import CanMutateAggregate, DomainEventProtocol
from eventsourcing.persistence import Mapper, StoredEvent
from healthledger.domain.audited import Audited
from healthledger.domain.ledger import Ledger


def audited(events: Iterable[DomainEventProtocol[UUID]]) -> list[Audited.Event]:
    """`events`, each checked to be an audited event."""
    found: list[Audited.Event] = []
    for event in events:
        assert isinstance(event, Audited.Event), event
        found.append(event)
    return found


def logged_events(ledger: Ledger, aggregate_id: UUID) -> list[Audited.Event]:
    """The aggregate's events in the ledger's log, in order."""
    return audited(ledger.events.get(aggregate_id))


def loaded(mapper: Mapper[UUID], record: StoredEvent) -> CanMutateAggregate[Any]:
    """The domain event of a stored record, as the ledger loads it to replay an aggregate."""
    event = mapper.to_domain_event(record)
    assert isinstance(event, CanMutateAggregate), event
    return event
