"""Lab test orders: one stream per order, about one user of one team.

An order moves through the statuses of its collection method (`sandbox.STEPS`), each a
`<top level>.<method>.<low level>` status as the official client names them:

    received.<m>.ordered -> received.<m>.requisition_created -> collecting_sample.<m>.<...>
        -> sample_with_lab.<m>.<...> -> completed.<m>.completed   (results reported)

and, from any status before completed, to `cancelled.<m>.cancelled` (the team, the
user's deletion, or the lab) or `failed.<m>.<...>` (the lab). Completed, cancelled and
failed are final.

Personal data is sealed with the user's key (`PERSONAL_FIELDS`): the patient's details
and address (the requisition data), the request's fingerprint for idempotency, the lab
test ordered (its id, name and markers: a "Sexual Health" panel says something about the
person, issue 29), the diagnosis codes it was placed with (ICD-10-CM) and the team's
passthrough string, the results and their interpretation. Statuses, times, the lab, the
collection method, whether it is a priority (STAT) order, and ids of the process stay in
clear, so the audit keeps that an
order was placed, moved, cancelled or completed after the user's erasure destroyed what
it was about. Orders placed before the lab test was sealed were recorded as
`Order.CreatedV1` (its test in clear); the service's start redacts them into `Created`
(ADR 0028, `adapters/persistence/redactions/`).

Event bodies only apply state; the rules (which step is next, when it is due, whether a
cancel is allowed) are in the command methods and in `sandbox.py`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, NamedTuple
from uuid import UUID

from eventsourcing.domain import Aggregate
from healthledger.domain.audited import Audited, UserStream
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import LedgerError

# Top-level statuses (the official client's OrderTopLevelStatus).
RECEIVED = "received"
COLLECTING_SAMPLE = "collecting_sample"
SAMPLE_WITH_LAB = "sample_with_lab"
COMPLETED = "completed"
CANCELLED = "cancelled"
FAILED = "failed"
TOP_LEVEL_STATUSES = (RECEIVED, COLLECTING_SAMPLE, SAMPLE_WITH_LAB, COMPLETED, CANCELLED, FAILED)
FINAL_STATUSES = frozenset({COMPLETED, CANCELLED, FAILED})
# The collection method of an at-home test kit (the patient collects the sample).
TESTKIT = "testkit"
# The first status of every method: placed, not yet dispatched to the lab.
ORDERED = "ordered"

# Result interpretations, from best to worst (an order's is its worst result's).
NORMAL = "normal"
ABNORMAL = "abnormal"
CRITICAL = "critical"
INTERPRETATIONS = (NORMAL, ABNORMAL, CRITICAL)

# Why an order was cancelled.
BY_TEAM = "team_request"
BY_USER_DELETION = "user_deleted"
BY_LAB = "lab_cancelled"

# Who moves a sandbox order on its own: the simulated lab, run by the scheduler.
SANDBOX_LAB = "system:sandbox_lab"

# Orders placed with an idempotency key have an id derived from the team and the key, so
# that two requests with the same key compete for one stream (the event store lets one
# of them found it).
_IDEMPOTENCY_NAMESPACE = uuid.UUID("6f1d3c2a-9b8e-5d47-a1c0-3e5f7a9b2d14")


def status_of(top: str, method: str, low: str) -> str:
    return f"{top}.{method}.{low}"


def top_level(status: str) -> str:
    return status.split(".", 1)[0]


def low_level(status: str) -> str:
    return status.rsplit(".", 1)[-1]


class OrderNotFound(LedgerError):
    def __init__(self) -> None:
        super().__init__("Order not found.")


class OrderNotCancellable(LedgerError):
    def __init__(self, status: str) -> None:
        super().__init__(f"The order is {top_level(status)}: only an open order can be cancelled.")


class OrderNotAdvanceable(LedgerError):
    """`POST /v3/order/{id}/test` on an order that cannot move: final, or not a sandbox
    order (only the simulated lab moves orders here)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)


class IdempotencyKeyReused(LedgerError):
    def __init__(self) -> None:
        super().__init__(
            "This X-Idempotency-Key was used for another request body: use a new key for a "
            "new order."
        )


