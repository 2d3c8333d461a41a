"""Settings from environment variables, all prefixed HEALTHLEDGER_ (see docs/operations.md)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from healthledger.adapters.persistence.master_key import default_master_key_file
from pydantic import AfterValidator, BeforeValidator, Field, SecretStr
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


def _retry_delays(value: Any) -> Any:
    # From the environment: "60,300,1800" (seconds).
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    return value


def _seconds_or_iso(value: Any) -> Any:
    # An environment variable is a string: "604800" means seconds, "P7D" is ISO 8601.
    if isinstance(value, str) and value.strip().replace(".", "", 1).isdigit():
        return float(value)
    return value


Duration = Annotated[timedelta, BeforeValidator(_seconds_or_iso)]


def _interval_or_off(value: Any) -> Any:
    # "off" turns a periodic job off (so does 0, in any form: `_zero_is_off`).
    if isinstance(value, str) and value.strip().lower() == "off":
        return None
    return _seconds_or_iso(value)


def _zero_is_off(value: timedelta | None) -> timedelta | None:
    if value is not None and value < timedelta(0):
        raise ValueError("must be a positive duration, or 0 / off")
    return None if value == timedelta(0) else value


IntervalOrOff = Annotated[
    timedelta | None, BeforeValidator(_interval_or_off), AfterValidator(_zero_is_off)
]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HEALTHLEDGER_", extra="ignore")

    # One SQLAlchemy URL for everything; a SQLite file in the current directory by default.
    database_url: str = "sqlite:///healthledger.db"
    # What `serve`, the CLI and `build_service` do with pending schema migrations at start:
    # `apply` them, or `refuse` to start (then `healthledger migrate` applies them).
    migrate_on_start: Literal["apply", "refuse"] = "apply"
    # The master key that wraps every user's data key; never stored in the database. From
    # the first of: master_key (base64), master_key_command (prints it: a secrets
    # manager), master_key_file (default outside the database's directory, in
    # `default_key_directory()`; refused in the SQLite database's own directory unless
    # allow_key_beside_database). See docs/operations.md#the-master-key.
    master_key: SecretStr | None = None
    master_key_command: str | None = None
    master_key_file: Path = Field(default_factory=default_master_key_file)
    allow_key_beside_database: bool = False
    # How often the scheduler rotates the master key (file source only); 0 or "off": never.
    master_key_rotation_interval: IntervalOrOff = timedelta(days=7)
    # The Ed25519 key that signs the hash chain's heads and deletion reports (ADR 0015);
    # never in the database. Unset: healthledger.signing.key beside the master key file.
    signing_key_file: Path | None = None
    # How often the scheduler signs the chain's head (skipped when it did not move).
    chain_sign_interval: Duration = Field(default=timedelta(hours=1), gt=timedelta(0))
    # Seconds or ISO 8601 (P7D). The spec's grace period is 7 days.
    grace_period: Duration = Field(default=timedelta(days=7), gt=timedelta(0))
    host: str = "127.0.0.1"
    team_api_port: int = Field(default=8000, ge=0, le=65535)
    management_api_port: int = Field(default=8001, ge=0, le=65535)
    # The hosted link page ({link_url}): `serve` runs it on link_port; link_url is where
    # users' browsers reach it, the base of every link_web_url handed out.
    link_port: int = Field(default=8002, ge=0, le=65535)
    link_url: str = "http://127.0.0.1:8002"
    # Where callers reach the team API (used in URLs we hand out, e.g. OAuth redirects).
    public_base_url: str = "http://127.0.0.1:8000"
    # Largest request body either API accepts (bytes).
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    erasure_sweep_interval: Duration = Field(default=timedelta(seconds=60), gt=timedelta(0))
    # How often the scheduler looks for deprecation cut-overs whose date has passed (it also
    # looks once at start, so a date that passed while the service was down is applied).
    deprecation_sweep_interval: Duration = Field(default=timedelta(hours=1), gt=timedelta(0))
    erasure_batch_size: int = Field(default=500, ge=1)
    user_snapshot_interval: int = Field(default=50, ge=2)
    # Historical pulls: how often the worker looks for due pulls (a connect also wakes it),
    # the delays before each retry of a pull that failed for a passing reason
    # (comma-separated seconds; one more failure after the last is retry_quota_exhausted),
    # and how long a running attempt is trusted before another worker takes it over.
    pull_poll_interval: Duration = Field(default=timedelta(seconds=5), gt=timedelta(0))
    pull_retry_delays: Annotated[
        list[Annotated[float, Field(ge=0)]], NoDecode, BeforeValidator(_retry_delays)
    ] = Field(default=[60.0, 300.0, 1800.0, 7200.0])
    pull_lease: Duration = Field(default=timedelta(minutes=15), gt=timedelta(0))
    # How often the webhook dispatcher looks for new events and due deliveries (commits in
    # the same process wake it at once).
    webhook_poll_interval: Duration = Field(default=timedelta(seconds=2), gt=timedelta(0))
    # Connected feeds are synced this long after their last pull or sync; the sync sweep
    # runs every daily_sync_sweep_interval.
    daily_sync_interval: Duration = Field(default=timedelta(days=1), gt=timedelta(0))
    daily_sync_sweep_interval: Duration = Field(default=timedelta(minutes=10), gt=timedelta(0))
    # Aggregates kept in memory per process (0: none); each get still reads newer events.
    aggregate_cache_size: int = Field(default=10_000, ge=0)
    log_level: str = "info"
    # Slow clients (docs/adr/0013-slow-clients.md). A request head must be in within
    # request_header_timeout of its connection opening (of its first byte, on a kept-alive
    # connection), its body within request_body_timeout of the head; else the connection
    # is closed. An idle kept-alive connection is closed after keep_alive_timeout. Each
    # port serves at most connection_limit connections at once: requests beyond it are
    # answered 503 until slow ones are closed.
    request_header_timeout: Duration = Field(default=timedelta(seconds=10), gt=timedelta(0))
    request_body_timeout: Duration = Field(default=timedelta(seconds=30), gt=timedelta(0))
    keep_alive_timeout: Duration = Field(default=timedelta(seconds=5), gt=timedelta(0))
    connection_limit: int = Field(default=1000, ge=1)
