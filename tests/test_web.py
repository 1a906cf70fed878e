"""The home page, its JSON twin and the instance downloads, through a real ASGI client."""

from __future__ import annotations

import gzip
import json

import pytest
from fastapi.testclient import TestClient

import scenarios
from app.web.main import create_app


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    import os

    os.environ["DATABASE_URL"] = f"sqlite:///{tmp_path_factory.mktemp('db') / 'test.db'}"
    os.environ["TRACEDOJO_UPLOADS_DIR"] = str(tmp_path_factory.mktemp("uploads"))
    from app.config import get_settings

    get_settings.cache_clear()
    with TestClient(create_app()) as c:
        yield c


def test_home_lists_every_scenario_with_brief_and_links(client):
    page = client.get("/")
    assert page.status_code == 200
    twin = client.get("/index.json").json()
    assert [s["id"] for s in twin["scenarios"]] == list(scenarios.REGISTRY)
    for s in twin["scenarios"]:
        assert s["brief"] in page.text.replace("&#39;", "'").replace("&amp;", "&")
        assert s["trace_url"] in page.text and s["key_url"] in page.text


@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
def test_download_trace_and_key(client, sid):
    r = client.get(f"/scenarios/{sid}/3/trace.json")
    assert r.status_code == 200 and "attachment" in r.headers["content-disposition"]
    doc = json.loads(r.content)
    assert doc["traceEvents"]
    key = client.get(f"/scenarios/{sid}/3/key.json").json()
    assert key["scenario"] == sid and key["seed"] == 3
    gz = client.get(f"/scenarios/{sid}/3/trace.json.gz")
    assert gzip.decompress(gz.content) == r.content


def test_seed_form_redirects_to_the_instance(client):
    r = client.get("/scenarios/ddp/download?seed=5", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/scenarios/ddp/5/trace.json"


def test_query_string_overrides_params(client):
    key = client.get("/scenarios/ddp/1/key.json?steps=5&gpu=A100").json()
    assert key["params"]["steps"] == 5 and key["params"]["gpu"] == "A100"


@pytest.mark.parametrize("url,status,needle", [
    ("/scenarios/nope/1/key.json", 404, "valid scenarios: ddp"),
    ("/scenarios/ddp/-4/key.json", 400, "non-negative integer"),
    ("/scenarios/ddp/abc/trace.json", 400, "non-negative integer"),
    ("/scenarios/ddp/1/key.json?steps=1", 400, "steps"),
    ("/scenarios/ddp/1/key.json?warp=9", 400, "unknown param 'warp'"),
    ("/scenarios/ddp/1/trace.json?rank=9", 400, "out of range"),
])
def test_bad_requests_get_a_clear_error(client, url, status, needle):
    r = client.get(url)
    assert r.status_code == status
    assert needle in r.json()["error"]


FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "kineto"


def _upload(client, name, content):
    return client.post("/api/traces", files={"trace": (name, content, "application/octet-stream")})


@pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"shared fixtures not found at {FIXTURES}")
def test_upload_a_real_trace_and_read_it(client):
    raw = (FIXTURES / "hta_nccl_data_rank0.json.gz").read_bytes()
    r = _upload(client, "rank0.json.gz", raw)
    assert r.status_code == 200
    body = r.json()
    assert body["steps"]["count"] == 3 and body["hta"]["idle_time_pctg"] == 77.78
    page = client.get(body["url"])
    assert page.status_code == 200 and "1. Step boundary" in page.text and "77.78" in page.text
    assert client.get(body["url"] + ".json").json()["id"] == body["id"]
    q = client.post(f"/api/traces/{body['id']}/sql", json={"query": "SELECT count(*) FROM slice WHERE name LIKE 'ProfilerStep#%'"})
    assert q.json()["rows"] == [[3]]
    refused = client.post(f"/api/traces/{body['id']}/sql", json={"query": "SELECT * FROM read_csv('/etc/passwd')"})
    assert refused.status_code == 403 and "Permission" in refused.json()["error"]
    form = client.post("/upload", files={"trace": ("rank0.json.gz", raw, "application/gzip")}, follow_redirects=False)
    assert form.status_code == 303 and form.headers["location"] == body["url"]
    with_query = client.get(body["url"], params={"q": "COPY slice TO '/tmp/x.csv'"})
    assert "not COPY" in with_query.text


