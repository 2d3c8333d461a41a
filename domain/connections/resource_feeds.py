"""The feed of one resource from one connection: its historical pulls and the daily data
found after them. One stream per (connection, resource).

A historical pull:

    scheduled -> in_progress -> success
                             -> retrying -> in_progress ...   (retriable code, tries left)
                             -> failure                       (final code, or no tries left)

`retrying` exists only for connections created on or after 2025-05-09 (gaps.md); older
connections go straight to failure. A reconnection schedules a new pull on the same
stream, so the audit trail keeps every pull of every connection period.

`PullSucceeded` is recorded once, after every chunk of the pull is stored: it is what
`historical.data.<resource>.created` announces. `DailySynced` records each later sync and
the days it found new (`daily.data.<resource>.created`) or changed (`...updated`). The
data itself is sealed under the user's key in the health data store; the events' windows
and days (on which days a person had health data) are sealed with the same key by the
log's mapper (SEALED_FACTS, ADR 0032), and both go with the user's erasure. In clear: ids,
the events' times, states, counts, attempts and error codes.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any
from uuid import UUID, uuid4

from eventsourcing.domain import Aggregate
from healthledger.domain.audited import Audited, UserStream
from healthledger.domain.connections.providers import RETRY_QUOTA_EXHAUSTED
from healthledger.domain.context import CommandContext
from healthledger.domain.personal_data import ERASED_PLACEHOLDER

SCHEDULED = "scheduled"
IN_PROGRESS = "in_progress"
SUCCESS = "success"
RETRYING = "retrying"
FAILURE = "failure"
PULL_STATES = (SCHEDULED, IN_PROGRESS, SUCCESS, RETRYING, FAILURE)

# Connections created from this instant on retry pulls that failed for a passing reason.
RETRYING_SINCE = datetime(2025, 5, 9, tzinfo=UTC)
# The pull engine's release that a pull ran under (introspection's `release`).
RELEASE_RETRYING = "2025-05-09"
RELEASE_LEGACY = "legacy"


class ResourceFeed(Audited, created_event_name="Created"):
    TOPIC = "healthledger:ResourceFeed"
    USER_STREAM = UserStream("pull", read_models=("read_model:resource_feeds",))

    class Event(Audited.Event):
        pass

    class CreatedV1(Event, Aggregate.Created):
        """The feed opened, as recorded before its provider and resource were sealed.
        Recorded no more; the service's start redacts those stored into `Created` (ADR
        0028, ADR 0032)."""

        TOPIC = "healthledger:ResourceFeed.Created.v1"
        ANNOUNCES = ()
        SUPERSEDED_BY = "healthledger:ResourceFeed.Created.v2"
        connection_id: UUID
        user_id: UUID
        team_id: UUID
        provider: str
        resource: str

    class Created(Event, Aggregate.Created):
        """The feed opened; its provider and resource (a glucose feed says what the
        person measures) stored sealed with the user's key (SEALED_FACTS)."""

        TOPIC = "healthledger:ResourceFeed.Created.v2"
        ANNOUNCES = ()
        SEALED_FACTS = {"provider": ERASED_PLACEHOLDER, "resource": ERASED_PLACEHOLDER}
        PERSONAL_FIELDS = tuple(SEALED_FACTS)
        connection_id: UUID
        user_id: UUID
        team_id: UUID
        provider: str
        resource: str

    class PullScheduledV1(Event):
        """A pull scheduled, as recorded before its window was sealed. Recorded no more;
        the service's start redacts those stored into `PullScheduled` (ADR 0028, ADR
        0032)."""

        TOPIC = "healthledger:ResourceFeed.PullScheduled.v1"
        ANNOUNCES = ()
        SUPERSEDED_BY = "healthledger:ResourceFeed.PullScheduled.v2"
        pull_number: int
        range_start: datetime
        range_end: datetime
        retries_allowed: bool
        release: str
        trace_id: str

        def apply(self, feed: ResourceFeed) -> None:
            _scheduled(feed, self)

    class PullScheduled(Event):
        """A pull scheduled over a window of days; the window (which days the person had
        data to pull) stored sealed with the user's key (SEALED_FACTS), read as None once
        the key is gone."""

        TOPIC = "healthledger:ResourceFeed.PullScheduled.v2"
        ANNOUNCES = ()
        SEALED_FACTS = {"range_start": None, "range_end": None}
        PERSONAL_FIELDS = tuple(SEALED_FACTS)
        user_id: UUID
        pull_number: int
        range_start: datetime
        range_end: datetime
        retries_allowed: bool
        release: str
        trace_id: str

        def apply(self, feed: ResourceFeed) -> None:
            _scheduled(feed, self)

    class PullStarted(Event):
        TOPIC = "healthledger:ResourceFeed.PullStarted.v1"
        ANNOUNCES = ()
        attempt: int

        def apply(self, feed: ResourceFeed) -> None:
            feed.status = IN_PROGRESS
            feed.attempts = self.attempt
            if feed.started_at is None:
                feed.started_at = self.timestamp

    class PullRetrying(Event):
        """An attempt failed for a passing reason; the next one is due at `retry_at`."""

        TOPIC = "healthledger:ResourceFeed.PullRetrying.v1"
        ANNOUNCES = ()
        error_code: str
        retry_at: datetime

        def apply(self, feed: ResourceFeed) -> None:
            feed.status = RETRYING
            feed.retry_at = self.retry_at
            feed.failures += 1
            feed.error_code = self.error_code

    class PullSucceededV1(Event):
        """A pull's success, as recorded before its days were sealed. Recorded no more;
        redacted into `PullSucceeded` at the start."""

        TOPIC = "healthledger:ResourceFeed.PullSucceeded.v1"
        ANNOUNCES = ("historical.*",)
        SUPERSEDED_BY = "healthledger:ResourceFeed.PullSucceeded.v2"
        days_with_data: int
        oldest_day: date | None
        newest_day: date | None

        def apply(self, feed: ResourceFeed) -> None:
            _succeeded(feed, self)

    class PullSucceeded(Event):
        """Every chunk of the pull is stored: announced as historical.data.*.created. Its
        oldest and newest day sealed with the user's key (SEALED_FACTS); the count of
        days stays in clear (it proves the pull, not which days)."""

        TOPIC = "healthledger:ResourceFeed.PullSucceeded.v2"
        ANNOUNCES = ("historical.*",)
        SEALED_FACTS = {"oldest_day": None, "newest_day": None}
        PERSONAL_FIELDS = tuple(SEALED_FACTS)
        user_id: UUID
        days_with_data: int
        oldest_day: date | None
        newest_day: date | None

        def apply(self, feed: ResourceFeed) -> None:
            _succeeded(feed, self)

    class PullFailed(Event):
        TOPIC = "healthledger:ResourceFeed.PullFailed.v1"
        ANNOUNCES = ()
        error_code: str
        # Why, in our words (no personal data): the provider's message or our reason.
        reason: str

        def apply(self, feed: ResourceFeed) -> None:
            feed.status = FAILURE
            feed.ended_at = self.timestamp
            feed.error_code = self.error_code

    class DailySyncedV1(Event):
        """A later sync, as recorded before its days were sealed (its class version 2
        added `session`). Recorded no more; redacted into `DailySynced` at the start."""

        TOPIC = "healthledger:ResourceFeed.DailySynced.v1"
        ANNOUNCES = ("daily.*",)
        SUPERSEDED_BY = "healthledger:ResourceFeed.DailySynced.v2"
        class_version = 2
        created_days: list[date]
        updated_days: list[date]
        session: str | None

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["session"] = None

        def apply(self, feed: ResourceFeed) -> None:
            _synced(feed, self)

    class DailySynced(Event):
        """A later sync: the days it found new and the days whose data changed. For a
        resource kept as sessions (workouts, meals: `domain/connections/sessions.py`) a
        sync records one event per session that is new or changed, naming it in
        `session`, with its day as created or updated; None there announces whole days.
        The days and the session sealed with the user's key (SEALED_FACTS): once the key
        is gone, no days and no session. `days_created`, in clear, counts the created
        days this event names (what the deletion report counts, which days it does not
        say)."""

        TOPIC = "healthledger:ResourceFeed.DailySynced.v2"
        ANNOUNCES = ("daily.*",)
        SEALED_FACTS = {"created_days": [], "updated_days": [], "session": None}
        PERSONAL_FIELDS = tuple(SEALED_FACTS)
        user_id: UUID
        created_days: list[date]
        updated_days: list[date]
        session: str | None
        days_created: int

        def apply(self, feed: ResourceFeed) -> None:
            _synced(feed, self)

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        connection_id: UUID,
        user_id: UUID,
        team_id: UUID,
        provider: str,
        resource: str,
    ) -> None:
        """From the Created event's fields (eventsourcing passes them all), at `open` and
        on every replay."""
        self.connection_id: UUID = connection_id
        self.user_id: UUID = user_id
        self.team_id: UUID = team_id
        self.provider: str = provider
        self.resource: str = resource
        self.pull_number: int = 0
        # One of PULL_STATES, or None before the first pull is scheduled.
        self.status: str | None = None
        # When the data was last brought up to date: the last pull's success or the last
        # sync (as the read model's `synced_at`); None before a pull succeeded.
        self.synced_at: datetime | None = None
        # The days with data found so far, over every pull and sync.
        self.oldest_day: date | None = None
        self.newest_day: date | None = None
        # The current pull's, set from its PullScheduled on (None read once the user's
        # key is gone: the window is sealed).
        self.range_start: datetime | None
        self.range_end: datetime | None
        self.retries_allowed: bool
        self.release: str
        self.trace_id: str
        self.scheduled_at: datetime
        self.started_at: datetime | None
        self.ended_at: datetime | None
        self.attempts: int
        self.failures: int
        self.error_code: str | None
        self.days_with_data: int
        # Set by PullRetrying: when the next attempt is due.
        self.retry_at: datetime

    @classmethod
    def open(
        cls,
        ctx: CommandContext,
        now: datetime,
        *,
        id: UUID,
        connection_id: UUID,
        user_id: UUID,
        team_id: UUID,
        provider: str,
        resource: str,
    ) -> ResourceFeed:
        """`id` is `StreamIds.feed_id(connection_id, user_id, resource)` (keyed)."""
        return cls.new(
            ctx,
            now,
            id=id,
            connection_id=connection_id,
            user_id=user_id,
            team_id=team_id,
            provider=provider,
            resource=resource,
        )

    def schedule_pull(
        self,
        ctx: CommandContext,
        now: datetime,
        *,
        range_start: datetime,
        range_end: datetime,
        connection_created_at: datetime,
    ) -> None:
        retries_allowed = connection_created_at >= RETRYING_SINCE
        self.record(
            ctx,
            now,
            self.PullScheduled,
            user_id=self.user_id,
            pull_number=self.pull_number + 1,
            range_start=range_start,
            range_end=range_end,
            retries_allowed=retries_allowed,
            release=RELEASE_RETRYING if retries_allowed else RELEASE_LEGACY,
            trace_id=uuid4().hex,
        )

    @property
    def window(self) -> tuple[datetime, datetime]:
        """The current pull's window. Only a live user's feeds are pulled or synced; an
        erased user's window reads None (its key is gone), and asking for it is a
        defect."""
        if self.range_start is None or self.range_end is None:
            raise WindowUnreadable(self.id)
        return self.range_start, self.range_end

    @property
    def is_pending(self) -> bool:
        """A pull that has not ended: a worker may (re)start it."""
        return self.status in (SCHEDULED, RETRYING, IN_PROGRESS)

    def start_attempt(self, ctx: CommandContext, now: datetime) -> None:
        """Start the pending pull's next attempt. A pull that ended (success, failure) or
        was never scheduled is not started again: only a new PullScheduled (a
        reconnection) makes a new pull."""
        if not self.is_pending:
            raise PullNotPending(self.id, self.status)
        self.record(ctx, now, self.PullStarted, attempt=self.attempts + 1)

    def attempt_failed(
        self,
        ctx: CommandContext,
        now: datetime,
        *,
        code: str,
        reason: str,
        retriable: bool,
        retry_delays: list[float],
        not_before: datetime | None = None,
    ) -> None:
        """Record a failed attempt: retrying while tries are left (not before
        `not_before`, when the provider said when to come back), else failure."""
        if not retriable:
            self.record(ctx, now, self.PullFailed, error_code=code, reason=reason)
        elif not self.retries_allowed:
            # Legacy connections never enter retrying: the passing code is final for them.
            self.record(ctx, now, self.PullFailed, error_code=code, reason=reason)
        elif self.failures < len(retry_delays):
            delay = retry_delays[self.failures]
            retry_at = datetime.fromtimestamp(now.timestamp() + delay, UTC)
            if not_before is not None and not_before > retry_at:
                retry_at = not_before
            self.record(ctx, now, self.PullRetrying, error_code=code, retry_at=retry_at)
        else:
            self.record(
                ctx,
                now,
                self.PullFailed,
                error_code=RETRY_QUOTA_EXHAUSTED,
                reason=f"{code} on every one of {self.failures + 1} tries",
            )

    def succeed(
        self,
        ctx: CommandContext,
        now: datetime,
        *,
        days_with_data: int,
        oldest_day: date | None,
        newest_day: date | None,
    ) -> None:
        self.record(
            ctx,
            now,
            self.PullSucceeded,
            user_id=self.user_id,
            days_with_data=days_with_data,
            oldest_day=oldest_day,
            newest_day=newest_day,
        )

    def fail(self, ctx: CommandContext, now: datetime, *, code: str, reason: str) -> None:
        self.record(ctx, now, self.PullFailed, error_code=code, reason=reason)

    def synced(
        self,
        ctx: CommandContext,
        now: datetime,
        *,
        created_days: list[date],
        updated_days: list[date],
        session: str | None = None,
        days_created: int | None = None,
    ) -> None:
        """`days_created`: the days this sync created in the store that this event
        counts (a session's event counts its day once: `sessions.days_created_by`); by
        default the created days it names (whole days)."""
        self.record(
            ctx,
            now,
            self.DailySynced,
            user_id=self.user_id,
            created_days=created_days,
            updated_days=updated_days,
            session=session,
            days_created=len(created_days) if days_created is None else days_created,
        )


