"""RabbitMQ (AMQP 0-9-1) destinations through pika: a blocking connection with publisher
confirms; each message is persistent (delivery mode 2), published `mandatory` to the
destination's exchange under the route's routing key, with the stable message id as the
AMQP `message_id` and the event type as `type`. A message the broker nacks, or returns
because no queue is bound to its routing key, is a failure (retried), never dropped."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import pika
import pika.exceptions
from healthledger.adapters.brokers.clients import (
    LANES_AT_ONCE,
    Message,
    Published,
    PublishFailed,
    lanes_of,
    publish_lane,
)
from healthledger.adapters.outbound import tls_context
from healthledger.domain.webhooks.event_destination_management import BrokerTarget

_PERSISTENT = 2
# pika logs every refused connection at ERROR with its traceback; the publisher records
# the failure on the message (and disables a destination failing too long) instead.
logging.getLogger("pika").setLevel(logging.CRITICAL)


class RabbitMQClient:
    """`LANES_AT_ONCE` connections, each with a confirming channel, one per lane worker
    (pika's blocking connection is one thread's): a lane is published on one channel,
    in order."""

    def __init__(self, target: BrokerTarget, connect_to: str, timeout: float) -> None:
        connection = target.connection
        username = connection.get("username")
        self.params = pika.ConnectionParameters(
            host=connect_to,
            port=target.port,
            virtual_host=connection.get("virtual_host", "/"),
            credentials=(
                pika.PlainCredentials(username, target.secret or "")
                if username is not None
                else pika.ConnectionParameters.DEFAULT_CREDENTIALS
            ),
            connection_attempts=1,
            socket_timeout=timeout,
            stack_timeout=timeout,
            blocked_connection_timeout=timeout,
            ssl_options=(
                pika.SSLOptions(_tls(), server_hostname=connection["host"])
                if connection.get("tls")
                else None
            ),
        )
        self.exchange: str = connection["exchange"]
        # The first connection is made now, so that a refused one fails the round before
        # anything is recorded as started; the others when a round needs them.
        self.channels: list[Any] = [self._open()]
        self.pool = ThreadPoolExecutor(LANES_AT_ONCE, thread_name_prefix="rabbitmq-lane")

    def _open(self) -> Any:
        try:
            connection = pika.BlockingConnection(self.params)
            channel = connection.channel()
            channel.confirm_delivery()
            return channel
        except pika.exceptions.ProbableAuthenticationError as exc:
            raise PublishFailed("authentication_failed", connection_lost=True) from exc
        except pika.exceptions.ProbableAccessDeniedError as exc:
            raise PublishFailed("access_denied", connection_lost=True) from exc
        except (pika.exceptions.AMQPError, OSError) as exc:
            raise PublishFailed("connection_error", connection_lost=True) from exc

    def publish(self, messages: Sequence[Message], deadline: float) -> Published:
        outcomes: Published = [None] * len(messages)
        lanes = lanes_of(messages)
        workers = min(LANES_AT_ONCE, len(lanes))
        try:
            while len(self.channels) < workers:
                self.channels.append(self._open())
        except PublishFailed:
            workers = len(self.channels)  # fewer lanes at once, as many as connected

        def work(worker: int) -> None:
            channel = self.channels[worker]
            for indexes in lanes[worker::workers]:
                publish_lane(
                    messages, indexes, deadline, partial(self._publish_one, channel), outcomes
                )

        list(self.pool.map(work, range(workers)))
        return outcomes

    def _publish_one(self, channel: Any, message: Message) -> None:
        properties = pika.BasicProperties(
            content_type="application/json",
            delivery_mode=_PERSISTENT,
            message_id=message.message_id,
            type=message.event_type,
        )
        try:
            channel.basic_publish(
                self.exchange, message.target, message.body, properties, mandatory=True
            )
        except pika.exceptions.UnroutableError as exc:
            raise PublishFailed("unroutable") from exc
        except pika.exceptions.NackError as exc:
            raise PublishFailed("nack") from exc
        except pika.exceptions.ChannelClosedByBroker as exc:
            # 404: the exchange does not exist; 403: not allowed to publish to it.
            raise PublishFailed(f"channel_closed_{exc.reply_code}", connection_lost=True) from exc
        except (pika.exceptions.AMQPError, OSError) as exc:
            raise PublishFailed("connection_error", connection_lost=True) from exc

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        for channel in self.channels:
            try:
                if channel.connection.is_open:
                    channel.connection.close()
            except (pika.exceptions.AMQPError, OSError):
                pass  # a connection already lost has nothing to close


def _tls() -> ssl.SSLContext:
    return tls_context(trust_env=False)
