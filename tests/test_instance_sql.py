"""The SQL console on a generated instance (POST /api/scenarios/{sid}/{seed}/sql): the
upload console's tables and limits over the instance's trace, refusals as one-line 4xx."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.web.main import create_app

URL = "/api/scenarios/launch-bound/canonical/sql"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    import os

    os.environ["DATABASE_URL"] = f"sqlite:///{tmp_path_factory.mktemp('db') / 'test.db'}"
    from app.config import get_settings

    get_settings.cache_clear()
    with TestClient(create_app()) as c:
        yield c


def test_a_query_reads_the_instances_slices(client):
    r = client.post(URL, json={"query": "SELECT count(*) AS n, min(ts) AS t FROM slice WHERE category = 'kernel'"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["columns"] == ["n", "t"]
    assert body["rows"][0][0] > 0


def test_the_tables_have_the_upload_consoles_shape(client):
    r = client.post(URL, json={"query": "SELECT id, ts, dur, track_id, category, name, depth FROM slice LIMIT 1"})
    assert r.status_code == 200, r.text


def test_bad_sql_is_a_400_with_one_line(client):
    r = client.post(URL, json={"query": "SELEC nonsense FROM"})
    assert r.status_code == 400
    assert "\n" not in r.json()["error"]


def test_a_write_is_refused(client):
    r = client.post(URL, json={"query": "DELETE FROM slice"})
    assert r.status_code == 403
    r = client.post(URL, json={"query": "SELECT * FROM slice; DROP TABLE slice"})
    assert r.status_code in (400, 403)
    assert client.post(URL, json={"query": "SELECT count(*) FROM slice"}).json()["rows"][0][0] > 0


def test_rank_all_and_out_of_range_are_400(client):
    assert client.post(URL + "?rank=all", json={"query": "SELECT 1"}).status_code == 400
    assert client.post(URL + "?rank=9", json={"query": "SELECT 1"}).status_code == 400


def test_unknown_scenario_is_404(client):
    assert client.post("/api/scenarios/nope/canonical/sql", json={"query": "SELECT 1"}).status_code == 404


def test_a_practice_round_queries_its_secret_instance_without_the_key(client):
    made = client.post("/api/attempts", json={"scenario": "ddp", "seed": "0"})
    assert made.status_code == 201, made.text
    aid = made.json()["id"]
    page = client.get(f"/practice/{aid}")
    assert f'data-sql-url="/practice/{aid}/sql?rank=0"' in page.text
    r = client.post(f"/practice/{aid}/sql?rank=0", json={"query": "SELECT count(*) FROM slice"})
    assert r.status_code == 200 and r.json()["rows"][0][0] > 0
    # the database holds the trace's tables and nothing else
    r = client.post(f"/practice/{aid}/sql", json={"query": "SELECT table_name FROM information_schema.tables ORDER BY 1"})
    assert r.status_code == 200
    assert {row[0] for row in r.json()["rows"]} <= {"events", "process", "thread", "track", "slice", "counter"}
