"""The sandbox's test harness of unmatched results (`POST /v3/unmatched_result_test`): a
run per case, which writes a lab's report built from the team's own orders as the case
names it, matches it as any report is matched (`result_matching.decide`), and checks
that the decision is the case's. One stream per run, its id derived from the team and
the idempotency key, so the same key answers the same run.

The labs here are simulated: the harness is how a sandbox team sees results arrive
without an order they fit. Outside the sandbox it is refused. It runs in the request:
the run, and the unmatched result it made, are recorded in one save; a run that could
not build its case is recorded failed, at the stage it stopped, with a code and a
message (ids and statuses only).

Orders: `provided` names the team's order of each of the case's roles; `managed` lets
the harness take the team's newest orders in the statuses the case requires (this
deployment makes no orders on a team's behalf: the team places them, and moves them
with `/test`).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from uuid import UUID, uuid4

from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError
from healthledger.domain.audited import Audited
from healthledger.domain.context import DEFAULT_ENVIRONMENT, CommandContext
from healthledger.domain.errors import ConcurrentChange, LedgerError
from healthledger.domain.labs.catalog import LabTestLookup, LabTestView
from healthledger.domain.labs.lab_tests import UnknownLabTests
from healthledger.domain.labs.ordering import SANDBOX
from healthledger.domain.labs.orders import IdempotencyKeyReused, OrderedTest, low_level
from healthledger.domain.labs.result_matching import (
    MATCH_CANCELLED,
    MATCH_COMPLETED,
    MATCH_DEMO,
    MATCH_SAMPLE_ID_MISMATCH_DEMO,
    MULTIPLE_DEMO_MATCH,
    NO_MATCH,
    WRONG_COLLECTION,
    WRONG_LAB,
    IncomingResult,
    OrderFacts,
    Patient,
)
from healthledger.domain.labs.sandbox import sample_id_of
from healthledger.domain.labs.unmatched_results import FINAL, UnmatchedResults
from healthledger.domain.ledger import Clock, Ledger, command

# Order sources (the client's UnmatchedResultTestOrderSource).
MANAGED = "managed"
PROVIDED = "provided"
# Run statuses and stages (the client's).
SUCCEEDED = "succeeded"
FAILED = "failed"
VALIDATING = "validating"
SELECTING_CONFIGURATION = "selecting_configuration"
WRITING_RESULT = "writing_result"
MATCHING_RESULT = "matching_result"
VERIFYING_REVIEW = "verifying_review"

_RUN_NAMESPACE = uuid.UUID("d2b4e6f8-1a3c-5e70-9b2d-4f6a8c0e2b41")
_REQUISITION = "requisition_created"
_SAME_LAB = "the result comes from the order's lab"


@dataclass(frozen=True)
class CaseDefinition:
    """A case: the orders it is built from (role -> the low-level status each must be
    in) and what it asks of the labs."""

    case: str
    roles: Mapping[str, str]
    lab_constraints: tuple[str, ...] = ()


CASES: dict[str, CaseDefinition] = {
    case.case: case
    for case in (
        CaseDefinition(MATCH_COMPLETED, {"order": "completed"}, (_SAME_LAB,)),
        CaseDefinition(MATCH_CANCELLED, {"order": "cancelled"}, (_SAME_LAB,)),
        CaseDefinition(WRONG_COLLECTION, {"order": _REQUISITION}, (_SAME_LAB,)),
        CaseDefinition(
            WRONG_LAB,
            {"order": _REQUISITION},
            ("the result comes from another lab than the order's",),
        ),
        CaseDefinition(
            MULTIPLE_DEMO_MATCH,
            {"first": _REQUISITION, "second": _REQUISITION},
            (_SAME_LAB, "both orders are of one patient"),
        ),
        CaseDefinition(MATCH_SAMPLE_ID_MISMATCH_DEMO, {"order": _REQUISITION}, (_SAME_LAB,)),
        CaseDefinition(
            MATCH_DEMO,
            {"order": _REQUISITION},
            (_SAME_LAB, "the patient has no other open order"),
        ),
        CaseDefinition(NO_MATCH, {}, ()),
    )
}

# Made-up patients of a no_match report: nobody's.
_FIRST_NAMES = ("Rosalind", "Alan", "Grace", "Edsger", "Barbara", "Claude")
_LAST_NAMES = ("Franklin", "Turing", "Hopper", "Dijkstra", "Liskov", "Shannon")


@dataclass(frozen=True)
class ResultTestRequest:
    """The harness's request, as validated."""

    case: str
    order_source: str
    orders: Mapping[str, UUID | None] = field(default_factory=dict)
    result_status: str = FINAL
    interpretation: str | None = None
    lab_test_id: UUID | None = None
    wrong_lab_test_id: UUID | None = None

    def fingerprint(self) -> str:
        """The SHA-256 of the request (ids and codes only: kept in clear)."""
        canonical = {
            "case": self.case,
            "order_source": self.order_source,
            "orders": {role: str(o) if o else None for role, o in sorted(self.orders.items())},
            "result_status": self.result_status,
            "interpretation": self.interpretation,
            "lab_test_id": str(self.lab_test_id) if self.lab_test_id else None,
            "wrong_lab_test_id": str(self.wrong_lab_test_id) if self.wrong_lab_test_id else None,
        }
        text = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


