"""Tokens that open one thing for a while: a lab portal link, a webhook portal link, a
mobile SDK's sign-in. Each kind is a pydantic model of claims (ids and instants, nothing
personal), signed with the cursor codec (`cursors.py`: HMAC-SHA256, compared in constant
time) under a key derived from the cursor secret with the kind's own label, and in the
kind's own scope: no cursor is a token of any kind, and no token of one kind opens
another's door.

The cursor secret comes from the service's signing key, not the master key (which rotates
weekly), so that a token outlives rotations, in every process.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any, Generic, TypeVar

from healthledger.adapters.http.cursors import CursorCodec, InvalidCursor
from pydantic import BaseModel, ValidationError

# Query strings, headers and form fields longer than this are not a token of ours (a bound
# on the work a request does before it refuses).
MAX_TOKEN_LENGTH = 512

Claims = TypeVar("Claims", bound=BaseModel)


class SignedTokens(Generic[Claims]):
    def __init__(self, cursor_secret: bytes, label: bytes, scope: str, claims: type[Claims]):
        self.codec = CursorCodec(hmac.new(cursor_secret, label, hashlib.sha256).digest())
        self.scope = scope
        self.claims = claims

    def sign(self, claims: dict[str, Any]) -> str:
        """`claims` signed, as given (checked against the kind's model first: compact
        forms such as a UUID's hex keep a URL short)."""
        self.claims.model_validate(claims)
        return self.codec.encode(claims, self.scope)

    def open(self, token: str | None) -> Claims | None:
        """The claims a token of this kind carries; None for anything else (missing,
        malformed, forged, altered, a cursor, another kind's token)."""
        if not token or len(token) > MAX_TOKEN_LENGTH:
            return None
        try:
            return self.claims.model_validate(self.codec.decode(token, self.scope))
        except (InvalidCursor, ValidationError):
            return None
