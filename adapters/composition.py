"""The composition root: builds the whole service from settings.

The CLI, the HTTP server, the scheduler, the benchmarks and the tests all build it here,
so there is one way to wire the parts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from healthledger.adapters.http.cursors import cursor_secret
from healthledger.adapters.persistence.connection_queries import ConnectionQueries
from healthledger.adapters.persistence.database import Database
from healthledger.adapters.persistence.key_store import KeyStore, load_master_key
from healthledger.adapters.persistence.link_token_queries import LinkTokenQueries
from healthledger.adapters.persistence.queries import TeamQueries, UserQueries
from healthledger.adapters.persistence.read_models import ReadModels, erasure_effects
from healthledger.adapters.persistence.recorder import (
    LedgerInfrastructure,
    LedgerRecorder,
    SnapshotRecorder,
)
from healthledger.adapters.reference import ProviderEntry, provider_catalog, provider_slugs
from healthledger.adapters.settings import Settings
from healthledger.domain.connecting import Connections
from healthledger.domain.context import BOOTSTRAP, CommandContext
from healthledger.domain.ledger import Clock, Ledger, utc_now
from healthledger.domain.linking import LinkTokens
from healthledger.domain.team_directory import Bootstrap, TeamDirectory
from healthledger.domain.user_lifecycle import UserLifecycle
from sqlalchemy import Connection


@dataclass
class Service:
    settings: Settings
    clock: Clock
    db: Database
    recorder: LedgerRecorder
    ledger: Ledger
    key_store: KeyStore
    read_models: ReadModels
    users: UserLifecycle
    teams: TeamDirectory
    user_queries: UserQueries
    team_queries: TeamQueries
    cursor_secret: bytes
    # slug -> catalog entry (reference data shipped with the service).
    catalog: Mapping[str, ProviderEntry]
    connections: Connections
    connection_queries: ConnectionQueries
    link_tokens: LinkTokens
    link_token_queries: LinkTokenQueries

    def bootstrap(self) -> Bootstrap | None:
        """On an empty database: the default organization, team and key (else None)."""
        if self.team_queries.has_any_team():
            return None
        from eventsourcing.persistence import IntegrityError

        try:
            return self.teams.bootstrap(CommandContext.system(BOOTSTRAP))
        except IntegrityError:
            return None  # another process bootstrapped the same database first

    def close(self) -> None:
        self.ledger.close()
        self.db.dispose()


def build_service(settings: Settings | None = None, *, clock: Clock = utc_now) -> Service:
    settings = settings or Settings()
    db = Database(settings.database_url)
    db.create_schema()
    read_models = ReadModels(db)

    def on_record(conn: Connection, events: Sequence[Any]) -> None:
        read_models.project(conn, events)
        erasure_effects(conn, events)

    recorder = LedgerRecorder(db, on_record)
    ledger = Ledger(
        LedgerInfrastructure(recorder, SnapshotRecorder(db)),
        user_snapshot_interval=settings.user_snapshot_interval,
        aggregate_cache_size=settings.aggregate_cache_size,
        unit_of_work=db.unit_of_work,
    )
    # A new master key is made only for a database that holds no data key yet: pointing
    # an existing database at a missing key file must fail, not mint a second master key.
    master_key = load_master_key(settings.master_key_file, create=not db.has_data_keys())
    key_store = KeyStore(db, master_key, clock)
    catalog = {entry.slug: entry for entry in provider_catalog()}

    def describe(slug: str) -> dict[str, Any]:
        entry = catalog[slug]
        return {"name": entry.name, "slug": entry.slug, "logo": entry.logo}

    connection_queries = ConnectionQueries(db, key_store, describe)
    users = UserLifecycle(
        ledger,
        key_store,
        clock,
        settings.grace_period,
        live_connection_ids=connection_queries.live_connection_ids,
    )
    user_queries = UserQueries(db, key_store, connection_queries.connected_sources)
    connections = Connections(ledger, key_store, clock, users)
    return Service(
        settings=settings,
        clock=clock,
        db=db,
        recorder=recorder,
        ledger=ledger,
        key_store=key_store,
        read_models=read_models,
        users=users,
        teams=TeamDirectory(
            ledger,
            clock,
            vault=key_store,
            users=users,
            live_user_ids=user_queries.live_user_ids,
            provider_slugs=provider_slugs(),
        ),
        user_queries=user_queries,
        team_queries=TeamQueries(db),
        cursor_secret=cursor_secret(master_key),
        catalog=catalog,
        connections=connections,
        connection_queries=connection_queries,
        link_tokens=LinkTokens(ledger, clock, users, connections, provider_slugs()),
        link_token_queries=LinkTokenQueries(db),
    )
