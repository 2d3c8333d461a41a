"""Fakes of the makers' clouds, shipped as a sandbox: real HTTP servers on localhost that
serve the makers' documented endpoints for a few synthetic people (docs/makers/).

`FAKE_MAKERS` is their registry: what `healthledger fake-makers` and `healthledger serve
--fake-makers` start (adapters/makers/sandbox.py). A fake joins it with one line: its
maker's slug, the function that runs it, the port it takes by default, and the settings
its base URL fills besides the maker's OAuth endpoints (`oauth_maker_urls`, always)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FakeMaker:
    slug: str
    # "module:function": a context manager `function(host=..., port=...)` that serves the
    # fake in a thread and yields it, its `base` URL set, with `register(client_id, secret)`
    # (imported when started: the fakes' modules stay out of the service's imports).
    runner: str
    default_port: int
    # Settings that take the fake's base URL (the maker's data API, e.g. `oura_api_url`).
    url_settings: tuple[str, ...] = ()


FAKE_MAKERS: tuple[FakeMaker, ...] = (
    FakeMaker(
        "oura", "healthledger.adapters.makers.fake_oura:running_fake_oura", 8010, ("oura_api_url",)
    ),
    FakeMaker(
        "withings",
        "healthledger.adapters.makers.fake_withings:running_fake_withings",
        8011,
        ("withings_api_url",),
    ),
    FakeMaker(
        "fitbit",
        "healthledger.adapters.makers.fake_fitbit:running_fake_fitbit",
        8012,
        ("fitbit_api_url",),
    ),
    FakeMaker(
        "dexcom",
        "healthledger.adapters.makers.fake_dexcom:running_fake_dexcom",
        8015,
        ("dexcom_api_url",),
    ),
    FakeMaker(
        "whoop_v2",
        "healthledger.adapters.makers.fake_whoop:running_fake_whoop",
        8013,
        ("whoop_api_url",),
    ),
    FakeMaker(
        "polar",
        "healthledger.adapters.makers.fake_polar:running_fake_polar",
        8016,
        ("polar_api_url",),
    ),
    FakeMaker(
        "abbott_libreview",
        "healthledger.adapters.makers.fake_libreview:running_fake_libreview",
        8018,
        ("libreview_api_url",),
    ),
    FakeMaker(
        "garmin",
        "healthledger.adapters.makers.fake_garmin:running_fake_garmin",
        8017,
        ("garmin_api_url",),
    ),
)
