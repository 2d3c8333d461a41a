"""The connections context's read models: provider connections, their resource feeds
(each feed's latest historical pull and daily sync) and link tokens."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import (
    connections,
    link_tokens,
    maker_notices,
    resource_feeds,
)
from healthledger.adapters.persistence.engine.statements import (
    CompiledStatement,
    UpdatesByKey,
    insert_of,
)
from healthledger.adapters.persistence.eventstore.sealed_facts import sealed_facts_of
from healthledger.adapters.persistence.projections import Handlers, handles
from healthledger.domain.connections.connection import CONNECTED, PAUSED
from healthledger.domain.connections.connection import DEREGISTERED as CONNECTION_DEREGISTERED
from healthledger.domain.connections.connection import ERROR as CONNECTION_ERROR
from healthledger.domain.connections.connection import Connection as ProviderConnection
from healthledger.domain.connections.link_tokens import LinkToken
from healthledger.domain.connections.notice_intake import NoticeReceipt
from healthledger.domain.connections.resource_feeds import FAILURE as PULL_FAILURE
from healthledger.domain.connections.resource_feeds import IN_PROGRESS as PULL_IN_PROGRESS
from healthledger.domain.connections.resource_feeds import RETRYING as PULL_RETRYING
from healthledger.domain.connections.resource_feeds import SCHEDULED as PULL_SCHEDULED
from healthledger.domain.connections.resource_feeds import SUCCESS as PULL_SUCCESS
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.personal_data import ERASED_PLACEHOLDER
from sqlalchemy import (
    Connection,
    and_,
    bindparam,
    delete,
    func,
    or_,
    select,
    update,
)

# last_attempt_status of a feed whose attempt failed (retrying or failure).
ATTEMPT_FAILED = "failed"

# Compiled once (per set of columns an update sets): a rebuild runs them for every
# event, held and run together (ReadModels.rebuild).
_f = resource_feeds.c
INSERT_CONNECTION = CompiledStatement(
    insert_of(
        connections,
        (
            "connection_id",
            "user_id",
            "team_id",
            "status",
            "created_on",
            "sealed_facts",
            "sealed_availability",
            "provider_digest",
            "error_details",
            "sealed_external_user_id",
            "demo",
            "updated_at",
            "account_digest",
        ),
    )
)
UPDATE_CONNECTION = UpdatesByKey(connections, "connection_id")
INSERT_FEED = CompiledStatement(
    insert_of(
        resource_feeds,
        (
            "feed_id",
            "connection_id",
            "user_id",
            "team_id",
            "sealed_facts",
            "days_with_data",
            "attempts",
            "version",
        ),
    )
)


UPDATE_FEED = UpdatesByKey(
    resource_feeds,
    "feed_id",
    {
        # A pull's first start is kept over its retries.
        "started_at": lambda bound: func.coalesce(_f.started_at, bound),
    },
)
INSERT_LINK_TOKEN = CompiledStatement(
    insert_of(
        link_tokens,
        (
            "token_id",
            "team_id",
            "user_id",
            "environment",
            "token_hash",
            "sealed_facts",
            "on_error",
            "on_close",
            "issued_at",
        ),
    )
)
UPDATE_LINK_TOKEN = UpdatesByKey(link_tokens, "token_id")

# -- provider connections -------------------------------------------------------------

# Opens a user's sealed value on the recording transaction's connection (the key store's
# `open_on`): (conn, user_id, sealed) -> the value, or None once the user's key is gone.
OpenSealed = Callable[[Connection, UUID, str], Any]
# The service's keyed digest of a maker's account id: (provider, account id) -> hex.
AccountDigest = Callable[[str, str], str]
# The service's keyed digest of a connection's provider: (team, provider) -> hex.
ProviderDigest = Callable[[UUID, str], str]


@dataclass(frozen=True)
class AccountKeys:
    """What the connections projection computes `account_digest` with (ADR 0031): the
    person's sealed account id opened only to digest it; and `provider_digest` (ADR
    0032), from the provider the event reads. Without them (a replay for debugging),
    NULL."""

    open_sealed: OpenSealed | None = None
    digest: AccountDigest | None = None
    provider_digest: ProviderDigest | None = None


def account_digest_of(conn: Connection, e: Any, accounts: AccountKeys) -> str | None:
    """The digest of the account a Created or Reconnected names; None when it names none,
    or the user's key is gone (a rebuild meets an erased user: its Erased event, later,
    deletes the row)."""
    sealed = e.sealed_external_user_id
    if sealed is None or accounts.open_sealed is None or accounts.digest is None:
        return None
    stream_owner = e.user_id if isinstance(e, FOUNDING_CONNECTION) else None
    if stream_owner is None:
        ((stream_owner,),) = CONNECTION_OWNER.rows(conn, {"connection_id": e.originator_id})
    opened = accounts.open_sealed(conn, stream_owner, sealed)
    if opened is None:
        return None
    provider = _provider_of(conn, e, stream_owner, accounts.open_sealed)
    return None if provider is None else accounts.digest(provider, str(opened))


def _provider_of(conn: Connection, e: Any, owner: UUID, open_sealed: OpenSealed) -> str | None:
    """The connection's provider: the Created event's own, or (a reconnection names none)
    its row's sealed facts opened; None once the key is gone."""
    if isinstance(e, FOUNDING_CONNECTION):
        return str(e.provider)
    ((sealed,),) = CONNECTION_FACTS.rows(conn, {"connection_id": e.originator_id})
    facts = None if sealed is None else open_sealed(conn, owner, sealed)
    return None if facts is None else str(facts["provider"])


