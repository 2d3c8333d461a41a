"""Team API routes of the compendium and the team's lab accounts (junction-api-sdk's
`compendium.search`, `compendium.convert`, `compendium.search_orderable_tests` and
`lab_account.get_team_lab_accounts`; docs/labs.md#the-compendium).

Both answer from the lab catalog (reference data): the compendium groups markers by the
LOINC codes they report (adapters/reference/labs/compendium.py); the lab accounts are the
catalog's platform accounts, which every team orders through. Neither travels in time (the
catalog is not versioned): `as_of` is a 422, as on the other catalog reads."""

from __future__ import annotations

import weakref
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Query
from healthledger.adapters.composition import Service
from healthledger.adapters.http.as_of import TEAM_READ_REFUSES_AS_OF
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.reference.labs import US_STATES
from healthledger.adapters.reference.labs.catalog import ReferenceLabCatalog
from healthledger.adapters.reference.labs.compendium import (
    EXACT,
    Candidate,
    Canonical,
    Compendium,
    loinc_set,
    loinc_set_hash,
)
from healthledger.domain.errors import InvalidRequest
from healthledger.domain.free_text import FreeText
from healthledger.domain.labs.billing import CLIENT_BILL
from healthledger.domain.labs.catalog import Lab, Marker
from healthledger.domain.labs.lab_tests import UnknownLabTests
from pydantic import BaseModel, ConfigDict, Field

router = APIRouter(tags=["lab compendium"], route_class=LedgerRoute)

# Provider ids converted in one request.
MAX_PROVIDER_IDS = 100
_CODE = Field(min_length=1, max_length=64)
LabSlug = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-z0-9_]+$")]
ProviderId = Annotated[FreeText, _CODE]


_COMPENDIUMS: weakref.WeakKeyDictionary[ReferenceLabCatalog, Compendium] = (
    weakref.WeakKeyDictionary()
)


def compendium_of(catalog: ReferenceLabCatalog) -> Compendium:
    """The compendium of the catalog, built once per catalog (a few milliseconds)."""
    found = _COMPENDIUMS.get(catalog)
    if found is None:
        found = _COMPENDIUMS[catalog] = Compendium(catalog)
    return found


def _lab(service: Service, slug: str, field: str) -> Lab:
    lab = service.lab_catalog.lab_by_slug(slug)
    if lab is None:
        known = ", ".join(lab.slug for lab in service.lab_catalog.labs())
        raise InvalidRequest(f"{field} names no lab of the catalog ({known}).", field)
    return lab


# -- answers ---------------------------------------------------------------------------


class CanonicalCandidate(BaseModel):
    loinc_set_hash: str
    display_name: str
    aliases: list[str]
    loinc_codes: list[str]
    provider_ids: list[str]
    loinc_components: list[str]
    loinc_groups: list[str] = Field(default_factory=list)
    cpt_codes: list[str] = Field(default_factory=list)
    popularity_score: float = 0.0
    confidence: float


class PerLabCandidate(BaseModel):
    marker_id: int
    lab_id: int
    lab_slug: str
    name: str
    result_names: list[str]
    provider_id: str
    loinc_set_hash: str
    loinc_codes: list[str]
    loinc_components: list[str]
    loinc_groups: list[str] = Field(default_factory=list)
    cpt_codes: list[str] = Field(default_factory=list)
    relation: str
    confidence: float
    reason_codes: list[str]
    marker_popularity_score: float = 0.0


class RelatedCandidate(BaseModel):
    canonical: CanonicalCandidate
    relation: str
    confidence: float
    reason_codes: list[str]


