"""Use cases of lab test orders: place, cancel, advance a sandbox order one step (`/test`),
and the simulated lab's sweep that moves due sandbox orders on (the scheduler's).

The sweep finds what is due from our own tables (`due_orders`, injected) and records each
step through the event store's optimistic concurrency: two processes that pick the same
order both try to record its next step at the same version, and only one succeeds. So
every status is recorded, and announced, once.

A user's deletion cancels its open orders in its own transaction (`UserLifecycle`); an
order placed by a request that raced the deletion (PostgreSQL: the two do not share a
lock) is cancelled by the sweep, which also selects open orders of users gone.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from uuid import UUID, uuid4

from eventsourcing.persistence import IntegrityError
from healthledger.domain.context import DEFAULT_ENVIRONMENT, CommandContext
from healthledger.domain.errors import ConcurrentChange, InvalidRequest
from healthledger.domain.labs.activation import (
    check_activation_date,
    dispatched_at,
    first_step_due,
)
from healthledger.domain.labs.catalog import LabCatalog, LabTestLookup, LabTestView, Marker
from healthledger.domain.labs.lab_tests import LabTestInactive, UnknownLabTests
from healthledger.domain.labs.orders import (
    BY_LAB,
    BY_TEAM,
    BY_USER_DELETION,
    SAMPLE_WITH_LAB,
    SANDBOX_LAB,
    IdempotencyKeyReused,
    Order,
    OrderedTest,
    OrderNotAdvanceable,
    OrderNotFound,
    low_level,
    status_of,
)
from healthledger.domain.labs.patients import (
    PatientAddress,
    PatientDetails,
    details_from_demographics,
    stored_address,
    stored_details,
)
from healthledger.domain.labs.sandbox import (
    ADVANCE,
    CANCEL,
    COMPLETE,
    FAIL,
    Move,
    SandboxPolicy,
    first_status,
    next_move,
    report_results,
    steps_of,
)
from healthledger.domain.ledger import Clock, Ledger, command
from healthledger.domain.personal_data import PersonalDataVault
from healthledger.domain.users.lifecycle import UserLifecycle
from healthledger.domain.users.user import ACTIVE, ERASED, User

log = logging.getLogger("healthledger.orders")

SANDBOX = "sandbox"
# Why the simulated lab fails an order (recorded on Order.Failed; no personal data).
LAB_FAILURE = "the sample could not be analysed"

# The orders the simulated lab should look at, each with whether its user is gone.
DueOrders = Callable[[datetime, int], Mapping[UUID, bool]]

_PLACE_ATTEMPTS = 3
# The collection method whose draw the team reports, and the status it reports.
ON_SITE_COLLECTION = "on_site_collection"
DRAW_COMPLETED = "draw_completed"


@dataclass(frozen=True)
class OrderRequest:
    """`POST /v3/order` as validated: what to order, for whom, collected how; the
    patient's details and address when the team sends them."""

    user_id: UUID
    lab_test_id: UUID
    collection_method: str | None = None
    patient_details: PatientDetails | None = None
    patient_address: PatientAddress | None = None
    # The day to dispatch the order to the lab (None: at once).
    activate_by: date | None = None
    # A priority (STAT) order.
    priority: bool = False
    # The diagnoses, ICD-10-CM codes as the caller checked them (billable, no Excludes1
    # pair: adapters/reference/icd10.py) in their dotted form; () for none.
    icd_codes: tuple[str, ...] = ()
    # The team's own string, echoed back in the order's answers.
    passthrough: str | None = None

    def fingerprint(self) -> str:
        """The SHA-256 of the request in a canonical form: what an idempotency key's
        replay must match (a field sent as null and one left out are the same).
        `activate_by`, `priority`, `icd_codes` and `passthrough` are in it only when
        given, so that the fingerprints of requests stored before they existed stay what
        they were."""
        canonical: dict[str, Any] = {
            "user_id": str(self.user_id),
            "lab_test_id": str(self.lab_test_id),
            "collection_method": self.collection_method,
            "patient_details": (
                None if self.patient_details is None else stored_details(self.patient_details)
            ),
            "patient_address": (
                None if self.patient_address is None else stored_address(self.patient_address)
            ),
        }
        if self.activate_by is not None:
            canonical["activate_by"] = self.activate_by.isoformat()
        if self.priority:
            canonical["priority"] = True
        if self.icd_codes:
            canonical["icd_codes"] = list(self.icd_codes)
        if self.passthrough is not None:
            canonical["passthrough"] = self.passthrough
        text = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