CONNECTION_OWNER = CompiledStatement(
    select(connections.c.user_id).where(connections.c.connection_id == bindparam("connection_id"))
)
CONNECTION_FACTS = CompiledStatement(
    select(connections.c.sealed_facts).where(
        connections.c.connection_id == bindparam("connection_id")
    )
)


def provider_digest_of(e: Any, accounts: AccountKeys) -> str | None:
    """The digest of a Created event's provider; None without the digest (a replay), or
    for a user erased before its records were read (the provider is the placeholder)."""
    if accounts.provider_digest is None or e.provider == ERASED_PLACEHOLDER:
        return None
    return accounts.provider_digest(e.team_id, e.provider)


# The event that founds a connection, naming its user (a rebuild reads its key at once).
CONNECTED_FIRST = ProviderConnection.Created
# It and its version 1 (its facts in clear: a rebuild of a log the start has not redacted
# yet makes its row without sealed facts, which the redaction gives it, ADR 0032).
FOUNDING_CONNECTION = (ProviderConnection.Created, ProviderConnection.CreatedV1)


def opening_handlers(accounts: AccountKeys) -> Handlers:
    """The connection handlers bound to the key store's opener and the account digest
    (`ReadModels` puts them over the declared ones)."""
    return {
        ProviderConnection.Created: partial(connection_connected, accounts=accounts),
        ProviderConnection.CreatedV1: partial(connection_connected, accounts=accounts),
        ProviderConnection.Reconnected: partial(connection_connected, accounts=accounts),
        ProviderConnection.ReconnectedV1: partial(connection_connected, accounts=accounts),
    }


@handles(
    ProviderConnection.Created,
    ProviderConnection.CreatedV1,
    ProviderConnection.Reconnected,
    ProviderConnection.ReconnectedV1,
)
def connection_connected(conn: Connection, e: Any, accounts: AccountKeys = AccountKeys()) -> None:
    values = {
        "status": CONNECTED,
        "created_on": e.timestamp,
        "error_details": None,
        "sealed_external_user_id": e.sealed_external_user_id,
        "demo": e.demo,
        "updated_at": e.timestamp,
        "account_digest": account_digest_of(conn, e, accounts),
    }
    if isinstance(e, FOUNDING_CONNECTION):
        # The log's own sealed facts (the mapper's, ADR 0032): a rebuild makes the same.
        INSERT_CONNECTION.execute(
            conn,
            {
                "connection_id": e.originator_id,
                "user_id": e.user_id,
                "team_id": e.team_id,
                "sealed_facts": sealed_facts_of(e),
                "sealed_availability": None,
                "provider_digest": provider_digest_of(e, accounts),
                **values,
            },
        )
    else:
        UPDATE_CONNECTION.execute(
            conn, e.originator_id, {**values, "sealed_availability": sealed_facts_of(e)}
        )


@handles(ProviderConnection.Deregistered)
def connection_deregistered(conn: Connection, e: Any) -> None:
    UPDATE_CONNECTION.execute(
        conn, e.originator_id, {"status": CONNECTION_DEREGISTERED, "updated_at": e.timestamp}
    )


@handles(ProviderConnection.Errored)
def connection_errored(conn: Connection, e: Any) -> None:
    details = {
        "error_type": e.error_type,
        "error_message": e.error_message,
        "errored_at": e.timestamp.isoformat(),
    }
    UPDATE_CONNECTION.execute(
        conn,
        e.originator_id,
        {"status": CONNECTION_ERROR, "error_details": details, "updated_at": e.timestamp},
    )


@handles(ProviderConnection.Paused, ProviderConnection.PausedByTeam, ProviderConnection.Resumed)
def connection_status(conn: Connection, e: Any) -> None:
    paused = (ProviderConnection.Paused, ProviderConnection.PausedByTeam)
    status = PAUSED if isinstance(e, paused) else CONNECTED
    UPDATE_CONNECTION.execute(conn, e.originator_id, {"status": status, "updated_at": e.timestamp})


