"""What every reader of a maker's data API does the same way, whoever the maker.

A reader (`OuraReader`, `FitbitReader`...) is the generic OAuth adapter (`OAuth2Maker`)
plus the maker's own endpoints and formats. The rest is here, once:

- `MakerReader`: the generic OAuth adapter with what every reader adds to it: the data
  API's base URL and timeout, how far back a new connection's history reaches, how long
  a maker's Retry-After is waited out, and `recent` (`RecentReads`): what the pulls
  running now have read, for the resources that share a read.
- `MakerTexts`: the fixed error texts of a maker's failures (nothing the maker sends
  reaches an error, an event or a log).
- `granted_scopes`, `scope_availability`: which resources the person's grant covers
  (unticked scopes make resources `unavailable`, not failed pulls).
- `MakerSession`: one fetch's access to the data API as the connection's person: the
  access token (refreshed when expired), a 401 answered with one refresh, and `get`,
  which turns the maker's answers into the ProviderError codes the pull engine retries:
  429 `provider_rate_limit_exceeded` (a short wait waited out here, a long one handed to
  the engine), 5xx and unreadable answers `provider_unavailable`, timeouts and broken
  connections `transport_failure`, a 401 after the refresh `token_refresh_failed`.
- `MAX_PAGES`: the guard of every paging loop (a cursor chain longer is a maker that
  loops, not data); `cursor_pages` follows a cursor chain to its end under it.
- Mapping helpers of instants and days (`instant`, `offset_seconds`, `utc_iso`,
  `by_utc_day`).
"""

from __future__ import annotations

import threading
import time as time_module
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import urlencode, urlsplit
from uuid import UUID

import httpx
from healthledger.adapters.outbound import retry_after
from healthledger.adapters.persistence.keys.provider_tokens import SqlProviderTokenStore
from healthledger.adapters.providers.oauth2 import (
    RETRY_REFRESH_AFTER,
    TOKEN_REFRESH_FAILED,
    CustomClient,
    OAuth2Maker,
)
from healthledger.adapters.reference import ProviderEntry
from healthledger.domain.connections import raw_payloads
from healthledger.domain.connections.providers import (
    NON_RETRIABLE,
    OAuthClient,
    OAuthGrant,
    ProviderError,
)
from healthledger.domain.ledger import Clock

# A wait the maker asks for up to this long is waited out within the fetch; a longer one
# ends it (the engine's retry comes no sooner than the maker said).
MAX_WAIT = 5.0
# Rate-limited answers waited out in one fetch before it gives up to the engine.
MAX_WAITS = 3
# A cursor chain longer than this is a maker that loops, not data.
MAX_PAGES = 10_000

Sleep = Callable[[float], None]
# How long a 429 answer asks us to wait (None: it does not say): Retry-After by default;
# a maker with its own header (Fitbit's rate-limit reset) passes its own.
WaitOf = Callable[[httpx.Response, datetime], timedelta | None]


T = TypeVar("T")


