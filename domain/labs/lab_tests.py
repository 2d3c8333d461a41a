"""Lab tests: a team's named set of markers of one lab, ordered with one collection
method (spec endpoint 8's lab tests; the issue's `POST /v3/lab_tests`).

A lab test is event-sourced like everything a team creates: one stream per test, founded
by `LabTest.Created`, which names the team. It is not about a user, so it holds no
personal data and outlives every user's erasure. The rules (one lab, a method the lab
offers, markers that exist) are checked by `LabTests.create` against the catalog before
the event is triggered; the event only records what was decided, so a later change of
the catalog never breaks a replay.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from uuid import UUID, uuid4

from eventsourcing.domain import Aggregate
from healthledger.domain.audited import Audited
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import InvalidRequest, LedgerError
from healthledger.domain.labs.catalog import CollectionMethod, LabCatalog, LabTestView, Marker
from healthledger.domain.ledger import Clock, Ledger

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


class LabTest(Audited):
    TOPIC = "healthledger:LabTest"
    USER_STREAM = None

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

    def view(self) -> LabTestView:
        return LabTestView(
            id=self.id,
            team_id=self.team_id,
            name=self.name,
            method=self.method,  # type: ignore[arg-type]  # checked by LabTests.create
            lab_id=self.lab_id,
            marker_ids=self.marker_ids,
        )


class LabTests:
    """Use cases of a team's lab tests: create one."""

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
