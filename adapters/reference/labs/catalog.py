"""`LabCatalog` over the shipped reference data: every index built once, when the
catalog is made, so that a request only looks things up."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from healthledger.adapters.reference.labs import LabAccount, LabDetails, LabReference
from healthledger.domain.errors import InvalidRequest
from healthledger.domain.labs.catalog import Lab, LabTestView, Marker


@dataclass(frozen=True)
class MarkerPage:
    markers: Sequence[Marker]
    total: int
    page: int
    size: int

    @property
    def pages(self) -> int:
        return math.ceil(self.total / self.size)


def page_of(items: Sequence[Marker], page: int, size: int, location: str) -> MarkerPage:
    """One page of `items` (page 1-based). A page past the last is a 422 that says how
    many there are; page 1 of nothing is an empty page."""
    pages = math.ceil(len(items) / size)
    if page > max(pages, 1):
        raise InvalidRequest(
            f"page {page} is past the last page ({pages} of size {size}).", "page", location
        )
    start = (page - 1) * size
    return MarkerPage(items[start : start + size], len(items), page, size)


class ReferenceLabCatalog:
    """The labs and markers of the reference data (implements `LabCatalog`)."""

    def __init__(self, reference: LabReference) -> None:
        self.reference = reference
        self._details = {d.lab.id: d for d in reference.labs}
        self._labs = tuple(d.lab for d in reference.labs)
        self._by_slug = {lab.slug: lab for lab in self._labs}
        self._markers = reference.markers  # by id
        self._by_id = {m.id: m for m in self._markers}
        self._by_code = {(m.lab_id, m.provider_id): m for m in self._markers}
        self._by_lab: dict[int, tuple[Marker, ...]] = {
            lab.id: tuple(m for m in self._markers if m.lab_id == lab.id) for lab in self._labs
        }
        # What `name` is matched against, folded once.
        self._search = {m.id: (m.name.casefold(), m.provider_id.casefold()) for m in self._markers}
        self._accounts = {a.id: a for a in reference.accounts}
        self._demo = {t.id: t for t in reference.demo_lab_tests}

    # -- LabCatalog --------------------------------------------------------------------

    def labs(self) -> Sequence[Lab]:
        return self._labs

    def lab(self, lab_id: int) -> Lab | None:
        details = self._details.get(lab_id)
        return None if details is None else details.lab

    def lab_by_slug(self, slug: str) -> Lab | None:
        return self._by_slug.get(slug)

    def marker(self, marker_id: int) -> Marker | None:
        return self._by_id.get(marker_id)

    def markers_by_provider_id(self, lab_id: int, provider_ids: Sequence[str]) -> list[Marker]:
        found = (self._by_code.get((lab_id, code)) for code in provider_ids)
        return [m for m in found if m is not None]

    # -- beyond the port -----------------------------------------------------------------

    def details(self, lab_id: int) -> LabDetails | None:
        return self._details.get(lab_id)

    def central_labs(self) -> list[Lab]:
        return [d.lab for d in self.reference.labs if d.central_lab]

    def account(self, account_id: UUID) -> LabAccount | None:
        return self._accounts.get(account_id)

    def demo_lab_tests(self) -> Sequence[LabTestView]:
        return self.reference.demo_lab_tests

    def demo_lab_test(self, lab_test_id: UUID) -> LabTestView | None:
        return self._demo.get(lab_test_id)

    def demo_description(self, lab_test_id: UUID) -> str | None:
        return self.reference.demo_descriptions.get(lab_test_id)

    def find_markers(
        self,
        *,
        lab_ids: Sequence[int] | None = None,
        lab_slug: str | None = None,
        name: str | None = None,
        a_la_carte_enabled: bool | None = None,
        lab_account_id: UUID | None = None,
    ) -> list[Marker]:
        """The markers that pass every filter given, by id. `lab_slug` wins over
        `lab_ids` (spec endpoint 5); an unknown lab or lab account is a 422 on its query
        parameter; `name` matches a marker's name or its lab code, case-insensitively."""
        if lab_slug is not None:
            lab = self._by_slug.get(lab_slug)
            if lab is None:
                raise InvalidRequest("lab_slug names no lab.", "lab_slug", "query")
            wanted: set[int] | None = {lab.id}
        elif lab_ids:
            unknown = sorted({i for i in lab_ids if i not in self._details})
            if unknown:
                raise InvalidRequest(
                    f"lab_id names no lab: {', '.join(map(str, unknown))}.", "lab_id", "query"
                )
            wanted = set(lab_ids)
        else:
            wanted = None
        if lab_account_id is not None:
            account = self._accounts.get(lab_account_id)
            if account is None:
                raise InvalidRequest(
                    "lab_account_id names no lab account.", "lab_account_id", "query"
                )
            wanted = set(account.lab_ids) if wanted is None else wanted & account.lab_ids
        if wanted is None:
            candidates: Sequence[Marker] = self._markers
        else:
            candidates = [m for lab_id in sorted(wanted) for m in self._by_lab[lab_id]]
            candidates.sort(key=lambda m: m.id)
        needle = None if name is None else name.casefold()
        if needle is None and a_la_carte_enabled is None:
            return list(candidates)
        search = self._search
        return [
            m
            for m in candidates
            if (a_la_carte_enabled is None or m.a_la_carte_enabled == a_la_carte_enabled)
            and (needle is None or needle in search[m.id][0] or needle in search[m.id][1])
        ]
