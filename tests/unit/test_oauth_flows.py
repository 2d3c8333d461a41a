"""An OAuth sign-in's flow on its own (domain/connections/oauth_flows.py): its state, its
binding to the browser, PKCE, and its one use within its lifetime."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest
from healthledger.domain.connections.link_tokens import LinkToken
from healthledger.domain.connections.oauth_flows import (
    OAUTH_FLOW_LIFETIME,
    OAuthFlow,
    OAuthFlowExpired,
    OAuthFlowUsed,
    binding_digest,
    flow_id_of_state,
    new_binding,
    pkce_challenge,
    pkce_verifier,
)
from healthledger.domain.context import CommandContext

T = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CTX = CommandContext(actor="link_token:x", request_id="req-1")


def a_token() -> LinkToken:
    token, _ = LinkToken.issue(
        CTX,
        T,
        team_id=uuid4(),
        user_id=uuid4(),
        environment="sandbox",
        provider=None,
        redirect_url=None,
        filter_on_providers=None,
        on_error=None,
        on_close=None,
    )
    return token


def test_the_pkce_challenge_is_rfc_7636_s256() -> None:
    # RFC 7636, appendix B.
    verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    assert pkce_challenge(verifier) == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"


def test_the_verifier_comes_from_the_browser_s_secret_and_the_flow() -> None:
    binding, flow_id = new_binding(), uuid4()
    verifier = pkce_verifier(binding, flow_id)
    # RFC 7636 4.1: 43 to 128 unreserved characters.
    assert re.fullmatch(r"[A-Za-z0-9._~-]{43,128}", verifier)
    assert pkce_verifier(binding, flow_id) == verifier
    assert pkce_verifier(new_binding(), flow_id) != verifier
    assert pkce_verifier(binding, uuid4()) != verifier
    # The flow records only the secret's digest, from which no verifier follows.
    assert binding_digest(binding) != binding and verifier not in binding_digest(binding)


def test_a_state_is_the_flow_s_for_its_provider_and_its_token_only() -> None:
    token, other = a_token(), a_token()
    binding = new_binding()
    flow = OAuthFlow.start(CTX, T, token, "oura", binding)
    state = flow.state(token)
    assert state.startswith("hlo_") and flow_id_of_state(state) == flow.id
    assert flow.has_state(state, token, "oura")
    assert not flow.has_state(state, token, "fitbit")  # another provider's callback
    assert not flow.has_state(state, other, "oura")
    assert not flow.has_state(state[:-1] + ("A" if state[-1] != "A" else "B"), token, "oura")
    assert binding not in state  # the browser's secret never travels in a URL
    for malformed in ("", "hlo_", "hll_" + flow.id.hex + "_" + "A" * 43, state + "x"):
        assert flow_id_of_state(malformed) is None


def test_a_flow_is_bound_to_the_browser_that_started_it() -> None:
    binding = new_binding()
    flow = OAuthFlow.start(CTX, T, a_token(), "oura", binding)
    assert flow.bound_to(binding)
    assert not flow.bound_to(new_binding())
    assert not flow.bound_to(None) and not flow.bound_to("")


def test_a_flow_comes_back_once_within_its_lifetime() -> None:
    token = a_token()
    flow = OAuthFlow.start(CTX, T, token, "oura", new_binding())
    flow.come_back(CTX, T + timedelta(minutes=5))
    assert flow.returned_at == T + timedelta(minutes=5)
    with pytest.raises(OAuthFlowUsed):
        flow.come_back(CTX, T + timedelta(minutes=6))
    # Replayed from its events, it is the same flow.
    replayed = None
    for event in flow.collect_events():
        replayed = event.mutate(replayed)
    assert replayed == flow

    late = OAuthFlow.start(CTX, T, token, "oura", new_binding())
    with pytest.raises(OAuthFlowExpired):
        late.come_back(CTX, T + OAUTH_FLOW_LIFETIME)
    assert late.returned_at is None