def test_upload_page_has_a_file_input(client):
    page = client.get("/upload")
    assert page.status_code == 200 and 'type="file"' in page.text


@pytest.mark.parametrize("content,status,needle", [
    (b"", 400, "empty"),
    (b"definitely not json", 400, "is not JSON"),
    (b'{"traceEvents": [{"ph": "X", "name": "k", "cat": "kernel", "pid": 0, "tid": 7, "dur": 1}]}', 400, "no ts"),
    (__import__("gzip").compress(b"{" + b" " * 3_000_000 + b"}"), 413, "limit"),
])
def test_bad_uploads_get_a_clear_error(client, content, status, needle):
    from app.config import get_settings

    settings = get_settings()
    old = settings.max_trace_bytes
    settings.max_trace_bytes = 2_000_000
    try:
        r = _upload(client, "t.json", content)
    finally:
        settings.max_trace_bytes = old
    assert r.status_code == status and needle in r.json()["error"]


def test_oversize_upload_is_413(client):
    from app.config import get_settings

    settings = get_settings()
    old = settings.max_upload_bytes
    settings.max_upload_bytes = 1000
    try:
        r = _upload(client, "big.json", b"{" + b" " * 5000 + b"}")
    finally:
        settings.max_upload_bytes = old
    assert r.status_code == 413 and "upload limit" in r.json()["error"]


def test_unknown_trace_is_404(client):
    assert client.get("/traces/0123456789abcdef.json").status_code == 404  # not an id's form
    assert client.get(f"/traces/{'ab' * 32}.json").status_code == 404  # an id's form, not uploaded


def test_run_a_tool_over_http(client):
    r = client.get("/api/scenarios/straggler/canonical/tools/dcgm").json()
    assert r["applicable"] and "SMCLK" in r["output"] and r["command"].startswith("dcgmi")
    assert client.get("/api/scenarios/ddp/1/tools/nsys-kern-sum?steps=5").json()["output"].count("ncclDevKernel_AllReduce") == 1
    missing = client.get("/api/scenarios/ddp/1/tools/perf-magic")
    assert missing.status_code == 404 and "valid tools" in missing.json()["error"]
    assert client.get("/api/scenarios/nope/1/tools/dcgm").status_code == 404


def test_tool_charts_and_options_over_http(client):
    scatter = client.get("/api/scenarios/prefill/canonical/tools/itl-scatter").json()
    assert scatter["chart"]["kind"] == "scatter" and len(scatter["chart"]["x"]) == len(scatter["chart"]["y"]) > 100
    assert client.get("/api/scenarios/ddp/2/tools/dcgm").json()["chart"] is None
    # skinny-gemm version 2 names its GEMMs as cuBLAS does on Hopper: the layout sits mid-name
    ncu = client.get("/api/scenarios/skinny-gemm/canonical/tools/ncu?kernel=_nt_n_tilesize128x256").json()
    assert "_nt_n_tilesize128x256x64" in ncu["chart"]["kernel"]
    bad = client.get("/api/scenarios/skinny-gemm/canonical/tools/ncu?kernel=[")
    assert bad.status_code == 400 and "bad kernel regex" in bad.json()["error"]
    na = client.get("/api/scenarios/launch-bound/1/tools/request-log").json()
    assert na["applicable"] is False and "no serving requests" in na["reason"]


@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
def test_timeline_columns_hold_every_slice(client, sid):
    """The viewer's binary: every slice once, sorted by track then start, GPU streams named
    by role with the compute stream first, and the key's steps as bands."""
    import json as _json

    import numpy as np

    body = client.get(f"/api/scenarios/{sid}/canonical/timeline.bin").content
    n = int.from_bytes(body[:4], "little")
    head = _json.loads(body[4:4 + n])
    base = 4 + n + (-(4 + n)) % 8
    cols = {c["name"]: np.frombuffer(body, c["dtype"], c["length"], base + c["offset"]) for c in head["columns"]}
    inst = scenarios.get(sid).instance("canonical")
    assert head["count"] == len(inst.trace(0)) == len(cols["ts"])
    order = np.lexsort((cols["ts"], cols["track"]))
    assert (order == np.arange(len(order))).all()
    gpu = [t["label"] for t in head["tracks"] if t["gpu"]]
    assert gpu[0].endswith("· compute")
    assert [t["label"] for t in head["tracks"]][0].startswith("main thread")
    assert len(head["steps"]) == len(inst.artifacts["steps"])
    assert client.get(f"/api/scenarios/{sid}/canonical/timeline.bin?rank=99").status_code == 400


