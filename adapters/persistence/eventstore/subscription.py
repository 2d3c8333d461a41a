"""A subscription to the notification log: woken at once by this process's commits, and
by a poll for other processes' commits."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence

from eventsourcing.persistence import ApplicationRecorder, Notification, Subscription


class PollingSubscription(Subscription[ApplicationRecorder]):
    """The notifications after `gt` (of `topics`, if any), in order, a page at a time.
    When it has read them all, `__next__` waits until `wake` is called (the recorder
    calls it after each commit of this process) or `poll_interval` passes, and reads
    again. `stop` (or leaving its `with` block) ends the iteration."""

    def __init__(
        self,
        recorder: ApplicationRecorder,
        gt: int | None = None,
        topics: Sequence[str] = (),
        *,
        poll_interval: float = 0.5,
        page_size: int = 500,
        on_stop: Callable[[PollingSubscription], None] = lambda _subscription: None,
    ) -> None:
        super().__init__(recorder=recorder, gt=gt, topics=topics)
        # Its own state, under its own (public) names: eventsourcing's base class keeps
        # private ones for its own use.
        self.source = recorder
        self.position = gt or 0
        self.topic_filter = tuple(topics)
        self.poll_interval = poll_interval
        self.page_size = page_size
        self.on_stop = on_stop
        self.pending: deque[Notification] = deque()
        self.woken = threading.Event()
        self.stopped = threading.Event()

    def wake(self, events: Sequence[object] = ()) -> None:
        # The recorder's commit listener: any commit may hold notifications to read.
        self.woken.set()

    def stop(self) -> None:
        super().stop()
        self.stopped.set()
        self.woken.set()
        self.on_stop(self)

    def __next__(self) -> Notification:
        while not self.stopped.is_set():
            if self.pending:
                return self.pending.popleft()
            # Cleared before the read: a commit after it wakes the wait below at once.
            self.woken.clear()
            page = self.source.select_notifications(
                start=self.position,
                limit=self.page_size,
                topics=self.topic_filter,
                inclusive_of_start=False,
            )
            if page:
                self.pending.extend(page)
                self.position = page[-1].id
            else:
                self.woken.wait(self.poll_interval)
        raise StopIteration
