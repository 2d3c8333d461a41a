"""What the publisher asks of a broker, whatever its kind: connect to a destination at an
address checked first, publish a round of messages with the broker's acknowledgement of
each, and say why one failed.

A round's messages are in lanes, one per user: a lane is published in order, each message
acknowledged before the next, and stops at its first failure (the rest of the lane is not
published in that round, so that none overtakes it: a user's messages reach the broker in
the order of the log). Lanes go side by side (`LANES_AT_ONCE`), since a broker confirms
one publisher's messages one at a time (RabbitMQ syncs each to disk) but many at once.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from healthledger.domain.webhooks.management import Destinations, address, host_ip

# Lanes (users) published side by side in a round.
LANES_AT_ONCE = 8


@dataclass(frozen=True)
class Message:
    """One message: its routing key or subject, the stable id (the webhooks' keyed
    message id: JetStream's `Nats-Msg-Id`, AMQP's `message_id`), its type and body, and
    its lane (the user: messages of one lane are published in order)."""

    target: str
    message_id: str
    event_type: str
    body: bytes
    lane: str = ""


class PublishFailed(Exception):
    """Why a message (or the connection) failed: a short code, never a secret.
    `connection_lost`: the client must be made again."""

    def __init__(self, error: str, connection_lost: bool = False) -> None:
        super().__init__(error)
        self.error = error
        self.connection_lost = connection_lost


@dataclass(frozen=True)
class Outcome:
    """One message's publish: acknowledged (`failure` None) or not, and how long it took."""

    latency_ms: float
    failure: PublishFailed | None = None


# Per message of a round, in the round's order: its outcome, or None when it was not
# published (behind a failure of its lane, or past the deadline).
Published = list[Outcome | None]


class BrokerClient(Protocol):
    def publish(self, messages: Sequence[Message], deadline: float) -> Published:
        """Publish `messages`, each lane in order and each message acknowledged before
        the next of its lane, until a lane's first failure or `deadline`
        (time.monotonic)."""
        ...

    def close(self) -> None: ...


def lanes_of(messages: Sequence[Message]) -> list[list[int]]:
    """The round's message indexes per lane, each in the round's order."""
    lanes: dict[str, list[int]] = {}
    for index, message in enumerate(messages):
        lanes.setdefault(message.lane, []).append(index)
    return list(lanes.values())


def publish_lane(
    messages: Sequence[Message],
    lane: Sequence[int],
    deadline: float,
    publish_one: Callable[[Message], None],
    outcomes: Published,
) -> None:
    """One lane, in order, into `outcomes`, stopping at its first failure."""
    for index in lane:
        if time.monotonic() > deadline:
            return
        started = time.perf_counter()
        try:
            publish_one(messages[index])
        except PublishFailed as failed:
            outcomes[index] = Outcome(_ms(started), failed)
            return
        outcomes[index] = Outcome(_ms(started))


async def publish_lane_async(
    messages: Sequence[Message],
    lane: Sequence[int],
    deadline: float,
    publish_one: Callable[[Message], Awaitable[None]],
    outcomes: Published,
) -> None:
    """`publish_lane` for a client whose publish is a coroutine (nats-py)."""
    for index in lane:
        if time.monotonic() > deadline:
            return
        started = time.perf_counter()
        try:
            await publish_one(messages[index])
        except PublishFailed as failed:
            outcomes[index] = Outcome(_ms(started), failed)
            return
        outcomes[index] = Outcome(_ms(started))


def checked_address(
    host: str, port: int, allowed: Destinations, own: Iterable[tuple[str, int]]
) -> str:
    """The address to connect to for `host`: resolved now, each address checked as the
    webhook sender checks its own (a public one, or one the operator allows; never this
    service), the first that passes. Connecting to it ourselves means a second
    resolution cannot swap it. PublishFailed(`address_refused: ...`) if none passes."""
    own_set = set(own)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise PublishFailed("unresolvable", connection_lost=True) from exc
    why = "no address"
    for info in infos:
        ip_text = str(info[4][0])
        if address(ip_text, port) in own_set:
            why = "this service itself"
            continue
        ip = host_ip(ip_text)
        refused = None if allowed.allows_host(host) or ip is None else allowed.refusal(ip)
        if refused is None:
            return ip_text
        why = refused
    raise PublishFailed(f"address_refused: {why}", connection_lost=True)


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000
