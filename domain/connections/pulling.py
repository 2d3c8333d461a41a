"""Use cases of pulling data: historical pulls on connection, and the daily sync after.

Workers find what is due from our own tables (the `due` queries are injected) and call
`run` / `sync` for each id. Both are idempotent. A historical pull is started only from a
state that allows it, read from the event store when the worker claims it: scheduled,
retrying with its retry time come, or in progress with its lease ended (`_is_due`); a pull
that ended (success, failure) is never started again, only a new PullScheduled (a
reconnection) makes a new one. The claim is the `PullStarted` event, recorded at the
version the worker read: two workers that pick the same pull both try to record it at the
same version and only one succeeds; the loser reads the pull again and goes by what it
finds. A worker that dies mid-pull leaves the pull `in_progress`; once its lease ends the
pull is due again and is taken over (chunks already stored are stored again unchanged,
and success is recorded once: by the attempt that is the pull's latest).

Each `PullStarted` carries the worker in its request id (`pull-<pid>-<holder>-...`), so
which process started an attempt can be read from the log.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from uuid import UUID, uuid4

from eventsourcing.persistence import IntegrityError
from healthledger.domain.connections import raw_payloads
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.deliveries import merged_day
from healthledger.domain.connections.health_data import HealthDataStore, UserDataGone
from healthledger.domain.connections.providers import (
    NON_RETRIABLE,
    UNEXPECTED,
    AdapterFor,
    DeliveredByMaker,
    KeptAfterStoring,
    ProviderAdapter,
    ProviderError,
    PullTarget,
)
from healthledger.domain.connections.resource_feeds import (
    IN_PROGRESS,
    RETRYING,
    SCHEDULED,
    SUCCESS,
    ResourceFeed,
)
from healthledger.domain.connections.sessions import (
    SESSION_RESOURCES,
    days_created_by,
    session_changes,
)
from healthledger.domain.connections.stream_ids import StreamIds
from healthledger.domain.context import SCHEDULER, CommandContext
from healthledger.domain.ledger import Clock, Ledger
from healthledger.domain.users.user import User

log = logging.getLogger("healthledger.pulls")

# How many days one fetch asks a provider for.
CHUNK_DAYS = 7
# A daily sync looks back this far, so a day that changed after it was first seen (a
# late upload, today's data growing) is seen again.
SYNC_LOOKBACK_DAYS = 1

DueIds = Callable[[datetime, int], list[UUID]]


@dataclass(frozen=True)
class _Outcome:
    """How one pull's attempt ended: its span of data, or the error it met."""

    span: dict[str, Any]
    error: Exception | None


@dataclass(frozen=True)
class _Synced:
    """One DailySynced a sync records."""

    created_days: list[date]
    updated_days: list[date]
    session: str | None
    # The days of the store it created, each counted by one event of the sync only.
    days_created: int

    def fields(self) -> dict[str, Any]:
        return {
            "created_days": self.created_days,
            "updated_days": self.updated_days,
            "session": self.session,
            "days_created": self.days_created,
        }


class WindowNotSynced(Exception):
    """The maker failed the sync of a notice's window (a passing failure, or a grant
    broken: the connection shows that): the notice is tried again."""


@dataclass(frozen=True)
class PullPolicy:
    # Delays before the 2nd, 3rd... try of a pull that failed for a passing reason; a
    # failure after the last one is retry_quota_exhausted.
    retry_delays: Sequence[float] = (60, 300, 1800, 7200)
    # How long a started attempt is trusted to be running before it is taken over.
    lease: timedelta = timedelta(minutes=15)
    # How often a connected feed is synced after its historical pull.
    sync_interval: timedelta = timedelta(days=1)


