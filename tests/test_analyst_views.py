"""What an analyst's token sees of a table names nothing of its source: no file digest (a membership
test for anyone holding the file), no server path. The admin's views keep the real names and map
the analysts' id to them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.http.app import create_app
from tests.conftest import ADMIN_TOKEN

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path / "data", admin_token=ADMIN_TOKEN, demo=False, import_dir=tmp_path)
    with TestClient(create_app(settings)) as c:
        yield c


def _spec(name: str, source: dict[str, str], **extra: object) -> dict[str, object]:
    return {
        "name": name,
        "source": source,
        "epsilon": 1.0,
        "dimensions": [
            {"name": "day", "type": "date", "lo": "2025-01-01", "hi": "2025-01-31", "outside": "exclude"},
            {"name": "kind", "type": "category", "values": ["a", "b"]},
        ],
        "measures": [{"name": "amount", "lo": 0, "hi": 10}],
        **extra,
    }


def test_analysts_see_a_random_space_id_not_the_files_digest_or_path(client: TestClient, tmp_path: Path) -> None:
    flat = tmp_path / "flat.csv"
    flat.write_text("day,kind,amount\n2025-01-01,a,3\n2025-01-02,b,4\n")
    folder = tmp_path / "incoming" / "day=2025-01-01"
    folder.mkdir(parents=True)
    (folder / "part.csv").write_text("kind,amount\na,1\n")
    assert client.post("/v1/admin/tables", headers=ADMIN, json=_spec("flat", {"csv": str(flat)})).status_code == 201
    r = client.post(
        "/v1/admin/tables",
        headers=ADMIN,
        json=_spec("grow", {"csv": str(tmp_path / "incoming")}, growth={"period": "day"}),
    )
    assert r.status_code == 201, r.text
    digest = hashlib.sha256(flat.read_bytes()).hexdigest()[:32]
    shown = {}
    for name in ("flat", "grow"):
        for path in (f"/v1/tables/{name}", f"/v1/tables/{name}/budget", "/v1/tables"):
            text = client.get(path).text
            assert digest not in text and str(tmp_path) not in text and "source:" not in text, (path, text[:300])
        shown[name] = client.get(f"/v1/tables/{name}/budget").json()["id_space"]
        assert shown[name].startswith("source-") and len(shown[name]) > len("source-") + 8
    assert shown["flat"] != shown["grow"]
    spaces = client.get("/v1/admin/spaces", headers=ADMIN).json()["spaces"]
    real = {s["shown_as"]: s["id_space"] for s in spaces}
    assert real[shown["flat"]] == f"source:file:{digest}" and real[shown["grow"]].endswith("incoming")
    for name in ("flat", "grow"):  # the admin reads a space's ledger by either name
        by_shown = client.get(f"/v1/admin/spaces/{shown[name]}/ledger", headers=ADMIN)
        by_real = client.get(f"/v1/admin/spaces/{real[shown[name]]}/ledger", headers=ADMIN)
        assert by_shown.status_code == by_real.status_code == 200 and by_shown.json() == by_real.json()
    assert json.dumps(client.get("/v1/tables/flat/budget").json()).count("source-") == 1
