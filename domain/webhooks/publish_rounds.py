"""A round of an event destination's publisher (issue 35, ADR 0055): a stretch of the log
after the destination's cursor, its messages published to the broker, and where the
cursor goes next.

A broker's messages are a function of the log (which events announce what, each
message's keyed id, its body, its route): no record per message is kept. A round records
itself as started, with how many messages of each user it is to publish (committed
before its first publish: a crash leaves it open, "outcome unknown, possibly published",
as an attempt started is for a webhook, issue 30), then finished: how many it published
and skipped (their user erased: nothing to build a body from, the drop that the webhooks
record per delivery), per user the messages the broker acknowledged (what the deletion
report's recipients and the user's audit read, the round's time being theirs), and
where the cursor moves. A failed round keeps the cursor before the first message not
acknowledged, and names the messages acknowledged after it, which the next round does
not publish again: a user's messages never overtake each other, and a message
acknowledged is published once.

A round names users by id only, never a type, a route or a body: it stays after an
erasure and says nothing of health. Its id is derived from the destination and the
round's number, so that two publishers that both started round n record it once.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate
from healthledger.domain.audited import Audited
from healthledger.domain.context import CommandContext

_NAMESPACE = uuid.UUID("0c4b1f3e-5a7d-5e29-8b61-3d2f9a7c4e55")


def round_id_of(destination_id: UUID, number: int) -> UUID:
    return uuid.uuid5(_NAMESPACE, f"{destination_id}:{number}")


def tracking_name_of(destination_id: UUID) -> str:
    """The name of the destination's position in the log (the event store's tracking)."""
    return f"destination:{destination_id.hex}"


class PublishRound(Audited, created_event_name="Started"):
    TOPIC = "healthledger:PublishRound"
    USER_STREAM = None

    class Event(Audited.Event):
        pass

    class Started(Event, Aggregate.Created):
        """Publishing the messages of the log's stretch (`after`, `upto`] begins: `users`,
        user id -> how many of the user's messages it is to publish (until `Finished`,
        each possibly published)."""

        TOPIC = "healthledger:PublishRound.Started.v1"
        destination_id: UUID
        team_id: UUID
        number: int
        after: int
        upto: int
        users: dict[str, int]

    # eventsourcing gives an aggregate a subclass of each event class of its bases that
    # it does not define by that name (`Aggregate.Created`), with no pinned topic: a
    # round's creation is called Started, so Created names it too.
    Created = Started

    class Finished(Event):
        """What the round published. `cursor`: the log position the next round starts
        after (`upto` when every message was acknowledged). `acknowledged_past`: the
        ids of the messages past `cursor` that the broker acknowledged (the next round
        skips them). `error` and `next_attempt_at`: why it stopped and when to try
        again (None: it did not fail). `users`: user id -> how many of the user's
        messages the broker acknowledged."""

        TOPIC = "healthledger:PublishRound.Finished.v1"
        destination_id: UUID
        published: int
        skipped_erased: int
        users: dict[str, int]
        cursor: int
        acknowledged_past: list[str]
        error: str | None
        attempt: int
        next_attempt_at: datetime | None

        def apply(self, round_: PublishRound) -> None:
            round_.finished = True

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        destination_id: UUID,
        team_id: UUID,
        number: int,
        after: int,
        upto: int,
        users: dict[str, int],
    ) -> None:
        self.destination_id = destination_id
        self.team_id = team_id
        self.number = number
        self.after = after
        self.upto = upto
        self.finished = False

    @classmethod
    def start(
        cls,
        ctx: CommandContext,
        now: datetime,
        destination_id: UUID,
        team_id: UUID,
        number: int,
        after: int,
        upto: int,
        users: dict[str, int],
    ) -> PublishRound:
        return cls.new(
            ctx,
            now,
            id=round_id_of(destination_id, number),
            destination_id=destination_id,
            team_id=team_id,
            number=number,
            after=after,
            upto=upto,
            users=users,
        )

    def finish(self, ctx: CommandContext, now: datetime, **outcome: Any) -> None:
        self.record(ctx, now, self.Finished, destination_id=self.destination_id, **outcome)
