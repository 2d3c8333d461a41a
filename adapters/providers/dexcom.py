"""The Dexcom reader: the Dexcom API v3 (`/v3/users/self/egvs`, `/dataRange`) behind the
provider port.

The link flow and the tokens are the generic OAuth 2.0 adapter's (`OAuth2Maker`, ADR
0022): Dexcom's token endpoint is plain RFC 6749 (`client_secret_post`), its refresh
tokens single use, `offline_access` the one scope. Dexcom has no push: a connection is
read by its history pull, then by the daily sync (docs/makers/dexcom.md).

A pull asks for one resource over one chunk of days. Of Dexcom's data our catalog lists
`glucose` only (the estimated glucose values); events, calibrations and alerts are not
read (docs/makers/dexcom.md says why).

- Windows. Dexcom answers at most 30 days per request (a longer window is its 400): the
  chunk's UTC days are asked in windows of at most `window_days`, `startDate`/`endDate`
  in UTC without an offset, as documented. `/dataRange` (read once per pull, shared by its
  chunks) bounds the person's EGVs: a window outside it is not asked at all, so a two-year
  history of someone who wore a sensor for three months costs three months of requests.
- Instants and zones. `systemTime` is the instant (UTC, nominally, with no offset); a
  sample's timestamp is it, in UTC. `displayTime` is what the receiving device's clock
  showed: from a phone it carries the phone's offset, from a receiver none, and a
  receiver's clock is set by hand (it may be hours off), so it never places a reading.
  Samples are stored under the UTC day of their instant, as the demo devices' are.
- Units. Glucose is answered in mmol/L everywhere (the demo devices, the Apple Health
  import): a value in mg/dL is divided by 18.0156 (Apple Health's factor) and rounded to
  0.1; one in mmol/L is kept. A record with no value (Dexcom's "high"/"low" without a
  number) or an unknown unit is left out.
- Record ids. A record listed twice (same `recordId`) counts once, the last listed; a day
  is stored whole each time it is read, so a revised value replaces its own.
- Failures: the shared session's (adapters/providers/maker_api.py): 429 to
  `provider_rate_limit_exceeded` (Retry-After honoured), 5xx and unreadable answers to
  `provider_unavailable`, timeouts to `transport_failure`, a 401 refreshed once, then
  the connection in `error`; Dexcom's 400 (a window it will not answer) refuses the pull.

Nothing Dexcom sends is logged or put in an error: messages are fixed texts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from healthledger.adapters.providers.maker_api import (
    MakerReader,
    MakerSession,
    MakerTexts,
    by_utc_day,
    instant,
    scope_availability,
    utc_iso,
)
from healthledger.adapters.reference import ProviderEntry
from healthledger.domain.connections.providers import OAuthGrant, PullTarget

# Dexcom answers at most 30 days per request (developer.dexcom.com, "Date and time").
WINDOW_DAYS = 30
TEXTS = MakerTexts.of("Dexcom")
MG_DL_PER_MMOL_L = 18.0156
# Dexcom's one scope covers everything it gives; the resource -> that scope.
SCOPES: dict[str, str] = {"glucose": "offline_access"}


@dataclass(frozen=True)
class Range:
    """The span of the person's EGVs at Dexcom (`dataRange`'s `egvs`), system times."""

    start: datetime
    end: datetime


class DexcomReader(MakerReader):
    """Implements the ProviderAdapter port for Dexcom: OAuth from the catalog, data from
    the API v3 at `api_url`. Its `recent` reads: the data range of each pull (None: no
    EGVs at all)."""

    def __init__(
        self, entry: ProviderEntry, *, window_days: int = WINDOW_DAYS, **reader: Any
    ) -> None:
        super().__init__(entry, **reader)
        self.window_days = window_days

    def availability(
        self, resources: Sequence[str], grant: OAuthGrant | None = None
    ) -> dict[str, Any]:
        """Glucose under `offline_access`; what Dexcom does not give (or we do not read)
        is unavailable."""
        return scope_availability(resources, SCOPES, grant)

    def fetch(
        self, target: PullTarget, start: date, end: date, now: datetime, attempt: int
    ) -> dict[date, Any]:
        if target.resource != "glucose":
            return {}  # not in Dexcom's API as we read it (availability says so)
        connection_id = target.grant_id()
        session = MakerSession(self, connection_id, now, texts=TEXTS, timeout=self.api_timeout)
        span = self.data_range(session)
        if span is None:
            return {}
        records: list[dict[str, Any]] = []
        for begin, stop in windows(start, end, self.window_days):
            if stop <= span.start or begin > span.end:
                continue  # no EGV there: not asked
            records.extend(self.egvs(session, begin, stop))
        return by_utc_day(_samples(records), start, end)

    def data_range(self, session: MakerSession) -> Range | None:
        """The span of the person's EGVs, read once per pull (its chunks share it)."""

        def read() -> Range | None:
            answer = session.get(f"{self.api_url}/v3/users/self/dataRange")
            if not isinstance(answer, dict):
                raise TEXTS.broken()
            return _range(answer.get("egvs"))

        return self.recent.shared((session.connection_id, session.now, "dataRange"), read)

    def egvs(self, session: MakerSession, begin: datetime, stop: datetime) -> list[dict[str, Any]]:
        """The EGV records of one window (at most `window_days`; Dexcom does not page)."""
        answer = session.get(
            f"{self.api_url}/v3/users/self/egvs",
            {"startDate": dexcom_time(begin), "endDate": dexcom_time(stop)},
        )
        records = answer.get("records") if isinstance(answer, dict) else None
        if not isinstance(records, list):
            raise TEXTS.broken()
        return [r for r in records if isinstance(r, dict)]


