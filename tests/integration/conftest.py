"""Fixtures of the integration tests beyond tests/conftest.py's (a database, a service,
a team): what several modules' tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from healthledger.adapters.composition import Service
from healthledger.adapters.http.team_api import create_team_api

from tests.clocks import Clock
from tests.conftest import Team
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


@pytest.fixture
def home(svc: Service) -> Team:
    """The team the module's `svc` bootstraps, with its API key (a module that needs
    another team defines its own `home`)."""
    boot = svc.bootstrap()
    assert boot is not None
    return Team(boot.team_id, boot.team_api_key.plain)


@pytest.fixture
def api(svc: Service) -> Iterator[TestClient]:
    """The team API of the module's `svc`, in process; a server error is an answer (500),
    not an exception, as a client would see it."""
    with TestClient(create_team_api(svc), raise_server_exceptions=False) as test_client:
        yield test_client
