"""The `healthledger` command line: serve, fake-makers, migrate, audit, report,
verify-report, verify, chain, rebuild, replay, keys, features, erase-due, deprecations,
webhooks, makers, import.

Each subcommand is declared by a `_declare_<name>` function (its arguments, its help) and
run by a function of its own, which it names with `set_defaults`. A run takes the parsed
arguments and what the subcommand needs: nothing (`verify-report` works offline), the
settings (`serve` and `migrate` open the database their own way), or the service built by
the composition root (every other one). Heavy modules are imported inside the runs, so that
`--help` and a mistyped argument answer at once."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from healthledger.adapters.settings import Settings, unknown_variables
from pydantic import ValidationError

if TYPE_CHECKING:
    from healthledger.adapters.composition import Service
    from healthledger.domain.context import CommandContext

# What a subcommand's run is handed, besides its arguments (see the module's docstring).
OfflineRun = Callable[[argparse.Namespace], int]
SettingsRun = Callable[[argparse.Namespace, Settings], int]
ServiceRun = Callable[[argparse.Namespace, "Service"], int]
# `add_parser` of the subcommands' action: what a `_declare_<name>` adds its parser with.
AddParser = Callable[..., argparse.ArgumentParser]


# -- argument types (argparse names the function in its error: "invalid _instant value") --


def _uuid(value: str) -> UUID:
    try:
        return UUID(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a UUID: {value!r}") from None


def _instant(value: str) -> datetime:
    from healthledger.adapters.compliance.time_travel import parse_instant

    try:
        return parse_instant(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r}: {exc}") from None


def _public_key(value: str) -> bytes:
    try:
        key = bytes.fromhex(value)
    except ValueError:
        key = b""
    if len(key) != 32:
        raise argparse.ArgumentTypeError("give the Ed25519 public key as 64 hex digits")
    return key


def _position(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"not a chain position (1, 2, 3...): {value!r}")
    return int(value)


# -- the command line ----------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="healthledger",
        description="Event-sourced user lifecycle and compliance engine. Settings come "
        "from HEALTHLEDGER_* environment variables (see docs/operations.md).",
    )
    # A subcommand sets the one run it has; `main` looks for it in this order.
    parser.set_defaults(offline=None, with_settings=None, with_service=None)
    commands = parser.add_subparsers(dest="command", required=True)
    # In the order `--help` lists them.
    for declare in (
        _declare_serve,
        _declare_fake_makers,
        _declare_migrate,
        _declare_audit,
        _declare_report,
        _declare_verify_report,
        _declare_verify,
        _declare_chain,
        _declare_rebuild,
        _declare_replay,
        _declare_keys,
        _declare_features,
        _declare_erase_due,
        _declare_deprecations,
        _declare_webhooks,
        _declare_makers,
        _declare_import,
    ):
        declare(commands.add_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from sqlalchemy.exc import OperationalError

    try:
        return _main(argv)
    except OperationalError as exc:
        # The database cannot be opened or answered (no such directory, a server down or
        # refusing, a full disk): said in a line, with the driver's code and the first
        # line of its message (a path, a host and port; never a statement's values).
        from healthledger.adapters.persistence.engine.outages import unavailable

        said = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else ""
        print(
            f"healthledger: the database cannot be used: {unavailable(exc)}: {said}",
            file=sys.stderr,
        )
        return 1
    except BrokenPipeError:
        # The reader went away (`healthledger audit --json | head`): stop quietly, as
        # Python's documentation advises (signal.SIGPIPE notes), with stdout pointed at
        # /dev/null so that the interpreter's last flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    offline: OfflineRun | None = args.offline
    if offline is not None:
        return offline(args)
    settings = _settings()
    if settings is None:
        return 2
    with_settings: SettingsRun | None = args.with_settings
    if with_settings is not None:
        return with_settings(args, settings)
    return _with_service(args.with_service, args, settings)


def _settings() -> Settings | None:
    """The settings from the environment; None, with each problem said, if they are wrong.
    A HEALTHLEDGER_* variable that no setting reads is said too, but does not stop."""
    for warning in unknown_variables(os.environ):
        print(f"healthledger: warning: {warning}", file=sys.stderr)
    try:
        return Settings()
    except ValidationError as exc:
        for error in exc.errors():
            name = "HEALTHLEDGER_" + "_".join(str(part) for part in error["loc"]).upper()
            print(f"healthledger: setting {name}: {error['msg']}", file=sys.stderr)
        return None


def _with_service(run: ServiceRun, args: argparse.Namespace, settings: Settings) -> int:
    """Run a subcommand on the service built from the settings, closed after it."""
    from healthledger.adapters.composition import build_service
    from healthledger.adapters.persistence.engine.migrating import MigrationError
    from healthledger.adapters.persistence.keys.master_key import MasterKeyError
    from healthledger.adapters.persistence.keys.signing_key import SigningKeyError

    try:
        service = build_service(settings)
    except (MigrationError, MasterKeyError, SigningKeyError) as exc:
        return _schema_problem(exc)
    try:
        return run(args, service)
    finally:
        service.close()


def _schema_problem(exc: Exception) -> int:
    # Pending migrations under HEALTHLEDGER_MIGRATE_ON_START=refuse, a schema this version
    # cannot migrate (newer, or not healthledger's), or a master key that is missing, not
    # private, beside the database or not the database's: said plainly, no traceback.
    print(f"healthledger: {exc}", file=sys.stderr)
    return 1


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _cli_context() -> CommandContext:
    """The context of a command the operator gives (actor system:cli)."""
    from healthledger.domain.context import OPERATOR_CLI, CommandContext

    return CommandContext.system(OPERATOR_CLI)


# -- serve -----------------------------------------------------------------------------------


def _declare_serve(add_parser: AddParser) -> None:
    serve = add_parser(
        "serve", help="run the team API, the management API, the link page and the scheduler"
    )
    serve.add_argument("--host", help="overrides HEALTHLEDGER_HOST")
    serve.add_argument("--port", type=int, help="overrides HEALTHLEDGER_TEAM_API_PORT")
    serve.add_argument(
        "--workers",
        type=int,
        help="team API processes on the one port (overrides HEALTHLEDGER_WORKERS; more "
        "than one needs PostgreSQL)",
    )
    serve.add_argument(
        "--fake-makers",
        action="store_true",
        help="sandbox: also run the fake makers (Oura...) on localhost and point the "
        "service's maker URLs and OAuth clients at them; refused unless the service is "
        "reached on localhost only",
    )
    serve.set_defaults(with_settings=_serve)


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    from healthledger.adapters.persistence.engine.migrating import MigrationError
    from healthledger.adapters.persistence.keys.master_key import MasterKeyError
    from healthledger.adapters.persistence.keys.signing_key import SigningKeyError
    from healthledger.adapters.server import ServeRefused, serve

    overrides = (("host", args.host), ("team_api_port", args.port), ("workers", args.workers))
    updates = {k: v for k, v in overrides if v is not None}
    if args.workers is not None and args.workers < 1:
        print("healthledger: --workers must be 1 or more", file=sys.stderr)
        return 2
    try:
        if args.fake_makers:
            return _serve_with_fake_makers(settings.model_copy(update=updates))
        serve(settings.model_copy(update=updates))
    except ServeRefused as exc:
        print(f"healthledger: {exc}", file=sys.stderr)
        return 2
    except (MigrationError, MasterKeyError, SigningKeyError) as exc:
        return _schema_problem(exc)
    return 0


def _serve_with_fake_makers(settings: Settings) -> int:
    """`serve --fake-makers`: the fakes in this process, the service pointed at them."""
    from healthledger.adapters.makers.sandbox import refusal, running_fake_makers
    from healthledger.adapters.server import listening, serve

    refused = refusal(settings)
    if refused is not None:
        print(f"healthledger: {refused}", file=sys.stderr)
        return 2
    # The service's ports are bound before the fakes start: each fake takes a port the
    # system chooses, which could otherwise be the one the service was told to use.
    with listening(settings) as listeners, running_fake_makers(settings.host) as fakes:
        for slug, base in fakes.bases.items():
            print(f"fake maker  {slug:<10} {base}", file=sys.stdout, flush=True)
        # The fakes that deliver (Garmin's backfills) post to this service's webhook.
        fakes.call_back(settings.public_base_url)
        serve(settings.model_copy(update=fakes.settings_updates()), listeners=listeners)
    return 0


# -- fake-makers -----------------------------------------------------------------------------


def _declare_fake_makers(add_parser: AddParser) -> None:
    fake_makers = add_parser(
        "fake-makers",
        help="sandbox: run the fake makers (Oura...) on localhost and print the settings "
        "that point a service at them (docs/operations.md, the makers' sandbox)",
    )
    fake_makers.add_argument("--host", default="127.0.0.1")
    fake_makers.add_argument(
        "--port",
        type=int,
        help="the first fake's port, the next ones after it (default: each fake's own, "
        "8010 onwards; 0: any free ports)",
    )
    fake_makers.set_defaults(offline=_fake_makers)


def _fake_makers(args: argparse.Namespace) -> int:
    import threading
    from contextlib import suppress

    from healthledger.adapters.makers.sandbox import running_fake_makers

    out = sys.stdout
    with running_fake_makers(args.host, args.port) as fakes:
        for slug, base in fakes.bases.items():
            print(f"fake maker  {slug:<10} {base}", file=out)
        print("\nPoint a service at them (sandbox client credentials, no real data):", file=out)
        for name, value in fakes.environment().items():
            print(f"{name}='{value}'", file=out)
        print(
            "\nSigned in at once as a synthetic person (ava; ?fake_person=ben or chloe on", file=out
        )
        print("the authorization URL for another). Ctrl-C stops them.", file=out, flush=True)
        with suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0


# -- migrate ---------------------------------------------------------------------------------


def _declare_migrate(add_parser: AddParser) -> None:
    migrate = add_parser("migrate", help="apply the database's pending schema migrations (Alembic)")
    migrate.add_argument(
        "--status",
        action="store_true",
        help="only show the current revision and what is pending; change nothing",
    )
    migrate.set_defaults(with_settings=_migrate)


def _migrate(args: argparse.Namespace, settings: Settings) -> int:
    from healthledger.adapters.persistence.engine import migrating
    from sqlalchemy.engine import make_url

    out = sys.stdout
    where = make_url(settings.database_url).render_as_string(hide_password=True)
    try:
        if args.status:
            return _migration_status(settings, where)
        done = migrating.upgrade(settings.database_url)
    except migrating.MigrationError as exc:
        return _schema_problem(exc)
    print(f"database  {where}", file=out)
    if done.stamped is not None:
        print(f"stamped   {done.stamped} (its tables were written before migrations)", file=out)
    for revision in done.applied:
        print(f"applied   {revision.describe()}", file=out)
    if done.stamped is None and not done.applied:
        print(f"nothing to apply: already at {done.after} (head)", file=out)
    else:
        print(f"now at    {done.after} (head)", file=out)
    return 0


def _migration_status(settings: Settings, where: str) -> int:
    """`migrate --status`: the current revision and what is pending; nothing changed."""
    from healthledger.adapters.persistence.engine import migrating

    out = sys.stdout
    state = migrating.schema_state(settings.database_url)
    print(f"database  {where}", file=out)
    current = state.current or "none (not under migrations yet)"
    pending = [revision.describe() for revision in state.pending]
    if state.before_migrations:
        current = "none (its tables were written before migrations)"
        pending.insert(0, f"stamp {state.line.baseline} (the tables are the baseline's)")
    print(f"current   {current}", file=out)
    print(f"head      {state.head}", file=out)
    for number, what in enumerate(pending or ["none"]):
        print(f"{'pending' if number == 0 else '':<9} {what}", file=out)
    return 0


# -- audit -----------------------------------------------------------------------------------


def _declare_audit(add_parser: AddParser) -> None:
    audit = add_parser(
        "audit",
        help="a user's full history with its claim, connections, pulls, link tokens and the "
        "webhook deliveries about it (another stream's id: that stream's), or its state at an "
        "instant",
    )
    audit.add_argument("user_id", type=_uuid)
    audit.add_argument(
        "--as-of",
        type=_instant,
        help="the state of this stream (a user, connection, pull, link token, team, webhook "
        "endpoint...) at this ISO 8601 instant, e.g. 2026-03-01T12:00:00Z",
    )
    audit.add_argument("--json", action="store_true", help="machine-readable output")
    audit.set_defaults(with_service=_audit)


def _audit(args: argparse.Namespace, service: Service) -> int:
    if args.as_of is not None:
        return _audit_as_of(args, service)
    from healthledger.adapters.compliance.audit import history, stream_history

    out = sys.stdout
    # A user's audit takes in the streams it owns; any other stream's id, that stream.
    entries = history(service, args.user_id) or stream_history(service, args.user_id)
    if not entries:
        print(f"no user or stream {args.user_id} in the event log", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([_jsonable(vars(e)) for e in entries], indent=2), file=out)
    else:
        for entry in entries:
            print(entry.line(), file=out)
    return 0


def _audit_as_of(args: argparse.Namespace, service: Service) -> int:
    """`audit ID --as-of INSTANT`: the stream's state at that instant."""
    from healthledger.adapters.compliance.time_travel import state_as_of, stream_refusal

    out = sys.stdout
    refused = stream_refusal(service, args.user_id, args.as_of)
    if refused is not None:  # the API's 422, in its words
        print(f"--as-of: {refused}", file=sys.stderr)
        return 2
    state = state_as_of(service, args.user_id, args.as_of)
    if state is None:
        print(f"no stream {args.user_id} at {args.as_of.isoformat()}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(_jsonable(state), indent=2), file=out)
    else:
        for key, value in state.items():
            shown = value.isoformat() if isinstance(value, datetime) else value
            print(f"{key:<20} {shown}", file=out)
    return 0


# -- report deletion -------------------------------------------------------------------------


def _declare_report(add_parser: AddParser) -> None:
    report = add_parser("report", help="signed reports for an auditor")
    report_commands = report.add_subparsers(dest="report_command", required=True)
    deletion = report_commands.add_parser(
        "deletion",
        help="a user's deletion report (any state): the request, the erasure and its checks "
        "run again now, the hash-chain proof; signed",
    )
    deletion.add_argument("user_id", type=_uuid)
    deletion.add_argument("--format", choices=("json", "html", "pdf"), default="json")
    deletion.add_argument(
        "--output", type=Path, help="write it to this file (required for pdf); else stdout"
    )
    deletion.set_defaults(with_service=_deletion_report)


def _deletion_report(args: argparse.Namespace, service: Service) -> int:
    from healthledger.adapters.compliance.deletion_report import LogNotSound, deletion_report
    from healthledger.adapters.compliance.report_rendering import render_html
    from healthledger.adapters.printing import PdfUnavailable, render_pdf
    from healthledger.domain.errors import UserNotFound

    user_id: UUID = args.user_id
    output: Path | None = args.output
    if args.format == "pdf" and output is None:
        print("healthledger: a PDF needs --output PATH", file=sys.stderr)
        return 2
    try:
        report = deletion_report(service, user_id, _cli_context())
    except UserNotFound:
        print(f"no user {user_id} in the event log", file=sys.stderr)
        return 1
    except LogNotSound as refused:
        # The API's 409 says the same; nothing was signed or written.
        print(f"healthledger: {refused.message}", file=sys.stderr)
        return 1
    if args.format == "json":
        content: str | bytes = json.dumps(report, indent=2) + "\n"
    else:
        content = render_html(report)
        if args.format == "pdf":
            try:
                content = render_pdf(content)
            except PdfUnavailable as exc:
                print(f"healthledger: {exc}", file=sys.stderr)
                return 1
    if output is None:
        sys.stdout.write(content if isinstance(content, str) else content.decode())
        return 0
    if isinstance(content, bytes):
        output.write_bytes(content)
    else:
        output.write_text(content, encoding="utf-8")
    print(f"wrote the deletion report of {user_id} to {output}", file=sys.stderr)
    return 0


# -- verify-report ---------------------------------------------------------------------------


def _declare_verify_report(add_parser: AddParser) -> None:
    verify_report = add_parser(
        "verify-report",
        help="verify a JSON deletion report offline (its signature, its events' hash links, "
        "its signed head); exits 1 naming what failed",
    )
    verify_report.add_argument("report_file", type=Path, metavar="REPORT.json")
    verify_report.add_argument(
        "--public-key",
        type=_public_key,
        help="the service's Ed25519 public key (64 hex digits), known from elsewhere: the "
        "report must be signed by it",
    )
    verify_report.set_defaults(offline=_verify_report)


def _verify_report(args: argparse.Namespace) -> int:
    # Offline: no settings, no database; only the report (and a pinned key).
    from healthledger.adapters.compliance.report_verification import verify_report_file

    return verify_report_file(args.report_file, args.public_key, sys.stdout, sys.stderr)


# -- verify, chain sign ----------------------------------------------------------------------


def _declare_verify(add_parser: AddParser) -> None:
    verify = add_parser(
        "verify",
        help="walk the event log's hash chain and check every signed head; exits 1 naming "
        "the first record changed, removed, inserted or reordered",
    )
    verify.add_argument(
        "--since",
        type=_position,
        metavar="POSITION",
        help="start at this chain position, trusting the stored hash of the record before it",
    )
    verify.add_argument(
        "--anchors",
        type=Path,
        metavar="PATH",
        help="compare the log with every head in this head file (HEALTHLEDGER_CHAIN_ANCHOR_FILE, "
        "kept outside the database): names a log shorter than, or different from, a head it "
        "once signed",
    )
    verify.add_argument(
        "--read-models",
        action="store_true",
        help="rebuild the read models from the log into a scratch copy and name every live "
        "row that differs (instead of walking the chain)",
    )
    verify.set_defaults(with_service=_verify)


def _verify(args: argparse.Namespace, service: Service) -> int:
    from healthledger.adapters.compliance.chain_commands import verify_command

    if args.read_models:
        from healthledger.adapters.compliance.chain_commands import verify_read_models_command

        return verify_read_models_command(service, sys.stdout)
    return verify_command(service.chain, args.since, sys.stdout, anchors=args.anchors)


def _declare_chain(add_parser: AddParser) -> None:
    chain = add_parser("chain", help="the event log's hash chain")
    chain_commands = chain.add_subparsers(dest="chain_command", required=True)
    sign = chain_commands.add_parser("sign", help="sign the chain's current head now")
    sign.set_defaults(with_service=_chain_sign)


def _chain_sign(args: argparse.Namespace, service: Service) -> int:
    from healthledger.adapters.compliance.chain_commands import sign_command

    return sign_command(service.chain, sys.stdout)


# -- rebuild ---------------------------------------------------------------------------------


def _declare_rebuild(add_parser: AddParser) -> None:
    rebuild = add_parser(
        "rebuild",
        help="rebuild every read model from the event log, beside the live ones, and swap "
        "them in; resumes a rebuild that was interrupted (docs/operations.md)",
    )
    rebuild.add_argument(
        "--restart", action="store_true", help="start over instead of resuming an interrupted one"
    )
    rebuild.add_argument(
        "--batch-events",
        type=_position,
        default=None,
        metavar="N",
        help="events decoded and projected per page (default 5000)",
    )
    rebuild.add_argument(
        "--commit-events",
        type=_position,
        default=None,
        metavar="N",
        help="events per transaction, in whole pages (default 20000): what a crash makes "
        "the resumed rebuild project again",
    )
    rebuild.set_defaults(with_service=_rebuild)


def _rebuild(args: argparse.Namespace, service: Service) -> int:
    """`rebuild`: the read models projected again into tables beside the live ones, then
    swapped in; an interrupted rebuild is resumed where it stopped (ADR 0021)."""
    from healthledger.adapters.persistence.projections.rebuild import (
        BATCH_EVENTS,
        COMMIT_EVENTS,
        rebuild_read_models,
        unfinished_rebuild,
    )
    from tqdm import tqdm

    resuming = None if args.restart else unfinished_rebuild(service.db)
    total = service.recorder.count_events(after=resuming or 0)
    with tqdm(total=total, unit="event", desc="rebuilding read models", file=sys.stderr) as bar:
        rebuilt = rebuild_read_models(
            service.read_models,
            service.recorder,
            service.ledger.mapper,
            progress=bar.update,
            batch_events=args.batch_events or BATCH_EVENTS,
            commit_events=args.commit_events or COMMIT_EVENTS,
            restart=args.restart,
        )
        _finish(bar, "written while rebuilding")
    resumed = f", resumed after event {rebuilt.resumed_from}" if rebuilt.resumed_from else ""
    print(f"rebuilt the read models from {rebuilt.events} events{resumed}", file=sys.stdout)
    return 0


def _finish(bar: Any, meanwhile: str) -> None:
    """A bar whose work is done ends at 100%: its total counted at the start, events
    recorded since (a running service writes on) are said, and the bar takes them in."""
    if bar.n != bar.total:
        more = bar.n - bar.total
        bar.set_postfix_str(f"{more:+d} events {meanwhile}", refresh=False)
        bar.total = bar.n
        bar.refresh()


# -- replay --until --------------------------------------------------------------------------


def _declare_replay(add_parser: AddParser) -> None:
    replay_until = add_parser(
        "replay",
        help="build the read models as of an instant into a new SQLite file, for debugging "
        "(the source database is only read)",
    )
    replay_until.add_argument(
        "--until", type=_instant, required=True, help="ISO 8601 instant, e.g. 2026-03-01T12:00Z"
    )
    replay_until.add_argument("--into", type=Path, required=True, metavar="PATH.db")
    replay_until.add_argument("--force", action="store_true", help="replace PATH.db if it exists")
    replay_until.set_defaults(with_service=_replay)


def _replay(args: argparse.Namespace, service: Service) -> int:
    from healthledger.adapters.compliance.time_travel import ReplayRefused, replay_until
    from tqdm import tqdm

    until: datetime = args.until
    total = 2 * service.recorder.count_events(until=until)  # each copied, then projected
    try:
        with tqdm(total=total, unit="event", desc="replaying", file=sys.stderr) as bar:
            replayed = replay_until(
                service, until, args.into, force=args.force, progress=bar.update
            )
            _finish(bar, "recorded while replaying")
    except ReplayRefused as exc:
        print(f"healthledger: {exc}", file=sys.stderr)
        return 1
    print(
        f"replayed {replayed.events} events up to {until.isoformat()} into {replayed.path}",
        file=sys.stdout,
    )
    return 0


# -- keys create, keys rotate-master ---------------------------------------------------------


def _declare_keys(add_parser: AddParser) -> None:
    keys = add_parser("keys", help="team API keys and org management keys")
    key_commands = keys.add_subparsers(dest="keys_command", required=True)
    create = key_commands.add_parser(
        "create",
        help="issue a team API key (--team) or an org management key (--org), printed once",
    )
    owner = create.add_mutually_exclusive_group(required=True)
    owner.add_argument("--team", type=_uuid, help="a team API key for this team")
    owner.add_argument(
        "--org", type=_uuid, help="an org_admin management key for this organization"
    )
    create.add_argument(
        "--environment",
        choices=("sandbox", "production"),
        default="sandbox",
        help="for a team API key (--team)",
    )
    create.set_defaults(with_service=_create_key)
    rotate = key_commands.add_parser(
        "rotate-master",
        help="rewrap every data key under a new master key and destroy the old one",
    )
    rotate.add_argument(
        "--new-key-file",
        type=Path,
        help="where to write the new key when the master key comes from "
        "HEALTHLEDGER_MASTER_KEY or HEALTHLEDGER_MASTER_KEY_COMMAND (a new file, 0600): "
        "store it there, then destroy the file",
    )
    rotate.set_defaults(with_service=_rotate_master_key)


def _create_key(args: argparse.Namespace, service: Service) -> int:
    from healthledger.domain.errors import OrganizationNotFound, TeamNotFound

    out = sys.stdout
    ctx = _cli_context()
    if args.org is not None:
        try:
            issued = service.teams.issue_management_key(
                ctx, args.org, role="org_admin", team_ids=[], label="issued by the CLI"
            )
        except OrganizationNotFound:
            print(f"no organization {args.org}", file=sys.stderr)
            return 1
        print(f"org management key {issued.key_id} for {args.org} (shown once):", file=out)
        print(issued.plain, file=out)
        return 0
    try:
        team_key = service.teams.issue_team_api_key(ctx, args.team, args.environment)
    except TeamNotFound:
        print(f"no team {args.team}", file=sys.stderr)
        return 1
    print(f"team API key {team_key.key_id} for team {team_key.team_id} (shown once):", file=out)
    print(team_key.plain, file=out)
    return 0


def _rotate_master_key(args: argparse.Namespace, service: Service) -> int:
    from healthledger.adapters.persistence.keys.master_key import HandedOverKey, MasterKeyError

    new_key_file: Path | None = args.new_key_file
    source = service.key_store.source
    if isinstance(source, HandedOverKey):
        if new_key_file is None:
            print(
                f"healthledger: the master key comes from {source.name}, which the service "
                "cannot write: give --new-key-file PATH to receive the new key",
                file=sys.stderr,
            )
            return 2
        source.new_key_file = new_key_file
    elif new_key_file is not None:
        print(
            "healthledger: the master key comes from HEALTHLEDGER_MASTER_KEY_FILE, which the "
            "rotation replaces itself: --new-key-file is for a key from the environment or "
            "a command",
            file=sys.stderr,
        )
        return 2
    try:
        rotation = service.key_store.rotate_master_key()
    except MasterKeyError as exc:
        print(f"healthledger: {exc}", file=sys.stderr)
        return 1
    # Asked without `due_after`, a rotation is always made; a key store without a source
    # refused it above.
    assert rotation is not None and source is not None
    print(
        f"rotated the master key: {rotation.keys_rewrapped} data key(s) rewrapped under "
        f"master key {rotation.master_key_id} at {rotation.rotated_at.isoformat()}",
        file=sys.stdout,
    )
    print(source.after_rotation(), file=sys.stdout)
    return 0


# -- features --------------------------------------------------------------------------------


def _declare_features(add_parser: AddParser) -> None:
    features = add_parser("features", help="closed-beta switches of a team")
    features.add_argument("action", choices=("enable", "disable"))
    features.add_argument("feature", choices=("demographics", "portal_url", "aggregate_query"))
    features.add_argument("--team", type=_uuid, required=True)
    features.set_defaults(with_service=_features)


def _features(args: argparse.Namespace, service: Service) -> int:
    from healthledger.domain.errors import TeamNotFound

    try:
        service.teams.set_feature(_cli_context(), args.team, args.feature, args.action == "enable")
    except TeamNotFound:
        print(f"no team {args.team}", file=sys.stderr)
        return 1
    print(f"{args.feature} {args.action}d for team {args.team}", file=sys.stdout)
    return 0


# -- erase-due -------------------------------------------------------------------------------


def _declare_erase_due(add_parser: AddParser) -> None:
    erase_due = add_parser("erase-due", help="erase now every user whose grace period has ended")
    erase_due.set_defaults(with_service=_erase_due)


def _erase_due(args: argparse.Namespace, service: Service) -> int:
    print(f"erased {service.jobs.sweep_erasures()} user(s)", file=sys.stdout)
    return 0


# -- deprecations ----------------------------------------------------------------------------


def _declare_deprecations(add_parser: AddParser) -> None:
    deprecations = add_parser(
        "deprecations", help="the deprecation calendar: each cut-over, its date and whether applied"
    )
    deprecations.add_argument(
        "--apply", action="store_true", help="first apply every cut-over whose date has passed"
    )
    deprecations.set_defaults(with_service=_deprecations)


def _deprecations(args: argparse.Namespace, service: Service) -> int:
    out = sys.stdout
    if args.apply:
        print(f"applied {len(service.jobs.apply_cut_overs())} cut-over(s)", file=out)
    applied = service.webhook_queries.applied_cut_overs()
    for cut_over in service.deprecations.calendar:
        when = applied.get(cut_over.key)
        status = f"applied {when.isoformat()}" if when else "not applied"
        print(f"{cut_over.effective_on}  {cut_over.key:<38} {status}", file=out)
        print(f"            {cut_over.what}: {cut_over.before} -> {cut_over.after}", file=out)
    return 0


# -- webhooks replay -------------------------------------------------------------------------


def _declare_webhooks(add_parser: AddParser) -> None:
    webhooks = add_parser("webhooks", help="webhook deliveries")
    webhook_commands = webhooks.add_subparsers(dest="webhooks_command", required=True)
    replay = webhook_commands.add_parser(
        "replay",
        help="send an endpoint everything announced to it since an instant again, with the "
        "original message ids",
    )
    replay.add_argument("endpoint_id", type=_uuid)
    replay.add_argument("--since", type=_instant, required=True, help="e.g. 2026-03-01T00:00Z")
    replay.set_defaults(with_service=_replay_webhooks)


def _replay_webhooks(args: argparse.Namespace, service: Service) -> int:
    from healthledger.domain.errors import WebhookEndpointNotFound

    try:
        count = service.redeliveries.replay(_cli_context(), args.endpoint_id, args.since)
    except WebhookEndpointNotFound:
        print(f"no webhook endpoint {args.endpoint_id}", file=sys.stderr)
        return 1
    print(f"queued {count} deliver{'y' if count == 1 else 'ies'} again", file=sys.stdout)
    return 0


# -- makers' webhook subscriptions -----------------------------------------------------------


def _declare_makers(add_parser: AddParser) -> None:
    makers = add_parser("makers", help="the makers' webhook subscriptions")
    maker_commands = makers.add_subparsers(dest="makers_command", required=True)
    subscribe = maker_commands.add_parser(
        "subscribe",
        help="register (or renew) our webhook subscriptions at each maker whose client is "
        "set (Oura, Polar), pointing at {public_base_url}/makers/{provider}/webhook",
    )
    # No `choices`: Python 3.11's argparse checks an empty `nargs="*"` list against them.
    subscribe.add_argument(
        "makers",
        nargs="*",
        type=_subscribing_maker,
        help="only these: oura, polar (default: all set)",
    )
    subscribe.set_defaults(with_service=_subscribe_makers)
    unsubscribe = maker_commands.add_parser(
        "unsubscribe", help="delete our webhook at the maker (Polar) and the key kept for it"
    )
    unsubscribe.add_argument("maker", choices=("polar",))
    unsubscribe.set_defaults(with_service=_unsubscribe_maker)


# The makers whose webhooks `makers subscribe` registers.
SUBSCRIBING_MAKERS = ("oura", "polar")


def _subscribing_maker(text: str) -> str:
    if text not in SUBSCRIBING_MAKERS:
        raise argparse.ArgumentTypeError(f"not one of {', '.join(SUBSCRIBING_MAKERS)}")
    return text


def _subscribe_makers(args: argparse.Namespace, service: Service) -> int:
    from healthledger.adapters.providers.maker_subscriptions import SubscriptionFailed

    settings = service.settings
    wanted = [m for m in args.makers or SUBSCRIBING_MAKERS if m in settings.oauth_clients]
    if not wanted:
        print("no maker client is set (HEALTHLEDGER_OAUTH_CLIENTS): nothing to subscribe")
        return 0
    failed = False
    for maker in wanted:
        subscribing = _subscribe_oura if maker == "oura" else _subscribe_polar
        try:
            failed |= not subscribing(service)
        except SubscriptionFailed as exc:
            print(f"{maker}: {exc}", file=sys.stderr)
            failed = True
    return 1 if failed else 0


def _maker_callback(service: Service, maker: str) -> str:
    return f"{service.settings.public_base_url.rstrip('/')}/makers/{maker}/webhook"


def _subscribe_oura(service: Service) -> bool:
    from healthledger.adapters.providers.maker_webhooks import oura_verification_token
    from healthledger.adapters.providers.oura_subscriptions import ensure_subscriptions

    settings = service.settings
    oura = settings.oauth_clients["oura"]
    changes = ensure_subscriptions(
        service.oauth_http,
        settings.oura_api_url,
        oura.client_id,
        oura.client_secret.get_secret_value(),
        _maker_callback(service, "oura"),
        oura_verification_token(settings),
        service.clock(),
    )
    for change in changes:
        print(f"oura  {change.action:<8} {change.event_type:<7} {change.data_type}")
    return True


def _subscribe_polar(service: Service) -> bool:
    """Polar's webhook made (its key kept sealed) or kept; False when notifications could
    not be verified: a webhook made elsewhere whose key is neither kept nor set."""
    from healthledger.adapters.providers.polar_subscriptions import ensure_webhook

    settings = service.settings
    polar = settings.oauth_clients["polar"]
    client = (polar.client_id, polar.client_secret.get_secret_value())
    change = ensure_webhook(
        service.oauth_http, settings.polar_api_url, client, _maker_callback(service, "polar")
    )
    secrets = service.maker_webhook_secrets
    if change.signature_secret_key is not None:
        secrets.store("polar", change.webhook_id, change.signature_secret_key)
    print(f"polar {change.action:<8} webhook {change.webhook_id}")
    kept = secrets.stored("polar")
    if kept is not None and kept.webhook_id == change.webhook_id:
        return True
    if kept is not None:
        secrets.forget("polar")  # the key of a webhook Polar no longer has
    print(
        "polar: this webhook was not made here, so its key is not kept: notifications are "
        "checked with HEALTHLEDGER_POLAR_WEBHOOK_SIGNATURE_SECRET (or run `healthledger "
        "makers unsubscribe polar` then `subscribe` to make ours)",
        file=sys.stderr,
    )
    return settings.polar_webhook_signature_secret is not None


def _unsubscribe_maker(args: argparse.Namespace, service: Service) -> int:
    from healthledger.adapters.providers.maker_subscriptions import SubscriptionFailed
    from healthledger.adapters.providers.polar_subscriptions import remove_webhook

    settings = service.settings
    polar = settings.oauth_clients.get("polar")
    if polar is None:
        print("no polar client is set (HEALTHLEDGER_OAUTH_CLIENTS): nothing to unsubscribe")
        return 0
    client = (polar.client_id, polar.client_secret.get_secret_value())
    try:
        removed = remove_webhook(service.oauth_http, settings.polar_api_url, client)
    except SubscriptionFailed as exc:
        print(f"polar: {exc}", file=sys.stderr)
        return 1
    service.maker_webhook_secrets.forget("polar")
    print("polar no webhook" if removed is None else f"polar deleted  webhook {removed}")
    return 0


# -- import ----------------------------------------------------------------------------------


def _declare_import(add_parser: AddParser) -> None:
    imports = add_parser("import", help="import a maker's export file for a user")
    import_commands = imports.add_subparsers(dest="import_command", required=True)
    apple = import_commands.add_parser(
        "apple-health",
        help="import the Health app's export.zip for a user, in the foreground, as "
        "POST /v2/user/{user_id}/import/apple_health does in the background",
    )
    apple.add_argument("--user-id", type=_uuid, required=True, help="the user's id")
    apple.add_argument("file", type=Path, help="the export.zip")
    apple.set_defaults(with_service=_import_apple_health)


def _import_apple_health(args: argparse.Namespace, service: Service) -> int:
    from uuid import uuid4

    from healthledger.adapters.providers.apple_health import FILE_FORMAT, PROVIDER
    from healthledger.adapters.providers.apple_health_export import check_upload
    from healthledger.adapters.providers.import_files import UploadTooLarge
    from healthledger.domain.connections.imports import DataImport, ImportRefused
    from healthledger.domain.errors import LedgerError
    from healthledger.domain.users.user import User
    from tqdm import tqdm

    user = service.ledger.find(args.user_id)
    try:
        if not isinstance(user, User):
            raise LookupError
        user.require_live()
    except (LookupError, LedgerError):
        print("healthledger: no such live user", file=sys.stderr)
        return 1
    if not args.file.is_file():
        print(f"healthledger: {args.file}: no such file", file=sys.stderr)
        return 1
    files = service.import_files
    import_id = uuid4()
    try:
        size = files.keep_copy(import_id, args.file, service.settings.apple_health_max_upload_bytes)
        check_upload(files.path(import_id))
    except (ImportRefused, UploadTooLarge) as exc:
        files.discard(import_id)
        print(f"healthledger: refused: {exc}", file=sys.stderr)
        return 1
    service.imports.receive(_cli_context(), import_id, user, PROVIDER, FILE_FORMAT, size)
    with tqdm(total=100, unit="%", desc="importing", file=sys.stderr) as bar:

        def progressed(progress: float, counts: Any) -> None:
            bar.n = round(100 * progress)
            bar.set_postfix(records=counts.get("records_read", 0), refresh=False)
            bar.refresh()

        service.imports.run(import_id, on_progress=progressed)
    job = service.ledger.find(import_id)
    assert isinstance(job, DataImport)
    print(
        json.dumps(
            {
                "import_id": str(import_id),
                "status": job.status,
                "counts": job.counts,
                "failure_code": job.failure_code,
                "failure_reason": job.failure_reason,
            }
        ),
        file=sys.stdout,
    )
    return 0 if job.status == "success" else 1


if __name__ == "__main__":
    raise SystemExit(main())
