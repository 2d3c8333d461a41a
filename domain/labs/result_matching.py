"""Matching a lab result that arrived without an order to the team's orders: by its
sample id first, then by the patient's demographics (names and date of birth), as a
lab's report carries them.

`decide` is pure: it takes the result and the team's orders, opened (`OrderFacts`), and
answers the decision code (the official client's `MatchDecisionCode`), why, and the
candidates grouped by user. A result whose sample id names an open order of the same
lab and patient, past its collection, is a match (`match_sample_id`): it is no
unmatched result. Everything else needs the team's review.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any
from uuid import UUID

from healthledger.domain.labs.orders import (
    CANCELLED,
    COMPLETED,
    FAILED,
    RECEIVED,
    OrderedTest,
    low_level,
    top_level,
)

# The decision codes (the client's MatchDecisionCode).
MATCH_SAMPLE_ID = "match_sample_id"
MATCH_COMPLETED = "match_completed"
MATCH_CANCELLED = "match_cancelled"
WRONG_COLLECTION = "wrong_collection"
WRONG_LAB = "wrong_lab"
MULTIPLE_DEMO_MATCH = "multiple_demo_match"
MATCH_SAMPLE_ID_MISMATCH_DEMO = "match_sample_id_mismatch_demo"
MATCH_DEMO = "match_demo"
NO_MATCH = "no_match"

# Why, for the team (no personal data: the same sentence for every result of a code).
REASONS = {
    MATCH_SAMPLE_ID: "The result's sample id matches an open order of the same lab and patient.",
    MATCH_COMPLETED: "The result's sample id matches an order that is already completed.",
    MATCH_CANCELLED: "The result's sample id matches an order that was cancelled or failed.",
    WRONG_COLLECTION: "The result's sample id matches an order whose sample was not collected yet.",
    WRONG_LAB: "The result's sample id matches an order placed with another lab.",
    MULTIPLE_DEMO_MATCH: "No order has the result's sample id, and the patient's "
    "demographics match more than one open order.",
    MATCH_SAMPLE_ID_MISMATCH_DEMO: "The result's sample id matches an order whose patient "
    "has other demographics.",
    MATCH_DEMO: "No order has the result's sample id; the patient's demographics match one "
    "open order.",
    NO_MATCH: "No order has the result's sample id or the patient's demographics.",
}

# Candidate types, confidence levels and reason codes (the client's).
PROVENANCE_ORDER = "provenance_order"
ORDER_OPTION = "order_option"
HIGH, MEDIUM, LOW = "high", "medium", "low"
_SCORES = {HIGH: 0.95, MEDIUM: 0.7, LOW: 0.4}


@dataclass(frozen=True)
class Patient:
    """The patient as a lab's report names them."""

    first_name: str
    last_name: str
    dob: date
    gender: str | None = None

    def same_person(self, other: Patient) -> bool:
        """Names (case and surrounding spaces aside) and date of birth equal."""
        return (
            _name(self.first_name) == _name(other.first_name)
            and _name(self.last_name) == _name(other.last_name)
            and self.dob == other.dob
        )

    def sealable(self) -> dict[str, Any]:
        return {
            "first_name": self.first_name,
            "last_name": self.last_name,
            "dob": self.dob.isoformat(),
            "gender": self.gender,
        }

    @classmethod
    def of_stored(cls, stored: Mapping[str, Any]) -> Patient | None:
        """From an order's stored patient details (or this class's `sealable`); None if
        they do not name the person (a key destroyed, fields missing)."""
        first, last, dob = stored.get("first_name"), stored.get("last_name"), stored.get("dob")
        if not (isinstance(first, str) and isinstance(last, str) and isinstance(dob, str)):
            return None
        gender = stored.get("gender")
        return cls(
            first, last, date.fromisoformat(dob), gender if isinstance(gender, str) else None
        )

    def matches_search(self, text: str) -> bool:
        """`search_input`: a first name, a last name or a date of birth (YYYY-MM-DD)."""
        wanted = _name(text)
        return wanted in (_name(self.first_name), _name(self.last_name), self.dob.isoformat())


def _name(text: str) -> str:
    return " ".join(text.split()).casefold()


