"""The composition root: builds the whole service from settings.

The CLI, the HTTP server, the scheduler, the benchmarks and the tests all build it here,
so there is one way to wire the parts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import cache, partial
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
from apscheduler.events import EVENT_SCHEDULER_SHUTDOWN
from healthledger.adapters.answers.continuous_queries import ContinuousQueryRunner
from healthledger.adapters.answers.health_queries import HealthQueries
from healthledger.adapters.answers.orders import OrderAnswers
from healthledger.adapters.brokers.publisher import EventPublisher
from healthledger.adapters.lab_report_pdfs import PdfReportReader
from healthledger.adapters.outbound import tls_context
from healthledger.adapters.persistence.engine import migrating
from healthledger.adapters.persistence.engine.changes import (
    ChangeListener,
    DataVersion,
    hear_own_commits,
)
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.outages import unavailable
from healthledger.adapters.persistence.eventstore.chain import Chain, SigningTally, open_chain
from healthledger.adapters.persistence.eventstore.infrastructure import LedgerInfrastructure
from healthledger.adapters.persistence.eventstore.old_versions import (
    RedactionKeys,
    leave_no_redacted_values,
    redact_old_versions,
)
from healthledger.adapters.persistence.eventstore.recorder import LedgerRecorder, SnapshotRecorder
from healthledger.adapters.persistence.eventstore.redaction import Redactor
from healthledger.adapters.persistence.eventstore.repository import KnownCurrentRepository
from healthledger.adapters.persistence.eventstore.sealed_facts import StoredKeys
from healthledger.adapters.persistence.health_data.batches import HealthDataBatches
from healthledger.adapters.persistence.health_data.conversion import convert_stored_days
from healthledger.adapters.persistence.health_data.known_reads import USER_DATA, KnownReads
from healthledger.adapters.persistence.health_data.places import key_stored_places
from healthledger.adapters.persistence.health_data.sessions import (
    index_stored_sessions,
    leave_no_erased_sessions,
)
from healthledger.adapters.persistence.health_data.store import SqlHealthDataStore
from healthledger.adapters.persistence.integrity.integrity_check import (
    LatestCheck,
    run_integrity_checks,
)
from healthledger.adapters.persistence.keys.connection_providers import ProviderDigests
from healthledger.adapters.persistence.keys.head_anchors import anchor_file_path
from healthledger.adapters.persistence.keys.key_store import KEY_REFUSED, KeyStore, open_master_key
from healthledger.adapters.persistence.keys.maker_accounts import AccountDigests
from healthledger.adapters.persistence.keys.maker_webhook_secrets import MakerWebhookSecrets
from healthledger.adapters.persistence.keys.master_key import master_key_source
from healthledger.adapters.persistence.keys.order_interpretations import InterpretationDigests
from healthledger.adapters.persistence.keys.provider_tokens import (
    SqlProviderTokenStore,
    seal_stored_grants,
)
from healthledger.adapters.persistence.keys.signing_key import cursor_secret, signing_key_path
from healthledger.adapters.persistence.leases.erasures import ErasureClaims, OverdueByTheLog
from healthledger.adapters.persistence.leases.event_destinations import DestinationLeases
from healthledger.adapters.persistence.projections.connections import (
    AccountKeys,
    fill_connection_digests,
)
from healthledger.adapters.persistence.projections.erasure import (
    ErasurePlaces,
    erasure_effects,
)
from healthledger.adapters.persistence.projections.orders import fill_interpretations
from healthledger.adapters.persistence.projections.read_models import ReadModels
from healthledger.adapters.persistence.projections.users import (
    resync_sealed_values,
    seal_client_user_ids,
)
from healthledger.adapters.persistence.queries.connections import ConnectionQueries
from healthledger.adapters.persistence.queries.continuous_queries import ContinuousQueryStore
from healthledger.adapters.persistence.queries.deletion_cascade import deletion_targets
from healthledger.adapters.persistence.queries.directory import TeamQueries, UserQueries
from healthledger.adapters.persistence.queries.event_destinations import EventDestinationQueries
from healthledger.adapters.persistence.queries.health_data import HealthDataQueries
from healthledger.adapters.persistence.queries.lab_report_uploads import SqlReportUploads
from healthledger.adapters.persistence.queries.lab_tests import LabTestQueries
from healthledger.adapters.persistence.queries.link_tokens import LinkTokenQueries
from healthledger.adapters.persistence.queries.maker_notices import MakerNoticeQueries
from healthledger.adapters.persistence.queries.orders import OrderQueries
from healthledger.adapters.persistence.queries.portal import PortalQueries
from healthledger.adapters.persistence.queries.pulls import PullQueries
from healthledger.adapters.persistence.queries.unmatched_results import UnmatchedResultQueries
from healthledger.adapters.persistence.queries.verified_keys import CHANNEL as KEYS_CHANNEL
from healthledger.adapters.persistence.queries.verified_keys import VerifiedKeys
from healthledger.adapters.persistence.queries.webhooks import WebhookQueries
from healthledger.adapters.providers.apple_health import AppleHealthKit
from healthledger.adapters.providers.demo import DemoProvider
from healthledger.adapters.providers.dexcom import DexcomReader
from healthledger.adapters.providers.fitbit import FitbitReader
from healthledger.adapters.providers.garmin import GarminReader
from healthledger.adapters.providers.import_files import ImportFolder
from healthledger.adapters.providers.libreview import LibreViewReader
from healthledger.adapters.providers.maker_webhooks import maker_webhooks
from healthledger.adapters.providers.oauth2 import OAuth2Maker, oauth_makers
from healthledger.adapters.providers.oura import OuraReader
from healthledger.adapters.providers.polar import PolarReader
from healthledger.adapters.providers.whoop import WhoopReader
from healthledger.adapters.providers.withings import WithingsReader
from healthledger.adapters.reference import (
    ProviderEntry,
    deprecation_calendar,
    provider_catalog,
    provider_slugs,
    rules_at,
    webhook_event_types,
)
from healthledger.adapters.reference.labs import lab_reference
from healthledger.adapters.reference.labs.appointment_places import AppointmentPlaces
from healthledger.adapters.reference.labs.areas import AreaIndex
from healthledger.adapters.reference.labs.catalog import ReferenceLabCatalog
from healthledger.adapters.settings import Settings
from healthledger.adapters.webhooks.dispatcher import Dispatcher
from healthledger.adapters.webhooks.payloads import Payloads
from healthledger.domain.connections.bulk_operations import BulkOperations
from healthledger.domain.connections.connecting import Connections
from healthledger.domain.connections.connection import Connection as ConnectionAggregate
from healthledger.domain.connections.credential_links import CredentialLinks
from healthledger.domain.connections.imports import ImportPolicy, Imports
from healthledger.domain.connections.linking import LinkTokens
from healthledger.domain.connections.maker_notices import MakerWebhooks
from healthledger.domain.connections.notice_intake import MakerNotices
from healthledger.domain.connections.oauth_clients import OAuthClients
from healthledger.domain.connections.providers import OAuthClient, ProviderAdapter
from healthledger.domain.connections.pulling import PullPolicy, Pulls
from healthledger.domain.connections.revocation import GrantRevocations
from healthledger.domain.connections.stream_ids import StreamIds
from healthledger.domain.connections.user_deletion import UserConnections
from healthledger.domain.context import BOOTSTRAP, CommandContext
from healthledger.domain.errors import TeamNotFound
from healthledger.domain.integrity import IntegrityChecks
from healthledger.domain.labs.booking import LabAppointments
from healthledger.domain.labs.kits import KitRegistrations
from healthledger.domain.labs.lab_tests import LabTests
from healthledger.domain.labs.ordering import LabOrders
from healthledger.domain.labs.orders import Order
from healthledger.domain.labs.portal import Portal, PortalLifetimes
from healthledger.domain.labs.report_parsing import ReportParsing
from healthledger.domain.labs.result_test_harness import ResultTestHarness
from healthledger.domain.labs.sandbox import SandboxPolicy
from healthledger.domain.labs.unmatched_results import UnmatchedResults
from healthledger.domain.labs.user_deletion import UserOrders
from healthledger.domain.ledger import Clock, Ledger, utc_now
from healthledger.domain.personal_data import ERASED_PLACEHOLDER
from healthledger.domain.teams.client_user_id_secrets import ClientUserIdSecrets
from healthledger.domain.teams.directory import Bootstrap, TeamDirectory
from healthledger.domain.teams.teams import Team, TeamApiKey
from healthledger.domain.users.client_user_ids import (
    DIGESTS,
    ClientUserIds,
    client_user_id_digest,
)
from healthledger.domain.users.lifecycle import UserLifecycle
from healthledger.domain.users.user import User
from healthledger.domain.webhooks.deprecations import Deprecations
from healthledger.domain.webhooks.event_destination_management import EventDestinations
from healthledger.domain.webhooks.event_types import EventTypeCatalog
from healthledger.domain.webhooks.management import (
    Destinations,
    WebhookEndpoints,
    address,
    url_address,
)
from healthledger.domain.webhooks.redelivery import Redeliveries
from healthledger.domain.webhooks.user_deletion import UserDeliveries
from healthledger.scheduler.deprecations import apply_cut_overs
from healthledger.scheduler.erasure import ErasurePorts, sweep_erasures
from healthledger.scheduler.imports import run_due_imports
from healthledger.scheduler.integrity import IntegrityPorts, check_integrity_if_due
from healthledger.scheduler.key_rotation import KeyRotationPorts, rotate_master_key_if_due
from healthledger.scheduler.lab_orders import progress_lab_orders
from healthledger.scheduler.pulls import run_due_pulls, sync_connected_feeds
from healthledger.scheduler.runner import Intervals, Jobs, LedgerScheduler
from healthledger.scheduler.webhooks import dispatch_webhooks
from sqlalchemy import Connection


@dataclass
class Service:
    settings: Settings
    clock: Clock
    db: Database
    recorder: LedgerRecorder
    ledger: Ledger
    key_store: KeyStore
    read_models: ReadModels
    users: UserLifecycle
    teams: TeamDirectory
    user_queries: UserQueries
    team_queries: TeamQueries
    cursor_secret: bytes
    # slug -> catalog entry (reference data shipped with the service).
    catalog: Mapping[str, ProviderEntry]
    connections: Connections
    connection_queries: ConnectionQueries
    link_tokens: LinkTokens
    credential_links: CredentialLinks
    bulk_operations: BulkOperations
    link_token_queries: LinkTokenQueries
    health_data: SqlHealthDataStore
    # Summaries and timeseries samples of live users (docs/data.md).
    health_data_queries: HealthDataQueries
    pulls: Pulls
    pull_queries: PullQueries
    # The public webhook event types (reference data) and the endpoints that receive them.
    event_types: EventTypeCatalog
    webhooks: WebhookEndpoints
    webhook_queries: WebhookQueries
    deprecations: Deprecations
    dispatcher: Dispatcher
    redeliveries: Redeliveries
    # Event destinations (issue 35): a team's brokers, their read model, and the
    # publisher that sends them the outbox's messages.
    event_destinations: EventDestinations
    event_destination_queries: EventDestinationQueries
    publisher: EventPublisher
    # The scheduler's jobs, bound to their ports: `start_scheduler` runs them, and the
    # CLI's sweeps and the tests call them directly.
    jobs: Jobs
    # The log's hash chain: signed heads, links, verification (ADR 0015).
    chain: Chain
    # OAuth makers (ADR 0022): the maker's tokens of OAuth connections, sealed; the
    # adapter of each maker with documented endpoints; their HTTP client.
    provider_tokens: SqlProviderTokenStore
    oauth_makers: Mapping[str, OAuth2Maker]
    oauth_http: httpx.Client
    # Lab testing (docs/labs.md): the labs and markers (reference data, indexed once),
    # the team's and the shared demo lab tests (the `LabTestLookup` orders read), and
    # the lab test use cases.
    lab_catalog: ReferenceLabCatalog
    lab_tests: LabTestQueries
    # Lab test orders (issue 14): the use cases (with the simulated lab's sweep), the
    # orders read model's queries (also the portal's: a user's orders), their answers.
    lab_orders: LabOrders
    # At-home test kits registered by their sample id (domain/labs/kits.py).
    kit_registrations: KitRegistrations
    order_queries: OrderQueries
    order_answers: OrderAnswers
    # Lab results that arrived without an order (ADR 0040): the team's review, the
    # sandbox's harness that makes them, and their listing.
    unmatched_results: UnmatchedResults
    result_test_harness: ResultTestHarness
    unmatched_result_queries: UnmatchedResultQueries
    lab_test_commands: LabTests
    # Area info: zip codes, patient service centers, phlebotomy service areas.
    area_info: AreaIndex
    # Appointments of orders (issue 33): their places (reference data) and use cases.
    appointment_places: AppointmentPlaces
    appointments: LabAppointments
    # The hosted portal (docs/labs.md#portal): its passes, and what its pages read.
    portal: Portal
    portal_queries: PortalQueries
    # Makers' export files uploaded for a user (Apple Health): where they wait, and the
    # import jobs that read them (docs/makers/apple_health.md).
    import_files: ImportFolder
    imports: Imports
    # Lab reports uploaded to the parser (docs/labs.md, the lab report parser): the jobs'
    # use cases, their sealed uploads and the PDF reader.
    report_parsing: ReportParsing
    # The makers' webhooks in (issue 28, ADR 0031): each maker's verifier by slug, the
    # intake that records their notices and the worker's use case, and its queue.
    maker_webhooks: Mapping[str, MakerWebhooks]
    maker_notices: MakerNotices
    maker_notice_queries: MakerNoticeQueries
    # The keys of our webhooks at the makers that give one when it is made (Polar).
    maker_webhook_secrets: MakerWebhookSecrets
    # PostgreSQL: the listener that makes this process forget the team API keys it
    # verified and the stored days it read when they change in another process (ADR
    # 0042, ADR 0043); None on SQLite.
    changes: ChangeListener | None = None
    # SQLite: what tells the stored days kept (ADR 0043) that anything was committed.
    data_version: DataVersion | None = None

    def bootstrap(self) -> Bootstrap | None:
        """On an empty database: the default organization, team and key (else None)."""
        if self.team_queries.has_any_team():
            return None
        from eventsourcing.persistence import IntegrityError

        try:
            return self.teams.bootstrap(CommandContext.system(BOOTSTRAP))
        except IntegrityError:
            return None  # another process bootstrapped the same database first

    def client_user_id_digest(self, team_id: UUID, value: str) -> str:
        """The team's keyed digest (HMAC-SHA256, hex) of a client_user_id: what audits and
        deletion reports show instead of the value. Makes the team's secret if it has
        none yet (a team created before digests)."""
        return self.users.client_user_ids.digest(CommandContext.system(DIGESTS), team_id, value)

    def client_user_id_digest_of(self, user: User) -> str | None:
        """The team's digest of the client_user_id the user holds or last held (erased
        users too: from its claim). None only for a claim made before digests in a
        deleted team, whose secret is destroyed with the team's key."""
        try:
            return self.users.client_user_ids.digest_of_user(CommandContext.system(DIGESTS), user)
        except TeamNotFound:
            return None

    def close(self) -> None:
        self.dispatcher.close()
        self.publisher.close()
        self.oauth_http.close()
        if self.changes is not None:
            self.changes.close()
        if self.data_version is not None:
            self.data_version.close()
        self.ledger.close()
        self.db.dispose()


