"""Pulls and syncs claimed by two workers at once, on the in-memory ledger (issue 30): two
`Pulls` over one recorder, each with its own `Ledger`, as two processes over one
database. A hook on the first worker's reads runs the second worker at the moment that
decides the race (after the first read the pulls, before it claims them), so that each
interleaving is exact rather than left to threads."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping
from datetime import date, datetime, timedelta
from typing import Any, cast
from uuid import UUID

import pytest
from eventsourcing.persistence import JSONTranscoder
from healthledger.adapters.persistence.eventstore.transcoder import DateAsISO
from healthledger.domain.connections.health_data import StoredDay, StoreResult
from healthledger.domain.connections.providers import ProviderAdapter, PullTarget
from healthledger.domain.connections.pulling import PullPolicy, Pulls, pull_chunks
from healthledger.domain.connections.raw_payloads import RawPull
from healthledger.domain.connections.resource_feeds import (
    IN_PROGRESS,
    SUCCESS,
    PullNotPending,
    ResourceFeed,
)
from healthledger.domain.connections.stream_ids import StreamIds
from healthledger.domain.ledger import Ledger

from tests.unit.in_memory import CTX, Factory, Saves, World
from tests.unit.vaults import DigestKeys

RESOURCES = ("sleep", "steps", "weight")
LEASE = timedelta(minutes=15)
SYNC_INTERVAL = timedelta(days=1)


class DatedFactory(Factory):
    """The in-memory world's infrastructure, with the date transcoding the ledger's own
    event store registers (pulls and syncs record days)."""

    def __init__(self, recorder: Saves) -> None:
        super().__init__(recorder)

    def transcoder(self) -> Any:
        transcoder = super().transcoder()
        assert isinstance(transcoder, JSONTranscoder)
        transcoder.register(DateAsISO())
        return transcoder


class Days:
    """The HealthDataStore port in memory: one payload per (user, provider, resource, day);
    `store` tells what was new and what changed, as the SQL store does. `before_store`
    runs once, before the next store (a hook for interleaving)."""

    def __init__(self) -> None:
        self.days: dict[tuple[UUID, str, str, date], Any] = {}
        self.before_store: Callable[[], None] | None = None

    def store(
        self,
        user_id: UUID,
        provider: str,
        data: Mapping[str, Mapping[date, Any]],
        raw: Mapping[str, RawPull] | None = None,
    ) -> dict[str, StoreResult]:
        hook, self.before_store = self.before_store, None
        if hook is not None:
            hook()
        results = {resource: StoreResult() for resource in data}
        for resource, days in data.items():
            for day, payload in sorted(days.items()):
                key = (user_id, provider, resource, day)
                if key not in self.days:
                    results[resource].created.append(day)
                elif self.days[key] != payload:
                    results[resource].updated.append(day)
                self.days[key] = payload
        return results

    def read(
        self, user_id: UUID, provider: str, resource: str, start: date, end: date
    ) -> dict[date, Any]:
        return {
            day: payload
            for (u, p, r, day), payload in self.days.items()
            if (u, p, r) == (user_id, provider, resource) and start <= day <= end
        }

    def read_range(
        self,
        user_id: UUID,
        start: date,
        end: date,
        *,
        resources: Collection[str] | None = None,
        provider: str | None = None,
    ) -> list[StoredDay]:
        return []


class Device:
    """A provider with data on every day; counts the fetches of each resource."""

    history_days = 14

    def __init__(self) -> None:
        self.fetches: Counter[str] = Counter()

    def fetch(
        self, target: PullTarget, start: date, end: date, now: datetime, attempt: int
    ) -> dict[date, Any]:
        self.fetches[target.resource] += 1
        days = (start + timedelta(days=n) for n in range((end - start).days + 1))
        return {day: {"day": day.isoformat()} for day in days}


class Setup:
    """A user with one connection and a pull per resource scheduled, and the workers."""

    def __init__(self) -> None:
        self.world = World()
        self.keys = DigestKeys()
        self.store = Days()
        self.device = Device()
        self.user = self.world.user()
        self.connection = self.world.connection(self.user, "oura")
        scheduler = self.worker("scheduler")
        self.feeds = scheduler.schedule(
            CTX, self.connection, self.user, RESOURCES, self.world.clock()
        )
        self.world.save(*self.feeds)
        self.reader = self.worker("reader").ledger
        self.feed_ids = [feed.id for feed in self.feeds]

    def worker(self, name: str) -> Pulls:
        """A worker with its own ledger over the shared recorder (its own process)."""
        ledger = Ledger(DatedFactory(self.world.recorder))  # type: ignore[arg-type]
        adapter = cast(ProviderAdapter, self.device)
        return Pulls(
            ledger,
            self.world.clock,
            self.store,
            lambda provider, demo: adapter,
            due_pulls=self.due,
            due_syncs=lambda synced_before, limit: self.feed_ids,
            streams=StreamIds(ledger, self.keys),
            policy=PullPolicy(lease=LEASE, sync_interval=SYNC_INTERVAL),
            holder=name,
        )

    def due(self, now: datetime, limit: int) -> list[UUID]:
        """As the read model answers: every pull of the connection (the workers judge)."""
        return self.feed_ids

    def events(self, feed_id: UUID) -> list[Any]:
        return list(self.reader.events.get(feed_id))

    def kinds(self, feed_id: UUID) -> list[str]:
        return [type(event).__name__ for event in self.events(feed_id)]

    def started_by(self, feed_id: UUID) -> list[str]:
        """The worker of each PullStarted, from its request id (pull-<holder>-<n>)."""
        return [
            event.request_id.split("-")[1]
            for event in self.events(feed_id)
            if isinstance(event, ResourceFeed.PullStarted)
        ]


def on_reading(worker: Pulls, aggregate_id: UUID, then: Callable[[], object]) -> None:
    """Run `then` once, when `worker` first reads the aggregate (after reading it)."""
    read = worker.ledger.find
    done: list[bool] = []

    def find(found_id: UUID, version: int | None = None) -> Any:
        found = read(found_id, version)
        if found_id == aggregate_id and not done:
            done.append(True)
            then()
        return found

    worker.ledger.find = find  # type: ignore[method-assign,assignment]


def chunks(feed: ResourceFeed) -> int:
    return len(list(pull_chunks(*feed.window)))


# -- historical pulls ----------------------------------------------------------------------


def test_a_lost_claim_does_not_run_again_the_pulls_another_worker_ran_to_their_end() -> None:
    """Worker A reads the connection's three pulls (scheduled); worker B runs all three
    to success before A claims them; A's claim loses. A reads each pull again and finds
    it ended: it runs none of them (before the fix it ran each a second time, and each
    second success announced historical data again under a new message id)."""
    setup = Setup()
    a, b = setup.worker("a"), setup.worker("b")
    on_reading(a, setup.connection.id, lambda: b.run_due())

    a.run_due()

    for feed in setup.feeds:
        assert setup.kinds(feed.id) == ["Created", "PullScheduled", "PullStarted", "PullSucceeded"]
        assert setup.started_by(feed.id) == ["b"]
        assert setup.device.fetches[feed.resource] == chunks(feed)
    # Nothing is due any more, for either worker.
    assert a.run(setup.feed_ids[0]) is None
    a.run_due()
    assert all(len(setup.events(feed_id)) == 4 for feed_id in setup.feed_ids)


def test_a_lost_claim_leaves_the_pulls_another_worker_holds_until_their_lease_ends() -> None:
    """B claims the pulls (and dies) between A's read and A's claim: A leaves them while
    B's lease runs, and takes each over once, after it."""
    setup = Setup()
    a, b = setup.worker("a"), setup.worker("b")

    def b_claims_and_dies() -> None:
        feeds = [b.ledger.find(feed_id) for feed_id in setup.feed_ids]
        for feed in feeds:
            assert isinstance(feed, ResourceFeed)
            feed.start_attempt(b._context(), setup.world.clock())
        b.ledger.save(*feeds)

    on_reading(a, setup.connection.id, b_claims_and_dies)
    a.run_due()
    assert {setup.kinds(f)[-1] for f in setup.feed_ids} == {"PullStarted"}

    setup.world.clock.advance(LEASE - timedelta(seconds=1))
    a.run_due()
    assert {setup.kinds(f)[-1] for f in setup.feed_ids} == {"PullStarted"}

    setup.world.clock.advance(timedelta(seconds=1))
    a.run_due()
    a.run_due()
    for feed in setup.feeds:
        assert setup.started_by(feed.id) == ["b", "a"]
        assert setup.kinds(feed.id).count("PullSucceeded") == 1
        assert setup.device.fetches[feed.resource] == chunks(feed)


