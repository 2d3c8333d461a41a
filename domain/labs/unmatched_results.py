"""Unmatched lab results: a lab's report that arrived without an order it could be
attached to (`result_matching.decide`), kept for the team's review, one stream each.

The team decides: accept it into one of its orders (or a new imported order of one of
its users), reject it, or say it is unsure (then our operations review it). Until then
nobody's order holds it, so it cannot be sealed with a user's key: each unmatched result
has a data key of its own in the key store, under its own id, which seals the patient's
details, the sample id, the test and the values (`sealed_result`), and the decision's
note. Accepting re-seals the values into the order with its user's key and destroys the
result's key; rejecting destroys it (both declare `SHREDS_KEY`: the key is destroyed in
the transaction that records them). In clear stay the ids, times, the decision code, the
lab, the result's status, the candidates (ids, statuses and codes) and the review's
state (ADR 0040). A team's deletion resolves its results still waiting for a decision,
in its own transaction, and destroys their keys (`ResolvedByTeamDeletion`), as a user's
deletion cancels the user's open orders.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID, uuid5

from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError
from healthledger.domain.audited import Audited
from healthledger.domain.context import DEFAULT_ENVIRONMENT, CommandContext
from healthledger.domain.errors import ConcurrentChange, InvalidRequest, LedgerError
from healthledger.domain.labs.catalog import Marker
from healthledger.domain.labs.ordering import LabOrders, OrderRequest
from healthledger.domain.labs.orders import Order, OrderedTest, top_level
from healthledger.domain.labs.result_matching import (
    MATCH_SAMPLE_ID,
    Decision,
    IncomingResult,
    OrderFacts,
    decide,
)
from healthledger.domain.labs.sandbox import report_results
from healthledger.domain.ledger import Clock, Ledger, command
from healthledger.domain.personal_data import KeepsNewKeys, PersonalDataVault

# The review's states (the client's MatchReviewStatus) and the team's decisions.
PENDING_CUSTOMER_REVIEW = "pending_customer_review"
PENDING_OPS_REVIEW = "pending_ops_review"
RESOLVED = "resolved"
REVIEW_STATES = (PENDING_CUSTOMER_REVIEW, PENDING_OPS_REVIEW, RESOLVED)
ACCEPT = "accept"
REJECT = "reject"
UNSURE = "unsure"
# What the team may still decide, per state: once unsure, our operations hold it, but
# the team may still accept or reject it; resolved is final.
ALLOWED_ACTIONS: dict[str, tuple[str, ...]] = {
    PENDING_CUSTOMER_REVIEW: (ACCEPT, REJECT, UNSURE),
    PENDING_OPS_REVIEW: (ACCEPT, REJECT),
    RESOLVED: (),
}
# The result statuses (the client's ResultStatus): all the markers reported, or some.
FINAL = "final"
PARTIAL = "partial"
RESULT_STATUSES = (FINAL, PARTIAL)

# The test an accepted result is imported as, when it goes into a new order: fixed by
# the result's id.
_ACCEPTED_TEST = UUID("3a8c2f51-6d0e-5b74-9c13-8e2f4a6b1d07")
# The collection method of an order imported for an accepted result, when its lab
# offers it (else the lab's first): a sample drawn at a lab's site.
_IMPORTED_METHOD = "walk_in_test"


class UnmatchedResultNotFound(LedgerError):
    def __init__(self) -> None:
        super().__init__("Unmatched result not found.")


class UnmatchedResultDecided(LedgerError):
    """A decision the result's state does not allow (409)."""

    def __init__(self, status: str, action: str) -> None:
        allowed = ", ".join(ALLOWED_ACTIONS[status]) or "none"
        super().__init__(
            f"The unmatched result is {status}: it cannot be decided '{action}' (allowed: "
            f"{allowed})."
        )