def _user_or_none(ledger: Ledger, user_id: UUID) -> User | None:
    found = ledger.find(user_id)
    return found if isinstance(found, User) else None


def _sealed_interpretation(ledger: Ledger, order_id: UUID) -> str | None:
    found = ledger.find(order_id)
    return found.sealed_interpretation if isinstance(found, Order) else None


def _digest_or_none(users: UserLifecycle, team_id: UUID, value: str) -> str | None:
    """The team's digest, recording the secret of a team created before digests (outside
    any transaction: the conversion of revision 0015's rows); None for a deleted team."""
    try:
        return users.client_user_ids.digest(CommandContext.system(DIGESTS), team_id, value)
    except TeamNotFound:
        return None


def own_addresses(settings: Settings) -> set[tuple[str, int]]:
    """Every (host, port) this service answers on or is reached at: a webhook URL must
    point elsewhere, or the service would post its events to itself."""
    ports = (settings.team_api_port, settings.management_api_port, settings.link_port)
    found = {address(settings.host, port) for port in ports}
    for url in (settings.public_base_url, settings.link_url):
        reached = url_address(url)
        if reached is not None:
            found.add(reached)
    return found


@cache
def shipped_labs() -> tuple[ReferenceLabCatalog, AreaIndex]:
    """The lab catalog and its zip-code area index over the shipped reference data. Both
    are read-only, so they are built once per process and shared by every service built
    in it (the index alone costs about 35 ms, which each `build_service` paid)."""
    catalog = ReferenceLabCatalog(lab_reference())
    return catalog, AreaIndex(catalog.reference)


