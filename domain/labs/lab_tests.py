"""Lab tests: a team's named set of markers of one lab, ordered with one collection
method (spec endpoint 8's lab tests; the issue's `POST /v3/lab_tests`).

A lab test is event-sourced like everything a team creates: one stream per test, founded
by `LabTest.Created`, which names the team. It is not about a user, so it holds no
personal data and outlives every user's erasure. The rules (one lab, a method the lab
offers, markers that exist) are checked by `LabTests.create` against the catalog before
the event is triggered; the event only records what was decided, so a later change of
the catalog never breaks a replay.

The owning team may rename a test and take it out of use and back (`LabTest.Updated`,
the official clients' `update_lab_test`). Its markers, lab and method never change: an
order keeps a copy of the test it was placed with, and an inactive test is refused for new
orders only (`LabTestInactive`), never taken from the orders placed with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from uuid import UUID, uuid4

from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError
from healthledger.domain.audited import Audited
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import ConcurrentChange, InvalidRequest, LedgerError
from healthledger.domain.labs.catalog import CollectionMethod, LabCatalog, LabTestView, Marker
from healthledger.domain.ledger import Clock, Ledger, command

# What a team's lab test may use: `on_site_collection` is a method of labs, not one a
# team designs a test for (the issue names these three).
LAB_TEST_METHODS: tuple[CollectionMethod, ...] = ("testkit", "walk_in_test", "at_home_phlebotomy")

# Bounds of one request: a test is a panel's worth of markers, not the catalog.
MAX_MARKERS = 100


def _listed(values: Iterable[object]) -> str:
    return ", ".join(str(v) for v in values)


class UnknownMarkers(LedgerError):
    """Marker ids, or a lab's codes, that name no marker (a 404 naming them; ids and codes
    are held to a pattern of letters and digits before they get here)."""

    def __init__(self, what: str, unknown: Sequence[object]) -> None:
        super().__init__(f"Unknown {what}: {_listed(unknown)}.")
        self.unknown = tuple(unknown)


class UnknownLabTests(LedgerError):
    """Lab test ids that are not the team's nor shared demo tests (a 404 naming them:
    another team's test is as unknown as one that never existed)."""

    def __init__(self, unknown: Sequence[UUID]) -> None:
        super().__init__(f"Unknown lab test ids: {_listed(unknown)}.")
        self.unknown = tuple(unknown)


class LabTestInactive(LedgerError):
    """A new order of a lab test its team has taken out of use (a 409: the test exists and
    the team can put it back in use)."""

    def __init__(self, lab_test_id: UUID) -> None:
        super().__init__(
            f"Lab test {lab_test_id} is inactive: it takes no new orders until its team "
            "makes it active again (update it with active true)."
        )
        self.lab_test_id = lab_test_id


class SharedLabTestUnchangeable(LedgerError):
    """A change of a shared demo lab test, which is the service's reference data and every
    team's to order, not one team's to change (a 403)."""

    def __init__(self, lab_test_id: UUID) -> None:
        super().__init__(
            f"Lab test {lab_test_id} is a shared demo test: it is the service's, ordered by "
            "every team, and cannot be changed. Create a lab test of your own to rename or "
            "deactivate it."
        )
        self.lab_test_id = lab_test_id


class LabTest(Audited):
    TOPIC = "healthledger:LabTest"
    USER_STREAM = None

    # Set by `Updated` only, defaults until then: a test's attribute dict (what a
    # snapshot stores) is as it was before tests could change, and one stored then loads.
    active: bool = True  # whether it takes new orders
    changed_at: datetime | None = None  # its last `Updated`

    class Event(Audited.Event):
        pass

    class Created(Event, Aggregate.Created):
        """A team's lab test: its markers, all of `lab_id`, in the order given."""

        TOPIC = "healthledger:LabTest.Created.v1"
        team_id: UUID
        name: str
        description: str | None
        method: str
        lab_id: int
        marker_ids: list[int]
        fasting: bool

    class Updated(Event):
        """Renamed, taken out of use or put back in use by its team: the test's name and
        whether it is active after the change (both, whichever changed)."""

        TOPIC = "healthledger:LabTest.Updated.v1"
        name: str
        active: bool

        def apply(self, test: LabTest) -> None:
            test.name = self.name
            test.active = self.active
            test.changed_at = self.timestamp

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        team_id: UUID,
        name: str,
        description: str | None,
        method: str,
        lab_id: int,
        marker_ids: list[int],
        fasting: bool,
    ) -> None:
        """From the Created event's fields (eventsourcing passes them all), at `design`
        and on every replay."""
        self.team_id: UUID = team_id
        self.name: str = name
        self.description: str | None = description
        self.method: str = method
        self.lab_id: int = lab_id
        self.marker_ids: tuple[int, ...] = tuple(marker_ids)
        self.fasting: bool = fasting

    @classmethod
    def design(
        cls,
        ctx: CommandContext,
        now: datetime,
        *,
        team_id: UUID,
        name: str,
        description: str | None,
        method: str,
        lab_id: int,
        marker_ids: Sequence[int],
        fasting: bool,
    ) -> LabTest:
        return cls.new(
            ctx,
            now,
            id=uuid4(),
            team_id=team_id,
            name=name,
            description=description,
            method=method,
            lab_id=lab_id,
            marker_ids=list(marker_ids),
            fasting=fasting,
        )

    @property
    def updated_at(self) -> datetime:
        """When its name or state last changed: its creation until it is updated."""
        return self.changed_at or self.created_on

    def update(
        self, ctx: CommandContext, now: datetime, *, name: str | None, active: bool | None
    ) -> bool:
        """Rename it and/or set whether it is in use (None: left as it is). Records
        `Updated` only if something changes; whether it did."""
        new_name = self.name if name is None else name
        new_active = self.active if active is None else active
        if (new_name, new_active) == (self.name, self.active):
            return False
        self.record(ctx, now, self.Updated, name=new_name, active=new_active)
        return True

    def view(self) -> LabTestView:
        return LabTestView(
            id=self.id,
            team_id=self.team_id,
            name=self.name,
            method=self.method,  # type: ignore[arg-type]  # checked by LabTests.create
            lab_id=self.lab_id,
            marker_ids=self.marker_ids,
            active=self.active,
        )


