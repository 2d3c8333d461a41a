"""NATS JetStream destinations through nats-py: each message is published to the route's
subject and acknowledged by the stream that holds it (`PubAck`), with the stable message
id in `Nats-Msg-Id`, so that JetStream itself drops a copy published again within the
stream's duplicate window (a publisher that died between the publish and its record).
With a `stream` set, the publish names it as expected (a subject bound to another stream
is refused). nats-py is asyncio: the client runs its own loop on one thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import nats
import nats.errors
import nats.js.errors
from healthledger.adapters.brokers.clients import (
    Message,
    Published,
    PublishFailed,
    lanes_of,
    publish_lane_async,
)
from healthledger.domain.webhooks.event_destination_management import BrokerTarget

T = TypeVar("T")
# Lanes (users) awaiting their acknowledgements at once on the one connection: a
# coroutine each, not a thread or a connection (as RabbitMQ's lanes are), so many more.
NATS_LANES_AT_ONCE = 64
# A header that names the event type, so that a consumer can branch without the body.
EVENT_TYPE_HEADER = "Healthledger-Event-Type"


class NatsClient:
    def __init__(self, target: BrokerTarget, connect_to: str, timeout: float) -> None:
        self.timeout = timeout
        self.stream: str | None = target.connection.get("stream")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="nats-destination", daemon=True
        )
        self._thread.start()
        username = target.connection.get("username")
        host = f"[{connect_to}]" if ":" in connect_to else connect_to
        options: dict[str, Any] = {
            "servers": [f"nats://{host}:{target.port}"],
            "connect_timeout": max(1, int(timeout)),
            # One try of the one server: a refused connection fails at once (nats-py's
            # 0 attempts waits for ever), and the publisher's retries do the rest.
            "allow_reconnect": False,
            "max_reconnect_attempts": 1,
            "reconnect_time_wait": 0,
            "error_cb": _ignore,
            "name": "healthledger-event-destination",
        }
        if username is not None:
            options.update(user=username, password=target.secret or "")
        elif target.secret is not None:
            options["token"] = target.secret
        try:
            self.nc = self._run(nats.connect(**options))
        except Exception as exc:
            self._stop()
            raise PublishFailed(_connect_error(exc), connection_lost=True) from exc
        self.js = self.nc.jetstream(timeout=timeout)

    def publish(self, messages: Sequence[Message], deadline: float) -> Published:
        # The whole round on the client's loop (one loop for the client's life): its lanes
        # side by side, each one publish awaited after another, so that a user's
        # messages are stored in order whatever fails (a hop between threads per message
        # would cost more than the publish itself).
        outcomes: Published = [None] * len(messages)
        lanes = lanes_of(messages)

        async def round_() -> None:
            limit = asyncio.Semaphore(NATS_LANES_AT_ONCE)

            async def lane(indexes: list[int]) -> None:
                async with limit:
                    await publish_lane_async(
                        messages, indexes, deadline, self._publish_one, outcomes
                    )

            await asyncio.gather(*(lane(indexes) for indexes in lanes))

        self._run(round_(), len(messages))
        return outcomes

    async def _publish_one(self, message: Message) -> None:
        headers = {"Nats-Msg-Id": message.message_id, EVENT_TYPE_HEADER: message.event_type}
        try:
            await self.js.publish(message.target, message.body, stream=self.stream, headers=headers)
        except (nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError) as exc:
            # No stream holds the subject (or not the expected one): nothing was stored.
            raise PublishFailed("no_stream") from exc
        except nats.js.errors.APIError as exc:
            raise PublishFailed(f"jetstream_{exc.err_code or exc.code}") from exc
        except (TimeoutError, nats.errors.TimeoutError) as exc:
            raise PublishFailed("timeout", connection_lost=True) from exc
        except (nats.errors.Error, OSError) as exc:
            raise PublishFailed("connection_error", connection_lost=True) from exc

    def _run(self, coroutine: Coroutine[Any, Any, T], messages: int = 1) -> T:
        # Each publish is bounded by the JetStream timeout; this bounds the round.
        wait = self.timeout * (messages + 1)
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(wait)

    def close(self) -> None:
        try:
            if not self.nc.is_closed:
                self._run(self.nc.close())
        except Exception:  # a lost connection has nothing to close
            pass
        self._stop()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()


async def _ignore(_error: Exception) -> None:
    """nats-py reports connection errors here too; the publish that meets one says it."""


def _connect_error(exc: Exception) -> str:
    text = type(exc).__name__.lower()
    if "authoriz" in text or "auth" in str(exc).lower():
        return "authentication_failed"
    return "connection_error"
