"""Settings from environment variables, all prefixed HEALTHLEDGER_ (see docs/operations.md)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from healthledger.adapters.persistence.keys.master_key import default_master_key_file
from healthledger.domain.webhooks.management import Destinations
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    model_validator,
)
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


def _comma_list(value: Any) -> Any:
    # From the environment: "hooks.internal, 10.0.0.0/8".
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    return value


def _destinations(value: list[str]) -> list[str]:
    Destinations.parse(value)  # a malformed entry is a ValueError naming it
    return value


def _database_url(value: str) -> str:
    """A SQLite or PostgreSQL URL (never echoed: it may hold a password)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        backend = make_url(value).get_backend_name()
    except ArgumentError:
        backend = None
    if backend not in ("sqlite", "postgresql"):
        raise ValueError(
            "must be a SQLite or PostgreSQL URL: sqlite:///path/to/file.db or "
            "postgresql+psycopg://user@host:5432/database"
        )
    return value


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


class OAuthClientSetting(BaseModel):
    """The service's own OAuth client at one maker (registered in its developer console
    with the callback `{public_base_url}/v2/link/oauth/callback/{slug}`)."""

    model_config = ConfigDict(extra="forbid")

    client_id: str = Field(min_length=1)
    client_secret: SecretStr


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HEALTHLEDGER_", extra="ignore")

    # One SQLAlchemy URL for everything; a SQLite file in the current directory by default.
    database_url: Annotated[str, AfterValidator(_database_url)] = "sqlite:///healthledger.db"
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
    # ... and as soon as this many events were committed in this process since it last
    # signed (0: at the interval only), so that the unsigned tail of the log stays short.
    chain_sign_every: int = Field(default=1000, ge=0)
    # Every signed head is also appended to this file, outside the database, where its
    # holder cannot reach it (issue 30): `healthledger verify --anchors` compares the log
    # with it. Unset: healthledger.heads beside the signing key file.
    chain_anchor_file: Path | None = None
    # How often the scheduler walks the chain (with the head file's heads) and compares the
    # read models with the log, recording the result as an event (issue 30 §3); 0 or "off":
    # never. It looks hourly (at most) whether the latest recorded check is this old.
    integrity_check_interval: IntervalOrOff = timedelta(days=1)
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
    # OAuth makers (docs/connections.md, the OAuth flow). The service's own client per
    # maker slug, for teams that set no custom credentials: JSON, e.g.
    # {"oura": {"client_id": "...", "client_secret": "..."}}. A maker with neither is not
    # offered on the link page.
    oauth_clients: dict[str, OAuthClientSetting] = Field(default_factory=dict)
    # Tests and staging only: one server standing in for every maker. When set, each
    # maker's authorization and token endpoints are {oauth_maker_url}/{slug}/authorize and
    # {oauth_maker_url}/{slug}/token instead of the documented ones.
    oauth_maker_url: str | None = None
    # The same, per maker (taking precedence over oauth_maker_url for that maker): where the
    # sandbox's fakes stand in, each on its own port (`serve --fake-makers` fills it; JSON,
    # e.g. {"oura": "http://127.0.0.1:8010"}: {url}/{slug}/authorize, {url}/{slug}/token).
    oauth_maker_urls: dict[str, str] = Field(default_factory=dict)
    # The Domain of the browser-binding cookie. Unset, the cookie is the link page's host's
    # only: it reaches the callback when the team API is on the same host (ports do not
    # matter to cookies). On sibling hosts, a parent domain of both.
    oauth_cookie_domain: str | None = None
    # How long a call to a maker's token endpoint may take.
    oauth_timeout: Duration = Field(default=timedelta(seconds=10), gt=timedelta(0))
    # Oura's data API (API v2, docs/makers/oura.md): its base URL. Tests and the sandbox
    # point it at the fake Oura (healthledger.adapters.makers.fake_oura).
    oura_api_url: str = "https://api.ouraring.com"
    # How far back a new Oura connection's history is pulled (Oura keeps the ring's whole
    # history; the documented advice is one historical pull, then webhooks).
    oura_history_days: int = Field(default=730, ge=1)
    # The verification token of our Oura webhook subscriptions (docs/makers/oura.md
    # #webhooks): what Oura's handshake GET must present. Unset: derived from the service's
    # Oura client secret, so that every process of a deployment agrees without more
    # configuration.
    oura_webhook_verification_token: SecretStr | None = None
    # Withings' Public API (docs/makers/withings.md): its base URL. Tests and the sandbox
    # point it at the fake Withings (healthledger.adapters.makers.fake_withings).
    withings_api_url: str = "https://wbsapi.withings.net"
    # How far back a new Withings connection's history is pulled (Withings keeps it all).
    withings_history_days: int = Field(default=730, ge=1)
    # Polar AccessLink v3 (docs/makers/polar.md): its base URL. Tests and the sandbox
    # point it at the fake Polar (healthledger.adapters.makers.fake_polar).
    polar_api_url: str = "https://www.polaraccesslink.com"
    # How far back a new Polar connection's history is asked for: Polar serves what its
    # transactions hold (since the registration) and 28 days of sleep and recharge.
    polar_history_days: int = Field(default=28, ge=1)
    # Only for a webhook made at Polar by hand: the signature secret Polar answered then.
    # `healthledger makers subscribe polar` makes the webhook and keeps its key sealed,
    # which wins over this (ADR 0036, docs/makers/polar.md#webhooks-in). With neither,
    # Polar's notifications are refused (401): the daily syncs read its data.
    polar_webhook_signature_secret: SecretStr | None = None
    # The Fitbit Web API (docs/makers/fitbit.md): its base URL. Tests and the sandbox point
    # it at the fake Fitbit (healthledger.adapters.makers.fake_fitbit).
    fitbit_api_url: str = "https://api.fitbit.com"
    # How far back a new Fitbit connection's history is pulled (Fitbit keeps it all; at
    # 150 requests an hour per person, two years take several hours: docs/makers/fitbit.md).
    fitbit_history_days: int = Field(default=730, ge=1)
    # The subscriber verification code Fitbit's developer console shows for our subscriber
    # (docs/makers/fitbit.md#subscriptions-webhooks-in): what Fitbit's `?verify=` must be.
    # Unset, every verification is refused (404) and Fitbit does not enable the subscriber.
    fitbit_subscriber_verification_code: SecretStr | None = None
    # The Dexcom API v3 (docs/makers/dexcom.md): its base URL (US; the EU's is
    # https://api.dexcom.eu, Japan's https://api.dexcom.jp, the sandbox's
    # https://sandbox-api.dexcom.com). Tests and the sandbox point it at the fake Dexcom
    # (healthledger.adapters.makers.fake_dexcom).
    dexcom_api_url: str = "https://api.dexcom.com"
    # How far back a new Dexcom connection's history is pulled (read 30 days a request at
    # most; the months without a sensor are skipped through Dexcom's dataRange).
    dexcom_history_days: int = Field(default=730, ge=1)
    # Abbott LibreView (docs/makers/abbott_libreview.md): its API's base URL, where people
    # sign in with their credentials and their glucose is read. Tests and the sandbox
    # point it at the fake LibreView (healthledger.adapters.makers.fake_libreview).
    libreview_api_url: str = "https://api.libreview.io"
    libreview_history_days: int = Field(default=90, ge=1)
    # WHOOP's API v2 (docs/makers/whoop.md): its base URL (the collections are under
    # `/developer/v2/`). Tests and the sandbox point it at the fake WHOOP
    # (healthledger.adapters.makers.fake_whoop).
    whoop_api_url: str = "https://api.prod.whoop.com"
    # How far back a new WHOOP connection's history is pulled (WHOOP keeps it all).
    whoop_history_days: int = Field(default=730, ge=1)
    # Garmin's Health API (docs/makers/garmin.md): its base URL (the summaries, backfill
    # and user endpoints are under `/wellness-api/rest/`; a ping's callback URL is fetched
    # only under it). Tests and the sandbox point it at the fake Garmin
    # (healthledger.adapters.makers.fake_garmin).
    garmin_api_url: str = "https://apis.garmin.com"
    # How far back a new Garmin connection's history is asked for (backfill requests).
    garmin_history_days: int = Field(default=730, ge=1)
    # How long one call to a maker's data API may take before it counts as a timeout.
    maker_api_timeout: Duration = Field(default=timedelta(seconds=30), gt=timedelta(0))
    # Largest request body either API accepts (bytes).
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    # Apple Health imports (docs/makers/apple_health.md). Uploads wait for their import in
    # import_dir (kept across restarts; unset: `<database file>.imports` beside a SQLite
    # database, else $XDG_DATA_HOME/healthledger/imports). An upload may be up to
    # apple_health_max_upload_bytes (max_body_bytes does not apply to it), and its
    # export.xml may unpack to apple_health_max_xml_bytes (past it, a zip bomb: refused).
    import_dir: Path | None = None
    apple_health_max_upload_bytes: int = Field(default=2 * 1024**3, ge=1024)
    apple_health_max_xml_bytes: int = Field(default=16 * 1024**3, ge=1024)
    # How often the import worker looks for imports due (an upload wakes it at once).
    import_worker_interval: Duration = Field(default=timedelta(seconds=30), gt=timedelta(0))
    # The lab report parser (docs/labs.md, the lab report parser): the files of one job
    # together (its request's body, max_body_bytes aside), how many files and pages.
    lab_report_max_upload_bytes: int = Field(default=10 * 1024**2, ge=1024, le=100 * 1024**2)
    lab_report_max_files: int = Field(default=5, ge=1, le=50)
    lab_report_max_pages: int = Field(default=30, ge=1, le=1_000)
    erasure_sweep_interval: Duration = Field(default=timedelta(seconds=60), gt=timedelta(0))
    # How often the scheduler looks for deprecation cut-overs whose date has passed (it also
    # looks once at start, so a date that passed while the service was down is applied).
    deprecation_sweep_interval: Duration = Field(default=timedelta(hours=1), gt=timedelta(0))
    # Users erased per batch (one transaction each, at most 1,000: ADR 0021), and how long
    # a sweeping process's claim on its batch keeps the other processes off it.
    erasure_batch_size: int = Field(default=500, ge=1, le=1_000)
    erasure_claim_lease: Duration = Field(default=timedelta(minutes=5), gt=timedelta(0))
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
    # The simulated lab that moves sandbox lab test orders (docs/labs.md#orders): the time
    # each step takes after the one before (comma-separated seconds: the requisition,
    # collecting the sample, the sample reaching the lab, the results), the shares of
    # orders it fails and cancels (each order's fate is fixed by its id), and how often it
    # looks for due steps (a step due at once wakes it).
    lab_order_step_delays: Annotated[
        list[Annotated[float, Field(ge=0)]], NoDecode, BeforeValidator(_retry_delays)
    ] = Field(default=[60.0, 7200.0, 172800.0, 86400.0], min_length=1)
    lab_order_failure_rate: float = Field(default=0.03, ge=0, le=1)
    lab_order_cancellation_rate: float = Field(default=0.02, ge=0, le=1)
    lab_order_poll_interval: Duration = Field(default=timedelta(seconds=5), gt=timedelta(0))
    # How long a portal URL works (docs/labs.md#portal; gaps.md: launch 10 minutes, sent
    # from the team's signed-in app; communications 28 days, for e-mail and SMS).
    portal_launch_lifetime: Duration = Field(default=timedelta(minutes=10), gt=timedelta(0))
    portal_communications_lifetime: Duration = Field(default=timedelta(days=28), gt=timedelta(0))
    # How often the webhook dispatcher looks for new events and due deliveries (commits in
    # the same process wake it at once).
    webhook_poll_interval: Duration = Field(default=timedelta(seconds=2), gt=timedelta(0))
    # A POST must be answered 2xx within webhook_timeout (gaps.md: 15 s). A sender claims
    # each delivery for webhook_lease before posting it and starts only POSTs that end
    # within the lease's first half (the second is for recording them); a claim whose
    # holder died is taken over after the lease (ADR 0019). At least 4 timeouts.
    webhook_timeout: Duration = Field(default=timedelta(seconds=15), gt=timedelta(0))
    webhook_lease: Duration = Field(default=timedelta(minutes=2), gt=timedelta(0))
    # Webhooks go to public addresses only: a URL written with (or a host name that
    # resolves, when each webhook is sent, to) a loopback, private, link-local, reserved,
    # multicast or unspecified address is refused. For receivers on premises: host names
    # (allowed whatever they resolve to) and IP addresses or CIDR ranges allowed all the
    # same, comma-separated ("hooks.internal,10.20.0.0/16,fd00::/8").
    webhook_allowed_destinations: Annotated[
        list[str], NoDecode, BeforeValidator(_comma_list), AfterValidator(_destinations)
    ] = Field(default_factory=list)
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
    # An export upload's body (POST /v2/user/{id}/import/apple_health) has this instead.
    upload_body_timeout: Duration = Field(default=timedelta(minutes=15), gt=timedelta(0))
    keep_alive_timeout: Duration = Field(default=timedelta(seconds=5), gt=timedelta(0))
    connection_limit: int = Field(default=1000, ge=1)
    # `serve`: team API processes on team_api_port (`--workers` overrides; more than one
    # needs PostgreSQL), and each process's PostgreSQL pool: database_pool_size
    # connections kept, as many again twice over opened under load (docs/operations.md,
    # running on PostgreSQL).
    workers: int = Field(default=1, ge=1)
    database_pool_size: int = Field(default=10, ge=1)

    @model_validator(mode="after")
    def lease_outlasts_a_post(self) -> Settings:
        if self.webhook_lease < 4 * self.webhook_timeout:
            raise ValueError(
                "HEALTHLEDGER_WEBHOOK_LEASE must be at least 4 times HEALTHLEDGER_WEBHOOK_TIMEOUT"
            )
        return self