class KitNotRegistrable(LedgerError):
    """A test kit registered twice, or once its sample is with the lab (409)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)


class OrderNotSchedulable(LedgerError):
    """An activation date refused (400, as the official client documents it): the order
    is no longer waiting to be dispatched, it was placed for immediate processing, or the
    date is out of range."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)


class ResultsNotReady(LedgerError):
    def __init__(self) -> None:
        super().__init__("The order has no results yet: they come when it is completed.")


class OrderChange(NamedTuple):
    """A change of the order that moves when its results are due: a status it took, or its
    activation date moved (`activation`, to `activate_by`). `next_step_at` is the simulated
    lab's next step as the change left it. Kept for the order's tracking (`tracking.py`);
    a tuple, as `history`'s entries, so that the aggregate's state stays plain data."""

    at: datetime
    actor: str
    status: str
    next_step_at: datetime | None
    activation: bool = False
    activate_by: date | None = None


@dataclass(frozen=True)
class OrderedTest:
    """What an order is of: the lab test (the team's, or a shared demo test) and its
    markers, sealed together on the order (`Order.sealed_lab_test`)."""

    lab_test_id: UUID
    name: str
    marker_ids: tuple[int, ...]

    def sealable(self) -> dict[str, Any]:
        """The value sealed with the user's key (JSON)."""
        return {
            "lab_test_id": str(self.lab_test_id),
            "lab_test_name": self.name,
            "marker_ids": list(self.marker_ids),
        }

    @classmethod
    def of_opened(cls, opened: Any) -> OrderedTest | None:
        """The test from its opened value (None: not opened, the user's key destroyed)."""
        if not isinstance(opened, dict):
            return None
        return cls(
            UUID(str(opened["lab_test_id"])),
            str(opened["lab_test_name"]),
            tuple(int(i) for i in opened["marker_ids"]),
        )


