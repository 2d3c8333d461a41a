"""Bulk operations of the link API (issue 34; the official clients' `link.bulk_*` and
`link.list_bulk_ops`): a team asks for one operation over many of its users' connections
of one provider, and the operation is a tracked, resumable job.

requested -> progressed (a batch at a time) -> ended (success, or failure when every item
failed). The job is its own stream (`BulkOperation`, owned by its team, as a team's
settings are): its events hold user ids and counts only. Each batch's effects (the pulls
scheduled) and the batch's `Progressed` are saved in one transaction, so a job cut off by a
crash or a restart is resumed from the items not yet done, by whichever worker runs it
next, and an item is never done twice. Two workers racing on a batch: one save wins, the
other stands down (its batch's effects are not saved).

A team's operations are listed by `BulkOperationIndex`, one stream per team naming each
operation when it is requested (in the same transaction): the list of a team, and what is
due, are read from it without a read model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid4, uuid5

from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError
from healthledger.domain.audited import Audited
from healthledger.domain.connections.connecting import Connections
from healthledger.domain.connections.connection import Connection, NotConnected
from healthledger.domain.connections.provider_tokens import (
    GrantToKeep,
    ProviderTokens,
    ProviderTokenStore,
)
from healthledger.domain.connections.providers import OAuthGrant
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import ConcurrentChange, InvalidRequest, LedgerError

HISTORICAL_TRIGGER = "link_bulk_historical_trigger"
IMPORT = "link_bulk_import"
PAUSE = "link_bulk_pause"
EXPORT = "link_bulk_export"
IN_PROGRESS = "in_progress"
SUCCESS = "success"
FAILURE = "failure"
# Items a batch does in one transaction: small enough to keep a transaction short, and
# a crash costs at most this many items' work again.
BATCH = 50
# The most users one operation names (a bigger job is several operations).
MAX_ITEMS = 10_000


class BulkOperationNotFound(LedgerError):
    def __init__(self) -> None:
        super().__init__("No bulk operation of this team has this id.")


class BulkOperation(Audited, created_event_name="Requested"):
    TOPIC = "healthledger:BulkOperation"
    USER_STREAM = None

    class Event(Audited.Event):
        pass

    class Requested(Event, Aggregate.Created):
        TOPIC = "healthledger:BulkOperation.Requested.v1"
        team_id: UUID
        environment: str
        operation: str
        provider: str
        user_ids: list[str]

    Created = Requested

    class RecipesSealed(Event):
        """An import's connections (the maker's tokens: secrets), each sealed with its
        user's key, recorded with the request."""

        TOPIC = "healthledger:BulkOperation.RecipesSealed.v1"
        sealed: dict[str, str]

        def apply(self, job: BulkOperation) -> None:
            job.sealed_recipes.update(self.sealed)

    class Progressed(Event):
        """A batch done: the users whose item was done, and those it failed for."""

        TOPIC = "healthledger:BulkOperation.Progressed.v1"
        done: list[str]
        failed: list[str]

        def apply(self, job: BulkOperation) -> None:
            job.done.extend(self.done)
            job.failed.extend(self.failed)

    class Ended(Event):
        TOPIC = "healthledger:BulkOperation.Ended.v1"
        status: str

        def apply(self, job: BulkOperation) -> None:
            job.status = self.status
            job.ended_at = self.timestamp

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        team_id: UUID,
        environment: str,
        operation: str,
        provider: str,
        user_ids: list[str],
    ) -> None:
        self.team_id: UUID = team_id
        self.environment: str = environment
        self.operation: str = operation
        self.provider: str = provider
        self.user_ids: list[str] = user_ids
        self.sealed_recipes: dict[str, str] = {}
        self.done: list[str] = []
        self.failed: list[str] = []
        self.status: str = IN_PROGRESS
        self.ended_at: datetime | None = None

    @property
    def pending(self) -> list[str]:
        handled = {*self.done, *self.failed}
        return [u for u in self.user_ids if u not in handled]

    def progress(
        self, ctx: CommandContext, now: datetime, done: list[str], failed: list[str]
    ) -> None:
        self.record(ctx, now, self.Progressed, done=done, failed=failed)
        if not self.pending:
            status = FAILURE if self.user_ids and not self.done else SUCCESS
            self.record(ctx, now, self.Ended, status=status)

    def view(self) -> dict[str, Any]:
        """The official clients' BulkOp."""
        return {
            "id": str(self.id),
            "type": self.operation,
            "status": self.status,
            "provider": self.provider,
            "pending": len(self.pending),
            "processed": len(self.done) + len(self.failed),
            "failed_user_ids": list(self.failed),
            "started_at": self.created_on,
            "ended_at": self.ended_at,
        }


