"""Domain errors. The HTTP adapter maps each to a status; none of them carries personal data."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID


class LedgerError(Exception):
    """Base class: `message` is safe to show to the caller."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UserNotFound(LedgerError):
    def __init__(self) -> None:
        super().__init__("User not found.")


class UserScheduledForDeletion(LedgerError):
    def __init__(self) -> None:
        super().__init__(
            "User is scheduled for deletion: it can be restored with undo_delete "
            "until its grace period ends."
        )


class GracePeriodEnded(LedgerError):
    def __init__(self) -> None:
        super().__init__("User not found: its deletion grace period has ended.")


class UserNotDeleted(LedgerError):
    def __init__(self) -> None:
        super().__init__("User is not scheduled for deletion: there is nothing to undo.")


class ClientUserIdTaken(LedgerError):
    """Create with a client_user_id that a live user of the team already holds."""

    def __init__(self, user_id: UUID, created_on: datetime) -> None:
        super().__init__("Client user id already exists.")
        self.user_id = user_id
        self.created_on = created_on


class ClientUserIdInUse(LedgerError):
    """A change (patch, undo) would take a client_user_id another live user holds."""

    def __init__(self) -> None:
        super().__init__("Client user id is held by another live user of this team.")


class ConcurrentChange(LedgerError):
    def __init__(self) -> None:
        super().__init__("The resource was changed by another request; retry with fresh data.")


class NothingToUpdate(LedgerError):
    def __init__(self) -> None:
        super().__init__("The patch is empty: send at least one field to change.")


class InvalidRequest(LedgerError):
    """A rule that a request breaks, found after the request shape was valid."""

    def __init__(self, message: str, field: str, location: str = "body") -> None:
        super().__init__(message)
        self.field = field
        self.location = location  # body, path or query: where the offending value was


class DemographicsNotFound(LedgerError):
    def __init__(self) -> None:
        super().__init__("No demographics recorded for this user.")


class SummaryNotFound(LedgerError):
    """No stored summary answers a read that names one (the newest profile)."""


class TeamNotFound(LedgerError):
    def __init__(self) -> None:
        super().__init__("Team not found.")


class OrganizationNotFound(LedgerError):
    def __init__(self) -> None:
        super().__init__("Organization not found.")


class KeyNotFound(LedgerError):
    def __init__(self) -> None:
        super().__init__("Key not found.")


class CredentialsNotFound(LedgerError):
    def __init__(self) -> None:
        super().__init__("No custom credentials for this provider.")


class CredentialsNotPrepared(LedgerError):
    def __init__(self) -> None:
        super().__init__("Prepare the custom credentials for this provider before setting them.")


class WebhookEndpointNotFound(LedgerError):
    def __init__(self) -> None:
        super().__init__("Webhook endpoint not found.")


class EventDestinationNotFound(LedgerError):
    def __init__(self) -> None:
        super().__init__("Event destination not found.")


class ErasureNotVerified(Exception):
    """The transaction recording a user's erasure found a place it empties holding other
    rows than the erasure counted, or rows left after it: it rolls back, nothing of the
    erasure is recorded, and the sweep tries again. Not a LedgerError: no caller of an
    API meets it. Names the place and the counts, never a value."""

    def __init__(self, user_id: UUID, place: str, expected: int, found: int, when: str) -> None:
        super().__init__(
            f"erasure of user {user_id} not verified: {place} held {found} row(s) {when}, "
            f"{expected} expected"
        )
        self.user_id = user_id
        self.place = place
        self.expected = expected
        self.found = found


class FeatureNotEnabled(Exception):
    """A closed-beta feature the team has not had switched on. Not a `LedgerError`: its
    answer names the feature in a body of its own (adapters/http/errors.py)."""

    def __init__(self, feature: str) -> None:
        self.feature = feature


class TooSoon(LedgerError):
    """Asked again before a rate limit allows it: retry after `retry_after` seconds."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after