@cache
def shipped_places() -> AppointmentPlaces:
    """Where appointments happen (reference data, read-only): built once per process."""
    return AppointmentPlaces(shipped_labs()[0].reference)


def _team_of(ledger: Ledger, user_id: UUID) -> UUID:
    """A user's team, from its Created event (read from the log alone: an erased user's
    too, and no user kept in memory with the records about to be redacted)."""
    (created,) = ledger.events.get(user_id, limit=1)
    assert isinstance(created, User.Created), f"{user_id} is not a user"
    return created.team_id


def _sealer(key_store: KeyStore, user_id: UUID) -> Callable[[Any], str] | None:
    """What seals a value with the user's key, or None when the user has none (erased):
    never a new key for someone who is gone."""
    cipher = key_store.cipher(user_id)
    return None if cipher is None else cipher.seal


def build_service(
    settings: Settings | None = None, *, clock: Clock = utc_now, chained: bool = True
) -> Service:
    """The service. `chained=False` records events off the hash chain: only for
    `bench/audit.py`, which measures what the chain costs a command."""
    settings = settings or Settings()
    db = Database(settings.database_url, pool_size=settings.database_pool_size)
    # The stored days a read answered, kept until the user's data changes (ADR 0043):
    # on PostgreSQL, this process's own commits heard on its pooled connections from the
    # first; on SQLite (below, once the file is migrated), while its data version stays.
    known_reads = KnownReads()
    if not db.is_sqlite:
        hear_own_commits(db.writer, USER_DATA, known_reads.heard)
    migrating.at_start(settings.database_url, settings.migrate_on_start)
    data_version = None
    if db.sqlite_file is not None:
        data_version = DataVersion(db.sqlite_file)
        known_reads = KnownReads(version=data_version)
    # The signing key of the chain's heads, kept like the master key (ADR 0015).
    # Each head it signs is anchored outside the database too (issue 30 §3).
    signing_key_file = signing_key_path(settings.signing_key_file, settings.master_key_file)
    anchor_file = anchor_file_path(settings.chain_anchor_file, signing_key_file)
    chain = open_chain(
        db,
        signing_key_file,
        clock,
        allow_beside_database=settings.allow_key_beside_database,
        anchor_file=anchor_file,
    )
    # The master key from its source (docs/operations.md#the-master-key), checked against
    # the database's data keys; a new one only for a database that holds none yet.
    key_source = master_key_source(
        value=None if settings.master_key is None else settings.master_key.get_secret_value(),
        command=settings.master_key_command,
        file=settings.master_key_file,
        database_file=db.sqlite_file,
        allow_beside_database=settings.allow_key_beside_database,
    )
    master_key = open_master_key(db, key_source)
    key_store = KeyStore(db, master_key, clock, key_source)
    provider_tokens = SqlProviderTokenStore(db, key_store, clock)

    def on_record(conn: Connection, events: Sequence[Any]) -> None:
        # A new user's key is stored with its first events, before they are projected.
        key_store.store_new_keys(conn, events)
        # An OAuth connection's tokens are stored with its events (and go with its end).
        provider_tokens.record(conn, events)
        # An erasure deletes and counts before the projections, and checks after them.
        with erasure_effects(conn, events):
            read_models.project(conn, events)

    recorder = LedgerRecorder(db, on_record, chained=chained)
    recorder.add_commit_listener(key_store.forget_stored_keys)
    # PostgreSQL: a new user's key refused on the server fails the create's COMMIT.
    recorder.on_failed_check(KEY_REFUSED, lambda: key_store.refused())
    ledger = Ledger(
        # Connections' and feeds' facts sealed with their user's key (ADR 0032).
        LedgerInfrastructure(recorder, SnapshotRecorder(db), StoredKeys(key_store)),
        # Long-lived users replay from a snapshot; erasure deletes their snapshots.
        snapshot_intervals={User: settings.user_snapshot_interval},
        aggregate_cache_size=settings.aggregate_cache_size,
        unit_of_work=db.unit_of_work,
        # Aggregates known current (ADR 0011) need a cache to keep them in.
        repository=(
            partial(KnownCurrentRepository, log_mark=recorder.change_mark, shared=not db.is_sqlite)
            if settings.aggregate_cache_size > 0
            else None
        ),
    )
    client_user_id_secrets = ClientUserIdSecrets(ledger, key_store, clock)

    def recorded_digest(team_id: UUID, value: str) -> str | None:
        # A team's digest with the secret it has recorded (None: a deleted team's): what
        # the users rows are found by (a read or a projection never records a secret).
        secret = client_user_id_secrets.recorded(team_id)
        return None if secret is None else client_user_id_digest(secret.secret, value)

    def seal_on(conn: Connection, user_id: UUID, value: str) -> str | None:
        cipher = key_store.cipher_on(conn, user_id)
        return None if cipher is None else cipher.seal(value)

    # The service's keyed digests of makers' account ids (ADR 0031): its key is made
    # here, outside any transaction, before a projection needs it.
    account_digests = AccountDigests(key_store)
    # The orders' interpretations, sealed, are filtered by the service's keyed digest of
    # (team, value) (issue 29): its key is the account digests' one, read here likewise.
    interpretation_digests = InterpretationDigests(key_store)
    # The connections' providers, sealed, are filtered by the service's keyed digest of
    # (team, provider) (ADR 0032): the same key under another label.
    provider_digests = ProviderDigests(key_store)
    # The users read model holds a client_user_id sealed and as the team's digest (ADR
    # 0017): it opens what events hold sealed to digest it; `on_record` projects with it.
    # The connections rows hold the account digest of the maker's account id likewise.
    read_models = ReadModels(
        db,
        key_store.open_on,
        key_store.opener_on,
        seal=seal_on,
        digest=recorded_digest,
        account_digest=account_digests.account,
        interpretation_digest=interpretation_digests.digest,
        provider_digest=provider_digests.digest,
    )
    catalog = {entry.slug: entry for entry in provider_catalog()}
    # Read and checked here, so that a broken lab data file stops the service at start.
    lab_catalog, area_index = shipped_labs()
    appointment_places = shipped_places()

    def describe(slug: str) -> dict[str, Any]:
        entry = catalog.get(slug)
        if entry is None:
            # A connection of a user erased since, read as of before (ADR 0032): its
            # provider went with the user's key.
            return dict.fromkeys(("name", "slug", "logo"), ERASED_PLACEHOLDER)
        return {"name": entry.name, "slug": entry.slug, "logo": entry.logo}

    connection_queries = ConnectionQueries(db, key_store, describe, key_store.opener_on)
    order_queries = OrderQueries(db, interpretation_digests.digest)
    portal_queries = PortalQueries(db)
    erasure_places = ErasurePlaces(db)
    erasure_claims = ErasureClaims(db, settings.erasure_claim_lease)
    users = UserLifecycle(
        ledger,
        key_store,
        clock,
        settings.grace_period,
        ClientUserIds(ledger, client_user_id_secrets),
        erasure_inventory=erasure_places.inventories,
        # What ends with a user, in this order: a deletion deregisters its connections
        # and cancels its open lab test orders (issue 14), reading both at once; an
        # erasure drops the webhook deliveries still queued about it.
        cascade=[
            UserConnections(ledger, connection_queries.live_connection_ids),
            UserOrders(ledger),
            UserDeliveries(ledger, erasure_places.queued_deliveries),
        ],
        deletion_targets=partial(deletion_targets, db),
    )
    user_queries = UserQueries(
        db,
        key_store,
        connection_queries.connected_sources,
        digest=recorded_digest,
        open_in_bulk=key_store.opener_on,
    )
    # Users rows written before revision 0015, which dropped their clear client_user_id:
    # sealed and digested again from their events (none on an up-to-date database).
    seal_client_user_ids(
        db,
        user_of=lambda user_id: _user_or_none(ledger, user_id),
        seal=key_store.seal,
        open_sealed=key_store.open,
        digest=lambda team_id, value: _digest_or_none(users, team_id, value),
    )
    # Records of old event versions whose successors seal their health facts, listed by
    # revision 0016: redacted into them, the chain kept (ADR 0028; none on an up-to-date
    # database), before anything reads. The client_user_id's old claims (revision 0046)
    # are named by the team's digest: a team created before digests gets its secret here
    # if the users rows above did not give it one.
    redaction_keys = RedactionKeys(
        sealer=partial(_sealer, key_store),
        digest=partial(_digest_or_none, users),
        team_of=partial(_team_of, ledger),
    )
    if redact_old_versions(
        db, Redactor(db, recorder, ledger.mapper, clock), ledger.mapper, redaction_keys
    ):
        leave_no_redacted_values(db)
    # Users rows an earlier start's redaction left a value sealed apart from the log's
    # (revision 0048): given the log's own where it is the same value, so that a rebuild
    # from the log makes them (none to do on an up-to-date database), after the records
    # are redacted.
    resync_sealed_values(
        db, user_of=lambda user_id: _user_or_none(ledger, user_id), open_sealed=key_store.open
    )
    # Orders rows written before revision 0019, which dropped their interpretation in
    # clear: sealed again from their Completed events, and digested (none to do on an
    # up-to-date database); then no page keeps the dropped values.
    if fill_interpretations(
        db,
        partial(_sealed_interpretation, ledger),
        key_store.open,
        interpretation_digests.digest,
    ):
        leave_no_redacted_values(db)
    # Connections rows written before revisions 0017 and 0022: their account and
    # provider digests (none to do on an up-to-date database).
    fill_connection_digests(
        db,
        key_store.open,
        AccountKeys(digest=account_digests.account, provider_digest=provider_digests.digest),
    )
    health_data = SqlHealthDataStore(db, key_store, clock)
    # Rows of health data and raw payloads written before revision 0039, their provider
    # and resource in clear: keyed under their users' keys (ADR 0047; none to do on an
    # up-to-date database), resumably, before anything reads or converts into them; then
    # both tables rewritten, so that no dead row keeps the names (PostgreSQL).
    key_stored_places(db, key_store)
    # Connections' tokens stored before revision 0047, their maker and OAuth client in
    # clear: sealed with them under their users' keys (none to do on an up-to-date
    # database), resumably, before anything reads the tokens; then the tables rewritten.
    seal_stored_grants(db, key_store)
    # Days stored before revision 0021, one sealed text each: written into their blocks
    # (ADR 0033; none to do on an up-to-date database), resumably, before anything reads.
    convert_stored_days(health_data)
    # Sleeps and workouts stored before revision 0030: indexed by their public ids
    # (docs/data.md#sessions; none to do on an up-to-date database), resumably.
    index_stored_sessions(db, key_store)
    pull_queries = PullQueries(
        db, settings.pull_lease, key_store.opener_on, provider_digests.digest
    )
    demo_provider = DemoProvider()
    oauth_clients = OAuthClients(ledger, key_store)
    oauth_http = httpx.Client(
        timeout=settings.oauth_timeout.total_seconds(),
        follow_redirects=False,
        verify=tls_context(),
    )
    makers = oauth_makers(
        catalog,
        service_clients={
            slug: OAuthClient(client.client_id, client.client_secret.get_secret_value())
            for slug, client in settings.oauth_clients.items()
        },
        custom_client=oauth_clients.custom,
        tokens=provider_tokens,
        http=oauth_http,
        clock=clock,
        maker_url=settings.oauth_maker_url,
        maker_urls=settings.oauth_maker_urls,
    )

    # Makers whose data API this deployment reads: their reader replaces the generic
    # OAuth adapter (docs/makers/), with what every reader is given the same way.
    def reader_of(slug: str) -> dict[str, Any]:
        return {
            "service_client": makers[slug].service_client,
            "custom_client": oauth_clients.custom,
            "tokens": provider_tokens,
            "http": oauth_http,
            "api_timeout": settings.maker_api_timeout.total_seconds(),
            "clock": clock,
            "maker_url": settings.oauth_maker_urls.get(slug, settings.oauth_maker_url),
        }

    if "oura" in makers:
        makers["oura"] = OuraReader(
            catalog["oura"],
            api_url=settings.oura_api_url,
            history_days=settings.oura_history_days,
            **reader_of("oura"),
        )
    if "withings" in makers:
        makers["withings"] = WithingsReader(
            catalog["withings"],
            api_url=settings.withings_api_url,
            history_days=settings.withings_history_days,
            # Withings Notify calls the makers' webhook route (adapters/http/maker_webhooks.py).
            callback_url=f"{settings.public_base_url.rstrip('/')}/makers/withings/webhook",
            **reader_of("withings"),
        )
    if "fitbit" in makers:
        makers["fitbit"] = FitbitReader(
            catalog["fitbit"],
            api_url=settings.fitbit_api_url,
            history_days=settings.fitbit_history_days,
            # Subscribed to Fitbit's notifications at sign-in once our subscriber is set up.
            subscribe=settings.fitbit_subscriber_verification_code is not None,
            **reader_of("fitbit"),
        )
    # Dexcom's API v3 serves the G6 generation and the G7 alike: both catalog entries
    # read it (docs/makers/dexcom.md).
    for slug in ("dexcom", "dexcom_v3"):
        if slug in makers:
            makers[slug] = DexcomReader(
                catalog[slug],
                api_url=settings.dexcom_api_url,
                history_days=settings.dexcom_history_days,
                **reader_of(slug),
            )

    # WHOOP's API v2 is read for the catalog's `whoop_v2` entry (docs/makers/whoop.md);
    # `whoop` (API v1, retired by WHOOP) keeps the generic OAuth adapter.
    if "whoop_v2" in makers:
        makers["whoop_v2"] = WhoopReader(
            catalog["whoop_v2"],
            api_url=settings.whoop_api_url,
            history_days=settings.whoop_history_days,
            **reader_of("whoop_v2"),
        )
    # Garmin delivers rather than being read: its reader asks for backfills and stores
    # what its pushes and pings bring (docs/makers/garmin.md).
    if "garmin" in makers:
        makers["garmin"] = GarminReader(
            catalog["garmin"],
            api_url=settings.garmin_api_url,
            history_days=settings.garmin_history_days,
            **reader_of("garmin"),
        )
    if "polar" in makers:

        def polar_account(connection_id: UUID) -> str | None:
            # The Polar user id (`x_user_id`) recorded, sealed, at the sign-in: every
            # AccessLink transaction's path names it.
            found = ledger.find(connection_id)
            if not isinstance(found, ConnectionAggregate) or found.sealed_external_user_id is None:
                return None
            opened = key_store.open(found.user_id, found.sealed_external_user_id)
            return opened if isinstance(opened, str) else None

        makers["polar"] = PolarReader(
            catalog["polar"],
            service_client=makers["polar"].service_client,
            custom_client=oauth_clients.custom,
            tokens=provider_tokens,
            http=oauth_http,
            api_timeout=settings.maker_api_timeout.total_seconds(),
            clock=clock,
            api_url=settings.polar_api_url,
            polar_user_of=polar_account,
            maker_url=settings.oauth_maker_urls.get("polar", settings.oauth_maker_url),
            history_days=settings.polar_history_days,
        )

    apple_health_kit = AppleHealthKit()
    # Makers whose people sign in with credentials through a link (ADR 0038): each is
    # its provider's adapter too.
    libreview = LibreViewReader(
        settings.libreview_api_url,
        oauth_http,
        provider_tokens,
        clock,
        settings.libreview_history_days,
        settings.maker_api_timeout.total_seconds(),
    )
    # FreeStyle Libre's sensors are read through the person's LibreView account.
    credential_makers = {"abbott_libreview": libreview, "freestyle_libre": libreview}

    def adapter_for(provider: str, demo: bool) -> ProviderAdapter:
        # A demo device, or the OAuth adapter of a maker whose endpoints the catalog
        # documents (ADR 0022); any other provider has no adapter here. Apple Health's
        # data comes by import only: its connection's syncs find nothing.
        if demo:
            return demo_provider
        if provider == "apple_health_kit":
            return apple_health_kit
        if provider in credential_makers:
            return credential_makers[provider]
        maker = makers.get(provider)
        if maker is None:
            raise LookupError(f"no provider adapter for {provider}")
        return maker

    # Connections' and feeds' stream ids, keyed by the user's data key (issue 29, ADR 0045).
    stream_ids = StreamIds(ledger, key_store)
    pulls = Pulls(
        ledger,
        clock,
        health_data,
        adapter_for,
        due_pulls=pull_queries.due_pulls,
        due_syncs=pull_queries.due_syncs,
        streams=stream_ids,
        policy=PullPolicy(
            retry_delays=tuple(settings.pull_retry_delays),
            lease=settings.pull_lease,
            sync_interval=settings.daily_sync_interval,
        ),
    )
    connections = Connections(ledger, key_store, clock, users, pulls)
    import_files = ImportFolder(
        import_folder(settings, db), max_xml_bytes=settings.apple_health_max_xml_bytes
    )
    imports = Imports(
        ledger,
        clock,
        health_data,
        key_store,
        import_files,
        apple_health_kit.availability,
        # What the catalog offers: those an export does not give are unavailable.
        catalog["apple_health_kit"].supported_resources,
        streams=stream_ids,
        policy=ImportPolicy(),
    )
    report_parsing = ReportParsing(
        ledger,
        clock,
        SqlReportUploads(db, key_store, clock),
        PdfReportReader(
            lab_catalog.find_markers(),
            lab_catalog.labs(),
            max_bytes=settings.lab_report_max_upload_bytes,
            max_pages=settings.lab_report_max_pages,
        ),
        partial(seal_if_kept, key_store),
    )
    maker_notice_queries = MakerNoticeQueries(db, account_digests)
    webhook_secrets = MakerWebhookSecrets(db, key_store, clock)
    maker_notices = MakerNotices(
        ledger,
        clock,
        pulls,
        connections_of=maker_notice_queries.connections_of,
        notice_name=account_digests.notice,
        due_notices=maker_notice_queries.due_notices,
        lease=settings.pull_lease,
        # Records a maker delivers with its notice (Garmin's pushes) are sealed into it.
        vault=key_store,
    )
    teams = TeamDirectory(
        ledger,
        clock,
        vault=key_store,
        users=users,
        live_user_ids=user_queries.live_user_ids,
        provider_slugs=provider_slugs(),
    )
    team_queries = TeamQueries(db)
    changes = None
    if not db.is_sqlite:
        # Keys verified once per process, forgotten at any key's revocation or team's
        # deletion: here when it commits, elsewhere when its NOTIFY arrives (ADR 0042).
        team_queries.verified_keys = VerifiedKeys(team_queries.read_api_key)
        recorder.add_commit_listener(
            team_queries.verified_keys.forget_after((TeamApiKey.Revoked, Team.Deleted))
        )
        # What other processes commit, heard on one connection (ADR 0042, ADR 0043).
        changes = ChangeListener(
            db.url, {KEYS_CHANNEL: team_queries.verified_keys, USER_DATA: known_reads}
        )
    event_types = webhook_event_types()
    webhook_queries = WebhookQueries(db, key_store.opener_on)
    deprecations = Deprecations(ledger, clock, deprecation_calendar())
    webhooks = WebhookEndpoints(
        ledger,
        clock,
        key_store,
        teams,
        event_types,
        own_addresses(settings),
        Destinations.parse(settings.webhook_allowed_destinations),
    )
    event_destination_queries = EventDestinationQueries(db)
    event_destinations = EventDestinations(
        ledger,
        clock,
        key_store,
        teams,
        event_types,
        webhooks.own_addresses,
        webhooks.destinations,
    )
    # Lab test orders (issue 14): their answers, the use cases, and the simulated lab that
    # moves sandbox orders (docs/labs.md#orders).
    lab_tests = LabTestQueries(db, lab_catalog)
    lab_policy = SandboxPolicy(
        step_delays=tuple(timedelta(seconds=s) for s in settings.lab_order_step_delays),
        failure_rate=settings.lab_order_failure_rate,
        cancellation_rate=settings.lab_order_cancellation_rate,
    )
    order_answers = OrderAnswers(
        lab_catalog,
        key_store,
        lab_policy,
        lag=settings.lab_order_poll_interval,
        base_url=settings.public_base_url,
    )
    lab_orders = LabOrders(
        ledger,
        key_store,
        clock,
        users,
        lab_catalog,
        lab_tests,
        lab_policy,
        due_orders=order_queries.due_orders,
    )
    unmatched_result_queries = UnmatchedResultQueries(db, key_store)
    unmatched_results = UnmatchedResults(
        ledger,
        key_store,
        clock,
        lab_orders,
        unmatched_result_queries.orders_of_team,
        unmatched_result_queries.undecided_of_team,
    )
    # A team's deletion resolves its results still waiting for a decision (ADR 0040).
    teams.changed_with_deletion = unmatched_results.resolved_by_team_deletion
    dispatcher = Dispatcher(
        ledger,
        recorder,
        clock,
        webhook_queries,
        webhooks,
        Payloads(
            db, ledger, key_store, health_data, describe, rules_at, order_answers=order_answers
        ),
        rules_at,
        timeout=settings.webhook_timeout,
        lease=settings.webhook_lease,
    )
    publisher = EventPublisher(
        dispatcher,
        event_destinations,
        DestinationLeases(db),
        clock,
        timeout=settings.webhook_timeout,
        lease=settings.webhook_lease,
    )
    # Deliveries to event destinations recorded before their cursors (revision 0051):
    # dropped as superseded, their messages published by the cursors (ADR 0055; none to
    # do on an up-to-date database).
    publisher.supersede_queued()
    health_data_queries = HealthDataQueries(
        db, key_store, describe, rules_at, clock, known=known_reads
    )
    erasure = ErasurePorts(
        users=users,
        teams=teams,
        clock=clock,
        deleted_teams_with_live_users=team_queries.deleted_teams_with_live_users,
        deleted_teams_with_undecided_results=unmatched_result_queries.deleted_teams_with_undecided,
        gone_users_with_live_connections=connection_queries.gone_users_with_live_connections,
        # Claimed batch by batch: the sweeps of several processes share the due users.
        claim_due_erasures=erasure_claims.claim,
        release_claims=erasure_claims.release,
        vacuum_key_store=db.vacuum_key_store,
        batch_size=settings.erasure_batch_size,
        # Cross-checked against the log: a removed or changed pending row (issue 30 §3).
        overdue_by_the_log=OverdueByTheLog(
            db, recorder, ledger.mapper, settings.erasure_claim_lease
        ).overdue,
        forget_in_memory=health_data_queries.forget,
        rewrite_erased_ids=partial(leave_no_erased_sessions, db),
    )

    def client_of(team_id: UUID, provider: str) -> str | None:
        # The client an imported grant is refreshed as: the team's own, else ours.
        maker = makers.get(provider)
        chosen = maker and (maker.custom_client(team_id, provider) or maker.service_client)
        return chosen.client_id if chosen else None

    bulk_operations = BulkOperations(
        connections, provider_tokens, client_of, lambda slug: catalog[slug].supported_resources
    )
    jobs = Jobs(
        sweep_erasures=partial(sweep_erasures, erasure),
        run_due_pulls=partial(run_due_pulls, pulls, maker_notices),
        sync_connected_feeds=partial(
            sync_connected_feeds, pulls, pull_queries.ingestion_bound_changes
        ),
        dispatch_webhooks=partial(dispatch_webhooks, dispatcher, publisher),
        gives_webhooks_work=dispatcher.gives_work,
        apply_cut_overs=partial(apply_cut_overs, deprecations, webhook_queries.applied_cut_overs),
        **master_key_rotation_job(key_store, settings.master_key_rotation_interval),
        sign_chain_head=chain.sign_moved_head,
        makes_head_signing_due=SigningTally(settings.chain_sign_every).committed,
        progress_lab_orders=partial(progress_lab_orders, lab_orders),
        revoke_grants=GrantRevocations(provider_tokens, adapter_for, clock).revoke_due,
        run_due_imports=partial(run_due_imports, imports),
        parse_lab_reports=report_parsing.run_due,
        unavailable=unavailable,
        run_due_bulk_operations=lambda: bulk_operations.run_due(team_queries.team_ids()),
        run_due_continuous_queries=ContinuousQueryRunner(
            ContinuousQueryStore(db),
            HealthQueries(HealthDataBatches(db, key_store), list(catalog), clock),
            key_store,
            team_queries.source_priorities,
            clock,
        ).run_due,
        **integrity_check_job(
            settings, db, chain, anchor_file, read_models, recorder, ledger, clock
        ),
    )
    link_tokens = LinkTokens(
        ledger,
        clock,
        users,
        connections,
        provider_slugs(),
        oauth_clients=oauth_clients,
        provider_tokens=provider_tokens,
    )
    if changes is not None:
        changes.start()
    return Service(
        settings=settings,
        clock=clock,
        db=db,
        recorder=recorder,
        ledger=ledger,
        key_store=key_store,
        read_models=read_models,
        users=users,
        teams=teams,
        user_queries=user_queries,
        team_queries=team_queries,
        cursor_secret=cursor_secret(chain.signing_key.private_bytes_raw()),
        catalog=catalog,
        connections=connections,
        connection_queries=connection_queries,
        link_tokens=link_tokens,
        bulk_operations=bulk_operations,
        credential_links=CredentialLinks(
            ledger,
            clock,
            key_store,
            link_tokens,
            {slug: entry.supported_resources for slug, entry in catalog.items()},
            credential_makers.__getitem__,
        ),
        link_token_queries=LinkTokenQueries(db, key_store.opener_on),
        health_data=health_data,
        health_data_queries=health_data_queries,
        pulls=pulls,
        pull_queries=pull_queries,
        event_types=event_types,
        webhooks=webhooks,
        webhook_queries=webhook_queries,
        deprecations=deprecations,
        dispatcher=dispatcher,
        redeliveries=Redeliveries(ledger, clock, webhook_queries.deliveries_since),
        event_destinations=event_destinations,
        event_destination_queries=event_destination_queries,
        publisher=publisher,
        jobs=jobs,
        chain=chain,
        provider_tokens=provider_tokens,
        oauth_makers=makers,
        oauth_http=oauth_http,
        lab_catalog=lab_catalog,
        lab_tests=lab_tests,
        lab_test_commands=LabTests(ledger, clock, lab_catalog),
        area_info=area_index,
        appointment_places=appointment_places,
        appointments=LabAppointments(ledger, key_store, clock, lab_orders, appointment_places),
        lab_orders=lab_orders,
        kit_registrations=KitRegistrations(lab_orders, order_queries.kit_order),
        order_queries=order_queries,
        order_answers=order_answers,
        unmatched_results=unmatched_results,
        result_test_harness=ResultTestHarness(
            ledger, clock, unmatched_results, lab_tests, lab_catalog.demo_lab_tests
        ),
        unmatched_result_queries=unmatched_result_queries,
        portal=Portal(
            users,
            clock,
            PortalLifetimes(
                launch=settings.portal_launch_lifetime,
                communications=settings.portal_communications_lifetime,
            ),
            order_owner=portal_queries.order_owner,
        ),
        portal_queries=portal_queries,
        maker_webhooks=maker_webhooks(settings, webhook_secrets.secret),
        maker_notices=maker_notices,
        maker_notice_queries=maker_notice_queries,
        maker_webhook_secrets=webhook_secrets,
        changes=changes,
        data_version=data_version,
        import_files=import_files,
        imports=imports,
        report_parsing=report_parsing,
    )


