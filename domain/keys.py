"""Key text, for team API keys, management keys and link tokens alike.

Key text is shown once, at creation; only its SHA-256 is stored (the secret part has 256
bits of entropy, so a fast hash is enough) and comparisons are constant-time. The kind
and the key id are readable from the text, so a key of the wrong kind can be named as
such and a key is found by id, never by scanning hashes.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from uuid import UUID, uuid4

TEAM_API_KEY = "hlk"
MANAGEMENT_KEY = "hlm"
# Link tokens have the same shape but are no API key: `parse_key` does not accept them,
# so one sent as a key is simply an invalid key, never mistaken for a kind of key.
LINK_TOKEN = "hll"
# A mobile SDK's one-time code (`link.code_create`), exchanged for a sign-in token: no key
# either, for the same reason.
LINK_CODE = "hlc"

_KEY = re.compile(r"^(hlk|hlm)_([0-9a-f]{32})_[A-Za-z0-9_-]{43}$")
_LINK_TOKEN = re.compile(r"^hll_([0-9a-f]{32})_[A-Za-z0-9_-]{43}$")
_LINK_CODE = re.compile(r"^hlc_([0-9a-f]{32})_[A-Za-z0-9_-]{43}$")


def hash_key(plain: str) -> str:
    return hashlib.sha256(plain.encode()).hexdigest()


def key_matches(plain: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_key(plain), stored_hash)


def new_key(kind: str) -> tuple[UUID, str]:
    """A fresh key id and the plain key text of that kind that embeds it."""
    key_id = uuid4()
    return key_id, f"{kind}_{key_id.hex}_{secrets.token_urlsafe(32)}"


def parse_key(plain: str) -> tuple[str, UUID] | None:
    """(kind, key id) of a well-formed key, or None for anything else."""
    match = _KEY.match(plain)
    return (match.group(1), UUID(match.group(2))) if match else None


def team_api_key_id(plain: str) -> UUID | None:
    parsed = parse_key(plain)
    return parsed[1] if parsed and parsed[0] == TEAM_API_KEY else None


def link_token_id(plain: str) -> UUID | None:
    """The token id of a well-formed link token, or None for anything else."""
    match = _LINK_TOKEN.match(plain)
    return UUID(match.group(1)) if match else None


def link_code_id(plain: str) -> UUID | None:
    """The code id of a well-formed link code, or None for anything else."""
    match = _LINK_CODE.match(plain)
    return UUID(match.group(1)) if match else None
