"""`user.refresh` of the official client (issue 34), with only its base_url changed: the
answer parses as its UserRefreshSuccessResponse, and a refresh too soon is its 429."""

from __future__ import annotations

import pytest
import vital
from healthledger.adapters.composition import Service
from vital.core.api_error import ApiError

from tests.conftest import CLIENTS_PARSE_ANSWERS

pytestmark = CLIENTS_PARSE_ANSWERS


def test_a_refresh_through_the_official_client(api: vital.Vital, service: Service) -> None:
    user = api.user.create(client_user_id="refresh-oc")
    api.link.connect_demo_provider(user_id=user.user_id, provider="oura")
    pending = api.user.refresh(user.user_id, timeout=10)
    assert pending.success and pending.user_id == user.user_id
    assert pending.in_progress_sources == ["oura"] and pending.refreshed_sources == []
    while service.jobs.run_due_pulls():
        pass  # the history pulled to its end
    with pytest.raises(ApiError) as too_soon:
        # The client would wait the Retry-After and ask again: not here.
        api.user.refresh(user.user_id, request_options={"max_retries": 0})
    assert too_soon.value.status_code == 429
    assert too_soon.value.headers is not None and too_soon.value.headers["retry-after"]
