"""Fixtures of the e2e tests beyond tests/conftest.py's: the team API served by uvicorn
on a local port, and the official Python client (`vital`) set up against it as customers
set it up (tests/e2e/official_client.py holds the rest of its wiring)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
import vital
from healthledger.adapters.composition import Service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.domain.context import CommandContext

from tests.conftest import Team
from tests.e2e.servers import free_port


@pytest.fixture
def base_url(service: Service) -> Iterator[str]:
    """The team API served by uvicorn in a thread of this process, so that the test can
    also drive the service's jobs (the pull worker) directly."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_team_api(service), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, name="team-api", daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=15)


@pytest.fixture
def api(base_url: str, team: Team, service: Service) -> Iterator[vital.Vital]:
    # Demographics are closed beta (gaps.md): the customer's team has them switched on.
    service.teams.set_feature(CommandContext.system("test"), team.team_id, "demographics", True)
    # The client as customers construct it: its key and our base_url, nothing else (it
    # sends the key in x-vital-api-key, which the team API accepts).
    yield vital.Vital(api_key=team.key, base_url=base_url, timeout=30)
