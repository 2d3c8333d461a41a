"""The matcher of lab reports to a team's orders (domain/labs/result_matching.py) and the
unmatched result's review states (domain/labs/unmatched_results.py), without I/O: every
decision code from the orders it is decided among, and what each decision allows."""

from __future__ import annotations

from datetime import UTC, date, datetime
from uuid import UUID, uuid4

import pytest
from healthledger.domain.context import CommandContext
from healthledger.domain.labs.orders import OrderedTest
from healthledger.domain.labs.result_matching import (
    IncomingResult,
    OrderFacts,
    Patient,
    decide,
)
from healthledger.domain.labs.unmatched_results import (
    ACCEPT,
    REJECT,
    UNSURE,
    UnmatchedResult,
    UnmatchedResultDecided,
)

ADA = Patient("Ada", "Lovelace", date(1985, 12, 10), "female")
QUEST, LABCORP = 1, 2
USER, OTHER_USER = uuid4(), uuid4()
TEST = OrderedTest(uuid4(), "Wellness", (10, 11))


def order(status: str, sample_id: str | None = "0000000001", **fields: object) -> OrderFacts:
    values: dict[str, object] = {
        "order_id": uuid4(),
        "user_id": USER,
        "lab_id": QUEST,
        "status": status,
        "sample_id": sample_id,
        "patient": ADA,
        "test": TEST,
        **fields,
    }
    return OrderFacts(**values)  # type: ignore[arg-type]


def report(
    sample_id: str = "0000000001", patient: Patient = ADA, lab_id: int = QUEST
) -> IncomingResult:
    return IncomingResult(lab_id, sample_id, patient, (10, 11))


@pytest.mark.parametrize(
    ("orders", "incoming", "code"),
    [
        ([order("completed.walk_in_test.completed")], report(), "match_completed"),
        ([order("cancelled.walk_in_test.cancelled")], report(), "match_cancelled"),
        ([order("failed.walk_in_test.sample_error")], report(), "match_cancelled"),
        ([order("received.walk_in_test.requisition_created")], report(), "wrong_collection"),
        (
            [order("received.walk_in_test.requisition_created")],
            report(lab_id=LABCORP),
            "wrong_lab",
        ),
        (
            [order("received.walk_in_test.requisition_created")],
            report(patient=Patient("Ada", "Lovelace", date(1984, 12, 10))),
            "match_sample_id_mismatch_demo",
        ),
        ([order("sample_with_lab.walk_in_test.partial_results")], report(), "match_sample_id"),
        # Names compare without case or surrounding spaces.
        (
            [order("received.walk_in_test.requisition_created")],
            report("999", Patient(" ada ", "LOVELACE", ADA.dob)),
            "match_demo",
        ),
        (
            [
                order("received.walk_in_test.requisition_created"),
                order("collecting_sample.walk_in_test.appointment_pending", "2"),
            ],
            report("999"),
            "multiple_demo_match",
        ),
        # A completed order is no option for a report of another sample.
        ([order("completed.walk_in_test.completed")], report("999"), "no_match"),
        ([], report(), "no_match"),
    ],
)
def test_every_decision_from_the_orders(
    orders: list[OrderFacts], incoming: IncomingResult, code: str
) -> None:
    assert decide(incoming, orders).code == code


def test_the_candidates_of_a_completed_orders_sample() -> None:
    done = order("completed.walk_in_test.completed")
    waiting = order("received.walk_in_test.requisition_created", "2")
    elsewhere = order("received.walk_in_test.requisition_created", "3", user_id=OTHER_USER)
    stranger = order(
        "received.walk_in_test.requisition_created",
        "4",
        user_id=uuid4(),
        patient=Patient("Grace", "Hopper", date(1956, 12, 9)),
    )
    decision = decide(report(), [done, waiting, elsewhere, stranger])
    assert decision.code == "match_completed" and decision.reason
    groups = {UUID(g["user_id"]): g["candidates"] for g in decision.candidate_groups}
    assert set(groups) == {USER, OTHER_USER}  # the stranger's demographics differ
    provenance, option = groups[USER]
    assert provenance["order_id"] == str(done.order_id)
    assert provenance["candidate_type"] == "provenance_order"
    assert provenance["confidence_level"] == "high" and provenance["last_status"] == "completed"
    assert provenance["reasons"] == [
        "sample_id_match",
        "demographic_match",
        "matched_completed_order",
        "same_lab",
        "marker_overlap_exact",
    ]
    assert option["order_id"] == str(waiting.order_id)
    assert option["candidate_type"] == "order_option" and "same_user" in option["reasons"]
    (other,) = groups[OTHER_USER]
    assert "same_user" not in other["reasons"] and other["confidence_level"] == "low"


def test_a_search_matches_a_name_or_the_date_of_birth() -> None:
    assert ADA.matches_search("lovelace") and ADA.matches_search(" Ada ")
    assert ADA.matches_search("1985-12-10")
    assert not ADA.matches_search("Love") and not ADA.matches_search("1985")
    assert Patient.of_stored(ADA.sealable()) == ADA
    assert Patient.of_stored({"first_name": "Ada"}) is None


def _received() -> UnmatchedResult:
    return UnmatchedResult.new(
        CommandContext.system("test"),
        datetime(2026, 3, 10, tzinfo=UTC),
        id=uuid4(),
        team_id=uuid4(),
        environment="sandbox",
        lab_id=QUEST,
        decision_code="no_match",
        reason="",
        result_status="final",
        candidate_groups=[],
        sealed_result="v1.sealed",
        run_id=None,
    )


def test_the_review_states_and_what_each_allows() -> None:
    result = _received()
    assert result.allowed_actions == (ACCEPT, REJECT, UNSURE)
    result.record(
        CommandContext.system("test"),
        datetime(2026, 3, 11, tzinfo=UTC),
        UnmatchedResult.Escalated,
        sealed_note=None,
    )
    assert result.status == "pending_ops_review" and result.allowed_actions == (ACCEPT, REJECT)
    with pytest.raises(UnmatchedResultDecided):
        result.require_allowed(UNSURE)
    result.record(
        CommandContext.system("test"),
        datetime(2026, 3, 12, tzinfo=UTC),
        UnmatchedResult.Rejected,
        sealed_note=None,
    )
    assert result.status == "resolved" and result.resolution_action == REJECT
    assert result.reviewed_at == datetime(2026, 3, 12, tzinfo=UTC)
    for action in (ACCEPT, REJECT, UNSURE):
        with pytest.raises(UnmatchedResultDecided):
            result.require_allowed(action)
    assert UnmatchedResult.Rejected.SHREDS_KEY and UnmatchedResult.Accepted.SHREDS_KEY
    assert not UnmatchedResult.Escalated.SHREDS_KEY
