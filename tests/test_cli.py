"""The `tracedojo` command as a user runs it: real subprocesses, exit codes, one-line errors."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

import scenarios


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=120)


def test_scenarios_lists_every_registered_one():
    out = run("scenarios", "--json")
    assert out.returncode == 0
    rows = json.loads(out.stdout)
    assert [r["id"] for r in rows] == list(scenarios.REGISTRY)
    for r in rows:
        assert all(p["unit"] for p in r["params"]), f"{r['id']} has a param without a unit"


@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
def test_generate_to_gzip_file_is_reproducible(tmp_path, sid):
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    for path in (a, b):
        out = run("generate", sid, "--seed", "11", "-o", str(path))
        assert out.returncode == 0, out.stderr
    assert a.read_bytes() == b.read_bytes()
    doc = json.loads(gzip.decompress(a.read_bytes()))
    # named as torch.profiler's trace handler names files: nothing says the scenario or seed
    assert doc["traceEvents"] and doc["traceName"].endswith(".pt.trace.json")
    assert sid not in doc["traceName"] and "seed" not in doc["traceName"]


def test_key_is_json_with_overrides():
    out = run("key", "ddp", "--seed", "2", "--param", "steps=6", "--param", "gpu=H200")
    assert out.returncode == 0
    key = json.loads(out.stdout)
    assert key["params"]["steps"] == 6 and key["params"]["gpu"] == "H200" and key["seed"] == 2


def test_canonical_and_seed_are_exclusive_but_each_works():
    assert run("key", "ddp", "--canonical").returncode == 0
    out = run("key", "ddp", "--canonical", "--seed", "3")
    assert out.returncode == 2 and "not both" in out.stderr


@pytest.mark.parametrize("args,needle", [
    (("generate", "nope"), "valid scenarios: ddp"),
    (("key", "ddp", "--seed", "-1"), "non-negative integer"),
    (("key", "ddp", "--seed", "1.5"), "non-negative integer"),
    (("key", "ddp", "--seed", str(2**53)), "non-negative integer"),
    (("key", "ddp", "--seed", "+7"), "non-negative integer"),
    (("key", "ddp", "--seed", "5_000"), "non-negative integer"),
    (("key", "ddp", "--param", "bogus=1"), "valid params: gpu"),
    (("key", "ddp", "--param", "steps=0"), "steps"),
    (("key", "ddp", "--param", "steps=many"), "not a valid int"),
    (("key", "ddp", "--param", "gpu=TPU"), "not one of H100"),
    (("key", "ddp", "--param", "steps"), "KEY=VALUE"),
    (("generate", "ddp", "--rank", "5"), "valid ranks 0 to 0"),
    (("key", "ddp", "--version", "9"), "ddp version 9 is not built here"),
    (("frobnicate",), "invalid choice"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle):
    out = run(*args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], out.stderr
    assert out.stdout == ""


@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
def test_rank_outside_the_world_is_refused(sid):
    ranks = scenarios.get(sid).instance("canonical").ranks
    out = run("generate", sid, "--canonical", "--rank", str(ranks), "-o", "/dev/null")
    assert out.returncode == 2 and f"valid ranks 0 to {ranks - 1}" in out.stderr
    assert run("generate", sid, "--canonical", "--rank", str(ranks - 1), "-o", "/dev/null").returncode == 0


FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "kineto"


@pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"shared fixtures not found at {FIXTURES}")
def test_analyze_json_with_hta_figures():
    out = run("analyze", str(FIXTURES / "hta_nccl_data_rank0.json.gz"), "--json", "--hta")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["steps"]["count"] == 3 and r["steps"]["period_ms"] > 0
    h = r["hta"]
    assert (h["idle_time_pctg"], h["compute_time_pctg"], h["non_compute_time_pctg"]) == (77.78, 17.26, 4.97)
    assert h["kernel_time_us"] == 435586 and h["comp_comm_overlap_pctg"] == 14.31
    assert h["idle_breakdown"]["7"]["host_wait"] == 357247 and h["idle_breakdown"]["40"]["host_wait"] == 381499


def test_analyze_several_ranks_names_the_straggler(tmp_path):
    from app.trace import kineto

    # the eight files `generate --rank N` writes (test_generate_* covers that command), built
    # here from one instance rather than eight processes each building all eight ranks
    assert run("generate", "straggler", "--canonical", "--rank", "3", "-o", str(tmp_path / "r3.json")).returncode == 0
    inst = scenarios.get("straggler").instance("canonical")
    assert (tmp_path / "r3.json").read_text() == kineto.dumps(inst.trace(3), inst.trace_name(3))
    paths = []
    for rank in range(8):
        path = tmp_path / f"r{rank}.json.gz"
        path.write_bytes(gzip.compress(kineto.dumps(inst.trace(rank), inst.trace_name(rank)).encode(), 1))
        paths.append(str(path))
    out = run("analyze", *paths, "--json")
    r = json.loads(out.stdout)
    assert r["straggler_rank"] == 3 and len(r["ranks"]) == 8
    text = run("analyze", *paths)
    assert text.returncode == 0 and "rank 3" in text.stdout and text.stdout.index("1. Step") < text.stdout.index("2. Gaps")


@pytest.mark.parametrize("content,needle", [(b"not json at all", "is not JSON"), (b'{"a": 1}', "no traceEvents")])
def test_analyze_bad_file_is_one_line(tmp_path, content, needle):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    out = run("analyze", str(path))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and needle in out.stderr


def test_sql_prints_rows_and_refuses_file_access(tmp_path):
    path = tmp_path / "t.json.gz"
    assert run("generate", "ddp", "--seed", "1", "-o", str(path)).returncode == 0
    out = run("sql", str(path), "SELECT count(*) AS n FROM slice WHERE name LIKE 'ProfilerStep#%'")
    assert out.returncode == 0 and json.loads(out.stdout)["rows"] == [[4]]
    for query in ("SELECT * FROM read_csv('/etc/passwd')", "COPY slice TO '/tmp/x.csv'", "ATTACH 'x.db'"):
        bad = run("sql", str(path), query)
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and bad.stdout == ""


def test_fidelity_prints_the_distributions_beside_the_real_traces():
    r = run("fidelity", "ddp", "--canonical", "--version", "1")
    assert r.returncode == 0, r.stderr
    assert "kernel_gap_us" in r.stdout and "OUT: one value holds" in r.stdout and "hta_nccl_data_rank0" in r.stdout
    j = run("fidelity", "launch-bound", "--seed", "2", "--json")
    assert json.loads(j.stdout)["quantities"]["kernel_gap_us"]["pathology"]


def test_generate_fixed_writes_the_trace_after_the_fix(tmp_path):
    out = tmp_path / "after.json"
    r = run("generate", "launch-bound", "--canonical", "--fixed", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert '"cudaGraphLaunch"' in out.read_text()
    bad = run("generate", "ddp", "--canonical", "--version", "1", "--fixed")
    assert bad.returncode == 2 and "no build with its fix applied" in bad.stderr


def test_a_param_past_memory_is_a_one_line_error():
    out = run("generate", "ddp", "--canonical", "--param", "model_params_b=70", "-o", "/dev/null")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "needs" in out.stderr and "GB of the H100's" in out.stderr and "bf16 params" in out.stderr