@dataclass(frozen=True)
class OrderFacts:
    """One of the team's orders, as a matcher sees it (its sealed values opened)."""

    order_id: UUID
    user_id: UUID
    lab_id: int
    status: str
    sample_id: str | None
    patient: Patient | None
    # The test ordered (None once its user's key is destroyed).
    test: OrderedTest | None

    @property
    def marker_ids(self) -> tuple[int, ...]:
        return () if self.test is None else self.test.marker_ids


@dataclass(frozen=True)
class IncomingResult:
    """A lab's report: from which lab, about which sample and patient, of which markers."""

    lab_id: int
    sample_id: str
    patient: Patient
    marker_ids: tuple[int, ...]


@dataclass(frozen=True)
class Decision:
    """What the matcher decided: the code, and the candidates as the client's
    `candidate_groups` (ids, statuses and codes only)."""

    code: str
    candidate_groups: list[dict[str, Any]]

    @property
    def reason(self) -> str:
        return REASONS[self.code]


def _overlap(result: IncomingResult, order: OrderFacts) -> tuple[str, dict[str, int]]:
    found, ordered = set(result.marker_ids), set(order.marker_ids)
    shared = len(found & ordered)
    code = (
        "marker_overlap_exact"
        if found == ordered
        else "marker_overlap_partial"
        if shared
        else "marker_overlap_none"
    )
    return code, {"shared": shared, "result": len(found), "order": len(ordered)}


def _candidate(
    result: IncomingResult, order: OrderFacts, kind: str, level: str, reasons: list[str]
) -> dict[str, Any]:
    overlap_code, overlap = _overlap(result, order)
    lab_code = "same_lab" if order.lab_id == result.lab_id else "possible_wrong_lab"
    return {
        "candidate_type": kind,
        "order_id": str(order.order_id),
        # An order here is a transaction of one order.
        "order_transaction_id": str(order.order_id),
        "last_status": low_level(order.status),
        "confidence_level": level,
        "confidence_score": _SCORES[level],
        "reasons": [*reasons, lab_code, overlap_code],
        "marker_overlap": overlap,
        "status_context": {"status": order.status},
    }


def _is_open(order: OrderFacts) -> bool:
    return top_level(order.status) not in (COMPLETED, CANCELLED, FAILED)


def _same_person(order: OrderFacts, patient: Patient) -> bool:
    return order.patient is not None and order.patient.same_person(patient)


def decide(result: IncomingResult, orders: Sequence[OrderFacts]) -> Decision:
    """The decision about `result` among the team's `orders` (newest first)."""
    by_sample = [o for o in orders if o.sample_id is not None and o.sample_id == result.sample_id]
    options = [o for o in orders if _is_open(o) and _same_person(o, result.patient)]
    groups: dict[UUID, list[dict[str, Any]]] = {}
    provenance_user: UUID | None = None
    if by_sample:
        found = by_sample[0]
        demo = _same_person(found, result.patient)
        top = top_level(found.status)
        reasons = ["sample_id_match", "demographic_match" if demo else "demographic_mismatch"]
        if not demo:
            code = MATCH_SAMPLE_ID_MISMATCH_DEMO
        elif found.lab_id != result.lab_id:
            code = WRONG_LAB
        elif top == COMPLETED:
            code, reasons = MATCH_COMPLETED, [*reasons, "matched_completed_order"]
        elif top in (CANCELLED, FAILED):
            code, reasons = MATCH_CANCELLED, [*reasons, "matched_cancelled_order"]
        elif top == RECEIVED:
            code, reasons = WRONG_COLLECTION, [*reasons, "invalid_collection_state"]
        else:
            code = MATCH_SAMPLE_ID
        level = HIGH if demo else MEDIUM
        groups[found.user_id] = [_candidate(result, found, PROVENANCE_ORDER, level, reasons)]
        provenance_user = found.user_id
        options = [o for o in options if o.order_id != found.order_id]
    else:
        code = MATCH_DEMO if len(options) == 1 else MULTIPLE_DEMO_MATCH if options else NO_MATCH
    level = MEDIUM if len(options) == 1 else LOW
    for order in options:
        # `same_user`: an open order of the person whose order the sample id names.
        same = ["same_user"] if order.user_id == provenance_user else []
        groups.setdefault(order.user_id, []).append(
            _candidate(result, order, ORDER_OPTION, level, ["demographic_match", *same])
        )
    return Decision(
        code,
        [{"user_id": str(user), "candidates": candidates} for user, candidates in groups.items()],
    )
