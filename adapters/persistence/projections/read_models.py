"""The read models' one entry point: `project` runs every context's projection inside
the transaction that stores the events (so a read model is never behind its log), and
`rebuild` runs it again, page by page, over the whole log into new tables that replace
the live ones at its end (`rebuild.py`)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from typing import Any
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import ApplicationRecorder, Mapper
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.statements import held_writes, holding
from healthledger.adapters.persistence.projections import (
    Handlers,
    connections,
    declared_handlers,
    event_destinations,
    lab_tests,
    orders,
    stream_owners,
    teams,
    unmatched_results,
    users,
    webhooks,
)
from sqlalchemy import Connection

# The contexts whose modules declare the read models' handlers (`@handles`): imported
# here, so that every handler is declared before a `ReadModels` collects them.
PROJECTING = (
    users,
    teams,
    connections,
    webhooks,
    event_destinations,
    lab_tests,
    orders,
    unmatched_results,
)

# The events of one save from which their projection's writes are held and run together
# (`statements.held_writes`): a sweep's erasure batch, a fan-out. A command's few events
# run their writes as they come.
HOLD_FROM = 32
# Opens the sealed values of many users on a connection, their keys read at once (the
# key store's `opener_on`): what a rebuild's page opens with.
OpenSealedInBulk = Callable[[Connection, Collection[UUID]], users.OpenSealed]


class ReadModels:
    def __init__(
        self,
        db: Database,
        open_sealed: users.OpenSealed | None = None,
        open_sealed_in_bulk: OpenSealedInBulk | None = None,
        *,
        seal: users.SealOn | None = None,
        digest: users.DigestOf | None = None,
        account_digest: connections.AccountDigest | None = None,
        interpretation_digest: orders.InterpretationDigest | None = None,
        provider_digest: connections.ProviderDigest | None = None,
    ) -> None:
        """`open_sealed` (the key store's `open_on`) opens the values that events hold
        sealed (the users' client_user_ids, for their digests; orders' interpretations).
        `open_sealed_in_bulk` (its `opener_on`), if given, opens a rebuild's page. The
        users rows hold a client_user_id sealed and as the team's keyed digest, never in
        clear: `seal` (the key store's, on the connection) seals one an older event holds
        in clear, `digest` is the team's digest of it (without them, NULLs). The
        connections rows hold the service's `account_digest` of the maker's account id
        (ADR 0031), opened with `open_sealed` to digest it (without it, NULL), and the
        `provider_digest` of (team, provider) (ADR 0032; without it, NULL). The orders
        rows hold an interpretation sealed and as its `interpretation_digest` (issue 29),
        which only an interpretation opened needs (a replay's placeholders are none)."""
        self.db = db
        self.open_sealed_in_bulk = open_sealed_in_bulk
        self.client_user_id_keys = users.ClientUserIdKeys(
            open_sealed=open_sealed or users.ClientUserIdKeys.open_sealed,
            seal=seal or users.ClientUserIdKeys.seal,
            digest=digest,
        )
        self.account_keys = connections.AccountKeys(open_sealed, account_digest, provider_digest)
        # Each context's module declares its handlers (`@handles`); those that open a
        # sealed value are bound to the key store over them.
        self.handlers = {
            **declared_handlers(),
            **users.opening_handlers(self.client_user_id_keys),
            **(
                orders.opening_handlers(open_sealed, interpretation_digest)
                if open_sealed is not None
                else {}
            ),
            **connections.opening_handlers(self.account_keys),
        }

    def project(
        self,
        conn: Connection,
        events: Sequence[DomainEventProtocol[Any]],
        handlers: Handlers | None = None,
    ) -> None:
        """Project `events` on `conn` (with `handlers`: a rebuild's page's own)."""
        if len(events) >= HOLD_FROM and not holding(conn):
            with held_writes(conn):
                self.project(conn, events, handlers)
            return
        if handlers is None:
            handlers = self.handlers
        for event in events:
            handler = handlers.get(type(event))
            if handler is not None:
                handler(conn, event)
        stream_owners.project(conn, events)

    def projects(self, event_class: type) -> bool:
        """Whether an event of this class changes a read model (else a rebuild skips it
        without decoding it)."""
        return event_class in self.handlers or stream_owners.names_owners(event_class)

    def handlers_for(self, conn: Connection, events: Sequence[Any]) -> Handlers:
        """The handlers for a page of a rebuild: the users' sealed values opened with
        their keys read at once for the page."""
        if self.open_sealed_in_bulk is None:
            return self.handlers
        owners = {e.originator_id for e in events if type(e) in users.OPENING}
        # A connection's first event names its user, whose account id it opens to digest
        # (a reconnection's user is read from its row: opened on its own).
        owners |= {e.user_id for e in events if type(e) is connections.CONNECTED_FIRST}
        if not owners:
            return self.handlers
        opener = self.open_sealed_in_bulk(conn, owners)
        keys = replace(self.client_user_id_keys, open_sealed=opener)
        accounts = replace(self.account_keys, open_sealed=opener)
        return {
            **self.handlers,
            **users.opening_handlers(keys),
            **connections.opening_handlers(accounts),
        }

    def rebuild(
        self,
        recorder: ApplicationRecorder,
        mapper: Mapper[Any],
        progress: Callable[[int], None] = lambda n: None,
        page_size: int = 5_000,
        *,
        restart: bool = False,
    ) -> int:
        """Replace every read model with one projected again from the whole log, in
        batches of `page_size` events, resuming an interrupted rebuild unless `restart`
        (see `rebuild.py`). Returns the events this call projected."""
        from healthledger.adapters.persistence.projections.rebuild import rebuild_read_models

        rebuilt = rebuild_read_models(
            self, recorder, mapper, progress=progress, batch_events=page_size, restart=restart
        )
        return rebuilt.events