def index_id(team_id: UUID) -> UUID:
    return uuid5(NAMESPACE_URL, f"healthledger:bulk-operations:{team_id}")


class BulkOperationIndex(Audited, created_event_name="Opened"):
    """The bulk operations of one team, in the order they were requested."""

    TOPIC = "healthledger:BulkOperationIndex"
    USER_STREAM = None

    class Event(Audited.Event):
        pass

    class Opened(Event, Aggregate.Created):
        TOPIC = "healthledger:BulkOperationIndex.Opened.v1"
        team_id: UUID

    Created = Opened

    class Added(Event):
        TOPIC = "healthledger:BulkOperationIndex.Added.v1"
        operation_id: UUID

        def apply(self, index: BulkOperationIndex) -> None:
            index.operation_ids.append(self.operation_id)

    def __init__(
        self, *, id: UUID, timestamp: datetime, actor: str, request_id: str, team_id: UUID
    ) -> None:
        self.team_id: UUID = team_id
        self.operation_ids: list[UUID] = []


# The OAuth client a team's imported grants are kept under (its custom client's, else the
# service's), None when there is none; the resources the catalog offers of a provider.
ClientOf = Callable[[UUID, str], str | None]
ResourcesOf = Callable[[str], Sequence[str]]


class BulkOperations:
    def __init__(
        self,
        connections: Connections,
        provider_tokens: ProviderTokenStore,
        client_of: ClientOf,
        resources_of: ResourcesOf,
        batch: int = BATCH,
    ) -> None:
        self.connections = connections
        self.ledger = connections.ledger
        self.clock = connections.clock
        self.users = connections.users
        self.pulls = connections.pulls
        self.vault = connections.vault
        self.provider_tokens = provider_tokens
        self.client_of = client_of
        self.resources_of = resources_of
        self.batch = batch

    def request(
        self,
        ctx: CommandContext,
        team_id: UUID,
        environment: str,
        operation: str,
        provider: str,
        user_ids: Sequence[UUID],
        recipes: Mapping[UUID, dict[str, Any]] | None = None,
    ) -> BulkOperation:
        """A new operation over `user_ids` (each once, in order), listed for the team;
        an import's `recipes` (user -> the maker's grant) are sealed with each user's key,
        for the team's live users only (the others fail)."""
        if not user_ids:
            raise InvalidRequest("user_ids must name at least one user.", "user_ids")
        if len(user_ids) > MAX_ITEMS:
            raise InvalidRequest(f"user_ids names more than {MAX_ITEMS} users.", "user_ids")
        now = self.clock()
        job_id = uuid4()
        for _ in range(3):  # another request of the team may list its own first
            job = BulkOperation.new(
                ctx,
                now,
                id=job_id,
                team_id=team_id,
                environment=environment,
                operation=operation,
                provider=provider,
                user_ids=list(dict.fromkeys(str(u) for u in user_ids)),
            )
            if recipes:
                job.record(
                    ctx, now, BulkOperation.RecipesSealed, sealed=self._sealed(team_id, recipes)
                )
            index = self.ledger.find(index_id(team_id))
            if not isinstance(index, BulkOperationIndex):
                index = BulkOperationIndex.new(ctx, now, id=index_id(team_id), team_id=team_id)
            index.record(ctx, now, BulkOperationIndex.Added, operation_id=job.id)
            try:
                self.ledger.save(job, index)
                return job
            except IntegrityError:
                continue
        raise ConcurrentChange()

    def _sealed(self, team_id: UUID, recipes: Mapping[UUID, dict[str, Any]]) -> dict[str, str]:
        sealed = {}
        for user_id, recipe in recipes.items():
            try:
                self.users.load_live(team_id, user_id)
            except LedgerError:
                continue  # no key is made for a user that is not the team's
            sealed[str(user_id)] = self.vault.seal(user_id, recipe)
        return sealed

    def listed(self, team_id: UUID) -> list[BulkOperation]:
        """The team's operations, the newest first."""
        index = self.ledger.find(index_id(team_id))
        if not isinstance(index, BulkOperationIndex):
            return []
        found = [self.ledger.find(op_id) for op_id in reversed(index.operation_ids)]
        return [job for job in found if isinstance(job, BulkOperation)]

    def find(self, team_id: UUID, operation_id: UUID) -> BulkOperation:
        job = self.ledger.find(operation_id)
        if not isinstance(job, BulkOperation) or job.team_id != team_id:
            raise BulkOperationNotFound()
        return job

    def run(self, operation_id: UUID, batches: int | None = None) -> BulkOperation | None:
        """Do the pending items of an operation, a batch per transaction (at most
        `batches`; None: to the end). None when another worker won a batch."""
        job = self.ledger.find(operation_id)
        ran = 0
        while isinstance(job, BulkOperation) and job.status == IN_PROGRESS:
            if batches is not None and ran >= batches:
                return job
            ctx = CommandContext(actor=f"bulk_operation:{job.id}", request_id=f"bulk-{job.id}")
            effects, kept, done, failed = self._batch(ctx, job, job.pending[: self.batch])
            job.progress(ctx, self.clock(), done, failed)
            try:
                with ExitStack() as grants:
                    for connection_id, grant in kept:
                        grants.enter_context(self.provider_tokens.kept_with(connection_id, grant))
                    self.ledger.save(job, *effects)
            except IntegrityError:
                return None  # another worker did this batch
            ran += 1
            job = self.ledger.find(operation_id)
        return job if isinstance(job, BulkOperation) else None

    def run_due(self, team_ids: Sequence[UUID]) -> int:
        """Resume every operation of these teams still in progress; how many ran."""
        ran = 0
        for team_id in team_ids:
            for job in self.listed(team_id):
                if job.status == IN_PROGRESS:
                    self.run(job.id)
                    ran += 1
        return ran

    def _batch(
        self, ctx: CommandContext, job: BulkOperation, items: list[str]
    ) -> tuple[list[Any], list[tuple[UUID, GrantToKeep]], list[str], list[str]]:
        """The pending effects of a batch, the grants to keep with them, and the users
        done and failed."""
        effects: list[Any] = []
        kept: list[tuple[UUID, GrantToKeep]] = []
        done: list[str] = []
        failed: list[str] = []
        now = self.clock()
        for item in items:
            user_id = UUID(item)
            try:
                user = self.users.load_live(job.team_id, user_id)
                if job.operation == IMPORT:
                    connection, grant = self._imported(ctx, now, job, user_id)
                    kept.append((connection.id, grant))
                    resources: Sequence[str] = self.resources_of(job.provider)
                elif job.operation == PAUSE:
                    connection = self._connected(job, user_id)
                    connection.pause_by_team(ctx, now)
                    effects.append(connection)
                    done.append(item)
                    continue
                else:
                    connection = self._connected(job, user_id)
                    resources = sorted(connection.resource_availability)
            except (LedgerError, LookupError):
                failed.append(item)  # not the team's, not live, not connected, no grant
                continue
            effects.extend(
                [connection, *self.pulls.schedule(ctx, connection, user, resources, now)]
            )
            done.append(item)
        return effects, kept, done, failed

    def _connected(self, job: BulkOperation, user_id: UUID) -> Connection:
        connection = self.ledger.find(self.pulls.streams.connection_id(user_id, job.provider))
        if not isinstance(connection, Connection) or not connection.is_live:
            raise NotConnected()
        return connection

    def _imported(
        self, ctx: CommandContext, now: datetime, job: BulkOperation, user_id: UUID
    ) -> tuple[Connection, GrantToKeep]:
        """The user's connection made (or made again) with the recipe's grant, unsaved."""
        sealed = job.sealed_recipes.get(str(user_id))
        recipe = None if sealed is None else self.vault.open(user_id, sealed)
        client_id = self.client_of(job.team_id, job.provider)
        if not isinstance(recipe, dict) or client_id is None:
            raise NotConnected()
        scopes = recipe.get("oauth_scopes")
        tokens = ProviderTokens(
            access_token=recipe["access_token"],
            refresh_token=recipe["refresh_token"],
            expires_at=datetime.fromtimestamp(recipe["expires_at"], UTC),
            scope=" ".join(scopes) if scopes else None,
        )
        grant = OAuthGrant(recipe["provider_id"], client_id, tokens)
        adapter = self.pulls.adapter_for(job.provider, False)
        availability = adapter.availability(self.resources_of(job.provider), grant)
        connection = self.connections.connected(
            ctx,
            now,
            job.team_id,
            user_id,
            job.provider,
            self.vault.seal(user_id, recipe["provider_id"]),
            availability,
            demo=False,
        )
        return connection, GrantToKeep(user_id, job.team_id, job.provider, client_id, tokens)

    def record_export(
        self,
        ctx: CommandContext,
        team_id: UUID,
        environment: str,
        provider: str,
        user_ids: Sequence[UUID],
    ) -> BulkOperation:
        """An export of these users' grants to the team (secrets leaving the service),
        recorded as a job done at once, naming whose grants left."""
        job = self.request(ctx, team_id, environment, EXPORT, provider, user_ids)
        job.progress(ctx, self.clock(), [str(u) for u in user_ids], [])
        self.ledger.save(job)
        return job