def test_scenario_page_and_twin_never_carry_the_key(client):
    page = client.get("/scenarios/ddp/3")
    twin = client.get("/scenarios/ddp/3.json").json()
    key = scenarios.get("ddp").instance(3).key
    assert page.status_code == 200 and twin["brief"] == key["brief"]
    for secret in (key["model_answer"], key["root_cause"]):
        assert secret not in page.text and secret not in str(twin)
    assert client.get("/scenarios/nope/3").status_code == 404
    assert client.get("/scenarios/ddp/x.json").status_code == 400


def test_surprise_me_is_a_practice_round_now(client):
    """The old /surprise opened a public seed in the explorer, which named the scenario and
    its key.json; a surprise is a practice round (tests/test_secrecy.py)."""
    r = client.get("/surprise", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/practice"
    assert 'name="scenario" value="surprise"' in client.get("/").text
    assert client.get("/scenarios/ddp/download?seed=5&view=1", follow_redirects=False).headers["location"] == "/scenarios/ddp/5"


def test_stacked_ranks(client):
    page = client.get("/scenarios/straggler/canonical.json").json()
    assert page["rank"] == 0, "a multi-rank case opens on the brief's rank, not every rank stacked"
    page = client.get("/scenarios/straggler/canonical.json?rank=all").json()
    assert page["rank"] == "all" and page["timeline_url"].endswith("rank=all")
    assert client.get("/scenarios/straggler/canonical.json?rank=3").json()["rank"] == 3
    assert client.get("/scenarios/ddp/canonical.json?rank=all").status_code == 400  # one rank only
    body = client.get("/api/scenarios/straggler/canonical/timeline.bin?rank=all").content
    n = int.from_bytes(body[:4], "little")
    head = json.loads(body[4:4 + n])
    inst = scenarios.get("straggler").instance("canonical")
    assert head["count"] == sum(len(inst.trace(r)) for r in range(inst.ranks))
    groups = list(dict.fromkeys(t["group"] for t in head["tracks"]))
    assert groups[:2] == ["rank 0 · host", "rank 0 · GPU 0"] and groups[-1] == f"rank {inst.ranks - 1} · GPU {inst.ranks - 1}"
    # every rank's counter tracks start folded too (tests/test_counters.py)
    assert head["collapsed"] == ["Counters"] + [f"rank {r} · host" for r in range(inst.ranks)]


@pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"shared fixtures not found at {FIXTURES}")
def test_an_uploads_timeline_and_sql_at_once(client):
    """Requests on one upload at once all succeed (a page reload while the first timeline
    was still being built failed, once): the timeline is a file, and each query opens its
    own read-only connection (two at once: the default SQL concurrency limit)."""
    from concurrent.futures import ThreadPoolExecutor

    raw = (FIXTURES / "sampled_rank-1.json.gz").read_bytes()
    tid = client.post("/api/traces", files={"trace": ("sampled_rank-1.json.gz", raw)}).json()["id"]
    q = {"query": "SELECT count(*) AS n FROM slice"}
    with ThreadPoolExecutor(5) as pool:
        jobs = [pool.submit(client.get, f"/api/traces/{tid}/timeline.bin") for _ in range(3)]
        jobs += [pool.submit(client.post, f"/api/traces/{tid}/sql", json=q) for _ in range(2)]
        codes = [j.result().status_code for j in jobs]
    assert codes == [200] * 5


