"""The webhook job: record the deliveries of newly committed events (the outbox), then
send what is due. Both select their work from our own tables."""

from __future__ import annotations

from healthledger.adapters.composition import Service

# Per wake-up, at most this many rounds of each step (the next wake-up goes on).
MAX_ROUNDS = 100


def dispatch_webhooks(service: Service) -> int:
    """Follow the log to its end, then send every due delivery; how many were sent."""
    dispatcher = service.dispatcher
    for _ in range(MAX_ROUNDS):
        if dispatcher.follow() == 0:
            break
    sent = 0
    for _ in range(MAX_ROUNDS):
        attempted = dispatcher.send_due()
        sent += attempted
        if attempted == 0:
            break
    return sent