def seal_if_kept(key_store: KeyStore, user_id: UUID, value: Any) -> str | None:
    """`value` sealed with the user's data key, never minting one (None without a key)."""
    cipher = key_store.cipher(user_id)
    return None if cipher is None else cipher.seal(value)


def import_folder(settings: Settings, db: Database) -> Path:
    """Where uploads wait (HEALTHLEDGER_IMPORT_DIR), else beside a SQLite database, else
    under the user's data directory (XDG)."""
    if settings.import_dir is not None:
        return settings.import_dir
    if db.sqlite_file is not None:
        return db.sqlite_file.with_name(db.sqlite_file.name + ".imports")
    configured = os.environ.get("XDG_DATA_HOME", "")
    base = Path(configured) if configured and os.path.isabs(configured) else None
    return (base or Path.home() / ".local" / "share") / "healthledger" / "imports"


def master_key_rotation_job(
    key_store: KeyStore, interval: timedelta | None
) -> dict[str, Callable[[], int]]:
    """The scheduler's master key rotation (`Jobs.rotate_master_key`), if it has an
    interval (HEALTHLEDGER_MASTER_KEY_ROTATION_INTERVAL, 0 or off: none)."""
    if interval is None or key_store.source is None:
        return {}

    def rotate_if_due(due_after: timedelta) -> int | None:
        rotation = key_store.rotate_master_key(due_after=due_after)
        return None if rotation is None else rotation.keys_rewrapped

    ports = KeyRotationPorts(
        interval=interval,
        is_due=key_store.rotation_due,
        rotate_if_due=rotate_if_due,
        unattended=key_store.source.rotates_unattended,
        source=key_store.source.name,
    )
    return {"rotate_master_key": partial(rotate_master_key_if_due, ports)}


