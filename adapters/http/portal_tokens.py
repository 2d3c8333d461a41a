"""The portal URL's token: a `PortalPass` signed with the service's cursor codec
(`cursors.py`: an HMAC-SHA256 over the payload, compared in constant time) under a key of
its own and a scope of its own, so that no paging cursor is ever a portal token, nor the
other way round.

The payload holds ids, the context and two instants, nothing personal. The key is derived
from the cursor secret, which comes from the service's signing key (not the master key,
which rotates weekly: a 28-day link must outlive rotations, in every process).
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime, timedelta
from uuid import UUID

from healthledger.adapters.http.cursors import CursorCodec, InvalidCursor
from healthledger.domain.labs.portal import PORTAL_CONTEXTS, PortalPass
from pydantic import BaseModel, ConfigDict, Field, ValidationError

_SCOPE = "portal-v1"
_CONTEXT_CODES = {context: context[0] for context in PORTAL_CONTEXTS}
_CONTEXTS = {code: context for context, code in _CONTEXT_CODES.items()}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_LAST_SECOND = 253_402_300_799  # 9999-12-31T23:59:59Z: datetime's last second
# Query strings and form fields longer than this are not a token of ours (a bound on the
# work a page view does before it refuses).
MAX_TOKEN_LENGTH = 512


class _Claims(BaseModel):
    """The signed payload, short keys to keep the URL short."""

    model_config = ConfigDict(extra="forbid")
    t: UUID  # team
    u: UUID  # user
    c: str = Field(pattern="^[a-z]$")  # context, by its first letter
    i: int = Field(ge=0, le=_LAST_SECOND * 1_000_000)  # issued at, µs since the epoch
    e: int = Field(ge=0, le=_LAST_SECOND)  # expires at, seconds since the epoch


def portal_secret(cursor_secret: bytes) -> bytes:
    """A key for portal tokens only, derived from the cursor secret."""
    return hmac.new(cursor_secret, b"healthledger portal tokens v1", hashlib.sha256).digest()


class PortalTokens:
    def __init__(self, cursor_secret: bytes) -> None:
        self.codec = CursorCodec(portal_secret(cursor_secret))

    def sign(self, grant: PortalPass) -> str:
        claims = {
            "t": grant.team_id.hex,
            "u": grant.user_id.hex,
            "c": _CONTEXT_CODES[grant.context],
            "i": (grant.issued_at - _EPOCH) // _MICROSECOND,
            "e": int(grant.expires_at.timestamp()),
        }
        return self.codec.encode(claims, _SCOPE)

    def open(self, token: str | None) -> PortalPass | None:
        """The pass a token of ours carries; None for anything else (missing, malformed,
        forged, altered, a cursor)."""
        if not token or len(token) > MAX_TOKEN_LENGTH:
            return None
        try:
            claims = _Claims.model_validate(self.codec.decode(token, _SCOPE))
        except (InvalidCursor, ValidationError):
            return None
        context = _CONTEXTS.get(claims.c)
        if context is None:
            return None
        return PortalPass(
            team_id=claims.t,
            user_id=claims.u,
            context=context,
            issued_at=_EPOCH + claims.i * _MICROSECOND,
            expires_at=datetime.fromtimestamp(claims.e, UTC),
        )