class LabTests:
    """Use cases of a team's lab tests: create one, rename it, take it out of use and back."""

    def __init__(self, ledger: Ledger, clock: Clock, catalog: LabCatalog) -> None:
        self.ledger = ledger
        self.clock = clock
        self.catalog = catalog

    def create(
        self,
        ctx: CommandContext,
        team_id: UUID,
        *,
        name: str,
        method: str,
        marker_ids: Sequence[int] = (),
        provider_ids: Sequence[str] = (),
        description: str | None = None,
        fasting: bool = False,
    ) -> LabTest:
        """A lab test of the team. Its lab is its markers' one lab; `provider_ids` (the
        lab's own codes) add markers of that lab. Refused, with nothing recorded: an
        unknown marker (404 naming it), markers of two labs, a method the lab does not
        offer, no marker at all (422)."""
        if method not in LAB_TEST_METHODS:
            raise InvalidRequest(f"method must be one of {', '.join(LAB_TEST_METHODS)}.", "method")
        markers = self.markers_of(marker_ids)
        lab_ids = sorted({m.lab_id for m in markers})
        if len(lab_ids) > 1:
            raise InvalidRequest(
                f"The markers are of {len(lab_ids)} labs ({_listed(lab_ids)}): a lab test "
                "is done by one lab.",
                "marker_ids",
            )
        if provider_ids:
            if not lab_ids:
                raise InvalidRequest(
                    "provider_ids are a lab's own codes: give marker_ids too, so that the "
                    "lab is known.",
                    "provider_ids",
                )
            markers = [*markers, *self.markers_of_lab(lab_ids[0], provider_ids)]
        if not markers:
            raise InvalidRequest("A lab test needs at least one marker.", "marker_ids")
        markers = list({m.id: m for m in markers}.values())  # each once, in order
        if len(markers) > MAX_MARKERS:
            raise InvalidRequest(f"A lab test holds at most {MAX_MARKERS} markers.", "marker_ids")
        lab = self.catalog.lab(markers[0].lab_id)
        if lab is None:  # the catalog's markers name its labs; a broken catalog is a bug
            raise LookupError(f"marker {markers[0].id} names lab {markers[0].lab_id}")
        if method not in lab.collection_methods:
            raise InvalidRequest(
                f"{lab.name} does not offer {method}; it offers "
                f"{', '.join(lab.collection_methods)}.",
                "method",
            )
        test = LabTest.design(
            ctx,
            self.clock(),
            team_id=team_id,
            name=name,
            description=description,
            method=method,
            lab_id=lab.id,
            marker_ids=[m.id for m in markers],
            fasting=fasting,
        )
        self.ledger.save(test)
        return test

    @command
    def update(
        self,
        ctx: CommandContext,
        team_id: UUID,
        lab_test_id: UUID,
        *,
        name: str | None = None,
        active: bool | None = None,
    ) -> LabTest:
        """The team's own lab test renamed and/or (de)activated (`Updated`; nothing is
        recorded when nothing changes). Another team's test, or an unknown id, is
        `UnknownLabTests` (404); a change of nothing (both None) or a blank name is
        `InvalidRequest` (422). A concurrent change of the same test is
        `ConcurrentChange` (409): the event store takes one of them."""
        if name is None and active is None:
            raise InvalidRequest("Send name, active or both: there is nothing to change.", "name")
        if name is not None and not name.strip():
            raise InvalidRequest("name must not be blank.", "name")
        test = self.ledger.find(lab_test_id)
        if not isinstance(test, LabTest) or test.team_id != team_id:
            raise UnknownLabTests([lab_test_id])
        if test.update(ctx, self.clock(), name=name, active=active):
            try:
                self.ledger.save(test)
            except IntegrityError as exc:
                raise ConcurrentChange() from exc
        return test

    def markers_of(self, marker_ids: Sequence[int]) -> list[Marker]:
        """The markers with these ids, in order; any unknown one is `UnknownMarkers`."""
        found = [(marker_id, self.catalog.marker(marker_id)) for marker_id in marker_ids]
        unknown = [marker_id for marker_id, marker in found if marker is None]
        if unknown:
            raise UnknownMarkers("marker ids", list(dict.fromkeys(unknown)))
        return [marker for _, marker in found if marker is not None]

    def markers_of_lab(self, lab_id: int, provider_ids: Sequence[str]) -> list[Marker]:
        """The lab's markers with these codes, in order; any unknown one is
        `UnknownMarkers`."""
        wanted = list(dict.fromkeys(provider_ids))
        markers = self.catalog.markers_by_provider_id(lab_id, wanted)
        known = {m.provider_id for m in markers}
        unknown = [code for code in wanted if code not in known]
        if unknown:
            lab = self.catalog.lab(lab_id)
            where = f" of {lab.slug}" if lab is not None else ""
            raise UnknownMarkers(f"provider_ids{where}", unknown)
        return markers