def dexcom_time(moment: datetime) -> str:
    """An instant as Dexcom's query parameters take it: UTC, to the second, no offset."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def windows(start: date, end: date, size: int) -> Iterable[tuple[datetime, datetime]]:
    """The UTC days start..end as windows [begin, stop) of at most `size` days."""
    begin = datetime.combine(start, time(0), UTC)
    last = datetime.combine(end + timedelta(days=1), time(0), UTC)
    while begin < last:
        stop = min(begin + timedelta(days=size), last)
        yield begin, stop
        begin = stop


def _range(window: Any) -> Range | None:
    """`dataRange`'s window of a dataset; None when the person has none (null, or no
    readable bounds)."""
    if not isinstance(window, Mapping):
        return None
    bounds = [
        instant(edge.get("systemTime")) if isinstance(edge, Mapping) else None
        for edge in (window.get("start"), window.get("end"))
    ]
    first, last = bounds
    if first is None or last is None:
        return None
    return Range(first, last)


def _value(record: Mapping[str, Any]) -> float | None:
    """The record's glucose in mmol/L; None without a value or in an unknown unit."""
    value, unit = record.get("value"), record.get("unit")
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    if unit == "mg/dL":
        return round(value / MG_DL_PER_MMOL_L, 1)
    if unit == "mmol/L":
        return round(float(value), 1)
    return None


def _samples(records: Iterable[dict[str, Any]]) -> list[tuple[datetime, dict[str, Any]]]:
    """Each record once (its `recordId`, the last listed), as a glucose sample at its
    system time (the instant; `displayTime` is what a device's clock showed)."""
    by_id: dict[Any, tuple[datetime, dict[str, Any]]] = {}
    for record in records:
        moment, value = instant(record.get("systemTime")), _value(record)
        if moment is None or value is None:
            continue
        key = record.get("recordId") or (moment, value)
        by_id[key] = (moment, {"timestamp": utc_iso(moment), "value": value, "unit": "mmol/L"})
    return sorted(by_id.values(), key=lambda pair: pair[0])