# -- resource feeds and their pulls ---------------------------------------------------


@handles(ResourceFeed.Created, ResourceFeed.CreatedV1)
def feed_created(conn: Connection, e: ResourceFeed.Created | ResourceFeed.CreatedV1) -> None:
    INSERT_FEED.execute(
        conn,
        {
            "feed_id": e.originator_id,
            "connection_id": e.connection_id,
            "user_id": e.user_id,
            "team_id": e.team_id,
            "sealed_facts": sealed_facts_of(e),
            "days_with_data": 0,
            "attempts": 0,
            "version": e.originator_version,
        },
    )


def update_feed(conn: Connection, e: Any, **values: Any) -> None:
    UPDATE_FEED.execute(conn, e.originator_id, {"version": e.originator_version, **values})


@handles(ResourceFeed.PullScheduled, ResourceFeed.PullScheduledV1)
def pull_scheduled(
    conn: Connection, e: ResourceFeed.PullScheduled | ResourceFeed.PullScheduledV1
) -> None:
    update_feed(
        conn,
        e,
        status=PULL_SCHEDULED,
        # The log's own ciphertext (a rebuild makes the same row); an old version's
        # window is given by the start's redaction (old_versions.FACTS_ROW).
        sealed_window=sealed_facts_of(e),
        scheduled_at=e.timestamp,
        started_at=None,
        ended_at=None,
        days_with_data=0,
        release=e.release,
        trace_id=e.trace_id,
        error_code=None,
        attempts=0,
        due_at=e.timestamp,
        synced_at=None,
    )


@handles(ResourceFeed.PullStarted)
def pull_started(conn: Connection, e: ResourceFeed.PullStarted) -> None:
    update_feed(
        conn,
        e,
        status=PULL_IN_PROGRESS,
        # Kept if set (UPDATE_FEED's expression): the first attempt's start.
        started_at=e.timestamp,
        attempts=e.attempt,
        due_at=None,
        last_attempt_at=e.timestamp,
        last_attempt_status=PULL_IN_PROGRESS,
    )


@handles(ResourceFeed.PullRetrying)
def pull_retrying(conn: Connection, e: ResourceFeed.PullRetrying) -> None:
    update_feed(
        conn,
        e,
        status=PULL_RETRYING,
        error_code=e.error_code,
        due_at=e.retry_at,
        last_attempt_status=ATTEMPT_FAILED,
    )


@handles(ResourceFeed.PullSucceeded, ResourceFeed.PullSucceededV1)
def pull_succeeded(
    conn: Connection, e: ResourceFeed.PullSucceeded | ResourceFeed.PullSucceededV1
) -> None:
    update_feed(
        conn,
        e,
        status=PULL_SUCCESS,
        ended_at=e.timestamp,
        days_with_data=e.days_with_data,
        error_code=None,
        due_at=None,
        synced_at=e.timestamp,
        last_attempt_status=PULL_SUCCESS,
    )


@handles(ResourceFeed.PullFailed)
def pull_failed(conn: Connection, e: ResourceFeed.PullFailed) -> None:
    update_feed(
        conn,
        e,
        status=PULL_FAILURE,
        ended_at=e.timestamp,
        error_code=e.error_code,
        due_at=None,
        last_attempt_status=ATTEMPT_FAILED,
    )


@handles(ResourceFeed.DailySynced, ResourceFeed.DailySyncedV1)
def daily_synced(
    conn: Connection, e: ResourceFeed.DailySynced | ResourceFeed.DailySyncedV1
) -> None:
    update_feed(
        conn,
        e,
        synced_at=e.timestamp,
        last_attempt_at=e.timestamp,
        last_attempt_status=PULL_SUCCESS,
    )


# -- link tokens ----------------------------------------------------------------------


@handles(LinkToken.Issued, LinkToken.IssuedV2, LinkToken.IssuedV1)
def link_token_issued(
    conn: Connection, e: LinkToken.Issued | LinkToken.IssuedV2 | LinkToken.IssuedV1
) -> None:
    # The redirect_url and the maker only as the log holds them: sealed with the user's
    # key (ADR 0032). An old version met by a rebuild before the start's redaction leaves
    # them empty (version 1) or gives only the URL (version 2); the redaction gives them.
    INSERT_LINK_TOKEN.execute(
        conn,
        {
            "token_id": e.originator_id,
            "team_id": e.team_id,
            "user_id": e.user_id,
            "environment": e.environment,
            "token_hash": e.token_hash,
            "sealed_facts": sealed_facts_of(e),
            "on_error": e.on_error,
            "on_close": e.on_close,
            "issued_at": e.timestamp,
        },
    )


