"""The read side of the makers' notices (ADR 0031): the connections a maker's account id
names, found by the service's keyed digest, and the notices a worker may take now."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import connections, maker_notices
from healthledger.adapters.persistence.engine.statements import CompiledStatement
from healthledger.adapters.persistence.keys.maker_accounts import AccountDigests
from healthledger.domain.connections.connection import DEREGISTERED
from sqlalchemy import bindparam, select

_c, _n = connections.c, maker_notices.c
# Live connections of an account (the digest names the provider too).
CONNECTIONS_OF_ACCOUNT = CompiledStatement(
    select(_c.connection_id)
    .where(_c.account_digest == bindparam("digest"), _c.status != DEREGISTERED)
    .order_by(_c.connection_id)
)
DUE_NOTICES = CompiledStatement(
    select(_n.notice_id)
    .where(_n.due_at <= bindparam("now", type_=_n.due_at.type))
    .order_by(_n.due_at, _n.notice_id)
    .limit(bindparam("limit"))
)


class MakerNoticeQueries:
    def __init__(self, db: Database, digests: AccountDigests) -> None:
        self.db = db
        self.digests = digests

    def connections_of(self, provider: str, account_id: str) -> list[UUID]:
        """In the maker's request: one indexed read."""
        digest = self.digests.account(provider, account_id)
        with self.db.read() as conn:
            return [row[0] for row in CONNECTIONS_OF_ACCOUNT.rows(conn, {"digest": digest})]

    def due_notices(self, now: datetime, limit: int) -> list[UUID]:
        with self.db.read() as conn:
            return [row[0] for row in DUE_NOTICES.rows(conn, {"now": now, "limit": limit})]

    def pending_count(self) -> int:
        """Notices recorded and not handled yet (taken ones included)."""
        with self.db.read() as conn:
            return len(conn.execute(select(_n.notice_id)).all())