class HarnessNotInSandbox(LedgerError):
    def __init__(self) -> None:
        super().__init__(
            "The unmatched result test harness runs in the sandbox only: use a sandbox key "
            "(a production result comes from its lab)."
        )


class ResultTestRunNotFound(LedgerError):
    def __init__(self) -> None:
        super().__init__("Unmatched result test run not found.")


class _Stopped(Exception):
    """A run that cannot build its case: where, and why (ids and statuses only)."""

    def __init__(self, stage: str, code: str, message: str) -> None:
        super().__init__(message)
        self.stage, self.code, self.message = stage, code, message


class UnmatchedResultTestRun(Audited, created_event_name="Started"):
    TOPIC = "healthledger:UnmatchedResultTestRun"
    USER_STREAM = None

    class Event(Audited.Event):
        pass

    class Started(Event, Aggregate.Created):
        TOPIC = "healthledger:UnmatchedResultTestRun.Started.v1"
        team_id: UUID
        environment: str
        case: str
        order_source: str
        result_status: str
        request_digest: str

    # The founding event is called Started; Created names it too (see LinkToken).
    Created = Started

    class Succeeded(Event):
        """The report written and decided as its case: the orders it was built from
        (role -> order_id, user_id, order_transaction_id) and the unmatched result."""

        TOPIC = "healthledger:UnmatchedResultTestRun.Succeeded.v1"
        orders: dict[str, dict[str, str]]
        raw_result_id: UUID

        def apply(self, run: UnmatchedResultTestRun) -> None:
            run.status = run.stage = SUCCEEDED
            run.orders = self.orders
            run.raw_result_id = self.raw_result_id
            run.completed_at = self.timestamp

    class Failed(Event):
        TOPIC = "healthledger:UnmatchedResultTestRun.Failed.v1"
        stage: str
        code: str
        message: str

        def apply(self, run: UnmatchedResultTestRun) -> None:
            run.status = FAILED
            run.stage = FAILED
            run.failed_stage = self.stage
            run.error = {"code": self.code, "message": self.message}
            run.completed_at = self.timestamp

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        team_id: UUID,
        environment: str,
        case: str,
        order_source: str,
        result_status: str,
        request_digest: str,
    ) -> None:
        self.team_id = team_id
        self.environment = environment
        self.case = case
        self.order_source = order_source
        self.result_status = result_status
        self.request_digest = request_digest
        self.status = "running"
        self.stage = VALIDATING
        self.failed_stage: str | None = None
        self.orders: dict[str, dict[str, str]] = {}
        self.raw_result_id: UUID | None = None
        self.error: dict[str, str] | None = None
        self.completed_at: datetime | None = None

    @staticmethod
    def id_for_idempotency_key(team_id: UUID, key: str) -> UUID:
        return uuid.uuid5(_RUN_NAMESPACE, f"{team_id}\x1f{key}")


# The team's orders, opened (newest first), and the shared demo lab tests.
OrdersOfTeam = Callable[[UUID], Sequence[OrderFacts]]
DemoLabTests = Callable[[], Sequence[LabTestView]]