@handles(LinkToken.Consumed, LinkToken.ConsumedV1)
def link_token_consumed(conn: Connection, e: LinkToken.Consumed | LinkToken.ConsumedV1) -> None:
    # The maker connected, as the log holds it: sealed (None for a version 1 until the
    # start's redaction gives it).
    UPDATE_LINK_TOKEN.execute(
        conn,
        e.originator_id,
        {"consumed_at": e.timestamp, "sealed_consumption": sealed_facts_of(e)},
    )


# -- the makers' notices not handled yet (the pull worker's queue) --------------------

INSERT_NOTICE = CompiledStatement(
    insert_of(maker_notices, ("notice_id", "connection_id", "received_at", "due_at"))
)
NOTICE_TAKEN = CompiledStatement(
    update(maker_notices)
    .where(maker_notices.c.notice_id == bindparam("row_key"))
    .values(due_at=bindparam("due_at"))
)
NOTICE_HANDLED = CompiledStatement(
    delete(maker_notices).where(maker_notices.c.notice_id == bindparam("row_key"))
)


# A v2 receipt read before the start redacts it (a rebuild of a database not started yet).
@handles(NoticeReceipt.Received, NoticeReceipt.ReceivedV2)
def notice_received(conn: Connection, e: NoticeReceipt.Received | NoticeReceipt.ReceivedV2) -> None:
    INSERT_NOTICE.execute(
        conn,
        {
            "notice_id": e.originator_id,
            "connection_id": e.connection_id,
            "received_at": e.timestamp,
            "due_at": e.timestamp,
        },
    )


@handles(NoticeReceipt.Taken)
def notice_taken(conn: Connection, e: NoticeReceipt.Taken) -> None:
    """Due again when the taker's lease ends (it died, or the maker failed the sync)."""
    NOTICE_TAKEN.execute(conn, {"row_key": e.originator_id, "due_at": e.until})


@handles(NoticeReceipt.Handled)
def notice_handled(conn: Connection, e: NoticeReceipt.Handled) -> None:
    NOTICE_HANDLED.execute(conn, {"row_key": e.originator_id})


# -- rows written before revisions 0017 and 0022 -------------------------------------

_c = connections.c
UNDIGESTED = (
    select(
        _c.connection_id,
        _c.user_id,
        _c.team_id,
        _c.sealed_facts,
        _c.sealed_external_user_id,
        _c.account_digest,
        _c.provider_digest,
    )
    .where(
        or_(
            and_(_c.account_digest.is_(None), _c.sealed_external_user_id.is_not(None)),
            and_(_c.provider_digest.is_(None), _c.sealed_facts.is_not(None)),
        ),
        _c.connection_id > bindparam("after"),
    )
    .order_by(_c.connection_id)
)
SET_DIGESTS = CompiledStatement(
    update(connections)
    .where(_c.connection_id == bindparam("cid"))
    .values(
        account_digest=func.coalesce(_c.account_digest, bindparam("account")),
        provider_digest=func.coalesce(_c.provider_digest, bindparam("provider")),
    )
)
FILL_BATCH = 500


def fill_connection_digests(
    db: Database,
    open_sealed: Callable[[UUID, str], Any],
    accounts: AccountKeys,
    batch: int = FILL_BATCH,
) -> int:
    """At start: give each connections row written before revision 0017 its account
    digest, and each one written before revision 0022 its provider digest (the
    migrations cannot: they open no key). `open_sealed` opens the person's sealed values
    (None: the key is gone). Several processes may run it at once: a digest is set only
    while still NULL. Returns the rows set; on an up-to-date database, one query that
    finds none."""
    assert accounts.digest is not None and accounts.provider_digest is not None
    filled, after = 0, UUID(int=0)
    while True:
        with db.read() as conn:
            pending = conn.execute(UNDIGESTED.limit(batch), {"after": after}).all()
        if not pending:
            return filled
        after = pending[-1].connection_id
        values = []
        for row in pending:
            facts = None if row.sealed_facts is None else open_sealed(row.user_id, row.sealed_facts)
            if facts is None or facts["provider"] == ERASED_PLACEHOLDER:
                continue
            provider = str(facts["provider"])
            account = row.account_digest
            if account is None and row.sealed_external_user_id is not None:
                opened = open_sealed(row.user_id, row.sealed_external_user_id)
                account = None if opened is None else accounts.digest(provider, str(opened))
            values.append(
                {
                    "cid": row.connection_id,
                    "account": account,
                    "provider": accounts.provider_digest(row.team_id, provider),
                }
            )
        if values:
            with db.write() as conn:
                for value in values:
                    SET_DIGESTS.execute(conn, value)
        filled += len(values)
        if len(pending) < batch:
            return filled