# Read by the test suite and the benchmarks (tests/, bench/), not by the service.
_TOOLS_VARIABLES = frozenset({"HEALTHLEDGER_TEST_POSTGRES_URL", "HEALTHLEDGER_BENCH_POSTGRES_URL"})


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """A warning for each HEALTHLEDGER_* variable that no setting reads (pydantic-settings
    ignores them: a newcomer's HEALTHLEDGER_PORT would silently leave the port as it was),
    naming the closest setting where one is close. Names only: never a value."""
    prefix = "HEALTHLEDGER_"
    known = sorted(name.upper() for name in Settings.model_fields)  # without the prefix
    warnings = []
    for name in sorted(environ):
        if not name.upper().startswith(prefix) or name in _TOOLS_VARIABLES:
            continue
        word = name.upper().removeprefix(prefix)
        if word in known:
            continue
        # The settings holding the name as a word first (HEALTHLEDGER_PORT: the three
        # *_PORTs, where a ratio would name just one), else the closest by spelling.
        closest = [setting for setting in known if word in setting.split("_")][:3]
        closest = closest or difflib.get_close_matches(word, known, n=1, cutoff=0.6)
        hint = " or ".join(prefix + setting for setting in closest)
        hint = f"; did you mean {hint}?" if closest else ""
        warnings.append(f"{name} is not a setting and is ignored{hint}")
    return warnings
