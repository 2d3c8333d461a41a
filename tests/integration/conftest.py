"""Fixtures of the integration tests beyond tests/conftest.py's (a database, a service,
a team): what several modules' tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from healthledger.adapters.composition import Service

from tests.clocks import Clock
from tests.integration.oauth_browser import Browser, a_browser


@pytest.fixture
def clock() -> Clock:
    """A clock at now that the test moves on (hand it to build_service)."""
    return Clock()


@pytest.fixture
def browser(svc: Service) -> Iterator[Browser]:
    """A person's browser on the OAuth link flow of the module's `svc` (a service built
    with the fake maker standing in for the makers)."""
    made = a_browser(svc)
    yield made
    made.client.close()