class RecentReads:
    """What the pulls running now have read, kept for the resources that share a read (a
    maker's endpoint often serves several of our resources: each is asked once per pull).
    Callers key a read with the pull's `now`, so a retry or the next sync reads afresh;
    past `size` reads the oldest is dropped (a chunk's dozen, a few pulls' at once)."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._reads: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        # The maker's answers each shared read was made of (raw_payloads.answers_of).
        self._answers: dict[tuple[Any, ...], tuple[raw_payloads.RawAnswer, ...]] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> Any | None:
        with self._lock:
            return self._reads.get(key)

    def put(
        self, key: tuple[Any, ...], value: Any, answers: Sequence[raw_payloads.RawAnswer] = ()
    ) -> None:
        """`value` kept under `key`; `answers`: the maker's answers it was read from
        (raw_payloads.answers_of), counted again by `served_from` for each resource the
        value serves later."""
        with self._lock:
            self._reads[key] = value
            if answers:
                self._answers[key] = tuple(answers)
            else:
                self._answers.pop(key, None)
            self._reads.move_to_end(key)
            while len(self._reads) > self.size:
                dropped, _ = self._reads.popitem(last=False)
                self._answers.pop(dropped, None)

    def shared(self, key: tuple[Any, ...], read: Callable[[], T]) -> T:
        """What `read` answers (None too), read once for every caller of the same key.
        Two pulls racing on a key may both read: the later answer is kept, and either is
        right."""
        with self._lock:
            hit = key in self._reads
            kept: Any = self._reads[key] if hit else None
            answers = self._answers.get(key, ())
        if hit:
            # The maker's answers it was read from serve this resource too (raw payloads).
            raw_payloads.served(answers)
            held: T = kept
            return held
        with raw_payloads.answers_of() as read_from:
            found = read()
        self.put(key, found, read_from)
        return found

    def served_from(self, key: tuple[Any, ...]) -> None:
        """The value under `key` (read with `get`) serves the resource fetched now: the
        maker's answers it was read from are its raw payloads too."""
        with self._lock:
            answers = self._answers.get(key, ())
        raw_payloads.served(answers)


class MakerReader(OAuth2Maker):
    """A maker's reader: the generic OAuth adapter (the link flow and the tokens, ADR
    0022) plus the maker's data API at `api_url`. A maker's class adds its endpoints and
    formats (its own `fetch` and `availability`) and, where it needs them, settings of
    its own."""

    def __init__(
        self,
        entry: ProviderEntry,
        *,
        service_client: OAuthClient | None,
        custom_client: CustomClient,
        tokens: SqlProviderTokenStore,
        http: httpx.Client,
        clock: Clock,
        api_url: str,
        history_days: int,
        api_timeout: float = 30.0,
        maker_url: str | None = None,
        max_wait: float = MAX_WAIT,
        sleep: Sleep = time_module.sleep,
        recent_reads: int = 64,
    ) -> None:
        assert entry.oauth is not None
        super().__init__(
            entry,
            entry.oauth,
            service_client=service_client,
            custom_client=custom_client,
            tokens=tokens,
            http=http,
            clock=clock,
            maker_url=maker_url,
        )
        self.api_url = api_url.rstrip("/")
        self.api_timeout = api_timeout
        self.history_days = history_days
        self.max_wait = max_wait
        self.sleep = sleep
        self.recent = RecentReads(recent_reads)


@dataclass(frozen=True)
class MakerTexts:
    """The fixed texts of a maker's failures, in our words."""

    rate_limited: str
    unavailable: str
    unreachable: str
    refused: str
    must_reconnect: str

    @classmethod
    def of(cls, name: str) -> MakerTexts:
        again = "the pull will try again."
        return cls(
            rate_limited=f"{name} answered that too many requests were made; {again}",
            unavailable=f"{name}'s data API is unavailable; {again}",
            unreachable=f"{name}'s data API could not be reached in time; {again}",
            refused=f"{name} refused the request for this resource.",
            must_reconnect=f"{name} no longer accepts this connection's grant; connect again.",
        )

    def broken(self) -> ProviderError:
        """An answer that is not what the maker documents: passing, retried."""
        return ProviderError("provider_unavailable", self.unavailable)


def retry_after_header(response: httpx.Response, now: datetime) -> timedelta | None:
    return retry_after(response.headers.get("retry-after"), now)


def granted_scopes(scope: str | None) -> frozenset[str] | None:
    """The scopes of a token answer's `scope` (space-separated, RFC 6749 3.3); None when
    the answer did not say."""
    return None if scope is None else frozenset(scope.split())


