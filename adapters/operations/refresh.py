"""A user's refresh (`POST /v2/user/refresh/{user_id}`, the official clients'
`user.refresh`; issue 34): every live connection of the user synced now, as the daily sync
would later (`Pulls.sync`: the days since each feed's newest data, new and changed days
recorded and announced once), within the caller's timeout.

Rate-limited per user by what is stored, so that every process agrees: a refresh within a
minute of the user's last sync is refused (429, with the seconds to wait), since nothing
new could have arrived that the last one did not bring.
"""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import timedelta
from typing import Any
from uuid import UUID

from healthledger.adapters.composition import Service
from healthledger.domain.connections.connection import CONNECTED
from healthledger.domain.connections.resource_feeds import SUCCESS
from healthledger.domain.errors import TooSoon

# The least time between two syncs of a user that a refresh asks for.
REFRESH_INTERVAL = timedelta(minutes=1)
# How long a refresh may take when the caller says nothing (the client's `timeout`).
DEFAULT_TIMEOUT_SECONDS = 30.0
MAX_TIMEOUT_SECONDS = 120.0


def refresh(
    service: Service, team_id: UUID, user_id: UUID, timeout: float | None = None
) -> dict[str, Any]:
    """Sync each of the user's connected providers now: `refreshed_sources` those synced,
    `in_progress_sources` those whose historical pull is still running (it covers the
    days) or not reached within `timeout` (the daily sync will), `failed_sources` those
    whose maker failed or whose connection is in error."""
    service.users.load_live(team_id, user_id)  # another team's or no user: UserNotFound
    feeds = service.pull_queries.feeds_of([user_id], None)
    now = service.clock()
    synced = [f.synced_at for f in feeds if f.synced_at is not None]
    if synced and now - max(synced) < REFRESH_INTERVAL:
        wait = REFRESH_INTERVAL - (now - max(synced))
        seconds = max(1, int(wait.total_seconds() + 0.999))
        raise TooSoon(
            f"The user was synced less than a minute ago: refresh again in {seconds} s.", seconds
        )
    by_provider: dict[str, list[Any]] = defaultdict(list)
    for feed in feeds:
        by_provider[feed.provider].append(feed)
    deadline = time.monotonic() + min(timeout or DEFAULT_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS)
    refreshed: list[str] = []
    in_progress: list[str] = []
    failed: list[str] = []
    for provider, provider_feeds in sorted(by_provider.items()):
        if any(f.connection_status != CONNECTED for f in provider_feeds):
            failed.append(provider)  # in error, or paused by the user's ingestion end
        elif any(f.status != SUCCESS for f in provider_feeds) or time.monotonic() > deadline:
            in_progress.append(provider)
        else:
            results = [service.pulls.sync(f.feed_id) for f in provider_feeds]
            (refreshed if all(r is not None for r in results) else failed).append(provider)
    return {
        "success": True,
        "user_id": user_id,
        "refreshed_sources": refreshed,
        "in_progress_sources": in_progress,
        "failed_sources": failed,
    }
