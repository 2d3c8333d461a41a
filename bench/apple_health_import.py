"""Apple Health import benchmark (issue 28): a large export imported by the service.

An export of `--megabytes` of export.xml (the document the import reads; zipped, as the
Health app sends it) is written on the fly into a temporary folder by the sandbox's
builder (adapters/makers/fake_apple_health.py: heart rate every minute, amounts every 15
minutes, vitals every half hour, sleep, workouts, activity summaries), taken in the
command line's way (copied into the import folder and recorded) for a new user of a fresh
service on a SQLite file (or `--database-url`), and imported to its end. A week's export
is uploaded through the team API (in process) and imported first: the route and the
import warmed, and the resident memory noted from there (the test client reads a request
body whole, where a server streams it to disk). Targets: under 3 minutes, resident memory
under 400 MB.

The baseline, run in the same process just before: the same export.xml streamed through
expat with handlers that do nothing (unzip and parse, the floor of any import of the
file); the import's time is printed as a ratio of it.

    .venv/bin/python bench/apple_health_import.py [--megabytes 500] [--database-url URL] [--check]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

from fastapi.testclient import TestClient
from healthledger.adapters.composition import build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.makers.fake_apple_health import MEMBER, ExportShape, write_export
from healthledger.adapters.providers.apple_health import FILE_FORMAT, PROVIDER
from healthledger.adapters.providers.apple_health_export import stream_export
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.imports import DataImport
from healthledger.domain.context import CommandContext
from healthledger.domain.users.user import User

TARGET_S = 180.0
TARGET_RSS_MB = 400.0
# export.xml per day of the shape below (measured: 0.87 MB).
MB_PER_DAY = 0.87


def shape(days: int) -> ExportShape:
    """The benchmark's export: heart rate every minute, amounts every 15 minutes."""
    return ExportShape(days=days, heart_every=1, amounts_every=15, vitals_every=30)


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as body:
        while chunk := body.read(1 << 20):
            yield chunk


def parse_floor(path: Path) -> float:
    """Seconds to unzip and parse the export with handlers that do nothing."""

    def nothing(*_args: Any) -> None:
        return None

    began = time.perf_counter()
    stream_export(path, nothing, nothing, max_xml_bytes=1 << 40)
    return time.perf_counter() - began


def run(megabytes: int, database_url: str | None, workdir: Path) -> dict[str, Any]:
    export = workdir / "export.zip"
    days = max(1, round(megabytes / MB_PER_DAY))
    began = time.perf_counter()
    write_export(export, shape(days))
    written = time.perf_counter() - began
    xml_mb = zipfile.ZipFile(export).getinfo(MEMBER).file_size / 1e6
    floor = parse_floor(export)
    (workdir / "db").mkdir()
    settings = Settings(
        database_url=database_url or f"sqlite:///{workdir / 'db' / 'apple.db'}",
        master_key_file=workdir / "keys" / "master.key",
        import_dir=workdir / "imports",
    )
    service = build_service(settings)
    try:
        team = service.bootstrap()
        assert team is not None
        headers = {"x-service-api-key": team.team_api_key.plain}
        with TestClient(create_team_api(service)) as api:
            user_id = api.post(
                "/v2/user", json={"client_user_id": "bench-apple"}, headers=headers
            ).json()["user_id"]
            # The upload through the API, of a small export (the test client reads a body
            # whole, where a server streams it: a large one would weigh on the figure).
            small = workdir / "small.zip"
            write_export(small, shape(7))
            began = time.perf_counter()
            accepted = api.post(
                f"/v2/user/{user_id}/import/apple_health",
                content=_chunks(small),
                headers={**headers, "content-type": "application/zip"},
            )
            assert accepted.status_code == 202, accepted.text
            small_id = UUID(accepted.json()["import_id"])
            assert service.imports.run(small_id, on_progress=None) == "success"
            rss_before = rss_mb()
            # The large one as the command line takes it: copied in, recorded, run.
            began = time.perf_counter()
            import_id = uuid4()
            size = service.import_files.keep_copy(import_id, export, 1 << 40)
            user = service.ledger.find(UUID(user_id))
            assert isinstance(user, User)
            service.imports.receive(
                CommandContext.system("bench"), import_id, user, PROVIDER, FILE_FORMAT, size
            )
            uploaded = time.perf_counter() - began
            began = time.perf_counter()
            status = service.imports.run(import_id, on_progress=None)
            elapsed = time.perf_counter() - began
        job = service.ledger.find(import_id)
        assert isinstance(job, DataImport)
        stored = service.health_data.count(UUID(user_id))
    finally:
        service.close()
    return {
        "days": days,
        "xml_mb": xml_mb,
        "zip_mb": export.stat().st_size / 1e6,
        "written_s": written,
        "floor_s": floor,
        "upload_s": uploaded,
        "seconds": elapsed,
        "records": job.counts.get("records_read", 0),
        "stored_days": stored,
        "max_rss_mb": rss_mb(),
        "rss_before_mb": rss_before,
        "ok": status == "success",
        "failure": job.failure_code,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megabytes", type=int, default=500)
    parser.add_argument("--database-url")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    with tempfile.TemporaryDirectory() as tmp:
        report = run(args.megabytes, args.database_url, Path(tmp))
    print(
        f"Apple Health export of {report['days']} days: export.xml {report['xml_mb']:.0f} MB "
        f"(zip {report['zip_mb']:.0f} MB, written in {report['written_s']:.0f} s), "
        f"{report['records']} records, {report['stored_days']} stored days"
    )
    print(
        f"baseline (unzip and parse, handlers doing nothing): {report['floor_s']:.1f} s; "
        f"copied in {report['upload_s']:.1f} s; import {report['seconds']:.1f} s "
        f"(target {TARGET_S:.0f} s) = {report['seconds'] / report['floor_s']:.1f}x the baseline"
    )
    print(
        f"max RSS {report['max_rss_mb']:.0f} MB (target {TARGET_RSS_MB:.0f} MB; "
        f"{report['rss_before_mb']:.0f} MB before it, after a week's export uploaded "
        "through the API and imported), import "
        f"{'succeeded' if report['ok'] else 'FAILED: ' + str(report['failure'])}"
    )
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    missed = (
        report["seconds"] > TARGET_S or report["max_rss_mb"] > TARGET_RSS_MB or not report["ok"]
    )
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