def scope_availability(
    resources: Sequence[str], scopes: Mapping[str, str], grant: OAuthGrant | None
) -> dict[str, Any]:
    """What the maker offers of each resource, under the scope that covers it (`scopes`:
    resource -> scope): available when the person granted that scope (the token answer's
    `scope`; every scope asked when the maker did not say), unavailable when they did not,
    or when the maker's API does not give the resource (no pull fails for either)."""
    granted = granted_scopes(grant.tokens.scope if grant and grant.tokens else None)
    found: dict[str, Any] = {}
    for resource in sorted(resources):
        scope = scopes.get(resource)
        allowed = scope is not None and (granted is None or scope in granted)
        required = [scope] if scope else []
        found[resource] = {
            "status": "available" if allowed else "unavailable",
            "scope_requirements": {
                "user_granted": {"required": required if allowed else [], "optional": []},
                "user_denied": {
                    "required": [] if allowed or not scope else required,
                    "optional": [],
                },
            },
        }
    return found


class MakerSession:
    """One fetch's access to a maker's data API as the connection's person: its token
    (refreshed when it expired, or when the maker refused it before its expiry), and GETs
    whose failures are the pull engine's codes."""

    def __init__(
        self,
        maker: OAuth2Maker,
        connection_id: UUID,
        now: datetime,
        *,
        texts: MakerTexts,
        timeout: float,
        max_wait: float = MAX_WAIT,
        sleep: Sleep = time_module.sleep,
        wait_of: WaitOf = retry_after_header,
    ) -> None:
        self.maker = maker
        self.connection_id = connection_id
        self.now = now
        self.texts = texts
        self.timeout = timeout
        self.max_wait = max_wait
        self.sleep = sleep
        self.wait_of = wait_of
        self.current: str | None = None
        self.scopes: frozenset[str] | None = None
        self.scopes_read = False

    def granted(self, scope: str | None) -> bool:
        """Whether the person granted `scope` (as the stored grant says; every scope when
        the maker's token answer did not say)."""
        if scope is None:
            return False
        if not self.scopes_read:  # once per fetch: the stored grant is sealed
            stored = self.maker.tokens.current(self.connection_id)
            self.scopes = granted_scopes(None if stored is None else stored.tokens.scope)
            self.scopes_read = True
        return self.scopes is None or scope in self.scopes

    def token(self) -> str:
        if self.current is None:
            self.current = self.maker.access_token(self.connection_id, self.now)
        return self.current

    def renew(self, refused: str) -> None:
        """The maker refused `refused` before its expiry (revoked, or replaced): the grant
        as stored now if another worker refreshed it meanwhile, else a refresh."""
        maker = self.maker
        stored = maker.tokens.current(self.connection_id)
        if stored is None:
            raise ProviderError(NON_RETRIABLE, self.texts.must_reconnect, TOKEN_REFRESH_FAILED)
        if stored.tokens.access_token != refused and not stored.tokens.expired(self.now):
            self.current = stored.tokens.access_token
            return
        key = (stored.connection_id, stored.version)
        with maker.failed_lock:
            failed = maker.failed_refreshes.get(key)
        if failed is not None:  # refused already: not asked of the maker again for this grant
            error, at = failed
            if not error.retriable or self.now < at + RETRY_REFRESH_AFTER:
                raise ProviderError(error.code, error.message, error.connection_error)
        try:
            self.current = maker.refresh(stored, self.now)
        except ProviderError as exc:
            with maker.failed_lock:
                maker.failed_refreshes[key] = (exc, self.now)
            raise

    def get(self, url: str, params: Mapping[str, str] | None = None) -> Any:
        """GET `url` of the data API as the connection's person; the JSON answer.
        Raises ProviderError."""
        response = self.send("GET", url, params)
        try:
            answer = response.json()
        except ValueError:
            raise self.texts.broken() from None
        # The maker's payload as received, before any mapping (`*.get_raw`): kept, sealed,
        # when the pull engine captures this fetch (domain/connections/raw_payloads.py).
        raw_payloads.record(request_of(url, params), answer)
        return answer

    def send(
        self,
        method: str,
        url: str,
        params: Mapping[str, str] | None = None,
        *,
        done: frozenset[int] = frozenset({200}),
    ) -> httpx.Response:
        """`method` `url` of the data API as the connection's person; the answer when its
        status is one of `done` (a maker's "accepted" or "asked already" too, e.g.
        Garmin's 202 and 409 of a backfill request). Other answers are ProviderErrors,
        as `get` documents."""
        texts = self.texts
        waits = 0
        renewed = False
        while True:
            token = self.token()
            try:
                response = self.maker.http.request(
                    method,
                    url,
                    # None, not {}: httpx would drop a query the URL carries (a ping's).
                    params=dict(params) if params else None,
                    timeout=self.timeout,
                    headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
                )
            except httpx.HTTPError:
                raise ProviderError("transport_failure", texts.unreachable) from None
            status = response.status_code
            if status in done:
                return response
            if status == 429:
                asked = self.wait_of(response, self.maker.clock())
                wait = None if asked is None else max(0.0, asked.total_seconds())
                if wait is not None and wait <= self.max_wait and waits < MAX_WAITS:
                    waits += 1
                    self.sleep(wait)
                    continue
                raise ProviderError(
                    "provider_rate_limit_exceeded", texts.rate_limited, retry_after=wait
                )
            if status >= 500:
                raise texts.broken()
            if status == 401 and not renewed:
                renewed = True
                self.renew(token)
                continue
            if status == 401:
                raise ProviderError(NON_RETRIABLE, texts.must_reconnect, TOKEN_REFRESH_FAILED)
            raise ProviderError(NON_RETRIABLE, texts.refused)


