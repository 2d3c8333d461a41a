"""`serve --fake-makers` runs only for a service reached on this machine alone
(adapters/makers/sandbox.py `refusal`): each of its addresses is looked at, and loopback
is loopback in every spelling."""

from __future__ import annotations

import pytest
from healthledger.adapters.makers.sandbox import refusal
from healthledger.adapters.settings import Settings

LOCAL = {
    "host": "127.0.0.1",
    "public_base_url": "http://127.0.0.1:8000",
    "link_url": "http://127.0.0.1:8002",
}


def settings(**changed: str) -> Settings:
    return Settings.model_validate({**LOCAL, **changed})


@pytest.mark.parametrize(
    "changed",
    [
        {},
        {"host": "localhost", "public_base_url": "http://localhost:8000"},
        {"host": "::1", "link_url": "http://[::1]:8002"},
        {"host": "127.0.0.2"},  # all of 127.0.0.0/8 is loopback
    ],
)
def test_a_service_reached_on_this_machine_only_may_run_the_fakes(changed: dict[str, str]) -> None:
    assert refusal(settings(**changed)) is None


@pytest.mark.parametrize(
    ("changed", "named"),
    [
        ({"host": "0.0.0.0"}, ["HEALTHLEDGER_HOST"]),
        ({"host": "10.0.0.5"}, ["HEALTHLEDGER_HOST"]),
        ({"public_base_url": "https://api.example.com"}, ["HEALTHLEDGER_PUBLIC_BASE_URL"]),
        ({"link_url": "https://link.example.com"}, ["HEALTHLEDGER_LINK_URL"]),
        # A name that merely starts like loopback is not loopback.
        ({"link_url": "http://127.0.0.1.example.com"}, ["HEALTHLEDGER_LINK_URL"]),
        (
            {"host": "0.0.0.0", "public_base_url": "https://api.example.com"},
            ["HEALTHLEDGER_HOST", "HEALTHLEDGER_PUBLIC_BASE_URL"],
        ),
    ],
)
def test_a_service_reached_elsewhere_is_refused_naming_each_address(
    changed: dict[str, str], named: list[str]
) -> None:
    refused = refusal(settings(**changed))
    assert refused is not None
    assert all(name in refused for name in named)
    others = {"HEALTHLEDGER_HOST", "HEALTHLEDGER_PUBLIC_BASE_URL", "HEALTHLEDGER_LINK_URL"}
    assert not any(name in refused for name in others - set(named))
    assert "docs/operations.md" in refused
