"""One way for a commit to wake a worker: with the scheduler running, a connect made
through the use case (no HTTP: an embedding application, a command) is pulled, and its
announcements delivered, at once, not at the workers' next interval. On both databases."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from healthledger.adapters.composition import Service, build_service, start_scheduler
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.resource_feeds import SUCCESS, ResourceFeed
from healthledger.domain.context import CommandContext
from healthledger.scheduler.runner import LedgerScheduler

from tests.receivers import Receiver, http_receiver
from tests.stream_ids import stream_of_feed

# Far longer than the test: a job that runs within it was woken, not run by its interval.
NEVER = timedelta(hours=1)
CTX = CommandContext(actor="test:embedder", request_id="req-embedded")


def wait_for(condition: Callable[[], object], what: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.02)


@pytest.fixture
def slow_service(settings: Settings) -> Iterator[Service]:
    built = build_service(
        settings.model_copy(
            update={
                "pull_poll_interval": NEVER,
                "webhook_poll_interval": NEVER,
                "daily_sync_sweep_interval": NEVER,
            }
        )
    )
    yield built
    built.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with http_receiver() as running:
        yield running


def started(service: Service) -> LedgerScheduler:
    """The service's scheduler, once the first runs of its workers at start are over (so
    that a later run can only be a wake-up's)."""
    scheduler = start_scheduler(service)
    workers = (scheduler.pull_worker, scheduler.webhook_dispatcher)
    wait_for(lambda: all(w.runs_ended >= 1 for w in workers), "the runs at start")
    return scheduler


def test_a_connect_made_without_http_is_pulled_and_announced_at_once(
    slow_service: Service, receiver: Receiver
) -> None:
    service = slow_service
    team_id = service.bootstrap().team_id  # type: ignore[union-attr]  # an empty database
    service.webhooks.create(
        CTX, team_id, "sandbox", url=receiver.url("ok"), filter_types=["provider.connection.*"]
    )
    scheduler = started(service)
    try:
        pulls_at_start = scheduler.pull_worker.runs_ended
        user = service.users.create_user(CTX, team_id, client_user_id="embedded")
        service.connections.connect_demo(CTX, team_id, user.id, "freestyle_libre", ["glucose"])
        feed_id = stream_of_feed(service, user.id, "freestyle_libre", "glucose")

        def pulled() -> bool:
            feed = service.ledger.find(feed_id)
            return isinstance(feed, ResourceFeed) and feed.status == SUCCESS

        wait_for(pulled, "the pull of the connect")
        # The success is saved within the run: the run ends a moment later.
        wait_for(lambda: scheduler.pull_worker.runs_ended > pulls_at_start, "the woken run")
        wait_for(lambda: receiver.on("ok"), "the delivery of provider.connection.created")
        (delivered,) = receiver.on("ok")
        assert json.loads(delivered.body)["event_type"] == "provider.connection.created"
    finally:
        scheduler.shutdown(wait=True)
    # Shut down, the scheduler no longer listens to the service's commits.
    assert scheduler.committed not in service.recorder.listeners


def test_commits_that_give_a_worker_no_work_do_not_wake_it(slow_service: Service) -> None:
    service = slow_service
    team_id = service.bootstrap().team_id  # type: ignore[union-attr]  # an empty database
    scheduler = started(service)
    try:
        pulls_at_start = scheduler.pull_worker.runs_ended
        dispatches_at_start = scheduler.webhook_dispatcher.runs_ended
        # A create announces nothing: neither worker has work (the dispatcher's interval
        # moves its position past it).
        user = service.users.create_user(CTX, team_id, client_user_id="no-pulls")
        time.sleep(0.2)  # time enough for a run woken by mistake to end
        assert scheduler.webhook_dispatcher.runs_ended == dispatches_at_start
        # A deletion is announced (user.deleted): it wakes the dispatcher, not the pulls.
        service.users.delete_user(CTX, team_id, user.id)
        wait_for(
            lambda: scheduler.webhook_dispatcher.runs_ended > dispatches_at_start,
            "the dispatcher woken by the deletion",
        )
        time.sleep(0.2)
        assert scheduler.pull_worker.runs_ended == pulls_at_start
    finally:
        scheduler.shutdown(wait=True)