def cursor_pages(
    read: Callable[[str | None], tuple[list[Any], str | None]], texts: MakerTexts
) -> list[dict[str, Any]]:
    """Every document of a paged query: `read(cursor)` answers a page's documents and the
    next cursor (None on the last page; the first page is read with None), whatever the
    maker's cursor is (Oura's `next_token`, Fitbit's `pagination.next` URL). A cursor seen
    twice, or a chain longer than MAX_PAGES, is a broken answer, never a silent stop."""
    documents: list[dict[str, Any]] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        data, following = read(cursor)
        documents.extend(d for d in data if isinstance(d, dict))
        if not following:
            return documents
        if not isinstance(following, str) or following in seen:
            raise texts.broken()
        seen.add(following)
        cursor = following
    raise texts.broken()


def request_of(url: str, params: Mapping[str, str] | None) -> str:
    """What a GET asked, as kept with its answer: the path and query, without the host
    (the same request reads the same whatever the deployment's maker URL)."""
    parts = urlsplit(url)
    query = parts.query
    if params:
        query = "&".join(filter(None, [query, urlencode(sorted(params.items()))]))
    return f"{parts.path}?{query}" if query else parts.path


# -- mapping helpers ----------------------------------------------------------------------


def instant(text: Any) -> datetime | None:
    """An ISO 8601 instant; one without an offset is read as UTC."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def offset_seconds(moment: datetime | None) -> int | None:
    offset = None if moment is None else moment.utcoffset()
    return None if offset is None else int(offset.total_seconds())


def utc_iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def by_utc_day(
    samples: Iterable[tuple[datetime, dict[str, Any]]], start: date, end: date
) -> dict[date, list[dict[str, Any]]]:
    """Samples under the UTC day of their instant, in time order, days start..end only
    (as the demo devices store theirs)."""
    by_day: dict[date, list[tuple[datetime, dict[str, Any]]]] = {}
    for moment, sample in samples:
        day = moment.astimezone(UTC).date()
        if start <= day <= end:
            by_day.setdefault(day, []).append((moment, sample))
    return {
        day: [sample for _, sample in sorted(found, key=lambda pair: pair[0])]
        for day, found in sorted(by_day.items())
    }
