"""The hosted portal's passes (spec 2.4, endpoint 4; gaps.md Portal URL): what a portal URL
lets its holder see, for how long, and when it stops working.

A pass lets one user of one team see that user's lab test orders, their statuses and
results, on the hosted portal page. It is not stored: the URL carries it signed (the
adapter's `PortalTokens`), so issuing one records nothing, and everything that ends it is a
fact the page checks when it is opened:

- its expiry, fixed at issue by its context: `launch` (minutes: a user sent from the team's
  signed-in web app into the portal) or `communications` (weeks: e-mail, SMS);
- the user: a pass dies with the user's deletion, and stays dead if the deletion is undone
  (a link handed out before a deletion must not come back to life with the user);
- the team's closed-beta switch `portal_url`, checked by the adapters at issue and at every
  page view.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal
from uuid import UUID

from healthledger.domain.errors import InvalidRequest
from healthledger.domain.labs.orders import OrderNotFound
from healthledger.domain.ledger import Clock
from healthledger.domain.users.lifecycle import UserLifecycle

LAUNCH = "launch"
COMMUNICATIONS = "communications"
PortalContext = Literal["launch", "communications"]
PORTAL_CONTEXTS: tuple[str, ...] = (LAUNCH, COMMUNICATIONS)

# Why a genuine pass no longer opens the portal (a forged or malformed one is not a pass).
EXPIRED = "expired"
USER_GONE = "user_gone"

# The owner (user id) of a team's order, None for an order the team does not have.
OrderOwner = Callable[[UUID, UUID], UUID | None]


@dataclass(frozen=True)
class PortalLifetimes:
    """How long a pass of each context lives (settings; gaps.md: 10 minutes, 28 days)."""

    launch: timedelta
    communications: timedelta

    def of(self, context: str) -> timedelta:
        if context == LAUNCH:
            return self.launch
        if context == COMMUNICATIONS:
            return self.communications
        raise ValueError(f"unknown portal context {context!r}")


@dataclass(frozen=True)
class PortalPass:
    """One user's orders in one team, from `issued_at` until `expires_at`."""

    team_id: UUID
    user_id: UUID
    context: str
    issued_at: datetime
    expires_at: datetime

    @property
    def expires_in(self) -> int:
        """Whole seconds from issue to expiry (the answer's `expires_in`)."""
        return int((self.expires_at - self.issued_at).total_seconds())

    def problem(self, now: datetime, *, user_live: bool, deleted_since_issue: bool) -> str | None:
        """Why the pass no longer opens the portal at `now`, or None. `user_live`: the user
        is active in the pass's team; `deleted_since_issue`: a deletion of the user was
        recorded after the pass was issued (undone or not)."""
        if now >= self.expires_at:
            return EXPIRED
        if not user_live or deleted_since_issue:
            return USER_GONE
        return None


class Portal:
    """Issues portal passes for live users of a team."""

    def __init__(
        self,
        users: UserLifecycle,
        clock: Clock,
        lifetimes: PortalLifetimes,
        order_owner: OrderOwner,
    ) -> None:
        self.users = users
        self.clock = clock
        self.lifetimes = lifetimes
        self.order_owner = order_owner

    def issue(
        self, team_id: UUID, user_id: UUID, context: str, order_id: UUID | None = None
    ) -> PortalPass:
        """A pass for a live user of the team who has demographics (spec 4 rule 1: else
        InvalidRequest, a 422); `order_id`, the order the URL opens on, must be one of
        that user's (else OrderNotFound, like any order the team cannot see)."""
        lifetime = self.lifetimes.of(context)
        user = self.users.load_live(team_id, user_id)
        if user.sealed_demographics is None:
            raise InvalidRequest(
                "The user has no demographics, which the portal needs: record them first "
                "(PATCH /v2/user/{user_id}/info).",
                "user_id",
                "path",
            )
        if order_id is not None and self.order_owner(team_id, order_id) != user_id:
            raise OrderNotFound()
        now = self.clock()
        return PortalPass(team_id, user_id, context, now, now + lifetime)
