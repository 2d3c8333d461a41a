"""The stored bytes of every aggregate's Created event, and of the aggregate's attribute
dict (what a snapshot stores), held to what the code wrote before the aggregates were
founded through eventsourcing's public constructor: events already stored must still
load, and new ones be stored as before. Each is replayed from its stored form too.

The golden values were written by the previous main (with fixed ids and timestamps) and
eventsourcing's stock mapper and JSON transcoder (`stored_form`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, TypedDict, cast
from uuid import UUID

import pytest
from eventsourcing.domain import Aggregate, Snapshot
from eventsourcing.persistence import StoredEvent
from healthledger.adapters.persistence.eventstore.sealed_facts import FactSealingMapper
from healthledger.domain.audited import Audited
from healthledger.domain.connections.bulk_operations import BulkOperation, BulkOperationIndex
from healthledger.domain.connections.bulk_operations import index_id as bulk_index_id
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.credential_links import CredentialSignIn
from healthledger.domain.connections.link_codes import LinkCode
from healthledger.domain.connections.link_tokens import LinkToken
from healthledger.domain.connections.notice_intake import MAKER_ACTOR, NoticeReceipt
from healthledger.domain.connections.oauth_flows import OAuthFlow, binding_digest
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.connections.stream_ids import legacy_connection_id, legacy_feed_id
from healthledger.domain.context import CommandContext
from healthledger.domain.integrity import IntegrityCheck, IntegrityFindings
from healthledger.domain.keys import (
    LINK_CODE,
    LINK_TOKEN,
    MANAGEMENT_KEY,
    TEAM_API_KEY,
    hash_key,
    link_code_id,
    link_token_id,
    team_api_key_id,
)
from healthledger.domain.labs.lab_tests import LabTest
from healthledger.domain.labs.orders import Order, OrderedTest
from healthledger.domain.mirror.users import Envelope, MirroredUser
from healthledger.domain.personal_data import ERASED_PLACEHOLDER
from healthledger.domain.redaction import SEALED, RedactedRecord, Redaction
from healthledger.domain.teams.custom_credentials import CustomCredentials
from healthledger.domain.teams.management_keys import ManagementKey
from healthledger.domain.teams.teams import Organization, Team, TeamApiKey
from healthledger.domain.users.user import ClientUserIdClaim, User
from healthledger.domain.webhooks.deliveries import WebhookDelivery
from healthledger.domain.webhooks.deprecation_calendar import DeprecationCalendar
from healthledger.domain.webhooks.endpoints import WebhookEndpoint

from tests.recorded import loaded
from tests.unit.stored_form import MAPPER, stock_transcoder, stored
from tests.unit.vaults import DictVault

T = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
CTX = CommandContext(
    actor="team_api_key:00000000-0000-4000-8000-0000000000aa", request_id="req-golden"
)


def fixed_id(n: int) -> UUID:
    return UUID(f"11111111-2222-4333-8444-{n:012x}")


TEAM, USER, ORG = fixed_id(1), fixed_id(2), fixed_id(3)
# The team's digest of "client-1" under the secret bytes(range(32)) (checked against
# openssl in test_users_domain.py), and the claim it names.
DIGEST = "68dd798ddd1178d18a2a954692738f4fb10cec83baf5f4094d01cf0f31a0fbcc"
CLAIM = ClientUserIdClaim.id_for_digest(DIGEST)
# Where a claim of "client-1" was before digests (and stays, if it exists).
LEGACY_CLAIM = UUID("5c4d5776-2bd9-5b26-a71f-754219d9de17")
ENDPOINT, CONNECTION, SOURCE = fixed_id(5), fixed_id(6), fixed_id(7)


class Founded(TypedDict):
    """What every Created event of an audited aggregate carries: when, who, which request."""

    timestamp: datetime
    actor: str
    request_id: str


FOUNDED: Founded = {"timestamp": T, "actor": CTX.actor, "request_id": CTX.request_id}
# An OAuth flow's digest of its browser's binding secret (any 64 hex digits).
BINDING_DIGEST = "0f" * 32
INTEGRITY_PROBLEM = (
    "read models: a row of pending_erasures made by the log is missing from the live table "
    "(1 row(s) differ in 1 table(s))"
)


def user(**fields: object) -> User:
    values: dict[str, object] = {
        "user_id": USER,
        "team_id": TEAM,
        "sealed_client_user_id": "v1.sealed-client",
        "claim_id": CLAIM,
        "sealed_fallback_time_zone": "v1.sealed-zone",
        "sealed_birth_date": "v1.sealed-birth",
        "ingestion_start": date(2025, 1, 2),
        "ingestion_end": None,
        **fields,
    }
    return User.register(CTX, T, **values)  # type: ignore[arg-type]


# What founds each aggregate: its factory where the factory's ids are derived, else its
# constructor with the fixed id the factory would have drawn (the factories that draw
# fresh ids are held to these constructors below).
FOUND: dict[str, Callable[[], Aggregate]] = {
    "User": user,
    "User.bare": lambda: user(
        sealed_fallback_time_zone=None,
        sealed_birth_date=None,
        ingestion_start=None,
        ingestion_end=date(2027, 1, 2),
    ),
    "ClientUserIdClaim": lambda: ClientUserIdClaim.start(CTX, T, TEAM, DIGEST, USER),
    "Connection": lambda: Connection.connect_new(
        CTX,
        T,
        id=legacy_connection_id(USER, "oura"),
        user_id=USER,
        team_id=TEAM,
        provider="oura",
        sealed_external_user_id="v1.sealed-ext",
        resource_availability={"sleep": "available"},
        demo=False,
    ),
    "ResourceFeed": lambda: ResourceFeed.open(
        CTX,
        T,
        id=legacy_feed_id(CONNECTION, "sleep"),
        connection_id=CONNECTION,
        user_id=USER,
        team_id=TEAM,
        provider="oura",
        resource="sleep",
    ),
    "LinkToken": lambda: LinkToken(
        id=fixed_id(14),
        **FOUNDED,
        team_id=TEAM,
        user_id=USER,
        environment="sandbox",
        token_hash=hash_key(f"{LINK_TOKEN}_plain"),
        provider=None,
        redirect_url="https://example.com/back",
        filter_on_providers=["oura", "whoop"],
        on_error="redirect",
        on_close=None,
    ),
    # Its id is keyed by the user's key (StreamIds.sign_in_id, ADR 0045): given here.
    "CredentialSignIn": lambda: CredentialSignIn.challenge(
        CTX,
        T,
        None,
        fixed_id(22),
        cast(LinkToken, FOUND["LinkToken"]()),
        "freestyle_libre",
        "password",
        "sms",
        "v1.sealed-challenge",
    ),
    "BulkOperation": lambda: BulkOperation(
        id=fixed_id(41),
        **FOUNDED,
        team_id=TEAM,
        environment="production",
        operation="link_bulk_historical_trigger",
        provider="oura",
        user_ids=[str(USER)],
    ),
    # Its id is derived from the team's.
    "BulkOperationIndex": lambda: BulkOperationIndex.new(
        CTX, T, id=bulk_index_id(TEAM), team_id=TEAM
    ),
    "LinkCode": lambda: LinkCode(
        id=fixed_id(40),
        **FOUNDED,
        team_id=TEAM,
        user_id=USER,
        environment="sandbox",
        code_hash=hash_key(f"{LINK_CODE}_plain"),
        expires_at=datetime(2026, 3, 1, 13, 0, tzinfo=UTC),
    ),
    "OAuthFlow": lambda: OAuthFlow(
        id=fixed_id(15),
        **FOUNDED,
        link_token_id=fixed_id(14),
        team_id=TEAM,
        user_id=USER,
        provider="oura",
        binding_digest=BINDING_DIGEST,
    ),
    "Organization": lambda: Organization.found(CTX, T, "Acme", org_id=ORG),
    "Team": lambda: Team(id=fixed_id(10), **FOUNDED, org_id=ORG, name="Team A", region="eu"),
    "TeamApiKey": lambda: TeamApiKey(
        id=fixed_id(12),
        **FOUNDED,
        team_id=TEAM,
        environment="sandbox",
        region="eu",
        key_hash=hash_key(f"{TEAM_API_KEY}_plain"),
    ),
    "ManagementKey": lambda: ManagementKey(
        id=fixed_id(13),
        **FOUNDED,
        org_id=ORG,
        role="team_admin",
        team_ids=[fixed_id(20), fixed_id(21)],
        label="ops",
        key_hash=hash_key(f"{MANAGEMENT_KEY}_plain"),
    ),
    "CustomCredentials": lambda: CustomCredentials.prepare_new(CTX, T, TEAM, "oura"),
    "WebhookEndpoint": lambda: WebhookEndpoint(
        id=fixed_id(11),
        **FOUNDED,
        team_id=TEAM,
        environment="production",
        url="https://example.com/hook",
        description="main",
        filter_types=["provider.connection.created"],
        disabled=True,
        sealed_secret="v1.sealed-secret",
    ),
    "WebhookDelivery": lambda: WebhookDelivery.create(
        CTX,
        T,
        endpoint_id=ENDPOINT,
        team_id=TEAM,
        user_id=USER,
        event_type="daily.data.sleep.created",
        source_id=SOURCE,
        source_version=3,
        source_timestamp=datetime(2026, 2, 28, 23, 59, 59, tzinfo=UTC),
        day=date(2026, 2, 28),
        log_position=42,
    ),
    "DeprecationCalendar": lambda: DeprecationCalendar.start(CTX, T),
    "MirroredUser": lambda: MirroredUser.start(
        Envelope(
            message_id="msg_1",
            event_type="provider.connection.created",
            user_id=USER,
            team_id=TEAM,
            client_user_id="client-1",
        ),
        T,
        # Seals in memory, numbered: "client-1" becomes "sealed-1".
        DictVault(),
    ),
    "LabTest": lambda: LabTest(
        id=fixed_id(16),
        **FOUNDED,
        team_id=TEAM,
        name="Annual Wellness",
        description="Metabolic panel and HbA1c.",
        method="walk_in_test",
        lab_id=1,
        marker_ids=[1077, 1071],
        fasting=True,
    ),
    "Order": lambda: Order.place(
        CTX,
        T,
        order_id=fixed_id(17),
        user_id=USER,
        team_id=TEAM,
        environment="sandbox",
        lab_id=1,
        collection_method="walk_in_test",
        sealed_lab_test="v1.sealed-lab-test",
        sealed_patient_details="v1.sealed-details",
        sealed_patient_address="v1.sealed-address",
        sealed_request_digest="v1.sealed-digest",
        status="received.walk_in_test.ordered",
        next_step_at=datetime(2026, 3, 1, 12, 1, 0, 123456, tzinfo=UTC),
    ),
    "IntegrityCheck": lambda: IntegrityCheck.record_findings(
        CTX,
        T,
        IntegrityFindings(
            records_checked=120,
            signed_heads_checked=3,
            anchored_heads_checked=2,
            read_model_rows_compared=45,
            read_model_differences=1,
            first_problem=INTEGRITY_PROBLEM,
        ),
        id=fixed_id(18),
    ),
    "Redaction": lambda: Redaction.of_records(
        CTX,
        T,
        id=fixed_id(19),
        reason=SEALED,
        records=[
            RedactedRecord(
                position=7,
                original_topic="healthledger:Order.Created.v1",
                original_digest="ab" * 32,
                redacted_topic="healthledger:Order.Created.v2",
                redacted_digest="cd" * 32,
            )
        ],
    ),
}


@dataclass(frozen=True)
class Golden:
    id: str
    topic: str
    # The Created event's stored state.
    state: str
    # The aggregate's attribute dict after its Created event, as a snapshot stores it.
    aggregate_state: str


GOLDEN = {
    "User": Golden(
        id="11111111-2222-4333-8444-000000000002",
        topic="healthledger:User.Created.v1",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"originator_topic":"healthledger:User",'
            '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
            '"request_id":"req-golden","team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"client_user_id":null,'
            '"fallback_time_zone":null,"sealed_birth_date":"v1.sealed-birth",'
            '"ingestion_start":{"_type_":"date_iso","_data_":"2025-01-02"},'
            '"ingestion_end":null,"environment":"sandbox",'
            '"sealed_client_user_id":"v1.sealed-client","claim_id":{"_type_":"uuid_hex",'
            '"_data_":"b9930469aabd573b8e789f15acaf417e"},'
            '"sealed_fallback_time_zone":"v1.sealed-zone","class_version":4}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"_modified_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"client_user_id":null,'
            '"status":"active","fallback_time_zone":null,'
            '"sealed_birth_date":["v1.sealed-birth","manual",{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"}],'
            '"ingestion_start":{"_type_":"date_iso","_data_":"2025-01-02"},"ingestion_end":null,'
            '"sealed_demographics":null,"demographics_updated_at":null,"deleted_at":null,'
            '"erasure_due_at":null,"erased_at":null,"sealed_client_user_id":"v1.sealed-client",'
            '"claim_id":{"_type_":"uuid_hex","_data_":"b9930469aabd573b8e789f15acaf417e"},'
            '"sealed_fallback_time_zone":["v1.sealed-zone","manual",'
            '{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"}],'
            '"class_version":3}'
        ),
    ),
    "User.bare": Golden(
        id="11111111-2222-4333-8444-000000000002",
        topic="healthledger:User.Created.v1",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"originator_topic":"healthledger:User",'
            '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
            '"request_id":"req-golden","team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"client_user_id":null,'
            '"fallback_time_zone":null,"sealed_birth_date":null,"ingestion_start":null,'
            '"ingestion_end":{"_type_":"date_iso","_data_":"2027-01-02"},'
            '"environment":"sandbox","sealed_client_user_id":"v1.sealed-client",'
            '"claim_id":{"_type_":"uuid_hex","_data_":"b9930469aabd573b8e789f15acaf417e"},'
            '"sealed_fallback_time_zone":null,"class_version":4}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"_modified_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"client_user_id":null,'
            '"status":"active","fallback_time_zone":null,"sealed_birth_date":null,'
            '"ingestion_start":null,"ingestion_end":{"_type_":"date_iso","_data_":"2027-01-02"},'
            '"sealed_demographics":null,"demographics_updated_at":null,"deleted_at":null,'
            '"erasure_due_at":null,"erased_at":null,"sealed_client_user_id":"v1.sealed-client",'
            '"claim_id":{"_type_":"uuid_hex","_data_":"b9930469aabd573b8e789f15acaf417e"},'
            '"sealed_fallback_time_zone":null,"class_version":3}'
        ),
    ),
    "ClientUserIdClaim": Golden(
        id="b9930469-aabd-573b-8e78-9f15acaf417e",
        topic="healthledger:ClientUserIdClaim.Created.v1",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"originator_topic":"healthledger:ClientUserIdClaim",'
            '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
            '"request_id":"req-golden","team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"client_user_id":null,'
            '"user_id":{"_type_":"uuid_hex","_data_":"11111111222243338444000000000002"},'
            '"digest":"68dd798ddd1178d18a2a954692738f4fb10cec83baf5f4094d01cf0f31a0fbcc",'
            '"class_version":2}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"_modified_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"client_user_id":null,'
            '"holder":{"_type_":"uuid_hex","_data_":"11111111222243338444000000000002"},'
            '"digest":"68dd798ddd1178d18a2a954692738f4fb10cec83baf5f4094d01cf0f31a0fbcc",'
            '"class_version":2}'
        ),
    ),
    "Connection": Golden(
        id="bdcb166b-7be0-55c9-8730-95b4bb06a427",
        topic="healthledger:Connection.Created.v2",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"originator_topic":"healthledger:Connection",'
            '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
            '"request_id":"req-golden","user_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000002"},"team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},'
            '"sealed_external_user_id":"v1.sealed-ext","demo":false,'
            '"sealed_facts":"sealed:{\\"provider\\":\\"oura\\",'
            '\\"resource_availability\\":{\\"sleep\\":\\"available\\"}}"}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"_modified_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"user_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000002"},"team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"provider":"oura","demo":false,'
            '"status":"connected","connected_at":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"sealed_external_user_id":"v1.sealed-ext",'
            '"resource_availability":{"sleep":"available"},"error_details":null,'
            '"deregistered_at":null,"paused_by_team":false,"demo_failures":{}}'
        ),
    ),
    "ResourceFeed": Golden(
        id="784957ac-52d6-571e-8381-82e31547ad59",
        topic="healthledger:ResourceFeed.Created.v2",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"originator_topic":"healthledger:ResourceFeed",'
            '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
            '"request_id":"req-golden","connection_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000006"},"user_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000002"},"team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},'
            '"sealed_facts":"sealed:{\\"provider\\":\\"oura\\",\\"resource\\":\\"sleep\\"}"}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"_modified_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"connection_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000006"},"user_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000002"},"team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"provider":"oura","resource":"sleep",'
            # synced_at: the last sync's time, held in memory from the events (a feed is
            # never snapshotted, so no stored snapshot lacks it).
            '"pull_number":0,"status":null,"synced_at":null,"oldest_day":null,"newest_day":null}'
        ),
    ),
    "LinkToken": Golden(
        id="11111111-2222-4333-8444-00000000000e",
        topic="healthledger:LinkToken.Issued.v3",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"originator_topic":"healthledger:LinkToken",'
            '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
            '"request_id":"req-golden","team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"user_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000002"},"environment":"sandbox",'
            '"token_hash":"f288fc0829d942de70ba6685b22864cbd258e15cf2b73fbb3e5eae3a2d3a17a2",'
            '"on_error":"redirect","on_close":null,'
            '"sealed_facts":"sealed:{\\"filter_on_providers\\":[\\"oura\\",\\"whoop\\"],'
            '\\"provider\\":null,\\"redirect_url\\":\\"https://example.com/back\\"}"}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"_modified_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"user_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000002"},"environment":"sandbox",'
            '"token_hash":"f288fc0829d942de70ba6685b22864cbd258e15cf2b73fbb3e5eae3a2d3a17a2",'
            '"provider":null,"redirect_url":"https://example.com/back",'
            '"filter_on_providers":["oura","whoop"],"on_error":"redirect","on_close":null,'
            '"consumed_at":null,"consumed_provider":null}'
        ),
    ),
    "CredentialSignIn": Golden(
        id="11111111-2222-4333-8444-000000000016",
        topic="healthledger:CredentialSignIn.Challenged.v2",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"originator_topic":"healthledger:CredentialSignIn",'
            '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
            '"request_id":"req-golden","link_token_id":{"_type_":"uuid_hex",'
            '"_data_":"1111111122224333844400000000000e"},"team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"user_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000002"},'
            '"auth_type":"password","method":"sms","sealed_challenge":"v1.sealed-challenge",'
            '"sealed_facts":"sealed:{\\"provider\\":\\"freestyle_libre\\"}"}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"_modified_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"link_token_id":{"_type_":"uuid_hex",'
            '"_data_":"1111111122224333844400000000000e"},"team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"user_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000002"},"provider":"freestyle_libre",'
            '"auth_type":"password","method":"sms","sealed_challenge":"v1.sealed-challenge",'
            '"challenged_at":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"answered_at":null}'
        ),
    ),
    "BulkOperation": Golden(
        id="11111111-2222-4333-8444-000000000029",
        topic="healthledger:BulkOperation.Requested.v1",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},"'
            'originator_topic":"healthledger:BulkOperation","actor":"team_api_key:00000000-0000-4'
            '000-8000-0000000000aa","request_id":"req-golden","team_id":{"_type_":"uuid_hex","_da'
            'ta_":"11111111222243338444000000000001"},"environment":"production","operation":"lin'
            'k_bulk_historical_trigger","provider":"oura","user_ids":["11111111-2222-4333-8444-00'
            '0000000002"]}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"}'
            ',"_modified_on":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"'
            '},"team_id":{"_type_":"uuid_hex","_data_":"11111111222243338444000000000001"},"envir'
            'onment":"production","operation":"link_bulk_historical_trigger","provider":"oura","u'
            'ser_ids":["11111111-2222-4333-8444-000000000002"],"sealed_recipes":{},"done":[],'
            '"failed":[],"status":"in_progress","ended_at":null}'
        ),
    ),
    "BulkOperationIndex": Golden(
        id="215748d2-de3b-5f08-96e9-fb37e5214199",
        topic="healthledger:BulkOperationIndex.Opened.v1",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},"'
            'originator_topic":"healthledger:BulkOperationIndex","actor":"team_api_key:00000000-0'
            '000-4000-8000-0000000000aa","request_id":"req-golden","team_id":{"_type_":"uuid_hex"'
            ',"_data_":"11111111222243338444000000000001"}}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"}'
            ',"_modified_on":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"'
            '},"team_id":{"_type_":"uuid_hex","_data_":"11111111222243338444000000000001"},"opera'
            'tion_ids":[]}'
        ),
    ),
    "LinkCode": Golden(
        id="11111111-2222-4333-8444-000000000028",
        topic="healthledger:LinkCode.Issued.v1",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"originator_topic":"healthledger:LinkCode",'
            '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
            '"request_id":"req-golden","team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"user_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000002"},"environment":"sandbox",'
            '"code_hash":"b315a182b82da13f61bd71af013ba3e06e3a8bbca54f6fbac49784c28f3b9ada",'
            '"expires_at":{"_type_":"datetime_iso","_data_":"2026-03-01T13:00:00+00:00"}}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"_modified_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"user_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000002"},"environment":"sandbox",'
            '"code_hash":"b315a182b82da13f61bd71af013ba3e06e3a8bbca54f6fbac49784c28f3b9ada",'
            '"expires_at":{"_type_":"datetime_iso","_data_":"2026-03-01T13:00:00+00:00"},'
            '"redeemed_at":null}'
        ),
    ),
    "OAuthFlow": Golden(
        id="11111111-2222-4333-8444-00000000000f",
        topic="healthledger:OAuthFlow.Started.v2",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"originator_topic":"healthledger:OAuthFlow",'
            '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
            '"request_id":"req-golden","link_token_id":{"_type_":"uuid_hex",'
            '"_data_":"1111111122224333844400000000000e"},"team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"user_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000002"},'
            f'"binding_digest":"{BINDING_DIGEST}",'
            '"sealed_facts":"sealed:{\\"provider\\":\\"oura\\"}"}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"_modified_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"link_token_id":{"_type_":"uuid_hex",'
            '"_data_":"1111111122224333844400000000000e"},"team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"user_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000002"},"provider":"oura",'
            f'"binding_digest":"{BINDING_DIGEST}","returned_at":null}}'
        ),
    ),
    "Organization": Golden(
        id="11111111-2222-4333-8444-000000000003",
        topic="healthledger:Organization.Created.v1",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"originator_topic":"healthledger:Organization",'
            '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
            '"request_id":"req-golden","name":"Acme"}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"_modified_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"name":"Acme"}'
        ),
    ),
    "Team": Golden(
        id="11111111-2222-4333-8444-00000000000a",
        topic="healthledger:Team.Created.v1",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"originator_topic":"healthledger:Team",'
            '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
            '"request_id":"req-golden","org_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000003"},"name":"Team A","region":"eu"}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"_modified_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"org_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000003"},"name":"Team A","region":"eu",'
            '"features":[],"settings":{"sandbox":{"logo_url":null,"brand_information":null},'
            '"production":{"logo_url":null,"brand_information":null}},"deleted_at":null}'
        ),
    ),
    "TeamApiKey": Golden(
        id="11111111-2222-4333-8444-00000000000c",
        topic="healthledger:TeamApiKey.Created.v1",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"originator_topic":"healthledger:TeamApiKey",'
            '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
            '"request_id":"req-golden","team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"environment":"sandbox","region":"eu",'
            '"key_hash":"62822e6d4c4f30f66e0d492c5ede34a05fe472d8602f08fd7f851269c458f59f"}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"_modified_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"environment":"sandbox","region":"eu",'
            '"key_hash":"62822e6d4c4f30f66e0d492c5ede34a05fe472d8602f08fd7f851269c458f59f",'
            '"revoked_at":null}'
        ),
    ),
    "ManagementKey": Golden(
        id="11111111-2222-4333-8444-00000000000d",
        topic="healthledger:ManagementKey.Created.v1",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"originator_topic":"healthledger:ManagementKey",'
            '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
            '"request_id":"req-golden","org_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000003"},"role":"team_admin",'
            '"team_ids":[{"_type_":"uuid_hex","_data_":"11111111222243338444000000000014"},'
            '{"_type_":"uuid_hex","_data_":"11111111222243338444000000000015"}],"label":"ops",'
            '"key_hash":"f0226e85e577c95c162c2b6475fb27cf6facaf5bf05c1a7d4740649f623280d1"}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"_modified_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"org_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000003"},"role":"team_admin",'
            '"team_ids":[{"_type_":"uuid_hex","_data_":"11111111222243338444000000000014"},'
            '{"_type_":"uuid_hex","_data_":"11111111222243338444000000000015"}],"label":"ops",'
            '"key_hash":"f0226e85e577c95c162c2b6475fb27cf6facaf5bf05c1a7d4740649f623280d1",'
            '"revoked_at":null}'
        ),
    ),
    "CustomCredentials": Golden(
        id="0e2035f5-6190-54d5-8447-0da67e85451c",
        topic="healthledger:CustomCredentials.Created.v1",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"originator_topic":"healthledger:CustomCredentials",'
            '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
            '"request_id":"req-golden","team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"provider":"oura"}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"_modified_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"provider":"oura","status":"prepared",'
            '"client_id":null,"sealed_client_secret":null}'
        ),
    ),
    "WebhookEndpoint": Golden(
        id="11111111-2222-4333-8444-00000000000b",
        topic="healthledger:WebhookEndpoint.Created.v1",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"originator_topic":"healthledger:WebhookEndpoint",'
            '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
            '"request_id":"req-golden","team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"environment":"production",'
            '"url":"https://example.com/hook","description":"main",'
            '"filter_types":["provider.connection.created"],"disabled":true,'
            '"sealed_secret":"v1.sealed-secret"}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"_modified_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"environment":"production",'
            '"url":"https://example.com/hook","description":"main",'
            '"filter_types":["provider.connection.created"],'
            '"disabled_reason":"management_request","sealed_secret":"v1.sealed-secret",'
            '"sealed_previous_secret":null,"previous_secret_expires_at":null,"deleted_at":null}'
        ),
    ),
    "WebhookDelivery": Golden(
        id="c9148b9b-6466-5eeb-8989-c9e72ca045e4",
        topic="healthledger:WebhookDelivery.Created.v2",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"originator_topic":"healthledger:WebhookDelivery",'
            '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
            '"request_id":"req-golden","endpoint_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000005"},"team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"user_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000002"},"lifecycle_type":null,'
            '"message_id":"msg_52f96921740059cd80ce479c0e8e4472",'
            '"source_id":{"_type_":"uuid_hex","_data_":"11111111222243338444000000000007"},'
            '"source_version":3,"source_timestamp":{"_type_":"datetime_iso",'
            '"_data_":"2026-02-28T23:59:59+00:00"},"day":{"_type_":"date_iso",'
            '"_data_":"2026-02-28"},"log_position":42,'
            '"sealed_facts":"sealed:{\\"event_type\\":\\"daily.data.sleep.created\\"}"}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"_modified_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"endpoint_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000005"},"team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"user_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000002"},'
            '"event_type":"daily.data.sleep.created",'
            '"message_id":"msg_52f96921740059cd80ce479c0e8e4472",'
            '"source_id":{"_type_":"uuid_hex","_data_":"11111111222243338444000000000007"},'
            '"source_version":3,"source_timestamp":{"_type_":"datetime_iso",'
            '"_data_":"2026-02-28T23:59:59+00:00"},"day":{"_type_":"date_iso",'
            '"_data_":"2026-02-28"},"status":"pending","attempts":0,"last_status_code":null,'
            '"next_attempt_at":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"}}'
        ),
    ),
    "IntegrityCheck": Golden(
        id="11111111-2222-4333-8444-000000000012",
        topic="healthledger:IntegrityCheck.Created.v1",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"originator_topic":"healthledger:IntegrityCheck",'
            '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
            '"request_id":"req-golden","passed":false,"records_checked":120,'
            '"signed_heads_checked":3,"anchored_heads_checked":2,'
            '"read_model_rows_compared":45,"read_model_differences":1,'
            '"first_problem":"read models: a row of pending_erasures made by the log is '
            'missing from the live table (1 row(s) differ in 1 table(s))"}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"_modified_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"passed":false,'
            '"records_checked":120,"signed_heads_checked":3,"anchored_heads_checked":2,'
            '"read_model_rows_compared":45,"read_model_differences":1,'
            '"first_problem":"read models: a row of pending_erasures made by the log is '
            'missing from the live table (1 row(s) differ in 1 table(s))"}'
        ),
    ),
    "Redaction": Golden(
        id="11111111-2222-4333-8444-000000000013",
        topic="healthledger:Redaction.Created.v1",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"originator_topic":"healthledger:Redaction",'
            '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
            '"request_id":"req-golden","reason":"sealed","records":[{"position":7,'
            '"original_topic":"healthledger:Order.Created.v1","original_digest":"'
            + "ab" * 32
            + '","redacted_topic":"healthledger:Order.Created.v2","redacted_digest":"'
            + "cd" * 32
            + '"}]}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"_modified_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"reason":"sealed",'
            '"records":[{"position":7,"original_topic":"healthledger:Order.Created.v1",'
            '"original_digest":"'
            + "ab" * 32
            + '","redacted_topic":"healthledger:Order.Created.v2","redacted_digest":"'
            + "cd" * 32
            + '"}]}'
        ),
    ),
    "DeprecationCalendar": Golden(
        id="b6087bfd-f7fe-5fb2-b3b9-7ade392f61ed",
        topic="healthledger:DeprecationCalendar.Created.v1",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"originator_topic":"healthledger:DeprecationCalendar",'
            '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
            '"request_id":"req-golden"}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"_modified_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"applied":{}}'
        ),
    ),
    "MirroredUser": Golden(
        id="11111111-2222-4333-8444-000000000002",
        topic="healthledger:MirroredUser.Created.v1",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"originator_topic":"healthledger:MirroredUser","message_id":"msg_1",'
            '"event_type":"provider.connection.created","team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"client_user_id":null,'
            '"sealed_client_user_id":"sealed-1","class_version":2}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"_modified_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"client_user_id":null,'
            '"sealed_client_user_id":"sealed-1","connections":{},"resources":{},'
            '"last_message_at":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"status":"active",'
            '"deleted_at":null,"erasure_due_at":null,"erased_at":null,"lifecycle_at":null,'
            '"class_version":2}'
        ),
    ),
    "LabTest": Golden(
        id="11111111-2222-4333-8444-000000000010",
        topic="healthledger:LabTest.Created.v1",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"originator_topic":"healthledger:LabTest",'
            '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
            '"request_id":"req-golden","team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"name":"Annual Wellness",'
            '"description":"Metabolic panel and HbA1c.","method":"walk_in_test","lab_id":1,'
            '"marker_ids":[1077,1071],"fasting":true}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"_modified_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"name":"Annual Wellness",'
            '"description":"Metabolic panel and HbA1c.","method":"walk_in_test","lab_id":1,'
            '"marker_ids":[1077,1071],"fasting":true}'
        ),
    ),
    "Order": Golden(
        id="11111111-2222-4333-8444-000000000011",
        topic="healthledger:Order.Created.v2",
        state=(
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"originator_topic":"healthledger:Order",'
            '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
            '"request_id":"req-golden","user_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000002"},"team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"environment":"sandbox",'
            '"lab_id":1,"collection_method":"walk_in_test",'
            '"sealed_lab_test":"v1.sealed-lab-test","sealed_patient_details":"v1.sealed-details",'
            '"sealed_patient_address":"v1.sealed-address",'
            '"sealed_request_digest":"v1.sealed-digest","status":"received.walk_in_test.ordered",'
            '"next_step_at":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:01:00.123456+00:00"},"activate_by":null,"priority":false,'
            '"sealed_icd_codes":null,"sealed_passthrough":null,"class_version":3}'
        ),
        aggregate_state=(
            '{"_created_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"_modified_on":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:00:00.123456+00:00"},"user_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000002"},"team_id":{"_type_":"uuid_hex",'
            '"_data_":"11111111222243338444000000000001"},"environment":"sandbox",'
            '"lab_id":1,"collection_method":"walk_in_test",'
            '"sealed_lab_test":"v1.sealed-lab-test","clear_lab_test":null,'
            '"sealed_patient_details":"v1.sealed-details",'
            '"sealed_patient_address":"v1.sealed-address",'
            '"sealed_request_digest":"v1.sealed-digest","sample_id":null,"sealed_results":null,'
            '"sealed_interpretation":null,"results_at":null,"cancel_reason":null,'
            '"failure_reason":null,"registered_at":null,'
            '"activate_by":null,"placed_with_activation":false,"priority":false,'
            '"sealed_icd_codes":null,"sealed_passthrough":null,'
            '"history":[["received.walk_in_test.ordered",'
            '{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"}]],'
            '"changes":[[{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
            '"team_api_key:00000000-0000-4000-8000-0000000000aa",'
            '"received.walk_in_test.ordered",{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:01:00.123456+00:00"},false,null]],'
            '"status":"received.walk_in_test.ordered","next_step_at":{"_type_":"datetime_iso",'
            '"_data_":"2026-03-01T12:01:00.123456+00:00"}}'
        ),
    ),
}


@pytest.mark.parametrize("name", list(GOLDEN))
def test_a_created_event_is_stored_as_before_and_replays_to_the_same_aggregate(
    name: str,
) -> None:
    golden = GOLDEN[name]
    aggregate = FOUND[name]()
    (event,) = aggregate.collect_events()
    # An event whose facts are sealed (ADR 0032) is stored by the ledger's mapper.
    mapper = SEALING_MAPPER if getattr(type(event), "SEALED_FACTS", None) else MAPPER
    record = mapper.to_stored_event(event)
    assert record == stored(event) or mapper is SEALING_MAPPER
    assert (str(record.originator_id), record.originator_version) == (golden.id, 1)
    assert record.topic == golden.topic
    assert record.state == golden.state.encode()
    state = Snapshot.take(aggregate).state
    assert stock_transcoder().encode(state) == golden.aggregate_state.encode()
    assert loaded(mapper, record).mutate(None) == aggregate


class ReadableFactKeys:
    """A unit test's stand-in for the users' keys: "seals" as readable JSON."""

    def seal_fact(self, user_id: UUID, value: Any) -> str | None:
        return "sealed:" + json.dumps(value, sort_keys=True, separators=(",", ":"))

    def open_fact(self, user_id: UUID, sealed: str) -> Any | None:
        return json.loads(sealed.removeprefix("sealed:"))


SEALING_MAPPER = FactSealingMapper(stock_transcoder())
SEALING_MAPPER.facts = ReadableFactKeys()

# A connection's and a feed's Created events as version 1 stored them (their facts in
# clear), until the service's start redacts them into version 2 (ADR 0032).
CONNECTION_CREATED_V1 = (
    '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
    '"originator_topic":"healthledger:Connection",'
    '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
    '"request_id":"req-golden","user_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000002"},"team_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000001"},"provider":"oura",'
    '"sealed_external_user_id":"v1.sealed-ext",'
    '"resource_availability":{"sleep":"available"},"demo":false}'
)
FEED_CREATED_V1 = (
    '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
    '"originator_topic":"healthledger:ResourceFeed",'
    '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
    '"request_id":"req-golden","connection_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000006"},"user_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000002"},"team_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000001"},"provider":"oura","resource":"sleep"}'
)

# A webhook delivery's Created event as version 1 stored it (its type in clear), until
# the service's start redacts it into version 2 (ADR 0028).
DELIVERY_CREATED_V1 = (
    '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
    '"originator_topic":"healthledger:WebhookDelivery",'
    '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
    '"request_id":"req-golden","endpoint_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000005"},"team_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000001"},"user_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000002"},'
    '"event_type":"daily.data.sleep.created",'
    '"message_id":"msg_52f96921740059cd80ce479c0e8e4472",'
    '"source_id":{"_type_":"uuid_hex","_data_":"11111111222243338444000000000007"},'
    '"source_version":3,"source_timestamp":{"_type_":"datetime_iso",'
    '"_data_":"2026-02-28T23:59:59+00:00"},"day":{"_type_":"date_iso",'
    '"_data_":"2026-02-28"},"log_position":42}'
)

# A link token's Issued event as version 1 stored it (its redirect_url in clear), until
# the service's start redacts it into version 2 (ADR 0032).
LINK_TOKEN_ISSUED_V1 = (
    '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
    '"originator_topic":"healthledger:LinkToken",'
    '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
    '"request_id":"req-golden","team_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000001"},"user_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000002"},"environment":"sandbox",'
    '"token_hash":"f288fc0829d942de70ba6685b22864cbd258e15cf2b73fbb3e5eae3a2d3a17a2",'
    '"provider":null,"redirect_url":"https://example.com/back",'
    '"filter_on_providers":["oura","whoop"],"on_error":"redirect","on_close":null}'
)


# ... and as version 2 stored it (its redirect_url sealed, its makers in clear), until the
# start redacts it into version 3 (revision 0044).
LINK_TOKEN_ISSUED_V2 = (
    '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
    '"originator_topic":"healthledger:LinkToken",'
    '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
    '"request_id":"req-golden","team_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000001"},"user_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000002"},"environment":"sandbox",'
    '"token_hash":"f288fc0829d942de70ba6685b22864cbd258e15cf2b73fbb3e5eae3a2d3a17a2",'
    '"provider":null,"filter_on_providers":["oura","whoop"],"on_error":"redirect",'
    '"on_close":null,'
    '"sealed_facts":"sealed:{\\"redirect_url\\":\\"https://example.com/back\\"}"}'
)


# An OAuth flow's Started and a credential sign-in's Challenged as version 1 stored them
# (the maker in clear; the sign-in under its legacy uuid5 id), until the start redacts
# them into version 2 (revision 0045).
OAUTH_FLOW_STARTED_V1 = (
    '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
    '"originator_topic":"healthledger:OAuthFlow",'
    '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
    '"request_id":"req-golden","link_token_id":{"_type_":"uuid_hex",'
    '"_data_":"1111111122224333844400000000000e"},"team_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000001"},"user_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000002"},"provider":"oura",'
    f'"binding_digest":"{BINDING_DIGEST}"}}'
)
CREDENTIAL_SIGN_IN_CHALLENGED_V1 = (
    '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
    '"originator_topic":"healthledger:CredentialSignIn",'
    '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
    '"request_id":"req-golden","link_token_id":{"_type_":"uuid_hex",'
    '"_data_":"1111111122224333844400000000000e"},"team_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000001"},"user_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000002"},"provider":"freestyle_libre",'
    '"auth_type":"password","method":"sms","sealed_challenge":"v1.sealed-challenge"}'
)


@pytest.mark.parametrize(
    ("name", "topic", "state"),
    [
        ("Connection", "healthledger:Connection.Created.v1", CONNECTION_CREATED_V1),
        ("ResourceFeed", "healthledger:ResourceFeed.Created.v1", FEED_CREATED_V1),
        ("WebhookDelivery", "healthledger:WebhookDelivery.Created.v1", DELIVERY_CREATED_V1),
        ("LinkToken", "healthledger:LinkToken.Issued.v1", LINK_TOKEN_ISSUED_V1),
        ("LinkToken", "healthledger:LinkToken.Issued.v2", LINK_TOKEN_ISSUED_V2),
        ("OAuthFlow", "healthledger:OAuthFlow.Started.v1", OAUTH_FLOW_STARTED_V1),
        (
            "CredentialSignIn",
            "healthledger:CredentialSignIn.Challenged.v1",
            CREDENTIAL_SIGN_IN_CHALLENGED_V1,
        ),
    ],
)
def test_an_event_stored_before_its_facts_were_sealed_loads_with_them_in_clear(
    name: str, topic: str, state: str
) -> None:
    record = StoredEvent(UUID(GOLDEN[name].id), 1, topic, state.encode())
    event = SEALING_MAPPER.to_domain_event(record)
    assert isinstance(event, Audited.Event)
    # Each old version straight to the current one (the golden's topic).
    successor = type(event).SUPERSEDED_BY
    assert successor == GOLDEN[name].topic
    expected = FOUND[name]()
    expected.collect_events()
    assert loaded(SEALING_MAPPER, record).mutate(None) == expected


def test_facts_read_as_erased_once_the_key_is_gone() -> None:
    class NoKey(ReadableFactKeys):
        def open_fact(self, user_id: UUID, sealed: str) -> Any | None:
            return None

    (event,) = FOUND["Connection"]().collect_events()
    record = SEALING_MAPPER.to_stored_event(event)
    keyless = FactSealingMapper(stock_transcoder())
    keyless.facts = NoKey()
    connection = loaded(keyless, record).mutate(None)
    assert isinstance(connection, Connection)
    assert (connection.provider, connection.resource_availability) == (ERASED_PLACEHOLDER, {})
    # No key to seal with (a user erased before its record was redacted): the
    # placeholder is stored, never a key made.
    keyless.facts = type("Gone", (NoKey,), {"seal_fact": lambda self, u, v: None})()
    assert json.loads(keyless.to_stored_event(event).state)["sealed_facts"] == ERASED_PLACEHOLDER


# An order's Created event as version 1 stored it (its lab test in clear), until the
# service's start redacts it into version 2 (ADR 0028).
ORDER_CREATED_V1 = (
    '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
    '"originator_topic":"healthledger:Order",'
    '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
    '"request_id":"req-golden","user_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000002"},"team_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000001"},"environment":"sandbox",'
    '"lab_test_id":{"_type_":"uuid_hex","_data_":"11111111222243338444000000000010"},'
    '"lab_test_name":"Annual Wellness","lab_id":1,"collection_method":"walk_in_test",'
    '"marker_ids":[1077,1071],"sealed_patient_details":"v1.sealed-details",'
    '"sealed_patient_address":"v1.sealed-address",'
    '"sealed_request_digest":"v1.sealed-digest","status":"received.walk_in_test.ordered",'
    '"next_step_at":{"_type_":"datetime_iso",'
    '"_data_":"2026-03-01T12:01:00.123456+00:00"}}'
)


def test_an_order_created_event_stored_before_loads_with_its_test_in_clear() -> None:
    record = StoredEvent(
        originator_id=UUID("11111111-2222-4333-8444-000000000011"),
        originator_version=1,
        topic="healthledger:Order.Created.v1",
        state=ORDER_CREATED_V1.encode(),
    )
    event = MAPPER.to_domain_event(record)
    assert isinstance(event, Order.CreatedV1)
    order = event.mutate(None)
    assert isinstance(order, Order) and order.sealed_lab_test is None
    test = order.ordered_test(lambda user_id, sealed: None)
    assert test == OrderedTest(fixed_id(16), "Annual Wellness", (1077, 1071))


# An order's Created event (topic v2) as its class version 1 stored it, before orders
# could be placed with an activation date (ADR 0041).
ORDER_CREATED_CLASS_V1 = (
    '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
    '"originator_topic":"healthledger:Order",'
    '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
    '"request_id":"req-golden","user_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000002"},"team_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000001"},"environment":"sandbox",'
    '"lab_id":1,"collection_method":"walk_in_test",'
    '"sealed_lab_test":"v1.sealed-lab-test","sealed_patient_details":"v1.sealed-details",'
    '"sealed_patient_address":"v1.sealed-address",'
    '"sealed_request_digest":"v1.sealed-digest","status":"received.walk_in_test.ordered",'
    '"next_step_at":{"_type_":"datetime_iso",'
    '"_data_":"2026-03-01T12:01:00.123456+00:00"}}'
)


def test_an_order_stored_before_activation_dates_loads_as_placed_for_immediate_processing() -> None:
    record = StoredEvent(
        originator_id=UUID("11111111-2222-4333-8444-000000000011"),
        originator_version=1,
        topic="healthledger:Order.Created.v2",
        state=ORDER_CREATED_CLASS_V1.encode(),
    )
    event = MAPPER.to_domain_event(record)
    assert isinstance(event, Order.Created) and event.activate_by is None
    order = event.mutate(None)
    placed_now = FOUND["Order"]()
    placed_now.collect_events()
    assert order == placed_now
    assert isinstance(order, Order) and not order.placed_with_activation


# A user's Created event as version 1 stored it (before it recorded the environment).
USER_CREATED_V1 = (
    '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
    '"originator_topic":"healthledger:User",'
    '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
    '"request_id":"req-golden","team_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000001"},"client_user_id":"client-1",'
    '"fallback_time_zone":"Europe/Berlin","sealed_birth_date":"v1.sealed-birth",'
    '"ingestion_start":{"_type_":"date_iso","_data_":"2025-01-02"},'
    '"ingestion_end":null}'
)
# ... and as version 2 stored it (the client_user_id in clear, before it was sealed).
USER_CREATED_V2 = (
    '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
    '"originator_topic":"healthledger:User",'
    '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
    '"request_id":"req-golden","team_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000001"},"client_user_id":"client-1",'
    '"fallback_time_zone":"Europe/Berlin","sealed_birth_date":"v1.sealed-birth",'
    '"ingestion_start":{"_type_":"date_iso","_data_":"2025-01-02"},'
    '"ingestion_end":null,"environment":"sandbox","class_version":2}'
)
# The user's attribute dict as snapshots stored it before the client_user_id was sealed.
USER_STATE_V1 = (
    '{"_created_on":{"_type_":"datetime_iso",'
    '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
    '"_modified_on":{"_type_":"datetime_iso",'
    '"_data_":"2026-03-01T12:00:00.123456+00:00"},"team_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000001"},"client_user_id":"client-1",'
    '"status":"active","fallback_time_zone":["Europe/Berlin","manual",'
    '{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"}],'
    '"sealed_birth_date":["v1.sealed-birth","manual",{"_type_":"datetime_iso",'
    '"_data_":"2026-03-01T12:00:00.123456+00:00"}],'
    '"ingestion_start":{"_type_":"date_iso","_data_":"2025-01-02"},"ingestion_end":null,'
    '"sealed_demographics":null,"demographics_updated_at":null,"deleted_at":null,'
    '"erasure_due_at":null,"erased_at":null}'
)
# A claim's Created event, and its attribute dict, as stored before digests.
CLAIM_CREATED_V1 = (
    '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
    '"originator_topic":"healthledger:ClientUserIdClaim",'
    '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa",'
    '"request_id":"req-golden","team_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000001"},"client_user_id":"client-1",'
    '"user_id":{"_type_":"uuid_hex","_data_":"11111111222243338444000000000002"}}'
)
CLAIM_STATE_V1 = (
    '{"_created_on":{"_type_":"datetime_iso",'
    '"_data_":"2026-03-01T12:00:00.123456+00:00"},'
    '"_modified_on":{"_type_":"datetime_iso",'
    '"_data_":"2026-03-01T12:00:00.123456+00:00"},"team_id":{"_type_":"uuid_hex",'
    '"_data_":"11111111222243338444000000000001"},"client_user_id":"client-1",'
    '"holder":{"_type_":"uuid_hex","_data_":"11111111222243338444000000000002"}}'
)


def legacy_user() -> User:
    """The user that a Created event stored before the client_user_id was sealed makes:
    the value in clear, nothing sealed, and the claim of its time (team and value)."""
    user = User(
        id=USER,
        **FOUNDED,
        team_id=TEAM,
        client_user_id="client-1",
        fallback_time_zone="Europe/Berlin",
        sealed_birth_date="v1.sealed-birth",
        ingestion_start=date(2025, 1, 2),
        ingestion_end=None,
        environment=None,
        sealed_client_user_id=None,
        claim_id=LEGACY_CLAIM,
        sealed_fallback_time_zone=None,
    )
    user.collect_events()  # as replayed: nothing pending
    return user


def legacy_record(topic: str, originator_id: UUID, state: str) -> StoredEvent:
    return StoredEvent(originator_id, 1, topic, state.encode())


def snapshot_of(aggregate: Aggregate, state: str) -> Snapshot:
    """A snapshot of `aggregate` at version 1 holding the stored attribute dict `state`."""
    taken = Snapshot.take(aggregate)
    return Snapshot(
        originator_id=taken.originator_id,
        originator_version=1,
        timestamp=taken.timestamp,
        topic=taken.topic,
        state=stock_transcoder().decode(state.encode()),
    )


@pytest.mark.parametrize(
    ("state", "environment"), [(USER_CREATED_V1, None), (USER_CREATED_V2, "sandbox")]
)
def test_a_user_created_event_stored_before_loads_with_its_value_in_clear_and_its_old_claim(
    state: str, environment: str | None
) -> None:
    event = MAPPER.to_domain_event(legacy_record("healthledger:User.Created.v1", USER, state))
    assert isinstance(event, User.Created) and event.environment == environment
    assert (event.client_user_id, event.sealed_client_user_id) == ("client-1", None)
    assert event.claim_id == LEGACY_CLAIM == ClientUserIdClaim.id_for(TEAM, "client-1")
    # It replays to the user such events always made: the aggregate keeps no environment.
    assert event.mutate(None) == legacy_user()


def test_a_user_snapshot_taken_before_loads_with_its_old_claim() -> None:
    restored = snapshot_of(legacy_user(), USER_STATE_V1).mutate(None)
    assert isinstance(restored, User) and restored.client_user_id == "client-1"
    assert restored.claim_id == LEGACY_CLAIM and restored.sealed_client_user_id is None
    # Taken again, it is the state stored then with the two attributes added since.
    assert (
        stock_transcoder().encode(Snapshot.take(restored).state)
        == (
            USER_STATE_V1[:-1] + ',"sealed_client_user_id":null,"claim_id":{"_type_":"uuid_hex",'
            '"_data_":"5c4d57762bd95b26a71f754219d9de17"},"sealed_fallback_time_zone":null,'
            '"class_version":3}'
        ).encode()
    )


def test_a_claim_stored_before_digests_loads_with_its_value_and_no_digest() -> None:
    legacy = ClientUserIdClaim(
        id=LEGACY_CLAIM,
        **FOUNDED,
        team_id=TEAM,
        client_user_id="client-1",
        user_id=USER,
        digest=None,
    )
    legacy.collect_events()  # as replayed: nothing pending
    event = MAPPER.to_domain_event(
        legacy_record("healthledger:ClientUserIdClaim.Created.v1", LEGACY_CLAIM, CLAIM_CREATED_V1)
    )
    assert isinstance(event, ClientUserIdClaim.Created)
    assert (event.client_user_id, event.digest) == ("client-1", None)
    assert event.mutate(None) == legacy
    assert snapshot_of(legacy, CLAIM_STATE_V1).mutate(None) == legacy


def test_new_created_events_hold_the_client_user_id_nowhere_in_clear() -> None:
    for name in ("User", "User.bare", "ClientUserIdClaim"):
        (event,) = FOUND[name]().collect_events()
        assert b"client-1" not in stored(event).state
    assert GOLDEN["ClientUserIdClaim"].id == str(CLAIM)


def test_a_user_belongs_to_the_environment_of_the_key_that_created_it() -> None:
    production = CommandContext(actor=CTX.actor, request_id="r", environment="production")
    made = User.register(
        production,
        T,
        user_id=USER,
        team_id=TEAM,
        sealed_client_user_id="v1.sealed-c",
        claim_id=CLAIM,
        sealed_fallback_time_zone=None,
        sealed_birth_date=None,
        ingestion_start=None,
        ingestion_end=None,
    )
    (event,) = made.collect_events()
    assert isinstance(event, User.Created) and event.environment == "production"
    reloaded = MAPPER.to_domain_event(stored(event))
    assert isinstance(reloaded, User.Created) and reloaded.environment == "production"


def test_the_golden_values_cover_every_aggregate() -> None:
    founded = {type(found()) for found in FOUND.values()}
    assert {cls.__name__ for cls in founded} == {name.split(".")[0] for name in GOLDEN}
    assert len(founded) == 23


def test_factories_that_draw_fresh_ids_found_what_their_constructors_found() -> None:
    team = Team.create(CTX, T, ORG, "Team A", "eu")
    assert team == Team(id=team.id, **FOUNDED, org_id=ORG, name="Team A", region="eu")
    assert team.id != Team.create(CTX, T, ORG, "Team A", "eu").id

    key, plain = TeamApiKey.issue(CTX, T, TEAM, "sandbox", "eu")
    assert team_api_key_id(plain) == key.id
    assert key == TeamApiKey(
        id=key.id,
        **FOUNDED,
        team_id=TEAM,
        environment="sandbox",
        region="eu",
        key_hash=hash_key(plain),
    )

    management_key, plain = ManagementKey.issue(
        CTX,
        T,
        org_id=ORG,
        role="team_admin",
        team_ids=[fixed_id(21), fixed_id(20), fixed_id(21)],
        label="ops",
    )
    assert management_key == ManagementKey(
        id=management_key.id,
        **FOUNDED,
        org_id=ORG,
        role="team_admin",
        team_ids=[fixed_id(20), fixed_id(21)],
        label="ops",
        key_hash=hash_key(plain),
    )

    token, plain = LinkToken.issue(
        CTX,
        T,
        team_id=TEAM,
        user_id=USER,
        environment="sandbox",
        provider=None,
        redirect_url="https://example.com/back",
        filter_on_providers=["oura", "whoop"],
        on_error="redirect",
        on_close=None,
    )
    assert link_token_id(plain) == token.id
    assert token == LinkToken(
        id=token.id,
        **FOUNDED,
        team_id=TEAM,
        user_id=USER,
        environment="sandbox",
        token_hash=hash_key(plain),
        provider=None,
        redirect_url="https://example.com/back",
        filter_on_providers=["oura", "whoop"],
        on_error="redirect",
        on_close=None,
    )

    expiry = T + timedelta(hours=1)
    code, code_text = LinkCode.issue(
        CTX, T, team_id=TEAM, user_id=USER, environment="sandbox", expires_at=expiry
    )
    assert link_code_id(code_text) == code.id
    assert code == LinkCode(
        id=code.id,
        **FOUNDED,
        team_id=TEAM,
        user_id=USER,
        environment="sandbox",
        code_hash=hash_key(code_text),
        expires_at=expiry,
    )
    assert (
        code.id
        != LinkCode.issue(
            CTX, T, team_id=TEAM, user_id=USER, environment="sandbox", expires_at=expiry
        )[0].id
    )

    flow = OAuthFlow.start(CTX, T, token, "oura", "binding-secret")
    assert flow == OAuthFlow(
        id=flow.id,
        **FOUNDED,
        link_token_id=token.id,
        team_id=TEAM,
        user_id=USER,
        provider="oura",
        binding_digest=binding_digest("binding-secret"),
    )
    assert flow.id != OAuthFlow.start(CTX, T, token, "oura", "binding-secret").id

    endpoint_fields: dict[str, object] = {
        "team_id": TEAM,
        "environment": "production",
        "url": "https://example.com/hook",
        "description": "main",
        "filter_types": ["provider.connection.created"],
        "disabled": True,
        "sealed_secret": "v1.sealed-secret",
    }
    endpoint = WebhookEndpoint.create(CTX, T, **endpoint_fields)  # type: ignore[arg-type]
    assert endpoint == WebhookEndpoint(id=endpoint.id, **FOUNDED, **endpoint_fields)  # type: ignore[arg-type]


def test_a_makers_notice_is_stored_with_the_maker_and_resources_sealed() -> None:
    # A notice's receipt names the maker, the resources (a glucose monitor's glucose) and
    # the days: stored sealed, recorded by an unnamed maker (ADR 0032); it reads back as
    # recorded.
    ctx = CommandContext(actor=MAKER_ACTOR, request_id="req-notice")
    receipt = NoticeReceipt.new(
        ctx,
        T,
        id=fixed_id(30),
        user_id=USER,
        team_id=TEAM,
        connection_id=CONNECTION,
        provider="dexcom",
        resources=["glucose"],
        start=date(2026, 3, 1),
        end=date(2026, 3, 1),
        deauthorized=False,
    )
    (event,) = receipt.collect_events()
    record = SEALING_MAPPER.to_stored_event(event)
    assert record.topic == "healthledger:NoticeReceipt.Received.v3"
    state = json.loads(record.state)
    # The window too (revision 0035): which days the person had data at the maker.
    assert not {"provider", "resources", "start", "end"} & set(state)
    assert state["actor"] == "maker"
    assert b"dexcom" not in record.state.replace(b"sealed:", b"").split(b'"sealed_facts"')[0]
    assert loaded(SEALING_MAPPER, record).mutate(None) == receipt


def test_an_orders_created_event_of_class_version_2_loads_placed_without_the_new_fields() -> None:
    """Order.Created as class version 2 stored it (before priority, icd_codes and
    passthrough): today's class reads it as a routine order with neither, and its
    aggregate as the same order placed now without them."""
    golden = GOLDEN["Order"]
    version_2 = golden.state.replace(
        ',"priority":false,"sealed_icd_codes":null,"sealed_passthrough":null,"class_version":3}',
        ',"class_version":2}',
    )
    assert version_2 != golden.state
    record = StoredEvent(UUID(golden.id), 1, golden.topic, version_2.encode())
    created = MAPPER.to_domain_event(record)
    assert isinstance(created, Order.Created)
    assert (created.priority, created.sealed_icd_codes, created.sealed_passthrough) == (
        False,
        None,
        None,
    )
    aggregate = FOUND["Order"]()
    aggregate.collect_events()
    assert loaded(MAPPER, record).mutate(None) == aggregate


# A demo device's failures (not a founding event; revision 0049): version 2 stores them
# sealed and names the user whose key seals; version 1 held them in clear, naming no user.
DEMO_FAILURES = {"glucose": {"code": "provider_unavailable", "times": 2}}
DEMO_FAILURES_CONFIGURED_V2 = (
    '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
    '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa","request_id":"req-golden",'
    '"user_id":{"_type_":"uuid_hex","_data_":"11111111222243338444000000000002"},'
    '"sealed_facts":"sealed:{\\"failures\\":{\\"glucose\\":{\\"code\\":'
    '\\"provider_unavailable\\",\\"times\\":2}}}"}'
)
DEMO_FAILURES_CONFIGURED_V1 = (
    '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
    '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa","request_id":"req-golden",'
    '"failures":{"glucose":{"code":"provider_unavailable","times":2}}}'
)


def test_a_demo_devices_failures_are_stored_sealed_and_their_v1_loads_them_in_clear() -> None:
    connection = cast(Connection, FOUND["Connection"]())
    connection.configure_demo_failures(CTX, T, DEMO_FAILURES)
    _, configured = connection.collect_events()
    record = SEALING_MAPPER.to_stored_event(configured)
    assert record.topic == "healthledger:Connection.DemoFailuresConfigured.v2"
    assert record.state.decode() == DEMO_FAILURES_CONFIGURED_V2
    old = StoredEvent(
        record.originator_id,
        record.originator_version,
        "healthledger:Connection.DemoFailuresConfigured.v1",
        DEMO_FAILURES_CONFIGURED_V1.encode(),
    )
    old_version = SEALING_MAPPER.to_domain_event(old)
    assert isinstance(old_version, Connection.DemoFailuresConfiguredV1)
    assert record.topic == old_version.SUPERSEDED_BY
    # Either version, replayed onto the connection: the failures the demo device reads.
    for stored_event in (record, old):
        replayed = cast(Connection, FOUND["Connection"]())
        replayed.collect_events()
        loaded(SEALING_MAPPER, stored_event).mutate(replayed)
        assert replayed.demo_failures == DEMO_FAILURES

    class NoKey(ReadableFactKeys):
        def open_fact(self, user_id: UUID, sealed: str) -> Any | None:
            return None

    # Once the key is gone: no failures.
    keyless = FactSealingMapper(stock_transcoder())
    keyless.facts = NoKey()
    replayed = cast(Connection, FOUND["Connection"]())
    replayed.collect_events()
    loaded(keyless, record).mutate(replayed)
    assert replayed.demo_failures == {}
