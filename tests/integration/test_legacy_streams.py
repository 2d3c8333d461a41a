"""Every stream of the SQLite database written by the previous main
(`tests/data/legacy_main`) replays through eventsourcing's stock mapper into today's
aggregates, each founded by its constructor from the Created event stored then."""

from __future__ import annotations

import gzip
import importlib
import shutil
import sqlite3
from collections import Counter, defaultdict
from contextlib import closing
from pathlib import Path
from uuid import UUID

from eventsourcing.domain import Aggregate
from eventsourcing.persistence import StoredEvent
from healthledger.domain.users.user import ACTIVE, ERASED, PENDING_ERASURE, User

from tests.recorded import loaded
from tests.unit.stored_form import MAPPER

# The modules of the aggregates not imported above: a stored event's topic resolves to its
# class once the class's module is imported.
for module in (
    "connections.connection",
    "connections.link_tokens",
    "connections.resource_feeds",
    "teams.custom_credentials",
    "teams.management_keys",
    "teams.teams",
    "webhooks.deliveries",
    "webhooks.deprecation_calendar",
    "webhooks.endpoints",
):
    importlib.import_module(f"healthledger.domain.{module}")

LEGACY = Path(__file__).parents[1] / "data" / "legacy_main" / "sqlite-ledger.db.gz"


def test_every_stream_of_a_database_written_by_the_previous_main_replays(
    tmp_path: Path,
) -> None:
    copy = tmp_path / "legacy.db"
    with gzip.open(LEGACY) as packed, copy.open("wb") as unpacked:
        shutil.copyfileobj(packed, unpacked)
    with closing(sqlite3.connect(copy)) as db:
        rows = db.execute(
            "SELECT originator_id, originator_version, topic, state FROM stored_events"
            " ORDER BY originator_id, originator_version"
        ).fetchall()
    streams: defaultdict[UUID, list[StoredEvent]] = defaultdict(list)
    for originator_id, version, topic, state in rows:
        stream = UUID(str(originator_id))
        streams[stream].append(StoredEvent(stream, version, topic, bytes(state)))

    aggregates: list[Aggregate] = []
    for stream, stored in streams.items():
        aggregate = None
        for record in stored:
            aggregate = loaded(MAPPER, record).mutate(aggregate)
        assert isinstance(aggregate, Aggregate) and aggregate.id == stream
        assert aggregate.version == stored[-1].originator_version
        aggregates.append(aggregate)

    assert sum(len(stored) for stored in streams.values()) == len(rows) > 300
    kinds = Counter(type(aggregate).__name__ for aggregate in aggregates)
    assert kinds["User"] == kinds["ClientUserIdClaim"] == 6
    assert kinds["Connection"] == 3 and kinds["LinkToken"] == kinds["WebhookEndpoint"] == 1
    users = {a.client_user_id: a for a in aggregates if isinstance(a, User)}
    assert {name: user.status for name, user in users.items()} == {
        "legacy-0": ACTIVE,
        "legacy-1": ACTIVE,
        "legacy-2": PENDING_ERASURE,
        "legacy-3": ACTIVE,
        "legacy-4": ERASED,
        "legacy-5": ACTIVE,
    }
    assert users["legacy-0"].sealed_demographics is not None
    assert users["legacy-4"].sealed_birth_date is None
