"""Withings Notify read into the makers' webhook port (adapters/providers/withings_webhooks.py):
the callback's form (`userid`, `appli`, `startdate`/`enddate` or `date`, `action`) into
notices of our resources and days; the HEAD probe answered; unlinking ends the connection;
a category we do not read is acknowledged with nothing; a body that is not Withings' form
is refused as malformed, with nothing of it in the message."""

from __future__ import annotations

from datetime import UTC, date, datetime
from urllib.parse import urlencode

import pytest
from healthledger.adapters.providers.withings import NOTIFY_CATEGORIES, SCOPES
from healthledger.adapters.providers.withings_webhooks import (
    APPLI_RESOURCES,
    WithingsWebhooks,
)
from healthledger.domain.connections.maker_notices import MakerWebhooks, NoticeMalformed

NOW = datetime(2026, 3, 10, 12, tzinfo=UTC)
FORM = {"content-type": "application/x-www-form-urlencoded"}


def body(**fields: object) -> bytes:
    return urlencode({k: str(v) for k, v in fields.items()}).encode()


def test_it_implements_the_port_and_answers_withings_probe() -> None:
    webhooks: MakerWebhooks = WithingsWebhooks()
    assert webhooks.provider == "withings"
    probe = webhooks.challenge("HEAD", {}, {})
    assert probe is not None and probe.status == 200 and probe.body == b""
    assert webhooks.challenge("GET", {"verify": "x"}, {}) is None


def test_a_weighing_notice_names_its_resources_and_its_utc_days_widened() -> None:
    start = int(datetime(2026, 3, 8, 6, 30, tzinfo=UTC).timestamp())
    end = int(datetime(2026, 3, 8, 6, 31, tzinfo=UTC).timestamp())
    [notice] = WithingsWebhooks().notices(
        FORM, body(userid=31000001, appli=1, startdate=start, enddate=end), NOW
    )
    assert notice.provider == "withings" and notice.account_id == "31000001"
    assert notice.resources == {"weight", "fat", "lean_body_mass", "body", "profile"}
    # Withings gives no zone: a local day can be the UTC day before or after.
    assert (notice.start, notice.end) == (date(2026, 3, 7), date(2026, 3, 9))
    assert not notice.deauthorized
    assert "31000001" not in repr(notice)


def test_a_daily_notice_with_a_date_and_every_category_maps_to_resources_the_reader_serves() -> (
    None
):
    [notice] = WithingsWebhooks().notices(
        FORM, body(userid=31000001, appli=44, date="2026-03-09"), NOW
    )
    assert notice.resources == {"sleep", "sleep_cycle", "hypnogram"}
    assert (notice.start, notice.end) == (date(2026, 3, 8), date(2026, 3, 10))
    for resources in APPLI_RESOURCES.values():
        assert resources <= set(SCOPES)
    # The reader subscribes exactly the categories read here.
    assert set(NOTIFY_CATEGORIES) == set(APPLI_RESOURCES)


def test_the_same_notice_twice_has_one_key_two_changes_two() -> None:
    webhooks = WithingsWebhooks()
    once = webhooks.notices(FORM, body(userid=7, appli=16, startdate=10, enddate=20), NOW)
    again = webhooks.notices(FORM, body(userid=7, appli=16, startdate=10, enddate=20), NOW)
    other = webhooks.notices(FORM, body(userid=7, appli=16, startdate=10, enddate=30), NOW)
    assert once[0].key == again[0].key != other[0].key


def test_unlinking_ends_the_connection_and_other_categories_are_acknowledged_empty() -> None:
    webhooks = WithingsWebhooks()
    [unlink] = webhooks.notices(FORM, body(userid=7, appli=46, action="unlink"), NOW)
    assert unlink.deauthorized and unlink.resources == frozenset()
    assert webhooks.notices(FORM, body(userid=7, appli=46, action="update"), NOW) == []
    assert webhooks.notices(FORM, body(userid=7, appli=54, startdate=1, enddate=2), NOW) == []


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xff\xfe",
        b"not a form",
        body(appli=1, startdate=1, enddate=2),
        body(userid="dana@example.com", appli=1),
        body(userid=7, appli="weight"),
        body(userid=7, appli=1, startdate=20, enddate=10),
        body(userid=7, appli=1, startdate=0, enddate=90 * 86400),
        body(userid=7, appli=1, date="yesterday"),
    ],
)
def test_a_body_that_is_not_withings_form_is_malformed_and_not_echoed(raw: bytes) -> None:
    with pytest.raises(NoticeMalformed) as caught:
        WithingsWebhooks().notices(FORM, raw, NOW)
    assert "example.com" not in str(caught.value)
