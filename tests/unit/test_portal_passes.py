"""Portal passes on their own (domain/labs/portal.py): lifetimes by context, and when a
pass stops opening the portal. No database; the endpoint and the page are in
tests/integration/test_portal.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest
from healthledger.domain.labs.portal import (
    COMMUNICATIONS,
    EXPIRED,
    LAUNCH,
    USER_GONE,
    PortalLifetimes,
    PortalPass,
)

T = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LIFETIMES = PortalLifetimes(launch=timedelta(minutes=10), communications=timedelta(days=28))


def a_pass(context: str = LAUNCH) -> PortalPass:
    return PortalPass(uuid4(), uuid4(), context, T, T + LIFETIMES.of(context))


def test_each_context_has_its_lifetime() -> None:
    assert a_pass(LAUNCH).expires_in == 600
    assert a_pass(COMMUNICATIONS).expires_in == 28 * 24 * 3600
    with pytest.raises(ValueError):
        LIFETIMES.of("email")


def test_a_pass_opens_the_portal_until_it_expires() -> None:
    grant = a_pass()
    live = {"user_live": True, "deleted_since_issue": False}
    assert grant.problem(T, **live) is None
    assert grant.problem(T + timedelta(minutes=10) - timedelta(microseconds=1), **live) is None
    assert grant.problem(T + timedelta(minutes=10), **live) == EXPIRED


def test_a_pass_dies_with_its_users_deletion_even_undone() -> None:
    grant = a_pass(COMMUNICATIONS)
    now = T + timedelta(days=1)
    assert grant.problem(now, user_live=False, deleted_since_issue=True) == USER_GONE
    # Undone: live again, but deleted after the pass was issued.
    assert grant.problem(now, user_live=True, deleted_since_issue=True) == USER_GONE
    assert grant.problem(now, user_live=False, deleted_since_issue=False) == USER_GONE
    # Expiry is told first: a person with an old link should ask for a new one either way.
    late = T + timedelta(days=29)
    assert grant.problem(late, user_live=False, deleted_since_issue=True) == EXPIRED
