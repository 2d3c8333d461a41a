"""The read side of unmatched results: the team's orders as the matcher sees them (their
patients and tests opened with their users' keys), and the team's listing of unmatched
results with its filters (ADR 0040).

A search by name or date of birth opens each candidate row with its result's own key and
compares the opened patient: there is no clear column to search, by design. A listing
reads the team's rows that pass the clear filters (state, decision code, lab, dates),
newest first, then pages them with a keyset cursor (created_at, result_id)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import orders, teams, unmatched_results
from healthledger.adapters.persistence.keys.key_store import KeyStore
from healthledger.domain.labs.orders import OrderedTest
from healthledger.domain.labs.result_matching import OrderFacts, Patient
from healthledger.domain.labs.unmatched_results import RESOLVED
from sqlalchemy import ColumnElement, select


@dataclass(frozen=True)
class UnmatchedFilters:
    """The listing's filters; `search` is matched after opening."""

    status: str | None = None
    decision_code: str | None = None
    lab_id: int | None = None
    created_from: datetime | None = None
    created_until: datetime | None = None
    search: str | None = None


@dataclass(frozen=True)
class UnmatchedPage:
    """One page of result ids, newest first; how many pass the filters in all; the
    position (created_at, result_id) of the page's last when more follow."""

    result_ids: list[UUID]
    total: int
    last: tuple[datetime, UUID] | None


class UnmatchedResultQueries:
    def __init__(self, db: Database, key_store: KeyStore) -> None:
        self.db = db
        self.key_store = key_store

    def undecided_of_team(self, team_id: UUID) -> list[UUID]:
        """The team's results still waiting for a decision (pending or unsure)."""
        u = unmatched_results.c
        query = select(u.result_id).where(u.team_id == team_id, u.status != RESOLVED)
        with self.db.read() as conn:
            return list(conn.execute(query).scalars())

    def deleted_teams_with_undecided(self) -> list[UUID]:
        """Deleted teams that still have results waiting for a decision: recorded after
        the deletion read them (a request in flight as it committed)."""
        u = unmatched_results.c
        query = (
            select(teams.c.team_id)
            .where(teams.c.deleted_at.is_not(None))
            .where(
                select(u.result_id)
                .where(u.team_id == teams.c.team_id, u.status != RESOLVED)
                .exists()
            )
        )
        with self.db.read() as conn:
            return list(conn.execute(query).scalars())

    def orders_of_team(self, team_id: UUID) -> list[OrderFacts]:
        """The team's orders, newest first, each with its patient and test opened with its
        user's key (None where the key is destroyed)."""
        o = orders.c
        query = (
            select(
                o.order_id,
                o.user_id,
                o.lab_id,
                o.detailed_status,
                o.sample_id,
                o.sealed_patient_details,
                o.sealed_lab_test,
            )
            .where(o.team_id == team_id)
            .order_by(o.created_at.desc(), o.order_id.desc())
        )
        found = []
        with self.db.read() as conn:
            rows = conn.execute(query).all()
            opener = self.key_store.opener_on(conn, {row.user_id for row in rows})
            for row in rows:
                details = opener(conn, row.user_id, row.sealed_patient_details)
                test = (
                    None
                    if row.sealed_lab_test is None
                    else OrderedTest.of_opened(opener(conn, row.user_id, row.sealed_lab_test))
                )
                found.append(
                    OrderFacts(
                        order_id=row.order_id,
                        user_id=row.user_id,
                        lab_id=row.lab_id,
                        status=row.detailed_status,
                        sample_id=row.sample_id,
                        patient=Patient.of_stored(details) if isinstance(details, dict) else None,
                        test=test,
                    )
                )
        return found

    def page(
        self,
        team_id: UUID,
        filters: UnmatchedFilters,
        after: tuple[datetime, UUID] | None,
        limit: int,
    ) -> UnmatchedPage:
        """The team's unmatched results that pass the filters, after the position
        `after`, `limit` of them."""
        u = unmatched_results.c
        where: list[ColumnElement[bool]] = [u.team_id == team_id]
        if filters.status is not None:
            where.append(u.status == filters.status)
        if filters.decision_code is not None:
            where.append(u.decision_code == filters.decision_code)
        if filters.lab_id is not None:
            where.append(u.lab_id == filters.lab_id)
        if filters.created_from is not None:
            where.append(u.created_at >= filters.created_from)
        if filters.created_until is not None:
            where.append(u.created_at <= filters.created_until)
        query = (
            select(u.result_id, u.created_at, u.sealed_result)
            .where(*where)
            .order_by(u.created_at.desc(), u.result_id.desc())
        )
        with self.db.read() as conn:
            rows = list(conn.execute(query).all())
            if filters.search is not None:
                rows = self._searched(conn, rows, filters.search)
        total = len(rows)
        if after is not None:
            rows = [r for r in rows if (r.created_at, r.result_id) < after]
        taken = rows[:limit]
        last = (taken[-1].created_at, taken[-1].result_id) if len(rows) > limit else None
        return UnmatchedPage([r.result_id for r in taken], total, last)

    def _searched(self, conn: Any, rows: list[Any], text: str) -> list[Any]:
        """The rows whose patient, opened with the result's key, has that first name,
        last name or date of birth (a resolved result's are destroyed: never found)."""
        sealed = [r for r in rows if r.sealed_result is not None]
        opener = self.key_store.opener_on(conn, {r.result_id for r in sealed})
        found = []
        for row in sealed:
            opened = opener(conn, row.result_id, row.sealed_result)
            patient = Patient.of_stored(opened["patient"]) if isinstance(opened, dict) else None
            if patient is not None and patient.matches_search(text):
                found.append(row)
        return found