_CANONICAL_EXAMPLE: dict[str, Any] = {
    "loinc_set_hash": "92fe37dcd5c6b1063dfd8dd628a74798",
    "display_name": "Glucose",
    "aliases": [],
    "loinc_codes": ["2345-7"],
    "provider_ids": ["483", "001032", "BR0001"],
    "loinc_components": ["Glucose [Mass/volume] in Serum or Plasma"],
    "loinc_groups": [],
    "cpt_codes": [],
    "popularity_score": 0.0,
    "confidence": 1.0,
}
_PER_LAB_EXAMPLE: dict[str, Any] = {
    "marker_id": 1001,
    "lab_id": 1,
    "lab_slug": "quest",
    "name": "Glucose",
    "result_names": ["Glucose"],
    "provider_id": "483",
    "loinc_set_hash": "92fe37dcd5c6b1063dfd8dd628a74798",
    "loinc_codes": ["2345-7"],
    "loinc_components": ["Glucose [Mass/volume] in Serum or Plasma"],
    "loinc_groups": [],
    "cpt_codes": [],
    "relation": "exact",
    "confidence": 1.0,
    "reason_codes": ["same_loinc_set"],
    "marker_popularity_score": 0.0,
}


class SearchCompendiumResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "mode": "crosswalk",
                    "selected_canonical": _CANONICAL_EXAMPLE,
                    "canonical_candidates": [_CANONICAL_EXAMPLE],
                    "per_lab": {"quest": [_PER_LAB_EXAMPLE]},
                    "related": [],
                }
            ]
        }
    )
    mode: Literal["canonical", "crosswalk"]
    selected_canonical: CanonicalCandidate | None
    canonical_candidates: list[CanonicalCandidate]
    per_lab: dict[str, list[PerLabCandidate]]
    related: list[RelatedCandidate]


class ProviderIdConversion(BaseModel):
    source_provider_id: str
    candidates: list[PerLabCandidate]


class ConvertCompendiumResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "source_lab_test_id": None,
                    "source_lab_id": None,
                    "target_lab_id": 1,
                    "target_lab_slug": "quest",
                    "source_provider_ids": ["001032"],
                    "converted_provider_ids": ["483"],
                    "unresolved_provider_ids": [],
                    "by_source_provider_id": {
                        "001032": {
                            "source_provider_id": "001032",
                            "candidates": [_PER_LAB_EXAMPLE],
                        }
                    },
                }
            ]
        }
    )
    source_lab_test_id: str | None
    source_lab_id: int | None
    target_lab_id: int
    target_lab_slug: str
    source_provider_ids: list[str]
    converted_provider_ids: list[str]
    unresolved_provider_ids: list[str]
    by_source_provider_id: dict[str, ProviderIdConversion]


class SearchOrderableTestsResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"candidates": {"001032": [_PER_LAB_EXAMPLE]}}]}
    )
    candidates: dict[str, list[PerLabCandidate]]


def _canonical(
    canonical: Canonical, confidence: float, lab_ids: frozenset[int] | None
) -> CanonicalCandidate:
    return CanonicalCandidate(
        loinc_set_hash=canonical.hash,
        display_name=canonical.display_name,
        aliases=canonical.aliases,
        loinc_codes=canonical.loinc_codes,
        provider_ids=list(dict.fromkeys(m.provider_id for m in canonical.in_labs(lab_ids))),
        loinc_components=canonical.loinc_components(),
        confidence=confidence,
    )


def _per_lab(
    service: Service, marker: Marker, relation: str, confidence: float, reasons: list[str]
) -> PerLabCandidate:
    lab = service.lab_catalog.lab(marker.lab_id)
    codes = loinc_set(marker)
    named = {r.loinc.code: r.loinc.name for r in marker.expected_results}
    return PerLabCandidate(
        marker_id=marker.id,
        lab_id=marker.lab_id,
        lab_slug="" if lab is None else lab.slug,
        name=marker.name,
        result_names=[r.name for r in marker.expected_results],
        provider_id=marker.provider_id,
        loinc_set_hash=loinc_set_hash(codes),
        loinc_codes=sorted(codes),
        loinc_components=[named[code] for code in sorted(codes)],
        relation=relation,
        confidence=confidence,
        reason_codes=reasons,
    )


def _candidate(service: Service, candidate: Candidate) -> PerLabCandidate:
    reason = "same_loinc_set" if candidate.relation == EXACT else "reports_every_loinc_code"
    return _per_lab(service, candidate.marker, candidate.relation, candidate.confidence, [reason])