def test_a_slow_worker_overtaken_after_its_lease_records_no_second_outcome() -> None:
    """A claims and pulls, but takes longer than its lease: B takes the pulls over and
    succeeds first. A's outcome is not recorded (its attempt is no longer the latest)."""
    setup = Setup()
    a, b = setup.worker("a"), setup.worker("b")

    def overtaken() -> None:
        setup.world.clock.advance(LEASE)
        b.run_due()

    setup.store.before_store = overtaken
    a.run_due()

    for feed_id in setup.feed_ids:
        assert setup.started_by(feed_id) == ["a", "b"]
        assert setup.kinds(feed_id).count("PullSucceeded") == 1
        assert setup.kinds(feed_id)[-1] == "PullSucceeded"


def test_a_pull_that_ended_is_never_started_again() -> None:
    setup = Setup()
    worker = setup.worker("a")
    worker.run_due()
    feed = worker.ledger.find(setup.feed_ids[0])
    assert isinstance(feed, ResourceFeed) and feed.status == SUCCESS
    with pytest.raises(PullNotPending):
        feed.start_attempt(CTX, setup.world.clock())
    assert worker.run(feed.id) is None
    assert setup.kinds(feed.id) == ["Created", "PullScheduled", "PullStarted", "PullSucceeded"]


