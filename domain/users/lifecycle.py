"""Use cases of the user lifecycle: create, change, delete, undo, erase, demographics."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import date, timedelta
from typing import Any
from uuid import UUID, uuid4

from eventsourcing.persistence import IntegrityError
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import (
    ClientUserIdInUse,
    ClientUserIdTaken,
    ConcurrentChange,
    ErasureNotVerified,
    InvalidRequest,
    LedgerError,
    NothingToUpdate,
    TeamNotFound,
    UserNotFound,
)
from healthledger.domain.ledger import Clock, Ledger, command
from healthledger.domain.personal_data import Demographics, KeepsNewKeys, PersonalDataVault
from healthledger.domain.users.client_user_ids import ClaimLocation, ClientUserIds
from healthledger.domain.users.deletion_cascade import (
    DeletionTargets,
    ErasedWithUser,
    UserDeletionCascade,
)
from healthledger.domain.users.user import (
    ACTIVE,
    UNDO_REFUSALS,
    ClientUserIdClaim,
    User,
    birth_date_problem,
    client_user_id_problem,
    deletion_reason_problem,
    deletion_ticket_problem,
    ingestion_bounds_problem,
    time_zone_problem,
)

# Every place that holds a user's data or names the user and is emptied by its erasure,
# in the transaction that records the Erased event: the persistence adapter's erasure
# effects delete exactly these, count them, and check that none is left (its tests hold
# every table with a user_id to this list or to the kept ones). Queued webhook deliveries
# about the user are dropped (their rows stay, as the delivery history, naming no value):
# the webhooks context counts them, as its part of the erasure (UserDeletionCascade).
ERASURE_REMOVES = [
    "user_data_key",
    "snapshots",
    "read_model:users",
    "read_model:pending_erasures",
    "read_model:connections",
    "read_model:resource_feeds",
    "read_model:link_tokens",
    "read_model:orders",
    "health_data",
    "session_index",
    "raw_payloads",
    "provider_tokens",
    "continuous_queries",
    "continuous_query_tasks",
    "lab_report_uploads",
    "webhook_deliveries:queued",
]
QUEUED_DELIVERIES = "webhook_deliveries:queued"
# Tries of an erasure whose counts moved before its transaction (a delivery queued, a
# chunk of health data stored meanwhile): each counts again.
_ERASE_ATTEMPTS = 3

UPDATABLE_FIELDS = (
    "client_user_id",
    "fallback_time_zone",
    "fallback_birth_date",
    "ingestion_start",
    "ingestion_end",
)

_CREATE_ATTEMPTS = 3


class UserLifecycle:
    def __init__(
        self,
        ledger: Ledger,
        vault: PersonalDataVault,
        clock: Clock,
        grace_period: timedelta,
        client_user_ids: ClientUserIds,
        *,
        erasure_inventory: Callable[[Sequence[UUID]], Mapping[UUID, Mapping[str, int]]],
        cascade: Sequence[UserDeletionCascade] = (),
        deletion_targets: Callable[[UUID], DeletionTargets] = lambda user_id: {},
    ) -> None:
        self.ledger = ledger
        self.vault = vault
        # The vault as one that keeps a new user's key until its events are stored, if it
        # is one: asked once here, not on every create (a runtime Protocol check walks
        # the protocol's members each time).
        self.keeps_new_keys: KeepsNewKeys | None = (
            vault if isinstance(vault, KeepsNewKeys) else None
        )
        self.clock = clock
        self.grace_period = grace_period
        # What ends with a user, in the other contexts: each participant's changes are
        # saved after the user's own, in its order, in the same save.
        self.cascade = tuple(cascade)
        # The ids a deletion ends, per participant, in one read.
        self.deletion_targets = deletion_targets
        # Per user of a batch: the rows each place of ERASURE_REMOVES that the erasure's
        # effects delete holds (read in one query for the whole batch; a user with none
        # is left out). The participants count the places they empty themselves.
        self.erasure_inventory = erasure_inventory
        # The claims of client_user_ids, and the teams' digests of them (the teams keep
        # the secrets); also how a team's digest of a value is computed for audits and
        # deletion reports.
        self.client_user_ids = client_user_ids

    # -- loading ------------------------------------------------------------------------

    def load(self, team_id: UUID, user_id: UUID) -> User:
        """The user in any state; another team's user does not exist (404, never 403)."""
        user = self.ledger.find(user_id)
        if not isinstance(user, User) or user.team_id != team_id:
            raise UserNotFound()
        return user

    def load_live(self, team_id: UUID, user_id: UUID) -> User:
        user = self.load(team_id, user_id)
        user.require_live()
        return user

    # -- commands -----------------------------------------------------------------------

    @command
    def create_user(
        self,
        ctx: CommandContext,
        team_id: UUID,
        *,
        client_user_id: str,
        fallback_time_zone: str | None = None,
        fallback_birth_date: date | None = None,
        ingestion_start: date | None = None,
        ingestion_end: date | None = None,
    ) -> User:
        self._check_client_user_id(client_user_id)
        self._check_settings(
            fallback_time_zone, fallback_birth_date, ingestion_start, ingestion_end
        )
        user_id = uuid4()
        # Every user has personal data now: its client_user_id, sealed with its own key,
        # which (given a vault that can) is stored with the user's events, in one commit.
        if self.keeps_new_keys is not None:
            self.keeps_new_keys.new_key(user_id)
        sealed_client_user_id = self.vault.seal(user_id, client_user_id)
        sealed_birth_date = (
            None
            if fallback_birth_date is None
            else self.vault.seal(user_id, fallback_birth_date.isoformat())
        )
        # The zone says where the person lives: sealed like the birth date (checked above).
        sealed_time_zone = (
            None if fallback_time_zone is None else self.vault.seal(user_id, fallback_time_zone)
        )
        try:
            return self._register(
                ctx,
                team_id,
                user_id,
                client_user_id,
                sealed_client_user_id,
                sealed_time_zone,
                sealed_birth_date,
                ingestion_start,
                ingestion_end,
            )
        except (ClientUserIdTaken, ConcurrentChange, TeamNotFound):
            # Nothing was recorded for this user id: drop its key rather than orphan it.
            self.vault.discard(user_id)
            raise

    def _register(
        self,
        ctx: CommandContext,
        team_id: UUID,
        user_id: UUID,
        client_user_id: str,
        sealed_client_user_id: str,
        sealed_fallback_time_zone: str | None,
        sealed_birth_date: str | None,
        ingestion_start: date | None,
        ingestion_end: date | None,
    ) -> User:
        for attempt in range(_CREATE_ATTEMPTS):
            now = self.clock()
            # Optimistic: most ids are new, so the first attempt starts the claim without
            # reading it (but for a claim made before digests, which is always read); the
            # event store refuses it if the claim exists (a conflict).
            located = self.client_user_ids.locate(ctx, team_id, client_user_id, read=attempt > 0)
            user = User.register(
                ctx,
                now,
                user_id=user_id,
                team_id=team_id,
                sealed_client_user_id=sealed_client_user_id,
                claim_id=located.claim_id,
                sealed_fallback_time_zone=sealed_fallback_time_zone,
                sealed_birth_date=sealed_birth_date,
                ingestion_start=ingestion_start,
                ingestion_end=ingestion_end,
            )
            claim = located.claim
            if claim is None:
                claim = ClientUserIdClaim.start(ctx, now, team_id, located.digest, user_id)
            else:
                if claim.holder is not None:
                    holder = self.ledger.find(claim.holder)
                    assert isinstance(holder, User)
                    raise ClientUserIdTaken(holder.id, holder.created_on)
                claim.claim(ctx, now, user_id)
            try:
                self.ledger.save(claim, user)
            except IntegrityError:
                continue  # the claim exists, or another request moved it: read it
            return user
        raise ConcurrentChange()

    @command
    def update_user(
        self, ctx: CommandContext, team_id: UUID, user_id: UUID, changes: Mapping[str, Any]
    ) -> User:
        unknown = set(changes) - set(UPDATABLE_FIELDS)
        if unknown:
            raise InvalidRequest(f"Unknown field {sorted(unknown)[0]!r}.", sorted(unknown)[0])
        if not changes:
            raise NothingToUpdate()
        user = self.load_live(team_id, user_id)
        now = self.clock()
        start = changes.get("ingestion_start", user.ingestion_start)
        end = changes.get("ingestion_end", user.ingestion_end)
        self._check_settings(
            changes.get("fallback_time_zone"), changes.get("fallback_birth_date"), start, end
        )
        settings: dict[str, Any] = {}
        for key in ("ingestion_start", "ingestion_end"):
            if key in changes:
                settings[key] = changes[key]
        if "fallback_time_zone" in changes:
            zone = changes["fallback_time_zone"]
            settings["sealed_fallback_time_zone"] = (
                None if zone is None else self.vault.seal(user.id, zone)
            )
        if "fallback_birth_date" in changes:
            birth_date = changes["fallback_birth_date"]
            settings["sealed_birth_date"] = (
                None if birth_date is None else self.vault.seal(user.id, birth_date.isoformat())
            )
        touched: list[Any] = [user]
        new_client_user_id = changes.get("client_user_id")
        target = (
            None
            if new_client_user_id is None
            else self.client_user_ids.locate(ctx, team_id, new_client_user_id)
        )
        # The same claim is the same value: the client_user_id does not change.
        if target is not None and target.claim_id != user.claim_id:
            assert new_client_user_id is not None
            self._check_client_user_id(new_client_user_id)
            touched += self._move_claim(ctx, now, user, target)
            sealed = self.vault.seal(user.id, new_client_user_id)
            user.change_client_user_id(ctx, now, sealed, target.claim_id)
        if settings:
            user.change_settings(ctx, now, settings)
        moved_claim = len(touched) > 1
        self._save(*touched, conflict=ClientUserIdInUse if moved_claim else ConcurrentChange)
        return user

    @command
    def record_demographics(
        self, ctx: CommandContext, team_id: UUID, user_id: UUID, fields: Mapping[str, Any]
    ) -> Demographics:
        """Merge `fields` into the user's demographics; the result must be complete."""
        if not fields:
            raise NothingToUpdate()
        user = self.load_live(team_id, user_id)
        current: dict[str, Any] = {}
        if user.sealed_demographics is not None:
            current = self.vault.open(user.id, user.sealed_demographics) or {}
        merged = Demographics.model_validate({**current, **fields})
        sealed = self.vault.seal(user.id, merged.model_dump(mode="json"))
        user.record_demographics(ctx, self.clock(), sealed, sorted(fields))
        self._save(user)
        return merged

    @command
    def delete_user(
        self,
        ctx: CommandContext,
        team_id: UUID,
        user_id: UUID,
        *,
        reason: str | None = None,
        ticket: str | None = None,
    ) -> User:
        """Start the user's grace period. `reason` (free text, sealed with the user's key)
        and `ticket` (a reference into the caller's records, in clear) say why, if the
        caller said; both are recorded on `User.Deleted` and shown in the deletion report."""
        if reason is not None and (problem := deletion_reason_problem(reason)):
            raise InvalidRequest(problem, "reason", "argument")
        if ticket is not None and (problem := deletion_ticket_problem(ticket)):
            raise InvalidRequest(problem, "ticket", "argument")
        # What the deletion ends, read first and at once: the command's first read, which
        # the ledger's adapter may send with its reading of the log (one round trip on
        # PostgreSQL, ADR 0025). Another team's user's is never used: the load refuses.
        targets = self.deletion_targets(user_id)
        user = self.load_live(team_id, user_id)
        now = self.clock()
        claim = self._claim_of(user)
        user.delete(
            ctx,
            now,
            now + self.grace_period,
            sealed_reason=None if reason is None else self.vault.seal(user.id, reason),
            ticket=ticket,
        )
        # The client_user_id is released at once: a new user may take it.
        claim.release(ctx, now, user.id)
        # What ends with the user in the other contexts (its provider connections are
        # deregistered, its open lab test orders cancelled) ends at once, in the same
        # transaction; an undo restores none of it.
        ended = [
            aggregate
            for participant in self.cascade
            for aggregate in participant.end_with_deletion(
                ctx, now, targets.get(participant.name, ())
            )
        ]
        self._save(
            user,
            claim,
            *ended,
            conflict=lambda: self._reason_for_conflict(team_id, user_id),
        )
        return user

    @command
    def deregister_connections_of_gone_user(self, ctx: CommandContext, user_id: UUID) -> int:
        """End what a deleted or erased user still has (connections of a connect that raced
        the deletion), as its deletion would have. Returns how many aggregates changed."""
        user = self.ledger.find(user_id)
        if isinstance(user, User) and user.status == ACTIVE:
            return 0
        now = self.clock()
        ended = [
            aggregate
            for participant in self.cascade
            for aggregate in participant.end_left_behind(ctx, now, user_id)
        ]
        if not ended:
            return 0
        self._save(*ended)
        return len(ended)

    @command
    def undo_deletion(self, ctx: CommandContext, team_id: UUID, user_id: UUID) -> User:
        user = self.load(team_id, user_id)
        now = self.clock()
        try:
            user.undo_deletion(ctx, now)  # checks state and grace period
            claim = self._claim_of(user)
            claim.claim(ctx, now, user.id)  # refused if another live user holds it now
        except tuple(UNDO_REFUSALS) as refusal:
            self._record_refused_undo(ctx, team_id, user_id, UNDO_REFUSALS[type(refusal)])
            raise
        self._save(user, claim, conflict=ClientUserIdInUse)
        return user

    def _record_refused_undo(
        self, ctx: CommandContext, team_id: UUID, user_id: UUID, reason: str
    ) -> None:
        """Record a refused undo on a fresh copy of the user (the refused one may hold the
        undo it was refused, pending), after whatever another command saved meanwhile."""
        for _attempt in range(_CREATE_ATTEMPTS):
            user = self.load(team_id, user_id)
            user.refuse_undo(ctx, self.clock(), reason)
            try:
                self.ledger.save(user)
            except IntegrityError:
                continue
            return

    @command
    def erase_user(self, ctx: CommandContext, user_id: UUID) -> bool:
        """Erase a user whose grace period has ended. Idempotent: False when nothing to do.

        The Erased event carries what each place held (`checked`); the transaction that
        records it deletes those rows, drops the queued deliveries, and refuses
        (ErasureNotVerified, rolled back) if it finds other counts or anything left. A
        count that moved meanwhile (a delivery queued, a chunk stored) is counted again."""
        failure: ErasureNotVerified | None = None
        for _attempt in range(_ERASE_ATTEMPTS):
            try:
                return bool(self._erase_at_once(ctx, [user_id]))
            except IntegrityError:
                continue  # another sweeper erased it, or a sender recorded a delivery
            except ErasureNotVerified as exc:
                failure = exc
                continue
        if failure is not None:
            raise failure
        return False

    @command
    def erase_users(self, ctx: CommandContext, user_ids: Sequence[UUID]) -> int:
        """Erase, in one save, those of these users whose grace period has ended (the
        others are left alone); returns how many. Each user's Erased event is checked by
        the recording transaction as `erase_user`'s is, the places counted, deleted and
        checked for the whole batch at once.

        All or nothing: if another process erased one of them meanwhile, or a count
        moved, nothing is recorded and this raises ConcurrentChange; if a check failed,
        ErasureNotVerified. The caller then erases them one by one (`erase_user`), so
        that one user never holds back the others."""
        try:
            return len(self._erase_at_once(ctx, user_ids))
        except IntegrityError as exc:
            raise ConcurrentChange() from exc

    def _erase_at_once(self, ctx: CommandContext, user_ids: Sequence[UUID]) -> list[User]:
        """One attempt: the due users among `user_ids` erased in one save, what ends with
        them (their queued deliveries, dropped) changed in it; the users erased."""
        now = self.clock()
        # A batch loads in a few queries, however many users it holds.
        loaded = self.ledger.find_many(user_ids) if len(user_ids) > 1 else None
        due = [
            user
            for user in (
                (loaded.get(user_id) if loaded is not None else self.ledger.find(user_id))
                for user_id in user_ids
            )
            if isinstance(user, User) and user.is_due_for_erasure(now)
        ]
        if not due:
            return []
        ids = [user.id for user in due]
        inventories = self.erasure_inventory(ids)
        shares = [participant.end_with_erasure(ctx, now, ids) for participant in self.cascade]
        for user in due:
            found = dict(inventories.get(user.id, {}))
            for share in shares:
                erased_with = share.get(user.id)
                if erased_with is not None:
                    found.update(erased_with.counted)
            user.erase(ctx, now, {place: found.get(place, 0) for place in ERASURE_REMOVES})
        # The users first, then each participant's changes, user by user.
        ended = [
            aggregate
            for share in shares
            for user in due
            for aggregate in share.get(user.id, ErasedWithUser()).changed
        ]
        self.ledger.save(*due, *ended)
        return due

    # -- helpers ------------------------------------------------------------------------

    def _claim_of(self, user: User) -> ClientUserIdClaim:
        claim = self.ledger.find(user.claim_id)
        assert isinstance(claim, ClientUserIdClaim), "every user holds or held its claim"
        return claim

    def _move_claim(
        self, ctx: CommandContext, now: Any, user: User, target: ClaimLocation
    ) -> list[ClientUserIdClaim]:
        old = self._claim_of(user)
        new = target.claim
        if new is None:
            new = ClientUserIdClaim.start(ctx, now, user.team_id, target.digest, user.id)
        else:
            new.claim(ctx, now, user.id)  # ClientUserIdInUse when held by another
        old.release(ctx, now, user.id)
        return [old, new]

    def _save(
        self, *aggregates: Any, conflict: Callable[[], LedgerError] = ConcurrentChange
    ) -> None:
        """Save; a version conflict (someone changed one of these meanwhile) is `conflict`."""
        try:
            self.ledger.save(*aggregates)
        except IntegrityError as exc:
            raise conflict() from exc

    def _reason_for_conflict(self, team_id: UUID, user_id: UUID) -> LedgerError:
        """What a command lost to: a concurrent delete makes the user not live any more."""
        try:
            self.load_live(team_id, user_id)
        except LedgerError as reason:
            return reason
        return ConcurrentChange()

    def _check_client_user_id(self, value: str) -> None:
        problem = client_user_id_problem(value)
        if problem:
            raise InvalidRequest(problem, "client_user_id")

    def _check_settings(
        self,
        time_zone: str | None,
        birth_date: date | None,
        start: date | None,
        end: date | None,
    ) -> None:
        if time_zone is None and birth_date is None and start is None and end is None:
            return  # nothing set, nothing to check (most creates)
        checks = (
            ("fallback_time_zone", time_zone is not None and time_zone_problem(time_zone)),
            (
                "fallback_birth_date",
                birth_date is not None and birth_date_problem(birth_date, self.clock().date()),
            ),
            ("ingestion_start", ingestion_bounds_problem(start, end)),
        )
        for field, problem in checks:
            if problem:
                raise InvalidRequest(problem, field)