def integrity_check_job(
    settings: Settings,
    db: Database,
    chain: Chain,
    anchor_file: Path,
    read_models: ReadModels,
    recorder: LedgerRecorder,
    ledger: Ledger,
    clock: Clock,
) -> dict[str, Callable[[], int]]:
    """The scheduler's integrity check (`Jobs.check_integrity`, issue 30 §3), if it has an
    interval (HEALTHLEDGER_INTEGRITY_CHECK_INTERVAL, 0 or off: none)."""
    interval = settings.integrity_check_interval
    if interval is None:
        return {}
    ports = IntegrityPorts(
        interval=interval,
        clock=clock,
        last_checked_at=LatestCheck(db, clock, interval),
        run_checks=partial(
            run_integrity_checks, chain, anchor_file, read_models, recorder, ledger.mapper
        ),
        checks=IntegrityChecks(ledger, clock),
    )
    return {"check_integrity": partial(check_integrity_if_due, ports)}


def start_scheduler(service: Service) -> LedgerScheduler:
    """Run the service's jobs at their intervals, and wake its workers on every commit of
    events in this process, whoever made it (HTTP, the CLI, an embedding application)."""
    settings = service.settings
    scheduler = LedgerScheduler(
        service.jobs,
        Intervals(
            erasure_sweep=settings.erasure_sweep_interval,
            pull_worker=settings.pull_poll_interval,
            webhook_dispatcher=settings.webhook_poll_interval,
            daily_sync=settings.daily_sync_sweep_interval,
            deprecation_cut_overs=settings.deprecation_sweep_interval,
            master_key_rotation=settings.master_key_rotation_interval,
            chain_sign=settings.chain_sign_interval,
            sandbox_lab=settings.lab_order_poll_interval,
            integrity_check=settings.integrity_check_interval,
            import_worker=settings.import_worker_interval,
        ),
    )
    recorder = service.recorder
    recorder.add_commit_listener(scheduler.committed)
    # Once shut down, its workers take no more wake-ups: stop listening with them.
    scheduler.add_listener(
        lambda _event: recorder.remove_commit_listener(scheduler.committed),
        EVENT_SCHEDULER_SHUTDOWN,
    )
    scheduler.start()
    return scheduler