def test_a_worker_runs_only_what_is_due_by_the_state_it_claims_from() -> None:
    """Scheduled: due. In progress: due once its lease ended. Ended: never."""
    setup = Setup()
    worker = setup.worker("a")
    feed = worker.ledger.find(setup.feed_ids[0])
    assert isinstance(feed, ResourceFeed)
    now = setup.world.clock()
    assert worker._is_due(feed, now)
    feed.start_attempt(CTX, now)
    assert feed.status == IN_PROGRESS
    assert not worker._is_due(feed, now + LEASE - timedelta(seconds=1))
    assert worker._is_due(feed, now + LEASE)
    feed.succeed(CTX, now, days_with_data=0, oldest_day=None, newest_day=None)
    assert not worker._is_due(feed, now + 10 * LEASE)


# -- the daily sync ------------------------------------------------------------------------


def synced_days(setup: Setup, feed_id: UUID) -> tuple[Counter[date], Counter[date]]:
    """How many DailySynced events named each day as created, and as updated."""
    created: Counter[date] = Counter()
    updated: Counter[date] = Counter()
    for event in setup.events(feed_id):
        if isinstance(event, ResourceFeed.DailySynced):
            created.update(event.created_days)
            updated.update(event.updated_days)
    return created, updated


def sync_request_ids(setup: Setup, feed_id: UUID) -> list[str]:
    return [
        event.request_id
        for event in setup.events(feed_id)
        if isinstance(event, ResourceFeed.DailySynced)
    ]


def pulled_and_a_day_later(setup: Setup) -> None:
    setup.worker("puller").run_due()
    setup.world.clock.advance(SYNC_INTERVAL + timedelta(hours=1))


def test_a_sync_another_worker_did_since_the_due_list_was_read_is_not_done_again() -> None:
    setup = Setup()
    pulled_and_a_day_later(setup)
    a, b = setup.worker("a"), setup.worker("b")
    feed_id = setup.feed_ids[0]
    on_reading(a, feed_id, lambda: b.sync_due())
    # A read the due list before B synced; by the time A reads the feed, B has synced it.
    a.sync_due()
    for each in setup.feed_ids:
        created, _updated = synced_days(setup, each)
        assert setup.kinds(each).count("DailySynced") == 1
        assert created and set(created.values()) == {1}
        assert {s.split("-")[1] for s in sync_request_ids(setup, each)} == {"b"}


def test_new_days_of_a_sync_whose_record_lost_are_recorded_once() -> None:
    """A stores the new days first; B syncs the feed in full (finding those days already
    stored, so nothing new) and records first; A's record loses. A records the days it
    created on the feed as it is now: each new day is announced once, not never."""
    setup = Setup()
    pulled_and_a_day_later(setup)
    a, b = setup.worker("a"), setup.worker("b")
    feed_id = setup.feed_ids[0]

    # B syncs in full right after A's store, before A records.
    plain_store = setup.store.store

    def store_then_b_syncs(
        user_id: UUID,
        provider: str,
        data: Mapping[str, Mapping[date, Any]],
        raw: Mapping[str, RawPull] | None = None,
    ) -> dict[str, StoreResult]:
        result = plain_store(user_id, provider, data, raw)
        setup.store.store = plain_store  # type: ignore[method-assign]
        b.sync(feed_id, synced_before=setup.world.clock() - SYNC_INTERVAL)
        return result

    setup.store.store = store_then_b_syncs  # type: ignore[method-assign]
    outcome = a.sync(feed_id, synced_before=setup.world.clock() - SYNC_INTERVAL)
    assert outcome is not None
    created_by_a, _ = outcome
    assert created_by_a, "the sync found no new day: the test tests nothing"
    created, _updated = synced_days(setup, feed_id)
    assert created == Counter(created_by_a)
    assert setup.kinds(feed_id).count("DailySynced") == 2  # B's (nothing new), A's (new days)
