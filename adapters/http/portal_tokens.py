"""The portal URL's token: a `PortalPass` as the claims of a `SignedTokens` kind of its own
(signed_tokens.py), so that no paging cursor nor other token is ever a portal token, nor
the other way round. The payload holds ids, the context and two instants, nothing
personal.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

from healthledger.adapters.http.signed_tokens import SignedTokens
from healthledger.domain.labs.portal import PORTAL_CONTEXTS, PortalPass
from pydantic import BaseModel, ConfigDict, Field

_CONTEXT_CODES = {context: context[0] for context in PORTAL_CONTEXTS}
_CONTEXTS = {code: context for context, code in _CONTEXT_CODES.items()}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_LAST_SECOND = 253_402_300_799  # 9999-12-31T23:59:59Z: datetime's last second


class _Claims(BaseModel):
    """The signed payload, short keys to keep the URL short."""

    model_config = ConfigDict(extra="forbid")
    t: UUID  # team
    u: UUID  # user
    c: str = Field(pattern="^[a-z]$")  # context, by its first letter
    i: int = Field(ge=0, le=_LAST_SECOND * 1_000_000)  # issued at, µs since the epoch
    e: int = Field(ge=0, le=_LAST_SECOND)  # expires at, seconds since the epoch


class PortalTokens:
    def __init__(self, cursor_secret: bytes) -> None:
        # The label and scope of the tokens handed out before signed_tokens.py: they open.
        self.tokens = SignedTokens(
            cursor_secret, b"healthledger portal tokens v1", "portal-v1", _Claims
        )

    def sign(self, grant: PortalPass) -> str:
        return self.tokens.sign(
            {
                "t": grant.team_id.hex,
                "u": grant.user_id.hex,
                "c": _CONTEXT_CODES[grant.context],
                "i": (grant.issued_at - _EPOCH) // _MICROSECOND,
                "e": int(grant.expires_at.timestamp()),
            }
        )

    def open(self, token: str | None) -> PortalPass | None:
        """The pass a token of ours carries; None for anything else (missing, malformed,
        forged, altered, a cursor)."""
        claims = self.tokens.open(token)
        context = None if claims is None else _CONTEXTS.get(claims.c)
        if claims is None or context is None:
            return None
        return PortalPass(
            team_id=claims.t,
            user_id=claims.u,
            context=context,
            issued_at=_EPOCH + claims.i * _MICROSECOND,
            expires_at=datetime.fromtimestamp(claims.e, UTC),
        )