class ResultTestHarness:
    def __init__(
        self,
        ledger: Ledger,
        clock: Clock,
        results: UnmatchedResults,
        lab_tests: LabTestLookup,
        demo_lab_tests: DemoLabTests,
    ) -> None:
        self.ledger = ledger
        self.clock = clock
        self.results = results
        self.lab_tests = lab_tests
        self.demo_lab_tests = demo_lab_tests

    def load(self, team_id: UUID, run_id: UUID) -> UnmatchedResultTestRun:
        run = self.ledger.find(run_id)
        if not isinstance(run, UnmatchedResultTestRun) or run.team_id != team_id:
            raise ResultTestRunNotFound()
        return run

    @command
    def run(
        self, ctx: CommandContext, team_id: UUID, key: str, request: ResultTestRequest
    ) -> UnmatchedResultTestRun:
        """Run the case now (sandbox only); the same key and request answer the first
        run, another request with the key is a 409."""
        environment = ctx.environment or DEFAULT_ENVIRONMENT
        if environment != SANDBOX:
            raise HarnessNotInSandbox()
        run_id = UnmatchedResultTestRun.id_for_idempotency_key(team_id, key)
        fingerprint = request.fingerprint()
        earlier = self._run_before(run_id, team_id, fingerprint)
        if earlier is not None:
            return earlier
        # Lab tests named are checked before anything is recorded: a 404, as an order's.
        named = [t for t in (request.lab_test_id, request.wrong_lab_test_id) if t is not None]
        tests = {t: self.lab_tests.lab_test(team_id, t) for t in named}
        unknown = [t for t, view in tests.items() if view is None]
        if unknown:
            raise UnknownLabTests(unknown)
        now = self.clock()
        run = UnmatchedResultTestRun.new(
            ctx,
            now,
            id=run_id,
            team_id=team_id,
            environment=environment,
            case=request.case,
            order_source=request.order_source,
            result_status=request.result_status,
            request_digest=fingerprint,
        )
        result_id = uuid4()
        made = None
        try:
            roles = self._orders(team_id, request)
            incoming, test = self._report(team_id, request, roles, result_id)
            decision, made = self.results.received(
                ctx,
                team_id,
                incoming,
                test,
                result_id=result_id,
                result_status=request.result_status,
                interpretation=request.interpretation,
                run_id=run_id,
            )
            if made is None or decision.code != request.case:
                raise _Stopped(
                    VERIFYING_REVIEW,
                    "decided_otherwise",
                    f"The report was decided {decision.code}, not {request.case}: the team's "
                    "other orders changed the decision (see the case's lab constraints).",
                )
            run.record(
                ctx,
                self.clock(),
                UnmatchedResultTestRun.Succeeded,
                orders={
                    role: {
                        "order_id": str(o.order_id),
                        "user_id": str(o.user_id),
                        "order_transaction_id": str(o.order_id),
                    }
                    for role, o in roles.items()
                },
                raw_result_id=result_id,
            )
        except _Stopped as stopped:
            if made is not None:
                self.results.forget_key(result_id)
                made = None
            run.record(
                ctx,
                self.clock(),
                UnmatchedResultTestRun.Failed,
                stage=stopped.stage,
                code=stopped.code,
                message=stopped.message,
            )
        try:
            self.ledger.save(run, *([made] if made is not None else []))
        except IntegrityError as exc:
            if made is not None:
                self.results.forget_key(result_id)
            # A concurrent request with the same key recorded the run first.
            earlier = self._run_before(run_id, team_id, fingerprint)
            if earlier is None:
                raise ConcurrentChange() from exc
            return earlier
        return run

    def _run_before(
        self, run_id: UUID, team_id: UUID, fingerprint: str
    ) -> UnmatchedResultTestRun | None:
        run = self.ledger.find(run_id)
        if run is None:
            return None
        assert isinstance(run, UnmatchedResultTestRun), "a harness key's id is a run's"
        if run.team_id != team_id or run.request_digest != fingerprint:
            raise IdempotencyKeyReused()
        return run

    # -- the case's orders --------------------------------------------------------------

    def _orders(self, team_id: UUID, request: ResultTestRequest) -> dict[str, OrderFacts]:
        case = CASES[request.case]
        orders = list(self.results.orders_of_team(team_id))
        by_id = {o.order_id: o for o in orders}
        chosen: dict[str, OrderFacts] = {}
        for role, wanted in case.roles.items():
            if request.order_source == PROVIDED:
                given = request.orders.get(role)
                if given is None:
                    raise _Stopped(
                        VALIDATING,
                        "missing_order",
                        f"The case needs an order for the role '{role}' (orders.{role}).",
                    )
                found = by_id.get(given)
                if found is None:
                    raise _Stopped(
                        VALIDATING, "order_not_found", f"orders.{role} is not an order of the team."
                    )
                if low_level(found.status) != wanted:
                    raise _Stopped(
                        SELECTING_CONFIGURATION,
                        "order_status_mismatch",
                        f"orders.{role} is {found.status}: the case needs it {wanted}.",
                    )
            else:
                taken = {o.order_id for o in chosen.values()}
                candidates = [
                    o
                    for o in orders
                    if low_level(o.status) == wanted
                    and o.order_id not in taken
                    and o.patient is not None
                    and (not chosen or _same_patient(o, next(iter(chosen.values()))))
                ]
                if not candidates:
                    raise _Stopped(
                        SELECTING_CONFIGURATION,
                        "no_order_in_status",
                        f"The team has no order {wanted} for the role '{role}': place one "
                        "and move it with POST /v3/order/{order_id}/test.",
                    )
                found = candidates[0]
            if found.patient is None or found.sample_id is None:
                raise _Stopped(
                    VALIDATING,
                    "order_unusable",
                    f"orders.{role} has no sample id or no patient (its user erased).",
                )
            chosen[role] = found
        if request.case == MULTIPLE_DEMO_MATCH and not _same_patient(
            chosen["first"], chosen["second"]
        ):
            raise _Stopped(
                VALIDATING,
                "patients_differ",
                "The two orders are of different patients: the case needs one patient's.",
            )
        return chosen

    # -- the report ---------------------------------------------------------------------

    def _report(
        self,
        team_id: UUID,
        request: ResultTestRequest,
        roles: Mapping[str, OrderFacts],
        result_id: UUID,
    ) -> tuple[IncomingResult, OrderedTest]:
        """The lab's report the case makes of its orders."""
        order = next(iter(roles.values()), None)
        test = self._test(team_id, request, order)
        if order is None or order.patient is None:
            patient = _nobody(result_id)
            return IncomingResult(
                test[0], sample_id_of(result_id), patient, test[1].marker_ids
            ), test[1]
        patient = order.patient
        sample_id = order.sample_id or sample_id_of(result_id)
        if request.case in (MATCH_DEMO, MULTIPLE_DEMO_MATCH):
            # A sample number no order has: only the patient can match.
            sample_id = sample_id_of(result_id)
        if request.case == MATCH_SAMPLE_ID_MISMATCH_DEMO:
            # The lab's record of the patient differs: a year off in the date of birth.
            dob = patient.dob
            moved = (
                dob.replace(year=dob.year - 1)
                if not (dob.month == 2 and dob.day == 29)
                else date(dob.year - 1, 2, 28)
            )
            patient = Patient(patient.first_name, patient.last_name, moved, patient.gender)
        return IncomingResult(test[0], sample_id, patient, test[1].marker_ids), test[1]

    def _test(
        self, team_id: UUID, request: ResultTestRequest, order: OrderFacts | None
    ) -> tuple[int, OrderedTest]:
        """The lab and the test the report is of."""
        if request.case == WRONG_LAB:
            assert order is not None
            view = self._view(team_id, request.wrong_lab_test_id)
            if view is None:
                view = next((t for t in self.demo_lab_tests() if t.lab_id != order.lab_id), None)
            if view is None or view.lab_id == order.lab_id:
                raise _Stopped(
                    WRITING_RESULT,
                    "same_lab",
                    "wrong_lab_test_id must be a lab test of another lab than the order's.",
                )
            return view.lab_id, OrderedTest(view.id, view.name, view.marker_ids)
        view = self._view(team_id, request.lab_test_id)
        if order is not None:
            if view is not None and view.lab_id != order.lab_id:
                raise _Stopped(
                    WRITING_RESULT,
                    "other_lab",
                    "lab_test_id must be a lab test of the order's lab for this case.",
                )
            if view is None and order.test is not None:
                return order.lab_id, order.test
        if view is None:
            # No order (no_match), or its test unreadable: the first shared demo test.
            view = self.demo_lab_tests()[0]
        return view.lab_id, OrderedTest(view.id, view.name, view.marker_ids)

    def _view(self, team_id: UUID, lab_test_id: UUID | None) -> LabTestView | None:
        return None if lab_test_id is None else self.lab_tests.lab_test(team_id, lab_test_id)


def _same_patient(one: OrderFacts, other: OrderFacts) -> bool:
    return (
        one.patient is not None
        and other.patient is not None
        and one.patient.same_person(other.patient)
    )


def _nobody(result_id: UUID) -> Patient:
    """A made-up patient, fixed by the result's id."""
    digest = hashlib.sha256(f"{result_id}\x1fpatient".encode()).digest()
    return Patient(
        _FIRST_NAMES[digest[0] % len(_FIRST_NAMES)],
        _LAST_NAMES[digest[1] % len(_LAST_NAMES)],
        date(1950 + digest[2] % 50, 1 + digest[3] % 12, 1 + digest[4] % 28),
        "female" if digest[5] % 2 else "male",
    )
