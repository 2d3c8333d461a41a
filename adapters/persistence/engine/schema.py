"""Every table, in one SQLAlchemy MetaData: the event log, snapshots, the key store,
and the read models (which `healthledger rebuild` drops and rebuilds from the log)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Date,
    DateTime,
    Dialect,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    Uuid,
    false,
)


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on both backends (SQLite keeps no offset, so we add it back)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored; use UTC")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


metadata = MetaData()

# -- the event store -----------------------------------------------------------------

stored_events = Table(
    "stored_events",
    metadata,
    # The notification id orders the whole log (the outbox that followers track).
    Column(
        "notification_id",
        BigInteger().with_variant(Integer, "sqlite"),
        primary_key=True,
        autoincrement=True,
    ),
    Column("originator_id", Uuid, nullable=False),
    Column("originator_version", Integer, nullable=False),
    Column("topic", Text, nullable=False),
    Column("state", LargeBinary, nullable=False),
    # The timestamp index for time travel, written in the same row as the event.
    Column("timestamp", UTCDateTime, nullable=False),
    # The hash chain over the whole log (ADR 0015, eventstore/chain.py): the row's place
    # (1, 2, 3... in notification order) and its link hash, written with the row.
    # Nullable only because a row without them is what tampering leaves, which `verify`
    # must be able to read and name.
    Column("chain_position", BigInteger),
    Column("chain_hash", LargeBinary),
    UniqueConstraint("originator_id", "originator_version", name="uq_stored_events_version"),
    Index("ix_stored_events_originator_time", "originator_id", "timestamp"),
    # Unique: two records never share a place. It also finds the head (the highest).
    Index("ix_stored_events_chain_position", "chain_position", unique=True),
    sqlite_autoincrement=True,
)

# Signed heads of the chain: the service's Ed25519 signature of a position and the
# chain's hash there, at a time (eventstore/chain.py). The key itself is never here.
chain_heads = Table(
    "chain_heads",
    metadata,
    Column("position", BigInteger, primary_key=True, autoincrement=False),
    Column("chain_hash", LargeBinary, nullable=False),
    Column("signed_at", UTCDateTime, nullable=False),
    Column("signature", LargeBinary, nullable=False),
    # The first 16 hex digits of SHA-256 of the raw public key.
    Column("key_id", Text, nullable=False),
    Column("public_key", LargeBinary, nullable=False),
)

# Redactions of stored events (ADR 0028): per redacted record (by its chain position),
# what its link covers (its original topic and state digest), what it holds now (its new
# topic and state digest), and the position of the chained redaction record that says
# so. An index for `verify`: every entry must agree with the redaction record it names.
chain_redactions = Table(
    "chain_redactions",
    metadata,
    Column("position", BigInteger, primary_key=True, autoincrement=False),
    Column("original_topic", Text, nullable=False),
    Column("original_digest", LargeBinary, nullable=False),
    Column("redacted_topic", Text, nullable=False),
    Column("redacted_digest", LargeBinary, nullable=False),
    Column("redaction_position", BigInteger, nullable=False),
)

# Records the service's start has to redact (ADR 0028): the positions of the records of
# an old version whose successor seals its health facts, listed by the revision that
# brought the successor; each row goes with its record's redaction, in its transaction.
pending_redactions = Table(
    "pending_redactions",
    metadata,
    Column("position", BigInteger, primary_key=True, autoincrement=False),
)

snapshots = Table(
    "snapshots",
    metadata,
    Column("originator_id", Uuid, primary_key=True),
    Column("originator_version", Integer, primary_key=True),
    Column("topic", Text, nullable=False),
    Column("state", LargeBinary, nullable=False),
)

tracking = Table(
    "tracking",
    metadata,
    Column("application_name", String(64), primary_key=True),
    Column("notification_id", BigInteger, primary_key=True),
)

# -- the key store (outside the event log; a row per user that has personal data) -----

user_data_keys = Table(
    "user_data_keys",
    metadata,
    Column("user_id", Uuid, primary_key=True),
    # The user's AES-256 data key, wrapped (AES-GCM) by the master key, user id as AAD.
    Column("wrapped_key", LargeBinary, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)

# One row (revision 0050): the first day whose summary ids are keyed for users whose data
# keys predate keyed ids (ADR 0057), a week after the revision ran.
keyed_ids_cut_over = Table(
    "keyed_ids_cut_over",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("keyed_from", Date, nullable=False),
)

# One row per rotation of the master key (`KeyStore.rotate_master_key`): the id of the
# key it put in place (never the key), which tells a process holding an older key to
# read it again, and when: an erasure's horizon is the first rotation after it.
master_key_rotations = Table(
    "master_key_rotations",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("rotated_at", UTCDateTime, nullable=False),
    Column("keys_rewrapped", Integer, nullable=False),
    # The first 16 hex digits of HMAC-SHA256(key, "healthledger-master-key-id").
    Column("master_key_id", String(16), nullable=False),
)

# -- read models ---------------------------------------------------------------------

users = Table(
    "users",
    metadata,
    Column("user_id", Uuid, primary_key=True),
    Column("team_id", Uuid, nullable=False),
    Column("status", String(20), nullable=False),
    Column("created_on", UTCDateTime, nullable=False),
    # The client_user_id is never here in clear (revision 0015, ADR 0017): sealed with the
    # user's data key (opened to answer, so it goes with the key), and the team's keyed
    # digest of it (HMAC-SHA256 under the team's secret, as the claims name it) to find a
    # user by the value. NULL only until `seal_client_user_ids` converts a row written
    # before (and the digest of a user of a deleted team, whose secret is gone).
    Column("sealed_client_user_id", Text),
    Column("client_user_id_digest", String(64)),
    # The fallback time zone, sealed with the user's data key as its events hold it
    # (revision 0042; in clear before): where the person lives goes with the key.
    Column("sealed_fallback_time_zone", Text),
    Column("fallback_time_zone_source", String(64)),
    Column("fallback_time_zone_updated_at", UTCDateTime),
    Column("sealed_birth_date", Text),
    Column("birth_date_source", String(64)),
    Column("birth_date_updated_at", UTCDateTime),
    Column("ingestion_start", Date),
    Column("ingestion_end", Date),
    Column("sealed_demographics", Text),
    Column("demographics_updated_at", UTCDateTime),
    Column("deleted_at", UTCDateTime),
    Column("erasure_due_at", UTCDateTime),
    Column("version", Integer, nullable=False),
    # The environment of the key that created the user: its webhooks go to that
    # environment's endpoints (migration 0002).
    Column("environment", String(16)),
    Index("ix_users_team_client_user_id_digest", "team_id", "client_user_id_digest"),
    # Status stays out of the index: delete and undo then move no index entry.
    Index("ix_users_team_created", "team_id", "created_on"),
    # Keyed by user_id itself (no hidden rowid b-tree beside the primary key): one
    # b-tree fewer to write on every command, on SQLite.
    sqlite_with_rowid=False,
)

# The source of truth for erasure deadlines: the sweep selects what is due from here.
pending_erasures = Table(
    "pending_erasures",
    metadata,
    Column("user_id", Uuid, primary_key=True),
    Column("due_at", UTCDateTime, nullable=False, index=True),
    # Until when a sweeping process has claimed the erasure (migration 0012): the others
    # leave it alone till then. Not projected (a rebuild clears it, which costs only a
    # shared batch); the erasure deletes the row, claim and all.
    Column("claimed_until", UTCDateTime),
    sqlite_with_rowid=False,
)

organizations = Table(
    "organizations",
    metadata,
    Column("org_id", Uuid, primary_key=True),
    Column("name", String(255), nullable=False),
    Column("created_on", UTCDateTime, nullable=False),
)

teams = Table(
    "teams",
    metadata,
    Column("team_id", Uuid, primary_key=True),
    Column("org_id", Uuid, nullable=False, index=True),
    Column("name", String(255), nullable=False),
    # The name case-folded (str.casefold) for search_query, on every backend alike.
    Column("name_folded", String(255), nullable=False),
    Column("region", String(8), nullable=False),
    Column("features", JSON, nullable=False),
    # Per environment: {"sandbox": {...}, "production": {...}} (brand information...).
    Column("settings", JSON, nullable=False),
    Column("created_on", UTCDateTime, nullable=False),
    Column("deleted_at", UTCDateTime),
    # Per kind of data, the providers in the order they win (Team.SourcePrioritiesChanged;
    # null: none set).
    Column("source_priorities", JSON),
    Index("ix_teams_org_created", "org_id", "created_on", "team_id"),
)

team_api_keys = Table(
    "team_api_keys",
    metadata,
    Column("key_id", Uuid, primary_key=True),
    Column("team_id", Uuid, nullable=False, index=True),
    Column("environment", String(16), nullable=False),
    Column("region", String(8), nullable=False),
    Column("key_hash", String(64), nullable=False),
    Column("created_on", UTCDateTime, nullable=False),
    Column("revoked_at", UTCDateTime),
)

connections = Table(
    "connections",
    metadata,
    Column("connection_id", Uuid, primary_key=True),
    Column("user_id", Uuid, nullable=False, index=True),
    Column("team_id", Uuid, nullable=False),
    Column("status", String(20), nullable=False),
    Column("created_on", UTCDateTime, nullable=False),
    # The connection's provider and resource availability are health facts (ADR 0032):
    # held only as the log holds them, sealed with the user's key. `sealed_facts` is the
    # Created event's (the provider and the first availability), `sealed_availability`
    # the last Reconnected's (NULL before one). `provider_digest` is the service's keyed
    # digest of (team, provider) (keys/connection_providers.py): what a filter by
    # provider compares.
    Column("sealed_facts", Text),
    Column("sealed_availability", Text),
    Column("provider_digest", String(64)),
    Column("error_details", JSON),
    Column("sealed_external_user_id", Text),
    Column("demo", Boolean, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    # The service's keyed digest of (provider, the maker's account id): what a maker's
    # webhook finds the connection by (keys/maker_accounts.py, ADR 0031). NULL while the
    # account id is unknown, or until the start fills a row written before revision 0017.
    Column("account_digest", String(64)),
    Index("ix_connections_account_digest", "account_digest"),
    Index("ix_connections_provider_digest", "provider_digest"),
)

# The makers' notices not handled yet (issue 28): the pull worker's queue. A row is
# inserted when a notice is recorded and deleted when it is handled; `due_at` is when a
# worker may take it (its receipt, or the end of a taken notice's lease). No user_id: a
# notice of an erased user is taken, finds its connection gone, and leaves. No provider
# either: which maker a person uses is sealed in the receipt (ADR 0032).
maker_notices = Table(
    "maker_notices",
    metadata,
    Column("notice_id", Uuid, primary_key=True),
    Column("connection_id", Uuid, nullable=False),
    Column("received_at", UTCDateTime, nullable=False),
    Column("due_at", UTCDateTime, nullable=False, index=True),
)

management_keys = Table(
    "management_keys",
    metadata,
    Column("key_id", Uuid, primary_key=True),
    Column("org_id", Uuid, nullable=False, index=True),
    Column("role", String(16), nullable=False),
    Column("team_ids", JSON, nullable=False),
    Column("label", String(255), nullable=False),
    Column("key_hash", String(64), nullable=False),
    Column("created_on", UTCDateTime, nullable=False),
    Column("revoked_at", UTCDateTime),
)

custom_credentials = Table(
    "custom_credentials",
    metadata,
    # The aggregate's id (derived from team and provider): later events carry only it.
    Column("credentials_id", Uuid, primary_key=True),
    Column("team_id", Uuid, nullable=False),
    Column("provider", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("client_id", String(512)),
    # Never returned by any read; kept here only so that the provider adapters can use it.
    Column("sealed_client_secret", Text),
    Column("updated_at", UTCDateTime, nullable=False),
    UniqueConstraint("team_id", "provider", name="uq_custom_credentials_team_provider"),
)

# Our webhooks at the makers that give a signing key only when the webhook is made
# (Polar): one row per maker, the key sealed under a service key
# (adapters/persistence/keys/maker_webhook_secrets.py).
maker_webhook_secrets = Table(
    "maker_webhook_secrets",
    metadata,
    Column("provider", String(64), primary_key=True),
    Column("webhook_id", String(255), nullable=False),
    Column("sealed_secret", Text, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)

# Link tokens, found by the id in their text; the text itself is only ever hashed.
link_tokens = Table(
    "link_tokens",
    metadata,
    Column("token_id", Uuid, primary_key=True),
    Column("team_id", Uuid, nullable=False),
    # Indexed: a user's erasure deletes (and counts) its tokens.
    Column("user_id", Uuid, nullable=False, index=True),
    Column("environment", String(16), nullable=False),
    Column("token_hash", String(64), nullable=False),
    # The redirect_url, which teams make name the person (`?user=ada@example.org`), and
    # the maker the user is linking (`provider`, `filter_on_providers`: a glucose monitor
    # says the person is diabetic): held only as the log holds them, sealed with the
    # user's key (the Issued event's `sealed_facts`, ADR 0032; revisions 0043, 0044). No
    # read selects tokens by their maker: the row is found by its id, then opened.
    Column("sealed_facts", Text),
    Column("on_error", String(16)),
    Column("on_close", String(16)),
    Column("issued_at", UTCDateTime, nullable=False),
    Column("consumed_at", UTCDateTime),
    # The maker the token connected, as the Consumed event's `sealed_facts` hold it
    # (revision 0044).
    Column("sealed_consumption", Text),
)

# One row per (connection, resource): the state of its latest historical pull, the span of
# data it has, and when a worker or the daily sync should next look at it. `due_at` is
# what the pull worker selects on: the scheduled time, a retry's time, or the end of a
# running attempt's lease (a worker that died mid-pull is taken over then).
resource_feeds = Table(
    "resource_feeds",
    metadata,
    Column("feed_id", Uuid, primary_key=True),
    Column("connection_id", Uuid, nullable=False),
    Column("user_id", Uuid, nullable=False, index=True),
    Column("team_id", Uuid, nullable=False),
    # The feed's provider and resource, sealed with the user's key: its Created event's
    # `sealed_facts` (ADR 0032).
    Column("sealed_facts", Text),
    Column("status", String(16)),
    # The current pull's window (which days the person had data to pull), sealed with
    # the user's key: its PullScheduled event's `sealed_facts` (revision 0034).
    Column("sealed_window", Text),
    Column("scheduled_at", UTCDateTime),
    Column("started_at", UTCDateTime),
    Column("ended_at", UTCDateTime),
    Column("days_with_data", Integer, nullable=False, default=0),
    Column("release", String(16)),
    Column("trace_id", String(32)),
    Column("error_code", String(64)),
    Column("attempts", Integer, nullable=False, default=0),
    Column("due_at", UTCDateTime),
    Column("last_attempt_at", UTCDateTime),
    Column("last_attempt_status", String(16)),
    # No data span here (revision 0034 dropped `oldest_day` and `newest_day`): the days
    # with data are sealed in the feed's events, and the introspection reads them from
    # the feed's aggregate; the scheduler needs only `due_at` and `synced_at`.
    Column("synced_at", UTCDateTime),
    Column("version", Integer, nullable=False),
    Index("ix_resource_feeds_due", "due_at"),
    Index("ix_resource_feeds_synced", "status", "synced_at"),
)

# The pulled data itself: not a read model (it is not derived from the log, and a rebuild
# leaves it alone). One row per version of a block: a calendar month of one (user,
# provider, resource), its days' data in columns (`health_data/blocks.py`, ADR 0033),
# sealed under the user's key as bytes. `replaced_at` is NULL for the current version;
# an earlier one is kept, with the time it was replaced, when a sync changed a day it
# held (reads as of an instant), up to a bound (compaction). `began_at` is when the
# version became the current one (NULL for a first version written before it was kept).
# `days` counts the stored days the version holds. `provider` and `resource` hold keyed
# digests of the names under the user's key (ADR 0047: what was pulled from whom is a
# health fact), the block's seal bound to the names. Erasure deletes every version in the
# transaction that destroys the key.
health_data = Table(
    "health_data",
    metadata,
    Column("user_id", Uuid, primary_key=True),
    Column("provider", String(64), primary_key=True),
    Column("resource", String(64), primary_key=True),
    Column("period", Date, primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("sealed", LargeBinary, nullable=False),
    Column("days", Integer, nullable=False),
    Column("written_at", UTCDateTime, nullable=False),
    Column("replaced_at", UTCDateTime),
    Column("began_at", UTCDateTime),
    Index("ix_health_data_user_resource", "user_id", "resource", "period"),
)

# Where a sleep's or a workout's public id leads (revision 0030, docs/data.md#sessions): a
# summary's id is a uuid5 of (user, provider, resource, key) and cannot be turned back, so
# the store writes a row per session in the transaction that stores its day. The user and
# its team in clear (the cross-team 404 and the erasure find the rows by them); the
# provider, resource, day and session key sealed under the user's key (issue 29: what was
# pulled from whom is a health fact), bound to the session id. Erasure deletes the rows.
session_index = Table(
    "session_index",
    metadata,
    Column("session_id", Uuid, primary_key=True),
    Column("user_id", Uuid, nullable=False, index=True),
    Column("team_id", Uuid, nullable=False),
    Column("sealed", LargeBinary, nullable=False),
)

# Users whose sessions were stored before revision 0030 and are not indexed yet: listed by
# the migration (it has no key to open their blocks), indexed and deleted at the service's
# start, one user a transaction (`health_data/sessions.py`); empty from then on.
session_index_backfill = Table(
    "session_index_backfill",
    metadata,
    Column("user_id", Uuid, primary_key=True),
)

# Users whose `health_data` and `raw_payloads` rows were written before revision 0039,
# with their provider and resource in clear: listed by the migration (it has no key),
# their names replaced by keyed digests (ADR 0047) and unlisted at the service's start,
# one user a transaction (`health_data/places.py`); empty from then on.
place_digest_backfill = Table(
    "place_digest_backfill",
    metadata,
    Column("user_id", Uuid, primary_key=True),
)

# The makers' own payloads as received (issue 34, `*.get_raw`; docs/data.md#raw-payloads,
# ADR 0046): a row per pull of one (user, provider, resource) and window of days, its
# answers sealed under the user's key as bytes (`payload`) and its window sealed apart
# (`window`: the store opens only these to find the pulls a new one replaces). `slot` is
# a keyed digest of the window (the same window replaces its own row, and says nothing
# without the key); `provider` and `resource` keyed digests, as health_data's, and no
# month in clear (revision 0039, ADR 0047). Erasure deletes the rows.
raw_payloads = Table(
    "raw_payloads",
    metadata,
    Column("user_id", Uuid, primary_key=True),
    Column("provider", String(64), primary_key=True),
    Column("resource", String(64), primary_key=True),
    Column("slot", String(64), primary_key=True),
    Column("fetched_at", UTCDateTime, nullable=False),
    Column("window", LargeBinary, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Index("ix_raw_payloads_user_resource", "user_id", "resource"),
)

# Stored days as revisions before 0020 kept them (one sealed base64 text per day): the
# service's start converts them into blocks and deletes them (`health_data/conversion.py`);
# empty from then on, and nothing else reads or writes it.
health_data_days = Table(
    "health_data_days",
    metadata,
    Column("user_id", Uuid, primary_key=True),
    Column("provider", String(64), primary_key=True),
    Column("resource", String(64), primary_key=True),
    Column("day", Date, primary_key=True),
    Column("sealed", Text, nullable=False),
    Column("digest", String(64), nullable=False),
    Column("stored_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)

# The maker's tokens of each OAuth connection (ADR 0022): not a read model (the log never
# holds them, and a rebuild leaves them alone). Sealed under the user's key together with
# the maker's slug and the OAuth client that obtained them (a refresh authenticates as
# it), in `sealed_grant`: both name the maker, a health fact (revision 0047; no read
# selects by them). Replaced by a refresh (`version` guards it), deleted when the
# connection is connected again, and by the user's erasure. `expires_at` is the access
# token's. A deregistration sets
# `revoke_due_at`: the tokens are then only owed a revocation at the maker, and deleted
# once it is done or given up (domain/connections/revocation.py; `revoke_attempts`).
provider_tokens = Table(
    "provider_tokens",
    metadata,
    Column("connection_id", Uuid, primary_key=True),
    Column("user_id", Uuid, nullable=False, index=True),
    Column("team_id", Uuid, nullable=False),
    Column("sealed_grant", Text, nullable=False),
    Column("expires_at", UTCDateTime),
    Column("version", Integer, nullable=False),
    Column("stored_at", UTCDateTime, nullable=False),
    Column("refreshed_at", UTCDateTime),
    Column("revoke_due_at", UTCDateTime, index=True),
    Column("revoke_attempts", Integer, nullable=False, default=0, server_default="0"),
)

# The makers and OAuth clients of `provider_tokens` rows written before revision 0047,
# which held them in clear: moved here by the migration (it has no key to seal with),
# sealed into their rows' `sealed_grant` and deleted at the service's start, before
# anything reads the tokens (`keys/provider_tokens.py`, `seal_stored_grants`); empty
# from then on. No user id: a row is its connection's.
provider_token_backfill = Table(
    "provider_token_backfill",
    metadata,
    Column("connection_id", Uuid, primary_key=True),
    Column("provider", String(64), nullable=False),
    Column("client_id", String(512), nullable=False),
)

# The users whose rows an earlier start left sealed values of under another nonce than
# the log's (revision 0048: a redacted Created, change of client_user_id or of settings in
# their stream): the start gives each row the log's own where it opens to the same value,
# and deletes the listing (`projections/users.py`, `resync_sealed_values`); empty from then
# on. Not a read model: a rebuild leaves it alone.
user_row_resyncs = Table(
    "user_row_resyncs",
    metadata,
    Column("user_id", Uuid, primary_key=True),
)

# Lab test orders (issue 14), one row per order: its status now, the statuses it had
# (`events`: a line `<instant>\t<status>` each, appended by SQL), and what the answers
# render. The patient's details and address, the
# results and their interpretation are sealed with the user's key; the interpretation is
# also kept as the service's keyed digest of (team, value), which listings filter on
# (keys/order_interpretations.py, issue 29). `due_at` is when the simulated lab takes a
# sandbox order's next step (what its sweep selects on). Deleted, and counted, by the
# user's erasure.
# A team's lab tests (domain/labs/lab_tests.py). The shared demo tests are reference data,
# not rows. Nothing personal: a lab test is about markers, not about a user.
lab_tests = Table(
    "lab_tests",
    metadata,
    Column("lab_test_id", Uuid, primary_key=True),
    Column("team_id", Uuid, nullable=False),
    Column("name", String(255), nullable=False),
    Column("description", Text),
    Column("method", String(32), nullable=False),
    Column("lab_id", Integer, nullable=False),
    Column("marker_ids", JSON, nullable=False),
    Column("fasting", Boolean, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    # Whether it takes new orders, and when its name or state last changed (its creation
    # until then): LabTest.Updated, revision 0029.
    Column("active", Boolean, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    # A team's list, oldest first.
    Index("ix_lab_tests_team_created", "team_id", "created_at", "lab_test_id"),
)

orders = Table(
    "orders",
    metadata,
    Column("order_id", Uuid, primary_key=True),
    Column("team_id", Uuid, nullable=False),
    Column("user_id", Uuid, nullable=False, index=True),
    Column("environment", String(16), nullable=False),
    # The test ordered (its id, name and markers), sealed with the user's key (issue 29):
    # NULL only in a row of before revision 0016 until the start's redaction fills it.
    Column("sealed_lab_test", Text),
    Column("lab_id", Integer, nullable=False),
    Column("collection_method", String(32), nullable=False),
    # The top-level status (received, collecting_sample...) and the full one
    # (received.testkit.ordered...).
    Column("status", String(32), nullable=False),
    Column("detailed_status", String(96), nullable=False),
    # The results' interpretation sealed, and its keyed digest (NULL before the results,
    # and in a row of before revision 0019 until the start fills them).
    Column("sealed_interpretation", Text),
    Column("interpretation_digest", String(64)),
    Column("sample_id", String(32)),
    Column("sealed_patient_details", Text, nullable=False),
    Column("sealed_patient_address", Text, nullable=False),
    Column("sealed_results", Text),
    Column("events", Text, nullable=False),
    Column("due_at", UTCDateTime),
    # The day the order is to be dispatched to the lab (NULL: at once; revision 0033).
    Column("activate_by", Date),
    # As placed (revision 0041): a priority (STAT) order, in clear; its diagnoses (a list
    # of ICD-10-CM codes) and the team's passthrough string, sealed (NULL: none sent).
    Column("priority", Boolean, nullable=False, server_default=false()),
    Column("sealed_icd_codes", Text),
    Column("sealed_passthrough", Text),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("version", Integer, nullable=False),
    Index("ix_orders_team_created", "team_id", "created_at", "order_id"),
    Index("ix_orders_due", "due_at"),
    # A test kit's registration finds its order by sample id (revision 0031).
    Index("ix_orders_team_sample", "team_id", "sample_id"),
)

# Lab results that arrived without an order (domain/labs/unmatched_results.py), one row
# per result, for the team's listing: its state, decision code, lab and times in clear;
# its contents (the patient, the sample id, the values) sealed with the result's own key
# (ADR 0040), which listings open to search; NULL once the result is accepted or
# rejected (its key destroyed). No user owns a row: its candidates are in its events.
unmatched_results = Table(
    "unmatched_results",
    metadata,
    Column("result_id", Uuid, primary_key=True),
    Column("team_id", Uuid, nullable=False),
    Column("environment", String(16), nullable=False),
    Column("status", String(32), nullable=False),
    Column("decision_code", String(64), nullable=False),
    Column("lab_id", Integer, nullable=False),
    Column("sealed_result", Text),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("version", Integer, nullable=False),
    # A team's listing, newest first.
    Index("ix_unmatched_results_team_created", "team_id", "created_at", "result_id"),
)

# Webhook endpoints of a team's environment. The secrets are sealed with the team's data
# key (never in clear); the previous one signs beside the current one until it expires.
webhook_endpoints = Table(
    "webhook_endpoints",
    metadata,
    Column("endpoint_id", Uuid, primary_key=True),
    Column("team_id", Uuid, nullable=False),
    Column("environment", String(16), nullable=False),
    Column("url", Text, nullable=False),
    Column("description", Text, nullable=False),
    Column("filter_types", JSON, nullable=False),
    Column("disabled_reason", String(64)),
    Column("sealed_secret", Text, nullable=False),
    Column("sealed_previous_secret", Text),
    Column("previous_secret_expires_at", UTCDateTime),
    Column("created_on", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Index("ix_webhook_endpoints_team_env", "team_id", "environment", "created_on"),
)

# The deprecation cut-overs this deployment has applied: the scheduler's source of truth
# for what is still to apply (never APScheduler's job store).
deprecation_cut_overs = Table(
    "deprecation_cut_overs",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("effective_on", Date, nullable=False),
    Column("what", Text, nullable=False),
    Column("applied_at", UTCDateTime, nullable=False),
    Column("actor", String(128), nullable=False),
)

# One row per delivery (public event x endpoint): what the sender selects (`status`,
# `next_attempt_at`), what a redelivery selects (`endpoint_id`, `source_timestamp`), and
# what tells an endpoint failing too long (`first_failure_at`, `succeeded_at`).
webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("delivery_id", Uuid, primary_key=True),
    Column("endpoint_id", Uuid, nullable=False),
    Column("team_id", Uuid, nullable=False),
    # None: a team-level event type (about the team environment, no user; issue 35).
    Column("user_id", Uuid),
    # The event type as the log holds it (ADR 0028): sealed with the user's key, and in
    # clear only when it says nothing of a person's health (a user's lifecycle, `user.*`,
    # which the deletion report reads after the erasure; a team-level type).
    Column("sealed_facts", Text),
    Column("lifecycle_type", String(128)),
    Column("message_id", String(64), nullable=False),
    Column("source_id", Uuid, nullable=False),
    Column("source_version", Integer, nullable=False),
    Column("source_timestamp", UTCDateTime, nullable=False),
    Column("day", Date),
    Column("log_position", BigInteger, nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", UTCDateTime),
    Column("last_attempt_at", UTCDateTime),
    Column("last_status_code", Integer),
    Column("first_failure_at", UTCDateTime),
    Column("succeeded_at", UTCDateTime),
    Column("created_at", UTCDateTime, nullable=False),
    Column("version", Integer, nullable=False),
    Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),
    Index("ix_webhook_deliveries_endpoint", "endpoint_id", "source_timestamp"),
    # A user's erasure drops (and counts) the deliveries still queued about it.
    Index("ix_webhook_deliveries_user", "user_id", "status"),
    # A destination's queue, in publishing order (issue 35).
    Index("ix_webhook_deliveries_queue", "endpoint_id", "status", "log_position"),
)

# A sender's claim on a due delivery (ADR 0019): taken before the POST, ended when its
# attempt is recorded, or taken over by another sender once `expires_at` has passed (a
# process that died mid-send). Not a read model: the log never holds leases, and a
# rebuild leaves them alone.
webhook_delivery_leases = Table(
    "webhook_delivery_leases",
    metadata,
    Column("delivery_id", Uuid, primary_key=True),
    # The sending process's name (`Dispatcher.holder`: pid and a random part).
    Column("holder", String(64), nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
)

# Event destinations (issue 35): a team's brokers. A deleted destination keeps its row
# (`deleted_at`): the webhook sender tells the deliveries to brokers from those to
# endpoints by it, and the publisher drops what a deleted one still had queued.
event_destinations = Table(
    "event_destinations",
    metadata,
    Column("destination_id", Uuid, primary_key=True),
    Column("team_id", Uuid, nullable=False),
    Column("environment", String(16), nullable=False),
    Column("kind", String(16), nullable=False),
    # [{prefix, target}]: which events it receives (the longest matching prefix's target).
    Column("routes", JSON, nullable=False),
    Column("paused_reason", String(64)),
    Column("created_on", UTCDateTime, nullable=False),
    Column("deleted_at", UTCDateTime),
    Index("ix_event_destinations_team_env", "team_id", "environment", "created_on"),
)

# A publisher's claim on a destination (not a read model): one process publishes to a
# destination at a time, so that its messages go out once each and in order per user.
event_destination_leases = Table(
    "event_destination_leases",
    metadata,
    Column("destination_id", Uuid, primary_key=True),
    Column("holder", String(64), nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
)

# Each event destination's cursor over the log (ADR 0055): a read model of its
# `PublishRound` streams (how many rounds were started, the failures since the last
# success). Its position is the event store's `tracking` row named `tracking_name`,
# written in the transaction of each round that moves it (the followers' exactly-once
# guard), and alone past a stretch of the log that held nothing for it; none yet: the
# cursor starts at the log position of the destination's creation.
event_destination_cursors = Table(
    "event_destination_cursors",
    metadata,
    Column("destination_id", Uuid, primary_key=True),
    Column("tracking_name", String(64), nullable=False),
    Column("rounds", Integer, nullable=False),
    # The message ids past the position that a failed round had acknowledged.
    Column("acknowledged_past", JSON, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", UTCDateTime, nullable=False),
    Column("failing_since", UTCDateTime),
    Column("last_error", String(128)),
)

# Which streams belong to which user: the user's own, its claim, connections, pulls
# (resource feeds), link tokens and the webhook deliveries about it (see
# projections/stream_owners.py). Ids only, no personal value: a user's erasure leaves
# these rows, so that its audit still finds every stream that was its; a rebuild makes
# them again from the log. One row per (user, stream), keyed user first, which is how
# the audit reads it: a client_user_id claim is held by one user after another.
stream_owners = Table(
    "stream_owners",
    metadata,
    Column("user_id", Uuid, primary_key=True),
    Column("originator_id", Uuid, primary_key=True),
    Column("team_id", Uuid, nullable=False),
    # user, claim, connection, pull, link_token, webhook_delivery, oauth_flow, ...; and
    # publish_round: an event destination's round that published about the user (ADR
    # 0055), a stream of no one user, listed for each it names.
    Column("kind", String(32), nullable=False),
    # The time of the first event of the stream that named the user.
    Column("first_seen_at", UTCDateTime, nullable=False),
    # A stream's owners (a claim taken again finds its team here).
    Index("ix_stream_owners_originator", "originator_id"),
    sqlite_with_rowid=False,
)

# Continuous queries (issue 34, ADR 0044): an aggregate query a team registers for one of
# its users, run again every `interval_minutes` by the scheduler. Not a read model: the log
# does not hold them. The latest result is health data: sealed with the user's key
# (`sealed_result`), and the rows go with the user's erasure.
continuous_queries = Table(
    "continuous_queries",
    metadata,
    Column("query_id", Uuid, primary_key=True),
    Column("team_id", Uuid, nullable=False),
    Column("user_id", Uuid, nullable=False),
    Column("slug", String(64), nullable=False),
    # The query without its anchor (domain/health_queries/continuous.py): the team's text.
    Column("definition", JSON, nullable=False),
    Column("interval_minutes", Integer, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("sealed_result", Text),
    Column("result_at", UTCDateTime),
    UniqueConstraint("user_id", "slug", name="uq_continuous_queries_user_slug"),
    Index("ix_continuous_queries_team_user", "team_id", "user_id"),
)

# Each run of a continuous query (a task), and the queue of runs: the next one waits as
# `scheduled` until its `scheduled_at`; a worker leases it (`holder`, `lease_expires_at`)
# while it runs, and another takes it over once the lease has passed (a process that died).
# Ids, states and times only; `error_details` says what went wrong in our words.
continuous_query_tasks = Table(
    "continuous_query_tasks",
    metadata,
    Column("task_id", Uuid, primary_key=True),
    Column("query_id", Uuid, nullable=False),
    Column("user_id", Uuid, nullable=False),
    Column("status", String(16), nullable=False),
    Column("scheduled_at", UTCDateTime, nullable=False),
    Column("started_at", UTCDateTime),
    Column("ended_at", UTCDateTime),
    Column("error_details", Text),
    Column("holder", String(64)),
    Column("lease_expires_at", UTCDateTime),
    # The worker's selection of due tasks; a query's history, newest first.
    Index("ix_continuous_query_tasks_due", "status", "scheduled_at"),
    Index("ix_continuous_query_tasks_query", "query_id", "scheduled_at"),
    Index("ix_continuous_query_tasks_user", "user_id"),
)

# Lab reports uploaded to the parser (domain/labs/report_parsing.py), kept until their job
# ends: the job's files sealed together with the user's data key as bytes (bound to the
# job's id), and the worker's queue (oldest first). Emptied by the user's erasure.
lab_report_uploads = Table(
    "lab_report_uploads",
    metadata,
    Column("job_id", Uuid, primary_key=True),
    Column("team_id", Uuid, nullable=False),
    Column("user_id", Uuid, nullable=False),
    Column("uploaded_at", UTCDateTime, nullable=False),
    Column("files", LargeBinary, nullable=False),
    Index("ix_lab_report_uploads_user", "user_id"),
    Index("ix_lab_report_uploads_uploaded", "uploaded_at"),
)

READ_MODEL_TABLES = (
    users,
    pending_erasures,
    connections,
    resource_feeds,
    organizations,
    teams,
    team_api_keys,
    management_keys,
    custom_credentials,
    link_tokens,
    webhook_endpoints,
    deprecation_cut_overs,
    webhook_deliveries,
    event_destinations,
    event_destination_cursors,
    stream_owners,
    orders,
    lab_tests,
    maker_notices,
    unmatched_results,
)
