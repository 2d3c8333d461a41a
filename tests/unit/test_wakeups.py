"""WakeableJob: a wake-up during a run is never lost, runs never overlap, and after close
nothing more starts. LedgerScheduler: a commit wakes the workers its events give work to."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.context import CommandContext
from healthledger.scheduler.pulls import makes_a_pull_due
from healthledger.scheduler.runner import Intervals, Jobs, LedgerScheduler
from healthledger.scheduler.wakeups import WakeableJob


def test_a_wake_up_during_a_run_makes_it_go_round_once_more_and_runs_never_overlap() -> None:
    started, release = threading.Event(), threading.Event()
    running = 0
    overlaps = []
    rounds = []

    def work() -> int:
        nonlocal running
        running += 1
        overlaps.append(running)
        rounds.append(1)
        if len(rounds) == 1:
            started.set()
            release.wait(5)
        running -= 1
        return 1

    job = WakeableJob("test", work)
    job.wake()
    assert started.wait(5)
    job.wake()  # while the first round runs: folded into one more round
    job.wake()
    assert job.run() == 0  # the interval's run finds one going on
    release.set()
    deadline = time.monotonic() + 5
    while len(rounds) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    job.close()
    assert len(rounds) == 2
    assert max(overlaps) == 1


def test_after_close_no_wake_up_starts_a_run() -> None:
    rounds: list[int] = []

    def work() -> int:
        rounds.append(1)
        return 1

    job = WakeableJob("test", work)
    job.close()
    job.wake()
    time.sleep(0.05)
    assert rounds == []


def test_a_close_during_a_wake_up_waits_for_its_thread_to_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A close while a wake-up is starting its thread joins it once started (a join of a
    thread not yet started raises: the scheduler's shutdown once failed so)."""
    job = WakeableJob("test", lambda: 0)
    closing: list[threading.Thread] = []
    failures: list[BaseException] = []
    start = threading.Thread.start

    def close() -> None:
        try:
            job.close()
        except BaseException as exc:  # what the closing thread met, for the assertion
            failures.append(exc)

    def start_late(thread: threading.Thread) -> None:
        # The woken thread's start, held back while a close runs in between.
        if thread.name == "test" and not closing:
            closing.append(threading.Thread(target=close, name="closer"))
            start(closing[0])
            closing[0].join(0.3)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", start_late)
    job.wake()
    closing[0].join(5)
    assert not closing[0].is_alive() and failures == []


# -- which commits wake which worker (LedgerScheduler.committed) ---------------------------

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
CTX = CommandContext(actor="test:actor", request_id="req-wakeups")


def pulled_feed_events(retry_delay: float) -> list[object]:
    """A feed's events from its creation to a failed attempt retried `retry_delay` later."""
    feed = ResourceFeed.open(
        CTX,
        T0,
        id=uuid4(),
        connection_id=uuid4(),
        user_id=uuid4(),
        team_id=uuid4(),
        provider="oura",
        resource="sleep",
    )
    feed.schedule_pull(
        CTX, T0, range_start=T0 - timedelta(days=30), range_end=T0, connection_created_at=T0
    )
    feed.start_attempt(CTX, T0)
    feed.attempt_failed(
        CTX,
        T0,
        code="provider_unavailable",
        reason="503",
        retriable=True,
        retry_delays=[retry_delay],
    )
    return list(feed.collect_events())


def test_only_a_scheduled_pull_or_a_retry_due_now_makes_a_pull_due() -> None:
    created, scheduled, started, retry_later = pulled_feed_events(retry_delay=60)
    assert isinstance(scheduled, ResourceFeed.PullScheduled)
    assert isinstance(retry_later, ResourceFeed.PullRetrying)
    assert [makes_a_pull_due(e) for e in (created, scheduled, started, retry_later)] == [
        False,
        True,
        False,
        False,
    ]
    *_, retry_now = pulled_feed_events(retry_delay=0)
    assert isinstance(retry_now, ResourceFeed.PullRetrying) and makes_a_pull_due(retry_now)


class Counting:
    """A job that counts its runs and says when one ended."""

    def __init__(self) -> None:
        self.runs = 0
        self.ran = threading.Event()

    def __call__(self) -> int:
        self.runs += 1
        self.ran.set()
        return 0


def test_a_commit_wakes_the_dispatcher_and_only_a_pull_due_wakes_the_pull_worker() -> None:
    pulls, webhooks = Counting(), Counting()
    jobs = Jobs(
        sweep_erasures=lambda: 0,
        run_due_pulls=pulls,
        sync_connected_feeds=lambda: 0,
        dispatch_webhooks=webhooks,
        apply_cut_overs=list,
    )
    hour = timedelta(hours=1)
    # Not started: APScheduler runs nothing, so every run below is a wake-up's.
    scheduler = LedgerScheduler(jobs, Intervals(hour, hour, hour, hour, hour))
    try:
        created, scheduled, *_ = pulled_feed_events(retry_delay=60)
        scheduler.committed([created])
        assert webhooks.ran.wait(5)
        webhooks.ran.clear()
        scheduler.committed([created, scheduled])
        assert pulls.ran.wait(5) and webhooks.ran.wait(5)
    finally:
        for job in (scheduler.pull_worker, scheduler.webhook_dispatcher):
            job.close()
    assert (pulls.runs, webhooks.runs) == (1, 2)
    assert scheduler.pull_worker.runs_ended == 1


class Outage(Exception):
    """Stands for the database unavailable (the composition root's `unavailable` says
    which errors are: adapters/persistence/engine/outages.py)."""


def test_an_outage_is_logged_when_it_starts_and_when_it_ends_not_at_every_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    down = True

    def pulls() -> int:
        if down:
            raise Outage()
        return 3

    def sweep() -> int:
        raise ValueError("a bug, not an outage")

    jobs = Jobs(
        sweep_erasures=sweep,
        run_due_pulls=pulls,
        sync_connected_feeds=lambda: 0,
        dispatch_webhooks=lambda: 0,
        apply_cut_overs=list,
        unavailable=lambda exc: (
            "OperationalError (SQLITE_BUSY)" if isinstance(exc, Outage) else None
        ),
    )
    hour = timedelta(hours=1)
    scheduler = LedgerScheduler(jobs, Intervals(hour, hour, hour, hour, hour))
    try:
        with caplog.at_level("WARNING", logger="healthledger.scheduler"):
            assert [scheduler.pull_worker.run() for _ in range(3)] == [0, 0, 0]
            down = False
            assert [scheduler.pull_worker.run() for _ in range(2)] == [3, 3]
        assert caplog.messages == [
            "pull-worker: database unavailable: OperationalError (SQLITE_BUSY); "
            "each run tries again",
            "pull-worker: the database answers again",
        ]
        # Any other failure is raised to APScheduler, which logs it whole, as before.
        sweeping = scheduler.get_job("erasure-sweep")
        assert sweeping is not None
        with pytest.raises(ValueError, match="a bug"):
            sweeping.func()
    finally:
        scheduler.pull_worker.close()
