"""What the tests of a maker's reader share (test_oura.py, test_fitbit.py,
test_withings.py...): the service built to read the maker at its fake, and what they look
at: a connection's feeds, their statuses and last errors, the team API's answers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.providers.maker_api import MakerReader
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.resource_feeds import ResourceFeed

from tests.clocks import Clock
from tests.conftest import Team
from tests.integration.oauth_browser import API, LINK, SERVICE
from tests.stream_ids import stream_of_feed


@contextmanager
def maker_service(
    settings: Settings, clock: Clock, provider: str, fake_base: str, **maker_settings: Any
) -> Iterator[Service]:
    """A service whose OAuth client for `provider` is the tests' (SERVICE), whose maker
    endpoints are the fake's at `fake_base`, and the maker's own settings (its API URL, its
    history). The maker's data API times out after 10 s: a fake on a loaded CI machine can
    take over a second to answer, which is not the failure a test looks for; a test of a
    slow answer narrows it (`times_out_after`)."""
    configured = settings.model_copy(
        update={
            "link_url": LINK,
            "public_base_url": API,
            "oauth_maker_url": fake_base,
            "maker_api_timeout": timedelta(seconds=10),
            "oauth_clients": {provider: SERVICE},
            **maker_settings,
        }
    )
    built = build_service(configured, clock=clock)
    try:
        yield built
    finally:
        built.close()


def times_out_after(svc: Service, provider: str, seconds: float = 1.0) -> None:
    """The maker's data API times out after `seconds` from now on: the slow-answer tests
    make the fake answer later than this."""
    reader = svc.oauth_makers[provider]
    assert isinstance(reader, MakerReader)
    reader.api_timeout = seconds


def feed(svc: Service, user_id: uuid.UUID, provider: str, resource: str) -> ResourceFeed:
    found = svc.ledger.find(stream_of_feed(svc, user_id, provider, resource))
    assert isinstance(found, ResourceFeed)
    return found


def statuses(svc: Service, user_id: uuid.UUID, provider: str) -> dict[str, str | None]:
    """The pull status of each resource the catalog lists for `provider`."""
    entry = svc.catalog[provider]
    return {r: feed(svc, user_id, provider, r).status for r in entry.supported_resources}


def last_error(svc: Service, user_id: uuid.UUID, provider: str, resource: str) -> str:
    """The error code of the feed's last event (retrying or failed)."""
    event: Any = list(svc.ledger.events.get(feed(svc, user_id, provider, resource).id))[-1]
    return str(event.error_code)


def get(api: Any, home: Team, path: str, **params: Any) -> Any:
    """A team API GET that must answer 200: its JSON."""
    response = api.get(path, params=params, headers=home.headers)
    assert response.status_code == 200, response.text
    return response.json()


def provider_status(api: Any, home: Team, user_id: uuid.UUID) -> dict[str, Any]:
    """The user's one connection as GET /v2/user/providers answers it."""
    [provider] = get(api, home, f"/v2/user/providers/{user_id}")["providers"]
    return dict(provider)
