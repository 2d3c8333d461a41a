"""The user lifecycle on eventsourcing's in-memory infrastructure (no database), wired as
the composition root wires it: what the unit tests of the lifecycle's use cases and of a
deletion's cascade build on. The one place that calls UserLifecycle's constructor in
tests/unit, so a change of its wiring is one change here."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate
from eventsourcing.persistence import StoredEvent
from eventsourcing.popo import POPOApplicationRecorder, POPOFactory
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.user_deletion import UserConnections
from healthledger.domain.context import CommandContext
from healthledger.domain.labs.orders import Order
from healthledger.domain.labs.user_deletion import UserOrders
from healthledger.domain.ledger import Ledger
from healthledger.domain.teams.client_user_id_secrets import ClientUserIdSecrets, sealed_new_secret
from healthledger.domain.teams.teams import Team
from healthledger.domain.users.client_user_ids import ClientUserIds
from healthledger.domain.users.deletion_cascade import DeletionTargets, UserDeletionCascade
from healthledger.domain.users.lifecycle import UserLifecycle
from healthledger.domain.users.user import ClientUserIdClaim, User
from healthledger.domain.webhooks.deliveries import WebhookDelivery
from healthledger.domain.webhooks.user_deletion import UserDeliveries

from tests.clocks import Clock
from tests.unit.vaults import DictVault

CTX = CommandContext(actor="team_api_key:k", request_id="req-delete")
SWEEP = CommandContext(actor="system:scheduler", request_id="req-sweep")
# Who creates the teams a test needs (the team directory, at the first run).
SETUP = CommandContext.system("test:setup")
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GRACE = timedelta(days=7)
TEAM = uuid.UUID("00000000-0000-4000-8000-000000000001")


class Saves(POPOApplicationRecorder):
    """eventsourcing's in-memory recorder, noting each save's events (one call each)."""

    def __init__(self) -> None:
        super().__init__()
        self.saves: list[list[StoredEvent]] = []

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        self.saves.append(list(stored_events))
        return super().insert_events(stored_events, **kwargs)

    def last_topics(self) -> list[str]:
        """The last save's events, as `<aggregate>.<event>` in the order they were stored."""
        return [e.topic.removeprefix("healthledger:").split(".v")[0] for e in self.saves[-1]]


class Factory(POPOFactory):
    def __init__(self, recorder: Saves) -> None:
        super().__init__(env={})
        self.recorder = recorder

    def application_recorder(self) -> Saves:
        return self.recorder


class World:
    """A lifecycle wired as the composition root wires it, with the read models' answers
    (what a deletion ends, the queued deliveries) kept by the test; a vault in memory and
    a clock at T0 that the test moves."""

    def __init__(self) -> None:
        self.recorder = Saves()
        # The ledger takes an InfrastructureFactory of its default recorder type; eventsourcing's
        # POPOFactory is generic in its own (POPOTrackingRecorder), and the parameter invariant.
        self.ledger = Ledger(Factory(self.recorder))  # type: ignore[arg-type]
        self.clock = Clock(T0)
        self.vault = DictVault()
        self.targets: dict[str, list[UUID]] = {}
        self.live: dict[UUID, list[UUID]] = {}
        self.queued: dict[UUID, list[UUID]] = {}
        self.cascade: list[UserDeletionCascade] = [
            UserConnections(self.ledger, lambda user_id: self.live.get(user_id, [])),
            UserOrders(self.ledger),
            UserDeliveries(self.ledger, self.queued_deliveries),
        ]
        self.users = UserLifecycle(
            self.ledger,
            self.vault,
            self.clock,
            GRACE,
            ClientUserIds(self.ledger, ClientUserIdSecrets(self.ledger, self.vault, self.clock)),
            erasure_inventory=lambda user_ids: {},
            cascade=self.cascade,
            deletion_targets=self.deletion_targets,
        )

    def team(self, *, legacy_claims: bool = False) -> UUID:
        """A team in the ledger with its client_user_id secret (sealed in the vault), as the
        team directory creates one; `legacy_claims`: a team created before digests, whose
        claims may still be found by the clear value."""
        team = Team.create(SETUP, self.clock(), uuid.uuid4(), "Team", "eu")
        sealed = sealed_new_secret(self.vault, team.id)
        team.create_client_user_id_secret(SETUP, self.clock(), sealed, legacy_claims=legacy_claims)
        self.save(team)
        return team.id

    def deletion_targets(self, user_id: UUID) -> DeletionTargets:
        return self.targets

    def queued_deliveries(self, user_ids: Sequence[UUID]) -> Mapping[UUID, Sequence[UUID]]:
        return {uid: self.queued[uid] for uid in user_ids if uid in self.queued}

    def save(self, *aggregates: Aggregate) -> None:
        self.ledger.save(*aggregates)

    def user(self) -> User:
        user_id = uuid.uuid4()
        claim = ClientUserIdClaim.start(CTX, T0, TEAM, f"digest-{user_id}", user_id)
        user = User.register(
            CTX,
            T0,
            user_id=user_id,
            team_id=TEAM,
            sealed_client_user_id="sealed:client-1",
            claim_id=claim.id,
            sealed_fallback_time_zone=None,
            sealed_birth_date=None,
            ingestion_start=None,
            ingestion_end=None,
        )
        self.save(claim, user)
        return user

    def connection(self, user: User, provider: str, *, live: bool = True) -> Connection:
        connection = Connection.connect_new(
            CTX,
            T0,
            id=uuid.uuid4(),
            user_id=user.id,
            team_id=TEAM,
            provider=provider,
            sealed_external_user_id=None,
            resource_availability={},
            demo=True,
        )
        if not live:
            connection.deregister(CTX, T0, "by the team")
        self.save(connection)
        return connection

    def order(self, user: User, *, open_: bool = True) -> Order:
        order = Order.place(
            CTX,
            T0,
            order_id=uuid.uuid4(),
            user_id=user.id,
            team_id=TEAM,
            environment="sandbox",
            lab_id=1,
            collection_method="walk_in_test",
            sealed_lab_test="sealed-lab-test",
            sealed_patient_details="sealed:details",
            sealed_patient_address="sealed:address",
            sealed_request_digest=None,
            status="received.walk_in_test.ordered",
            next_step_at=None,
        )
        if not open_:
            order.cancel(CTX, T0, "team_request")
        self.save(order)
        return order

    def delivery(self, user: User, n: int, *, pending: bool = True) -> WebhookDelivery:
        delivery = WebhookDelivery.create(
            CTX,
            T0,
            endpoint_id=uuid.uuid4(),
            team_id=TEAM,
            user_id=user.id,
            event_type="user.deleted",
            source_id=user.id,
            source_version=n,
            source_timestamp=T0,
            day=None,
            log_position=n,
        )
        if not pending:
            delivery.drop(CTX, T0, "endpoint disabled")
        self.save(delivery)
        return delivery

    def find(self, aggregate_id: UUID) -> Any:
        return self.ledger.find(aggregate_id)
