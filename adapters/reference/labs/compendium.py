"""The compendium over the lab catalog (junction-api-sdk's `compendium.*`): markers of
different labs grouped by what they report, the set of LOINC codes of their expected
results. Two markers are equivalent when they report exactly the same LOINC codes; a
marker that reports every code of another and more is its superset. Nothing else is
inferred: no name similarity, no CPT codes (the catalog holds none), no popularity (we keep
none: every popularity score is 0).

A canonical test is one such LOINC set, named by `loinc_set_hash`: the first 32 hex digits
of the SHA-256 of its codes, sorted and joined by commas (stable while the catalog's
expected results stay)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from healthledger.adapters.reference.labs.catalog import ReferenceLabCatalog
from healthledger.domain.labs.catalog import Marker

EXACT = "exact"
SUPERSET = "superset"
SUBSET = "subset"


def loinc_set(marker: Marker) -> frozenset[str]:
    return frozenset(r.loinc.code for r in marker.expected_results)


def loinc_set_hash(codes: frozenset[str]) -> str:
    return hashlib.sha256(",".join(sorted(codes)).encode()).hexdigest()[:32]


def overlap(a: frozenset[str], b: frozenset[str]) -> float:
    """The share of the codes of either that both report (Jaccard), rounded."""
    return round(len(a & b) / len(a | b), 4) if a | b else 0.0


@dataclass(frozen=True)
class Canonical:
    """One LOINC set and every marker, of any lab, that reports exactly it (by id)."""

    codes: frozenset[str]
    hash: str
    markers: tuple[Marker, ...]

    @property
    def display_name(self) -> str:
        return self.markers[0].name

    @property
    def aliases(self) -> list[str]:
        names = dict.fromkeys(m.name for m in self.markers[1:])
        names.pop(self.display_name, None)
        return list(names)

    @property
    def loinc_codes(self) -> list[str]:
        return sorted(self.codes)

    def loinc_components(self) -> list[str]:
        named = {r.loinc.code: r.loinc.name for m in self.markers for r in m.expected_results}
        return [named[code] for code in self.loinc_codes]

    def in_labs(self, lab_ids: frozenset[int] | None) -> list[Marker]:
        return [m for m in self.markers if lab_ids is None or m.lab_id in lab_ids]


@dataclass(frozen=True)
class Match:
    canonical: Canonical
    confidence: float
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Candidate:
    """A target lab's marker for a source: `relation` exact (the same LOINC set) or
    superset (every code of the source, and more); `confidence` 1 for exact, else the
    overlap of the two sets."""

    marker: Marker
    relation: str
    confidence: float


class Compendium:
    def __init__(self, catalog: ReferenceLabCatalog) -> None:
        self.catalog = catalog
        groups: dict[frozenset[str], list[Marker]] = {}
        for marker in catalog.reference.markers:
            codes = loinc_set(marker)
            if codes:
                groups.setdefault(codes, []).append(marker)
        self._canonicals = tuple(
            Canonical(codes, loinc_set_hash(codes), tuple(sorted(ms, key=lambda m: m.id)))
            for codes, ms in groups.items()
        )
        self._by_hash = {c.hash: c for c in self._canonicals}
        self._by_codes = {c.codes: c for c in self._canonicals}
        self._folded = {
            c.hash: tuple(
                {m.name.casefold() for m in c.markers}
                | {r.name.casefold() for m in c.markers for r in m.expected_results}
                | {r.loinc.name.casefold() for m in c.markers for r in m.expected_results}
            )
            for c in self._canonicals
        }

    def canonical(self, hash_: str) -> Canonical | None:
        return self._by_hash.get(hash_)

    def canonical_of(self, marker: Marker) -> Canonical | None:
        return self._by_codes.get(loinc_set(marker))

    def search(self, query: str, lab_ids: frozenset[int] | None) -> list[Match]:
        """The canonical tests the query names, best first: by hash, a LOINC code, a lab's
        code or a marker's name (confidence 1), a LOINC code among others (the share of
        the set it is), or a part of a marker's, a result's or a LOINC name (0.5). Only
        canonicals with a marker at one of `lab_ids` (None: any lab)."""
        needle = query.strip().casefold()
        found: dict[str, Match] = {}

        def offer(canonical: Canonical, confidence: float, reason: str) -> None:
            if not canonical.in_labs(lab_ids):
                return
            best = found.get(canonical.hash)
            if best is None or confidence > best.confidence:
                found[canonical.hash] = Match(canonical, confidence, (reason,))

        for canonical in self._canonicals:
            if canonical.hash == needle:
                offer(canonical, 1.0, "loinc_set_hash")
            if needle in canonical.codes:
                share = round(1 / len(canonical.codes), 4)
                offer(canonical, 1.0 if len(canonical.codes) == 1 else share, "loinc_code")
            for marker in canonical.in_labs(lab_ids):
                if marker.provider_id.casefold() == needle:
                    offer(canonical, 1.0, "provider_id")
                if marker.name.casefold() == needle:
                    offer(canonical, 1.0, "name")
            if needle and any(needle in name for name in self._folded[canonical.hash]):
                offer(canonical, 0.5, "name_contains")
        return sorted(
            found.values(),
            key=lambda m: (-m.confidence, len(m.canonical.codes), m.canonical.markers[0].id),
        )

    def related(
        self, canonical: Canonical, lab_ids: frozenset[int] | None
    ) -> list[tuple[Canonical, str, float]]:
        """The canonicals that report all of its codes and more (superset) or part of
        them (subset), most overlapping first."""
        out = []
        for other in self._canonicals:
            if other is canonical or not other.in_labs(lab_ids):
                continue
            if other.codes > canonical.codes:
                out.append((other, SUPERSET, overlap(other.codes, canonical.codes)))
            elif other.codes < canonical.codes:
                out.append((other, SUBSET, overlap(other.codes, canonical.codes)))
        out.sort(key=lambda r: (-r[2], r[0].markers[0].id))
        return out

    def candidates(
        self, source: Marker, target_lab_id: int, *, orderable_only: bool = False
    ) -> list[Candidate]:
        """The target lab's markers that report every LOINC code of `source`: the same
        set first, then supersets by overlap (then by id)."""
        codes = loinc_set(source)
        if not codes:
            return []
        found = []
        for marker in self.catalog.find_markers(lab_ids=[target_lab_id]):
            if orderable_only and not marker.a_la_carte_enabled:
                continue
            theirs = loinc_set(marker)
            if theirs == codes:
                found.append(Candidate(marker, EXACT, 1.0))
            elif theirs > codes:
                found.append(Candidate(marker, SUPERSET, overlap(theirs, codes)))
        found.sort(key=lambda c: (c.relation != EXACT, -c.confidence, c.marker.id))
        return found

    def sources(self, provider_id: str, lab_ids: Sequence[int]) -> list[Marker]:
        """The markers with this lab code at these labs, by lab id."""
        return [
            m
            for lab_id in lab_ids
            for m in self.catalog.markers_by_provider_id(lab_id, [provider_id])
        ]