class Order(Audited, created_event_name="Created"):
    TOPIC = "healthledger:Order"
    USER_STREAM = UserStream("order", read_models=("read_model:orders",))

    class Event(Audited.Event):
        pass

    class CreatedV1(Event, Aggregate.Created):
        """The order placed, as recorded before the lab test was sealed: its id, name and
        markers in clear. Recorded no more; the service's start redacts those stored
        into `Created` (ADR 0028)."""

        TOPIC = "healthledger:Order.Created.v1"
        ANNOUNCES = ("labtest.order.created",)
        SUPERSEDED_BY = "healthledger:Order.Created.v2"
        PERSONAL_FIELDS = (
            "sealed_patient_details",
            "sealed_patient_address",
            "sealed_request_digest",
        )
        user_id: UUID
        team_id: UUID
        # The environment of the key that placed it: only sandbox orders move by themselves.
        environment: str
        lab_test_id: UUID
        lab_test_name: str
        lab_id: int
        collection_method: str
        marker_ids: list[int]
        sealed_patient_details: str
        sealed_patient_address: str
        sealed_request_digest: str | None
        status: str
        # When the simulated lab takes the next step (None: it never does by itself).
        next_step_at: datetime | None

        def apply(self, order: Order) -> None:
            order.clear_lab_test = OrderedTest(
                self.lab_test_id, self.lab_test_name, tuple(self.marker_ids)
            )

    class Created(Event, Aggregate.Created):
        """The order placed. `sealed_lab_test` is the test ordered (`OrderedTest`),
        sealed. `sealed_request_digest` (orders placed with an idempotency key) is the
        SHA-256 of the request as sent, sealed: a replay of the key with another body is
        told apart without the body in clear anywhere. Version 2 adds `activate_by`, the
        day the order is to be dispatched to the lab (None: at once); version 1 events,
        stored before, were all placed for immediate processing. Version 3 adds what the
        placing request may carry beside: `priority` (a STAT order; in clear, it says
        nothing of health), `sealed_icd_codes` (the diagnoses, a list of ICD-10-CM codes,
        sealed) and `sealed_passthrough` (the team's own string, sealed: it may hold
        anything), each None when not sent; events stored before were placed without
        them (routine, none, none)."""

        TOPIC = "healthledger:Order.Created.v2"
        ANNOUNCES = ("labtest.order.created",)
        PERSONAL_FIELDS = (
            "sealed_lab_test",
            "sealed_patient_details",
            "sealed_patient_address",
            "sealed_request_digest",
            "sealed_icd_codes",
            "sealed_passthrough",
        )
        user_id: UUID
        team_id: UUID
        # The environment of the key that placed it: only sandbox orders move by themselves.
        environment: str
        lab_id: int
        collection_method: str
        sealed_lab_test: str
        sealed_patient_details: str
        sealed_patient_address: str
        sealed_request_digest: str | None
        status: str
        # When the simulated lab takes the next step (None: it never does by itself).
        next_step_at: datetime | None
        activate_by: date | None
        priority: bool
        sealed_icd_codes: str | None
        sealed_passthrough: str | None
        class_version = 3

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["activate_by"] = None

        @staticmethod
        def upcast_v2_v3(state: dict[str, Any]) -> None:
            state["priority"] = False
            state["sealed_icd_codes"] = None
            state["sealed_passthrough"] = None

    class StatusChanged(Event):
        """One step forward (not to a final status). The requisition step assigns the
        sample id."""

        TOPIC = "healthledger:Order.StatusChanged.v1"
        ANNOUNCES = ("labtest.order.updated",)
        status: str
        sample_id: str | None
        next_step_at: datetime | None

        def apply(self, order: Order) -> None:
            _moved(order, self, self.status, self.next_step_at)
            if self.sample_id is not None:
                order.sample_id = self.sample_id

    class Completed(Event):
        """The results, reported: one value per expected result of the order's markers,
        and the order's interpretation (its worst result's), both sealed."""

        TOPIC = "healthledger:Order.Completed.v1"
        ANNOUNCES = ("labtest.order.updated", "labtest.result.critical")
        PERSONAL_FIELDS = ("sealed_results", "sealed_interpretation")
        status: str
        sealed_results: str
        sealed_interpretation: str

        def apply(self, order: Order) -> None:
            _moved(order, self, self.status, None)
            order.sealed_results = self.sealed_results
            order.sealed_interpretation = self.sealed_interpretation
            order.results_at = self.timestamp

    class Cancelled(Event):
        """By the team (`team_request`), by the user's deletion (`user_deleted`) or by the
        lab (`lab_cancelled`)."""

        TOPIC = "healthledger:Order.Cancelled.v1"
        ANNOUNCES = ("labtest.order.updated",)
        status: str
        reason: str

        def apply(self, order: Order) -> None:
            _moved(order, self, self.status, None)
            order.cancel_reason = self.reason

    class Failed(Event):
        """The lab could not produce results (a sample error, a kit lost)."""

        TOPIC = "healthledger:Order.Failed.v1"
        ANNOUNCES = ("labtest.order.updated",)
        status: str
        reason: str

        def apply(self, order: Order) -> None:
            _moved(order, self, self.status, None)
            order.failure_reason = self.reason

    class KitRegistered(Event):
        """A test kit registered by its sample id (`POST /v3/order/testkit/register`):
        who took the sample, the patient's details and address sealed, in place of those
        the order was placed with (the user's demographics, the shipping address)."""

        TOPIC = "healthledger:Order.KitRegistered.v1"
        ANNOUNCES = ("labtest.order.updated",)
        PERSONAL_FIELDS = ("sealed_patient_details", "sealed_patient_address")
        sealed_patient_details: str
        sealed_patient_address: str

        def apply(self, order: Order) -> None:
            order.sealed_patient_details = self.sealed_patient_details
            order.sealed_patient_address = self.sealed_patient_address
            order.registered_at = self.timestamp

    class ActivationRescheduled(Event):
        """The day an order placed with an activation date is dispatched, moved by the team
        (`PATCH /v3/order/{id}`); None: dispatched at once. `next_step_at` is when the
        simulated lab now takes its first step (a sandbox order's; None otherwise)."""

        TOPIC = "healthledger:Order.ActivationRescheduled.v1"
        ANNOUNCES = ("labtest.order.updated",)
        activate_by: date | None
        next_step_at: datetime | None

        def apply(self, order: Order) -> None:
            order.activate_by = self.activate_by
            order.next_step_at = self.next_step_at
            order.changes.append(
                OrderChange(
                    self.timestamp,
                    self.actor,
                    order.status,
                    self.next_step_at,
                    activation=True,
                    activate_by=self.activate_by,
                )
            )

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        user_id: UUID,
        team_id: UUID,
        environment: str,
        lab_id: int,
        collection_method: str,
        sealed_patient_details: str,
        sealed_patient_address: str,
        sealed_request_digest: str | None,
        status: str,
        next_step_at: datetime | None,
        sealed_lab_test: str | None = None,
        activate_by: date | None = None,
        priority: bool = False,
        sealed_icd_codes: str | None = None,
        sealed_passthrough: str | None = None,
    ) -> None:
        """From the Created event's fields, at `place` and on every replay. A CreatedV1
        has no `sealed_lab_test`: it gives its test in clear (`CreatedV1.apply`), nor an
        `activate_by`, a `priority` or the sealed codes and passthrough."""
        self.user_id: UUID = user_id
        self.team_id: UUID = team_id
        self.environment: str = environment
        self.lab_id: int = lab_id
        self.collection_method: str = collection_method
        self.sealed_lab_test: str | None = sealed_lab_test
        # Only an order replayed from a CreatedV1 (before the start redacted it).
        self.clear_lab_test: OrderedTest | None = None
        self.sealed_patient_details: str = sealed_patient_details
        self.sealed_patient_address: str = sealed_patient_address
        self.sealed_request_digest: str | None = sealed_request_digest
        self.sample_id: str | None = None
        self.sealed_results: str | None = None
        self.sealed_interpretation: str | None = None
        self.results_at: datetime | None = None
        self.cancel_reason: str | None = None
        self.failure_reason: str | None = None
        # When its test kit was registered (testkit orders only; None: not yet).
        self.registered_at: datetime | None = None
        # The day it is to be dispatched to the lab (None: at once), and whether it was
        # placed with one: only such an order's date can be moved (the client's rule).
        self.activate_by: date | None = activate_by
        self.placed_with_activation: bool = activate_by is not None
        # A priority (STAT) order, its diagnoses (a sealed list of ICD-10-CM codes) and the
        # team's passthrough string (sealed), as placed; None: not sent.
        self.priority: bool = priority
        self.sealed_icd_codes: str | None = sealed_icd_codes
        self.sealed_passthrough: str | None = sealed_passthrough
        # Every status the order had, with when: the `events` of the order's answer.
        self.history: list[tuple[str, datetime]] = []
        # Every status and activation change, as its tracking reads them.
        self.changes: list[OrderChange] = []
        self.status: str
        self.next_step_at: datetime | None
        _moved_at(self, timestamp, actor, status, next_step_at)

    @staticmethod
    def id_for_idempotency_key(team_id: UUID, key: str) -> UUID:
        return uuid.uuid5(_IDEMPOTENCY_NAMESPACE, f"{team_id}\x1f{key}")

    @classmethod
    def place(
        cls,
        ctx: CommandContext,
        now: datetime,
        *,
        order_id: UUID,
        user_id: UUID,
        team_id: UUID,
        environment: str,
        lab_id: int,
        collection_method: str,
        sealed_lab_test: str,
        sealed_patient_details: str,
        sealed_patient_address: str,
        sealed_request_digest: str | None,
        status: str,
        next_step_at: datetime | None,
        activate_by: date | None = None,
        priority: bool = False,
        sealed_icd_codes: str | None = None,
        sealed_passthrough: str | None = None,
    ) -> Order:
        return cls.new(
            ctx,
            now,
            id=order_id,
            user_id=user_id,
            team_id=team_id,
            environment=environment,
            lab_id=lab_id,
            collection_method=collection_method,
            sealed_lab_test=sealed_lab_test,
            sealed_patient_details=sealed_patient_details,
            sealed_patient_address=sealed_patient_address,
            sealed_request_digest=sealed_request_digest,
            status=status,
            next_step_at=next_step_at,
            activate_by=activate_by,
            priority=priority,
            sealed_icd_codes=sealed_icd_codes,
            sealed_passthrough=sealed_passthrough,
        )

    # -- state ------------------------------------------------------------------------

    def ordered_test(self, open_sealed: Any) -> OrderedTest | None:
        """The test ordered, opened with `open_sealed(user_id, sealed)` (a vault's
        `open`); None once the user's key is destroyed."""
        if self.sealed_lab_test is None:
            return self.clear_lab_test
        return OrderedTest.of_opened(open_sealed(self.user_id, self.sealed_lab_test))

    @property
    def top_level_status(self) -> str:
        return top_level(self.status)

    @property
    def is_open(self) -> bool:
        return self.top_level_status not in FINAL_STATUSES

    @property
    def awaits_dispatch(self) -> bool:
        """Still `ordered`: not yet dispatched to the lab (its activation date can move)."""
        return self.top_level_status == RECEIVED and low_level(self.status) == ORDERED

    # -- commands ---------------------------------------------------------------------

    def move_to(
        self,
        ctx: CommandContext,
        now: datetime,
        status: str,
        *,
        next_step_at: datetime | None,
        sample_id: str | None = None,
    ) -> None:
        """One step forward, to a status that is not final."""
        self._require_open()
        if top_level(status) in FINAL_STATUSES:
            raise ValueError(f"{status} is final: complete, cancel or fail the order")
        self.record(
            ctx,
            now,
            self.StatusChanged,
            status=status,
            sample_id=sample_id,
            next_step_at=next_step_at,
        )

    def complete(
        self,
        ctx: CommandContext,
        now: datetime,
        *,
        sealed_results: str,
        sealed_interpretation: str,
    ) -> None:
        self._require_open()
        self.record(
            ctx,
            now,
            self.Completed,
            status=status_of(COMPLETED, self.collection_method, "completed"),
            sealed_results=sealed_results,
            sealed_interpretation=sealed_interpretation,
        )

    def cancel(self, ctx: CommandContext, now: datetime, reason: str) -> None:
        if not self.is_open:
            raise OrderNotCancellable(self.status)
        self.record(
            ctx,
            now,
            self.Cancelled,
            status=status_of(CANCELLED, self.collection_method, "cancelled"),
            reason=reason,
        )

    def fail(self, ctx: CommandContext, now: datetime, low: str, reason: str) -> None:
        self._require_open()
        self.record(
            ctx,
            now,
            self.Failed,
            status=status_of(FAILED, self.collection_method, low),
            reason=reason,
        )

    def reschedule_activation(
        self,
        ctx: CommandContext,
        now: datetime,
        activate_by: date | None,
        *,
        next_step_at: datetime | None,
    ) -> None:
        """Move the day the order is dispatched (None: dispatch it now). Only an order
        placed with an activation date, and only while it awaits dispatch; the date
        itself is checked by the caller (`activation.py`)."""
        if not self.placed_with_activation:
            raise OrderNotSchedulable(
                "The order was placed for immediate processing: only an order placed with "
                "activate_by can have its activation date moved or cleared."
            )
        if not self.awaits_dispatch:
            raise OrderNotSchedulable(
                f"The order is {self.status}: its activation date can be changed only while "
                "it is ordered and not yet dispatched to the lab."
            )
        self.record(
            ctx,
            now,
            self.ActivationRescheduled,
            activate_by=activate_by,
            next_step_at=next_step_at,
        )

    def register_kit(
        self,
        ctx: CommandContext,
        now: datetime,
        *,
        sealed_patient_details: str,
        sealed_patient_address: str,
    ) -> None:
        """Register the order's test kit to its patient: once, and before the sample
        reaches the lab (the lab must know whose sample it analyses)."""
        if self.collection_method != TESTKIT:
            raise ValueError("only a testkit order has a kit to register")
        if self.registered_at is not None:
            raise KitNotRegistrable("This test kit is registered already.")
        if self.top_level_status not in (RECEIVED, COLLECTING_SAMPLE):
            raise KitNotRegistrable(
                f"The order is {self.top_level_status}: a kit is registered before its "
                "sample reaches the lab."
            )
        self.record(
            ctx,
            now,
            self.KitRegistered,
            sealed_patient_details=sealed_patient_details,
            sealed_patient_address=sealed_patient_address,
        )

    def _require_open(self) -> None:
        if not self.is_open:
            raise OrderNotAdvanceable(
                f"The order is {self.top_level_status}: it takes no further step."
            )


def _moved(order: Order, event: Order.Event, status: str, next_step_at: datetime | None) -> None:
    _moved_at(order, event.timestamp, event.actor, status, next_step_at)


def _moved_at(
    order: Order, at: datetime, actor: str, status: str, next_step_at: datetime | None
) -> None:
    order.status = status
    order.next_step_at = next_step_at
    order.history.append((status, at))
    order.changes.append(OrderChange(at, actor, status, next_step_at))