# -- search ----------------------------------------------------------------------------


class SearchCompendiumBody(BaseModel):
    """junction's SearchCompendiumBody. `canonical`: a query (required), up to 10
    candidates. `crosswalk`: a query or a `loinc_set_hash` (one of them), up to 20, the
    selected canonical's markers per lab and, with `include_related`, the canonicals that
    report more or fewer of its codes."""

    model_config = ConfigDict(extra="forbid")
    mode: Literal["canonical", "crosswalk"]
    query: FreeText | None = Field(default=None, max_length=200)
    cpt_codes: list[Annotated[FreeText, _CODE]] | None = Field(default=None, max_length=50)
    loinc_set_hash: FreeText | None = Field(default=None, max_length=64)
    labs: list[LabSlug] | None = Field(default=None, max_length=20)
    include_related: bool | None = None
    limit: int | None = Field(default=None, ge=1, le=20)


@router.post(
    "/v3/compendium/search",
    response_model=SearchCompendiumResponse,
    responses=error_responses(
        401,
        422,
        described={
            422: "Invalid body; canonical without a query, or with a loinc_set_hash or a "
            "limit over 10; crosswalk with neither or both of query and loinc_set_hash; "
            "cpt_codes (the catalog holds none); a lab the catalog does not have."
        },
    ),
)
def search_compendium(
    service: CurrentService, body: SearchCompendiumBody, caller: TeamApiCaller
) -> Any:
    """The canonical tests (LOINC sets of the catalog's markers) a query names, best
    first; in crosswalk mode, the selected one's markers at each lab."""
    query = None if body.query is None or not body.query.strip() else body.query
    if body.cpt_codes:
        raise InvalidRequest(
            "cpt_codes cannot be searched: the lab catalog holds no CPT codes "
            "(search by query: a name, a LOINC code or a lab's code).",
            "cpt_codes",
        )
    if body.mode == "canonical":
        if query is None:
            raise InvalidRequest("canonical mode needs a non-empty query.", "query")
        if body.loinc_set_hash is not None:
            raise InvalidRequest("loinc_set_hash is for crosswalk mode only.", "loinc_set_hash")
        if body.limit is not None and body.limit > 10:
            raise InvalidRequest("limit must be 1..10 in canonical mode.", "limit")
    elif (query is None) == (body.loinc_set_hash is None):
        raise InvalidRequest(
            "crosswalk mode needs exactly one of query and loinc_set_hash.", "query"
        )
    limit = body.limit or (3 if body.mode == "canonical" else 5)
    lab_ids = (
        None
        if body.labs is None
        else frozenset(_lab(service, slug, "labs").id for slug in body.labs)
    )
    compendium = compendium_of(service.lab_catalog)
    if body.loinc_set_hash is not None:
        found = compendium.canonical(body.loinc_set_hash)
        matches = [] if found is None or not found.in_labs(lab_ids) else [(found, 1.0)]
    else:
        assert query is not None
        matches = [(m.canonical, m.confidence) for m in compendium.search(query, lab_ids)]
    matches = matches[:limit]
    if body.mode == "crosswalk":
        matches = matches[:1]
    candidates = [_canonical(c, confidence, lab_ids) for c, confidence in matches]
    per_lab: dict[str, list[PerLabCandidate]] = {}
    related: list[RelatedCandidate] = []
    if body.mode == "crosswalk" and matches:
        selected = matches[0][0]
        for marker in selected.in_labs(lab_ids):
            answer = _per_lab(service, marker, EXACT, 1.0, ["same_loinc_set"])
            per_lab.setdefault(answer.lab_slug, []).append(answer)
        if body.include_related:
            related = [
                RelatedCandidate(
                    canonical=_canonical(other, share, lab_ids),
                    relation=relation,
                    confidence=share,
                    reason_codes=[f"loinc_{relation}"],
                )
                for other, relation, share in compendium.related(selected, lab_ids)[:limit]
            ]
    return SearchCompendiumResponse(
        mode=body.mode,
        selected_canonical=candidates[0] if candidates else None,
        canonical_candidates=candidates,
        per_lab=per_lab,
        related=related,
    )