class Pulls:
    def __init__(
        self,
        ledger: Ledger,
        clock: Clock,
        store: HealthDataStore,
        adapter_for: AdapterFor,
        *,
        due_pulls: DueIds,
        due_syncs: DueIds,
        streams: StreamIds,
        policy: PullPolicy = PullPolicy(),
        holder: str | None = None,
    ) -> None:
        self.ledger = ledger
        # Where a user's connections and feeds are (keyed ids, issue 29): every use case
        # that finds or opens one by (user, provider) or (connection, resource) asks it.
        self.streams = streams
        self.clock = clock
        self.store = store
        self.adapter_for = adapter_for
        self.due_pulls = due_pulls
        self.due_syncs = due_syncs
        self.policy = policy
        # Who this worker is, in the request id of what it records (one per process by
        # default, as the webhook sender's lease holder).
        self.holder = holder or f"{os.getpid()}-{uuid4().hex[:12]}"

    def _context(self) -> CommandContext:
        return CommandContext.system(SCHEDULER, f"pull-{self.holder}-{uuid4().hex[:8]}")

    # -- scheduling (in the connect's transaction) --------------------------------------

    def schedule(
        self,
        ctx: CommandContext,
        connection: Connection,
        user: User,
        resources: Sequence[str],
        now: datetime,
    ) -> list[ResourceFeed]:
        """A pull per resource over the provider's history window, pending and unsaved:
        the caller saves them with the connection, so a connection never exists without
        its pulls."""
        history = timedelta(days=self._adapter(connection).history_days)
        start, end = _clamp(now - history, now, user)
        feeds = []
        for resource in sorted(resources):
            feed_id = self.streams.feed_id(connection.id, connection.user_id, resource)
            feed = self.ledger.find(feed_id)
            if feed is None:
                feed = ResourceFeed.open(
                    ctx,
                    now,
                    id=feed_id,
                    connection_id=connection.id,
                    user_id=connection.user_id,
                    team_id=connection.team_id,
                    provider=connection.provider,
                    resource=resource,
                )
            assert isinstance(feed, ResourceFeed)
            feed.schedule_pull(
                ctx,
                now,
                range_start=start,
                range_end=end,
                connection_created_at=connection.created_on,
            )
            feeds.append(feed)
        return feeds

    # -- historical pulls -----------------------------------------------------------------

    def run_due(self, limit: int = 200) -> int:
        """Run the pulls that are due now; how many were looked at. The due pulls of one
        connection run together (see `_run_together`)."""
        ids = self.due_pulls(self.clock(), limit)
        by_connection: dict[UUID, list[ResourceFeed]] = {}
        for feed_id in ids:
            feed = self.ledger.find(feed_id)
            if isinstance(feed, ResourceFeed) and feed.is_pending:
                by_connection.setdefault(feed.connection_id, []).append(feed)
        for feeds in by_connection.values():
            self._run_together(feeds)
        return len(ids)

    def run(self, feed_id: UUID) -> str | None:
        """Take one pull to its next stop (success, retrying, failure): its status after,
        or None when another worker had claimed it."""
        feed = self.ledger.find(feed_id)
        if not isinstance(feed, ResourceFeed) or not feed.is_pending:
            return None
        claimed = self._run_together([feed])
        if feed_id not in claimed:
            return None
        after = self.ledger.find(feed_id)
        assert isinstance(after, ResourceFeed)
        return after.status

    def _run_together(self, feeds: list[ResourceFeed]) -> set[UUID]:
        """Run pulls of one connection to their next stop; the ids this worker claimed.

        Together means one transaction for the claims, one per chunk window for the data
        of every resource, and one for the outcomes: a connection's 50 pulls cost a dozen
        commits instead of hundreds. Each pull still succeeds or fails on its own, and its
        completion is recorded after all its chunks are stored. When a batch write loses
        to another writer (a worker claimed one of the pulls, or ran it to its end; a
        reconnection rescheduled one), each pull is read again and redone on its own if,
        as stored now, it is still due.
        """
        ctx = self._context()
        now = self.clock()
        feeds = [feed for feed in feeds if self._is_due(feed, now)]
        if not feeds:
            return set()
        connection = self.ledger.find(feeds[0].connection_id)
        assert isinstance(connection, Connection)
        if not connection.is_pulling:
            reason = f"connection {connection.status}"
            for feed in feeds:
                feed.fail(ctx, now, code=NON_RETRIABLE, reason=reason)
            if not self._save(*feeds):
                for feed in feeds:  # one at a time, from the stored state
                    fresh = self._reload(feed)
                    if self._is_due(fresh, now):
                        fresh.fail(ctx, now, code=NON_RETRIABLE, reason=reason)
                        self._save(fresh)
            return set()
        for feed in feeds:
            feed.start_attempt(ctx, now)
        if not self._save(*feeds):
            if len(feeds) == 1:
                return set()  # another worker claimed it, or ran it to its end
            # One of them was moved on: each from the stored state, if it is still due
            # (`_run_together` checks it again; a pull another worker ended is not).
            claimed: set[UUID] = set()
            for feed in feeds:
                claimed |= self._run_together([self._reload(feed)])
            return claimed
        spans, errors = self._pull(connection, feeds, now)
        ended = self.clock()
        outcomes = {feed.id: _Outcome(spans[feed.id], errors.get(feed.id)) for feed in feeds}
        for feed in feeds:
            self._record_outcome(ctx, feed, connection, outcomes[feed.id], ended)
        others = [connection] if connection.pending_events else []
        if self._save(*feeds, *others):
            return {feed.id for feed in feeds}
        # Something moved one of the streams on meanwhile (a reconnection rescheduled a
        # pull, a deregistration, another worker took an attempt over after its lease):
        # record each outcome on its own where the attempt this worker claimed is still
        # the pull's latest.
        for feed in feeds:
            fresh = self._reload(feed)
            if (
                fresh.status == IN_PROGRESS
                and fresh.pull_number == feed.pull_number
                and fresh.attempts == feed.attempts
            ):
                fresh_connection = self._reload(connection)
                self._record_outcome(ctx, fresh, fresh_connection, outcomes[feed.id], ended)
                extra = [fresh_connection] if fresh_connection.pending_events else []
                self._save(fresh, *extra)
        return {feed.id for feed in feeds}

    def _record_outcome(
        self,
        ctx: CommandContext,
        feed: ResourceFeed,
        connection: Connection,
        outcome: _Outcome,
        now: datetime,
    ) -> None:
        error = outcome.error
        if error is None:
            feed.succeed(ctx, now, **outcome.span)
        elif isinstance(error, ProviderError):
            feed.attempt_failed(
                ctx,
                now,
                code=error.code,
                reason=error.message,
                retriable=error.retriable,
                retry_delays=list(self.policy.retry_delays),
                not_before=None
                if error.retry_after is None
                else now + timedelta(seconds=error.retry_after),
            )
            if error.connection_error is not None:
                # The grant is broken: the connection shows it, in the same transaction.
                connection.error(ctx, now, error.connection_error, error.message)
        elif isinstance(error, UserDataGone):
            feed.fail(ctx, now, code=NON_RETRIABLE, reason="user erased")
        else:  # a defect in an adapter: final, and logged without data
            log.error("pull %s failed unexpectedly: %s", feed.id, type(error).__name__)
            feed.fail(ctx, now, code=UNEXPECTED, reason=type(error).__name__)

    def _is_due(self, feed: ResourceFeed, now: datetime) -> bool:
        """Whether a worker may start the pull now, by its state as read: scheduled,
        retrying with its retry time come, or in progress with its lease ended (the
        worker that started it is presumed dead). A pull that ended is never due."""
        if feed.status == SCHEDULED:
            return True
        if feed.status == RETRYING:
            return feed.retry_at <= now
        if feed.status == IN_PROGRESS:
            return feed.modified_on + self.policy.lease <= now
        return False

    def _pull(
        self, connection: Connection, feeds: list[ResourceFeed], now: datetime
    ) -> tuple[dict[UUID, dict[str, Any]], dict[UUID, Exception]]:
        """Fetch and store every chunk of the feeds, oldest window first: the span of data
        each pull found, and the error each failed pull met (it is not asked again)."""
        adapter = self._adapter(connection)
        spans: dict[UUID, dict[str, Any]] = {
            f.id: {"days_with_data": 0, "oldest_day": None, "newest_day": None} for f in feeds
        }
        errors: dict[UUID, Exception] = {}
        windows: dict[tuple[datetime, datetime], list[ResourceFeed]] = {}
        for feed in feeds:
            windows.setdefault(feed.window, []).append(feed)
        for (range_start, range_end), group in windows.items():
            for start, end in pull_chunks(range_start, range_end):
                found: dict[str, dict[date, Any]] = {}
                # The maker's answers each fetch read, kept (sealed) with the days mapped
                # from them, in the same transaction (raw_payloads.py).
                with raw_payloads.capturing() as capture:
                    for feed in group:
                        if feed.id in errors:
                            continue
                        target = _target(feed, connection)
                        try:
                            with raw_payloads.fetching(feed.resource):
                                found[feed.resource] = adapter.fetch(
                                    target, start, end, now, feed.attempts
                                )
                        except Exception as exc:
                            errors[feed.id] = exc
                raw = capture.pulls(start, end, now, list(found))
                try:
                    self.store.store(connection.user_id, connection.provider, found, raw)
                except UserDataGone as exc:
                    for feed in group:
                        errors.setdefault(feed.id, exc)
                    break
                for feed in group:
                    days = found.get(feed.resource)
                    if feed.id not in errors and days:
                        span = spans[feed.id]
                        span["days_with_data"] += len(days)
                        span["oldest_day"] = span["oldest_day"] or min(days)
                        span["newest_day"] = max(days)
        if isinstance(adapter, KeptAfterStoring):
            # Every chunk of these pulls is stored: the maker may forget what it served.
            for feed in feeds:
                if feed.id not in errors:
                    try:
                        adapter.stored(_target(feed, connection), now)
                    except ProviderError as exc:
                        errors[feed.id] = exc
        return spans, errors

    # -- the daily sync -------------------------------------------------------------------

    def sync_due(self, limit: int = 500) -> tuple[int, int]:
        """Sync the feeds that are due: (how many were looked at, how many synced). A feed
        whose sync failed stays due for the next round."""
        synced_before = self.clock() - self.policy.sync_interval
        ids = self.due_syncs(synced_before, limit)
        synced = sum(
            1 for feed_id in ids if self.sync(feed_id, synced_before=synced_before) is not None
        )
        return len(ids), synced

    def sync(
        self, feed_id: UUID, *, synced_before: datetime | None = None
    ) -> tuple[list[date], list[date]] | None:
        """Fetch the days since the feed's newest data; record what is new and changed.

        With `synced_before` (the sweep's), the feed is synced only if, as stored now, it
        was last brought up to date at or before that instant: another process's sweep,
        which read the same due list, may have synced it meanwhile.
        """
        ctx = self._context()
        feed = self.ledger.find(feed_id)
        if not isinstance(feed, ResourceFeed) or feed.status != SUCCESS:
            return None  # the historical pull covers it (or failed: nothing to sync)
        if synced_before is not None and (feed.synced_at or synced_before) > synced_before:
            return None  # synced since the due list was read
        connection = self.ledger.find(feed.connection_id)
        user = self.ledger.find(feed.user_id)
        if not isinstance(connection, Connection) or not connection.is_pulling:
            return None
        assert isinstance(user, User)
        now = self.clock()
        since = feed.newest_day or feed.window[1].date()
        start, end = _clamp(
            datetime.combine(since - timedelta(days=SYNC_LOOKBACK_DAYS), time(0), UTC), now, user
        )
        if start >= end:
            return None
        return self._sync_days(ctx, feed, connection, start.date(), end.date(), now)

    def sync_window(
        self, feed_id: UUID, start: date, end: date
    ) -> tuple[list[date], list[date]] | None:
        """A maker's notice named the days start..end (inclusive) of this feed's resource
        (notice_intake.py): fetch just those, store them, and record what is new and
        changed as a sync does (its DailySynced announces each once). None when there is
        nothing to sync: the historical pull has not succeeded (it covers the days), the
        connection is not pulling, or the days are outside the user's ingestion bounds.
        Raises WindowNotSynced when the maker failed: the notice is tried again."""
        ctx = self._context()
        feed = self.ledger.find(feed_id)
        if not isinstance(feed, ResourceFeed) or feed.status != SUCCESS:
            return None
        connection = self.ledger.find(feed.connection_id)
        user = self.ledger.find(feed.user_id)
        if not isinstance(connection, Connection) or not connection.is_pulling:
            return None
        if not isinstance(user, User):
            return None
        now = self.clock()
        first, after = _clamp(
            datetime.combine(start, time(0), UTC),
            datetime.combine(end + timedelta(days=1), time(0), UTC),
            user,
        )
        if first >= after:
            return None
        synced = self._sync_days(
            ctx, feed, connection, first.date(), (after - timedelta(microseconds=1)).date(), now
        )
        if synced is None:
            raise WindowNotSynced()
        return synced

    def sync_delivered(self, feed_id: UUID, delivery: Any) -> tuple[list[date], list[date]] | None:
        """A maker's notice delivered records (a Garmin push, or a ping's callback URLs:
        providers.DeliveredByMaker): the days of this feed's resource they bring, within
        the user's ingestion bounds, merged into the days stored
        (domain/connections/deliveries.py), stored, and recorded as a sync is (its
        DailySynced announces each change once). None when there is nothing to store
        them for: the connection is not pulling, its pull failed, or its maker delivers
        nothing. Raises WindowNotSynced when they cannot be stored now: the feed's
        historical pull has not ended (the notice waits for it, as the records exist
        nowhere else) or the maker failed."""
        ctx = self._context()
        feed = self.ledger.find(feed_id)
        if not isinstance(feed, ResourceFeed):
            return None
        connection = self.ledger.find(feed.connection_id)
        user = self.ledger.find(feed.user_id)
        if not isinstance(connection, Connection) or not connection.is_pulling:
            return None
        if not isinstance(user, User):
            return None
        if feed.status in (SCHEDULED, IN_PROGRESS, RETRYING):
            raise WindowNotSynced()
        adapter = self._adapter(connection)
        if feed.status != SUCCESS or not isinstance(adapter, DeliveredByMaker):
            return None
        now = self.clock()
        first, after = _clamp(
            datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC), user
        )
        if first >= after:
            return None

        def delivered(target: PullTarget, at: datetime) -> dict[date, Any]:
            return adapter.delivered(target, delivery, at)

        synced = self._sync_days(
            ctx,
            feed,
            connection,
            first.date(),
            (after - timedelta(microseconds=1)).date(),
            now,
            delivered,
        )
        if synced is None:
            raise WindowNotSynced()
        return synced

    def _sync_days(
        self,
        ctx: CommandContext,
        feed: ResourceFeed,
        connection: Connection,
        start_day: date,
        end_day: date,
        now: datetime,
        delivered: Callable[[PullTarget, datetime], dict[date, Any]] | None = None,
    ) -> tuple[list[date], list[date]] | None:
        """Fetch the feed's days start_day..end_day (or take those of them `delivered`
        brings), store them and record the sync: the days created and updated, or None
        when the maker failed (or the user's data is gone)."""
        start, end = start_day, end_day
        sessions = feed.resource in SESSION_RESOURCES
        target = _target(feed, connection)
        raw = None
        try:
            if delivered is None:
                with raw_payloads.capturing() as capture, raw_payloads.fetching(feed.resource):
                    found = self._adapter(connection).fetch(target, start, end, now, 1)
                raw = capture.pulls(start, end, now, [feed.resource])
            else:  # a maker's delivery: only its days, merged into those stored
                brought = {d: v for d, v in delivered(target, now).items() if start <= d <= end}
                if not brought:
                    return [], []
                start, end = min(brought), max(brought)
            # Sessions are announced one by one: what the days held before this sync
            # tells which of their sessions are new and which changed.
            before = (
                self.store.read(feed.user_id, feed.provider, feed.resource, start, end)
                if sessions or delivered is not None
                else {}
            )
            if delivered is not None:
                found = {
                    day: merged_day(feed.resource, day, before.get(day), value)
                    for day, value in sorted(brought.items())
                }
            stored = self.store.store(feed.user_id, feed.provider, {feed.resource: found}, raw)[
                feed.resource
            ]
            adapter = self._adapter(connection)
            if isinstance(adapter, KeptAfterStoring):
                adapter.stored(_target(feed, connection), now)
        except ProviderError as exc:
            if exc.connection_error is not None:
                connection.error(ctx, now, exc.connection_error, exc.message)
                self._save(connection)
            # A passing failure: the feed stays due, and the next round tries again.
            log.info("sync of feed %s failed: %s", feed.id, exc.code)
            return None
        except UserDataGone:
            return None
        changes = (
            session_changes(feed.resource, before, found, [*stored.created, *stored.updated])
            if sessions
            else []
        )
        recorded = [
            _Synced(
                created_days=[change.day] if change.created else [],
                updated_days=[] if change.created else [change.day],
                session=change.key,
                days_created=days,
            )
            for change, days in zip(changes, days_created_by(changes, stored.created), strict=True)
        ]
        if not changes:
            # A plain resource's days; or no session changed (one removed, or nothing):
            # the sync is recorded all the same, it is when the feed was last synced.
            created, updated = ([], []) if sessions else (stored.created, stored.updated)
            recorded.append(
                _Synced(
                    created_days=created,
                    updated_days=updated,
                    session=None,
                    days_created=len(created),
                )
            )
        for synced in recorded:
            feed.synced(ctx, now, **synced.fields())
        if not self._save(feed):
            self._record_created_on_fresh(ctx, feed, now, recorded)
        return stored.created, stored.updated

    def _record_created_on_fresh(
        self, ctx: CommandContext, feed: ResourceFeed, now: datetime, recorded: list[_Synced]
    ) -> None:
        """A sync's record lost to another writer (most often another process syncing the
        same feed at the same moment). The days this sync created in the store were
        created by no one else (the store inserts a day once), so no other record
        announces them: they are recorded on the feed as stored now, while its pull is
        the one this sync followed (a reconnection's new pull covers them otherwise). The
        days it found changed are not: the writer that won stored the same days and
        recorded the changes it saw."""
        kept = [
            _Synced(
                created_days=s.created_days,
                updated_days=[],
                session=s.session,
                days_created=s.days_created,
            )
            for s in recorded
            if s.created_days
        ]
        for _ in range(3):
            if not kept:
                return
            fresh = self._reload(feed)
            if fresh.status != SUCCESS or fresh.pull_number != feed.pull_number:
                return
            for synced in kept:
                fresh.synced(ctx, now, **synced.fields())
            if self._save(fresh):
                return
        log.warning("sync of feed %s: new days not recorded after 3 tries", feed.id)

    # -- connection pauses ----------------------------------------------------------------

    def apply_ingestion_bounds(self, connection_ids: Sequence[UUID]) -> int:
        """Pause the connections whose user's ingestion_end has passed; resume the paused
        ones whose user's ingestion_end was moved on or cleared. How many changed."""
        ctx = self._context()
        changed = 0
        for connection_id in connection_ids:
            connection = self.ledger.find(connection_id)
            if not isinstance(connection, Connection):
                continue
            user = self.ledger.find(connection.user_id)
            assert isinstance(user, User)
            now = self.clock()
            ended = user.ingestion_end is not None and user.ingestion_end < now.date()
            if ended:
                connection.pause(ctx, now)
            else:
                connection.resume(ctx, now)
            if connection.pending_events and self._save(connection):
                changed += 1
        return changed

    # -- helpers --------------------------------------------------------------------------

    def _save(self, *aggregates: Any) -> bool:
        try:
            self.ledger.save(*aggregates)
        except IntegrityError:
            return False  # another worker, or a reconnection, moved the stream on
        return True

    def _adapter(self, connection: Connection) -> ProviderAdapter:
        return self.adapter_for(connection.provider, connection.demo)

    def _reload(self, aggregate: Any) -> Any:
        fresh = self.ledger.find(aggregate.id)
        assert fresh is not None
        return fresh


def _target(feed: ResourceFeed, connection: Connection) -> PullTarget:
    # demo_failures is set by every connect (empty unless asked for).
    return PullTarget(
        feed.user_id, feed.provider, feed.resource, connection.demo_failures, connection.id
    )


def _clamp(start: datetime, end: datetime, user: User) -> tuple[datetime, datetime]:
    """The range cut to the user's ingestion bounds (dates, whole UTC days)."""
    if user.ingestion_start is not None:
        start = max(start, datetime.combine(user.ingestion_start, time(0), UTC))
    if user.ingestion_end is not None:
        end = min(end, datetime.combine(user.ingestion_end + timedelta(days=1), time(0), UTC))
    return start, max(start, end)


def pull_chunks(start: datetime, end: datetime) -> Iterator[tuple[date, date]]:
    """Oldest first, CHUNK_DAYS at a time, over the days the range touches."""
    if start >= end:
        return
    day, last = start.date(), (end - timedelta(microseconds=1)).date()
    while day <= last:
        chunk_end = min(day + timedelta(days=CHUNK_DAYS - 1), last)
        yield day, chunk_end
        day = chunk_end + timedelta(days=1)
