"""Withings Notify in: Withings' notifications read into the makers' webhook port
(`MakerWebhooks`, domain/connections/maker_notices.py).

Withings calls the callback URL we subscribed (`notify?action=subscribe`, one
subscription per `appli` category) with a form POST naming the person and a window:
`userid`, `appli`, `startdate` and `enddate` (Unix instants), or `date` (a day) for the
daily categories; `appli=46` with `action=unlink` says the person unlinked our
application. Before it accepts a subscription, Withings probes the URL with a HEAD (and
some integrations see a GET): both are answered 200.

Withings does not sign its notifications (docs/makers/withings.md): a notice is only a
prompt to sync the named window of a known account with our own token, from Withings'
own API over TLS, so a forged one costs a few requests and stores nothing it says. What
is checked: the body is Withings' form, the account id a Withings user id (digits), the
window a real one of at most a few weeks. Nothing from the body reaches a log or an
error message.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from urllib.parse import parse_qs

from healthledger.domain.connections.maker_notices import (
    ChallengeAnswer,
    MakerNotice,
    NoticeMalformed,
)

PROVIDER = "withings"
# Withings' notification categories (`appli`) -> the resources the reader reads from the
# data they announce (api-reference, "Notification categories").
APPLI_RESOURCES: dict[int, frozenset[str]] = {
    # Weight-related: weight, fat, fat-free mass, height.
    1: frozenset({"weight", "fat", "lean_body_mass", "body", "profile"}),
    # Temperature-related.
    2: frozenset({"body_temperature"}),
    # Pressure, heart rate, SpO2.
    4: frozenset({"blood_pressure", "heartrate", "blood_oxygen"}),
    # Activity: the day's summary, the watch's series, workouts.
    16: frozenset({"activity", "steps", "heartrate", "workouts"}),
    # Sleep.
    44: frozenset({"sleep", "sleep_cycle", "hypnogram"}),
}
UNLINK_APPLI = 46  # user-related: with action=unlink, the person unlinked the application
# A notice naming a longer window than this is not a change notice.
MAX_WINDOW = timedelta(days=31)


class WithingsWebhooks:
    """Implements MakerWebhooks for Withings Notify."""

    provider = PROVIDER

    def challenge(
        self, method: str, query: Mapping[str, str], headers: Mapping[str, str]
    ) -> ChallengeAnswer | None:
        """Withings' probe of the callback URL before a subscription: a HEAD (or a GET
        without parameters), answered 200 with nothing."""
        if method.upper() == "HEAD" or (method.upper() == "GET" and not query):
            return ChallengeAnswer(status=200)
        return None

    def notices(self, headers: Mapping[str, str], body: bytes, now: datetime) -> list[MakerNotice]:
        try:
            form = {k: v[0] for k, v in parse_qs(body.decode("utf-8"), strict_parsing=True).items()}
        except (UnicodeDecodeError, ValueError):
            raise NoticeMalformed() from None
        account, appli_text = form.get("userid", ""), form.get("appli", "")
        if not account.isdigit() or not appli_text.isdigit():
            raise NoticeMalformed()
        appli = int(appli_text)
        key = hashlib.sha256(
            "\x1f".join(
                f"{name}={form.get(name, '')}"
                for name in ("userid", "appli", "startdate", "enddate", "date", "action")
            ).encode()
        ).hexdigest()
        today = now.astimezone(UTC).date()
        if appli == UNLINK_APPLI:
            if form.get("action") != "unlink":
                return []  # the person's profile changed: nothing we read
            return [
                MakerNotice(
                    provider=PROVIDER,
                    account_id=account,
                    resources=frozenset(),
                    start=today,
                    end=today,
                    key=key,
                    deauthorized=True,
                )
            ]
        resources = APPLI_RESOURCES.get(appli)
        if resources is None:
            return []  # a category we do not read (ECG, bed in/out...): acknowledged
        start, end = _window(form, today)
        return [
            MakerNotice(
                provider=PROVIDER,
                account_id=account,
                resources=resources,
                start=start,
                end=end,
                key=key,
            )
        ]


def _window(form: Mapping[str, str], today: date) -> tuple[date, date]:
    """The days a notice names. Withings gives instants (or a day) without the person's
    zone: the reader stores summaries under local days and samples under UTC days, so
    the UTC days are widened by one on each side. No window named: the notice's day."""
    named = form.get("date")
    if named:
        try:
            day = date.fromisoformat(named)
        except ValueError:
            raise NoticeMalformed() from None
        return day - timedelta(days=1), day + timedelta(days=1)
    first, last = form.get("startdate", ""), form.get("enddate", "")
    if not first and not last:
        return today - timedelta(days=1), today
    if not first.isdigit() or not last.isdigit():
        raise NoticeMalformed()
    begin = datetime.fromtimestamp(int(first), UTC)
    finish = datetime.fromtimestamp(int(last), UTC)
    if finish < begin or finish - begin > MAX_WINDOW:
        raise NoticeMalformed()
    return begin.date() - timedelta(days=1), finish.date() + timedelta(days=1)