# -- convert and orderable tests -------------------------------------------------------


class ConvertCompendiumBody(BaseModel):
    """junction's ConvertCompendiumBody: a lab test of the team (its markers' codes at its
    lab) and/or lab codes, converted to the target lab's markers."""

    model_config = ConfigDict(extra="forbid")
    lab_test_id: UUID | None = None
    provider_ids: list[ProviderId] | None = Field(default=None, max_length=MAX_PROVIDER_IDS)
    target_lab: LabSlug
    limit: int | None = Field(default=None, ge=1, le=20)


def _sources(
    service: Service, provider_id: str, source_lab_id: int | None, target_lab_id: int
) -> list[Marker]:
    """The markers the code names: at the source lab when there is one, else at every
    lab but the target."""
    compendium = compendium_of(service.lab_catalog)
    labs = (
        [source_lab_id]
        if source_lab_id is not None
        else [lab.id for lab in service.lab_catalog.labs() if lab.id != target_lab_id]
    )
    return compendium.sources(provider_id, labs)


def _conversions(
    service: Service,
    provider_ids: list[str],
    source_lab_id: int | None,
    target_lab_id: int,
    limit: int,
    *,
    orderable_only: bool,
) -> dict[str, list[PerLabCandidate]]:
    compendium = compendium_of(service.lab_catalog)
    out: dict[str, list[PerLabCandidate]] = {}
    for provider_id in provider_ids:
        found: dict[int, Candidate] = {}
        for source in _sources(service, provider_id, source_lab_id, target_lab_id):
            for candidate in compendium.candidates(
                source, target_lab_id, orderable_only=orderable_only
            ):
                best = found.get(candidate.marker.id)
                if best is None or (candidate.relation, -candidate.confidence) < (
                    best.relation,
                    -best.confidence,
                ):
                    found[candidate.marker.id] = candidate
        ranked = sorted(
            found.values(), key=lambda c: (c.relation != EXACT, -c.confidence, c.marker.id)
        )
        out[provider_id] = [_candidate(service, c) for c in ranked[:limit]]
    return out


@router.post(
    "/v3/compendium/convert",
    response_model=ConvertCompendiumResponse,
    responses=error_responses(
        401,
        404,
        422,
        described={
            404: "Unknown lab test (another team's too).",
            422: "Invalid body; neither a lab test nor provider ids; a lab the catalog "
            "does not have.",
        },
    ),
)
def convert_compendium(
    service: CurrentService, body: ConvertCompendiumBody, caller: TeamApiCaller
) -> Any:
    """Each source code's equivalents at the target lab: the markers reporting the same
    LOINC codes, then those reporting them and more. A code with none, or that no lab
    of the catalog has, is unresolved: nothing is guessed."""
    target = _lab(service, body.target_lab, "target_lab")
    source_lab_id: int | None = None
    codes: list[str] = []
    if body.lab_test_id is not None:
        row = service.lab_tests.row(caller.team_id, body.lab_test_id)
        if row is None:
            raise UnknownLabTests([body.lab_test_id])
        source_lab_id = row.view.lab_id
        markers = service.lab_test_commands.markers_of(row.view.marker_ids)
        codes += [m.provider_id for m in markers]
    codes += body.provider_ids or []
    if not codes:
        raise InvalidRequest("Name a lab_test_id or provider_ids to convert.", "provider_ids")
    codes = list(dict.fromkeys(codes))
    by_code = _conversions(
        service, codes, source_lab_id, target.id, body.limit or 5, orderable_only=False
    )
    converted = [found[0].provider_id for found in by_code.values() if found]
    return ConvertCompendiumResponse(
        source_lab_test_id=None if body.lab_test_id is None else str(body.lab_test_id),
        source_lab_id=source_lab_id,
        target_lab_id=target.id,
        target_lab_slug=target.slug,
        source_provider_ids=codes,
        converted_provider_ids=list(dict.fromkeys(converted)),
        unresolved_provider_ids=[code for code, found in by_code.items() if not found],
        by_source_provider_id={
            code: ProviderIdConversion(source_provider_id=code, candidates=found)
            for code, found in by_code.items()
        },
    )


class SearchOrderableTestsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    provider_ids: list[ProviderId] = Field(min_length=1, max_length=MAX_PROVIDER_IDS)
    target_lab: LabSlug
    per_provider_limit: int | None = Field(default=None, ge=1, le=20)


@router.post(
    "/v3/compendium/search_orderable_tests",
    response_model=SearchOrderableTestsResponse,
    responses=error_responses(
        401, 422, described={422: "Invalid body; a lab the catalog does not have."}
    ),
)
def search_orderable_tests(
    service: CurrentService, body: SearchOrderableTestsBody, caller: TeamApiCaller
) -> Any:
    """Per source code (looked up at every lab but the target), the target lab's markers
    that can be ordered on their own (`a_la_carte_enabled`) and report its LOINC codes;
    an empty list where there is none."""
    target = _lab(service, body.target_lab, "target_lab")
    codes = list(dict.fromkeys(body.provider_ids))
    return SearchOrderableTestsResponse(
        candidates=_conversions(
            service,
            codes,
            None,
            target.id,
            body.per_provider_limit or 5,
            orderable_only=True,
        )
    )


# -- the team's lab accounts -----------------------------------------------------------


class LabAccount(BaseModel):
    """junction's ClientFacingLabAccount: one per platform account and lab it orders from."""

    id: str
    lab: str
    org_id: str | None
    status: Literal["active"]
    delegated_flow: Literal["not_delegated"]
    provider_account_id: str
    account_name: str
    default_clinical_notes: str | None = None
    business_units: list[str] = Field(default_factory=list)
    allowed_billing: dict[str, list[str]]
    team_id_allowlist: list[str]


class TeamLabAccounts(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "data": [
                        {
                            "id": "6a0c2f4e-1d3b-4c5a-9e7f-0b1c2d3e4f03",
                            "lab": "quest",
                            "org_id": None,
                            "status": "active",
                            "delegated_flow": "not_delegated",
                            "provider_account_id": "6a0c2f4e-1d3b-4c5a-9e7f-0b1c2d3e4f03",
                            "account_name": "Platform account: Quest only",
                            "default_clinical_notes": None,
                            "business_units": [],
                            "allowed_billing": {"client_bill": ["AK", "AL"]},
                            "team_id_allowlist": [],
                        }
                    ]
                }
            ]
        }
    )
    data: list[LabAccount]


@router.get(
    "/v3/lab_test/lab_account",
    response_model=TeamLabAccounts,
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    responses=error_responses(401, 422),
)
def team_lab_accounts(
    service: CurrentService,
    caller: TeamApiCaller,
    lab_account_id: Annotated[UUID | None, Query()] = None,
    status: Annotated[
        Literal["active", "pending", "suspended", "ready_to_launch"] | None, Query()
    ] = None,
) -> Any:
    """The lab accounts the team orders through: the catalog's platform accounts, shared
    by every team (an empty `team_id_allowlist`), active, not delegated (no physician of
    the team's is needed), billed to the team (`client_bill`) in every state. An account
    of several labs is answered once per lab, under its one id (the id `lab_account_id`
    filters take). An unknown `lab_account_id`, or a status no account has, answers none."""
    catalog = service.lab_catalog
    states = sorted(US_STATES)
    data = []
    for account in catalog.reference.accounts:
        if lab_account_id is not None and account.id != lab_account_id:
            continue
        if status not in (None, "active"):
            continue
        for lab_id in sorted(account.lab_ids):
            lab = catalog.lab(lab_id)
            if lab is None:
                continue
            data.append(
                LabAccount(
                    id=str(account.id),
                    lab=lab.slug,
                    org_id=None,
                    status="active",
                    delegated_flow="not_delegated",
                    provider_account_id=str(account.id),
                    account_name=account.name,
                    allowed_billing={CLIENT_BILL: states},
                    team_id_allowlist=[],
                )
            )
    return TeamLabAccounts(data=data)
