"""What ends with a user: the port through which a user's deletion and erasure reach what
the other contexts keep about the user (its provider connections, its lab test orders,
the webhook deliveries about it) without the users context knowing their aggregates.

The connections, labs and webhooks contexts implement it (each in its `user_deletion`
module) and the composition root hands `UserLifecycle` the list of them. A participant
changes its aggregates and returns them; the lifecycle saves them after the user's own,
in the same save as the user's events, so a deletion or an erasure stays one transaction
(all of it is recorded, or none)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol
from uuid import UUID

from eventsourcing.domain import Aggregate
from healthledger.domain.context import CommandContext

# What a deletion ends, read first and at once (one statement: on PostgreSQL it goes with
# the unit of work's reading of the log's head, ADR 0025), before the user is loaded:
# per participant (by its `name`), the ids of its aggregates that the read models show
# the deletion has to end. A participant with nothing to end is left out.
DeletionTargets = Mapping[str, Sequence[UUID]]


@dataclass(frozen=True)
class ErasedWithUser:
    """A participant's share of one user's erasure: the aggregates it changed (to save
    with the Erased event), and the rows it found in the places of ERASURE_REMOVES it
    empties itself (to record in the event's `checked`, which the erasure's transaction
    holds the database to)."""

    changed: Sequence[Aggregate] = ()
    counted: Mapping[str, int] = field(default_factory=dict)


class UserDeletionCascade(Protocol):
    """A context's aggregates that end with a user. Each method changes what it finds at
    `now` for `ctx` and returns the aggregates it changed, unsaved: the lifecycle saves
    them, in this participant's order, after the user's own aggregates."""

    # Names this participant's share of the deletion's first read (`DeletionTargets`).
    name: str

    def end_with_deletion(
        self, ctx: CommandContext, now: datetime, targets: Sequence[UUID]
    ) -> Sequence[Aggregate]:
        """At the user's deletion: end those of `targets` (this participant's share of
        `DeletionTargets`) that are still live. An undo of the deletion restores none."""
        ...

    def end_left_behind(
        self, ctx: CommandContext, now: datetime, user_id: UUID
    ) -> Sequence[Aggregate]:
        """After the deletion or erasure of the user: end what a command that raced it left
        live (the erasure sweep asks, for the users it finds so)."""
        ...

    def end_with_erasure(
        self, ctx: CommandContext, now: datetime, user_ids: Sequence[UUID]
    ) -> Mapping[UUID, ErasedWithUser]:
        """At the erasure of these users (one batch, one save): per user, what ended with
        it; a user with nothing may be left out."""
        ...
