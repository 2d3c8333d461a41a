"""The mobile SDKs' sign-in token (`user.get_user_sign_in_token` of the official clients;
issue 34): a `SignedTokens` kind (signed_tokens.py) for one user of one team and
environment, valid for an hour. The customer's backend asks for it with its team key and
hands it to the app on the person's phone, which uploads that person's data with it (the
Apple Health import) and nothing else: no team key ever reaches a phone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from uuid import UUID

from healthledger.adapters.http.signed_tokens import SignedTokens
from pydantic import BaseModel, ConfigDict, Field

# Long enough to sign in and upload an export, short enough that a token copied off a
# phone is soon worth nothing; the app asks its backend for a new one each session.
SIGN_IN_LIFETIME = timedelta(hours=1)

_ENVIRONMENT_CODES = {"sandbox": "s", "production": "p"}
_ENVIRONMENTS = {code: env for env, code in _ENVIRONMENT_CODES.items()}
_LAST_SECOND = 253_402_300_799  # 9999-12-31T23:59:59Z


@dataclass(frozen=True)
class SignIn:
    team_id: UUID
    user_id: UUID
    environment: str
    expires_at: datetime


class _Claims(BaseModel):
    model_config = ConfigDict(extra="forbid")
    t: UUID  # team
    u: UUID  # user
    n: str = Field(pattern="^[sp]$")  # environment, by its first letter
    e: int = Field(ge=0, le=_LAST_SECOND)  # expires at, seconds since the epoch


class SignInTokens:
    def __init__(self, cursor_secret: bytes) -> None:
        self.tokens = SignedTokens(
            cursor_secret, b"healthledger sdk sign-in v1", "sdk-sign-in-v1", _Claims
        )

    def issue(self, team_id: UUID, user_id: UUID, environment: str, now: datetime) -> SignIn:
        return SignIn(
            team_id, user_id, environment, (now + SIGN_IN_LIFETIME).replace(microsecond=0)
        )

    def sign(self, grant: SignIn) -> str:
        return self.tokens.sign(
            {
                "t": grant.team_id.hex,
                "u": grant.user_id.hex,
                "n": _ENVIRONMENT_CODES[grant.environment],
                "e": int(grant.expires_at.timestamp()),
            }
        )

    def open(self, token: str | None) -> SignIn | None:
        """The sign-in a token of ours carries (expired or not); None for anything else."""
        claims = self.tokens.open(token)
        if claims is None:
            return None
        return SignIn(
            claims.t, claims.u, _ENVIRONMENTS[claims.n], datetime.fromtimestamp(claims.e, UTC)
        )
