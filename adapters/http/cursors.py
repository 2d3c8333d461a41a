"""Opaque, tamper-evident paging cursors: a signed payload. A forged, altered or
foreign cursor (another listing's filters) is refused with a 400, never a 500."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

from healthledger.domain.errors import LedgerError


class InvalidCursor(LedgerError):
    def __init__(self) -> None:
        super().__init__("next_cursor is not a cursor this listing issued.")


class CursorCodec:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def encode(self, payload: dict[str, Any], scope: str) -> str:
        body = base64.urlsafe_b64encode(
            json.dumps({"s": scope, "p": payload}, separators=(",", ":")).encode()
        ).rstrip(b"=")
        return f"{body.decode()}.{self._sign(body)}"

    def decode(self, token: str, scope: str) -> dict[str, Any]:
        """The payload of a cursor issued for `scope` (the listing and its filters)."""
        body, _, signature = token.partition(".")
        if not body or not body.isascii() or not signature.isascii():
            raise InvalidCursor()
        if not hmac.compare_digest(signature.encode(), self._sign(body.encode()).encode()):
            raise InvalidCursor()
        try:
            data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except ValueError:
            raise InvalidCursor() from None
        if not isinstance(data, dict) or data.get("s") != scope:
            raise InvalidCursor()
        return data["p"]

    def _sign(self, body: bytes) -> str:
        digest = hmac.new(self._secret, body, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest[:18]).decode()
