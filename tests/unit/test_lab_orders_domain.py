"""Lab test orders on their own: the aggregate's state machine, the simulated lab's steps,
fates and results, and the idempotency fingerprint. No database."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from uuid import UUID, uuid4

import pytest
from healthledger.domain.context import CommandContext
from healthledger.domain.labs.catalog import ExpectedResult, Loinc, Marker, ReferenceRange
from healthledger.domain.labs.ordering import OrderRequest
from healthledger.domain.labs.orders import (
    BY_TEAM,
    CANCELLED,
    COMPLETED,
    FAILED,
    Order,
    OrderNotAdvanceable,
    OrderNotCancellable,
)
from healthledger.domain.labs.patients import PatientAddress, PatientDetails
from healthledger.domain.labs.sandbox import (
    ADVANCE,
    CANCEL,
    COMPLETE,
    FAIL,
    STEPS,
    SandboxPolicy,
    first_status,
    interpretation_of,
    next_move,
    reference_text,
    report_results,
    sample_id_of,
    steps_of,
)

from tests.unit.stored_form import assert_replays

T = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CTX = CommandContext(actor="team_api_key:test", request_id="req-1")
TEAM, USER = uuid4(), uuid4()
# Neither fails nor cancels: every order runs its whole course.
STEADY = SandboxPolicy(
    step_delays=(timedelta(seconds=1), timedelta(seconds=2), timedelta(seconds=3)),
    failure_rate=0.0,
    cancellation_rate=0.0,
)


def result(n: int, low: float | None, high: float | None, **critical: float) -> ExpectedResult:
    return ExpectedResult(
        id=n,
        name=f"Result {n}",
        slug=f"result-{n}",
        lab_id=1,
        provider_id=f"R{n}",
        loinc=Loinc(id=n, name=f"Loinc {n}", slug=f"loinc-{n}", code=f"{n}-1", unit="mg/dL"),
        unit="mg/dL",
        reference_range=ReferenceRange(low, high, **critical),
    )


def marker(n: int, *results: ExpectedResult) -> Marker:
    return Marker(
        id=n,
        name=f"Marker {n}",
        slug=f"marker-{n}",
        description="",
        lab_id=1,
        provider_id=f"M{n}",
        type="panel" if len(results) > 1 else "biomarker",
        unit="mg/dL",
        price="10.00",
        a_la_carte_enabled=True,
        expected_results=results,
    )


# A panel of four results (two with critical bounds) and a biomarker with an upper bound only.
PANEL = marker(
    1,
    result(11, 70, 99, critical_low=40, critical_high=400),
    result(12, 3.5, 5.1, critical_low=2.5, critical_high=6.5),
    result(13, 0.6, 1.3),
    result(14, 8.6, 10.3),
)
LDL = marker(2, result(21, None, 100))


def placed(method: str = "testkit", environment: str = "sandbox") -> Order:
    return Order.place(
        CTX,
        T,
        order_id=uuid4(),
        user_id=USER,
        team_id=TEAM,
        environment=environment,
        lab_id=1,
        collection_method=method,
        sealed_lab_test="sealed-lab-test",
        sealed_patient_details="sealed-details",
        sealed_patient_address="sealed-address",
        sealed_request_digest=None,
        status=first_status(method),
        next_step_at=T + timedelta(seconds=1),
    )


def run_course(order: Order, policy: SandboxPolicy = STEADY) -> list[str]:
    """Let the simulated lab take every step; the statuses the order went through."""
    now = T
    while (
        move := next_move(order.id, order.collection_method, order.status, now, policy)
    ) is not None:
        now += timedelta(seconds=5)
        if move.action == ADVANCE:
            order.move_to(
                CTX, now, move.status, next_step_at=move.next_step_at, sample_id=move.sample_id
            )
        elif move.action == COMPLETE:
            order.complete(CTX, now, sealed_results="sealed-r", sealed_interpretation="sealed-i")
        elif move.action == FAIL:
            order.fail(CTX, now, move.status.rsplit(".", 1)[-1], "lab failure")
        else:
            order.cancel(CTX, now, "lab_cancelled")
    return [status for status, _at in order.history]


@pytest.mark.parametrize("method", sorted(STEPS))
def test_an_order_runs_its_methods_steps_to_completion(method: str) -> None:
    order = placed(method)
    assert order.status == f"received.{method}.ordered" and order.is_open
    assert run_course(order) == list(steps_of(method))
    assert order.top_level_status == COMPLETED and not order.is_open
    assert order.sample_id == sample_id_of(order.id) and len(order.sample_id) == 10
    assert order.sealed_results == "sealed-r" and order.next_step_at is None
    assert_replays(order)


def test_the_stages_of_each_method_are_the_issues() -> None:
    assert steps_of("walk_in_test") == (
        "received.walk_in_test.ordered",
        "received.walk_in_test.requisition_created",
        "collecting_sample.walk_in_test.appointment_pending",
        "sample_with_lab.walk_in_test.partial_results",
        "completed.walk_in_test.completed",
    )
    assert steps_of("testkit")[2:4] == (
        "collecting_sample.testkit.transit_customer",
        "sample_with_lab.testkit.delivered_to_lab",
    )


def test_each_step_is_due_after_its_configured_delay() -> None:
    order = placed()
    move = next_move(order.id, "testkit", order.status, T, STEADY)
    assert move is not None and move.action == ADVANCE
    assert move.status == "received.testkit.requisition_created"
    # The step after the requisition comes the second delay later; beyond the list, the last.
    assert move.next_step_at == T + timedelta(seconds=2)
    third = next_move(order.id, "testkit", "collecting_sample.testkit.transit_customer", T, STEADY)
    assert third is not None and third.next_step_at == T + timedelta(seconds=3)


def test_the_lab_fails_or_cancels_orders_by_their_ids_and_the_rates() -> None:
    always_fail = SandboxPolicy(
        step_delays=(timedelta(0),), failure_rate=1.0, cancellation_rate=0.0
    )
    always_cancel = SandboxPolicy(
        step_delays=(timedelta(0),), failure_rate=0.0, cancellation_rate=1.0
    )
    failed = placed("walk_in_test")
    assert run_course(failed, always_fail)[-1] == "failed.walk_in_test.sample_error"
    assert failed.top_level_status == FAILED and failed.failure_reason == "lab failure"
    kit = placed("testkit")
    assert run_course(kit, always_fail)[-1] == "failed.testkit.failure_to_deliver_to_lab"
    cancelled = placed("at_home_phlebotomy")
    # Cancelled instead of reaching the lab: the sample never got there.
    assert run_course(cancelled, always_cancel) == [
        "received.at_home_phlebotomy.ordered",
        "received.at_home_phlebotomy.requisition_created",
        "collecting_sample.at_home_phlebotomy.appointment_pending",
        "cancelled.at_home_phlebotomy.cancelled",
    ]
    # At the default rates, the same order meets the same fate every time, and most orders
    # complete.
    policy = SandboxPolicy()
    fates = []
    for _ in range(400):
        order_id = uuid4()
        moves = [
            next_move(order_id, "testkit", status, T, policy) for status in steps_of("testkit")[:-1]
        ]
        assert moves == [
            next_move(order_id, "testkit", s, T, policy) for s in steps_of("testkit")[:-1]
        ]
        fates.append({m.action for m in moves if m is not None} & {FAIL, CANCEL} or {COMPLETE})
    completed = sum(1 for fate in fates if fate == {COMPLETE})
    assert 360 <= completed < 400


def test_an_order_can_be_cancelled_only_while_open() -> None:
    order = placed()
    order.cancel(CTX, T, BY_TEAM)
    assert order.status == "cancelled.testkit.cancelled" and order.cancel_reason == BY_TEAM
    assert order.top_level_status == CANCELLED
    with pytest.raises(OrderNotCancellable):
        order.cancel(CTX, T, BY_TEAM)
    with pytest.raises(OrderNotAdvanceable):
        order.move_to(CTX, T, "received.testkit.requisition_created", next_step_at=None)
    completed = placed()
    run_course(completed)
    with pytest.raises(OrderNotCancellable, match="completed"):
        completed.cancel(CTX, T, BY_TEAM)
    assert next_move(completed.id, "testkit", completed.status, T, STEADY) is None


def test_a_step_forward_never_reaches_a_final_status() -> None:
    with pytest.raises(ValueError, match="final"):
        placed().move_to(CTX, T, "completed.testkit.completed", next_step_at=None)


def test_an_idempotency_keys_order_id_is_derived_from_team_and_key() -> None:
    first = Order.id_for_idempotency_key(TEAM, "key-1")
    assert first == Order.id_for_idempotency_key(TEAM, "key-1")
    assert first != Order.id_for_idempotency_key(TEAM, "key-2")
    assert first != Order.id_for_idempotency_key(uuid4(), "key-1")


def test_the_created_event_names_user_and_team_and_seals_the_patient() -> None:
    events = placed().collect_events()
    created = events[0]
    assert isinstance(created, Order.Created)
    assert (created.user_id, created.team_id) == (USER, TEAM)
    assert set(Order.Created.PERSONAL_FIELDS) == {
        "sealed_lab_test",
        "sealed_patient_details",
        "sealed_patient_address",
        "sealed_request_digest",
        "sealed_icd_codes",
        "sealed_passthrough",
    }
    assert set(Order.Completed.PERSONAL_FIELDS) == {"sealed_results", "sealed_interpretation"}


# -- results ------------------------------------------------------------------------------


def test_one_value_per_expected_result_deterministic_per_order() -> None:
    order_id = uuid4()
    results = report_results(order_id, [PANEL, LDL])
    assert [v["expected_result_id"] for v in results.values] == [11, 12, 13, 14, 21]
    assert results == report_results(order_id, [PANEL, LDL])
    for value in results.values:
        assert set(value) >= {"value", "unit", "reference_range", "interpretation"}
        reference = value["reference_range"]
        assert value["interpretation"] == interpretation_of(
            value["value"],
            ReferenceRange(
                reference["low"],
                reference["high"],
                reference["critical_low"],
                reference["critical_high"],
            ),
        )
    assert results.values[0]["marker_id"] == 1 and results.values[4]["marker_id"] == 2
    assert results.values[4]["reference_range"]["text"] == "<100"


@pytest.mark.parametrize("outcome", ["normal", "abnormal", "critical"])
def test_a_forced_outcome_is_the_orders_interpretation(outcome: str) -> None:
    for _ in range(50):
        results = report_results(uuid4(), [PANEL, LDL], forced=outcome)
        assert results.interpretation == outcome
        found = [v["interpretation"] for v in results.values]
        assert found.count("critical") == (1 if outcome == "critical" else 0)
        if outcome == "normal":
            assert set(found) == {"normal"}


def test_without_a_forced_outcome_orders_come_out_mostly_normal_some_critical() -> None:
    outcomes = [report_results(uuid4(), [PANEL]).interpretation for _ in range(600)]
    assert outcomes.count("normal") > 380
    assert outcomes.count("abnormal") > 50 and outcomes.count("critical") > 10


def test_interpretation_reads_the_range_and_its_critical_bounds() -> None:
    glucose = ReferenceRange(70, 99, critical_low=40, critical_high=400)
    assert [interpretation_of(v, glucose) for v in (85, 99, 100, 39, 401, 69)] == [
        "normal",
        "normal",
        "abnormal",
        "critical",
        "critical",
        "abnormal",
    ]
    assert reference_text(glucose) == "70-99"
    assert reference_text(ReferenceRange(30, None)) == ">30"
    assert reference_text(ReferenceRange(None, None)) is None


def test_the_request_fingerprint_ignores_what_is_left_out_or_sent_as_null() -> None:
    user, test = uuid4(), uuid4()
    details = PatientDetails(
        first_name="Ada",
        last_name="Lovelace",
        email="ada@example.com",
        phone_number="+1 555 0100",
        gender="female",
        dob=date(1990, 1, 2),
    )
    address = PatientAddress.model_validate(
        {
            "first_line": "1 Main St",
            "city": "Austin",
            "state": "TX",
            "zip": "78701",
            "country": "US",
        }
    )
    bare = OrderRequest(user_id=user, lab_test_id=test)
    assert bare.fingerprint() == OrderRequest(user, test, None, None, None).fingerprint()
    full = OrderRequest(user, test, "testkit", details, address)
    assert full.fingerprint() == OrderRequest(user, test, "testkit", details, address).fingerprint()
    assert (
        len({bare.fingerprint(), full.fingerprint(), OrderRequest(user, uuid4()).fingerprint()})
        == 3
    )
    assert address.zip_code == "78701"


def test_patient_details_refuse_what_the_demographics_refuse() -> None:
    with pytest.raises(ValueError):
        PatientDetails.model_validate(
            {
                "first_name": "Ada",
                "last_name": "Lovelace",
                "email": "not-an-email",
                "phone_number": "+1 555 0100",
                "gender": "female",
                "dob": "1990-01-02",
            }
        )
    with pytest.raises(ValueError):
        PatientAddress.model_validate(
            {"first_line": "x", "city": "y", "state": "z", "zip": "1", "extra": 1}
        )


def test_uuid_sample_ids_are_stable_digits() -> None:
    order_id = UUID("12345678-1234-4234-8234-123456789abc")
    assert sample_id_of(order_id) == sample_id_of(order_id)
    assert sample_id_of(order_id).isdigit()


def qualitative(n: int, loinc_name: str) -> ExpectedResult:
    return ExpectedResult(
        id=n,
        name=f"Screen {n}",
        slug=f"screen-{n}",
        lab_id=1,
        provider_id=f"Q{n}",
        loinc=Loinc(id=n, name=loinc_name, slug=f"loinc-{n}", code=f"{n}-2", unit=None),
        unit=None,
        reference_range=ReferenceRange(None, None),
    )


def test_presence_tests_read_negative_or_positive_never_a_number() -> None:
    screens = marker(
        3,
        qualitative(31, "HIV 1+2 Ab+HIV1 p24 Ag [Presence] in Serum or Plasma by Immunoassay"),
        qualitative(32, "Chlamydia trachomatis DNA [Presence] by NAA with probe detection"),
    )
    normal = report_results(uuid4(), [screens], forced="normal")
    assert [(v["result"], v["value"], v["type"]) for v in normal.values] == [
        ("Non-reactive", None, "coded_value"),
        ("Not detected", None, "coded_value"),
    ]
    assert normal.interpretation == "normal"
    assert normal.values[0]["reference_range"]["text"] == "Non-reactive"
    abnormal = report_results(uuid4(), [screens], forced="abnormal")
    assert {v["result"] for v in abnormal.values} & {"Reactive", "Detected"}
    assert abnormal.interpretation == "abnormal"
    # A presence test is never critical: a critical outcome falls on a result that can be.
    mixed = report_results(uuid4(), [screens, PANEL], forced="critical")
    critical = [v for v in mixed.values if v["interpretation"] == "critical"]
    assert len(critical) == 1 and critical[0]["type"] == "numeric"
