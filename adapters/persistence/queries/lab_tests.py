"""The read side of lab tests: a team's own (the `lab_tests` read model) and the shared
demo tests of the reference data (team_id None, usable by every team). Implements the
`LabTestLookup` port that orders read lab tests through."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import lab_tests
from healthledger.adapters.reference.labs.catalog import ReferenceLabCatalog
from healthledger.domain.labs.catalog import LabTestView
from healthledger.domain.labs.lab_tests import LabTest
from sqlalchemy import select


@dataclass(frozen=True)
class LabTestRow:
    """A lab test as the API answers it: the port's view and what else it shows."""

    view: LabTestView
    description: str | None
    fasting: bool
    # None for a shared demo test, which is reference data (made by no one, at no time).
    created_at: datetime | None
    # When its name or state last changed (LabTest.Updated); None: as created.
    updated_at: datetime | None = None

    @classmethod
    def of(cls, test: LabTest) -> LabTestRow:
        """The row the lab_tests projection makes of `test` (its events so far)."""
        return cls(
            view=test.view(),
            description=test.description,
            fasting=test.fasting,
            created_at=test.created_on,
            updated_at=test.updated_at,
        )

    @property
    def last_updated(self) -> datetime | None:
        """When it last changed: its creation until its team changed it."""
        return self.updated_at or self.created_at

    @property
    def auto_generated(self) -> bool:
        """Shared demo tests are the service's own, not a team's."""
        return self.view.team_id is None


def _row(r: Any) -> LabTestRow:
    return LabTestRow(
        view=LabTestView(
            id=r.lab_test_id,
            team_id=r.team_id,
            name=r.name,
            method=r.method,
            lab_id=r.lab_id,
            marker_ids=tuple(r.marker_ids),
            active=r.active,
        ),
        description=r.description,
        fasting=r.fasting,
        created_at=r.created_at,
        updated_at=r.updated_at,
    )


class LabTestQueries:
    def __init__(self, db: Database, catalog: ReferenceLabCatalog) -> None:
        self.db = db
        self.catalog = catalog
        self._demo = [
            LabTestRow(
                view=view,
                description=catalog.demo_description(view.id),
                fasting=False,
                created_at=None,
            )
            for view in catalog.demo_lab_tests()
        ]
        self._demo_by_id = {row.view.id: row for row in self._demo}

    # -- LabTestLookup -----------------------------------------------------------------

    def lab_test(self, team_id: UUID, lab_test_id: UUID) -> LabTestView | None:
        row = self.row(team_id, lab_test_id)
        return None if row is None else row.view

    # -- the API's reads ---------------------------------------------------------------

    def is_shared(self, lab_test_id: UUID) -> bool:
        """Whether it is a shared demo test (reference data, no team's to change)."""
        return lab_test_id in self._demo_by_id

    def row(self, team_id: UUID, lab_test_id: UUID) -> LabTestRow | None:
        """The team's lab test or a shared demo one; None for another team's or an
        unknown id."""
        demo = self._demo_by_id.get(lab_test_id)
        if demo is not None:
            return demo
        t = lab_tests.c
        with self.db.read() as conn:
            found = conn.execute(
                select(lab_tests).where(t.lab_test_id == lab_test_id, t.team_id == team_id)
            ).first()
        return None if found is None else _row(found)

    def rows(self, team_id: UUID, lab_test_ids: Sequence[UUID]) -> dict[UUID, LabTestRow]:
        """Those of `lab_test_ids` that the team can use, by id (one query)."""
        found = {i: self._demo_by_id[i] for i in lab_test_ids if i in self._demo_by_id}
        rest = [i for i in lab_test_ids if i not in found]
        if rest:
            t = lab_tests.c
            with self.db.read() as conn:
                for r in conn.execute(
                    select(lab_tests).where(t.team_id == team_id, t.lab_test_id.in_(rest))
                ):
                    found[r.lab_test_id] = _row(r)
        return found

    def team_lab_tests(self, team_id: UUID) -> list[LabTestRow]:
        """The shared demo tests, then the team's own, oldest first."""
        t = lab_tests.c
        with self.db.read() as conn:
            own = conn.execute(
                select(lab_tests).where(t.team_id == team_id).order_by(t.created_at, t.lab_test_id)
            ).all()
        return [*self._demo, *(_row(r) for r in own)]
