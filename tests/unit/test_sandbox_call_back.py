"""The sandbox's fakes that call our webhooks (`serve --fake-makers`): pointed at the
service's `/makers/{slug}/webhook`, so that the fake Garmin's deliveries of the backfills
a pull asks reach the service (adapters/makers/sandbox.py)."""

from __future__ import annotations

from healthledger.adapters.makers import FAKE_MAKERS
from healthledger.adapters.makers.fake_garmin import FakeGarmin
from healthledger.adapters.makers.sandbox import running_fake_makers


def test_the_fakes_that_call_back_are_pointed_at_the_services_webhooks() -> None:
    chosen = tuple(f for f in FAKE_MAKERS if f.slug in ("garmin", "oura"))
    with running_fake_makers(registry=chosen) as fakes:
        assert fakes.call_back("http://127.0.0.1:8000/") == ["garmin"]
        garmin = fakes.fakes["garmin"]
        assert isinstance(garmin, FakeGarmin)
        assert garmin.webhook_url == "http://127.0.0.1:8000/makers/garmin/webhook"
        assert garmin.auto_deliver  # the sandbox's fake delivers what a pull asks