class ResultNotAttachable(LedgerError):
    """The chosen order cannot take the result (409): it is final, or of another lab."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)


class UnmatchedResult(Audited, created_event_name="Received"):
    TOPIC = "healthledger:UnmatchedResult"
    # No user owns it: its candidates are users it might belong to, not its owner.
    USER_STREAM = None

    class Event(Audited.Event):
        # Its sealed fields are sealed with its own data key (ADR 0040), not the team's
        # nor the user an acceptance names: the audit shows them by that key.
        SEALED_WITH_STREAM_KEY = True

    class Received(Event, Aggregate.Created):
        """The result, pending the team's review. `sealed_result` (the patient as the lab
        named them, the sample id, the test, the values and their interpretation) is
        sealed with the result's own key."""

        TOPIC = "healthledger:UnmatchedResult.Received.v1"
        PERSONAL_FIELDS = ("sealed_result",)
        team_id: UUID
        environment: str
        lab_id: int
        decision_code: str
        reason: str
        result_status: str
        candidate_groups: list[dict[str, Any]]
        sealed_result: str
        # The sandbox harness's run that made it (None: a lab's).
        run_id: UUID | None

    # The founding event is called Received; Created names it too (see LinkToken).
    Created = Received

    class Accepted(Event):
        """Attached to the user's order (its Completed event, in the same save); the
        result's key is destroyed with it: its values live on under the user's key."""

        TOPIC = "healthledger:UnmatchedResult.Accepted.v1"
        SHREDS_KEY = True
        PERSONAL_FIELDS = ("sealed_note",)
        user_id: UUID
        order_id: UUID
        sealed_note: str | None

        def apply(self, result: UnmatchedResult) -> None:
            result.resolve(ACCEPT, self.timestamp, self.sealed_note)
            result.resolved_user_id = self.user_id
            result.resolved_order_id = self.order_id

    class Rejected(Event):
        """Not the team's: resolved, and its key destroyed (its data unreadable)."""

        TOPIC = "healthledger:UnmatchedResult.Rejected.v1"
        SHREDS_KEY = True
        PERSONAL_FIELDS = ("sealed_note",)
        sealed_note: str | None

        def apply(self, result: UnmatchedResult) -> None:
            result.resolve(REJECT, self.timestamp, self.sealed_note)

    class ResolvedByTeamDeletion(Event):
        """Its team was deleted before deciding: resolved with no decision (the team is
        gone, so nobody will make one), and its key destroyed (its data unreadable), in
        the transaction that records `Team.Deleted`."""

        TOPIC = "healthledger:UnmatchedResult.ResolvedByTeamDeletion.v1"
        SHREDS_KEY = True

        def apply(self, result: UnmatchedResult) -> None:
            result.resolve(None, self.timestamp, None)

    class Escalated(Event):
        """The team is unsure: our operations review it (`pending_ops_review`)."""

        TOPIC = "healthledger:UnmatchedResult.Escalated.v1"
        PERSONAL_FIELDS = ("sealed_note",)
        sealed_note: str | None

        def apply(self, result: UnmatchedResult) -> None:
            result.status = PENDING_OPS_REVIEW
            result.resolution_action = UNSURE
            result.reviewed_at = self.timestamp
            result.sealed_note = self.sealed_note

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        team_id: UUID,
        environment: str,
        lab_id: int,
        decision_code: str,
        reason: str,
        result_status: str,
        candidate_groups: list[dict[str, Any]],
        sealed_result: str,
        run_id: UUID | None,
    ) -> None:
        self.team_id = team_id
        self.environment = environment
        self.lab_id = lab_id
        self.decision_code = decision_code
        self.reason = reason
        self.result_status = result_status
        self.candidate_groups = candidate_groups
        self.sealed_result = sealed_result
        self.run_id = run_id
        self.status = PENDING_CUSTOMER_REVIEW
        self.resolution_action: str | None = None
        self.resolved_user_id: UUID | None = None
        self.resolved_order_id: UUID | None = None
        self.reviewed_at: datetime | None = None
        self.sealed_note: str | None = None

    def resolve(self, action: str | None, at: datetime, sealed_note: str | None) -> None:
        """State only (an event's `apply`): resolved by `action` (None: by the team's
        deletion, no decision made)."""
        self.status = RESOLVED
        self.resolution_action = action
        self.reviewed_at = at
        self.sealed_note = sealed_note

    @property
    def allowed_actions(self) -> tuple[str, ...]:
        return ALLOWED_ACTIONS[self.status]

    def require_allowed(self, action: str) -> None:
        if action not in self.allowed_actions:
            raise UnmatchedResultDecided(self.status, action)


# The team's orders, opened (newest first): what a result is matched against.
OrdersOfTeam = Callable[[UUID], Sequence[OrderFacts]]
# The ids of the team's results still waiting for a decision (pending or unsure).
UndecidedOfTeam = Callable[[UUID], Sequence[UUID]]


