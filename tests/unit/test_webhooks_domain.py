"""The webhook event type catalog, filters, URL rules and the WebhookEndpoint aggregate,
without I/O (the catalog is read from its shipped data file)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import get_args
from uuid import uuid4

import pytest
from healthledger.adapters.reference import (
    ReferenceDataError,
    Resource,
    deprecation_calendar,
    parse_event_type_catalog,
    webhook_event_types,
)
from healthledger.domain.context import CommandContext
from healthledger.domain.webhooks.endpoints import (
    BY_CALLER,
    FAILING_TOO_LONG,
    ROTATION_OVERLAP,
    WebhookEndpoint,
    new_signing_secret,
)
from healthledger.domain.webhooks.event_types import filter_matches, subscribed
from healthledger.domain.webhooks.management import address, url_problem

CTX = CommandContext(actor="test:actor", request_id="req-test")
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HYPNOGRAM_TYPES = {
    "historical.timeseries.hypnogram.created": "historical.data.sleep_cycle.created",
    "daily.timeseries.hypnogram.created": "daily.data.sleep_cycle.created",
    "daily.timeseries.hypnogram.updated": "daily.data.sleep_cycle.updated",
}

# -- the catalog ------------------------------------------------------------------------


def test_the_catalog_has_every_event_type_of_the_spec() -> None:
    catalog = webhook_event_types()
    names = [t.name for t in catalog.types]
    assert len(names) == len(set(names))
    resources = [r for r in get_args(Resource) if r != "hypnogram"]
    assert len(resources) == 68 and "sleep_cycle" in resources
    expected = {"provider.connection.created", "provider.connection.error", *HYPNOGRAM_TYPES}
    for resource in resources:
        expected |= {
            f"historical.data.{resource}.created",
            f"daily.data.{resource}.created",
            f"daily.data.{resource}.updated",
        }
    assert set(names) == expected
    # Hypnogram data arrives only as the deprecated timeseries events.
    assert "daily.data.hypnogram.created" not in catalog


def test_the_hypnogram_events_are_deprecated_with_their_successors_and_date() -> None:
    deprecated = {t.name: t for t in webhook_event_types().types if t.deprecated}
    assert set(deprecated) == set(HYPNOGRAM_TYPES)
    for name, successor in HYPNOGRAM_TYPES.items():
        assert deprecated[name].replaced_by == successor
        assert deprecated[name].removed_on == date(2025, 1, 31)
        assert successor in webhook_event_types()


def test_a_catalog_file_whose_successor_is_missing_is_refused() -> None:
    text = '{"event_types": [], "resource_event_types": []}'
    with pytest.raises(ReferenceDataError, match="is not an event type"):
        parse_event_type_catalog(text, "broken.json", deprecation_calendar())


def test_a_catalog_file_with_a_bad_template_is_refused() -> None:
    text = (
        '{"event_types": [], "resource_event_types": '
        '[{"template": "daily.data.created", "description": "no resource"}]}'
    )
    with pytest.raises(ReferenceDataError, match="not a valid webhook event type catalog"):
        parse_event_type_catalog(text, "broken.json", ())


# -- filters ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "event_type", "expected"),
    [
        ("daily.data.sleep.created", "daily.data.sleep.created", True),
        ("daily.data.sleep.created", "daily.data.sleep.updated", False),
        ("daily.data.*", "daily.data.sleep.created", True),
        ("daily.*", "daily.timeseries.hypnogram.created", True),
        ("daily.data.sleep.*", "daily.data.sleep_cycle.created", False),
        ("daily.data.*", "daily.datax.sleep.created", False),
        ("provider.*", "historical.data.sleep.created", False),
    ],
)
def test_filter_entries_match_exact_types_and_dotted_prefixes(
    entry: str, event_type: str, expected: bool
) -> None:
    assert filter_matches(entry, event_type) is expected


def test_no_filter_entries_means_every_event_type() -> None:
    assert subscribed([], "provider.connection.error")
    assert not subscribed(["daily.*"], "provider.connection.error")
    assert subscribed(["daily.*", "provider.connection.error"], "provider.connection.error")


# -- URLs -------------------------------------------------------------------------------

OWN = {address("127.0.0.1", 8000), address("api.example", 443)}


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("https://receiver.example/hook", False),
        ("http://receiver.example:8000/hook", False),
        ("http://127.0.0.1:8080/hook", False),
        ("http://127.0.0.1:8000/hook", True),
        ("http://localhost:8000", True),
        ("http://0.0.0.0:8000/", True),
        ("http://127.0.0.2:8000/", True),
        ("https://API.example./hook", True),
        ("https://api.example:443/hook", True),
        ("http://api.example/hook", False),
        ("mailto:someone@example.com", True),
        ("https://receiver.example/\nhook", True),
    ],
)
def test_url_rules(url: str, refused: bool) -> None:
    assert (url_problem(url, OWN) is not None) is refused


# -- the aggregate ----------------------------------------------------------------------


def _endpoint(**fields: object) -> WebhookEndpoint:
    values: dict[str, object] = {
        "team_id": uuid4(),
        "environment": "sandbox",
        "url": "https://receiver.example/hook",
        "description": "",
        "filter_types": [],
        "disabled": False,
        "sealed_secret": "v1.first",
        **fields,
    }
    return WebhookEndpoint.create(CTX, T0, **values)  # type: ignore[arg-type]


def test_new_secrets_are_standard_webhooks_secrets() -> None:
    import base64

    first, second = new_signing_secret(), new_signing_secret()
    assert first != second
    assert first.startswith("whsec_")
    assert len(base64.b64decode(first.removeprefix("whsec_"), validate=True)) == 32


def test_updates_record_only_what_changed() -> None:
    endpoint = _endpoint()
    endpoint.update(CTX, T0, url="https://receiver.example/hook", filter_types=[])
    assert endpoint.collect_events()[1:] == []
    endpoint.update(CTX, T0, description="new", filter_types=["daily.*"])
    (event,) = endpoint.collect_events()
    assert isinstance(event, WebhookEndpoint.Updated)
    assert event.changes == {"description": "new", "filter_types": ["daily.*"]}
    assert endpoint.filter_types == ("daily.*",)
    with pytest.raises(ValueError, match="not an updatable field"):
        endpoint.update(CTX, T0, sealed_secret="v1.stolen")


def test_disable_and_enable_carry_their_reason_and_repeat_as_no_ops() -> None:
    endpoint = _endpoint()
    endpoint.collect_events()
    endpoint.disable(CTX, T0, FAILING_TOO_LONG)
    endpoint.disable(CTX, T0, BY_CALLER)
    assert endpoint.disabled and endpoint.disabled_reason == FAILING_TOO_LONG
    endpoint.enable(CTX, T0)
    endpoint.enable(CTX, T0)
    events = endpoint.collect_events()
    assert [type(e).__name__ for e in events] == ["Disabled", "Enabled"]
    assert [e.reason for e in events] == [FAILING_TOO_LONG, BY_CALLER]  # type: ignore[attr-defined]
    assert not endpoint.disabled


def test_rotation_keeps_the_previous_secret_for_its_overlap() -> None:
    endpoint = _endpoint()
    assert endpoint.sealed_secrets_in_force(T0) == ["v1.first"]
    endpoint.rotate_secret(CTX, T0, "v1.second")
    assert endpoint.sealed_secrets_in_force(T0) == ["v1.second", "v1.first"]
    end = T0 + ROTATION_OVERLAP
    assert timedelta(hours=24) == ROTATION_OVERLAP
    assert endpoint.sealed_secrets_in_force(end - timedelta(microseconds=1)) == [
        "v1.second",
        "v1.first",
    ]
    assert endpoint.sealed_secrets_in_force(end) == ["v1.second"]
    # Replaying the events rebuilds the same state.
    events = endpoint.collect_events()
    replayed = None
    for event in events:
        replayed = event.mutate(replayed)
    assert isinstance(replayed, WebhookEndpoint)
    assert replayed.sealed_secrets_in_force(T0) == ["v1.second", "v1.first"]
