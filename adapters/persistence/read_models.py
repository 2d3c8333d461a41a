"""Read models: projections of the event log into SQL tables the API reads.

`project` runs inside the transaction that stores the events (so a read model is never
behind its log), and again, page by page, when `rebuild` recreates the tables from the
whole log. Write-time effects that must not run on a rebuild (destroying a data key)
live in `erasure_effects`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import Mapper
from healthledger.adapters.eventstore.recorder import LedgerRecorder, delete_snapshots
from healthledger.adapters.persistence.database import (
    Database,
    SparseInsert,
    insert_statement,
)
from healthledger.adapters.persistence.health_data_store import SqlHealthDataStore
from healthledger.adapters.persistence.key_store import KeyStore
from healthledger.adapters.persistence.schema import (
    READ_MODEL_TABLES,
    connections,
    custom_credentials,
    deprecation_cut_overs,
    link_tokens,
    management_keys,
    metadata,
    organizations,
    pending_erasures,
    resource_feeds,
    team_api_keys,
    teams,
    users,
    webhook_deliveries,
    webhook_endpoints,
)
from healthledger.domain.connections.connection import CONNECTED, PAUSED
from healthledger.domain.connections.connection import DEREGISTERED as CONNECTION_DEREGISTERED
from healthledger.domain.connections.connection import ERROR as CONNECTION_ERROR
from healthledger.domain.connections.connection import Connection as ProviderConnection
from healthledger.domain.connections.link_tokens import LinkToken
from healthledger.domain.connections.resource_feeds import FAILURE as PULL_FAILURE
from healthledger.domain.connections.resource_feeds import IN_PROGRESS as PULL_IN_PROGRESS
from healthledger.domain.connections.resource_feeds import RETRYING as PULL_RETRYING
from healthledger.domain.connections.resource_feeds import SCHEDULED as PULL_SCHEDULED
from healthledger.domain.connections.resource_feeds import SUCCESS as PULL_SUCCESS
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.teams.custom_credentials import DELETED, PREPARED, SET, CustomCredentials
from healthledger.domain.teams.management_keys import ManagementKey
from healthledger.domain.teams.teams import Organization, Team, TeamApiKey, default_settings
from healthledger.domain.users.user import ACTIVE, MANUAL_SOURCE, PENDING_ERASURE, User
from healthledger.domain.webhooks.deliveries import DROPPED as DELIVERY_DROPPED
from healthledger.domain.webhooks.deliveries import FAILED as DELIVERY_FAILED
from healthledger.domain.webhooks.deliveries import PENDING as DELIVERY_PENDING
from healthledger.domain.webhooks.deliveries import SUCCEEDED as DELIVERY_SUCCEEDED
from healthledger.domain.webhooks.deliveries import WebhookDelivery
from healthledger.domain.webhooks.deprecation_calendar import DeprecationCalendar
from healthledger.domain.webhooks.endpoints import BY_CALLER, WebhookEndpoint
from sqlalchemy import Connection, bindparam, case, delete, func, insert, select, update

# last_attempt_status of a feed whose attempt failed (retrying or failure).
ATTEMPT_FAILED = "failed"

_USER_COLUMNS = (
    "user_id",
    "team_id",
    "client_user_id",
    "status",
    "created_on",
    "fallback_time_zone",
    "fallback_time_zone_source",
    "fallback_time_zone_updated_at",
    "sealed_birth_date",
    "birth_date_source",
    "birth_date_updated_at",
    "ingestion_start",
    "ingestion_end",
    "version",
)


_DELIVERY_COLUMNS = (
    "delivery_id",
    "endpoint_id",
    "team_id",
    "user_id",
    "event_type",
    "message_id",
    "source_id",
    "source_version",
    "source_timestamp",
    "day",
    "log_position",
    "status",
    "attempts",
    "next_attempt_at",
    "created_at",
    "version",
)


def _delivery_attempt(*, succeeded: bool) -> Any:
    """UPDATE of a delivery's row after an attempt (a success, or a failure whose first
    failure time is kept)."""
    d = webhook_deliveries.c
    values: dict[str, Any] = {
        "attempts": bindparam("attempts"),
        "last_attempt_at": bindparam("at"),
        "last_status_code": bindparam("code"),
        "next_attempt_at": bindparam("next_at"),
        "status": bindparam("status"),
        "version": bindparam("version"),
    }
    if succeeded:
        values["succeeded_at"] = bindparam("at")
    else:
        values["first_failure_at"] = func.coalesce(d.first_failure_at, bindparam("at"))
    return update(webhook_deliveries).where(d.delivery_id == bindparam("did")).values(values)


def _update_user(columns: Sequence[str]) -> Any:
    return (
        update(users)
        .where(users.c.user_id == bindparam("uid"))
        .values({name: bindparam(name) for name in columns})
    )


class ReadModels:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._handlers: dict[type, Callable[[Connection, Any], None]] = {
            User.Created: self._user_created,
            User.SettingsChanged: self._user_settings_changed,
            User.ClientUserIdChanged: self._user_client_user_id_changed,
            User.DemographicsRecorded: self._user_demographics_recorded,
            User.Deleted: self._user_deleted,
            User.DeletionUndone: self._user_deletion_undone,
            User.Erased: self._user_erased,
            Organization.Created: self._organization_created,
            Team.Created: self._team_created,
            Team.FeatureEnabled: self._team_features_changed,
            Team.FeatureDisabled: self._team_features_changed,
            TeamApiKey.Created: self._team_api_key_created,
            TeamApiKey.Revoked: self._team_api_key_revoked,
            Organization.Renamed: self._organization_renamed,
            Team.Renamed: self._team_renamed,
            Team.SettingsChanged: self._team_settings_changed,
            Team.Deleted: self._team_deleted,
            ManagementKey.Created: self._management_key_created,
            ManagementKey.Relabeled: self._management_key_relabeled,
            ManagementKey.TeamsBound: self._management_key_teams_bound,
            ManagementKey.Revoked: self._management_key_revoked,
            ProviderConnection.Created: self._connection_connected,
            ProviderConnection.Reconnected: self._connection_connected,
            ProviderConnection.Deregistered: self._connection_deregistered,
            ProviderConnection.Errored: self._connection_errored,
            ProviderConnection.Paused: self._connection_status,
            ProviderConnection.Resumed: self._connection_status,
            WebhookDelivery.Created: self._delivery_created,
            WebhookDelivery.AttemptMade: self._delivery_attempted,
            WebhookDelivery.Dropped: self._delivery_dropped,
            WebhookDelivery.Replayed: self._delivery_replayed,
            ResourceFeed.Created: self._feed_created,
            ResourceFeed.PullScheduled: self._pull_scheduled,
            ResourceFeed.PullStarted: self._pull_started,
            ResourceFeed.PullRetrying: self._pull_retrying,
            ResourceFeed.PullSucceeded: self._pull_succeeded,
            ResourceFeed.PullFailed: self._pull_failed,
            ResourceFeed.DailySynced: self._daily_synced,
            CustomCredentials.Created: self._credentials_prepared,
            CustomCredentials.Reprepared: self._credentials_reprepared,
            CustomCredentials.Set: self._credentials_set,
            CustomCredentials.Deleted: self._credentials_deleted,
            LinkToken.Issued: self._link_token_issued,
            LinkToken.Consumed: self._link_token_consumed,
            WebhookEndpoint.Created: self._webhook_endpoint_created,
            WebhookEndpoint.Updated: self._webhook_endpoint_updated,
            WebhookEndpoint.Disabled: self._webhook_endpoint_disabled,
            WebhookEndpoint.Enabled: self._webhook_endpoint_enabled,
            WebhookEndpoint.SecretRotated: self._webhook_secret_rotated,
            WebhookEndpoint.Deleted: self._webhook_endpoint_deleted,
            DeprecationCalendar.CutOverApplied: self._cut_over_applied,
        }
        prepare = db.prepare
        self._insert_delivery = prepare(
            "rm.deliveries.insert", lambda: insert_statement(webhook_deliveries, _DELIVERY_COLUMNS)
        )
        self._delivery_succeeded = prepare(
            "rm.deliveries.succeeded", lambda: _delivery_attempt(succeeded=True)
        )
        self._delivery_failed = prepare(
            "rm.deliveries.failed", lambda: _delivery_attempt(succeeded=False)
        )
        self._insert_user = SparseInsert(db, "rm.users.insert", users, _USER_COLUMNS)
        self._set_status = prepare(
            "rm.users.status",
            lambda: _update_user(("status", "deleted_at", "erasure_due_at", "version")),
        )
        self._insert_pending = prepare(
            "rm.pending.insert",
            lambda: insert_statement(pending_erasures, ("user_id", "due_at")),
        )
        self._delete_pending = prepare(
            "rm.pending.delete",
            lambda: delete(pending_erasures).where(pending_erasures.c.user_id == bindparam("uid")),
        )

    def project(self, conn: Connection, events: Sequence[DomainEventProtocol[Any]]) -> None:
        for event in events:
            handler = self._handlers.get(type(event))
            if handler is not None:
                handler(conn, event)

    # -- users ----------------------------------------------------------------------------

    def _user_created(self, conn: Connection, e: User.Created) -> None:
        # In `_USER_COLUMNS` order (`SparseInsert`): every create writes this row, most
        # with the optional settings left out (None).
        timezone, sealed = e.fallback_time_zone, e.sealed_birth_date
        self._insert_user.execute_row(
            conn,
            (
                e.originator_id,
                e.team_id,
                e.client_user_id,
                ACTIVE,
                e.timestamp,
                timezone,
                timezone and MANUAL_SOURCE,
                timezone and e.timestamp,
                sealed,
                sealed and MANUAL_SOURCE,
                sealed and e.timestamp,
                e.ingestion_start,
                e.ingestion_end,
                e.originator_version,
            ),
        )

    def _user_settings_changed(self, conn: Connection, e: User.SettingsChanged) -> None:
        values: dict[str, Any] = {"version": e.originator_version}
        for key, value in e.changes.items():
            if key == "fallback_time_zone":
                values["fallback_time_zone"] = value
                values["fallback_time_zone_source"] = value and MANUAL_SOURCE
                values["fallback_time_zone_updated_at"] = value and e.timestamp
            elif key == "sealed_birth_date":
                values["sealed_birth_date"] = value
                values["birth_date_source"] = value and MANUAL_SOURCE
                values["birth_date_updated_at"] = value and e.timestamp
            elif key in ("ingestion_start", "ingestion_end"):
                values[key] = value
        conn.execute(update(users).where(users.c.user_id == e.originator_id).values(values))

    def _user_client_user_id_changed(self, conn: Connection, e: User.ClientUserIdChanged) -> None:
        conn.execute(
            update(users)
            .where(users.c.user_id == e.originator_id)
            .values(client_user_id=e.new_client_user_id, version=e.originator_version)
        )

    def _user_demographics_recorded(self, conn: Connection, e: User.DemographicsRecorded) -> None:
        conn.execute(
            update(users)
            .where(users.c.user_id == e.originator_id)
            .values(
                sealed_demographics=e.sealed_demographics,
                demographics_updated_at=e.timestamp,
                version=e.originator_version,
            )
        )

    def _user_deleted(self, conn: Connection, e: User.Deleted) -> None:
        self._set_status.execute(
            conn,
            {
                "uid": e.originator_id,
                "status": PENDING_ERASURE,
                "deleted_at": e.timestamp,
                "erasure_due_at": e.erasure_due_at,
                "version": e.originator_version,
            },
        )
        self._insert_pending.execute(conn, {"user_id": e.originator_id, "due_at": e.erasure_due_at})

    def _user_deletion_undone(self, conn: Connection, e: User.DeletionUndone) -> None:
        self._set_status.execute(
            conn,
            {
                "uid": e.originator_id,
                "status": ACTIVE,
                "deleted_at": None,
                "erasure_due_at": None,
                "version": e.originator_version,
            },
        )
        self._delete_pending.execute(conn, {"uid": e.originator_id})

    def _user_erased(self, conn: Connection, e: User.Erased) -> None:
        # An erased user is 404 everywhere: no row of it is left to read.
        conn.execute(delete(users).where(users.c.user_id == e.originator_id))
        self._delete_pending.execute(conn, {"uid": e.originator_id})
        conn.execute(delete(connections).where(connections.c.user_id == e.originator_id))
        conn.execute(delete(resource_feeds).where(resource_feeds.c.user_id == e.originator_id))

    # -- provider connections -------------------------------------------------------------

    def _connection_connected(self, conn: Connection, e: Any) -> None:
        c = connections.c
        values = {
            "status": CONNECTED,
            "created_on": e.timestamp,
            "resource_availability": e.resource_availability,
            "error_details": None,
            "sealed_external_user_id": e.sealed_external_user_id,
            "demo": e.demo,
            "updated_at": e.timestamp,
        }
        if isinstance(e, ProviderConnection.Created):
            conn.execute(
                insert(connections).values(
                    connection_id=e.originator_id,
                    user_id=e.user_id,
                    team_id=e.team_id,
                    provider=e.provider,
                    **values,
                )
            )
        else:
            conn.execute(
                update(connections).where(c.connection_id == e.originator_id).values(**values)
            )

    def _connection_deregistered(self, conn: Connection, e: Any) -> None:
        conn.execute(
            update(connections)
            .where(connections.c.connection_id == e.originator_id)
            .values(status=CONNECTION_DEREGISTERED, updated_at=e.timestamp)
        )

    def _connection_errored(self, conn: Connection, e: Any) -> None:
        details = {
            "error_type": e.error_type,
            "error_message": e.error_message,
            "errored_at": e.timestamp.isoformat(),
        }
        conn.execute(
            update(connections)
            .where(connections.c.connection_id == e.originator_id)
            .values(status=CONNECTION_ERROR, error_details=details, updated_at=e.timestamp)
        )

    def _connection_status(self, conn: Connection, e: Any) -> None:
        status = PAUSED if isinstance(e, ProviderConnection.Paused) else CONNECTED
        conn.execute(
            update(connections)
            .where(connections.c.connection_id == e.originator_id)
            .values(status=status, updated_at=e.timestamp)
        )

    # -- resource feeds and their pulls ---------------------------------------------------

    def _feed_created(self, conn: Connection, e: ResourceFeed.Created) -> None:
        conn.execute(
            insert(resource_feeds).values(
                feed_id=e.originator_id,
                connection_id=e.connection_id,
                user_id=e.user_id,
                team_id=e.team_id,
                provider=e.provider,
                resource=e.resource,
                days_with_data=0,
                attempts=0,
                version=e.originator_version,
            )
        )

    def _update_feed(self, conn: Connection, e: Any, **values: Any) -> None:
        conn.execute(
            update(resource_feeds)
            .where(resource_feeds.c.feed_id == e.originator_id)
            .values(version=e.originator_version, **values)
        )

    def _pull_scheduled(self, conn: Connection, e: ResourceFeed.PullScheduled) -> None:
        self._update_feed(
            conn,
            e,
            status=PULL_SCHEDULED,
            range_start=e.range_start,
            range_end=e.range_end,
            scheduled_at=e.timestamp,
            started_at=None,
            ended_at=None,
            days_with_data=0,
            release=e.release,
            trace_id=e.trace_id,
            error_code=None,
            attempts=0,
            due_at=e.timestamp,
            synced_at=None,
        )

    def _pull_started(self, conn: Connection, e: ResourceFeed.PullStarted) -> None:
        f = resource_feeds.c
        self._update_feed(
            conn,
            e,
            status=PULL_IN_PROGRESS,
            started_at=func.coalesce(f.started_at, e.timestamp),
            attempts=e.attempt,
            due_at=None,
            last_attempt_at=e.timestamp,
            last_attempt_status=PULL_IN_PROGRESS,
        )

    def _pull_retrying(self, conn: Connection, e: ResourceFeed.PullRetrying) -> None:
        self._update_feed(
            conn,
            e,
            status=PULL_RETRYING,
            error_code=e.error_code,
            due_at=e.retry_at,
            last_attempt_status=ATTEMPT_FAILED,
        )

    def _pull_succeeded(self, conn: Connection, e: ResourceFeed.PullSucceeded) -> None:
        self._update_feed(
            conn,
            e,
            status=PULL_SUCCESS,
            ended_at=e.timestamp,
            days_with_data=e.days_with_data,
            error_code=None,
            due_at=None,
            synced_at=e.timestamp,
            last_attempt_status=PULL_SUCCESS,
            **_widened(e.oldest_day, e.newest_day),
        )

    def _pull_failed(self, conn: Connection, e: ResourceFeed.PullFailed) -> None:
        self._update_feed(
            conn,
            e,
            status=PULL_FAILURE,
            ended_at=e.timestamp,
            error_code=e.error_code,
            due_at=None,
            last_attempt_status=ATTEMPT_FAILED,
        )

    def _daily_synced(self, conn: Connection, e: ResourceFeed.DailySynced) -> None:
        days = [*e.created_days, *e.updated_days]
        self._update_feed(
            conn,
            e,
            synced_at=e.timestamp,
            last_attempt_at=e.timestamp,
            last_attempt_status=PULL_SUCCESS,
            **(_widened(min(days), max(days)) if days else {}),
        )

    # -- webhook deliveries -----------------------------------------------------------------

    def _delivery_created(self, conn: Connection, e: WebhookDelivery.Created) -> None:
        # A fan-out writes one per endpoint: compiled once, run on the driver.
        self._insert_delivery.execute(
            conn,
            {
                "delivery_id": e.originator_id,
                "endpoint_id": e.endpoint_id,
                "team_id": e.team_id,
                "user_id": e.user_id,
                "event_type": e.event_type,
                "message_id": e.message_id,
                "source_id": e.source_id,
                "source_version": e.source_version,
                "source_timestamp": e.source_timestamp,
                "day": e.day,
                "log_position": e.log_position,
                "status": DELIVERY_PENDING,
                "attempts": 0,
                "next_attempt_at": e.timestamp,
                "created_at": e.timestamp,
                "version": e.originator_version,
            },
        )

    def _update_delivery(self, conn: Connection, e: Any, **values: Any) -> None:
        conn.execute(
            update(webhook_deliveries)
            .where(webhook_deliveries.c.delivery_id == e.originator_id)
            .values(version=e.originator_version, **values)
        )

    def _delivery_attempted(self, conn: Connection, e: WebhookDelivery.AttemptMade) -> None:
        success = e.outcome == "success"
        if success:
            status = DELIVERY_SUCCEEDED
        else:
            status = DELIVERY_PENDING if e.next_attempt_at is not None else DELIVERY_FAILED
        statement = self._delivery_succeeded if success else self._delivery_failed
        statement.execute(
            conn,
            {
                "did": e.originator_id,
                "attempts": e.attempt,
                "at": e.timestamp,
                "code": e.status_code,
                "next_at": e.next_attempt_at,
                "status": status,
                "version": e.originator_version,
            },
        )

    def _delivery_dropped(self, conn: Connection, e: WebhookDelivery.Dropped) -> None:
        self._update_delivery(conn, e, status=DELIVERY_DROPPED, next_attempt_at=None)

    def _delivery_replayed(self, conn: Connection, e: WebhookDelivery.Replayed) -> None:
        self._update_delivery(
            conn,
            e,
            status=DELIVERY_PENDING,
            attempts=0,
            next_attempt_at=e.timestamp,
            first_failure_at=None,
        )

    # -- link tokens ----------------------------------------------------------------------

    def _link_token_issued(self, conn: Connection, e: LinkToken.Issued) -> None:
        conn.execute(
            insert(link_tokens).values(
                token_id=e.originator_id,
                team_id=e.team_id,
                user_id=e.user_id,
                environment=e.environment,
                token_hash=e.token_hash,
                provider=e.provider,
                redirect_url=e.redirect_url,
                filter_on_providers=e.filter_on_providers,
                on_error=e.on_error,
                on_close=e.on_close,
                issued_at=e.timestamp,
            )
        )

    def _link_token_consumed(self, conn: Connection, e: LinkToken.Consumed) -> None:
        conn.execute(
            update(link_tokens)
            .where(link_tokens.c.token_id == e.originator_id)
            .values(consumed_at=e.timestamp, consumed_provider=e.provider)
        )

    # -- webhook endpoints ------------------------------------------------------------------

    def _webhook_endpoint_created(self, conn: Connection, e: WebhookEndpoint.Created) -> None:
        conn.execute(
            insert(webhook_endpoints).values(
                endpoint_id=e.originator_id,
                team_id=e.team_id,
                environment=e.environment,
                url=e.url,
                description=e.description,
                filter_types=list(e.filter_types),
                disabled_reason=BY_CALLER if e.disabled else None,
                sealed_secret=e.sealed_secret,
                created_on=e.timestamp,
                updated_at=e.timestamp,
            )
        )

    def _webhook_endpoint_updated(self, conn: Connection, e: WebhookEndpoint.Updated) -> None:
        self._webhook_endpoint_update(conn, e, **e.changes)

    def _webhook_endpoint_disabled(self, conn: Connection, e: WebhookEndpoint.Disabled) -> None:
        self._webhook_endpoint_update(conn, e, disabled_reason=e.reason)

    def _webhook_endpoint_enabled(self, conn: Connection, e: WebhookEndpoint.Enabled) -> None:
        self._webhook_endpoint_update(conn, e, disabled_reason=None)

    def _webhook_secret_rotated(self, conn: Connection, e: WebhookEndpoint.SecretRotated) -> None:
        current = conn.execute(
            select(webhook_endpoints.c.sealed_secret).where(
                webhook_endpoints.c.endpoint_id == e.originator_id
            )
        ).scalar_one()
        self._webhook_endpoint_update(
            conn,
            e,
            sealed_secret=e.sealed_secret,
            sealed_previous_secret=current,
            previous_secret_expires_at=e.previous_expires_at,
        )

    def _webhook_endpoint_deleted(self, conn: Connection, e: WebhookEndpoint.Deleted) -> None:
        # Gone from every read, secrets included; its sealed copies stay only in the log.
        conn.execute(
            delete(webhook_endpoints).where(webhook_endpoints.c.endpoint_id == e.originator_id)
        )

    def _webhook_endpoint_update(self, conn: Connection, e: Any, **values: Any) -> None:
        conn.execute(
            update(webhook_endpoints)
            .where(webhook_endpoints.c.endpoint_id == e.originator_id)
            .values(updated_at=e.timestamp, **values)
        )

    # -- the deprecation calendar -----------------------------------------------------------

    def _cut_over_applied(self, conn: Connection, e: DeprecationCalendar.CutOverApplied) -> None:
        conn.execute(
            insert(deprecation_cut_overs).values(
                key=e.key,
                effective_on=e.effective_on,
                what=e.what,
                applied_at=e.timestamp,
                actor=e.actor,
            )
        )

    # -- organizations, teams, keys --------------------------------------------------------

    def _organization_created(self, conn: Connection, e: Organization.Created) -> None:
        conn.execute(
            insert(organizations).values(
                org_id=e.originator_id, name=e.name, created_on=e.timestamp
            )
        )

    def _team_created(self, conn: Connection, e: Team.Created) -> None:
        conn.execute(
            insert(teams).values(
                team_id=e.originator_id,
                org_id=e.org_id,
                name=e.name,
                name_folded=e.name.casefold(),
                region=e.region,
                features=[],
                settings=default_settings(),
                created_on=e.timestamp,
            )
        )

    def _organization_renamed(self, conn: Connection, e: Organization.Renamed) -> None:
        conn.execute(
            update(organizations)
            .where(organizations.c.org_id == e.originator_id)
            .values(name=e.name)
        )

    def _team_renamed(self, conn: Connection, e: Team.Renamed) -> None:
        conn.execute(
            update(teams)
            .where(teams.c.team_id == e.originator_id)
            .values(name=e.name, name_folded=e.name.casefold())
        )

    def _team_settings_changed(self, conn: Connection, e: Team.SettingsChanged) -> None:
        current = conn.execute(
            select(teams.c.settings).where(teams.c.team_id == e.originator_id)
        ).scalar_one()
        conn.execute(
            update(teams)
            .where(teams.c.team_id == e.originator_id)
            .values(settings={**current, e.environment: e.settings})
        )

    def _team_deleted(self, conn: Connection, e: Team.Deleted) -> None:
        conn.execute(
            update(teams).where(teams.c.team_id == e.originator_id).values(deleted_at=e.timestamp)
        )
        # Its custom credentials go with it (their secrets' key is destroyed with it too).
        conn.execute(
            update(custom_credentials)
            .where(custom_credentials.c.team_id == e.originator_id)
            .values(status=DELETED, client_id=None, sealed_client_secret=None)
        )
        # So do its webhook endpoints: nothing is delivered for a deleted team.
        conn.execute(
            delete(webhook_endpoints).where(webhook_endpoints.c.team_id == e.originator_id)
        )

    def _management_key_created(self, conn: Connection, e: ManagementKey.Created) -> None:
        conn.execute(
            insert(management_keys).values(
                key_id=e.originator_id,
                org_id=e.org_id,
                role=e.role,
                team_ids=[str(t) for t in e.team_ids],
                label=e.label,
                key_hash=e.key_hash,
                created_on=e.timestamp,
            )
        )

    def _management_key_relabeled(self, conn: Connection, e: ManagementKey.Relabeled) -> None:
        conn.execute(
            update(management_keys)
            .where(management_keys.c.key_id == e.originator_id)
            .values(label=e.label)
        )

    def _management_key_teams_bound(self, conn: Connection, e: ManagementKey.TeamsBound) -> None:
        conn.execute(
            update(management_keys)
            .where(management_keys.c.key_id == e.originator_id)
            .values(team_ids=[str(t) for t in e.team_ids])
        )

    def _management_key_revoked(self, conn: Connection, e: ManagementKey.Revoked) -> None:
        conn.execute(
            update(management_keys)
            .where(management_keys.c.key_id == e.originator_id)
            .values(revoked_at=e.timestamp)
        )

    def _credentials_prepared(self, conn: Connection, e: CustomCredentials.Created) -> None:
        conn.execute(
            insert(custom_credentials).values(
                credentials_id=e.originator_id,
                team_id=e.team_id,
                provider=e.provider,
                status=PREPARED,
                updated_at=e.timestamp,
            )
        )

    def _credentials_reprepared(self, conn: Connection, e: Any) -> None:
        self._credentials_update(
            conn, e, status=PREPARED, client_id=None, sealed_client_secret=None
        )

    def _credentials_set(self, conn: Connection, e: CustomCredentials.Set) -> None:
        self._credentials_update(
            conn, e, status=SET, client_id=e.client_id, sealed_client_secret=e.sealed_client_secret
        )

    def _credentials_deleted(self, conn: Connection, e: Any) -> None:
        cleared = {"client_id": None, "sealed_client_secret": None}
        self._credentials_update(conn, e, status=DELETED, **cleared)

    def _credentials_update(self, conn: Connection, e: Any, **values: Any) -> None:
        conn.execute(
            update(custom_credentials)
            .where(custom_credentials.c.credentials_id == e.originator_id)
            .values(updated_at=e.timestamp, **values)
        )

    def _team_features_changed(self, conn: Connection, e: Any) -> None:
        current = conn.execute(
            select(teams.c.features).where(teams.c.team_id == e.originator_id)
        ).scalar_one()
        features = set(current)
        if isinstance(e, Team.FeatureEnabled):
            features.add(e.feature)
        else:
            features.discard(e.feature)
        conn.execute(
            update(teams)
            .where(teams.c.team_id == e.originator_id)
            .values(features=sorted(features))
        )

    def _team_api_key_created(self, conn: Connection, e: TeamApiKey.Created) -> None:
        conn.execute(
            insert(team_api_keys).values(
                key_id=e.originator_id,
                team_id=e.team_id,
                environment=e.environment,
                region=e.region,
                key_hash=e.key_hash,
                created_on=e.timestamp,
            )
        )

    def _team_api_key_revoked(self, conn: Connection, e: TeamApiKey.Revoked) -> None:
        conn.execute(
            update(team_api_keys)
            .where(team_api_keys.c.key_id == e.originator_id)
            .values(revoked_at=e.timestamp)
        )

    # -- rebuild --------------------------------------------------------------------------

    def rebuild(
        self,
        recorder: LedgerRecorder,
        mapper: Mapper[Any],
        progress: Callable[[int], None] = lambda n: None,
        page_size: int = 500,
    ) -> int:
        """Drop and recreate every read model from the log, in one transaction.

        Writers wait for it (SQLite: the one writer; PostgreSQL: the event table lock).
        On SQLite readers keep seeing the old tables until it commits; on PostgreSQL the
        dropped tables are locked, so reads wait for the commit. Returns the events
        replayed.
        """
        replayed = 0
        with self.db.write() as conn:
            if not self.db.is_sqlite:
                conn.exec_driver_sql("LOCK TABLE stored_events IN EXCLUSIVE MODE")
            metadata.drop_all(conn, tables=list(READ_MODEL_TABLES))
            metadata.create_all(conn, tables=list(READ_MODEL_TABLES))
            position = 0
            while True:
                page = recorder.select_notifications(position, page_size, inclusive_of_start=False)
                if not page:
                    break
                self.project(conn, [mapper.to_domain_event(n) for n in page])
                position = page[-1].id
                replayed += len(page)
                progress(len(page))
        return replayed


def _widened(oldest: Any, newest: Any) -> dict[str, Any]:
    """Column values that widen the feed's data span to include oldest..newest."""
    f = resource_feeds.c
    values: dict[str, Any] = {}
    if oldest is not None:
        values["oldest_day"] = case(
            (f.oldest_day.is_(None), oldest), (f.oldest_day > oldest, oldest), else_=f.oldest_day
        )
    if newest is not None:
        values["newest_day"] = case(
            (f.newest_day.is_(None), newest), (f.newest_day < newest, newest), else_=f.newest_day
        )
    return values


# The events with erasure effects (neither class has subclasses).
_ERASING = frozenset({User.Erased, Team.Deleted})


def erasure_effects(conn: Connection, events: Sequence[DomainEventProtocol[Any]]) -> None:
    """Destroy the data key and the snapshots of each user erased in this transaction, and
    the data key of each team deleted in it (which sealed its custom credential secrets and
    its webhook signing secrets)."""
    for event in events:
        if type(event) not in _ERASING:
            continue  # nearly every event: one set lookup instead of two isinstance calls
        if isinstance(event, User.Erased):
            KeyStore.destroy(conn, event.originator_id)
            delete_snapshots(conn, event.originator_id)
            # After the projection deleted the user's row (see SqlHealthDataStore), so a
            # chunk stored concurrently is either deleted here or refused there.
            SqlHealthDataStore.erase(conn, event.originator_id)
        elif isinstance(event, Team.Deleted):
            KeyStore.destroy(conn, event.originator_id)
