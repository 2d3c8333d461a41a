"""Revoking a maker's grant when its connection ends (issue 28, deregistration).

Our DELETE of a connection, and a user's deletion (which deregisters its connections),
also tell the maker to end the person's grant, where the maker offers that (Oura's
revocation endpoint, RFC 7009 elsewhere: the provider port's `revoke`). The deletion never
waits for the maker: the deregistration only marks the connection's tokens as owed a
revocation, in its own transaction (they stop being used at once: no pull reads them).
This job then asks the maker, and destroys the tokens once the maker said yes, or said
the grant is gone already, or after a bounded number of attempts while it was down
(`RETRY_DELAYS`): in every case the tokens go. The user's erasure destroys them in any
case, with every other trace of the user, whether the revocation is done or not (its
grace period outlasts the attempts by far).

Nothing personal is logged: a revocation given up names the maker only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol
from uuid import UUID

from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.provider_tokens import ProviderTokens
from healthledger.domain.connections.providers import AdapterFor, ProviderError
from healthledger.domain.ledger import Clock

log = logging.getLogger("healthledger.revocations")

# After a passing failure (the maker down, rate limiting), the next attempt comes after
# the delay of its number; after the last, the revocation is given up (about 15 hours).
RETRY_DELAYS = (
    timedelta(minutes=1),
    timedelta(minutes=5),
    timedelta(minutes=30),
    timedelta(hours=2),
    timedelta(hours=12),
)
# How long an attempt holds its grant against the other processes' workers.
ATTEMPT_LEASE = timedelta(minutes=5)
# Grants taken per run of the job.
BATCH = 50


@dataclass(frozen=True)
class OwedRevocation:
    """The tokens of an ended connection period, owed a revocation at the maker."""

    connection_id: UUID
    # Which period's tokens (a later period of the same connection has its own).
    stored_at: datetime
    team_id: UUID
    # The maker, the OAuth client and the tokens are sealed together with the user's key
    # (revision 0047): all three None when they cannot be opened any more (the key is
    # destroyed).
    provider: str | None
    client_id: str | None
    tokens: ProviderTokens | None
    # Attempts made so far.
    attempts: int


class OwedRevocations(Protocol):
    def claim_due(self, now: datetime, lease: timedelta, limit: int) -> list[OwedRevocation]:
        """Revocations due at `now`, each held for `lease` against other workers."""
        ...

    def destroy(self, owed: OwedRevocation) -> None:
        """Delete the period's tokens for good."""
        ...

    def retry_at(self, owed: OwedRevocation, attempts: int, due_at: datetime) -> None:
        """Record a failed attempt: the next one is due at `due_at`."""
        ...


def ends_a_grant(event: object) -> bool:
    """Whether a committed event owes a grant's revocation (wakes the job at once)."""
    return isinstance(event, Connection.Deregistered)


class GrantRevocations:
    def __init__(self, owed: OwedRevocations, adapter_for: AdapterFor, clock: Clock) -> None:
        self.owed = owed
        self.adapter_for = adapter_for
        self.clock = clock

    def revoke_due(self) -> int:
        """Attempt every revocation due; the number ended (revoked, gone, given up)."""
        now = self.clock()
        ended = 0
        for owed in self.owed.claim_due(now, ATTEMPT_LEASE, BATCH):
            if self._attempt(owed, now):
                self.owed.destroy(owed)
                ended += 1
        return ended

    def _attempt(self, owed: OwedRevocation, now: datetime) -> bool:
        """Whether the tokens can go now."""
        if owed.tokens is None or owed.provider is None or owed.client_id is None:
            return True  # erased meanwhile: nothing left to revoke with
        try:
            adapter = self.adapter_for(owed.provider, False)
        except LookupError:
            return True  # no adapter for the maker in this deployment any more
        try:
            adapter.revoke(owed.team_id, owed.client_id, owed.tokens)
        except ProviderError as exc:
            attempts = owed.attempts + 1
            if exc.retriable and attempts <= len(RETRY_DELAYS):
                self.owed.retry_at(owed, attempts, now + RETRY_DELAYS[attempts - 1])
                return False
            log.warning(
                "a grant at %s could not be revoked (%s, after %d attempt(s)); its tokens "
                "are destroyed",
                owed.provider,
                exc.code,
                attempts,
            )
        return True
