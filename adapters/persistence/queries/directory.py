"""The read side: what the API and the scheduler read from the read models."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import (
    custom_credentials,
    management_keys,
    organizations,
    team_api_keys,
    teams,
    users,
)
from healthledger.adapters.persistence.queries.verified_keys import VerifiedKeys
from healthledger.domain.errors import (
    DemographicsNotFound,
    UserNotFound,
    UserScheduledForDeletion,
)
from healthledger.domain.personal_data import ERASED_PLACEHOLDER, PersonalDataVault
from healthledger.domain.users.user import ACTIVE, PENDING_ERASURE, client_user_id_problem
from sqlalchemy import Connection, Row, bindparam, func, select


@dataclass(frozen=True)
class ManagementKeyRecord:
    key_id: UUID
    org_id: UUID
    role: str
    team_ids: frozenset[UUID]
    key_hash: str
    revoked: bool


def _team(row: Any) -> dict[str, Any]:
    return {
        "id": row.team_id,
        "name": row.name,
        "created_on": row.created_on,
        "region": row.region,
        "org_id": row.org_id,
        "settings": row.settings,
        "features": sorted(row.features),
    }


def _management_key(row: Any) -> dict[str, Any]:
    return {
        "id": row.key_id,
        "label": row.label,
        "role": row.role,
        "team_role_bindings": [{"team_id": t} for t in row.team_ids],
        "created_on": row.created_on,
    }


@dataclass(frozen=True)
class ApiKeyRecord:
    key_id: UUID
    team_id: UUID
    key_hash: str
    revoked: bool
    environment: str
    region: str


def _require_possible(client_user_id: str) -> None:
    # A value no user could hold (a NUL, say) is not looked up: no user has it.
    if client_user_id_problem(client_user_id) is not None:
        raise UserNotFound()


# Built once: every user read, and every request's key, is looked up by one of these.
USER_BY_ID = select(users).where(
    users.c.user_id == bindparam("user_id"), users.c.team_id == bindparam("team_id")
)
TEAM_API_KEY_BY_ID = (
    select(
        team_api_keys.c.key_id,
        team_api_keys.c.team_id,
        team_api_keys.c.key_hash,
        team_api_keys.c.revoked_at,
        team_api_keys.c.environment,
        team_api_keys.c.region,
        teams.c.deleted_at,
    )
    .join(teams, teams.c.team_id == team_api_keys.c.team_id)
    .where(team_api_keys.c.key_id == bindparam("key_id"))
)
MANAGEMENT_KEY_BY_ID = select(management_keys).where(
    management_keys.c.key_id == bindparam("key_id")
)


# user ids -> each user's spec 2.3 connected_sources (one query for a whole page).
ConnectedSources = Callable[[list[UUID]], dict[UUID, list[dict[str, Any]]]]
# The team's keyed digest of a client_user_id (None: the team has no secret, so no user).
Digest = Callable[[UUID, str], str | None]
# The key store's `opener_on`: the keys of these users read on the connection in one
# query; the opener then opens their sealed values (conn, user_id, sealed).
OpenInBulk = Callable[[Connection, Collection[UUID]], Callable[[Connection, UUID, str], Any]]
# Opens one user's sealed value: (user_id, sealed) -> the value, or None without its key.
Open = Callable[[UUID, str], Any]


def _no_digest(team_id: UUID, value: str) -> str | None:
    raise RuntimeError("finding a user by its client_user_id needs the teams' digests")


class UserQueries:
    def __init__(
        self,
        db: Database,
        vault: PersonalDataVault,
        connected_sources: ConnectedSources = lambda user_ids: {},
        *,
        digest: Digest = _no_digest,
        open_in_bulk: OpenInBulk | None = None,
    ) -> None:
        """The users rows hold the client_user_id sealed with the user's key and as the
        team's `digest` of it (ADR 0017), never in clear: rows are found by the digest,
        and answered with the value opened, the keys of a page read at once
        (`open_in_bulk`, the key store's `opener_on`; without it, one by one)."""
        self.db = db
        self.vault = vault
        self.connected_sources = connected_sources
        self.digest = digest
        self.open_in_bulk = open_in_bulk

    def resolved_user(self, team_id: UUID, user_id: UUID, *, new: bool = False) -> dict[str, Any]:
        """The resolved user; `new` (just created) skips looking up its connections."""
        with self.db.read() as conn:
            row = self._require_live(self._user_row(conn, team_id, user_id))
            open_ = self._opener(conn, [row])
        sources = {} if new else self.connected_sources([row.user_id])
        return self._render_opened(row, sources.get(row.user_id, []), open_, single=True)

    @staticmethod
    def _user_row(conn: Connection, team_id: UUID, user_id: UUID) -> Any:
        # Every read of one user (and the answer to every create) comes through here.
        return conn.execute(USER_BY_ID, {"user_id": user_id, "team_id": team_id}).first()

    def _opener(self, conn: Connection, rows: Sequence[Any]) -> Open:
        """Opens the sealed values of these rows' users: their keys read on `conn` in one
        query (a page of the listing: one read of the key store, not one per row)."""
        if self.open_in_bulk is None:
            return self.vault.open
        opener = self.open_in_bulk(conn, [r.user_id for r in rows])
        return lambda user_id, sealed: opener(conn, user_id, sealed)

    def _render_opened(
        self, row: Any, connected_sources: list[dict[str, Any]], open_: Open, single: bool
    ) -> dict[str, Any]:
        """`render` of a users row, its client_user_id opened with the user's key. A key
        gone since the row was read (the user erased meanwhile) is a 404 for one user,
        and the erased placeholder in a page."""
        sealed = row.sealed_client_user_id
        opened = None if sealed is None else open_(row.user_id, sealed)
        if opened is None and single:
            raise UserNotFound()
        client_user_id = ERASED_PLACEHOLDER if opened is None else str(opened)
        return self.render(row, connected_sources, client_user_id=client_user_id, open_=open_)

    def resolve(self, team_id: UUID, client_user_id: str) -> dict[str, Any]:
        """The live user holding `client_user_id`; else 404 (scheduled-for-deletion if so)."""
        _require_possible(client_user_id)
        digest = self.digest(team_id, client_user_id)
        if digest is None:
            raise UserNotFound()
        with self.db.read() as conn:
            rows = conn.execute(
                select(users)
                .where(users.c.team_id == team_id, users.c.client_user_id_digest == digest)
                .order_by(users.c.created_on.desc())
            ).all()
            live = [r for r in rows if r.status == ACTIVE]
            row = self._require_live(live[0] if live else (rows[0] if rows else None))
            open_ = self._opener(conn, [row])
        sources = self.connected_sources([row.user_id])
        return self._render_opened(row, sources.get(row.user_id, []), open_, single=True)

    def list_users(
        self, team_id: UUID, offset: int, limit: int
    ) -> tuple[list[dict[str, Any]], int]:
        live = (users.c.team_id == team_id) & (users.c.status == ACTIVE)
        with self.db.read() as conn:
            total = conn.execute(select(func.count()).select_from(users).where(live)).scalar_one()
            rows = conn.execute(
                select(users)
                .where(live)
                .order_by(users.c.created_on, users.c.user_id)
                .offset(offset)
                .limit(limit)
            ).all()
            # The page's client_user_ids (and birth dates): one read of the key store.
            open_ = self._opener(conn, rows)
        sources = self.connected_sources([r.user_id for r in rows])
        return [
            self._render_opened(r, sources.get(r.user_id, []), open_, single=False) for r in rows
        ], total

    def pending_user_id(self, team_id: UUID, client_user_id: str) -> UUID:
        """The most recently deleted user of the team that held `client_user_id`."""
        _require_possible(client_user_id)
        digest = self.digest(team_id, client_user_id)
        if digest is None:
            raise UserNotFound()
        with self.db.read() as conn:
            user_id = conn.execute(
                select(users.c.user_id)
                .where(
                    users.c.team_id == team_id,
                    users.c.client_user_id_digest == digest,
                    users.c.status == PENDING_ERASURE,
                )
                .order_by(users.c.deleted_at.desc())
                .limit(1)
            ).scalar()
        if user_id is None:
            raise UserNotFound()
        return user_id

    def demographics(self, team_id: UUID, user_id: UUID) -> dict[str, Any]:
        with self.db.read() as conn:
            row = self._require_live(self._user_row(conn, team_id, user_id))
        if row.sealed_demographics is None:
            raise DemographicsNotFound()
        value = self.vault.open(row.user_id, row.sealed_demographics)
        if value is None:
            raise UserNotFound()
        return value

    def live_user_ids(self, team_id: UUID) -> list[UUID]:
        with self.db.read() as conn:
            return list(
                conn.execute(
                    select(users.c.user_id).where(
                        users.c.team_id == team_id, users.c.status == ACTIVE
                    )
                ).scalars()
            )

    def status(self, user_id: UUID) -> str | None:
        with self.db.read() as conn:
            return conn.execute(select(users.c.status).where(users.c.user_id == user_id)).scalar()

    # -- rendering ------------------------------------------------------------------------

    @staticmethod
    def _require_live(row: Row[Any] | None) -> Row[Any]:
        if row is None:
            raise UserNotFound()
        if row.status == PENDING_ERASURE:
            raise UserScheduledForDeletion()
        return row

    def render(
        self,
        row: Any,
        connected_sources: list[dict[str, Any]],
        *,
        client_user_id: str | None = None,
        open_: Open | None = None,
    ) -> dict[str, Any]:
        """Spec 2.3, the resolved user, of a users row (the read model's, its
        `client_user_id` opened by the caller; or a user as of an instant, which holds it:
        `adapters/compliance/time_travel.py`). `open_` opens its birth date (the vault's
        by default), and its time zone."""
        time_zone = None
        if row.sealed_fallback_time_zone is not None:
            zone = (open_ or self.vault.open)(row.user_id, row.sealed_fallback_time_zone)
            if zone is not None:
                time_zone = {
                    "id": zone,
                    "source_slug": row.fallback_time_zone_source,
                    "updated_at": row.fallback_time_zone_updated_at,
                }
        birth_date = None
        if row.sealed_birth_date is not None:
            value = (open_ or self.vault.open)(row.user_id, row.sealed_birth_date)
            if value is not None:
                birth_date = {
                    "value": value,
                    "source_slug": row.birth_date_source,
                    "updated_at": row.birth_date_updated_at,
                }
        return {
            "user_id": row.user_id,
            "team_id": row.team_id,
            "client_user_id": row.client_user_id if client_user_id is None else client_user_id,
            "created_on": row.created_on,
            "connected_sources": connected_sources,
            "fallback_time_zone": time_zone,
            "fallback_birth_date": birth_date,
            "ingestion_start": row.ingestion_start,
            "ingestion_end": row.ingestion_end,
        }


class TeamQueries:
    def __init__(self, db: Database, verified_keys: VerifiedKeys | None = None) -> None:
        self.db = db
        # PostgreSQL: the keys in force this process read, forgotten at any key's change
        # (ADR 0042); None reads the table every time.
        self.verified_keys = verified_keys

    def api_key(self, key_id: UUID) -> ApiKeyRecord | None:
        # Every team API request authenticates through this lookup. A deleted team's
        # keys stop working with it.
        if self.verified_keys is not None:
            found: ApiKeyRecord | None = self.verified_keys.lookup(key_id)
            return found
        return self.read_api_key(key_id)

    def kept_api_key(self, key_id: UUID) -> ApiKeyRecord | None:
        """The key's record if this process keeps it (memory only, no I/O), else None."""
        if self.verified_keys is None:
            return None
        kept: ApiKeyRecord | None = self.verified_keys.kept(key_id)
        return kept

    def read_api_key(self, key_id: UUID) -> ApiKeyRecord | None:
        """`api_key` from the table, never from memory."""
        with self.db.read() as conn:
            row = conn.execute(TEAM_API_KEY_BY_ID, {"key_id": key_id}).first()
        if row is None:
            return None
        revoked = row.revoked_at is not None or row.deleted_at is not None
        return ApiKeyRecord(
            row.key_id, row.team_id, row.key_hash, revoked, row.environment, row.region
        )

    def management_key(self, key_id: UUID) -> ManagementKeyRecord | None:
        with self.db.read() as conn:
            row = conn.execute(MANAGEMENT_KEY_BY_ID, {"key_id": key_id}).first()
        if row is None:
            return None
        return ManagementKeyRecord(
            key_id=row.key_id,
            org_id=row.org_id,
            role=row.role,
            team_ids=frozenset(UUID(t) for t in row.team_ids),
            key_hash=row.key_hash,
            revoked=row.revoked_at is not None,
        )

    def organization(self, org_id: UUID) -> dict[str, Any] | None:
        with self.db.read() as conn:
            row = conn.execute(
                select(organizations).where(organizations.c.org_id == org_id)
            ).first()
        if row is None:
            return None
        return {"id": row.org_id, "name": row.name, "created_on": row.created_on}

    def team(self, team_id: UUID) -> dict[str, Any] | None:
        """A live team, rendered (spec 2.12 plus settings and features)."""
        with self.db.read() as conn:
            row = conn.execute(
                select(teams).where(teams.c.team_id == team_id, teams.c.deleted_at.is_(None))
            ).first()
        return None if row is None else _team(row)

    def source_priorities(self, team_id: UUID) -> dict[str, list[str]]:
        """The team's order of providers per kind of data (domain/teams/
        source_priorities.py): only the kinds it has set, each non-empty."""
        with self.db.read() as conn:
            found = conn.execute(
                select(teams.c.source_priorities).where(teams.c.team_id == team_id)
            ).scalar()
        return {kind: order for kind, order in (found or {}).items() if order}

    def teams_page(
        self,
        org_id: UUID,
        *,
        regions: Sequence[str] = (),
        search: str | None = None,
        after: tuple[datetime, UUID] | None = None,
        limit: int = 50,
        only: frozenset[UUID] | None = None,
    ) -> tuple[list[dict[str, Any]], bool]:
        """One page of the organization's live teams, oldest first; and whether more follow."""
        c = teams.c
        query = select(teams).where(c.org_id == org_id, c.deleted_at.is_(None))
        if regions:
            query = query.where(c.region.in_(list(regions)))
        if search:
            # Folded in Python at projection time: SQLite's lower() knows ASCII only.
            query = query.where(c.name_folded.contains(search.casefold(), autoescape=True))
        if only is not None:
            query = query.where(c.team_id.in_(list(only)))
        if after is not None:
            created_on, team_id = after
            query = query.where(
                (c.created_on > created_on) | ((c.created_on == created_on) & (c.team_id > team_id))
            )
        query = query.order_by(c.created_on, c.team_id).limit(limit + 1)
        with self.db.read() as conn:
            rows = conn.execute(query).all()
        return [_team(r) for r in rows[:limit]], len(rows) > limit

    def management_keys(self, org_id: UUID) -> list[dict[str, Any]]:
        with self.db.read() as conn:
            rows = conn.execute(
                select(management_keys)
                .where(management_keys.c.org_id == org_id, management_keys.c.revoked_at.is_(None))
                .order_by(management_keys.c.created_on)
            ).all()
        return [_management_key(r) for r in rows]

    def management_key_view(self, key_id: UUID) -> dict[str, Any]:
        with self.db.read() as conn:
            row = conn.execute(
                select(management_keys).where(management_keys.c.key_id == key_id)
            ).one()
        return _management_key(row)

    def team_api_keys(self, team_id: UUID, environment: str) -> list[dict[str, Any]]:
        c = team_api_keys.c
        with self.db.read() as conn:
            rows = conn.execute(
                select(team_api_keys)
                .where(c.team_id == team_id, c.environment == environment, c.revoked_at.is_(None))
                .order_by(c.created_on)
            ).all()
        return [
            {
                "id": r.key_id,
                "team_id": r.team_id,
                "environment": r.environment,
                "region": r.region,
                "created_on": r.created_on,
            }
            for r in rows
        ]

    def credentials(self, team_id: UUID) -> list[dict[str, Any]]:
        """Custom credentials without their secrets (which no read ever returns)."""
        c = custom_credentials.c
        with self.db.read() as conn:
            rows = conn.execute(
                select(c.provider, c.status, c.client_id, c.updated_at)
                .where(c.team_id == team_id, c.status != "deleted")
                .order_by(c.provider)
            ).all()
        return [
            {
                "provider": r.provider,
                "status": r.status,
                "client_id": r.client_id,
                "has_client_secret": r.status == "set",
                "updated_at": r.updated_at,
            }
            for r in rows
        ]

    def features(self, team_id: UUID) -> set[str]:
        with self.db.read() as conn:
            features = conn.execute(
                select(teams.c.features).where(teams.c.team_id == team_id)
            ).scalar()
        return set(features or ())

    def deleted_teams_with_live_users(self) -> list[UUID]:
        with self.db.read() as conn:
            return list(
                conn.execute(
                    select(teams.c.team_id)
                    .where(teams.c.deleted_at.is_not(None))
                    .where(
                        select(users.c.user_id)
                        .where(users.c.team_id == teams.c.team_id, users.c.status == ACTIVE)
                        .exists()
                    )
                ).scalars()
            )

    def has_any_team(self) -> bool:
        with self.db.read() as conn:
            return conn.execute(select(teams.c.team_id).limit(1)).first() is not None

    def team_ids(self) -> list[UUID]:
        with self.db.read() as conn:
            return list(
                conn.execute(select(teams.c.team_id).order_by(teams.c.created_on)).scalars()
            )
