"""A user's provider connections end with the user: the connections context's part of the
user deletion cascade (`domain/users/deletion_cascade.py`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from uuid import UUID

from healthledger.domain.connections.connection import BY_USER_DELETION, Connection
from healthledger.domain.context import CommandContext
from healthledger.domain.ledger import Ledger
from healthledger.domain.users.deletion_cascade import ErasedWithUser


class UserConnections:
    """Deregisters a deleted user's live connections, at once, in the deletion's save;
    an undo restores none of them."""

    name = "connections"

    def __init__(self, ledger: Ledger, live_connection_ids: Callable[[UUID], list[UUID]]):
        self.ledger = ledger
        # The ids of a user's connections that the read model shows live.
        self.live_connection_ids = live_connection_ids

    def end_with_deletion(
        self, ctx: CommandContext, now: datetime, targets: Sequence[UUID]
    ) -> list[Connection]:
        return self._deregister(ctx, now, self._live(targets))

    def end_left_behind(
        self, ctx: CommandContext, now: datetime, user_id: UUID
    ) -> list[Connection]:
        # A connect that raced the deletion: it loaded the user live, and saved after.
        return self._deregister(ctx, now, self._live(self.live_connection_ids(user_id)))

    def end_with_erasure(
        self, ctx: CommandContext, now: datetime, user_ids: Sequence[UUID]
    ) -> Mapping[UUID, ErasedWithUser]:
        # Nothing to change: the deletion deregistered them, and the erasure's effects
        # delete their read model rows, resource feeds and health data (ERASURE_REMOVES).
        return {}

    def _live(self, ids: Sequence[UUID]) -> list[Connection]:
        # The read model may be behind what this unit of work loads: the aggregate decides.
        found = (self.ledger.find(cid) for cid in ids)
        return [c for c in found if isinstance(c, Connection) and c.is_live]

    @staticmethod
    def _deregister(
        ctx: CommandContext, now: datetime, connections: list[Connection]
    ) -> list[Connection]:
        for connection in connections:
            connection.deregister(ctx, now, BY_USER_DELETION)
        return connections