def test_a_slices_args_come_from_its_source(client):
    import numpy as np

    inst = scenarios.get("straggler").instance("canonical")
    t = inst.trace(3)
    row = int(np.flatnonzero(t.kind == 2)[5])  # a kernel on rank 3
    direct = client.get(f"/api/scenarios/straggler/canonical/slices/{row}?rank=3").json()
    stacked = client.get(f"/api/scenarios/straggler/canonical/slices/{3 * 10**9 + row}?rank=all").json()
    assert direct == stacked and direct["args"]["stream"] == int(t.tid[row]) and "grid" in direct["args"]
    assert direct["name"] == t.names[t.name[row]]
    assert client.get(f"/api/scenarios/straggler/canonical/slices/{len(t)}?rank=3").status_code == 404
    assert client.get("/api/scenarios/straggler/canonical/slices/-1?rank=3").status_code == 400


def test_timeline_is_sent_gzipped_to_those_who_accept_it(client):
    url = "/api/scenarios/ddp/canonical/timeline.bin"
    gz = client.get(url, headers={"Accept-Encoding": "gzip"})
    plain = client.get(url, headers={"Accept-Encoding": "identity"})
    assert gz.headers["content-encoding"] == "gzip" and "content-encoding" not in plain.headers
    assert gz.content == plain.content  # httpx inflates the first
    assert int(gz.headers["content-length"]) < len(plain.content) / 2


def test_score_a_read_over_http(client):
    from tests.calibration import READS

    r = client.post("/api/scenarios/prefill/canonical/score", json={"narration": READS["prefill"]["strong"][0],
                                                                    "runs": [{"tool": "itl-scatter", "since_open_s": 30}]})
    assert r.status_code == 200 and r.json()["total"] >= 80
    assert [c["id"] for c in r.json()["criteria"]][0] == "discipline_order"
    long = client.post("/api/scenarios/prefill/canonical/score", json={"narration": "word " * 40_000})
    assert long.status_code == 413 and "limit" in long.json()["error"]
    empty = client.post("/api/scenarios/prefill/canonical/score", json={"narration": " "})
    assert empty.status_code == 400 and "empty" in empty.json()["error"]
    missing = client.post("/api/scenarios/prefill/canonical/score", json={})
    assert missing.status_code == 422 and missing.json()["error"] == "narration: Field required"
    assert client.post("/api/scenarios/nope/1/score", json={"narration": "x"}).status_code == 404


def test_the_fidelity_page_and_its_json_twin(client):
    """Issue 13 item 6: an instance's timing distributions beside the real traces', marked
    where a figure lies outside the stated bounds; one rank at a time."""
    page = client.get("/scenarios/ddp/canonical/fidelity")
    assert page.status_code == 200
    assert "How real is this trace?" in page.text and "<svg" in page.text and "hta_nccl_data_rank0" in page.text
    twin = client.get("/scenarios/ddp/canonical/fidelity.json").json()
    assert twin["scenario"] == "ddp" and twin["version"] == scenarios.get("ddp").version
    assert set(twin["quantities"]) >= {"kernel_gap_us", "launch_delay_us", "launch_call_us", "between_ops_us",
                                       "ops_per_launch", "input_dims_share"}
    old = client.get("/scenarios/ddp/canonical/fidelity.json?version=1").json()
    assert old["version"] == 1 and "one value holds" in " ".join(old["tells"]["kernel_gap_us"])
    assert "marked" in client.get("/scenarios/ddp/canonical/fidelity?version=1").text
    bad = client.get("/scenarios/straggler/canonical/fidelity.json?rank=all")
    assert bad.status_code == 400 and "one rank" in bad.json()["error"]
    assert 'fidelity beside real traces' in client.get("/scenarios/ddp/canonical").text


@pytest.mark.parametrize("path", ["/scenarios/ddp/canonical/key.json", "/scenarios/ddp/canonical"])
def test_a_param_override_past_memory_is_a_400_with_the_figure(client, path):
    r = client.get(path + "?model_params_b=70")
    assert r.status_code == 400
    err = r.json()["error"] if r.headers["content-type"].startswith("application/json") else r.text
    assert "needs" in err and "GB of the H100's" in err and "bf16 params" in err and "\n" not in err
    ok = client.get("/scenarios/ddp/canonical/key.json?model_params_b=4")
    assert ok.status_code == 200 and ok.json()["params"]["model_params_b"] == 4
