"""Webhook endpoints: where a team's events of one environment are delivered, and the
secret their deliveries are signed with.

created -> updated / disabled / enabled / secret rotated ... -> deleted. The signing secret
is held only sealed (the team's data key; see docs/adr/0007-webhook-secrets.md). Rotating
it keeps the previous secret in force beside the new one for `ROTATION_OVERLAP`, so a
receiver can switch over without losing a delivery.
"""

from __future__ import annotations

import base64
import secrets
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from eventsourcing.domain import Aggregate
from healthledger.domain.audited import Audited
from healthledger.domain.context import CommandContext

SECRET_PREFIX = "whsec_"
# Standard Webhooks asks for 24 to 64 bytes; 32 is 256 bits, the HMAC-SHA256 key size.
SECRET_BYTES = 32
ROTATION_OVERLAP = timedelta(hours=24)

# Why an endpoint was disabled (or enabled again). The dispatcher disables an endpoint
# that answers 410 Gone or has failed for 5 days, as the system actor.
BY_CALLER = "management_request"
ENDPOINT_GONE = "endpoint_gone"
FAILING_TOO_LONG = "failing_for_5_days"


def new_signing_secret() -> str:
    """`whsec_` + base64 of fresh random bytes (the Standard Webhooks secret form)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


class WebhookEndpoint(Audited):
    TOPIC = "healthledger:WebhookEndpoint"
    USER_STREAM = None

    class Event(Audited.Event):
        pass

    class Created(Event, Aggregate.Created):
        TOPIC = "healthledger:WebhookEndpoint.Created.v1"
        # A secret, not personal data: listed so the audit trail never prints it.
        PERSONAL_FIELDS = ("sealed_secret",)
        team_id: UUID
        environment: str
        url: str
        description: str
        filter_types: list[str]
        disabled: bool
        sealed_secret: str

    class Updated(Event):
        """Only the fields that changed: url, description, filter_types."""

        TOPIC = "healthledger:WebhookEndpoint.Updated.v1"
        changes: dict[str, Any]

        def apply(self, endpoint: WebhookEndpoint) -> None:
            for name, value in self.changes.items():
                setattr(endpoint, name, tuple(value) if name == "filter_types" else value)

    class Disabled(Event):
        TOPIC = "healthledger:WebhookEndpoint.Disabled.v1"
        reason: str

        def apply(self, endpoint: WebhookEndpoint) -> None:
            endpoint.disabled_reason = self.reason

    class Enabled(Event):
        TOPIC = "healthledger:WebhookEndpoint.Enabled.v1"
        reason: str

        def apply(self, endpoint: WebhookEndpoint) -> None:
            endpoint.disabled_reason = None

    class SecretRotated(Event):
        """The new secret; the one it replaces stays in force until `previous_expires_at`."""

        TOPIC = "healthledger:WebhookEndpoint.SecretRotated.v1"
        PERSONAL_FIELDS = ("sealed_secret",)
        sealed_secret: str
        previous_expires_at: datetime

        def apply(self, endpoint: WebhookEndpoint) -> None:
            endpoint.sealed_previous_secret = endpoint.sealed_secret
            endpoint.previous_secret_expires_at = self.previous_expires_at
            endpoint.sealed_secret = self.sealed_secret

    class Deleted(Event):
        TOPIC = "healthledger:WebhookEndpoint.Deleted.v1"

        def apply(self, endpoint: WebhookEndpoint) -> None:
            endpoint.deleted_at = self.timestamp

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        team_id: UUID,
        environment: str,
        url: str,
        description: str,
        filter_types: list[str],
        disabled: bool,
        sealed_secret: str,
    ) -> None:
        """From the Created event's fields (eventsourcing passes them all), at `create`
        and on every replay."""
        self.team_id: UUID = team_id
        self.environment: str = environment
        self.url: str = url
        self.description: str = description
        # The event types delivered (empty: every type).
        self.filter_types: tuple[str, ...] = tuple(filter_types)
        # Why deliveries are stopped (BY_CALLER, ENDPOINT_GONE...), or None.
        self.disabled_reason: str | None = BY_CALLER if disabled else None
        self.sealed_secret: str = sealed_secret
        # The secret a rotation replaced, in force until previous_secret_expires_at.
        self.sealed_previous_secret: str | None = None
        self.previous_secret_expires_at: datetime | None = None
        self.deleted_at: datetime | None = None

    @classmethod
    def create(
        cls,
        ctx: CommandContext,
        now: datetime,
        *,
        team_id: UUID,
        environment: str,
        url: str,
        description: str,
        filter_types: list[str],
        disabled: bool,
        sealed_secret: str,
    ) -> WebhookEndpoint:
        return cls.new(
            ctx,
            now,
            id=uuid4(),
            team_id=team_id,
            environment=environment,
            url=url,
            description=description,
            filter_types=filter_types,
            disabled=disabled,
            sealed_secret=sealed_secret,
        )

    @property
    def disabled(self) -> bool:
        return self.disabled_reason is not None

    def update(self, ctx: CommandContext, now: datetime, **fields: Any) -> None:
        """Change url, description or filter_types; values equal to the current ones are
        no change, so a repeated PATCH records nothing."""
        changes: dict[str, Any] = {}
        for name, value in fields.items():
            if name not in ("url", "description", "filter_types"):
                raise ValueError(f"{name} is not an updatable field")
            current = getattr(self, name)
            if (list(current) if name == "filter_types" else current) != value:
                changes[name] = value
        if changes:
            self.record(ctx, now, self.Updated, changes=changes)

    def disable(self, ctx: CommandContext, now: datetime, reason: str) -> None:
        """Stop deliveries (by a caller, or by the dispatcher as the system actor)."""
        if not self.disabled:
            self.record(ctx, now, self.Disabled, reason=reason)

    def enable(self, ctx: CommandContext, now: datetime, reason: str = BY_CALLER) -> None:
        if self.disabled:
            self.record(ctx, now, self.Enabled, reason=reason)

    def rotate_secret(self, ctx: CommandContext, now: datetime, sealed_secret: str) -> None:
        self.record(
            ctx,
            now,
            self.SecretRotated,
            sealed_secret=sealed_secret,
            previous_expires_at=now + ROTATION_OVERLAP,
        )

    def delete(self, ctx: CommandContext, now: datetime) -> None:
        if self.deleted_at is None:
            self.record(ctx, now, self.Deleted)

    def sealed_secrets_in_force(self, now: datetime) -> list[str]:
        """The current secret, then the previous one while its overlap lasts."""
        in_force = [self.sealed_secret]
        expires = self.previous_secret_expires_at
        if self.sealed_previous_secret is not None and expires is not None and now < expires:
            in_force.append(self.sealed_previous_secret)
        return in_force