class UnmatchedResults:
    """Receive a result (matched against the team's orders), and the team's decisions."""

    def __init__(
        self,
        ledger: Ledger,
        vault: PersonalDataVault,
        clock: Clock,
        lab_orders: LabOrders,
        orders_of_team: OrdersOfTeam,
        undecided_of_team: UndecidedOfTeam,
    ) -> None:
        self.ledger = ledger
        self.vault = vault
        self.keeps_new_keys = vault if isinstance(vault, KeepsNewKeys) else None
        self.clock = clock
        self.lab_orders = lab_orders
        self.orders_of_team = orders_of_team
        self.undecided_of_team = undecided_of_team

    # -- reading ------------------------------------------------------------------------

    def load(self, team_id: UUID, result_id: UUID) -> UnmatchedResult:
        """The team's unmatched result; another team's or an unknown id: a 404."""
        result = self.ledger.find(result_id)
        if not isinstance(result, UnmatchedResult) or result.team_id != team_id:
            raise UnmatchedResultNotFound()
        return result

    def opened(self, result: UnmatchedResult) -> dict[str, Any] | None:
        """Its sealed contents; None once its key is destroyed (accepted or rejected)."""
        opened = self.vault.open(result.id, result.sealed_result)
        return opened if isinstance(opened, dict) else None

    def note(self, result: UnmatchedResult) -> str | None:
        if result.sealed_note is None:
            return None
        opened = self.vault.open(result.id, result.sealed_note)
        return opened if isinstance(opened, str) else None

    # -- a lab's report -----------------------------------------------------------------

    def received(
        self,
        ctx: CommandContext,
        team_id: UUID,
        incoming: IncomingResult,
        test: OrderedTest,
        *,
        result_id: UUID,
        result_status: str,
        interpretation: str | None,
        run_id: UUID | None,
    ) -> tuple[Decision, UnmatchedResult | None]:
        """The decision about a lab's report, and the unmatched result it makes (not saved:
        the caller saves it with what else its report changes); None when it matches an
        order (`match_sample_id`: no review)."""
        decision = decide(incoming, self.orders_of_team(team_id))
        if decision.code == MATCH_SAMPLE_ID:
            return decision, None
        markers = self._markers(incoming.marker_ids)
        reported = report_results(result_id, markers, interpretation)
        values = reported.values
        if result_status == PARTIAL and len(values) > 1:
            values = values[:-1]  # the last result is not reported yet
        contents = {
            "patient": incoming.patient.sealable(),
            "sample_id": incoming.sample_id,
            "lab_test": test.sealable(),
            "results": values,
            "interpretation": reported.interpretation,
        }
        # The result's own key, stored with its first event (one commit, as a user's).
        if self.keeps_new_keys is not None:
            self.keeps_new_keys.new_key(result_id)
        result = UnmatchedResult.new(
            ctx,
            self.clock(),
            id=result_id,
            team_id=team_id,
            environment=ctx.environment or DEFAULT_ENVIRONMENT,
            lab_id=incoming.lab_id,
            decision_code=decision.code,
            reason=decision.reason,
            result_status=result_status,
            candidate_groups=decision.candidate_groups,
            sealed_result=self.vault.seal(result_id, contents),
            run_id=run_id,
        )
        return decision, result

    def forget_key(self, result_id: UUID) -> None:
        """Drop the key made for a result that was not recorded (its save failed)."""
        self.vault.discard(result_id)

    # -- the team's decisions -----------------------------------------------------------

    @command
    def accept(
        self,
        ctx: CommandContext,
        team_id: UUID,
        result_id: UUID,
        *,
        user_id: UUID | None,
        order_id: UUID | None,
        note: str | None,
    ) -> Order:
        """Attach the result to the team's open `order_id` (of `user_id`, if named too),
        or to a new imported order of `user_id`: the order is completed with the result's
        values (sealed with its user's key) and the result resolved, in one save."""
        result = self.load(team_id, result_id)
        result.require_allowed(ACCEPT)
        if user_id is None and order_id is None:
            raise InvalidRequest(
                "Name the order to attach the result to (order_id), or the user whose new "
                "order it becomes (user_id).",
                "order_id",
            )
        contents = self.opened(result)
        if contents is None:  # only a resolved result's key is destroyed
            raise UnmatchedResultDecided(RESOLVED, ACCEPT)
        now = self.clock()
        if order_id is not None:
            order = self._open_order(team_id, order_id, user_id, result)
        else:
            assert user_id is not None
            order = self._imported(ctx, team_id, user_id, result, contents)
        order.complete(
            ctx,
            now,
            sealed_results=self.vault.seal(order.user_id, contents["results"]),
            sealed_interpretation=self.vault.seal(order.user_id, contents["interpretation"]),
        )
        result.record(
            ctx,
            now,
            UnmatchedResult.Accepted,
            user_id=order.user_id,
            order_id=order.id,
            sealed_note=self._sealed_note(result, note),
        )
        self._save(order, result)
        return order

    @command
    def resolve(
        self,
        ctx: CommandContext,
        team_id: UUID,
        result_id: UUID,
        action: str,
        note: str | None,
    ) -> UnmatchedResult:
        """Reject the result (resolved; its key destroyed) or say the team is unsure
        (our operations review it)."""
        result = self.load(team_id, result_id)
        result.require_allowed(action)
        event = UnmatchedResult.Rejected if action == REJECT else UnmatchedResult.Escalated
        result.record(ctx, self.clock(), event, sealed_note=self._sealed_note(result, note))
        self._save(result)
        return result

    def resolved_by_team_deletion(
        self, ctx: CommandContext, now: datetime, team_id: UUID
    ) -> list[UnmatchedResult]:
        """The team's results still waiting for a decision, resolved by its deletion (not
        saved: the deletion saves them with `Team.Deleted`, in one transaction)."""
        found = self.ledger.find_many(list(self.undecided_of_team(team_id)))
        resolved = []
        for result in found.values():
            if isinstance(result, UnmatchedResult) and result.status != RESOLVED:
                result.record(ctx, now, UnmatchedResult.ResolvedByTeamDeletion)
                resolved.append(result)
        return resolved

    # -- helpers ------------------------------------------------------------------------

    def _open_order(
        self, team_id: UUID, order_id: UUID, user_id: UUID | None, result: UnmatchedResult
    ) -> Order:
        order = self.lab_orders.load(team_id, order_id)
        if user_id is not None and order.user_id != user_id:
            raise InvalidRequest("order_id is not an order of user_id.", "order_id")
        if not order.is_open:
            raise ResultNotAttachable(
                f"The order is {top_level(order.status)}: it takes no results. Accept with "
                "user_id alone to attach the result to a new order of that user."
            )
        if order.lab_id != result.lab_id:
            raise ResultNotAttachable(
                "The order was placed with another lab than the result's. Accept with "
                "user_id alone to attach the result to a new order of that lab."
            )
        return order

    def _imported(
        self,
        ctx: CommandContext,
        team_id: UUID,
        user_id: UUID,
        result: UnmatchedResult,
        contents: dict[str, Any],
    ) -> Order:
        """A new order of the user for the result, as an imported one (its requisition
        made outside, with the lab's sample id): the patient from the user's
        demographics."""
        reported = OrderedTest.of_opened(contents["lab_test"])
        assert reported is not None
        lab = self.lab_orders.catalog.lab(result.lab_id)
        methods = () if lab is None else lab.collection_methods
        method = _IMPORTED_METHOD if _IMPORTED_METHOD in methods else next(iter(methods), None)
        ordered = OrderedTest(
            uuid5(_ACCEPTED_TEST, str(result.id)), reported.name, reported.marker_ids
        )
        request = OrderRequest(
            user_id=user_id, lab_test_id=ordered.lab_test_id, collection_method=method
        )
        return self.lab_orders.imported(
            ctx, team_id, request, ordered, result.lab_id, str(contents["sample_id"])
        )

    def _sealed_note(self, result: UnmatchedResult, note: str | None) -> str | None:
        # Free text about a person: sealed with the result's key, and gone with it.
        return None if note is None else self.vault.seal(result.id, note)

    def _markers(self, marker_ids: Sequence[int]) -> list[Marker]:
        found = (self.lab_orders.catalog.marker(marker_id) for marker_id in marker_ids)
        return [marker for marker in found if marker is not None]

    def _save(self, *aggregates: Any) -> None:
        try:
            self.ledger.save(*aggregates)
        except IntegrityError as exc:
            raise ConcurrentChange() from exc
