"""The webhook job: record the deliveries of newly committed events (the outbox), then
send what is due. Both select their work from our own tables."""

from __future__ import annotations

from typing import Protocol

# Per wake-up, at most this many rounds of each step (the next wake-up goes on).
MAX_ROUNDS = 100


class WebhookOutbox(Protocol):
    """The webhook dispatcher, as this job drives it."""

    def follow(self) -> int:
        """Record the deliveries of the log's next stretch; 0 at the log's end."""
        ...

    def send_due(self) -> int:
        """Attempt a batch of the deliveries that are due; 0 when none is due."""
        ...


class BrokerPublisher(Protocol):
    """The event destinations' publisher (issue 35), as this job drives it."""

    def publish_due(self) -> int:
        """Publish a round of the messages due to brokers; 0 when none is due."""
        ...


def dispatch_webhooks(outbox: WebhookOutbox, publisher: BrokerPublisher | None = None) -> int:
    """Rounds of: follow a stretch of the log, publish what is due to the event
    destinations, send the due webhook deliveries; until a round finds nothing to do. How
    many were published and sent. Interleaved, not the whole log first: on a busy service
    the log grows while it is followed, and a commit's message must not wait for a quiet
    log to be published (issue 35's commit-to-publish latency). Brokers before webhooks:
    their publishes take milliseconds, a webhook's POST up to its timeout."""
    sent = 0
    for _ in range(MAX_ROUNDS):
        followed = outbox.follow()
        published = publisher.publish_due() if publisher is not None else 0
        attempted = outbox.send_due()
        sent += published + attempted
        if followed == 0 and published == 0 and attempted == 0:
            break
    return sent