class PullNotPending(Exception):
    """A defect of the caller: only a scheduled, retrying or in-progress pull is started."""

    def __init__(self, feed_id: UUID, status: str | None) -> None:
        super().__init__(f"pull of feed {feed_id} is {status}: not started again")


class WindowUnreadable(Exception):
    """A defect of the caller: the feed's window was asked for after its user's key
    was destroyed (the sealed window reads None)."""

    def __init__(self, feed_id: UUID) -> None:
        super().__init__(f"feed {feed_id}: its pull window is sealed with a destroyed key")


def _scheduled(
    feed: ResourceFeed, e: ResourceFeed.PullScheduled | ResourceFeed.PullScheduledV1
) -> None:
    feed.pull_number = e.pull_number
    feed.status = SCHEDULED
    feed.range_start = e.range_start
    feed.range_end = e.range_end
    feed.retries_allowed = e.retries_allowed
    feed.release = e.release
    feed.trace_id = e.trace_id
    feed.scheduled_at = e.timestamp
    feed.started_at = None
    feed.ended_at = None
    feed.synced_at = None
    feed.attempts = 0
    feed.failures = 0
    feed.error_code = None
    feed.days_with_data = 0


def _succeeded(
    feed: ResourceFeed, e: ResourceFeed.PullSucceeded | ResourceFeed.PullSucceededV1
) -> None:
    feed.status = SUCCESS
    feed.ended_at = e.timestamp
    feed.synced_at = e.timestamp
    feed.error_code = None
    feed.days_with_data = e.days_with_data
    _widen(feed, e.oldest_day, e.newest_day)


def _synced(feed: ResourceFeed, e: ResourceFeed.DailySynced | ResourceFeed.DailySyncedV1) -> None:
    feed.synced_at = e.timestamp
    days = [*e.created_days, *e.updated_days]
    if days:
        _widen(feed, min(days), max(days))


def _widen(feed: ResourceFeed, oldest: date | None, newest: date | None) -> None:
    if oldest is not None and (feed.oldest_day is None or oldest < feed.oldest_day):
        feed.oldest_day = oldest
    if newest is not None and (feed.newest_day is None or newest > feed.newest_day):
        feed.newest_day = newest
