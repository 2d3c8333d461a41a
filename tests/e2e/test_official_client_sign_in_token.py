"""The mobile SDKs' sign-in token (issue 34; `user.get_user_sign_in_token`): asked for
through `vital.Vital` with only its base_url changed, then used as a phone would, with no
team key, to upload the person's Apple Health export and read its status; refused for
another user, for anything else of the team API, and once forged. On both databases."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import httpx
import vital
from healthledger.adapters.composition import Service
from healthledger.adapters.makers.fake_apple_health import ExportShape, write_export

from tests.conftest import CLIENTS_PARSE_ANSWERS, Team

pytestmark = CLIENTS_PARSE_ANSWERS

SHAPE = ExportShape(first_day=date(2024, 10, 24), days=2, heart_every=5)


def test_a_sign_in_token_uploads_its_users_data_and_nothing_else(
    api: vital.Vital, base_url: str, service: Service, team: Team, tmp_path: Path
) -> None:
    user = api.user.create(client_user_id="phone-1")
    other = api.user.create(client_user_id="phone-2")
    signed = api.user.get_user_sign_in_token(user.user_id)
    assert signed.user_id == user.user_id and signed.sign_in_token
    phone = {"authorization": f"Bearer {signed.sign_in_token}"}
    export = tmp_path / "export.zip"
    write_export(export, SHAPE)
    zipped = {**phone, "content-type": "application/zip"}
    with httpx.Client(base_url=base_url, timeout=60) as http:
        uploaded = http.post(
            f"/v2/user/{user.user_id}/import/apple_health",
            content=export.read_bytes(),
            headers=zipped,
        )
        assert uploaded.status_code == 202, uploaded.text
        import_id = uploaded.json()["import_id"]
        service.jobs.run_due_imports()
        status = http.get(f"/v2/user/{user.user_id}/import/apple_health/{import_id}", headers=phone)
        assert status.status_code == 200 and status.json()["status"] == "success", status.text
        # The audit says who uploaded: the user's sign-in token, not a team key.
        audit = http.get(f"/v2/audit/user/{user.user_id}", headers=team.headers)
        actors = {entry["actor"] for entry in audit.json()["data"]}
        assert f"sign_in_token:{user.user_id}" in actors

        # Another user's uploads: as unknown as a missing user.
        theirs = http.post(
            f"/v2/user/{other.user_id}/import/apple_health", content=b"PK", headers=zipped
        )
        assert theirs.status_code == 404, theirs.text
        # Nothing else of the team API opens with it.
        for path in (f"/v2/user/{user.user_id}", "/v2/user", f"/v2/user/providers/{user.user_id}"):
            assert http.get(path, headers=phone).status_code == 401, path
        forged = {"authorization": f"Bearer {signed.sign_in_token[:-3]}abc"}
        refused = http.get(
            f"/v2/user/{user.user_id}/import/apple_health/{import_id}", headers=forged
        )
        assert refused.status_code == 401 and signed.sign_in_token not in refused.text
        # After the user's deletion the token opens nothing.
        api.user.delete(user.user_id)
        gone = http.get(f"/v2/user/{user.user_id}/import/apple_health/{import_id}", headers=phone)
        assert gone.status_code == 404
