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


def dispatch_webhooks(outbox: WebhookOutbox) -> int:
    """Follow the log to its end, then send every due delivery; how many were sent."""
    for _ in range(MAX_ROUNDS):
        if outbox.follow() == 0:
            break
    sent = 0
    for _ in range(MAX_ROUNDS):
        attempted = outbox.send_due()
        sent += attempted
        if attempted == 0:
            break
    return sent