class LabOrders:
    def __init__(
        self,
        ledger: Ledger,
        vault: PersonalDataVault,
        clock: Clock,
        users: UserLifecycle,
        catalog: LabCatalog,
        lab_tests: LabTestLookup,
        policy: SandboxPolicy,
        *,
        due_orders: DueOrders,
    ) -> None:
        self.ledger = ledger
        self.vault = vault
        self.clock = clock
        self.users = users
        self.catalog = catalog
        self.lab_tests = lab_tests
        self.policy = policy
        self.due_orders = due_orders

    # -- loading ------------------------------------------------------------------------

    def load(self, team_id: UUID, order_id: UUID) -> Order:
        """The team's order; another team's, an unknown id, or an order of a user erased
        since (its data is gone): OrderNotFound (404, never 403)."""
        order = self.ledger.find(order_id)
        if not isinstance(order, Order) or order.team_id != team_id:
            raise OrderNotFound()
        user = self.ledger.find(order.user_id)
        if not isinstance(user, User) or user.status == ERASED:
            raise OrderNotFound()
        return order

    # -- commands -----------------------------------------------------------------------

    @command
    def place(
        self,
        ctx: CommandContext,
        team_id: UUID,
        request: OrderRequest,
        idempotency_key: str | None = None,
    ) -> Order:
        """Place an order for a live user of the team. With an idempotency key, the same
        key and request answer the order placed first (nothing new recorded); the same
        key with another request is IdempotencyKeyReused (409)."""
        fingerprint = request.fingerprint()
        order_id = uuid4()
        if idempotency_key is not None:
            order_id = Order.id_for_idempotency_key(team_id, idempotency_key)
            placed = self._placed_before(order_id, request, fingerprint)
            if placed is not None:
                return placed
        user = self.users.load_live(team_id, request.user_id)
        lab_test = self.lab_tests.lab_test(team_id, request.lab_test_id)
        if lab_test is None:
            raise UnknownLabTests([request.lab_test_id])
        if not lab_test.active:
            # Only new orders: those placed before (the idempotent answer above included)
            # keep the test they were placed with.
            raise LabTestInactive(lab_test.id)
        method = self._method(request, lab_test)
        details, address = self._patient(request, user)
        now = self.clock()
        if request.activate_by is not None:
            check_activation_date(request.activate_by, now)
        environment = ctx.environment or DEFAULT_ENVIRONMENT
        status = first_status(method)
        order = Order.place(
            ctx,
            now,
            order_id=order_id,
            user_id=user.id,
            team_id=team_id,
            environment=environment,
            lab_id=lab_test.lab_id,
            collection_method=method,
            sealed_lab_test=self.vault.seal(
                user.id,
                OrderedTest(lab_test.id, lab_test.name, tuple(lab_test.marker_ids)).sealable(),
            ),
            sealed_patient_details=self.vault.seal(user.id, details),
            sealed_patient_address=self.vault.seal(user.id, address),
            sealed_request_digest=(
                None if idempotency_key is None else self.vault.seal(user.id, fingerprint)
            ),
            status=status,
            next_step_at=(
                first_step_due(request.activate_by, now, self.policy)
                if environment == SANDBOX
                else None
            ),
            activate_by=request.activate_by,
            priority=request.priority,
            sealed_icd_codes=(
                self.vault.seal(user.id, list(request.icd_codes)) if request.icd_codes else None
            ),
            sealed_passthrough=(
                None
                if request.passthrough is None
                else self.vault.seal(user.id, request.passthrough)
            ),
        )
        try:
            self.ledger.save(order)
        except IntegrityError as exc:
            # Only a derived id can be taken: a concurrent request with the same key.
            placed = self._placed_before(order_id, request, fingerprint)
            if placed is None:
                raise ConcurrentChange() from exc
            return placed
        return order

    @command
    def import_order(
        self,
        ctx: CommandContext,
        team_id: UUID,
        request: OrderRequest,
        ordered: OrderedTest,
        lab_id: int,
        sample_id: str,
    ) -> Order:
        """An order placed outside (`POST /v3/order/import`): its requisition exists, with
        the lab's sample id, so it is recorded placed (`Created`) and at once at
        `requisition_created` with that sample id (`StatusChanged`), in one save; from
        there it moves as any order (the sandbox's lab brings its results). The method
        must be one the lab offers; the patient is as sent, else the user's
        demographics."""
        order = self.imported(ctx, team_id, request, ordered, lab_id, sample_id)
        self._save(order)
        return order

    def imported(
        self,
        ctx: CommandContext,
        team_id: UUID,
        request: OrderRequest,
        ordered: OrderedTest,
        lab_id: int,
        sample_id: str,
    ) -> Order:
        """The order `import_order` records, not saved: an accepted unmatched result
        (unmatched_results.py) saves it with the result's decision, in one transaction."""
        user = self.users.load_live(team_id, request.user_id)
        lab = self.catalog.lab(lab_id)
        method = request.collection_method
        if lab is None or method is None or method not in lab.collection_methods:
            offered = "" if lab is None else ", ".join(lab.collection_methods)
            raise InvalidRequest(
                f"collection_method must be one the order set's lab offers ({offered}).",
                "collection_method",
            )
        details, address = self._patient(request, user)
        now = self.clock()
        environment = ctx.environment or DEFAULT_ENVIRONMENT
        steps = steps_of(method)
        order = Order.place(
            ctx,
            now,
            order_id=uuid4(),
            user_id=user.id,
            team_id=team_id,
            environment=environment,
            lab_id=lab_id,
            collection_method=method,
            sealed_lab_test=self.vault.seal(user.id, ordered.sealable()),
            sealed_patient_details=self.vault.seal(user.id, details),
            sealed_patient_address=self.vault.seal(user.id, address),
            sealed_request_digest=None,
            status=steps[0],
            next_step_at=None,
        )
        order.move_to(
            ctx,
            now,
            steps[1],
            next_step_at=now + self.policy.delay(2) if environment == SANDBOX else None,
            sample_id=sample_id,
        )
        return order

    @command
    def cancel(self, ctx: CommandContext, team_id: UUID, order_id: UUID) -> Order:
        """Cancel an open order (a completed, failed or cancelled one: 409)."""
        order = self.load(team_id, order_id)
        order.cancel(ctx, self.clock(), BY_TEAM)
        self._save(order)
        return order

    @command
    def reschedule(
        self, ctx: CommandContext, team_id: UUID, order_id: UUID, activate_by: date | None
    ) -> Order:
        """Move the day an order placed with `activate_by` is dispatched, or clear it
        (None) to dispatch it now (`PATCH /v3/order/{id}`). OrderNotSchedulable (400): the
        order was placed for immediate processing, is dispatched already, or the day is
        in the past or too far ahead."""
        order = self.load(team_id, order_id)
        now = self.clock()
        if activate_by is not None:
            check_activation_date(activate_by, now)
        order.reschedule_activation(
            ctx,
            now,
            activate_by,
            next_step_at=(
                first_step_due(activate_by, now, self.policy)
                if order.environment == SANDBOX
                else None
            ),
        )
        self._save(order)
        return order

    @command
    def advance(
        self,
        ctx: CommandContext,
        team_id: UUID,
        order_id: UUID,
        interpretation: str | None = None,
    ) -> Order:
        """Take a sandbox order one step on now (`POST /v3/order/{id}/test`), as the
        simulated lab would; `interpretation` forces its results' outcome when the step
        reports them."""
        order = self.load(team_id, order_id)
        if order.environment != SANDBOX:
            raise OrderNotAdvanceable(
                "Only sandbox orders can be moved with /test: a production order moves "
                "as its lab reports."
            )
        now = self.clock()
        if (
            order.awaits_dispatch
            and order.activate_by is not None
            and dispatched_at(order.activate_by) > now
        ):
            raise OrderNotAdvanceable(
                f"The order waits for its activation date ({order.activate_by.isoformat()}): "
                "PATCH /v3/order/{order_id} with activate_by null to dispatch it now."
            )
        move = next_move(order.id, order.collection_method, order.status, now, self.policy)
        if move is None:
            raise OrderNotAdvanceable(
                f"The order is {order.top_level_status}: it takes no further step."
            )
        self._apply(ctx, order, move, now, interpretation)
        self._save(order)
        return order

    @command
    def draw_completed(self, ctx: CommandContext, team_id: UUID, order_id: UUID) -> Order:
        """An on-site collection's draw, done by the team's own staff
        (`PATCH /v3/order/{id}/draw_completed`): the order goes to the lab
        (`sample_with_lab.on_site_collection.draw_completed`). Only an on-site order whose
        requisition is created can be drawn (else OrderNotAdvanceable, a 400)."""
        order = self.load(team_id, order_id)
        if order.collection_method != ON_SITE_COLLECTION:
            raise OrderNotAdvanceable(
                f"The order is collected by {order.collection_method}, not on site: its "
                "sample reaches the lab without a draw reported by the team."
            )
        # The team reports it: not the simulated lab's draw (which may cancel), its step.
        steps = steps_of(ON_SITE_COLLECTION)
        drawn = steps.index(status_of(SAMPLE_WITH_LAB, ON_SITE_COLLECTION, DRAW_COMPLETED))
        if order.status != steps[drawn - 1]:
            raise OrderNotAdvanceable(
                f"The order is {order.status}: a draw is completed once its requisition "
                "is created, and only once."
            )
        now = self.clock()
        order.move_to(
            ctx,
            now,
            steps[drawn],
            next_step_at=now + self.policy.delay(drawn + 1)
            if order.environment == SANDBOX
            else None,
        )
        self._save(order)
        return order

    # -- the simulated lab (the scheduler's sweep) ----------------------------------------

    def progress_due(self, limit: int = 200) -> int:
        """Take every due sandbox order one step on, and cancel the open orders of users
        deleted since they were placed; how many orders were looked at. The orders of one
        batch are recorded in one transaction; if another process recorded a step of one
        of them first, each is redone on its own from the stored state."""
        due = self.due_orders(self.clock(), limit)
        if not due:
            return 0
        ctx = CommandContext.system(SANDBOX_LAB)
        now = self.clock()
        moved: list[Order] = []
        for order_id, gone in due.items():
            order = self._find(order_id)
            if order is not None and self._step(ctx, order, now, gone):
                moved.append(order)
        if moved and not self._save_all(moved):
            for order in moved:
                fresh = self._find(order.id)
                if fresh is not None and self._step(ctx, fresh, now, due[order.id]):
                    self._save_all([fresh])
        return len(due)

    def _step(self, ctx: CommandContext, order: Order, now: datetime, gone: bool) -> bool:
        """Record the step that is due on `order` (unsaved), or its cancellation if its
        user is `gone` (as the read models said; checked on the user's stream); whether
        there was one."""
        if not order.is_open:
            return False
        if gone:
            user = self.ledger.find(order.user_id)
            if not isinstance(user, User) or user.status != ACTIVE:
                order.cancel(ctx, now, BY_USER_DELETION)
                return True
        due = order.next_step_at
        if order.environment != SANDBOX or due is None or due > now:
            return False
        move = next_move(order.id, order.collection_method, order.status, now, self.policy)
        if move is None:
            return False
        self._apply(ctx, order, move, now, None)
        return True

    # -- helpers ------------------------------------------------------------------------

    def _apply(
        self,
        ctx: CommandContext,
        order: Order,
        move: Move,
        now: datetime,
        interpretation: str | None,
    ) -> None:
        if move.action == ADVANCE:
            order.move_to(
                ctx, now, move.status, next_step_at=move.next_step_at, sample_id=move.sample_id
            )
        elif move.action == COMPLETE:
            results = report_results(order.id, self._markers(order), interpretation)
            order.complete(
                ctx,
                now,
                sealed_results=self.vault.seal(order.user_id, results.values),
                sealed_interpretation=self.vault.seal(order.user_id, results.interpretation),
            )
        elif move.action == FAIL:
            order.fail(ctx, now, low_level(move.status), LAB_FAILURE)
        else:
            assert move.action == CANCEL
            order.cancel(ctx, now, BY_LAB)

    def _markers(self, order: Order) -> list[Marker]:
        # An order moves only while its user is live: its key opens the test.
        test = order.ordered_test(self.vault.open)
        marker_ids = () if test is None else test.marker_ids
        found = (self.catalog.marker(marker_id) for marker_id in marker_ids)
        return [marker for marker in found if marker is not None]

    def _method(self, request: OrderRequest, lab_test: LabTestView) -> str:
        method = request.collection_method or lab_test.method
        if method != lab_test.method:
            lab = self.catalog.lab(lab_test.lab_id)
            if lab is None or method not in lab.collection_methods:
                raise InvalidRequest(
                    f"The lab of this lab test does not collect by {method}: leave "
                    f"collection_method out to order by the test's own ({lab_test.method}).",
                    "collection_method",
                )
        return method

    def _patient(self, request: OrderRequest, user: User) -> tuple[dict[str, Any], dict[str, Any]]:
        """The patient's details and address (stored form): as sent, else from the
        user's demographics; InvalidRequest (422) naming what is missing."""
        demographics: dict[str, Any] | None = None
        if user.sealed_demographics is not None:
            demographics = self.vault.open(user.id, user.sealed_demographics)
        missing = [
            name
            for name, given in (
                ("patient_details", request.patient_details),
                ("patient_address", request.patient_address),
            )
            if given is None and demographics is None
        ]
        if missing:
            raise InvalidRequest(
                f"The user has no demographics to take {' and '.join(missing)} from: send "
                f"{'them' if len(missing) > 1 else 'it'} with the order, or record the user's "
                "demographics first (PATCH /v2/user/{user_id}/info).",
                missing[0],
            )
        details = (
            stored_details(request.patient_details)
            if request.patient_details is not None
            else details_from_demographics(demographics or {})
        )
        address = (
            stored_address(request.patient_address)
            if request.patient_address is not None
            else dict((demographics or {})["address"])
        )
        return details, address

    def _placed_before(
        self, order_id: UUID, request: OrderRequest, fingerprint: str
    ) -> Order | None:
        """The order an idempotency key placed, if it placed one: the same request gets it
        back; another request is IdempotencyKeyReused."""
        order = self.ledger.find(order_id)
        if order is None:
            return None
        assert isinstance(order, Order), "an idempotency key's id is an order's"
        if order.user_id != request.user_id or order.sealed_request_digest is None:
            raise IdempotencyKeyReused()
        if self.vault.open(order.user_id, order.sealed_request_digest) != fingerprint:
            raise IdempotencyKeyReused()
        return order

    def _find(self, order_id: UUID) -> Order | None:
        order = self.ledger.find(order_id)
        return order if isinstance(order, Order) else None

    def _save(self, order: Order) -> None:
        try:
            self.ledger.save(order)
        except IntegrityError as exc:
            raise ConcurrentChange() from exc

    def _save_all(self, orders: Sequence[Order]) -> bool:
        try:
            self.ledger.save(*orders)
        except IntegrityError:
            log.info("a batch of order steps lost to another process: one by one")
            return False
        return True
