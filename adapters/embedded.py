"""Embedding healthledger: the team API's user operations in-process (docs/embedding.md).

    from healthledger import HealthLedger

    with HealthLedger.open("sqlite:///app.db", master_key_file="app.master.key") as ledger:
        user = ledger.create_user("user-42")

`HealthLedger.open` builds the service at the composition root (`build_service`), as
`healthledger serve` does: it migrates the database, bootstraps an empty one, picks the
team, and starts the scheduler (erasure sweep, pulls, webhooks, deprecation cut-overs)
unless told not to. Its methods are the team API's user and connection routes, through
the same operations (`adapters/operations/users.py`): the same request models check
their input (pydantic's ValidationError where the API answers 422), the same domain errors
come out (`healthledger.domain.errors`, each a `LedgerError`), and the answers are the
API's response models (`healthledger.adapters.operations.schemas`).

`from healthledger import HealthLedger` is the short import of the same class (the
package's `__init__.py` gives it when first asked for). User ids are taken as UUIDs or
their text; anything else is `InvalidRequest` naming user_id, as the API's 422.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from uuid import UUID

from healthledger.adapters.compliance.audit import AuditEntry, history, user_team
from healthledger.adapters.compliance.deletion_report import deletion_report
from healthledger.adapters.composition import Service, build_service, start_scheduler
from healthledger.adapters.http.date_ranges import date_range
from healthledger.adapters.http.introspection import LiveReads, historical_pulls_of
from healthledger.adapters.http.order_schemas import OrderAnswer
from healthledger.adapters.http.summaries import LISTS as SUMMARY_RESOURCES
from healthledger.adapters.http.timeseries import PATH_NAMES as TIMESERIES_PATH_NAMES
from healthledger.adapters.http.timeseries import samples_json
from healthledger.adapters.operations import users as operations
from healthledger.adapters.operations.schemas import (
    CreateUserRequest,
    DemoConnected,
    DemoConnectRequest,
    DemographicsAnswer,
    DemographicsPatch,
    ResolvedUser,
    Success,
    UpdateUserRequest,
    UserList,
    UserProviders,
    UserPulls,
)
from healthledger.adapters.operations.source_priorities import summary_order
from healthledger.adapters.persistence.queries.orders import OrderFilters
from healthledger.adapters.settings import Settings
from healthledger.domain.context import DEFAULT_ENVIRONMENT, CommandContext
from healthledger.domain.errors import (
    FeatureNotEnabled,
    InvalidRequest,
    TeamNotFound,
    UserNotFound,
)
from healthledger.domain.labs.orders import OrderNotFound
from healthledger.domain.ledger import Clock, utc_now
from healthledger.domain.personal_data import demographics_answer
from healthledger.domain.teams.directory import DEFAULT_ORG_ID, Bootstrap
from healthledger.domain.teams.teams import ENVIRONMENTS
from healthledger.scheduler.runner import LedgerScheduler

__all__ = ["EMBEDDED", "FeatureNotEnabled", "HealthLedger"]

# The actor recorded on what an embedding application does (the audit trail's "by whom"),
# unless it names its own with `acting_as`.
EMBEDDED = "system:embedded"


@dataclass
class _Runtime:
    """What one `open` started, shared by the views made from it; closed once."""

    service: Service
    scheduler: LedgerScheduler | None
    bootstrap: Bootstrap | None
    closed: bool = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        # The scheduler first: its jobs use the service's database and ledger.
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=True)
        self.service.close()


class HealthLedger:
    """The team API's user operations for one team, in-process. Make one with `open`."""

    def __init__(
        self, runtime: _Runtime, team_id: UUID, actor: str, request_id: str | None, environment: str
    ) -> None:
        # Not for embedders: `open`, `for_team` and `acting_as` make these.
        self._runtime = runtime
        self._owner = False
        self.team_id = team_id
        self.actor = actor
        self._request_id = request_id
        self.environment = environment

    # -- opening and closing ----------------------------------------------------------------

    @classmethod
    def open(
        cls,
        database_url: str,
        *,
        master_key_file: str | os.PathLike[str],
        team_id: UUID | None = None,
        run_scheduler: bool = True,
        clock: Clock = utc_now,
        actor: str = EMBEDDED,
        environment: str = DEFAULT_ENVIRONMENT,
        **settings: Any,
    ) -> HealthLedger:
        """Build the service on `database_url` and open it for one team.

        `master_key_file` wraps every user's data key; it is made on a database that holds
        no data key yet, and must be the same file ever after (keep it out of the
        database's backups). `team_id=None` is the default team, which the first open of
        an empty database creates (`bootstrap` then holds its keys, shown only then).
        `run_scheduler=False` starts no scheduler: call the sweeps (`sweep_erasures`...)
        from your own. `clock` is what every command reads as now. Any other keyword is a
        setting of `healthledger.adapters.settings.Settings` (`grace_period=...`,
        `erasure_sweep_interval=...`); settings not given come from the HEALTHLEDGER_*
        environment variables or their defaults, as for `healthledger serve`.
        """
        # Settings ignores names it does not know (the environment holds others): a typo
        # here must not silently leave a default, such as the grace period, in place.
        unknown = sorted(set(settings) - set(Settings.model_fields))
        if unknown:
            raise TypeError(f"HealthLedger.open() got unknown settings: {', '.join(unknown)}")
        if environment not in ENVIRONMENTS:
            # The users it creates get their webhooks from this environment's endpoints.
            raise ValueError(f"environment must be one of {', '.join(ENVIRONMENTS)}")
        built = Settings(
            database_url=database_url, master_key_file=Path(master_key_file), **settings
        )
        service = build_service(built, clock=clock)
        try:
            bootstrap = service.bootstrap()
            chosen = _team_of(service, team_id)
            scheduler = start_scheduler(service) if run_scheduler else None
        except BaseException:
            service.close()
            raise
        ledger = cls(_Runtime(service, scheduler, bootstrap), chosen, actor, None, environment)
        ledger._owner = True
        return ledger

    def close(self) -> None:
        """Stop the scheduler (waiting for a running job) and close the database. Only
        the ledger that `open` returned closes; its views (`for_team`, `acting_as`) share
        its service, and their `close` does nothing."""
        if self._owner:
            self._runtime.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- views ------------------------------------------------------------------------------

    def for_team(self, team_id: UUID) -> HealthLedger:
        """The same service, for another (live) team."""
        return HealthLedger(
            self._runtime,
            _team_of(self.service, team_id),
            self.actor,
            self._request_id,
            self.environment,
        )

    def acting_as(self, actor: str, request_id: str | None = None) -> HealthLedger:
        """The same service and team, recording `actor` (and `request_id`, else a new id
        per command) on every event: who did it, under which request of yours."""
        return HealthLedger(self._runtime, self.team_id, actor, request_id, self.environment)

    @property
    def service(self) -> Service:
        """The whole service (`build_service`'s `Service`), for what this facade does not
        offer: the management use cases, the queries, the HTTP apps."""
        return self._runtime.service

    @property
    def bootstrap(self) -> Bootstrap | None:
        """When this open created the default organization and team: their ids and keys
        (the team API key and the org management key; only their hashes are stored)."""
        return self._runtime.bootstrap

    @property
    def scheduler(self) -> LedgerScheduler | None:
        return self._runtime.scheduler

    # -- users ------------------------------------------------------------------------------

    def create_user(
        self,
        client_user_id: str,
        *,
        fallback_time_zone: str | None = None,
        fallback_birth_date: date | str | None = None,
        ingestion_start: date | str | None = None,
        ingestion_end: date | str | None = None,
    ) -> ResolvedUser:
        """POST /v2/user. A `client_user_id` a live user holds is `ClientUserIdTaken`."""
        body = CreateUserRequest.model_validate(
            {
                "client_user_id": client_user_id,
                "fallback_time_zone": fallback_time_zone,
                "fallback_birth_date": fallback_birth_date,
                "ingestion_start": ingestion_start,
                "ingestion_end": ingestion_end,
            }
        )
        return operations.create_user(self.service, self._ctx(), self.team_id, body)

    def get_user(self, user_id: UUID | str) -> ResolvedUser:
        """GET /v2/user/{user_id}: `UserNotFound`, or `UserScheduledForDeletion`."""
        return operations.resolved_user(self.service, self.team_id, _user_id(user_id))

    def get_user_by_client_user_id(self, client_user_id: str) -> ResolvedUser:
        """GET /v2/user/resolve/{client_user_id}: the live user holding it."""
        return operations.resolved_by_client_user_id(self.service, self.team_id, client_user_id)

    def list_users(self, offset: int = 0, limit: int = 100) -> UserList:
        """GET /v2/user: one page of the team's live users, oldest first."""
        if not 0 <= offset <= operations.MAX_USER_OFFSET:
            raise InvalidRequest(
                f"offset must be from 0 to {operations.MAX_USER_OFFSET}.", "offset", "query"
            )
        if not 1 <= limit <= operations.MAX_USER_LIMIT:
            raise InvalidRequest(
                f"limit must be from 1 to {operations.MAX_USER_LIMIT}.", "limit", "query"
            )
        return operations.user_page(self.service, self.team_id, offset, limit)

    def update_user(self, user_id: UUID | str, **changes: Any) -> None:
        """PATCH /v2/user/{user_id}: the fields named change, one given as None is cleared
        (client_user_id excepted); the rest stay."""
        body = UpdateUserRequest.model_validate(changes)
        operations.update_user(self.service, self._ctx(), self.team_id, _user_id(user_id), body)

    def delete_user(
        self, user_id: UUID | str, *, reason: str | None = None, ticket: str | None = None
    ) -> Success:
        """DELETE /v2/user/{user_id}: start the grace period, deregister the connections.
        The user is erased when the period ends (by the erasure sweep) unless undone.
        `reason` (free text, at most 500 characters, sealed with the user's key: it goes
        with the erasure) and `ticket` (a reference into your records, 1 to 128 letters,
        digits or `._:#/-`, kept in clear) are the `X-Deletion-Reason` and
        `X-Deletion-Ticket` headers: recorded on the deletion, shown in its report."""
        return operations.delete_user(
            self.service,
            self._ctx(),
            self.team_id,
            _user_id(user_id),
            reason=reason,
            ticket=ticket,
        )

    def undo_delete(
        self, user_id: UUID | str | None = None, *, client_user_id: str | None = None
    ) -> Success:
        """POST /v2/user/undo_delete: restore a deleted user inside its grace period,
        named by exactly one of its ids (else `UndoParametersError`)."""
        return operations.undo_delete(
            self.service,
            self._ctx(),
            self.team_id,
            None if user_id is None else _user_id(user_id),
            client_user_id,
        )

    # -- demographics (closed beta: `set_feature("demographics")`) --------------------------

    def upsert_demographics(
        self, user_id: UUID | str, fields: Mapping[str, Any] | DemographicsPatch
    ) -> DemographicsAnswer:
        """PATCH /v2/user/{user_id}/info: merge `fields` (spec 2.1) into what is recorded;
        the result must be complete (else pydantic's ValidationError, nothing recorded)."""
        body = (
            fields
            if isinstance(fields, DemographicsPatch)
            else DemographicsPatch.model_validate(dict(fields))
        )
        merged = operations.record_demographics(
            self.service, self._ctx(), self.team_id, _user_id(user_id), body
        )
        # The API's answer, by the conversion its route uses.
        return DemographicsAnswer.model_validate(
            demographics_answer(merged.model_dump(mode="json"))
        )

    def latest_demographics(self, user_id: UUID | str) -> DemographicsAnswer:
        """GET /v2/user/{user_id}/info/latest: `DemographicsNotFound` if none recorded.
        As recorded, not checked again against today's input rules (as the API)."""
        recorded = operations.recorded_demographics(self.service, self.team_id, _user_id(user_id))
        return DemographicsAnswer.model_validate(demographics_answer(recorded))

    def set_feature(self, feature: str, enabled: bool = True) -> None:
        """Switch a closed-beta feature of the team (`healthledger features enable`)."""
        self.service.teams.set_feature(self._ctx(), self.team_id, feature, enabled)

    # -- connections ------------------------------------------------------------------------

    def connect_demo(
        self,
        user_id: UUID | str,
        provider: str,
        *,
        demo_failures: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> DemoConnected:
        """POST /v2/link/connect/demo: connect a simulated device and schedule its pulls
        (`demo_failures`: resource -> {"code", "times"}, see docs/connections.md)."""
        body = DemoConnectRequest.model_validate(
            {"user_id": _user_id(user_id), "provider": provider, "demo_failures": demo_failures}
        )
        return DemoConnected.model_validate(
            operations.connect_demo(
                self.service,
                self._ctx(),
                self.team_id,
                body.user_id,
                body.provider,
                body.demo_failures,
            )
        )

    def connected_providers(self, user_id: UUID | str) -> UserProviders:
        """GET /v2/user/providers/{user_id}: the connections not deregistered."""
        return UserProviders.model_validate(
            operations.user_providers(self.service, self.team_id, _user_id(user_id))
        )

    def deregister_provider(self, user_id: UUID | str, provider: str) -> Success:
        """DELETE /v2/user/{user_id}/{provider}."""
        return operations.deregister(
            self.service, self._ctx(), self.team_id, _user_id(user_id), provider
        )

    # -- reads: health data, lab orders, the audit and the deletion report -------------------

    def summaries(
        self,
        user_id: UUID | str,
        resource: str,
        start: date | str,
        end: date | str | None = None,
        *,
        provider: str | None = None,
    ) -> list[dict[str, Any]]:
        """GET /v2/summary/{resource}/{user_id}: the user's `resource` summaries (sleep,
        activity, workouts, body, meal, ...) from `start` to `end` (one day: `end` None), by
        day, across providers or of `provider`; each the API's summary object."""
        if resource not in SUMMARY_RESOURCES:
            raise InvalidRequest("Unknown summary resource.", "resource", "path")
        if provider is not None and provider not in self.service.catalog:
            raise InvalidRequest("Unknown provider slug.", "provider", "query")
        days = date_range(str(start), None if end is None else str(end))
        user = _user_id(user_id)
        # A day's providers in the team's order, as the API lists them.
        order = summary_order(self.service, self.team_id, resource, provider)
        return self.service.health_data_queries.summaries(
            self.team_id, user, resource, days.first_day, days.last_day, provider, order
        )

    def timeseries(
        self,
        user_id: UUID | str,
        resource: str,
        start: date | str,
        end: date | str | None = None,
        *,
        provider: str | None = None,
    ) -> list[dict[str, Any]]:
        """GET /v2/timeseries/{user_id}/{resource}: the user's samples of `resource`
        (heartrate, glucose, steps, ...; body_weight and body_fat too) from `start` to
        `end` (dates or ISO instants), in time order, across providers or of `provider`;
        each sample as the API's JSON holds it."""
        if resource not in TIMESERIES_PATH_NAMES:
            raise InvalidRequest("Unknown timeseries resource.", "resource", "path")
        days = date_range(str(start), None if end is None else str(end))
        found = samples_json(
            self.service, self.team_id, _user_id(user_id), resource, days, provider
        )
        samples: list[dict[str, Any]] = json.loads(found)
        return samples

    def historical_pulls(self, user_id: UUID | str) -> UserPulls:
        """GET /v2/introspect/historical_pull?user_id=: the user's pulls, per provider and
        resource, and what each provider offers that no pull covered."""
        found = _user_id(user_id)
        reads = LiveReads(self.service)
        reads.load_live(self.team_id, found)  # another team's user: UserNotFound
        [pulls] = historical_pulls_of(reads, [found], None)
        return UserPulls.model_validate(pulls)

    def get_order(self, order_id: UUID | str) -> OrderAnswer:
        """GET /v3/order/{order_id}: `OrderNotFound` for another team's or an unknown one."""
        row = self.service.order_queries.order(self.team_id, _uuid(order_id, "order_id"))
        if row is None:
            raise OrderNotFound()
        answers = self.service.order_answers
        return OrderAnswer.model_validate(answers.order(answers.row_of(row)))

    def list_orders(
        self, user_id: UUID | str | None = None, *, page: int = 1, size: int = 50
    ) -> list[OrderAnswer]:
        """GET /v3/orders: the team's orders (of `user_id` when given), newest first, one
        page of `size` (1 to 100)."""
        if not 1 <= size <= 100 or page < 1:
            raise InvalidRequest("page must be at least 1, size from 1 to 100.", "size", "query")
        filters = OrderFilters(user_id=None if user_id is None else _user_id(user_id))
        found = self.service.order_queries.page(self.team_id, filters, page, size)
        answers = self.service.order_answers
        return [OrderAnswer.model_validate(answers.order(answers.row_of(r))) for r in found.rows]

    def audit(self, user_id: UUID | str) -> list[AuditEntry]:
        """GET /v2/audit/user/{user_id}: the user's whole history, live, pending or erased,
        with its streams' (claim, connections, pulls, link tokens, deliveries), in time
        order, personal values as placeholders. Another team's user: `UserNotFound`."""
        found = _user_id(user_id)
        if user_team(self.service, found) != self.team_id:
            raise UserNotFound()
        return history(self.service, found)

    def deletion_report(self, user_id: UUID | str) -> dict[str, Any]:
        """GET /v2/audit/user/{user_id}/deletion_report: the signed report (verify it with
        `healthledger verify-report`); `LogNotSound`, and nothing signed, when the hash
        chain does not verify over what it cites."""
        return deletion_report(self.service, _user_id(user_id), self._ctx(), team_id=self.team_id)

    # -- the scheduler's jobs, for an application that runs its own scheduler ----------------
    # Each runs once, now, for every team (what `run_scheduler=True` runs at its intervals),
    # and is safe beside a running scheduler or another process doing the same.

    def sweep_erasures(self) -> int:
        """Erase every user whose grace period has ended; how many."""
        return self.service.jobs.sweep_erasures()

    def run_due_pulls(self) -> int:
        """Run the historical pulls that are due; how many."""
        return self.service.jobs.run_due_pulls()

    def sync_connected_feeds(self) -> int:
        """The daily sync of connected feeds, and pauses and resumes; how many."""
        return self.service.jobs.sync_connected_feeds()

    def dispatch_webhooks(self) -> int:
        """Follow the event log into webhook deliveries, and send what is due; how many."""
        return self.service.jobs.dispatch_webhooks()

    def apply_cut_overs(self) -> list[str]:
        """Apply the deprecation cut-overs whose date has passed; their keys."""
        return self.service.jobs.apply_cut_overs()

    def sign_chain_head(self) -> int:
        """Sign the hash chain's head if it moved since the last signed one (1, else 0):
        a deletion report rests on a signed head covering its events (docs/compliance.md)."""
        return self.service.jobs.sign_chain_head()

    def progress_lab_orders(self) -> int:
        """Move the simulated lab's due sandbox orders one step on; how many."""
        return self.service.jobs.progress_lab_orders()

    def run_due_imports(self) -> int:
        """Run the uploaded exports whose import is due (Apple Health); how many."""
        return self.service.jobs.run_due_imports()

    def run_due_bulk_operations(self) -> int:
        """Resume the link API's bulk operations left in progress (a restart, a failure);
        how many ran."""
        return self.service.jobs.run_due_bulk_operations()

    def run_due_continuous_queries(self) -> int:
        """Run the teams' continuous aggregate queries whose next run is due; how many."""
        return self.service.jobs.run_due_continuous_queries()

    def parse_lab_reports(self) -> int:
        """Parse the lab reports uploaded to the parser whose job is due; how many ended."""
        return self.service.jobs.parse_lab_reports()

    def revoke_grants(self) -> int:
        """Revoke at the makers the grants of ended connections that are due; how many."""
        return self.service.jobs.revoke_grants()

    def rotate_master_key(self) -> int:
        """Rotate the master key if its rotation interval has passed (the data keys are
        wrapped again); how many data keys were."""
        return self.service.jobs.rotate_master_key()

    def check_integrity(self) -> int:
        """Walk the chain and compare the read models with the log, if the last check is
        an interval old (1 if it ran, else 0)."""
        return self.service.jobs.check_integrity()

    # -- helpers ----------------------------------------------------------------------------

    def _ctx(self) -> CommandContext:
        # A request id per command unless the view was given one: the audit trail tells
        # the commands of an embedding application apart as it does API requests.
        return CommandContext(
            actor=self.actor,
            request_id=self._request_id or f"emb-{uuid.uuid4()}",
            environment=self.environment,
        )


def _user_id(value: UUID | str) -> UUID:
    return _uuid(value, "user_id")


def _uuid(value: UUID | str, name: str) -> UUID:
    """An id as the API's path takes it: a UUID, or its text (any of the forms `uuid.UUID`
    reads); anything else is the API's 422, `InvalidRequest` naming it, never a database
    error."""
    if isinstance(value, UUID):
        return value
    if isinstance(value, str):
        try:
            return UUID(value)
        except ValueError:
            pass
    raise InvalidRequest(f"{name} must be a UUID.", name, "path")


def _team_of(service: Service, team_id: UUID | None) -> UUID:
    """`team_id` if it is a live team; None: the first team of the default organization
    (the one the first-run bootstrap creates)."""
    if team_id is None:
        first, _more = service.team_queries.teams_page(DEFAULT_ORG_ID, limit=1)
        if not first:
            raise TeamNotFound()
        found: UUID = first[0]["id"]
        return found
    if service.team_queries.team(team_id) is None:
        raise TeamNotFound()
    return team_id
