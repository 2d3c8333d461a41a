"""Erasure effects: what a user's erasure or a team's deletion destroys, in the
transaction that records it. Unlike the read models, they never run again on a rebuild:
a destroyed key stays destroyed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eventsourcing.domain import DomainEventProtocol
from healthledger.adapters.eventstore.recorder import delete_snapshots
from healthledger.adapters.persistence.health_data_store import SqlHealthDataStore
from healthledger.adapters.persistence.key_store import KeyStore
from healthledger.domain.teams.teams import Team
from healthledger.domain.users.user import User

# The events with erasure effects (neither class has subclasses).
ERASING = frozenset({User.Erased, Team.Deleted})


def erasure_effects(conn: Any, events: Sequence[DomainEventProtocol[Any]]) -> None:
    """Destroy the data key and the snapshots of each user erased in this transaction, and
    the data key of each team deleted in it (which sealed its custom credential secrets and
    its webhook signing secrets)."""
    for event in events:
        if type(event) not in ERASING:
            continue  # nearly every event: one set lookup instead of two isinstance calls
        if isinstance(event, User.Erased):
            KeyStore.destroy(conn, event.originator_id)
            delete_snapshots(conn, event.originator_id)
            # After the projection deleted the user's row (see SqlHealthDataStore), so a
            # chunk stored concurrently is either deleted here or refused there.
            SqlHealthDataStore.erase(conn, event.originator_id)
        elif isinstance(event, Team.Deleted):
            KeyStore.destroy(conn, event.originator_id)
