"""The makers' webhooks in: the port a maker's verifier implements (issue 28).

A maker (Oura, Fitbit, Withings...) calls our public route
`/makers/{provider}/webhook` when a person's data changed or the person revoked our
access. The route hands what it received to the maker's `MakerWebhooks` and gets back
`MakerNotice`s: who (the maker's account id), which of our resources, which days. It
records each notice once and wakes the pull worker, which syncs just that window (the
intake: `domain/connections/notice_intake.py`). Nothing in this module calls a maker.

How to implement a maker's verifier (one module per maker, beside its reader, e.g.
`adapters/providers/oura_webhooks.py`):

- `provider` is our slug (`oura`, `fitbit`, `withings`): the route's `{provider}`.
- `challenge` answers the maker's subscription verification handshake: Oura's GET with
  `verification_token` and `challenge` (answer the challenge when the token is ours),
  Fitbit's GET with `?verify=` (204 when the code is ours, else 404), Withings' HEAD
  probe (200). Return None for a request that is no handshake of yours (the route
  answers 404). It must not call the maker, nor store anything.
- `notices` checks the maker's signature over the raw body FIRST and raises
  `NoticeRefused` when it is missing, wrong or too old (the route answers 401 and stores
  nothing); then parses the body into notices. A body that is signed but names nothing
  we read (an unknown data type) is an empty list, not an error: the maker must not
  retry it. A signed body that cannot be parsed raises `NoticeMalformed` (400).
- Map the maker's data types to our resource names (the ones the reader serves); leave
  `resources` empty when the notice concerns everything the connection reads.
- `start`..`end` are the days named (inclusive), in the person's local days as the
  reader stores them; when the maker names an instant, the day of it (and widen by a
  day if the reader stores samples under UTC days). When the maker names no days, use
  the day of the notice.
- `key` de-duplicates: the maker's notification id if it sends one; otherwise a digest
  (sha256 hex) of the fields that make the notice what it is (account, data type,
  object id, window, operation). A maker sending the same notice twice gives the same
  key; two different changes give two keys.
- `deauthorized` is True for the maker's "the person revoked access" notice (the
  connection ends on our side; no sync).
- `delivery` is for a maker that delivers the records themselves (Garmin's pushes, and
  the callback URLs of its pings): what the reader needs to store them, in the maker's
  own shape (the reader's `DeliveredByMaker.delivered` reads it). The maker may not send
  it again (Garmin does not resend a push it got a 200 for): the intake seals it with
  the person's key into the receipt before the answer, and the worker stores it. None
  for a maker that only says what changed.
- Never log, or put in an exception's message, anything from the body: the account id
  is personal data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Protocol


@dataclass(frozen=True)
class MakerNotice:
    """One thing a maker told us about one person's account."""

    # Our provider slug (`oura`), as the connection records it.
    provider: str
    # The maker's id of the person: the connection's external user id. Personal data:
    # kept out of reprs (and so of logs and tracebacks).
    account_id: str = field(repr=False)
    # Our resource names the notice concerns; empty: every resource of the connection.
    resources: frozenset[str]
    # The days named, inclusive.
    start: date
    end: date
    # De-duplication key, unique per provider: the maker's notification id, or a digest.
    key: str
    # The maker says the person revoked our access: the connection ends.
    deauthorized: bool = False
    # What the maker delivered with the notice, for its reader (JSON-serialisable);
    # personal: sealed with the person's key when recorded, kept out of reprs.
    delivery: Any = field(default=None, repr=False)


@dataclass(frozen=True)
class ChallengeAnswer:
    """What the route answers a maker's verification handshake."""

    status: int = 200
    body: bytes = b""
    media_type: str = "text/plain"


class NoticeRefused(Exception):
    """The request is not the maker's: signature missing, wrong or outside its time
    window. The route answers 401 and stores nothing. The message is fixed text."""

    def __init__(self, message: str = "The notification's signature is not valid.") -> None:
        super().__init__(message)
        self.message = message


class NoticeMalformed(Exception):
    """Signed by the maker but not a notification we can parse: a 400, nothing stored.
    The message is fixed text (never the body)."""

    def __init__(self, message: str = "The notification could not be read.") -> None:
        super().__init__(message)
        self.message = message


class MakerWebhooks(Protocol):
    """A maker's webhook scheme: its handshake and its signed notifications."""

    # Our slug of the maker: the `{provider}` of `/makers/{provider}/webhook`.
    provider: str

    def challenge(
        self, method: str, query: Mapping[str, str], headers: Mapping[str, str]
    ) -> ChallengeAnswer | None:
        """Answer a subscription verification request (a GET or HEAD; `headers` keys
        lower-cased), or None when it is no handshake of this maker's."""
        ...

    def notices(self, headers: Mapping[str, str], body: bytes, now: datetime) -> list[MakerNotice]:
        """Verify the POSTed notification (`headers` keys lower-cased, `body` the raw
        bytes, as signed; `now` for a signature's time window) and parse it. Raises
        NoticeRefused (bad signature) or NoticeMalformed (signed but unreadable)."""
        ...
