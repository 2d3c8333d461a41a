"""Oura's webhook verifier (adapters/providers/oura_webhooks.py) on its own: what it accepts
and refuses, and what a notification becomes. The route, the intake and the fake Oura
sending for real: tests/integration/test_oura_webhooks.py."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

import pytest
from healthledger.adapters.providers.oura_webhooks import OuraWebhooks, sign
from healthledger.domain.connections.maker_notices import NoticeMalformed, NoticeRefused

SECRET, TOKEN = "client-secret", "verify-me"
NOW = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
NOTIFICATION = {
    "event_type": "update",
    "data_type": "workout",
    "object_id": "w-1",
    "event_time": "2026-11-29T07:59:00+02:00",
    "user_id": "oura-person-1",
}


def signed(body: object, at: datetime = NOW, secret: str = SECRET) -> tuple[dict[str, str], bytes]:
    raw = json.dumps(body).encode()
    timestamp = str(int(at.timestamp()))
    return {"x-oura-timestamp": timestamp, "x-oura-signature": sign(secret, timestamp, raw)}, raw


def test_a_notification_becomes_a_notice_of_its_resources_and_days() -> None:
    webhooks = OuraWebhooks(SECRET, TOKEN)
    headers, raw = signed(NOTIFICATION)
    [notice] = webhooks.notices(headers, raw, NOW)
    assert notice.provider == "oura" and notice.account_id == "oura-person-1"
    assert notice.resources == {"workouts"}
    # The day of event_time (as Oura wrote it, the person's local time) and the day before.
    assert (notice.start, notice.end) == (date(2026, 11, 28), date(2026, 11, 29))
    assert not notice.deauthorized
    assert "oura-person-1" not in repr(notice)  # the account id is kept out of reprs
    # The same notification, the same key; another change of the document, another key.
    [again] = webhooks.notices(headers, raw, NOW)
    later = {**NOTIFICATION, "event_time": "2026-11-29T08:30:00+02:00"}
    [other] = webhooks.notices(*signed(later), NOW)
    assert again.key == notice.key != other.key


def test_signatures_in_lower_case_and_timestamps_in_milliseconds_are_oura_s_too() -> None:
    webhooks = OuraWebhooks(SECRET, TOKEN)
    headers, raw = signed(NOTIFICATION)
    headers["x-oura-signature"] = headers["x-oura-signature"].lower()
    assert len(webhooks.notices(headers, raw, NOW)) == 1
    milliseconds = str(int(NOW.timestamp() * 1000))
    headers = {
        "x-oura-timestamp": milliseconds,
        "x-oura-signature": sign(SECRET, milliseconds, raw),
    }
    assert len(webhooks.notices(headers, raw, NOW)) == 1


@pytest.mark.parametrize(
    "change",
    ["no signature", "another secret", "body changed", "stale", "from the future", "bad time"],
)
def test_what_oura_did_not_sign_now_is_refused(change: str) -> None:
    webhooks = OuraWebhooks(SECRET, TOKEN)
    headers, raw = signed(NOTIFICATION)
    if change == "no signature":
        del headers["x-oura-signature"]
    elif change == "another secret":
        headers, raw = signed(NOTIFICATION, secret="someone-else")
    elif change == "body changed":
        raw = raw.replace(b"oura-person-1", b"oura-person-2")
    elif change == "stale":
        headers, raw = signed(NOTIFICATION, at=NOW - timedelta(minutes=6))
    elif change == "from the future":
        headers, raw = signed(NOTIFICATION, at=NOW + timedelta(minutes=6))
    else:
        headers["x-oura-timestamp"] = "yesterday"
        headers["x-oura-signature"] = sign(SECRET, "yesterday", raw)
    with pytest.raises(NoticeRefused) as refused:
        webhooks.notices(headers, raw, NOW)
    assert "oura-person" not in refused.value.message


def test_signed_bodies_that_are_no_notification_are_malformed_and_unknown_types_are_skipped() -> (
    None
):
    webhooks = OuraWebhooks(SECRET, TOKEN)
    for body in ([1], {"event_type": "update"}, {**NOTIFICATION, "event_time": "soon"}):
        with pytest.raises(NoticeMalformed):
            webhooks.notices(*signed(body), NOW)
    assert webhooks.notices(*signed({**NOTIFICATION, "data_type": "tag"}), NOW) == []
    assert webhooks.notices(*signed({**NOTIFICATION, "event_type": "renamed"}), NOW) == []
    # Several notifications in one body: each its notice.
    both = [NOTIFICATION, {**NOTIFICATION, "data_type": "daily_spo2"}]
    assert [n.resources for n in webhooks.notices(*signed(both), NOW)] == [
        {"workouts"},
        {"blood_oxygen"},
    ]


def test_a_revocation_is_a_deauthorization_of_every_resource() -> None:
    webhooks = OuraWebhooks(SECRET, TOKEN)
    body = {**NOTIFICATION, "event_type": "revoke", "data_type": "user"}
    [notice] = webhooks.notices(*signed(body), NOW)
    assert notice.deauthorized and notice.resources == frozenset()


def test_the_handshake_answers_the_challenge_only_with_our_token() -> None:
    webhooks = OuraWebhooks(SECRET, TOKEN)
    answer = webhooks.challenge("GET", {"verification_token": TOKEN, "challenge": "c-1"}, {})
    assert answer is not None and answer.status == 200
    assert json.loads(answer.body) == {"challenge": "c-1"}
    refused = webhooks.challenge("GET", {"verification_token": "x", "challenge": "c-2"}, {})
    assert refused is not None and refused.status == 401 and b"c-2" not in refused.body
    assert webhooks.challenge("GET", {}, {}) is None
    assert webhooks.challenge("HEAD", {"challenge": "c"}, {}) is None
